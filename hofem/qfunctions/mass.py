"""Mass matrix QFunctions: ``Mass{1,2,3}DBuild`` store ``w det J``; ``MassApply`` applies it.

Geometry inputs ``dx`` are gradients of the coordinate field, ordered
``[dim][comp]``: ``dx[d * dim + c] = d x_c / d xi_d``.
"""

from hofem.constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from hofem.qfunction_registry import register_gallery


def mass_1d_build(ctx, dx, weights, qdata):
    qdata[0] = weights[0] * dx[0]


def det_2d(dx):
    """``det(A)`` of the 2x2 Jacobian ``A[d][c] = dx[d * 2 + c]``."""
    return dx[0] * dx[3] - dx[1] * dx[2]


def det_3d(dx):
    """``det(A)`` of the 3x3 Jacobian ``A[d][c] = dx[d * 3 + c]`` (cofactors of row 0)."""
    return (
        dx[0] * (dx[4] * dx[8] - dx[5] * dx[7])
        - dx[1] * (dx[3] * dx[8] - dx[5] * dx[6])
        + dx[2] * (dx[3] * dx[7] - dx[4] * dx[6])
    )


def mass_2d_build(ctx, dx, weights, qdata):
    qdata[0] = weights[0] * det_2d(dx)


def mass_3d_build(ctx, dx, weights, qdata):
    qdata[0] = weights[0] * det_3d(dx)


def mass_apply(ctx, u, qdata, v):
    v[0] = qdata[0] * u[0]


def _build(func, dim):
    def factory():
        inputs = [("dx", dim * dim, EVAL_GRAD), ("weights", 1, EVAL_WEIGHT)]
        return func, inputs, [("qdata", 1, EVAL_NONE)], None

    return factory


register_gallery("Mass1DBuild")(_build(mass_1d_build, 1))
register_gallery("Mass2DBuild")(_build(mass_2d_build, 2))
register_gallery("Mass3DBuild")(_build(mass_3d_build, 3))


@register_gallery("MassApply")
def _mass_apply():
    inputs = [("u", 1, EVAL_INTERP), ("qdata", 1, EVAL_NONE)]
    return mass_apply, inputs, [("v", 1, EVAL_INTERP)], None
