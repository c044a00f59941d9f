"""Time hf.pmg's set-up on the distributed BP3 problem against the serial one.

Usage (one thread per rank)::

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 mpiexec -n 2 python bakeoff/par_pmg_setup.py \
        --ceed /cpu/self/numba --orders 4 6 --dofs 5e5 --repeat 3
    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 python bakeoff/par_pmg_setup.py --serial ...

Rank 0 prints one JSON line per set-up: wall seconds, process seconds and the split
``hierarchy.info["setup_seconds"]`` (levels, diagonals, eigenvalues, coarse), after a
warm-up set-up that compiles the coarse levels; ``--profile N`` prints rank 0's ``N``
costliest calls of one more set-up (cProfile, by cumulative and by own time).
"""

import argparse
import json
import time

import hofem as hf
from hofem import meshes
from hofem.bakeoff.common import box_side
from hofem.bakeoff.problems import setup


def backend(args):
    """(ceed, comm or None): each rank's backend (bound to its GPU for ``/gpu``)."""
    if args.serial:
        return hf.Ceed(args.ceed), None
    from hofem import parallel as par
    from hofem.bakeoff.distributed import ceed_on_every_rank

    comm = par.world()
    return ceed_on_every_rank(comm, args.ceed), comm


def build(ceed, comm, p, dofs):
    """(operator, global DOFs) of BP3 at order ``p`` and about ``dofs`` DOFs."""
    n = box_side(dofs, p)
    if comm is None:
        prob = setup("bp3", ceed, p, meshes.box(n, 3))
        return prob.operator, prob.space.num_dofs
    from hofem.bakeoff.distributed import setup_distributed

    prob = setup_distributed("bp3", ceed, p, comm, elements=n)
    return prob.operator, prob.space.num_dofs


def timed(A, comm):
    """(M, wall seconds, process seconds) of one ``hf.pmg(A)``, between barriers."""
    if comm is not None:
        comm.Barrier()
    start, cpu = time.perf_counter(), time.process_time()
    M = hf.pmg(A)
    A.ceed.backend.synchronize()
    if comm is not None:
        comm.Barrier()
    return M, time.perf_counter() - start, time.process_time() - cpu


def profile(A):
    """cProfile statistics of one ``hf.pmg(A)``."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(hf.pmg, A)
    return pstats.Stats(profiler)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--orders", nargs="+", type=int, default=[4, 6])
    parser.add_argument("--dofs", type=float, default=5e5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--serial", action="store_true", help="the serial problem instead")
    parser.add_argument("--profile", type=int, default=0, help="print rank 0's N costliest calls")
    parser.add_argument("--out", default=None, help="also append the JSON lines here")
    args = parser.parse_args()
    ceed, comm = backend(args)
    for p in args.orders:
        A, dofs = build(ceed, comm, p, args.dofs)
        rank0 = comm is None or comm.rank == 0
        ranks = 1 if comm is None else comm.size
        timed(A, comm)  # warm-up: compiles the coarse levels and transfers
        for run in range(args.repeat):
            M, wall, cpu = timed(A, comm)
            split = M.hierarchy.info["setup_seconds"]
            record = dict(
                p=p, dofs=dofs, ranks=ranks, ceed=ceed.resource, run=run, setup_s=wall,
                setup_cpu_s=cpu, split_s={k: round(v, 4) for k, v in split.items()},
            )  # fmt: skip
            if rank0:
                print(json.dumps(record), flush=True)
                if args.out:
                    with open(args.out, "a", encoding="utf-8") as out:
                        out.write(json.dumps(record) + "\n")
            del M
        if args.profile:
            stats = profile(A)
            if rank0:
                stats.sort_stats("cumulative").print_stats(args.profile)
                stats.sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
