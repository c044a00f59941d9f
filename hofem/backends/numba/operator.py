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
by Numba and called once per point and element on ``(size,)`` views.  A scaled
mass operator on a non-tensor basis (``c_e w u`` at every point, :mod:`..element_matrix`)
skips the points: one product with ``B^T W B`` per element block, scaled per element.

Race-free scatter: elements are split into contiguous *chunks*, and chunks
are greedily coloured so that no two chunks of one colour share an output
L-vector entry.  Colours run one after the other; the chunks of a colour run
in parallel (``numba.prange``) and add straight into ``v``.  The schedule
does not depend on the thread count, so results are bitwise identical for
any ``NUMBA_NUM_THREADS``.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...constants import EVAL_GRAD, EVAL_NONE, EVAL_WEIGHT, EvalMode
from ...qfunction_trace import PYTHON, Untraceable, trace_body
from ...typing import FloatArray, IndexArray
from ..element_matrix import reference_matrix, scaled_input
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

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import BasisLike as Basis
    from ...typing import OperatorLike as Operator
    from ...typing import RestrictionLike as ElemRestriction

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
# reads each value of the BLK lanes as one vector; smaller ones are read in place, where the
# copy costs more than it saves
COPY_STRIDED_SIZE = 2


def colour_chunks(
    num_elem: int, blk: int, restrictions: Sequence[ElemRestriction]
) -> tuple[IndexArray, IndexArray, IndexArray]:
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


def context_key(context: np.void | None) -> tuple[np.dtype, tuple[Any, ...]] | None:
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
    :func:`_lane_reader`), so a temporary is the same at every point
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


# --- stage 3, the QFunction inlined: its point loop --------------------------------------------
def _scalar_reader(fields):
    """Source text of value ``row`` of field ``k`` at point ``q`` of lane ``b`` (a partial
    block, one lane at a time; ``fields`` as for :func:`_point_loop`)."""

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

    return scalar


def _lane_reader(fields, rows):
    """Source text of value ``row`` of field ``k`` at point ``q`` of lane ``@`` (a full
    block, written out per lane by :func:`_lanes`).  Each row is sliced once per block:
    ``rows`` collects the slice name -> its definition."""

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

    return lane


def _trace(op, fields, rows, hoisted):
    """The QFunction body traced for a partial block (``"scalar"``) and a full one
    (``"lane"``); context loads are appended to ``hoisted``, the full block's row
    slices to ``rows``.  Raises :class:`~hofem.qfunction_trace.Untraceable`."""
    num_in = len(op.qf.inputs)

    def context_load(name):
        hoisted.append(f"c{len(hoisted)} = ctx[0][{name!r}]")
        return f"c{len(hoisted) - 1}"

    readers = (("scalar", _scalar_reader(fields)), ("lane", _lane_reader(fields, rows)))
    return {
        mode: trace_body(
            op.qf,
            lambda k, row, at=at: at(k, row),
            lambda k, row, at=at: at(num_in + k, row),
            PYTHON,
            context_load,
            zero_unwritten=mode == "lane",
        )
        for mode, at in readers
    }


def _full_block(body, rows, lines):
    """Append a full block's point loop: the ``BLK`` lanes written out with literal indices
    on rows sliced once (``rows``), the point-independent ``lines`` before the loop."""
    body(f"if nb == {BLK}:")
    for line in rows.values():
        body(f"    {line}")
    hoisted, per_point = _hoist(lines)
    for line in _lanes(hoisted):
        body(f"    {line}")
    body("    for q in range(Q):")
    body(f"        j = q * {BLK}")
    for line in _lanes(per_point):
        body(f"        {line}")


def _partial_block(body, zero, lines):
    """Append a partial block's loop, lane by lane, after zeroing the outputs (``zero``)."""
    body("else:")
    for line in zero:
        body(f"    {line}")
    body("    for b in range(nb):")
    body("        eb = e0 + b")
    body("        for q in range(Q):")
    body(f"            j = q * {BLK} + b")
    for line in lines:
        body(f"            {line}")


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
    hoisted, rows = [], {}  # context loads; row slices of a full block
    try:
        traced = _trace(op, fields, rows, hoisted)
    except Untraceable:
        return False
    for line in hoisted + strided:
        body(line)
    body(f"QB = Q * {BLK}")
    _full_block(body, rows, traced["lane"])
    _partial_block(body, zero, traced["scalar"])
    return True


def dot_fields(op: Operator) -> tuple[int, int] | None:
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


class _Kernel:
    """The fused kernel of one operator while it is written, one emitter per stage.

    Like libCEED's cuda-gen, :func:`operator_kernel` composes the stages in
    order: per input the read (weights, a field read in place, or a gather
    from its L-vector) and the basis action; the QFunction; per output the
    transpose basis action and the scatter-add.  The emitters must run in that
    order: each appends to the block's body and numbers its run-time sizes in
    ``layout.meta`` as it goes.

    Attributes
    ----------
    layout : _Layout
        Scratch regions and run-time sizes.
    body : Source
        The block function's body.
    args : list of str
        The kernel's field arguments, in order (see :func:`field_arrays`).
    static : dict
        Arrays of the arguments that do not change between applies, by name.
    fields : list of (str, str)
        ``(kind, name)`` per input, then per output (see :func:`_point_loop`).
    qf_args, views : list of str
        A called QFunction's arguments, and the lines binding the scratch views
        they slice.
    bases : list of str
        The lines binding each view's start in the scratch (inlined QFunction).
    strided : list of str
        Lines of :func:`_strided_source` (inlined QFunction).
    temp : list of tuple
        ``(basis, eval_mode, num_comp, transpose, in offset, out offset, program
        name)`` per basis action; their programs are built last (:meth:`programs`).
    e_refs : dict
        Input index -> source ref of its gathered E-vector.
    q_out, zero : list
        Per output, ``(offset, ref)`` of its Q-data and the line zeroing it.
    """

    def __init__(self, op):
        self.op = op
        self.layout = _Layout(op.num_qpts)
        self.body = Source()
        self.body.indent()
        self.body("Q = meta[0]")
        self.args, self.static, self.fields = [], {}, []
        self.qf_args, self.views, self.bases, self.strided = [], [], [], []
        self.temp, self.e_refs = [], {}
        self.q_out, self.zero = [], []

    def view(self, name, size, ref, constant=False):
        """Bind ``name`` to the ``(size, Q, BLK)`` scratch region at ``ref`` (``(size, 1,
        BLK)`` when ``constant``), as the QFunction reads it."""
        points, q = ("1", "0") if constant else ("Q", "q")
        shape = f"({size}, {points}, {BLK})"
        self.views.append(f"{name} = s[{ref}:{ref} + {size} * {points} * {BLK}].reshape({shape})")
        self.qf_args.append(f"{name}[:, {q}, b]")
        self.bases.append(f"{name}_0 = {ref}")
        self.fields.append(("c" if constant else "s", name))

    # --- stage 1: read the inputs -------------------------------------------------------------
    def input(self, i, f):
        """Emit input field ``i``: its read, then its basis action where it has one."""
        r = f.restriction
        if f.eval_mode is EVAL_WEIGHT:
            self.weights(i, f)
        elif f.eval_mode is EVAL_NONE and r.lanes > 1:
            self.blocked_in_place(i, f)
        elif f.eval_mode is EVAL_NONE and r.strides is not None:
            if f.size >= COPY_STRIDED_SIZE:
                self.strided_copy(i, f)
            else:
                self.strided_in_place(i, f)
        else:
            e_off = self.gather(i, r)
            if f.eval_mode is EVAL_NONE:
                self.view(f"q{i}", self.layout.value(f.size), self.e_refs[i])
            else:
                self.interp(i, f, e_off)

    def weights(self, i, f):
        """The basis' quadrature weights ``w{i}`` (1, Q), a static argument."""
        self.args.append(f"w{i}")
        self.static[f"w{i}"] = np.ascontiguousarray(f.basis.q_weight).reshape(1, -1)  # (1, Q)
        self.qf_args.append(f"w{i}[:, q]")
        self.fields.append(("w", f"w{i}"))

    def blocked_in_place(self, i, f):
        """A field in the blocked backend layout, read in place from its L-vector ``x{i}``."""
        self.args.append(f"x{i}")
        size = self.layout.value(f.size)
        self.strided.append(f"X{i}, B{i} = x{i}, e0 * Q * {size}")
        at = f"e0 * Q * {size} + q * nb + b"
        self.qf_args.append(f"x{i}[{at}:{at} + {size} * Q * nb:Q * nb]")
        self.fields.append(("b", f"x{i}"))

    def strided_copy(self, i, f):
        """A strided field of several values per point, copied into the scratch with its
        lanes interleaved."""
        r = f.restriction
        self.args += [f"x{i}", f"st{i}"]
        self.static[f"st{i}"] = np.array(r.strides, dtype=np.int64)  # (3,)
        _, x_ref = self.layout.region(f.size * self.op.num_qpts)
        size = self.layout.value(f.size)
        self.body(f"gather_strided(s, {x_ref}, x{i}, st{i}, {size}, Q, e0, nb)")
        self.view(f"q{i}", size, x_ref)

    def strided_in_place(self, i, f):
        """A strided field of one value per point, read in place through its strides."""
        self.args.append(f"x{i}")
        s0, s1, s2 = (self.layout.value(s) for s in f.restriction.strides)
        self.strided += _strided_source(i, (s0, s1, s2))
        at = f"(e0 + b) * {s2} + q * {s0}"
        self.qf_args.append(f"x{i}[{at}:{at} + {f.size} * {s1}:{s1}]")
        self.fields.append(("x", f"x{i}"))

    def gather(self, i, r):
        """Gather input ``i``'s E-vector from its L-vector ``l{i}`` through restriction
        ``r``; its offset in doubles per element."""
        e_off, e_ref = self.layout.region(r.num_comp * r.elem_size)
        if r.lanes > 1:
            self.args.append(f"l{i}")
            size = self.layout.value(r.num_comp * r.elem_size)
            self.body(f"gather_lanes(s, {e_ref}, l{i}, {size}, e0, nb)")
        else:
            sign = f"sg{i}" if r.signs is not None else "None"
            self.args += [f"l{i}", f"ix{i}"] + ([sign] if r.signs is not None else [])
            comps = self.layout.components(r)
            self.body(f"gather_block(s, {e_ref}, l{i}, ix{i}, {comps}, {sign}, e0, nb)")
        self.e_refs[i] = e_ref
        return e_off

    # --- stage 2: basis actions (interp, grad) ------------------------------------------------
    def interp(self, i, f, e_off):
        """Apply input ``i``'s basis to its E-vector at ``e_off`` (``M{i}``, ``P{i}``)."""
        basis = _input_basis(f)  # a cell-constant basis: its first point only
        q_off, q_ref = self.layout.region(f.size * basis.num_qpts)
        self.args += [f"M{i}", f"P{i}"]
        self.temp.append((basis, f.eval_mode, f.restriction.num_comp, False, e_off, q_off, f"P{i}"))
        self.body(f"contract_program(s, M{i}, P{i})")
        self.view(f"q{i}", self.layout.value(f.size), q_ref, constant=basis is not f.basis)

    def output_points(self):
        """The scratch regions of every output's values at the points."""
        for o, f in enumerate(self.op.output_fields):
            self.q_out.append(self.layout.region(f.size * self.op.num_qpts))
            size = self.layout.value(f.size)
            ref = self.q_out[o][1]
            self.zero.append(f"s[{ref}:{ref} + {size} * Q * {BLK}] = 0.0")
            self.view(f"o{o}", size, ref)

    # --- stage 3: the QFunction ---------------------------------------------------------------
    def qfunction(self, func):
        """Emit the QFunction: inlined when its body traces, else called per point and lane.

        Returns
        -------
        header : list of str
            The module's first lines.
        cache : bool
            Whether the module can be cached on disk.
        preamble : list of str
            Lines the block function starts with.
        traced : bool
        """
        # a record context travels as a 1-element array: records crash Numba's parfor lowering
        if _point_loop(self.op, func, self.fields, self.body, self.strided, self.zero):
            return [*_HEADER, "# compiled with the SLP vectorizer"], True, self.bases, True
        header, cache = _qf_header(func)
        for line in self.zero:
            self.body(line)
        ctx = "ctx" if self.op.qf.context is None else "ctx[0]"
        self.body("for b in range(nb):")
        self.body("    for q in range(Q):")
        self.body(f"        qfunction({ctx}, {', '.join(self.qf_args)})")
        return header, cache, self.views, False

    # --- stage 4: transpose basis actions -----------------------------------------------------
    def transpose(self, o, f):
        """Apply output ``o``'s transpose basis (``Mo{o}``, ``Po{o}``); the source ref of
        the E-vector to scatter (its values at the points without a basis)."""
        r = f.restriction
        if f.eval_mode is EVAL_NONE:
            return self.q_out[o][1]
        self.args += [f"Mo{o}", f"Po{o}"]
        eo_off, source = self.layout.region(r.num_comp * r.elem_size)
        self.temp.append(
            (f.basis, f.eval_mode, r.num_comp, True, self.q_out[o][0], eo_off, f"Po{o}")
        )
        self.body(f"contract_program(s, Mo{o}, Po{o})")
        return source

    # --- stage 5: scatter-add -----------------------------------------------------------------
    def scatter_args(self, o, r):
        """Output ``o``'s restriction arguments (they lead the output's arguments)."""
        if r.lanes == 1:
            self.args += [f"ixo{o}"] + ([f"sgo{o}"] if r.signs is not None else [])

    def scatter(self, o, r, source):
        """Add the E-vector at ``source`` into ``v`` through output ``o``'s restriction."""
        if r.lanes > 1:
            size = self.layout.value(r.num_comp * r.elem_size)
            self.body(f"scatter_lanes(s, {source}, v, {size}, e0, nb)")
        else:
            sign = f"sgo{o}" if r.signs is not None else "None"
            comps = self.layout.components(r)
            self.body(f"scatter_block(s, {source}, v, ixo{o}, {comps}, {sign}, e0, nb)")

    def dot(self, i, r, source):
        """The source text of the block's ``u . Au``: input ``i``'s gathered E-vector times
        the output E-vector at ``source`` (restriction ``r``), in ``BLK`` lane sums."""
        size = self.layout.value(r.num_comp * r.elem_size)
        _, acc = self.layout.region(1)  # BLK lane sums
        return f"block_dot(s, {self.e_refs[i]}, {source}, {size}, {acc}, nb)"

    # --- instead of stages 2-4: a scaled mass operator as one product (..element_matrix) -----
    def element_matrix(self, interp):
        """Emit ``c_e B^T W B u_e`` (:func:`..element_matrix.scaled_input`): gather input
        ``interp`` and the cell-constant inputs, evaluate the body once per lane with the
        interpolated value and the weight 1 (``c_e`` per component; on every lane, as
        straight-line code: an idle lane's value is never scattered), apply ``B^T W B``
        (``E0``, ``PE0``) and scale.  Returns the source ref of the E-vector to scatter."""
        op, out = self.op, self.op.output_fields[0]
        e_off = self.gather(interp, op.input_fields[interp].restriction)
        for i, f in enumerate(op.input_fields):
            if i == interp or f.eval_mode is EVAL_WEIGHT:
                self.fields.append(("1", None))
            else:
                self.input(i, f)
        nc, P = out.restriction.num_comp, out.basis.num_nodes
        _, scale = self.layout.region(nc)  # c_e of each component, BLK lanes
        v_off, source = self.layout.region(nc * P)
        rows, hoisted = {}, []  # row slices of the cell-constant inputs; context loads
        lane = _lane_reader(self.fields, rows)
        load = lambda k, row: "1.0" if self.fields[k][0] == "1" else lane(k, row)  # noqa: E731
        store = lambda k, row: f"s[{scale} + {row} * {BLK} + @]"  # noqa: E731

        def context_load(name):
            hoisted.append(f"c{len(hoisted)} = ctx[0][{name!r}]")
            return f"c{len(hoisted) - 1}"

        lines = trace_body(op.qf, load, store, PYTHON, context_load)
        count, size = self.layout.value(nc), self.layout.value(P)
        for line in [*hoisted, *rows.values(), *_lanes(lines)]:
            self.body(line)
        self.args += ["E0", "PE0"]
        self.static["E0"] = reference_matrix(out.basis)  # (1, P, P)
        row = [0, nc, P, P, 1, v_off * BLK, e_off * BLK, 0]
        self.static["PE0"] = np.array([row], dtype=np.int64)  # (1, 8)
        self.body("contract_program(s, E0, PE0)")
        lanes = ", ".join(f"f{b}" for b in range(BLK))
        self.body(f"for k in range({count}):")
        self.body(f"    f = s[{scale} + k * {BLK}:]")
        self.body(f"    {lanes} = {', '.join(f'f[{b}]' for b in range(BLK))}")
        self.body(f"    for p in range({size}):")
        self.body(f"        y = s[{source} + (k * {size} + p) * {BLK}:]")
        for b in range(BLK):
            self.body(f"        y[{b}] *= f{b}")
        return source

    # --- after the stages ---------------------------------------------------------------------
    def programs(self):
        """The contraction programs of every basis action and ``meta``, into ``static``."""
        t_off, _ = self.layout.region(  # temporaries, shared by every basis action
            max([temp_size(b, nc, mode, tr) for b, mode, nc, tr, *_ in self.temp], default=0)
        )
        for b, mode, nc, transpose, in_off, out_off, name in self.temp:
            self.static[name] = basis_program(b, nc, mode, transpose, in_off, out_off, t_off)
        self.static["meta"] = self.layout.meta_array()


def _module_source(header, preamble, body, args, dot):
    """The generated module's text: ``block`` (one block of elements: ``body``, its
    first line, then ``preamble``, then the rest) and ``apply_add`` (the chunks of
    each colour in parallel, block after block)."""
    arglist = ", ".join(args)
    src = Source()
    src.lines += header
    src("")
    src("")
    src(f"@{JIT_SERIAL}")
    src(f"def block(ctx, meta, s, e0, nb, {arglist}, v):")
    src.lines += body[:1] + [f"    {line}" for line in preamble] + body[1:]
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
    return src.text()


def operator_kernel(
    op: Operator, dot: bool = False
) -> tuple[Callable, list[str], dict[str, np.ndarray], bool]:
    """Generate and load the fused kernel of ``op``.

    A traceable QFunction body is inlined in the point loop (see the module
    docstring); otherwise the QFunction is called once per point and element,
    on ``(size,)`` views.  (Not once per block on ``(size, Q * BLK)`` arrays,
    its vectorized form: Numba's array expressions allocate.)

    The generated source depends on the QFunction and on which fields have a
    basis, signs or strides, not on sizes, so operators of one QFunction share
    one compiled kernel.  The context argument ``ctx`` is None or the
    QFunction's context as a 1-element structured array; the kernel is
    generated for the context's :func:`context_key` at this call.

    Parameters
    ----------
    op : hofem.Operator
    dot : bool
        Also return the chunks' parts of ``u . Au`` (see below).

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
    pair = dot_fields(op) if dot else None
    if dot and pair is None:
        raise ValueError("dot=True needs one active input and output of one restriction")
    kernel = _Kernel(op)
    scaled = scaled_input(op) if func is op.qf.func else None
    if scaled is None:
        for i, f in enumerate(op.input_fields):
            kernel.input(i, f)
        kernel.output_points()
        header, cache, preamble, traced = kernel.qfunction(func)
    else:
        element_source = kernel.element_matrix(scaled)
        header, cache = [*_HEADER, "# compiled with the SLP vectorizer"], True
        preamble, traced = kernel.bases, True
    for o, f in enumerate(op.output_fields):
        kernel.scatter_args(o, f.restriction)
        source = kernel.transpose(o, f) if scaled is None else element_source
        kernel.scatter(o, f.restriction, source)
        if pair is not None and pair[1] == o:
            product = kernel.dot(pair[0], f.restriction, source)
    if pair is not None:
        kernel.body(f"return {product}")
    kernel.programs()
    src = _module_source(header, preamble, kernel.body.lines, kernel.args, dot)
    namespace = None if traced or cache else {"qfunction": _jit(func)}
    module = load_module(src, cache, namespace)
    return module.apply_add, kernel.args, kernel.static, traced


def _input_basis(field):
    """The basis an input is evaluated with: a cell-constant one (:func:`hofem.cell_center`)
    on its first point only, whose values the point loop uses at every point."""
    b = field.basis
    return b.first_point() if b.is_cell_constant else b


def _jit(func):
    import numba

    return numba.njit(func)


def field_arrays(op: Operator, name: str, u: FloatArray | None) -> np.ndarray:
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


def standalone_program(b: Basis, transpose: bool, eval_mode: EvalMode) -> tuple[IndexArray, int]:
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
