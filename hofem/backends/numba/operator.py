"""Fused operator kernels of ``/cpu/self/numba``: source generation and the per-operator plan.

One generated kernel applies ``v += G^T B^T D B G u`` for a whole operator.
Elements are processed in SIMD blocks of ``BLK`` (interleaved in a per-thread
scratch, see :mod:`.codegen`): gather every input field, apply its
basis, run the QFunction at every point, apply the transposes and add into
``v``.  No E-vector or Q-vector of the whole mesh is ever formed.

A QFunction body that :func:`~hofem.qfunction_trace.trace_body` can trace is
inlined as straight-line scalar code in a point loop whose innermost loop runs
over the ``BLK`` interleaved elements (so LLVM vectorizes it); float context
fields are kernel arguments, integer ones baked in.  Other bodies are compiled
by Numba and called once per point and element on ``(size,)`` views.

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

from ...constants import EVAL_GRAD, EVAL_NONE, EVAL_WEIGHT
from ...qfunction_trace import PYTHON, Untraceable, trace_body
from .codegen import (
    BLK,
    JIT,
    JIT_SERIAL,
    Source,
    basis_program,
    load_module,
    matrix_stack,
    temp_size,
)
from .kernels import DIGEST, chunk_conflicts, chunk_touch, compile_contract

__all__ = [
    "colour_chunks",
    "context_key",
    "dot_fields",
    "field_arrays",
    "operator_kernel",
    "standalone_program",
]

_HEADER = (
    "import math",
    "import numba",
    "import numpy as np",
    "from hofem.backends.numba.kernels import (",
    "    block_dot, contract_program, gather_block, gather_lanes, gather_strided, scatter_block,",
    "    scatter_lanes,",
    ")",
    f"# hofem.backends.numba.kernels sha1 {DIGEST}",
)
# chunks per operator before colouring (independent of the thread count: determinism)
NUM_CHUNKS = 128
# strided fields of at least this many values per point (stored q-data) are copied into the
# scratch with the lanes interleaved, as gathered fields are, so that the inlined point loop
# reads each value of the BLK lanes as one vector; smaller ones are read in place.  On one
# core (3e5 DOFs, alternating): BP3 (6 values) 1.01-1.32x at p = 2..8 against reading in
# place (with rows 4 KiB apart at p = 6 first copied, padded), BP1 (1 value) 0.92-0.97x
COPY_STRIDED_SIZE = 2


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
    # which chunks touch each L-entry, one bit per chunk (16 B per entry at 128 chunks);
    # restrictions of disjoint elements (e.g. stored quadrature data) have no conflicts
    touching = [r for r in restrictions if not _disjoint_elements(r)]
    size = max((r.l_size for r in touching), default=0)
    bits = np.zeros((size, -(-num_chunks // 64)), dtype=np.uint64)  # (size, words)
    for r in touching:
        offsets, stride = r.compact_indices()
        chunk_touch(offsets, r.num_comp, stride, chunk, bits)
    conflict = chunk_conflicts(bits, num_chunks)  # (num_chunks, num_chunks)
    del bits
    neighbours = [np.flatnonzero(row).tolist() for row in conflict]
    colour = np.zeros(num_chunks, dtype=np.int64)
    for c in range(num_chunks):
        taken = {colour[n] for n in neighbours[c] if n < c}
        colour[c] = next(k for k in range(num_chunks) if k not in taken)
    order = np.argsort(colour, kind="stable")
    colour_ptr = np.zeros(colour.max() + 2, dtype=np.int64)
    np.cumsum(np.bincount(colour, minlength=colour.max() + 1), out=colour_ptr[1:])
    return colour_ptr, start[order], stop[order]


def _disjoint_elements(r):
    """True when no two elements of restriction ``r`` share an L-vector entry (strided, tiling)."""
    if r.strides is None:
        return False
    if r.lanes > 1:  # the blocked backend layout tiles the L-vector
        return True
    s0, s1, s2 = r.strides
    return abs(s2) > (r.elem_size - 1) * abs(s0) + (r.num_comp - 1) * abs(s1)


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
    header = list(_HEADER)
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
    """Per-element scratch regions (doubles per element) and the kernel's run-time sizes.

    ``meta`` is the int64 array the generated kernel reads its sizes from:
    ``meta[0]`` points per element, ``meta[1]`` scratch doubles per block, then
    the values :meth:`value` added; the source refers to them as ``meta[k]``,
    so it does not depend on the operator's sizes.
    """

    def __init__(self, num_qpts):
        self.meta = [num_qpts, 0]
        self.total = 0

    def region(self, size):
        """A region of ``size`` doubles per element: ``(offset in doubles per element, ref)``."""
        offset, self.total = self.total, self.total + size
        return offset, self.value(offset * BLK)

    def value(self, number):
        """Source text reading ``number`` from ``meta`` at run time."""
        self.meta.append(number)
        return f"meta[{len(self.meta) - 1}]"

    def components(self, r):
        """Source text of restriction ``r``'s ``num_comp, comp_stride`` (gather/scatter)."""
        return f"{self.value(r.num_comp)}, {self.value(r.component_stride)}"

    def meta_array(self):
        """The ``meta`` values as int64 (num_values,), with the scratch size filled in."""
        self.meta[1] = self.total * BLK
        return np.array(self.meta, dtype=np.int64)  # (num_values,)


def context_key(context):
    """What a kernel depends on in a context: None, or its dtype and non-float values."""
    if context is None:
        return None
    names = context.dtype.names
    baked = tuple(context[n] for n in names if not isinstance(context[n], np.floating))
    return context.dtype, baked


def _lanes(lines):
    """``lines`` (traced for lane ``@``) written out for lanes ``0 .. BLK-1``, statement-major."""
    local = re.compile(r"\bt(\d+)\b")
    out = []
    for line in lines:
        for lane in range(BLK):
            out.append(local.sub(rf"t\1_{lane}", line).replace("@", str(lane)))
    return out


def _hoist(lines):
    """Split traced lines into those that do not depend on the point, then the rest.

    Every value that changes with the point is read through ``q`` or ``j`` (see
    :func:`_point_loop`'s ``lane``), so a temporary is the same at every point
    when its expression names neither, nor a temporary that does: on cell-constant
    inputs (the Jacobian of affine cells), the geometry's arithmetic runs once per
    block instead of at each point.  Stores stay in the loop.
    """
    assign = re.compile(r"(t\d+) = (.*)")
    names = re.compile(r"\b[A-Za-z_]\w*\b")
    hoisted, per_point, varying = [], [], {"q", "j"}
    for line in lines:
        match = assign.fullmatch(line)
        if match and varying.isdisjoint(names.findall(match[2])):
            hoisted.append(line)
        else:
            per_point.append(line)
            if match:
                varying.add(match[1])
    return hoisted, per_point


def _strided_source(i, strides):
    """The line binding the block's view of strided field ``x{i}`` for the inlined point loop:
    ``X{i}[B{i} + b * ES{i} + r * RS{i} + q * QS{i}]`` is value ``r`` at point ``q`` of lane
    ``b``, read from the L-vector in place."""
    s0, s1, s2 = strides
    return [f"X{i}, B{i}, ES{i}, RS{i}, QS{i} = x{i}, e0 * {s2}, {s2}, {s1}, {s0}"]


def _point_loop(op, func, fields, body, strided, zero):
    """Append the traced QFunction's point loop to ``body``; False if the body is untraceable.

    ``fields`` holds ``(kind, name)`` per input then per output: ``"s"`` a
    ``(size, Q, BLK)`` region of the scratch starting at ``{name}_0``, ``"c"`` a
    ``(size, 1, BLK)`` one (a cell-constant input, the same at every point), ``"x"``
    a strided field (``x{i}`` its L-vector; see :func:`_strided_source`), ``"b"``
    one in the blocked backend layout (read in place like the scratch: ``X{i}[B{i}
    + (r Q + q) nb + b]``, ``B{i}`` the block's start), ``"w"`` the ``(1, Q)`` weights.
    A full block runs the body once per point on all ``BLK`` lanes: every row
    is sliced once at the point and indexed with literal lanes (no wraparound
    code, straight-line lanes for the SLP vectorizer).  A partial block runs
    it per lane.  ``strided`` holds the lines of :func:`_strided_source`.
    ``zero`` holds the lines zeroing the outputs' Q-data: a full block stores 0 in
    the rows the body does not write instead, so only a partial block runs them
    (its idle lanes must not hold stale values).
    """
    if func is not op.qf.func:  # a Numba dispatcher: not traced
        return False
    num_in = len(op.qf.inputs)
    hoisted = []

    def context_load(name):
        hoisted.append(f"c{len(hoisted)} = ctx[0][{name!r}]")
        return f"c{len(hoisted) - 1}"

    def scalar(k, row):
        kind, name = fields[k]
        if kind == "w":
            return f"{name}[0, q]"
        if kind == "x":
            i = name[1:]
            return f"X{i}[B{i} + b * ES{i} + {row} * RS{i} + q * QS{i}]"
        if kind == "b":
            i = name[1:]
            return f"X{i}[B{i} + ({row} * Q + q) * nb + b]"
        if kind == "c":
            return f"s[{name}_0 + {row} * {BLK} + b]"
        return f"s[{name}_0 + {row} * QB + j]"

    rows = {}  # slice name -> definition

    def lane(k, row):
        kind, name = fields[k]
        if kind == "w":
            return f"{name}[0, q]"
        sliced = f"{name}r{row}"
        if kind == "x":
            i = name[1:]
            rows[sliced] = f"{sliced} = X{i}[B{i} + {row} * RS{i}:]"
            return f"{sliced}[@ * ES{i} + q * QS{i}]"
        if kind == "b":
            rows[sliced] = f"{sliced} = X{name[1:]}[B{name[1:]} + {row} * QB:]"
            return f"{sliced}[j + @]"
        if kind == "c":  # the same at every point: scalars loaded before the point loop
            at = f"{name}_0 + {row} * {BLK}"
            rows[sliced] = "; ".join(f"{sliced}_{b} = s[{at} + {b}]" for b in range(BLK))
            return f"{sliced}_@"
        rows[sliced] = f"{sliced} = s[{name}_0 + {row} * QB:]"
        return f"{sliced}[j + @]"

    try:
        traced = {
            mode: trace_body(
                op.qf,
                lambda k, row, at=at: at(k, row),
                lambda k, row, at=at: at(num_in + k, row),
                PYTHON,
                context_load,
                zero_unwritten=mode == "lane",
            )
            for mode, at in (("scalar", scalar), ("lane", lane))
        }
    except Untraceable:
        return False
    for line in hoisted + strided:
        body(line)
    body(f"QB = Q * {BLK}")
    body(f"if nb == {BLK}:")
    for line in rows.values():
        body(f"    {line}")
    hoisted, per_point = _hoist(traced["lane"])
    for line in _lanes(hoisted):
        body(f"    {line}")
    body("    for q in range(Q):")
    body(f"        j = q * {BLK}")
    for line in _lanes(per_point):
        body(f"        {line}")
    body("else:")
    for line in zero:
        body(f"    {line}")
    body("    for b in range(nb):")
    body("        eb = e0 + b")
    body("        for q in range(Q):")
    body(f"            j = q * {BLK} + b")
    for line in traced["scalar"]:
        body(f"            {line}")
    return True


def dot_fields(op):
    """``(i, o)``: the active input and output whose E-vectors give ``u . Au``, or None.

    ``u^T A u = sum_e (G_e u) . y_e`` with ``y_e`` the element's output E-vector
    before the scatter ``G_e^T``: it needs one active input and one active
    output gathering the same entries (one restriction, or one layout with equal
    offsets and signs), the input gathered (not read through strides).
    """
    active_in = [i for i, f in enumerate(op.input_fields) if f.is_active]
    active_out = [o for o, f in enumerate(op.output_fields) if f.is_active]
    if len(active_in) != 1 or len(active_out) != 1:
        return None
    (i,), (o,) = active_in, active_out
    ri, ro = op.input_fields[i].restriction, op.output_fields[o].restriction
    if op.input_fields[i].eval_mode is EVAL_NONE and ri.strides is not None:
        return None
    return (i, o) if _same_entries(ri, ro) else None


def _same_entries(a, b):
    """Whether restrictions ``a`` and ``b`` gather the same (signed) entries."""
    if a is b:
        return True
    layout = lambda r: (r.num_elem, r.elem_size, r.num_comp, r.l_size, r.component_stride)  # noqa: E731
    if layout(a) != layout(b) or (a.signs is None) != (b.signs is None):
        return False
    if a.strides is not None or b.strides is not None:
        return a.strides == b.strides and a.lanes == b.lanes
    same_signs = a.signs is None or np.array_equal(a.signs, b.signs)
    return same_signs and np.array_equal(a.compact_indices()[0], b.compact_indices()[0])


def operator_kernel(op, dot=False):
    """Generate and load the fused kernel of ``op``.

    A traceable QFunction body is inlined in the point loop (see the module
    docstring); otherwise the QFunction is called once per point and element,
    on ``(size,)`` views.  (Calling it once per block on ``(size, Q * BLK)``
    arrays, its vectorized form, was measured 10-25 % slower: Numba's array
    expressions allocate.)

    The generated source depends on the QFunction and on which fields have a
    basis, signs or strides, not on sizes, so operators of one QFunction share
    one compiled kernel.  The context argument ``ctx`` is None or the
    QFunction's context as a 1-element structured array; the kernel is
    generated for the context's :func:`context_key` at this call.

    Returns
    -------
    kernel : numba dispatcher
        ``kernel(ctx, meta, colour_ptr, chunk_start, chunk_stop, *field_args, v)``.
    arg_names : list of str
        Names of ``field_args``, in order (see :func:`field_arrays`).
    static : dict
        ``meta`` (int64 (num_values,)), the contraction programs ``P{i}``,
        ``Po{o}`` (int64 (num_steps, 8)) and weights ``w{i}`` (1, Q) by name.
    traced : bool
        The QFunction body is inlined: compile the kernel with LLVM's SLP
        vectorizer (its lanes are straight-line code), like the contractions.

    With ``dot=True`` (needs :func:`dot_fields`) the kernel also returns, per
    chunk, that chunk's part of ``u . Au`` (float64 (num_chunks,)): each block
    multiplies its gathered input E-vector by its output E-vector before the
    scatter, in ``BLK`` lane sums (:func:`.kernels.block_dot`).  The
    chunks' sums do not depend on the thread count.
    """
    compile_contract()
    func = getattr(op.qf.func, "py_func", op.qf.func)
    Q = op.num_qpts
    layout = _Layout(Q)
    static = {}
    args, views, bases, qf_args = [], [], [], []
    fields = []  # (kind, name) per input, then per output: see _point_loop
    strided = []  # lines of _strided_source
    body = Source()
    body.indent()
    body("Q = meta[0]")

    def view(name, size, ref, constant=False):
        points, q = ("1", "0") if constant else ("Q", "q")
        shape = f"({size}, {points}, {BLK})"
        views.append(f"{name} = s[{ref}:{ref} + {size} * {points} * {BLK}].reshape({shape})")
        qf_args.append(f"{name}[:, {q}, b]")
        bases.append(f"{name}_0 = {ref}")
        fields.append(("c" if constant else "s", name))

    temp = []  # (basis, eval_mode, num_comp, transpose, in offset, out offset, program name)
    pair = dot_fields(op) if dot else None
    if dot and pair is None:
        raise ValueError("dot=True needs one active input and output of one restriction")
    e_refs = {}  # active input -> ref of its gathered E-vector
    for i, f in enumerate(op.input_fields):
        r = f.restriction
        if f.eval_mode is EVAL_WEIGHT:
            args.append(f"w{i}")
            static[f"w{i}"] = np.ascontiguousarray(f.basis.q_weight).reshape(1, -1)  # (1, Q)
            qf_args.append(f"w{i}[:, q]")
            fields.append(("w", f"w{i}"))
            continue
        if f.eval_mode is EVAL_NONE and r.lanes > 1:  # the blocked layout, read in place
            args.append(f"x{i}")
            size = layout.value(f.size)
            strided.append(f"X{i}, B{i} = x{i}, e0 * Q * {size}")
            at = f"e0 * Q * {size} + q * nb + b"
            qf_args.append(f"x{i}[{at}:{at} + {size} * Q * nb:Q * nb]")
            fields.append(("b", f"x{i}"))
            continue
        if f.eval_mode is EVAL_NONE and r.strides is not None and f.size >= COPY_STRIDED_SIZE:
            args += [f"x{i}", f"st{i}"]
            static[f"st{i}"] = np.array(r.strides, dtype=np.int64)  # (3,)
            _, x_ref = layout.region(f.size * Q)
            size = layout.value(f.size)
            body(f"gather_strided(s, {x_ref}, x{i}, st{i}, {size}, Q, e0, nb)")
            view(f"q{i}", size, x_ref)
            continue
        if f.eval_mode is EVAL_NONE and r.strides is not None:
            args.append(f"x{i}")
            s0, s1, s2 = (layout.value(s) for s in r.strides)
            strided += _strided_source(i, (s0, s1, s2))
            at = f"(e0 + b) * {s2} + q * {s0}"
            qf_args.append(f"x{i}[{at}:{at} + {f.size} * {s1}:{s1}]")
            fields.append(("x", f"x{i}"))
            continue
        e_off, e_ref = layout.region(r.num_comp * r.elem_size)
        if r.lanes > 1:
            args.append(f"l{i}")
            body(
                f"gather_lanes(s, {e_ref}, l{i}, {layout.value(r.num_comp * r.elem_size)}, e0, nb)"
            )
        else:
            sign = f"sg{i}" if r.signs is not None else "None"
            args += [f"l{i}", f"ix{i}"] + ([sign] if r.signs is not None else [])
            comps = layout.components(r)
            body(f"gather_block(s, {e_ref}, l{i}, ix{i}, {comps}, {sign}, e0, nb)")
        e_refs[i] = e_ref
        if f.eval_mode is EVAL_NONE:
            view(f"q{i}", layout.value(f.size), e_ref)
            continue
        basis = _input_basis(f)  # a cell-constant basis: its first point only
        q_off, q_ref = layout.region(f.size * basis.num_qpts)
        args += [f"M{i}", f"P{i}"]
        temp.append((basis, f.eval_mode, r.num_comp, False, e_off, q_off, f"P{i}"))
        body(f"contract_program(s, M{i}, P{i})")
        view(f"q{i}", layout.value(f.size), q_ref, constant=basis is not f.basis)
    qo = []  # (offset, ref) of each output's Q-data
    zero = []  # the lines zeroing it
    for o, f in enumerate(op.output_fields):
        qo.append(layout.region(f.size * Q))
        size = layout.value(f.size)
        zero.append(f"s[{qo[o][1]}:{qo[o][1]} + {size} * Q * {BLK}] = 0.0")
        view(f"o{o}", size, qo[o][1])
    # a record context travels as a 1-element array: records crash Numba's parfor lowering
    traced = _point_loop(op, func, fields, body, strided, zero)
    if traced:
        header, cache, preamble = [*_HEADER, "# compiled with the SLP vectorizer"], True, bases
    else:
        (header, cache), preamble = _qf_header(func), views
        for line in zero:
            body(line)
        ctx = "ctx" if op.qf.context is None else "ctx[0]"
        body("for b in range(nb):")
        body("    for q in range(Q):")
        body(f"        qfunction({ctx}, {', '.join(qf_args)})")
    for o, f in enumerate(op.output_fields):
        r = f.restriction
        sign = f"sgo{o}" if r.signs is not None else "None"
        if r.lanes == 1:
            args += [f"ixo{o}"] + ([sign] if r.signs is not None else [])
        source = qo[o][1]
        if f.eval_mode is not EVAL_NONE:
            args += [f"Mo{o}", f"Po{o}"]
            eo_off, source = layout.region(r.num_comp * r.elem_size)
            temp.append((f.basis, f.eval_mode, r.num_comp, True, qo[o][0], eo_off, f"Po{o}"))
            body(f"contract_program(s, Mo{o}, Po{o})")
        if r.lanes > 1:
            size = layout.value(r.num_comp * r.elem_size)
            body(f"scatter_lanes(s, {source}, v, {size}, e0, nb)")
        else:
            comps = layout.components(r)
            body(f"scatter_block(s, {source}, v, ixo{o}, {comps}, {sign}, e0, nb)")
        if pair is not None and pair[1] == o:
            size = layout.value(r.num_comp * r.elem_size)
            _, acc = layout.region(1)  # BLK lane sums
            product = f"block_dot(s, {e_refs[pair[0]]}, {source}, {size}, {acc}, nb)"
    if pair is not None:
        body(f"return {product}")
    t_off, _ = layout.region(  # temporaries, shared by every basis action
        max([temp_size(b, nc, mode, tr) for b, mode, nc, tr, *_ in temp], default=0)
    )
    for b, mode, nc, transpose, in_off, out_off, name in temp:
        static[name] = basis_program(b, nc, mode, transpose, in_off, out_off, t_off)
    static["meta"] = layout.meta_array()

    arglist = ", ".join(args)
    src = Source()
    src.lines += header
    src("")
    src("")
    src(f"@{JIT_SERIAL}")
    src(f"def block(ctx, meta, s, e0, nb, {arglist}, v):")
    src.lines += body.lines[:1] + [f"    {line}" for line in preamble] + body.lines[1:]
    src("")
    src("")
    src(f"@{JIT}")
    src(f"def apply_add(ctx, meta, colour_ptr, chunk_start, chunk_stop, {arglist}, v):")
    if dot:
        src("    partial = np.zeros(chunk_start.shape[0])  # (num_chunks,)")
    src("    for colour in range(colour_ptr.shape[0] - 1):")
    src("        for chunk in numba.prange(colour_ptr[colour], colour_ptr[colour + 1]):")
    src("            s = np.empty(meta[1])")
    src(f"            for e0 in range(chunk_start[chunk], chunk_stop[chunk], {BLK}):")
    src(f"                nb = min({BLK}, chunk_stop[chunk] - e0)")
    call = f"block(ctx, meta, s, e0, nb, {arglist}, v)"
    src(f"                partial[chunk] += {call}" if dot else f"                {call}")
    if dot:
        src("    return partial")
    namespace = None if traced or cache else {"qfunction": _jit(func)}
    module = load_module(src.text(), cache, namespace)
    return module.apply_add, args, static, traced


def _input_basis(field):
    """The basis an input is evaluated with: a cell-constant one (:func:`hofem.cell_center`)
    on its first point only, whose values the point loop uses at every point."""
    b = field.basis
    return b.first_point() if b.is_cell_constant else b


def _jit(func):
    import numba

    return numba.njit(func)


def field_arrays(op, name, u):
    """The array bound to kernel argument ``name`` for active input ``u``.

    Returns
    -------
    ndarray
        ``x{i}`` the L-vector (l_size,) of a strided field, contiguous and
        writeable like the scratch (read through its strides in the kernel);
        ``l{i}`` L-vector; ``ix``/``sg`` restriction offsets of component 0
        (num_elem, 1, elem_size; the component stride is in ``meta``,
        :meth:`~hofem.ElemRestriction.compact_indices`) and signs (num_elem, 1,
        elem_size); ``M``/``Mo`` the basis' matrix stack (num_mats, S, S), of an input's
        first point only where its basis is cell-constant.
    """
    kind, index = re.fullmatch(r"([A-Za-z]+)(\d+)", name).groups()
    index = int(index)
    fields = op.output_fields if kind in ("ixo", "sgo", "Mo") else op.input_fields
    f = fields[index]
    r, b = f.restriction, f.basis
    if kind in ("l", "x"):
        lvec = u if f.is_active else f.vector
        if kind == "x" and not (lvec.flags.c_contiguous and lvec.flags.writeable):
            return np.array(lvec)  # one array type with the scratch: one compiled kernel
        return lvec
    if kind in ("ix", "ixo"):
        return r.compact_indices()[0]
    if kind in ("sg", "sgo"):
        return r.signs
    return matrix_stack(_input_basis(f) if kind == "M" else b)


def standalone_program(b, transpose, eval_mode):
    """A basis action on its own, for :func:`.kernels.basis_program`.

    Returns
    -------
    program : int64 (num_steps, 8)
    scratch : int
        Scratch doubles per block (input, output, temporaries, BLK wide).
    """
    nc, P, Q = b.num_comp, b.num_nodes, b.num_qpts
    rows_q = (b.dim if eval_mode is EVAL_GRAD else 1) * nc * Q
    size_in, size_out = (rows_q, nc * P) if transpose else (nc * P, rows_q)
    temp = temp_size(b, nc, eval_mode, transpose)
    program = basis_program(b, nc, eval_mode, transpose, 0, size_in, size_in + size_out)
    return program, (size_in + size_out + temp) * BLK
