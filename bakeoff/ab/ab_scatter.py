"""How far fewer global atomics take the memory pattern: element groups summed in shared memory.

gen's element-by-element kernels add each element node's value to the L-vector with one
fp64 atomic add per node and component; at BP6 p = 2 that is 3.4 adds a DOF and the bare
round trip (``ab_round_trip``) runs at a fifth of the gather's rate.  This script times the
round trip ``v += G^T G u`` in the ways a kernel could do it:

- ``atomic``: one thread per element node, an atomic add per node (ab_round_trip's);
- ``atomic, bricks``: the same with the elements taken in Morton order of the box's cells
  (a group of consecutive elements is then a brick of cells);
- ``store``: plain stores instead of the atomic adds (a wrong result: the cost of the
  pattern's memory traffic without the atomic unit);
- ``group E``, ``group E, bricks``: one block per group of E consecutive elements; the
  group's distinct L-vector entries (``uniq``) loaded once into shared memory, each element
  node reading its entry's slot (``slot``, 16 bits) and adding into a shared accumulator,
  then one global atomic add per distinct entry and component.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_scatter --form vector-diffusion-gll 2 4
    python -m bakeoff.ab.ab_scatter --form mass --geometry on_the_fly 8

Prints one line per order: GDOF/s of each variant (median of 5 alternating rounds, 5 calls
each, about 1e7 DOFs), the distinct entries per element node of the groups, and each
variant's rate over ``atomic``.  Every variant but ``store`` is checked against ``G^T G u``.
"""

import math
import statistics

import cupy
import numpy as np

import hofem as hf
from bakeoff.ab.ab_round_trip import run_orders
from bakeoff.ab.ab_warp import operator
from bakeoff.common import alternating_times

_SOURCE = r"""
extern "C" __global__ void node_trip(const long long num_nodes, const int nodes, const int num_comp,
                                     const long long stride, const int *perm, const INDEX_T *idx,
                                     const double *u, double *v, const int store) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_nodes;
       i += (long long)gridDim.x * blockDim.x) {
    const long long e = perm[i / nodes];
    const long long l = idx[e * nodes + i % nodes];
    for (int c = 0; c < num_comp; c++) {
      const double x = u[l + c * stride];
      if (store) v[l + c * stride] = x; else atomicAdd(v + l + c * stride, x);
    }
  }
}
extern "C" __global__ void group_trip(const int group_nodes, const long long num_nodes,
                                      const int num_comp, const long long stride,
                                      const int *uptr, const INDEX_T *uniq,
                                      const unsigned short *slot, const double *u, double *v) {
  extern __shared__ double buf[];  // (2, num_comp, nu): the group's u entries, then sums
  const int g = blockIdx.x, u0 = uptr[g], nu = uptr[g + 1] - u0;
  double *acc = buf + num_comp * nu;
  for (int j = threadIdx.x; j < nu; j += blockDim.x) {
    const long long l = uniq[u0 + j];
    for (int c = 0; c < num_comp; c++) {
      buf[j + c * nu] = u[l + c * stride];
      acc[j + c * nu] = 0.0;
    }
  }
  __syncthreads();
  const long long first = (long long)g * group_nodes;
  const int count = (int)min((long long)group_nodes, num_nodes - first);
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int s = slot[first + i];
    for (int c = 0; c < num_comp; c++) atomicAdd(acc + s + c * nu, buf[s + c * nu]);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < nu; j += blockDim.x) {
    const long long l = uniq[u0 + j];
    for (int c = 0; c < num_comp; c++) atomicAdd(v + l + c * stride, acc[j + c * nu]);
  }
}
"""
THREADS = 256
GROUPS = (16, 32, 64)
MAX_SHARED = 96 * 1024  # bytes a block: two blocks an SM at least


def morton(num_elem):
    """The elements of a box of ``n^3`` lexicographic cells in Morton order of (x, y, z)."""
    n = round(num_elem ** (1 / 3))
    assert n**3 == num_elem, "a cube of cells"
    e = np.arange(num_elem)
    x, y, z = e % n, (e // n) % n, e // (n * n)
    key = np.zeros(num_elem, dtype=np.int64)
    for bit in range(int(n).bit_length()):
        for k, c in enumerate((x, y, z)):
            key |= ((c >> bit) & 1).astype(np.int64) << (3 * bit + k)
    return np.argsort(key, kind="stable").astype(np.int32)


def group_tables(indices, perm, group):
    """``(uptr, uniq, slot)`` of groups of ``group`` consecutive elements of ``perm``:
    group g's distinct entries ``uniq[uptr[g]:uptr[g + 1]]``, element node i's slot among
    its group's (``indices``: (num_elem, nodes))."""
    ordered = indices[perm]  # (num_elem, nodes)
    num_elem, nodes = ordered.shape
    span = int(indices.max()) + 1  # keys group-major, then the entry
    g = np.repeat(np.arange(math.ceil(num_elem / group)), group * nodes)[: ordered.size]
    distinct, inverse = np.unique(g.astype(np.int64) * span + ordered.ravel(), return_inverse=True)
    uptr = np.searchsorted(distinct // span, np.arange(g[-1] + 2))
    slot = inverse - uptr[g]
    assert slot.max() < 2**16, "slots fit 16 bits"
    return uptr.astype(np.int32), (distinct % span).astype(indices.dtype), slot.astype(np.uint16)


def runs_for(op, u):
    """``{variant: run}`` and ``{variant: output}`` of the round trip on ``op``'s active
    restriction, and the distinct entries per element node of each group variant (those
    whose accumulators pass :data:`MAX_SHARED` left out)."""
    restriction = op.active_restriction(False)
    idx = restriction.backend_data.indices  # (num_elem * nodes,)
    index_t = "int" if idx.dtype == np.int32 else "long long"
    module = cupy.RawModule(code=_SOURCE, options=("-DINDEX_T=" + index_t,))
    num_elem = restriction.num_elem
    nodes = idx.size // num_elem
    comp, stride = np.int32(restriction.num_comp), np.int64(restriction.component_stride)
    orders = {"": np.arange(num_elem, dtype=np.int32), ", bricks": morton(num_elem)}
    runs, outs, sharing = {}, {}, {}
    node_trip = module.get_function("node_trip")
    grid = 8 * cupy.cuda.Device().attributes["MultiProcessorCount"] * 2048 // THREADS
    for name, perm, store in (("atomic", orders[""], 0), ("atomic, bricks", orders[", bricks"], 0),
                              ("store", orders[""], 1)):  # fmt: skip
        outs[name] = cupy.zeros_like(u)
        args = (np.int64(idx.size), np.int32(nodes), comp, stride, cupy.asarray(perm), idx, u)
        runs[name] = _launcher(node_trip, grid, (*args, outs[name], np.int32(store)), outs[name], 0)
    group_trip = module.get_function("group_trip")
    group_trip.max_dynamic_shared_size_bytes = MAX_SHARED  # one function: the largest
    host_idx = cupy.asnumpy(idx).reshape(num_elem, nodes)
    for group in GROUPS:
        for tag, perm in orders.items():
            uptr, uniq, slot = group_tables(host_idx, perm, group)
            shared = 2 * int(comp) * int(np.diff(uptr).max()) * 8  # the u entries and sums
            if shared > MAX_SHARED:
                continue
            name = f"group {group}{tag}"
            sharing[name], outs[name] = uniq.size / idx.size, cupy.zeros_like(u)
            args = (np.int32(group * nodes), np.int64(idx.size), comp, stride)
            args += (cupy.asarray(uptr), cupy.asarray(uniq), cupy.asarray(slot), u, outs[name])
            runs[name] = _launcher(group_trip, uptr.size - 1, args, outs[name], shared)
    return runs, outs, sharing


def _launcher(kernel, grid, args, out, shared):
    def run():
        out[...] = 0.0
        kernel((grid,), (THREADS,), args, shared_mem=shared)

    return run


def case(ceed, form, geometry, p, rounds=5):
    op = operator(ceed, form, geometry, p)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, outs, sharing = runs_for(op, u)
    restriction = op.active_restriction(False)
    expected = restriction.apply(restriction.apply(u), hf.TRANSPOSE)  # (l_size,)
    for name, run in runs.items():
        run()
        if name != "store":
            err = float(abs(outs[name] - expected).max())
            assert err < 1e-10 * float(abs(expected).max()), f"{name}: {err:.1e} from G^T G u"
    times = alternating_times(runs, rounds)
    base = times["atomic"]
    cells = [f"p={p}"]
    for name, t in times.items():
        ratio = statistics.median(a / b for a, b in zip(base, t, strict=True))
        share = f" ({sharing[name]:.2f} distinct)" if name in sharing else ""
        cells.append(f"{name} {u.size / statistics.median(t) / 1e9:.1f}{share} x{ratio:.2f}")
    return " | ".join(cells)


if __name__ == "__main__":
    run_orders(__doc__.splitlines()[0], case, default_form="vector-diffusion-gll")
