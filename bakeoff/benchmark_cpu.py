"""CPU bake-off benchmark: BP1 (mass) and BP3 (Poisson) operator apply and CG throughput.

Usage::

    python -m hofem.bakeoff.benchmark_cpu [--bp 1 3] [--order 1 2 ... 8] [--dofs 3e5 2e6]
                                          [--ceed /cpu/self/numba] [--repeat N]

Prints one JSON line per case with the apply DOFs/s (median of ``--repeat``
timed applies after a warm-up) and CG DOFs x iterations/s (20 iterations,
``rtol=0``), and a separate ``"kind": "compile"`` line with the first-call
(compile) seconds.  Threads: ``NUMBA_NUM_THREADS`` (reported as ``threads``).

The problem is a 3D hex box of continuous Q_p elements (p + 1 Gauss-Lobatto
nodes, q = p + 2 Gauss points per direction), built directly from the
algebra layer on a structured grid (:mod:`hofem.bakeoff.structured`).
"""

import argparse
import json
import statistics
import time

import numpy as np

import hofem as hf

from .structured import box_operator

CG_ITERATIONS = 20


def threads():
    """Threads the backend uses: Numba's current count, 1 when Numba is absent."""
    try:
        import numba
    except ImportError:
        return 1
    return numba.get_num_threads()


def run_case(ceed, bp, p, dofs, repeat):
    """Time one case; return the result line and the compile line (dicts)."""
    n = max(1, round((dofs ** (1 / 3) - 1) / p))
    op, parts = box_operator(ceed, "mass" if bp == 1 else "diffusion", n, p)
    num_nodes, num_elem = parts["num_nodes"], parts["offsets"].shape[0]
    u = ceed.asarray(np.random.default_rng(0).standard_normal(num_nodes))
    v = ceed.xp.zeros(num_nodes)
    start = time.perf_counter()
    op.apply(u, v)
    first = time.perf_counter() - start
    op.apply(u, v)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        op.apply(u, v)
        times.append(time.perf_counter() - start)
    apply_time = statistics.median(times)
    b = op(u)
    cg_times = []
    for _ in range(max(1, repeat // 5)):
        start = time.perf_counter()
        hf.cg(op, b, rtol=0.0, maxiter=CG_ITERATIONS)
        cg_times.append(time.perf_counter() - start)
    cg_time = statistics.median(cg_times)
    common = {"bp": bp, "p": p, "q": p + 2, "dofs": num_nodes, "elements": num_elem}
    common.update(backend=ceed.resource, threads=threads())
    result = dict(common, apply_dofs_per_s=num_nodes / apply_time)
    result["cg_dofs_iter_per_s"] = num_nodes * CG_ITERATIONS / cg_time
    result["cg_over_apply"] = result["cg_dofs_iter_per_s"] / result["apply_dofs_per_s"]
    return result, dict(common, kind="compile", first_apply_s=first, apply_s=apply_time)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bp", type=int, nargs="+", default=[1, 3], choices=[1, 3])
    parser.add_argument("--order", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--dofs", type=float, nargs="+", default=[3e5, 2e6])
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.ceed)
    for dofs in args.dofs:
        for bp in args.bp:
            for p in args.order:
                result, compile_line = run_case(ceed, bp, p, dofs, args.repeat)
                print(json.dumps(result), flush=True)
                print(json.dumps(compile_line), flush=True)


if __name__ == "__main__":
    main()
