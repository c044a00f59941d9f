"""``/cpu/self/numba`` side by side with libCEED and MFEM, alternating, median of ratios.

Usage::

    PYTHONPATH=/path/to/site-packages NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 \\
        python -m bakeoff compare-cpu [--problems bp1 ... bp6] [--orders 2 ... 8]
        [--dofs 3e5] [--rounds 10] [--batch 3] [--geometry stored on_the_fly]

For each problem, order and size the operators are built once: hofem's on
the box (the problem's form, components and rule,
:data:`hofem.bakeoff.problems.PROBLEMS`, no boundary conditions; one per ``--geometry``),
libCEED 0.12 ``/cpu/self/avx/blocked`` (:mod:`.anchor_libceed`, same space) and, for
BP1 and BP3 on hexes, MFEM partial assembly (:mod:`.anchor_mfem`), when importable.
Then ``--rounds`` rounds time each of them in turn (the median of ``--batch`` applies, and for
hofem one 20-iteration CG), so that a slow phase of a shared machine hits
all of them; each ratio is formed within a round and the line reports the
median over rounds.  One JSON line per case: ``mdofs`` (median MDOF/s of
each operator), ``ratios`` (hofem over each anchor, per geometry) and
``cg_over_apply`` (per geometry).
"""

import json

import numpy as np

import hofem as hf
from hofem.bakeoff.common import Parser, median_seconds
from hofem.bakeoff.problems import PROBLEMS

from .common import STRUCTURED, bp_form, bp_space
from .compare import active_basis, add_compare_arguments, alternate, summarize

__all__ = ["anchors", "run_case"]

CG_ITERATIONS = 20


def anchors(bp, space, basis=None):
    """``name -> apply()`` of the anchors that import (libCEED, MFEM); others left out.

    libCEED's operator reads ``space``'s offsets and node coordinates (on tets also
    ``basis``, hofem's operator's); MFEM builds its own ``n^3`` hex box of the same
    order (hexes only, BP1 and BP3).
    """
    out = {}
    try:
        from . import anchor_libceed as lc

        ceed = lc.open_ceed(lc.RESOURCES)
    except SystemExit:
        ceed = None
    if ceed is not None:
        u = np.random.default_rng(0).standard_normal(space.num_dofs)
        out["libceed"] = lc.bp_apply(ceed, bp, space, u, basis)[0]
    if basis is not None or bp not in STRUCTURED:
        return out
    try:
        from . import anchor_mfem

        out["mfem"] = anchor_mfem.bp_operator(bp, space.mesh.box_shape[0], space.order)[0]
    except SystemExit:
        pass
    return out


def run_case(ceed, bp, p, dofs, geometries, rounds, batch, cells="hex"):
    """Alternate the operators of one case for ``rounds`` rounds; the result line (dict)."""
    space = bp_space(ceed, bp, p, dofs, cells)
    num_dofs = space.num_dofs
    applies, cgs, bases = {}, {}, []
    for g in geometries:
        op, _ = bp_form(space, bp, g)
        bases.append(active_basis(op))
        u = ceed.asarray(np.random.default_rng(0).standard_normal(num_dofs))
        v = ceed.xp.zeros(num_dofs)
        b = op(u)
        hf.cg(op, b, rtol=0.0, maxiter=2)  # compiles the kernels and CG's vector updates
        applies[g] = lambda op=op, u=u, v=v: op.apply(u, v)
        cgs[g] = lambda op=op, b=b: hf.cg(op, b, rtol=0.0, maxiter=CG_ITERATIONS)
    applies.update(anchors(bp, space, bases[0] if cells == "tet" else None))
    apply_times, solve_times = alternate(applies, cgs, rounds, batch, median_seconds)
    result = {"bp": bp, "p": p, "cells": cells, "points": bases[0].num_qpts}
    result.update(dofs=num_dofs, elements=space.num_elem)
    result.update(backend=ceed.resource, rounds=rounds, batch=batch)
    result.update(summarize(num_dofs, apply_times, solve_times, geometries, CG_ITERATIONS))
    return result


def main(argv=None):
    parser = Parser(prog="python -m bakeoff compare-cpu", description=__doc__)
    add_compare_arguments(parser, 3e5, 10, 3, ("stored", "on_the_fly", "auto"), tuple(PROBLEMS))
    parser.add_argument("--ceed", default="/cpu/self/numba", help="hofem backend")
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.ceed)
    for dofs in args.dofs:
        for bp in args.problems:
            for p in args.orders:
                line = run_case(ceed, bp, p, dofs, args.geometry, args.rounds, args.batch,
                                args.cells)  # fmt: skip
                print(json.dumps(line), flush=True)
    return 0
