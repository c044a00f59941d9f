"""Poisson (stiffness) QFunctions: ``Poisson{1,2,3}DBuild`` and ``Poisson{1,2,3}DApply``.

Build stores the symmetric ``w det J J^{-1} J^{-T}`` (in reference gradient
coordinates) per point: 1 value in 1D, 3 in 2D ``(00, 11, 01)``, 6 in 3D
``(00, 11, 22, 12, 02, 01)``, libCEED's order.  Apply computes ``dv = qdata du``.
``dx[d * dim + c] = d x_c / d xi_d``; with ``adj`` the adjugate of that matrix
``A``, ``qdata = w / det(A) * adj^T adj``.
"""

from hofem.constants import EVAL_GRAD, EVAL_NONE, EVAL_WEIGHT
from hofem.qfunction_registry import register_gallery
from hofem.qfunctions.mass import det_2d


def poisson_1d_build(ctx, dx, weights, qdata):
    qdata[0] = weights[0] / dx[0]


def adjugate_products_2d(dx):
    """``(det, p00, p11, p01)`` of ``A[d][c] = dx[d * 2 + c]``: ``det(A)`` and the entries
    of ``adj(A)^T adj(A)``, with ``p01`` negated (``qdata = w / det * (p00, p11, -p01)``)."""
    return (
        det_2d(dx),
        dx[2] * dx[2] + dx[3] * dx[3],
        dx[0] * dx[0] + dx[1] * dx[1],
        dx[0] * dx[2] + dx[1] * dx[3],
    )


def adjugate_products_3d(dx):
    """``(det, p00, p11, p22, p12, p02, p01)`` of ``A[d][c] = dx[d * 3 + c]``: ``det(A)``
    (from the adjugate ``b``) and the entries of ``b^T b = adj(A)^T adj(A)``, libCEED's
    q-data order (``qdata = w / det * p``)."""
    b00 = dx[4] * dx[8] - dx[5] * dx[7]
    b01 = dx[2] * dx[7] - dx[1] * dx[8]
    b02 = dx[1] * dx[5] - dx[2] * dx[4]
    b10 = dx[5] * dx[6] - dx[3] * dx[8]
    b11 = dx[0] * dx[8] - dx[2] * dx[6]
    b12 = dx[2] * dx[3] - dx[0] * dx[5]
    b20 = dx[3] * dx[7] - dx[4] * dx[6]
    b21 = dx[1] * dx[6] - dx[0] * dx[7]
    b22 = dx[0] * dx[4] - dx[1] * dx[3]
    return (
        dx[0] * b00 + dx[1] * b10 + dx[2] * b20,
        b00 * b00 + b10 * b10 + b20 * b20,
        b01 * b01 + b11 * b11 + b21 * b21,
        b02 * b02 + b12 * b12 + b22 * b22,
        b01 * b02 + b11 * b12 + b21 * b22,
        b00 * b02 + b10 * b12 + b20 * b22,
        b00 * b01 + b10 * b11 + b20 * b21,
    )


def poisson_2d_build(ctx, dx, weights, qdata):
    det, p00, p11, p01 = adjugate_products_2d(dx)
    w_det = weights[0] / det
    qdata[0] = w_det * p00
    qdata[1] = w_det * p11
    qdata[2] = -w_det * p01


def poisson_3d_build(ctx, dx, weights, qdata):
    det, *products = adjugate_products_3d(dx)
    w_det = weights[0] / det
    for k in range(6):
        qdata[k] = w_det * products[k]


def poisson_1d_apply(ctx, du, qdata, dv):
    dv[0] = qdata[0] * du[0]


def poisson_2d_apply(ctx, du, qdata, dv):
    dv[0] = qdata[0] * du[0] + qdata[2] * du[1]
    dv[1] = qdata[2] * du[0] + qdata[1] * du[1]


def poisson_3d_apply(ctx, du, qdata, dv):
    dv[0] = qdata[0] * du[0] + qdata[5] * du[1] + qdata[4] * du[2]
    dv[1] = qdata[5] * du[0] + qdata[1] * du[1] + qdata[3] * du[2]
    dv[2] = qdata[4] * du[0] + qdata[3] * du[1] + qdata[2] * du[2]


QDATA_SIZE = {1: 1, 2: 3, 3: 6}


def _build(func, dim):
    def factory():
        inputs = [("dx", dim * dim, EVAL_GRAD), ("weights", 1, EVAL_WEIGHT)]
        return func, inputs, [("qdata", QDATA_SIZE[dim], EVAL_NONE)], None

    return factory


def _apply(func, dim):
    def factory():
        inputs = [("du", dim, EVAL_GRAD), ("qdata", QDATA_SIZE[dim], EVAL_NONE)]
        return func, inputs, [("dv", dim, EVAL_GRAD)], None

    return factory


for _dim, _build_func, _apply_func in (
    (1, poisson_1d_build, poisson_1d_apply),
    (2, poisson_2d_build, poisson_2d_apply),
    (3, poisson_3d_build, poisson_3d_apply),
):
    register_gallery(f"Poisson{_dim}DBuild")(_build(_build_func, _dim))
    register_gallery(f"Poisson{_dim}DApply")(_apply(_apply_func, _dim))
