"""``/cpu/self/ref``: the readable array-module reference backend and test oracle.

Everything here is written against an array module ``xp`` (NumPy here; the
CUDA reference backend reuses it with CuPy), one array expression per step,
no element loops in Python.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from ..constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT, NOTRANSPOSE, TRANSPOSE
from ..entry_contraction import contract_entries
from ..memory import owning_array
from ..restriction import expand_offsets
from ..vector_ops import VectorOps
from .contract import Array, Backend

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ..constants import EvalMode, TransposeMode
    from ..typing import BasisLike as Basis
    from ..typing import FieldLike as OperatorField
    from ..typing import LinearOperator, SparseMatrix
    from ..typing import OperatorLike as Operator
    from ..typing import RestrictionLike as ElemRestriction

__all__ = ["RefBackend", "RefBasisData", "RefRestrictionData"]

# elements per chunk in assembly: bounds the (chunk, Q, size_out, size_in) work arrays
_ASSEMBLY_CHUNK_ENTRIES = 1 << 24


@dataclass
class RefRestrictionData:
    """A restriction's data on the reference backends (``ElemRestriction.backend_data``).

    Attributes
    ----------
    indices : int array (num_elem * elem_size,) of ``xp``, or None
        Component-0 offsets in device memory; None on the host (each application
        reads :attr:`~hofem.ElemRestriction.indices`).
    signs : float64 array (num_elem, 1, elem_size) of ``xp``, or None
        -1 where oriented; None for unoriented restrictions.
    """

    indices: Array | None
    signs: Array | None


@dataclass
class RefBasisData:
    """A basis's matrices in the backend's memory (``Basis.backend_data``).

    Attributes
    ----------
    interp_1d, grad_1d : array (Q_1d, P_1d), or None
        Tensor bases.
    interp : array (Q, P), or None
    grad : array (dim, Q, P), or None
        Non-tensor bases.
    """

    interp_1d: Array | None = None
    grad_1d: Array | None = None
    interp: Array | None = None
    grad: Array | None = None


class RefBackend(Backend):
    """NumPy reference implementation of every interface object's arithmetic.

    Declares no device CG (``device_cg = None``), NumPy's :class:`~hofem.vector_ops.VectorOps`
    and no fused apply+dot: see :class:`~hofem.backends.contract.Backend`.
    """

    resource = "/cpu/self/ref"
    xp = np
    # elements interleaved per block in the hf.STRIDES_BACKEND layout (ElemRestriction)
    STRIDES_LANES = 1
    device_cg = None

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError when this backend cannot run here (always runs)."""

    def synchronize(self) -> None:
        """Wait for queued device work (nothing to wait for on the CPU)."""

    def release_cached_memory(self) -> None:
        """Give cached free device memory back (nothing cached on the CPU)."""

    # --- arrays --------------------------------------------------------------------------
    def asarray(self, x: Any, dtype: Any = None) -> Array:
        """Copy or view ``x`` (host or device) as an array of this backend."""
        return self.xp.asarray(self.to_numpy(x), dtype=dtype)

    @staticmethod
    def to_numpy(x: Any) -> np.ndarray:
        """Host NumPy array of ``x`` (copies device arrays)."""
        if hasattr(x, "get") and not isinstance(x, np.ndarray):
            return x.get()
        return np.asarray(x)

    def check_vector(
        self, x: Any, name: str, shape: tuple[int, ...] | None, flat_ok: bool = False
    ) -> None:
        """Raise TypeError/ValueError unless ``x`` is a float64 ``xp`` array of ``shape``.

        ``shape=None`` skips the shape check; ``flat_ok`` also accepts the
        flattened shape.
        """
        if not isinstance(x, self.xp.ndarray):
            kind = type(x).__module__.split(".")[0] + "." + type(x).__name__
            raise TypeError(
                f"{name} must be a {self.xp.__name__}.ndarray for backend {self.resource}, got "
                f"{kind}; move it with ceed.asarray({name})"
            )
        if x.dtype != np.float64:
            raise TypeError(
                f"{name} must have dtype float64, got {x.dtype}; use {name}.astype(float64)"
            )
        if shape is None or x.shape == shape:
            return
        if flat_ok and x.shape == (int(np.prod(shape)),):
            return
        raise ValueError(f"{name} must have shape {shape}, got {x.shape}")

    def vector_ops(self) -> VectorOps:
        """CG's vector work as array expressions of :attr:`xp` (see :mod:`hofem.vector_ops`)."""
        return VectorOps(self.xp)

    @staticmethod
    def scatter_entries(values: Array, index: Array, out: Array) -> None:
        """``out[index] = values``: a vector of free DOFs into an L-vector.

        Parameters
        ----------
        values : array (n,), float64
        index : int array (n,)
            Distinct entries of ``out``.
        out : array (l_size,), float64, updated
        """
        out[index] = values

    @staticmethod
    def gather_add_entries(w: Array, index: Array, v: Array) -> None:
        """``v += w[index]``: the free DOFs of an L-vector added into ``v``.

        Parameters
        ----------
        w : array (l_size,), float64
        index : int array (n,)
        v : array (n,), float64, updated
        """
        v += w[index]

    # --- restriction -------------------------------------------------------------------------
    def restriction_setup(self, r: ElemRestriction) -> None:
        """Move offset indices (and signs) to the device; on the host, index when applied.

        With device memory (``xp`` not NumPy) the component-0 offsets of
        :meth:`~hofem.ElemRestriction.compact_indices` are uploaded,
        ``(num_elem * elem_size,)``, and the restriction's host offsets
        released; several components are indexed by adding the component
        stride (``1 / num_comp`` of the expanded indices' memory).  On NumPy
        nothing is copied: each application reads
        :attr:`~hofem.ElemRestriction.indices` (the stored offsets for one
        component, expanded for several; computed for strided restrictions).
        """
        indices = None
        if r.strides is None and self.xp is not np:
            indices = self._device_offsets(r.compact_indices()[0].ravel())  # (E * elem_size,)
            r.release_host_indices()
        signs = None if r.signs is None else self.xp.asarray(r.signs)
        r.backend_data = RefRestrictionData(indices=indices, signs=signs)

    def restriction_device_offsets(self, r: ElemRestriction) -> Array | None:
        """The device component-0 offsets ``(num_elem * elem_size,)`` of ``r``, or None."""
        return r.backend_data.indices

    def _device_offsets(self, offsets):
        """Device copy of host ``offsets``; those of a read-only array are uploaded once.

        A numbering's offsets are read-only (:class:`hofem.meshes.H1Numbering`), so
        every restriction an :class:`hofem.H1Space` makes from them (the solution's,
        a coordinate field's, any ``make_restriction(num_comp)``) shares one device
        array, kept while the host array lives. Offsets whose memory is writeable
        (a user's array) are copied every time: they may change between uploads.
        """
        owner = owning_array(offsets)
        if owner.flags.writeable:
            return self.asarray(offsets)
        shared = self.__dict__.setdefault("_shared_offsets", {})
        key = (offsets.__array_interface__["data"][0], offsets.shape, offsets.dtype.str)
        if key not in shared:
            shared[key] = self.asarray(offsets)
            weakref.finalize(owner, shared.pop, key, None)
        return shared[key]

    def _expanded_indices(self, r):
        """(e_size,) L-vector index of every E-vector entry, for one application."""
        offsets = r.backend_data.indices  # (num_elem * elem_size,) device, or None
        if offsets is None:  # host or strided
            return self.asarray(r.indices.ravel())
        offsets = offsets.reshape(r.num_elem, 1, r.elem_size)
        return expand_offsets(offsets, r.num_comp, r.component_stride, r.l_size, self.xp).ravel()

    def restriction_apply(
        self, r: ElemRestriction, u: Array, t_mode: TransposeMode, signed: bool = True
    ) -> Array:
        """L (l_size,) -> E (num_elem, num_comp, elem_size), or the transpose (summing)."""
        xp = self.xp
        signs = r.backend_data.signs if signed else None
        shape = (r.num_elem, r.num_comp, r.elem_size)
        if r.is_identity:  # the E-vector is the L-vector
            e = u.reshape(shape).copy() if t_mode is NOTRANSPOSE else u.astype(np.float64).ravel()
            return e
        indices = self._expanded_indices(r)  # (e_size,)
        if t_mode is NOTRANSPOSE:
            e = u[indices].reshape(shape)
            return e * signs if signs is not None else e
        if signs is not None:
            u = u * signs
        return xp.bincount(indices, weights=u.ravel(), minlength=r.l_size).astype(np.float64)

    # --- basis -------------------------------------------------------------------------------
    def basis_setup(self, b: Basis) -> None:
        """Move the basis matrices to the device."""
        xp = self.xp
        if b.is_tensor:
            b.backend_data = RefBasisData(
                interp_1d=xp.asarray(b.interp_1d), grad_1d=xp.asarray(b.grad_1d)
            )
        else:
            b.backend_data = RefBasisData(interp=xp.asarray(b.interp), grad=xp.asarray(b.grad))

    def _contract(self, mat, u, axis):
        """Apply ``mat`` (m, n) along ``axis`` of ``u``: the one sum-factorization primitive."""
        shape = u.shape
        pre, post = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))
        out = self.xp.matmul(mat, u.reshape(pre, shape[axis], post))  # (pre, m, post)
        return out.reshape((*shape[:axis], mat.shape[0], *shape[axis + 1 :]))

    def _tensor(self, b, mats, u, lead):
        """Apply ``mats[d]`` along x_d of tensor data ``u`` (lead..., n**dim)."""
        n = mats[0].shape[1]
        u = u.reshape((*lead, *([n] * b.dim)))  # (lead..., n_z, n_y, n_x)
        for d, mat in enumerate(mats):
            u = self._contract(mat, u, len(lead) + b.dim - 1 - d)
        return u.reshape((*lead, -1))

    def basis_apply(self, b: Basis, t_mode: TransposeMode, eval_mode: EvalMode, u: Array) -> Array:
        """Interp/grad and transposes; layouts as in :meth:`hofem.Basis.apply`."""
        data = b.backend_data
        num_elem = u.shape[0]
        if not b.is_tensor:
            B, G = data.interp, data.grad  # (Q, P), (dim, Q, P)
            if eval_mode is EVAL_INTERP:
                return u @ (B.T if t_mode is NOTRANSPOSE else B)
            if t_mode is NOTRANSPOSE:  # (E, 1, C, P) @ (1, dim, P, Q) -> (E, dim, C, Q)
                return self.xp.matmul(u[:, None], G.transpose(0, 2, 1)[None])
            return self.xp.matmul(u, G[None]).sum(axis=1)  # (E, dim, C, Q) @ (1, dim, Q, P)
        B, G = data.interp_1d, data.grad_1d
        if t_mode is TRANSPOSE:
            B, G = B.T, G.T
        lead = (num_elem, b.num_comp)
        if eval_mode is EVAL_INTERP:
            return self._tensor(b, [B] * b.dim, u, lead)
        if t_mode is NOTRANSPOSE:
            parts = [
                self._tensor(b, [G if e == d else B for e in range(b.dim)], u, lead)
                for d in range(b.dim)
            ]
            return self.xp.stack(parts, axis=1)  # (E, dim, C, Q)
        out = self._tensor(b, [G] + [B] * (b.dim - 1), u[:, 0], lead)
        for d in range(1, b.dim):
            out += self._tensor(b, [G if e == d else B for e in range(b.dim)], u[:, d], lead)
        return out

    def basis_weight(self, b: Basis, num_elem: int) -> Array:
        """Quadrature weights broadcast to (num_elem, Q)."""
        w = self.xp.asarray(b.q_weight_1d if b.is_tensor else b.q_weight)
        if b.is_tensor:
            w1 = w
            for _ in range(b.dim - 1):
                w = (w1[:, None] * w[None, :]).ravel()
        return self.xp.broadcast_to(w, (num_elem, w.shape[0])).copy()

    # --- operator ----------------------------------------------------------------------------
    def _to_qvec(self, a, num_elem, num_qpts):
        """Basis layout (E, [dim,] C, Q) -> Q-vector (size, E*Q)."""
        a = a.reshape(num_elem, -1, num_qpts)
        return a.transpose(1, 0, 2).reshape(a.shape[1], num_elem * num_qpts)

    def _from_qvec(self, a, num_elem, num_qpts, shape):
        """Q-vector (size, E*Q) -> basis layout ``shape``."""
        a = a.reshape(a.shape[0], num_elem, num_qpts).transpose(1, 0, 2)
        return self.xp.ascontiguousarray(a).reshape(shape)

    def input_qvec(self, op: Operator, field: OperatorField, u: Array | None) -> Array:
        """The Q-vector (size, E*Q) of an input field (``u``: active L-vector)."""
        E, Q = op.num_elem, op.num_qpts
        if field.eval_mode is EVAL_WEIGHT:
            return self.basis_weight(field.basis, E).reshape(1, E * Q)
        lvec = u if field.is_active else field.vector
        e = self.restriction_apply(field.restriction, lvec, NOTRANSPOSE)
        if field.eval_mode is not EVAL_NONE:
            e = self.basis_apply(field.basis, NOTRANSPOSE, field.eval_mode, e)
        return self._to_qvec(e, E, Q)

    def output_add(self, op: Operator, field: OperatorField, q: Array, v: Array) -> None:
        """v += G^T B^T q for an output field with Q-vector ``q`` (size, E*Q)."""
        E, Q = op.num_elem, op.num_qpts
        r, b = field.restriction, field.basis
        if field.eval_mode is EVAL_GRAD:
            shape = (E, b.dim, b.num_comp, Q)
        else:
            shape = (E, r.num_comp, Q)
        e = self._from_qvec(q, E, Q, shape)
        if field.eval_mode is not EVAL_NONE:
            e = self.basis_apply(b, TRANSPOSE, field.eval_mode, e)
        v += self.restriction_apply(r, e, TRANSPOSE)

    def operator_apply_add(self, op: Operator, u: Array | None, v: Array) -> None:
        """v += A u, one whole-array step per G, B, D, B^T, G^T."""
        xp = self.xp
        npts = op.num_elem * op.num_qpts
        inputs = [self.input_qvec(op, f, u) for f in op.input_fields]
        outputs = [xp.zeros((f.size, npts)) for f in op.output_fields]
        op.qf.apply(inputs, outputs)
        for field, q in zip(op.output_fields, outputs, strict=True):
            if field.is_active:
                self.output_add(op, field, q, v)

    def operator_apply_dot(self, op: Operator, u: Array, v: Array) -> Array | None:
        """``v = A u`` and ``u . v`` (0-d array) from inside the operator kernel, or None where
        the backend forms no such product (here: never); the operator then applies and dots."""
        return None

    # --- assembly ----------------------------------------------------------------------------
    def _dense_field_basis(self, field, r):
        """B of one active field as (size, Q, num_comp * P): Q-vector rows from E-vector."""
        C, P = r.num_comp, r.elem_size
        if field.eval_mode is EVAL_NONE:
            mats = np.eye(P)[None]  # (1, Q = P, P)
        elif field.eval_mode is EVAL_INTERP:
            mats = field.basis.interp[None]  # (1, Q, P)
        else:
            mats = field.basis.grad  # (dim, Q, P)
        num_qpts = mats.shape[1]
        out = np.zeros((mats.shape[0], C, num_qpts, C, P))
        for c in range(C):
            out[:, c, :, c, :] = mats
        return out.reshape(mats.shape[0] * C, num_qpts, C * P)

    def _active_basis(self, op, output):
        fields = [f for f in (op.output_fields if output else op.input_fields) if f.is_active]
        r = fields[0].restriction
        return np.concatenate([self._dense_field_basis(f, r) for f in fields]), r  # (S, Q, CP)

    def _qfunction_matrix(self, op):
        """Pointwise linearization D: (S_out, S_in, E*Q), by probing the QFunction.

        Points last: each probe's outputs are written as whole rows.
        """
        xp = self.xp
        npts = op.num_elem * op.num_qpts
        inputs = [None if f.is_active else self.input_qvec(op, f, None) for f in op.input_fields]
        active_in = [i for i, f in enumerate(op.input_fields) if f.is_active]
        active_out = [i for i, f in enumerate(op.output_fields) if f.is_active]
        s_in = sum(op.input_fields[i].size for i in active_in)
        s_out = sum(op.output_fields[i].size for i in active_out)
        D = xp.empty((s_out, s_in, npts))
        col = 0
        for i in active_in:
            for row in range(op.input_fields[i].size):
                probe = list(inputs)
                for j in active_in:
                    probe[j] = xp.zeros((op.input_fields[j].size, npts))
                probe[i][row] = 1.0
                outputs = [xp.zeros((f.size, npts)) for f in op.output_fields]
                op.qf.apply(probe, outputs)
                D[:, col, :] = xp.concatenate([outputs[k] for k in active_out])
                col += 1
        return D

    def _element_chunks(self, op, D, per_elem):
        step = max(1, _ASSEMBLY_CHUNK_ENTRIES // max(1, per_elem))
        for start in range(0, op.num_elem, step):
            stop = min(op.num_elem, start + step)
            Q = op.num_qpts
            yield start, stop, D[:, :, start * Q : stop * Q].reshape(*D.shape[:2], stop - start, Q)

    def _element_sum(self, op, subscripts, out_shape, per_elem):
        """Per-element ``einsum(subscripts, B_out, D_e, B_in)`` over bounded element chunks.

        Returns the (num_elem, *out_shape) result and the active restrictions.
        """
        xp = self.xp
        B_in, r_in = self._active_basis(op, False)  # (S_in, Q, C_in P_in)
        B_out, r_out = self._active_basis(op, True)  # (S_out, Q, C_out P_out)
        B_in, B_out = xp.asarray(B_in), xp.asarray(B_out)
        D = self._qfunction_matrix(op)  # (S_out, S_in, E Q)
        result = xp.zeros((op.num_elem, *out_shape(B_out.shape[2], B_in.shape[2])))
        per_elem = op.num_qpts * (D.shape[0] * D.shape[1] + per_elem(B_out.shape[0], B_in.shape[2]))
        for start, stop, D_e in self._element_chunks(op, D, per_elem):
            result[start:stop] = xp.einsum(subscripts, B_out, D_e, B_in, optimize=True)
        return result, r_in, r_out

    def operator_assemble_diagonal(self, op: Operator) -> Array:
        """Diagonal as an L-vector: sum over elements of diag(B_out^T D B_in).

        Sum-factorized on scalar tensor-product fields (:meth:`_tensor_diagonal`),
        else from the dense element bases.
        """
        rows_out, rows_in = self._tensor_rows(op, True), self._tensor_rows(op, False)
        same = rows_out and rows_in and rows_out[0][0].shape == rows_in[0][0].shape
        if same and len(rows_out[0]) == len(rows_in[0]):
            r_out = next(f for f in op.output_fields if f.is_active).restriction
            diag = self._tensor_diagonal(op, rows_out, rows_in)
        else:
            diag, _, r_out = self._element_sum(
                op, "aqi,abeq,bqi->ei", lambda n_out, n_in: (n_out,), lambda s_out, n_in: 0
            )
        e = diag.reshape(op.num_elem, r_out.num_comp, r_out.elem_size)
        return self.restriction_apply(r_out, e, TRANSPOSE, signed=False)

    @staticmethod
    def _tensor_rows(op, output):
        """Each row of the active basis (:meth:`_active_basis`) as its 1D factors, x first:
        ``B_a = kron(.., M_a[1], M_a[0])``; None unless every active field is a scalar
        tensor-product field of EVAL_INTERP or EVAL_GRAD (the same 1D shapes)."""
        fields = [f for f in (op.output_fields if output else op.input_fields) if f.is_active]
        rows = []
        for f in fields:
            b = f.basis
            if b is None or not b.is_tensor or f.restriction.num_comp != 1:
                return None
            if f.eval_mode is EVAL_INTERP:
                rows.append([b.interp_1d] * b.dim)
            elif f.eval_mode is EVAL_GRAD:
                B, G = b.interp_1d, b.grad_1d
                rows.extend([G if e == d else B for e in range(b.dim)] for d in range(b.dim))
            else:
                return None
        shapes = {(len(row), m.shape) for row in rows for m in row}
        return rows if len(shapes) == 1 else None

    def _tensor_diagonal(self, op, rows_out, rows_in):
        """Element diagonals (num_elem, P) of scalar tensor-product fields, sum-factorized.

        ``diag_e[i] = sum_ab sum_q B_a[q, i] D_ab[e, q] B_b[q, i]``, and
        ``B_a[q, i] B_b[q, i]`` is the Kronecker product of the 1D products
        ``M_a[k] * M_b[k]`` (entrywise): one 1D contraction per direction instead
        of the dense ``(Q, P)`` element basis.
        """
        xp = self.xp
        (Q_1d, P_1d), dim = rows_in[0][0].shape, len(rows_in[0])  # the same for rows_out
        D = self._qfunction_matrix(op)  # (S_out, S_in, E Q)
        E = op.num_elem
        out = xp.zeros((E,) + (P_1d,) * dim)  # (E, [P_z,] [P_y,] P_x)
        for a, m_out in enumerate(rows_out):
            for b, m_in in enumerate(rows_in):
                t = D[a, b].reshape((E,) + (Q_1d,) * dim)  # (E, [Q_z,] [Q_y,] Q_x)
                for k in range(dim):  # the fastest point axis is direction k's: contract it,
                    # and put its node axis after E, so the last one ends slowest
                    t = xp.moveaxis(t @ xp.asarray(m_out[k] * m_in[k]), -1, 1)
                out += t
        return out.reshape(E, -1)

    def element_matrices(self, op: Operator) -> tuple[Array, ElemRestriction, ElemRestriction]:
        """Element matrices (num_elem, C_out*P_out, C_in*P_in), unsigned."""
        return self._element_sum(
            op, "aqi,abeq,bqk->eik", lambda n_out, n_in: (n_out, n_in), lambda s, n: s * n
        )

    def operator_assemble(self, op: Operator) -> SparseMatrix:
        """CSR matrix of the operator from element matrices and restriction indices."""
        A, r_in, r_out = self.element_matrices(op)
        A = self.to_numpy(A)
        for r, axis in ((r_out, 2), (r_in, 1)):
            if r.signs is not None:  # (E, 1, P) -> per-entry signs along rows/cols
                s = np.broadcast_to(r.signs, (r.num_elem, r.num_comp, r.elem_size))
                A = A * np.expand_dims(s.reshape(r.num_elem, -1), axis)
        rows = np.broadcast_to(r_out.indices.reshape(op.num_elem, -1, 1), A.shape)
        cols = np.broadcast_to(r_in.indices.reshape(op.num_elem, 1, -1), A.shape)
        shape = (r_out.l_size, r_in.l_size)
        matrix = scipy.sparse.coo_matrix((A.ravel(), (rows.ravel(), cols.ravel())), shape=shape)
        return self.sparse_csr(matrix.tocsr())

    def sparse_csr(self, matrix: scipy.sparse.csr_matrix) -> SparseMatrix:
        """Return the host CSR matrix in this backend's sparse type."""
        matrix.sum_duplicates()
        return matrix

    def tensor_element_diagonal(
        self, q: Array, left: list[Array], right: Array, out: Array
    ) -> None:
        """``out (n, K**dim) += `` the entries' contractions (:func:`contract_entries`, one
        ``matmul`` per direction for every entry) summed over the entries.

        ``q (n, size, Q_1d**dim)``, ``left`` ``dim - 1`` arrays ``(size, K, Q_1d)``, ``right``
        ``(size, Q_1d, K)``: see :meth:`~hofem.backends.contract.Backend.tensor_element_diagonal`.
        No temporary outlives the call: the caller's next slab reuses their memory.
        """
        out += contract_entries(self.xp, q, left, right).sum(axis=1)

    def host_csr(
        self, values: Array, rows: Array, cols: Array, shape: tuple[int, int]
    ) -> scipy.sparse.csr_matrix:
        """SciPy's COO to CSR (sums the duplicates)."""
        return scipy.sparse.coo_matrix((values, (rows, cols)), shape=shape).tocsr()

    def linear_operator(
        self, shape: tuple[int, int], op: Callable[[Array], Array]
    ) -> LinearOperator:
        """SciPy LinearOperator applying ``op``."""
        return scipy.sparse.linalg.LinearOperator(shape, matvec=op.__call__, dtype=np.float64)
