"""gen's fused gradient kernel on collocated points with one warp per element and every
contraction a GEMM.

BP5 and BP6 at Gauss-Lobatto points (``P_1d = Q_1d``, the points at the nodes) need no
interpolation: the gradient is the collocated derivative ``D`` (Q_1d x Q_1d) along each
direction.  Here (``tile_grad.cuh``) each of the six contractions (x, y, z and their
transposes) is a dense GEMM on the fp64 tensor cores whose rows are the pairs of the two
other directions, as in :mod:`.operator_tiles` (BP1), but the warp holds three buffers of
the element's values in one point layout, rows ``(z, y)`` of ``x``: the nodes ``U`` and the
derivatives along x and y.  Each direction reads ``U`` with its own address formula instead
of a transposed copy; the z stage runs per m tile, reads du/dx and du/dy at its C
fragment's points, runs the inlined QFunction in registers, writes vx and vy back in place
and feeds vz to ``z^T`` as its A operand; ``z^T`` overwrites the m tile's entries of ``U``,
and ``x^T``, ``y^T`` add into it before the scatter.

It applies to 3D operators with one gradient in and out (three values per point each way) on
one basis with ``P_1d == Q_1d <=`` :data:`MAX_T_1D` whose interpolation is the identity, with
stored values (``EVAL_NONE``: the q-data), quadrature weights and cell-constant inputs (the
Jacobian of affine cells on the fly, once per element) beside the active field
(:func:`tile_grad_fusable`); gen takes it for the shapes of :data:`TILE_GRAD_SHAPES` and
:data:`TILE_GRAD_CELL_SHAPES` (``cuda_fused.json``, from ``bakeoff/ab/ab_tiles_grad.py``).  A vector
form (BP6) reaches it through :mod:`.component_split`, one component at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...basis import collocated_grad
from ...constants import EVAL_GRAD
from .operator_fuse import (
    _DOT_BEGIN,
    _constant_tables,
    _dot_end,
    _dot_params,
    _is_cell_field,
    _on_main_basis,
    _qfunction_stage,
    _reads_cells,
    _Source,
    dot_pairs,
    has_grad,
    point_rows,
)
from .operator_tiles import (
    TileFusedOperator,
    _cell_input,
    _input,
    _passive_inputs_fit,
    blocks_per_sm,
    pitch,
)
from .ref import cupy

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import OperatorLike as Operator

__all__ = [
    "BUFFERS",
    "MAX_T_1D",
    "TILE_GRAD_CELL_SHAPES",
    "TILE_GRAD_SHAPES",
    "WARPS",
    "WARPS_STORED",
    "TileGradFusedOperator",
    "default_warps",
    "launch_blocks",
    "resident_blocks",
    "tile_grad_fusable",
    "tile_grad_kernel_source",
    "tile_grad_shapes",
    "tile_grad_shared_bytes",
    "use_tile_grad_layout",
]

# the (dim, P_1d, Q_1d) that gen runs in this layout rather than its other kernels, with
# stored values read at the points and with cell-constant inputs (read once per element)
# (cuda_fused.json, with its provenance)
TILE_GRAD_SHAPES = tuning.fused().tile_grad_shapes
TILE_GRAD_CELL_SHAPES = tuning.fused().tile_grad_cell_shapes
# the largest Q_1d: beyond it the three buffers leave the SM few warps
MAX_T_1D = 10
# buffers a warp holds: the nodes U, the x and y derivatives X and Y
BUFFERS = 3
# warps (elements at a time) per block unless told, with cell-constant inputs and with
# stored values read at the points: the SM holds about as many warps at one, two or four a
# block (resident_blocks), so the choice is the lab's (bakeoff/ab/ab_tiles_grad.py; the
# numbers in bakeoff/JOURNAL.md)
WARPS = 1
WARPS_STORED = 2


def _buffer_size(shape: tuple[int, int, int]) -> int:
    """Doubles of one buffer: the ``Q_1d^2`` rows ``(z, y)`` of :func:`~.operator_tiles.pitch`
    doubles."""
    return shape[2] ** 2 * pitch(shape)


def tile_grad_shared_bytes(shape: tuple[int, int, int], warps: int) -> int:
    """Dynamic shared memory of a block of ``warps`` warps: :data:`BUFFERS` buffers a warp."""
    return 8 * warps * BUFFERS * _buffer_size(shape)


def resident_blocks(shape: tuple[int, int, int], warps: int) -> int:
    """Blocks of ``warps`` warps an SM holds by their shared memory
    (:func:`tile_grad_shared_bytes`; :func:`~.operator_tiles.blocks_per_sm`)."""
    return blocks_per_sm(tile_grad_shared_bytes(shape, warps), warps)[0]


def launch_blocks(shape: tuple[int, int, int], warps: int) -> int:
    """Blocks per SM the kernel's ``__launch_bounds__`` asks registers for
    (:func:`~.operator_tiles.blocks_per_sm`)."""
    return blocks_per_sm(tile_grad_shared_bytes(shape, warps), warps)[1]


def _active_grads(op):
    """The main basis's fields (inputs then outputs), each required an active gradient."""
    return [f for f in op.input_fields + op.output_fields if _on_main_basis(f)]


def tile_grad_fusable(op: Operator) -> bool:
    """The field conditions of :func:`use_tile_grad_layout` (no device, no shape table).

    3D; one active gradient input and one active gradient output (three values per point
    each way) on one basis with ``P_1d == Q_1d <=`` :data:`MAX_T_1D` whose interpolation is
    the identity (points at the nodes); every other input stored (``EVAL_NONE``),
    quadrature weights, or on a cell-constant basis of few nodes (the Jacobian of affine
    cells, evaluated once per element); no other output.
    """
    if not has_grad(op) or point_rows(op) != (3, 3) or len(op.output_fields) != 1:
        return False
    main = _active_grads(op)
    if len(main) != 2 or not all(f.is_active and f.eval_mode is EVAL_GRAD for f in main):
        return False
    first, second = (f.basis for f in main)
    same = first is second or np.array_equal(first.grad_1d, second.grad_1d)
    if not same or first.dim != 3 or first.Q_1d > MAX_T_1D:
        return False
    return first.interpolates_identity and _passive_inputs_fit(op)


def tile_grad_shapes(op: Operator) -> frozenset[tuple[int, int, int]]:
    """The table of measured shapes for ``op``'s kind: :data:`TILE_GRAD_CELL_SHAPES` where it
    reads cell-constant inputs (the affine Jacobian on the fly), else
    :data:`TILE_GRAD_SHAPES`."""
    return TILE_GRAD_CELL_SHAPES if _reads_cells(op) else TILE_GRAD_SHAPES


def default_warps(op: Operator) -> int:
    """Warps per block for ``op`` unless told: :data:`WARPS` where it reads cell-constant
    inputs, else :data:`WARPS_STORED`."""
    return WARPS if _reads_cells(op) else WARPS_STORED


def use_tile_grad_layout(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``) in this layout:
    :func:`tile_grad_fusable`, ``shape`` in the table of :func:`tile_grad_shapes`, a device
    of compute capability 8.0 or later."""
    if tuple(shape) not in tile_grad_shapes(op) or not tile_grad_fusable(op):
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def tile_grad_kernel_source(
    op: Operator, shape: tuple[int, int, int], dot: bool = False, warps: int = WARPS
) -> str:
    """CUDA source of ``op``'s collocated gradient tile kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        :func:`tile_grad_fusable`, its QFunction traceable.
    shape : tuple
        ``(3, Q_1d, Q_1d)``.
    dot : bool
        Also write ``dot_partial[block]``, the block's part of ``u . Au``, and do nothing
        while ``*status`` is nonzero, as :func:`.operator_fuse.kernel_source`.
    warps : int
        Warps (elements at a time) per block; :func:`tile_grad_shared_bytes` of dynamic
        shared memory.

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` and ``tile_grad.cuh`` (compile with ``-I``
        this folder).  Parameters: ``num_elem``, the fields as
        :class:`~.operator_fuse.FusedOperator` binds them (no weight arrays: ``D`` and the
        weights are ``__constant__`` tables), then ``dot_partial, status``.

    Raises
    ------
    ValueError
        ``op`` is not :func:`tile_grad_fusable`, or ``dot`` without :func:`dot_pairs`.
    """
    if not tile_grad_fusable(op):
        raise ValueError(
            "the gradient tile layout needs a 3D operator with one active gradient in and "
            f"out on one basis of P_1d == Q_1d <= {MAX_T_1D} at its nodes (identity "
            "interpolation), other inputs stored, weights or cell-constant"
        )
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    src = _Source(3, True, None, {}, 0)
    basis = _active_grads(op)[0].basis
    tables = {"D": collocated_grad(basis.interp_1d, basis.grad_1d)}  # (Q_1d, Q_1d)
    loads, gather, cells = [], "", []
    for k, field in enumerate(op.input_fields):
        if _is_cell_field(field):
            loads.append(_cell_input(src, tables, k, field, cells))
        elif _on_main_basis(field):  # the active gradient: the nodes into U
            pointer, idx, base = src.field_params(f"in{k}", field, False)(0, "NUM_NODES")
            gather = f"tile_gather<Q_1D>({pointer}, {idx}, {base}, lane, u);"
            loads.append(lambda row: ("u_x", "u_y", "u_z")[row])
        else:
            stored = []  # (name, load at point q): read at the point, not a tile ahead
            load, _ = _input(src, tables, k, field, "", stored)
            loads.append(_at_point([expr for _, expr in stored]) if stored else load)
    (field,) = op.output_fields
    pointer, idx, base = src.field_params("out0", field, writable=True)(0, "NUM_NODES")
    scatter = f"grad_scatter<Q_1D>(u, {pointer}, {idx}, {base}, lane);"
    body = _qfunction_stage(op, loads, [lambda row: ("v_x", "v_y", "v_z")[row]], pairs)
    if cells:  # the warp's one element (warp_cell_values' count, _group's nvalid)
        cells.insert(0, "const int nvalid = 1;")
    gather = "\n    ".join([*cells, gather])
    return _kernel_text(shape, src, tables, body, (gather, scatter), dot, warps)


def _at_point(exprs):
    """``load(row)`` of a stored input whose row ``r`` is read at the point by ``exprs[r]``
    (the z stage's ``q``; nothing past the element's points, ``qok``)."""

    def load(row):
        return f"(qok ? {exprs[row]} : 0.0)"

    return load


def _kernel_text(shape, src, tables, body, moves, dot, warps):
    """The kernel's source around the stages: defines, tables, the element loop; ``moves``
    the gather and the scatter statements."""
    Q = shape[2]
    gather, scatter = moves
    params = ",\n    ".join(["const int num_elem", *src.params, *_dot_params(dot)])
    defines = {"DIM": 3, "P_1D": Q, "Q_1D": Q, "T_1D": Q, "ELEMS_PER_BLOCK": warps}
    # one warp per element: tile_element.cuh's stages for a team of one
    defines |= {"TILE_TEAM": 1, "PITCH": pitch(shape), "GRAD_BUF": _buffer_size(shape)}
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    point = "\n          ".join(body)
    dot_begin = _DOT_BEGIN if dot else ""
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
#include "tile_grad.cuh"
#include "warp_element.cuh"
{_constant_tables(tables)}
extern "C" __global__ void __launch_bounds__({32 * warps}, {launch_blocks(shape, warps)}) apply(
    {params}) {{
  TILE_SHARED(s_buf);  // three buffers of GRAD_BUF doubles a warp: U, X, Y
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double *u = s_buf + warp * 3 * GRAD_BUF, *x = u + GRAD_BUF, *y = x + GRAD_BUF;
  {dot_begin}// D's operand fragments for the whole kernel: forward (x, y, z), transposed
  // (x^T, y^T) and z^T's, its k order that of a C fragment
  double b_d[TILE_KS(Q_1D)][TILE_MT(Q_1D)], b_dt[TILE_KS(Q_1D)][TILE_MT(Q_1D)];
  double b_zt[TILE_KS_C(Q_1D)][TILE_MT(Q_1D)];
  tile_operand<Q_1D, Q_1D, false, false>(c_D, lane, b_d);
  tile_operand<Q_1D, Q_1D, true, false>(c_D, lane, b_dt);
  tile_operand<Q_1D, Q_1D, true, true>(c_D, lane, b_zt);
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + warp; elem < num_elem;
       elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {{
    {gather}  // U: rows (z, y), columns x
    __syncwarp();
    grad_stage<Q_1D, GRAD_X, false>(u, x, b_d, lane);  // du/dx into X
    grad_stage<Q_1D, GRAD_Y, false>(u, y, b_d, lane);  // du/dy into Y
    __syncwarp();
    grad_z_stage<Q_1D>(u, x, y, b_d, b_zt, lane,
        [&](int row, int zq, bool qok, index_t q, double u_x, double u_y, double u_z,
            double &v_x, double &v_y, double &v_z) {{
          {point}
        }});
    __syncwarp();
    grad_stage<Q_1D, GRAD_X, true>(x, u, b_dt, lane);  // x^T: U += D^T vx
    __syncwarp();  // x^T and y^T add into the same entries from different lanes
    grad_stage<Q_1D, GRAD_Y, true>(y, u, b_dt, lane);  // y^T: U += D^T vy
    __syncwarp();
    {scatter}
    __syncwarp();  // the next element's gather overwrites U
  }}{_dot_end(dot, "threadIdx.x", "blockDim.x")}
}}
"""


class TileGradFusedOperator(TileFusedOperator):
    """:class:`~.operator_tiles.TileFusedOperator` with the collocated gradient tile kernel:
    one warp per element, every contraction a GEMM on the fp64 tensor cores (the same
    arguments but for ``D`` and the weights, ``__constant__`` tables; the same CG variant).

    Parameters
    ----------
    op : Operator
        :func:`tile_grad_fusable`.
    shape : tuple
        ``(3, Q_1d, Q_1d)``.
    warps : int, optional
        Warps (elements at a time) per block; default :func:`default_warps`.
    """

    layout = "tiles, gradients"

    def __init__(self, op: Operator, shape: tuple[int, int, int], warps: int | None = None):
        super().__init__(op, shape, warps, team=1)

    _default_warps = staticmethod(default_warps)

    def _shared_bytes(self):
        """The block's dynamic shared memory (:func:`tile_grad_shared_bytes`)."""
        return tile_grad_shared_bytes(self._shape, self._warps)

    def _source(self, dot=False):
        return tile_grad_kernel_source(self._op, self._shape, dot, self._warps)
