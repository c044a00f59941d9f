"""A/B of the smoothed-aggregation candidate step: BP3 PCG iterations with ``hf.pmg`` whose
order-1 AMG improves ``B = ones`` by each variant (host Gauss-Seidel, Chebyshev, Jacobi).

Usage::

    python bakeoff/amg_candidate_ab.py --ceed /cpu/self/numba --cells hex --orders 1 2 \
        --dofs 1e4 1e5 --out bakeoff/results/cpu/amg_candidate.jsonl
    python bakeoff/amg_candidate_ab.py --ceed /cpu/self/ref --mesh lshape_hex.msh --orders 2 \
        --out bakeoff/results/cpu/amg_candidate.jsonl

The fine levels are built once per case (``hf.pmg``); only the AMG hierarchy is rebuilt per
variant, from the same order-1 matrix, and replaces the preconditioner's coarse solve.
One JSON line per case and variant, appended to ``--out``.
"""

import argparse
import time

import numpy as np
import scipy.sparse
from pmg_measure import problem

import hofem as hf
import hofem.multigrid as mg
from hofem import meshes
from hofem.bakeoff.common import emit_line
from hofem.bakeoff.problems import setup


def gauss_seidel(A, A_x, inv_diag, lam, B, ops):
    """The current step: pyamg's 4 symmetric host sweeps."""
    from pyamg.relaxation.relaxation import gauss_seidel

    gauss_seidel(A, B, np.zeros_like(B), iterations=4, sweep="symmetric")
    return B


def chebyshev(degree, lo):
    def step(A, A_x, inv_diag, lam, B, ops):
        smoother = mg.Chebyshev(mg._matrix_apply(A_x, ops), inv_diag, lam, degree, (lo, 1.1), ops)
        x = ops.xp.asarray(B)
        smoother.smooth(ops.xp.zeros_like(x), x)
        return x

    return step


def jacobi(steps, l1):
    def step(A, A_x, inv_diag, lam, B, ops):
        xp = ops.xp
        if l1:  # D_l1^-1: the absolute row sums
            scale = xp.asarray(1.0 / np.asarray(abs(A).sum(axis=1)).ravel())
        else:
            scale = inv_diag * (4.0 / 3.0 / lam)
        x, Ax = xp.asarray(B).copy(), xp.empty_like(inv_diag)
        for _ in range(steps):
            ops.csr_matvec(A_x, x, Ax)
            x -= scale * Ax
        return x

    return step


VARIANTS = {"gs": gauss_seidel}
for k in (4, 6, 8):
    for lo, name in ((0.1, "10"), (1 / 30, "30")):
        VARIANTS[f"cheb{k}_{name}"] = chebyshev(k, lo)
for s in (8, 16):
    VARIANTS[f"jac{s}"] = jacobi(s, False)
    VARIANTS[f"l1jac{s}"] = jacobi(s, True)


def hierarchy(A_host, xp, ops, candidate, max_coarse=500, max_levels=10, eig_steps=10):
    """:func:`hofem.multigrid.smoothed_aggregation` with ``candidate`` as its first step."""
    from pyamg.aggregation import standard_aggregation

    A = scipy.sparse.csr_matrix(A_host)
    A_x = mg.device_matrix(A, xp)
    levels, B = [], None
    while A.shape[0] > max_coarse and len(levels) < max_levels - 1:
        aggregates = standard_aggregation(A)[0]
        if not 0 < aggregates.shape[1] < A.shape[0]:
            break
        if not levels:  # the level's estimate again in _smoothed_level: the same seed and value
            inv_diag = xp.asarray(1.0 / A.diagonal())
            lam = mg._level_estimate(A, A_x, inv_diag, xp, ops, eig_steps)
            B = candidate(A, A_x, inv_diag, lam, np.ones(A.shape[0]), ops)
            B = B if xp is np else B.get()
        level, B = mg._smoothed_level(A_x, A, aggregates, B, xp, ops, eig_steps, 4.0 / 3.0)
        levels.append(level)
        A_x = level.R @ A_x @ level.P
        A = mg._host_coarse_matrix(A_x, xp)
    return levels, A


def refined(mesh, m):
    """The order-1 hexahedral ``mesh`` with each cell split into ``m^3`` by its trilinear map
    (the whole boundary tagged): a Gmsh mesh large enough for an AMG level."""
    t = np.linspace(0.0, 1.0, m + 1)
    z, y, x = np.meshgrid(t, t, t, indexing="ij")  # x fastest, as the corners
    u = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)  # ((m+1)^3, 3)
    bits = np.array([[a, b, c] for c in (0, 1) for b in (0, 1) for a in (0, 1)])  # (8, 3)
    shape = np.prod(np.where(bits[None], u[:, None], 1 - u[:, None]), axis=2)  # ((m+1)^3, 8)
    points = np.einsum("gk,ekd->egd", shape, mesh.points[mesh.cells])  # (cells, (m+1)^3, 3)
    points = points.reshape(-1, 3)
    _, first, ids = np.unique(np.round(points, 12), axis=0, return_index=True, return_inverse=True)
    lattice = np.arange((m + 1) ** 3).reshape(m + 1, m + 1, m + 1)  # [k, j, i]
    corners = [(a, b, c) for c in (0, 1) for b in (0, 1) for a in (0, 1)]
    sub = np.array([[lattice[k + c, j + b, i + a] for a, b, c in corners]
                    for k in range(m) for j in range(m) for i in range(m)])  # fmt: skip
    cells = (np.arange(len(mesh.cells))[:, None, None] * (m + 1) ** 3 + sub[None]).reshape(-1, 8)
    return meshes.Mesh(points[first], "hexahedron", ids.ravel()[cells])


def run_case(args, label, prob, extra):
    captured = {}
    original = mg.amg_solver

    def capture(A_host, xp, cycles=1, ops=None, max_coarse=500):
        captured.update(A_host=A_host, xp=xp, cycles=cycles, ops=ops)
        return original(A_host, xp, cycles, ops, max_coarse)

    mg.amg_solver = capture
    try:
        M = hf.pmg(prob.operator)
    finally:
        mg.amg_solver = original
    _, info = hf.cg(prob.operator, prob.rhs, M=M, rtol=1e-8)
    base = info.iterations
    xp, ops = captured["xp"], captured["ops"] or mg.VectorOps(captured["xp"])
    row = {"default": base}
    for name in args.variants:
        start = time.perf_counter()
        levels, coarsest = hierarchy(captured["A_host"], xp, ops, VARIANTS[name])
        amg = mg.AMGCycle(levels, coarsest, xp, captured["cycles"], ops=ops)
        build_s = time.perf_counter() - start
        M.coarse = amg
        if M._whole is not None:
            M._whole.coarse = amg
        _, info = hf.cg(prob.operator, prob.rhs, M=M, rtol=1e-8)
        row[name] = info.iterations
        record = dict(case=label, dofs=prob.space.num_dofs, variant=name,
                      iterations=info.iterations, converged=info == 0, amg_setup_s=build_s,
                      default_iterations=base, amg_rows=captured["A_host"].shape[0],
                      **extra)  # fmt: skip
        emit_line(args.out, record)
    print(label, prob.space.num_dofs, row, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--cells", nargs="+", default=["hex"])
    parser.add_argument("--orders", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--dofs", nargs="+", type=float, default=[1e4])
    parser.add_argument("--mesh", help="a mesh of hofem.meshes.data_path instead of boxes")
    parser.add_argument("--refine", type=int, default=1, help="--mesh hexes split m^3 each")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ceed = hf.Ceed(args.ceed)
    if args.mesh:
        mesh = meshes.read(meshes.data_path(args.mesh))
        if args.refine > 1:
            mesh = refined(mesh, args.refine)
        label = f"{args.mesh} x{args.refine}^3"
        for p in args.orders:
            extra = {"p": p, "refine": args.refine}
            run_case(args, f"{label} p={p}", setup("bp3", ceed, p, mesh), extra)
        return
    for cell in args.cells:
        for dofs in args.dofs:
            for p in args.orders:
                n, prob = problem(ceed, cell, p, dofs)
                run_case(args, f"{cell} p={p} n={n}", prob, {"cell": cell, "p": p, "n": n})


if __name__ == "__main__":
    main()
