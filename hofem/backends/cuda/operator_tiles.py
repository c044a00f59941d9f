"""gen's fused kernel with a team of warps per element and every contraction a dense GEMM.

At ``Q_1d = 9, 10`` (p = 7, 8) the slab of :mod:`.operator_fuse` is bound by shared-memory
loads (about one per multiply-add in its x and y stages), and the tensor-core layouts that
pad a plane of the element into 8x8 or 16x16 tiles idle most of their products.  Here
(``tile_element.cuh``) each contraction along one direction is a GEMM whose rows are the
pairs of the two other directions (``M = P^2, P Q`` or ``Q^2`` rows in tiles of 8, the
direction contracted in k steps of 4, the 1D matrix as the B operand in registers), so that
only the last m tile and the last k step and n tile are partial.  Each stage stores its
output transposed in the element's other shared buffer as the next stage's A operand; the z
stage runs per m tile, its C fragments (the values at 4 points per lane) go through the
inlined QFunction in registers and on as the A operand of ``z^T``, so the point values never
touch shared memory.  For BP1 p = 8 an element is 458 fp64 ``mma`` and about 180 A-fragment
loads per element, against some 1600 shared-load instructions of the slab's.

A team of :data:`TEAM` warps may share each element (its two buffers): each stage's m tiles
go round robin to the team's warps and the team meets at a barrier between stages, which
splits each element's chain of dependent stages over more warps, at the price of fewer
elements in flight (a team's registers, not the buffers, then bound its residency).

It applies to 3D operators that interpolate one value per point in and out on one basis of
``max(P_1d, Q_1d) <=`` :data:`MAX_T_1D` (BP1), with stored values (``EVAL_NONE``: the
q-data), quadrature weights and cell-constant inputs (the Jacobian of affine cells on the
fly, once per element) beside the active field (:func:`tile_fusable`); gen takes it for the
shapes of :func:`tile_shapes`' tables (``cuda_fused.json``, from ``bakeoff/ab/ab_tiles.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ... import tuning
from ...constants import EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from .operator_fuse import (
    _DOT_BEGIN,
    FusedOperator,
    _compile_options,
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
from .operator_warp import _cell_table, _group, _main_basis
from .ref import cupy

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import OperatorLike as Operator

__all__ = [
    "MAX_T_1D",
    "MIN_REGISTERS",
    "TEAM",
    "TILE_CELL_SHAPES",
    "TILE_SHAPES",
    "WARPS",
    "TileFusedOperator",
    "blocks_per_sm",
    "buffer_sizes",
    "check_launch",
    "launch_blocks",
    "pitch",
    "resident_blocks",
    "tile_fusable",
    "tile_kernel_source",
    "tile_shapes",
    "tile_shared_bytes",
    "use_tile_layout",
]

# the (dim, P_1d, Q_1d) that gen runs in this layout rather than the slab or the blocked
# slab (cuda_fused.json, with its provenance), with stored values read at the points, and
# with cell-constant inputs (read once per element)
TILE_SHAPES = tuning.fused().tile_shapes
TILE_CELL_SHAPES = tuning.fused().tile_cell_shapes
# the largest max(P_1d, Q_1d): the buffers (buffer_sizes) pass 24 KiB an element beyond it, and
# the SM holds fewer warps than the slab's
MAX_T_1D = 10
# elements (teams) per block unless told: with 18 KiB of buffers an element at Q_1d = 10, one
# or two a block keep twelve elements resident within the SM's 228 KiB, as do four; eight
# keep eight (ab_tiles measures 1 to 8)
WARPS = 2
# warps per element unless told (the team): one, since a team trades elements in flight
# for a shorter chain per element (cuda_fused.json's tables were measured at one)
TEAM = 1
# teams a block holds past one: each has its named barrier, ids 1 to 15
_MAX_TEAMS = 15
# registers a thread that __launch_bounds__ leaves at least (launch_blocks): the stages
# and the QFunction of BP1 p = 8 with the Jacobian on the fly compile to more than 128
MIN_REGISTERS = 128
# an SM's shared memory and what each resident block reserves of it (sm_80, sm_90), bytes
_SM_SHARED, _BLOCK_RESERVED = 228 * 1024, 1024
# static shared memory a block may use without the opt-in
_STATIC_LIMIT = 48 * 1024


def pitch(shape: tuple[int, int, int]) -> int:
    """Doubles per row of an element's buffers for ``shape`` ``(3, P_1d, Q_1d)``: at least
    ``max(P_1d, Q_1d)``, 4 modulo 8, so that an 8x4 A fragment is free of bank conflicts."""
    T = max(shape[1:])
    return T + (4 - T) % 8


def buffer_sizes(shape: tuple[int, int, int]) -> tuple[int, int]:
    """Doubles of an element's two buffers for ``shape`` ``(3, P_1d, Q_1d)``, each sized for the
    stages that write it: buffer 0 the gathered nodes, y's and y^T's outputs (``P_1d^2`` or
    ``Q_1d^2`` rows of :func:`pitch`), buffer 1 x's and z^T's (``P_1d Q_1d`` rows) and the
    ``P_1d^3`` nodes of x^T."""
    _, P, Q = shape
    return max(P, Q) ** 2 * pitch(shape), max(P * Q * pitch(shape), P**3)


def tile_shared_bytes(shape: tuple[int, int, int], warps: int) -> int:
    """Dynamic shared memory of a block of ``warps`` elements (teams): the two buffers of
    :func:`buffer_sizes` an element, whatever its team."""
    return 8 * warps * sum(buffer_sizes(shape))


def blocks_per_sm(shared_bytes: int, warps: int) -> tuple[int, int]:
    """``(resident, launch)`` for blocks of ``warps`` warps and ``shared_bytes`` of dynamic
    shared memory: the blocks an SM holds by their shared memory (and the SM's reserve per
    block), at most 64 warps; and those the kernel's ``__launch_bounds__`` asks registers
    for: as many, so that the shared memory and not the registers bound them, but no more
    than leave :data:`MIN_REGISTERS` a thread (small shapes, and teams, whose buffers would
    let more warps reside than the registers hold at that many, would spill)."""
    by_shared = _SM_SHARED // (shared_bytes + _BLOCK_RESERVED)
    resident = max(1, min(by_shared, 64 // warps))
    return resident, max(1, min(resident, 65536 // (32 * warps * MIN_REGISTERS)))


def resident_blocks(shape: tuple[int, int, int], warps: int, team: int = 1) -> int:
    """Blocks of ``warps`` elements (teams of ``team`` warps) an SM holds by their shared
    memory (:func:`tile_shared_bytes`; :func:`blocks_per_sm`)."""
    return blocks_per_sm(tile_shared_bytes(shape, warps), warps * team)[0]


def launch_blocks(shape: tuple[int, int, int], warps: int, team: int = 1) -> int:
    """Blocks per SM the kernel's ``__launch_bounds__`` asks registers for
    (:func:`blocks_per_sm`)."""
    return blocks_per_sm(tile_shared_bytes(shape, warps), warps * team)[1]


def check_launch(warps: int, team: int) -> None:
    """Raise ValueError unless a block of ``warps`` elements of ``team`` warps each can run:
    positive counts, at most 1024 threads, and past one team at most 15 teams (one named
    barrier each, ``tile_sync``)."""
    if warps < 1 or team < 1 or 32 * warps * team > 1024:
        raise ValueError(f"{warps} elements of {team} warps: not a block of 32 to 1024 threads")
    if team > 1 and warps > _MAX_TEAMS:
        raise ValueError(f"{warps} teams a block: at most {_MAX_TEAMS} (named barriers)")


def tile_fusable(op: Operator) -> bool:
    """The field conditions of :func:`use_tile_layout` (no device, no shape table).

    3D; the active input and output interpolated (one value per point each way, no
    gradients) on one basis of ``max(P_1d, Q_1d) <=`` :data:`MAX_T_1D`; every other input
    stored (``EVAL_NONE``), quadrature weights of that basis's points, or on a cell-constant
    basis of few nodes (the Jacobian of affine cells from their vertices, evaluated once
    per element).
    """
    if has_grad(op) or point_rows(op) != (1, 1):
        return False
    if any(f.eval_mode is not EVAL_INTERP for f in op.output_fields):
        return False
    main = [f for f in op.input_fields + op.output_fields if f.eval_mode is EVAL_INTERP]
    if len(main) != 2 or not all(f.is_active and _on_main_basis(f) for f in main):
        return False
    first, second = (f.basis for f in main)
    same = first is second or np.array_equal(first.interp_1d, second.interp_1d)
    if not same or first.dim != 3 or max(first.P_1d, first.Q_1d) > MAX_T_1D:
        return False
    return _passive_inputs_fit(op)


def _passive_inputs_fit(op):
    """Whether ``op``'s inputs off the main basis are stored values, cell-constant inputs
    or quadrature weights of one rule (one ``__constant__`` table), as the tile kernels
    read them (:func:`_input`, :func:`_cell_input`)."""
    others = [f for f in op.input_fields if not _on_main_basis(f)]
    if any(f.eval_mode not in (EVAL_NONE, EVAL_WEIGHT) and not _is_cell_field(f) for f in others):
        return False
    weights = [f.basis.q_weight_1d for f in others if f.eval_mode is EVAL_WEIGHT]
    return all(np.array_equal(w, weights[0]) for w in weights)


def tile_shapes(op: Operator) -> frozenset[tuple[int, int, int]]:
    """The table of measured shapes for ``op``'s kind: :data:`TILE_CELL_SHAPES` where it
    reads cell-constant inputs (the affine Jacobian on the fly), else :data:`TILE_SHAPES`."""
    return TILE_CELL_SHAPES if _reads_cells(op) else TILE_SHAPES


def use_tile_layout(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``) in this layout: :func:`tile_fusable`,
    ``shape`` in the table of :func:`tile_shapes`, a device of compute capability 8.0 or
    later."""
    if tuple(shape) not in tile_shapes(op) or not tile_fusable(op):
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def tile_kernel_source(
    op: Operator,
    shape: tuple[int, int, int],
    dot: bool = False,
    warps: int = WARPS,
    team: int = TEAM,
) -> str:
    """CUDA source of ``op``'s tile kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        :func:`tile_fusable`, its QFunction traceable.
    shape : tuple
        ``(3, P_1d, Q_1d)``.
    dot : bool
        Also write ``dot_partial[block]``, the block's part of ``u . Au``, and do nothing
        while ``*status`` is nonzero, as :func:`.operator_fuse.kernel_source`.
    warps : int
        Elements at a time (teams) per block; :func:`tile_shared_bytes` of dynamic shared
        memory.
    team : int
        Warps per element: a block of ``32 warps team`` threads (:func:`check_launch`).

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` and ``tile_element.cuh`` (compile with
        ``-I`` this folder).  Parameters: ``num_elem``, the fields as
        :class:`~.operator_fuse.FusedOperator` binds them (no weight arrays: the 1D matrix
        and weights are ``__constant__`` tables), then ``dot_partial, status``.

    Raises
    ------
    ValueError
        ``op`` is not :func:`tile_fusable`, ``dot`` without :func:`dot_pairs`, or a launch
        that :func:`check_launch` refuses.
    """
    check_launch(warps, team)
    if not tile_fusable(op):
        raise ValueError(
            "the tile layout needs a 3D operator interpolating one value per point in and "
            f"out on one basis of max(P_1d, Q_1d) <= {MAX_T_1D}"
        )
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    src = _Source(3, False, None, {}, 0)
    tables = {"B": _main_basis(op).interp_1d}  # (Q_1d, P_1d)
    loads, gather, cells, stored = [], "", [], []
    for k, field in enumerate(op.input_fields):
        if _is_cell_field(field):
            loads.append(_cell_input(src, tables, k, field, cells))
            continue
        load, gather = _input(src, tables, k, field, gather, stored)
        loads.append(load)
    stores, scatter = [], ""
    for k, field in enumerate(op.output_fields):
        address = src.field_params(f"out{k}", field, writable=True)
        pointer, idx, base = address(0, "NUM_NODES")
        scatter = f"tile_scatter<P_1D>(buf1, {pointer}, {idx}, {base}, team_lane);"
        stores.append(lambda row: "v_q[j][h]")
    body = _qfunction_stage(op, loads, stores, pairs)
    body.append("if (!qok) v_q[j][h] = 0.0;")  # padded points add nothing
    if cells:  # each warp's copy of its one element (warp_cell_values' count, _group's nvalid)
        cells.insert(0, "const int nvalid = 1;")
    gather = "\n    ".join([*cells, *_prefetch(stored, "team_warp", first=True), gather])
    z_stage = _z_stage(body, stored)
    return _tile_kernel_text(shape, src, tables, z_stage, gather, scatter, dot, (warps, team))


def _input(src, tables, k, field, gather, stored):
    """Input ``k``'s ``load(row)`` at the lane's point and the active field's gather
    (``gather`` unchanged for the others); weights add their table to ``tables``, stored
    values their registers and loads to ``stored`` (:func:`_prefetch`)."""
    name = f"in{k}"
    if field.eval_mode is EVAL_WEIGHT:  # w[x'] w[y'] w[z'], a __constant__ table (Q_1d,)
        tables["w"] = field.basis.q_weight_1d
        weight = "c_w[row % Q_1D] * c_w[row / Q_1D] * c_w[zq]"
        return (lambda row: f"(qok ? {weight} : 0.0)"), gather
    address = src.field_params(name, field, writable=False)
    if field.eval_mode is EVAL_NONE:  # read at each point: q = x' + Q (y' + Q z')
        for row in range(field.size):
            pointer, idx, base = address(row, "NUM_QPTS")
            stored.append((f"{name}_{row}", f"({pointer})[entry({idx}, {base} + q)]"))
        return (lambda row: f"s_{name}_{row}[j][h]"), gather
    pointer, idx, base = address(0, "NUM_NODES")
    gather = f"tile_gather<P_1D>({pointer}, {idx}, {base}, team_lane, buf0);"
    return (lambda row: "u_q[j][h]"), gather


def _cell_input(src, tables, k, field, cells):
    """Input ``k`` on a cell-constant basis: its values (row ``d C + c``), the same at every
    point, evaluated once per element by each warp of its team (``warp_cell_values``) into
    ``cells``."""
    name, C = f"in{k}", field.basis.num_comp
    address = src.field_params(name, field, writable=False)
    table = _cell_table(field)  # (rows, P_1d^3)
    tables[f"W{k}"] = table
    nodes = field.basis.num_nodes
    step = "0"  # from component 0's entry to component 1's
    if C > 1:
        (pointer, _, base), (pointer1, _, base1) = address(0, nodes), address(1, nodes)
        step = f"(({pointer1}) - ({pointer})) + (({base1}) - ({base}))"
    cells.append(f"double r_{name}[{field.size}];")
    cells.append(
        f"warp_cell_values<{nodes}, {len(table)}, {C}>({_group(address, 0, nodes)}, "
        f"{step}, c_W{k}, lane, r_{name});"
    )
    return lambda row: f"r_{name}[{row}]"


def _tile_kernel_text(shape, src, tables, z_stage, gather, scatter, dot, launch):
    """The kernel's source around the stages (``z_stage``: :func:`_z_stage`'s): defines,
    tables, the element loop; ``launch`` the elements per block and the warps per element."""
    _, P, Q = shape
    warps, team = launch
    blocks = launch_blocks(shape, warps, team)
    params = ",\n    ".join(["const int num_elem", *src.params, *_dot_params(dot)])
    defines = {"DIM": 3, "P_1D": P, "Q_1D": Q, "T_1D": max(P, Q), "ELEMS_PER_BLOCK": warps}
    buf0, buf1 = buffer_sizes(shape)
    defines |= {"TILE_TEAM": team, "PITCH": pitch(shape), "TILE_BUF0": buf0, "TILE_BUF1": buf1}
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    dot_begin = _DOT_BEGIN if dot else ""
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
#include "tile_element.cuh"
#include "warp_element.cuh"
{_constant_tables(tables)}
extern "C" __global__ void __launch_bounds__({32 * warps * team}, {blocks}) apply(
    {params}) {{
  TILE_SHARED(s_buf);  // two buffers of TILE_BUF0 and TILE_BUF1 doubles a team
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int team = warp / TILE_TEAM, team_warp = warp % TILE_TEAM;
  const int team_lane = 32 * team_warp + lane, g = lane >> 2, t = lane & 3;
  double *buf0 = s_buf + team * (TILE_BUF0 + TILE_BUF1), *buf1 = buf0 + TILE_BUF0;
  {dot_begin}// B's operand fragments for the whole kernel: forward (x, y, z: K = P, N = Q),
  // backward (y^T, x^T: K = Q, N = P) and z^T's, its k order that of a C fragment
  double b_fwd[TILE_KS(P_1D)][TILE_MT(Q_1D)], b_bwd[TILE_KS(Q_1D)][TILE_MT(P_1D)];
  double b_zt[TILE_KS_C(Q_1D)][TILE_MT(P_1D)];
  tile_operand<Q_1D, P_1D, false, false>(c_B, lane, b_fwd);
  tile_operand<Q_1D, P_1D, true, false>(c_B, lane, b_bwd);
  tile_operand<Q_1D, P_1D, true, true>(c_B, lane, b_zt);
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + team; elem < num_elem;
       elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {{
    {gather}  // rows (z, y), columns x
    tile_sync(team);
    tile_stage<P_1D * P_1D, P_1D, Q_1D, P_1D, TILE_INNER>(buf0, buf1, b_fwd, lane, team_warp);
    tile_sync(team);  // (z, x'), y
    tile_stage<P_1D * Q_1D, P_1D, Q_1D, Q_1D, TILE_OUTER>(buf1, buf0, b_fwd, lane, team_warp);
    tile_sync(team);  // (y', x'), z
{z_stage}
    tile_sync(team);  // (z, x'), y'
    tile_stage<P_1D * Q_1D, Q_1D, P_1D, Q_1D, TILE_INNER>(buf1, buf0, b_bwd, lane, team_warp);
    tile_sync(team);  // (z, y), x'
    tile_stage<P_1D * P_1D, Q_1D, P_1D, P_1D, TILE_NODES>(buf0, buf1, b_bwd, lane, team_warp);
    tile_sync(team);  // nodes
    {scatter}
  }}{_dot_end(dot, "threadIdx.x", "blockDim.x")}
}}
"""


def _prefetch(stored, m, first=False):
    """Statements that load the stored values at the lane's points of m tile ``m`` (a C++
    expression) into their registers ``n_*`` (declared there where ``first``), after moving
    the previous ones to ``s_*``, the current tile's (declared): each tile's loads are
    issued a tile ahead (the first at the element's start), so that their latency hides
    behind the products before the QFunction reads them.  Past the last m tile nothing is
    read (``qok``).  ``stored``: ``(name, load at point q)`` of each stored value."""
    if not stored:
        return []
    moves = [] if first else [f"s_{name}[j][h] = n_{name}[j][h];" for name, _ in stored]
    loads = [f"n_{name}[j][h] = qok ? {load} : 0.0;" for name, load in stored]
    prefix, whose = ("n", "the next m tile's") if first else ("s", "this m tile's")
    declare = " ".join(f"double {prefix}_{name}[TILE_MT(Q_1D)][2];" for name, _ in stored)
    return [
        f"{declare}  // {whose} stored values",
        f"tile_points<Q_1D>({m}, lane, [&](int j, int h, bool qok, index_t q) {{",
        *(f"  {line}" for line in moves + loads),
        "});",
    ]


def _z_stage(body, stored):
    """The z stage, the QFunction's ``body`` at each of the lane's points of an m tile, and
    z^T, per m tile of this warp (round robin over the team); the stored values read a tile
    ahead (:func:`_prefetch`)."""
    point = "\n          ".join(body)
    prefetch = "\n      ".join(_prefetch(stored, "m + TILE_TEAM"))
    return f"""#pragma unroll tile_unroll
    for (int m = team_warp; m < TILE_MT(Q_1D * Q_1D); m += TILE_TEAM) {{
      {prefetch}
      // z: the values at the points (x', y', z') of rows (y', x') = 8 m + g, z' = 8 j + 2 t + h
      double u_q[TILE_MT(Q_1D)][2], v_q[TILE_MT(Q_1D)][2], c[TILE_MT(P_1D)][2];
      tile_product<Q_1D * Q_1D, P_1D>(buf0, m, b_fwd, lane, u_q);
#pragma unroll
      for (int j = 0; j < TILE_MT(Q_1D); j++) {{
#pragma unroll
        for (int h = 0; h < 2; h++) {{
          const int row = 8 * m + g, zq = 8 * j + 2 * t + h;
          const bool qok = row < Q_1D * Q_1D && zq < Q_1D;
          {point}
        }}
      }}
      tile_product_c(v_q, b_zt, c);  // z^T: rows (y', x'), columns z
      tile_store<Q_1D * Q_1D, P_1D, Q_1D, TILE_OUTER>(buf1, m, c, lane);  // (z, x'), y'
    }}"""


class TileFusedOperator(FusedOperator):
    """:class:`~.operator_fuse.FusedOperator` with the tile kernel: a team of warps per
    element, every contraction a GEMM on the fp64 tensor cores (the same arguments but for
    the matrices and weights, ``__constant__`` tables; the same CG variant).

    Parameters
    ----------
    op : Operator
        :func:`tile_fusable`.
    shape : tuple
        ``(3, P_1d, Q_1d)``.
    warps : int, optional
        Elements at a time (teams) per block; default :data:`WARPS`.
    team : int, optional
        Warps per element; default :data:`TEAM`.
    """

    layout = "tiles"

    def __init__(self, op, shape, warps=None, team=None):
        self._op, self._shape = op, shape
        self._warps = self._default_warps(op) if warps is None else warps
        self._team = TEAM if team is None else team
        self._matrices = []  # the 1D matrices and weights: __constant__ tables in the source
        self._weights = None
        self._block = (32 * self._warps * self._team, 1, 1)
        self._shared_mem = self._shared_bytes()
        self._kernel = self._compile(self._source())
        self._dot_kernel = None
        resident = blocks_per_sm(self._shared_mem, self._warps * self._team)[0]
        self.num_blocks = self._grid(op.num_elem, self._warps, resident)

    @staticmethod
    def _default_warps(op):
        """Elements per block unless told (:data:`WARPS`)."""
        return WARPS

    def _shared_bytes(self):
        """The block's dynamic shared memory (:func:`tile_shared_bytes`)."""
        return tile_shared_bytes(self._shape, self._warps)

    def _source(self, dot=False):
        return tile_kernel_source(self._op, self._shape, dot, self._warps, self._team)

    def _compile(self, code):
        """The kernel ``apply`` of ``code``, opted in to its dynamic shared memory."""
        kernel = _compile_options(code, ())
        if self._shared_mem > _STATIC_LIMIT:
            kernel.max_dynamic_shared_size_bytes = self._shared_mem
        return kernel
