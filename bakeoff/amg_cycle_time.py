"""Time pmg's order-1 AMG in one process: its sparse products by the array library against
hofem's CSR kernel (``VectorOps.csr_matvec``), per SpMV, per AMG cycle and per set-up.

Usage::

    python bakeoff/amg_cycle_time.py --ceed /gpu/cuda/gen --order 6 --dofs 1e7 \
        --out bakeoff/results/h100/amg_cycle_DATE.jsonl
    NUMBA_NUM_THREADS=1 python bakeoff/amg_cycle_time.py --ceed /cpu/self/numba --dofs 1e5 \
        --out /tmp/amg_cycle.jsonl   # the script's own check: both paths are SciPy's there

BP3 on the hex box of about ``--dofs`` DOFs (``pmg_measure.problem``); ``hf.pmg``'s
order-1 matrix (the finest level of its AMG cycle) comes to the host and the AMG
hierarchy is built again from it (``smoothed_aggregation``) on the backend's arrays.  Two
paths share that hierarchy: ``library``, the backend's vector operations with the sparse
library's product (cuSPARSE through ``cupyx``: a descriptor, a buffer query and an
allocation per call, the AMG's products before ``csr_matvec``), and ``kernel``, the
backend's own ``csr_matvec`` (``csr.cu`` on a GPU).  For each path, one JSON line per
measurement: the SpMV of the order-1 matrix and of the first level's ``P`` and ``R``, and
one AMG cycle (``AMGCycle(b, out)``), each with

- ``host_us``: host time per call of ``--repeat`` calls queued without synchronizing (the
  launches' cost while the device keeps up);
- ``device_us``: CUDA events around ``--queued`` calls queued behind a spinning kernel, so
  the device runs them back to back whatever the host's launch cost (``covered`` says
  the spin outlasted the queuing; if not, raise ``--spin``);
- ``wall_us``: ``--repeat`` calls then one synchronization, per call;
- ``rel_diff``: the relative 2-norm difference of the path's result from ``library``'s.

Then the AMG set-up (``smoothed_aggregation``, synchronized) ``--setup-repeat`` times
per path, with the small levels' Lanczos estimates on the host
(``HOST_ESTIMATE_ROWS``, the default) and all on the device (``device-estimates``).
The tree A/B of the whole set-up and solve is ``bakeoff/pmg_setup_ab.sh``.
"""

import argparse
import copy
import functools
import statistics
import time
import types

import numpy as np
from amg_setup_time import tree
from pmg_measure import case_arguments, problem

import hofem as hf
from hofem import multigrid as mg
from hofem.bakeoff.common import emit_line
from hofem.vector_ops import VectorOps

_SPIN_SOURCE = r"""
extern "C" __global__ void spin(const long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
"""


def library_ops(ops):
    """A copy of ``ops`` whose ``csr_matvec`` is the array library's product (the base class's)."""
    library = copy.copy(ops)
    library.csr_matvec = types.MethodType(VectorOps.csr_matvec, library)
    return library


def timings(fn, ceed, args):
    """``{host_us, device_us, wall_us, covered}`` of ``fn()`` (see the module docstring);
    on a host backend ``device_us`` is None."""
    sync = ceed.backend.synchronize
    fn()  # warm: kernels compiled, pools filled
    sync()
    start = time.perf_counter()
    for _ in range(args.repeat):
        fn()
    host = time.perf_counter() - start
    sync()
    record = dict(
        host_us=1e6 * host / args.repeat,
        wall_us=1e6 * (time.perf_counter() - start) / args.repeat,
        device_us=None, covered=None,
    )  # fmt: skip
    if ceed.xp is np:
        return record
    cupy = ceed.xp
    spin = cupy.RawKernel(_SPIN_SOURCE, "spin")
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    spin((1,), (1,), (np.int64(args.spin),))
    begin.record()
    for _ in range(args.queued):
        fn()
    record["covered"] = not begin.done  # the spin still ran when the last call was queued
    end.record()
    end.synchronize()
    record["device_us"] = 1e3 * cupy.cuda.get_elapsed_time(begin, end) / args.queued
    return record


def rel_diff(a, b, ceed):
    """``|a - b| / |b|`` on the host."""
    a, b = ceed.to_numpy(a), ceed.to_numpy(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def measure_products(ceed, base, paths, args):
    """One line per path and product: the order-1 matrix, the first level's P and R."""
    xp, rng = ceed.xp, np.random.default_rng(0)
    level = paths["library"][1].levels[0]
    for name, M in (("spmv A", level[0]), ("spmv P", level[1]), ("spmv R", level[2])):
        x = ceed.asarray(rng.standard_normal(M.shape[1]))
        results = {}
        for path, (ops, _) in paths.items():
            out = xp.empty(M.shape[0])
            record = timings(functools.partial(ops.csr_matvec, M, x, out), ceed, args)
            results[path] = out
            emit_line(args.out, {**base, "what": name, "path": path, "rows": M.shape[0],
                                 "nnz": int(M.nnz), **record,
                                 "rel_diff": rel_diff(out, results["library"], ceed)})  # fmt: skip


def measure_cycles(ceed, base, paths, args):
    """One line per path: one AMG cycle from zero."""
    xp = ceed.xp
    n = paths["library"][1].shape[0]
    b = ceed.asarray(np.random.default_rng(1).standard_normal(n))
    results = {}
    for path, (_, cycle) in paths.items():
        out = xp.empty(n)
        record = timings(functools.partial(cycle, b, out), ceed, args)
        results[path] = out
        emit_line(args.out, {**base, "what": "cycle", "path": path, **record,
                             "rel_diff": rel_diff(out, results["library"], ceed)})  # fmt: skip


def measure_setups(ceed, base, A_host, paths, args):
    """One line per path and estimate placement: ``smoothed_aggregation``'s seconds."""
    host_rows = mg.HOST_ESTIMATE_ROWS
    for estimates, rows in (("host-small-levels", host_rows), ("device-estimates", 0)):
        for path, (ops, _) in paths.items():
            seconds = []
            mg.HOST_ESTIMATE_ROWS = rows
            try:
                for _ in range(args.setup_repeat + 1):  # the first warms the caches
                    ceed.backend.synchronize()
                    start = time.perf_counter()
                    levels, _ = mg.smoothed_aggregation(A_host, ceed.xp, ops)
                    ceed.backend.synchronize()
                    seconds.append(time.perf_counter() - start)
            finally:
                mg.HOST_ESTIMATE_ROWS = host_rows
            emit_line(args.out, {**base, "what": "setup", "path": path, "estimates": estimates,
                                 "seconds": seconds[1:], "median_s": statistics.median(seconds[1:]),
                                 "lambdas": [lv.lambda_max for lv in levels]})  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    case_arguments(parser, "/gpu/cuda/gen", 1e7)
    parser.add_argument("--repeat", type=int, default=200, help="calls per host/wall timing")
    parser.add_argument("--queued", type=int, default=10, help="calls behind the spin")
    parser.add_argument("--spin", type=int, default=400_000_000, help="clock cycles of the spin")
    parser.add_argument("--setup-repeat", type=int, default=3)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ceed = hf.Ceed(args.ceed)
    n, prob = problem(ceed, "hex", args.order, args.dofs)
    M = hf.pmg(prob.operator)
    order1 = M.coarse.levels[0][0]  # the AMG cycle's finest matrix, on the backend
    A_host = order1 if ceed.xp is np else order1.get()
    del M
    ops = ceed.backend.vector_ops()
    levels, coarsest = mg.smoothed_aggregation(A_host, ceed.xp, ops)
    paths = {}
    for path, path_ops in (("library", library_ops(ops)), ("kernel", ops)):
        paths[path] = (path_ops, mg.AMGCycle(levels, coarsest, ceed.xp, ops=path_ops))
    base = dict(ceed=args.ceed, order=args.order, n=n, dofs=prob.space.num_dofs,
                levels=[lv.A.shape[0] for lv in levels] + [coarsest.shape[0]],
                tree=tree())  # fmt: skip
    measure_products(ceed, base, paths, args)
    measure_cycles(ceed, base, paths, args)
    measure_setups(ceed, base, A_host, paths, args)


if __name__ == "__main__":
    main()
