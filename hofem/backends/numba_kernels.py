"""Fixed-shape Numba kernels of ``/cpu/self/numba``: restriction gather and transpose.

These do not depend on sizes, so they are plain ``@njit(cache=True)``
functions compiled once per machine (per index dtype and signedness).
"""

import numba
import numpy as np

__all__ = ["basis_program", "contract", "gather", "scatter_csr", "transpose_map"]

_JIT = {"parallel": True, "cache": True, "error_model": "numpy", "boundscheck": False}


@numba.njit(cache=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def contract(s, mat, transpose, A, N, M, C, out, inp, add):
    """One sum-factorization step on a flat scratch: ``s[out] (+)= mat`` along an axis.

    Parameters
    ----------
    s : float64 (scratch_size,)
        Input block ``s[inp:]`` (A, N, C) and output block ``s[out:]`` (A, M, C).
    mat : float64 (M, N), or (N, M) when ``transpose``
    transpose : bool
        Apply ``mat.T``.
    A, N, M, C : int
        Outer size, contracted input and output lengths, inner (contiguous) size.
    out, inp : int
        Offsets of the blocks in ``s``; they must not overlap.
    add : bool
        Add to ``s[out:]`` instead of overwriting it.
    """
    for a in range(A):
        for m in range(M):
            o = out + (a * M + m) * C
            i = inp + a * N * C
            for n in range(N):
                w = mat[n, m] if transpose else mat[m, n]
                j = i + n * C
                if n == 0 and not add:
                    for c in range(C):
                        s[o + c] = w * s[j + c]
                else:
                    for c in range(C):
                        s[o + c] += w * s[j + c]


@numba.njit(**_JIT)
def basis_program(u, out, B, G, program, blk, scratch):
    """Run a basis action given as a list of :func:`contract` steps on every element.

    Parameters
    ----------
    u : float64 (num_elem, size_in)
        Input of each element, flattened (``(num_comp, P)`` or ``([dim,] num_comp, Q)``).
    out : float64 (num_elem, size_out), written
    B : float64 (Q, P) or (Q_1d, P_1d)
    G : float64 (dim, Q, P), or (1, Q_1d, P_1d) for tensor bases
    program : int64 (num_steps, 10)
        Rows ``(matrix, d, transpose, A, N, M, C, out, inp, add)``: matrix 0 is
        ``B``, 1 is ``G[d]``; offsets in the scratch, whose input block is at 0
        and output block at ``size_in * blk``, interleaved ``blk`` elements wide.
    blk, scratch : int
        Elements per block and scratch doubles per block.
    """
    num_elem, size_in = u.shape
    size_out = out.shape[1]
    for block in numba.prange((num_elem + blk - 1) // blk):
        s = np.zeros(scratch)
        e0 = block * blk
        nb = min(blk, num_elem - e0)
        for b in range(nb):
            for k in range(size_in):
                s[k * blk + b] = u[e0 + b, k]
        for step in range(program.shape[0]):
            kind, d, transpose, A, N, M, C, o, i, add = program[step]
            mat = B if kind == 0 else G[d]
            contract(s, mat, transpose != 0, A, N, M, C, o, i, add != 0)
        for b in range(nb):
            for k in range(size_out):
                out[e0 + b, k] = s[(size_in + k) * blk + b]


@numba.njit(**_JIT)
def gather(u, indices, signs, out):
    """E-vector from an L-vector: ``out[k, j, i] = u[indices[k, j, i]] (* signs[k, 0, i])``.

    Parameters
    ----------
    u : float64 (l_size,)
    indices : int32/int64 (num_elem, num_comp, elem_size)
    signs : float64 (num_elem, 1, elem_size) or None
    out : float64 (num_elem, num_comp, elem_size), written
    """
    num_elem, num_comp, elem_size = indices.shape
    for k in numba.prange(num_elem):
        for j in range(num_comp):
            for i in range(elem_size):
                if signs is None:
                    out[k, j, i] = u[indices[k, j, i]]
                else:
                    out[k, j, i] = u[indices[k, j, i]] * signs[k, 0, i]


@numba.njit(**_JIT)
def scatter_csr(e, row_ptr, entries, signs, out):
    """L-vector sums of E-vector entries, owner-computes (one L-entry per iteration).

    Parameters
    ----------
    e : float64 (e_size,)
        Flat E-vector.
    row_ptr : int64 (l_size + 1,)
    entries : int64 (e_size,)
        E-vector entries of L-entry ``i`` are ``entries[row_ptr[i]:row_ptr[i + 1]]``,
        ascending (so sums run in E-vector order, independent of threads).
    signs : float64 (e_size,) or None
        Sign per E-vector entry.
    out : float64 (l_size,), written
    """
    for i in numba.prange(out.shape[0]):
        total = 0.0
        for j in range(row_ptr[i], row_ptr[i + 1]):
            if signs is None:
                total += e[entries[j]]
            else:
                total += e[entries[j]] * signs[entries[j]]
        out[i] = total


def transpose_map(indices, l_size):
    """CSR of the transpose of a restriction: for each L-entry, its E-vector entries.

    Parameters
    ----------
    indices : int array (num_elem, num_comp, elem_size)
    l_size : int

    Returns
    -------
    row_ptr : int64 (l_size + 1,)
    entries : int64 (e_size,)
    """
    flat = indices.ravel()
    entries = np.argsort(flat, kind="stable").astype(np.int64)  # (e_size,)
    row_ptr = np.zeros(l_size + 1, dtype=np.int64)
    np.cumsum(np.bincount(flat, minlength=l_size), out=row_ptr[1:])
    return row_ptr, entries
