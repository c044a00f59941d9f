"""
hofem operators in SciPy's and CuPy's solvers
=============================================

``op.as_linear_operator()`` wraps any hofem operator as a
:class:`scipy.sparse.linalg.LinearOperator` (a
:class:`cupyx.scipy.sparse.linalg.LinearOperator` on a GPU backend), so
SciPy's Krylov solvers and eigensolvers run on it matrix-free. Three uses on
the unit square, order 3, with :math:`u = 0` on the boundary: CG on the
Laplacian, GMRES on an indefinite Helmholtz operator, and the smallest
eigenvalues of the Laplacian with ``eigsh`` in shift-invert mode, where the
inverse is itself a hofem CG solve.
"""

import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse.linalg as sla

import hofem as hf
from hofem import meshes

ceed = hf.Ceed("/cpu/self/ref")
space = hf.H1Space(ceed, meshes.box(6, dim=2), order=3)
free = ceed.asarray(space.free_dofs())
K = hf.restrict_dofs(hf.diffusion(space), free)  # stiffness, free DOFs only
M = hf.restrict_dofs(hf.mass(space), free)  # mass
n = len(free)
b = space.load_vector(lambda x: np.ones(len(x)))[free]
print(f"{n} free DOFs")

# %%
# CG
# --
# SciPy's ``cg`` with the operator and a Jacobi preconditioner, both as
# ``LinearOperator``; hofem's own :func:`hofem.cg` agrees.

diag = K.linear_assemble_diagonal()
jacobi = sla.LinearOperator((n, n), matvec=lambda r: r / diag, dtype=np.float64)
residuals = []
u, info = sla.cg(
    K.as_linear_operator(),
    b,
    rtol=1e-10,
    M=jacobi,
    callback=lambda xk: residuals.append(np.linalg.norm(b - K(xk))),
)
u_hf, info_hf = hf.cg(K, b, rtol=1e-10, M=hf.jacobi(K))
print(f"scipy cg: {len(residuals)} iterations; hofem cg: {info_hf.iterations} iterations")
print("max difference:", float(abs(u - u_hf).max()))

# %%
# GMRES on an indefinite operator
# -------------------------------
# :math:`K - \sigma M` with :math:`\sigma = 60`, beyond the two smallest
# eigenvalues, is symmetric but indefinite: CG is not made for it; GMRES is.
# :meth:`hofem.Ceed.CompositeOperator` sums operators; the shift is a mass
# form with the coefficient :math:`-\sigma`.

sigma = 60.0
helmholtz = hf.restrict_dofs(
    ceed.CompositeOperator([hf.diffusion(space), hf.mass(space, coefficient=-sigma)]), free
)
gmres_residuals = []
w, info = sla.gmres(
    helmholtz.as_linear_operator(),
    b,
    rtol=1e-10,
    restart=200,
    callback=gmres_residuals.append,
    callback_type="pr_norm",
)
assert info == 0
print(f"gmres: {len(gmres_residuals)} iterations, residual {np.linalg.norm(b - helmholtz(w)):.1e}")

# %%
# Eigenvalues with eigsh
# ----------------------
# The generalized problem :math:`K x = \lambda M x`: ``eigsh`` in
# shift-invert mode around 0 needs :math:`K^{-1}`, given here as a
# ``LinearOperator`` whose ``matvec`` is a preconditioned hofem CG solve. The
# exact eigenvalues of the Dirichlet Laplacian on the unit square are
# :math:`\pi^2 (i^2 + j^2)`.


def solve_k(r):
    x, info = hf.cg(K, r, rtol=1e-12, M=hf.jacobi(K))
    assert info == 0, info.message
    return x


K_inv = sla.LinearOperator((n, n), matvec=solve_k, dtype=np.float64)
lam = sla.eigsh(K.as_linear_operator(), k=6, M=M.as_linear_operator(), sigma=0.0, OPinv=K_inv)[0]
exact = np.sort([np.pi**2 * (i * i + j * j) for i in range(1, 4) for j in range(1, 4)])[:6]
for computed, expected in zip(lam, exact, strict=True):
    print(f"lambda = {computed:9.5f}, exact {expected:9.5f}, error {computed / expected - 1:.1e}")
assert np.allclose(lam, exact, rtol=1e-3)

fig, ax = plt.subplots(figsize=(6, 4))
ax.semilogy(np.array(residuals) / np.linalg.norm(b), label="scipy cg (Jacobi), K")
ax.semilogy(np.array(gmres_residuals), label=f"scipy gmres, K - {sigma:g} M")
ax.set_xlabel("iteration")
ax.set_ylabel("relative residual")
ax.legend()
fig.tight_layout()

# %%
# On a GPU, with CuPy
# -------------------
# The same code runs on ``/gpu/cuda``: vectors are CuPy arrays and
# ``as_linear_operator()`` returns a ``cupyx.scipy.sparse.linalg``
# operator, so CuPy's solvers take it. Not executed when this site is built
# (it needs a CUDA device and ``pip install hofem[gpu]``):
#
# .. code-block:: python
#
#     import cupy as cp
#     import cupyx.scipy.sparse.linalg as csla
#     import numpy as np
#
#     import hofem as hf
#     from hofem import meshes
#
#     ceed = hf.Ceed("/gpu/cuda")
#     space = hf.H1Space(ceed, meshes.box(32, dim=3), order=4)
#     free = ceed.asarray(space.free_dofs())
#     K = hf.restrict_dofs(hf.diffusion(space), free)
#     b = space.load_vector(lambda x: np.ones(len(x)))[free]  # a CuPy array
#
#     u, info = csla.cg(K.as_linear_operator(), b, tol=1e-8)    # CuPy's CG
#     u2, info2 = hf.cg(K, b, rtol=1e-8, M=hf.jacobi(K))          # hofem's, on the GPU
#     lam = csla.eigsh(K.as_linear_operator(), k=4, which="LA")[0]  # largest eigenvalues
#     print(float(cp.abs(u - u2).max()), info2.iterations, lam)
