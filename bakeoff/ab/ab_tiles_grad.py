"""Side by side on /gpu/cuda/gen: the collocated gradient kernel with one warp per element and
every contraction a GEMM on the fp64 tensor cores (``operator_tiles_grad``) against gen's
choice for BP5 and BP6 on Gauss-Lobatto points.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_tiles_grad 8 --form diffusion-gll --geometry stored
    python -m bakeoff.ab.ab_tiles_grad 8 --form diffusion-gll --geometry on_the_fly --dot
    python -m bakeoff.ab.ab_tiles_grad 8 --form vector-diffusion-gll --geometry stored
    python -m bakeoff.ab.ab_tiles_grad 8 7 --variants table w1 w2 --rounds 7

Variants: ``table`` is the kernel gen runs today at the shape (for BP6 p = 8 the slab on each
component, ``component_split``), ``wN`` the gradient tile kernel at ``N`` warps (elements at
a time) per block, each warp holding three buffers of ``Q_1d^2`` rows of
``operator_tiles.pitch`` doubles in dynamic shared memory; both are built by gen itself
(``wN`` with ``operator_tiles_grad``'s tables holding the shape), so BP6 runs the tile
kernel per component as gen would.  ``--dot`` times the kernel variant the device CG
launches (``apply_dot``) instead of the apply.  Prints one line per order: registers and
local (spill) bytes, GDOF/s and the median of ``--rounds`` alternating rounds' ratios over
``table`` (5 applies each, about 1e7 DOFs); every output is checked against ``table``'s.
Stored q-data or the Jacobian of the box's affine cells on the fly (once per element).
"""

import argparse
import re

from bakeoff.ab import ab_tiles
from hofem.backends.cuda import operator_tiles_grad as otg

FORMS = ("diffusion-gll", "vector-diffusion-gll")
# what a variant wN sets: operator_tiles_grad's tables and warps per block (either
# geometry's), and component_split's tables, so that a vector form runs the kernel on each
# component at any order (below p = 8 gen would take the components in turn)
TABLES = ("TILE_GRAD_SHAPES", "TILE_GRAD_CELL_SHAPES", "WARPS", "WARPS_STORED")
SPLIT_TABLES = ("SPLIT_GRAD_SHAPES", "SPLIT_GRAD_ON_THE_FLY_SHAPES")


def warps(variant: str) -> int | None:
    """Warps per block of variant ``wN``, or None for ``table``.

    Raises
    ------
    ValueError
        Neither ``table`` nor ``w`` and a positive count.
    """
    if variant == "table":
        return None
    match = re.fullmatch(r"w([1-9]\d*)", variant)
    if match is None:
        raise ValueError(f"variant {variant!r}: use table or wN (N warps per block)")
    return int(match.group(1))


def parse(argv=None) -> argparse.Namespace:
    """The command line (``ab_tiles.parse`` with this script's forms and variants)."""
    return ab_tiles.parse(argv, FORMS, warps, __doc__.splitlines()[0])


def _forget(op):
    """Drop gen's cached kernels of ``op`` and of its component operator (the split's)."""
    op.backend_data.clear()
    if op.component_operator is not None:
        op.component_operator().backend_data.clear()


def build(ceed, op, shape, variant, dot=False):
    """gen's fused operator of ``op`` for ``variant`` (the tables restored after), with its
    ``apply_dot`` kernel compiled where ``dot``: ``table`` as gen runs it today, ``wN``
    with the gradient tile tables holding ``shape`` at ``N`` warps per block."""
    from bakeoff.ab.ab_warp import compiled
    from hofem.backends.cuda import component_split as cs

    count = warps(variant)
    saved = [getattr(otg, name) for name in TABLES]
    saved_split = [getattr(cs, name) for name in SPLIT_TABLES]
    if count is not None:
        for name, value in zip(TABLES, (frozenset({shape}),) * 2 + (count,) * 2, strict=True):
            setattr(otg, name, value)
        for name, table in zip(SPLIT_TABLES, saved_split, strict=True):
            setattr(cs, name, table | {shape})
    try:
        _forget(op)
        fused = ceed.backend._fused_operator(op)
        compiled(fused, dot)  # the dot kernel now, while the tables hold
    finally:
        for name, value in zip(TABLES, saved, strict=True):
            setattr(otg, name, value)
        for name, table in zip(SPLIT_TABLES, saved_split, strict=True):
            setattr(cs, name, table)
        _forget(op)
    if count is not None and not fused.layout.startswith(otg.TileGradFusedOperator.layout):
        raise AssertionError(f"{variant}: gen ran {fused.layout!r}, not the gradient tiles")
    return fused


def case(ceed, form, geometry, p, variants, dot=False, rounds=5):
    """One line of the variants at order ``p`` (``ab_warp.compare_kernels``)."""
    import cupy

    from bakeoff.ab.ab_warp import compare_kernels, operator
    from hofem.backends.cuda import operator_fuse as of

    op = operator(ceed, form, geometry, p)
    shape = tuple(of.fusable_shape(op, 16))
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    kernels = {name: build(ceed, op, shape, name, dot) for name in variants}
    return compare_kernels(kernels, u, p, dot, rounds)


if __name__ == "__main__":
    ab_tiles.run(parse(), case)
