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

__all__ = ["FusedOperator", "dot_pairs", "fusable_shape", "kernel_source"]

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


def _same_restriction(a, b):
    """Whether two restrictions gather the same entries: one object, or one layout and one
    device copy of the offsets (restrictions of one space share it); False when unsure."""
    if a is b:
        return True
    layout = lambda r: (r.num_elem, r.elem_size, r.num_comp, r.l_size, r.component_stride)  # noqa: E731
    if layout(a) != layout(b) or a.is_oriented or b.is_oriented:
        return False
    da, db = a.backend_data, b.backend_data
    if da.get("identity") and db.get("identity"):
        return True
    indices = da.get("indices")
    return indices is not None and indices is db.get("indices")


def dot_pairs(op):
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


def kernel_source(op, shape, collocated=False, dot=False):
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

    Returns
    -------
    str
        Source that includes ``basis_tensor.cuh`` (compile with ``-I`` this folder).

    Raises
    ------
    ValueError
        ``dot`` for an operator whose :func:`dot_pairs` is None.
    """
    elems, _ = kernels.basis_block(*shape, FUSED_THREADS)
    dim, P_1d, Q_1d = shape
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
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
    if pairs:  # u . Au: the paired inputs' point values times the outputs
        rows = [(i, o, row) for i, o in pairs for row in range(op.output_fields[o].size)]
        terms = " + ".join(f"{loads[i](row)} * {stores[o](row)}" for i, o, row in rows)
        body = [*body, f"if (qok) dot += {terms};"]
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
            *(
                ["double *__restrict__ dot_partial", "const long long *__restrict__ status"]
                if dot
                else []
            ),
        ]
    )
    load_d = (
        "__shared__ double s_D[Q_1D * Q_1D];\n"
        "  for (int i = tid; i < Q_1D * Q_1D; i += NUM_THREADS) s_D[i] = D[i];\n  "
        if collocated
        else ""
    )
    # the dot variant: skip when CG has stopped; one partial sum per block at the end
    dot_begin = "if (*status != 0) return;\n  double dot = 0.0;\n  " if dot else ""
    dot_end = (
        "\n  const double block_dot = block_sum(dot, s_buf, tid, NUM_THREADS);"
        "\n  if (tid == 0) dot_partial[blockIdx.x] = block_dot;"
        if dot
        else ""
    )
    return f"""{head}#include "basis_tensor.cuh"
#include "reduce.cuh"

extern "C" __global__ void apply(
    {params}) {{
  __shared__ double s_B[MAT_SIZE], s_G[MAT_SIZE], s_Bt[MAT_SIZE], s_Gt[MAT_SIZE];
  __shared__ double s_buf[ELEMS_PER_BLOCK * BUF_SIZE];
  THREAD_SETUP
  {dot_begin}{load_d}load_matrices(B, G, s_B, s_G, tid);
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
  }});{dot_end}
}}
"""


@functools.cache
def _compile(code):
    return cupy.RawModule(code=code, options=("--std=c++17", f"-I{_HERE}")).get_function("apply")


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
        b = next(f.basis for f in op.input_fields + op.output_fields if f.eval_mode in _BASIS_MODES)
        data = b.backend_data
        matrices = [data[key] for key in ("interp_1d", "grad_1d", "interp_1d_t", "grad_1d_t")]
        D = data["collocated"]  # (Q_1d, Q_1d) or None: see CudaBatchedBackend.collocated
        if D is not None:
            matrices.append(D)
        self._op, self._shape, self._collocated = op, shape, D is not None
        self._matrices = matrices
        elems, self._block = kernels.basis_block(*shape, FUSED_THREADS)
        self._kernel = _compile(kernel_source(op, shape, collocated=self._collocated))
        self._dot_kernel = None  # compiled on the first apply_dot
        self._weights = {}
        for field in op.input_fields:
            if field.eval_mode is EVAL_WEIGHT and id(field.basis) not in self._weights:
                w = field.basis.q_weight_1d  # (Q_1d,)
                tensor = functools.reduce(np.multiply.outer, [w] * shape[0]).ravel()
                self._weights[id(field.basis)] = cupy.asarray(tensor)  # (Q_1d^dim,)
        sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
        resident = max(1, 2048 // int(np.prod(self._block)))  # blocks per SM, by threads
        self.num_blocks = max(1, min(-(-op.num_elem // elems), 4 * sms * resident))

    @staticmethod
    def _indices(field):
        r = field.restriction
        if r.backend_data["identity"]:
            return ()
        return r.backend_data["indices"], np.int64(r.component_stride)  # (num_elem * elem_size,)

    def _args(self, u, v):
        op = self._op
        args = [np.int32(op.num_elem), *self._matrices]
        for field in op.input_fields:
            if field.eval_mode is EVAL_WEIGHT:
                args.append(self._weights[id(field.basis)])
            else:
                args += [u if field.is_active else field.vector, *self._indices(field)]
        for field in op.output_fields:
            if field.is_active:
                args += [v, *self._indices(field)]
        return args

    def __call__(self, u, v):
        """``v (l_size,) += A u``; either may be None without an active input or output."""
        self._kernel((self.num_blocks,), self._block, tuple(self._args(u, v)))

    def apply_dot(self, u, v, dot_partial, status):
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
            code = kernel_source(self._op, self._shape, collocated=self._collocated, dot=True)
            self._dot_kernel = _compile(code)
        args = (*self._args(u, v), dot_partial, status)
        self._dot_kernel((self.num_blocks,), self._block, args)
