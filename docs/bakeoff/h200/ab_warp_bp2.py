"""BP2 (the vector mass, 3 components) on /gpu/cuda/gen: one warp per element against the
column-per-thread slab, alternating.

Usage (on a GPU)::

    python docs/bakeoff/h200/ab_warp_bp2.py 3 4 5 6

One line per order: registers, GDOF/s of each and the median of 5 rounds' ratios (5 applies
each, about 1e7 DOFs), the largest relative difference between the outputs, and the layout
gen's rule picks.
"""

import math
import statistics
import sys

import cupy

import hofem as hf
from hofem import meshes
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_warp as ow
from hofem.bakeoff.common import time_events

ceed = hf.Ceed("/gpu/cuda/gen")
for p in [int(a) for a in sys.argv[1:]]:
    n = max(1, math.ceil(((1e7 / 3) ** (1 / 3) - 1) / p))
    space = hf.H1Space(ceed, meshes.box(n), p, num_comp=3)
    op = hf.mass(space, geometry="stored")
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])
    runs, regs, outs = {}, {}, {}
    for name in ("slab", "warp"):
        fused = of.FusedOperator(op, shape) if name == "slab" else ow.WarpFusedOperator(op, shape)
        out = cupy.zeros_like(u)

        def run(fused=fused, out=out, u=u):
            out[...] = 0.0
            fused(u, out)

        run()
        runs[name], regs[name], outs[name] = run, fused._kernel.num_regs, out
    d = float(abs(outs["warp"] - outs["slab"]).max() / abs(outs["slab"]).max())
    times = {k: [] for k in runs}
    for _ in range(5):
        for k, r in runs.items():
            times[k].append(time_events(r, 5, 1))
    ratio = statistics.median(a / b for a, b in zip(times["slab"], times["warp"], strict=True))
    rates = {k: u.size / statistics.median(t) / 1e9 for k, t in times.items()}
    print(
        f"bp2 p={p} dofs={u.size} regs {regs} slab {rates['slab']:.1f} warp {rates['warp']:.1f} "
        f"warp/slab {ratio:.2f} diff {d:.1e} layout {ceed.backend._fused_operator(op).layout}",
        flush=True,
    )
