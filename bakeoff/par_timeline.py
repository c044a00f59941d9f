"""Where a distributed device-CG iteration's time goes: each stage between CUDA events.

    mpiexec -n N python bakeoff/par_timeline.py --bp bp3 -p 6 --dofs 5e7 [--repeat 200]
        [--transport ipc]

Builds the bake-off box problem with ``--dofs`` DOFs per rank (``/gpu/cuda/gen``; the
halo over NCCL, or with ``--transport ipc`` on the copy engines) and replays the stages
of the device loop's operator step in the loop's order (``hofem/backends/cuda/cg.py``),
an event recorded on the compute stream after each:
the ghosts of ``p`` sent, the interior cells, the wait for the ghosts, the boundary
cells, the ghost part of ``A p`` sent, the wait for it and the adds, one all-reduce,
and one vector pass (``p`` read and written, ``A p`` zeroed) for scale. The time
between two events is what the stream spent on that stage, waiting included. Rank 0
prints one JSON line: the median microseconds of each stage over ``--repeat`` replays,
the slowest rank's (``us``) and every rank's (``rank_us``: a rank that finishes its
stages early waits in the all-reduce, so the slowest of each stage overcounts).
"""

import argparse
import json
import statistics

import cupy

from hofem import parallel as par
from hofem.bakeoff.benchmark_parallel import box_elements
from hofem.bakeoff.distributed import ceed_on_every_rank, setup_distributed
from hofem.operator import SubOperator


def stages(op, p, Ap, scalar, order="loop"):
    """``(name, launch)`` of one operator step, in ``order`` (:data:`ORDERS`)."""
    exchange = op.space.exchange
    interior = [op.interior] if op.interior is not None else []
    boundary = [op.boundary] if op.boundary is not None else []

    def add_transpose():
        for index, values in exchange.finish_transpose_l():
            Ap[index] += values  # unique indices per neighbour

    n = op.shape[0]
    steps = dict(
        send_p=lambda: exchange.start_prolong_l(p),
        interior=lambda: [part.apply_add(p, Ap) for part in interior],
        wait_p=exchange.finish_prolong_l,
        boundary=lambda: [part.apply_add(p, Ap) for part in boundary],
        send_ap=lambda: exchange.start_transpose_l(Ap),
        wait_ap_add=add_transpose,
        allreduce=lambda: exchange.allreduce_inplace(scalar),
        vector_pass=lambda: (cupy.multiply(p[:n], 1.0, out=p[:n]), Ap.fill(0.0)),
    )
    return [(name, steps[name]) for name in ORDERS[order]]


# the device loop's order, and the boundary cells first: the ghost part of A p then travels
# while the interior runs (on ranks that hold ghosts, the wait for p is exposed instead)
ORDERS = {
    "loop": ("send_p", "interior", "wait_p", "boundary", "send_ap", "wait_ap_add",
             "allreduce", "vector_pass"),
    "boundary_first": ("send_p", "wait_p", "boundary", "send_ap", "interior", "wait_ap_add",
                       "allreduce", "vector_pass"),
}  # fmt: skip


def prioritize(exchange):
    """Give the exchange's side streams (NCCL's or the copy engines') the device's highest
    priority, so that their work is scheduled before the waiting blocks of a kernel that
    fills the GPU."""
    for channel in (exchange._forward_l, exchange._reverse_l):  # CUDA clamps to its highest
        channel._stream = cupy.cuda.Stream(non_blocking=True, priority=-(1 << 20))


def replay(steps, repeat):
    """Median microseconds per stage over ``repeat`` replays (after two warm-ups)."""
    events = [cupy.cuda.Event() for _ in range(len(steps) + 1)]
    times = {name: [] for name, _ in steps}
    for k in range(repeat + 2):
        events[0].record()
        for (_, launch), event in zip(steps, events[1:], strict=True):
            launch()
            event.record()
        events[-1].synchronize()
        if k >= 2:
            for (name, _), a, b in zip(steps, events, events[1:], strict=False):
                times[name].append(1e3 * cupy.cuda.get_elapsed_time(a, b))
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bp", default="bp3")
    parser.add_argument("-p", "--order", type=int, default=6)
    parser.add_argument("--dofs", type=float, default=5e7, help="DOFs per rank")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--stages", choices=sorted(ORDERS), default="loop")
    parser.add_argument("--priority", choices=("default", "high"), default="default",
                        help="the exchange's side streams' priority")  # fmt: skip
    parser.add_argument("--transport", choices=("nccl", "ipc"), default="nccl",
                        help="how the halo moves (ipc: copy engines, CUDA IPC)")  # fmt: skip
    args = parser.parse_args()
    comm = par.world()
    ceed = ceed_on_every_rank(comm, "/gpu/cuda/gen")
    elements = box_elements(args.dofs * comm.size, args.order)
    problem = setup_distributed(args.bp, ceed, args.order, comm, elements=elements,
                                transport=args.transport)  # fmt: skip
    op = problem.operator
    op = op.op if isinstance(op, SubOperator) else op
    p = cupy.random.default_rng(comm.rank).standard_normal(op.space.local.num_dofs)
    Ap, scalar = cupy.zeros_like(p), cupy.ones(1)
    if args.priority == "high":
        prioritize(op.space.exchange)
    medians = replay(stages(op, p, Ap, scalar, args.stages), args.repeat)
    every = comm.allgather(medians)
    slowest = {k: max(v[k] for v in every) for k in medians}
    if comm.rank == 0:
        print(json.dumps({"bp": args.bp, "p": args.order, "ranks": comm.size,
                          "stages": args.stages, "priority": args.priority,
                          "transport": args.transport,
                          "dofs": op.space.num_dofs, "us": slowest,
                          "total_us": sum(slowest.values()),
                          "rank_total_us": [sum(v.values()) for v in every],
                          "rank_us": every}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
