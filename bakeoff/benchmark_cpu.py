"""CPU bake-off benchmark: BP1 (mass) and BP3 (Poisson) operator apply and CG throughput.

Usage::

    python -m bakeoff bench-cpu [--problems bp1 bp3] [--orders 1 2 ... 8]
        [--dofs 3e5 2e6] [--ceed /cpu/self/numba] [--repeat N]
        [--geometry {stored,on_the_fly,auto}]

Prints one JSON line per case with the apply DOFs/s (median of ``--repeat``
timed applies after a warm-up) and CG DOFs x iterations/s (20 iterations,
``rtol=0``, median of ``--repeat // 5`` solves after a 2-iteration warm-up),
``geometry`` (asked for) and ``geometry_used``, and a separate ``"kind":
"compile"`` line with the first-call (compile) seconds.  Threads:
``NUMBA_NUM_THREADS`` (reported as ``threads``); set
``OPENBLAS_NUM_THREADS=1`` with several Numba threads (OpenBLAS threads
spinning after CG's dot products compete with Numba's for the cores).

The libCEED anchor on the same boxes is ``python -m bakeoff anchor-libceed``.

The problem is a 3D hex box of continuous Q_p elements (p + 1 Gauss-Lobatto
nodes, q = p + 2 Gauss points per direction) on ``hofem.meshes.box``, built
through ``hf.mass``/``hf.diffusion`` (:func:`bakeoff.common.box_operator`).
"""

import json
import time

import numpy as np

import hofem as hf
from hofem.bakeoff.common import (
    Parser,
    add_ceed_argument,
    add_geometry_argument,
    box_side,
    median_seconds,
    threads,
)

from .common import add_case_arguments, box_operator

CG_ITERATIONS = 20


def run_case(ceed, bp, p, dofs, repeat, geometry="auto"):
    """Time one case; return the result line and the compile line (dicts)."""
    n = box_side(dofs, p)
    form = "mass" if bp == "bp1" else "diffusion"
    op, space, geometry_used = box_operator(ceed, form, n, p, geometry=geometry)
    num_nodes, num_elem = space.num_dofs, space.num_elem
    u = ceed.asarray(np.random.default_rng(0).standard_normal(num_nodes))
    v = ceed.xp.zeros(num_nodes)
    start = time.perf_counter()
    op.apply(u, v)
    first = time.perf_counter() - start
    op.apply(u, v)  # warm-up
    apply_time = median_seconds(lambda: op.apply(u, v), repeat)
    b = op(u)
    hf.cg(op, b, rtol=0.0, maxiter=2)  # warm-up: compiles the backend's vector updates
    cg_time = median_seconds(
        lambda: hf.cg(op, b, rtol=0.0, maxiter=CG_ITERATIONS), max(1, repeat // 5)
    )
    common = {"bp": bp, "p": p, "q": p + 2, "dofs": num_nodes, "elements": num_elem}
    common.update(backend=ceed.resource, threads=threads(), geometry=geometry)
    common["geometry_used"] = geometry_used
    result = dict(common, apply_dofs_per_s=num_nodes / apply_time)
    result["cg_dofs_iter_per_s"] = num_nodes * CG_ITERATIONS / cg_time
    result["cg_over_apply"] = result["cg_dofs_iter_per_s"] / result["apply_dofs_per_s"]
    return result, dict(common, kind="compile", first_apply_s=first, apply_s=apply_time)


def main(argv=None):
    parser = Parser(prog="python -m bakeoff bench-cpu", description=__doc__)
    add_case_arguments(parser)
    add_ceed_argument(parser, "/cpu/self/numba")
    add_geometry_argument(parser)
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.ceed)
    for dofs in args.dofs:
        for bp in args.problems:
            for p in args.orders:
                result, compile_line = run_case(ceed, bp, p, dofs, args.repeat, args.geometry)
                print(json.dumps(result), flush=True)
                print(json.dumps(compile_line), flush=True)
    return 0
