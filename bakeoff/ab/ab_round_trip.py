"""The memory pattern's rate beside gen's operator: ``v += G^T G u`` alone.

Every element-by-element operator of gen reads each element's nodes through the
restriction's indices and adds its result back with one atomic add per node and component.
This script times that pattern with nothing in between (the round trip: ``v[idx] += u[idx]``
per element node, one thread per node, the components in turn, consecutive threads on an
element's consecutive nodes) and, to split its cost, the gather alone (the sum of the
element's values kept in a register, one store per thread); then gen's own kernel of the
same operator (the table's choice, apply and CG variant).  The ratios say how close the
fused kernel runs to what its indices and atomics cost on this machine: the floor below
which a faster basis or QFunction stage no longer helps.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_round_trip --form vector-diffusion-gll 2 4 8
    python -m bakeoff.ab.ab_round_trip --form mass 7 8

Prints one line per order: GDOF/s of the gather, the round trip, gen's apply and its CG
kernel, and gen's apply over the round trip (median of 5 alternating rounds' ratios, 5
calls each, about 1e7 DOFs).  The round trip is checked against ``G^T G u`` by the
restriction's own kernels.
"""

import argparse
import statistics

import cupy
import numpy as np

import hofem as hf
from bakeoff.ab.ab_warp import FORMS, operator
from bakeoff.common import alternating_times, dot_args

_SOURCE = r"""
template <typename I>
__device__ void pattern(const long long num_nodes, const int num_comp, const long long stride,
                        const I *__restrict__ idx, const double *__restrict__ u,
                        double *__restrict__ v, const bool scatter) {
  double sum = 0.0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < num_nodes;
       i += (long long)gridDim.x * blockDim.x) {
    const long long l = idx[i];
    for (int c = 0; c < num_comp; c++) {
      const double x = u[l + c * stride];
      if (scatter) atomicAdd(v + l + c * stride, x); else sum += x;
    }
  }
  if (!scatter) v[(long long)blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
extern "C" __global__ void round_trip(const long long n, const int c, const long long s,
                                      const INDEX_T *idx, const double *u, double *v) {
  pattern(n, c, s, idx, u, v, true);
}
extern "C" __global__ void gather_only(const long long n, const int c, const long long s,
                                       const INDEX_T *idx, const double *u, double *v) {
  pattern(n, c, s, idx, u, v, false);
}
"""
THREADS = 256


def pattern_runs(op, u):
    """``{"gather": run, "round trip": run}`` on ``op``'s active restriction, and the round
    trip's output buffer."""
    restriction = op.active_restriction(False)
    data = restriction.backend_data
    index_t = "int" if data.indices.dtype == np.int32 else "long long"
    module = cupy.RawModule(code=_SOURCE, options=("-DINDEX_T=" + index_t,))
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    grid = 8 * sms * 2048 // THREADS
    num_nodes = np.int64(data.indices.size)
    common = (num_nodes, np.int32(restriction.num_comp), np.int64(restriction.component_stride))
    out, partial = cupy.zeros_like(u), cupy.empty(grid * THREADS)

    def trip():
        out[...] = 0.0
        module.get_function("round_trip")((grid,), (THREADS,), (*common, data.indices, u, out))

    def gather():
        module.get_function("gather_only")((grid,), (THREADS,), (*common, data.indices, u, partial))

    trip()
    expected = restriction.apply(restriction.apply(u), hf.TRANSPOSE)  # (l_size,)
    assert cupy.allclose(out, expected, rtol=1e-12, atol=1e-12), "round trip != G^T G u"
    return {"gather": gather, "round trip": trip}


def case(ceed, form, geometry, p, rounds=5):
    op = operator(ceed, form, geometry, p)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs = pattern_runs(op, u)
    fused = ceed.backend._fused_operator(op)
    v, args = cupy.zeros_like(u), dot_args(fused, u)
    runs["apply"] = lambda: fused(u, v)
    runs["CG kernel"] = lambda: fused.apply_dot(*args)
    times = alternating_times(runs, rounds)
    cells = [f"p={p} {fused.layout}"]
    for name, t in times.items():
        cells.append(f"{name} {u.size / statistics.median(t) / 1e9:.1f}")
    pairs = zip(times["round trip"], times["apply"], strict=True)
    ratio = statistics.median(a / b for a, b in pairs)
    cells.append(f"apply/round trip {ratio:.2f}")
    return " | ".join(cells)


def run_orders(description, case_at, default_form="mass"):
    """The command line of this script and ``ab_scatter`` (``--form``, ``--geometry``,
    orders): a header, then ``case_at(ceed, form, geometry, p)``'s line for each order."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--form", choices=FORMS, default=default_form)
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="on_the_fly")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    print(f"{args.form}, {args.geometry} (GDOF/s)")
    for p in args.orders:
        print(case_at(ceed, args.form, args.geometry, p), flush=True)


if __name__ == "__main__":
    run_orders(__doc__.splitlines()[0], case)
