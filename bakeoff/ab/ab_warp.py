"""Side by side on /gpu/cuda/gen: one warp per element (``operator_warp``) against the
column-per-thread slab (``operator_fuse``), and the warp kernel's register budgets and warps
per block, for BP1 to BP6.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_warp 3 4 5 6
    python -m bakeoff.ab.ab_warp --form diffusion --geometry on_the_fly 2 3 4 5 6
    python -m bakeoff.ab.ab_warp --form vector-mass --variants table 3 4 5 6
    python -m bakeoff.ab.ab_warp --variants warps 2 3 4 5 6

``--form``: ``mass`` (BP1, the default), ``vector-mass`` (BP2, three components),
``diffusion`` (BP3), ``diffusion-gll`` (BP5: ``p + 1`` Gauss-Lobatto points),
``vector-diffusion`` (BP4) or ``vector-diffusion-gll`` (BP6), with
stored q-data or the geometry on the fly (``--geometry``; on the box's affine cells the
Jacobian once per element).  ``--variants``:

- ``budgets`` (the default): the slab, then the warp kernel with ``__launch_bounds__``
  asking registers for ``mbN`` blocks per SM (of 4 warps; 4 to 8 for the mass forms, 3 to
  6 for diffusion; of 2 warps for the vector diffusion forms, whose warps hold three buffer
  slots each: 4 to 10; ``--budgets`` names others);
- ``table``: the slab and the warp kernel at the budget of gen's tables;
- ``warps``: the warp kernel at the tables' budget with 4 warps per block, then with 2 and
  8 at equal registers per SM (twice and half the blocks);
- ``operands``: the warp kernel at the tables' budget reading the stages' operands from the
  block's shared table, then holding them in registers at the budgets of ``budgets``.
- ``identity``: the slab, then the warp kernel at the tables' budget where the basis
  interpolates with the identity (Gauss-Lobatto points at the nodes: the ``-gll`` forms)
  gathering the nodes as the point values (``gather``), then contracting with the identity
  as with any ``B`` (``interp``).

Prints one line per order: registers and local (spill) bytes, GDOF/s and the median of 5
alternating rounds' ratios over the first variant (5 applies each, about 1e7 DOFs); every
output is checked against the first variant's.  ``--dot`` times the kernel variant the
device CG launches (``apply_dot``: the apply and the block partial sums of ``u . Au``)
instead of the apply.
"""

import argparse
import math
import statistics

import cupy

import hofem as hf
from bakeoff.common import alternating_times, box_operator, check_same, dot_args
from hofem import meshes
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_warp as ow

FORMS = ("mass", "vector-mass", "diffusion", "diffusion-gll")
FORMS += ("vector-diffusion", "vector-diffusion-gll")
# the module attributes a variant sets: PREFETCH_SIZE, the blocks per SM in every table,
# WARPS, and operand_registers (a function of op and shape)
SHAPE_TABLES = ("WARP_SHAPES", "WARP_CELL_SHAPES", "WARP_VECTOR_SHAPES", "WARP_GRAD_SHAPES")
SHAPE_TABLES += ("WARP_GRAD_STORED_SHAPES", "WARP_VECTOR_GRAD_SHAPES")
SHAPE_TABLES += ("WARP_VECTOR_GRAD_STORED_SHAPES",)
TABLES = ("PREFETCH_SIZE", *SHAPE_TABLES, "WARPS", "operand_registers")


def operator(ceed, form, geometry, p, dofs=1e7):
    """The form's operator on a box of about ``dofs`` DOFs."""
    # BP5 and BP6: p + 1 Gauss-Lobatto points, collocated with the nodes
    rule = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO} if form.endswith("-gll") else {}
    if form.startswith("vector"):
        n = max(1, math.ceil(((dofs / 3) ** (1 / 3) - 1) / p))
        space = hf.H1Space(ceed, meshes.box(n), p, num_comp=3)
        make = hf.mass if form == "vector-mass" else hf.diffusion
        return make(space, geometry=geometry, **rule)
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    if form == "diffusion-gll":
        q, mode = p + 1, hf.GAUSS_LOBATTO
        return box_operator(ceed, "diffusion", n, p, q=q, quad_mode=mode, geometry=geometry)[0]
    return box_operator(ceed, form, n, p, geometry=geometry)[0]


def variants(form, kind, table_blocks, budgets=None):
    """Name -> None (the slab) or ``(prefetch, blocks, warps, registers[, identity])`` of the
    warp kernel (``identity``: whether it gathers the nodes where the interpolation is the
    identity; default the module's rule)."""
    pf, mb, regs = ow.PREFETCH_SIZE, table_blocks, None  # None: the module's choice
    if kind == "identity":
        return {"slab": None, "gather": (pf, mb, ow.WARPS, regs),
                "interp": (pf, mb, ow.WARPS, regs, False)}  # fmt: skip
    if kind == "warps":
        pairs = ((4, mb), (2, 2 * mb), (8, max(1, mb // 2)))
        return {f"w{w}-mb{b}": (pf, b, w, regs) for w, b in pairs}
    if kind == "table":
        return {"slab": None, f"mb{mb}": (pf, mb, ow.WARPS, regs)}
    if budgets is None and form.startswith("vector-diffusion"):
        budgets = (4, 6, 8, 10)
    if budgets is None:
        budgets = (3, 4, 5, 6) if form.startswith("diffusion") else (4, 5, 6, 7, 8)
    if kind == "operands":
        table = {f"table-mb{mb}": (pf, mb, ow.WARPS, False)}
        return table | {f"regs-mb{b}": (pf, b, ow.WARPS, True) for b in budgets}
    return {"slab": None} | {f"mb{b}": (pf, b, ow.WARPS, regs) for b in budgets}


def build(op, shape, variant, dot=False):
    """The fused operator of one variant (the module's constants restored after), with its
    ``apply_dot`` kernel compiled where ``dot``."""
    if variant is None:
        return compiled(of.FusedOperator(op, shape), dot)
    saved = [getattr(ow, name) for name in TABLES]
    rule = hf.Basis.interpolates_identity  # the property, replaced for the interp variant
    prefetch, blocks, warps, registers, *identity = variant
    choice = saved[-1] if registers is None else lambda op, shape: registers
    tables = [{tuple(shape): blocks} for _ in SHAPE_TABLES]  # distinct: warp_shapes tells apart
    values = (prefetch, *tables, warps, choice)
    for name, value in zip(TABLES, values, strict=True):
        setattr(ow, name, value)
    if identity:
        hf.Basis.interpolates_identity = property(lambda basis: identity[0])
    try:
        return compiled(ow.WarpFusedOperator(op, shape), dot)
    finally:
        for name, value in zip(TABLES, saved, strict=True):
            setattr(ow, name, value)
        hf.Basis.interpolates_identity = rule


def compiled(fused, dot):
    """``fused``, its ``apply_dot`` kernel compiled now where ``dot`` (while the variant's
    tables are set)."""
    if dot:
        fused.apply_dot(*dot_args(fused))
    return fused


def case(ceed, form, geometry, kind, p, dot=False, rounds=5, budgets=None):
    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    table_blocks = ow.warp_shapes(op).get(tuple(shape), ow.MIN_BLOCKS)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    kernels = {
        name: build(op, shape, variant, dot)
        for name, variant in variants(form, kind, table_blocks, budgets).items()
    }
    return compare_kernels(kernels, u, p, dot, rounds)


def launched_kernel(fused, dot):
    """The CUDA kernel a fused operator launches (for a component split, its scalar one's)."""
    from hofem.backends.cuda.component_split import ComponentSplitOperator

    inner = fused.run if isinstance(fused, ComponentSplitOperator) else fused
    return inner._dot_kernel if dot else inner._kernel


def compare_kernels(kernels, u, p, dot=False, rounds=5):
    """One line of ``kernels`` (name -> fused operator, the first the reference) applied to
    ``u`` (``apply_dot`` where ``dot``): registers and local (spill) bytes, GDOF/s and the
    median of ``rounds`` alternating rounds' ratios over the first; outputs checked alike."""
    runs, regs, outputs = {}, {}, {}
    for name, fused in kernels.items():
        out = cupy.zeros_like(u)
        args = dot_args(fused, u, out)

        def run(fused=fused, out=out, args=args):
            out[...] = 0.0
            fused.apply_dot(*args) if dot else fused(u, out)

        run()
        kernel = launched_kernel(fused, dot)
        regs[name] = f"{kernel.num_regs}r/{kernel.local_size_bytes}B"  # registers, local memory
        runs[name], outputs[name] = run, out
    first = next(iter(runs))
    check_same(outputs, first, f"p={p}")
    times = alternating_times(runs, rounds)
    cells = [f"p={p}"]
    for name in runs:
        rate = u.size / statistics.median(times[name]) / 1e9
        ratio = statistics.median(s / t for s, t in zip(times[first], times[name], strict=True))
        cells.append(f"{name} {regs[name]} {rate:.1f} ({ratio:.2f})")
    return " | ".join(cells)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="mass")
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="stored")
    parser.add_argument(
        "--variants",
        choices=("budgets", "table", "warps", "operands", "identity"),
        default="budgets",
    )
    parser.add_argument("--dot", action="store_true", help="time apply_dot (the CG kernel)")
    parser.add_argument("--budgets", type=int, nargs="+", help="budgets: blocks per SM to try")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        line = case(
            ceed, args.form, args.geometry, args.variants, p, args.dot, budgets=args.budgets
        )
        print(args.form, args.geometry, "dot" if args.dot else "apply", line, flush=True)


if __name__ == "__main__":
    main()
