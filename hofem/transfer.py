"""Transfers between Lagrange bases of two orders: the pieces of ``Operator.multigrid_level``.

libCEED's ``CeedOperatorMultigridLevelCreate`` in hofem's terms: the coarse
basis keeps the fine basis's quadrature (so the passive fields, q-data or
geometry, stay valid), and the prolongation interpolates element by element
through a basis whose "points" are the fine nodes,

    P = W G_f^T B_{c->f} G_c,        R = P^T = G_c^T B_{c->f}^T G_f W,

with ``W = diag(1 / multiplicity)`` of the fine restriction: each fine node
receives the same value from every element that holds it (the coarse field is
continuous), so averaging makes ``P`` the interpolation, and ``R`` is exactly
its transpose.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from .basis import Basis, gll_lagrange_1d, h1, kron_dense, tensor_h1
from .constants import BASIS_NONE, EVAL_INTERP, EVAL_NONE, VECTOR_ACTIVE
from .polynomials import simplex_lagrange, simplex_nodes
from .quadrature import lobatto_quadrature
from .typing import Array, FloatArray, LinearOperator

if TYPE_CHECKING:
    from .constants import Topology
    from .restriction import ElemRestriction

__all__ = [
    "Transfer",
    "coarse_basis",
    "interpolation_basis",
    "interpolation_matrix",
    "lagrange_order",
    "level_transfers",
    "order_of_size",
]

_TOL = 1e-10  # Lagrange check: entries of matrices built from the same nodes and points
_ZERO = 1e-12  # interpolation entries below: round-off of zero (true ones: 1e-5 and up to p = 8)


def _simplex_order(num_nodes, dim):
    """The order p with ``binom(p + dim, dim) == num_nodes``, or None."""
    p = 0
    while math.comb(p + dim, dim) < num_nodes:
        p += 1
    return p if math.comb(p + dim, dim) == num_nodes else None


def order_of_size(basis: Basis, elem_size: int) -> int | None:
    """The Lagrange order whose element of ``basis``'s topology has ``elem_size`` nodes, or None."""
    if basis.is_tensor:
        P_1d = round(elem_size ** (1.0 / basis.dim))
        return P_1d - 1 if P_1d**basis.dim == elem_size and P_1d >= 2 else None
    order = _simplex_order(elem_size, basis.dim)
    return order if order else None


def lagrange_order(basis: Basis) -> int | None:
    """The order of an H1 Lagrange basis (hofem's nodes), or None for any other basis.

    Tensor bases: Gauss-Lobatto nodes (:meth:`hofem.Ceed.BasisTensorH1Lagrange`);
    simplex bases: the nodes of :func:`hofem.polynomials.simplex_nodes`
    (:meth:`hofem.Ceed.BasisH1Lagrange`).  Checked on the basis's own points.
    """
    order = order_of_size(basis, basis.num_nodes)
    if order is None:
        return None
    if basis.is_tensor:
        expected = gll_lagrange_1d(order + 1, basis.q_ref_1d)[0]
        found = basis.interp_1d
    else:
        expected = simplex_lagrange(basis.dim, order, basis.q_ref)[0]
        found = basis.interp
    ok = expected.shape == found.shape and np.allclose(found, expected, rtol=0, atol=_TOL)
    return order if ok else None


def _nodes_1d(order):
    return lobatto_quadrature(order + 1)[0]  # (order + 1,)


def coarse_basis(basis: Basis, order: int) -> Basis:
    """The Lagrange basis of ``order`` on the points and weights of Lagrange ``basis``.

    Parameters
    ----------
    basis : Basis
        H1 Lagrange (:func:`lagrange_order` is not None).
    order : int
        ``>= 1``.

    Returns
    -------
    Basis
        Same topology, ``num_comp`` and quadrature.
    """
    ceed, dim = basis.ceed, basis.dim
    if basis.is_tensor:
        interp, grad = gll_lagrange_1d(order + 1, basis.q_ref_1d)  # (Q_1d, order + 1) each
        return tensor_h1(
            ceed, dim, basis.num_comp, order + 1, basis.Q_1d, interp, grad,
            basis.q_ref_1d, basis.q_weight_1d,
        )  # fmt: skip
    interp, grad = simplex_lagrange(dim, order, basis.q_ref)  # (Q, P_c), (dim, Q, P_c)
    return h1(
        ceed, basis.topology, basis.num_comp, interp.shape[1], basis.num_qpts, interp, grad,
        basis.q_ref, basis.q_weight,
    )  # fmt: skip


def interpolation_basis(fine: Basis, coarse_order: int) -> Basis:
    """The coarse Lagrange basis of ``coarse_order`` evaluated at the nodes of Lagrange ``fine``.

    An interpolation-only basis: its "quadrature points" are the fine nodes
    (weights 1; use EVAL_INTERP only), so ``apply(NOTRANSPOSE, EVAL_INTERP)``
    maps coarse element values to fine element values.

    Returns
    -------
    Basis
        ``num_nodes`` = coarse nodes, ``num_qpts`` = fine nodes.
    """
    ceed, dim, fine_order = fine.ceed, fine.dim, lagrange_order(fine)
    interp, grad, points = _interpolation_data(fine.topology, fine_order, coarse_order)
    P_f, P_c = interp.shape
    if fine.is_tensor:
        return tensor_h1(ceed, dim, fine.num_comp, P_c, P_f, interp, grad, points, np.ones(P_f))
    return h1(ceed, fine.topology, fine.num_comp, P_c, P_f, interp, grad, points, np.ones(P_f))


def interpolation_matrix(topology: Topology, fine_order: int, coarse_order: int) -> FloatArray:
    """The dense ``interp`` (fine nodes, coarse nodes) of :func:`interpolation_basis` from the
    Lagrange order ``fine_order`` of ``topology`` to ``coarse_order``, without a basis.

    Returns
    -------
    ndarray (P_f, P_c)
        Read-only: computed once per topology and orders, shared.
    """
    return _interpolation_matrix(topology, int(fine_order), int(coarse_order))


@functools.lru_cache(maxsize=64)
def _interpolation_matrix(topology, fine_order, coarse_order):
    interp = _interpolation_data(topology, fine_order, coarse_order)[0]
    if topology.is_tensor:  # as Basis.interp: x fastest
        interp = kron_dense([interp] * topology.dim)  # (P_1d_f**dim, P_1d_c**dim)
        interp.setflags(write=False)
    return interp


@functools.lru_cache(maxsize=64)
def _interpolation_data(topology, fine_order, coarse_order):
    """``(interp, grad, points)`` of :func:`interpolation_basis`, computed once per topology
    and orders (each level and its set-up ask), read-only: the 1D matrices (P_1d_f, P_1d_c)
    and fine nodes (P_1d_f,) of a tensor topology, else the dense (P_f, P_c), (dim, P_f,
    P_c) and (P_f, dim)."""
    dim = topology.dim
    if topology.is_tensor:
        points = _nodes_1d(fine_order)  # (P_1d_f,)
        interp, grad = gll_lagrange_1d(coarse_order + 1, points)  # (P_1d_f, P_1d_c) each
    else:
        points = simplex_nodes(dim, fine_order).reshape(-1, dim)  # (P_f, dim)
        interp, grad = simplex_lagrange(dim, coarse_order, points)  # (P_f, P_c), (dim, ...)
        # a coarse node's function vanishes on the facets that miss the node: exact zeros
        # there (not the round-off of the Vandermonde solve), so a transfer joins no free DOF
        # to a Dirichlet one (hofem.multigrid.WholeVectorCycle)
        interp[np.abs(interp) < _ZERO] = 0.0
    for a in (interp, grad, points):
        a.setflags(write=False)
    return interp, grad, points


def level_transfers(
    r_coarse: ElemRestriction,
    r_fine: ElemRestriction,
    fine: Basis,
    coarse_order: int,
    weight: Array | None = None,
) -> tuple[Transfer, Transfer]:
    """The prolongation and restriction of ``Operator.multigrid_level`` between the active
    restriction ``r_fine`` and Lagrange basis ``fine`` of an operator and the coarse
    restriction ``r_coarse`` of ``coarse_order`` (unchecked: the caller checked them).

    ``weight``: ``1 / multiplicity`` of the fine nodes (default from ``r_fine``).
    """
    weight = 1.0 / r_fine.multiplicity() if weight is None else weight
    interp = interpolation_basis(fine, coarse_order)
    prolong = Transfer(r_coarse, r_fine, interp, weight)
    return prolong, Transfer(r_coarse, r_fine, interp, weight, transpose=True)


class Transfer:
    """Prolongation ``W G_f^T B G_c`` (coarse -> fine) or its transpose, the restriction.

    Applied matrix-free through an operator of the gallery's ``Identity``
    QFunction (interpolate at the fine nodes, keep the values there), so every
    backend runs it as it runs any operator; the diagonal scaling ``W`` is on
    the fine L-vector (``G_f^T diag(G_f w) e = w * G_f^T e``).

    Parameters
    ----------
    r_coarse, r_fine : ElemRestriction
        The active restrictions of the two levels (same elements, ``num_comp``).
    basis : Basis
        :func:`interpolation_basis` (coarse nodes -> fine nodes).
    weight : array (fine l_size,)
        ``1 / multiplicity`` of ``r_fine`` (summed over ranks for distributed use).
    transpose : bool
        False: prolongation, shape ``(fine, coarse)``; True: restriction.
    """

    def __init__(self, r_coarse, r_fine, basis, weight, transpose=False):
        ceed = r_fine.ceed
        self.ceed = ceed
        self.transpose = transpose
        self.weight = weight  # (fine l_size,)
        qf = ceed.QFunctionByName(
            "Identity",
            size=r_fine.num_comp,
            in_mode=EVAL_NONE if transpose else EVAL_INTERP,
            out_mode=EVAL_INTERP if transpose else EVAL_NONE,
        )
        op = ceed.Operator(qf)
        coarse, fine = (r_coarse, basis), (r_fine, BASIS_NONE)
        op.set_field("input", *(fine if transpose else coarse), VECTOR_ACTIVE)
        op.set_field("output", *(coarse if transpose else fine), VECTOR_ACTIVE)
        self.op = op
        self.shape = op.shape
        # the restriction's weighted input (fine l_size,), made at its first apply: the
        # multigrid cycles apply self.op themselves, with the weight folded elsewhere
        self._scratch = None

    def apply(self, u: Array, v: Array) -> None:
        """``v = T u`` (T the prolongation or restriction)."""
        if self.transpose:
            if self._scratch is None:
                self._scratch = self.ceed.xp.empty(self.weight.size)
            self.ceed.xp.multiply(self.weight, u, out=self._scratch)
            self.op.apply(self._scratch, v)
        else:
            self.op.apply(u, v)
            v *= self.weight

    def __call__(self, u):
        """``T u`` as a new array."""
        v = self.ceed.xp.empty(self.shape[0])
        self.apply(u, v)
        return v

    matvec = __call__

    def as_linear_operator(self) -> LinearOperator:
        """A SciPy (CPU) or CuPy (GPU) ``LinearOperator`` applying this transfer."""
        return self.ceed.backend.linear_operator(self.shape, self)
