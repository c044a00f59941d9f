"""hofem's CUDA backends side by side with libCEED's, alternating, median of ratios.

Usage::

    PYTHONPATH=/path/to/libceed-with-cuda python -m bakeoff compare-gpu
        [--problems bp1 ... bp6] [--orders 2 ... 8] [--dofs 1e7] [--rounds 5] [--batch 5]
        [--ceed /gpu/cuda/gen /gpu/cuda/batched] [--geometry stored on_the_fly]
        [--anchors /gpu/cuda/gen /gpu/cuda/shared] [--cg-iters 50]

For each problem, order and size: hofem's operators on the box (the problem's form,
components and rule, :data:`hofem.bakeoff.problems.PROBLEMS`; no boundary conditions),
one per backend of ``--ceed`` and
``--geometry`` (:func:`operator_pairs`: on-the-fly geometry only where the
backend computes it in its kernel, ``/gpu/cuda/gen``), and libCEED's BP operators
(:mod:`.anchor_libceed`: its gallery QFunctions, stored q-data) on the same
offsets, one per resource of ``--anchors``.  libCEED must be a build with
its CUDA backends (``make CUDA_DIR=...`` of libCEED's sources and its
Python bindings); without it the line has hofem's operators only.
Then ``--rounds`` rounds time each in turn (CUDA events, the median of
``--batch`` applies; for hofem also one ``--cg-iters``-iteration CG with
the default convergence checks).  One JSON line per case: ``mdofs`` (median
MDOF/s of each operator), ``ratios`` (each hofem operator over each
anchor: the anchor's time over hofem's) and ``cg_over_apply``.
"""

import json
import sys

import numpy as np

import hofem as hf
from hofem.bakeoff.common import Parser, positive_int
from hofem.bakeoff.problems import PROBLEMS
from hofem.geometry import MACHINE_BALANCE

from .common import bp_form, bp_space, event_seconds
from .compare import active_basis, add_compare_arguments, alternate, summarize

__all__ = ["available_anchors", "libceed_applies", "operator_pairs", "run_case"]

ANCHORS = ("/gpu/cuda/gen", "/gpu/cuda/shared")


def libceed_applies(resources, bp, space, u, basis=None):
    """libCEED's operator of each resource (see :func:`available_anchors`).

    Parameters
    ----------
    resources : sequence of str
    bp : str
    space : H1Space
        The box: its offsets and node coordinates.
    u : ndarray (num_comp * space.num_nodes,), float64
        Input of every apply, component-major.
    basis : hofem.Basis, optional
        Tets: hofem's operator's basis, whose matrices and rule libCEED applies.

    Returns
    -------
    dict, ``"libceed RES"`` -> (apply, output)
        ``apply()`` applies the operator to ``u``; ``output()`` is the last
        result as a NumPy array shaped as ``u``.
    """
    from . import anchor_libceed as lc

    return {
        "libceed " + resource.rsplit("/", 1)[1]: lc.bp_apply(
            lc.open_ceed((resource,)), bp, space, u, basis
        )
        for resource in resources
    }


def available_anchors(resources):
    """The resources of ``resources`` that libCEED runs; a line on stderr names the others."""
    from .anchor_libceed import resolves

    found = [r for r in resources if resolves(r)]
    if len(found) < len(resources):
        print(
            f"compare-gpu: no libCEED that runs {', '.join(sorted(set(resources) - set(found)))}"
            " is importable, so those anchors are left out: build libCEED's sources with "
            "`make CUDA_DIR=/usr/local/cuda` and install its Python bindings",
            file=sys.stderr,
        )
    return found


def case_anchors(resources, bp, p, cells):
    """The resources of ``resources`` that apply ``bp`` at order ``p`` on ``cells``
    (:func:`.anchor_libceed.applies`); a line on stderr for each that does not."""
    from .anchor_libceed import applies

    kept = []
    for resource in resources:
        ok, error = applies(resource, bp, p, cells)
        if ok:
            kept.append(resource)
        else:
            print(f"compare-gpu: libCEED {resource} fails {bp} p = {p} on {cells}s, left out: "
                  f"{error}", file=sys.stderr)  # fmt: skip
    return kept


def operator_pairs(ceeds, geometries):
    """The ``(ceed, geometry)`` of each hofem operator timed.

    On-the-fly geometry only on backends that recompute it inside the operator
    kernel (those of :data:`hofem.geometry.MACHINE_BALANCE`); elsewhere it
    would time a Q-vector of coordinate gradients, not the design.
    """
    return [
        (ceed, g)
        for ceed in ceeds
        for g in geometries
        if g != "on_the_fly" or ceed.resource in MACHINE_BALANCE
    ]


def run_case(pairs, bp, p, dofs, anchors, rounds, batch, cg_iters, cells="hex"):
    """Alternate the operators of one case for ``rounds`` rounds; the result line (dict).

    Besides :func:`.compare.summarize`'s figures, ``max_rel_diff`` compares
    every operator's output with the first hofem operator's (max norm,
    relative): they apply the same matrix to the same vector.
    """
    import cupy

    spaces = {}  # one box per backend
    for ceed, _ in pairs:
        if ceed.resource not in spaces:
            spaces[ceed.resource] = bp_space(ceed, bp, p, dofs, cells)
    num_dofs = next(iter(spaces.values())).num_dofs
    u_host = np.random.default_rng(0).standard_normal(num_dofs)  # (num_dofs,)
    u = cupy.asarray(u_host)
    applies, outputs, cgs, bases = {}, {}, {}, []
    for ceed, g in pairs:
        op, _ = bp_form(spaces[ceed.resource], bp, g)
        bases.append(active_basis(op))
        v = cupy.empty_like(u)
        b = op(u)
        name = f"{ceed.resource.rsplit('/', 1)[1]} {g}"
        applies[name] = lambda op=op, v=v: op.apply(u, v)
        outputs[name] = lambda v=v: cupy.asnumpy(v)
        cgs[name] = lambda op=op, b=b: hf.cg(op, b, rtol=1e-30, maxiter=cg_iters)
    ours = list(applies)
    space = next(iter(spaces.values()))
    basis = bases[0] if cells == "tet" else None
    anchors = case_anchors(anchors, bp, p, cells)
    for name, (apply, output) in libceed_applies(anchors, bp, space, u_host, basis).items():
        applies[name], outputs[name] = apply, output
    apply_times, solve_times = alternate(applies, cgs, rounds, batch, event_seconds)
    result = {"bp": bp, "p": p, "cells": cells, "points": bases[0].num_qpts}
    result.update(dofs=num_dofs, elements=space.num_elem)
    result.update(rounds=rounds, batch=batch, cg_iters=cg_iters)
    result.update(summarize(num_dofs, apply_times, solve_times, ours, cg_iters))
    reference = outputs[ours[0]]()
    scale = np.abs(reference).max()
    result["max_rel_diff"] = {
        name: float(np.abs(output() - reference).max() / scale)
        for name, output in outputs.items()
        if name != ours[0]
    }
    return result


def main(argv=None):
    parser = Parser(prog="python -m bakeoff compare-gpu", description=__doc__)
    add_compare_arguments(parser, 1e7, 5, 5, ("stored", "on_the_fly"), tuple(PROBLEMS))
    parser.add_argument("--cg-iters", type=positive_int, default=50, help="CG iterations (50)")
    parser.add_argument(
        "--ceed",
        nargs="+",
        choices=("/gpu/cuda/gen", "/gpu/cuda/batched", "/gpu/cuda/ref"),
        default=["/gpu/cuda/gen", "/gpu/cuda/batched"],
        help="hofem backends (default: gen and batched)",
    )
    parser.add_argument(
        "--anchors",
        nargs="*",
        choices=("/gpu/cuda/gen", "/gpu/cuda/shared", "/gpu/cuda/ref"),
        default=list(ANCHORS),
        help="libCEED resources (default: gen and shared)",
    )
    args = parser.parse_args(argv)
    if not any(r in MACHINE_BALANCE for r in args.ceed) and set(args.geometry) == {"on_the_fly"}:
        parser.error(
            "--geometry on_the_fly is timed on /gpu/cuda/gen only: add it to --ceed, or add stored"
        )
    import cupy

    pairs = operator_pairs([hf.Ceed(resource) for resource in args.ceed], args.geometry)
    anchors = available_anchors(args.anchors)
    for dofs in args.dofs:
        for bp in args.problems:
            for p in args.orders:
                line = run_case(pairs, bp, p, dofs, anchors, args.rounds, args.batch,
                                args.cg_iters, args.cells)  # fmt: skip
                print(json.dumps(line), flush=True)
                cupy.get_default_memory_pool().free_all_blocks()
    return 0
