"""Side by side on /gpu/cuda/gen: one warp per element (``operator_warp``) against the
column-per-thread slab (``operator_fuse``), for BP1 or BP3.

Usage (on a GPU)::

    python docs/bakeoff/h200/ab_warp.py 3 4 5 6
    python docs/bakeoff/h200/ab_warp.py --form diffusion --geometry on_the_fly 2 3 4 5 6

BP1 (``--form mass``, the default) variants: ``slab``, then the warp kernel with
``__launch_bounds__`` asking registers for 4 to 8 blocks of 4 warps per SM (``mb4`` ..
``mb8``).  BP3 (``--form diffusion``): ``slab`` and the warp kernel at 3 to 6 blocks per
SM, with stored q-data or the geometry on the
fly (``--geometry``; on the box's affine cells the Jacobian once per element).  Prints one
line per order: registers, GDOF/s and the median of 5 alternating rounds' ratios over the
slab (5 applies each, 1e7 DOFs); every output is checked against the slab's first.
"""

import argparse
import math
import statistics

import cupy

import hofem as hf
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_warp as ow
from hofem.bakeoff.common import time_events
from hofem.bakeoff.structured import box_operator

VARIANTS = {
    "mass": {"slab": None} | {f"mb{mb}": (ow.PREFETCH_SIZE, mb) for mb in (4, 5, 6, 7, 8)},
    "diffusion": {"slab": None} | {f"mb{mb}": (ow.PREFETCH_SIZE, mb) for mb in (3, 4, 5, 6)},
}


def build(op, shape, variant):
    """The fused operator of one variant (the module's constants restored after)."""
    if variant is None:
        return of.FusedOperator(op, shape)
    names = "PREFETCH_SIZE", "WARP_SHAPES", "WARP_GRAD_SHAPES", "WARP_GRAD_STORED_SHAPES"
    saved = [getattr(ow, name) for name in names]
    ow.PREFETCH_SIZE = variant[0]
    for name in names[1:]:
        setattr(ow, name, {tuple(shape): variant[1]})
    try:
        return ow.WarpFusedOperator(op, shape)
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(ow, name, value)


def case(ceed, form, geometry, p, dofs=1e7, rounds=5):
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    op, _ = box_operator(ceed, form, n, p, geometry=geometry)
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, regs, outputs = {}, {}, {}
    for name, variant in VARIANTS[form].items():
        fused = build(op, shape, variant)
        out = cupy.zeros_like(u)

        def run(fused=fused, out=out):
            out[...] = 0.0
            fused(u, out)

        run()
        runs[name], regs[name], outputs[name] = run, fused._kernel.num_regs, out
    for name, out in outputs.items():
        diff = float(abs(out - outputs["slab"]).max() / abs(outputs["slab"]).max())
        if diff > 1e-12:
            raise AssertionError(f"p={p} {name}: {diff:.1e} from the slab")
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(time_events(run, 5, 1))
    cells = [f"p={p}"]
    for name in runs:
        rate = u.size / statistics.median(times[name]) / 1e9
        ratio = statistics.median(s / t for s, t in zip(times["slab"], times[name], strict=True))
        cells.append(f"{name} {regs[name]}r {rate:.1f} ({ratio:.2f})")
    return " | ".join(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=sorted(VARIANTS), default="mass")
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="stored")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        print(args.form, args.geometry, case(ceed, args.form, args.geometry, p), flush=True)


if __name__ == "__main__":
    main()
