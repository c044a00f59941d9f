"""Iteration counts and residual gaps of hf.cg's variants against standard CG.

``PYTHONPATH=$PWD NUMBA_NUM_THREADS=1 python bakeoff/cg_variants_rounding.py [RESOURCE]``
prints one line per (problem, preconditioner, rtol): for each variant the status, the
iteration count, the true relative residual ``||b - A x|| / ||b||`` at the stop and the
residual gap ``| true - recursive | / recursive`` (the recursive residual is the one the
stopping test reads).  Problems: BP1/BP3 on small boxes (none, Jacobi, pmg) and dense
SPD matrices with logarithmically spaced eigenvalues.  Output kept in
``bakeoff/results/cpu/cg_variants_rounding.txt``; summary in docs/solvers.md, "CG variants".
"""

import sys

import numpy as np

import hofem as hf
from hofem import meshes
from hofem.bakeoff.problems import setup

VARIANTS = ("standard", "single_reduction", "pipelined")


def run(name, A, b, apply, preconditioners, rtols):
    b_norm = np.linalg.norm(b)
    for m_name, M in preconditioners:
        for rtol in rtols:
            row = []
            for variant in VARIANTS:
                x, info = hf.cg(A, b, rtol=rtol, M=M, variant=variant, maxiter=20000)
                true = np.linalg.norm(b - apply(x)) / b_norm
                recursive = info.residual_norm / b_norm
                gap = abs(true - recursive) / max(recursive, 1e-300)
                row.append(
                    f"{variant[:6]} {int(info):2d} {info.iterations:5d} true {true:.1e} "
                    f"gap {gap:.1e}"
                )
            print(f"{name:22s} {m_name:6s} rtol {rtol:.0e} | " + " | ".join(row), flush=True)


def main(resource):
    ceed = hf.Ceed(resource)
    for bp, p, n in (("bp1", 3, 4), ("bp3", 3, 4), ("bp3", 4, 8), ("bp1", 6, 3)):
        problem = setup(bp, ceed, p, meshes.box(n))
        A, b = problem.operator, problem.rhs
        preconditioners = [("none", None), ("jacobi", hf.jacobi(A))]
        if bp == "bp3":
            preconditioners.append(("pmg", hf.pmg(A)))
        run(f"{bp} p={p} n={n} ({A.shape[0]})", A, b, A, preconditioners, (1e-8, 1e-12))
    rng = np.random.default_rng(0)
    for n, condition in ((300, 1e3), (300, 1e6), (2000, 1e4)):
        Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
        A = (Q * np.logspace(0, np.log10(condition), n)) @ Q.T
        b = rng.standard_normal(n)
        preconditioners = [("none", None), ("jacobi", np.diag(1 / np.diag(A)))]
        run(f"dense n={n} k={condition:.0e}", A, b, lambda x, A=A: A @ x, preconditioners,
            (1e-6, 1e-8, 1e-10))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/cpu/self/numba")
