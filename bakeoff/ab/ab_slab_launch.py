"""Side by side on /gpu/cuda/gen: the slab kernel (``operator_fuse``, a thread per z column)
at other elements per block and register caps than gen's tables, for ``T_1d`` = 9, 10.

At ``T_1d`` = 10 gen's slab runs one element (100 threads, four warps with 28 lanes idle)
per block at up to 255 registers: two blocks, 8 warps per SM.  Packing several elements
into a block fills the warps' lanes, and a register cap lets more warps reside.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_slab_launch --form diffusion --geometry on_the_fly 8 7
    python -m bakeoff.ab.ab_slab_launch 8 --form mass --variants e1 e2c128 e4c128

A variant ``eNcR`` runs ``N`` elements per block (threads ``N T_1d^2``) compiled at
``--maxrregcount=R`` (``eN``: the ``register_cap`` rule, without ``cuda_fused.json``'s caps by
shape); ``b`` and ``bcR`` the register-blocked slab (``operator_blocked``, two columns a
thread) at the rule or at ``R``; ``table`` is the slab at gen's choice.  ``--dot`` times
the kernel variant the device CG launches (``apply_dot``) instead of the apply.  Prints one
line per order: registers and local (spill) bytes, GDOF/s and the median of 5
alternating rounds' ratios over ``table`` (5 applies each, about 1e7 DOFs); every output is
checked against ``table``'s.
"""

import argparse
import re

import cupy

import hofem as hf
from bakeoff.ab.ab_warp import FORMS, compare_kernels, compiled, operator
from hofem.backends.cuda import operator_blocked as ob
from hofem.backends.cuda import operator_fuse as of

VARIANTS = ("table", "e1", "e1c168", "e1c128", "e2c128", "e2c160", "e3c128", "e4c128", "e4c96")


def build(op, shape, variant, dot=False):
    """The slab operator of ``variant`` (the module's tables restored after), with its
    ``apply_dot`` kernel compiled where ``dot``."""
    if variant == "table":
        return compiled(of.FusedOperator(op, shape), dot)
    if variant.startswith("b"):
        cap = variant[2:]
        saved = of.register_cap
        if cap:
            of.register_cap = lambda num_regs, t_1d: int(cap)
        try:
            return compiled(ob.BlockedFusedOperator(op, shape), dot)
        finally:
            of.register_cap = saved
    elems, cap = re.fullmatch(r"e(\d+)(?:c(\d+))?", variant).groups()
    T = max(shape[1:])
    saved = of.THREADS_BY_SHAPE, of.slab_register_cap
    of.THREADS_BY_SHAPE = {tuple(shape): int(elems) * T * T}
    of.slab_register_cap = lambda op, shape: None if cap is None else int(cap)
    try:
        fused = compiled(of.FusedOperator(op, shape), dot)
    finally:
        of.THREADS_BY_SHAPE, of.slab_register_cap = saved
    assert fused._block[2] == int(elems), (variant, fused._block)  # the scratch cap
    return fused


def case(ceed, form, geometry, p, variants, dot=False, rounds=5):
    op = operator(ceed, form, geometry, p)
    shape = of.fusable_shape(op, 16)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    kernels = {name: build(op, shape, name, dot) for name in variants}
    return compare_kernels(kernels, u, p, dot, rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="mass")
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="stored")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--dot", action="store_true", help="time apply_dot (the CG kernel)")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    if args.variants[0] != "table":
        args.variants.insert(0, "table")
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        line = case(ceed, args.form, args.geometry, p, args.variants, args.dot)
        print(args.form, args.geometry, "dot" if args.dot else "apply", line, flush=True)


if __name__ == "__main__":
    main()
