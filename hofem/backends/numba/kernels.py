"""Shape-independent Numba kernels of ``/cpu/self/numba``: contractions, gather, scatter.

None of these depends on dim, P_1d, Q_1d or num_comp, so they are
``@njit(cache=True)`` functions compiled once per machine (per argument
types) and shared by every operator and basis.  The contraction's register
tiles (:func:`.codegen.tile_source`) are generated once into the cache
directory; :func:`compile_contract` compiles them with LLVM's SLP vectorizer,
which Numba leaves off by default, before any kernel that calls them.
"""

import contextlib
import functools
import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numba
import numpy as np

from ...restriction import index_dtype
from ...typing import IndexArray
from .codegen import BLK, Source, check_disk_cache, load_module

__all__ = [
    "add_to",
    "basis_program",
    "block_dot",
    "cg_dot",
    "cg_dots",
    "cg_pipelined_update",
    "cg_single_reduction_update",
    "cg_update_p",
    "cg_update_xr",
    "cg_update_xr_rr",
    "chebyshev_last_zero",
    "chebyshev_scale",
    "chebyshev_start",
    "chebyshev_step",
    "chebyshev_step_zero",
    "compile_contract",
    "contract_program",
    "gather",
    "gather_add_entries",
    "gather_block",
    "gather_entries",
    "gather_lanes",
    "gather_scaled",
    "gather_scaled_add",
    "scatter_block",
    "scatter_csr",
    "scatter_entries",
    "scatter_lanes",
    "scatter_scaled",
    "tile_source",
    "transpose_map",
]

_JIT = {"parallel": True, "cache": True, "error_model": "numpy", "boundscheck": False}
_OPTIONS = {"fastmath": {"contract"}, "error_model": "numpy", "boundscheck": False}
_SERIAL = {"cache": True, **_OPTIONS}
_TILE_ROWS = (4, 3, 2, 1)


def tile_source(rows: int) -> str:
    """Source of ``tile{rows}``: a ``rows x BLK`` output tile of one contraction, in registers.

    ``tile(s, mat, N, C, o, i, m, add)`` sets (or adds to) ``s[o + r*C + l]``
    the sum over ``n < N`` of ``mat[m + r, n] * s[i + n*C + l]`` for ``r < rows``,
    ``l < BLK``.  The accumulators are scalars and every lane index a literal
    (on slices, so no negative-index wraparound code), which lets LLVM's SLP
    vectorizer keep the tile in ``rows * BLK / 4`` AVX registers.
    """
    acc = [[f"a{r}_{lane}" for lane in range(BLK)] for r in range(rows)]
    src = Source()
    src(f"def tile{rows}(s, mat, N, C, o, i, m, add):")
    src.indent()
    for r in range(rows):
        src(f"{', '.join(acc[r])} = {', '.join(['0.0'] * BLK)}")
    src("for n in range(N):")
    src("    x = s[i + n * C:]")
    src(f"    {', '.join(f'x{lane}' for lane in range(BLK))} = "
        f"{', '.join(f'x[{lane}]' for lane in range(BLK))}")  # fmt: skip
    for r in range(rows):
        src(f"    w = mat[m + {r}, n]")
        for lane in range(BLK):
            src(f"    {acc[r][lane]} += w * x{lane}")
    for r in range(rows):
        src(f"y{r} = s[o + {r} * C:]")
    for op, test in (("+=", "if add:"), ("=", "else:")):
        src(test)
        for r in range(rows):
            for lane in range(BLK):
                src(f"    y{r}[{lane}] {op} {acc[r][lane]}")
    return src.text()


_tiles = load_module(
    "import numba\n\n"
    + "\n\n".join(
        f"@numba.njit(inline='always', cache=CACHE, **{_OPTIONS!r})\n{tile_source(rows)}"
        for rows in _TILE_ROWS
    ),
    cache=True,
)
tile4, tile3, tile2, tile1 = (getattr(_tiles, f"tile{rows}") for rows in _TILE_ROWS)
# Numba's disk cache of a caller does not notice a changed callee: generated kernels
# calling these carry this digest in their source, so that a change here renames them.
DIGEST = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()


@numba.njit(**_SERIAL)
def contract_program(s, mats, program):
    """Run a contraction program (see :func:`.codegen.basis_program`) on a scratch block.

    Parameters
    ----------
    s : float64 (scratch_size,)
        Interleaved scratch of BLK elements.
    mats : float64 (num_mats, S, S)
        The basis' :func:`~.codegen.matrix_stack`.
    program : int64 (num_steps, 8)
        Rows ``(mat, A, N, M, C, out, inp, add)``: ``s[out:]`` (A, M, C * BLK)
        (+)= ``mats[mat][:M, :N]`` applied along the middle axis of ``s[inp:]``
        (A, N, C * BLK).  Input and output must not overlap.
    """
    for step in range(program.shape[0]):
        k, A, N, M, C, out, inp, add = program[step]
        mat = mats[k]
        width = C * BLK
        for a in range(A):
            o = out + a * M * width
            i = inp + a * N * width
            for c in range(0, width, BLK):
                # rows in tiles of 4, 3, 2 (a remainder of 5 as 3 + 2); a 1-row tile
                # (M = 1 only) keeps just two accumulators in flight
                m = 0
                while M - m >= 4 and M - m != 5:
                    tile4(s, mat, N, width, o + m * width + c, i + c, m, add)
                    m += 4
                if M - m >= 3:
                    tile3(s, mat, N, width, o + m * width + c, i + c, m, add)
                    m += 3
                if M - m == 2:
                    tile2(s, mat, N, width, o + m * width + c, i + c, m, add)
                elif M - m == 1:
                    tile1(s, mat, N, width, o + m * width + c, i + c, m, add)


@contextlib.contextmanager
def _slp_vectorize():
    saved = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba.config.SLP_VECTORIZE = saved


@functools.cache
def compile_contract() -> None:
    """Compile (or load from the disk cache) :func:`contract_program`, SLP-vectorized.

    Call before compiling a kernel that calls it, so that the caller links
    this vectorized version instead of compiling its own.
    """
    with _slp_vectorize():
        contract_program.compile("(float64[::1], float64[:, :, ::1], int64[:, ::1])")


@numba.njit(**_SERIAL)
def gather_block(s, dest, lvec, offsets, num_comp, comp_stride, signs, e0, nb):
    """Gather elements ``e0 : e0 + nb`` into ``s[dest:]`` (num_comp, elem_size, BLK).

    Parameters
    ----------
    s : float64 (scratch_size,)
    dest, e0, nb : int
        Scratch offset, first element, elements in the block (lanes ``nb:`` are zeroed).
    lvec : float64 (l_size,)
    offsets : int32/int64 (num_elem, 1, elem_size)
        Component 0's L-index (``ElemRestriction.compact_indices``).
    num_comp, comp_stride : int
        Component ``c`` is at ``offsets + c * comp_stride``.
    signs : float64 (num_elem, 1, elem_size) or None
    """
    elem_size = offsets.shape[2]
    for b in range(nb):
        for c in range(num_comp):
            for p in range(elem_size):
                value = lvec[offsets[e0 + b, 0, p] + c * comp_stride]
                if signs is not None:
                    value *= signs[e0 + b, 0, p]
                s[dest + (c * elem_size + p) * BLK + b] = value
    for b in range(nb, BLK):
        for k in range(num_comp * elem_size):
            s[dest + k * BLK + b] = 0.0


@numba.njit(**_SERIAL)
def gather_lanes(s, dest, x, size, e0, nb):
    """Copy elements ``e0 : e0 + nb`` of the blocked ``hf.STRIDES_BACKEND`` layout into
    ``s[dest:]`` (size, BLK): the layout is the scratch's, so a full block is one copy.

    Parameters
    ----------
    s : float64 (scratch_size,)
    dest, e0, nb : int
        ``e0`` a multiple of BLK; lanes ``nb:`` are zeroed.
    x : float64 (l_size,)
        Block of ``e0`` at ``e0 * size``, entry ``k`` of lane ``b`` at ``k * nb + b`` there.
    size : int
        ``num_comp * elem_size``.
    """
    block = x[e0 * size : (e0 + nb) * size]
    if nb == BLK:
        for k in range(size * BLK):
            s[dest + k] = block[k]
        return
    for k in range(size):
        for b in range(BLK):
            s[dest + k * BLK + b] = block[k * nb + b] if b < nb else 0.0


@numba.njit(**_SERIAL)
def scatter_lanes(s, source, v, size, e0, nb):
    """``v += s[source:]`` (size, BLK) for elements ``e0 : e0 + nb`` in the blocked layout
    (see :func:`gather_lanes`): a full block is one contiguous add."""
    block = v[e0 * size : (e0 + nb) * size]
    if nb == BLK:
        for k in range(size * BLK):
            block[k] += s[source + k]
        return
    for k in range(size):
        for b in range(nb):
            block[k * nb + b] += s[source + k * BLK + b]


@numba.njit(**_SERIAL)
def gather_strided(s, dest, x, strides, size, num_pts, e0, nb):
    """Copy values of elements ``e0 : e0 + nb`` of a strided field into ``s[dest:]``
    (size, num_pts, BLK), lanes interleaved as the inlined point loop reads the scratch.

    Where a full block's points are contiguous (``strides[0] == 1``), BLK points of the
    BLK lanes at a time: contiguous reads along each lane, one contiguous BLK x BLK tile
    written (a transpose, which beats both unrolled reads of the 8 lanes and lane-by-lane
    copies); the other points lane by lane.

    Parameters
    ----------
    s : float64 (scratch_size,)
    dest, e0, nb : int
    x : float64 (l_size,)
        Value ``r`` at point ``q`` of element ``e`` at ``q s0 + r s1 + e s2``.
    strides : int64 (3,)
        ``(s0, s1, s2)``.
    size, num_pts : int
    """
    s0, s1, s2 = strides[0], strides[1], strides[2]
    for r in range(size):
        base = e0 * s2 + r * s1
        start = 0
        if nb == BLK and s0 == 1:
            for q in range(0, num_pts - BLK + 1, BLK):
                block = s[dest + (r * num_pts + q) * BLK :]  # (BLK points, BLK lanes)
                for b in range(BLK):
                    lane = x[base + b * s2 + q :]
                    for k in range(BLK):
                        block[k * BLK + b] = lane[k]
            start = num_pts - num_pts % BLK
        for q in range(start, num_pts):
            out = dest + (r * num_pts + q) * BLK
            at = base + q * s0
            for b in range(nb):
                s[out + b] = x[at + b * s2]
            for b in range(nb, BLK):
                s[out + b] = 0.0


@numba.njit(**_SERIAL)
def block_dot(s, a, b, size, acc, nb):
    """``sum_k sum_lane s[a + k BLK + lane] s[b + k BLK + lane]`` over the block's ``nb`` lanes.

    Two (size, BLK) regions of the scratch, e.g. an element block's input and
    output E-vectors; ``s[acc : acc + BLK]`` holds the lane sums (one running sum
    per lane, so the loop vectorizes without reassociation), added in lane order.
    """
    x, y, lanes = s[a : a + size * BLK], s[b : b + size * BLK], s[acc : acc + BLK]
    lanes[:] = 0.0
    for k in range(size):
        for lane in range(BLK):
            lanes[lane] += x[k * BLK + lane] * y[k * BLK + lane]
    total = 0.0
    for lane in range(nb):
        total += lanes[lane]
    return total


@numba.njit(**_SERIAL)
def scatter_block(s, source, v, offsets, num_comp, comp_stride, signs, e0, nb):
    """``v[index] += s[source:]`` (num_comp, elem_size, BLK) for lanes ``b < nb``.

    Arguments as in :func:`gather_block`; ``v`` float64 (l_size,).
    """
    elem_size = offsets.shape[2]
    for b in range(nb):
        for c in range(num_comp):
            for p in range(elem_size):
                value = s[source + (c * elem_size + p) * BLK + b]
                if signs is not None:
                    value *= signs[e0 + b, 0, p]
                v[offsets[e0 + b, 0, p] + c * comp_stride] += value


@numba.njit(**_JIT)
def basis_program(u, out, mats, program, scratch):
    """Run a basis action's contraction program on every element.

    Parameters
    ----------
    u : float64 (num_elem, size_in)
        Input of each element, flattened (``(num_comp, P)`` or ``([dim,] num_comp, Q)``).
    out : float64 (num_elem, size_out), written
    mats : float64 (num_mats, S, S)
    program : int64 (num_steps, 8)
        Input block at scratch offset 0, output block at ``size_in * BLK``.
    scratch : int
        Scratch doubles per block.
    """
    num_elem, size_in = u.shape
    size_out = out.shape[1]
    for block in numba.prange((num_elem + BLK - 1) // BLK):
        s = np.zeros(scratch)
        e0 = block * BLK
        nb = min(BLK, num_elem - e0)
        for b in range(nb):
            for k in range(size_in):
                s[k * BLK + b] = u[e0 + b, k]
        contract_program(s, mats, program)
        for b in range(nb):
            for k in range(size_out):
                out[e0 + b, k] = s[(size_in + k) * BLK + b]


@numba.njit(**_JIT)
def gather(u, offsets, comp_stride, signs, out):
    """E-vector from an L-vector: ``out[k, j, i] = u[offsets[k, 0, i] + j * comp_stride]``.

    Parameters
    ----------
    u : float64 (l_size,)
    offsets : int32/int64 (num_elem, 1, elem_size)
        Component 0's L-index (``ElemRestriction.compact_indices``).
    comp_stride : int
    signs : float64 (num_elem, 1, elem_size) or None
        Multiplies every component of a node.
    out : float64 (num_elem, num_comp, elem_size), written
    """
    num_elem, num_comp, elem_size = out.shape
    for k in numba.prange(num_elem):
        for j in range(num_comp):
            for i in range(elem_size):
                index = offsets[k, 0, i] + j * comp_stride
                if signs is None:
                    out[k, j, i] = u[index]
                else:
                    out[k, j, i] = u[index] * signs[k, 0, i]


@numba.njit(**_JIT)
def scatter_csr(e, row_ptr, entries, signs, out):
    """L-vector sums of E-vector entries, owner-computes (one L-entry per iteration).

    Parameters
    ----------
    e : float64 (e_size,)
        Flat E-vector.
    row_ptr : int32/int64 (l_size + 1,)
    entries : int32/int64 (e_size,)
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


# CG reductions run over this many fixed chunks, each summed in order, and the caller
# adds the chunk sums: the result does not depend on the number of threads
_CG_CHUNKS = 64
# the reductions may reassociate within a chunk, so LLVM sums in SIMD lanes; the order is
# fixed by the compiled code (the same for any thread count, bitwise)
_REDUCE = {**_JIT, "fastmath": {"reassoc", "contract"}}


# a parallel loop over fewer entries runs on the calling thread alone: below it, waking
# the sleeping (passive-wait) threads costs more than their share of the loop saves
SERIAL_ENTRIES = 1 << 16


@contextlib.contextmanager
def thread_scope(entries: int) -> Iterator[None]:
    """One thread for parallel loops over fewer than :data:`SERIAL_ENTRIES` entries (this
    calling thread's Numba setting, restored after)."""
    threads = numba.get_num_threads()
    serial = threads > 1 and entries < SERIAL_ENTRIES
    if serial:
        numba.set_num_threads(1)
    try:
        yield
    finally:
        if serial:
            numba.set_num_threads(threads)


@contextlib.contextmanager
def dynamic_schedule(entries: int) -> Iterator[None]:
    """Run the parallel loops inside one chunk at a time (Numba's dynamic schedule), on
    one thread for loops over fewer than :data:`SERIAL_ENTRIES` entries.

    Without it each thread gets one equal share of a loop, and a thread that loses its
    core to another process holds the loop back by its whole share; with it that thread
    holds back one chunk while the others take the rest.  (Set from Python: inside a
    kernel, ``numba.set_parallel_chunksize`` stops the on-disk cache.)  Only loops over
    coarse chunks (CG's ``_CG_CHUNKS``, the operator's coloured element chunks) run in
    it: a loop over single entries would pay for each one.  The chunks and the order of
    every sum do not depend on the thread count, so neither do the results.

    Parameters
    ----------
    entries : int
        The loop's size: vector entries, or an operator's output entries.
    """
    with thread_scope(entries):
        old = numba.set_parallel_chunksize(1)
        try:
            yield
        finally:
            numba.set_parallel_chunksize(old)


@numba.njit(**_JIT)
def cg_update_xr(alpha, p, Ap, x, r):
    """``x += alpha p; r -= alpha Ap`` in one pass; all float64 (n,)."""
    n = x.shape[0]
    for c in numba.prange(_CG_CHUNKS):
        chunk = slice(c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS)
        p_c, Ap_c, x_c, r_c = p[chunk], Ap[chunk], x[chunk], r[chunk]
        for i in range(x_c.shape[0]):
            x_c[i] += alpha * p_c[i]
            r_c[i] -= alpha * Ap_c[i]


# Each chunk works on slices of the vectors: indexing the whole array at ``start + i`` keeps
# NumPy's negative-index wraparound in the loop, which stops LLVM from vectorizing it.


@numba.njit(**_REDUCE)
def cg_update_xr_rr(alpha, p, Ap, x, r):
    """:func:`cg_update_xr`, returning the per-chunk partial sums of ``r . r`` (chunks,).

    The caller adds them (NumPy, outside the parallel region: inside, Numba would
    turn the sum into a thread-count dependent parallel reduction).
    """
    n = x.shape[0]
    partial = np.empty(_CG_CHUNKS)  # (chunks,)
    for c in numba.prange(_CG_CHUNKS):
        chunk = slice(c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS)
        p_c, Ap_c, x_c, r_c = p[chunk], Ap[chunk], x[chunk], r[chunk]
        total = 0.0
        for i in range(x_c.shape[0]):
            x_c[i] += alpha * p_c[i]
            r_i = r_c[i] - alpha * Ap_c[i]
            r_c[i] = r_i
            total += r_i * r_i
        partial[c] = total
    return partial


@numba.njit(**_REDUCE)
def cg_dot(a, b):
    """Per-chunk partial sums (chunks,) of ``a . b``, in parallel; float64 (n,)."""
    n = a.shape[0]
    partial = np.empty(_CG_CHUNKS)  # (chunks,)
    for c in numba.prange(_CG_CHUNKS):
        chunk = slice(c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS)
        a_c, b_c = a[chunk], b[chunk]
        total = 0.0
        for i in range(a_c.shape[0]):
            total += a_c[i] * b_c[i]
        partial[c] = total
    return partial


@numba.njit(**_JIT)
def scatter_entries(values, index, out):
    """``out[index] = values``; float64 values (n,), int index (n,) distinct, out (l_size,)."""
    for i in numba.prange(index.shape[0]):
        out[index[i]] = values[i]


@numba.njit(**_JIT)
def gather_add_entries(w, index, v):
    """``v += w[index]``; float64 w (l_size,), int index (n,), v (n,)."""
    for i in numba.prange(index.shape[0]):
        v[i] += w[index[i]]


@numba.njit(**_JIT)
def cg_update_p(z, beta, p):
    """``p = z + beta p`` in place; float64 (n,)."""
    n = p.shape[0]
    for c in numba.prange(_CG_CHUNKS):
        chunk = slice(c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS)
        z_c, p_c = z[chunk], p[chunk]
        for i in range(p_c.shape[0]):
            p_c[i] = z_c[i] + beta * p_c[i]


@numba.njit(cache=True, error_model="numpy", boundscheck=False)
def chunk_touch(offsets, num_comp, comp_stride, elems_per_chunk, bits):
    """Mark which element chunks touch each L-vector entry (serial: deterministic).

    Parameters
    ----------
    offsets : int array (num_elem, 1, elem_size)
        Component 0's L-index; component ``k`` is at ``offsets + k * comp_stride``.
    num_comp, comp_stride : int
    elems_per_chunk : int
        Chunk ``c`` holds elements ``c * elems_per_chunk`` up to the next chunk's.
    bits : uint64 array (l_size, words), updated
        Bit ``c % 64`` of ``bits[i, c // 64]`` is set when chunk ``c`` touches entry ``i``.
    """
    for e in range(offsets.shape[0]):
        c = e // elems_per_chunk
        word, bit = c >> 6, np.uint64(1) << np.uint64(c & 63)
        for k in range(num_comp):
            for j in range(offsets.shape[2]):
                bits[offsets[e, 0, j] + k * comp_stride, word] |= bit


@numba.njit(cache=True, error_model="numpy", boundscheck=False)
def chunk_conflicts(bits, num_chunks):
    """Pairs of chunks touching a common entry, from :func:`chunk_touch`'s ``bits``.

    Returns
    -------
    bool array (num_chunks, num_chunks)
        Symmetric; ``[a, b]`` for chunks ``a != b`` sharing an entry.
    """
    conflict = np.zeros((num_chunks, num_chunks), dtype=np.bool_)
    chunks = np.empty(num_chunks, dtype=np.int64)  # the chunks of one entry
    for i in range(bits.shape[0]):
        count = 0
        for w in range(bits.shape[1]):
            word = bits[i, w]
            b = 0
            while word:
                if word & np.uint64(1):
                    chunks[count] = w * 64 + b
                    count += 1
                word >>= np.uint64(1)
                b += 1
        for a in range(count):
            for b in range(a + 1, count):
                conflict[chunks[a], chunks[b]] = True
                conflict[chunks[b], chunks[a]] = True
    return conflict


def transpose_map(indices: IndexArray, l_size: int) -> tuple[IndexArray, IndexArray]:
    """CSR of the transpose of a restriction: for each L-entry, its E-vector entries.

    Parameters
    ----------
    indices : int array (num_elem, num_comp, elem_size)
    l_size : int

    Returns
    -------
    row_ptr : int32 or int64 (l_size + 1,)
    entries : int32 or int64 (e_size,)
        int32 while ``e_size`` fits (the map is kept for the restriction's life).
    """
    flat = indices.ravel()
    dtype = index_dtype(flat.size)  # entries < e_size and row_ptr <= e_size
    entries = np.argsort(flat, kind="stable").astype(dtype, copy=False)  # (e_size,)
    row_ptr = np.zeros(l_size + 1, dtype=dtype)
    np.cumsum(np.bincount(flat, minlength=l_size), out=row_ptr[1:])
    return row_ptr, entries


# --- Chebyshev smoothing and transfers of hofem.multigrid: one pass per step -------------------


@numba.njit(**_JIT)
def chebyshev_start(c, inv_diag, b, Ax, r, d):
    """``r = b - Ax; d = c inv_diag r``; float64 (n,)."""
    for i in numba.prange(d.shape[0]):
        r_i = b[i] - Ax[i]
        r[i] = r_i
        d[i] = c * inv_diag[i] * r_i


@numba.njit(**_JIT)
def chebyshev_scale(c, inv_diag, b, d):
    """``d = c inv_diag b``; float64 (n,)."""
    for i in numba.prange(d.shape[0]):
        d[i] = c * inv_diag[i] * b[i]


@numba.njit(**_JIT)
def chebyshev_step(a, c, inv_diag, Ad, d, x, r):
    """``x += d; r -= Ad; d = a d + c inv_diag r``; float64 (n,)."""
    for i in numba.prange(d.shape[0]):
        r_i = r[i] - Ad[i]
        d_i = d[i]
        x[i] += d_i
        r[i] = r_i
        d[i] = a * d_i + c * inv_diag[i] * r_i


@numba.njit(**_JIT)
def chebyshev_step_zero(a, c, inv_diag, Ad, b, d, x, r):
    """``x = d; r = b - Ad; d = a d + c inv_diag r``; float64 (n,)."""
    for i in numba.prange(d.shape[0]):
        r_i = b[i] - Ad[i]
        d_i = d[i]
        x[i] = d_i
        r[i] = r_i
        d[i] = a * d_i + c * inv_diag[i] * r_i


@numba.njit(**_JIT)
def chebyshev_last_zero(Ad, b, d, x, r):
    """``x = d; r = b - Ad``; float64 (n,)."""
    for i in numba.prange(d.shape[0]):
        x[i] = d[i]
        r[i] = b[i] - Ad[i]


@numba.njit(**_JIT)
def add_to(d, x):
    """``x += d``; float64 (n,)."""
    for i in numba.prange(x.shape[0]):
        x[i] += d[i]


@numba.njit(**_JIT)
def scatter_scaled(values, index, scale, out):
    """``out[index] = scale * values``; float64 values, scale (n,), int index (n,) distinct."""
    for i in numba.prange(index.shape[0]):
        out[index[i]] = scale[i] * values[i]


@numba.njit(**_JIT)
def gather_scaled(w, index, scale, v):
    """``v = scale * w[index]``; float64 w (l_size,), int index (n,), scale, v (n,)."""
    for i in numba.prange(index.shape[0]):
        v[i] = scale[i] * w[index[i]]


@numba.njit(**_JIT)
def gather_scaled_add(w, index, scale, v):
    """``v += scale * w[index]``; float64 w (l_size,), int index (n,), scale, v (n,)."""
    for i in numba.prange(index.shape[0]):
        v[i] += scale[i] * w[index[i]]


@numba.njit(**_JIT)
def gather_entries(w, index, v):
    """``v = w[index]``; float64 w (l_size,), int index (n,), v (n,)."""
    for i in numba.prange(index.shape[0]):
        v[i] = w[index[i]]


# a truncated cache file of the kernels above would fail every run: check before any compiles
check_disk_cache(sys.modules[__name__])


# Sub-blocks of the CG variants' multi-vector loops: a block of every vector stays in L1
# while each inner product (or recurrence) runs over it as one vectorizable loop.
_SUB = 512


@numba.njit(**_REDUCE)
def cg_dots(left, right):
    """Per-chunk partial sums (chunks, k) of ``left[j] . right[j]``, all in one pass.

    ``left``, ``right``: tuples of k float64 (n,) arrays (the same array may repeat).
    """
    n, k = left[0].shape[0], len(left)
    partial = np.zeros((_CG_CHUNKS, k))  # (chunks, k)
    for c in numba.prange(_CG_CHUNKS):
        lo, hi = c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS
        for b0 in range(lo, hi, _SUB):
            b1 = min(b0 + _SUB, hi)
            for j in range(k):
                a_b, b_b = left[j][b0:b1], right[j][b0:b1]
                total = 0.0
                for i in range(b1 - b0):
                    total += a_b[i] * b_b[i]
                partial[c, j] += total
    return partial


@numba.njit(**_JIT)
def cg_single_reduction_update(alpha, beta, u, w, p, s, x, r):
    """``p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s``; float64 (n,), u may be r."""
    for i in numba.prange(x.shape[0]):
        p_i = u[i] + beta * p[i]
        s_i = w[i] + beta * s[i]
        p[i] = p_i
        s[i] = s_i
        x[i] += alpha * p_i
        r[i] -= alpha * s_i


@numba.njit(**_REDUCE)
def cg_pipelined_update(alpha, beta, x, r, u, w, m, nv, p, s, q, z, preconditioned):
    """Ghysels-Vanroose's recurrences and the next local inner products in one pass.

    ``z = n + beta z; q = m + beta q; s = w + beta s; p = u + beta p; x += alpha p;
    r -= alpha s; u -= alpha q; w -= alpha z``; all float64 (n,).  Unpreconditioned
    (``preconditioned`` False) ``u``, ``m``, ``q`` are not read (pass ``r``, ``w``,
    ``s``): ``u = r``, ``q = s``.  Returns per-chunk partial sums (chunks, 3) of
    ``r . u, w . u, r . r`` of the new vectors.
    """
    n = x.shape[0]
    partial = np.empty((_CG_CHUNKS, 3))  # (chunks, 3)
    for c in numba.prange(_CG_CHUNKS):
        lo, hi = c * n // _CG_CHUNKS, (c + 1) * n // _CG_CHUNKS
        ru = wu = rr = 0.0
        for i in range(lo, hi):
            z_i = nv[i] + beta * z[i]
            s_i = w[i] + beta * s[i]
            z[i] = z_i
            s[i] = s_i
            if preconditioned:
                q_i = m[i] + beta * q[i]
                q[i] = q_i
                p_i = u[i] + beta * p[i]
                u_i = u[i] - alpha * q_i
                u[i] = u_i
            else:
                p_i = r[i] + beta * p[i]
            p[i] = p_i
            x[i] += alpha * p_i
            r_i = r[i] - alpha * s_i
            r[i] = r_i
            w_i = w[i] - alpha * z_i
            w[i] = w_i
            if not preconditioned:
                u_i = r_i
            ru += r_i * u_i
            wu += w_i * u_i
            rr += r_i * r_i
        partial[c, 0] = ru
        partial[c, 1] = wu
        partial[c, 2] = rr
    return partial
