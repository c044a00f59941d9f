"""GPU benchmark: basis kernels (GB/s), restrictions, BP1/BP3 operator apply and CG.

Prints one JSON line per case.  Timings are CUDA events around the timed call
after warm-up, the median of ``--repeat`` repeats.  Problems are 3D hex
boxes of order p with Q = p + 2 Gauss points (``hofem.meshes.box``,
``H1Space``, ``hf.mass``/``hf.diffusion``: :func:`bakeoff.common.box_operator`).
The ``tet`` case (not in the default set) applies BP1/BP3 on a
tetrahedral box mesh (``hofem.meshes.box(..., simplex=True)``, ``H1Space``,
``hf.mass``/``hf.diffusion``, the bake-off rule: simplex quadrature exact to
degree 2p + 3) of about ``--dofs`` DOFs, fewer where the mesh would exceed
``--tet-points`` quadrature points (memory: stored qdata and setup temporaries).

Usage::

    python -m bakeoff bench-gpu [--ceed /gpu/cuda/batched] [--orders 1 2 ... 8]
        [--problems bp1 bp3] [--dofs 1.2e7] [--repeat 10]
        [--cases copy basis restriction operator cg tet] [--tet-points 1.2e8]
        [--cg-loops device host] [--geometry stored on_the_fly]
"""

import math
import time

import hofem as hf
from hofem.bakeoff.common import (
    Parser,
    add_ceed_argument,
    add_geometry_argument,
    add_problem_arguments,
    positive_float,
    positive_int,
    tet_shape,
)

from .common import STRUCTURED, box_operator, box_space, emit, time_events

CASES = ("copy", "basis", "restriction", "operator", "cg")
EXTRA_CASES = ("tet",)  # run only when asked for
TET_FORMS = {"bp1": hf.mass, "bp3": hf.diffusion}


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
    space = box_space(ceed, n, p)
    r, num_nodes = space.restriction, space.num_nodes
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
        nbytes = 8 * (r.e_size + num_nodes) + ceed.backend.restriction_device_offsets(r).nbytes
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


def bench_operator(ceed, bp, p, dofs, repeat, cg_iters, geometry="auto", loops=("device",)):
    import cupy

    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    form = "mass" if bp == "bp1" else "diffusion"
    op, space, geometry_used = box_operator(ceed, form, n, p, geometry=geometry)
    num_dofs = space.num_dofs
    u = cupy.random.default_rng(1).standard_normal(num_dofs)
    v = cupy.empty_like(u)
    seconds = time_events(lambda: op.apply(u, v), repeat)
    base = dict(backend=ceed.resource, bp=bp, p=p, q=p + 2, num_elem=n**3, dofs=num_dofs)
    base.update(geometry=geometry, geometry_used=geometry_used)
    emit(case="operator", **base, seconds=seconds, dofs_per_s=num_dofs / seconds)
    apply_rate = num_dofs / seconds
    b = op(u) if cg_iters else None
    for loop in loops if cg_iters else ():
        # default convergence checks: every iteration on the host, automatic on the device
        def solve(device=loop == "device"):
            return hf.cg(op, b, rtol=1e-30, maxiter=cg_iters, device_loop=device)

        seconds = time_events(solve, repeat, warmup=1)
        rate = num_dofs * cg_iters / seconds
        emit(
            case="cg",
            **base,
            loop=loop,
            iterations=cg_iters,
            seconds=seconds,
            dofs_iter_per_s=rate,
            cg_over_apply=rate / apply_rate,
        )


def tet_cells(p, dofs, max_points):
    """Cells per direction of the tet box: about ``dofs`` DOFs, at most ``max_points`` points."""
    num_qpts = tet_shape(p)[1]
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))  # (n p + 1)^3 DOFs
    while n > 1 and 6 * n**3 * num_qpts > max_points:  # 6 tets per cell
        n -= 1
    return n


def bench_tet(ceed, bps, p, dofs, max_points, repeat):
    """BP1/BP3 operator apply on a tet box mesh (one mesh and space per order).

    ``setup_s``: mesh and space (host); ``build_s``: the form's qdata setup.
    """
    import cupy

    from hofem import meshes
    from hofem.backends.cuda import gemm
    from hofem.backends.cuda.batched import CudaBatchedBackend

    start = time.perf_counter()
    space = hf.H1Space(ceed, meshes.box(tet_cells(p, dofs, max_points), 3, simplex=True), p)
    setup = time.perf_counter() - start
    basis = space.basis()
    P, Q, E = basis.num_nodes, basis.num_qpts, space.num_elem
    u = cupy.random.default_rng(1).standard_normal(space.num_dofs)
    v = cupy.empty_like(u)
    base = dict(backend=ceed.resource, p=p, P=P, Q=Q, num_elem=E, dofs=space.num_dofs)
    if isinstance(ceed.backend, CudaBatchedBackend):  # what the tuning table picks, E columns
        base["gemm_batch_count"] = {
            t.value: gemm.select(t, P, Q, E) for t in (hf.NOTRANSPOSE, hf.TRANSPOSE)
        }
    for bp in bps:
        start = time.perf_counter()
        op = TET_FORMS[bp](space)  # builds the stored qdata
        ceed.backend.synchronize()
        build = time.perf_counter() - start
        seconds = time_events(lambda op=op: op.apply(u, v), repeat)
        emit(
            case="tet",
            bp=bp,
            **base,
            setup_s=setup,
            build_s=build,
            seconds=seconds,
            dofs_per_s=space.num_dofs / seconds,
        )
        del op
        cupy.get_default_memory_pool().free_all_blocks()


def parse_args(argv):
    parser = Parser(prog="python -m bakeoff bench-gpu", description=__doc__)
    add_ceed_argument(parser, "/gpu/cuda/batched")
    add_geometry_argument(parser, many=True)
    add_problem_arguments(parser, STRUCTURED, range(1, 9), choices=STRUCTURED)
    parser.add_argument(
        "--dofs", type=positive_float, default=1.2e7, help="target DOFs per problem"
    )
    parser.add_argument("--repeat", type=positive_int, default=10, help="timed calls per case")
    parser.add_argument("--cg-iters", type=positive_int, default=20, help="CG iterations timed")
    parser.add_argument(
        "--cg-loops",
        nargs="+",
        default=["device"],
        choices=["device", "host"],
        help="CG loops timed (hf.cg's device_loop True/False)",
    )
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES + EXTRA_CASES)
    parser.add_argument(
        "--tet-points", type=positive_float, default=1.2e8, help="cap on quadrature points (tet)"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import cupy

    ceed = hf.Ceed(args.ceed)
    if "copy" in args.cases:
        bench_copy(args.repeat)
    for p in args.orders:
        if "basis" in args.cases:
            bench_basis(ceed, p, args.dofs, args.repeat)
        if "restriction" in args.cases:
            bench_restriction(ceed, p, args.dofs, args.repeat)
        if "operator" in args.cases or "cg" in args.cases:
            iters = args.cg_iters if "cg" in args.cases else 0
            for bp in args.problems:
                for geometry in args.geometry:
                    bench_operator(
                        ceed, bp, p, args.dofs, args.repeat, iters, geometry, args.cg_loops
                    )
                    cupy.get_default_memory_pool().free_all_blocks()
        if "tet" in args.cases:
            bench_tet(ceed, args.problems, p, args.dofs, args.tet_points, args.repeat)
            cupy.get_default_memory_pool().free_all_blocks()
    return 0
