"""Communicators, errors every rank agrees on, and binding one GPU to each rank."""

from __future__ import annotations

import os
import sys
import time
import traceback
from types import TracebackType

from mpi4py import MPI

__all__ = ["ParallelError", "abort_on_error", "bind_device", "check_all", "world"]

# seconds a failing rank waits between printing its error and MPI_Abort
ABORT_DRAIN_SECONDS = 0.5


class ParallelError(RuntimeError):
    """An error raised on every rank of a communicator, with the failing rank's message."""


def world() -> MPI.Intracomm:
    """``MPI.COMM_WORLD``."""
    return MPI.COMM_WORLD


def check_all(comm: MPI.Comm, error: BaseException | str | None = None) -> None:
    """Agree on errors collectively: raise the first rank's error on every rank.

    Every rank of ``comm`` must call this at the same point (it is a
    collective). A rank passes the exception it caught, or None.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    error : BaseException or str or None

    Raises
    ------
    ParallelError
        On every rank when any rank passed an error; the message is
        ``"rank k: <message>"`` for the lowest such rank ``k`` (and how many
        ranks failed).
    """
    message = None if error is None else str(error) or type(error).__name__
    messages = comm.allgather(message)
    failed = [(rank, m) for rank, m in enumerate(messages) if m is not None]
    if failed:
        rank, first = failed[0]
        more = f" ({len(failed)} ranks failed)" if len(failed) > 1 else ""
        raise ParallelError(f"rank {rank}: {first}{more}")


class abort_on_error:
    """Context manager: an exception on one rank ends every rank, never a hang.

    A :class:`ParallelError` (raised on every rank alike, e.g. bad input
    found collectively) is printed once, by rank 0, and every rank exits with
    status ``input_status``. Any other exception is
    printed by the rank that raised it, prefixed with its rank, and
    ``comm.Abort(status)`` stops all ranks (the others may be waiting in a
    collective that the failed rank will never enter).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    status : int, default 1
        Exit status of an abort.
    input_status : int, default 2
    prog : str, default "hofem"
        Prefix of the printed line.
    """

    def __init__(
        self,
        comm: MPI.Comm | None = None,
        status: int = 1,
        input_status: int = 2,
        prog: str = "hofem",
    ) -> None:
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.status = status
        self.input_status = input_status
        self.prog = prog

    def __enter__(self) -> abort_on_error:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None or isinstance(exc, (SystemExit, KeyboardInterrupt)):
            return False
        rank = self.comm.rank
        if isinstance(exc, ParallelError):
            if rank == 0:
                print(f"{self.prog}: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(self.input_status)
        if os.environ.get("HOFEM_TRACEBACK"):
            traceback.print_exception(exc_type, exc, tb)
        message = str(exc) or type(exc).__name__
        print(f"{self.prog}: error on rank {rank}: {message}", file=sys.stderr, flush=True)
        # The line travels through the launcher's output forwarding, which Abort tears
        # down: give it a moment to arrive (under load, CI once lost it).
        time.sleep(ABORT_DRAIN_SECONDS)
        self.comm.Abort(self.status)
        return False  # not reached


def bind_device(comm: MPI.Comm) -> int:
    """Make the node-local rank ``i`` of ``comm`` use GPU ``i`` (CuPy's current device).

    Ranks are grouped by node with ``MPI.COMM_TYPE_SHARED``; with more ranks
    on a node than GPUs, GPUs are shared round-robin (with a warning, since
    that is rarely what is wanted).

    Returns
    -------
    int
        The device id this rank uses.

    Raises
    ------
    ImportError
        CuPy is missing (``pip install hofem[gpu]``).
    RuntimeError
        No CUDA device on this node.
    """
    try:
        import cupy
    except ImportError as err:
        raise ImportError("GPU ranks need CuPy: pip install hofem[gpu]") from err
    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
    local_rank, local_size = node.rank, node.size
    node.Free()
    count = cupy.cuda.runtime.getDeviceCount()
    if count == 0:
        raise RuntimeError(f"rank {comm.rank}: no CUDA device on this node")
    if local_size > count and local_rank == 0:
        print(
            f"hofem: warning: {local_size} ranks share {count} GPUs on this node; "
            "start one rank per GPU",
            file=sys.stderr,
        )
    device = local_rank % count
    cupy.cuda.Device(device).use()
    return device
