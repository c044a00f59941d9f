"""Does CuPy's memory pool make some pmg set-ups slow? BP3 on one GPU, one process per pool.

Each round times CG (as ``pmg_measure.py time`` does, so the pool holds what a CG solve
leaves), then ``hf.pmg(A)`` under one pool state, then the PCG solve, and counts the
``cudaMalloc`` calls the set-up made (a CuPy memory hook) and the pool's bytes::

    python bakeoff/pmg_pool_ab.py --pool default --states as_is freed --rounds 6 --out F
    python bakeoff/pmg_pool_ab.py --pool async --states as_is --rounds 6 --out F

``--pool``: ``default`` (CuPy's ``MemoryPool``) or ``async`` (the stream-ordered
``MemoryAsyncPool``, set before any array exists). States: ``as_is`` (the pool as CG left
it), ``freed`` (``free_all_blocks()`` first: every block of the set-up a new ``cudaMalloc``).
"""

import argparse
import time

import cupy
from pmg_measure import problem

import hofem as hf
from hofem.bakeoff.common import emit_line


class AllocCounter(cupy.cuda.MemoryHook):
    """Counts the pool's device allocations (``cudaMalloc``) and their bytes."""

    name = "AllocCounter"

    def __init__(self):
        self.calls = 0
        self.bytes = 0

    def alloc_postprocess(self, device_id, mem_size, mem_ptr):
        self.calls += 1
        self.bytes += mem_size


def one_round(A, b, state, pool):
    hf.cg(A, b, rtol=1e-8)
    if state == "freed":
        pool.free_all_blocks()
    cupy.cuda.Device().synchronize()
    before = pool.total_bytes()
    counter = AllocCounter()
    start = time.perf_counter()
    with counter:
        M = hf.pmg(A)
    setup_s = time.perf_counter() - start
    start = time.perf_counter()
    _, info = hf.cg(A, b, M=M, rtol=1e-8)
    solve_s = time.perf_counter() - start
    split = M.hierarchy.info["setup_seconds"]
    return dict(
        state=state, setup_s=setup_s, solve_s=solve_s, iterations=info.iterations,
        mallocs=counter.calls, malloc_bytes=counter.bytes, pool_before=before,
        pool_after=pool.total_bytes(), setup_split_s=split,
    )  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/gpu/cuda/gen")
    parser.add_argument("--order", type=int, default=6)
    parser.add_argument("--dofs", type=float, default=1e7)
    parser.add_argument("--pool", choices=("default", "async"), default="default")
    parser.add_argument("--states", nargs="+", choices=("as_is", "freed"), default=["as_is"])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.pool == "async":
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    pool = cupy.get_default_memory_pool()
    _, prob = problem(hf.Ceed(args.ceed), "hex", args.order, args.dofs)
    A, b = prob.operator, prob.rhs
    hf.cg(A, b, rtol=0.0, maxiter=2)
    warm = hf.pmg(A)
    hf.cg(A, b, M=warm, rtol=0.0, maxiter=1)
    del warm
    for k in range(args.rounds):
        for state in args.states:
            record = one_round(A, b, state, pool)
            record.update(pool=args.pool, round=k, p=args.order, dofs=prob.space.num_dofs)
            emit_line(args.out, record)
            print(
                f"{args.pool:7s} {state:6s} set-up {record['setup_s']:.4f} s solve "
                f"{record['solve_s']:.4f} s it {record['iterations']} mallocs {record['mallocs']} "
                f"({record['malloc_bytes'] / 2**20:.0f} MiB)", flush=True,
            )  # fmt: skip


if __name__ == "__main__":
    main()
