"""A whole operator (G, B, D, B^T, G^T) generated as one CUDA kernel.

The kernel runs the tensor-basis device routines of ``basis_tensor.cuh`` with
one thread configuration for every stage, so nothing goes through device
memory between them: per element, each thread gathers its column of nodes
through the restriction indices, contracts it to quadrature points in
registers and shared memory, evaluates the QFunction body (traced by
:func:`~hofem.qfunction_trace.trace_body` and inlined) at its
points, contracts the outputs back, and adds them to the output L-vector with
atomics.  Stored inputs (``EVAL_NONE``, e.g. qdata) are read at the points;
quadrature weights come from a small table.

A second variant of the kernel (``dot=True``) also returns the block partial
sums of ``u . Au`` for CG.  With ``A = G^T B^T D B G``, ``u . Au = sum_e
(B G_e u) . (D B G_e u)``: at each point the kernel adds the active input's
values (or gradients) times the QFunction's outputs, both already in
registers, so ``p^T A p`` costs no pass over the vectors and no extra load.
It needs each active output paired with an active input of the same
restriction, basis and evaluation mode (:func:`dot_pairs`).

Fields may have different ``P_1d`` on the same quadrature points (the mesh's
vertex coordinates, ``P_1d = 2``, beside an order-p solution when the
geometry is recomputed on the fly): each distinct set of 1D matrices is one
``B{j}, G{j}, Bt{j}, Gt{j}`` in shared memory, and inputs of at most
:data:`DIRECT_NODES` nodes are evaluated by each thread from all the
element's nodes (``direct_columns``, ``direct_at``), without shared-memory
passes and with ``3 P_1d`` registers per component.

The generated source defines the sizes (``DIM``, ``P_1D`` the largest,
``Q_1D``, ...) and includes ``basis_tensor.cuh``; it is compiled by NVRTC once
per source (CuPy also caches it on disk).

Register layout: an interp/grad field of ``num_comp`` C keeps, per thread,
``C`` (interp) or ``C * DIM`` (grad) blocks of ``COLUMN(Q_1D)`` values;
QFunction row ``d * C + c`` of a gradient is block ``c * DIM + d``, so the
``DIM`` blocks of one component are adjacent for ``grad_t_column``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import tuning
from ...basis import collocated_grad
from ...constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from ...qfunction_trace import trace_body
from . import kernels
from .batched import device_layout
from .ref import cupy

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import Array
    from ...typing import OperatorLike as Operator

__all__ = [
    "FusedOperator",
    "dot_pairs",
    "fusable_shape",
    "fused_block",
    "fused_threads",
    "has_grad",
    "kernel_source",
    "point_rows",
    "register_cap",
    "slab_register_cap",
    "use_tensor_cores",
]

_TUNING = tuning.fused()  # cuda_fused.json: the numbers, with the runs that measured them
# threads per block of the fused kernels: fewer than the basis kernels' 256 (more
# registers per thread)
FUSED_THREADS = _TUNING.threads
# ... and where another count measured faster, by the kernel's (dim, P_1d, Q_1d): 64 where
# it makes whole elements per block with few idle lanes (four elements at p = 2, one at
# p = 5, 6); it loses where an element leaves most of a warp idle (p = 3, 4)
THREADS_BY_SHAPE = _TUNING.threads_by_shape
_BASIS_MODES = (EVAL_INTERP, EVAL_GRAD)
# register cap of the fused kernels: a kernel NVRTC compiles to REGISTER_CAP_FROM registers
# per thread or more is compiled again with --maxrregcount=REGISTER_CAP when
# T_1d <= REGISTER_CAP_MAX_T_1D:
# - past the cap (fewer than 12 resident warps per SM) the latency of the shared-memory
#   passes and q-data loads is not hidden; the capped kernels win despite some spilling,
#   except past T_1d = 9, where the spills cost more;
# - below it, the ceiling lets NVRTC keep more in registers
REGISTER_CAP = _TUNING.register_cap
REGISTER_CAP_FROM = _TUNING.register_cap_from
REGISTER_CAP_MAX_T_1D = _TUNING.register_cap_max_t_1d
# ... and, in place of that rule, per shape and kind (one value per point, gradients) the
# slab's own caps (slab_register_cap): where one element fills a block, the register count
# alone sets the warps per SM
REGISTER_CAPS = _TUNING.register_caps_by_shape
REGISTER_CAPS_GRAD = _TUNING.register_caps_grad_by_shape
# bytes of the constant-memory copies of the 1D matrices that the slowest axis reads
# (_Source.slow): the FMAs take them from uniform registers, with no shared-memory load.
# Larger budgets lose where the copies crowd the uniform registers and the kernel
# parameters are loaded again per element
CONSTANT_BYTES = _TUNING.constant_bytes
# x and y stages of the 3D contractions on the fp64 tensor cores (basis_mma.cuh), on devices
# of compute capability 8.0 or later, for the kernel shapes (dim, P_1d, Q_1d) where they
# measured faster and only when the scalar kernel needs fewer than REGISTER_CAP_FROM
# registers (bound by the shared-memory pipe, with occupancy to spare).  Elsewhere they
# lose: tiles padded past P_1d or Q_1d, warps left without tiles where an element is not a
# whole number of warps, or, for the kernels at the register cap, the stages' latency at 3
# warps per scheduler.  Empty: never
TENSOR_CORE_SHAPES = _TUNING.tensor_core_shapes
# inputs of at most this many nodes per element (the vertex coordinates of straight-sided
# hexes) are evaluated at the points by each thread from all nodes (direct_columns), with no
# shared-memory passes or block synchronizations
DIRECT_NODES = 8
# threads per block of the register-blocked slab (kernel_source's ``blocking=2``,
# operator_blocked): two elements of T_1d = 9 or 10 (90 or 100 threads), as the slab's 128
# gives it one; BLOCKED_SCRATCH_BYTES caps its buffers (an element's T_1d^2 ROW_1D entries,
# 8000 bytes at T_1d = 10), which with the shared matrices stays below the 48 KiB static limit
BLOCKED_THREADS = 128
BLOCKED_SCRATCH_BYTES = 40 * 1024


def fusable_shape(op: Operator, max_t_1d: int) -> tuple[int, int, int] | None:
    """The ``(dim, P_1d, Q_1d)`` of ``op``'s fused kernel, or None if it cannot fuse.

    An operator fuses when every interp/grad field has an unoriented restriction
    and a tensor basis of one dim and Q_1d on the same quadrature points, with
    ``max(P_1d, Q_1d) <= max_t_1d``; every weight field a tensor basis with that
    Q_1d, and every ``EVAL_NONE`` field an unoriented restriction.  ``P_1d`` may
    differ between fields (an order-p solution beside the mesh's vertex
    coordinates, ``P_1d = 2``): the shape's is the largest, which sizes the
    thread block.
    """
    for field in op.input_fields + op.output_fields:
        if field.eval_mode is not EVAL_WEIGHT and field.restriction.is_oriented:
            return None
    fields = _basis_fields(op)
    shaped = [f.basis for f in fields if f.eval_mode in _BASIS_MODES]
    if not shaped or not all(f.basis.is_tensor for f in fields):
        return None
    first = shaped[0]
    dim, Q_1d = first.dim, first.Q_1d
    for b in shaped:
        same_points = b.Q_1d == Q_1d and np.array_equal(b.q_ref_1d, first.q_ref_1d)
        if b.dim != dim or not same_points or max(b.P_1d, Q_1d) > max_t_1d:
            return None
    if any((f.basis.dim, f.basis.Q_1d) != (dim, Q_1d) for f in fields):  # the weight fields
        return None
    return dim, max(b.P_1d for b in shaped), Q_1d


def fused_threads(shape: tuple[int, int, int]) -> int:
    """Threads per block the fused kernel of ``shape`` (dim, P_1d, Q_1d) aims for."""
    return THREADS_BY_SHAPE.get(tuple(shape), FUSED_THREADS)


def fused_block(shape: tuple[int, int, int], blocking: int = 1) -> tuple[int, tuple[int, int, int]]:
    """``(elems_per_block, block)`` of the slab kernel of ``shape`` (dim, P_1d, Q_1d):
    :func:`~.kernels.basis_block` at :func:`fused_threads`, or with ``blocking=2`` (3D) a
    block of ``(ceil(T_1d / 2), T_1d, elems)`` threads at :data:`BLOCKED_THREADS`, each
    element's buffer of ``T_1d^2`` rows of ``2 ceil(T_1d / 2)`` entries within
    :data:`BLOCKED_SCRATCH_BYTES`."""
    if blocking == 1:
        return kernels.basis_block(*shape, fused_threads(shape))
    T = max(shape[1:])
    pairs = -(-T // 2)  # threads along x: each owns the columns 2 tx, 2 tx + 1
    buffer = 8 * T * T * 2 * pairs  # bytes
    elems = max(1, min(BLOCKED_THREADS // (pairs * T), BLOCKED_SCRATCH_BYTES // buffer))
    return elems, (pairs, T, elems)


def _is_cell_field(field):
    """An input of few nodes whose basis gives every point the same values (its element's
    values, :func:`hofem.cell_center`): evaluated once per element."""
    basis = field.basis
    return (
        field.eval_mode in _BASIS_MODES
        and basis.is_cell_constant
        and basis.P_1d**basis.dim <= DIRECT_NODES
    )


def _reads_cells(op):
    """Whether ``op`` reads a cell-constant input (:func:`_is_cell_field`): the kernels'
    tables of such operators (the affine Jacobian on the fly) are measured apart."""
    return any(map(_is_cell_field, op.input_fields))


def _on_main_basis(field):
    return field.eval_mode in _BASIS_MODES and not _is_cell_field(field)


def _is_grad(field):
    return field.eval_mode is EVAL_GRAD and _on_main_basis(field)


def has_grad(op: Operator) -> bool:
    """Whether a field of ``op`` on the main basis (not a cell-constant input's) has
    gradients."""
    return any(_is_grad(f) for f in op.input_fields + op.output_fields)


def point_rows(op: Operator) -> tuple[int, ...]:
    """Values per point of the main basis's fields, ``(inputs, outputs)``: what each side
    keeps in registers (a cell-constant input's basis, e.g. the coordinates read on the fly,
    is not the main one)."""
    sides = op.input_fields, op.output_fields
    return tuple(sum(f.size for f in fields if _on_main_basis(f)) for fields in sides)


def slab_register_cap(op: Operator, shape: tuple[int, int, int]) -> int | None:
    """The ``--maxrregcount`` that ``cuda_fused.json`` gives the slab kernel of ``op`` at
    ``shape`` for one-component fields (the kernels its tables are for):
    :data:`REGISTER_CAPS_GRAD` where the main basis has gradients (``dim`` values per point),
    :data:`REGISTER_CAPS` where one value per point goes in and out; else None, the
    :func:`register_cap` rule."""
    rows = max(point_rows(op))
    if has_grad(op):
        return REGISTER_CAPS_GRAD.get(tuple(shape)) if rows == shape[0] else None
    return REGISTER_CAPS.get(tuple(shape)) if rows == 1 else None


def use_tensor_cores(shape: tuple[int, int, int], num_regs: int) -> bool:
    """Whether the fused kernel of ``shape`` (dim, P_1d, Q_1d), whose scalar version compiled
    to ``num_regs`` registers per thread, runs the x and y stages of its contractions on the
    fp64 tensor cores: ``shape`` in :data:`TENSOR_CORE_SHAPES`, ``num_regs`` below
    :data:`REGISTER_CAP_FROM`, and the current device of compute capability 8.0 or later."""
    if tuple(shape) not in TENSOR_CORE_SHAPES:
        return False
    capable = int(cupy.cuda.Device().compute_capability) >= 80
    return capable and num_regs < REGISTER_CAP_FROM


def register_cap(num_regs: int, t_1d: int) -> int | None:
    """The ``--maxrregcount`` for a fused kernel that compiled to ``num_regs`` registers per
    thread with ``T_1d = max(P_1d, Q_1d)``, or None to keep it as compiled."""
    if num_regs >= REGISTER_CAP_FROM and t_1d <= REGISTER_CAP_MAX_T_1D:
        return REGISTER_CAP
    return None


def _basis_fields(op):
    """``op``'s fields that have a basis (interp, grad, weight), inputs then outputs."""
    return [f for f in op.input_fields + op.output_fields if f.eval_mode is not EVAL_NONE]


def _matrix_bases(op):
    """The distinct 1D matrix sets of ``op``'s interp/grad fields, largest ``P_1d`` first.

    Returns
    -------
    bases : list of Basis
        One basis per distinct ``(P_1d, interp_1d, grad_1d)``.
    index : callable
        ``index(basis)``: the entry of ``bases`` with that basis's matrices.
    """
    key = lambda b: (b.P_1d, b.interp_1d.tobytes(), b.grad_1d.tobytes())  # noqa: E731
    distinct = {}
    for f in _basis_fields(op):
        if f.eval_mode in _BASIS_MODES:
            distinct.setdefault(key(f.basis), f.basis)
    bases = sorted(distinct.values(), key=lambda b: -b.P_1d)  # stable: first seen first
    keys = [key(b) for b in bases]
    return bases, lambda b: keys.index(key(b))


def _same_restriction(a, b):
    """Whether two restrictions gather the same entries: one object, or one layout and one
    device copy of the offsets (restrictions of one space share it); False when unsure."""
    if a is b:
        return True
    layout = lambda r: (r.num_elem, r.elem_size, r.num_comp, r.l_size, r.component_stride)  # noqa: E731
    if layout(a) != layout(b) or a.is_oriented or b.is_oriented:
        return False
    da, db = a.backend_data, b.backend_data
    if da.identity and db.identity:
        return True
    return da.indices is not None and da.indices is db.indices


def dot_pairs(op: Operator) -> list[tuple[int, int]] | None:
    """``(input index, output index)`` pairs whose point values give ``u . Au``, or None.

    ``u^T A u = sum_e sum_points (B G_e u) . y_e`` where ``y_e`` are the
    QFunction's outputs: every active output must have an active input of the
    same restriction, basis and evaluation mode (interp or grad), and every
    active field one restriction ``G``.  Needs a square operator.
    """
    out_size, in_size = op.shape
    active_in = [k for k, f in enumerate(op.input_fields) if f.is_active]
    active_out = [k for k, f in enumerate(op.output_fields) if f.is_active]
    if out_size != in_size or not active_in or not active_out:
        return None
    first = op.input_fields[active_in[0]].restriction
    fields = [op.input_fields[k] for k in active_in] + [op.output_fields[k] for k in active_out]
    if not all(_same_restriction(first, f.restriction) for f in fields):
        return None
    pairs = []
    for o in active_out:
        out = op.output_fields[o]
        match = [
            k
            for k in active_in
            if out.eval_mode in _BASIS_MODES
            and op.input_fields[k].eval_mode is out.eval_mode
            and op.input_fields[k].basis is out.basis
        ]
        if not match:
            return None
        pairs.append((match[0], o))
    return pairs


def _index_type(field):
    """C++ type of the field's device indices, or None for the identity layout."""
    identity, index_dtype = device_layout(field.restriction)
    if identity:
        return None
    return "int" if index_dtype == np.int32 else "long long"


def field_address(
    param: Callable[[str], None], name: str, field: Any, writable: bool
) -> Callable[..., tuple[str, str, str]]:
    """Declare a field's vector, offsets and component stride with ``param(declaration)``.

    Returns ``address(c, per_elem, elem="elem")``: the C++ ``(pointer, idx, base)`` of
    component ``c`` of element ``elem`` (C++ expressions), whose entry ``j`` (of
    ``per_elem``) is ``pointer[idx[base + j]]``, or ``pointer[base + j]`` for the
    identity layout (``idx`` null). The offsets are component 0's, so other components
    add ``c * stride`` to the pointer.
    """
    # outputs may alias each other (several active outputs add to one v): no restrict
    param(f"double *{name}" if writable else f"const double *__restrict__ {name}")
    index_t = _index_type(field)
    if index_t is None:
        C = field.restriction.num_comp

        def identity(c, n, elem="elem"):
            return name, "((const int *)nullptr)", f"({elem} * {C} + {c}) * {n}"

        return identity
    param(f"const {index_t} *__restrict__ {name}_idx")
    param(f"const index_t {name}_stride")

    def offsets(c, n, elem="elem"):
        return f"{name} + {c} * {name}_stride", f"{name}_idx", f"{elem} * {n}"

    return offsets


def _register_blocks(field, dim):
    """Register blocks (of COLUMN(Q_1D) values) of a field: one per QFunction row."""
    if field.eval_mode is EVAL_GRAD:
        return dim * field.basis.num_comp
    return field.size


class _Source:
    """The generated kernel's parameters and body statements, built field by field."""

    def __init__(self, dim, collocated, basis_index, matrices, constant_bytes, blocking=1):
        self.dim = dim
        self.blocking = blocking  # columns per thread (fused_block)
        self.collocated = collocated
        self.basis_index = basis_index  # basis -> its matrix set (s_B{j}, ...): _matrix_bases
        self.matrices = matrices  # name ("B0", "Gt1", "D") -> host 1D matrix (_host_matrices)
        self.constant_bytes = constant_bytes  # budget of the constant-memory copies
        self.constants = {}  # the matrices copied to constant memory, by name
        self.params = []  # C++ parameter declarations
        self.lines = []  # body statements inside the element loop

    def slow(self, name):
        """The copy of 1D matrix ``name`` that the slowest axis reads: ``c_{name}`` in
        constant memory while the copies asked for so far fit in ``constant_bytes``, else
        (and in 1D, which has no such axis) the shared ``s_{name}``."""
        M = self.matrices[name]
        used = sum(c.nbytes for c in self.constants.values())
        if self.dim > 1 and name not in self.constants and used + M.nbytes <= self.constant_bytes:
            self.constants[name] = M
        return ("c_" if name in self.constants else "s_") + name

    def param(self, decl):
        self.params.append(decl)

    def field_params(self, name, field, writable):
        """Declare a field's vector, offsets and component stride (:func:`field_address`)."""
        return field_address(self.param, name, field, writable)

    def input(self, k, field):
        """Declare input ``k``; returns ``load(row)``, its value at point ``q``."""
        name = f"in{k}"
        mode = field.eval_mode
        if mode is EVAL_WEIGHT:
            self.param(f"const double *__restrict__ {name}")
            return lambda row: f"(qok ? {name}[q] : 0.0)"
        address = self.field_params(name, field, writable=False)
        if mode is EVAL_NONE:

            def load(row):
                pointer, idx, base = address(row, "NUM_QPTS")
                return f"(qok ? ({pointer})[entry({idx}, {base} + q)] : 0.0)"

            return load
        C, P = field.basis.num_comp, field.basis.P_1d
        if P**self.dim <= DIRECT_NODES:
            return self._direct(name, field, address)
        blocks = _register_blocks(field, self.dim)
        self.lines.append(f"double r_{name}[{blocks} * COLUMN(Q_1D)];")
        for c in range(C):
            pointer, idx, base = address(c, P**self.dim)
            self.lines += [
                "{",
                f"  double r[COLUMN({P})], r_q[COLUMN(Q_1D)];",
                f"  gather_column<{P}>({pointer}, {idx}, {base}, active, tx, ty, r);",
                *(f"  {step}" for step in self._steps(field, f"r_{name}", c, transpose=False)),
                "}",
            ]
        return lambda row: f"r_{name}[{self._block(field, row)} * COLUMN(Q_1D) + k]"

    def _direct(self, name, field, address):
        """An input of few nodes: per component, its ``3 P`` columns (``direct_columns``);
        ``load(row)`` evaluates the point from them (``direct_at``).  A basis that
        :attr:`~hofem.Basis.is_cell_constant` is evaluated at the first point for every
        thread and point, so the values are the element's and the compiler hoists what
        the QFunction derives from them out of the point loop."""
        C, P, j = field.basis.num_comp, field.basis.P_1d, self.basis_index(field.basis)
        constant = field.basis.is_cell_constant
        columns = 1 if constant else self.blocking  # blocked: point k in column k / Q_1D
        size = C * 3 * P  # registers of one column
        self.lines.append(f"double r_{name}[{columns * size}];")
        for col in range(columns):
            x = "tx" if self.blocking == 1 else f"2 * tx + {col}"
            position = "0, 0" if constant else f"{x}, ty"
            for c in range(C):
                pointer, idx, base = address(c, P**self.dim)
                self.lines.append(
                    f"{{ double r[{P**self.dim}]; "
                    f"gather_nodes<{P}>({pointer}, {idx}, {base}, active, r); "
                    f"direct_columns<{P}>(s_B{j}, s_G{j}, r, r_{name} + {col * size + c * 3 * P},"
                    f" {position}); }}"
                )
        row_of = "direct_row(k, tx)" if columns == 1 else "k % Q_1D"
        column = "" if columns == 1 else f" + k / Q_1D * {size}"
        row_of = "0" if constant else row_of

        def load(row):
            if field.eval_mode is EVAL_GRAD:
                d, c = divmod(row, C)
                # the slowest axis: G on the values' columns; x, y: B on G's columns
                M, col = ("G", 0) if d == self.dim - 1 else ("B", d + 1)
            else:
                M, col, c = "B", 0, row
            regs = f"r_{name} + {(3 * c + col) * P}{column}"
            # row k of the matrix: the slowest axis (1D: row tx, where slow() gives s_)
            return f"direct_at<{P}>({self.slow(f'{M}{j}')}, {regs}, {row_of})"

        return load

    def _steps(self, field, regs, c, transpose):
        """Statements taking component c's nodes ``r`` to its blocks of ``regs`` (or back)."""
        mode, P, j = field.eval_mode, field.basis.P_1d, self.basis_index(field.basis)
        IN, OUT = ("Q_1D", P) if transpose else (P, "Q_1D")
        t = "t" if transpose else ""
        B, G = f"s_B{t}{j}", f"s_G{t}{j}"
        Sb = self.slow(f"B{t}{j}")
        Sg = self.slow(f"G{t}{j}") if mode is EVAL_GRAD and not self.collocated else G
        D = "s_D"
        Ds = self.slow("D") if mode is EVAL_GRAD and self.collocated else D

        def oriented(nodes, points):  # (source, destination) of this direction
            return (points, nodes) if transpose else (nodes, points)

        if mode is not EVAL_GRAD:
            src, dst = oriented("r", f"{regs} + {c} * COLUMN(Q_1D)")
            return [f"contract_all<{IN}, {OUT}>({B}, {Sb}, {src}, {dst}, buf, tx, ty);"]
        src, dst = oriented("r", f"{regs} + {c * self.dim} * COLUMN(Q_1D)")
        if not self.collocated:
            step = "grad_t_column" if transpose else "grad_column"
            return [f"{step}<{IN}, {OUT}>({B}, {G}, {Sb}, {Sg}, {src}, {dst}, buf, tx, ty);"]
        if transpose:  # interpolation and the collocated derivative, through r_q
            return [
                f"grad_t_collocated({D}, {Ds}, RegisterColumns{{{src}}}, r_q, buf, tx, ty);",
                f"contract_all<{IN}, {OUT}>({B}, {Sb}, r_q, r, buf, tx, ty);",
            ]
        return [
            f"contract_all<{IN}, {OUT}>({B}, {Sb}, r, r_q, buf, tx, ty);",
            f"grad_collocated({D}, {Ds}, r_q, RegisterColumns{{{dst}}}, buf, tx, ty);",
        ]

    def _block(self, field, row):
        if field.eval_mode is EVAL_GRAD:
            C = field.basis.num_comp
            d, c = divmod(row, C)
            return c * self.dim + d
        return row

    def output(self, k, field):
        """Declare output ``k`` (registers); returns ``store(row)`` and the epilogue."""
        name = f"out{k}"
        blocks = _register_blocks(field, self.dim)
        self.lines.append(f"double r_{name}[{blocks} * COLUMN(Q_1D)] = {{}};")
        store = lambda row: f"r_{name}[{self._block(field, row)} * COLUMN(Q_1D) + k]"  # noqa: E731
        if not field.is_active:
            return store, []
        address = self.field_params(name, field, writable=True)
        epilogue = []
        if field.eval_mode is EVAL_NONE:
            for row in range(field.size):
                pointer, idx, base = address(row, "NUM_QPTS")
                epilogue.append(
                    f"scatter_column<Q_1D>({pointer}, {idx}, {base}, active, tx, ty, "
                    f"r_{name} + {row} * COLUMN(Q_1D));"
                )
            return store, epilogue
        C, P = field.basis.num_comp, field.basis.P_1d
        for c in range(C):
            epilogue += [
                "{",
                f"  double r[COLUMN({P})], r_q[COLUMN(Q_1D)];",
                *(f"  {step}" for step in self._steps(field, f"r_{name}", c, transpose=True)),
                "  scatter_column<{}>({}, {}, {}, active, tx, ty, r);".format(
                    P, *address(c, P**self.dim)
                ),
                "}",
            ]
        return store, epilogue


def kernel_source(
    op: Operator,
    shape: tuple[int, int, int],
    collocated: bool = False,
    dot: bool = False,
    constant_bytes: int | None = None,
    tensor_cores: bool = False,
    blocking: int = 1,
) -> str:
    """CUDA source of ``op``'s fused kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        Built on any backend; its QFunction must be traceable.
    shape : tuple
        ``(dim, P_1d, Q_1d)`` from :func:`fusable_shape`.
    collocated : bool
        Gradients as interpolation then the collocated derivative ``D`` (Q_1d,
        Q_1d) at the points (``hofem.basis.collocated_grad``): the kernel takes
        ``D`` after ``Gt``.
    dot : bool
        Also write ``dot_partial[block]``, the block's part of ``u . Au``, and
        return at once while ``*status`` (CG's, :mod:`.cg`) is nonzero: two more
        parameters after the fields.  Needs :func:`dot_pairs`.
    constant_bytes : int, optional
        Budget of the constant-memory copies of the matrices that the slowest
        axis's contractions read (every thread the same entry, at an index known
        at compile time: the FMAs take them as operands, with no load
        instruction).  Matrices are copied while they fit, in the order the
        source is generated: the inputs' contractions, the outputs'
        (transposed) ones, then the direct evaluations at the points
        (``direct_at``); the rest are read from shared memory.  Default
        :data:`CONSTANT_BYTES`.
    tensor_cores : bool
        The x and y stages of the contractions on the fp64 tensor cores
        (``basis_mma.cuh``; 3D, compute capability 8.0 or later).
    blocking : int
        Columns of the element per thread: 1 (the slab), or 2 (3D, not with
        ``tensor_cores``): each thread owns two x-adjacent columns and contracts them
        together (``basis_blocked.cuh``, :mod:`.operator_blocked`), on a block of
        :func:`fused_block`'s.

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` (compile with ``-I`` this folder).

    Raises
    ------
    ValueError
        ``dot`` for an operator whose :func:`dot_pairs` is None; ``blocking`` other than 1,
        or 2 with a 3D shape and ``tensor_cores=False``.
    """
    if blocking not in (1, 2) or (blocking == 2 and (shape[0] != 3 or tensor_cores)):
        raise ValueError(f"blocking={blocking}: use 1, or 2 for a 3D shape without tensor_cores")
    elems, _ = fused_block(shape, blocking)
    dim, P_1d, Q_1d = shape
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    bases, basis_index = _matrix_bases(op)
    budget = CONSTANT_BYTES if constant_bytes is None else constant_bytes
    matrices = _host_matrices(bases, collocated)
    src = _Source(dim, collocated, basis_index, matrices, budget, blocking)
    loads = [src.input(k, f) for k, f in enumerate(op.input_fields)]  # gather, basis
    stores, epilogue = [], []  # the transposed basis and the scatter of each output
    for k, field in enumerate(op.output_fields):
        store, lines = src.output(k, field)
        stores.append(store)
        epilogue += lines
    body = _qfunction_stage(op, loads, stores, pairs)  # last: its direct_at may take constants
    defines = {"DIM": dim, "P_1D": P_1d, "Q_1D": Q_1d, "T_1D": max(P_1d, Q_1d)}
    defines["ELEMS_PER_BLOCK"] = elems
    if tensor_cores:
        defines["TENSOR_CORES"] = 1
    if blocking == 2:
        defines["BLOCKED"] = 1
    params = [
        "const int num_elem",
        *(f"const double *__restrict__ {m}{j}" for j in range(len(bases)) for m in _MATRICES),
        *(["const double *__restrict__ D"] if collocated else []),
        *src.params,
        *_dot_params(dot),
    ]
    prologue = (_DOT_BEGIN if dot else "") + _shared_matrices(bases, Q_1d, collocated)
    return _fused_kernel_text(defines, src, params, prologue, body, epilogue, dot, blocking)


_MATRICES = ("B", "G", "Bt", "Gt")  # each matrix set's kernel parameters, in this order
# the dot variant: skip when CG has stopped (*status nonzero), else sum u . Au in dot
_DOT_BEGIN = "if (*status != 0) return;\n  double dot = 0.0;\n  "


def _dot_params(dot):
    """The dot variant's parameters after the fields: the partial sums and CG's status."""
    if not dot:
        return []
    return ["double *__restrict__ dot_partial", "const long long *__restrict__ status"]


def _dot_end(dot, tid, num_threads):
    """The dot variant's closing statements: the block's sum of ``dot`` in its entry of
    ``dot_partial`` (``tid``, ``num_threads``: the C++ thread index and count)."""
    if not dot:
        return ""
    return (
        f"\n  const double block_dot = block_sum(dot, s_buf, {tid}, {num_threads});"
        f"\n  if ({tid} == 0) dot_partial[blockIdx.x] = block_dot;"
    )


def _qfunction_stage(op, loads, stores, pairs):
    """The statements at one point: the traced QFunction body, which reads the inputs'
    ``loads[k](row)`` and writes the outputs' ``stores[k](row)``, and with ``pairs``
    (:func:`dot_pairs`) the point's part of ``u . Au`` added to ``dot``."""
    body = trace_body(op.qf, lambda k, row: loads[k](row), lambda k, row: stores[k](row))
    if pairs:  # u . Au: the paired inputs' point values times the outputs
        rows = [(i, o, row) for i, o in pairs for row in range(op.output_fields[o].size)]
        terms = " + ".join(f"{loads[i](row)} * {stores[o](row)}" for i, o, row in rows)
        body = [*body, f"if (qok) dot += {terms};"]
    return body


def _shared_matrices(bases, Q_1d, collocated):
    """Statements loading each matrix set j (one P_1d): B, G (Q_1d, P_1d) and their
    transposes into shared memory, and with ``collocated`` ``D`` (Q_1d, Q_1d)."""
    load_d = (
        "__shared__ double s_D[Q_1D * Q_1D];\n"
        "  for (int i = tid; i < Q_1D * Q_1D; i += NUM_THREADS) s_D[i] = D[i];\n  "
        if collocated
        else ""
    )
    return load_d + "\n  ".join(
        f"__shared__ double s_B{j}[{size}], s_G{j}[{size}], s_Bt{j}[{size}], s_Gt{j}[{size}];\n"
        f"  load_matrices<{size}>(B{j}, G{j}, s_B{j}, s_G{j}, tid);\n"
        f"  load_matrices<{size}>(Bt{j}, Gt{j}, s_Bt{j}, s_Gt{j}, tid);"
        for j, size in enumerate(b.P_1d * Q_1d for b in bases)
    )


def _fused_kernel_text(defines, src, params, prologue, body, epilogue, dot, blocking=1):
    """The kernel's source around the stages: defines, constant tables, the element loop
    with the inputs' stages (``src.lines``), the points (``body``), the ``epilogue``.  With
    ``blocking=2`` the buffer is 16-byte aligned (its pair loads) and whether a point is the
    element's (``qok``) is known per point (the thread's two columns)."""
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    align = "__align__(16) " if blocking == 2 else ""
    qok = "const bool qok = active && owns_{}<Q_1D>({}tx, ty);"
    qok_element, qok_point = (qok.format("column", ""), "") if blocking == 1 else ("", qok)
    qok_point = qok_point and qok_point.format("point", "k, ") + "\n      "
    params = ",\n    ".join(params)
    stage = "\n    ".join(src.lines)
    point = "\n      ".join(body)
    finish = "\n    ".join(epilogue)
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
{_constant_tables(src.constants)}
extern "C" __global__ void apply(
    {params}) {{
  __shared__ {align}double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  {prologue}
  double *buf = s_buf + slot * BUF_SIZE;
  for_each_element(num_elem, slot, [&](index_t elem, bool active) {{
    {qok_element}
    {stage}
#pragma unroll
    for (int k = 0; k < COLUMN(Q_1D); k++) {{
      const index_t q = column_index<Q_1D>(k, tx, ty);
      {qok_point}{point}
    }}
    {finish}
  }});{_dot_end(dot, "tid", "NUM_THREADS")}
}}
"""


def _host_matrices(bases, collocated):
    """The kernel's 1D matrices on the host, by the names of their shared copies: ``B{j}``,
    ``G{j}`` (Q_1d, P_1d) and ``Bt{j}``, ``Gt{j}`` (P_1d, Q_1d) of matrix set j, and with
    ``collocated`` the first basis's ``D`` (Q_1d, Q_1d), as :func:`_collocated_derivative`."""
    matrices = {}
    for j, b in enumerate(bases):
        matrices |= {f"B{j}": b.interp_1d, f"G{j}": b.grad_1d}
        matrices |= {f"Bt{j}": b.interp_1d.T, f"Gt{j}": b.grad_1d.T}
    if collocated:
        matrices["D"] = collocated_grad(bases[0].interp_1d, bases[0].grad_1d)
    return matrices


def _constant_tables(constants):
    """``__constant__`` copies ``c_{name}`` of the matrices ``constants`` (name -> host
    array), exact: hexadecimal literals, row-major."""
    lines = []
    for name, M in constants.items():
        values = ", ".join(map(float.hex, M.ravel().tolist()))
        lines.append(f"__constant__ double c_{name}[{M.size}] = {{{values}}};\n")
    return "".join(lines)


def _collocated_derivative(bases):
    """The first basis's device ``D`` (Q_1d, Q_1d) where it differentiates every basis
    contracted through shared memory.

    ``D B_j = G_j`` holds for the lower-order Lagrange bases on the same points
    (a coordinate field beside the solution's); None without a ``D``
    (``CudaBatchedBackend.collocated``) or where some basis breaks it.  Bases of
    at most :data:`DIRECT_NODES` nodes are evaluated per thread without ``D``
    (a :func:`~hofem.cell_center` basis breaks it).
    """
    D = bases[0].backend_data.collocated
    if D is None:
        return None
    host = cupy.asnumpy(D)  # (Q_1d, Q_1d)
    for b in bases[1:]:
        if b.P_1d**b.dim <= DIRECT_NODES:  # evaluated per thread (_Source._direct), no D
            continue
        scale = np.abs(b.grad_1d).max()
        if not np.allclose(host @ b.interp_1d, b.grad_1d, rtol=0.0, atol=1e-12 * scale):
            return None
    return D


@functools.cache
def _compile_options(code, options):
    return kernels.raw_module(code, options).get_function("apply")


def _compile(code, t_1d, cap=None):
    """The kernel ``apply`` of ``code`` at ``--maxrregcount=cap``, or where ``cap`` is None
    compiled again at :func:`register_cap` where it asks."""
    if cap is None:
        kernel = _compile_options(code, ())
        cap = register_cap(kernel.num_regs, t_1d)
        if cap is None:
            return kernel
    return _compile_options(code, (f"--maxrregcount={cap}",))


class FusedOperator:
    """``op``'s fused kernel, generated, compiled and bound to its fields.

    ``run(u, v)`` adds ``A u`` to ``v`` for the active L-vectors (either may be
    None when the operator has no active input or output).

    Parameters
    ----------
    op : Operator
        On a batched CUDA backend; its QFunction must be traceable (else
        :class:`Untraceable` propagates).
    shape : tuple
        ``(dim, P_1d, Q_1d)`` from :func:`fusable_shape`.

    Attributes
    ----------
    num_blocks : int
        Blocks of the launch grid, the entries of :meth:`apply_dot`'s partial
        sums: at most four waves of resident blocks, each looping over many
        elements.  On the H200 at 1e7 DOFs that beat one block per
        ``ELEMS_PER_BLOCK`` elements by 1-7% for BP1/BP3 p = 1..8, and it
        spreads the dot variant's closing block reduction over many elements
        (with one block per element group that variant was 10% slower).
    """

    def __init__(self, op, shape):
        bases, _ = _matrix_bases(op)
        data = [b.backend_data for b in bases]
        # kernel_source's order
        matrices = [m for d in data for m in (d.interp_1d, d.grad_1d, d.interp_1d_t, d.grad_1d_t)]
        D = _collocated_derivative(bases)
        if D is not None:
            matrices.append(D)
        self._op, self._shape, self._collocated = op, shape, D is not None
        self._matrices = matrices
        elems, self._block = fused_block(shape, self.blocking)
        self._tensor_cores = False
        scalar = self.blocking == 1
        cap = slab_register_cap(op, shape) if scalar else None  # the CG variant: _compile
        self._kernel = _compile(self._source(), max(shape[1:]), cap)
        if scalar and use_tensor_cores(shape, self._kernel.num_regs):  # the dot variant follows
            self._tensor_cores = True
            self._kernel = _compile(self._source(), max(shape[1:]), cap)
        self._dot_kernel = None  # compiled on the first apply_dot
        self._weights = self._weight_tables(op, shape)
        resident = max(1, 2048 // int(np.prod(self._block)))  # blocks per SM, by threads
        self.num_blocks = self._grid(op.num_elem, elems, resident)

    layout = "slab"  # a thread per z column; operator_warp's kernels: "warp"
    blocking = 1  # columns per thread (operator_blocked's: 2)
    _shared_mem = 0  # dynamic shared memory bytes of a launch (the kernels' own: static)

    @staticmethod
    def _grid(num_elem, elems_per_block, resident):
        """Blocks of the launch: one per ``elems_per_block`` elements, at most four waves of
        ``resident`` blocks per SM (see :attr:`num_blocks`)."""
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        return max(1, min(-(-num_elem // elems_per_block), 4 * sms * resident))

    @staticmethod
    def _weight_tables(op, shape):
        """Device quadrature weights ``(Q_1d^dim,)`` of ``op``'s weight fields, by basis id."""
        weights = {}
        for field in op.input_fields:
            if field.eval_mode is EVAL_WEIGHT and id(field.basis) not in weights:
                w = field.basis.q_weight_1d  # (Q_1d,)
                tensor = functools.reduce(np.multiply.outer, [w] * shape[0]).ravel()
                weights[id(field.basis)] = cupy.asarray(tensor)  # (Q_1d^dim,)
        return weights

    def _compile(self, code):
        """The kernel ``apply`` of ``code`` at the :func:`register_cap` rule: the CG variant's,
        which the caps of :func:`slab_register_cap` (the apply kernel's) do not serve."""
        return _compile(code, max(self._shape[1:]))

    def _source(self, dot=False):
        return kernel_source(
            self._op,
            self._shape,
            self._collocated,
            dot,
            tensor_cores=self._tensor_cores,
            blocking=self.blocking,
        )

    @staticmethod
    def _indices(field):
        r = field.restriction
        if r.backend_data.identity:
            return ()
        return r.backend_data.indices, np.int64(r.component_stride)  # (num_elem * elem_size,)

    def _args(self, u, v):
        op = self._op
        args = [np.int32(op.num_elem), *self._matrices]
        for field in op.input_fields:
            if field.eval_mode is not EVAL_WEIGHT:
                args += [u if field.is_active else field.vector, *self._indices(field)]
            elif self._weights is not None:  # (the warp kernels' are __constant__ tables)
                args.append(self._weights[id(field.basis)])
        for field in op.output_fields:
            if field.is_active:
                args += [v, *self._indices(field)]
        return args

    def __call__(self, u, v):
        """``v (l_size,) += A u``; either may be None without an active input or output."""
        args = tuple(self._args(u, v))
        self._kernel((self.num_blocks,), self._block, args, shared_mem=self._shared_mem)

    def apply_dot(self, u: Array, v: Array, dot_partial: Array, status: Array) -> None:
        """``v += A u`` and ``dot_partial[b]``, block ``b``'s part of ``u . Au``.

        Parameters
        ----------
        u, v : cupy.ndarray (l_size,), float64
            ``v`` must be zero for the partial sums to add up to ``u . Au``.
        dot_partial : cupy.ndarray (num_blocks,), float64
        status : cupy.ndarray (1,) or more, int64
            The kernel does nothing while ``status[0]`` is nonzero (a stopped CG).

        Raises
        ------
        ValueError
            The operator has no :func:`dot_pairs`.
        """
        if self._dot_kernel is None:
            self._dot_kernel = self._compile(self._source(dot=True))
        args = (*self._args(u, v), dot_partial, status)
        self._dot_kernel((self.num_blocks,), self._block, args, shared_mem=self._shared_mem)
