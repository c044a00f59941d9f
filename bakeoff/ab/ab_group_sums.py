"""Side by side on /gpu/cuda/gen: the warp kernels with one global atomic add per element
node against the same kernels summing each block's scatter in shared memory first (group
sums, ``hofem.backends.cuda.group_scatter``), for BP1 to BP6.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_group_sums --form vector-diffusion-gll 2 3 4
    python -m bakeoff.ab.ab_group_sums --form mass --geometry on_the_fly --dot 2 3 4 5 6

The first variant is gen's kernel with its tables' choice (``table``), then the same
kernel without group sums (``atomic``) and with them (``group``); orders where gen does not
run a warp kernel print so.  Prints one line per order as ``ab_warp``: registers and local
bytes, GDOF/s and the median of 5 alternating rounds' ratios over the first (5 applies
each, about 1e7 DOFs); every output is checked against the first's.
"""

import argparse

import cupy

import hofem as hf
from bakeoff.ab.ab_warp import FORMS, compare_kernels, compiled, operator
from hofem.backends.cuda import operator_warp as ow


def case(ceed, form, geometry, p, dot=False, rounds=5):
    op = operator(ceed, form, geometry, p)
    fused = ceed.backend._fused_operator(op)
    if not isinstance(fused, ow.WarpFusedOperator):
        return f"p={p} {fused.layout}: not a warp kernel"
    inner = (fused._op, fused._shape, fused._components, fused._comp_step)
    kernels = {"table": compiled(fused, dot)}
    for name, grouped in (("atomic", False), ("group", True)):
        kernels[name] = compiled(ow.WarpFusedOperator(*inner, grouped=grouped), dot)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    return compare_kernels(kernels, u, p, dot, rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="mass")
    parser.add_argument("--geometry", choices=("stored", "on_the_fly"), default="on_the_fly")
    parser.add_argument("--dot", action="store_true", help="time apply_dot (the CG kernel)")
    parser.add_argument("orders", type=int, nargs="+")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    for p in args.orders:
        line = case(ceed, args.form, args.geometry, p, args.dot)
        print(args.form, args.geometry, "dot" if args.dot else "apply", line, flush=True)


if __name__ == "__main__":
    main()
