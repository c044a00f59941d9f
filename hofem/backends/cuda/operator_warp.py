"""gen's fused kernel with one warp per element: the contractions on the fp64 tensor cores.

The column-per-thread slab of :mod:`.operator_fuse` reads one shared-memory value per
multiply-add in its x and y stages, and that pipe bounds it, as it bounds libCEED's
cuda-gen (``docs/performance.md``).  Here each warp applies a whole element
(``warp_element.cuh``): lane ``(g, t) = (lane / 4, lane % 4)`` owns the z columns ``(i, j) =
(2 t + h, g)``; the x and y contractions and their transposes are 8x8x4 fp64 tensor-core
tiles, the z contractions run in each lane's registers, and the warp's buffer only
transposes between stages (two round trips per element and direction).  The QFunction body
is traced and inlined at each lane's ``2 Q_1d`` points, as in the slab kernel.

Gradients are the values at the points, then the collocated derivative ``D`` (Q_1d, Q_1d)
along each direction, streamed level by level (``warp_grad_level``): before the points of
level ``k`` the lanes form its x part on the tensor cores from the values in registers, its
y part from the values' tile ``k`` in the warp's buffer, and its z part in registers; after
them the transposes add the test values back (x and z at once, y through the buffer once
every level is in).  Only the values and the transposed sums stay in registers across
levels, ``4 Q_1d`` doubles per component, not the ``12 Q_1d`` of whole gradients.  Each
gradient component in or out holds one buffer (a slot) per warp.

Where ``P_1d, Q_1d <= 4`` (:func:`warp_side`) a warp applies four elements at once, each
tile holding four elements' 4x4 slices with block-diagonal operands of the 1D matrices.
Where the interpolation is the identity (Gauss-Lobatto points at the nodes: BP5, BP6) the
lanes gather the nodes as the point values and scatter the transposed values back, with no
contraction (``warp_gather_points``, ``warp_scatter_points``).

The stages' operands sit in a shared table per block, one column per lane, read where each
stage uses them (registers for the shapes of :data:`REGISTER_OPERAND_SHAPES`); the table
also holds each lane's ``w[j] w[i]``, so that a quadrature weight is that entry times the
level's ``w[k]``, a constant operand.  The buffer's layout (``warp_index``) keeps every
half-warp access free of bank conflicts.

It applies to 3D operators whose basis fields all interpolate or differentiate on one
basis (``P_1d, Q_1d <= 8``, the collocated ``D`` where there are gradients) or read
weights, with ``EVAL_NONE`` inputs (stored q-data) and inputs on a cell-constant basis of
few nodes (:func:`hofem.cell_center`: the Jacobian of affine cells from their vertices,
evaluated once per element) beside them: BP1 to BP6, with stored q-data or the geometry on
the fly, and user operators of the same structure (at most :data:`MAX_POINT_ROWS` values
per point each way, or :data:`MAX_GRAD_ROWS` with gradients).  The tables of
:func:`warp_shapes`, one per kind of kernel, hold the shapes where it measured faster than
the slab.

A vector form's one-component operator (:attr:`hofem.Operator.component_operator`: BP4,
BP6) runs as one kernel that takes the components in turn (``components`` of
:func:`warp_kernel_source`, :func:`use_components_in_turn`): the element's geometry once,
then for each component the gather, the stages, the QFunction and the scatter, with one
component's registers and buffer slot where the vector kernel holds three.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...basis import collocated_grad
from ...constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from .operator_fuse import (
    _DOT_BEGIN,
    FusedOperator,
    _compile,
    _constant_tables,
    _dot_end,
    _dot_params,
    _is_cell_field,
    _is_grad,
    _on_main_basis,
    _qfunction_stage,
    _reads_cells,
    _Source,
    dot_pairs,
    has_grad,
    point_rows,
)
from .ref import cupy

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import OperatorLike as Operator

__all__ = [
    "REGISTER_OPERAND_SHAPES",
    "WARP_CELL_SHAPES",
    "WARP_GRAD_SHAPES",
    "WARP_GRAD_STORED_SHAPES",
    "WARP_IN_TURN_SHAPES",
    "WARP_IN_TURN_STORED_SHAPES",
    "WARP_SHAPES",
    "WARP_VECTOR_GRAD_SHAPES",
    "WARP_VECTOR_GRAD_STORED_SHAPES",
    "WARP_VECTOR_SHAPES",
    "WarpFusedOperator",
    "in_turn_fusable",
    "in_turn_shapes",
    "use_components_in_turn",
    "use_warp_layout",
    "warp_budget",
    "warp_kernel_source",
]

_TUNING = tuning.warp()  # cuda_warp.json: the numbers, with the runs that measured them
# the (dim, P_1d, Q_1d) of gen's interpolation-only kernels that run one warp per element, on
# devices of compute capability 8.0 or later, and the blocks of WARPS warps per SM that
# __launch_bounds__ asks registers for: the shapes where the layout measured faster than the
# slab, each at its best budget (more blocks hide latency, fewer leave registers to the
# stages; p >= 7 needs Q_1d > 8).  p = 2 runs four elements per warp (warp_side)
WARP_SHAPES = _TUNING.blocks["interp"]
# ... and those that also read cell-constant inputs (_is_cell_field: BP1 with the Jacobian of
# affine cells computed on the fly): with no stored value per point they need fewer
# registers for the loads in flight, so they take budgets of their own (p = 1, four elements
# per warp, runs this way only on the fly: with stored q-data it lost to the slab)
WARP_CELL_SHAPES = _TUNING.blocks["cell"]
# the shapes of WARP_SHAPES and WARP_CELL_SHAPES whose kernels hold the stages' operands in
# registers (WarpRegs): elsewhere that lost to the shared table at every budget
REGISTER_OPERAND_SHAPES = _TUNING.register_operand_shapes
# ... and those interpolating more than one value per point (BP2, the vector mass: three
# components), which need more registers than BP1's budgets leave; the CG variant
# (apply_dot) spills at more blocks where the apply does not, so its budget bounds them
WARP_VECTOR_SHAPES = _TUNING.blocks["vector"]
# ... and of the kernels with gradients (the collocated derivative's x and y stages on the
# tensor cores too): BP3 (Q_1d = P_1d + 1 Gauss points) and BP5 (Q_1d = P_1d Gauss-Lobatto
# points) with the geometry on the fly; BP5 p = 1 loses to the slab
WARP_GRAD_SHAPES = _TUNING.blocks["grad"]
# ... and those reading more than PREFETCH_SIZE stored values at each point (BP3's and BP5's
# q-data), which need more registers: BP3 p = 1 and BP5 p = 4 tie with or lose to the slab
# at every budget, so they keep it
WARP_GRAD_STORED_SHAPES = _TUNING.blocks["grad_stored"]
# ... and of the kernels with gradients of more than MAX_POINT_ROWS values per point (BP4
# and BP6, the vector Poisson: three buffer slots per warp, so two warps per block): they
# hold 4 Q_1d doubles per component across levels and take the largest budgets (4 blocks:
# 255 registers) except at the smallest shapes; with the geometry on the fly ...
WARP_VECTOR_GRAD_SHAPES = _TUNING.blocks["vector_grad"]
# ... and with stored q-data (more than PREFETCH_SIZE values read at each point)
WARP_VECTOR_GRAD_STORED_SHAPES = _TUNING.blocks["vector_grad_stored"]
# ... and of the kernels that apply a vector form's one-component operator to each component
# in turn (warp_kernel_source's components): one component's registers and buffer slot, the
# cell's geometry evaluated once for all of them; without and with stored values read at
# each point (:func:`in_turn_shapes`), which each component reads again
WARP_IN_TURN_SHAPES = _TUNING.blocks["grad_in_turn"]
WARP_IN_TURN_STORED_SHAPES = _TUNING.blocks["grad_in_turn_stored"]
# values per point of the main basis's fields that the layout keeps in registers at most
# (gen's rule, use_warp_layout): a scalar gradient or a 3-component interpolation in, the
# same out ...
MAX_POINT_ROWS = 3
# ... and where there are gradients: a 3-component gradient (the vector Poisson); more (a
# coordinate gradient on the solution's basis beside the solution's, curved cells on the
# fly) were not measured faster than the slab
MAX_GRAD_ROWS = 9
# warps (elements) per block, fewer where the warps' buffers would pass BUFFERS_PER_BLOCK:
# at equal registers per SM, 2 and 8 warps per block measured no faster
WARPS = _TUNING.warps_per_block
# the warps' buffers (4 KiB each: 8 tiles of 8 rows of 8 doubles) a block holds at most: 7
# and the stages' operand table (3.5 KiB) fit in 48 KiB, the static shared-memory limit (11
# would; the tables' register budgets were measured at 7).  A warp holds one buffer per
# gradient component of its inputs or outputs (the slots of warp_grad_level), at least one
BUFFERS_PER_BLOCK = 7
# stored (EVAL_NONE) inputs of at most this many values per point are read into registers
# before the stages (2 Q_1d per value and lane), so that their loads overlap the
# contractions; larger ones are read at each point, where holding them costs registers
PREFETCH_SIZE = _TUNING.prefetch_size
# blocks per SM asked for shapes outside the tables (tests that force the layout)
MIN_BLOCKS = 5
_BASIS_MODES = (EVAL_INTERP, EVAL_GRAD)


def use_warp_layout(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``) with one warp per element.

    :func:`warp_fusable`; ``shape`` in the table of :func:`warp_shapes` (by gradients and
    stored values read at the points); at most :data:`MAX_POINT_ROWS` values per point of
    the main basis's inputs and outputs each (:data:`MAX_GRAD_ROWS` where there are
    gradients); with gradients, the basis's device
    collocated derivative (``CudaBatchedBackend.collocated``); a device of compute capability
    8.0 or later.
    """
    if not warp_fusable(op):
        return False
    limit = MAX_GRAD_ROWS if has_grad(op) else MAX_POINT_ROWS
    if tuple(shape) not in warp_shapes(op) or max(point_rows(op)) > limit:
        return False
    return _device_ready(op)


def _device_ready(op):
    """With gradients, the main basis's device collocated derivative (the backend may turn
    it off); a device of compute capability 8.0 or later (the fp64 tensor cores)."""
    if has_grad(op) and _main_basis(op).backend_data.collocated is None:
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def warp_shapes(op: Operator) -> Mapping[tuple[int, int, int], int]:
    """The table of measured shapes (and register budgets) for ``op``'s kind of kernel:
    :data:`WARP_SHAPES` (interpolation of one value per point), :data:`WARP_CELL_SHAPES` (the
    same with cell-constant inputs), :data:`WARP_VECTOR_SHAPES` (of more values),
    :data:`WARP_GRAD_STORED_SHAPES` (gradients, and more than :data:`PREFETCH_SIZE` stored
    values read at each point), :data:`WARP_GRAD_SHAPES` (other gradients), or with
    gradients of more than :data:`MAX_POINT_ROWS` values per point
    :data:`WARP_VECTOR_GRAD_STORED_SHAPES` and :data:`WARP_VECTOR_GRAD_SHAPES`."""
    rows = point_rows(op)
    if not has_grad(op):
        if rows[0] > 1:
            return WARP_VECTOR_SHAPES
        return WARP_CELL_SHAPES if _reads_cells(op) else WARP_SHAPES
    stored = _reads_at_points(op)
    if max(rows) > MAX_POINT_ROWS:
        return WARP_VECTOR_GRAD_STORED_SHAPES if stored else WARP_VECTOR_GRAD_SHAPES
    return WARP_GRAD_STORED_SHAPES if stored else WARP_GRAD_SHAPES


def in_turn_shapes(op: Operator) -> Mapping[tuple[int, int, int], int]:
    """The table of measured shapes (and register budgets) of ``op``'s kernel applied to
    each component in turn: :data:`WARP_IN_TURN_STORED_SHAPES` where it reads more than
    :data:`PREFETCH_SIZE` stored values at each point, else :data:`WARP_IN_TURN_SHAPES`."""
    return WARP_IN_TURN_STORED_SHAPES if _reads_at_points(op) else WARP_IN_TURN_SHAPES


def _reads_at_points(op):
    """Whether ``op`` reads a stored input of more than :data:`PREFETCH_SIZE` values per point
    (q-data of a Poisson form), at each point rather than into registers before the stages."""
    return any(f.eval_mode is EVAL_NONE and f.size > PREFETCH_SIZE for f in op.input_fields)


def use_components_in_turn(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies the multi-component ``op`` (of fused ``shape``) as one kernel of
    its :attr:`~hofem.Operator.component_operator` that takes the components in turn.

    ``op`` has gradients and a component operator, ``shape`` is in the table of
    :func:`in_turn_shapes`, the component operator is :func:`in_turn_fusable` and has the
    collocated derivative, on a device of compute capability 8.0 or later.
    """
    if op.component_operator is None or not has_grad(op):
        return False
    if tuple(shape) not in in_turn_shapes(op):
        return False
    scalar = op.component_operator()
    return in_turn_fusable(scalar) and _device_ready(scalar)


def in_turn_fusable(op: Operator) -> bool:
    """Whether the one-component ``op`` can take the components in turn as the tables were
    measured (no device): :func:`warp_fusable`, its passive inputs stored values, weights or
    cell-constant inputs (the affine Jacobian, evaluated once per element before the
    components' loop).  A passive field interpolated or differentiated on the main basis
    (the coordinates of curved cells on the fly) would run its stages inside the loop, once
    per component."""
    if not warp_fusable(op):
        return False
    before = (EVAL_NONE, EVAL_WEIGHT)
    return all(f.is_active or f.eval_mode in before or _is_cell_field(f) for f in op.input_fields)


def warp_budget(op: Operator, shape: tuple[int, int, int], components: int = 1) -> int:
    """Blocks per SM that the kernel's ``__launch_bounds__`` asks registers for: the entry of
    :func:`warp_shapes` (or with ``components`` > 1 :func:`in_turn_shapes`) for ``shape``,
    :data:`MIN_BLOCKS` where the table has none."""
    table = in_turn_shapes(op) if components > 1 else warp_shapes(op)
    return table.get(tuple(shape), MIN_BLOCKS)


def operand_registers(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether ``op``'s kernel holds the stages' operand entries in registers (``WarpRegs``,
    :data:`REGISTER_OPERAND_SHAPES`) rather than reading them from the block's shared table
    where each stage uses them (``WarpTable``)."""
    scalar = any(warp_shapes(op) is table for table in (WARP_SHAPES, WARP_CELL_SHAPES))
    return scalar and tuple(shape) in REGISTER_OPERAND_SHAPES


def _slots(op):
    """Buffers each warp holds: one per gradient component in (the values' tiles, for y) or
    out (the y parts' tiles), at least one (the stages' scratch)."""

    def components(fields):
        return sum(f.basis.num_comp for f in fields if _is_grad(f))

    active = [f for f in op.output_fields if f.is_active]  # those the kernel writes
    return max(1, components(op.input_fields), components(active))


def warps_per_block(slots: int) -> int:
    """Warps (elements) per block of a kernel whose warps hold ``slots`` buffers each."""
    return max(1, min(WARPS, BUFFERS_PER_BLOCK // slots))


def _main_basis(op):
    """The basis of ``op``'s interpolated and differentiated fields (a weight field's or a
    cell-constant input's may have another ``P_1d``)."""
    return next(f.basis for f in op.input_fields + op.output_fields if _on_main_basis(f))


def warp_fusable(op: Operator) -> bool:
    """The field conditions of :func:`use_warp_layout` (no device, no shape table).

    3D; every interp/grad field on one basis (the same 1D matrices) of at most 8 nodes and
    points per direction, with the collocated derivative where there are gradients, except
    inputs of at most :data:`~.operator_fuse.DIRECT_NODES` nodes on a cell-constant basis;
    inputs also ``EVAL_NONE`` or ``EVAL_WEIGHT`` (every weight field of the same 1D
    weights); every output interpolated or differentiated.
    """
    fields = op.input_fields + op.output_fields
    main = [f for f in fields if _on_main_basis(f)]
    if not main or any(f.eval_mode not in _BASIS_MODES for f in op.output_fields):
        return False
    if any(_is_cell_field(f) for f in op.output_fields):
        return False
    modes = (*_BASIS_MODES, EVAL_NONE, EVAL_WEIGHT)
    if any(f.eval_mode not in modes for f in op.input_fields):
        return False
    first = main[0].basis
    same = all(
        f.basis is first
        or (
            (f.basis.P_1d, f.basis.Q_1d) == (first.P_1d, first.Q_1d)
            and np.array_equal(f.basis.interp_1d, first.interp_1d)
            and np.array_equal(f.basis.grad_1d, first.grad_1d)
        )
        for f in main
    )
    if not same or first.dim != 3 or max(first.P_1d, first.Q_1d) > 8:
        return False
    if any(f.basis.dim != 3 for f in fields if f.eval_mode in _BASIS_MODES):
        return False
    if _slots(op) > BUFFERS_PER_BLOCK:
        return False
    weights = [f.basis.q_weight_1d for f in op.input_fields if f.eval_mode is EVAL_WEIGHT]
    if any(not np.array_equal(w, weights[0]) for w in weights):
        return False  # the operand table holds one set of weight factors
    return not has_grad(op) or collocated_grad(first.interp_1d, first.grad_1d) is not None


def warp_side(shape: tuple[int, int, int]) -> int:
    """The side of one element's block in the 8x8 tiles for ``shape`` ``(3, P_1d, Q_1d)``: 4
    (four elements per warp, block-diagonal operands) where ``P_1d, Q_1d <= 4``, else 8."""
    return 4 if max(shape[1:]) <= 4 else 8


def _group(address, c, nodes="NUM_NODES"):
    """C++ arguments ``pointer, idx, base, estride, nvalid`` of component ``c`` of the warp's
    elements of ``nodes`` nodes each: element ``elem``'s base and the step from one
    element's to the next's."""
    pointer, idx, base = address(c, nodes)
    after = address(c, nodes, "(elem + 1)")[2]
    return f"{pointer}, {idx}, {base}, ({after}) - ({base}), nvalid"


def _cell_table(field):
    """The rows (interp: 1, grad: 3) by the ``P_1d^3`` nodes of a cell-constant basis's values
    at its points, row-major ``(rows, P_1d^3)``."""
    point = field.basis.first_point()
    if field.eval_mode is EVAL_GRAD:
        return point.grad[:, 0, :]  # (3, P_1d^3)
    return point.interp  # (1, P_1d^3)


def warp_kernel_source(
    op: Operator,
    shape: tuple[int, int, int],
    dot: bool = False,
    registers: bool | None = None,
    components: int = 1,
) -> str:
    """CUDA source of ``op``'s one-warp-per-element kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        :func:`warp_fusable`, its QFunction traceable.
    shape : tuple
        ``(3, P_1d, Q_1d)``.
    dot : bool
        Also write ``dot_partial[block]``, the block's part of ``u . Au``, and return at
        once while ``*status`` is nonzero, as :func:`.operator_fuse.kernel_source`.
    registers : bool, optional
        Hold the stages' operand entries in registers rather than read them from the
        block's shared table; default :func:`operand_registers`.
    components : int
        Apply ``op`` to this many blocks of its active L-vectors in turn, each block
        ``comp_step`` entries after the last (a parameter after ``num_elem``): a vector form's
        :attr:`~hofem.Operator.component_operator` on each component, its other inputs (the
        q-data, the geometry) read once per element where they are read before the stages.

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` and ``warp_element.cuh`` (compile with
        ``-I`` this folder).  Parameters: ``num_elem``, the fields as
        :class:`~.operator_fuse.FusedOperator` binds them, then ``dot_partial, status``.
        The 1D matrices are ``__constant__`` tables.

    Raises
    ------
    ValueError
        ``op`` is not :func:`warp_fusable`, ``dot`` without :func:`dot_pairs`, or
        ``components`` other than 1 for an operator with a multi-component active field.
    """
    active = [f for f in op.input_fields + op.output_fields if f.is_active]
    if components < 1 or (components > 1 and any(f.basis.num_comp != 1 for f in active)):
        raise ValueError(
            f"components={components}: use 1, or more for a one-component operator (a "
            "vector form's component_operator)"
        )
    if not warp_fusable(op):
        raise ValueError(
            "the warp layout needs 3D interpolation and gradient fields of one basis of "
            "P_1d, Q_1d <= 8"
        )
    if registers is None:
        registers = operand_registers(op, shape)
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    basis = _main_basis(op)
    tables = {"B0": basis.interp_1d}  # (Q_1d, P_1d)
    if has_grad(op):
        tables["D"] = collocated_grad(basis.interp_1d, basis.grad_1d)  # (Q_1d, Q_1d)
    stages = _WarpStages(_Source(3, False, None, {}, 0), tables, components=components)
    if components > 1:
        stages.src.param("const index_t comp_step")
    for k, field in enumerate(op.input_fields):
        _emit_input(stages, k, field)
    for k, field in enumerate(op.output_fields):
        _emit_output(stages, k, field)
    _emit_barriers(stages)
    body = _qfunction_stage(op, stages.loads, stages.stores, pairs)
    body += ["if (!qok) {", *(f"  {line}" for line in stages.zero), "}"]  # padded points add 0
    if any(f.eval_mode is EVAL_NONE for f in op.input_fields):  # read at pelem's points
        pelem = "lane_ok ? elem + pe : elem"  # the lane's element, or a valid one
        stages.prefetch.insert(0, f"const index_t pelem = {pelem};")
    return _warp_kernel_text(op, shape, stages, body, dot, registers)


@dataclasses.dataclass
class _WarpStages:
    """The warp kernel's statements by stage, filled field by field (inputs, then outputs).

    ``loads[k](row)`` and ``stores[k](row)`` are input and output ``k``'s QFunction row
    ``row`` at the lane's point ``(i, j, k)``, ``h``; a gradient's row is ``d C + c``.
    """

    src: _Source  # the kernel's parameters
    tables: dict  # __constant__ tables by name (c_{name}): 1D matrices, weights, cell tables
    prefetch: list = dataclasses.field(default_factory=list)  # stored and cell inputs
    stage: list = dataclasses.field(default_factory=list)  # gather and interp; registers
    tiles: list = dataclasses.field(default_factory=list)  # gradient inputs' values' tiles
    level: list = dataclasses.field(default_factory=list)  # level k, before its points
    level_end: list = dataclasses.field(default_factory=list)  # level k, after its points
    transposes: list = dataclasses.field(default_factory=list)  # after every level
    epilogue: list = dataclasses.field(default_factory=list)  # transposed interp, scatter
    zero: list = dataclasses.field(default_factory=list)  # outputs at padded points
    loads: list = dataclasses.field(default_factory=list)
    stores: list = dataclasses.field(default_factory=list)
    output_slots: int = 0  # buffer slots of the active gradient outputs' y parts
    components: int = 1  # blocks of the active vectors applied in turn (warp_kernel_source)

    def field_params(self, name, field, writable):
        """:meth:`_Source.field_params`, an active field's pointer at block ``comp``."""
        address = self.src.field_params(name, field, writable)
        if self.components == 1 or not field.is_active:
            return address

        def block(c, nodes, elem="elem"):
            pointer, idx, base = address(c, nodes, elem)
            return f"{pointer} + comp * comp_step", idx, base

        return block


def _emit_input(stages, k, field):
    """Input ``k``'s stages before the points, and its ``load``."""
    name = f"in{k}"
    if field.eval_mode is EVAL_WEIGHT:  # from the 1D weights, a __constant__ table
        # w[k] (w[j] w[i]): the level's factor a constant operand, the lane's in the
        # operand table (WF_W); every weight field has the same 1D weights (warp_fusable)
        stages.tables["w"] = field.basis.q_weight_1d  # (Q_1d,)
        stages.loads.append(lambda row: "(qok ? c_w[k] * frag(WF_W + h) : 0.0)")
        return
    address = stages.field_params(name, field, writable=False)
    if field.eval_mode is EVAL_NONE:
        _emit_stored_input(stages, name, field, address)
    elif _is_cell_field(field):
        _emit_cell_input(stages, k, name, field, address)
    else:
        _emit_basis_input(stages, name, field, address)


def _emit_stored_input(stages, name, field, address):
    """Gather of a stored (EVAL_NONE) input: into registers before the stages when small
    (:data:`PREFETCH_SIZE`), else read at each point."""
    if field.size <= PREFETCH_SIZE:
        stages.prefetch.append(f"double r_{name}[{field.size}][Q_1D][2];")
        for row in range(field.size):
            pointer, idx, base = address(row, "NUM_QPTS", "pelem")
            stages.prefetch.append(
                f"warp_load_points<Q_1D>({pointer}, {idx}, {base}, lane_ok, lane, r_{name}[{row}]);"
            )
        stages.loads.append(lambda row: f"r_{name}[{row}][k][h]")
        return

    def load(row):
        pointer, idx, base = address(row, "NUM_QPTS", "pelem")
        q = "i + Q_1D * (j + Q_1D * k)"  # the point's index in the element
        return f"(qok ? ({pointer})[entry({idx}, {base} + {q})] : 0.0)"

    stages.loads.append(load)


def _emit_cell_input(stages, k, name, field, address):
    """Gather and evaluation of a cell-constant input, once per element; row ``d C + c``."""
    C = field.basis.num_comp
    table = _cell_table(field)  # (rows, P_1d^3)
    stages.tables[f"W{k}"] = table
    nodes = field.basis.num_nodes
    step = "0"  # from component 0's entry to component 1's
    if C > 1:
        (pointer, _, base), (pointer1, _, base1) = address(0, nodes), address(1, nodes)
        step = f"(({pointer1}) - ({pointer})) + (({base1}) - ({base}))"
    stages.prefetch.append(f"double r_{name}[{field.size}];")
    stages.prefetch.append(
        f"warp_cell_values<{nodes}, {len(table)}, {C}>({_group(address, 0, nodes)}, "
        f"{step}, c_W{k}, lane, r_{name});"
    )
    stages.loads.append(lambda row: f"r_{name}[{row}]")


def _emit_basis_input(stages, name, field, address):
    """Gather and interpolation of an input on the main basis, then for a gradient its
    values' tiles (one slot of the warp's buffer per component) and ``D`` per level."""
    C = field.basis.num_comp
    stages.stage.append(f"double r_{name}[{C}][Q_1D][2];")  # the values at the points
    for c in range(C):
        group, values = _group(address, c), f"r_{name}[{c}]"
        if field.basis.interpolates_identity:
            call = f"warp_gather_points<P_1D>({group}, lane, {values});"
        else:
            call = f"warp_interp<P_1D, Q_1D>({group}, frag, c_B0, buf, lane, {values});"
        stages.stage.append(call)
    if field.eval_mode is not EVAL_GRAD:
        stages.loads.append(lambda row: f"r_{name}[{row}][k][h]")
        return
    for c in range(C):
        slot = f"buf + {len(stages.tiles)} * WARP_BUF"
        stages.tiles.append(f"warp_store_tiles({slot}, r_{name}[{c}], lane);")
        stages.level.append(f"double g_{name}_{c}[3][2];")
        stages.level.append(
            f"warp_grad_level<Q_1D>(r_{name}[{c}], {slot}, frag, c_D, lane, k, g_{name}_{c});"
        )
    stages.loads.append(lambda row: f"g_{name}_{row % C}[{row // C}][h]")


def _emit_output(stages, k, field):
    """Output ``k``'s registers and ``store``; if active, its transposed stages."""
    name = f"out{k}"
    C = field.basis.num_comp
    grad = field.eval_mode is EVAL_GRAD
    if grad:  # per level; the point values of every level in v_{name}; row d C + c
        stages.level += [f"double g_{name}_{c}[3][2] = {{}};" for c in range(C)]
        rows = [f"g_{name}_{row % C}[{row // C}][h]" for row in range(3 * C)]
    else:
        stages.stage.append(f"double r_{name}[{C}][Q_1D][2] = {{}};")
        rows = [f"r_{name}[{row}][k][h]" for row in range(C)]
    stages.stores.append(lambda row: rows[row])
    stages.zero += [f"{r} = 0.0;" for r in rows]
    if field.is_active:
        _emit_transpose_scatter(stages, name, field)


def _emit_transpose_scatter(stages, name, field):
    """An active output's transposed basis (for a gradient: ``D^T`` per level, the y parts
    through the buffer after every level), then its transposed interpolation and scatter."""
    address = stages.field_params(name, field, writable=True)
    grad = field.eval_mode is EVAL_GRAD
    values = f"v_{name}" if grad else f"r_{name}"
    C = field.basis.num_comp
    if grad:
        stages.stage.append(f"double v_{name}[{C}][Q_1D][2] = {{}};")
    for c in range(C):
        if grad:
            slot = f"buf + {stages.output_slots} * WARP_BUF"
            stages.output_slots += 1
            stages.level_end.append(
                f"warp_grad_t_level<Q_1D>(g_{name}_{c}, {slot}, frag, c_D, lane, k, v_{name}[{c}]);"
            )
            stages.transposes.append(
                f"warp_y_mma<Q_1D>(frag, WF_DYT, {slot}, lane, v_{name}[{c}]);"
            )
        if field.basis.interpolates_identity:
            call = f"warp_scatter_points<P_1D>({values}[{c}], buf, lane, {_group(address, c)});"
        else:
            call = (
                f"warp_interp_t<P_1D, Q_1D>({values}[{c}], frag, c_B0, buf, lane, "
                f"{_group(address, c)});"
            )
        stages.epilogue.append(call)


def _emit_barriers(stages):
    """The warp synchronizations between the stages that share the warp's buffer."""
    if stages.tiles:  # after every input stage (slot 0 is their scratch)
        stages.tiles[:0] = ["__syncwarp();"]
        stages.tiles.append("__syncwarp();")
    if stages.tiles and stages.level_end:  # every lane has read the slots' tile k first
        stages.level.append("__syncwarp();")
    if stages.transposes:  # after every level
        stages.transposes.insert(0, "__syncwarp();")


def _warp_kernel_text(op, shape, stages, body, dot, registers):
    """The kernel's source around the stages: defines, tables, the element and level loops."""
    _, P, Q = shape
    params = ",\n    ".join(["const int num_elem", *stages.src.params, *_dot_params(dot)])
    slots = _slots(op)
    warps = warps_per_block(slots)
    defines = {"DIM": 3, "P_1D": P, "Q_1D": Q, "T_1D": max(P, Q), "ELEMS_PER_BLOCK": warps}
    defines |= {"SLOTS": slots, "WARP_SIDE": warp_side(shape)}
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    min_blocks = warp_budget(op, shape, stages.components)
    D = "c_D" if "D" in stages.tables else "nullptr"
    W = "c_w" if "w" in stages.tables else "nullptr"
    prefetch = "\n    ".join(stages.prefetch)
    element = "\n    ".join(stages.stage + stages.tiles)
    before, after = "\n      ".join(stages.level), "\n      ".join(stages.level_end)
    point = "\n        ".join(body)
    finish = "\n    ".join(stages.transposes + stages.epilogue)
    dot_begin = _DOT_BEGIN if dot else ""
    # the blocks of the active vectors in turn: one copy of the stages, not unrolled
    turn, end = "", ""
    if stages.components > 1:
        loop = f"for (int comp = 0; comp < {stages.components}; comp++) {{"
        turn = f"#pragma unroll 1\n    {loop}\n    "
        end = "\n    }"
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
#include "warp_element.cuh"
{_constant_tables(stages.tables)}
extern "C" __global__ void __launch_bounds__({32 * warps}, {min_blocks}) apply(
    {params}) {{
  __shared__ double s_buf[ELEMS_PER_BLOCK * SLOTS * WARP_BUF];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double *buf = s_buf + warp * SLOTS * WARP_BUF;  // SLOTS tiles of 8 levels
  __shared__ double s_frag[WARP_FRAGS * 32];  // the stages' operands, one column per lane
  if (warp == 0) warp_fill_fragments<P_1D, Q_1D>(c_B0, {D}, {W}, lane, s_frag + lane);
  __syncthreads();
  const {"WarpRegs" if registers else "WarpTable"} frag{{s_frag + lane}};
  // this lane's points belong to element pe of the warp's WARP_ELEMS
  const int pe = warp_elem(lane >> 2, 2 * (lane & 3));
  {dot_begin}for (index_t elem = ((index_t)blockIdx.x * ELEMS_PER_BLOCK + warp) * WARP_ELEMS;
       elem < num_elem; elem += (index_t)gridDim.x * ELEMS_PER_BLOCK * WARP_ELEMS) {{
    const int nvalid = (int)min((index_t)WARP_ELEMS, num_elem - elem);
    const bool lane_ok = warp_valid(pe, nvalid);
    {prefetch}
    {turn}{element}
#pragma unroll
    for (int k = 0; k < Q_1D; k++) {{
      {before}
#pragma unroll
      for (int h = 0; h < 2; h++) {{
        const int i = warp_local(2 * (lane & 3) + h), j = warp_local(lane >> 2);
        const bool qok = lane_ok && i < Q_1D && j < Q_1D;
        {point}
      }}
      {after}
    }}
    {finish}{end}
  }}{_dot_end(dot, "threadIdx.x", "blockDim.x")}
}}
"""


class WarpFusedOperator(FusedOperator):
    """:class:`~.operator_fuse.FusedOperator` with the one-warp-per-element kernel.

    Parameters
    ----------
    op : Operator
        :func:`use_warp_layout` for ``shape``, or with ``components`` > 1 the
        :attr:`~hofem.Operator.component_operator` of a form that
        :func:`use_components_in_turn`.
    shape : tuple
        ``(3, P_1d, Q_1d)``.
    components : int
        The blocks of the active L-vectors that ``op`` applies to in turn, each ``comp_step``
        entries after the last: ``run(u, v)`` then takes and adds to vectors of
        ``components * comp_step`` entries.
    comp_step : int
        Entries of one block: the component operator's L-vector size.
    """

    def __init__(self, op, shape, components=1, comp_step=0):
        self._op, self._shape, self._collocated = op, shape, False
        self._components, self._comp_step = components, comp_step
        self._matrices = []  # constant tables in the source
        warps = warps_per_block(_slots(op))
        self._block = (32 * warps, 1, 1)
        self._tensor_cores = True  # every x and y stage
        self._kernel = _compile(self._source(), max(shape[1:]))
        self._dot_kernel = None
        self._weights = None  # __constant__ tables in the source
        resident = warp_budget(op, shape, components)  # __launch_bounds__'s
        elems = warps * (8 // warp_side(shape)) ** 2  # a block's elements
        self.num_blocks = self._grid(op.num_elem, elems, resident)
        if components > 1:
            self.layout = "warp, components in turn"

    layout = "warp"

    def _source(self, dot=False):
        return warp_kernel_source(self._op, self._shape, dot, components=self._components)

    def _args(self, u, v):
        args = super()._args(u, v)  # num_elem, the fields (no matrices: constant tables)
        if self._components > 1:
            args.insert(1, np.int64(self._comp_step))
        return args
