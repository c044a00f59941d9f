"""Diagonals and element matrices of symmetric forms from their pointwise matrices.

A form ``a(u, v) = sum_e sum_q sum_ab (M_a v)_q D_ab[e, q] (M_b u)_q`` with
a symmetric pointwise matrix ``D`` (the diffusion q-data ``w det J J^-1 J^-T``,
or the mass q-data ``w det J``) has the element diagonal

    diag_e[i] = sum_ab sum_q D_ab[e, q] M_a[q, i] M_b[q, i]

and the element matrices ``sum_ab sum_q D_ab[e, q] M_a[q, i] M_b[q, k]``.  On
tensor-product bases ``M_a[q, i] M_b[q, j]`` is a Kronecker product of 1D
factors, so both are one 1D contraction per direction (sum factorization),
from ``D`` directly: no probing of the QFunction, no dense element basis.
:class:`LevelAssembly` accumulates them from chunks of cells, so the caller
can compute ``D`` chunk by chunk and share each chunk among every level that
has the same quadrature (the p-multigrid levels of :func:`hofem.forms.multigrid_hierarchy`).

Every function is written against the array module ``xp`` of the backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse

from .constants import EVAL_GRAD, EVAL_INTERP, TRANSPOSE
from .entry_contraction import contract_entries
from .restriction import index_dtype

if TYPE_CHECKING:
    from .basis import Basis
    from .constants import EvalMode
    from .restriction import ElemRestriction
    from .typing import Array

__all__ = ["DENSE_ENTRIES", "LevelAssembly", "basis_rows"]

# dense element weights up to this many entries per pointwise value (Q * P or Q * P * P)
# beat sum factorization on tensor bases: its products are then too small to pay for
# their launches and loops (the order-1 matrix of a low-order level)
DENSE_ENTRIES = 4096
# on the host the contraction of every entry at once runs this many values of its largest
# temporary at a time (8 MB): whole chunks' temporaries (tens of MB) are fresh memory at each
# product, page faults and cache misses, and cost more than the products; a device runs
# whole chunks, fewer launches
HOST_CONTRACT_ENTRIES = 1 << 20


def basis_rows(basis: Basis, eval_mode: EvalMode) -> list:
    """The rows ``M_a`` of an active field's basis as host arrays.

    Tensor bases: each row is its list of 1D factors ``(Q_1d, P_1d)``, direction
    0 (the fastest point and node axis) first; gradient row ``a`` differentiates
    along direction ``a``.  Simplex bases: each row is ``(Q, P)``.

    Raises
    ------
    ValueError
        An eval mode other than interp or grad.
    """
    if eval_mode not in (EVAL_INTERP, EVAL_GRAD):
        raise ValueError(f"basis_rows needs EVAL_INTERP or EVAL_GRAD, got {eval_mode!r}")
    dim = basis.dim
    if basis.is_tensor:
        B, G = basis.interp_1d, basis.grad_1d
        if eval_mode is EVAL_INTERP:
            return [[B] * dim]
        return [[G if d == a else B for d in range(dim)] for a in range(dim)]
    if eval_mode is EVAL_INTERP:
        return [basis.interp]
    return [basis.grad[a] for a in range(dim)]


def _factors(xp, per_entry):
    """``(left, right)`` of :func:`~hofem.entry_contraction.contract_entries` from
    ``per_entry[k][d]`` ``(Q_1d, K)`` host arrays."""
    dim = len(per_entry[0])
    stack = [np.stack([factors[d] for factors in per_entry]) for d in range(dim)]  # (size, Q, K)
    left = [xp.asarray(np.ascontiguousarray(s.transpose(0, 2, 1))) for s in stack[1:]]
    return left, xp.asarray(stack[0])


def _outer(m_a, m_b):
    """``(Q, P, P)`` products ``m_a[q, i] m_b[q, k]`` flattened to ``(Q, P * P)``."""
    return (m_a[:, :, None] * m_b[:, None, :]).reshape(m_a.shape[0], -1)


class _Weights(NamedTuple):
    """What :meth:`LevelAssembly.add` multiplies one chunk's entries by, for one list of pairs.

    Dense weights (``diag``, ``matrices``: ``(size * Q, P)``, ``(size * Q, P * P)``) where
    they are cheaper than sum factorization, else None and the factors of
    :func:`~hofem.entry_contraction.contract_entries`:
    ``diag_factors`` of every entry at once (its weight, 2 off the diagonal, in direction
    0), ``matrix_factors`` one entry at a time (an entry's element matrices are
    ``(P P')^dim`` values a cell: all entries at once would hold ``size`` times that).
    """

    diag: Array | None
    matrices: Array | None
    diag_factors: tuple | None
    matrix_factors: list | None


class LevelAssembly:
    """The assembled diagonal (and optionally the matrix) of one level, from pointwise chunks.

    Parameters
    ----------
    restriction : ElemRestriction
        The level's active restriction (``num_comp`` components, each with the same
        scalar form: the vector forms are block diagonal).
    basis : Basis
        The level's active basis on the quadrature of the pointwise matrices.
    eval_mode : hf.EVAL_INTERP or hf.EVAL_GRAD
    free_dofs : int array, optional
        A :func:`hofem.restrict_dofs` level's free L-vector indices (on the backend).
    matrix : bool
        Also accumulate the element matrices (for :meth:`linear_assemble`).
    fill : callable, optional
        Called (without arguments) before the diagonal or the matrix is read: the
        caller's pass over the pointwise matrix, which calls :meth:`add` with each chunk.
    """

    def __init__(
        self,
        restriction: ElemRestriction,
        basis: Basis,
        eval_mode: EvalMode,
        free_dofs: Array | None = None,
        matrix: bool = False,
        fill: Callable[[], None] | None = None,
    ) -> None:
        self.ceed, self.restriction, self.free_dofs = restriction.ceed, restriction, free_dofs
        self.fill = fill
        xp = self.ceed.xp
        self.xp = xp
        self.tensor = basis.is_tensor
        self.host_rows = basis_rows(basis, eval_mode)  # the weights are made from them
        self._weights = {}  # pairs -> their _Weights (see _weights_of)
        P, E = restriction.elem_size, restriction.num_elem
        self.diag = xp.zeros((E, P))  # (num_elem, P) element diagonals, one component's
        self.matrices = xp.zeros((E, P, P)) if matrix else None  # (num_elem, P, P)

    def add(self, start: int, stop: int, q: Array, pairs: list[tuple[int, int]]) -> None:
        """Add cells ``start:stop`` of the pointwise matrix.

        Parameters
        ----------
        start, stop : int
        q : array (stop - start, size, Q)
            The pointwise matrix's distinct entries (the q-data's layout), C-contiguous.
        pairs : list of (int, int)
            ``pairs[k] = (a, b)``, ``a <= b``: entry ``k`` is ``D_ab = D_ba``.
        """
        xp, n = self.xp, stop - start
        weights = self._weights_of(tuple(pairs))
        if weights.diag is not None:  # one product for every entry: (n, size * Q) @ (size * Q, P)
            self.diag[start:stop] += q.reshape(n, -1) @ weights.diag
        else:
            size, Q_1d = q.shape[1], weights.diag_factors[1].shape[1]
            # a cell's q values, no fewer than any temporary's while K <= Q_1d
            per_cell = size * Q_1d ** (len(weights.diag_factors[0]) + 1)
            slab = n if xp is not np else max(1, HOST_CONTRACT_ENTRIES // per_cell)
            for a, b in ((a, min(a + slab, n)) for a in range(0, n, slab)):
                # the backend's contraction, summed over the entries (a generated kernel on
                # the CUDA backends); the host's slabs bound its temporaries
                self.ceed.backend.tensor_element_diagonal(
                    q[a:b], *weights.diag_factors, self.diag[start + a : start + b]
                )
        if self.matrices is None:
            return
        if weights.matrices is not None:
            P = self.matrices.shape[1]
            self.matrices[start:stop] += (q.reshape(n, -1) @ weights.matrices).reshape(n, P, P)
            return
        dim, P_1d = len(self.host_rows[0]), self.host_rows[0][0].shape[1]
        for k, (a, b) in enumerate(pairs):
            mats = contract_entries(xp, q[:, k : k + 1], *weights.matrix_factors[k])  # (n, 1, .)
            mats = self._node_order(mats.reshape(n, -1), dim, P_1d)
            self.matrices[start:stop] += mats
            if a != b:  # D_ba's part
                self.matrices[start:stop] += mats.transpose(0, 2, 1)

    def _weights_of(self, pairs):
        """The :class:`_Weights` of ``pairs``, made once.

        Dense: simplex bases, and tensor bases whose dense weights have at most
        :data:`DENSE_ENTRIES` entries per pointwise value (the order-1 and low-order
        levels, where the many tiny products of sum factorization cost more than
        their flops).  Each dense row ``(k, q)`` holds the products of the dense basis
        rows of ``pairs[k]`` (both orders).
        """
        if pairs in self._weights:
            return self._weights[pairs]
        rows, xp = self.host_rows, self.xp
        first = rows[0]
        Q, P = np.prod([m.shape for m in first], axis=0) if self.tensor else first.shape
        dense = not self.tensor or Q * P <= DENSE_ENTRIES
        dense_mats = self.matrices is not None and (not self.tensor or Q * P * P <= DENSE_ENTRIES)
        diag_factors = matrix_factors = None
        if self.tensor and not dense:  # entry k's factors per direction, its weight in x's
            diag_factors = _factors(xp, [
                [m_a * m_b * (1.0 if d or a == b else 2.0)
                 for d, (m_a, m_b) in enumerate(zip(rows[a], rows[b], strict=True))]
                for a, b in pairs
            ])  # fmt: skip
        if self.matrices is not None and self.tensor and not dense_mats:
            matrix_factors = [
                _factors(xp, [[_outer(x, y) for x, y in zip(rows[a], rows[b], strict=True)]])
                for a, b in pairs
            ]
        if self.tensor and dense:  # x first -> kron(z, kron(y, x)): slowest first
            rows = [functools.reduce(lambda acc, m: np.kron(m, acc), row) for row in rows]
        diag, mats = [], []
        for a, b in pairs if dense or dense_mats else ():
            m_a, m_b = rows[a], rows[b]
            diag.append(m_a * m_b * (1.0 if a == b else 2.0))  # (Q, P)
            if dense_mats:
                both = m_a[:, :, None] * m_b[:, None, :]  # (Q, P, P)
                mats.append(both if a == b else both + both.transpose(0, 2, 1))
        self._weights[pairs] = _Weights(
            xp.asarray(np.concatenate(diag)) if dense else None,  # (size * Q, P)
            xp.asarray(np.concatenate(mats).reshape(-1, P * P)) if dense_mats else None,
            diag_factors,
            matrix_factors,
        )
        return self._weights[pairs]

    def _node_order(self, mats, dim, P_1d):
        """``(n, (P P')^dim)``, the pairs slowest direction first -> ``(n, P, P')`` matrices."""
        n = mats.shape[0]
        t = mats.reshape((n,) + (P_1d, P_1d) * dim)  # (n, i_z, k_z, i_y, k_y, i_x, k_x)
        rows, cols = tuple(1 + 2 * d for d in range(dim)), tuple(2 + 2 * d for d in range(dim))
        return t.transpose((0, *rows, *cols)).reshape(n, P_1d**dim, P_1d**dim)

    def linear_assemble_diagonal(self) -> Array:
        """The diagonal, an L-vector ``(l_size,)`` (``(n_free,)`` with ``free_dofs``)."""
        if self.fill is not None:
            self.fill()
        r = self.restriction
        e = self.xp.broadcast_to(self.diag[:, None, :], (r.num_elem, r.num_comp, r.elem_size))
        diag = r.apply(self.xp.ascontiguousarray(e), TRANSPOSE)
        return diag if self.free_dofs is None else diag[self.free_dofs]

    def linear_assemble(self) -> scipy.sparse.csr_matrix:
        """The host CSR matrix (``A[free][:, free]`` with ``free_dofs``), assembled where
        the element matrices live (:meth:`~hofem.backends.contract.Backend.host_csr`).

        Raises
        ------
        ValueError
            Made without ``matrix=True``.
        """
        if self.matrices is None:
            raise ValueError("linear_assemble needs a LevelAssembly made with matrix=True")
        if self.fill is not None:
            self.fill()
        r, xp = self.restriction, self.xp
        index = _element_indices(r)  # (E, num_comp, P) L-vector indices
        n = r.l_size
        if self.free_dofs is not None:  # free DOFs 0..n-1, every constrained one -1 (dropped)
            n = self.free_dofs.size
            number = xp.full(r.l_size, -1, dtype=index.dtype)
            number[self.free_dofs] = xp.arange(n, dtype=index.dtype)
            index = number[index]
        shape = self.matrices.shape  # (E, P, P)
        rows = [xp.broadcast_to(index[:, c, :, None], shape).ravel() for c in range(r.num_comp)]
        cols = [xp.broadcast_to(index[:, c, None, :], shape).ravel() for c in range(r.num_comp)]
        rows, cols = xp.concatenate(rows), xp.concatenate(cols)  # (num_comp * E * P * P,)
        values = xp.tile(self.matrices.ravel(), r.num_comp)
        if self.free_dofs is not None:
            keep = (rows >= 0) & (cols >= 0)
            rows, cols, values = rows[keep], cols[keep], values[keep]
        return self.ceed.backend.host_csr(values, rows, cols, (n, n))


def _element_indices(r: ElemRestriction) -> Array:
    """``(num_elem, num_comp, elem_size)`` L-vector indices of ``r`` where the backend keeps
    its offsets (no copy back to the host of a device restriction), int32 while they fit:
    the COO-to-CSR sort then moves half the bytes."""
    offsets = r.kept_offsets()  # (num_elem, elem_size)
    xp = np if isinstance(offsets, np.ndarray) else r.ceed.xp
    dtype = index_dtype(r.l_size)
    comp = xp.arange(r.num_comp, dtype=dtype)[None, :, None] * dtype(r.component_stride)
    return offsets[:, None, :].astype(dtype) + comp
