"""A whole simplex operator (G, B, D, B^T, G^T) generated as one CUDA kernel.

Operators whose bases are dense (non-tensor: triangles, tetrahedra) fuse into
one kernel of three stages per group of ``elems`` elements, each a loop over
the block's threads between ``__syncthreads()`` (so any block size up to the
kernel's ``NUM_THREADS`` gives the same result):

1. **gather**: one thread per (element, component, node) reads the input
   L-vectors through the restriction offsets into shared memory ``s_e{k}``
   ``(elems, C, P)``;
2. **points**: one thread per (element, slot) evaluates its points
   ``q = slot + k * SLOTS`` (``k < POINTS_PER_THREAD``): the dense B (Q, P) and
   G (DIM, Q, P) rows of the point times the gathered nodes, the QFunction body
   (traced by :func:`~hofem.qfunction_trace.trace_body` and inlined, as in
   :mod:`.operator_fuse`), stored inputs (``EVAL_NONE``, e.g. q-data) read at
   the point, and the outputs written to shared memory ``s_q{k}`` ``(elems,
   rows, Q)``;
3. **nodes**: one thread per (element, component, node) applies B^T / G^T to
   the outputs at the points and adds the result to the output L-vector with
   atomics.

Inputs whose basis :attr:`~hofem.Basis.is_cell_constant` (the vertex
coordinates of affine simplices at the centroid, ``geometry="on_the_fly"``)
are evaluated once per thread before its points, so what the QFunction
derives from them (the Jacobian, its determinant and inverse) is computed
once for the thread's ``POINTS_PER_THREAD`` points of one element.

The matrices live in shared memory where they fit (:data:`SHARED_BYTES` per
block, the per-element arrays first), with an odd row pitch so that both
stages read them without bank conflicts; the others are read from global
memory (the read-only cache) in the layout each stage reads coalesced:
``Bt``/``Gt`` ``(DIM,) P, Q`` by the points, ``B``/``G`` ``(DIM,) Q, pitch``
by the nodes.

The ``dot=True`` variant also writes the block partial sums of ``u . Au``
(see :mod:`.operator_fuse`), with the same parameters after the fields.

``simplex_launch(..., tensor_cores=True)`` chooses the variant of :mod:`.simplex_mma`:
the matrices in the opt-in dynamic shared memory and both products on the fp64 tensor
cores (compute capability 8.0 and later), 8 elements as a tile's M side.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from ... import tuning
from ...constants import EVAL_GRAD, EVAL_NONE, EVAL_WEIGHT
from . import kernels, simplex_mma
from .operator_fuse import (
    _BASIS_MODES,
    _DOT_BEGIN,
    FusedOperator,
    _basis_fields,
    _dot_end,
    _dot_params,
    _qfunction_stage,
    dot_pairs,
)
from .ref import cupy
from .simplex_factored import factored_view

__all__ = [
    "SimplexLaunch",
    "SimplexOperator",
    "host_matrices",
    "kernel_source",
    "simplex_launch",
    "simplex_operator",
    "simplex_shape",
    "tensor_core_overrides",
]

# static shared memory of one block (the limit without an opt-in); the matrices that do
# not fit beside the per-element arrays are read from global memory
SHARED_BYTES = 48 * 1024
# threads per block: four warps, so that several blocks share an SM while their shared
# arrays fit
THREADS = 128
# points per thread where an input is cell-constant: its values, and the geometry the
# QFunction derives from them, serve this many points; more costs registers per point
CONSTANT_POINTS = 2
# rounds of each stage's loop over a block's elements: two in flight hide more of the
# gathers' and the products' latency than one
ROUNDS = 2
_TUNING = tuning.simplex()  # cuda_simplex.json: the tensor-core shapes, and batched's
_MATRICES = ("B", "G", "Bt", "Gt")  # each matrix set's kernel parameters, in this order


@dataclasses.dataclass(frozen=True)
class SimplexLaunch:
    """The thread layout of one simplex kernel.

    Attributes
    ----------
    threads : int
        Threads per block (``NUM_THREADS``, the block sum's size in the dot variant).
    elems : int
        Elements per block and group (the per-element shared arrays' count).
    points_per_thread : int
        Points each thread of the points stage evaluates, of one element.
    shared : frozenset of str
        Names (``"B0"``, ``"G1"``) of the matrices copied to shared memory.
    shared_bytes : int
        Static shared memory of one block, at most: the budget it was chosen for.
    used_bytes : int
        Shared memory of one block: the per-element arrays, the shared matrices and the
        dot variant's block-sum scratch (static, or dynamic with ``tensor_cores``).
    tensor_cores : bool
        The products on the fp64 tensor cores (:mod:`.simplex_mma`): ``elems`` a multiple
        of 8, every matrix the products read in dynamic shared memory.
    tiles : int
        With ``tensor_cores``, the 8-column tiles of one warp's unit of work.
    """

    threads: int
    elems: int
    points_per_thread: int
    shared: frozenset
    shared_bytes: int
    used_bytes: int
    tensor_cores: bool = False
    tiles: int = 1


def simplex_shape(op: Any) -> tuple[int, int, int] | None:
    """The ``(dim, P, Q)`` of ``op``'s simplex kernel (``P`` the largest basis), or None.

    An operator fuses here when every interp/grad/weight field has a dense
    (non-tensor) basis of one dim on the same ``Q`` points, at least one is
    interp/grad, and no field but the weights has an oriented restriction.
    """
    for field in op.input_fields + op.output_fields:
        if field.eval_mode is not EVAL_WEIGHT and field.restriction.is_oriented:
            return None
    fields = _basis_fields(op)
    shaped = [f.basis for f in fields if f.eval_mode in _BASIS_MODES]
    if not shaped or any(f.basis.is_tensor for f in fields):
        return None
    first = shaped[0]
    for b in (f.basis for f in fields):
        same = b.num_qpts == first.num_qpts and np.array_equal(b.q_ref, first.q_ref)
        if b.dim != first.dim or not same:
            return None
    return first.dim, max(b.num_nodes for b in shaped), first.num_qpts


def _matrix_sets(op):
    """The distinct dense bases of ``op``'s interp/grad fields, largest first, and
    ``index(basis)``: the set holding that basis's matrices."""
    key = lambda b: (b.num_nodes, b.interp.tobytes(), b.grad.tobytes())  # noqa: E731
    distinct = {}
    for f in _basis_fields(op):
        if f.eval_mode in _BASIS_MODES:
            distinct.setdefault(key(f.basis), f.basis)
    bases = sorted(distinct.values(), key=lambda b: -b.num_nodes)
    keys = [key(b) for b in bases]
    return bases, lambda b: keys.index(key(b))


def _pitch(P):
    """Row length of the matrices read by both stages: odd, so that 32 threads reading
    down a column (stride ``pitch`` doubles) hit distinct shared-memory banks."""
    return P | 1


def host_matrices(op: Any, launch: SimplexLaunch | None = None) -> list[np.ndarray]:
    """The kernel's matrix parameters on the host, in order: per matrix set ``j``,
    ``B`` (Q, pitch), ``G`` (dim, Q, pitch) zero-padded to the odd :func:`_pitch`,
    ``Bt`` (P, Q) and ``Gt`` (dim, P, Q); for a ``launch`` with ``tensor_cores``,
    :func:`.simplex_mma.mma_host_matrices`."""
    bases, _ = _matrix_sets(op)
    if launch is not None and launch.tensor_cores:
        return simplex_mma.mma_host_matrices(bases)
    arrays = []
    for b in bases:
        B, G = b.interp, b.grad  # (Q, P), (dim, Q, P)
        pad = _pitch(b.num_nodes) - b.num_nodes
        arrays += [
            np.ascontiguousarray(np.pad(B, ((0, 0), (0, pad)))),
            np.ascontiguousarray(np.pad(G, ((0, 0), (0, 0), (0, pad)))),
            np.ascontiguousarray(B.T),
            np.ascontiguousarray(G.transpose(0, 2, 1)),
        ]
    return arrays


def _used_matrices(op):
    """``{name: bytes}`` of the padded ``B{j}``/``G{j}`` that ``op``'s fields contract with."""
    index = _matrix_sets(op)[1]
    used = {}
    for f in _basis_fields(op):
        if f.eval_mode in _BASIS_MODES:
            j, b = index(f.basis), f.basis
            rows = b.num_qpts * (b.dim if f.eval_mode is EVAL_GRAD else 1)
            used[f"{'G' if f.eval_mode is EVAL_GRAD else 'B'}{j}"] = 8 * rows * _pitch(b.num_nodes)
    return used


def _element_doubles(op):
    """Shared doubles per element: the gathered nodes of the interp/grad inputs and the
    points of the active outputs."""
    nodes = sum(
        f.basis.num_comp * f.basis.num_nodes for f in op.input_fields if f.eval_mode in _BASIS_MODES
    )
    points = sum(f.size * op.num_qpts for f in op.output_fields if f.is_active)
    return nodes + points


def simplex_launch(
    op: Any, shape: tuple[int, int, int], shared_bytes: int | None = None, **overrides: Any
) -> SimplexLaunch | None:
    """The :class:`SimplexLaunch` of ``op`` (``shape`` from :func:`simplex_shape`), or None
    when one element's shared arrays do not fit ``shared_bytes`` (default
    :data:`SHARED_BYTES`, or :data:`.simplex_mma.MMA_SHARED_BYTES` with ``tensor_cores``).

    ``tensor_cores=True`` (an override) gives the variant of :mod:`.simplex_mma`, with
    its own defaults (:func:`.simplex_mma.mma_launch`: ``threads``, ``elems``, ``tiles``),
    or None when 8 elements and its matrices do not fit.

    Defaults (``overrides``, keywords ``threads``, ``elems``, ``points_per_thread`` and
    ``shared_matrices=False``, replace them): :data:`THREADS` threads; one point per
    thread, or :data:`CONSTANT_POINTS` beside a cell-constant input, or more while ``Q``
    exceeds the threads; as many elements as keep the stages' loops to :data:`ROUNDS`
    rounds (of the points' slots or the nodes of the widest field, whichever is more),
    as fit in shared memory; then the matrices, in parameter order, while they fit.
    """
    if overrides.get("tensor_cores", False):
        budget = simplex_mma.MMA_SHARED_BYTES if shared_bytes is None else shared_bytes
        dot = dot_pairs(op) is not None  # the dot variant's block-sum scratch, as below
        fields = simplex_mma.mma_launch(op, _matrix_sets(op)[1], budget, overrides, dot)
        return None if fields is None else SimplexLaunch(**fields)
    shared_bytes = SHARED_BYTES if shared_bytes is None else shared_bytes
    Q = shape[2]
    threads = overrides.get("threads", THREADS)
    ppt = min(Q, CONSTANT_POINTS) if _on_the_fly(op) else 1
    ppt = overrides.get("points_per_thread", max(ppt, -(-Q // threads)))
    per_elem = 8 * _element_doubles(op)
    free = shared_bytes - (8 * threads if dot_pairs(op) is not None else 0)  # block_sum
    if per_elem > free:
        return None
    fields = [f for f in _basis_fields(op) if f.eval_mode in _BASIS_MODES]
    nodes = max(f.basis.num_comp * f.basis.num_nodes for f in fields)  # the widest field's
    elems = ROUNDS * max(1, threads // max(-(-Q // ppt), nodes))
    elems = overrides.get("elems", min(elems, free // per_elem))
    free -= elems * per_elem
    shared = set()
    for name, size in _used_matrices(op).items():
        if overrides.get("shared_matrices", True) and size <= free:
            shared.add(name)
            free -= size
    used = shared_bytes - free
    return SimplexLaunch(threads, elems, ppt, frozenset(shared), shared_bytes, used)


class _Source:
    """The generated kernel's parameters and stages, built field by field."""

    def __init__(self, op, launch, bases, index):
        self.dim, self.Q = bases[0].dim, op.num_qpts
        self.launch = launch
        self.nodes_of = [b.num_nodes for b in bases]  # matrix set -> P
        self.index = index  # basis -> its matrix set (_matrix_sets)
        self.params = []  # C++ parameter declarations of the fields
        self.shared = []  # declarations of the per-element shared arrays
        self.gather = []  # the gather stage: whole loops
        self.constant = []  # before a thread's points: the cell-constant inputs
        self.point = []  # at a point, before the QFunction body: inputs, output registers
        self.after = []  # at a point, after it: the outputs to shared memory
        self.nodes = []  # the nodes stage: whole loops

    def matrix(self, name, d, q, i, stage):
        """C++ expression of entry ``(d, q, i)`` of matrix ``name`` (``"B0"``: d ignored,
        ``"G1"``) as ``stage`` (``"points"``: consecutive threads, consecutive ``q``;
        ``"nodes"``: consecutive ``i``) reads it: the shared or the coalesced global copy."""
        kind, j = name[0], int(name[1:])
        P, pitch, Q = self.nodes_of[j], _pitch(self.nodes_of[j]), self.Q
        row = q if kind == "B" else f"({d} * {Q} + {q})"
        if name in self.launch.shared:
            return f"s_{name}[{row} * {pitch} + {i}]"
        if stage == "nodes":
            return f"{name}[{row} * {pitch} + {i}]"
        row_t = i if kind == "B" else f"({d} * {P} + {i})"
        return f"{kind}t{j}[{row_t} * {Q} + {q}]"

    def input(self, k, field):
        """Declare input ``k``; returns ``load(row)``, its value at the point ``q``."""
        name = f"in{k}"
        load, address = simplex_mma.point_input(self.params, name, field)
        if load is not None:
            return load
        self._gather(name, field, address)
        if field.basis.is_cell_constant:  # once per thread, at the element's first point
            self.constant += self._evaluate(field, name, f"c_{name}", "0")
            return lambda row: f"c_{name}[{row}]"
        self.point += self._evaluate(field, name, f"r_{name}", "q")
        return lambda row: f"r_{name}[{row}]"

    def _gather(self, name, field, address):
        """The gather loop of input ``name`` into shared ``s_{name}`` (elems, C, P)."""
        C, P = field.basis.num_comp, field.basis.num_nodes
        pointer, idx, base = address("c", P)
        self.shared.append(f"__shared__ double s_{name}[ELEMS * {C * P}];  // (elems, C, P)")
        self.gather += [
            f"for (int t = threadIdx.x; t < ELEMS * {C * P}; t += blockDim.x) {{",
            f"  const int e = t / {C * P}, c = t / {P} % {C}, i = t % {P};",
            "  const index_t elem = first + e;",
            f"  s_{name}[t] = elem < num_elem ? ({pointer})[entry({idx}, {base} + i)] : 0.0;",
            "}",
        ]

    def _evaluate(self, field, name, regs, q):
        """Statements filling ``regs`` (the field's QFunction rows, ``[dim][comp]`` for a
        gradient) at point ``q`` from the gathered nodes of element ``e``."""
        C, P, j = field.basis.num_comp, field.basis.num_nodes, self.index(field.basis)
        grad = field.eval_mode is EVAL_GRAD
        M = f"{'G' if grad else 'B'}{j}"
        node = f"s_{name}[(e * {C} + c) * {P} + i]"
        entry = lambda d: self.matrix(M, d, q, "i", "points")  # noqa: E731
        return simplex_mma.node_contraction(regs, self.dim if grad else 1, C, P, node, entry)

    def output(self, k, field):
        """Declare output ``k`` (registers at a point); returns ``store(row)``."""
        name, rows = f"out{k}", field.size
        store, address = simplex_mma.point_output(self.point, self.params, name, field)
        if address is None:
            return store
        decl = f"__shared__ double s_{name}[ELEMS * {rows} * NUM_QPTS];  // (elems, rows, Q)"
        self.shared.append(decl)
        self.after += [
            f"s_{name}[(e * {rows} + {row}) * NUM_QPTS + q] = r_{name}[{row}];"
            for row in range(rows)
        ]
        if field.eval_mode is EVAL_NONE:
            self.nodes += simplex_mma.scatter_points(rows, address, f"s_{name}[t]")
        else:
            self.nodes += self._transpose(name, field, address)
        return store

    def _transpose(self, name, field, address):
        """The nodes-stage loop: B^T (or G^T) of output ``name``'s points, added to its
        L-vector through the restriction, one thread per (element, component, node)."""
        C, P, j = field.basis.num_comp, field.basis.num_nodes, self.index(field.basis)
        grad = field.eval_mode is EVAL_GRAD
        dims = range(self.dim) if grad else range(1)
        M, rows = f"{'G' if grad else 'B'}{j}", field.size
        pointer, idx, base = address("c", P)
        return [
            f"for (int t = threadIdx.x; t < ELEMS * {C * P}; t += blockDim.x) {{",
            f"  const int e = t / {C * P}, c = t / {P} % {C}, i = t % {P};",
            "  const index_t elem = first + e;",
            "  if (elem < num_elem) {",
            "    double acc = 0.0;",
            "    for (int q = 0; q < NUM_QPTS; q++) {",
            *(
                f"      acc += {self.matrix(M, d, 'q', 'i', 'nodes')} * "
                f"s_{name}[(e * {rows} + {d * C} + c) * NUM_QPTS + q];"
                for d in dims
            ),
            "    }",
            f"    atomicAdd(&({pointer})[entry({idx}, {base} + i)], acc);",
            "  }",
            "}",
        ]

    def shared_matrices(self, bases):
        """Declarations and loads of the matrices in shared memory (``launch.shared``)."""
        lines = []
        for name in sorted(self.launch.shared):
            j = int(name[1:])
            rows = self.Q * (bases[j].dim if name[0] == "G" else 1)
            size = rows * _pitch(bases[j].num_nodes)
            lines += [
                f"__shared__ double s_{name}[{size}];",
                f"for (int t = threadIdx.x; t < {size}; t += blockDim.x) s_{name}[t] = {name}[t];",
            ]
        return lines


def kernel_source(op: Any, launch: SimplexLaunch, dot: bool = False) -> str:
    """CUDA source of ``op``'s fused simplex kernel ``apply`` (needs no device).

    Parameters
    ----------
    op : Operator
        Built on any backend, :func:`simplex_shape` not None; its QFunction must be
        traceable (else :class:`~hofem.qfunction_trace.Untraceable` propagates).
    launch : SimplexLaunch
        From :func:`simplex_launch`.
    dot : bool
        Also write ``dot_partial[block]``, the block's part of ``u . Au``, and return at
        once while ``*status`` is nonzero (as :func:`.operator_fuse.kernel_source`).

    Returns
    -------
    str
        Source that includes ``simplex.cuh`` (compile with ``-I`` this folder).  Its
        parameters: ``num_elem``, per matrix set :func:`host_matrices`, the fields
        (as :class:`~.operator_fuse.FusedOperator` passes them), with ``dot`` the partial
        sums and CG's status.  With ``launch.tensor_cores``,
        :func:`.simplex_mma.mma_kernel_source`'s (``simplex_mma.cuh``, dynamic shared
        memory of ``launch.used_bytes``).

    Raises
    ------
    ValueError
        ``dot`` for an operator whose :func:`~.operator_fuse.dot_pairs` is None.
    """
    bases, index = _matrix_sets(op)
    if launch.tensor_cores:
        return simplex_mma.mma_kernel_source(op, launch, bases, index, dot)
    pairs = dot_pairs(op) if dot else []
    if pairs is None:
        raise ValueError("dot=True needs active inputs paired with the outputs (dot_pairs)")
    src = _Source(op, launch, bases, index)
    loads = [src.input(k, f) for k, f in enumerate(op.input_fields)]
    stores = [src.output(k, f) for k, f in enumerate(op.output_fields)]
    body = _qfunction_stage(op, loads, stores, pairs)
    params = [
        "const int num_elem",
        *(f"const double *__restrict__ {m}{j}" for j in range(len(bases)) for m in _MATRICES),
        *src.params,
        *_dot_params(dot),
    ]
    prologue = src.shared_matrices(bases) + src.shared
    if dot:
        prologue.append("__shared__ double s_buf[NUM_THREADS];  // block_sum's")
    return _kernel_text(launch, op.num_qpts, params, prologue, src, body, dot)


def _kernel_text(launch, Q, params, prologue, src, body, dot):
    """The kernel around its stages: sizes, shared arrays, the loop over element groups
    with the gather, points and nodes stages between block synchronizations."""
    ppt = launch.points_per_thread
    indent = lambda lines, n, sep="": (sep + "\n" + " " * n).join(lines)  # noqa: E731
    return f"""#include "simplex.cuh"

extern "C" __global__ void __launch_bounds__({launch.threads}) apply(
    {indent(params, 4, ",")}) {{
  constexpr int NUM_THREADS = {launch.threads}, ELEMS = {launch.elems}, NUM_QPTS = {Q};
  constexpr int POINTS_PER_THREAD = {ppt}, SLOTS = {-(-Q // ppt)};
  {_DOT_BEGIN if dot else ""}{indent(prologue, 2)}
  for (index_t first = (index_t)blockIdx.x * ELEMS; first < num_elem;
       first += (index_t)gridDim.x * ELEMS) {{
    {indent(src.gather, 4)}
    __syncthreads();  // the nodes gathered (and, first, the matrices loaded)
    for (int t = threadIdx.x; t < ELEMS * SLOTS; t += blockDim.x) {{
      const int e = t / SLOTS, slot = t % SLOTS;
      const index_t elem = first + e;
      const bool qok = elem < num_elem;
      {indent(src.constant, 6)}
#pragma unroll
      for (int k = 0; k < POINTS_PER_THREAD; k++) {{
        const int q = slot + k * SLOTS;
        if (q < NUM_QPTS) {{
          {indent(src.point + body + src.after, 10)}
        }}
      }}
    }}
    __syncthreads();  // the outputs at the points written
    {indent(src.nodes, 4)}
  }}{_dot_end(dot, "threadIdx.x", "blockDim.x")}
}}
"""


@functools.cache
def _compile(code):
    return kernels.raw_module(code).get_function("apply")


class SimplexOperator(FusedOperator):
    """``op``'s fused simplex kernel, generated, compiled and bound to its fields.

    The interface of :class:`~.operator_fuse.FusedOperator`: ``run(u, v)`` adds ``A u``
    to ``v``, :meth:`apply_dot` also writes the block partial sums of ``u . Au``,
    :attr:`num_blocks` entries.

    Parameters
    ----------
    op : Operator
        On a batched CUDA backend, :func:`simplex_shape` not None.
    shape : tuple
        ``(dim, P, Q)`` from :func:`simplex_shape`.
    launch : SimplexLaunch
        From :func:`simplex_launch` (not None).

    Raises
    ------
    ValueError
        With ``launch.tensor_cores``: a device below compute capability 8.0 (no fp64
        ``mma``), or ``launch.used_bytes`` past its opt-in shared memory per block.
    """

    layout = "simplex"

    def __init__(self, op: Any, shape: tuple[int, int, int], launch: SimplexLaunch) -> None:
        self._op, self._shape, self._launch = op, shape, launch
        if launch.tensor_cores:
            self._shared_mem = _check_tensor_cores(launch)  # dynamic, per launch
        # kernel_source's order
        self._matrices = [cupy.asarray(M) for M in host_matrices(op, launch)]
        self._block = (launch.threads, 1, 1)
        self._kernel = self._compile(self._source())
        self._dot_kernel = None  # compiled on the first apply_dot
        self._weights = {  # (Q,) by basis id
            id(f.basis): cupy.asarray(f.basis.q_weight)
            for f in op.input_fields
            if f.eval_mode is EVAL_WEIGHT
        }
        # blocks per SM, by threads and by shared memory
        sm_shared = cupy.cuda.Device().attributes["MaxSharedMemoryPerMultiprocessor"]
        resident = max(1, min(2048 // launch.threads, sm_shared // launch.used_bytes))
        self.num_blocks = self._grid(op.num_elem, launch.elems, resident)

    @property
    def launch(self) -> SimplexLaunch:
        """The thread layout this kernel was built for."""
        return self._launch

    @property
    def shape(self) -> tuple[int, int, int]:
        """The kernel's ``(dim, P, Q)``: its factored rule's ``(dim, P, P)`` where it runs one."""
        return self._shape

    def _compile(self, code):
        kernel = _compile(code)
        if self._launch.tensor_cores:  # the opt-in past 48 KiB, set on each compiled kernel
            kernel.max_dynamic_shared_size_bytes = self._launch.used_bytes
        return kernel

    def _source(self, dot=False):
        return kernel_source(self._op, self._launch, dot)


def _optin_shared_bytes():
    """This device's opt-in shared memory per block, or None where it has no fp64 tensor
    cores (``mma`` on doubles: compute capability 8.0 and later)."""
    device = cupy.cuda.Device()
    if int(device.compute_capability) < 80:
        return None
    return device.attributes["MaxSharedMemoryPerBlockOptin"]


def _check_tensor_cores(launch):
    """``launch.used_bytes`` after checking that the device runs the tensor-core kernel:
    fp64 ``mma`` and that much dynamic shared memory."""
    limit = _optin_shared_bytes()
    if limit is None:
        raise ValueError(
            f"tensor_cores=True needs fp64 tensor cores (compute capability 8.0 or later); "
            f"this device has {cupy.cuda.Device().compute_capability}: use the default "
            f"simplex launch"
        )
    if launch.used_bytes > limit:
        raise ValueError(
            f"the tensor-core simplex kernel needs {launch.used_bytes} bytes of shared memory "
            f"per block, this device allows {limit}: pass simplex_launch(..., tensor_cores=True, "
            f"shared_bytes={limit}) or fewer elems"
        )
    return launch.used_bytes


def simplex_operator(op: Any) -> SimplexOperator | None:
    """``op``'s :class:`SimplexOperator`, or None where it cannot fuse (not all bases
    dense on one set of points, one element's shared arrays too large) or where the
    batched kernels measured faster (``cuda_simplex.json``).

    A scaled mass operator (``c_e B^T W B``, affine cells with the geometry on the fly)
    runs on its factored rule of ``P < Q`` points (:mod:`.simplex_factored`) where that
    fuses.
    The shapes of the table's ``tensor_cores`` run the tensor-core variant where the device
    has fp64 ``mma`` and its shared memory holds the launch; elsewhere they fall back as the
    other shapes do."""
    view = factored_view(op)
    fewer = view is not None and view.num_qpts < op.num_qpts  # else nothing to save
    run = _fused_simplex(view) if fewer else None
    return run if run is not None else _fused_simplex(op)


def _fused_simplex(op):
    """:func:`simplex_operator` of an operator or of its factored view."""
    shape = simplex_shape(op)
    if shape is None:
        return None
    on_the_fly = _on_the_fly(op)
    if on_the_fly and shape in _TUNING.batched_over_tensor_cores_on_the_fly:
        return None
    if shape in _TUNING.tensor_cores:
        launch = _tensor_core_launch(op, shape)
        if launch is not None:
            return SimplexOperator(op, shape, launch)
    if shape in (_TUNING.batched_on_the_fly if on_the_fly else _TUNING.batched_stored):
        return None
    launch = simplex_launch(op, shape)
    return None if launch is None else SimplexOperator(op, shape, launch)


def _tensor_core_launch(op, shape):
    """The tensor-core launch of ``op`` within this device's opt-in shared memory (the
    table's launch for ``shape`` where it fits, else the default), or None where the device
    has no fp64 tensor cores or 8 elements do not fit."""
    limit = _optin_shared_bytes()
    if limit is None:
        return None
    budget = min(limit, simplex_mma.MMA_SHARED_BYTES)
    tuned = tensor_core_overrides(shape)
    launch = simplex_launch(op, shape, budget, tensor_cores=True, **tuned)
    if tuned and (launch is None or launch.used_bytes > budget):
        launch = simplex_launch(op, shape, budget, tensor_cores=True)
    return launch


def tensor_core_overrides(shape: tuple[int, int, int]) -> dict[str, int]:
    """``simplex_launch`` keywords (``threads``, ``tiles``, ``elems``) of the tensor-core
    kernel at ``shape`` where ``cuda_simplex.json`` lists a launch faster than the default."""
    return dict(_TUNING.tensor_core_launches.get(tuple(shape), {}))


def _on_the_fly(op):
    """Whether ``op`` computes its geometry on the fly: an input with a cell-constant basis
    (the vertices of affine cells); the batched tables are per kind of geometry."""
    return any(f.basis.is_cell_constant for f in op.input_fields if f.eval_mode in _BASIS_MODES)
