"""Side by side on /gpu/cuda/gen: a team of warps per element with every contraction a GEMM
on the fp64 tensor cores (``operator_tiles``) against gen's choice for BP1 at ``Q_1d = 9, 10``.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_tiles 7 8 --form mass --geometry stored
    python -m bakeoff.ab.ab_tiles 7 8 --form mass --geometry stored --dot
    python -m bakeoff.ab.ab_tiles 7 8 --form mass --geometry on_the_fly
    python -m bakeoff.ab.ab_tiles 8 --variants table w2 w4 --rounds 7
    python -m bakeoff.ab.ab_tiles 7 8 --variants table w1 w1t2 w1t4 w2t2

Variants: ``table`` is the kernel gen runs today at the shape (the slab, or the blocked slab
at the shapes of ``operator_blocked.BLOCKED_SHAPES``), ``wN`` the tile kernel at ``N``
elements at a time per block, each a team of ``operator_tiles.TEAM`` warps holding two
buffers of ``max(P_1d, Q_1d)^2`` rows of ``operator_tiles.pitch`` doubles in dynamic shared
memory, and ``wNtM`` the same with teams of ``M`` warps (a block of ``N M`` warps).  ``--dot``
times the kernel variant the device CG launches (``apply_dot``) instead of the apply.
Prints one line per order: registers and local (spill) bytes, GDOF/s and the median of
``--rounds`` alternating rounds' ratios over ``table`` (5 applies each, about 1e7 DOFs);
every output is checked against ``table``'s.  The mass (BP1) with stored q-data or the
Jacobian of the box's affine cells on the fly (once per element).
"""

import argparse
import re

import hofem as hf
from hofem.backends.cuda import operator_tiles as ot

FORMS = ("mass",)
GEOMETRIES = ("stored", "on_the_fly")
VARIANTS = ("table", "w1", "w2", "w4", "w8")


def tile_variant(variant: str) -> tuple[int, int | None] | None:
    """``(elements per block, warps per element)`` of tile variant ``wN`` (the team None:
    ``operator_tiles.TEAM``) or ``wNtM``, or None for ``table``.

    Raises
    ------
    ValueError
        Neither ``table`` nor ``w`` and a positive count (and ``t`` and a positive count).
    """
    if variant == "table":
        return None
    match = re.fullmatch(r"w([1-9]\d*)(?:t([1-9]\d*))?", variant)
    if match is None:
        raise ValueError(f"variant {variant!r}: use table or wN[tM] (N elements per block)")
    warps, team = match.groups()
    return int(warps), None if team is None else int(team)


def parse(argv=None, forms=FORMS, check=tile_variant, description=None) -> argparse.Namespace:
    """The command line of this script (and with its ``forms``, variant ``check`` and
    ``description``, of ``ab_tiles_grad``), ``table`` first among the variants (the
    reference)."""
    parser = argparse.ArgumentParser(description=description or __doc__.splitlines()[0])
    parser.add_argument("--form", choices=forms, default=forms[0])
    parser.add_argument("--geometry", choices=GEOMETRIES, default="stored")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--dot", action="store_true", help="time apply_dot (the CG kernel)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args(argv)
    for variant in args.variants:
        try:
            check(variant)  # a clear error before any device work
        except ValueError as exc:
            parser.error(str(exc))  # one line, exit status 2
    if args.variants[0] != "table":
        args.variants = ["table", *(v for v in args.variants if v != "table")]
    return args


def build(op, shape, variant, dot=False):
    """The fused operator of ``variant``, with its ``apply_dot`` kernel compiled where
    ``dot``: gen's slab or blocked slab for ``table``, else the tile kernel."""
    from bakeoff.ab.ab_warp import compiled
    from hofem.backends.cuda import operator_fuse as of
    from hofem.backends.cuda.operator_blocked import BlockedFusedOperator, use_blocked_layout

    tiles = tile_variant(variant)
    if tiles is None:
        slab = BlockedFusedOperator if use_blocked_layout(op, shape) else of.FusedOperator
        return compiled(slab(op, shape), dot)
    return compiled(ot.TileFusedOperator(op, shape, *tiles), dot)


def case(ceed, form, geometry, p, variants, dot=False, rounds=5):
    """One line of the variants at order ``p`` (``ab_warp.compare_kernels``)."""
    import cupy

    from bakeoff.ab.ab_warp import compare_kernels, operator
    from hofem.backends.cuda import operator_fuse as of

    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    kernels = {name: build(op, shape, name, dot) for name in variants}
    return compare_kernels(kernels, u, p, dot, rounds)


def run(args, case_at=None):
    """One line per order of ``args`` (:func:`parse`'s) from ``case_at`` (:func:`case`'s
    arguments; default this script's)."""
    case_at = case if case_at is None else case_at
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        line = case_at(ceed, args.form, args.geometry, p, args.variants, args.dot, args.rounds)
        print(args.form, args.geometry, "dot" if args.dot else "apply", line, flush=True)


if __name__ == "__main__":
    run(parse())
