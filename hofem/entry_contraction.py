"""Sum factorization of the entries of a pointwise matrix with per-entry 1D factors.

The contraction behind the sum-factorized diagonals and element matrices of
:mod:`hofem.level_assembly`, in a module of its own so that the backends
(:meth:`hofem.backends.contract.Backend.tensor_element_diagonal`, whose reference
implementation it is) and the level assembly share it without importing each other.
Written against the array module ``xp`` of the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

    from .typing import Array

__all__ = ["contract_entries"]


def contract_entries(xp: ModuleType, t: Array, left: list, right: Array) -> Array:
    """Every entry's ``sum_q t[n, k, q] prod_d F_d[k][q_d, j_d]``: ``t (n, size, Q_1d**dim)``
    -> ``(n, size, K**dim)``.

    ``F_d[k]`` ``(Q_1d, K)`` is entry ``k``'s factor in direction ``d``, direction 0 the
    fastest axis of ``q`` and of the result: ``right`` is ``F_0`` ``(size, Q_1d, K)`` and
    ``left[d - 1]`` is ``F_d`` transposed, ``(size, K, Q_1d)``, for ``d >= 1``.  Each
    direction is one ``matmul`` for every entry, its matrices broadcast over the cells
    (NumPy loops over the batch, CuPy makes it one batched GEMM; neither copies them):
    ``dim`` calls a chunk, not ``dim`` per entry.  Every product is a batch of small ones,
    never one tall GEMM of inner dimension ``Q_1d``: a threaded BLAS splits such a product
    over its threads, which on a loaded machine wait for each other far longer than it takes.

    Parameters
    ----------
    xp : module
        NumPy or CuPy, the module of every array.
    t : array (n, size, Q_1d**dim)
    left : list of dim - 1 arrays (size, K, Q_1d)
    right : array (size, Q_1d, K)

    Returns
    -------
    array (n, size, K**dim)
    """
    n, size = t.shape[:2]
    Q_1d = right.shape[1]
    for d in range(len(left), 0, -1):  # slowest direction first, from the left
        t = t.reshape(n, size, -1, Q_1d, Q_1d**d)  # (n, size, K**(dim-1-d), Q_1d, Q_1d**d)
        t = xp.matmul(left[d - 1][:, None], t)  # (n, size, K**(dim-1-d), K, Q_1d**d)
    t = xp.matmul(t.reshape(n, size, -1, Q_1d), right)  # (n, size, K**(dim-1), K): x last
    return t.reshape(n, size, -1)
