"""``python -m hofem.bakeoff [bp1..bp6] [--order P] [--elements N] ...``: solve a bake-off problem.

Prints a human summary and one JSON line (bp, p, q, elements, dofs,
iterations, solve seconds, DOFs x iterations / s, relative residual, L2 error).
"""

import argparse
import json
import sys

import hofem as hf
from hofem import meshes

from .distributed import launched_under_mpi, setup_distributed
from .problems import PROBLEMS, setup, solve


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m hofem.bakeoff",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "bp",
        nargs="?",
        default="bp3",
        choices=sorted(PROBLEMS),
        help="problem (default bp3: Poisson, Dirichlet)",
    )
    parser.add_argument("--order", "-p", type=int, default=4, help="polynomial order (default 4)")
    parser.add_argument(
        "--elements",
        "-n",
        type=int,
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
    parser.add_argument("--ceed", default="/cpu/self", help="backend resource (default /cpu/self)")
    parser.add_argument("--rtol", type=float, default=1e-8, help="CG relative tolerance")
    parser.add_argument("--maxiter", type=int, default=None, help="CG iteration limit")
    parser.add_argument("--jacobi", action="store_true", help="Jacobi-preconditioned CG")
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
    return parser.parse_args(argv)


def report(result, extra=()):
    """Print the human summary, ``extra`` lines, and the JSON line."""
    status = "converged" if result["converged"] else "NOT converged"
    print(
        f"{result['bp'].upper()} on {result['elements']} {result['cell']} cells, p = "
        f"{result['p']}, q = {result['q']}, {result['dofs']} DOFs, backend {result['backend']}"
    )
    for line in extra:
        print(line)
    print(
        f"CG {status} in {result['iterations']} iterations, {result['solve_s']:.3f} s "
        f"({result['dofs_x_iter_per_s'] / 1e6:.2f} MDOF x iterations / s)"
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
    )
    result = solve(
        problem,
        rtol=args.rtol,
        maxiter=args.maxiter,
        preconditioner="jacobi" if args.jacobi else None,
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


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if launched_under_mpi():
        from hofem.parallel import abort_on_error

        with abort_on_error(prog="python -m hofem.bakeoff"):
            return run_distributed(args)
    ceed = hf.Ceed(args.ceed)
    if args.mesh:
        mesh = meshes.read(args.mesh)
    else:
        mesh = meshes.box(args.elements, 3, simplex=args.simplex, distort=args.distort)
    problem = setup(args.bp, ceed, args.order, mesh)
    result = solve(
        problem,
        rtol=args.rtol,
        maxiter=args.maxiter,
        preconditioner="jacobi" if args.jacobi else None,
    )
    report(result)
    return 0 if result["converged"] else 1


if __name__ == "__main__":
    sys.exit(main())
