"""Continuous H1 node numbering of order p on a conforming mesh.

Every node of a cell is identified by a canonical key: the pairs (global
vertex id, integer weight) over the cell's corners with nonzero weight, sorted
by vertex id. The weights (:func:`reference.corner_weights`) locate the node
relative to the vertices independently of how a cell orders its corners, so
two cells that share an edge or a face, in whatever orientation, produce the
same keys for the nodes on it and no orientation logic is needed. Numbering
the distinct keys gives the global node ids.
"""

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..memory import chunk_ranges
from ..restriction import index_dtype
from ..typing import IndexArray, Tags
from . import reference as ref
from .mesh import Mesh, unique_rows


@dataclass(frozen=True, eq=False)
class H1Numbering:
    """Global ids of the order-``order`` lattice nodes of every cell.

    Attributes
    ----------
    mesh : Mesh
    order : int
    offsets : ndarray of int32 or int64, shape ``(num_cells, num_nodes_per_cell)``
        Global node id of each cell's lattice nodes (tensor cells: x fastest,
        index ``i + (p + 1) j + (p + 1)^2 k``; simplices ``for k: for j: for i``);
        int32 unless ``num_cells * num_nodes_per_cell`` passes 2^31 - 1. Read-only
        (a numbering never changes): restrictions made from it may share one
        device copy (:meth:`hofem.backends.ref.RefBackend.restriction_setup`).
    num_nodes : int
        Number of global nodes. Vertex nodes come first, in vertex order
        (ids ``0..num_points - 1`` when every point is a cell corner), then
        nodes supported on 2, 3, ... vertices (edges, faces); nodes interior
        to a cell come last, cell by cell.
    node_lattice : ndarray of int64, shape ``(num_nodes_per_cell, dim)`` or ``(..., dim + 1)``
        Tensor cells: the lattice ``(i, j, k)``; simplices: the barycentric
        lattice ``(p - i - j - k, i, j, k)``.
    node_weights : ndarray of int64, shape ``(num_nodes_per_cell, num_corners)``
        The integer corner weights defining the keys.
    """

    mesh: Mesh
    order: int
    offsets: np.ndarray
    num_nodes: int
    node_lattice: np.ndarray
    node_weights: np.ndarray

    def __post_init__(self) -> None:
        self.offsets.flags.writeable = False

    def boundary_nodes(self, tags: Tags = None) -> IndexArray:
        """Global ids of the nodes on the mesh's tagged facets.

        A node lies on a facet iff all vertices with nonzero weight in its key
        are vertices of that facet.

        Parameters
        ----------
        tags : int, str, or iterable of int/str, optional
            Facet tags or tag names (``mesh.tag_names``); None: all facets.

        Returns
        -------
        ndarray of int64, shape ``(num_boundary_nodes,)``, sorted

        Raises
        ------
        KeyError
            An unknown tag name.
        """
        mesh = self.mesh
        selected = np.ones(len(mesh.facets), dtype=bool)  # (num_facets,)
        if tags is not None:
            tags = [tags] if isinstance(tags, (int, np.integer, str)) else list(tags)
            ids = [mesh.tag_names[t] if isinstance(t, str) else int(t) for t in tags]
            selected = np.isin(mesh.facet_tags, ids)
        cell, local = mesh.facet_cells()[selected].T  # (num_selected,), (num_selected,)
        local_facets = ref.FACETS[mesh.cell_type]  # (facets_per_cell, corners_per_facet)
        in_facet = np.zeros((len(local_facets), self.node_weights.shape[1]), dtype=bool)
        np.put_along_axis(in_facet, local_facets, True, axis=1)  # (facets_per_cell, corners)
        # on_facet[f, n]: every corner with nonzero weight at node n is a corner of facet f
        outside = (self.node_weights[None] > 0) & ~in_facet[:, None, :]  # (fpc, nodes, corners)
        on_facet = ~np.any(outside, axis=2)  # (facets_per_cell, num_nodes_per_cell)
        f_idx, n_idx = np.nonzero(on_facet[local])  # each (sum of nodes over selected facets,)
        return np.unique(self.offsets[cell[f_idx], n_idx]).astype(np.int64)


def h1_numbering(mesh: Mesh, order: int) -> H1Numbering:
    """Number the order-``order`` H1 (continuous Lagrange) nodes of a mesh.

    Parameters
    ----------
    mesh : Mesh
        A conforming mesh.
    order : int
        Polynomial order ``p >= 1``.

    Returns
    -------
    H1Numbering

    Raises
    ------
    ValueError
        ``order < 1``; a ``mesh.box_shape`` whose cells are not in box order.

    Notes
    -----
    A mesh with ``box_shape`` (:func:`hofem.meshes.box` of tensor cells) is
    numbered in closed form (:func:`_box_offsets`): the same classes in the same
    order, no keys or sorts, and no memory beyond the int32 offsets and one
    chunk of cells.
    """
    if not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"order must be an int >= 1, got {order!r}")
    order = int(order)
    cell_type = mesh.cell_type
    weights = ref.corner_weights(cell_type, order)  # (num_nodes_per_cell, num_corners)
    lattice = ref.lattice(cell_type, order)  # (num_nodes_per_cell, dim)
    if mesh.box_shape is not None:
        offsets, num_nodes = _box_offsets(mesh, order)
        return H1Numbering(mesh, order, offsets, num_nodes, lattice, weights)
    if ref.is_simplex(cell_type):
        lattice = weights  # the barycentric lattice
    support = np.count_nonzero(weights, axis=1)  # (num_nodes_per_cell,)
    max_weight = int(weights.max())
    num_corners = weights.shape[1]
    key_dtype = index_dtype(mesh.num_points * (max_weight + 1))  # int32 keys while they fit

    # ids stay below num_cells * P: int32 unless that bound passes 2^31 - 1
    offsets = np.empty(
        (mesh.num_cells, len(weights)), dtype=index_dtype(mesh.num_cells * len(weights))
    )
    num_nodes = 0
    for s in range(1, num_corners + 1):
        nodes = np.flatnonzero(support == s)  # (n_s,): local nodes supported on s corners
        if nodes.size == 0:
            continue
        chunks = chunk_ranges(mesh.num_cells, nodes.size * s)
        if s == num_corners:  # interior nodes are never shared
            ids = np.arange(mesh.num_cells * nodes.size, dtype=offsets.dtype)
            count = ids.size
        elif s == 1:  # vertex nodes (all of the same weight): rank the vertices, no sort
            column = np.argmax(weights[nodes], axis=1)  # (n_1,) corner of each vertex node
            used = np.zeros(mesh.num_points, dtype=bool)  # (num_points,)
            for a, b in chunks:
                used[mesh.cells[a:b, column]] = True
            rank = np.cumsum(used, dtype=offsets.dtype) - 1  # (num_points,)
            ids = np.empty((mesh.num_cells, nodes.size), dtype=offsets.dtype)
            for a, b in chunks:
                ids[a:b] = rank[mesh.cells[a:b, column]]
            count = int(rank[-1]) + 1 if rank.size else 0
        else:
            w = weights[nodes]  # (n_s, num_corners)
            corner = np.argsort(w == 0, axis=1, kind="stable")[:, :s]  # (n_s, s) nonzero corners
            w = np.take_along_axis(w, corner, axis=1)  # (n_s, s)
            # pack (vertex id, weight) into one integer and sort by vertex id
            key = np.empty((mesh.num_cells, nodes.size, s), dtype=key_dtype)
            for a, b in chunks:
                vid = mesh.cells[a:b][:, corner].astype(key_dtype)  # (b - a, n_s, s)
                key[a:b] = np.sort(vid * key_dtype(max_weight + 1) + w, axis=2)
            ids, count = unique_rows(key.reshape(-1, s))  # (num_cells * n_s,)
            del key
        ids = ids.reshape(mesh.num_cells, nodes.size).astype(offsets.dtype, copy=False)
        ids += offsets.dtype.type(num_nodes)
        offsets[:, nodes] = ids
        num_nodes += count
    return H1Numbering(mesh, order, offsets, num_nodes, lattice, weights)


def box_node_classes(dim: int) -> list[tuple[int, ...]]:
    """The node classes of a box's numbering, in the order :func:`h1_numbering` numbers
    them (and a distributed box's owners number their points).

    A class is the tuple of directions in which its nodes lie inside a cell span:
    ``()`` vertices, then edges along x, y, z, faces xy, xz, yz, cell interiors.
    """
    return [S for k in range(dim + 1) for S in itertools.combinations(range(dim), k)]


def _box_offsets(mesh, p):
    """Closed-form offsets of the order-``p`` nodes of a tensor-cell box grid.

    A lattice point of the box, per direction ``d``, either lies on a grid plane
    (vertex index ``v_d`` in ``0..n_d``) or inside a cell's span (cell ``c_d``
    in ``0..n_d - 1``, offset ``o_d`` in ``0..p - 2``). The set ``S`` of
    directions of the second kind classifies the node: ``S`` empty for vertices,
    one direction for edges, two for faces, all for cell interiors, so the
    classes come in :func:`h1_numbering`'s order when ordered by ``len(S)``.
    Inside a class the id is the x-fastest index of the entity (``v_d`` or
    ``c_d`` per direction) times ``(p - 1)^len(S)`` plus the x-fastest index of
    the offsets: vertices get their vertex ids and interiors come cell by cell.

    Every local node's id is therefore affine in the cell's grid position,
    ``first[i] + sum_d c_d weights[d, i]``, and the offsets are one broadcast sum
    of a term per direction, written whole rows at a time.

    Parameters
    ----------
    mesh : Mesh
        With ``box_shape`` ``n`` (``dim`` cell counts).
    p : int

    Returns
    -------
    offsets : ndarray of int32 or int64, shape ``(num_cells, (p + 1)^dim)``
    num_nodes : int

    Raises
    ------
    ValueError
        The corners of the cells are not the grid's (a mesh whose ``box_shape``
        does not describe its cell order).
    """
    n = np.array(mesh.box_shape, dtype=np.int64)  # (dim,) cells per direction
    dim = len(n)
    subsets = box_node_classes(dim)
    node = ref.tensor_lattice(p, dim)  # (P, dim), x fastest
    first = np.empty(len(node), dtype=np.int64)  # (P,) ids in cell 0
    weights = np.empty((dim, len(node)), dtype=np.int64)  # (dim, P) per cell step along d
    num_nodes = 0
    for S in subsets:
        nodes, class_weights, class_first = _box_class(n, p, S, node)
        first[nodes] = num_nodes + class_first
        weights[:, nodes] = class_weights[:, None]
        num_nodes += math.prod(int(n[d]) if d in S else int(n[d]) + 1 for d in range(dim)) * (
            p - 1
        ) ** len(S)
    dtype = index_dtype(num_nodes)
    offsets = np.empty((mesh.num_cells, len(node)), dtype=dtype)
    # cells x fastest: (n_{dim-1}, ..., n_0, P), the direction-d term along axis dim - 1 - d
    grid = offsets.reshape(*n[::-1], len(node))
    slow = first.astype(dtype)  # the directions but x summed: a small (n_{dim-1}, ..., 1, P)
    for d in range(1, dim):
        shape = [1] * dim + [len(node)]
        shape[dim - 1 - d] = int(n[d])
        slow = slow + (np.arange(n[d])[:, None] * weights[d]).astype(dtype).reshape(shape)
    np.add(slow, (np.arange(n[0])[:, None] * weights[0]).astype(dtype), out=grid)
    corners = ref.corner_nodes(mesh.cell_type, p)  # (num_corners,)
    if not np.array_equal(offsets[:, corners], mesh.cells):
        raise ValueError(
            f"mesh.box_shape {mesh.box_shape} does not match its cells: the cells "
            "are not in box grid order; build the mesh without box_shape"
        )
    return offsets, num_nodes


def _box_class(n, p, S, node):
    """The lattice nodes of class ``S`` and their ids as ``cell @ weights + first``.

    Parameters
    ----------
    n : int64 array (dim,)
        Cells per direction.
    p : int
    S : tuple of int
        The directions in which the class's nodes are inside a cell's span.
    node : int64 array (P, dim)
        The cell's lattice.

    Returns
    -------
    nodes : int array (n_S,)
        The class's local nodes.
    weights : int64 array (dim,)
        Each cell coordinate's weight in the id: the entity stride times ``(p - 1)^|S|``.
    first : int64 array (n_S,)
        The ids of the class's nodes in cell 0, counted from the class's first id.
    """
    dim = len(n)
    inside = np.zeros(dim, dtype=bool)
    inside[list(S)] = True
    nodes = np.flatnonzero((((node > 0) & (node < p)) == inside).all(axis=1))
    # entity index x fastest: n_d cell spans or n_d + 1 grid planes per direction
    stride = np.cumprod(np.concatenate([[1], n[:-1] + ~inside[:-1]]))  # (dim,)
    o_stride = np.cumprod(np.concatenate([[1], np.where(inside[:-1], p - 1, 1)]))  # (dim,)
    a = node[nodes]  # (n_S, dim)
    scale = (p - 1) ** len(S)
    first = scale * (np.where(inside, 0, a // p) @ stride)
    first += np.where(inside, a - 1, 0) @ o_stride
    return nodes, scale * stride, first
