"""Operators: G^T B^T D B G composed from fields (libCEED's ``CeedOperator``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .backends.contract import DeviceCGTarget
from .basis import Basis
from .constants import (
    BASIS_NONE,
    ELEMRESTRICTION_NONE,
    EVAL_NONE,
    EVAL_WEIGHT,
    VECTOR_ACTIVE,
    VECTOR_NONE,
    EvalMode,
    _Sentinel,
)
from .memory import chunk_ranges
from .restriction import ElemRestriction, index_dtype
from .typing import Array, ArrayLike, CeedLike, LinearOperator, SparseMatrix
from .vector_ops import VectorOps

if TYPE_CHECKING:
    from .qfunction import QFunction
    from .transfer import Transfer

__all__ = ["CompositeOperator", "Operator", "OperatorField", "SubOperator"]


@dataclass
class OperatorField:
    """One QFunction field bound to its restriction, basis and vector.

    Attributes
    ----------
    name : str
    size : int
        Rows of the field's Q-vector.
    eval_mode : hf.EvalMode
    restriction : ElemRestriction or None
        None for EVAL_WEIGHT fields.
    basis : Basis or None
        None for EVAL_NONE fields.
    vector : VECTOR_ACTIVE, VECTOR_NONE or array (l_size,)
    """

    name: str
    size: int
    eval_mode: EvalMode
    restriction: ElemRestriction | None
    basis: Basis | None
    vector: _Sentinel | Array

    @property
    def is_active(self) -> bool:
        return self.vector is VECTOR_ACTIVE


class _OperatorBase:
    """What every operator offers on top of ``apply_add`` and the assembly hooks."""

    def apply(self, u: Array | None, v: Array) -> None:
        """``v = A u``.

        Parameters
        ----------
        u : array (in_size,), float64, or None
            Active input L-vector (None only for operators with no active input).
        v : array (out_size,), float64
            Active output L-vector, overwritten.
        """
        self._check_vectors(u, v)
        v.fill(0.0)  # CuPy: a memset, cheaper than a fill kernel
        self._add(u, v)

    def apply_add(self, u: Array | None, v: Array) -> None:
        """``v += A u`` (same arguments as :meth:`apply`)."""
        self._check_vectors(u, v)
        self._add(u, v)

    def apply_dot(self, u: Array, v: Array) -> Array:
        """``v = A u``, and return ``u . A u``: CG's ``p . Ap`` with its operator application.

        A backend may form the product inside its operator kernel
        (``/cpu/self/numba``, ``/gpu/cuda/gen``), so that it costs no pass over the
        vectors; else it is :meth:`apply` and then the dot of :meth:`vector_ops`
        (summed over the ranks of a distributed operator).

        Parameters
        ----------
        u : array (n,), float64
        v : array (n,), float64
            Overwritten with ``A u``.

        Returns
        -------
        0-d array of float64 (the vectors' array library)

        Raises
        ------
        ValueError
            A non-square operator, or vectors of the wrong shape.
        """
        if self.shape[0] != self.shape[1]:
            raise ValueError(f"apply_dot needs a square operator, got shape {self.shape}")
        self._check_vectors(u, v)
        return self._apply_dot(u, v)

    def _apply_dot(self, u, v):
        v.fill(0.0)
        self._add(u, v)
        return self.vector_ops().dot(u, v)

    def __call__(self, u: Array | None) -> Array:
        """Return ``A u`` as a new array."""
        v = self.ceed.xp.zeros(self.shape[0])
        self.apply(u, v)
        return v

    def __matmul__(self, u: Array | None) -> Array:
        return self(u)

    matvec = __call__

    def _check_vectors(self, u, v):
        shape = self.shape
        backend = self.ceed.backend
        if shape[1] or u is not None:
            backend.check_vector(u, "u", (shape[1],))
        backend.check_vector(v, "v", (shape[0],))

    def vector_ops(self) -> VectorOps:
        """The :class:`~hofem.vector_ops.VectorOps` :func:`hofem.cg` uses with this operator:
        its backend's (``backend.vector_ops()``)."""
        return self.ceed.backend.vector_ops()

    def device_cg_target(self) -> DeviceCGTarget | None:
        """What a backend's device CG needs to solve with this operator, or None where it
        cannot (here: operators that are not one of hofem's square serial operators).

        See :class:`~hofem.backends.contract.DeviceCGTarget`; :func:`hofem.cg` hands it
        to ``backend.device_cg``.
        """
        return None

    def _is_square(self) -> bool:
        out_size, in_size = self.shape
        return out_size == in_size

    def as_linear_operator(self) -> LinearOperator:
        """A SciPy (CPU) or CuPy (GPU) ``LinearOperator`` applying this operator."""
        return self.ceed.backend.linear_operator(self.shape, self)


class Operator(_OperatorBase):
    """Matrix-free operator ``A = G_out^T B_out^T D B_in G_in`` from a QFunction.

    Create through :meth:`hofem.Ceed.Operator`, then bind every QFunction
    field with :meth:`set_field`.

    Attributes
    ----------
    qf : QFunction
    fields : dict of str -> OperatorField
    shape : (out_size, in_size)
        L-vector sizes of the active output and input (0 where none).
    num_elem, num_qpts : int
    backend_data : dict of str -> object
        The backend's cache of what it compiled for this operator, by slot names
        of its own; only the backend reads it, and :meth:`set_field` empties it.
    diagonal_assembly : callable () -> array (out_size,), or None
        An exact diagonal cheaper than the backend's, from what built the operator:
        :func:`hofem.mass` and :func:`hofem.diffusion` set it (their q-data, through
        :class:`hofem.level_assembly.LevelAssembly`); :meth:`linear_assemble_diagonal`
        uses it where set.
    component_operator : callable () -> Operator, or None
        Where this operator is block diagonal over the components of its component-major
        L-vectors (the same one-component operator ``B`` on each block:
        ``A u = [B u_0; B u_1; ...]``), returns ``B``, sharing this operator's passive
        vectors (its q-data or coordinates). :func:`hofem.mass` and
        :func:`hofem.diffusion` set it on multi-component spaces; a backend may apply
        ``B`` block by block where its kernel for ``B`` runs faster
        (``/gpu/cuda/gen``: :mod:`hofem.backends.cuda.component_split`, and one kernel of
        ``B`` that takes the blocks in turn, ``operator_warp.use_components_in_turn``).
    """

    def __init__(self, ceed: CeedLike, qf: QFunction) -> None:
        self.ceed = ceed
        self.qf = qf
        self.fields = {}
        self.num_elem = None
        self.num_qpts = None
        self.backend_data = {}
        # an exact diagonal cheaper than the backend's generic assembly, from whoever built
        # the operator and knows its pointwise matrix (hofem's forms, once every field is set)
        self.diagonal_assembly: Callable[[], Array] | None = None
        # the one-component operator of a block-diagonal multi-component one, from its builder
        self.component_operator: Callable[[], Operator] | None = None

    # --- fields -----------------------------------------------------------------------
    def set_field(
        self,
        name: str,
        restriction: ElemRestriction | _Sentinel,
        basis: Basis | _Sentinel,
        vector: object,
    ) -> None:
        """Bind QFunction field ``name``.

        Parameters
        ----------
        name : str
            A field of the QFunction.
        restriction : ElemRestriction or hf.ELEMRESTRICTION_NONE
            ELEMRESTRICTION_NONE exactly for EVAL_WEIGHT fields.
        basis : Basis or hf.BASIS_NONE
            BASIS_NONE exactly for EVAL_NONE fields (the E-vector is the Q-vector).
        vector : hf.VECTOR_ACTIVE, hf.VECTOR_NONE or array (l_size,)
            Active (the operator's input/output), none (WEIGHT fields), or a
            passive input L-vector of this backend (e.g. stored qdata).

        Raises
        ------
        ValueError
            Unknown or already bound field; restriction/basis/vector not what
            the eval mode needs; sizes that disagree with the QFunction field,
            with each other, or with the fields set before (num_elem, Q).
        TypeError
            Objects of another Ceed, or a passive vector that is not a float64
            array of this backend.
        """
        field = self.qf.field(name)
        if name in self.fields:
            raise ValueError(f"field {name!r} is already set on this operator")
        where = f"field {name!r} ({field.eval_mode.name})"
        is_output = field in self.qf.outputs
        r = None if restriction is ELEMRESTRICTION_NONE else restriction
        b = None if basis is BASIS_NONE else basis
        self._check_objects(where, restriction, basis, r, b)
        if field.eval_mode is EVAL_WEIGHT:
            num_qpts = _weight_points(where, r, b, vector)
        else:
            self._check_vector(where, name, r, vector, is_output)
            if field.eval_mode is EVAL_NONE:
                num_qpts = _points_without_basis(where, field, r, b)
            else:
                num_qpts = _points_of_basis(where, field, r, b)
        self._check_like_fields_before(where, num_qpts, r)
        if vector is VECTOR_ACTIVE:
            self._check_active_size(where, r, is_output)
        self.num_qpts = num_qpts
        if r is not None:
            self.num_elem = r.num_elem
        self.fields[name] = OperatorField(name, field.size, field.eval_mode, r, b, vector)
        self.backend_data.clear()

    def _check_objects(self, where, restriction, basis, r, b):
        """The restriction ``r`` and basis ``b`` (None for the NONE markers) are of their
        types and of this operator's Ceed."""
        if r is not None and not isinstance(r, ElemRestriction):
            raise TypeError(
                f"{where}: restriction must be an ElemRestriction or "
                f"hf.ELEMRESTRICTION_NONE, got {type(restriction).__name__}"
            )
        if b is not None and not isinstance(b, Basis):
            raise TypeError(
                f"{where}: basis must be a Basis or hf.BASIS_NONE, got {type(basis).__name__}"
            )
        for obj in (r, b):
            if obj is not None and obj.ceed is not self.ceed:
                raise TypeError(
                    f"{where}: {type(obj).__name__} belongs to another Ceed "
                    f"({obj.ceed.resource}); create it on this operator's Ceed"
                )

    def _check_vector(self, where, name, r, vector, is_output):
        """A field read through restriction ``r`` has one, and an active or (inputs only) a
        passive L-vector (l_size,) of this backend."""
        if r is None:
            raise ValueError(f"{where}: needs an ElemRestriction")
        if vector is VECTOR_NONE:
            raise ValueError(
                f"{where}: hf.VECTOR_NONE is only for EVAL_WEIGHT fields; "
                "pass hf.VECTOR_ACTIVE or an L-vector"
            )
        if vector is not VECTOR_ACTIVE:
            if is_output:
                raise ValueError(f"{where}: output fields must be hf.VECTOR_ACTIVE")
            self.ceed.backend.check_vector(vector, f"vector of field {name!r}", (r.l_size,))

    def _check_like_fields_before(self, where, num_qpts, r):
        """The points per element and the restriction's ``num_elem`` match the fields set."""
        if self.num_qpts is not None and num_qpts != self.num_qpts:
            raise ValueError(
                f"{where}: {num_qpts} quadrature points per element, the fields "
                f"set before have {self.num_qpts}"
            )
        if r is not None and self.num_elem is not None and r.num_elem != self.num_elem:
            raise ValueError(
                f"{where}: restriction has num_elem={r.num_elem}, the fields set "
                f"before have {self.num_elem}"
            )

    def _check_active_size(self, where, r, is_output):
        """An active field's L-vector size matches the active fields of its side set before."""
        active = [
            f
            for f in self.fields.values()
            if f.is_active and (f.name in self._output_names) == is_output
        ]
        if active and active[0].restriction.l_size != r.l_size:
            raise ValueError(
                f"{where}: active {'output' if is_output else 'input'} fields "
                f"must share one L-vector size; {active[0].name!r} has "
                f"{active[0].restriction.l_size}, this one {r.l_size}"
            )

    @property
    def _output_names(self):
        return {f.name for f in self.qf.outputs}

    def _ordered(self, specs):
        return [self.fields[f.name] for f in specs]

    def check_ready(self) -> None:
        """Raise ValueError naming the fields still unbound (called before every apply)."""
        missing = [f.name for f in self.qf.inputs + self.qf.outputs if f.name not in self.fields]
        if missing:
            raise ValueError(f"operator fields not set: {missing}; call set_field for each")
        if self.num_elem is None:
            raise ValueError("operator has no field with an ElemRestriction, so no element count")
        if not any(f.is_active for f in self.output_fields):
            raise ValueError("operator has no active output field (hf.VECTOR_ACTIVE)")

    @property
    def input_fields(self) -> list[OperatorField]:
        return self._ordered(self.qf.inputs)

    @property
    def output_fields(self) -> list[OperatorField]:
        return self._ordered(self.qf.outputs)

    def active_restriction(self, output: bool) -> ElemRestriction | None:
        """The restriction of the first active input (output=False) or output field."""
        fields = self.output_fields if output else self.input_fields
        for f in fields:
            if f.is_active:
                return f.restriction
        return None

    @property
    def shape(self) -> tuple[int, int]:
        self.check_ready()
        r_in = self.active_restriction(False)
        return (self.active_restriction(True).l_size, r_in.l_size if r_in else 0)

    # --- actions -----------------------------------------------------------------------
    def _add(self, u, v):
        self.ceed.backend.operator_apply_add(self, u, v)

    def _apply_dot(self, u, v):
        dot = self.ceed.backend.operator_apply_dot(self, u, v)
        return super()._apply_dot(u, v) if dot is None else dot

    def linear_assemble_diagonal(self) -> Array:
        """Diagonal of the assembled operator, for Jacobi preconditioning.

        Returns
        -------
        array, (out_size,), float64

        Operators made by :func:`hofem.mass` and :func:`hofem.diffusion` assemble it
        from their q-data (:attr:`diagonal_assembly`, sum-factorized on tensor bases);
        others through the backend, from the QFunction.

        Raises
        ------
        ValueError
            The operator is not square (active input and output L-vectors differ).
        """
        self._check_square()
        if self.diagonal_assembly is not None:
            return self.diagonal_assembly()
        return self.ceed.backend.operator_assemble_diagonal(self)

    def linear_assemble(self) -> SparseMatrix:
        """The exact sparse matrix this operator applies.

        Returns
        -------
        scipy.sparse.csr_matrix (CPU) or cupyx.scipy.sparse.csr_matrix (GPU),
        shape ``(out_size, in_size)``.
        """
        self.check_ready()
        if self.active_restriction(False) is None:
            raise ValueError("operator has no active input field, so no matrix to assemble")
        return self.ceed.backend.operator_assemble(self)

    def device_cg_target(self) -> DeviceCGTarget | None:
        """This operator, whose backend may fuse ``p . Ap`` into its kernel, where square."""
        return DeviceCGTarget(operator=self, fusable=True) if self._is_square() else None

    def _check_square(self):
        out_size, in_size = self.shape
        if out_size != in_size:
            raise ValueError(f"operator is not square: shape {self.shape}")

    def __repr__(self) -> str:
        return f"Operator({self.qf.name}, fields={list(self.fields)})"

    def multigrid_level(
        self,
        restriction_coarse: ElemRestriction,
        basis_coarse: Basis | None = None,
        weight: Array | None = None,
    ) -> tuple[Operator, Transfer, Transfer]:
        """Coarse operator and transfers, libCEED's ``CeedOperatorMultigridLevelCreate``.

        The coarse operator has this operator's QFunction and passive fields
        (q-data, coordinates, weights) and, on its active fields, the coarse
        restriction and a Lagrange basis of lower order on the same quadrature
        points.  The prolongation interpolates coarse element values at the
        fine nodes, scaled by the fine nodes' inverse multiplicity
        (:mod:`hofem.transfer`); the restriction is exactly its transpose.

        Parameters
        ----------
        restriction_coarse : ElemRestriction
            The coarse numbering: same elements and ``num_comp`` as the active
            restriction, ``elem_size`` of a Lagrange element of lower order.
        basis_coarse : Basis, optional
            Default: the Lagrange basis of the coarse order on this operator's
            quadrature (:func:`hofem.transfer.coarse_basis`).
        weight : array (fine l_size,), optional
            ``1 / multiplicity`` of the fine nodes; default from the active
            restriction (a distributed caller passes the global one).

        Returns
        -------
        op_coarse : Operator
        prolong : hofem.transfer.Transfer
            ``(fine l_size, coarse l_size)``.
        restrict : hofem.transfer.Transfer
            ``(coarse l_size, fine l_size)``, the transpose of ``prolong``.

        Raises
        ------
        ValueError
            Active fields without one shared H1 Lagrange basis and restriction;
            a coarse restriction of other elements, components, or not of a lower order.
        """
        from .transfer import coarse_basis, lagrange_order, level_transfers, order_of_size

        self.check_ready()
        active = [f for f in self.fields.values() if f.is_active]
        r_f, b_f = active[0].restriction, active[0].basis
        order = None if b_f is None else lagrange_order(b_f)
        if order is None or any((f.restriction, f.basis) != (r_f, b_f) for f in active):
            raise ValueError(
                "multigrid_level needs an operator whose active fields share one H1 Lagrange "
                f"basis (BasisTensorH1Lagrange or BasisH1Lagrange); got {b_f!r}"
            )
        r_c = restriction_coarse
        order_c = order_of_size(b_f, r_c.elem_size) if isinstance(r_c, ElemRestriction) else None
        if (
            order_c is None
            or order_c >= order
            or (r_c.num_elem, r_c.num_comp)
            != (
                r_f.num_elem,
                r_f.num_comp,
            )
        ):
            raise ValueError(
                f"restriction_coarse must be an ElemRestriction of a Lagrange order below {order} "
                f"on {r_f.num_elem} elements, {r_f.num_comp} components; got {r_c!r}"
            )
        b_c = coarse_basis(b_f, order_c) if basis_coarse is None else basis_coarse
        coarse = Operator(self.ceed, self.qf)
        for spec in self.qf.inputs + self.qf.outputs:
            f = self.fields[spec.name]
            if f.is_active:
                coarse.set_field(f.name, r_c, b_c, VECTOR_ACTIVE)
            else:
                r = ELEMRESTRICTION_NONE if f.restriction is None else f.restriction
                coarse.set_field(f.name, r, BASIS_NONE if f.basis is None else f.basis, f.vector)
        prolong, restrict = level_transfers(r_c, r_f, b_f, order_c, weight)
        return coarse, prolong, restrict


class CompositeOperator(_OperatorBase):
    """Sum of operators acting on the same L-vectors.

    Parameters
    ----------
    ceed : hofem.Ceed
    operators : list of Operator
        All of the same shape and Ceed.
    """

    def __init__(
        self, ceed: CeedLike, operators: Iterable[Operator | CompositeOperator] = ()
    ) -> None:
        self.ceed = ceed
        self.operators = []
        for op in operators:
            self.add_sub(op)

    def add_sub(self, op: Operator | CompositeOperator) -> None:
        """Append a sub-operator (ValueError if its shape differs from the others)."""
        if not isinstance(op, (Operator, CompositeOperator)):
            raise TypeError(f"sub-operators must be Operators, got {type(op).__name__}")
        if op.ceed is not self.ceed:
            raise TypeError("sub-operator belongs to another Ceed")
        if self.operators and op.shape != self.shape:
            raise ValueError(f"sub-operator shape {op.shape} differs from {self.shape}")
        self.operators.append(op)

    @property
    def shape(self) -> tuple[int, int]:
        if not self.operators:
            raise ValueError("composite operator has no sub-operators; add some with add_sub")
        return self.operators[0].shape

    def _add(self, u, v):
        for op in self.operators:
            op._add(u, v)

    def device_cg_target(self) -> DeviceCGTarget | None:
        """This operator (its sub-operators applied one after the other), where square."""
        return DeviceCGTarget(operator=self, fusable=False) if self._is_square() else None

    def _sum(self, parts):
        self.shape  # noqa: B018  (raises when there are no sub-operators)
        return sum(parts[1:], parts[0])

    def linear_assemble_diagonal(self) -> Array:
        """Sum of the sub-operators' diagonals, ``(out_size,)``."""
        return self._sum([op.linear_assemble_diagonal() for op in self.operators])

    def linear_assemble(self) -> SparseMatrix:
        """Sum of the sub-operators' sparse matrices (CSR)."""
        return self._sum([op.linear_assemble() for op in self.operators]).tocsr()


class SubOperator(_OperatorBase):
    """``A[free][:, free]`` of a square operator, applied matrix-free.

    Create with :func:`hofem.restrict_dofs`.

    Parameters
    ----------
    op : Operator or CompositeOperator
    free_dofs : int array (n_free,)
        Sorted unique indices into ``op``'s L-vector.

    Raises
    ------
    ValueError
        Non-square ``op``; indices out of range, unsorted or repeated.
    """

    def __init__(self, op: Operator | CompositeOperator, free_dofs: ArrayLike | Array) -> None:
        out_size, in_size = op.shape
        if out_size != in_size:
            raise ValueError(f"restrict_dofs needs a square operator, got shape {op.shape}")
        # an array of the backend is checked where it lives (one synchronization on a
        # device), not copied to the host and back
        fx = op.ceed.xp if isinstance(free_dofs, op.ceed.xp.ndarray) else np
        free = free_dofs if fx is not np else np.asarray(op.ceed.to_numpy(free_dofs))
        if free.ndim != 1 or free.dtype.kind not in "iu":
            raise ValueError("free_dofs must be a 1-D integer array")
        if free.size and bool((free[0] < 0) | (free[-1] >= in_size) | fx.any(fx.diff(free) <= 0)):
            raise ValueError(f"free_dofs must be sorted, unique and in [0, {in_size})")
        self.ceed = op.ceed
        self.op = op
        self._free = op.ceed.asarray(free.astype(index_dtype(in_size), copy=False))  # (n_free,)
        self._u = op.ceed.xp.zeros(in_size)  # (in_size,) scratch: constrained entries stay 0
        self._v = op.ceed.xp.zeros(in_size)

    @property
    def shape(self) -> tuple[int, int]:
        return (self._free.size, self._free.size)

    @property
    def free_dofs(self) -> Array:
        """The free L-vector indices, ``(n_free,)`` on the backend (read them, do not write)."""
        return self._free

    @functools.cached_property
    def constrained_dofs(self) -> Array:
        """The L-vector indices not in ``free_dofs``, ``(in_size - n_free,)`` int64, sorted.

        Made once, on the backend, by a mask and ``nonzero`` over chunks (a
        whole-vector ``nonzero`` would hold an int64 scan of ``in_size`` entries).
        """
        xp, n = self.ceed.xp, self.op.shape[1]
        mask = xp.ones(n, dtype=bool)  # (in_size,)
        mask[self._free] = False
        parts = [xp.nonzero(mask[a:b])[0] + a for a, b in chunk_ranges(n, 1, 1 << 26)]
        return xp.concatenate(parts).astype(np.int64)

    @property
    def work_vectors(self) -> tuple[Array, Array]:
        """The two ``(in_size,)`` L-vectors ``apply`` works in: input and output.

        Their constrained entries are zero when ``apply`` reads them; a solver may
        use them as its own work space between applies if it keeps those entries
        zero (the CUDA device CG does, for ``p`` and ``A p``).
        """
        return self._u, self._v

    def vector_ops(self) -> VectorOps:
        """The vector operations of the wrapped operator (parallel ones reduce across ranks)."""
        return self.op.vector_ops()

    def device_cg_target(self) -> DeviceCGTarget | None:
        """The wrapped operator's target, solved on its L-vectors with the constrained
        entries kept zero; None where the wrapped operator has none or is restricted."""
        inner = self.op.device_cg_target()
        if inner is None or inner.free_dofs is not None:
            return None
        return DeviceCGTarget(
            operator=inner.operator,
            fusable=inner.fusable,
            free_dofs=self._free,
            # a distributed loop iterates on the rank's L-vectors, not on these T-vectors
            work_vectors=self.work_vectors if inner.distributed is None else inner.work_vectors,
            constrained_dofs=lambda: self.constrained_dofs,
            distributed=inner.distributed,
        )

    def _through(self, run, u, v):
        """``run(u_full, v_full)`` on ``u`` scattered to the wrapped operator's vectors, then
        ``v += v_full[free]``; returns ``run``'s result."""
        backend = self.ceed.backend
        backend.scatter_entries(u, self._free, self._u)
        result = run(self._u, self._v)
        backend.gather_add_entries(self._v, self._free, v)
        return result

    def _add(self, u, v):
        self._through(self.op.apply, u, v)

    def _apply_dot(self, u, v):
        # the constrained entries of the scattered u are zero: u . (A u)[free] = u_full . A u_full
        v.fill(0.0)
        return self._through(self.op._apply_dot, u, v)

    def linear_assemble_diagonal(self) -> Array:
        """Diagonal on the free DOFs, ``(n_free,)``."""
        return self.op.linear_assemble_diagonal()[self._free]

    def linear_assemble(self) -> SparseMatrix:
        """CSR matrix ``A[free][:, free]``."""
        A = self.op.linear_assemble()
        return A[self._free][:, self._free].tocsr()


def _weight_points(where, r, b, vector):
    """Quadrature points per element of an EVAL_WEIGHT field: its basis' (no restriction,
    no vector)."""
    if r is not None or b is None or vector is not VECTOR_NONE:
        raise ValueError(f"{where}: use (hf.ELEMRESTRICTION_NONE, basis, hf.VECTOR_NONE)")
    return b.num_qpts


def _points_without_basis(where, field, r, b):
    """Points per element of an EVAL_NONE field: its restriction's nodes, one value of
    ``field.size`` components each."""
    if b is not None:
        raise ValueError(f"{where}: EVAL_NONE fields take hf.BASIS_NONE")
    if r.num_comp != field.size:
        raise ValueError(
            f"{where}: restriction has num_comp={r.num_comp}, the QFunction field size {field.size}"
        )
    return r.elem_size


def _points_of_basis(where, field, r, b):
    """Points per element of a field through basis ``b``, whose sizes must match the
    QFunction field's and the restriction's."""
    if b is None:
        raise ValueError(f"{where}: needs a Basis (BASIS_NONE is for EVAL_NONE)")
    expected = b.eval_size(field.eval_mode)
    if field.size != expected:
        raise ValueError(
            f"{where}: QFunction field size {field.size} does not match the basis "
            f"(num_comp={b.num_comp}, dim={b.dim} gives {expected})"
        )
    if r.num_comp != b.num_comp:
        raise ValueError(
            f"{where}: restriction num_comp={r.num_comp} but basis num_comp={b.num_comp}"
        )
    if r.elem_size != b.num_nodes:
        raise ValueError(
            f"{where}: restriction elem_size={r.elem_size} but basis has {b.num_nodes} nodes"
        )
    return b.num_qpts
