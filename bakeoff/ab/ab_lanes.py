"""Side by side on ``/cpu/self/numba``: stored q-data in the blocked backend layout (8 lanes,
read in place as vectors) against the E-vector layout (read through its strides, or copied
into the scratch with the lanes interleaved), on the bake-off's box.

Usage::

    NUMBA_NUM_THREADS=1 python -m bakeoff.ab.ab_lanes 3e5 bp1:2,3,4,5,6,7,8 bp3:2,3,4,5,6,7,8

Prints one Markdown row per case: apply and CG rates (MDOF/s, MDOF x iterations / s) of the
blocked layout, and the median of 7 alternating rounds' per-round ratios over the E-vector
layout (3 applies, 20 CG iterations each).  Both outputs are checked against each other to
1e-12 first.
"""

import math
import statistics
import sys
import time

import numpy as np

import hofem as hf
from bakeoff.common import box_operator
from hofem.backends.numba.backend import NumbaBackend

VARIANTS = {"blocked": NumbaBackend.STRIDES_LANES, "evector": 1}


def build(form, n, p, lanes):
    saved = NumbaBackend.STRIDES_LANES
    NumbaBackend.STRIDES_LANES = lanes  # read when the q-data restriction is made
    try:
        return box_operator(hf.Ceed("/cpu/self/numba"), form, n, p, geometry="stored")[0]
    finally:
        NumbaBackend.STRIDES_LANES = saved


def wall(fn, repeat):
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def case(bp, p, dofs, rounds=7):
    form = "mass" if bp == "bp1" else "diffusion"
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    ops = {k: build(form, n, p, lanes) for k, lanes in VARIANTS.items()}
    u = np.random.default_rng(0).standard_normal(ops["blocked"].shape[1])  # (l_size,)
    v = np.empty_like(u)
    base = ops["evector"](u)
    diff = float(abs(ops["blocked"](u) - base).max() / abs(base).max())
    if diff > 1e-12:
        raise AssertionError(f"{bp} p={p}: blocked {diff:.1e} from the E-vector layout")
    rhs = ops["evector"](np.ones_like(u))
    iters = 20
    times = {(k, c): [] for k in VARIANTS for c in ("apply", "cg")}
    for _ in range(rounds):
        for k, op in ops.items():
            times[k, "apply"].append(wall(lambda op=op: op.apply(u, v), 3))
            solve = lambda op=op: hf.cg(op, rhs, rtol=1e-30, maxiter=iters)  # noqa: E731
            times[k, "cg"].append(wall(solve, 1) / iters)
    dofs = u.size
    row = [bp, str(p), f"{dofs / 1e6:.2f}"]
    for c in ("apply", "cg"):
        rate = dofs / statistics.median(times["blocked", c]) / 1e6
        ratio = statistics.median(
            e / b for e, b in zip(times["evector", c], times["blocked", c], strict=True)
        )
        row += [f"{rate:.1f}", f"**{ratio:.2f}**"]
    return "| " + " | ".join(row) + " |"


def main(argv):
    dofs = float(argv[0])
    print(
        "| bp | p | MDOFs | apply blocked | blocked / E-vector | CG blocked | blocked / E-vector |"
    )
    print("|---|---|---|---|---|---|---|")
    for spec in argv[1:]:
        bp, orders = spec.split(":")
        for p in orders.split(","):
            print(case(bp, int(p), dofs), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
