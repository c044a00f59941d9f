"""
From a restriction to CG: the operator algebra
==============================================

An L2 projection on the unit square, built one libCEED object at a time:
the element restriction **G**, the basis **B**, the pointwise QFunction **D**,
composed into the mass operator :math:`M = G^T B^T D B G`, then a right-hand
side :math:`b = G^T B^T (w \\det J f)` and a CG solve of :math:`M u = b`.
No mesh module is used: the numbering is written out by hand.
"""

import matplotlib.pyplot as plt
import numpy as np

import hofem as hf

ceed = hf.Ceed("/cpu/self/ref")

# %%
# The mesh and its numbering
# --------------------------
# ``n x n`` quadrilaterals of order ``p``: ``P = p + 1`` Gauss-Lobatto nodes
# per direction and element, ``N = n p + 1`` nodes per direction globally.
# The nodes of element ``(ex, ey)`` are a ``P x P`` block of the global grid,
# lexicographic with x fastest: that block, flattened, is the element's row of
# ``offsets``.

n, p = 4, 4
P, N = p + 1, n * p + 1
x1d = np.concatenate(
    [(ex + (hf.lobatto_quadrature(P)[0][:-1] + 1) / 2) / n for ex in range(n)] + [[1.0]]
)  # (N,) node coordinates on [0, 1]
node = np.arange(N * N).reshape(N, N)  # node[iy, ix]
offsets = np.array(
    [node[ey * p : ey * p + P, ex * p : ex * p + P].ravel() for ey in range(n) for ex in range(n)]
)  # (num_elem, P^2)
num_elem = n * n
X, Y = np.meshgrid(x1d, x1d)  # (N, N) each
coords = np.concatenate([X.ravel(), Y.ravel()])  # (2 N^2,): x of every node, then y
print(f"{num_elem} elements, {N * N} nodes, offsets {offsets.shape}")

# %%
# G: restrictions
# ---------------
# An L-vector (one value per global node) becomes an E-vector, one copy per
# element: ``(num_elem, num_comp, P^2)``. The coordinate field has two
# components ``comp_stride = N^2`` apart. Quadrature data is stored per point
# in the backend's own strided layout.

q = P + 1  # Gauss points per direction
r_u = ceed.ElemRestriction(num_elem, P * P, 1, 1, N * N, offsets)
r_x = ceed.ElemRestriction(num_elem, P * P, 2, N * N, 2 * N * N, offsets)
r_q = ceed.StridedElemRestriction(num_elem, q * q, 1, num_elem * q * q, hf.STRIDES_BACKEND)
e = r_u.apply(ceed.asarray(np.arange(N * N, dtype=float)))
print("E-vector", e.shape, "multiplicity max", float(r_u.multiplicity().max()))

# %%
# B: the basis
# ------------
# A tensor Lagrange basis evaluates values and reference gradients at the
# ``q x q`` Gauss points by sum factorization.

basis = ceed.BasisTensorH1Lagrange(2, 1, P, q, hf.GAUSS)
geo = ceed.BasisTensorH1Lagrange(2, 2, P, q, hf.GAUSS)
dx = geo.apply(num_elem, hf.NOTRANSPOSE, hf.EVAL_GRAD, r_x.apply(ceed.asarray(coords)))
print("reference gradient of the coordinates", dx.shape)  # (elements, dim, comp, points)

# %%
# D: QFunctions and operators
# ---------------------------
# The gallery's ``Mass2DBuild`` stores ``w det J`` at every point once;
# ``MassApply`` multiplies by it. An operator binds each QFunction field to a
# restriction, a basis and a vector.

build = ceed.Operator(ceed.QFunctionByName("Mass2DBuild"))
build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
qdata = build(ceed.asarray(coords))  # (num_elem * q^2,)

mass = ceed.Operator(ceed.QFunctionByName("MassApply"))
mass.set_field("u", r_u, basis, hf.VECTOR_ACTIVE)
mass.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
mass.set_field("v", r_u, basis, hf.VECTOR_ACTIVE)
ones = ceed.asarray(np.ones(N * N))
print(f"area = 1^T M 1 = {float(ones @ mass(ones)):.15f}")

# %%
# The right-hand side, with the same pieces
# -----------------------------------------
# :math:`b_i = \int f \phi_i`: interpolate the coordinates to the points
# (B G), evaluate ``f`` there, multiply by ``w det J`` (the stored qdata), and
# go back with the transposes (B^T, then G^T sums the element contributions).


def f(x, y):
    return np.sin(np.pi * x) * np.cos(np.pi * y) + x * y


xq = geo.apply(num_elem, hf.NOTRANSPOSE, hf.EVAL_INTERP, r_x.apply(ceed.asarray(coords)))
fq = f(xq[:, 0], xq[:, 1]) * r_q.apply(qdata)[:, 0]  # (num_elem, q^2)
b = r_u.apply(basis.apply(num_elem, hf.TRANSPOSE, hf.EVAL_INTERP, fq[:, None]), hf.TRANSPOSE)

# %%
# Solve with CG
# -------------
# ``hf.cg`` takes any operator; ``hf.jacobi`` builds the diagonal
# preconditioner from ``linear_assemble_diagonal``. The projection of ``f``
# onto polynomials of order 4 is close to ``f`` itself.

u, info = hf.cg(mass, b, rtol=1e-12, M=hf.jacobi(mass))
error = np.abs(ceed.to_numpy(u) - f(coords[: N * N], coords[N * N :])).max()
print(f"CG: info {int(info)}, {info.iterations} iterations; max |u - f| at the nodes {error:.1e}")
assert info == 0 and error < 1e-4

# %%
# The same operator, assembled
# ----------------------------
# ``linear_assemble`` gives the sparse matrix the operator applies (for
# checks, direct solvers, preconditioners); its pattern shows the element
# blocks coupling through shared edges and vertices.

M = mass.linear_assemble()  # scipy.sparse CSR
assert np.allclose(M @ ceed.to_numpy(u), ceed.to_numpy(mass(u)), atol=1e-14)

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 4))
ax0.spy(M, markersize=0.5)
ax0.set_title(f"M: {M.shape[0]} x {M.shape[1]}, {M.nnz} nonzeros")
image = ax1.contourf(X, Y, ceed.to_numpy(u).reshape(N, N), levels=20, cmap="viridis")
ax1.plot(X[:, ::p], Y[:, ::p], "k-", X[::p].T, Y[::p].T, "k-", lw=0.3)  # element edges
ax1.set_aspect("equal")
ax1.set_title("u: the L2 projection of f")
fig.colorbar(image, ax=ax1)
fig.tight_layout()
