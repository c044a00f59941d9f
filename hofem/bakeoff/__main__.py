"""``python -m hofem.bakeoff [bp1..bp6 | COMMAND] ...``: the bake-off command line.

With a problem (or nothing: BP3, p = 4), solve one bake-off case and print a
human summary and one JSON line (bp, p, q, elements, dofs, iterations,
compile seconds, solve seconds, DOFs x iterations / s of the solve alone,
relative residual, L2 error).

Commands (``python -m hofem.bakeoff COMMAND --help`` for each):

  sweep           problems x orders x sizes x backends, one JSON line per case
  plot            figures and a markdown table from a sweep's results file
  bench-cpu       CPU operator apply and fixed-iteration CG throughput
  bench-gpu       GPU kernels, operators and CG (CUDA events)
  bench-parallel  distributed weak/strong scaling (under mpiexec)
  tune-gemm       GPU GEMM tuning table for simplex bases
  anchor-libceed  libCEED's own BP1/BP3 on the same boxes
  anchor-mfem     MFEM partial assembly BP1/BP3 on the same boxes
  compare-cpu     /cpu/self/numba, libCEED and MFEM side by side (alternating)
  compare-gpu     hofem's CUDA backends and libCEED's side by side (alternating)
"""

import importlib
import json
import sys

import hofem as hf
from hofem import meshes
from hofem.backends import BackendUnavailable

from .common import (
    Parser,
    add_ceed_argument,
    add_geometry_argument,
    add_preconditioner_argument,
    bp_name,
    order,
    positive_float,
    positive_int,
    preconditioner_of,
)
from .distributed import launched_under_mpi, setup_distributed
from .problems import DEFAULT_RTOL, PROBLEMS, setup, solve

EXTRAS = {"cupy": "gpu", "numba": "numba", "meshio": "mesh", "matplotlib": "plot", "pyamg": "amg"}
COMMANDS = {
    "sweep": "sweep",
    "plot": "plot",
    "bench-cpu": "benchmark_cpu",
    "bench-gpu": "benchmark_gpu",
    "bench-parallel": "benchmark_parallel",
    "tune-gemm": "tune_gemm",
    "anchor-libceed": "anchor_libceed",
    "anchor-mfem": "anchor_mfem",
    "compare-cpu": "compare_cpu",
    "compare-gpu": "compare_gpu",
}


def parse_args(argv):
    """Options of the single-case command."""
    parser = Parser(prog="python -m hofem.bakeoff", description=__doc__)
    parser.add_argument(
        "bp",
        nargs="?",
        default="bp3",
        type=bp_name,
        choices=sorted(PROBLEMS),
        metavar="BP",
        help="problem bp1..bp6 or 1..6 (default bp3: Poisson, Dirichlet)",
    )
    parser.add_argument("--order", "-p", type=order, default=4, help="polynomial order (default 4)")
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
    parser.add_argument(
        "--partition",
        choices=("rcb", "metis"),
        default="rcb",
        help="under mpiexec, how --mesh is partitioned (default rcb; metis needs pymetis)",
    )
    parser.add_argument(
        "--transport",
        choices=("auto", "mpi", "nccl"),
        default="auto",
        help="under mpiexec, how halos move (default auto: NCCL between GPUs when available)",
    )
    add_geometry_argument(parser)
    return parser.parse_args(argv)


def report(result, extra=()):
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


def run_distributed(args):
    """One bake-off case over the ranks of ``MPI.COMM_WORLD``; rank 0 prints."""
    from hofem import parallel as par

    comm = par.world()
    if args.ceed.startswith("/gpu"):
        par.bind_device(comm)
    ceed = hf.Ceed(args.ceed)
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


def solve_one(argv):
    """Build the mesh, set up and solve one case, print the summary; exit status 0/1.

    Under ``mpiexec`` the case runs distributed over the ranks (rank 0 prints).
    """
    args = parse_args(argv)
    if launched_under_mpi():
        from hofem.parallel import abort_on_error

        with abort_on_error(prog="python -m hofem.bakeoff"):
            return run_distributed(args)
    ceed = hf.Ceed(args.ceed)
    if args.mesh:
        mesh = meshes.read(args.mesh)
    else:
        mesh = meshes.box(args.elements, 3, simplex=args.simplex, distort=args.distort)
    problem = setup(args.bp, ceed, args.order, mesh, geometry=args.geometry)
    result = solve(
        problem,
        rtol=args.rtol,
        maxiter=args.maxiter,
        preconditioner=preconditioner_of(args),
    )
    report(result)
    return 0 if result["converged"] else 1


def main(argv=None):
    """Dispatch to a command of :data:`COMMANDS`, or solve one case.

    A backend or an optional package that this machine lacks ends the
    command with one line on stderr and exit status 1.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] in COMMANDS:
            command = importlib.import_module(f"{__package__}.{COMMANDS[argv[0]]}")
            return command.main(argv[1:])
        return solve_one(argv)
    except BackendUnavailable as exc:
        print(f"python -m hofem.bakeoff: {exc}", file=sys.stderr)
    except ModuleNotFoundError as exc:
        if exc.name not in EXTRAS:
            raise
        extra = EXTRAS[exc.name]
        print(
            f"python -m hofem.bakeoff: this needs {exc.name}: pip install hofem[{extra}]",
            file=sys.stderr,
        )
    return 1


if __name__ == "__main__":
    sys.exit(main())
