"""Side by side on /gpu/cuda/gen: a vector form's own fused kernel against its one-component
kernel run on each component block (``hofem.backends.cuda.component_split``), BP2/BP4/BP6,
and against one warp kernel of the one-component operator that takes the components in turn
(``operator_warp.use_components_in_turn``).

Usage (on a GPU)::

    python -m bakeoff.ab.ab_component_split --forms vector-diffusion vector-diffusion-gll \\
        --geometry stored on_the_fly --orders 2 3 4 5 6 7 8 --out results.jsonl
    python -m bakeoff.ab.ab_component_split --forms vector-diffusion-gll --orders 2 3 4 \\
        --turn 4 5 6 8 --out results.jsonl

For each case, the apply (``run(u, v)``) and the device CG's kernel (``apply_dot``) of each
variant, in alternating rounds (5 applies each, CUDA events, about 1e7 DOFs): one JSON line
per case and variant (GDOF/s, median ratio over ``vector``) and one printed line per case.
``--turn`` adds the components-in-turn kernel (``turnN``) at each of these budgets (blocks
per SM of ``__launch_bounds__``; the warp layout's shapes, ``P_1d, Q_1d <= 8``, with
gradients).  Every output is checked against the vector kernel's (1e-12).
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
from hofem.backends.cuda import operator_warp as ow

FORMS = ("vector-mass", "vector-diffusion", "vector-diffusion-gll")


SPLIT_TABLES = ("SPLIT_SHAPES", "SPLIT_GRAD_SHAPES", "SPLIT_GRAD_ON_THE_FLY_SHAPES")
TURN_TABLES = ("WARP_IN_TURN_SHAPES", "WARP_IN_TURN_STORED_SHAPES")


def kernels(ceed, op, budgets=()):
    """``{"vector": op's own fused kernel, "split": its component split, "turnN": the
    components in turn at N blocks per SM}``, built by gen with the split's and the
    in-turn tables set for each, then holding ``op``'s shape."""
    shape = tuple(of.fusable_shape(op, 16))
    saved = {name: getattr(cs, name) for name in SPLIT_TABLES}
    saved_turn = {name: getattr(ow, name) for name in TURN_TABLES}
    out = {}
    variants = [("vector", frozenset(), {}), ("split", frozenset({shape}), {})]
    variants += [(f"turn{b}", frozenset(), {shape: b}) for b in budgets]
    try:
        for name, split, turn in variants:
            for table in SPLIT_TABLES:
                setattr(cs, table, split)
            for table in TURN_TABLES:
                setattr(ow, table, turn)
            op.backend_data.clear()
            out[name] = ceed.backend._fused_operator(op)
            # the CG variant compiled now, while the tables give its budget
            u, v = cupy.zeros(op.shape[1]), cupy.zeros(op.shape[0])  # (l_size,)
            status = cupy.zeros(1, dtype=cupy.int64)
            out[name].apply_dot(u, v, cupy.empty(out[name].num_blocks), status)
    finally:
        for table, value in (saved | saved_turn).items():
            setattr(cs if table in saved else ow, table, value)
        op.backend_data.clear()
    if not isinstance(out["split"], cs.ComponentSplitOperator):
        raise AssertionError(f"{shape}: gen did not split")
    for b in budgets:
        if out[f"turn{b}"].layout != "warp, components in turn":
            raise AssertionError(f"{shape}: gen did not take the components in turn")
    return shape, out


def case(ceed, form, geometry, p, rounds, budgets=()):
    """Time the variants of one case; returns the JSON records."""
    op = operator(ceed, form, geometry, p)
    shape, fused = kernels(ceed, op, budgets)
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
    parser.add_argument("--turn", nargs="*", type=int, default=[], metavar="BLOCKS")
    parser.add_argument("--out", required=True, help="JSON lines, appended")
    args = parser.parse_args()
    ceed = hf.Ceed("/gpu/cuda/gen")
    geometries = args.geometry or ["stored", "on_the_fly"]
    with open(args.out, "a") as out:
        for form in args.forms:
            for geometry in geometries:
                for p in args.orders:
                    records = case(ceed, form, geometry, p, args.rounds, args.turn)
                    for record in records:
                        out.write(json.dumps(record) + "\n")
                    cells = [f"{r['variant']}/{r['kernel']} {r['gdofs']:.1f} ({r['ratio']:.2f})"
                             for r in records]  # fmt: skip
                    print(f"{form} {geometry} p={p} {records[0]['layout']}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
