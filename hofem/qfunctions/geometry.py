"""Mass and Poisson applies that compute the geometry at each point (no stored q-data).

``{Vector3}Mass{d}DApplyGeometry`` and ``{Vector3}Poisson{d}DApplyGeometry``
(``d`` = 1, 2, 3) take the active field (``u``: INTERP, or ``du``: GRAD), the
gradient of the coordinate field ``dx`` (GRAD, ``dx[d * dim + c] = d x_c /
d xi_d``) and the quadrature ``weights`` (WEIGHT), and apply at the point what
``Mass{d}DBuild`` / ``Poisson{d}DBuild`` would have stored: ``w det J`` and
``w det J J^{-1} J^{-T}`` (in reference gradient coordinates, as
``w / det(A) adj(A)^T adj(A)`` with ``A = dx``), times the context's
``scale`` (a constant coefficient, default 1).  Each is written as the cell's
part (``scale det`` or ``scale / det adj^T adj``, from ``dx`` alone) times the
point's weight times the field, so that on affine cells (where ``dx`` is the
element's, :func:`hofem.cell_center`) the cell's part is the same at every
point and compilers hoist it out of the point loop: the 3D Poisson apply
then costs 3 multiplications and 9 multiply-adds per point.  Vector3 forms apply it to
each of 3 components (gradients ordered ``[dim][comp]``: ``du[d * 3 + c]``).
"""

from hofem.constants import EVAL_GRAD, EVAL_INTERP, EVAL_WEIGHT
from hofem.qfunction_registry import register_gallery
from hofem.qfunctions.mass import det_2d, det_3d
from hofem.qfunctions.poisson import adjugate_products_2d, adjugate_products_3d


def mass_1d_apply_geometry(ctx, u, dx, weights, v):
    v[0] = (ctx["scale"] * dx[0]) * (weights[0] * u[0])


def mass_2d_apply_geometry(ctx, u, dx, weights, v):
    v[0] = (ctx["scale"] * det_2d(dx)) * (weights[0] * u[0])


def mass_3d_apply_geometry(ctx, u, dx, weights, v):
    v[0] = (ctx["scale"] * det_3d(dx)) * (weights[0] * u[0])


def vector3_mass_1d_apply_geometry(ctx, u, dx, weights, v):
    s = ctx["scale"] * dx[0]
    for c in range(3):
        v[c] = s * (weights[0] * u[c])


def vector3_mass_2d_apply_geometry(ctx, u, dx, weights, v):
    s = ctx["scale"] * det_2d(dx)
    for c in range(3):
        v[c] = s * (weights[0] * u[c])


def vector3_mass_3d_apply_geometry(ctx, u, dx, weights, v):
    s = ctx["scale"] * det_3d(dx)
    for c in range(3):
        v[c] = s * (weights[0] * u[c])


def poisson_1d_apply_geometry(ctx, du, dx, weights, dv):
    dv[0] = (ctx["scale"] / dx[0]) * (weights[0] * du[0])


def vector3_poisson_1d_apply_geometry(ctx, du, dx, weights, dv):
    s = ctx["scale"] / dx[0]
    for c in range(3):
        dv[c] = s * (weights[0] * du[c])


def _geometry_2d(ctx, dx):
    """``(q00, q11, q01)``: ``scale / det(A) adj(A)^T adj(A)``, the cell's part."""
    det, p00, p11, p01 = adjugate_products_2d(dx)
    s = ctx["scale"] / det
    return s * p00, s * p11, -s * p01


def poisson_2d_apply_geometry(ctx, du, dx, weights, dv):
    q00, q11, q01 = _geometry_2d(ctx, dx)
    u0, u1 = weights[0] * du[0], weights[0] * du[1]
    dv[0] = q00 * u0 + q01 * u1
    dv[1] = q01 * u0 + q11 * u1


def vector3_poisson_2d_apply_geometry(ctx, du, dx, weights, dv):
    q00, q11, q01 = _geometry_2d(ctx, dx)
    for c in range(3):
        u0, u1 = weights[0] * du[c], weights[0] * du[3 + c]
        dv[c] = q00 * u0 + q01 * u1
        dv[3 + c] = q01 * u0 + q11 * u1


def _geometry_3d(ctx, dx):
    """``(q00, q11, q22, q12, q02, q01)``: ``scale / det(A) adj(A)^T adj(A)``, the cell's
    part (libCEED's q-data order)."""
    det, *products = adjugate_products_3d(dx)
    s = ctx["scale"] / det
    return tuple(s * p for p in products)


def poisson_3d_apply_geometry(ctx, du, dx, weights, dv):
    q00, q11, q22, q12, q02, q01 = _geometry_3d(ctx, dx)
    u0, u1, u2 = weights[0] * du[0], weights[0] * du[1], weights[0] * du[2]
    dv[0] = q00 * u0 + q01 * u1 + q02 * u2
    dv[1] = q01 * u0 + q11 * u1 + q12 * u2
    dv[2] = q02 * u0 + q12 * u1 + q22 * u2


def vector3_poisson_3d_apply_geometry(ctx, du, dx, weights, dv):
    q00, q11, q22, q12, q02, q01 = _geometry_3d(ctx, dx)
    for c in range(3):
        u0, u1, u2 = weights[0] * du[c], weights[0] * du[3 + c], weights[0] * du[6 + c]
        dv[c] = q00 * u0 + q01 * u1 + q02 * u2
        dv[3 + c] = q01 * u0 + q11 * u1 + q12 * u2
        dv[6 + c] = q02 * u0 + q12 * u1 + q22 * u2


def _factory(func, dim, num_comp, eval_mode):
    size = num_comp * (dim if eval_mode is EVAL_GRAD else 1)
    name_in, name_out = ("du", "dv") if eval_mode is EVAL_GRAD else ("u", "v")

    def factory(scale=1.0):
        inputs = [
            (name_in, size, eval_mode),
            ("dx", dim * dim, EVAL_GRAD),
            ("weights", 1, EVAL_WEIGHT),
        ]
        return func, inputs, [(name_out, size, eval_mode)], {"scale": float(scale)}

    return factory


_GALLERY = {
    "Mass1DApplyGeometry": (mass_1d_apply_geometry, 1, 1, EVAL_INTERP),
    "Mass2DApplyGeometry": (mass_2d_apply_geometry, 2, 1, EVAL_INTERP),
    "Mass3DApplyGeometry": (mass_3d_apply_geometry, 3, 1, EVAL_INTERP),
    "Vector3Mass1DApplyGeometry": (vector3_mass_1d_apply_geometry, 1, 3, EVAL_INTERP),
    "Vector3Mass2DApplyGeometry": (vector3_mass_2d_apply_geometry, 2, 3, EVAL_INTERP),
    "Vector3Mass3DApplyGeometry": (vector3_mass_3d_apply_geometry, 3, 3, EVAL_INTERP),
    "Poisson1DApplyGeometry": (poisson_1d_apply_geometry, 1, 1, EVAL_GRAD),
    "Poisson2DApplyGeometry": (poisson_2d_apply_geometry, 2, 1, EVAL_GRAD),
    "Poisson3DApplyGeometry": (poisson_3d_apply_geometry, 3, 1, EVAL_GRAD),
    "Vector3Poisson1DApplyGeometry": (vector3_poisson_1d_apply_geometry, 1, 3, EVAL_GRAD),
    "Vector3Poisson2DApplyGeometry": (vector3_poisson_2d_apply_geometry, 2, 3, EVAL_GRAD),
    "Vector3Poisson3DApplyGeometry": (vector3_poisson_3d_apply_geometry, 3, 3, EVAL_GRAD),
}
for _name, _entry in _GALLERY.items():
    register_gallery(_name)(_factory(*_entry))
