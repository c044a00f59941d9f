"""Element diagonals of a tensor-product level in one generated CUDA kernel.

The CUDA kernel of :meth:`hofem.backends.contract.Backend.tensor_element_diagonal`:
``out[e, j] += sum_k sum_q q[e, k, q] prod_d F_d[k][q_d, j_d]`` for a chunk of elements.
The reference implementation (:func:`hofem.entry_contraction.contract_entries`) is
``dim`` batched matmuls of tiny matrices a chunk, whose launches and poorly filled tiles
cost far more than reading the chunk's q-data; here a block loads the factors
``F_d[k]`` into shared memory once, then for each of its elements and each entry ``k``
stages the entry's points through shared memory and contracts them direction by direction
(fastest first, as the slab kernels of ``basis_tensor.cuh``), ping-ponging between two
shared buffers; the last direction adds into registers, which sum the entries and are
added to ``out`` once per element.  The q values are read once, coalesced, each entry's
into registers while the block contracts the previous one (their latency hidden within
the block, not only by other resident blocks).

Stage ``d`` maps ``Q_1d**(dim-d) K**d`` values (the directions ``>= d`` still at points,
the faster ones at nodes) to ``Q_1d**(dim-1-d) K**(d+1)``, one output per thread:
``out[outer, j, inner] = sum_i F_d[k][i, j] in[outer, i, inner]``, ``inner`` over the
``K**d`` contracted directions.

The source is generated per ``(dim, K, Q_1d, size)`` and launch (:func:`diagonal_source`),
self-contained, and compiled once per source (:func:`~.kernels.raw_module`, CuPy's cache).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .device import cupy

if TYPE_CHECKING:
    from ...typing import Array

__all__ = ["DiagonalLaunch", "add_element_diagonal", "diagonal_launch", "diagonal_source"]

# threads per block; the per-element stages have Q_1d**dim .. K**dim outputs, a few hundred
# at the orders where the level's diagonal is sum-factorized (3D, p >= 3)
DIAGONAL_THREADS = 256
# static shared memory of a block (the factors and each element's two buffers): CUDA's
# limit without the opt-in; a larger shape takes the batched products instead
MAX_SHARED_BYTES = 48 * 1024
# blocks per SM a launch is sized for (at most; each block loops over elements): the factors
# are loaded once per block, so few blocks, each doing many elements, read them least
BLOCKS_PER_SM = 8


@dataclass(frozen=True)
class DiagonalLaunch:
    """One generated kernel's shape and thread layout.

    Attributes
    ----------
    dim, K, Q_1d, size : int
        Directions, nodes and points per direction, entries of the pointwise matrix.
    threads : int
        Threads per block.
    elems : int
        Elements each block contracts together.
    """

    dim: int
    K: int
    Q_1d: int
    size: int
    threads: int = DIAGONAL_THREADS
    elems: int = 1

    def stage_sizes(self) -> list[int]:
        """Values after each stage: ``Q_1d**(dim-1-d) K**(d+1)``, ``d = 0 .. dim - 1``."""
        return [self.Q_1d ** (self.dim - 1 - d) * self.K ** (d + 1) for d in range(self.dim)]

    def buffers(self) -> tuple[int, int]:
        """Doubles per element of the two shared buffers: ``a`` holds the points and the odd
        stages' outputs, ``b`` the even stages' (the last stage's are in registers)."""
        held = [self.Q_1d**self.dim, *self.stage_sizes()[:-1]]
        return max(held[0::2]), max(held[1::2], default=0)

    def shared_bytes(self) -> int:
        """Static shared memory of a block: the factors, and ``elems`` elements' buffers."""
        factors = self.dim * self.size * self.Q_1d * self.K
        return 8 * (factors + self.elems * sum(self.buffers()))


def diagonal_launch(dim: int, K: int, Q_1d: int, size: int) -> DiagonalLaunch | None:
    """The launch of the kernel for one shape: ``DIAGONAL_THREADS`` threads, as many elements
    per block as they have points for (at least one) within :data:`MAX_SHARED_BYTES`; None
    where one element does not fit."""
    elems = max(1, DIAGONAL_THREADS // max(Q_1d, K) ** dim)
    while elems:
        launch = DiagonalLaunch(dim, K, Q_1d, size, DIAGONAL_THREADS, elems)
        if launch.shared_bytes() <= MAX_SHARED_BYTES:
            return launch
        elems -= 1
    return None


def _load_factors(launch):
    """Lines filling ``s_F (dim, size, Q_1d, K)`` from ``F0 (size, Q_1d, K)`` and
    ``Ft{d} (size, K, Q_1d)`` (``F_d`` transposed)."""
    lines = ["for (int t = threadIdx.x; t < FACTOR; t += NUM_THREADS) {", "  s_F[t] = F0[t];"]
    if launch.dim > 1:
        lines.append("  const int k = t / (Q_1D * K_1D), i = t / K_1D % Q_1D, j = t % K_1D;")
    for d in range(1, launch.dim):
        lines.append(f"  s_F[{d} * FACTOR + t] = Ft{d}[(k * K_1D + j) * Q_1D + i];")
    return [*lines, "}"]


def _stage(launch, d):
    """Lines of stage ``d``: its outputs one per thread, into the other buffer or, last,
    into the registers ``acc``."""
    src, src_size = ("s_a", "A_SIZE") if d % 2 == 0 else ("s_b", "B_SIZE")
    dst, dst_size = ("s_b", "B_SIZE") if d % 2 == 0 else ("s_a", "A_SIZE")
    out_size, inner = launch.stage_sizes()[d], launch.K**d
    sum_lines = [
        f"const int e = t / {out_size}, o = t % {out_size};",
        f"const int inner = o % {inner}, j = o / {inner} % K_1D, outer = o / ({inner} * K_1D);",
        f"const double *in = {src} + e * {src_size} + outer * (Q_1D * {inner}) + inner;",
        f"const double *F = s_F + ({d} * SIZE + k) * (Q_1D * K_1D) + j;",
        "double sum = 0.0;",
        "#pragma unroll",
        f"for (int i = 0; i < Q_1D; i++) sum += F[i * K_1D] * in[i * {inner}];",
    ]
    if d < launch.dim - 1:
        return [
            f"for (int t = threadIdx.x; t < elems * {out_size}; t += NUM_THREADS) {{",
            *(f"  {line}" for line in sum_lines),
            f"  {dst}[e * {dst_size} + o] = sum;",
            "}",
            "__syncthreads();  // this stage's outputs written",
        ]
    return [
        "#pragma unroll",
        "for (int r = 0; r < OWN; r++) {",
        "  const int t = threadIdx.x + r * NUM_THREADS;",
        "  if (t < elems * NUM_NODES) {",
        *(f"    {line}" for line in sum_lines),
        "    acc[r] += sum;",
        "  }",
        "}",
    ]


def _points(assign, k):
    """Lines loading each thread's points of entry ``k`` (an expression) of the group's
    elements from ``q``: ``assign`` (e.g. ``"next[r] = "``) followed by the value."""
    at = "((first + t / NUM_QPTS) * SIZE + {k}) * NUM_QPTS + t % NUM_QPTS"
    return [
        "#pragma unroll",
        "for (int r = 0; r < LOADS; r++) {",
        "  const int t = threadIdx.x + r * NUM_THREADS;",
        f"  if (t < elems * NUM_QPTS) {assign}q[{at.format(k=k)}];",
        "}",
    ]


def _params(dim):
    """The kernel's parameter declarations."""
    return [
        "const long long num_elem",
        "const double *__restrict__ q",
        "const double *__restrict__ F0",
        *(f"const double *__restrict__ Ft{d}" for d in range(1, dim)),
        "double *__restrict__ out",
    ]


def diagonal_source(launch: DiagonalLaunch) -> str:
    """CUDA source of the kernel ``apply`` of ``launch`` (needs no device).

    Its parameters: ``num_elem`` (of the chunk), ``q (num_elem, size, Q_1d**dim)``, ``F0
    (size, Q_1d, K)``, ``Ft1 .. Ft{dim-1} (size, K, Q_1d)`` and ``out (num_elem, K**dim)``,
    as :meth:`~hofem.backends.contract.Backend.tensor_element_diagonal` takes them; launch
    it with ``launch.threads`` threads on any number of blocks (each loops over groups of
    ``launch.elems`` elements).
    """
    a, b = launch.buffers()
    num_nodes, num_qpts = launch.K**launch.dim, launch.Q_1d**launch.dim
    indent = lambda lines, n: ("\n" + " " * n).join(lines)  # noqa: E731
    shared = [
        f"constexpr int A_SIZE = {a};  // doubles per element of s_a",
        "__shared__ double s_F[DIM * FACTOR];  // (dim, size, Q_1d, K): F_d[k][i][j]",
        "__shared__ double s_a[ELEMS * A_SIZE];  // the points; the odd stages' outputs",
    ]
    if b:  # none in 1D: the only stage is the last
        shared.insert(1, f"constexpr int B_SIZE = {b};  // doubles per element of s_b")
        shared.append("__shared__ double s_b[ELEMS * B_SIZE];  // the even stages' outputs")
    stages = [line for d in range(launch.dim) for line in _stage(launch, d)]
    return f"""extern "C" __global__ void __launch_bounds__({launch.threads}) apply(
    {indent(_params(launch.dim), 4).replace(chr(10), "," + chr(10))}) {{
  constexpr int NUM_THREADS = {launch.threads}, ELEMS = {launch.elems}, DIM = {launch.dim};
  constexpr int SIZE = {launch.size}, Q_1D = {launch.Q_1d}, K_1D = {launch.K};
  constexpr int NUM_QPTS = {num_qpts}, NUM_NODES = {num_nodes}, FACTOR = SIZE * Q_1D * K_1D;
  constexpr int OWN = (ELEMS * NUM_NODES + NUM_THREADS - 1) / NUM_THREADS;  // outputs/thread
  constexpr int LOADS = (ELEMS * NUM_QPTS + NUM_THREADS - 1) / NUM_THREADS;  // points/thread
  {indent(shared, 2)}
  {indent(_load_factors(launch), 2)}
  for (long long first = (long long)blockIdx.x * ELEMS; first < num_elem;
       first += (long long)gridDim.x * ELEMS) {{
    const long long rest = num_elem - first;  // elements from first on
    const int elems = rest < ELEMS ? (int)rest : ELEMS;
    double acc[OWN];  // this thread's outputs t = threadIdx.x + r NUM_THREADS, summed over k
#pragma unroll
    for (int r = 0; r < OWN; r++) acc[r] = 0.0;
    double next[LOADS];  // points t = threadIdx.x + r NUM_THREADS of the next entry
    {indent(_points("next[r] = ", "0"), 4)}
    for (int k = 0; k < SIZE; k++) {{
      __syncthreads();  // the factors loaded; the previous entry's last stage read s_a
#pragma unroll
      for (int r = 0; r < LOADS; r++) {{
        const int t = threadIdx.x + r * NUM_THREADS;
        if (t < elems * NUM_QPTS) s_a[t / NUM_QPTS * A_SIZE + t % NUM_QPTS] = next[r];
      }}
      __syncthreads();  // the entry's points in s_a
      if (k + 1 < SIZE) {{  // the next entry's loads, in flight while this one is contracted
        {indent(_points("next[r] = ", "k + 1"), 8)}
      }}
      {indent(stages, 6)}
    }}
#pragma unroll
    for (int r = 0; r < OWN; r++) {{
      const int t = threadIdx.x + r * NUM_THREADS;
      if (t < elems * NUM_NODES) out[first * NUM_NODES + t] += acc[r];
    }}
  }}
}}
"""


@functools.cache
def _kernel(launch):
    """The compiled kernel of ``launch`` (NVRTC, also cached on disk by CuPy)."""
    return kernels.raw_module(diagonal_source(launch)).get_function("apply")


@functools.cache
def _sm_count(device_id):
    """Streaming multiprocessors of device ``device_id``."""
    return cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]


def add_element_diagonal(
    launch: DiagonalLaunch, q: Array, left: list, right: Array, out: Array
) -> None:
    """``out += `` the element diagonals of ``q``, by the kernel of ``launch`` (compiled on
    first use), on the current stream.

    Parameters
    ----------
    launch : DiagonalLaunch
        Of the arrays' shape (:func:`diagonal_launch`).
    q : cupy array (n, size, Q_1d**dim)
    left : list of dim - 1 cupy arrays (size, K, Q_1d)
    right : cupy array (size, Q_1d, K)
    out : cupy array (n, K**dim), C-contiguous float64, updated in place

    Raises
    ------
    ValueError
        ``out`` not a C-contiguous float64 array of shape ``(n, K**dim)``.
    """
    n = q.shape[0]
    if out.shape != (n, launch.K**launch.dim) or out.dtype != np.float64:
        raise ValueError(
            f"out must be float64 of shape {(n, launch.K**launch.dim)}, got {out.shape}"
        )
    if not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous (a slice of rows of the element diagonals)")
    if n == 0:
        return
    factors = [cupy.ascontiguousarray(f, dtype=np.float64) for f in (right, *left)]
    q = cupy.ascontiguousarray(q, dtype=np.float64)  # (n, size, Q_1d**dim)
    blocks = min(-(-n // launch.elems), BLOCKS_PER_SM * _sm_count(cupy.cuda.Device().id))
    _kernel(launch)((blocks,), (launch.threads,), (np.int64(n), q, *factors, out))
