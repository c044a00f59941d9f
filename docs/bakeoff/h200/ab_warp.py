"""Side by side on /gpu/cuda/gen: one warp per element (``operator_warp``) against the
column-per-thread slab (``operator_fuse``), and the warp kernel's register budgets and warps
per block, for BP1, BP2 or BP3.

Usage (on a GPU)::

    python docs/bakeoff/h200/ab_warp.py 3 4 5 6
    python docs/bakeoff/h200/ab_warp.py --form diffusion --geometry on_the_fly 2 3 4 5 6
    python docs/bakeoff/h200/ab_warp.py --form vector-mass --variants table 3 4 5 6
    python docs/bakeoff/h200/ab_warp.py --variants warps 2 3 4 5 6

``--form``: ``mass`` (BP1, the default), ``vector-mass`` (BP2, three components) or
``diffusion`` (BP3), with stored q-data or the geometry on the fly (``--geometry``; on the
box's affine cells the Jacobian once per element).  ``--variants``:

- ``budgets`` (the default): the slab, then the warp kernel with ``__launch_bounds__``
  asking registers for ``mbN`` blocks of 4 warps per SM (4 to 8 for the mass forms, 3 to 6
  for diffusion);
- ``table``: the slab and the warp kernel at the budget of gen's tables;
- ``warps``: the warp kernel at the tables' budget with 4 warps per block, then with 2 and
  8 at equal registers per SM (twice and half the blocks);
- ``operands``: the warp kernel at the tables' budget reading the stages' operands from the
  block's shared table, then holding them in registers at the budgets of ``budgets``.

Prints one line per order: registers, GDOF/s and the median of 5 alternating rounds'
ratios over the first variant (5 applies each, about 1e7 DOFs); every output is checked
against the first variant's.
"""

import argparse
import math
import statistics

import cupy

import hofem as hf
from hofem import meshes
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_warp as ow
from hofem.bakeoff.common import time_events
from hofem.bakeoff.structured import box_operator

FORMS = ("mass", "vector-mass", "diffusion")
# the module attributes a variant sets: PREFETCH_SIZE, the blocks per SM in every table,
# WARPS, and operand_registers (a function of op and shape)
TABLES = ("PREFETCH_SIZE", "WARP_SHAPES", "WARP_VECTOR_SHAPES", "WARP_GRAD_SHAPES")
TABLES += ("WARP_GRAD_STORED_SHAPES", "WARPS", "operand_registers")


def operator(ceed, form, geometry, p, dofs=1e7):
    """The form's operator on a box of about ``dofs`` DOFs."""
    if form == "vector-mass":
        n = max(1, math.ceil(((dofs / 3) ** (1 / 3) - 1) / p))
        return hf.mass(hf.H1Space(ceed, meshes.box(n), p, num_comp=3), geometry=geometry)
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    return box_operator(ceed, form, n, p, geometry=geometry)[0]


def variants(form, kind, table_blocks):
    """Name -> None (the slab) or ``(prefetch, blocks, warps, registers)`` of the warp
    kernel."""
    pf, mb, regs = ow.PREFETCH_SIZE, table_blocks, None  # None: the module's choice
    if kind == "warps":
        pairs = ((4, mb), (2, 2 * mb), (8, max(1, mb // 2)))
        return {f"w{w}-mb{b}": (pf, b, w, regs) for w, b in pairs}
    if kind == "table":
        return {"slab": None, f"mb{mb}": (pf, mb, ow.WARPS, regs)}
    budgets = (3, 4, 5, 6) if form == "diffusion" else (4, 5, 6, 7, 8)
    if kind == "operands":
        table = {f"table-mb{mb}": (pf, mb, ow.WARPS, False)}
        return table | {f"regs-mb{b}": (pf, b, ow.WARPS, True) for b in budgets}
    return {"slab": None} | {f"mb{b}": (pf, b, ow.WARPS, regs) for b in budgets}


def build(op, shape, variant):
    """The fused operator of one variant (the module's constants restored after)."""
    if variant is None:
        return of.FusedOperator(op, shape)
    saved = [getattr(ow, name) for name in TABLES]
    prefetch, blocks, warps, registers = variant
    choice = saved[-1] if registers is None else lambda op, shape: registers
    tables = [{tuple(shape): blocks} for _ in range(4)]  # distinct: warp_shapes tells them apart
    values = (prefetch, *tables, warps, choice)
    for name, value in zip(TABLES, values, strict=True):
        setattr(ow, name, value)
    try:
        return ow.WarpFusedOperator(op, shape)
    finally:
        for name, value in zip(TABLES, saved, strict=True):
            setattr(ow, name, value)


def case(ceed, form, geometry, kind, p, rounds=5):
    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    table_blocks = ow.warp_shapes(op).get(tuple(shape), ow.MIN_BLOCKS)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, regs, outputs = {}, {}, {}
    for name, variant in variants(form, kind, table_blocks).items():
        fused = build(op, shape, variant)
        out = cupy.zeros_like(u)

        def run(fused=fused, out=out):
            out[...] = 0.0
            fused(u, out)

        run()
        runs[name], regs[name], outputs[name] = run, fused._kernel.num_regs, out
    first = next(iter(runs))
    for name, out in outputs.items():
        diff = float(abs(out - outputs[first]).max() / abs(outputs[first]).max())
        if diff > 1e-12:
            raise AssertionError(f"p={p} {name}: {diff:.1e} from {first}")
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(time_events(run, 5, 1))
    cells = [f"p={p}"]
    for name in runs:
        rate = u.size / statistics.median(times[name]) / 1e9
        ratio = statistics.median(s / t for s, t in zip(times[first], times[name], strict=True))
        cells.append(f"{name} {regs[name]}r {rate:.1f} ({ratio:.2f})")
    return " | ".join(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="mass")
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="stored")
    parser.add_argument(
        "--variants", choices=("budgets", "table", "warps", "operands"), default="budgets"
    )
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        line = case(ceed, args.form, args.geometry, args.variants, p)
        print(args.form, args.geometry, line, flush=True)


if __name__ == "__main__":
    main()
