"""Side by side on /gpu/cuda/gen: shared matrices capped past 168 registers (before) against
constant-memory copies and the REGISTER_CAP_FROM rule (after); apply and device-loop CG.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_constants bp1:stored:1,2,3,4,5,6,7,8 \
        bp3:stored:2,3,4,5,6,7,8 bp3:on_the_fly:2,3,4,5,6,7,8

Prints one Markdown row per case: registers of the apply and dot kernels, GDOF/s and the
median of 7 alternating rounds' ratios (5 applies; 50 CG iterations), 1e7 DOFs.
"""

import functools
import math
import statistics
import sys

import cupy

import hofem as hf
from bakeoff.common import box_operator, time_events
from hofem.backends.cuda import operator_fuse as of

SOURCE, CAP = of.kernel_source, of.register_cap


def capped_past_168(num_regs, t_1d):
    """The register rule before: cap only the kernels past REGISTER_CAP."""
    small = t_1d <= of.REGISTER_CAP_MAX_T_1D
    return of.REGISTER_CAP if num_regs > of.REGISTER_CAP and small else None


RULES = {"before": (0, capped_past_168), "after": (of.CONSTANT_BYTES, CAP)}


def build(ceed, form, n, p, geometry, budget, cap):
    """The operator, its right-hand side, and its kernels compiled under one rule."""
    of.kernel_source = functools.partial(SOURCE, constant_bytes=budget)
    of.register_cap = cap
    try:
        op = box_operator(ceed, form, n, p, geometry=geometry)[0]
        rhs = op(cupy.ones(op.shape[1]))  # (l_size,)
        hf.cg(op, rhs, rtol=1e-30, maxiter=3)  # compiles the dot variant
    finally:
        of.kernel_source, of.register_cap = SOURCE, CAP
    return op, rhs


def case(ceed, bp, geometry, p, rounds=7):
    form = "mass" if bp == "bp1" else "diffusion"
    n = max(1, math.ceil((1e7 ** (1 / 3) - 1) / p))
    ops = {k: build(ceed, form, n, p, geometry, *rule) for k, rule in RULES.items()}
    u = cupy.random.default_rng(1).standard_normal(ops["before"][1].size)  # (l_size,)
    v = cupy.empty_like(u)
    a, b = ops["before"][0](u), ops["after"][0](u)
    assert float(cupy.abs(a - b).max() / cupy.abs(a).max()) < 1e-14
    times = {(k, c): [] for k in ops for c in ("apply", "cg")}
    for _ in range(rounds):
        for k, (op, rhs) in ops.items():
            times[k, "apply"].append(time_events(lambda op=op: op.apply(u, v), 5))
            solve = functools.partial(hf.cg, op, rhs, rtol=1e-30, maxiter=50, device_loop=True)
            times[k, "cg"].append(time_events(solve, 2, 1) / 50)
    fused = {k: ceed.backend._fused_operator(op) for k, (op, _) in ops.items()}
    regs = [fused[k]._kernel.num_regs for k in RULES]
    dots = [getattr(fused[k]._dot_kernel, "num_regs", "-") for k in RULES]
    row = [bp[-1], geometry.replace("_", " "), p, *regs, *dots]
    for c in ("apply", "cg"):
        rate = [u.size / statistics.median(times[k, c]) / 1e9 for k in RULES]
        pairs = zip(times["before", c], times["after", c], strict=True)
        ratio = statistics.median(x / y for x, y in pairs)
        row += [f"{rate[0]:.2f}", f"{rate[1]:.2f}", f"{ratio:.2f}"]
    print("| " + " | ".join(map(str, row)) + " |", flush=True)
    cupy.get_default_memory_pool().free_all_blocks()


def main(specs):
    ceed = hf.Ceed("/gpu/cuda/gen")
    print(
        "| bp | geometry | p | registers before | after | dot variant before | after "
        "| apply GDOF/s before | after | after / before | CG before | after | after / before |"
    )
    print("|---" * 13 + "|")
    for spec in specs:
        bp, geometry, orders = spec.split(":")
        for p in map(int, orders.split(",")):
            case(ceed, bp, geometry, p)


if __name__ == "__main__":
    main(sys.argv[1:])
