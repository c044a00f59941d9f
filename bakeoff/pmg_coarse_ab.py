"""pmg's iterations by coarse solve: BP3 hex boxes, CG to rtol 1e-8, one JSON line per case.

Usage::

    NUMBA_NUM_THREADS=2 python bakeoff/pmg_coarse_ab.py --p 2 --n 23 50 116 \
        --coarse local --out bakeoff/results/cpu/pmg_growth_2026-11-26.jsonl

``--coarse``: ``default`` (hf.pmg as it is), ``local`` (pyamg's smoothed aggregation
with the prolongator smoothed by local row sums, ``weighting="local"``, as before
2026-11-26), ``diagonal`` (pyamg's Arnoldi estimate, ``weighting="diagonal"``),
``exact`` (a sparse LU of the order-1 matrix: affordable to about 1e5 rows).
``--p 1`` makes the AMG cycle alone the preconditioner (the order-1 box is the fine one).
"""

import argparse
import time

import numpy as np
import scipy.sparse.linalg

import hofem as hf
import hofem.multigrid as mg
from hofem import meshes
from hofem.bakeoff.common import emit_line
from hofem.bakeoff.problems import setup
from hofem.vector_ops import VectorOps


def pyamg_cycle(A_host, xp, cycles, ops, weighting, args):
    """An :class:`~hofem.multigrid.AMGCycle` of pyamg's own smoothed-aggregation hierarchy."""
    import pyamg

    smooth = ("jacobi", {"omega": 4.0 / 3.0, "weighting": weighting})
    ml = pyamg.smoothed_aggregation_solver(
        A_host.tocsr(), symmetry="hermitian", smooth=smooth, max_coarse=500
    )
    ops = VectorOps(xp) if ops is None else ops
    levels = []
    for level in ml.levels[:-1]:
        A = mg.device_matrix(level.A, xp)
        inv_diag = xp.asarray(1.0 / level.A.diagonal())
        lam = mg.estimate_max_eigenvalue(mg._matrix_apply(A, ops), inv_diag, ops, args.amg_eig)
        P, R = mg.device_matrix(level.P, xp), mg.device_matrix(level.R, xp)
        levels.append(mg.AMGLevel(A, inv_diag, lam, P, R))
    return mg.AMGCycle(
        levels, ml.levels[-1].A, xp, cycles, args.amg_degree, tuple(args.amg_bounds), ops
    )


def coarse_solver(args):
    """The replacement of :func:`hofem.multigrid.amg_solver` that ``--coarse`` names."""

    def solver(A_host, xp, cycles=1, ops=None):
        if args.coarse == "exact":
            lu = scipy.sparse.linalg.splu(A_host.tocsc())
            return lambda b: xp.asarray(lu.solve(np.asarray(b)))
        if args.coarse in ("local", "diagonal"):
            return pyamg_cycle(A_host, xp, cycles, ops, args.coarse, args)
        levels, coarsest = mg.smoothed_aggregation(A_host, xp, ops, eig_steps=args.amg_eig)
        return mg.AMGCycle(
            levels, coarsest, xp, cycles, args.amg_degree, tuple(args.amg_bounds), ops
        )

    return solver


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--p", type=int, default=4)
    parser.add_argument("--n", type=int, nargs="+", required=True, help="cells per side")
    choices = ("default", "local", "diagonal", "exact")
    parser.add_argument("--coarse", default="default", choices=choices)
    parser.add_argument("--coarse-cycles", type=int, default=1)
    parser.add_argument("--amg-degree", type=int, default=2)
    parser.add_argument("--amg-bounds", type=float, nargs=2, default=(0.3, 1.1))
    parser.add_argument("--amg-eig", type=int, default=10)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.coarse != "default":
        mg.amg_solver = coarse_solver(args)
    ceed = hf.Ceed(args.ceed)
    for n in args.n:
        prob = setup("bp3", ceed, args.p, meshes.box(n, 3))
        start = time.perf_counter()
        M = hf.pmg(prob.operator, coarse_cycles=args.coarse_cycles)
        setup_s = time.perf_counter() - start
        start = time.perf_counter()
        _, info = hf.cg(prob.operator, prob.rhs, M=M, rtol=1e-8)
        record = dict(
            p=args.p, n=n, dofs=prob.space.num_dofs, order1_rows=M.hierarchy.operators[-1].shape[0],
            coarse=args.coarse, coarse_cycles=args.coarse_cycles, amg_degree=args.amg_degree,
            amg_bounds=list(args.amg_bounds), iterations=info.iterations, converged=info == 0,
            precond_setup_s=setup_s, solve_s=time.perf_counter() - start,
        )  # fmt: skip
        emit_line(args.out, record)


if __name__ == "__main__":
    main()
