"""Measure hf.pmg: iteration table (BP3, rtol 1e-8) and time to solution against CG and Jacobi.

Usage::

    python bakeoff/pmg_measure.py iterations --ceed /cpu/self/ref \
        --out bakeoff/results/cpu/pmg_iterations.jsonl
    NUMBA_NUM_THREADS=1 python bakeoff/pmg_measure.py time --ceed /cpu/self/numba \
        --orders 4 6 --dofs 1e6 --repeat 2 --out bakeoff/results/pmg_time.jsonl

One JSON line per case, appended to ``--out``; ``time`` records wall and process
seconds (on a shared machine the process seconds are the uncontended single-core time).
"""

import argparse
import time

import numpy as np

import hofem as hf
from hofem import meshes
from hofem.bakeoff.common import box_side, emit_line, threads
from hofem.bakeoff.problems import setup


def case_arguments(parser, ceed, dofs):
    """``--ceed``, ``--order`` (6) and ``--dofs`` of one BP3 box for the pmg scripts that
    time a single case (``pmg_options.py``, ``pmg_setup_host.py``)."""
    parser.add_argument("--ceed", default=ceed)
    parser.add_argument("--order", type=int, default=6)
    parser.add_argument("--dofs", type=float, default=dofs)


def problem(ceed, cell, p, dofs):
    n = box_side(dofs, p)
    if cell == "tet":  # 6 tets per box cell, same nodes
        n = max(1, n)
    mesh = meshes.box(n, 3, simplex=cell == "tet")
    return n, setup("bp3", ceed, p, mesh)


def iterations(args):
    ceed = hf.Ceed(args.ceed)
    for cell in args.cells:
        for dofs in args.dofs:
            for p in args.orders:
                n, prob = problem(ceed, cell, p, dofs)
                start = time.perf_counter()
                M = hf.pmg(prob.operator)
                setup_s = time.perf_counter() - start
                start = time.perf_counter()
                _, info = hf.cg(prob.operator, prob.rhs, M=M, rtol=1e-8)
                record = dict(
                    cell=cell, p=p, n=n, dofs=prob.space.num_dofs, ceed=ceed.resource,
                    orders=M.hierarchy.orders, iterations=info.iterations,
                    converged=info == 0, precond_setup_s=setup_s,
                    solve_s=time.perf_counter() - start,
                )  # fmt: skip
                emit_line(args.out, record)


_PRECONDITIONERS = (("none", None), ("jacobi", hf.jacobi), ("pmg", hf.pmg))


def time_to_solution(args):
    ceed = hf.Ceed(args.ceed)
    for p in args.orders:
        for dofs in args.dofs:
            n, prob = problem(ceed, "hex", p, dofs)
            A, b = prob.operator, prob.rhs
            hf.cg(A, b, rtol=0.0, maxiter=2)  # compile the operator
            warm = hf.pmg(A)  # compile the coarse levels, the transfers, the vector kernels
            warm(b)
            hf.cg(A, b, M=warm, rtol=0.0, maxiter=1)
            del warm
            if args.profile:
                profile_setup(A, args.profile)
            cases = [case for case in _PRECONDITIONERS if case[0] in args.preconditioners]
            runs = [(k, *case) for k in range(args.repeat) for case in cases]
            for run, name, make in runs:  # alternating: the load of a shared machine drifts
                # process time too: on a shared machine it is what one uncontended core would take
                start, cpu = time.perf_counter(), time.process_time()
                M = make(A) if make else None
                setup_s, setup_cpu_s = time.perf_counter() - start, time.process_time() - cpu
                start, cpu = time.perf_counter(), time.process_time()
                _, info = hf.cg(A, b, M=M, rtol=1e-8)
                solve_s, solve_cpu_s = time.perf_counter() - start, time.process_time() - cpu
                record = dict(
                    p=p, n=n, dofs=prob.space.num_dofs, ceed=ceed.resource, preconditioner=name,
                    run=run, threads=threads(),
                    iterations=info.iterations, precond_setup_s=setup_s, solve_s=solve_s,
                    time_to_solution_s=setup_s + solve_s, precond_setup_cpu_s=setup_cpu_s,
                    solve_cpu_s=solve_cpu_s, time_to_solution_cpu_s=setup_cpu_s + solve_cpu_s,
                )  # fmt: skip
                if name == "pmg":
                    record.update(vcycle_over_apply=vcycle_cost(A, M))
                    record.update(setup_split_s=M.hierarchy.info["setup_seconds"])
                emit_line(args.out, record)


def vcycle_cost(A, M, repeat=5):
    """Seconds of one V-cycle over seconds of one fine-operator apply (medians)."""
    r = A.ceed.asarray(np.random.default_rng(0).standard_normal(A.shape[0]))
    v = A.ceed.xp.empty_like(r)

    def median(fn):
        times = []
        for _ in range(repeat):
            A.ceed.backend.synchronize()
            start = time.perf_counter()
            fn()
            A.ceed.backend.synchronize()
            times.append(time.perf_counter() - start)
        return float(np.median(times))

    return median(lambda: M(r)) / median(lambda: A.apply(r, v))


def profile_setup(A, lines):
    """Print the ``lines`` costliest calls of one ``hf.pmg(A)`` by cumulative and by own time
    (cProfile)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(hf.pmg, A)
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(lines)
    stats.sort_stats("tottime").print_stats(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=("iterations", "time"))
    parser.add_argument("--ceed", default="/cpu/self/ref")
    parser.add_argument("--cells", nargs="+", default=["hex", "tet"])
    parser.add_argument("--orders", nargs="+", type=int, default=list(range(1, 9)))
    parser.add_argument("--dofs", nargs="+", type=float, default=[1e4, 1e5])
    parser.add_argument("--repeat", type=int, default=1, help="time: rounds of none/jacobi/pmg")
    parser.add_argument(
        "--preconditioners", nargs="+", default=[name for name, _ in _PRECONDITIONERS],
        choices=[name for name, _ in _PRECONDITIONERS], help="time: which ones, in each round",
    )  # fmt: skip
    parser.add_argument("--profile", type=int, default=0, help="time: profile one set-up first")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    (iterations if args.what == "iterations" else time_to_solution)(args)


if __name__ == "__main__":
    main()
