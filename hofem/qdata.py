"""The set-up operators that turn element coordinates into q-data.

Used by the forms (:mod:`hofem.forms`) to store q-data and by :class:`hofem.H1Space`
for ``w det J`` at its quadrature points; both sit above this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .constants import (
    BASIS_NONE,
    ELEMRESTRICTION_NONE,
    STRIDES_BACKEND,
    VECTOR_ACTIVE,
    VECTOR_NONE,
    _Sentinel,
)

if TYPE_CHECKING:
    from .basis import Basis
    from .operator import Operator

__all__ = ["build_operator"]


def build_operator(
    space: Any,  # an H1Space, of the discretization layer above this one (not imported)
    kind: str,
    geo: Basis,
    size: int,
    num_elem: int,
    strides: tuple[int, int, int] | _Sentinel = STRIDES_BACKEND,
) -> Operator:
    """The set-up operator of ``kind`` on ``num_elem`` cells: coordinate E-vector -> q-data.

    Parameters
    ----------
    space : H1Space
    kind : {"Mass", "Poisson"}
        The gallery's ``{kind}{dim}DBuild`` QFunction.
    geo : Basis
        The ``dim``-component basis of the coordinates.
    size : int
        Q-data values per point (:data:`_QDATA_SIZE`).
    num_elem : int
    strides : tuple of 3 int or hf.STRIDES_BACKEND
        The q-data's layout: the backend's, for operators that read it, or e.g.
        ``(1, Q, Q * size)`` for host code that reshapes it to ``(num_elem, size, Q)``.

    Returns
    -------
    Operator
        Input ``(num_elem * dim * P,)`` coordinates (E-vector layout ``(num_elem,
        dim, P)``), output ``(num_elem * size * Q,)`` q-data in ``strides``' layout.
    """
    ceed, dim = space.ceed, space.dim
    P, Q = space.elem_size, geo.num_qpts
    r_x = ceed.StridedElemRestriction(num_elem, P, dim, num_elem * dim * P, (1, P, P * dim))
    r_q = ceed.StridedElemRestriction(num_elem, Q, size, num_elem * Q * size, strides)
    build = ceed.Operator(ceed.QFunctionByName(f"{kind}{dim}DBuild"))
    build.set_field("dx", r_x, geo, VECTOR_ACTIVE)
    build.set_field("weights", ELEMRESTRICTION_NONE, geo, VECTOR_NONE)
    build.set_field("qdata", r_q, BASIS_NONE, VECTOR_ACTIVE)
    return build
