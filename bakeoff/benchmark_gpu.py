"""GPU benchmark: basis kernels (GB/s), restrictions, BP1/BP3 operator apply and CG.

Prints one JSON line per case.  Timings are CUDA events around the timed call
after warm-up, the median of ``--repeat`` repeats.  Problems are structured
3D hex boxes of order p with Q = p + 2 Gauss points, built with the algebra
layer only.

Usage::

    python -m hofem.bakeoff.benchmark_gpu [--backend /gpu/cuda/batched] [--p 1 2 ... 8]
        [--dofs 1.2e7] [--repeat 10] [--cases copy basis restriction operator cg]
"""

import argparse
import json
import math

import numpy as np

import hofem as hf

from .structured import box_offsets, box_operator

CASES = ("copy", "basis", "restriction", "operator", "cg")


def time_events(fn, repeat, warmup=3):
    """Median seconds of ``fn()`` by CUDA events, after ``warmup`` calls."""
    import cupy

    for _ in range(warmup):
        fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def emit(**record):
    print(json.dumps(record), flush=True)


def bench_copy(repeat):
    import cupy

    a = cupy.random.standard_normal(1 << 27)  # (2^27,) 1 GiB
    b = cupy.empty_like(a)
    seconds = time_events(lambda: cupy.copyto(b, a), repeat)
    emit(case="copy", bytes=2 * a.nbytes, seconds=seconds, GBps=2 * a.nbytes / seconds / 1e9)


def bench_basis(ceed, p, dofs, repeat):
    import cupy

    P, q = p + 1, p + 2
    num_elem = max(1, int(dofs) // P**3)
    b = ceed.BasisTensorH1Lagrange(3, 1, P, q, hf.GAUSS)
    backend = ceed.backend
    rng = cupy.random.default_rng(0)
    for mode, rows in (("interp", 1), ("grad", 3)):
        eval_mode = hf.EVAL_GRAD if mode == "grad" else hf.EVAL_INTERP
        nodes = rng.standard_normal((num_elem, 1, P**3))  # (E, 1, P^3)
        qpts = rng.standard_normal((num_elem, rows, q**3))  # (E, rows, Q^3)
        for t_mode, src, dst in ((hf.NOTRANSPOSE, nodes, qpts), (hf.TRANSPOSE, qpts, nodes)):

            def run(t=t_mode, m=eval_mode, s=src, d=dst, st=(rows * q**3, q**3)):
                if hasattr(backend, "_tensor_kernel"):  # the kernel alone, output preallocated
                    return backend._tensor_kernel(b, t, m, s, d, num_elem, st)
                return b.apply(num_elem, t, m, s)

            seconds = time_events(run, repeat)
            nbytes = nodes.nbytes + qpts.nbytes
            emit(
                case="basis",
                backend=ceed.resource,
                action=mode + ("_t" if t_mode is hf.TRANSPOSE else ""),
                p=p,
                P_1d=P,
                Q_1d=q,
                num_elem=num_elem,
                bytes=nbytes,
                seconds=seconds,
                GBps=nbytes / seconds / 1e9,
            )


def bench_restriction(ceed, p, dofs, repeat):
    import cupy

    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    offsets, num_nodes = box_offsets(n, p)
    r = ceed.ElemRestriction(offsets.shape[0], offsets.shape[1], 1, 1, num_nodes, offsets)
    u = cupy.random.standard_normal(num_nodes)
    e = r.apply(u)
    backend = ceed.backend
    modes = [("gather", lambda: r.apply(u))]
    for scatter in ("map", "atomic") if hasattr(backend, "scatter") else ("bincount",):

        def run(s=scatter):
            if hasattr(backend, "scatter"):
                backend.scatter = s
            return r.apply(e, hf.TRANSPOSE)

        modes.append(("scatter_" + scatter, run))
    for name, fn in modes:
        seconds = time_events(fn, repeat)
        nbytes = 8 * (r.e_size + num_nodes) + r.backend_data["indices"].nbytes
        emit(
            case="restriction",
            backend=ceed.resource,
            action=name,
            p=p,
            dofs=num_nodes,
            bytes=nbytes,
            seconds=seconds,
            GBps=nbytes / seconds / 1e9,
        )
    if hasattr(backend, "scatter"):
        backend.scatter = type(backend).scatter


def bench_operator(ceed, bp, p, dofs, repeat, cg_iters):
    import cupy

    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    op, parts = box_operator(ceed, "mass" if bp == "bp1" else "diffusion", n, p)
    num_dofs = parts["num_nodes"]
    u = cupy.random.default_rng(1).standard_normal(num_dofs)
    v = cupy.empty_like(u)
    seconds = time_events(lambda: op.apply(u, v), repeat)
    base = dict(backend=ceed.resource, bp=bp, p=p, q=p + 2, num_elem=n**3, dofs=num_dofs)
    emit(case="operator", **base, seconds=seconds, dofs_per_s=num_dofs / seconds)
    if cg_iters:
        b = op(u)

        def solve():
            return hf.cg(op, b, rtol=1e-30, maxiter=cg_iters, check_every=cg_iters)

        seconds = time_events(solve, repeat, warmup=1)
        emit(
            case="cg",
            **base,
            iterations=cg_iters,
            seconds=seconds,
            dofs_iter_per_s=num_dofs * cg_iters / seconds,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="/gpu/cuda/batched")
    parser.add_argument("--p", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--bp", nargs="+", default=["bp1", "bp3"])
    parser.add_argument("--dofs", type=float, default=1.2e7, help="target DOFs per problem")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--cg-iters", type=int, default=20)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    args = parser.parse_args(argv)
    import cupy

    ceed = hf.Ceed(args.backend)
    if "copy" in args.cases:
        bench_copy(args.repeat)
    for p in args.p:
        if "basis" in args.cases:
            bench_basis(ceed, p, args.dofs, args.repeat)
        if "restriction" in args.cases:
            bench_restriction(ceed, p, args.dofs, args.repeat)
        if "operator" in args.cases or "cg" in args.cases:
            iters = args.cg_iters if "cg" in args.cases else 0
            for bp in args.bp:
                bench_operator(ceed, bp, p, args.dofs, args.repeat, iters)
                cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
