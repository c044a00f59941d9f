"""``Ceed``: the backend context that creates every interface object."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

import numpy as np

from . import backends
from .basis import Basis, h1, h1_lagrange, tensor_h1, tensor_h1_lagrange
from .constants import GAUSS, EvalMode, QuadMode, Topology, _Sentinel
from .operator import CompositeOperator, Operator
from .qfunction import QFunction
from .qfunction_registry import gallery_entry
from .restriction import ElemRestriction
from .typing import Array, ArrayLike

__all__ = ["Ceed"]


class Ceed:
    """A backend context, libCEED's ``Ceed``.

    Parameters
    ----------
    resource : str, default "/cpu/self"
        ``"/cpu/self/ref"``, ``"/cpu/self/numba"``, ``"/gpu/cuda/ref"``, ... or
        a prefix (``"/cpu/self"``, ``"/gpu/cuda"``) that resolves to the fastest
        available backend under it.

    Attributes
    ----------
    resource : str
        The resolved backend name.
    xp : module
        The array module of this backend's vectors (NumPy or CuPy).

    Raises
    ------
    ValueError
        Unknown resource (the message lists the registered ones).
    hofem.backends.BackendUnavailable
        The backend cannot run here (missing extra or device).
    """

    def __init__(self, resource: str = "/cpu/self") -> None:
        self.backend = backends.resolve(resource)

    @property
    def resource(self) -> str:
        return self.backend.resource

    @property
    def xp(self) -> ModuleType:
        return self.backend.xp

    def asarray(self, x: ArrayLike | Array, dtype: Any = None) -> Array:
        """``x`` as an array of this backend (copied to the device where needed)."""
        return self.backend.asarray(x, dtype)

    def to_numpy(self, x: Array) -> np.ndarray:
        """``x`` as a host NumPy array (copied from the device where needed)."""
        return self.backend.to_numpy(x)

    def __repr__(self) -> str:
        return f"Ceed({self.resource!r})"

    # --- G -----------------------------------------------------------------------------------
    def ElemRestriction(
        self,
        num_elem: int,
        elem_size: int,
        num_comp: int,
        comp_stride: int,
        l_size: int,
        offsets: ArrayLike,
        orients: ArrayLike | None = None,
    ) -> ElemRestriction:
        """Offset-based (optionally oriented) restriction; see :class:`hofem.ElemRestriction`.

        Parameters
        ----------
        num_elem, elem_size, num_comp, comp_stride, l_size : int
        offsets : int array, (num_elem, elem_size)
            L-vector index of component 0 of each element node.
        orients : bool array, (num_elem, elem_size), optional
            True where the node's sign is flipped.

        Raises
        ------
        ValueError
            Non-positive sizes; offsets of the wrong shape or dtype, or out of
            range (the message names the first bad entry).
        """
        return ElemRestriction(
            self,
            num_elem,
            elem_size,
            num_comp,
            l_size,
            comp_stride=comp_stride,
            offsets=offsets,
            orients=orients,
        )

    def StridedElemRestriction(
        self,
        num_elem: int,
        elem_size: int,
        num_comp: int,
        l_size: int,
        strides: tuple[int, int, int] | _Sentinel,
    ) -> ElemRestriction:
        """Strided restriction: entry (k, j, i) at ``i*s[0] + j*s[1] + k*s[2]``.

        ``strides`` may be ``hf.STRIDES_BACKEND``: the backend's layout, for vectors
        only its operators read (stored quadrature data; see
        :class:`~hofem.ElemRestriction`): the E-vector layout ``(1, elem_size,
        elem_size * num_comp)``, or on ``/cpu/self/numba`` blocks of 8 interleaved
        elements. Read such a vector through ``apply``, not by reshaping it.
        """
        return ElemRestriction(self, num_elem, elem_size, num_comp, l_size, strides=strides)

    # --- B -----------------------------------------------------------------------------------
    def BasisTensorH1Lagrange(
        self, dim: int, num_comp: int, P: int, Q: int, quad_mode: QuadMode = GAUSS
    ) -> Basis:
        """Tensor Lagrange basis: P Gauss-Lobatto nodes and a Q-point rule per direction.

        Raises ValueError for dim not in 1..3, P < 2, Q < 1 (Q < 2 with GAUSS_LOBATTO).
        """
        return tensor_h1_lagrange(self, dim, num_comp, P, Q, quad_mode)

    def BasisTensorH1(
        self,
        dim: int,
        num_comp: int,
        P_1d: int,
        Q_1d: int,
        interp_1d: ArrayLike,  # (Q_1d, P_1d)
        grad_1d: ArrayLike,  # (Q_1d, P_1d)
        q_ref_1d: ArrayLike,  # (Q_1d,)
        q_weight_1d: ArrayLike,  # (Q_1d,)
    ) -> Basis:
        """Tensor basis from user 1D matrices ``interp_1d, grad_1d`` (Q_1d, P_1d)."""
        return tensor_h1(self, dim, num_comp, P_1d, Q_1d, interp_1d, grad_1d, q_ref_1d, q_weight_1d)

    def BasisH1(
        self,
        topology: Topology,
        num_comp: int,
        num_nodes: int,
        num_qpts: int,
        interp: ArrayLike,  # (num_qpts, num_nodes)
        grad: ArrayLike,  # (dim, num_qpts, num_nodes)
        q_ref: ArrayLike,  # (num_qpts, dim)
        q_weight: ArrayLike,  # (num_qpts,)
    ) -> Basis:
        """Non-tensor basis from dense ``interp`` (Q, P) and ``grad`` (dim, Q, P)."""
        return h1(self, topology, num_comp, num_nodes, num_qpts, interp, grad, q_ref, q_weight)

    def BasisH1Lagrange(
        self, topology: Topology, num_comp: int, order: int, q_order: int, rule: str = "collapsed"
    ) -> Basis:
        """Simplex Lagrange basis of ``order`` with a rule exact to degree ``q_order``.

        ``rule``: ``"collapsed"`` Gauss-Jacobi product or ``"symmetric"`` (fewest points),
        see :func:`hofem.simplex_quadrature`.
        """
        return h1_lagrange(self, topology, num_comp, order, q_order, rule)

    # --- D -----------------------------------------------------------------------------------
    def QFunction(
        self,
        func: Callable[..., None],
        inputs: Iterable[tuple[str, int, EvalMode]],
        outputs: Iterable[tuple[str, int, EvalMode]],
        context: Any = None,
    ) -> QFunction:
        """User QFunction; see :class:`hofem.QFunction`."""
        return QFunction(self, func, inputs, outputs, context)

    def QFunctionByName(self, name: str, **kwargs: Any) -> QFunction:
        """Gallery QFunction by libCEED name (``"MassApply"``, ``"Poisson3DApply"``, ...).

        Keyword arguments configure the generic entries (``Identity``: ``size``,
        ``in_mode``, ``out_mode``; ``Scale``: ``size``, ``scale``).
        """
        func, inputs, outputs, context = gallery_entry(name, **kwargs)
        return QFunction(self, func, inputs, outputs, context, name=name)

    # --- operators ---------------------------------------------------------------------------
    def Operator(self, qf: QFunction) -> Operator:
        """Operator from a QFunction; bind its fields with ``set_field``."""
        if not isinstance(qf, QFunction) or qf.ceed is not self:
            raise TypeError("Operator needs a QFunction created by this Ceed")
        return Operator(self, qf)

    def CompositeOperator(self, operators: Iterable[Operator] = ()) -> CompositeOperator:
        """Sum of operators of equal shape."""
        return CompositeOperator(self, operators)
