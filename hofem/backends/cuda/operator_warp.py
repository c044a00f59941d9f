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

The stages' operands sit in a shared table per block, one column per lane, read where each
stage uses them (registers for the shapes of :data:`REGISTER_OPERAND_SHAPES`); the table
also holds each lane's ``w[j] w[i]``, so that a quadrature weight is that entry times the
level's ``w[k]``, a constant operand.  The buffer's layout (``warp_index``) keeps every
half-warp access free of bank conflicts.

It applies to 3D operators whose basis fields all interpolate or differentiate on one
basis (``P_1d, Q_1d <= 8``, the collocated ``D`` where there are gradients) or read
weights, with ``EVAL_NONE`` inputs (stored q-data) and inputs on a cell-constant basis of
few nodes (:func:`hofem.cell_center`: the Jacobian of affine cells from their vertices,
evaluated once per element) beside them: BP1 to BP3 and BP5, with stored q-data or the
geometry on the fly, and user operators of the same structure (at most
:data:`MAX_POINT_ROWS` values per point each way: BP4 and BP6 keep the slab).  The tables
of :func:`warp_shapes`, one per kind of kernel, hold the shapes where it measured faster
than the slab.
"""

import numpy as np

from ...basis import collocated_grad
from ...constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from ...qfunction_trace import trace_body
from .operator_fuse import (
    DIRECT_NODES,
    FusedOperator,
    _compile,
    _constant_tables,
    _Source,
    dot_pairs,
)
from .ref import cupy

__all__ = [
    "REGISTER_OPERAND_SHAPES",
    "WARP_CELL_SHAPES",
    "WARP_GRAD_SHAPES",
    "WARP_GRAD_STORED_SHAPES",
    "WARP_SHAPES",
    "WARP_VECTOR_SHAPES",
    "WarpFusedOperator",
    "use_warp_layout",
    "warp_kernel_source",
]

# the (dim, P_1d, Q_1d) of gen's interpolation-only kernels that run one warp per element, on
# devices of compute capability 8.0 or later, and the blocks of WARPS warps per SM that
# __launch_bounds__ asks registers for.  On the H200 (BP1, 1e7 DOFs, alternating;
# docs/performance.md, tenth session, the operands in the shared table) p = 2..6 ran
# 1.20/1.22/1.29/1.52/1.26x the slab with these bounds (8: 64 registers, 6: 80, 4: 80-118;
# the others 0.59-1.48x); p = 2 runs four elements per warp (warp_side), and its budgets of
# 5-8 blocks swung between runs (0.88-1.27x) where 4 held (1.19, 1.20x); p >= 7 needs
# Q_1d > 8.  Eleventh session: p = 2 with its operands in registers (REGISTER_OPERAND_SHAPES)
# ran 1.10-1.13x (stored q-data) and 1.10-1.24x (geometry on the fly) the shared table at
# 5-8 blocks, the table's budget 4
WARP_SHAPES = {(3, 3, 4): 8, (3, 4, 5): 8, (3, 5, 6): 6, (3, 6, 7): 6, (3, 7, 8): 4}
# ... and those that also read cell-constant inputs (_is_cell_field: BP1 with the Jacobian of
# affine cells computed on the fly; no stored value per point): on the H200 (thirteenth
# session, two runs, ab_warp.py) p = 2, 4 and 6 ran 1.03-1.04x at these budgets what they ran
# at WARP_SHAPES's, and the u . Au variant (--dot) 1.03-1.04x at p = 2, 4 and 1.00x at p = 6
# (p = 1, four elements per warp: 1.43x the slab at 8 blocks, its CG variant 1.51x; stored
# q-data at p = 1 lost at every budget, 0.88-0.96x)
WARP_CELL_SHAPES = {
    (3, 2, 3): 8, (3, 3, 4): 7, (3, 4, 5): 8, (3, 5, 6): 7, (3, 6, 7): 6, (3, 7, 8): 5,
}  # fmt: skip
# the shapes of WARP_SHAPES and WARP_CELL_SHAPES whose kernels hold the stages' operands in
# registers (WarpRegs): elsewhere (BP1 p = 3..6, BP3 p = 2..6) that lost 0-12% to the shared
# table at every budget
REGISTER_OPERAND_SHAPES = {(3, 3, 4)}
# ... and those interpolating more than one value per point (BP2, the vector mass: three
# components), which need more registers: on the H200 p = 2, 3, 5 ran 1.59/1.39/1.69x the
# slab with these bounds (80, 96, 128 registers) where BP1's bounds gave 1.48/0.99/1.07x
# (tenth session), p = 4 and 6 1.15/1.49x (ninth session).  Thirteenth session: p = 4 at 6
# blocks spilled 384 bytes in the CG variant (apply_dot), which ran 1.01x the slab there and
# 1.56x at 4 blocks (the apply 1.40x and 1.52x), so p = 4 takes 4
WARP_VECTOR_SHAPES = {(3, 3, 4): 6, (3, 4, 5): 5, (3, 5, 6): 4, (3, 6, 7): 4, (3, 7, 8): 4}
# ... and of the kernels with gradients (the collocated derivative's x and y stages on the
# tensor cores too): on the H200 (BP3, 1e7 DOFs, alternating; docs/performance.md) with the
# geometry on the fly on affine cells p = 2 and 4..6 ran 2.10/1.34/1.68/1.63x the slab (p = 2
# at 80 registers, 4 at 96, 5 and 6 at 128); p = 3 tied (1.02x), and ran 1.18x at 96
# registers after the eleventh session's bank-conflict-free buffer and constant weights.
# Thirteenth session: BP5 (Q_1d = P_1d Gauss-Lobatto points, p = 2..7) on the fly ran
# 1.42/1.89/1.29/1.69/2.34/2.52x the slab at these budgets, its CG variant 1.39-2.72x; BP3
# p = 1 1.12x (CG variant 1.18x; BP5 p = 1 lost, 0.5x, and stored BP3 p = 1, 0.87-0.94x)
WARP_GRAD_SHAPES = {
    # BP3, p = 1..6
    (3, 2, 3): 6, (3, 3, 4): 6, (3, 4, 5): 5, (3, 5, 6): 5, (3, 6, 7): 4, (3, 7, 8): 4,
    # BP5, p = 2..7
    (3, 3, 3): 6, (3, 4, 4): 6, (3, 5, 5): 5, (3, 6, 6): 5, (3, 7, 7): 5, (3, 8, 8): 5,
}  # fmt: skip
# ... and those reading more than PREFETCH_SIZE stored values at each point (BP3's q-data):
# p = 2, 5 and 6 ran 1.28/1.35/1.04x the slab (5, 6: 1.23/1.15x in the run before the shared
# operand table), p = 4 1.07x (0.89x before), p = 3 lost (0.82-0.96x); p = 3 and 4 ran 1.14/1.10x
# at 128 registers after the eleventh session's bank-conflict-free buffer, and p = 6 1.17x at
# 128 where 168 (3 blocks, spilling) gave 1.10x.  Thirteenth session: BP5 with stored q-data
# ran 1.15/1.15/1.21/1.27/1.40x the slab at p = 2, 3, 5, 6, 7 (the CG variant
# 1.26/1.32/1.00/1.31/1.53x); p = 4 tied at every budget (apply 0.92-1.06x, CG 0.83-1.02x)
WARP_GRAD_STORED_SHAPES = {
    # BP3, p = 2..6
    (3, 3, 4): 5, (3, 4, 5): 4, (3, 5, 6): 4, (3, 6, 7): 4, (3, 7, 8): 4,
    # BP5, p = 2, 3, 5..7
    (3, 3, 3): 6, (3, 4, 4): 5, (3, 6, 6): 4, (3, 7, 7): 4, (3, 8, 8): 4,
}  # fmt: skip
# values per point of the main basis's fields that the layout keeps in registers at most
# (gen's rule, use_warp_layout): a scalar gradient or a 3-component interpolation in, the
# same out; more spill (the vector Poisson, curved geometry on the fly)
MAX_POINT_ROWS = 3
# warps (elements) per block, fewer where the warps' buffers would pass BUFFERS_PER_BLOCK
WARPS = 4
# the warps' buffers (4 KiB each: 8 tiles of 8 rows of 8 doubles) a block holds at most: 7
# and the stages' operand table (3.5 KiB) fit in 48 KiB, the static shared-memory limit (11
# would; the tables' register budgets were measured at 7).  A warp holds one buffer per
# gradient component of its inputs or outputs (the slots of warp_grad_level), at least one
BUFFERS_PER_BLOCK = 7
# stored (EVAL_NONE) inputs of at most this many values per point are read into registers
# before the stages (2 Q_1d per value and lane), so that their loads overlap the
# contractions (1.03-1.09x at p = 3..5); larger ones are read at each point
PREFETCH_SIZE = 2
# blocks per SM asked for shapes outside the tables (tests that force the layout)
MIN_BLOCKS = 5
_BASIS_MODES = (EVAL_INTERP, EVAL_GRAD)


def use_warp_layout(op, shape):
    """Whether gen applies ``op`` (of fused ``shape``) with one warp per element.

    :func:`warp_fusable`; ``shape`` in the table of :func:`warp_shapes` (by gradients and
    stored values read at the points); at most :data:`MAX_POINT_ROWS` values per
    point of the main basis's inputs and outputs each; with gradients, the basis's device
    collocated derivative (``CudaBatchedBackend.collocated``); a device of compute capability
    8.0 or later.
    """
    if not warp_fusable(op):
        return False
    sides = op.input_fields, op.output_fields  # values per point each side keeps
    rows = [sum(f.size for f in fields if _on_main_basis(f)) for fields in sides]
    if tuple(shape) not in warp_shapes(op) or max(rows) > MAX_POINT_ROWS:
        return False
    if _has_grad(op) and _main_basis(op).backend_data.collocated is None:
        return False  # the backend's collocated derivative turned off
    return int(cupy.cuda.Device().compute_capability) >= 80


def warp_shapes(op):
    """The table of measured shapes (and register budgets) for ``op``'s kind of kernel:
    :data:`WARP_SHAPES` (interpolation of one value per point), :data:`WARP_CELL_SHAPES` (the
    same with cell-constant inputs), :data:`WARP_VECTOR_SHAPES` (of more values),
    :data:`WARP_GRAD_STORED_SHAPES` (gradients, and more than :data:`PREFETCH_SIZE` stored
    values read at each point) or :data:`WARP_GRAD_SHAPES` (other gradients)."""
    if not _has_grad(op):
        rows = sum(f.size for f in op.input_fields if _on_main_basis(f))
        if rows > 1:
            return WARP_VECTOR_SHAPES
        return WARP_CELL_SHAPES if any(map(_is_cell_field, op.input_fields)) else WARP_SHAPES
    stored = any(f.eval_mode is EVAL_NONE and f.size > PREFETCH_SIZE for f in op.input_fields)
    return WARP_GRAD_STORED_SHAPES if stored else WARP_GRAD_SHAPES


def operand_registers(op, shape):
    """Whether ``op``'s kernel holds the stages' operand entries in registers (``WarpRegs``,
    :data:`REGISTER_OPERAND_SHAPES`) rather than reading them from the block's shared table
    where each stage uses them (``WarpTable``)."""
    scalar = any(warp_shapes(op) is table for table in (WARP_SHAPES, WARP_CELL_SHAPES))
    return scalar and tuple(shape) in REGISTER_OPERAND_SHAPES


def _is_cell_field(field):
    """An input of few nodes whose basis gives every point the same values (its element's
    values, :func:`hofem.cell_center`): evaluated once per element."""
    basis = field.basis
    return (
        field.eval_mode in _BASIS_MODES
        and basis.is_cell_constant
        and basis.P_1d**basis.dim <= DIRECT_NODES
    )


def _on_main_basis(field):
    return field.eval_mode in _BASIS_MODES and not _is_cell_field(field)


def _is_grad(field):
    return field.eval_mode is EVAL_GRAD and _on_main_basis(field)


def _has_grad(op):
    return any(_is_grad(f) for f in op.input_fields + op.output_fields)


def _slots(op):
    """Buffers each warp holds: one per gradient component in (the values' tiles, for y) or
    out (the y parts' tiles), at least one (the stages' scratch)."""

    def components(fields):
        return sum(f.basis.num_comp for f in fields if _is_grad(f))

    active = [f for f in op.output_fields if f.is_active]  # those the kernel writes
    return max(1, components(op.input_fields), components(active))


def warps_per_block(slots):
    """Warps (elements) per block of a kernel whose warps hold ``slots`` buffers each."""
    return max(1, min(WARPS, BUFFERS_PER_BLOCK // slots))


def _main_basis(op):
    """The basis of ``op``'s interpolated and differentiated fields (a weight field's or a
    cell-constant input's may have another ``P_1d``)."""
    return next(f.basis for f in op.input_fields + op.output_fields if _on_main_basis(f))


def warp_fusable(op):
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
    return not _has_grad(op) or collocated_grad(first.interp_1d, first.grad_1d) is not None


def warp_side(shape):
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


def warp_kernel_source(op, shape, dot=False, registers=None):
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
        ``op`` is not :func:`warp_fusable`, or ``dot`` without :func:`dot_pairs`.
    """
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
    _, P, Q = shape
    basis = _main_basis(op)
    tables = {"B0": basis.interp_1d}  # (Q_1d, P_1d)
    if _has_grad(op):
        tables["D"] = collocated_grad(basis.interp_1d, basis.grad_1d)  # (Q_1d, Q_1d)
    src = _Source(3, False, None, {}, 0)  # declares the field parameters
    # per element: loads before the stages, the input stages, the gradient inputs' tiles (one
    # slot of the warp's buffer per component); per level k, before and after its points
    prefetch, stage, tiles, level, level_end, loads = [], [], [], [], [], []
    for k, field in enumerate(op.input_fields):
        name = f"in{k}"
        if field.eval_mode is EVAL_WEIGHT:  # from the 1D weights, a __constant__ table
            # w[k] (w[j] w[i]): the level's factor a constant operand, the lane's in the
            # operand table (WF_W); every weight field has the same 1D weights (warp_fusable)
            tables["w"] = field.basis.q_weight_1d  # (Q_1d,)
            loads.append(lambda row: "(qok ? c_w[k] * frag(WF_W + h) : 0.0)")
            continue
        address = src.field_params(name, field, writable=False)
        if field.eval_mode is EVAL_NONE and field.size <= PREFETCH_SIZE:
            prefetch.append(f"double r_{name}[{field.size}][Q_1D][2];")
            for row in range(field.size):
                pointer, idx, base = address(row, "NUM_QPTS", "pelem")
                prefetch.append(
                    f"warp_load_points<Q_1D>({pointer}, {idx}, {base}, lane_ok, lane, "
                    f"r_{name}[{row}]);"
                )
            loads.append(lambda row, name=name: f"r_{name}[{row}][k][h]")
            continue
        if field.eval_mode is EVAL_NONE:

            def load(row, address=address):
                pointer, idx, base = address(row, "NUM_QPTS", "pelem")
                q = "i + Q_1D * (j + Q_1D * k)"  # the point's index in the element
                return f"(qok ? ({pointer})[entry({idx}, {base} + {q})] : 0.0)"

            loads.append(load)
            continue
        C = field.basis.num_comp
        if _is_cell_field(field):  # once per element, row d C + c
            table = _cell_table(field)  # (rows, P_1d^3)
            tables[f"W{k}"] = table
            nodes = field.basis.num_nodes
            step = "0"  # from component 0's entry to component 1's
            if C > 1:
                (pointer, _, base), (pointer1, _, base1) = address(0, nodes), address(1, nodes)
                step = f"(({pointer1}) - ({pointer})) + (({base1}) - ({base}))"
            prefetch.append(f"double r_{name}[{field.size}];")
            prefetch.append(
                f"warp_cell_values<{nodes}, {len(table)}, {C}>({_group(address, 0, nodes)}, "
                f"{step}, c_W{k}, lane, r_{name});"
            )
            loads.append(lambda row, name=name: f"r_{name}[{row}]")
            continue
        stage.append(f"double r_{name}[{C}][Q_1D][2];")  # the values at the points
        for c in range(C):
            stage.append(
                f"warp_interp<P_1D, Q_1D>({_group(address, c)}, frag, c_B0, buf, lane, "
                f"r_{name}[{c}]);"
            )
        if field.eval_mode is EVAL_GRAD:  # their tiles in slots, then D per level; row d C + c
            for c in range(C):
                slot = f"buf + {len(tiles)} * WARP_BUF"
                tiles.append(f"warp_store_tiles({slot}, r_{name}[{c}], lane);")
                level.append(f"double g_{name}_{c}[3][2];")
                level.append(
                    f"warp_grad_level<Q_1D>(r_{name}[{c}], {slot}, frag, c_D, lane, k, "
                    f"g_{name}_{c});"
                )
            loads.append(lambda row, name=name, C=C: f"g_{name}_{row % C}[{row // C}][h]")
        else:
            loads.append(lambda row, name=name: f"r_{name}[{row}][k][h]")
    stores, transposes, epilogue, zero = [], [], [], []
    outputs_t = 0  # slots of the active gradient outputs' y parts
    for k, field in enumerate(op.output_fields):
        name = f"out{k}"
        C = field.basis.num_comp
        grad = field.eval_mode is EVAL_GRAD
        if grad:  # per level; the point values of every level in v_{name}; row d C + c
            level += [f"double g_{name}_{c}[3][2] = {{}};" for c in range(C)]
            rows = [f"g_{name}_{row % C}[{row // C}][h]" for row in range(3 * C)]
        else:
            stage.append(f"double r_{name}[{C}][Q_1D][2] = {{}};")
            rows = [f"r_{name}[{row}][k][h]" for row in range(C)]
        stores.append(lambda row, rows=rows: rows[row])
        zero += [f"{r} = 0.0;" for r in rows]
        if not field.is_active:
            continue
        address = src.field_params(name, field, writable=True)
        values = f"v_{name}" if grad else f"r_{name}"
        if grad:
            stage.append(f"double v_{name}[{C}][Q_1D][2] = {{}};")
        for c in range(C):
            if grad:
                slot = f"buf + {outputs_t} * WARP_BUF"
                outputs_t += 1
                level_end.append(
                    f"warp_grad_t_level<Q_1D>(g_{name}_{c}, {slot}, frag, c_D, lane, k, "
                    f"v_{name}[{c}]);"
                )
                transposes.append(f"warp_y_mma<Q_1D>(frag, WF_DYT, {slot}, lane, v_{name}[{c}]);")
            epilogue.append(
                f"warp_interp_t<P_1D, Q_1D>({values}[{c}], frag, c_B0, buf, lane, "
                f"{_group(address, c)});"
            )
    if tiles:  # after every input stage (slot 0 is their scratch)
        tiles = ["__syncwarp();", *tiles, "__syncwarp();"]
    if tiles and level_end:  # every lane has read the slots' tile k before it is rewritten
        level.append("__syncwarp();")
    if transposes:  # after every level
        transposes.insert(0, "__syncwarp();")
    slots = _slots(op)
    body = trace_body(op.qf, lambda k, row: loads[k](row), lambda k, row: stores[k](row))
    if pairs:  # u . Au: the paired inputs' point values times the outputs
        rows = [(i, o, row) for i, o in pairs for row in range(op.output_fields[o].size)]
        terms = " + ".join(f"{loads[i](row)} * {stores[o](row)}" for i, o, row in rows)
        body.append(f"if (qok) dot += {terms};")
    body += ["if (!qok) {", *(f"  {line}" for line in zero), "}"]  # padded points add nothing
    params = ",\n    ".join(
        [
            "const int num_elem",
            *src.params,
            *(
                ["double *__restrict__ dot_partial", "const long long *__restrict__ status"]
                if dot
                else []
            ),
        ]
    )
    point = "\n        ".join(body)
    if any(f.eval_mode is EVAL_NONE for f in op.input_fields):  # read at pelem's points
        pelem = "lane_ok ? elem + pe : elem"  # the lane's element, or a valid one
        prefetch.insert(0, f"const index_t pelem = {pelem};")
    stages = "\n    ".join(prefetch + stage + tiles)
    before, after = "\n      ".join(level), "\n      ".join(level_end)
    finish = "\n    ".join(transposes + epilogue)
    dot_begin = "if (*status != 0) return;\n  double dot = 0.0;\n  " if dot else ""
    dot_end = (
        "\n  const double block_dot = block_sum(dot, s_buf, threadIdx.x, blockDim.x);"
        "\n  if (threadIdx.x == 0) dot_partial[blockIdx.x] = block_dot;"
        if dot
        else ""
    )
    D = "c_D" if "D" in tables else "nullptr"
    W = "c_w" if "w" in tables else "nullptr"
    warps = warps_per_block(slots)
    defines = {"DIM": 3, "P_1D": P, "Q_1D": Q, "T_1D": max(P, Q), "ELEMS_PER_BLOCK": warps}
    defines["SLOTS"] = slots
    defines["WARP_SIDE"] = warp_side(shape)
    min_blocks = warp_shapes(op).get(tuple(shape), MIN_BLOCKS)
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
#include "warp_element.cuh"
{_constant_tables(tables)}
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
    {stages}
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
    {finish}
  }}{dot_end}
}}
"""


class WarpFusedOperator(FusedOperator):
    """:class:`~.operator_fuse.FusedOperator` with the one-warp-per-element kernel.

    Parameters
    ----------
    op : Operator
        :func:`use_warp_layout` for ``shape``.
    shape : tuple
        ``(3, P_1d, Q_1d)``.
    """

    def __init__(self, op, shape):
        self._op, self._shape, self._collocated = op, shape, False
        self._matrices = []  # constant tables in the source
        warps = warps_per_block(_slots(op))
        self._block = (32 * warps, 1, 1)
        self._tensor_cores = True  # every x and y stage
        self._kernel = _compile(self._source(), max(shape[1:]))
        self._dot_kernel = None
        self._weights = None  # __constant__ tables in the source
        resident = warp_shapes(op).get(tuple(shape), MIN_BLOCKS)  # __launch_bounds__'s
        elems = warps * (8 // warp_side(shape)) ** 2  # a block's elements
        self.num_blocks = self._grid(op.num_elem, elems, resident)

    layout = "warp"

    def _source(self, dot=False):
        return warp_kernel_source(self._op, self._shape, dot)
