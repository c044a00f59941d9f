"""A scaled simplex mass operator on ``P`` points instead of ``Q``: the factored rule.

An operator that is ``c_e B^T W B`` per element (:func:`..element_matrix.scaled_input`:
a mass form on affine simplices with the geometry on the fly, ``c_e`` one number per
element) depends on its basis only through the reference matrix ``M = B^T W B``
``(P, P)``.  With ``M = L L^T`` (Cholesky) and ``F = L^T``, ``F^T F = M``, so the same
operator is the same QFunction on a "rule" of ``P`` points with unit weights whose
interpolation is ``F``: ``F^T (c_e I) F = c_e M``.  The fused simplex kernel then
runs its two products with ``P x P`` matrices instead of ``Q x P`` (tets at p = 6: 84
against 145 points), with no change to the kernel: :func:`factored_view` hands it a view
of the operator whose fields carry those bases.

The points of the factored rule have no position (``q_ref`` is zero): nothing in the
simplex kernels reads it but the check that all fields share one rule.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...constants import EVAL_WEIGHT
from ..element_matrix import reference_matrix, scaled_input

__all__ = ["FactoredBasis", "FactoredOperator", "factored_view"]


@dataclasses.dataclass(frozen=True, eq=False)
class FactoredBasis:
    """The dense-basis data the simplex kernels read, on the factored rule's ``P`` points.

    Attributes
    ----------
    dim, num_comp, num_nodes, num_qpts : int
    interp : float64 (num_qpts, num_nodes)
    grad : float64 (dim, num_qpts, num_nodes)
    q_ref : float64 (num_qpts, dim)
        Zero: the factored points have no position.
    q_weight : float64 (num_qpts,)
        Ones: the weights are in ``interp``.
    is_cell_constant : bool
    is_tensor : bool
        False: a dense basis.
    """

    dim: int
    num_comp: int
    num_nodes: int
    num_qpts: int
    interp: np.ndarray
    grad: np.ndarray
    q_ref: np.ndarray
    q_weight: np.ndarray
    is_cell_constant: bool
    is_tensor: bool = False


class FactoredOperator:
    """``op`` with its fields on the factored rule; every other attribute is ``op``'s.

    Parameters
    ----------
    op : Operator
        The operator viewed (kept as ``op``).
    input_fields, output_fields : list of OperatorField
        ``op``'s fields with their bases replaced (the same restrictions and vectors).
    num_qpts : int
        ``P``.
    """

    def __init__(self, op: Any, input_fields: list, output_fields: list, num_qpts: int) -> None:
        self.op = op
        self.input_fields, self.output_fields, self.num_qpts = input_fields, output_fields, num_qpts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.op, name)


def _factored_basis(basis, interp):
    """``basis`` on the factored rule: ``interp`` ``(P, P)`` for the solution's basis."""
    P, dim = interp.shape[0], basis.dim
    return FactoredBasis(
        dim, basis.num_comp, basis.num_nodes, P, interp, np.zeros((dim, P, basis.num_nodes)),
        np.zeros((P, dim)), np.ones(P), False,
    )  # fmt: skip


def _constant_basis(basis, P):
    """A cell-constant ``basis`` (its rows all equal) on ``P`` points: its first row, ``P``
    times."""
    interp = np.repeat(basis.interp[:1], P, axis=0)  # (P, num_nodes)
    grad = np.repeat(basis.grad[:, :1], P, axis=1)  # (dim, P, num_nodes)
    return FactoredBasis(
        basis.dim, basis.num_comp, basis.num_nodes, P, interp, grad, np.zeros((P, basis.dim)),
        np.ones(P), True,
    )  # fmt: skip


def factored_view(op: Any) -> FactoredOperator | None:
    """``op`` on the factored rule where it is ``c_e B^T W B`` (see the module docstring),
    else None (another form, stored q-data, or a reference matrix that is not positive
    definite).

    Parameters
    ----------
    op : Operator
        With dense (simplex) bases.

    Returns
    -------
    FactoredOperator or None
    """
    if scaled_input(op) is None:
        return None
    solution = op.output_fields[0].basis
    try:
        L = np.linalg.cholesky(reference_matrix(solution)[0])  # (P, P), lower
    except np.linalg.LinAlgError:
        return None
    F = np.ascontiguousarray(L.T)  # (P, P): F^T F = B^T W B
    P = F.shape[0]
    bases = {}  # id(original basis) -> its factored-rule twin

    def twin(field):
        b = field.basis
        if b is None:
            return field
        if id(b) not in bases:
            constant = field.eval_mode is not EVAL_WEIGHT and b.is_cell_constant
            bases[id(b)] = _constant_basis(b, P) if constant else _factored_basis(b, F)
        return dataclasses.replace(field, basis=bases[id(b)])

    inputs = [twin(f) for f in op.input_fields]
    outputs = [twin(f) for f in op.output_fields]
    return FactoredOperator(op, inputs, outputs, P)
