"""gen's fused kernel with one warp per element: interpolation on the fp64 tensor cores.

The column-per-thread slab of :mod:`.operator_fuse` reads one shared-memory value per
multiply-add in its x and y stages, and that pipe bounds it, as it bounds libCEED's
cuda-gen (``docs/performance.md``).  Here each warp applies a whole element
(``warp_element.cuh``): lane ``(g, t) = (lane / 4, lane % 4)`` owns the z columns ``(i, j) =
(2 t + h, g)``; the x and y contractions and their transposes are 8x8x4 fp64 tensor-core
tiles, the z contractions run in each lane's registers, and the warp's buffer only
transposes between stages (two round trips per element and direction).  The QFunction body
is traced and inlined at each lane's ``2 Q_1d`` points, as in the slab kernel.

It applies to 3D operators whose basis fields all interpolate (``EVAL_INTERP``, one
``P_1d``, ``P_1d, Q_1d <= 8``) or read weights, with ``EVAL_NONE`` inputs (stored q-data)
beside them and every active output interpolated: BP1 and BP2 and mass-like user
operators.  :data:`WARP_SHAPES` holds the shapes where it measured faster than the slab.
"""

import numpy as np

from ...constants import EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from ...qfunction_trace import trace_body
from .operator_fuse import (
    FusedOperator,
    _compile,
    _constant_tables,
    _Source,
    dot_pairs,
)
from .ref import cupy

__all__ = ["WARP_SHAPES", "WarpFusedOperator", "use_warp_layout", "warp_kernel_source"]

# the (dim, P_1d, Q_1d) of gen's kernels that run one warp per element, on devices of compute
# capability 8.0 or later, and the blocks of WARPS warps per SM that __launch_bounds__ asks
# registers for.  On the H200 (BP1, 1e7 DOFs, alternating; docs/performance.md) p = 3..6 ran
# 1.21/1.34/1.51/1.28x the slab with these bounds (6: 80 registers, 5: 96, 4: 128; the
# others 0.89-1.46x); p = 2 lost (0.65x: 3 of 8 nodes and 4 of 8 points per tile
# direction), and p >= 7 needs Q_1d > 8
WARP_SHAPES = {(3, 4, 5): 6, (3, 5, 6): 6, (3, 6, 7): 5, (3, 7, 8): 4}
# warps (elements) per block
WARPS = 4
# stored (EVAL_NONE) inputs of at most this many values per point are read into registers
# before the stages (2 Q_1d per value and lane), so that their loads overlap the
# contractions (1.03-1.09x at p = 3..5); larger ones are read at each point
PREFETCH_SIZE = 2
# blocks per SM asked for shapes outside WARP_SHAPES (tests that force the layout)
MIN_BLOCKS = 5


def use_warp_layout(op, shape):
    """Whether gen applies ``op`` (of fused ``shape``) with one warp per element.

    ``shape`` in :data:`WARP_SHAPES`; every interp field one basis (the same 1D matrices) of
    at most 8 nodes and points per direction; no gradients; inputs also ``EVAL_NONE`` or
    ``EVAL_WEIGHT``; every output interpolated; a device of compute capability 8.0 or later.
    """
    if tuple(shape) not in WARP_SHAPES or not warp_fusable(op):
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def warp_fusable(op):
    """The field conditions of :func:`use_warp_layout` (no device, no shape table)."""
    interp = [f for f in op.input_fields + op.output_fields if f.eval_mode is EVAL_INTERP]
    if not interp or any(f.eval_mode is not EVAL_INTERP for f in op.output_fields):
        return False
    if any(f.eval_mode not in (EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT) for f in op.input_fields):
        return False
    first = interp[0].basis
    same = all(
        f.basis is first
        or (
            (f.basis.P_1d, f.basis.Q_1d) == (first.P_1d, first.Q_1d)
            and np.array_equal(f.basis.interp_1d, first.interp_1d)
        )
        for f in interp
    )
    return same and first.dim == 3 and max(first.P_1d, first.Q_1d) <= 8


def _interp_basis(op):
    """The basis of ``op``'s interpolated fields (a weight field's may have another P_1d)."""
    return next(f.basis for f in op.input_fields + op.output_fields if f.eval_mode is EVAL_INTERP)


def warp_kernel_source(op, shape, dot=False):
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

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` and ``warp_element.cuh`` (compile with
        ``-I`` this folder).  Parameters: ``num_elem``, ``B0`` (Q_1d, P_1d), the fields as
        :class:`~.operator_fuse.FusedOperator` binds them, then ``dot_partial, status``.

    Raises
    ------
    ValueError
        ``op`` is not :func:`warp_fusable`, or ``dot`` without :func:`dot_pairs`.
    """
    if not warp_fusable(op):
        raise ValueError("the warp layout needs 3D interpolation fields of P_1d, Q_1d <= 8")
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    _, P, Q = shape
    basis = _interp_basis(op)
    src = _Source(3, False, None, {}, 0)  # declares the field parameters
    prefetch, stage, loads = [], [], []
    for k, field in enumerate(op.input_fields):
        name = f"in{k}"
        if field.eval_mode is EVAL_WEIGHT:
            src.param(f"const double *__restrict__ {name}")
            loads.append(lambda row, name=name: f"(qok ? {name}[q] : 0.0)")
            continue
        address = src.field_params(name, field, writable=False)
        if field.eval_mode is EVAL_NONE and field.size <= PREFETCH_SIZE:
            prefetch.append(f"double r_{name}[{field.size}][Q_1D][2];")
            for row in range(field.size):
                pointer, idx, base = address(row, "NUM_QPTS")
                prefetch.append(
                    f"warp_load_points<Q_1D>({pointer}, {idx}, {base}, lane, r_{name}[{row}]);"
                )
            loads.append(lambda row, name=name: f"r_{name}[{row}][k][h]")
            continue
        if field.eval_mode is EVAL_NONE:

            def load(row, address=address):
                pointer, idx, base = address(row, "NUM_QPTS")
                return f"(qok ? ({pointer})[entry({idx}, {base} + q)] : 0.0)"

            loads.append(load)
            continue
        C = field.basis.num_comp
        stage.append(f"double r_{name}[{C}][Q_1D][2];")
        for c in range(C):
            pointer, idx, base = address(c, "NUM_NODES")
            stage.append(
                f"warp_interp<P_1D, Q_1D>({pointer}, {idx}, {base}, frags, c_B0, buf, lane, "
                f"r_{name}[{c}]);"
            )
        loads.append(lambda row, name=name: f"r_{name}[{row}][k][h]")
    stores, epilogue, zero = [], [], []
    for k, field in enumerate(op.output_fields):
        name = f"out{k}"
        C = field.basis.num_comp
        stage.append(f"double r_{name}[{C}][Q_1D][2] = {{}};")
        stores.append(lambda row, name=name: f"r_{name}[{row}][k][h]")
        zero += [f"r_{name}[{c}][k][h] = 0.0;" for c in range(C)]
        if not field.is_active:
            continue
        address = src.field_params(name, field, writable=True)
        for c in range(C):
            pointer, idx, base = address(c, "NUM_NODES")
            epilogue.append(
                f"warp_interp_t<P_1D, Q_1D>(r_{name}[{c}], frags, c_B0, buf, lane, "
                f"{pointer}, {idx}, {base});"
            )
    body = trace_body(op.qf, lambda k, row: loads[k](row), lambda k, row: stores[k](row))
    if pairs:  # u . Au: the paired inputs' point values times the outputs
        rows = [(i, o, row) for i, o in pairs for row in range(op.output_fields[o].size)]
        terms = " + ".join(f"{loads[i](row)} * {stores[o](row)}" for i, o, row in rows)
        body.append(f"if (qok) dot += {terms};")
    body += ["if (!qok) {", *(f"  {line}" for line in zero), "}"]  # padded points add nothing
    params = ",\n    ".join(
        [
            "const int num_elem",
            "const double *__restrict__ B0",
            *src.params,
            *(
                ["double *__restrict__ dot_partial", "const long long *__restrict__ status"]
                if dot
                else []
            ),
        ]
    )
    point = "\n          ".join(body)
    stages = "\n    ".join(prefetch + stage)
    finish = "\n    ".join(epilogue)
    dot_begin = "if (*status != 0) return;\n  double dot = 0.0;\n  " if dot else ""
    dot_end = (
        "\n  const double block_dot = block_sum(dot, s_buf, threadIdx.x, blockDim.x);"
        "\n  if (threadIdx.x == 0) dot_partial[blockIdx.x] = block_dot;"
        if dot
        else ""
    )
    defines = {"DIM": 3, "P_1D": P, "Q_1D": Q, "T_1D": max(P, Q), "ELEMS_PER_BLOCK": WARPS}
    min_blocks = WARP_SHAPES.get(tuple(shape), MIN_BLOCKS)
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    tables = _constant_tables({"B0": basis.interp_1d})
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"
#include "warp_element.cuh"
{tables}
extern "C" __global__ void __launch_bounds__({32 * WARPS}, {min_blocks}) apply(
    {params}) {{
  __shared__ double s_buf[ELEMS_PER_BLOCK * WARP_BUF];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double *buf = s_buf + warp * WARP_BUF;
  {dot_begin}const WarpFragments frags = warp_fragments<P_1D, Q_1D>(B0, lane);
  for (index_t elem = (index_t)blockIdx.x * ELEMS_PER_BLOCK + warp; elem < num_elem;
       elem += (index_t)gridDim.x * ELEMS_PER_BLOCK) {{
    {stages}
#pragma unroll
    for (int k = 0; k < Q_1D; k++) {{
#pragma unroll
      for (int h = 0; h < 2; h++) {{
        const int i = 2 * (lane & 3) + h, j = lane >> 2;
        const bool qok = i < Q_1D && j < Q_1D;
        const index_t q = i + Q_1D * (j + Q_1D * k);
        {{
          {point}
        }}
      }}
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
        basis = _interp_basis(op)
        self._op, self._shape, self._collocated = op, shape, False
        self._matrices = [basis.backend_data["interp_1d"]]  # B0 (Q_1d, P_1d)
        self._block = (32 * WARPS, 1, 1)
        self._tensor_cores = True  # every x and y stage
        self._kernel = _compile(self._source(), max(shape[1:]))
        self._dot_kernel = None
        self._weights = self._weight_tables(op, shape)
        resident = WARP_SHAPES.get(tuple(shape), MIN_BLOCKS)  # __launch_bounds__'s
        self.num_blocks = self._grid(op.num_elem, WARPS, resident)

    layout = "warp"

    def _source(self, dot=False):
        return warp_kernel_source(self._op, self._shape, dot)
