"""Side by side on tets: /gpu/cuda/batched, /gpu/cuda/gen's fused simplex kernel at its
default launch, and the same kernel at other launches (``operator_simplex.simplex_launch``
overrides), with its products on the fp64 tensor cores (``tensor_cores=True``,
``simplex_mma``) at its default launch and others, and where the operator is ``c_e B^T W B``
(mass on the fly on affine cells) the same variants on its factored rule (``factored_*``,
``simplex_factored``): the measurements behind the default and ``cuda_simplex.json``.

Usage (on a GPU)::

    python -m bakeoff.ab.ab_simplex_launch [--orders 1 2 3 4 5 6] [--dofs 3e6]
        [--problems bp1 bp3] [--geometry stored on_the_fly] [--rounds 5]
        [--variants mma mma_elems_8 ...]

One JSON line per case: the shape ``(dim, P, Q)``, each variant's launch and MDOF/s of one
apply (the median of ``--rounds`` alternating rounds of 5 applies), on the box of
``bench-gpu``'s ``tet`` case (user defaults: ``hf.mass``/``hf.diffusion`` on ``H1Space``).
"""

import argparse
import math
import statistics

import cupy

import hofem as hf
from bakeoff.common import emit, time_events
from hofem import meshes
from hofem.backends.cuda import operator_simplex as osx
from hofem.backends.cuda.simplex_factored import factored_view

FORMS = {"bp1": hf.mass, "bp3": hf.diffusion}
# launch overrides tried beside the default (``simplex_launch`` keywords, from the default)
VARIANTS = {
    "scalar": lambda d: {},
    "half_elems": lambda d: {"elems": max(1, d.elems // 2)},
    "double_elems": lambda d: {"elems": 2 * d.elems},
    "global_matrices": lambda d: {"shared_matrices": False},
    "threads_256": lambda d: {"threads": 256},
    "points_2": lambda d: {"points_per_thread": 2 * d.points_per_thread},
}
# the tensor-core kernel: its default launch and overrides (from its own default)
MMA = {"tensor_cores": True}
MMA_VARIANTS = {
    "mma": lambda d: {},
    "mma_elems_8": lambda d: {"elems": 8},
    "mma_half_elems": lambda d: {"elems": max(8, d.elems // 16 * 8)},
    "mma_double_elems": lambda d: {"elems": 2 * d.elems},
    "mma_threads_128": lambda d: {"threads": 128},
    "mma_threads_256": lambda d: {"threads": 256},
    "mma_tiles_1": lambda d: {"tiles": 1},
    "mma_tiles_4": lambda d: {"tiles": 4},
}


def operators(bp, p, dofs, geometry, variants, q_extra=None):
    """``{name: (operator, launch)}``: batched, gen's default (its launch None where gen hands
    the shape to batched), and each of ``variants`` (names of :data:`VARIANTS`, from the
    scalar kernel's default launch, and :data:`MMA_VARIANTS`) that fits.  ``q_extra``: the
    forms' (None: the user defaults' symmetric rule)."""
    n = max(1, math.ceil((dofs ** (1 / 3) - 1) / p))
    mesh = meshes.box(n, 3, simplex=True)
    ops = {}
    for resource in ("/gpu/cuda/batched", "/gpu/cuda/gen"):
        ceed = hf.Ceed(resource)
        space = hf.H1Space(ceed, mesh, p)
        ops[resource] = (FORMS[bp](space, geometry=geometry, q_extra=q_extra), None)
    op = ops["/gpu/cuda/gen"][0]
    shape = osx.simplex_shape(op)
    ops.update(_launches(op, variants))
    view = factored_view(op)
    if view is not None:  # c_e B^T W B: the same variants on its factored rule
        ops.update({f"factored_{name}": run for name, run in _launches(view, variants).items()})
    kernel = osx.simplex_operator(op)
    ops["/gpu/cuda/gen"] = (op, None if kernel is None else kernel.launch)
    return shape, ops


def _launches(op, variants):
    """``{name: (kernel, launch)}`` of ``op``'s simplex kernel at each of ``variants`` that
    fits."""
    shape, out = osx.simplex_shape(op), {}
    default = osx.simplex_launch(op, shape)
    for name in (name for name in variants if name in VARIANTS):
        launch = osx.simplex_launch(op, shape, **VARIANTS[name](default))
        if launch is not None and launch.used_bytes <= launch.shared_bytes:
            out[name] = (osx.SimplexOperator(op, shape, launch), launch)
    mma = osx.simplex_launch(op, shape, **MMA)
    for name in (name for name in variants if name in MMA_VARIANTS and mma is not None):
        launch = osx.simplex_launch(op, shape, **MMA, **MMA_VARIANTS[name](mma))
        if launch.used_bytes <= launch.shared_bytes:
            out[name] = (osx.SimplexOperator(op, shape, launch), launch)
    return out


def _apply(op):
    """``run(u, v)``: ``v = A u`` by the operator, or zero and the bare kernel's ``v += A u``
    (as ``Operator.apply`` on gen)."""
    if isinstance(op, osx.SimplexOperator):

        def run(u, v):
            v.fill(0.0)
            op(u, v)

        return run
    return op.apply


def case(bp, p, dofs, geometry, rounds, variants, q_extra=None):
    shape, ops = operators(bp, p, dofs, geometry, variants, q_extra)
    num_dofs = ops["/gpu/cuda/gen"][0].shape[1]
    u = cupy.random.default_rng(1).standard_normal(num_dofs)  # (l_size,)
    v = cupy.empty_like(u)
    want = ops["/gpu/cuda/batched"][0](u)
    applies = {name: _apply(op) for name, (op, _) in ops.items()}
    for name, run in applies.items():  # every variant computes the same operator
        run(u, v)
        err = float(cupy.linalg.norm(v - want) / cupy.linalg.norm(want))
        assert err < 1e-12, (name, err)
    times = {name: [] for name in ops}
    for _ in range(rounds):
        for name, run in applies.items():
            times[name].append(time_events(lambda run=run: run(u, v), 5))
    emit(
        bp=bp,
        p=p,
        geometry=geometry,
        shape=shape,
        dofs=num_dofs,
        launches={name: str(launch) for name, (_, launch) in ops.items() if launch},
        mdofs={name: num_dofs / statistics.median(t) / 1e6 for name, t in times.items()},
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6])
    parser.add_argument("--problems", nargs="+", default=["bp1", "bp3"], choices=FORMS)
    parser.add_argument("--geometry", nargs="+", default=["stored", "on_the_fly"])
    parser.add_argument("--dofs", type=float, default=3e6)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--q-extra", type=int, default=None, help="the forms' q_extra (default: symmetric rules)"
    )
    every = {**VARIANTS, **MMA_VARIANTS}
    parser.add_argument("--variants", nargs="+", default=list(every), choices=every)
    args = parser.parse_args(argv)
    variants = {name: every[name] for name in args.variants}
    for bp in args.problems:
        for geometry in args.geometry:
            for p in args.orders:
                case(bp, p, args.dofs, geometry, args.rounds, variants, args.q_extra)


if __name__ == "__main__":
    main()
