"""The distributed numbering of a box of tensor cells in closed form (no keys, no messages).

A box split into blocks by :func:`hofem.parallel.box_local` numbers its order-p
nodes on the global lattice of ``n_d p + 1`` points per direction. Ownership is
half-open: along each direction a block owns the lattice points from its first
cell's lower face up to, not including, its last cell's upper face (the last
block also owns the box's upper face), so every rank ghosts only points on its
upper faces. Blocks form a tensor grid, so owners, owned counts and the owners'
numbering are arithmetic on one-dimensional arrays that every rank can do for
every other rank: the whole :class:`~hofem.parallel.ParNumbering` costs
``O(local nodes)`` time and a few integers of memory per node, and no messages.
The contract is that of :func:`~hofem.parallel.numbering.distributed_numbering`
(owned first; ghosts grouped by owner in the owner's order), so everything
downstream is shared.

An owner numbers its points as :func:`hofem.meshes.h1_numbering` numbers a
serial box (:func:`_class_order`, the classes of
:func:`~hofem.meshes.numbering.box_node_classes`): class by class (vertices, edges, faces, cell
interiors), each class's entities x fastest with their ``(p - 1)^k`` nodes in a
row, so that a cell's nodes fall on as few cache lines of an L-vector as in a
serial run (about 31 for the 125 nodes at p = 4, against 37.5 for the lattice's
own x-fastest order, 25 short rows). The order is arithmetic in the owner's
cell counts, so ghost holders compute it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..meshes import reference as ref
from ..meshes.numbering import H1Numbering, box_node_classes
from ..restriction import index_dtype
from .layout import ParNumbering

if TYPE_CHECKING:
    from mpi4py import MPI

    from .distribute import LocalMesh

__all__ = ["box_numbering", "range_numbering"]


def _lattice_cuts(cuts, p):
    """Owned lattice ranges per block along one direction: starts ``(k + 1,)`` (last = end)."""
    starts = np.asarray(cuts, dtype=np.int64) * p
    starts[-1] += 1  # the last block owns the upper face of the box
    return starts


def _lexicographic(coords, widths):
    """``c_x + w_x (c_y + w_y c_z)``: the x-fastest index of ``coords`` in boxes ``widths``.

    Each entry may be a scalar or an array; the terms broadcast.
    """
    index, stride = 0, 1
    for c, w in zip(coords, widths, strict=True):
        index = index + c * stride
        stride = stride * w
    return index


def _outer(vectors):
    """Broadcastable views of 1-D arrays for a lattice with x fastest (x is the last axis)."""
    dim = len(vectors)
    return [
        v.reshape([-1 if a == dim - 1 - d else 1 for a in range(dim)])
        for d, v in enumerate(vectors)
    ]


def box_numbering(comm: MPI.Comm, local_mesh: LocalMesh, order: int) -> ParNumbering:
    """:class:`~hofem.parallel.ParNumbering` of a block of a tensor-cell box.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    local_mesh : LocalMesh
        From :func:`hofem.parallel.box_local` (``box_cuts`` set), tensor cells.
    order : int

    Returns
    -------
    ParNumbering
    """
    mesh, p, rank = local_mesh.mesh, int(order), comm.rank
    cuts = [np.asarray(c, dtype=np.int64) for c in local_mesh.box_cuts]  # cell cuts per direction
    dims = [len(c) - 1 for c in cuts]
    dim = len(cuts)
    me = np.unravel_index(rank, dims[::-1])[::-1]  # this rank's block coordinates, x fastest
    starts = [_lattice_cuts(c, p) for c in cuts]  # owned lattice ranges per block, per direction
    widths = [np.diff(s) for s in starts]  # (k,) owned points per block, per direction
    cells = [np.diff(c) for c in cuts]  # (k,) cells per block, per direction
    closed = [np.arange(k) == k - 1 for k in dims]  # (k,) the block owns the box's upper face
    per_block = np.prod(np.meshgrid(*widths, indexing="ij"), axis=0)  # (k_x, k_y, k_z)
    first = np.concatenate([[0], np.cumsum(per_block.ravel(order="F"))])  # by rank, x fastest

    lo = [c[m] * p for c, m in zip(cuts, me, strict=True)]  # this rank's lattice points [lo, hi)
    hi = [c[m + 1] * p + 1 for c, m in zip(cuts, me, strict=True)]
    axis = [np.arange(a, b, dtype=np.int64) for a, b in zip(lo, hi, strict=True)]
    blk = [np.searchsorted(s, g, side="right") - 1 for s, g in zip(starts, axis, strict=True)]
    shape = [len(a) for a in axis]  # local lattice points per direction, x first
    num_nodes = int(np.prod(shape))
    # owned points: the block's own lattice box at the start of each direction (half-open)
    owned = [int(np.count_nonzero(b == m)) for b, m in zip(blk, me, strict=True)]
    num_owned = int(np.prod(owned))
    ghost = _ghost_points(shape, owned)  # (num_ghosts,) local lattice index, x fastest
    coords = np.unravel_index(ghost, shape[::-1])[::-1]  # per direction, x first
    g_blk = [b[c] for b, c in zip(blk, coords, strict=True)]
    owner = _lexicographic(g_blk, dims)  # (num_ghosts,)
    rel = [a[c] - s[b] for a, c, s, b in zip(axis, coords, starts, g_blk, strict=True)]
    g_cells = np.array([c[b] for c, b in zip(cells, g_blk, strict=True)]).reshape(dim, -1)
    g_closed = np.array([c[b] for c, b in zip(closed, g_blk, strict=True)]).reshape(dim, -1)
    rel = np.array(rel, dtype=np.int64).reshape(dim, -1)  # (dim, num_ghosts)
    gid = first[owner] + _class_order(rel, g_cells, g_closed, p)  # (num_ghosts,) global ids
    by_owner = np.lexsort((gid, owner))  # by owner, then the owner's order
    ghost, owner, gid = ghost[by_owner], owner[by_owner], gid[by_owner]
    my_cells = np.array([c[m] for c, m in zip(cells, me, strict=True)])  # (dim,)
    my_closed = np.array([c[m] for c, m in zip(closed, me, strict=True)])  # (dim,)
    local_id = _owned_first(shape, owned, my_cells, my_closed, p, index_dtype(num_nodes))
    local_id[ghost] = num_owned + np.arange(len(ghost))
    recv_ranks, recv_counts = np.unique(owner, return_counts=True)

    # what each other block ghosts of mine: my owned points inside its lattice box
    send_ranks, send_nodes = [], []
    my_lo = [s[m] for s, m in zip(starts, me, strict=True)]
    my_hi = [s[m + 1] for s, m in zip(starts, me, strict=True)]
    for q in range(comm.size):
        qc = np.unravel_index(q, dims[::-1])[::-1]
        a = [max(c[k] * p, l) for c, k, l in zip(cuts, qc, my_lo, strict=True)]
        b = [min(c[k + 1] * p + 1, h) for c, k, h in zip(cuts, qc, my_hi, strict=True)]
        if q == rank or any(y <= x for x, y in zip(a, b, strict=True)):
            continue
        points = [np.arange(x, y, dtype=np.int64) - l for x, y, l in zip(a, b, my_lo, strict=True)]
        send_ranks.append(q)  # q lists its ghosts of mine in my order: ascending local ids
        mine = _class_order(_points(points), my_cells[:, None], my_closed[:, None], p)
        send_nodes.append(np.sort(mine))

    # offsets: box_block's cells run x fastest over the block, corner 0 lowest, so node
    # (a, b, c) of the cell with corner 0 at local lattice point o is o + (a, b, c)
    cell_origin = [
        (np.arange(c[m + 1] - c[m], dtype=np.int64) * p) for c, m in zip(cuts, me, strict=True)
    ]
    origin = np.ravel(_lexicographic(_outer(cell_origin), shape))  # (num_cells,) corner 0
    node = ref.tensor_lattice(p, dim)  # (P, dim), x fastest
    node_index = _lexicographic(node.T, shape)  # (P,)
    offsets = np.empty((len(origin), len(node_index)), dtype=local_id.dtype)  # (num_cells, P)
    chunk = max(1, (1 << 20) // len(node_index))
    for a in range(0, len(origin), chunk):  # cell chunks: no (num_cells, P) int64 temporary
        offsets[a : a + chunk] = local_id[origin[a : a + chunk, None] + node_index[None, :]]
    local = H1Numbering(mesh, p, offsets, num_nodes, node, ref.corner_weights(mesh.cell_type, p))
    return ParNumbering(
        local=local,
        num_owned=num_owned,
        num_nodes=num_nodes,
        first_global=int(first[rank]),
        num_global=int(first[-1]),
        send_ranks=np.array(send_ranks, dtype=np.int32),
        send_nodes=send_nodes,
        recv_ranks=recv_ranks.astype(np.int32),
        recv_counts=recv_counts.astype(np.int64),
        ghost_global=gid,
    )


def _ghost_points(shape, owned):
    """Local lattice points outside the owned box ``[0, owned_d)``: the upper faces.

    Returns
    -------
    ndarray of int64, shape ``(num_nodes - prod(owned),)``
        Ascending x-fastest indices into the lattice of ``shape`` points.
    """
    faces = []
    for d in range(len(shape)):  # points with coordinate d >= owned[d] and all before < owned
        ranges = [np.arange(owned[k]) for k in range(d)]  # before d: inside the owned box
        ranges.append(np.arange(owned[d], shape[d]))
        ranges += [np.arange(shape[k]) for k in range(d + 1, len(shape))]
        faces.append(np.ravel(_lexicographic(_outer(ranges), shape)))
    return np.sort(np.concatenate(faces))


def _owned_first(shape, owned, cells, closed, p, dtype):
    """Local ids of a lattice whose owned box ``[0, owned_d)`` comes first, in class order.

    Each class's owned points are a tensor product of one-dimensional point sets
    and their places (:func:`_class_order`) sums of one-dimensional terms, so a
    class is one broadcast assignment: no ``(dim, num_owned)`` coordinates.

    Parameters
    ----------
    shape : list of int
        Local lattice points per direction, x first.
    owned : list of int
        Owned lattice points per direction (the box at the start of each).
    cells : ndarray of int64, shape ``(dim,)``
        The block's cells per direction.
    closed : ndarray of bool, shape ``(dim,)``
        Whether the block owns the box's upper face, per direction.
    p : int
    dtype : numpy dtype

    Returns
    -------
    ndarray of ``dtype``, shape ``(prod(shape),)``
        The owned points numbered ``0..prod(owned) - 1`` as :func:`_class_order`
        numbers them; the other entries are left for the caller (they are overwritten).
    """
    local_id = np.empty(shape[::-1], dtype=dtype)  # (z, y, x)
    dim, first = len(shape), 0
    for S in box_node_classes(dim):
        size = (p - 1) ** len(S)
        points, terms, stride, o_stride = [], [], size, 1
        for d in range(dim):
            entity, offset = np.divmod(np.arange(owned[d], dtype=np.int64), p)
            pick = offset > 0 if d in S else offset == 0  # span nodes or grid planes
            points.append(np.flatnonzero(pick))
            terms.append(entity[pick] * stride + (offset[pick] - 1) * o_stride * (d in S))
            stride *= cells[d] if d in S else cells[d] + closed[d]
            o_stride *= p - 1 if d in S else 1
        inner = int(np.prod([len(q) for q in points[:-1]]))
        chunk = max(1, (1 << 20) // max(1, inner))
        for a in range(0, len(points[-1]), chunk):  # slowest-axis chunks: small temporaries
            part = [*terms[:-1], terms[-1][a : a + chunk]]
            at = np.ix_(points[-1][a : a + chunk], *points[-2::-1])
            local_id[at] = first + sum(_outer(part))
        first += stride
    return local_id.ravel()


def _points(ranges):
    """Lattice coordinates ``(dim, m)`` of the tensor product of 1-D ``ranges``, x fastest."""
    shape = [len(r) for r in ranges][::-1]
    return np.array([np.broadcast_to(v, shape).ravel() for v in _outer(ranges)], dtype=np.int64)


def _split(point, p):
    """Grid plane or cell span index, offset in the span, and class code of lattice points.

    Returns
    -------
    entity, offset : ndarray of int64, shape ``(dim, m)``
    code : ndarray of uint8, shape ``(m,)``
        Bit ``d`` set where the point is inside a cell span along ``d``.
    """
    entity, offset = np.divmod(point, p)
    code = np.zeros(point.shape[1], dtype=np.uint8)
    for d in range(point.shape[0]):
        code |= (offset[d] > 0).astype(np.uint8) << d
    return entity, offset, code


def _class_order(rel, cells, closed, p):
    """Place of lattice points in their owner's order: the serial box's, on the owned points.

    The owner's points per direction are ``cells`` spans and ``cells + closed``
    grid planes. A point is a grid plane or a span (with an offset ``1..p - 1``)
    per direction, which gives its class; classes come in the order of
    :func:`~hofem.meshes.numbering.box_node_classes`, each one's entities x
    fastest, each entity's ``(p - 1)^len(S)``
    nodes in a row, x fastest (:func:`hofem.meshes.numbering._box_offsets`).

    Parameters
    ----------
    rel : ndarray of int64, shape ``(dim, m)``
        Lattice coordinates from the owner's first point.
    cells : ndarray of int64, shape ``(dim, m)`` or ``(dim, 1)``
        The owner's cells per direction.
    closed : ndarray of bool, shaped as ``cells``
        Whether the owner owns the box's upper face in that direction.
    p : int

    Returns
    -------
    ndarray of int64, shape ``(m,)``
    """
    dim, p = rel.shape[0], int(p)
    entity, offset, code = _split(rel, p)
    cells, closed = np.broadcast_arrays(cells, closed)
    index = np.empty(rel.shape[1], dtype=np.int64)
    first = np.zeros(cells.shape[1], dtype=np.int64)  # the class's first place, per owner
    for S in box_node_classes(dim):
        in_span = np.isin(np.arange(dim), S)[:, None]  # (dim, 1)
        count = np.where(in_span, cells, cells + closed)  # (dim, m or 1) entities
        size = (p - 1) ** len(S)
        hit = np.flatnonzero(code == sum(1 << d for d in S))
        if hit.size:
            at = hit if count.shape[1] > 1 else slice(None)  # per-point or shared counts
            node = _lexicographic(offset[list(S)][:, hit] - 1, [p - 1] * len(S))
            index[hit] = first[at] + _lexicographic(entity[:, hit], count[:, at]) * size + node
        first = first + np.prod(count, axis=0) * size
    return index


def _owned_before(c, n, p):
    """Lattice points owned by the cells ``C < c`` (x fastest), each point owned by the cell
    holding it half-open (the box's upper faces by the last cells): a closed form."""
    if len(n) == 1:
        return c * p + (1 if c == n[0] else 0)
    inner = int(np.prod(n[:-1]))
    k, r = divmod(c, inner)
    layers = k * p + (1 if k == n[-1] else 0)  # point layers of the whole layers below
    inner_points = int(np.prod([m * p + 1 for m in n[:-1]]))
    width = p + (1 if k == n[-1] - 1 else 0) if k < n[-1] else 0
    return layers * inner_points + width * (_owned_before(r, n[:-1], p) if r else 0)


def _row_ranges(n, p, lo, hi, rows, closed=True):
    """Owned x-ranges ``[a_lo, a_lo + count)`` of the cells ``lo <= C < hi`` on lattice rows.

    ``rows`` holds the lattice coordinates after x of each row, ``(dim - 1, num_rows)``.
    With ``p = 1`` the rows are rows of entities (grid planes or cell spans per
    direction); ``closed`` says whether a row's x-range ends on the box's upper
    face (lattice points, grid planes along x) or not (cell spans along x).
    """
    base = np.zeros(rows.shape[1], dtype=np.int64)  # (num_rows,) cell index of x = 0
    stride = n[0]
    for d in range(1, len(n)):
        base = base + np.minimum(rows[d - 1] // p, n[d] - 1) * stride
        stride *= n[d]
    k_lo = np.clip(lo - base, 0, n[0])
    k_hi = np.clip(hi - base, 0, n[0])
    count = np.where(k_hi > k_lo, (k_hi - k_lo) * p + (closed & (k_hi == n[0])), 0)
    return k_lo * p, count


def range_numbering(comm: Any, local_mesh: Any, order: int) -> ParNumbering:
    """:class:`~hofem.parallel.ParNumbering` of a run of cells of a tensor-cell box.

    Rank ``r`` holds the cells ``starts[r] <= C < starts[r + 1]`` of the box's
    lexicographic order (:func:`hofem.parallel.box_local` with uneven slabs). A
    lattice point is owned by the cell holding it half-open (the cell below it
    along every direction where it lies on a face, the box's upper faces by the
    last cells), so a rank owns only points it holds, and each lattice row's
    owned points are one x-range per rank: owners, counts and the owners'
    numbering are arithmetic on rows, as for blocks. The owner's order is the
    serial box's on its points (:func:`_run_order`).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    local_mesh : LocalMesh
        ``box_ranges = (n, starts)`` set, tensor cells in lexicographic order.
    order : int

    Returns
    -------
    ParNumbering
    """
    (n, starts), p, rank = local_mesh.box_ranges, int(order), comm.rank
    n = [int(m) for m in n]
    point, owner, touching, z0 = _range_points(n, p, starts, rank)
    num_nodes = point.shape[1]
    gid = _range_global_ids(n, p, starts, point, owner)
    is_owned = owner == rank
    num_owned = int(np.count_nonzero(is_owned))
    ghost = np.flatnonzero(~is_owned)
    ghost = ghost[np.lexsort((gid[ghost], owner[ghost]))]  # by owner, then the owner's order
    first_global = _owned_before(int(starts[rank]), n, p)
    local_id = np.empty(num_nodes, dtype=index_dtype(num_nodes))
    local_id[is_owned] = gid[is_owned] - first_global
    local_id[ghost] = num_owned + np.arange(len(ghost))
    per_rank = np.bincount(owner[ghost], minlength=comm.size)  # (size,) ghosts by owner
    recv_ranks = np.flatnonzero(per_rank)
    recv_counts = per_rank[recv_ranks]

    # what each other rank ghosts of mine: my owned points that one of its cells touches
    owned = np.flatnonzero(is_owned)
    near = np.zeros(comm.size, dtype=bool)  # ranks whose cells touch a point of mine
    for q, v in touching:
        near[q[owned][v[owned]]] = True
    send_ranks = [q for q in np.flatnonzero(near).tolist() if q != rank]
    send_nodes = []  # ascending local ids: the order on q
    for q in send_ranks:
        hit = np.zeros(num_owned, dtype=bool)
        for cell_rank, v in touching:
            hit |= (cell_rank[owned] == q) & v[owned]
        send_nodes.append(np.sort(local_id[owned[hit]].astype(np.int64)))

    offsets, node = _range_offsets(n, p, starts[rank], starts[rank + 1], point, z0, local_id)
    weights = ref.corner_weights(local_mesh.mesh.cell_type, p)
    local = H1Numbering(local_mesh.mesh, p, offsets, num_nodes, node, weights)
    return ParNumbering(
        local=local,
        num_owned=num_owned,
        num_nodes=num_nodes,
        first_global=first_global,
        num_global=_owned_before(int(np.prod(n)), n, p),
        send_ranks=np.array(send_ranks, dtype=np.int32),
        send_nodes=send_nodes,
        recv_ranks=recv_ranks.astype(np.int32),
        recv_counts=recv_counts.astype(np.int64),
        ghost_global=gid[ghost],
    )


def _range_points(n, p, starts, rank):
    """The lattice points the cells of ``rank`` touch, their owners and neighbouring cells.

    Returns
    -------
    point : ndarray of int64, shape ``(dim, num_nodes)``
        Lattice coordinates, ascending x-fastest order.
    owner : ndarray of int64, shape ``(num_nodes,)``
        Rank of the cell holding each point half-open.
    touching : list of (ndarray, ndarray)
        For each of the ``2**dim`` cells around a point: its rank and whether it exists.
    z0 : int
        First point layer (along the last axis) of the rank.
    """
    dim, lattice = len(n), [m * p + 1 for m in n]
    c0, c1 = int(starts[rank]), int(starts[rank + 1])
    inner = int(np.prod(n[:-1]))
    # candidates: every lattice point of the point layers this rank's cells reach
    z0, z1 = (c0 // inner) * p, ((c1 - 1) // inner + 1) * p + 1
    shape = [*lattice[:-1], z1 - z0]
    point = np.indices(shape[::-1]).reshape(dim, -1)[::-1].astype(np.int64)  # (dim, m), x fastest
    point[-1] += z0
    cell_strides = np.cumprod([1, *n[:-1]])
    # per direction, the cell part of the two cells around a point (upper, lower) and
    # whether each exists; the owning cell is the upper one, the last cell at the top
    upper = [point[d] // p for d in range(dim)]
    lower = [u - (x % p == 0) for u, x in zip(upper, point, strict=True)]
    clamped = [np.minimum(u, m - 1) for u, m in zip(upper, n, strict=True)]
    owner_cell = sum(c * s for c, s in zip(clamped, cell_strides, strict=True))
    sides = [
        ((u * s, u < m), (w * s, w >= 0))
        for u, w, m, s in zip(upper, lower, n, cell_strides, strict=True)
    ]
    touched = np.zeros(point.shape[1], dtype=bool)
    touching = []
    for corner in ref.tensor_lattice(1, dim).astype(np.int64):
        cell, valid = sides[0][corner[0]]
        for d in range(1, dim):
            part, ok = sides[d][corner[d]]
            cell, valid = cell + part, valid & ok
        touched |= valid & (cell >= c0) & (cell < c1)
        touching.append((np.searchsorted(starts, cell, side="right") - 1, valid))
    owner = np.searchsorted(starts, owner_cell[touched], side="right") - 1
    return point[:, touched], owner, [(q[touched], v[touched]) for q, v in touching], z0


def _range_global_ids(n, p, starts, point, owner):
    """Global id of each point: its owner's first id and its place in the owner's order."""
    gid = np.empty(point.shape[1], dtype=np.int64)
    for q in np.flatnonzero(np.bincount(owner)).tolist():
        mine = owner == q
        place = _run_order(n, p, int(starts[q]), int(starts[q + 1]), point[:, mine])
        gid[mine] = _owned_before(int(starts[q]), n, p) + place
    return gid


def _run_order(n, p, lo, hi, point):
    """Place of lattice points owned by the cells ``lo <= C < hi`` in their order.

    The order of :func:`_class_order` (the serial box's) on the points those
    cells own: class by class, each class's owned entities x fastest, each
    entity's ``(p - 1)^len(S)`` nodes in a row. On a row of a class's entities
    (fixed coordinates after x) the owned ones are one x-range, as lattice
    points are on lattice rows (:func:`_row_ranges` with ``p = 1``), so a place
    is the owned entities on earlier rows plus the offset in the row's range.

    Parameters
    ----------
    n : list of int
        Cells per direction of the box.
    p : int
    lo, hi : int
        The owner's cells.
    point : ndarray of int64, shape ``(dim, m)``
        Lattice coordinates of points those cells own.

    Returns
    -------
    ndarray of int64, shape ``(m,)``
    """
    dim, p = len(n), int(p)
    entity, offset, code = _split(point, p)
    index = np.empty(point.shape[1], dtype=np.int64)
    first = 0
    for S in box_node_classes(dim):
        in_span = np.isin(np.arange(dim), S)
        count = [m if s else m + 1 for m, s in zip(n, in_span, strict=True)]  # entities
        rows = np.indices(count[1:][::-1] or [1]).reshape(max(dim - 1, 1), -1)[::-1][: dim - 1]
        x_lo, x_count = _row_ranges(n, 1, lo, hi, rows, closed=not in_span[0])
        before = np.concatenate([[0], np.cumsum(x_count)])  # owned entities on earlier rows
        size = (p - 1) ** len(S)
        hit = np.flatnonzero(code == sum(1 << d for d in S))
        if hit.size:
            row = _lexicographic(entity[1:, hit], count[1:])
            place = before[row] + entity[0, hit] - x_lo[row]
            node = _lexicographic(offset[list(S)][:, hit] - 1, [p - 1] * len(S))
            index[hit] = first + place * size + node
        first += int(before[-1]) * size
    return index


def _range_offsets(n, p, c0, c1, point, z0, local_id):
    """Local node ids ``(num_cells, P)`` of the cells ``c0..c1 - 1`` (lexicographic): node
    ``(a, b, c)`` of a cell with corner 0 at lattice point ``o`` is ``o + (a, b, c)``,
    found through a dense map of the rank's point layers. Also the nodes ``(P, dim)``."""
    dim = len(n)
    shape = [*(m * p + 1 for m in n[:-1]), int(point[-1].max()) - z0 + 1]
    flat_strides = np.cumprod([1, *shape[:-1]])
    dense = np.full(int(np.prod(shape)), -1, dtype=local_id.dtype)
    flat = sum(point[d] * flat_strides[d] for d in range(dim)) - z0 * flat_strides[-1]
    dense[flat] = local_id
    corner = np.unravel_index(np.arange(int(c0), int(c1), dtype=np.int64), n[::-1])[::-1]
    origin = sum(corner[d] * p * flat_strides[d] for d in range(dim)) - z0 * flat_strides[-1]
    node = ref.tensor_lattice(p, dim)  # (P, dim), x fastest
    node_index = node @ flat_strides  # (P,)
    return dense[origin[:, None] + node_index[None, :]], node
