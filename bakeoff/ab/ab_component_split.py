"""Side by side on /gpu/cuda/gen: a vector form's own fused kernel against its one-component
kernel run on each component block (``hofem.backends.cuda.component_split``), BP2/BP4/BP6.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_component_split --forms vector-diffusion vector-diffusion-gll \\
        --geometry stored on_the_fly --orders 2 3 4 5 6 7 8 --out results.jsonl

For each case, the apply (``run(u, v)``) and the device CG's kernel (``apply_dot``) of both
variants, in alternating rounds (5 applies each, CUDA events, about 1e7 DOFs): one JSON line
per case and variant (GDOF/s, median ratio over ``vector``) and one printed line per case.
The split's output is checked against the vector kernel's (1e-12).
"""

import argparse
import json
import statistics

import cupy

import hofem as hf
from bakeoff.ab.ab_warp import operator
from bakeoff.common import alternating_times, check_same
from hofem.backends.cuda import component_split as cs
from hofem.backends.cuda import operator_fuse as of

FORMS = ("vector-mass", "vector-diffusion", "vector-diffusion-gll")


def kernels(ceed, op):
    """``{"vector": op's own fused kernel, "split": its component split}``, built by gen with
    the split's tables emptied, then holding ``op``'s shape."""
    shape = tuple(of.fusable_shape(op, 16))
    saved = cs.SPLIT_SHAPES, cs.SPLIT_GRAD_SHAPES
    out = {}
    try:
        for name, table in (("vector", frozenset()), ("split", frozenset({shape}))):
            cs.SPLIT_SHAPES = cs.SPLIT_GRAD_SHAPES = table
            op.backend_data.clear()
            out[name] = ceed.backend._fused_operator(op)
    finally:
        cs.SPLIT_SHAPES, cs.SPLIT_GRAD_SHAPES = saved
        op.backend_data.clear()
    if not isinstance(out["split"], cs.ComponentSplitOperator):
        raise AssertionError(f"{shape}: gen did not split")
    return shape, out


def case(ceed, form, geometry, p, rounds):
    """Time both variants of one case; returns the JSON records."""
    op = operator(ceed, form, geometry, p)
    shape, fused = kernels(ceed, op)
    u = cupy.random.default_rng(0).standard_normal(op.shape[1])  # (l_size,)
    runs, outputs = {}, {}
    for name, kernel in fused.items():
        for dot in (False, True):
            out = cupy.zeros_like(u)
            args = (u, out, cupy.empty(kernel.num_blocks), cupy.zeros(1, dtype=cupy.int64))

            def run(kernel=kernel, out=out, args=args, dot=dot):
                out[...] = 0.0
                kernel.apply_dot(*args) if dot else kernel(u, out)

            run()
            key = (name, "dot" if dot else "apply")
            runs[key], outputs[key] = run, out
    check_same(outputs, ("vector", "apply"), f"{form} p={p}")
    times = alternating_times(runs, rounds)
    records = []
    for (name, what), t in times.items():
        base = times[("vector", what)]
        records.append(dict(
            form=form, geometry=geometry, p=p, shape=list(shape), dofs=int(u.size),
            variant=name, kernel=what, layout=fused[name].layout,
            gdofs=u.size / statistics.median(t) / 1e9,
            ratio=statistics.median(b / s for b, s in zip(base, t, strict=True)),
        ))  # fmt: skip
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS))
    parser.add_argument("--geometry", nargs="+", choices=("stored", "on_the_fly"))
    parser.add_argument("--orders", nargs="+", type=int, default=[2, 3, 4, 5, 6, 7, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", required=True, help="JSON lines, appended")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    geometries = args.geometry or ["stored", "on_the_fly"]
    with open(args.out, "a") as out:
        for form in args.forms:
            for geometry in geometries:
                for p in args.orders:
                    records = case(ceed, form, geometry, p, args.rounds)
                    for record in records:
                        out.write(json.dumps(record) + "\n")
                    cells = [f"{r['variant']}/{r['kernel']} {r['gdofs']:.1f} ({r['ratio']:.2f})"
                             for r in records]  # fmt: skip
                    print(f"{form} {geometry} p={p} {records[0]['layout']}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
