"""Side by side on /gpu/cuda/gen: the device CG with p and x updated in the operator kernel
(fused updates) against the separate update pass; the operator apply alone for scale.

Usage (on a GPU)::

    python docs/bakeoff/h200/ab_cg_fused.py bp1:stored:2,4,6,8 bp3:stored:2,4,6,8 \
        bp3:on_the_fly:2,4,6,8

Prints one Markdown row per case, 1e7 DOFs: registers of the dot and cg kernel variants,
apply GDOF/s (median of 5), CG GDOF x iterations / s of 50 iterations with each loop
(medians over 7 alternating rounds), CG / apply, and the median of the rounds' ratios
fused / separate.  Each case first checks that both loops give the same iterate.
"""

import math
import statistics
import sys

import cupy

import hofem as hf
from hofem.backends.cuda.cg import DeviceCG
from hofem.bakeoff.common import time_events
from hofem.bakeoff.structured import box_operator

ITERATIONS = 50


def case(ceed, bp, geometry, p, rounds=7):
    form = "mass" if bp == "bp1" else "diffusion"
    n = max(1, math.ceil((1e7 ** (1 / 3) - 1) / p))
    op = box_operator(ceed, form, n, p, geometry=geometry)[0]
    b = cupy.random.default_rng(1).standard_normal(op.shape[0])  # (l_size,)
    solvers = {"separate": DeviceCG(op, fuse_updates=False), "fused": DeviceCG(op)}
    x = {k: s.solve(b, None, 0.0, ITERATIONS)[0] for k, s in solvers.items()}
    error = float(cupy.linalg.norm(x["fused"] - x["separate"]) / cupy.linalg.norm(x["separate"]))
    assert error < 1e-10, (bp, geometry, p, error)
    u, v = b.copy(), cupy.empty_like(b)
    times = {k: [] for k in ("apply", *solvers)}
    for _ in range(rounds):
        times["apply"].append(time_events(lambda: op.apply(u, v), 5))
        for k, s in solvers.items():
            solve = lambda s=s: s.solve(b, None, 0.0, ITERATIONS)  # noqa: E731
            times[k].append(time_events(solve, 2, 1) / ITERATIONS)
    fused = ceed.backend._fused_operator(op)
    regs = [getattr(fused._variants.get(k), "num_regs", "-") for k in ("dot", "cg")]
    rate = {k: b.size / statistics.median(t) / 1e9 for k, t in times.items()}
    pairs = zip(times["separate"], times["fused"], strict=True)
    ratio = statistics.median(s / f for s, f in pairs)
    row = [bp[-1], geometry.replace("_", " "), p, *regs, f"{rate['apply']:.2f}"]
    for k in solvers:
        row += [f"{rate[k]:.2f}", f"{rate[k] / rate['apply']:.2f}"]
    row += [f"{ratio:.2f}", f"{error:.1e}"]
    print("| " + " | ".join(map(str, row)) + " |", flush=True)


def main(specs):
    ceed = hf.Ceed("/gpu/cuda/gen")
    print(
        "| bp | geometry | p | registers dot | cg | apply GDOF/s | CG separate GDOF·it/s "
        "| CG/apply | CG fused GDOF·it/s | CG/apply | fused / separate | x difference |"
    )
    print("|---" * 12 + "|")
    for spec in specs:
        bp, geometry, orders = spec.split(":")
        for p in map(int, orders.split(",")):
            case(ceed, bp, geometry, p)
            cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main(sys.argv[1:])
