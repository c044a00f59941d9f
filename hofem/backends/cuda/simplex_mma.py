"""The fused simplex kernel with its dense products on the fp64 tensor cores.

The variant of :mod:`.operator_simplex` chosen by ``simplex_launch(...,
tensor_cores=True)``.  Its scalar stages read one matrix entry per multiply-add,
and at p = 5, 6 on tets the matrices (BP3 p = 6: G 3 x 79 x 84 doubles, 161 KB)
leave its 48 KiB of static shared memory for global memory.  Here the matrices sit
in the opt-in dynamic shared memory (up to 227 KiB a block on the H100) and both
products are ``mma.sync.m8n8k4.f64`` tiles with 8 elements as the M side
(``simplex_mma.cuh``), per group of ``elems`` elements (a multiple of 8):

1. **gather**: the interp/grad inputs' nodes into shared ``s_in{k}`` ``(elems, XS)``
   (``(C, NP)`` each, zero past ``P``);
2. **points** (tensor cores): ``Y = X M^T`` per input, ``M = B`` or each ``G_d``,
   into the point buffer ``s_pts`` ``(elems, YS)`` (``(R, QR)``: a row per
   QFunction row, the inputs' rows first);
3. **QFunction**: one thread per (element, point) reads its inputs' rows, runs the
   traced body (:func:`~.operator_fuse._qfunction_stage`), and writes the outputs'
   rows over the same buffer (each thread reads its point's inputs before it writes,
   and no other thread touches that point);
4. **nodes** (tensor cores): ``V = sum_d Y_d M_d`` per active output, added to the
   output L-vector with atomics straight from the accumulators.

Cell-constant inputs (the vertices of affine cells, ``geometry="on_the_fly"``) are
gathered but not multiplied on the tensor cores: each point's thread evaluates them
from the gathered vertices with the global copy of their (tiny) matrices.

This module is the arithmetic (padded sizes, the shared-memory budget) and the
generator; :mod:`.operator_simplex` holds the launch type and binds the kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...constants import EVAL_GRAD, EVAL_NONE, EVAL_WEIGHT
from .operator_fuse import (
    _BASIS_MODES,
    _DOT_BEGIN,
    _dot_end,
    _dot_params,
    _qfunction_stage,
    dot_pairs,
    field_address,
)

__all__ = [
    "MMA_ELEMS",
    "MMA_SHARED_BYTES",
    "MMA_THREADS",
    "MMA_TILES",
    "mma_host_matrices",
    "mma_kernel_source",
    "mma_launch",
    "mma_pitch",
    "node_contraction",
    "point_input",
]

# dynamic shared memory of one block at most: the H100's opt-in maximum (227 KiB)
MMA_SHARED_BYTES = 227 * 1024
# threads per block: 16 warps share the tiles of the block's element groups; fewer leave
# the tensor cores waiting on shared-memory loads at p = 5, 6 (cuda_simplex.json)
MMA_THREADS = 512
# elements per block at most (a multiple of 8, the M side of a tile): 32 give the warps
# 4 element groups; more would only shrink the blocks per SM where matrices are small
MMA_ELEMS = 32
# column tiles (8 points, or 8 nodes) per warp unit: each k step's A operand serves them all
MMA_TILES = 2
# doubles after each matrix in shared memory (simplex_mma.cuh's MMA_SLACK)
_SLACK = 4


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def mma_pitch(n: int) -> int:
    """The smallest stride ``>= n`` that is 4 modulo 8 doubles: a quarter-warp's operand
    pattern (4 rows by 4 consecutive columns) then hits 16 distinct 8-byte bank pairs."""
    return n + (4 - n) % 8


def _matrix_doubles(basis, grad):
    """Shared doubles of one basis's ``B`` (or ``G``): ``(D, QR, MP)`` and the slack."""
    D = basis.dim if grad else 1
    return D * _up(basis.num_qpts, 8) * mma_pitch(_up(basis.num_nodes, 4)) + _SLACK


def _mma_inputs(op):
    """``[(k, field)]``: the inputs whose products run on the tensor cores."""
    return [
        (k, f)
        for k, f in enumerate(op.input_fields)
        if f.eval_mode in _BASIS_MODES and not f.basis.is_cell_constant
    ]


def _gathered(op):
    """``[(k, field)]``: the inputs gathered into shared memory (every interp/grad one)."""
    return [(k, f) for k, f in enumerate(op.input_fields) if f.eval_mode in _BASIS_MODES]


def _node_stride(field):
    """Doubles per element of a gathered input: ``(C, NP)``, padded to :func:`mma_pitch`."""
    return mma_pitch(field.basis.num_comp * _up(field.basis.num_nodes, 4))


def _point_rows(op):
    """``(inputs, outputs)``: first rows in the point buffer of the tensor-core inputs and
    of the active outputs, by field index, and ``R``, the rows of the buffer."""
    inputs, row = {}, 0
    for k, f in _mma_inputs(op):
        inputs[k], row = row, row + f.size
    outputs, out_row = {}, 0
    for k, f in enumerate(op.output_fields):
        if f.is_active:
            outputs[k], out_row = out_row, out_row + f.size
    return inputs, outputs, max(row, out_row, 1)


def _shared_matrices(op, index):
    """``{name: doubles}`` of the matrices the tensor-core stages read (``"B0"``, ``"G1"``)."""
    fields = [f for _, f in _mma_inputs(op)]
    fields += [f for f in op.output_fields if f.is_active and f.eval_mode in _BASIS_MODES]
    used = {}
    for f in fields:
        grad = f.eval_mode is EVAL_GRAD
        used[f"{'G' if grad else 'B'}{index(f.basis)}"] = _matrix_doubles(f.basis, grad)
    return used


def mma_launch(
    op: Any, index: Any, shared_bytes: int, overrides: dict, dot: bool
) -> dict[str, Any] | None:
    """The :class:`~.operator_simplex.SimplexLaunch` fields of the tensor-core kernel, or
    None when 8 elements and the matrices do not fit ``shared_bytes``.

    ``index(basis)``: the basis's matrix set.  Defaults (``overrides`` keywords ``threads``,
    a multiple of 32, ``elems``, a multiple of 8, and ``tiles``, replace them):
    :data:`MMA_THREADS`, :data:`MMA_TILES`, and the most elements up to :data:`MMA_ELEMS`
    that fit beside the matrices (and, with ``dot``, the block sum's scratch).
    """
    threads = overrides.get("threads", MMA_THREADS)
    tiles = overrides.get("tiles", MMA_TILES)
    if threads % 32 or threads < 32:
        raise ValueError(f"threads={threads}: the tensor-core kernel needs whole warps (32 k)")
    matrices = _shared_matrices(op, index)
    fixed = 8 * (sum(matrices.values()) + (threads if dot else 0))  # block_sum's scratch
    per_elem = 8 * _element_doubles(op)
    if "elems" in overrides:
        elems = overrides["elems"]
        if elems % 8 or elems < 8:
            raise ValueError(f"elems={elems}: the tensor-core kernel needs a multiple of 8")
    else:
        elems = min(MMA_ELEMS, (shared_bytes - fixed) // per_elem // 8 * 8)
        if elems < 8:
            return None
    return {
        "threads": threads,
        "elems": elems,
        "points_per_thread": 1,
        "shared": frozenset(matrices),
        "shared_bytes": shared_bytes,
        "used_bytes": fixed + elems * per_elem,
        "tensor_cores": True,
        "tiles": tiles,
    }


def _element_doubles(op):
    """Shared doubles per element: the gathered inputs and the point buffer."""
    _, _, R = _point_rows(op)
    return sum(_node_stride(f) for _, f in _gathered(op)) + mma_pitch(R * _up(op.num_qpts, 8))


def mma_host_matrices(bases: list) -> list[np.ndarray]:
    """The kernel's matrix parameters: per matrix set ``j`` ``B{j}`` and ``G{j}`` flat, in
    the shared layout ``(D, QR, MP)`` zero-padded, then the slack (simplex_mma.cuh)."""
    arrays = []
    for b in bases:
        QR, MP = _up(b.num_qpts, 8), mma_pitch(_up(b.num_nodes, 4))
        for M in (b.interp[None], b.grad):  # (1, Q, P), (dim, Q, P)
            padded = np.zeros((M.shape[0], QR, MP))
            padded[:, : b.num_qpts, : b.num_nodes] = M
            arrays.append(np.concatenate([padded.ravel(), np.zeros(_SLACK)]))
    return arrays


def point_input(params: list[str], name: str, field: Any) -> tuple[Any, Any]:
    """``(load, address)`` of input ``name``, its kernel parameters appended to ``params``:
    ``load(row)``, the value at point ``q``, for an input read at the point itself (the
    basis's weights, or values stored per point), else None and ``address`` for the
    gather of its nodes."""
    if field.eval_mode is EVAL_WEIGHT:  # the basis's weights (Q,)
        params.append(f"const double *__restrict__ {name}")
        return (lambda row: f"(qok ? {name}[q] : 0.0)"), None
    address = field_address(params.append, name, field, writable=False)
    if field.eval_mode is not EVAL_NONE:
        return None, address

    def load(row):
        pointer, idx, base = address(row, "NUM_QPTS")
        return f"(qok ? ({pointer})[entry({idx}, {base} + q)] : 0.0)"

    return load, address


def node_contraction(regs: str, D: int, C: int, P: int, node: str, entry: Any) -> list[str]:
    """Statements declaring ``double regs[D * C]`` and filling ``regs[d * C + c]`` with
    ``sum_i entry(d) * node`` over the ``P`` nodes (``node``: the expression of node ``i``
    of component ``c``; ``entry(d)``: that of the matrix entry of row ``d``, in ``i``)."""
    dims = range(D)
    return [
        f"double {regs}[{D * C}];",
        "#pragma unroll",
        f"for (int c = 0; c < {C}; c++) {{",
        "  double " + ", ".join(f"a{d} = 0.0" for d in dims) + ";",
        f"  for (int i = 0; i < {P}; i++) {{",
        f"    const double x = {node};",
        *(f"    a{d} += {entry(d)} * x;" for d in dims),
        "  }",
        *(f"  {regs}[{d * C} + c] = a{d};" for d in dims),
        "}",
    ]


class _MmaSource:
    """The tensor-core kernel's parameters, shared arrays and stages, built field by field."""

    def __init__(self, op, launch, index):
        self.op, self.launch, self.index = op, launch, index
        self.Q, self.QR = op.num_qpts, _up(op.num_qpts, 8)
        self.in_rows, self.out_rows, R = _point_rows(op)
        self.YS = mma_pitch(R * self.QR)  # the point buffer's doubles per element
        self.params = []  # C++ parameter declarations of the fields
        self.arrays = []  # (name, doubles, comment): the dynamic shared memory, in order
        self.gather = []  # the gather stage: whole loops
        self.points = []  # the points stage: one call per tensor-core input
        self.point = []  # at a point, before the QFunction body: inputs, output registers
        self.after = []  # at a point, after it: the outputs to the point buffer
        self.nodes = []  # the nodes stage: one call (or loop) per active output

    def _sizes(self, basis, grad):
        """``(D, NP, MP, name)`` of a basis's matrix (``B{j}`` or ``G{j}``)."""
        NP = _up(basis.num_nodes, 4)
        name = f"{'G' if grad else 'B'}{self.index(basis)}"
        return (basis.dim if grad else 1), NP, mma_pitch(NP), name

    def input(self, k, field):
        """Declare input ``k``; returns ``load(row)``, its value at point ``q`` of ``e``."""
        name = f"in{k}"
        load, address = point_input(self.params, name, field)
        if load is not None:
            return load
        self._gather(name, field, address)
        if field.basis.is_cell_constant:
            self.point += self._constant(name, field)
            return lambda row: f"c_{name}[{row}]"
        D, NP, MP, M = self._sizes(field.basis, field.eval_mode is EVAL_GRAD)
        C, row0 = field.basis.num_comp, self.in_rows[k]
        sizes = f"ELEMS, {C}, {D}, {NP // 4}, {self.QR // 8}, TILES, {NP}, {_node_stride(field)}"
        self.points.append(
            f"simplex_mma_points<{sizes}, QR, {MP}, YS>(s_{name}, s_{M}, "
            f"s_pts + {row0} * QR, valid, warp, warps, lane);"
        )
        self.point += [
            f"double r_{name}[{field.size}];",
            "#pragma unroll",
            f"for (int row = 0; row < {field.size}; row++)",
            f"  r_{name}[row] = s_pts[e * YS + ({row0} + row) * QR + q];",
        ]
        return lambda row: f"r_{name}[{row}]"

    def _gather(self, name, field, address):
        """The gather loop of input ``name`` into ``s_{name}`` (elems, XS): (C, NP) each."""
        C, P = field.basis.num_comp, field.basis.num_nodes
        NP, XS = _up(P, 4), _node_stride(field)
        pointer, idx, base = address("c", P)
        self.arrays.append((f"s_{name}", f"ELEMS * {XS}", f"(elems, {XS}): ({C}, {NP}) nodes"))
        self.gather += [
            f"for (int t = threadIdx.x; t < ELEMS * {XS}; t += blockDim.x) {{",
            f"  const int e = t / {XS}, c = t % {XS} / {NP}, i = t % {XS} % {NP};",
            "  const index_t elem = first + e;",
            f"  const bool ok = elem < num_elem && c < {C} && i < {P};",
            f"  s_{name}[t] = ok ? ({pointer})[entry({idx}, {base} + i)] : 0.0;",
            "}",
        ]

    def _constant(self, name, field):
        """Statements filling ``c_{name}`` (rows ``[dim][comp]``) at element ``e`` from its
        gathered nodes and the global matrix's first point: the basis is cell-constant."""
        grad = field.eval_mode is EVAL_GRAD
        D, NP, MP, M = self._sizes(field.basis, grad)
        C, P, XS = field.basis.num_comp, field.basis.num_nodes, _node_stride(field)
        node = f"s_{name}[e * {XS} + c * {NP} + i]"
        entry = lambda d: f"{M}[{d * self.QR * MP} + i]"  # noqa: E731
        return node_contraction(f"c_{name}", D, C, P, node, entry)

    def output(self, k, field):
        """Declare output ``k`` (registers at a point); returns ``store(row)``."""
        name, rows = f"out{k}", field.size
        self.point.append(f"double r_{name}[{rows}] = {{}};")  # rows the body never writes: 0
        store = lambda row: f"r_{name}[{row}]"  # noqa: E731
        if not field.is_active:
            return store
        address = field_address(self.params.append, name, field, writable=True)
        row0 = self.out_rows[k]
        # past the last element the QFunction may see zero geometry: keep its outputs finite
        self.after += [
            f"s_pts[e * YS + {row0 + row} * QR + q] = qok ? r_{name}[{row}] : 0.0;"
            for row in range(rows)
        ]
        if field.eval_mode is EVAL_NONE:
            self.nodes += self._scatter_points(name, rows, row0, address)
        else:
            self.nodes += self._transpose(name, field, row0, address)
        return store

    @staticmethod
    def _scatter_points(name, rows, row0, address):
        """The nodes-stage loop adding an ``EVAL_NONE`` output's points to its L-vector."""
        pointer, idx, base = address("row", "NUM_QPTS")
        return [
            f"for (int t = threadIdx.x; t < ELEMS * {rows} * NUM_QPTS; t += blockDim.x) {{",
            f"  const int e = t / ({rows} * NUM_QPTS), row = t / NUM_QPTS % {rows};",
            "  const int q = t % NUM_QPTS;",
            "  const index_t elem = first + e;",
            "  if (elem < num_elem)",
            f"    atomicAdd(&({pointer})[entry({idx}, {base} + q)],"
            f" s_pts[e * YS + ({row0} + row) * QR + q]);",
            "}",
        ]

    def _transpose(self, name, field, row0, address):
        """The nodes-stage call: B^T (or G^T) of output ``name``'s points on the tensor
        cores, each accumulator added to the L-vector through the restriction."""
        D, _, MP, M = self._sizes(field.basis, field.eval_mode is EVAL_GRAD)
        C, P = field.basis.num_comp, field.basis.num_nodes
        pointer, idx, base = address("c", P)
        sizes = f"ELEMS, {C}, {D}, {-(-self.Q // 4)}, {-(-P // 8)}, TILES, {P}, QR, {MP}, YS"
        return [
            f"simplex_mma_nodes<{sizes}>(s_pts + {row0} * QR, s_{M}, valid, warp, warps, lane,",
            "    [&](int e, int c, int i, double value) {",
            "      const index_t elem = first + e;",
            f"      if (elem < num_elem) atomicAdd(&({pointer})[entry({idx}, {base} + i)], value);",
            "    });",
        ]

    def prologue(self, shared, dot):
        """The dynamic shared memory carved into the matrices (copied from their global,
        already padded, parameters), the per-element arrays, the point buffer (zeroed:
        rows and points no stage writes must add nothing) and the block sum's scratch."""
        arrays = [(f"s_{n}", str(size), "(D, QR, MP) + slack") for n, size in shared.items()]
        arrays += [*self.arrays, ("s_pts", "ELEMS * YS", "(elems, YS): (R, QR) points")]
        if dot:
            arrays.append(("s_buf", "NUM_THREADS", "block_sum's"))
        lines, offset = ["SIMPLEX_MMA_SHARED(smem);"], "0"
        for name, size, comment in arrays:
            lines.append(f"double *{name} = smem + {offset};  // {comment}")
            offset = f"{offset} + {size}" if offset != "0" else size
        for n, size in shared.items():
            lines.append(
                f"for (int t = threadIdx.x; t < {size}; t += blockDim.x) s_{n}[t] = {n}[t];"
            )
        lines.append("for (int t = threadIdx.x; t < ELEMS * YS; t += blockDim.x) s_pts[t] = 0.0;")
        return lines


def mma_kernel_source(op: Any, launch: Any, bases: list, index: Any, dot: bool) -> str:
    """CUDA source of ``op``'s tensor-core simplex kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        :func:`~.operator_simplex.simplex_shape` not None, a traceable QFunction.
    launch : SimplexLaunch
        From ``simplex_launch(..., tensor_cores=True)``.
    bases, index
        :func:`~.operator_simplex._matrix_sets`: the matrix sets and ``index(basis)``.
    dot : bool
        Also write ``dot_partial[block]``, as the scalar kernel.

    Returns
    -------
    str
        Source that includes ``simplex_mma.cuh``; its parameters: ``num_elem``, per matrix
        set :func:`mma_host_matrices`, the fields, with ``dot`` the partial sums and CG's
        status.  Launch it with ``launch.used_bytes`` of dynamic shared memory.
    """
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    src = _MmaSource(op, launch, index)
    loads = [src.input(k, f) for k, f in enumerate(op.input_fields)]
    stores = [src.output(k, f) for k, f in enumerate(op.output_fields)]
    body = _qfunction_stage(op, loads, stores, pairs)
    params = [
        "const int num_elem",
        *(f"const double *__restrict__ {m}{j}" for j in range(len(bases)) for m in "BG"),
        *src.params,
        *_dot_params(dot),
    ]
    shared = {name: size for name, size in _shared_matrices(op, index).items()}
    prologue = src.prologue(shared, dot)
    return _kernel_text(launch, src, params, prologue, body, dot)


def _kernel_text(launch, src, params, prologue, body, dot):
    """The kernel around its stages: sizes, the shared arrays, the loop over element groups
    with the gather, points, QFunction and nodes stages between block synchronizations."""
    indent = lambda lines, n, sep="": (sep + "\n" + " " * n).join(lines)  # noqa: E731
    return f"""#include "simplex_mma.cuh"

extern "C" __global__ void __launch_bounds__({launch.threads}) apply(
    {indent(params, 4, ",")}) {{
  constexpr int NUM_THREADS = {launch.threads}, ELEMS = {launch.elems}, NUM_QPTS = {src.Q};
  constexpr int QR = {src.QR}, YS = {src.YS}, TILES = {launch.tiles};
  {_DOT_BEGIN if dot else ""}{indent(prologue, 2)}
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (index_t first = (index_t)blockIdx.x * ELEMS; first < num_elem;
       first += (index_t)gridDim.x * ELEMS) {{
    const int valid = (int)(num_elem - first < ELEMS ? num_elem - first : ELEMS);
    {indent(src.gather, 4)}
    __syncthreads();  // the nodes gathered (and, first, the matrices loaded)
    {indent(src.points, 4)}
    __syncthreads();  // the inputs at the points
    for (int t = threadIdx.x; t < ELEMS * NUM_QPTS; t += blockDim.x) {{
      const int e = t / NUM_QPTS, q = t % NUM_QPTS;
      const index_t elem = first + e;
      const bool qok = elem < num_elem;
      {indent(src.point + body + src.after, 6)}
    }}
    __syncthreads();  // the outputs at the points
    {indent(src.nodes, 4)}
  }}{_dot_end(dot, "threadIdx.x", "blockDim.x")}
}}
"""
