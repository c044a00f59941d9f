"""Global H1 numbering across ranks: owned nodes contiguous per rank, ghosts, neighbour lists.

Every rank numbers its own cells' nodes with :func:`hofem.meshes.h1_numbering`.
A node can be shared with another rank only if all the vertices of its key
(the ``(vertex, weight)`` pairs of :mod:`hofem.meshes.numbering`) are shared,
so ranks first learn which vertices they share and with whom (a rendezvous
through the vertex's home rank ``id % size``), then send each neighbour the
canonical keys (global vertex ids) of their candidate nodes. The keys both
ranks hold are the nodes they share; listed in sorted key order, they are the
same list on both sides, so no further ids need to travel. Each shared node is
owned by one of its ranks, chosen by a hash of its key (the same choice on
every rank, balanced in expectation). The local L-vector lists owned nodes
first (the T-vector is its head) and ghosts after, grouped by owner rank and in
the owner's send order, so a received buffer is the ghost block as it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from ..meshes import h1_numbering
from ..meshes.numbering import H1Numbering
from ..restriction import index_dtype
from .box_numbering import box_numbering, range_numbering
from .layout import ParNumbering

if TYPE_CHECKING:
    from .distribute import LocalMesh

__all__ = ["distributed_numbering"]

_HASH = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5],
    dtype=np.uint64,
)


def _mix(h):
    """A 64-bit finalizer (murmur3's) so that every bit of ``h`` (uint64) decides the result."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _alltoallv(comm, data, dest):
    """Send row ``i`` of ``data`` (int64 ``(n, w)``) to rank ``dest[i]``; return rows, sources."""
    size = comm.size
    order = np.argsort(dest, kind="stable")
    send = np.ascontiguousarray(data[order], dtype=np.int64)  # (n, w)
    width = send.shape[1]
    counts = np.bincount(dest, minlength=size).astype(np.int64) * width  # (size,)
    recv_counts = np.empty(size, dtype=np.int64)
    comm.Alltoall(counts, recv_counts)
    recv = np.empty(int(recv_counts.sum()), dtype=np.int64)
    displ = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rdispl = np.concatenate([[0], np.cumsum(recv_counts)[:-1]])
    comm.Alltoallv([send, (counts, displ), MPI.INT64_T], [recv, (recv_counts, rdispl), MPI.INT64_T])
    source = np.repeat(np.arange(size), recv_counts // width)
    return recv.reshape(-1, width), source


def _vertex_sharers(comm, vertex_ids):
    """Which other ranks hold each local vertex (rendezvous at the home rank ``id % size``).

    Returns
    -------
    pairs : ndarray of int64, shape ``(m, 2)``
        ``(local vertex, other rank)`` for every vertex held by another rank too.
    """
    size = comm.size
    received, source = _alltoallv(comm, vertex_ids[:, None], vertex_ids % size)
    gid = received[:, 0]
    order = np.lexsort((source, gid))
    gid, source = gid[order], source[order]
    start = np.flatnonzero(np.concatenate([[True], gid[1:] != gid[:-1]]))  # group starts
    count = np.diff(np.concatenate([start, [len(gid)]]))
    replies, dest = [], []
    for k in np.unique(count[count > 1]):
        first = start[count == k]  # groups of k ranks
        ranks = source[first[:, None] + np.arange(k)]  # (groups, k)
        for a in range(k):
            for b in range(k):
                if a != b:
                    replies.append(np.column_stack([gid[first], ranks[:, b]]))
                    dest.append(ranks[:, a])
    if replies:
        replies, dest = np.concatenate(replies), np.concatenate(dest)
    else:
        replies, dest = np.empty((0, 2), dtype=np.int64), np.empty(0, dtype=np.int64)
    pairs, _ = _alltoallv(comm, replies, dest)
    sorter = np.argsort(vertex_ids)
    local = sorter[np.searchsorted(vertex_ids, pairs[:, 0], sorter=sorter)]
    return np.column_stack([local, pairs[:, 1]])


def _exchange_rows(comm, ranks, rows):
    """Send ``rows[k]`` (int64 ``(n_k, w)``) to ``ranks[k]`` and receive theirs, pairwise."""
    width = rows[0].shape[1] if rows else 0
    counts = [np.array([len(r)], dtype=np.int64) for r in rows]
    recv_counts = [np.empty(1, dtype=np.int64) for _ in ranks]
    reqs = [comm.Irecv(c, source=int(q), tag=11) for c, q in zip(recv_counts, ranks, strict=True)]
    reqs += [comm.Isend(c, dest=int(q), tag=11) for c, q in zip(counts, ranks, strict=True)]
    MPI.Request.Waitall(reqs)
    received = [np.empty((int(c[0]), width), dtype=np.int64) for c in recv_counts]
    reqs = [comm.Irecv(r, source=int(q), tag=12) for r, q in zip(received, ranks, strict=True)]
    sends = [np.ascontiguousarray(r) for r in rows]
    reqs += [comm.Isend(r, dest=int(q), tag=12) for r, q in zip(sends, ranks, strict=True)]
    MPI.Request.Waitall(reqs)
    return received


def _rows_in(a, b):
    """For rows of ``a`` (sorted, unique): True where the row is also a row of ``b``."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a), dtype=bool)
    void = np.dtype((np.void, a.dtype.itemsize * a.shape[1]))
    return np.isin(np.ascontiguousarray(a).view(void).ravel(), np.ascontiguousarray(b).view(void))


def distributed_numbering(comm: MPI.Comm, local_mesh: LocalMesh, order: int) -> ParNumbering:
    """Number the order-``order`` H1 nodes of a distributed mesh consistently across ranks.

    Collective over ``comm``.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    local_mesh : LocalMesh
        This rank's cells with global vertex ids. Blocks of a box of tensor
        cells (``box_cuts`` set) are numbered in closed form by
        :func:`~hofem.parallel.box_numbering.box_numbering`, the same contract.
    order : int

    Returns
    -------
    ParNumbering
    """
    if local_mesh.box_cuts is not None:
        return box_numbering(comm, local_mesh, order)
    if local_mesh.box_ranges is not None:
        return range_numbering(comm, local_mesh, order)
    mesh, vertex_ids = local_mesh.mesh, np.asarray(local_mesh.vertex_ids, dtype=np.int64)
    base = h1_numbering(mesh, order)
    num_nodes = base.num_nodes
    neighbors, shared_with = _neighbour_table(comm, vertex_ids, mesh.num_points)
    cand, keys, cand_with = _candidates(mesh, vertex_ids, base, shared_with)
    holds = _held_by_neighbours(comm, neighbors, keys, cand_with)
    owner, shared = _owners(comm, neighbors, keys, holds)
    new_id, num_owned, recv_ranks, recv_counts = _local_order(
        comm, num_nodes, cand[shared], owner[shared]
    )
    send_ranks, send_nodes = _send_lists(comm, neighbors, holds, owner, new_id[cand])
    num_global = comm.allreduce(num_owned)
    first_global = int(comm.exscan(num_owned) or 0)  # exscan gives None on rank 0
    recv_ranks = recv_ranks.astype(np.int32)
    local = H1Numbering(
        mesh, base.order, new_id[base.offsets], num_nodes, base.node_lattice, base.node_weights
    )
    return ParNumbering(
        local=local,
        num_owned=num_owned,
        num_nodes=num_nodes,
        first_global=first_global,
        num_global=int(num_global),
        send_ranks=send_ranks,
        send_nodes=send_nodes,
        recv_ranks=recv_ranks,
        recv_counts=recv_counts.astype(np.int64),
        ghost_global=_ghost_global_ids(
            comm, first_global, send_ranks, send_nodes, recv_ranks, recv_counts
        ),
    )


def _neighbour_table(comm, vertex_ids, num_points):
    """The ranks sharing a vertex with this one, and which of them share each vertex.

    Returns
    -------
    neighbors : int32 (nn,)
        Sorted.
    shared_with : bool (num_points, nn)
        Local vertex ``v`` is held by ``neighbors[k]`` too.
    """
    pairs = _vertex_sharers(comm, vertex_ids)  # (m, 2) local vertex, other rank
    neighbors = np.unique(pairs[:, 1]).astype(np.int32)  # (nn,)
    shared_with = np.zeros((num_points, len(neighbors)), dtype=bool)
    shared_with[pairs[:, 0], np.searchsorted(neighbors, pairs[:, 1])] = True
    return neighbors, shared_with


def _candidates(mesh, vertex_ids, base, shared_with):
    """The nodes other ranks may hold (every support vertex shared), in canonical key order.

    Returns
    -------
    cand : int64 (n_cand,)
        Local node ids.
    keys : int64 (n_cand, width)
        Their canonical keys: sorted ``global vertex * (max weight + 1) + weight`` of
        their support vertices, padded with -1.
    cand_with : bool (n_cand, nn)
        The neighbours sharing all of a candidate's support vertices.
    """
    offsets, weights = base.offsets, base.node_weights  # (num_cells, P), (P, num_corners)
    num_corners = weights.shape[1]
    support = np.count_nonzero(weights, axis=1)  # (P,)
    # one (cell, local node) occurrence of every node
    first = np.empty(base.num_nodes, dtype=np.int64)
    first[offsets.ravel()] = np.arange(offsets.size)
    cell, lnode = np.divmod(first, offsets.shape[1])  # (num_nodes,)
    width = max(int(support[support < num_corners].max(initial=1)), 1)
    max_weight = int(weights.max())
    cand, keys, cand_with = [], [], []
    for s in range(1, num_corners):
        nodes = np.flatnonzero(support[lnode] == s)  # (n_s,) local node ids
        if nodes.size == 0:
            continue
        w = weights[lnode[nodes]]  # (n_s, num_corners)
        corner = np.argsort(w == 0, axis=1, kind="stable")[:, :s]  # (n_s, s)
        verts = np.take_along_axis(mesh.cells[cell[nodes]], corner, axis=1)  # (n_s, s)
        with_q = shared_with[verts].all(axis=1)  # (n_s, nn)
        keep = with_q.any(axis=1)
        nodes, verts, corner, with_q = nodes[keep], verts[keep], corner[keep], with_q[keep]
        key = np.sort(
            vertex_ids[verts] * (max_weight + 1) + np.take_along_axis(w[keep], corner, axis=1),
            axis=1,
        )
        padded = np.full((len(nodes), width), -1, dtype=np.int64)
        padded[:, :s] = key
        cand.append(nodes)
        keys.append(padded)
        cand_with.append(with_q)
    if cand:
        cand, keys, cand_with = np.concatenate(cand), np.concatenate(keys), np.vstack(cand_with)
    else:
        cand = np.empty(0, dtype=np.int64)
        keys = np.empty((0, width), dtype=np.int64)
        cand_with = np.empty((0, shared_with.shape[1]), dtype=bool)
    key_order = np.lexsort(keys.T[::-1])  # candidates in canonical key order
    return cand[key_order], keys[key_order], cand_with[key_order]


def _held_by_neighbours(comm, neighbors, keys, cand_with):
    """bool (n_cand, nn): ``neighbors[k]`` holds candidate ``c`` too (keys exchanged)."""
    theirs = _exchange_rows(comm, neighbors, [keys[cand_with[:, k]] for k in range(len(neighbors))])
    holds = np.zeros_like(cand_with)  # (n_cand, nn): the neighbour holds this node
    for k, rows in enumerate(theirs):
        mine = np.flatnonzero(cand_with[:, k])
        holds[mine, k] = _rows_in(keys[mine], rows)
    return holds


def _owners(comm, neighbors, keys, holds):
    """The owner of each candidate among its holders (this rank included), by a hash of
    its key: the same choice on every rank.

    Returns
    -------
    owner : int32 (n_cand,)
    shared : bool (n_cand,)
        Held by another rank too.
    """
    ranks = np.append(neighbors, comm.rank).astype(np.int32)  # (nn + 1,)
    rank_order = np.argsort(ranks)
    members = np.column_stack([holds, np.ones(len(keys), dtype=bool)])[:, rank_order]
    count = members.sum(axis=1)  # (n_cand,)
    width = keys.shape[1]
    h = _mix((keys.astype(np.uint64) * _HASH[np.arange(width) % len(_HASH)]).sum(axis=1))
    pick = (h % count.astype(np.uint64)).astype(np.int64)  # index among the sorted holders
    position = np.cumsum(members, axis=1) - 1
    owner_col = np.argmax(members & (position == pick[:, None]), axis=1)
    return ranks[rank_order][owner_col], count > 1


def _local_order(comm, num_nodes, shared_nodes, shared_owner):
    """Local ids: owned nodes (original order), then ghosts by owner, in key order.

    Parameters
    ----------
    shared_nodes, shared_owner : (n_shared,)
        The shared candidates in key order, and their owners.

    Returns
    -------
    new_id : (num_nodes,)
        Local id of each node.
    num_owned : int
    recv_ranks, recv_counts : (num_owners,)
        The ghosts' owners, sorted, and how many ghosts each owns.
    """
    ghost = shared_owner != comm.rank
    ghost_nodes, ghost_owner = shared_nodes[ghost], shared_owner[ghost]  # key order
    is_ghost = np.zeros(num_nodes, dtype=bool)
    is_ghost[ghost_nodes] = True
    num_owned = int(num_nodes - is_ghost.sum())
    by_owner = np.argsort(ghost_owner, kind="stable")  # stable: key order within an owner
    ghost_nodes, ghost_owner = ghost_nodes[by_owner], ghost_owner[by_owner]
    new_id = np.empty(num_nodes, dtype=index_dtype(num_nodes))
    new_id[~is_ghost] = np.arange(num_owned)
    new_id[ghost_nodes] = num_owned + np.arange(len(ghost_nodes))
    recv_ranks, recv_counts = np.unique(ghost_owner, return_counts=True)
    return new_id, num_owned, recv_ranks, recv_counts


def _send_lists(comm, neighbors, holds, owner, cand_ids):
    """Per neighbour holding nodes this rank owns: its rank, and the local ids
    (``cand_ids``, one per candidate) of those nodes in key order.

    Returns
    -------
    send_ranks : int32 (num_receivers,)
    send_nodes : list of int64 (n_k,)
    """
    send_ranks, send_nodes = [], []
    for k, q in enumerate(neighbors):
        mine = holds[:, k] & (owner == comm.rank)  # key order
        if mine.any():
            send_ranks.append(q)
            send_nodes.append(cand_ids[mine].astype(np.int64))
    return np.array(send_ranks, dtype=np.int32), send_nodes


def _ghost_global_ids(comm, first_global, send_ranks, send_nodes, recv_ranks, recv_counts):
    """Global ids of the ghosts, sent by their owners along the send lists."""
    reqs, received = [], []
    for q, count in zip(recv_ranks, recv_counts, strict=True):
        buf = np.empty(int(count), dtype=np.int64)
        received.append(buf)
        reqs.append(comm.Irecv(buf, source=int(q), tag=13))
    sends = [np.ascontiguousarray(first_global + nodes) for nodes in send_nodes]
    for q, buf in zip(send_ranks, sends, strict=True):
        reqs.append(comm.Isend(buf, dest=int(q), tag=13))
    MPI.Request.Waitall(reqs)
    return np.concatenate(received) if received else np.empty(0, dtype=np.int64)
