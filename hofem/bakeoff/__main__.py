"""``python -m hofem.bakeoff [bp1..bp6 | COMMAND] ...``: the bake-off command line.

With a problem (or nothing: BP3, p = 4), solve one bake-off case and print a
human summary and one JSON line (bp, p, q, elements, dofs, iterations,
compile seconds, solve seconds, DOFs x iterations / s of the solve alone,
relative residual, L2 error).

Commands (``python -m hofem.bakeoff COMMAND --help`` for each):

  sweep           problems x orders x sizes x backends, one JSON line per case
  plot            figures and a markdown table from a sweep's results file
  bench-parallel  distributed weak/strong scaling (under mpiexec)

The comparisons with libCEED and MFEM, the kernel benchmarks and the tuning
sweeps are the repository's laboratory, ``python -m bakeoff`` from a checkout.
"""

import argparse
import importlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import hofem as hf
from hofem import meshes

from .common import (
    EXIT_STATUS_EPILOG,
    MAX_ORDER,
    Parser,
    UsageError,
    add_ceed_argument,
    add_cg_variant_argument,
    add_geometry_argument,
    add_preconditioner_argument,
    bp_name,
    order,
    positive_float,
    positive_int,
    preconditioner_of,
    run_reporting_usage_errors,
)
from .distributed import ceed_on_every_rank, launched_under_mpi, setup_distributed
from .estimate import case_estimate
from .problems import DEFAULT_RTOL, PROBLEMS, setup, solve

PROG = "python -m hofem.bakeoff"
COMMANDS = {
    "sweep": "sweep",
    "plot": "plot",
    "bench-parallel": "benchmark_parallel",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Options of the single-case command."""
    parser = Parser(prog=PROG, description=__doc__, epilog=EXIT_STATUS_EPILOG)
    parser.add_argument(
        "bp",
        nargs="?",
        default="bp3",
        type=bp_name,
        choices=sorted(PROBLEMS),
        metavar="BP",
        help="problem bp1..bp6 or 1..6 (default bp3: Poisson, Dirichlet)",
    )
    parser.add_argument(
        "--order", "-p", type=order, default=4, help=f"polynomial order 1..{MAX_ORDER} (default 4)"
    )
    parser.add_argument(
        "--elements",
        "-n",
        type=positive_int,
        default=6,
        help="elements per direction of the unit box (default 6)",
    )
    parser.add_argument("--simplex", action="store_true", help="tetrahedra (6 per box cell)")
    parser.add_argument(
        "--distort",
        type=float,
        default=0.0,
        help="smooth interior distortion of the box (default 0)",
    )
    parser.add_argument("--mesh", help="mesh file (Gmsh .msh, .vtk, .vtu) instead of the box")
    add_ceed_argument(parser, "/cpu/self")
    parser.add_argument(
        "--rtol",
        type=positive_float,
        default=DEFAULT_RTOL,
        help=f"CG relative tolerance (default {DEFAULT_RTOL:g}: reaches the discretization error)",
    )
    parser.add_argument("--maxiter", type=positive_int, default=None, help="CG iteration limit")
    add_preconditioner_argument(parser)
    add_cg_variant_argument(parser)
    parser.add_argument(
        "--partition",
        choices=("rcb", "metis"),
        default="rcb",
        help="under mpiexec, how --mesh is partitioned (default rcb; metis needs pymetis)",
    )
    parser.add_argument(
        "--transport",
        choices=("auto", "mpi", "nccl", "ipc"),
        default="auto",
        help="under mpiexec, how halos move (default auto: ipc for GPU ranks on one node, "
        "nccl across nodes, mpi on CPUs; ipc: the device CG's halo on the copy engines)",
    )
    add_geometry_argument(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even where the memory estimate says the case will not fit",
    )
    return parser.parse_args(argv)


def report(result: dict[str, Any], extra: Iterable[str] = ()) -> None:
    """Print the human summary, ``extra`` lines, and the JSON line."""
    status = "converged" if result["converged"] else "NOT converged"
    print(
        f"{result['bp'].upper()} on {result['elements']} {result['cell']} cells, p = "
        f"{result['p']}, q = {result['q']}, {result['dofs']} DOFs, backend {result['backend']}"
    )
    print(
        f"set-up {result['setup_s']:.1f} s ({result['geometry_used']} geometry), host peak "
        f"{result['host_peak_bytes'] / 1e9:.2f} GB, solve footprint "
        f"{result['footprint_bytes'] / result['dofs']:.0f} B/DOF"
    )
    if result["kernels_compiled"]:
        print(f"compiling kernels, first run only: {result['compile_s']:.1f} s")
    for line in extra:
        print(line)
    print(
        f"CG {status} in {result['iterations']} iterations, {result['solve_s']:.3f} s "
        f"({result['dofs_x_iter_per_s'] / 1e6:.2f} MDOF x iterations / s)"
    )
    if result["preconditioner"]:
        print(
            f"preconditioner {result['preconditioner']}: set-up {result['precond_setup_s']:.3f} s, "
            f"time to solution {result['time_to_solution_s']:.3f} s"
        )
    print(f"relative residual {result['rel_residual']:.2e}, L2 error {result['l2_error']:.3e}")
    print(json.dumps(result))


def run_distributed(args: argparse.Namespace) -> int:
    """One bake-off case over the ranks of ``MPI.COMM_WORLD``; rank 0 prints."""
    from hofem import parallel as par

    comm = par.world()
    ceed = ceed_on_every_rank(comm, args.ceed)
    if not args.force and args.mesh is None:
        _, refusal = case_estimate(
            args.bp, ceed, args.order, elements=args.elements, simplex=args.simplex,
            distort=args.distort, geometry=args.geometry, comm=comm,
            preconditioner=preconditioner_of(args),
        )  # fmt: skip
        if refusal is not None:
            raise par.ParallelError(refusal)
    problem = setup_distributed(
        args.bp,
        ceed,
        args.order,
        comm,
        elements=args.elements,
        mesh=args.mesh,
        simplex=args.simplex,
        distort=args.distort,
        method=args.partition,
        transport=args.transport,
        geometry=args.geometry,
    )
    result = solve(
        problem,
        rtol=args.rtol,
        maxiter=args.maxiter,
        preconditioner=preconditioner_of(args),
        variant=args.cg_variant,
    )
    balance = problem.space.balance()
    result["element_balance"] = balance["element_balance"]
    result["dof_balance"] = balance["dof_balance"]
    result["transport"] = problem.space.exchange.transport
    if comm.rank == 0:
        dofs = balance["dofs"]
        report(
            result,
            [
                f"{comm.size} ranks ({result['transport']} halos): owned DOFs per rank "
                f"{min(dofs)}..{max(dofs)} (balance {balance['dof_balance']:.3f}), cells "
                f"{min(balance['elements'])}..{max(balance['elements'])} "
                f"(balance {balance['element_balance']:.3f})"
            ],
        )
    return 0 if result["converged"] else 1


def read_mesh(path: str | os.PathLike[str]) -> meshes.Mesh:
    """``meshes.read(path)``; a file it cannot read is a :class:`UsageError`."""
    try:
        return meshes.read(path)
    except (OSError, ValueError, ImportError) as exc:
        raise UsageError(str(exc)) from None


def solve_one(argv: Sequence[str] | None) -> int:
    """Build the mesh, set up and solve one case, print the summary; exit status 0/1.

    Under ``mpiexec`` the case runs distributed over the ranks (rank 0 prints).
    """
    args = parse_args(argv)
    if launched_under_mpi():
        from hofem.parallel import abort_on_error

        with abort_on_error(prog=PROG):
            return run_distributed(args)
    ceed = hf.Ceed(args.ceed)
    mesh = read_mesh(args.mesh) if args.mesh else None
    if not args.force:
        _, refusal = case_estimate(
            args.bp, ceed, args.order, elements=args.elements, mesh=mesh, simplex=args.simplex,
            distort=args.distort, geometry=args.geometry,
            preconditioner=preconditioner_of(args),
        )  # fmt: skip
        if refusal is not None:
            raise UsageError(refusal)
    if mesh is None:  # built only once it is known to fit
        mesh = meshes.box(args.elements, 3, simplex=args.simplex, distort=args.distort)
    problem = setup(args.bp, ceed, args.order, mesh, geometry=args.geometry)
    result = solve(
        problem,
        rtol=args.rtol,
        maxiter=args.maxiter,
        preconditioner=preconditioner_of(args),
        variant=args.cg_variant,
    )
    report(result)
    return 0 if result["converged"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a command of :data:`COMMANDS`, or solve one case.

    Exit status 0, or 1 where a case did not converge. A usage error
    (:class:`~hofem.bakeoff.common.UsageError`), a backend or an optional
    package that this machine lacks end the command with one line on stderr
    and exit status 2, as bad option values do.
    """
    argv = sys.argv[1:] if argv is None else list(argv)

    def command() -> int:
        if argv and argv[0] in COMMANDS:
            module = importlib.import_module(f"{__package__}.{COMMANDS[argv[0]]}")
            return module.main(argv[1:])
        return solve_one(argv)

    return run_reporting_usage_errors(PROG, command)


if __name__ == "__main__":
    sys.exit(main())
