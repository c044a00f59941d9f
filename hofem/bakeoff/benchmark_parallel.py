"""Distributed scaling: ``mpiexec -n N python -m hofem.bakeoff bench-parallel``.

For each (problem, order, size) it builds the distributed box problem
(:func:`hofem.bakeoff.distributed.setup_distributed`), times ``--iterations``
CG iterations with ``rtol = 0`` after a warm-up solve (with ``--rtol``: solves to
that relative residual, at most ``--iterations`` iterations, and records whether it
converged and the time to solution, preconditioner set-up included), and prints one
JSON line from rank 0: total and per-rank DOFs, CG DOFs x iterations / s (and per GPU
or rank), setup seconds, the growth of peak host memory during set-up per local DOF
(``ru_maxrss``: run one case per process for a clean number), device memory per
local DOF (CuPy's pool), the solve's footprint per local DOF
(:func:`hofem.bakeoff.problems.solve_footprint`: arrays held plus CG's vectors),
and the DOF balance.

``--dofs`` is the total problem size (strong scaling) or, with ``--per-rank``,
the size on each rank (weak scaling). The box has ``round(((dofs)^(1/3) - 1) / p)``
elements per direction. Started without ``mpiexec`` it runs on one rank.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import hofem as hf
from hofem.memory import peak_rss_bytes

from .common import (
    EXIT_STATUS_EPILOG,
    Parser,
    add_ceed_argument,
    add_cg_variant_argument,
    add_geometry_argument,
    add_preconditioner_argument,
    add_problem_arguments,
    positive_float,
    positive_int,
    preconditioner_of,
)
from .distributed import ceed_on_every_rank, setup_distributed
from .estimate import case_estimate
from .problems import make_preconditioner, solve_footprint

if TYPE_CHECKING:
    from mpi4py import MPI

PROG = "python -m hofem.bakeoff bench-parallel"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog=PROG, description=__doc__, epilog=EXIT_STATUS_EPILOG)
    add_problem_arguments(parser, ("bp1", "bp3"), (4, 6))
    parser.add_argument("--dofs", nargs="+", type=positive_float, default=[1e6])
    parser.add_argument("--per-rank", action="store_true", help="--dofs is per rank (weak)")
    add_ceed_argument(parser, "/cpu/self")
    parser.add_argument(
        "--iterations", type=positive_int, default=50,
        help="iterations timed (with --rtol: the most allowed; default 50)",
    )  # fmt: skip
    parser.add_argument(
        "--rtol", type=positive_float, default=None,
        help="solve to this relative residual instead of timing --iterations iterations",
    )  # fmt: skip
    parser.add_argument(
        "--transport", choices=("auto", "mpi", "nccl", "ipc"), default="auto",
        help="how halos move (ipc: the device CG's halo on the copy engines, one node)",
    )  # fmt: skip
    add_preconditioner_argument(parser)
    add_cg_variant_argument(parser)
    add_geometry_argument(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even where the memory estimate says a case will not fit",
    )
    return parser.parse_args(argv)


def box_elements(dofs: float, p: int) -> int:
    """Elements per direction of the box with about ``dofs`` DOFs at order ``p``."""
    return max(1, round((dofs ** (1 / 3) - 1) / p))


def run_case(
    comm: MPI.Comm, ceed: hf.Ceed, bp: str, p: int, dofs: float, iterations: int,
    transport: str, geometry: str = "auto", preconditioner: str | None = None,
    variant: str = "standard", rtol: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """One timed case (collective); the result dict on every rank.

    ``preconditioner``: None, "jacobi" or "pmg"; its set-up is timed on its own.
    ``variant``: :func:`hofem.cg`'s (standard, single_reduction, pipelined).
    ``rtol``: 0 times ``iterations`` iterations; else the solve to ``rtol`` (at most
    ``iterations``), and ``converged`` and ``time_to_solution_s`` tell how it went.
    """
    elements = box_elements(dofs, p)
    baseline = peak_rss_bytes()  # interpreter, CUDA context, libraries: not the problem's
    problem = setup_distributed(
        bp, ceed, p, comm, elements=elements, transport=transport, geometry=geometry
    )
    host_peak = peak_rss_bytes() - baseline
    op, b = problem.operator, problem.rhs
    comm.Barrier()
    start = time.perf_counter()
    M = make_preconditioner(preconditioner, op)
    ceed.backend.synchronize()
    comm.Barrier()
    precond_setup_s = time.perf_counter() - start
    hf.cg(op, b, rtol=0.0, maxiter=2, M=M, variant=variant)  # warm-up: compilation, NCCL/MPI
    ceed.backend.synchronize()
    comm.Barrier()
    start = time.perf_counter()
    x, info = hf.cg(op, b, rtol=rtol, maxiter=iterations, M=M, variant=variant)
    ceed.backend.synchronize()
    comm.Barrier()
    seconds = time.perf_counter() - start
    space = problem.space
    device_bytes = 0
    if ceed.resource.startswith("/gpu"):
        import cupy

        device_bytes = cupy.get_default_memory_pool().total_bytes()
    local_dofs = space.local.num_dofs
    footprint = solve_footprint(problem, x, variant=variant)["bytes"]
    balance = space.balance()
    rate = space.num_dofs * info.iterations / seconds
    return {
        "bp": bp,
        "p": p,
        "elements": space.num_elem,
        "dofs": space.num_dofs,
        "ranks": comm.size,
        "dofs_per_rank": space.num_dofs / comm.size,
        "backend": ceed.resource,
        "geometry_used": problem.geometry,
        "transport": space.exchange.transport,
        "preconditioner": preconditioner,
        "cg_variant": variant,
        "precond_setup_s": precond_setup_s,
        "rtol": rtol,
        "converged": rtol > 0 and info == 0,
        "iterations": info.iterations,
        "solve_s": seconds,
        "time_to_solution_s": precond_setup_s + seconds,
        "dofs_x_iter_per_s": rate,
        "dofs_x_iter_per_s_per_rank": rate / comm.size,
        "setup_s": max(comm.allgather(problem.setup_seconds)),
        "host_bytes_per_local_dof": max(comm.allgather(host_peak / local_dofs)),
        "device_bytes_per_local_dof": max(comm.allgather(device_bytes / local_dofs)),
        "footprint_bytes_per_local_dof": max(comm.allgather(footprint / local_dofs)),
        "dof_balance": balance["dof_balance"],
    }


def check_cases(
    comm: MPI.Comm,
    ceed: hf.Ceed,
    args: argparse.Namespace,
    cases: Iterable[tuple[str, int, float]],
) -> None:
    """Raise :class:`~hofem.parallel.ParallelError` (on every rank) where a case of
    ``cases`` (``(bp, p, total DOFs)``) would not fit in memory (collective)."""
    from hofem import parallel as par

    for bp, p, dofs in cases:
        _, refusal = case_estimate(
            bp, ceed, p, elements=box_elements(dofs, p), geometry=args.geometry, comm=comm,
            preconditioner=preconditioner_of(args),
            hint="use fewer --dofs or more ranks (or --force to try anyway)",
        )  # fmt: skip
        if refusal is not None:
            raise par.ParallelError(refusal)


def main(argv: Sequence[str] | None = None) -> int:
    from hofem import parallel as par

    args = parse_args(argv)
    comm = par.world()
    with par.abort_on_error(prog=PROG):
        ceed = ceed_on_every_rank(comm, args.ceed)
        scale = comm.size if args.per_rank else 1
        cases = [(bp, p, d * scale) for bp in args.problems for p in args.orders for d in args.dofs]
        if not args.force:
            check_cases(comm, ceed, args, cases)
        failed = False
        for bp, p, total in cases:
            result = run_case(
                comm,
                ceed,
                bp,
                p,
                total,
                args.iterations,
                args.transport,
                args.geometry,
                preconditioner_of(args),
                args.cg_variant,
                args.rtol or 0.0,
            )
            if comm.rank == 0:
                print(json.dumps(result), flush=True)
            failed |= args.rtol is not None and not result["converged"]
    return 1 if failed else 0
