"""CPU bake-off benchmark: BP1 (mass) and BP3 (Poisson) operator apply and CG throughput.

Usage::

    python -m hofem.bakeoff.benchmark_cpu [--bp 1 3] [--order 1 2 ... 8] [--dofs 3e5 2e6]
                                          [--ceed /cpu/self/numba] [--repeat N]

Prints one JSON line per case with the apply DOFs/s (median of ``--repeat``
timed applies after a warm-up) and CG DOFs x iterations/s (20 iterations,
``rtol=0``), and a separate ``"kind": "compile"`` line with the first-call
(compile) seconds.  Threads: ``NUMBA_NUM_THREADS`` (reported as ``threads``).

The problem is a 3D hex box of continuous Q_p elements (p + 1 Gauss-Lobatto
nodes, q = p + 2 Gauss points per direction), built directly from the
algebra layer on a structured grid.
"""

import argparse
import json
import statistics
import time

import numpy as np

import hofem as hf

CG_ITERATIONS = 20


def box(ceed, n, p, bp):
    """Operator of BP1 (mass) or BP3 (Poisson) on an n^3 box of order p, and its size."""
    side = n * p + 1
    local = np.arange(p + 1)
    ids = np.zeros([n] * 3 + [p + 1] * 3, dtype=np.int64)  # (n_z, n_y, n_x, p+1 [z, y, x])
    for d in range(3):  # d = 0 is x: last element axis, last node axis
        e_shape, n_shape = [1] * 6, [1] * 6
        e_shape[2 - d], n_shape[5 - d] = n, p + 1
        ids = ids + (np.arange(n).reshape(e_shape) * p + local.reshape(n_shape)) * side**d
    offsets = ids.reshape(n**3, (p + 1) ** 3)  # (num_elem, P)
    num_nodes, num_elem, P = side**3, n**3, (p + 1) ** 3
    x1d = np.concatenate([e + (hf.lobatto_quadrature(p + 1)[0][:-1] + 1) / 2 for e in range(n)])
    x1d = np.append(x1d, n) / n  # (side,)
    grids = np.meshgrid(x1d, x1d, x1d, indexing="ij")[::-1]  # x first
    coords = np.concatenate([g.ravel() for g in grids])  # (3 * num_nodes,)
    q = p + 2
    Q = q**3
    size = 1 if bp == 1 else 6
    r_x = ceed.ElemRestriction(num_elem, P, 3, num_nodes, 3 * num_nodes, offsets)
    r_u = ceed.ElemRestriction(num_elem, P, 1, 1, num_nodes, offsets)
    r_q = ceed.StridedElemRestriction(num_elem, Q, size, num_elem * Q * size, hf.STRIDES_BACKEND)
    geo = ceed.BasisTensorH1Lagrange(3, 3, p + 1, q, hf.GAUSS)
    basis = ceed.BasisTensorH1Lagrange(3, 1, p + 1, q, hf.GAUSS)
    build = ceed.Operator(ceed.QFunctionByName("Mass3DBuild" if bp == 1 else "Poisson3DBuild"))
    build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
    build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
    build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
    qdata = build(ceed.asarray(coords))
    op = ceed.Operator(ceed.QFunctionByName("MassApply" if bp == 1 else "Poisson3DApply"))
    names = ("u", "v") if bp == 1 else ("du", "dv")
    op.set_field(names[0], r_u, basis, hf.VECTOR_ACTIVE)
    op.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
    op.set_field(names[1], r_u, basis, hf.VECTOR_ACTIVE)
    return op, num_nodes, num_elem


def threads():
    """Threads the backend uses: Numba's current count, 1 when Numba is absent."""
    try:
        import numba
    except ImportError:
        return 1
    return numba.get_num_threads()


def run_case(ceed, bp, p, dofs, repeat):
    """Time one case; return the result line and the compile line (dicts)."""
    n = max(1, round((dofs ** (1 / 3) - 1) / p))
    op, num_nodes, num_elem = box(ceed, n, p, bp)
    u = ceed.asarray(np.random.default_rng(0).standard_normal(num_nodes))
    v = ceed.xp.zeros(num_nodes)
    start = time.perf_counter()
    op.apply(u, v)
    first = time.perf_counter() - start
    op.apply(u, v)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        op.apply(u, v)
        times.append(time.perf_counter() - start)
    apply_time = statistics.median(times)
    b = op(u)
    cg_times = []
    for _ in range(max(1, repeat // 5)):
        start = time.perf_counter()
        hf.cg(op, b, rtol=0.0, maxiter=CG_ITERATIONS)
        cg_times.append(time.perf_counter() - start)
    cg_time = statistics.median(cg_times)
    common = {"bp": bp, "p": p, "q": p + 2, "dofs": num_nodes, "elements": num_elem}
    common.update(backend=ceed.resource, threads=threads())
    result = dict(common, apply_dofs_per_s=num_nodes / apply_time)
    result["cg_dofs_iter_per_s"] = num_nodes * CG_ITERATIONS / cg_time
    result["cg_over_apply"] = result["cg_dofs_iter_per_s"] / result["apply_dofs_per_s"]
    return result, dict(common, kind="compile", first_apply_s=first, apply_s=apply_time)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bp", type=int, nargs="+", default=[1, 3], choices=[1, 3])
    parser.add_argument("--order", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--dofs", type=float, nargs="+", default=[3e5, 2e6])
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.ceed)
    for dofs in args.dofs:
        for bp in args.bp:
            for p in args.order:
                result, compile_line = run_case(ceed, bp, p, dofs, args.repeat)
                print(json.dumps(result), flush=True)
                print(json.dumps(compile_line), flush=True)


if __name__ == "__main__":
    main()
