"""P and Pᵀ: owners -> ghosts and ghosts summed into owners, over MPI or NCCL.

Each direction is a channel (:class:`MpiChannel` or :class:`NcclChannel`) with
one contiguous send and one contiguous receive buffer, split in segments per
neighbour rank. An MPI channel posts persistent requests (``Send_init``/``Recv_init``) once and
restarts them every exchange; on a GPU it stages through pinned host buffers
(the MPI of many sites, and of the lent GPU machines, is not CUDA-aware). A
NCCL channel sends device buffers directly, on its own stream, so the interior
elements run while the halo moves. The device CG's exchange in place on L-vectors
(``*_l`` methods) takes two more channels over the same buffers, which move each
component's ghosts straight to or from their places (:func:`l_path_segments`): NCCL
channels, or with ``transport="ipc"`` copy-engine channels (:mod:`hofem.parallel.ipc`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..typing import Array, IndexArray

if TYPE_CHECKING:
    from .layout import ParNumbering

__all__ = [
    "TRANSPORTS",
    "Exchange",
    "MpiChannel",
    "NcclChannel",
    "ipc_l_path_segments",
    "l_path_segments",
    "nccl_communicator",
    "resolve_transport",
]

_NCCL = {}
# "auto": "ipc" where several ranks share one node, each with a GPU of its own; "nccl" on
# one rank and across nodes; "mpi" for host arrays, without NCCL or on shared GPUs
TRANSPORTS = ("auto", "nccl", "ipc", "mpi")
Segment = tuple[int, int, int]  # (rank, offset, count) of one message in a buffer


def nccl_communicator(comm: MPI.Comm) -> Any:  # a cupy.cuda.nccl.NcclCommunicator
    """The NCCL communicator of ``comm``'s ranks (one per communicator, made on first use).

    Rank 0 makes the unique id and broadcasts it over MPI. NVLink multicast
    (``NCCL_NVLS_ENABLE``) is left off, and NCCL uses one channel
    (``NCCL_MAX_NCHANNELS=1``), unless the environment sets them.
    """
    import os

    from cupy.cuda import nccl

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    # the halo and the one-value all-reduces move kilobytes to megabytes, while every
    # channel is a thread block holding an SM beside the interior cells' kernel
    os.environ.setdefault("NCCL_MAX_NCHANNELS", "1")
    key = (comm.py2f(), comm.size, comm.rank)
    if key not in _NCCL:
        uid = comm.bcast(nccl.get_unique_id() if comm.rank == 0 else None, root=0)
        _NCCL[key] = nccl.NcclCommunicator(comm.size, uid, comm.rank)
    return _NCCL[key]


def _segments(sizes):
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return list(itertools.pairwise(offsets))


def _rank_segments(ranks, sizes):
    """``(rank, offset, count)`` of the non-empty segments of consecutive ``sizes``."""
    return [
        (int(q), int(a), int(b - a))
        for q, (a, b) in zip(ranks, _segments(sizes), strict=True)
        if b > a
    ]


def l_path_segments(
    numbering: ParNumbering, num_comp: int
) -> tuple[IndexArray, list[Segment], list[Segment]]:
    """Where the in-place L-vector exchange moves each value.

    The ghosts of component ``c`` from rank ``q`` go straight into block ``c`` of the
    L-vector, one message per (neighbour, component); both sides post them in that
    order, so the ``k``-th send to a rank meets that rank's ``k``-th receive.

    Returns
    -------
    send_l : int64 array (sum of the send sizes,)
        The L indices of the owned values sent, in the send buffer's order (per
        neighbour, component-major), the order the T-vector channel uses.
    buffer_segments : list of (rank, offset, count)
        The send buffer's messages (and the returning values' places in the receive
        buffer of the transpose).
    ghost_segments : list of (rank, offset, count)
        The ghosts' places in an L-vector (received by ``P``, sent by ``Pᵀ``).
    """
    nc, own, nodes = num_comp, numbering.num_owned, numbering.num_nodes
    comp = np.arange(nc, dtype=np.int64)[:, None]
    send_l = [(comp * nodes + s[None, :]).ravel() for s in numbering.send_nodes]
    counts = [len(s) for s in numbering.send_nodes]
    starts = np.concatenate([[0], np.cumsum(counts)])[:-1] * nc
    buffer_segments = [
        (int(q), int(a + c * m), int(m))
        for q, a, m in zip(numbering.send_ranks, starts, counts, strict=True)
        for c in range(nc)
        if m
    ]
    ghost_at = own + np.concatenate([[0], np.cumsum(numbering.recv_counts)])[:-1]
    ghost_segments = [
        (int(q), int(c * nodes + a), int(g))
        for q, a, g in zip(numbering.recv_ranks, ghost_at, numbering.recv_counts, strict=True)
        for c in range(nc)
        if g
    ]
    empty = np.empty(0, dtype=np.int64)
    return (np.concatenate(send_l) if send_l else empty), buffer_segments, ghost_segments


def ipc_l_path_segments(
    numbering: ParNumbering, num_comp: int
) -> tuple[list[Segment], list[Segment], list[Segment], list[Segment], bool]:
    """The segments of the ``"ipc"`` transport's L-vector channels.

    With one component, those of :func:`l_path_segments`. With several, the ghosts of
    ``P`` travel as one message per neighbour into a receive buffer laid out as the
    T-vector channel's (``Exchange._ghost_l`` puts it in place; ``Exchange`` says why).

    Returns
    -------
    forward_sends, forward_recvs : list of (rank, offset, count)
        ``P``: offsets in the send buffer, and in the L-vector or the receive buffer.
    reverse_sends, reverse_recvs : list of (rank, offset, count)
        ``Pᵀ``: offsets in the L-vector and in the transpose's receive buffer.
    staged : bool
        The ghosts of ``P`` land in a receive buffer (several components).
    """
    _, buffer_segments, ghost_segments = l_path_segments(numbering, num_comp)
    if num_comp == 1:
        return buffer_segments, ghost_segments, ghost_segments, buffer_segments, False
    send_sizes = [num_comp * len(s) for s in numbering.send_nodes]
    recv_sizes = [num_comp * int(g) for g in numbering.recv_counts]
    sends = _rank_segments(numbering.send_ranks, send_sizes)
    recvs = _rank_segments(numbering.recv_ranks, recv_sizes)
    return sends, recvs, ghost_segments, buffer_segments, True


class MpiChannel:
    """Point-to-point exchange of float64 buffers over MPI, persistent requests.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    xp : module
        NumPy, or CuPy (buffers staged through pinned host memory).
    send_ranks, send_sizes, recv_ranks, recv_sizes : sequences of int
    tag : int

    Attributes
    ----------
    send_buf : array (sum(send_sizes),) of ``xp``
        Fill it, then :meth:`start`.
    recv_buf : array (sum(recv_sizes),) of ``xp``
        Valid after :meth:`finish`.
    """

    def __init__(self, comm, xp, send_ranks, send_sizes, recv_ranks, recv_sizes, tag):
        self.xp = xp
        self.device = xp is not np
        if self.device:
            import cupyx

            host_send = cupyx.empty_pinned(int(sum(send_sizes)))
            host_recv = cupyx.empty_pinned(int(sum(recv_sizes)))
            self.send_buf = xp.empty(host_send.size)
            self.recv_buf = xp.empty(host_recv.size)
        else:
            host_send = self.send_buf = np.empty(int(sum(send_sizes)))
            host_recv = self.recv_buf = np.empty(int(sum(recv_sizes)))
        self._host_send, self._host_recv = host_send, host_recv
        self._requests = [
            comm.Recv_init([host_recv[a:b], MPI.DOUBLE], source=int(q), tag=tag)
            for q, (a, b) in zip(recv_ranks, _segments(recv_sizes), strict=True)
            if b > a
        ] + [
            comm.Send_init([host_send[a:b], MPI.DOUBLE], dest=int(q), tag=tag)
            for q, (a, b) in zip(send_ranks, _segments(send_sizes), strict=True)
            if b > a
        ]

    def start(self) -> None:
        """Send ``send_buf`` (after the pending device work that filled it)."""
        if self.device and self._host_send.size:
            self.send_buf.get(out=self._host_send)
        if self._requests:
            MPI.Prequest.Startall(self._requests)

    def finish(self) -> Array:
        """Wait for the exchange; return ``recv_buf``."""
        if self._requests:
            MPI.Request.Waitall(self._requests)
        if self.device and self._host_recv.size:
            self.recv_buf.set(self._host_recv)
        return self.recv_buf

    def free(self) -> None:
        for request in self._requests:
            request.Free()
        self._requests = []


class NcclChannel:
    """Point-to-point exchange of float64 device buffers through NCCL, on a side stream.

    Same interface as :class:`MpiChannel`. :meth:`start` orders the side
    stream after the work already queued on the current stream (which filled
    ``send_buf``); :meth:`finish` orders the current stream after the transfer,
    without a host synchronization.
    """

    def __init__(self, comm, xp, send_ranks, send_sizes, recv_ranks, recv_sizes, tag):
        self._open(comm)
        self.send_buf = xp.empty(int(sum(send_sizes)))
        self.recv_buf = xp.empty(int(sum(recv_sizes)))
        self._sends = _rank_segments(send_ranks, send_sizes)
        self._recvs = _rank_segments(recv_ranks, recv_sizes)

    @classmethod
    def over(
        cls,
        comm: MPI.Comm,
        sends: Iterable[Segment],
        recvs: Iterable[Segment],
        send_buf: Array | None = None,
        recv_buf: Array | None = None,
    ) -> NcclChannel:
        """A channel over explicit segments ``(rank, offset, count)`` of the arrays that
        :meth:`start` is given (``send_buf``/``recv_buf``: the defaults, shared with
        another channel); segments to one rank are sent and received in list order."""
        channel = cls.__new__(cls)
        channel._open(comm)
        channel.send_buf, channel.recv_buf = send_buf, recv_buf
        channel._sends, channel._recvs = list(sends), list(recvs)
        return channel

    def _open(self, comm):
        import cupy

        self._nccl = nccl_communicator(comm)
        self._stream = cupy.cuda.Stream(non_blocking=True)
        self._ready, self._done = cupy.cuda.Event(), cupy.cuda.Event()

    def start(self, send: Array | None = None, recv: Array | None = None) -> None:
        """Send ``send`` (default ``send_buf``) and receive into ``recv`` (default
        ``recv_buf``), device arrays of the channel's sizes, after the current stream's
        queued work."""
        from cupy.cuda import nccl

        if not (self._sends or self._recvs):
            return
        send = self.send_buf if send is None else send
        recv = self.recv_buf if recv is None else recv
        self._ready.record()
        self._stream.wait_event(self._ready)
        stream = self._stream.ptr
        nccl.groupStart()
        for q, a, n in self._recvs:
            self._nccl.recv(recv.data.ptr + 8 * a, n, nccl.NCCL_FLOAT64, q, stream)
        for q, a, n in self._sends:
            self._nccl.send(send.data.ptr + 8 * a, n, nccl.NCCL_FLOAT64, q, stream)
        nccl.groupEnd()
        self._done.record(self._stream)

    def finish(self) -> Array:
        import cupy

        if self._sends or self._recvs:
            cupy.cuda.get_current_stream().wait_event(self._done)
        return self.recv_buf

    def free(self) -> None:
        """Nothing to release (buffers are freed with the object)."""


def transport_names(xp: ModuleType) -> list[str]:
    """Transports usable with arrays of ``xp``: ``["mpi"]``, plus ``"nccl"`` and ``"ipc"``
    with CuPy's NCCL."""
    if xp is np:
        return ["mpi"]
    try:
        from cupy.cuda import nccl

        nccl.get_version()
    except Exception:
        return ["mpi"]
    return ["nccl", "ipc", "mpi"]


def _placement(comm):
    """``(every rank's node name, whether two ranks use one GPU of a node)`` (collective)."""
    import cupy

    devices = comm.allgather((MPI.Get_processor_name(), cupy.cuda.Device().id))
    return [node for node, _ in devices], len(set(devices)) < len(devices)


def resolve_transport(
    transport: str,
    device: bool,
    names: list[str],
    nodes: list[str] | None = None,
    shared_gpu: bool = False,
) -> str:
    """The transport an :class:`Exchange` uses: ``transport`` checked against the run.

    Parameters
    ----------
    transport : {"auto", "nccl", "ipc", "mpi"}
    device : bool
        The vectors are GPU (CuPy) arrays.
    names : list of str
        :func:`transport_names` of the vectors' module.
    nodes : list of str, optional
        Every rank's node name (``MPI.Get_processor_name()``).
    shared_gpu : bool
        Two ranks use the same GPU.

    Returns
    -------
    str
        ``"nccl"``, ``"ipc"`` or ``"mpi"``. ``"auto"``: ``"ipc"`` where several ranks run on
        one node, each with a GPU of its own (the device CG's halo on the copy engines, beside
        the interior kernels, where NCCL's send waits for free SMs: docs/parallel.md),
        ``"nccl"`` on one rank and across nodes, ``"mpi"`` for host arrays, without NCCL or
        where ranks share a GPU.

    Raises
    ------
    ValueError
        One line naming ``transport`` and what to change.
    """
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r} is unknown: choose from {list(TRANSPORTS)}")
    if transport == "auto":
        if shared_gpu or not device or "nccl" not in names:
            return "mpi"
        nodes = list(nodes or ())
        return "ipc" if len(nodes) > 1 and len(set(nodes)) == 1 else "nccl"
    if transport == "mpi":
        return transport
    if not device:
        raise ValueError(
            f"transport {transport!r} moves GPU arrays, and these vectors are host arrays: "
            "use transport='mpi' (or 'auto'), or a /gpu backend"
        )
    if transport not in names:
        raise ValueError(
            f"transport {transport!r} needs CuPy with NCCL (cupy.cuda.nccl), which is not "
            "available here: install NCCL for CuPy, or use transport='mpi'"
        )
    if shared_gpu:
        raise ValueError(
            f"transport {transport!r} needs one GPU per rank, and two ranks share one: run "
            "at most as many ranks per node as GPUs, or use transport='mpi'"
        )
    num_nodes = len(set(nodes or ()))
    if transport == "ipc" and num_nodes > 1:
        raise ValueError(
            f"transport 'ipc' maps the neighbours' GPU memory (CUDA IPC), which needs every "
            f"rank on one node, and the ranks run on {num_nodes} nodes: use transport='nccl'"
        )
    return transport


class Exchange:
    """The P operator of a distributed space and its transpose, on backend arrays.

    T-vectors hold the owned DOFs, component-major ``(num_comp, num_owned)``;
    L-vectors the local nodes, owned first, ``(num_comp, num_nodes)``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        Duplicated, so exchanges never match another library's messages.
    numbering : ParNumbering
    num_comp : int
    xp : module
        NumPy or CuPy: where the vectors live.
    transport : {"auto", "nccl", "ipc", "mpi"}
        ``"mpi"``: host-staged on a GPU. ``"nccl"``: device buffers through NCCL.
        ``"ipc"``: as ``"nccl"``, but the device CG's halo (the ``*_l`` methods) moves
        on the copy engines (:mod:`hofem.parallel.ipc`; every rank on one node).
        ``"auto"``: as :func:`resolve_transport` picks for the run.

    Raises
    ------
    ValueError
        Unknown transport, or ``"nccl"``/``"ipc"`` for host arrays, without NCCL or
        with two ranks on one GPU, or ``"ipc"`` across nodes.
    """

    def __init__(
        self,
        comm: MPI.Comm,
        numbering: ParNumbering,
        num_comp: int,
        xp: ModuleType,
        transport: str = "auto",
    ) -> None:
        names = transport_names(xp)
        nodes, shared_gpu = _placement(comm) if "nccl" in names else (None, False)
        transport = resolve_transport(transport, xp is not np, names, nodes, shared_gpu)
        self.comm = comm.Dup()
        self.transport = transport
        self.xp = xp
        self.num_comp = num_comp
        self.num_owned = numbering.num_owned
        self.num_nodes = numbering.num_nodes
        own, nodes = self.num_owned, self.num_nodes
        comp = np.arange(num_comp, dtype=np.int64)[:, None]
        send = [(comp * own + s[None, :]).ravel() for s in numbering.send_nodes]
        ghost_start = own + np.concatenate([[0], np.cumsum(numbering.recv_counts)])
        ghost = [
            (comp * nodes + np.arange(a, b)[None, :]).ravel()
            for a, b in itertools.pairwise(ghost_start)
        ]
        send_sizes = [len(s) for s in send]
        recv_sizes = [len(g) for g in ghost]
        empty = np.empty(0, dtype=np.int64)
        self._send_t = xp.asarray(np.concatenate(send) if send else empty)  # T indices
        self._ghost_l = xp.asarray(np.concatenate(ghost) if ghost else empty)  # L indices
        channel = MpiChannel if transport == "mpi" else NcclChannel
        s_ranks, r_ranks = numbering.send_ranks, numbering.recv_ranks
        self._forward = channel(self.comm, xp, s_ranks, send_sizes, r_ranks, recv_sizes, 21)
        self._reverse = channel(self.comm, xp, r_ranks, recv_sizes, s_ranks, send_sizes, 22)
        received = self._reverse.recv_buf  # (T indices, received values) per neighbour
        self._transpose_pairs = [
            (self._send_t[a:b], received[a:b]) for a, b in _segments(send_sizes) if b > a
        ]
        self._stage_l = None  # ("ipc", several components) where the ghosts land first
        self._prolonged_l = None  # the L-vector of the staged prolongation in flight
        if transport != "mpi":
            self._open_l_path(numbering, send_sizes, recv_sizes)

    def _open_l_path(
        self, numbering: ParNumbering, send_sizes: list[int], recv_sizes: list[int]
    ) -> None:
        """The channels of the in-place L-vector exchange (a device CG's): the segments of
        :func:`l_path_segments`; the send and receive buffers are the T-vector channels'."""
        send_l, buffer_segments, ghost_segments = l_path_segments(numbering, self.num_comp)
        # (sum of the send sizes,) L indices of what is sent, in the send buffer's order
        self._send_l = self._send_t if self.num_comp == 1 else self.xp.asarray(send_l)
        if self.transport == "ipc":
            self._open_ipc_l_path(numbering, recv_sizes)
        else:
            self._forward_l = NcclChannel.over(
                self.comm, buffer_segments, ghost_segments, send_buf=self._forward.send_buf
            )
            self._reverse_l = NcclChannel.over(
                self.comm, ghost_segments, buffer_segments, recv_buf=self._reverse.recv_buf
            )
        received = self._reverse.recv_buf
        self._transpose_pairs_l = [
            (self._send_l[a:b], received[a:b]) for a, b in _segments(send_sizes) if b > a
        ]

    def _open_ipc_l_path(self, numbering: ParNumbering, recv_sizes: list[int]) -> None:
        """The L-vector channels on the copy engines (:class:`~hofem.parallel.ipc.IpcChannel`).

        A sender writes round ``k + 1`` without waiting for its receiver, so a receive
        array must not be read or written between the receiver's last use of round ``k``
        and the senders' next start unless an all-reduce of every rank lies between. In
        the device CG (``hofem/backends/cuda/cg.py``): the ghosts of ``p`` are read by
        the boundary cells (and ``p . Ap``) before the all-reduce of ``p . Ap``, and the
        values returned to the owners are added before it; the next rounds start after
        the all-reduce of ``r . r``. With several components, though, ``x``, ``r`` and
        ``p`` are whole L-vectors and ``p = z + beta p`` rewrites ``p``'s ghost entries
        after that last all-reduce, so their ghosts land in a buffer of their own and a
        kernel puts them in place after the wait (:meth:`finish_prolong_l`).
        """
        from ..backends.cuda import kernels
        from .ipc import IpcChannel

        sends, recvs, back_sends, back_recvs, staged = ipc_l_path_segments(numbering, self.num_comp)
        if staged:  # (sum of the receive sizes,) in the T-vector channel's order (_ghost_l's)
            self._stage_l = self.xp.empty(int(sum(recv_sizes)))
            self._scatter = kernels.ipc_module().get_function("ipc_scatter")
        self._forward_l = IpcChannel(
            self.comm, sends, recvs, send_buf=self._forward.send_buf, recv_buf=self._stage_l, tag=23
        )
        self._reverse_l = IpcChannel(
            self.comm, back_sends, back_recvs, recv_buf=self._reverse.recv_buf, tag=24
        )

    @property
    def t_size(self) -> int:
        return self.num_comp * self.num_owned

    @property
    def l_size(self) -> int:
        return self.num_comp * self.num_nodes

    # --- P ---------------------------------------------------------------------------------
    def start_prolong(self, x_t: Array, x_l: Array) -> None:
        """Begin ``x_l = P x_t``: owned entries copied, owners' values on their way to ghosts."""
        xp, nc = self.xp, self.num_comp
        x_l.reshape(nc, self.num_nodes)[:, : self.num_owned] = x_t.reshape(nc, self.num_owned)
        if self._send_t.size:
            xp.take(x_t, self._send_t, out=self._forward.send_buf)
        self._forward.start()

    def finish_prolong(self, x_l: Array) -> None:
        """Complete :meth:`start_prolong`: ghost entries of ``x_l`` received."""
        received = self._forward.finish()
        if self._ghost_l.size:
            x_l[self._ghost_l] = received

    def prolong(self, x_t: Array, x_l: Array | None = None) -> Array:
        """``P x_t`` (an L-vector), into ``x_l`` when given.

        Parameters
        ----------
        x_t : array (t_size,)
        x_l : array (l_size,), optional
        """
        x_l = self.xp.empty(self.l_size) if x_l is None else x_l
        self.start_prolong(x_t, x_l)
        self.finish_prolong(x_l)
        return x_l

    # --- Pᵀ --------------------------------------------------------------------------------
    def prolong_transpose_add(self, y_l: Array, y_t: Array) -> None:
        """``y_t += Pᵀ y_l``: owned entries plus the ghosts' contributions from other ranks."""
        xp, nc = self.xp, self.num_comp
        if self._ghost_l.size:
            xp.take(y_l, self._ghost_l, out=self._reverse.send_buf)
        self._reverse.start()
        y_t.reshape(nc, self.num_owned)[...] += y_l.reshape(nc, self.num_nodes)[:, : self.num_owned]
        self._reverse.finish()
        for index, values in self._transpose_pairs:  # indices unique within one neighbour
            y_t[index] += values

    def prolong_transpose(self, y_l: Array) -> Array:
        """``Pᵀ y_l`` as a new T-vector."""
        y_t = self.xp.zeros(self.t_size)
        self.prolong_transpose_add(y_l, y_t)
        return y_t

    # --- in place on L-vectors, for a device CG (hofem.backends.contract.DeviceExchange) ----
    def start_prolong_l(self, x_l: Array) -> None:
        """Begin ``x_l = P x_l``: the owned entries' values sent, and the ghosts received
        straight into their places in ``x_l (l_size,)`` (``"nccl"`` and ``"ipc"``)."""
        if self._send_l.size:
            self.xp.take(x_l, self._send_l, out=self._forward.send_buf)
        if self._stage_l is None:
            self._forward_l.start(recv=x_l)
        else:
            self._forward_l.start()
            self._prolonged_l = x_l

    def finish_prolong_l(self) -> None:
        """Order the current stream after :meth:`start_prolong_l`'s ghosts arrived."""
        self._forward_l.finish()
        ghosts = self._ghost_l
        if self._stage_l is not None and ghosts.size:  # allocation-free, for a CUDA graph
            blocks = min(1024, (ghosts.size + 255) // 256)
            args = (np.int64(ghosts.size), ghosts, self._stage_l, self._prolonged_l)
            self._scatter((blocks,), (256,), args)

    def start_transpose_l(self, y_l: Array) -> None:
        """Begin sending ``y_l``'s ghost entries to the owners (see :meth:`start_prolong_l`)."""
        self._reverse_l.start(send=y_l)

    def finish_transpose_l(self) -> list[tuple[Array, Array]]:
        """``(L indices, received values)`` per neighbour, to add into the owned entries."""
        self._reverse_l.finish()
        return self._transpose_pairs_l

    def owned_l(self) -> Array | None:
        """The L positions of the T-vector's entries, ``(t_size,)`` component-major; None
        with one component, where they are the first ``num_owned``."""
        if self.num_comp == 1:
            return None
        comp = np.arange(self.num_comp, dtype=np.int64)[:, None]
        return self.xp.asarray((comp * self.num_nodes + np.arange(self.num_owned)).ravel())

    def allreduce_inplace(self, values: Array) -> None:
        """Sum the device array ``values (k,)`` over the ranks in place, on the current
        stream (NCCL); nothing to do on one rank."""
        from cupy.cuda import nccl

        if self.comm.size == 1:
            return
        import cupy

        stream = cupy.cuda.get_current_stream().ptr
        ptr = values.data.ptr
        nccl_communicator(self.comm).allReduce(
            ptr, ptr, values.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream
        )

    def agree(self, count: int) -> int:
        """The smallest ``count`` over the ranks."""
        return self.comm.allreduce(int(count), op=MPI.MIN)

    # --- reductions ------------------------------------------------------------------------
    def allreduce(self, value: Array | float) -> Array:
        """Sum of a 0-d array (or float) over the ranks, as a 0-d array of ``xp``.

        Over NCCL the sum stays on the device (no host synchronization); over
        MPI the value goes through the host.
        """
        if self.transport == "mpi":
            return self.xp.asarray(self.comm.allreduce(float(value), op=MPI.SUM))
        import cupy
        from cupy.cuda import nccl

        out = cupy.array(value, dtype=np.float64)  # (), a copy reduced in place
        stream = cupy.cuda.get_current_stream().ptr
        nccl_communicator(self.comm).allReduce(
            out.data.ptr, out.data.ptr, 1, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream
        )
        return out

    def allreduce_start(self, values: Array) -> Callable[[], Array]:
        """Start summing a (k,) float64 array over the ranks; returns ``finish()`` -> the sums.

        Over MPI a non-blocking ``Iallreduce`` of a host copy (the work done before
        ``finish`` overlaps it); over NCCL an all-reduce queued on the current
        stream (no host synchronization), which ``finish`` returns.
        """
        if self.transport == "mpi":
            host = np.array(self.xp.asnumpy(values) if self.xp is not np else values, np.float64)
            request = self.comm.Iallreduce(MPI.IN_PLACE, host, op=MPI.SUM)

            def finish():
                request.Wait()
                return self.xp.asarray(host)

            return finish
        import cupy
        from cupy.cuda import nccl

        out = cupy.array(values, dtype=np.float64)  # (k,), a copy reduced in place
        stream = cupy.cuda.get_current_stream().ptr
        nccl_communicator(self.comm).allReduce(
            out.data.ptr, out.data.ptr, out.size, nccl.NCCL_FLOAT64, nccl.NCCL_SUM, stream
        )
        return lambda: out

    def free(self) -> None:
        """Release the persistent requests, the IPC mappings, the NCCL communicator and the
        duplicated one."""
        if self.transport == "ipc":
            self._forward_l.free()
            self._reverse_l.free()
        self._forward.free()
        self._reverse.free()
        nccl = _NCCL.pop((self.comm.py2f(), self.comm.size, self.comm.rank), None)
        if nccl is not None:
            nccl.destroy()
        self.comm.Free()
