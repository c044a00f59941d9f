"""``/gpu/cuda/batched``: one fused kernel per restriction and tensor-basis action.

Restriction gather/scatter and the sum-factorized tensor basis actions run as
the ``.cu`` kernels beside this file (specialized by ``-D`` defines, compiled on
first use, see :mod:`hofem.backends.cuda.kernels`).  The basis kernels read and
write Q-vectors in place, so an operator apply is G, B, the QFunction (CuPy
code traced into one fused kernel, or CuPy array code where the body cannot
be traced), B^T, G^T with no layout copies.  Non-tensor bases run as cuBLAS
GEMMs, plain or strided batched as the tuning table picks
(:mod:`hofem.backends.cuda.gemm`), reading and writing Q-vectors in place too.
Oriented restrictions and assembly are inherited from ``/gpu/cuda/ref``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...basis import collocated_grad
from ...constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, NOTRANSPOSE, TRANSPOSE
from ...restriction import index_dtype
from ..contract import Array
from ..ref import RefBasisData, RefRestrictionData
from . import gemm
from .ref import CudaRefBackend, cupy, require_device

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...constants import EvalMode, TransposeMode
    from ...typing import BasisLike as Basis
    from ...typing import FieldLike as OperatorField
    from ...typing import OperatorLike as Operator
    from ...typing import RestrictionLike as ElemRestriction

__all__ = ["BatchedBasisData", "BatchedRestrictionData", "CudaBatchedBackend", "device_layout"]

# largest 1D size the tensor kernels are specialized for (registers grow with it)
_MAX_T_1D = 16
_SCATTER_THREADS = 256
_MAX_BLOCKS = 1 << 20
# "auto" scatter: the transpose map won at 27 nodes per element, atomics at 125 and 729
_MAP_MAX_ELEM_SIZE = 27
# (device, collocated, shape, interp_1d bytes, grad_1d bytes) -> BatchedBasisData: the
# device matrices of a tensor basis, shared by every basis of the same 1D matrices (each
# multigrid level, transfer and set-up operator makes its bases anew); read only
_TENSOR_BASIS_DATA: dict[tuple, BatchedBasisData] = {}
_TENSOR_BASIS_DATA_MAX = 64


def device_layout(r: ElemRestriction) -> tuple[bool, type[np.signedinteger]]:
    """How the kernels address restriction ``r``.

    Returns
    -------
    identity : bool
        The E-vector is the L-vector (strided, backend order): no indices needed.
    index_dtype : numpy dtype class
        Of the stored component-0 offsets (:attr:`~hofem.ElemRestriction.offsets_dtype`).
        Kernels count elements and E-vector entries and add component strides in
        64 bits, so this depends on neither the E-vector's size nor the components.
    """
    return r.is_identity, r.offsets_dtype


@dataclass
class BatchedRestrictionData(RefRestrictionData):
    """A restriction's data on the batched CUDA backends (see :class:`RefRestrictionData`).

    Attributes
    ----------
    identity : bool
        The E-vector is the L-vector (:func:`device_layout`); ``indices`` is None.
    index_dtype : numpy dtype class
        Of ``indices``, the component-0 offsets ``(num_elem * elem_size,)`` on the device.
    transpose_map : (t_nodes, t_offsets, t_entries) or None
        Built on the first transpose that uses it (:meth:`CudaBatchedBackend._transpose_map`).
    """

    identity: bool = False
    index_dtype: type = np.int32
    transpose_map: tuple[Array, Array, Array] | None = None


@dataclass
class BatchedBasisData(RefBasisData):
    """A basis's device matrices on the batched CUDA backends (see :class:`RefBasisData`).

    Attributes
    ----------
    interp_1d_t, grad_1d_t : array (P_1d, Q_1d), or None
        Contiguous transposes of a tensor basis's matrices.
    kernels : bool
        The tensor kernels are specialized for this basis's size.
    collocated : array (Q_1d, Q_1d) or None
        The collocated derivative (:func:`hofem.basis.collocated_grad`), where it
        exists and the backend uses it (``CudaBatchedBackend.collocated``).
    """

    interp_1d_t: Array | None = None
    grad_1d_t: Array | None = None
    kernels: bool = False
    collocated: Array | None = None


def _entry_dtype(r):
    """Of the transpose map's arrays, which hold E-vector entries: int32 while they fit."""
    return index_dtype(max(r.e_size, r.l_size + 1))


def _blocks(n, threads=_SCATTER_THREADS):
    return (max(1, min(_MAX_BLOCKS, -(-n // threads))),)


class CudaBatchedBackend(CudaRefBackend):
    """Kernels for restrictions and tensor bases, tuned GEMMs for non-tensor ones; rest: cuda/ref.

    Attributes
    ----------
    scatter : {"auto", "map", "atomic"}
        Transpose restriction: a precomputed transpose map (CSR from the touched
        L-vector entries to the E-vector entries, no atomics) or atomicAdd per
        entry.  ``"auto"`` takes the map for elements of at most
        ``_MAP_MAX_ELEM_SIZE`` nodes, atomics above (measured on an H100:
        docs/performance.md).
    collocated : bool
        Tensor gradients as interpolation to the points followed by the
        collocated derivative ``D`` (:func:`hofem.basis.collocated_grad`) where it exists:
        one contraction and a light pass instead of one contraction per
        direction.  Read when a basis is created.
    """

    resource = "/gpu/cuda/batched"
    scatter = "auto"
    collocated = True

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError (naming ``pip install hofem[gpu]``) without CuPy or a device."""
        require_device()

    # --- restriction -------------------------------------------------------------------------
    def restriction_setup(self, r: ElemRestriction) -> None:
        """Device indices in the kernels' index type; identity layouts are flagged and get none."""
        super().restriction_setup(r)
        identity, dtype = device_layout(r)
        data = BatchedRestrictionData(
            indices=r.backend_data.indices,
            signs=r.backend_data.signs,
            identity=identity,
            index_dtype=dtype,
        )
        r.backend_data = data
        if data.identity:
            data.indices = None
        elif data.indices is None:  # strided: the kernels read explicit offsets
            offsets = r.compact_indices()[0].ravel()  # (num_elem * elem_size,)
            data.indices = self.asarray(offsets.astype(data.index_dtype))
        else:  # (num_elem * elem_size,) component-0 offsets
            data.indices = data.indices.astype(data.index_dtype, copy=False)

    def _transpose_map(self, r):
        """Transpose map of the touched L-vector entries, built once on the device.

        Returns
        -------
        t_nodes : (n,) the distinct L-vector indices the restriction reads
        t_offsets : (n + 1,) CSR row starts into ``t_entries``
        t_entries : (e_size,) E-vector entries, grouped by L-vector index
        """
        data = r.backend_data
        if data.transpose_map is None:
            entry_dtype = _entry_dtype(r)
            offsets = data.indices.reshape(r.num_elem, 1, r.elem_size).astype(np.int64)
            comp = cupy.arange(r.num_comp, dtype=np.int64)[None, :, None] * r.component_stride
            indices = (offsets + comp).ravel()  # (e_size,) in the E-vector's order
            entries = cupy.argsort(indices)  # (e_size,) CuPy's sort is stable
            ordered = indices[entries]
            first = cupy.ones(ordered.size, dtype=bool)  # (e_size,) each node's first entry
            first[1:] = ordered[1:] != ordered[:-1]
            starts = cupy.flatnonzero(first)  # (n,)
            data.transpose_map = (
                ordered[starts].astype(entry_dtype),
                cupy.append(starts, ordered.size).astype(entry_dtype),
                entries.astype(entry_dtype),
            )
        return data.transpose_map

    def _gather(self, r, u):
        data = r.backend_data
        if data.identity:
            return u.reshape(r.num_elem, r.num_comp, r.elem_size)
        e = cupy.empty((r.num_elem, r.num_comp, r.elem_size))
        self._by_node("gather", r, data.indices, u, e)
        return e

    def _by_node(self, name, r, offsets, src, dst):
        """Launch ``gather`` or ``scatter_atomic``: one thread per element node, all components."""
        kernel = self._restriction_kernels(r.backend_data.index_dtype).get_function(name)
        num_nodes = r.num_elem * r.elem_size
        sizes = (np.int64(num_nodes), np.int32(r.elem_size), np.int32(r.num_comp))
        stride = np.int64(r.component_stride)
        kernel(_blocks(num_nodes), (_SCATTER_THREADS,), (*sizes, stride, offsets, src, dst))

    def _scatter_add(self, r, e, v):
        """v (l_size,) += G^T e, e (num_elem, num_comp, elem_size) C-contiguous."""
        data = r.backend_data
        if data.identity:
            v += e.reshape(-1)
            return
        use_map = self.scatter == "map" or (
            self.scatter == "auto" and r.elem_size <= _MAP_MAX_ELEM_SIZE
        )
        if not use_map:
            self._by_node("scatter_atomic", r, data.indices, e, v)
            return
        t_nodes, t_offsets, t_entries = self._transpose_map(r)
        entry_dtype = t_entries.dtype.type
        self._restriction_kernels(entry_dtype).get_function("scatter_map")(
            _blocks(t_nodes.size),
            (_SCATTER_THREADS,),
            (np.int64(t_nodes.size), t_nodes, t_offsets, t_entries, e, v),
        )

    @staticmethod
    def _restriction_kernels(index_dtype):
        from . import kernels

        return kernels.restriction_module(index_dtype)

    def restriction_apply(
        self, r: ElemRestriction, u: Array, t_mode: TransposeMode, signed: bool = True
    ) -> Array:
        """L (l_size,) -> E (num_elem, num_comp, elem_size) or the transpose, by kernels.

        Oriented restrictions (with ``signed``) use the inherited CuPy code.
        """
        if signed and r.signs is not None:
            return super().restriction_apply(r, u, t_mode, signed)
        if t_mode is NOTRANSPOSE:
            e = self._gather(r, u)
            return e.copy() if r.backend_data.identity else e
        v = cupy.zeros(r.l_size)
        self._scatter_add(r, cupy.ascontiguousarray(u), v)
        return v

    # --- basis -------------------------------------------------------------------------------
    def basis_setup(self, b: Basis) -> None:
        """Device matrices; tensor bases also keep the transposes (P_1d, Q_1d) contiguous.

        A tensor basis whose 1D matrices an earlier one had (same values, same device)
        shares that one's device matrices: nothing is uploaded again.
        """
        if b.is_tensor:
            B, G = b.interp_1d, b.grad_1d  # (Q_1d, P_1d) each, host
            key = (cupy.cuda.Device().id, self.collocated, B.shape, B.tobytes(), G.tobytes())
            data = _TENSOR_BASIS_DATA.get(key)
            if data is None:
                data = self._tensor_basis_data(b)
                if len(_TENSOR_BASIS_DATA) >= _TENSOR_BASIS_DATA_MAX:  # the oldest goes
                    del _TENSOR_BASIS_DATA[next(iter(_TENSOR_BASIS_DATA))]
                _TENSOR_BASIS_DATA[key] = data
            b.backend_data = data
            return
        super().basis_setup(b)
        ref = b.backend_data
        b.backend_data = BatchedBasisData(  # the GEMMs need C-contiguous matrices
            interp=cupy.ascontiguousarray(ref.interp),  # (Q, P)
            grad=cupy.ascontiguousarray(ref.grad),  # (dim, Q, P)
        )

    def _tensor_basis_data(self, b):
        """The device matrices of tensor basis ``b`` (uploaded now)."""
        super().basis_setup(b)
        ref = b.backend_data
        D = collocated_grad(b.interp_1d, b.grad_1d) if self.collocated else None
        return BatchedBasisData(
            interp_1d=ref.interp_1d,
            grad_1d=ref.grad_1d,
            interp_1d_t=cupy.ascontiguousarray(ref.interp_1d.T),
            grad_1d_t=cupy.ascontiguousarray(ref.grad_1d.T),
            kernels=max(b.P_1d, b.Q_1d) <= _MAX_T_1D,
            collocated=None if D is None else cupy.asarray(D),  # (Q_1d, Q_1d)
        )

    def _tensor_kernel(self, b, t_mode, eval_mode, src, dst, num_elem, q_strides):
        """Launch one tensor basis kernel; the Q side is addressed with ``q_strides``."""
        from . import kernels

        module = kernels.basis_module(b.dim, b.num_comp, b.P_1d, b.Q_1d)
        elems, block = kernels.basis_block(b.dim, b.P_1d, b.Q_1d)
        data = b.backend_data
        transpose = t_mode is not NOTRANSPOSE
        B = data.interp_1d_t if transpose else data.interp_1d
        name, mats = "interp", (B,)
        if eval_mode is EVAL_GRAD and data.collocated is not None:
            name, mats = "grad_colloc", (B, data.collocated)
        elif eval_mode is EVAL_GRAD:
            name, mats = "grad", (B, data.grad_1d_t if transpose else data.grad_1d)
        name += "_t" if transpose else ""
        grid = (-(-num_elem // elems),)
        strides = tuple(np.int64(s) for s in q_strides)
        module.get_function(name)(grid, block, (np.int32(num_elem), *mats, src, dst, *strides))

    def _nontensor_basis(self, b, t_mode, eval_mode, u):
        """Non-tensor interp/grad (and transposes) by GEMMs, in the basis layout."""
        E, C, Q = u.shape[0], b.num_comp, b.num_qpts
        data = b.backend_data
        u = cupy.ascontiguousarray(u)
        if t_mode is NOTRANSPOSE:
            shape = (E, b.dim, C, Q) if eval_mode is EVAL_GRAD else (E, C, Q)
            nodes, qpts = u, cupy.empty(shape)
        else:
            nodes, qpts = cupy.empty((E, C, b.num_nodes)), u  # (E, C, P), (E, [dim,] C, Q)
        gemm.apply_basis(data.interp, data.grad, t_mode, eval_mode, nodes, qpts)
        return qpts if t_mode is NOTRANSPOSE else nodes

    def basis_apply(self, b: Basis, t_mode: TransposeMode, eval_mode: EvalMode, u: Array) -> Array:
        """Interp/grad (and transposes): tensor kernels, non-tensor GEMMs; others inherited."""
        if not b.is_tensor:
            return self._nontensor_basis(b, t_mode, eval_mode, u)
        if not b.backend_data.kernels:
            return super().basis_apply(b, t_mode, eval_mode, u)
        num_elem = u.shape[0]
        Q, P, C = b.num_qpts, b.num_nodes, b.num_comp
        rows = b.dim * C if eval_mode is EVAL_GRAD else C
        u = cupy.ascontiguousarray(u)
        if t_mode is NOTRANSPOSE:
            v = cupy.empty((num_elem, rows * Q))  # (E, [dim,] C, Q) flattened per element
            self._tensor_kernel(b, t_mode, eval_mode, u, v, num_elem, (rows * Q, Q))
            shape = (num_elem, b.dim, C, Q) if eval_mode is EVAL_GRAD else (num_elem, C, Q)
            return v.reshape(shape)
        v = cupy.empty((num_elem, C, P))
        self._tensor_kernel(b, t_mode, eval_mode, u, v, num_elem, (rows * Q, Q))
        return v

    # --- operator ----------------------------------------------------------------------------
    def _uses_kernels(self, field):
        b = field.basis
        return (
            field.eval_mode in (EVAL_INTERP, EVAL_GRAD)
            and b.is_tensor
            and b.backend_data.kernels
            and not field.restriction.is_oriented
        )

    @staticmethod
    def _uses_gemm(field):
        return (
            field.eval_mode in (EVAL_INTERP, EVAL_GRAD)
            and not field.basis.is_tensor
            and not field.restriction.is_oriented
        )

    def input_qvec(self, op: Operator, field: OperatorField, u: Array | None) -> Array:
        """Q-vector (size, E*Q) of an input field, written by the basis kernel directly."""
        E, Q = op.num_elem, op.num_qpts
        lvec = u if field.is_active else field.vector
        if field.eval_mode is EVAL_NONE and not field.restriction.is_oriented:
            return self._to_qvec(self._gather(field.restriction, lvec), E, Q)
        if self._uses_gemm(field):  # one GEMM per Q-vector row block, written in place
            data = field.basis.backend_data
            e = cupy.ascontiguousarray(self._gather(field.restriction, lvec))  # (E, C, P)
            q = cupy.empty((field.size, E * Q))
            gemm.apply_basis(data.interp, data.grad, NOTRANSPOSE, field.eval_mode, e, q, qvec=True)
            return q
        if not self._uses_kernels(field):
            return super().input_qvec(op, field, u)
        e = self._gather(field.restriction, lvec)  # (E, C, P)
        q = cupy.empty((field.size, E * Q))
        self._tensor_kernel(field.basis, NOTRANSPOSE, field.eval_mode, e, q, E, (Q, E * Q))
        return q

    @staticmethod
    def _traced(op, slot, build):
        """``build(op)`` cached in ``op.backend_data[slot]`` per QFunction context.

        Traced kernels bake the context in, so a changed context rebuilds; None
        (what is cached when the body is :class:`Untraceable`) means "use the
        stage-by-stage path".
        """
        from ...qfunction_trace import Untraceable

        ctx = op.qf.context
        key = None if ctx is None else ctx.tobytes()
        cached = op.backend_data.get(slot)
        if cached is None or cached[0] != key:
            try:
                run = build(op)
            except Untraceable:
                run = None
            cached = op.backend_data[slot] = (key, run)
        return cached[1]

    def _fused_qfunction(self, op):
        """The traced QFunction kernel of ``op`` (None when its body is untraceable)."""
        from .qfunction_fuse import fused_kernel

        return self._traced(op, "qfunction", lambda op: fused_kernel(op.qf, op.num_qpts))

    def operator_apply_add(self, op: Operator, u: Array | None, v: Array) -> None:
        """v += A u: kernels for G and B, the QFunction traced into one fused kernel.

        EVAL_NONE inputs (stored qdata) are read by that kernel in their E-vector
        layout, with no copy.  Untraceable bodies run vectorized (inherited).
        """
        run = self._fused_qfunction(op)
        if run is None:
            super().operator_apply_add(op, u, v)
            return
        E, Q = op.num_elem, op.num_qpts
        inputs = []  # (array, row stride, element stride)
        for field in op.input_fields:
            if field.eval_mode is EVAL_NONE and not field.restriction.is_oriented:
                lvec = u if field.is_active else field.vector
                e = self._gather(field.restriction, lvec)  # (E, size, Q)
                inputs.append((e, Q, field.size * Q))
            else:
                inputs.append((self.input_qvec(op, field, u), E * Q, Q))  # (size, E*Q)
        # (size, E*Q) each; the kernel writes every entry (no zero-fill pass: 8 B per value)
        outputs = [cupy.empty((f.size, E * Q)) for f in op.output_fields]
        run(E * Q, inputs, [(q, E * Q, Q) for q in outputs])
        for field, q in zip(op.output_fields, outputs, strict=True):
            if field.is_active:
                self.output_add(op, field, q, v)

    def output_add(self, op: Operator, field: OperatorField, q: Array, v: Array) -> None:
        """v += G^T B^T q, the basis kernel (or GEMMs) reading the Q-vector (size, E*Q) directly."""
        if self._uses_gemm(field):
            r, data = field.restriction, field.basis.backend_data
            e = cupy.empty((op.num_elem, r.num_comp, r.elem_size))
            q = cupy.ascontiguousarray(q)  # (size, E*Q)
            gemm.apply_basis(data.interp, data.grad, TRANSPOSE, field.eval_mode, e, q, qvec=True)
            self._scatter_add(r, e, v)
            return
        if not self._uses_kernels(field):
            super().output_add(op, field, q, v)
            return
        E, Q = op.num_elem, op.num_qpts
        r = field.restriction
        e = cupy.empty((E, r.num_comp, r.elem_size))
        q = cupy.ascontiguousarray(q)
        self._tensor_kernel(field.basis, TRANSPOSE, field.eval_mode, q, e, E, (Q, E * Q))
        self._scatter_add(r, e, v)

    # --- assembly ----------------------------------------------------------------------------
    def tensor_element_diagonal(
        self, q: Array, left: list[Array], right: Array, out: Array
    ) -> None:
        """``out (n, K**dim) +=`` the entries' sum-factorized diagonals of ``q (n, size,
        Q_1d**dim)`` in one generated kernel (:mod:`.element_diagonal`: a block per few
        elements, the factors and the stages in shared memory), instead of ``dim`` batched
        GEMMs of tiny matrices; shapes whose block exceeds the static shared memory take the
        GEMMs (inherited).  ``left`` ``dim - 1`` arrays ``(size, K, Q_1d)``, ``right``
        ``(size, Q_1d, K)``: see :meth:`~hofem.backends.contract.Backend.tensor_element_diagonal`.
        """
        from .element_diagonal import add_element_diagonal, diagonal_launch

        size, Q_1d, K = right.shape
        launch = diagonal_launch(len(left) + 1, K, Q_1d, size)
        if launch is None:
            super().tensor_element_diagonal(q, left, right, out)
            return
        add_element_diagonal(launch, q, left, right, out)
