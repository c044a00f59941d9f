"""Copy engines against NCCL for a halo: does the transfer run beside a kernel that fills the GPU?

    mpiexec -n 2 python bakeoff/par_halo_copy.py --mb 2.7 --repeat 50   (one GPU per rank)

The 4-GPU timeline (``par_timeline.py``, ``bakeoff/JOURNAL.md`` 2026-11-27) found the
owning rank waiting about 200 µs for 2.7 MB of ghost values after its interior cells:
NCCL's point-to-point kernel moves them at about 14 GB/s and, launched beside the
interior kernel, waits for SMs.  A copy engine takes no SMs.  Each rank pairs with rank
``r ^ 1``, opens its partner's receive buffer through CUDA IPC, and times on its own
stream (CUDA events, medians over ``--repeat``, a barrier before each):

- ``kernel``: a compute-bound kernel over every SM, about ``--kernel-ms`` long;
- ``copy``: ``cudaMemcpyAsync`` of ``--mb`` MB into the partner's buffer (copy engine);
- ``nccl``: a NCCL send to and receive from the partner of the same size;
- ``kernel+copy``, ``kernel+nccl``: each transfer on a side stream, launched right
  after the kernel, until both are done.

Rank 0 prints one JSON line with every rank's medians in µs.  If the copy runs beside
the kernel, ``kernel+copy`` is close to ``kernel``; the device CG's exchange could then
move the halo this way (with IPC events to order the ranks' streams).
"""

import argparse
import json
import statistics

import cupy

from hofem import parallel as par
from hofem.parallel.exchange import nccl_communicator

_BUSY = cupy.ElementwiseKernel(
    "float64 a, int32 steps", "float64 y",
    "double v = y; for (int k = 0; k < steps; ++k) v = v * a + 1e-9; y = v;",
    "hofem_busy",
)  # fmt: skip


def timed(launch, repeat, comm):
    """Median microseconds of ``launch()`` on the current stream, ranks started together."""
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for k in range(repeat + 2):
        cupy.cuda.Device().synchronize()
        comm.Barrier()
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        if k >= 2:
            times.append(1e3 * cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def beside(kernel, transfer, side):
    """``kernel()`` on the current stream and ``transfer()`` on ``side``, both after the
    work queued so far; the current stream then waits for the transfer."""
    ready = cupy.cuda.get_current_stream().record()
    side.wait_event(ready)
    kernel()
    with side:
        transfer()
    cupy.cuda.get_current_stream().wait_event(side.record())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=2.7, help="MB each way")
    parser.add_argument("--kernel-ms", type=float, default=1.2)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    comm = par.world()
    if comm.size % 2:
        raise SystemExit("par_halo_copy pairs ranks r and r ^ 1: run an even number of ranks")
    par.bind_device(comm)
    partner = comm.rank ^ 1
    n = int(args.mb * 1e6 / 8)
    # the receive buffer from cudaMalloc itself: an IPC handle names a whole allocation,
    # and a pool's block may sit inside a larger one
    base = cupy.cuda.runtime.malloc(8 * n)
    memory = cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(base, 8 * n, None), 0)
    send, recv = cupy.random.random(n), cupy.ndarray((n,), cupy.float64, memory)
    handles = comm.allgather(cupy.cuda.runtime.ipcGetMemHandle(base))
    peer = cupy.cuda.runtime.ipcOpenMemHandle(handles[partner])  # the partner's recv

    y = cupy.ones(4 * cupy.cuda.Device().attributes["MultiProcessorCount"] * 1024 * 64)
    steps = 64
    while max(comm.allgather(timed(lambda s=steps: _BUSY(0.999, s, y), 3, comm))) < (
        1e3 * args.kernel_ms
    ):  # every rank the same steps: each timing holds barriers
        steps *= 2

    def kernel():
        _BUSY(0.999, steps, y)

    def copy():
        stream = cupy.cuda.get_current_stream().ptr
        cupy.cuda.runtime.memcpyAsync(peer, send.data.ptr, 8 * n, 3, stream)  # device to device

    nccl = nccl_communicator(comm)

    def exchange():
        from cupy.cuda import nccl as lib

        stream = cupy.cuda.get_current_stream().ptr
        lib.groupStart()
        nccl.recv(recv.data.ptr, n, lib.NCCL_FLOAT64, partner, stream)
        nccl.send(send.data.ptr, n, lib.NCCL_FLOAT64, partner, stream)
        lib.groupEnd()

    side = cupy.cuda.Stream(non_blocking=True)
    cases = {
        "kernel": kernel,
        "copy": copy,
        "nccl": exchange,
        "kernel+copy": lambda: beside(kernel, copy, side),
        "kernel+nccl": lambda: beside(kernel, exchange, side),
    }
    medians = {name: timed(launch, args.repeat, comm) for name, launch in cases.items()}
    comm.Barrier()
    cupy.cuda.runtime.ipcCloseMemHandle(peer)
    comm.Barrier()  # the partner has closed its view of this rank's buffer
    cupy.cuda.runtime.free(base)
    every = comm.gather(medians, root=0)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "mb": args.mb, "busy_steps": steps,
                          "device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                          "rank_us": every}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
