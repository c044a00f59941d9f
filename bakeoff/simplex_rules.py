"""Apply throughput on tets, before and after the symmetric default rule, against hexes.

For each problem (BP1: ``hf.mass``, BP3: ``hf.diffusion``, the operator on all DOFs)
and order p, four operators on boxes of about ``--dofs`` DOFs (the same lattice of
``(p n + 1)^3`` nodes for hexes and tets):

- ``hex``: the defaults, ``q = p + 2`` Gauss points per direction, ``geometry="auto"``;
- ``tet_before``: the tet defaults before the symmetric rules, ``q_extra=1`` (the
  collapsed Gauss-Jacobi rule exact to ``2p + 3``, ``(p + 2)^3`` points) and stored
  q-data per point;
- ``tet_rule``: the symmetric rule exact to ``2p`` (mass) or ``2p - 2`` (stiffness),
  stored q-data per point;
- ``tet_after``: the tet defaults, that rule and ``geometry="auto"`` (on the fly is one
  Jacobian per affine tet).

They are timed in turn (``hofem.bakeoff.compare.alternate``: a warm-up, then each round
times ``--batch`` applies of each: wall clock on the CPU, CUDA events on a GPU), and the
median over rounds is reported.  One JSON
line per case on stdout.

Usage (one thread, as in docs/simplices.md; on a GPU ``--resource /gpu/cuda/gen
--dofs 3e6``)::

    NUMBA_NUM_THREADS=1 PYTHONPATH=$PWD python bakeoff/simplex_rules.py \\
        --resource /cpu/self/numba --dofs 1.2e5 --orders 2 4 6 --rounds 5
"""

import argparse
import json
import statistics

import numpy as np

import hofem as hf
from bakeoff.common import event_seconds
from bakeoff.compare import alternate
from hofem.bakeoff.common import box_side
from hofem.bakeoff.problems import median_seconds
from hofem.meshes import box

FORMS = {"bp1": hf.mass, "bp3": hf.diffusion}


def operators(ceed, form, p, n):
    """``{name: (operator, num_qpts, geometry)}`` of the variants on ``n``-cell boxes."""
    hexes = hf.H1Space(ceed, box(n), p)
    tets = hf.H1Space(ceed, box(n, simplex=True), p)
    name = "mass" if form is hf.mass else "diffusion"
    q_new = tets.basis(**hf.form_quadrature(tets, name)).num_qpts
    q_old = tets.basis(q_extra=1).num_qpts
    auto = hf.resolve_geometry(tets, name)
    ops = {
        "hex": (form(hexes), hexes.basis().num_qpts, hf.resolve_geometry(hexes, name)),
        "tet_before": (form(tets, q_extra=1, geometry="stored"), q_old, "stored"),
        "tet_rule": (form(tets, geometry="stored"), q_new, "stored"),
        "tet_after": (form(tets), q_new, auto),
    }
    return ops, tets.num_dofs


def case(ceed, bp, p, dofs, rounds, batch):
    """One JSON record: DOFs/s of each variant and the ratios to hexes."""
    n = box_side(dofs, p)
    ops, num_dofs = operators(ceed, FORMS[bp], p, n)
    u = ceed.asarray(np.random.default_rng(0).standard_normal(num_dofs))
    v = ceed.xp.empty_like(u)
    applies = {name: (lambda op=op: op.apply(u, v)) for name, (op, *_) in ops.items()}
    timer = median_seconds if ceed.xp is np else event_seconds
    times, _ = alternate(applies, {}, rounds, batch, timer)
    rate = {name: num_dofs / statistics.median(t) for name, t in times.items()}
    return {
        "bp": bp,
        "p": p,
        "dofs": num_dofs,
        "elements_1d": n,
        "backend": ceed.resource,
        "num_qpts": {name: q for name, (_, q, _) in ops.items()},
        "geometry": {name: g for name, (*_, g) in ops.items()},
        "dofs_per_s": rate,
        "tet_over_hex": {k: rate[k] / rate["hex"] for k in rate if k != "hex"},
        "speedup": rate["tet_after"] / rate["tet_before"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resource", default="/cpu/self/numba")
    parser.add_argument("--dofs", type=float, default=1.2e5)
    parser.add_argument("--orders", type=int, nargs="+", default=[2, 4, 6])
    parser.add_argument("--problems", nargs="+", choices=sorted(FORMS), default=sorted(FORMS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=5)
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.resource)
    for bp in args.problems:
        for p in args.orders:
            record = case(ceed, bp, p, args.dofs, args.rounds, args.batch)
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
