"""Scaled mass operators on non-tensor bases as one product with ``B^T W B``.

An operator whose QFunction returns, at every point and for every component,
``c_e w_q u_q`` (``u_q = (B u)_q`` the interpolated input, ``w_q`` the rule's
weights, ``c_e`` a function of cell-constant inputs only: a mass form on affine
simplices, whose Jacobian determinant is one number per element) is
``v_e = c_e B^T W B u_e``.  Its fused kernel then applies the reference matrix
``B^T W B`` (P x P, the same for every element, nothing stored per element) and
scales each element by ``c_e``: ``P^2`` multiply-adds per component instead of
``2 P Q`` (at p = 6 on tets 7 056 against 24 360, the symmetric rule having 145
points for 84 nodes).

:func:`scaled_input` decides from the operator's fields and its traced QFunction
body: every output row must be a product of constants (cell-constant inputs,
context, numbers), of the weight once and of the same row of the interpolated
input once, so the rewrite is exact in exact arithmetic for any such body and is
never applied to one that is not of that form.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from ..constants import EVAL_GRAD, EVAL_INTERP, EVAL_WEIGHT
from ..qfunction_trace import PYTHON, Untraceable, trace_body

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ..typing import BasisLike as Basis
    from ..typing import OperatorLike as Operator

__all__ = ["reference_matrix", "scaled_input"]

_ASSIGN = re.compile(r"(t\d+) = (.*)")
_STORE = re.compile(r"O(\d+) = (.*)")
_VARYING = re.compile(r"\b(?:t\d+|U\d+|W)\b")
_PRODUCT = re.compile(r"\((\S+) ([*/]) (\S+)\)")
_NEGATIVE = re.compile(r"\(-(\S+)\)")
_LEAF = re.compile(r"U(\d+)|W")


def _same_rule(a, b):
    """Whether non-tensor bases ``a`` and ``b`` have the same nodes' values at the same points."""
    return (
        a.num_nodes == b.num_nodes
        and a.num_qpts == b.num_qpts
        and np.array_equal(a.interp, b.interp)
        and np.array_equal(a.q_weight, b.q_weight)
    )


def _fields(op):
    """Index of the one interpolated input when ``op``'s fields allow the element-matrix
    form (one output ``B^T`` on a non-tensor basis, inputs: that basis' interp, its
    weights, cell-constant fields), else None."""
    if len(op.output_fields) != 1:
        return None
    out = op.output_fields[0]
    b = out.basis
    if out.eval_mode is not EVAL_INTERP or b.is_tensor or b.is_cell_constant:
        return None
    interp = None
    for i, f in enumerate(op.input_fields):
        if f.eval_mode is EVAL_WEIGHT:
            if f.basis.num_qpts != b.num_qpts or not np.array_equal(f.basis.q_weight, b.q_weight):
                return None
        elif f.eval_mode in (EVAL_INTERP, EVAL_GRAD) and f.basis.is_cell_constant:
            continue
        elif f.eval_mode is EVAL_INTERP and interp is None and _same_rule(f.basis, b):
            interp = i
        else:
            return None
    if interp is None:
        return None
    r_in, r_out = op.input_fields[interp].restriction, out.restriction
    return interp if r_in.num_comp == r_out.num_comp == out.size else None


def _monomials(lines):
    """``(row, weights)`` per output row when each is ``const * w * u[row]``, else None.

    ``lines``: a body traced with the interpolated input's rows read as ``U{row}``, the
    weight as ``W``, every other value a constant, outputs stored to ``O{row}``.  A
    temporary is a constant (None), or a monomial ``(row of u or None, power of w)``;
    any other use of a varying value (a sum, a function, a division by one) fails.
    """
    terms = {}  # temporary -> None (constant) or (u row, w power)

    def term(token):
        return terms.get(token) if token.startswith("t") else None

    stores = {}
    for line in lines:
        match = _ASSIGN.fullmatch(line)
        if match is None:
            store = _STORE.fullmatch(line)
            if store is None:
                return None
            stores[int(store[1])] = terms.get(store[2]) if store[2] in terms else None
            continue
        name, code = match.groups()
        varying = [t for t in _VARYING.findall(code) if not t.startswith("t") or terms[t]]
        leaf, product, negative = (p.fullmatch(code) for p in (_LEAF, _PRODUCT, _NEGATIVE))
        if not varying:
            terms[name] = None
        elif leaf:
            terms[name] = (int(leaf[1]), 0) if leaf[1] is not None else (None, 1)
        elif negative:
            terms[name] = term(negative[1])
        elif product and product[2] == "*":
            a, b = term(product[1]) or (None, 0), term(product[3]) or (None, 0)
            if a[0] is not None and b[0] is not None:
                return None
            terms[name] = (a[0] if a[0] is not None else b[0], a[1] + b[1])
        elif product and term(product[3]) is None:  # a monomial over a constant
            terms[name] = term(product[1])
        else:
            return None
    return stores


def scaled_input(op: Operator) -> int | None:
    """Whether ``op`` is ``c_e B^T W B`` (see the module docstring).

    Parameters
    ----------
    op : hofem.Operator

    Returns
    -------
    int or None
        The index of its interpolated input, or None: another field layout, or a
        traced body that is not ``const * w * u[row]`` in every output row (or does not
        trace).
    """
    interp = _fields(op)
    if interp is None:
        return None
    weight = {i for i, f in enumerate(op.input_fields) if f.eval_mode is EVAL_WEIGHT}

    def load(k, row):
        return f"U{row}" if k == interp else "W" if k in weight else f"C{k}_{row}"

    try:
        lines = trace_body(op.qf, load, lambda k, row: f"O{row}", PYTHON, lambda name: "K")
    except Untraceable:
        return None
    stores = _monomials(lines)
    size = op.output_fields[0].size
    if stores is None or sorted(stores) != list(range(size)):
        return None
    return interp if all(stores[r] == (r, 1) for r in range(size)) else None


def reference_matrix(basis: Basis) -> np.ndarray:
    """The reference mass matrix of a non-tensor basis, as the element product's matrix stack.

    Parameters
    ----------
    basis : Basis
        Non-tensor, ``interp`` (Q, P) and ``q_weight`` (Q,).

    Returns
    -------
    float64 (1, P, P)
        ``B^T W B``.
    """
    B = basis.interp  # (Q, P)
    return np.ascontiguousarray(((B.T * basis.q_weight) @ B)[None])
