"""Side by side on /gpu/cuda/gen: stored q-data against the geometry on the fly, for the
apply and for CG, for BP1, BP2 or BP3 on the box's affine cells.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_geometry --form vector-mass 4 5 6

``--form``: ``mass`` (BP1, the default), ``vector-mass`` (BP2, three components) or
``diffusion`` (BP3).  Prints one line per order: each geometry's GDOF/s (apply) and
GDOF x iterations / s (a 50-iteration CG, rtol 0, the device loop's default checks), and the
median over 7 alternating rounds of the per-round ratios on the fly / stored; the two
operators' outputs are checked against each other.
"""

import argparse
import statistics

import cupy

import hofem as hf
from bakeoff.ab.ab_warp import FORMS, operator
from bakeoff.common import time_events

GEOMETRIES = ("stored", "on_the_fly")
CG_ITERS = 50


def case(ceed, form, p, rounds=7):
    ops = {g: operator(ceed, form, g, p) for g in GEOMETRIES}
    u = cupy.random.default_rng(0).standard_normal(ops["stored"].shape[1])  # (l_size,)
    outs = {g: op(u) for g, op in ops.items()}
    diff = float(abs(outs["on_the_fly"] - outs["stored"]).max() / abs(outs["stored"]).max())
    if diff > 1e-11:  # max norm, random input: 1-2e-12 at p = 7 (cancellation)
        raise AssertionError(f"p={p}: on the fly differs from stored by {diff:.1e}")
    out = cupy.zeros_like(u)

    def apply(op):
        return lambda: op.apply(u, out)

    def cg(op):
        return lambda: hf.cg(op, u, rtol=0.0, maxiter=CG_ITERS)

    runs = {
        (g, kind): make(op)
        for g, op in ops.items()
        for kind, make in (("apply", apply), ("cg", cg))
    }
    times = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            times[key].append(time_events(run, 5 if key[1] == "apply" else 1, 1))
    cells = [f"p={p}"]
    for kind, work in (("apply", u.size), ("cg", u.size * CG_ITERS)):
        rates = {g: work / statistics.median(times[(g, kind)]) / 1e9 for g in GEOMETRIES}
        pairs = zip(times[("stored", kind)], times[("on_the_fly", kind)], strict=True)
        ratio = statistics.median(s / t for s, t in pairs)
        stored, fly = rates["stored"], rates["on_the_fly"]
        cells.append(f"{kind} stored {stored:.1f} on the fly {fly:.1f} ({ratio:.3f})")
    return " | ".join(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="mass")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        print(args.form, case(ceed, args.form, p), flush=True)


if __name__ == "__main__":
    main()
