"""Host seconds of hf.pmg's set-up by piece (cProfile), on the BP3 box of pmg_measure.py.

Usage::

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH=$PWD python bakeoff/pmg_setup_host.py \
        --ceed /cpu/self/ref --order 6 --dofs 1e5 --repeat 5 --out /tmp/host.jsonl

After one warm-up ``hf.pmg(A)`` (the kernels compiled), ``repeat`` set-ups each under
cProfile: per run, the wall seconds of the whole ``hf.pmg`` and the cumulative seconds and
calls of the watched pieces (the hierarchy, the basis construction, the reference 1D data,
the coarse free DOFs, the coarse solver); the record keeps every run and the medians.
Run it on two trees alternately (``PYTHONPATH``) to compare them on a shared machine.
``--print N`` prints the ``N`` costliest calls of the last run.  One JSON line appended to
``--out``.
"""

import argparse
import cProfile
import pstats
import time

import numpy as np
from pmg_measure import case_arguments, problem

import hofem as hf
from hofem.bakeoff.common import emit_line

# (file name end, function) pairs whose calls and cumulative seconds are reported
_WATCHED = (
    ("multigrid.py", "pmg"),
    ("forms.py", "multigrid_hierarchy"),
    ("basis.py", "tensor_h1_lagrange"),
    ("basis.py", "__init__"),
    ("basis.py", "collocated_grad"),
    ("quadrature.py", "lobatto_quadrature"),
    ("quadrature.py", "gauss_quadrature"),
    ("polynomials.py", "lagrange_interp_matrix"),
    ("polynomials.py", "lagrange_deriv_matrix"),
    ("transfer.py", "interpolation_basis"),
    ("transfer.py", "lagrange_order"),
    ("space.py", "with_order"),
    ("operator.py", "multigrid_level"),
    ("forms.py", "_form"),
    ("forms.py", "_coarse_free"),
    ("multigrid.py", "amg_solver"),
    ("qfunction_trace.py", "trace_body"),
    ("backends/numba/backend.py", "_plan"),
)


def watched(stats):
    """``{"file:function": (calls, cumulative seconds)}`` of the watched pieces."""
    found = {}
    for (path, _, name), (_, calls, _, cumulative, _) in stats.stats.items():
        for ending, function in _WATCHED:
            if name == function and path.endswith(ending):
                key = f"{ending}:{name}"
                old = found.get(key, (0, 0.0))
                found[key] = (old[0] + calls, old[1] + cumulative)
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    case_arguments(parser, "/cpu/self/ref", 1e5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--print", type=int, default=0, help="costliest calls of the last run")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ceed = hf.Ceed(args.ceed)
    n, prob = problem(ceed, "hex", args.order, args.dofs)
    A = prob.operator
    hf.pmg(A)  # compile the coarse levels, the transfers, the set-up operators
    runs, wall = [], []
    for _ in range(args.repeat):
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(hf.pmg, A)
        wall.append(time.perf_counter() - start)
        stats = pstats.Stats(profiler)
        runs.append(watched(stats))
    keys = sorted({key for run in runs for key in run})
    median = {k: round(float(np.median([r.get(k, (0, 0.0))[1] for r in runs])), 5) for k in keys}
    calls = {k: runs[-1].get(k, (0, 0.0))[0] for k in keys}
    record = dict(
        ceed=ceed.resource, order=args.order, n=n, dofs=A.shape[0], repeat=args.repeat,
        wall_s=[round(s, 4) for s in wall], median_wall_s=round(float(np.median(wall)), 4),
        median_cumulative_s=median, calls=calls,
    )  # fmt: skip
    emit_line(args.out, record)
    if args.print:
        stats.sort_stats("cumulative").print_stats(args.print)
        stats.sort_stats("tottime").print_stats(args.print)


if __name__ == "__main__":
    main()
