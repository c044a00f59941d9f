"""Warps per block of gen's one-warp-per-element kernels at equal registers per SM: the
tables' 4 warps (``operator_warp.WARPS``) against 2 and 8, with ``__launch_bounds__`` asking
for twice and half the blocks.

Usage (on a GPU)::

    python docs/bakeoff/h200/ab_warps.py diffusion:on_the_fly:5 mass:stored:6 ...

Each case is ``form:geometry:p`` on the structured box of about 1e7 DOFs.  Prints GDOF/s and
the median of 5 alternating rounds' ratios over 4 warps (5 applies each); every output is
checked against the 4-warp kernel's.
"""

import math
import statistics
import sys

import cupy

import hofem as hf
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_warp as ow
from hofem.bakeoff.common import time_events
from hofem.bakeoff.structured import box_operator

TABLES = ("WARPS", "WARP_SHAPES", "WARP_GRAD_SHAPES", "WARP_GRAD_STORED_SHAPES")


def build(op, shape, warps, blocks):
    """The warp kernel with ``warps`` per block and ``blocks`` per SM (tables restored)."""
    saved = [getattr(ow, name) for name in TABLES]
    ow.WARPS = warps
    for name in TABLES[1:]:
        setattr(ow, name, {tuple(shape): blocks})
    try:
        return ow.WarpFusedOperator(op, shape)
    finally:
        for name, value in zip(TABLES, saved, strict=True):
            setattr(ow, name, value)


def case(ceed, form, geometry, p, dofs=1e7, rounds=5):
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    op, _ = box_operator(ceed, form, n, p, geometry=geometry)
    shape = of.fusable_shape(op, 16)
    blocks = ow.warp_shapes(op).get(tuple(shape), ow.MIN_BLOCKS)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    variants = ((4, blocks), (2, 2 * blocks), (8, max(1, blocks // 2)))
    runs, outputs = {}, {}
    for warps, per_sm in variants:
        fused = build(op, shape, warps, per_sm)
        out = cupy.zeros_like(u)

        def run(fused=fused, out=out):
            out[...] = 0.0
            fused(u, out)

        run()
        runs[warps, per_sm], outputs[warps, per_sm] = run, out
    first = outputs[variants[0]]
    for key, out in outputs.items():
        if float(abs(out - first).max() / abs(first).max()) > 1e-12:
            raise AssertionError(f"{form} p={p} {key}: differs from 4 warps")
    times = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            times[key].append(time_events(run, 5, 1))
    base = times[variants[0]]
    cells = []
    for (warps, per_sm), t in times.items():
        ratio = statistics.median(b / x for b, x in zip(base, t, strict=True))
        rate = u.size / statistics.median(t) / 1e9
        cells.append(f"{warps} warps, {per_sm} blocks: {rate:.1f} ({ratio:.2f})")
    return " | ".join(cells)


def main(argv):
    ceed = hf.Ceed("/gpu/cuda/gen")
    for spec in argv:
        form, geometry, p = spec.split(":")
        print(spec, case(ceed, form, geometry, int(p)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
