"""
Write your own QFunction: variable-coefficient Poisson
======================================================

Solve :math:`-\\nabla \\cdot (k \\nabla u) = f` on the unit square with
:math:`u = 0` on the boundary, for the coefficient
:math:`k(x, y) = 1 + x^2 + y^2`, with a QFunction written here, then check
that the error falls at the rates finite-element theory predicts:
:math:`h^{p+1}` in L2 and :math:`h^p` in the H1 seminorm.
"""

import matplotlib.pyplot as plt
import numpy as np

import hofem as hf
from hofem import meshes

ceed = hf.Ceed("/cpu/self/ref")

# %%
# The QFunction
# -------------
# A QFunction is a plain Python function of a context and its fields, each an
# array of shape ``(size, Q)``. This one stores, at every quadrature point,
# the symmetric 2x2 matrix :math:`k\, w \det J\, J^{-1} J^{-T}` (three
# entries, libCEED's order ``00, 11, 01``), from the coordinates ``x``
# (``EVAL_INTERP``), their reference gradient ``dx`` (``EVAL_GRAD``,
# ``dx[d * 2 + c] = d x_c / d xi_d``) and the quadrature ``weights``. The body
# uses indexing and arithmetic only, so the same code runs vectorized (NumPy,
# CuPy) and pointwise inside the compiled Numba and CUDA kernels.


def variable_poisson_build(ctx, x, dx, weights, qdata):
    k = 1.0 + x[0] * x[0] + x[1] * x[1]
    w_det = k * weights[0] / (dx[0] * dx[3] - dx[1] * dx[2])
    qdata[0] = w_det * (dx[2] * dx[2] + dx[3] * dx[3])
    qdata[1] = w_det * (dx[0] * dx[0] + dx[1] * dx[1])
    qdata[2] = -w_det * (dx[0] * dx[2] + dx[1] * dx[3])


build_qf = ceed.QFunction(
    variable_poisson_build,
    inputs=[("x", 2, hf.EVAL_INTERP), ("dx", 4, hf.EVAL_GRAD), ("weights", 1, hf.EVAL_WEIGHT)],
    outputs=[("qdata", 3, hf.EVAL_NONE)],
)

# %%
# The operator on an H1 space
# ---------------------------
# :class:`hofem.H1Space` numbers the continuous nodes of order ``p`` on a
# mesh and provides the restriction, the bases and the node coordinates. The
# build operator runs once; the apply operator (the gallery's
# ``Poisson2DApply``: ``dv = qdata du``) reads the stored data.


def stiffness(space):
    """The operator ``(k grad u, grad v)`` on ``space``."""
    basis, geo = space.basis(), space.basis(num_comp=2)
    Q = basis.num_qpts
    r_x = space.make_restriction(2)
    r_q = ceed.StridedElemRestriction(
        space.num_elem, Q, 3, space.num_elem * Q * 3, hf.STRIDES_BACKEND
    )
    build = ceed.Operator(build_qf)
    build.set_field("x", r_x, geo, hf.VECTOR_ACTIVE)  # both read the coordinates
    build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
    build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
    build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
    qdata = build(space.coordinates)  # (num_elem * 3 * Q,)

    op = ceed.Operator(ceed.QFunctionByName("Poisson2DApply"))
    op.set_field("du", space.restriction, basis, hf.VECTOR_ACTIVE)
    op.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
    op.set_field("dv", space.restriction, basis, hf.VECTOR_ACTIVE)
    return op


# %%
# A check against the built-in form: :func:`hofem.diffusion` takes a
# coefficient too (evaluated in Python at the points, not in a QFunction);
# both are the same operator to round-off.

space = hf.H1Space(ceed, meshes.box(3, dim=2), order=3)
ours, builtin = stiffness(space), hf.diffusion(space, coefficient=lambda x: 1 + (x**2).sum(1))
v = ceed.asarray(np.random.default_rng(1).standard_normal(space.num_dofs))
print("max |ours(v) - hf.diffusion(v)| =", float(abs(ours(v) - builtin(v)).max()))

# %%
# A manufactured solution
# -----------------------
# :math:`u = \sin(\pi x) \sin(\pi y)` vanishes on the boundary; the
# right-hand side is :math:`f = -\nabla\cdot(k\nabla u) = 2\pi^2 k u - \nabla
# k \cdot \nabla u`.


def exact(x):
    return np.sin(np.pi * x[:, 0]) * np.sin(np.pi * x[:, 1])


def grad_exact(x):
    s, c = np.sin(np.pi * x), np.cos(np.pi * x)
    return np.pi * np.stack([c[:, 0] * s[:, 1], s[:, 0] * c[:, 1]], axis=1)


def rhs(x):
    k = 1 + (x**2).sum(axis=1)
    return 2 * np.pi**2 * k * exact(x) - 2 * (x * grad_exact(x)).sum(axis=1)


def solve(n, p):
    """(h, L2 error, H1 error, CG iterations) on an n x n mesh of order p."""
    space = hf.H1Space(ceed, meshes.box(n, dim=2), order=p)
    free = ceed.asarray(space.free_dofs())
    A = hf.restrict_dofs(stiffness(space), free)
    x, info = hf.cg(A, space.load_vector(rhs)[free], rtol=1e-12, M=hf.jacobi(A))
    assert info == 0, info.message
    u = ceed.xp.zeros(space.num_dofs)
    u[free] = x
    return (1 / n, *space.errors(u, exact, grad_exact), info.iterations)


# %%
# Convergence
# -----------
# Each order on three meshes; the fitted slopes of log error against log h
# are the convergence rates.

results = {p: np.array([solve(n, p) for n in (2, 4, 8)]) for p in (1, 2, 3)}
fig, ax = plt.subplots(figsize=(6, 4.5))
for p, r in results.items():
    l2_rate = np.polyfit(np.log(r[:, 0]), np.log(r[:, 1]), 1)[0]
    h1_rate = np.polyfit(np.log(r[:, 0]), np.log(r[:, 2]), 1)[0]
    print(f"p = {p}: L2 rate {l2_rate:.2f} (expect {p + 1}), H1 rate {h1_rate:.2f} (expect {p})")
    assert l2_rate > p + 0.7 and h1_rate > p - 0.3
    ax.loglog(r[:, 0], r[:, 1], "o-", label=f"L2, p = {p} (rate {l2_rate:.2f})")
    ax.loglog(r[:, 0], r[:, 2], "s--", label=f"H1, p = {p} (rate {h1_rate:.2f})")
ax.set_xlabel("h")
ax.set_ylabel("error")
ax.set_title(r"$-\nabla\cdot(k\nabla u) = f$, $k = 1 + x^2 + y^2$")
ax.legend(fontsize=8)
fig.tight_layout()
