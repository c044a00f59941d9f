"""Three-component versions of the mass and Poisson applies (BP2, BP4, BP6).

Vector gradients are ordered ``[dim][comp]``: ``du[d * 3 + c]``.
"""

from hofem.constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE
from hofem.qfunction_registry import register_gallery

from .poisson import QDATA_SIZE


def vector3_mass_apply(ctx, u, qdata, v):
    for c in range(3):
        v[c] = qdata[0] * u[c]


def vector3_poisson_1d_apply(ctx, du, qdata, dv):
    for c in range(3):
        dv[c] = qdata[0] * du[c]


def vector3_poisson_2d_apply(ctx, du, qdata, dv):
    for c in range(3):
        dv[c] = qdata[0] * du[c] + qdata[2] * du[3 + c]
        dv[3 + c] = qdata[2] * du[c] + qdata[1] * du[3 + c]


def vector3_poisson_3d_apply(ctx, du, qdata, dv):
    for c in range(3):
        dv[c] = qdata[0] * du[c] + qdata[5] * du[3 + c] + qdata[4] * du[6 + c]
        dv[3 + c] = qdata[5] * du[c] + qdata[1] * du[3 + c] + qdata[3] * du[6 + c]
        dv[6 + c] = qdata[4] * du[c] + qdata[3] * du[3 + c] + qdata[2] * du[6 + c]


@register_gallery("Vector3MassApply")
def _vector3_mass_apply():
    inputs = [("u", 3, EVAL_INTERP), ("qdata", 1, EVAL_NONE)]
    return vector3_mass_apply, inputs, [("v", 3, EVAL_INTERP)], None


def _poisson(func, dim):
    def factory():
        inputs = [("du", 3 * dim, EVAL_GRAD), ("qdata", QDATA_SIZE[dim], EVAL_NONE)]
        return func, inputs, [("dv", 3 * dim, EVAL_GRAD)], None

    return factory


for _dim, _func in (
    (1, vector3_poisson_1d_apply),
    (2, vector3_poisson_2d_apply),
    (3, vector3_poisson_3d_apply),
):
    register_gallery(f"Vector3Poisson{_dim}DApply")(_poisson(_func, _dim))
