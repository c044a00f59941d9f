"""Fused operator kernels of ``/cpu/self/numba``: source generation and the per-operator plan.

One generated kernel applies ``v += G^T B^T D B G u`` for a whole operator.
Elements are processed in SIMD blocks of ``BLK`` (interleaved in a per-thread
scratch, see :mod:`.numba_codegen`): gather every input field, apply its
basis, call the user's QFunction (compiled by Numba) once per point and
element on ``(size,)`` views, apply the transposes and add into ``v``.  No
E-vector or Q-vector of the whole mesh is ever formed.

Race-free scatter: elements are split into contiguous *chunks*, and chunks
are greedily coloured so that no two chunks of one colour share an output
L-vector entry.  Colours run one after the other; the chunks of a colour run
in parallel (``numba.prange``) and add straight into ``v``.  The schedule
does not depend on the thread count, so results are bitwise identical for
any ``NUMBA_NUM_THREADS``.
"""

import hashlib
import inspect
import re
import sys

import numpy as np

from ..constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from .numba_codegen import (
    JIT,
    JIT_SERIAL,
    Source,
    basis_forward,
    basis_transpose,
    forward_temp,
    load_module,
    transpose_temp,
)

__all__ = ["basis_program", "block_size", "colour_chunks", "operator_kernel"]

_IMPORTS = (
    "import numba",
    "import numpy as np",
    "from hofem.backends.numba_kernels import contract",
)
# chunks per operator before colouring (independent of the thread count: determinism)
NUM_CHUNKS = 128
# bytes of per-thread scratch a SIMD block may use before BLK is halved
SCRATCH_BYTES = 192 * 1024


def block_size(doubles_per_elem):
    """Elements per SIMD block: 8, halved (down to 2) while the scratch exceeds the budget."""
    blk = 8
    while blk > 2 and blk * doubles_per_elem * 8 > SCRATCH_BYTES:
        blk //= 2
    return blk


def colour_chunks(num_elem, blk, restrictions):
    """Chunks of whole SIMD blocks, ordered by a colouring race-free for ``restrictions``.

    Parameters
    ----------
    num_elem, blk : int
    restrictions : list of ElemRestriction
        The output restrictions; chunks of one colour share none of their
        L-vector entries.

    Returns
    -------
    colour_ptr : int64 (num_colours + 1,)
        Chunks of colour ``c`` are ``colour_ptr[c]:colour_ptr[c + 1]``.
    chunk_start, chunk_stop : int64 (num_chunks,)
        Element ranges of the chunks, grouped by colour.
    """
    blocks = -(-num_elem // blk)
    chunk = blk * max(1, -(-blocks // NUM_CHUNKS))
    start = np.arange(0, num_elem, chunk, dtype=np.int64)  # (num_chunks,)
    stop = np.minimum(start + chunk, num_elem)
    num_chunks = start.shape[0]
    # (L-entry, chunk) pairs, unique; entries touched by several chunks give conflicts
    pairs = []
    for r in restrictions:
        owner = np.repeat(np.arange(r.num_elem) // chunk, r.num_comp * r.elem_size)
        pairs.append(r.indices.ravel().astype(np.int64) * num_chunks + owner)
    pairs = np.unique(np.concatenate(pairs))  # sorted by L-entry, then chunk
    node, owner = pairs // num_chunks, pairs % num_chunks
    neighbours = [set() for _ in range(num_chunks)]
    for shift in range(1, num_chunks):
        same = node[shift:] == node[:-shift]
        if not same.any():
            break
        for a, b in zip(owner[:-shift][same].tolist(), owner[shift:][same].tolist(), strict=True):
            neighbours[a].add(b)
            neighbours[b].add(a)
    colour = np.zeros(num_chunks, dtype=np.int64)
    for c in range(num_chunks):
        taken = {colour[n] for n in neighbours[c] if n < c}
        colour[c] = next(k for k in range(num_chunks) if k not in taken)
    order = np.argsort(colour, kind="stable")
    colour_ptr = np.zeros(colour.max() + 2, dtype=np.int64)
    np.cumsum(np.bincount(colour, minlength=colour.max() + 1), out=colour_ptr[1:])
    return colour_ptr, start[order], stop[order]


def _qf_import(func):
    """``(module, qualname)`` when ``func`` can be imported by name in a later process."""
    module = sys.modules.get(func.__module__)
    qualname = func.__qualname__
    if module is None or module.__name__ == "__main__" or "<" in qualname:
        return None
    if not getattr(module, "__file__", None):
        return None
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return (module.__name__, qualname) if obj is func else None


def _qf_header(func):
    """Module header binding ``qfunction`` to the jitted QFunction; and whether it caches."""
    ref = _qf_import(func)
    header = list(_IMPORTS)
    if ref is None:  # bound after import through the namespace; nothing cached on disk
        return header, False
    try:
        body = inspect.getsource(func)
    except (OSError, TypeError):
        return header, False
    digest = hashlib.sha1(body.encode()).hexdigest()
    header += [
        f"import {ref[0]} as _qf_module",
        f"# QFunction source sha1 {digest}",
        f"qfunction = numba.njit(_qf_module.{ref[1]})",
    ]
    return header, True


class _Layout:
    """Per-element scratch regions (in doubles, before multiplying by BLK)."""

    def __init__(self):
        self.sizes = []

    def add(self, size):
        self.sizes.append(size)
        return len(self.sizes) - 1

    def offsets(self, blk):
        offsets, total = [], 0
        for size in self.sizes:
            offsets.append(total * blk)
            total += size
        return offsets, total


def operator_kernel(op):
    """Generate and load the fused kernel of ``op``.

    The context argument ``ctx`` is None or the QFunction's context as a
    1-element structured array; the kernel is generated for the context's
    presence at this call.

    Returns
    -------
    kernel : numba dispatcher
        ``kernel(ctx, colour_ptr, chunk_start, chunk_stop, *field_args, v)``.
    arg_names : list of str
        Names of ``field_args``, in order (see :func:`field_arrays`).
    blk : int
        Elements per SIMD block.
    """
    func = getattr(op.qf.func, "py_func", op.qf.func)
    header, cache = _qf_header(func)
    Q = op.num_qpts
    inputs, outputs = op.input_fields, op.output_fields
    # scratch regions per element: input E-data, input Q-data, output Q-data, output E-data, temp
    layout = _Layout()
    regions = {}
    temp_in = temp_out = 0
    for i, f in enumerate(inputs):
        if f.eval_mode is EVAL_NONE and f.restriction.strides is None:
            regions["q", i] = layout.add(f.size * Q)
        elif f.eval_mode in (EVAL_INTERP, EVAL_GRAD):
            r = f.restriction
            regions["e", i] = layout.add(r.num_comp * r.elem_size)
            regions["q", i] = layout.add(f.size * Q)
            temp_in = max(temp_in, forward_temp(f.basis, r.num_comp, 1, f.eval_mode))
    for o, f in enumerate(outputs):
        regions["qo", o] = layout.add(f.size * Q)
        if f.eval_mode is not EVAL_NONE:
            r = f.restriction
            regions["eo", o] = layout.add(r.num_comp * r.elem_size)
            temp_out = max(temp_out, transpose_temp(f.basis, r.num_comp, 1, f.eval_mode))
    temp = layout.add(max(temp_in, temp_out))
    blk = block_size(sum(layout.sizes))
    offsets, total = layout.offsets(blk)

    def off(key):
        return offsets[regions[key]]

    args = []
    src = Source()
    views, qf_args = [], []
    body = Source()
    body.indent()
    for i, f in enumerate(inputs):
        r = f.restriction
        if f.eval_mode is EVAL_WEIGHT:
            args.append(f"w{i}")
            qf_args.append(f"w{i}[:, q]")
            continue
        if f.eval_mode is EVAL_NONE and r.strides is not None:
            args.append(f"x{i}")
            qf_args.append(f"x{i}[e0 + b, :, q]")
            continue
        args += [f"l{i}", f"ix{i}"] + ([f"sg{i}"] if r.signs is not None else [])
        dest = off(("q", i)) if f.eval_mode is EVAL_NONE else off(("e", i))
        _gather(body, blk, r, f"l{i}", f"ix{i}", f"sg{i}" if r.signs is not None else None, dest)
        if f.eval_mode is not EVAL_NONE:
            args += [f"B{i}", f"G{i}"]
            basis_forward(
                body, f.basis, r.num_comp, blk, f.eval_mode, (f"B{i}", f"G{i}"),
                off(("e", i)), off(("q", i)), offsets[temp],
            )  # fmt: skip
        views.append(f"q{i} = s[{off(('q', i))}:{off(('q', i)) + f.size * Q * blk}]"
                     f".reshape(({f.size}, {Q}, {blk}))")  # fmt: skip
        qf_args.append(f"q{i}[:, q, b]")
    for o, f in enumerate(outputs):
        start = off(("qo", o))
        body(f"s[{start}:{start + f.size * Q * blk}] = 0.0")
        views.append(
            f"o{o} = s[{start}:{start + f.size * Q * blk}].reshape(({f.size}, {Q}, {blk}))"
        )
        qf_args.append(f"o{o}[:, q, b]")
    # a record context travels as a 1-element array: records crash Numba's parfor lowering
    ctx = "ctx" if op.qf.context is None else "ctx[0]"
    body("for b in range(nb):")
    body(f"    for q in range({Q}):")
    body(f"        qfunction({ctx}, {', '.join(qf_args)})")
    for o, f in enumerate(outputs):
        r = f.restriction
        args += [f"ixo{o}"] + ([f"sgo{o}"] if r.signs is not None else [])
        source = off(("qo", o))
        if f.eval_mode is not EVAL_NONE:
            args += [f"Bo{o}", f"Go{o}"]
            source = off(("eo", o))
            basis_transpose(
                body, f.basis, r.num_comp, blk, f.eval_mode, (f"Bo{o}", f"Go{o}"),
                off(("qo", o)), source, offsets[temp],
            )  # fmt: skip
        _scatter(body, blk, r, f"ixo{o}", f"sgo{o}" if r.signs is not None else None, source)

    src.lines += header
    src("")
    src("")
    arglist = ", ".join(args)
    src(f"@{JIT_SERIAL.format(cache=cache)}")
    src(f"def block(ctx, s, e0, nb, {arglist}, v):")
    for view in views:
        src(f"    {view}")
    src.lines += body.lines
    src("")
    src("")
    src(f"@{JIT.format(cache=cache)}")
    src(f"def apply_add(ctx, colour_ptr, chunk_start, chunk_stop, {arglist}, v):")
    src("    for colour in range(colour_ptr.shape[0] - 1):")
    src("        for chunk in numba.prange(colour_ptr[colour], colour_ptr[colour + 1]):")
    src(f"            s = np.empty({total * blk})")
    src(f"            for e0 in range(chunk_start[chunk], chunk_stop[chunk], {blk}):")
    src(f"                nb = min({blk}, chunk_stop[chunk] - e0)")
    src(f"                block(ctx, s, e0, nb, {arglist}, v)")
    namespace = None if cache else {"qfunction": _jit(func)}
    module = load_module(src.text(), cache, namespace)
    return module.apply_add, args, blk


def _jit(func):
    import numba

    return numba.njit(func)


def _gather(src, blk, r, lvec, ix, sg, dest):
    """Emit the gather of BLK elements into ``s[dest]`` (num_comp, elem_size, BLK)."""
    sign = f" * {sg}[e0 + b, 0, p]" if sg else ""
    size = r.num_comp * r.elem_size
    src("for b in range(nb):")
    src(f"    for c in range({r.num_comp}):")
    src(f"        for p in range({r.elem_size}):")
    src(f"            s[{dest} + (c * {r.elem_size} + p) * {blk} + b] = "
        f"{lvec}[{ix}[e0 + b, c, p]]{sign}")  # fmt: skip
    src(f"for b in range(nb, {blk}):")
    src(f"    for k in range({size}):")
    src(f"        s[{dest} + k * {blk} + b] = 0.0")


def _scatter(src, blk, r, ix, sg, source):
    """Emit ``v[ix] += s[source]`` for the first ``nb`` elements of the block."""
    sign = f" * {sg}[e0 + b, 0, p]" if sg else ""
    src("for b in range(nb):")
    src(f"    for c in range({r.num_comp}):")
    src(f"        for p in range({r.elem_size}):")
    src(f"            v[{ix}[e0 + b, c, p]] += s[{source} + (c * {r.elem_size} + p) * {blk} + b]"
        f"{sign}")  # fmt: skip


def field_arrays(op, name, u):
    """The array bound to kernel argument ``name`` for active input ``u``.

    Returns
    -------
    ndarray
        ``w{i}`` weights (1, Q); ``x{i}`` strided view (num_elem, size, Q) of
        the field's L-vector; ``l{i}`` L-vector; ``ix``/``sg`` restriction
        indices (num_elem, num_comp, elem_size) and signs (num_elem, 1,
        elem_size); ``B``/``G`` basis matrices (1D (Q_1d, P_1d) for tensor
        bases, else (Q, P) and (dim, Q, P)).
    """
    kind, index = re.fullmatch(r"([A-Za-z]+)(\d+)", name).groups()
    index = int(index)
    fields = op.output_fields if kind in ("ixo", "sgo", "Bo", "Go") else op.input_fields
    f = fields[index]
    r, b = f.restriction, f.basis
    if kind == "w":
        w = b.q_weight
        return np.ascontiguousarray(w).reshape(1, -1)
    if kind in ("l", "x"):
        lvec = u if f.is_active else f.vector
        if kind == "l":
            return lvec
        s0, s1, s2 = (s * lvec.strides[0] for s in r.strides)
        shape = (r.num_elem, r.num_comp, r.elem_size)
        return np.lib.stride_tricks.as_strided(lvec, shape, (s2, s1, s0), writeable=False)
    if kind in ("ix", "ixo"):
        return r.indices
    if kind in ("sg", "sgo"):
        return r.signs
    if b.is_tensor:
        return np.ascontiguousarray(b.interp_1d if kind in ("B", "Bo") else b.grad_1d)
    return np.ascontiguousarray(b.interp if kind in ("B", "Bo") else b.grad)


def basis_program(b, t_mode_transpose, eval_mode):
    """The steps of a standalone basis action, for :func:`.numba_kernels.basis_program`.

    Returns
    -------
    program : int64 (num_steps, 10)
    blk, scratch : int
        Elements per block and scratch doubles per block.
    """
    nc, P, Q = b.num_comp, b.num_nodes, b.num_qpts
    rows_q = (b.dim if eval_mode is EVAL_GRAD else 1) * nc * Q
    size_in, size_out = (rows_q, nc * P) if t_mode_transpose else (nc * P, rows_q)
    if t_mode_transpose:
        temp = transpose_temp(b, nc, 1, eval_mode)
    else:
        temp = forward_temp(b, nc, 1, eval_mode)
    blk = block_size(size_in + size_out + temp)
    offsets = (0, size_in * blk, (size_in + size_out) * blk)
    steps = []
    action = basis_transpose if t_mode_transpose else basis_forward
    action(steps, b, nc, blk, eval_mode, ("B", "G"), *offsets)
    program = np.array(steps, dtype=np.int64).reshape(-1, 10)
    return program, blk, (size_in + size_out + temp) * blk
