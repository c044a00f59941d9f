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

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse

from .constants import EVAL_GRAD, EVAL_INTERP, TRANSPOSE

if TYPE_CHECKING:
    from .basis import Basis
    from .constants import EvalMode
    from .restriction import ElemRestriction
    from .typing import Array

__all__ = ["LevelAssembly", "basis_rows"]


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


def _contract(xp, t, mats):
    """``sum_q t[n, q] prod_d mats[d][q_d, j_d]``: ``t (n, Q_1d**dim)`` -> ``(n, K**dim)``.

    ``mats[d]`` is ``(Q_1d, K)``, direction 0 the fastest axis of ``q`` and of the result.
    Every product is a batch of small ones (``matmul`` over a leading axis), never one
    tall-and-skinny GEMM: a threaded BLAS splits those over its threads, which on a
    loaded machine wait for each other far longer than the product takes.
    """
    n, dim = t.shape[0], len(mats)
    Q_1d = mats[0].shape[0]
    for d in range(dim - 1, 0, -1):  # slowest direction first: (., Q_d, Q_1d**d) from the left
        t = xp.matmul(mats[d].T, t.reshape(-1, Q_1d, Q_1d**d))  # (., K, Q_1d**d)
    t = xp.matmul(t.reshape(n, -1, Q_1d), mats[0])  # (n, K**(dim - 1), K): x from the right
    return t.reshape(n, -1)


def _outer(m_a, m_b):
    """``(Q, P, P)`` products ``m_a[q, i] m_b[q, k]`` flattened to ``(Q, P * P)``."""
    return (m_a[:, :, None] * m_b[:, None, :]).reshape(m_a.shape[0], -1)


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
        caller's pass over the pointwise matrix that :meth:`add` s every chunk.
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
        self.rows = [[xp.asarray(m) for m in row] if self.tensor else xp.asarray(row)
                     for row in basis_rows(basis, eval_mode)]  # fmt: skip
        P, E = restriction.elem_size, restriction.num_elem
        self.diag = xp.zeros((E, P))  # (num_elem, P) element diagonals, one component's
        self.matrices = xp.zeros((E, P, P)) if matrix else None  # (num_elem, P, P)

    def add(self, start: int, stop: int, D: dict[tuple[int, int], Array]) -> None:
        """Add cells ``start:stop`` of the pointwise matrix.

        Parameters
        ----------
        start, stop : int
        D : dict
            ``{(a, b): (stop - start, Q) array}`` for ``a <= b``, the entries of the
            symmetric pointwise matrix (``D_ba = D_ab``).
        """
        xp = self.xp
        for (a, b), d_ab in D.items():
            twice = 1.0 if a == b else 2.0  # D_ab and D_ba together
            m_a, m_b = self.rows[a], self.rows[b]
            if self.tensor:
                diag = _contract(xp, d_ab, [x * y for x, y in zip(m_a, m_b, strict=True)])
            else:
                diag = xp.matmul(d_ab[:, None, :], m_a * m_b)[:, 0]  # (n, P)
            self.diag[start:stop] += twice * diag
            if self.matrices is None:
                continue
            if self.tensor:
                mats = _contract(xp, d_ab, [_outer(x, y) for x, y in zip(m_a, m_b, strict=True)])
                mats = self._node_order(mats, len(m_a), m_a[0].shape[1])
            else:
                mats = xp.matmul(d_ab[:, None, :], _outer(m_a, m_b))  # (n, 1, P * P)
                mats = mats.reshape(d_ab.shape[0], *self.diag.shape[1:] * 2)
            self.matrices[start:stop] += mats
            if a != b:
                self.matrices[start:stop] += mats.transpose(0, 2, 1)

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
        """The host CSR matrix (``A[free][:, free]`` with ``free_dofs``).

        Raises
        ------
        ValueError
            Made without ``matrix=True``.
        """
        if self.matrices is None:
            raise ValueError("linear_assemble needs a LevelAssembly made with matrix=True")
        if self.fill is not None:
            self.fill()
        r = self.restriction
        mats = self.ceed.to_numpy(self.matrices)  # (E, P, P)
        index = np.asarray(r.indices)  # (E, num_comp, P) L-vector indices
        size = r.l_size
        if self.free_dofs is not None:  # renumber: free DOFs 0..n_free-1, the others -1
            free = np.asarray(self.ceed.to_numpy(self.free_dofs))
            number = np.full(size, -1, dtype=np.int64)
            number[free] = np.arange(free.size)
            index, size = number[index], free.size
        rows, cols, values = [], [], []
        for c in range(r.num_comp):  # the components' blocks, the same element matrices
            i, k = index[:, c, :, None], index[:, c, None, :]  # (E, P, 1), (E, 1, P)
            keep = (i >= 0) & (k >= 0)  # (E, P, P): both free
            rows.append(np.broadcast_to(i, mats.shape)[keep])
            cols.append(np.broadcast_to(k, mats.shape)[keep])
            values.append(mats[keep])
        coo = scipy.sparse.coo_matrix(
            (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))),
            shape=(size, size),
        )
        return coo.tocsr()  # sums the duplicates
