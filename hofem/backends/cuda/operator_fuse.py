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

The generated source defines the sizes (``DIM``, ``P_1D``, ``Q_1D``, ...)
and includes ``basis_tensor.cuh``; it is compiled by NVRTC once per source
(CuPy also caches it on disk).

Register layout: an interp/grad field of ``num_comp`` C keeps, per thread,
``C`` (interp) or ``C * DIM`` (grad) blocks of ``COLUMN(Q_1D)`` values;
QFunction row ``d * C + c`` of a gradient is block ``c * DIM + d``, so the
``DIM`` blocks of one component are adjacent for ``grad_t_column``.
"""

import functools
import pathlib

import numpy as np

from ...constants import EVAL_GRAD, EVAL_INTERP, EVAL_NONE, EVAL_WEIGHT
from ...qfunction_trace import trace_body
from . import kernels
from .batched import device_layout
from .ref import cupy

__all__ = ["fusable_shape", "fused_operator", "kernel_source"]

_HERE = pathlib.Path(__file__).parent
# threads per block of the fused kernels: fewer than the basis kernels' 256 (more
# registers per thread); on the H100 128 beat 256 by 4-17% for BP1/BP3 at p = 2, 4, 6, 8
FUSED_THREADS = 128
_BASIS_MODES = (EVAL_INTERP, EVAL_GRAD)


def fusable_shape(op, max_t_1d):
    """The common (dim, P_1d, Q_1d) of ``op``'s tensor fields, or None if it cannot fuse.

    An operator fuses when every interp/grad field has an unoriented restriction
    and a tensor basis of one (dim, P_1d, Q_1d) with ``max(P_1d, Q_1d) <=
    max_t_1d``, every weight field a tensor basis with that Q_1d, and every
    ``EVAL_NONE`` field an unoriented restriction.
    """
    shape = None
    for field in op.input_fields + op.output_fields:
        if field.eval_mode is not EVAL_WEIGHT and field.restriction.is_oriented:
            return None
        if field.eval_mode is EVAL_NONE:
            continue
        b = field.basis
        if not b.is_tensor:
            return None
        if field.eval_mode is EVAL_WEIGHT:
            continue
        this = (b.dim, b.P_1d, b.Q_1d)
        if shape not in (None, this) or max(b.P_1d, b.Q_1d) > max_t_1d:
            return None
        shape = this
    weights = [f.basis for f in op.input_fields if f.eval_mode is EVAL_WEIGHT]
    if shape is None or any((b.dim, b.Q_1d) != (shape[0], shape[2]) for b in weights):
        return None
    return shape


def _index_type(field):
    """C++ type of the field's device indices, or None for the identity layout."""
    identity, index_dtype = device_layout(field.restriction)
    if identity:
        return None
    return "int" if index_dtype == np.int32 else "long long"


def _register_blocks(field, dim):
    """Register blocks (of COLUMN(Q_1D) values) of a field: one per QFunction row."""
    if field.eval_mode is EVAL_GRAD:
        return dim * field.basis.num_comp
    return field.size


class _Source:
    """The generated kernel's parameters and body statements, built field by field."""

    def __init__(self, dim, collocated):
        self.dim = dim
        self.collocated = collocated
        self.params = []  # C++ parameter declarations
        self.lines = []  # body statements inside the element loop

    def param(self, decl):
        self.params.append(decl)

    def field_params(self, name, field, writable):
        """Declare a field's vector, offsets and component stride.

        Returns ``address(c, per_elem)``: the C++ ``(pointer, idx, base)`` of component
        ``c`` of an element, whose entry ``j`` (of ``per_elem``) is
        ``pointer[idx[base + j]]``, or ``pointer[base + j]`` for the identity layout
        (``idx`` null). The offsets are component 0's, so other components add
        ``c * stride`` to the pointer.
        """
        # outputs may alias each other (several active outputs add to one v): no restrict
        self.param(f"double *{name}" if writable else f"const double *__restrict__ {name}")
        index_t = _index_type(field)
        if index_t is None:
            C = field.restriction.num_comp
            return lambda c, n: (name, "((const int *)nullptr)", f"(elem * {C} + {c}) * {n}")
        self.param(f"const {index_t} *__restrict__ {name}_idx")
        self.param(f"const index_t {name}_stride")
        return lambda c, n: (f"{name} + {c} * {name}_stride", f"{name}_idx", f"elem * {n}")

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
        C = field.basis.num_comp
        blocks = _register_blocks(field, self.dim)
        self.lines.append(f"double r_{name}[{blocks} * COLUMN(Q_1D)];")
        for c in range(C):
            pointer, idx, base = address(c, "NUM_NODES")
            self.lines += [
                "{",
                "  double r[COLUMN(P_1D)], r_q[COLUMN(Q_1D)];",
                f"  gather_column<P_1D>({pointer}, {idx}, {base}, active, tx, ty, r);",
                *(f"  {step}" for step in self._steps(mode, f"r_{name}", c, transpose=False)),
                "}",
            ]
        return lambda row: f"r_{name}[{self._block(field, row)} * COLUMN(Q_1D) + k]"

    def _steps(self, mode, regs, c, transpose):
        """Statements taking component c's nodes ``r`` to its blocks of ``regs`` (or back)."""
        IN, OUT = ("Q_1D", "P_1D") if transpose else ("P_1D", "Q_1D")
        B, G, t = ("s_Bt", "s_Gt", "_t") if transpose else ("s_B", "s_G", "")

        def oriented(nodes, points):  # (source, destination) of this direction
            return (points, nodes) if transpose else (nodes, points)

        if mode is not EVAL_GRAD:
            src, dst = oriented("r", f"{regs} + {c} * COLUMN(Q_1D)")
            return [f"contract<{IN}, {OUT}>({B}, {B}, {B}, {src}, {dst}, buf, tx, ty);"]
        src, dst = oriented("r", f"{regs} + {c * self.dim} * COLUMN(Q_1D)")
        if not self.collocated:
            return [f"grad{t}_column<{IN}, {OUT}>({B}, {G}, {src}, {dst}, buf, tx, ty);"]
        if transpose:  # interpolation and the collocated derivative, through r_q
            return [
                f"grad_t_collocated(s_D, RegisterColumns{{{src}}}, r_q, buf, tx, ty);",
                f"contract<{IN}, {OUT}>({B}, {B}, {B}, r_q, r, buf, tx, ty);",
            ]
        return [
            f"contract<{IN}, {OUT}>({B}, {B}, {B}, r, r_q, buf, tx, ty);",
            f"grad_collocated(s_D, r_q, RegisterColumns{{{dst}}}, buf, tx, ty);",
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
        C = field.basis.num_comp
        for c in range(C):
            epilogue += [
                "{",
                "  double r[COLUMN(P_1D)], r_q[COLUMN(Q_1D)];",
                *(
                    f"  {step}"
                    for step in self._steps(field.eval_mode, f"r_{name}", c, transpose=True)
                ),
                "  scatter_column<P_1D>({}, {}, {}, active, tx, ty, r);".format(
                    *address(c, "NUM_NODES")
                ),
                "}",
            ]
        return store, epilogue


def kernel_source(op, shape, collocated=False):
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

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` (compile with ``-I`` this folder).
    """
    elems, _ = kernels.basis_block(*shape, FUSED_THREADS)
    dim, P_1d, Q_1d = shape
    src = _Source(dim, collocated)
    loads = [src.input(k, f) for k, f in enumerate(op.input_fields)]
    stores, epilogue = [], []
    for k, field in enumerate(op.output_fields):
        store, lines = src.output(k, field)
        stores.append(store)
        epilogue += lines
    body = trace_body(op.qf, lambda k, row: loads[k](row), lambda k, row: stores[k](row))
    defines = {"DIM": dim, "P_1D": P_1d, "Q_1D": Q_1d, "T_1D": max(P_1d, Q_1d)}
    defines["ELEMS_PER_BLOCK"] = elems
    head = "".join(f"#define {key} {value}\n" for key, value in defines.items())
    point = "\n      ".join(body)
    stage = "\n    ".join(src.lines)
    finish = "\n    ".join(epilogue)
    params = ",\n    ".join(
        [
            "const int num_elem",
            "const double *__restrict__ B",
            "const double *__restrict__ G",
            "const double *__restrict__ Bt",
            "const double *__restrict__ Gt",
            *(["const double *__restrict__ D"] if collocated else []),
            *src.params,
        ]
    )
    load_d = (
        "__shared__ double s_D[Q_1D * Q_1D];\n"
        "  for (int i = tid; i < Q_1D * Q_1D; i += NUM_THREADS) s_D[i] = D[i];\n  "
        if collocated
        else ""
    )
    return f"""{head}#include "basis_tensor.cuh"

extern "C" __global__ void apply(
    {params}) {{
  __shared__ double s_B[MAT_SIZE], s_G[MAT_SIZE], s_Bt[MAT_SIZE], s_Gt[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  {load_d}load_matrices(B, G, s_B, s_G, tid);
  load_matrices(Bt, Gt, s_Bt, s_Gt, tid);
  double *buf = s_buf + slot * BUF_SIZE;
  for_each_element(num_elem, slot, [&](index_t elem, bool active) {{
    const bool qok = active && owns_column<Q_1D>(tx, ty);
    {stage}
#pragma unroll
    for (int k = 0; k < COLUMN(Q_1D); k++) {{
      const index_t q = column_index<Q_1D>(k, tx, ty);
      {point}
    }}
    {finish}
  }});
}}
"""


@functools.cache
def _compile(code):
    return cupy.RawModule(code=code, options=("--std=c++17", f"-I{_HERE}")).get_function("apply")


def fused_operator(op, shape):
    """Generate, compile and bind ``op``'s fused kernel.

    Parameters
    ----------
    op : Operator
        On a batched CUDA backend; its QFunction must be traceable (else
        :class:`Untraceable` propagates).
    shape : tuple
        ``(dim, P_1d, Q_1d)`` from :func:`fusable_shape`.

    Returns
    -------
    callable
        ``run(u, v)``: ``v (l_size,) += A u`` for the active L-vectors (either may
        be None when the operator has no active input or output).
    """
    b = next(f.basis for f in op.input_fields + op.output_fields if f.eval_mode in _BASIS_MODES)
    data = b.backend_data
    matrices = [data[key] for key in ("interp_1d", "grad_1d", "interp_1d_t", "grad_1d_t")]
    D = data["collocated"]  # (Q_1d, Q_1d) or None: see CudaBatchedBackend.collocated
    if D is not None:
        matrices.append(D)
    dim, P_1d, Q_1d = shape
    elems, block = kernels.basis_block(dim, P_1d, Q_1d, FUSED_THREADS)
    kernel = _compile(kernel_source(op, shape, collocated=D is not None))
    weights = {}
    for field in op.input_fields:
        if field.eval_mode is EVAL_WEIGHT and id(field.basis) not in weights:
            w = field.basis.q_weight_1d  # (Q_1d,)
            tensor = functools.reduce(np.multiply.outer, [w] * dim).ravel()  # (Q_1d^dim,)
            weights[id(field.basis)] = cupy.asarray(tensor)
    E = op.num_elem
    grid = (max(1, min(-(-E // elems), 1 << 20)),)

    def indices(field):
        r = field.restriction
        if r.backend_data["identity"]:
            return ()
        return r.backend_data["indices"], np.int64(r.component_stride)  # (num_elem * elem_size,)

    def run(u, v):
        args = [np.int32(E), *matrices]
        for field in op.input_fields:
            if field.eval_mode is EVAL_WEIGHT:
                args.append(weights[id(field.basis)])
            else:
                args += [u if field.is_active else field.vector, *indices(field)]
        for field in op.output_fields:
            if field.is_active:
                args += [v, *indices(field)]
        kernel(grid, block, tuple(args))

    return run
