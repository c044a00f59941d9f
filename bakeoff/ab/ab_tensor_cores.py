"""Side by side on /gpu/cuda/gen: the x and y contraction stages on the fp64 tensor cores
(``basis_mma.cuh``) against the scalar stages; apply and device-loop CG.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_tensor_cores bp1:stored:1,2,3,4,5,6,7,8 \
        bp3:stored:2,3,4,5,6,7,8 bp3:on_the_fly:2,3,4,5,6,7,8

Variants, whatever ``operator_fuse.use_tensor_cores`` would pick: ``scalar``, ``mma`` (the
tensor cores), ``mma-cap`` (the tensor cores, compiled with at most the scalar kernels'
registers, so the same occupancy) and ``mma-cap-2`` (as ``mma-cap``, two elements per
block).  Prints one Markdown row per case: registers of the apply kernels, GDOF/s, and
the median of 5 alternating rounds' ratios over ``scalar`` (5 applies; 50 CG iterations),
1e7 DOFs; the largest relative difference of each output from ``scalar``'s.
"""

import functools
import math
import statistics
import sys

import cupy

import hofem as hf
from bakeoff.common import box_operator, time_events
from hofem.backends.cuda import operator_fuse as of

VARIANTS = ("scalar", "mma", "mma-cap", "mma-cap-2")


def build(ceed, form, n, p, geometry, variant, scalar_regs):
    """The operator, its right-hand side, and its kernels compiled as one variant;
    ``scalar_regs``: the scalar apply and dot kernels' registers, the caps of ``mma-cap``
    and ``mma-cap-2`` (two elements per block)."""
    saved = of.THREADS_BY_SHAPE, of.use_tensor_cores
    of.use_tensor_cores = lambda shape, num_regs: variant != "scalar"  # whatever the rule says
    if variant == "mma-cap-2":
        T = p + 2
        of.THREADS_BY_SHAPE = {(3, p + 1, p + 2): 2 * T * T}
    try:
        op = box_operator(ceed, form, n, p, geometry=geometry)[0]
        rhs = op(cupy.ones(op.shape[1]))  # (l_size,)
        hf.cg(op, rhs, rtol=1e-30, maxiter=3)  # compiles the dot variant
        fused = ceed.backend._fused_operator(op)
        if variant.startswith("mma-cap"):
            kernels = ("_kernel", "_dot_kernel")
            for name, dot, regs in zip(kernels, (False, True), scalar_regs[:2], strict=True):
                if getattr(fused, name).num_regs > regs:
                    code = fused._source(dot=dot)
                    setattr(fused, name, of._compile_options(code, (f"--maxrregcount={regs}",)))
    finally:
        of.THREADS_BY_SHAPE, of.use_tensor_cores = saved
    return op, rhs, (fused._kernel.num_regs, fused._dot_kernel.num_regs, fused._block[2])


def case(ceed, bp, geometry, p, rounds=5):
    form = "mass" if bp == "bp1" else "diffusion"
    n = max(1, math.ceil((1e7 ** (1 / 3) - 1) / p))
    ops = {"scalar": build(ceed, form, n, p, geometry, "scalar", None)}
    for k in VARIANTS[1:]:
        ops[k] = build(ceed, form, n, p, geometry, k, ops["scalar"][2])
    u = cupy.random.default_rng(1).standard_normal(ops["scalar"][1].size)  # (l_size,)
    v = cupy.empty_like(u)
    base = ops["scalar"][0](u)
    diff = max(
        float(cupy.abs(op(u) - base).max() / cupy.abs(base).max()) for op, *_ in ops.values()
    )
    times = {(k, c): [] for k in ops for c in ("apply", "cg")}
    for _ in range(rounds):
        for k, (op, rhs, _) in ops.items():
            times[k, "apply"].append(time_events(lambda op=op: op.apply(u, v), 5))
            solve = functools.partial(hf.cg, op, rhs, rtol=1e-30, maxiter=50, device_loop=True)
            times[k, "cg"].append(time_events(solve, 2, 1) / 50)
    row = [bp[-1], geometry.replace("_", " "), p]
    row += ["{}/{} ({})".format(*ops[k][2]) for k in VARIANTS]
    for c in ("apply", "cg"):
        for k in VARIANTS:
            rate = u.size / statistics.median(times[k, c]) / 1e9
            pairs = zip(times["scalar", c], times[k, c], strict=True)
            ratio = statistics.median(x / y for x, y in pairs)
            row.append(f"{rate:.2f}" if k == "scalar" else f"{rate:.2f} ({ratio:.2f})")
    row.append(f"{diff:.0e}")
    print("| " + " | ".join(map(str, row)) + " |", flush=True)
    del ops
    cupy.get_default_memory_pool().free_all_blocks()


def main(specs):
    ceed = hf.Ceed("/gpu/cuda/gen")
    names = list(VARIANTS)
    head = ["bp", "geometry", "p", *(f"registers apply/dot (elements) {k}" for k in names)]
    head += [f"apply {k}" for k in names] + [f"CG {k}" for k in names] + ["max rel diff"]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    for spec in specs:
        bp, geometry, orders = spec.split(":")
        for p in map(int, orders.split(",")):
            case(ceed, bp, geometry, p)


if __name__ == "__main__":
    main(sys.argv[1:])
