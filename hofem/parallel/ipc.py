"""A halo on the copy engines: each sender writes into its neighbours' GPU memory (CUDA IPC).

:class:`IpcChannel` moves the segments of :meth:`NcclChannel.over
<hofem.parallel.exchange.NcclChannel.over>` without NCCL's point-to-point kernel: each
rank maps the receive arrays of the ranks it sends to (CUDA IPC memory handles,
exchanged once per array over MPI) and writes its segments there with
``cudaMemcpyAsync``. A copy engine moves them, so the halo travels beside a kernel
that holds every SM, where a NCCL send waits for SMs.

Rounds and flags (kernels in ``hofem/backends/cuda/ipc.cu``). Every rank counts the
channel's rounds on the device (``ipc_next_round`` at each :meth:`IpcChannel.start`).
After a round's data copies, a sender copies its count into its slot of the receiver's
flags; :meth:`IpcChannel.finish` launches ``ipc_wait_flags``, one block that holds the
receiver's stream until every sender's slot shows the receiver's own count. The
copies of one stream run one after the other, so a flag that shows round ``k``
follows round ``k``'s data. No host synchronization, and every call is
stream-ordered: a CUDA graph can hold the rounds.

What the flags do not order: a sender writes round ``k + 1`` as soon as its own
stream reaches it, whether or not the receiver has finished reading round ``k``
(no handshake: a kernel that waited for the receiver on the sender's side stream would
wait for SMs behind the kernel beside it, as NCCL does). The caller must put a
synchronization of every rank between the receiver's last read of a round and the
senders' next :meth:`IpcChannel.start`: in the device CG the all-reduces of each
iteration do (:class:`hofem.parallel.Exchange`).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence

import numpy as np
from mpi4py import MPI

from ..typing import Array

__all__ = ["IpcChannel", "neighbour_swap", "pair_copies", "segments_by_rank"]

Segment = tuple[int, int, int]  # (rank, offset, count) of one message in an array
Copy = tuple[int, int, int, int]  # (rank, local offset, remote offset, count)
_MEMCPY_DEVICE_TO_DEVICE = 3  # cudaMemcpyDeviceToDevice


def segments_by_rank(segments: Sequence[Segment]) -> dict[int, list[tuple[int, int]]]:
    """``{rank: [(offset, count), ...]}`` of ``(rank, offset, count)`` segments, in list
    order per rank (the ``k``-th segment sent to a rank is its ``k``-th received)."""
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for q, a, n in segments:
        by_rank.setdefault(int(q), []).append((int(a), int(n)))
    return by_rank


def pair_copies(
    sends: Sequence[Segment], remote: dict[int, list[tuple[int, int]]], rank: int
) -> list[Copy]:
    """The copies of a round: each send segment with its place in the receiver's array.

    Parameters
    ----------
    sends : list of (rank, offset, count)
        This rank's send segments.
    remote : dict
        ``{q: [(offset, count), ...]}``: the segments rank ``q`` receives from this rank,
        in ``q``'s list order, for every rank ``q`` sent to.
    rank : int
        This rank (for the error message).

    Returns
    -------
    list of (rank, local offset, remote offset, count)

    Raises
    ------
    ValueError
        The two sides' segments differ in number or size.
    """
    copies = []
    for q, mine in segments_by_rank(sends).items():
        theirs = remote.get(q, [])
        if [n for _, n in mine] != [n for _, n in theirs]:
            raise ValueError(
                f"rank {rank} sends segments of {[n for _, n in mine]} values to rank {q}, "
                f"which receives {[n for _, n in theirs]} from it: give both sides the same "
                "segments, in the same order"
            )
        copies += [(q, a, b, n) for (a, n), (b, _) in zip(mine, theirs, strict=True)]
    return copies


@functools.cache
def _address_range():
    """The driver's ``cuMemGetAddressRange`` (CuPy wraps none): an array of CuPy's memory
    pool may lie inside a larger ``cudaMalloc``, and an IPC handle names the whole one."""
    function = ctypes.CDLL("libcuda.so.1").cuMemGetAddressRange_v2
    function.argtypes = [
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_uint64,
    ]
    function.restype = ctypes.c_int
    return function


def _describe(array: Array) -> tuple[bytes, tuple[int, int], int]:
    """``(IPC handle of the allocation that holds array, (the allocation's address, its
    size), array's byte offset in it)``."""
    import cupy

    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = _address_range()(ctypes.byref(base), ctypes.byref(size), array.data.ptr)
    if status != 0:
        raise RuntimeError(f"cuMemGetAddressRange failed with CUresult {status}")
    handle = cupy.cuda.runtime.ipcGetMemHandle(base.value)
    return handle, (base.value, size.value), array.data.ptr - base.value


Allocation = tuple[int, int, int]  # (rank, address, size) of a neighbour's allocation there


class Mappings:
    """This process's mappings of its neighbours' allocations, opened once and counted.

    CUDA maps an allocation into a process once: a second ``open`` of it fails ("resource
    already mapped"), and so does a new allocation of the neighbour over addresses that a
    stale mapping still covers. A channel dropped without :meth:`IpcChannel.free` leaves its
    mappings open; when the neighbour's memory pool then frees those allocations and
    allocates anew over their addresses, the new allocation comes with another handle. So a
    neighbour's allocation is known by its rank, address and size, and opening one closes
    first every mapping of that rank whose addresses it overlaps under another handle: the
    neighbour has freed those (its live allocations never overlap).

    ``open_handle(handle) -> pointer`` and ``close_pointer(pointer)``: CUDA's IPC calls.
    """

    def __init__(
        self, open_handle: Callable[[bytes], int], close_pointer: Callable[[int], None]
    ) -> None:
        self._open, self._close = open_handle, close_pointer
        self._entries: dict[Allocation, list] = {}  # -> [handle, pointer, users]

    def open(self, allocation: Allocation, handle: bytes) -> int:
        """The mapped address of ``allocation`` (``handle`` from its owner), one more user."""
        entry = self._entries.get(allocation)
        if entry is None or entry[0] != handle:
            for stale in self._overlapping(allocation, handle):
                self._close(self._entries.pop(stale)[1])
            try:
                pointer = self._open(handle)
            except Exception as error:
                raise RuntimeError(
                    f"IpcChannel: mapping rank {allocation[0]}'s allocation at "
                    f"{allocation[1]:#x} ({allocation[2]} bytes) failed ({error}); this process "
                    f"maps {self._ranges(allocation[0])} of that rank"
                ) from error
            entry = self._entries[allocation] = [handle, pointer, 0]
        entry[2] += 1
        return entry[1]

    def _overlapping(self, allocation, handle):
        rank, start, size = allocation
        return [
            (q, b, n)
            for (q, b, n), entry in self._entries.items()
            if q == rank and b < start + size and start < b + n and entry[0] != handle
        ]

    def _ranges(self, rank):
        return [f"{b:#x} (+{n})" for q, b, n in self._entries if q == rank]

    def close(self, allocation: Allocation, handle: bytes) -> None:
        """One user fewer of ``allocation`` as mapped from ``handle``; unmapped at none (a
        mapping replaced since is left alone)."""
        entry = self._entries.get(allocation)
        if entry is None or entry[0] != handle:
            return
        entry[2] -= 1
        if entry[2] == 0:
            self._close(entry[1])
            del self._entries[allocation]

    def __len__(self) -> int:
        return len(self._entries)


@functools.cache
def _mappings() -> Mappings:
    import cupy

    runtime = cupy.cuda.runtime
    return Mappings(runtime.ipcOpenMemHandle, runtime.ipcCloseMemHandle)


def neighbour_swap(
    comm: MPI.Comm, messages: dict[int, object], sources: Sequence[int], tag: int
) -> dict[int, object]:
    """Send ``messages[q]`` to each rank ``q`` and receive one message from each of
    ``sources``: ``{q: message}`` (MPI point-to-point: only the ranks that talk take
    part; messages between two ranks on one tag arrive in the order sent)."""
    requests = [comm.isend(m, dest=q, tag=tag) for q, m in messages.items()]
    received = {q: comm.recv(source=q, tag=tag) for q in sources}
    MPI.Request.waitall(requests)
    return received


def _check_peer(rank: int, here: tuple[str, str], peer: int, there: tuple[str, str]) -> None:
    """Refuse a neighbour whose memory CUDA IPC cannot map: ``(node, GPU PCI id)`` of each."""
    if there[0] != here[0]:
        raise ValueError(
            f"IpcChannel: rank {peer} runs on node {there[0]!r} and rank {rank} on "
            f"{here[0]!r}, and CUDA IPC maps memory within one node: use transport='nccl'"
        )
    if there[1] == here[1]:
        raise ValueError(
            f"IpcChannel: ranks {peer} and {rank} use one GPU ({here[1]}), and CUDA IPC "
            "needs a GPU per rank: run at most one rank per GPU, or use transport='mpi'"
        )


def _check_device_array(array: object, name: str) -> None:
    import cupy

    if not isinstance(array, cupy.ndarray):
        raise TypeError(
            f"IpcChannel: {name} must be a CuPy array on this rank's GPU, not "
            f"{type(array).__name__}: pass device arrays, or use transport='mpi' for host ones"
        )


class IpcChannel:
    """Point-to-point exchange of float64 device arrays by CUDA IPC and the copy engines.

    The interface of :meth:`NcclChannel.over <hofem.parallel.exchange.NcclChannel.over>`:
    segments ``(rank, offset, count)`` of the arrays given to :meth:`start`, matched in
    list order per rank; :meth:`start` after the current stream's queued work (on a
    side stream), :meth:`finish` orders the current stream after the data arrived, and
    neither synchronizes the host. Every rank of a pair runs :meth:`start` and
    :meth:`finish` equally often.

    Every rank that it sends to must run on this node, on a GPU of its own, and must
    have finished reading round ``k`` before this rank's round ``k + 1`` starts (the
    module's docstring): in the device CG an all-reduce lies between the two.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    sends, recvs : list of (rank, offset, count)
    send_buf, recv_buf : device arrays or None
        The arrays :meth:`start` uses by default.
    tag : int
        The MPI tag of the set-up messages (unique among the channels of ``comm``).

    Notes
    -----
    Collective over the neighbours: the constructor, and the first :meth:`start` with a
    receive array not seen before (it exchanges its IPC handle; not inside a CUDA graph
    capture), which every rank of a pair runs in the same order. A receive array stays
    referenced, and mapped by the neighbours, until :meth:`free`. Arrays of CuPy's
    default memory pool (or of ``cudaMalloc``) work; stream-ordered allocations
    (``cudaMallocAsync``) have no IPC handle.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        sends: Sequence[Segment],
        recvs: Sequence[Segment],
        send_buf: Array | None = None,
        recv_buf: Array | None = None,
        tag: int = 23,
    ) -> None:
        import cupy

        from ..backends.cuda import kernels

        self.comm, self.tag = comm, tag
        self.send_buf, self.recv_buf = send_buf, recv_buf
        self._sends, self._recvs = list(sends), list(recvs)
        self._sources = sorted(segments_by_rank(self._recvs))  # ranks that write here
        self._targets = sorted(segments_by_rank(self._sends))  # ranks written to
        module = kernels.ipc_module()  # compiled here: never inside a graph capture
        self._next_round = module.get_function("ipc_next_round")
        self._wait_flags = module.get_function("ipc_wait_flags")
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._ready, self._done = cupy.cuda.Event(), cupy.cuda.Event()
        self._count = cupy.zeros(1, dtype=np.int64)  # (1,) rounds started
        self._flags = cupy.zeros(max(len(self._sources), 1), dtype=np.int64)  # (sources,)
        # the zeros must be in place before any neighbour may write a flag
        cupy.cuda.get_current_stream().synchronize()
        self._mapped: list = []  # (allocation, handle) mapped by this rank, closed by free()
        self._targets_of: dict[int, tuple[Array, list[Copy]]] = {}  # recv pointer -> copies
        self._flag_at = self._exchange_flags()  # {target: address of this rank's flag}

    def _exchange_flags(self) -> dict[int, int]:
        """Tell each source where its flag is; learn where this rank's flags go (and check
        that each target shares this node and has a GPU of its own)."""
        import cupy

        bus_id = cupy.cuda.runtime.deviceGetPCIBusId(cupy.cuda.Device().id)
        place = (MPI.Get_processor_name(), bus_id)
        handle, where, offset = _describe(self._flags) if self._sources else (b"", (0, 0), 0)
        messages = {q: (place, handle, where, offset + 8 * k) for k, q in enumerate(self._sources)}
        received = neighbour_swap(self.comm, messages, self._targets, self.tag)
        for q, (there, *_) in received.items():
            _check_peer(self.comm.rank, place, q, there)
        return {q: self._map(q, h, w, o) for q, (_, h, w, o) in received.items()}

    def _map(self, q: int, handle: bytes, where: tuple[int, int], offset: int) -> int:
        """The address in this process of byte ``offset`` of rank ``q``'s allocation
        ``where``, ``(address, size)`` there (``handle``), mapped until :meth:`free`."""
        allocation = (q, *where)
        self._mapped.append((allocation, handle))
        return _mappings().open(allocation, handle) + offset

    def _register(self, recv: Array) -> list[Copy]:
        """The copies of a round into the neighbours' arrays that correspond to ``recv``
        (collective over the neighbours; cached by ``recv``'s address)."""
        _check_device_array(recv, "recv")
        key = recv.data.ptr
        if key not in self._targets_of:
            handle, where, offset = _describe(recv) if self._sources else (b"", (0, 0), 0)
            mine = segments_by_rank(self._recvs)
            messages = {q: (handle, where, offset, mine[q]) for q in self._sources}
            received = neighbour_swap(self.comm, messages, self._targets, self.tag + 1000)
            start = {q: self._map(q, h, w, o) for q, (h, w, o, _) in received.items()}
            remote = {q: segments for q, (*_, segments) in received.items()}
            copies = pair_copies(self._sends, remote, self.comm.rank)
            # remote offset as an address: the neighbour's array start plus the segment's
            copies = [(q, a, start[q] + 8 * b, n) for q, a, b, n in copies]
            self._targets_of[key] = (recv, copies)  # recv kept: its address stays its own
        return self._targets_of[key][1]

    def start(self, send: Array | None = None, recv: Array | None = None) -> None:
        """Write ``send``'s segments (default ``send_buf``) into the neighbours' arrays that
        correspond to ``recv`` (default ``recv_buf``), after the current stream's work."""
        import cupy

        if not (self._sends or self._recvs):
            return
        send = self.send_buf if send is None else send
        recv = self.recv_buf if recv is None else recv
        copies = self._register(recv)
        if copies:
            _check_device_array(send, "send")
        self._next_round((1,), (1,), (self._count,))
        self._ready.record()
        self._stream.wait_event(self._ready)
        stream, memcpy = self._stream.ptr, cupy.cuda.runtime.memcpyAsync
        for _, a, address, n in copies:
            memcpy(address, send.data.ptr + 8 * a, 8 * n, _MEMCPY_DEVICE_TO_DEVICE, stream)
        # after every data copy of the round, on the same stream: the flags follow the data
        for q in self._targets:
            memcpy(self._flag_at[q], self._count.data.ptr, 8, _MEMCPY_DEVICE_TO_DEVICE, stream)
        self._done.record(self._stream)

    def finish(self) -> Array | None:
        """Order the current stream after this round: this rank's copies done (``send``
        may be overwritten) and every source's data arrived; return ``recv_buf``."""
        import cupy

        if not (self._sends or self._recvs):
            return self.recv_buf
        cupy.cuda.get_current_stream().wait_event(self._done)
        if self._sources:
            count = np.int32(len(self._sources))
            self._wait_flags((1,), (32,), (self._count, self._flags, count))
        return self.recv_buf

    def free(self) -> None:
        """Close this rank's mappings of its neighbours' memory (after its copies ended)."""
        self._stream.synchronize()
        for allocation, handle in self._mapped:
            _mappings().close(allocation, handle)
        self._mapped, self._targets_of = [], {}
