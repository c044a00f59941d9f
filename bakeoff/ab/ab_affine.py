"""Side by side: stored q-data, geometry on the fly on affine cells (the Jacobian once per
element, ``hofem.cell_center``) and on the fly at every point (the trilinear map's
gradient), on the bake-off's box (:func:`bakeoff.common.box_operator`).

Usage::

    # one core
    NUMBA_NUM_THREADS=1 python -m bakeoff.ab.ab_affine /cpu/self/numba 3e5 \
        bp3:2,3,4,5,6,7,8 bp1:2,3,4,5,6,7,8
    # a GPU
    python -m bakeoff.ab.ab_affine /gpu/cuda/gen 1e7 bp3:2,3,4,5,6,7,8 bp1:2,4,6,8

Prints one Markdown row per case: apply and CG (device loop on a GPU) rates, and the median
of 7 alternating rounds' per-round ratios over stored (3 applies, 20 CG iterations each on
the CPU; 5 applies and 50 iterations on the GPU).  Every output is checked against stored's
to 1e-12 first.
"""

import math
import statistics
import sys
import time

import numpy as np

import hofem as hf
import hofem.forms
from bakeoff.common import box_operator

VARIANTS = ("stored", "affine", "trilinear")


def build(ceed, form, n, p, variant):
    centre = hofem.forms.cell_center
    if variant == "trilinear":  # the vertex basis itself: the Jacobian at every point
        hofem.forms.cell_center = lambda basis: basis
    try:
        geometry = "stored" if variant == "stored" else "on_the_fly"
        return box_operator(ceed, form, n, p, geometry=geometry)[0]
    finally:
        hofem.forms.cell_center = centre


def timer(ceed):
    """``seconds(fn, repeat)``: CUDA events on a GPU, the wall clock on the CPU."""
    if ceed.resource.startswith("/gpu"):
        from bakeoff.common import time_events

        return lambda fn, repeat: time_events(fn, repeat, 1)

    def wall(fn, repeat):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - start) / repeat

    return wall


def case(ceed, bp, p, dofs, rounds=7):
    gpu = ceed.resource.startswith("/gpu")
    form = "mass" if bp == "bp1" else "diffusion"
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    ops = {k: build(ceed, form, n, p, k) for k in VARIANTS}
    xp = ceed.xp
    u = xp.asarray(np.random.default_rng(0).standard_normal(ops["stored"].shape[1]))  # (l_size,)
    v = xp.empty_like(u)
    base = ops["stored"](u)
    for k, op in ops.items():
        diff = float(abs(op(u) - base).max() / abs(base).max())
        if diff > 1e-12:
            raise AssertionError(f"{bp} p={p} {k}: {diff:.1e} from stored")
    rhs = ops["stored"](xp.ones_like(u))
    seconds, applies, iters = timer(ceed), (5 if gpu else 3), (50 if gpu else 20)
    kwargs = {"device_loop": True} if gpu else {}
    times = {(k, c): [] for k in VARIANTS for c in ("apply", "cg")}
    for _ in range(rounds):
        for k, op in ops.items():
            times[k, "apply"].append(seconds(lambda op=op: op.apply(u, v), applies))
            solve = lambda op=op: hf.cg(op, rhs, rtol=1e-30, maxiter=iters, **kwargs)  # noqa: E731
            times[k, "cg"].append(seconds(solve, 1) / iters)
    row = [bp[-1], p]
    for c in ("apply", "cg"):
        for k in VARIANTS:
            rate = u.size / statistics.median(times[k, c]) / 1e6
            pairs = zip(times["stored", c], times[k, c], strict=True)
            ratio = statistics.median(a / b for a, b in pairs)
            row.append(f"{rate:.1f}" if k == "stored" else f"{rate:.1f} ({ratio:.2f})")
    print("| " + " | ".join(map(str, row)) + " |", flush=True)


def main(resource, dofs, *specs):
    ceed = hf.Ceed(resource)
    head = ["bp", "p"] + [f"{c} {k}" for c in ("apply", "CG") for k in VARIANTS]
    print("| " + " | ".join(head) + " |  (MDOF/s, ratio over stored)")
    print("|---" * len(head) + "|")
    for spec in specs:
        bp, orders = spec.split(":")
        for p in map(int, orders.split(",")):
            case(ceed, bp, p, float(dofs))


if __name__ == "__main__":
    main(*sys.argv[1:])
