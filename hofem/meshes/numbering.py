"""Continuous H1 node numbering of order p on a conforming mesh.

Every node of a cell is identified by a canonical key: the pairs (global
vertex id, integer weight) over the cell's corners with nonzero weight, sorted
by vertex id. The weights (:func:`reference.corner_weights`) locate the node
relative to the vertices independently of how a cell orders its corners, so
two cells that share an edge or a face, in whatever orientation, produce the
same keys for the nodes on it and no orientation logic is needed. Numbering
the distinct keys gives the global node ids.
"""

from dataclasses import dataclass

import numpy as np

from ..restriction import index_dtype
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
        int32 unless ``num_cells * num_nodes_per_cell`` passes 2^31 - 1.
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

    def boundary_nodes(self, tags=None):
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


def h1_numbering(mesh, order):
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
        ``order < 1``.
    """
    if not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"order must be an int >= 1, got {order!r}")
    order = int(order)
    cell_type = mesh.cell_type
    weights = ref.corner_weights(cell_type, order)  # (num_nodes_per_cell, num_corners)
    lattice = ref.lattice(cell_type, order)  # (num_nodes_per_cell, dim)
    if ref.is_simplex(cell_type):
        lattice = weights  # the barycentric lattice
    support = np.count_nonzero(weights, axis=1)  # (num_nodes_per_cell,)
    max_weight = int(weights.max())
    num_corners = weights.shape[1]

    # ids stay below num_cells * P: int32 unless that bound passes 2^31 - 1
    offsets = np.empty(
        (mesh.num_cells, len(weights)), dtype=index_dtype(mesh.num_cells * len(weights))
    )
    num_nodes = 0
    for s in range(1, num_corners + 1):
        nodes = np.flatnonzero(support == s)  # (n_s,): local nodes supported on s corners
        if nodes.size == 0:
            continue
        if s == num_corners:  # interior nodes are never shared
            ids = np.arange(mesh.num_cells * nodes.size, dtype=np.int64)
            count = ids.size
        elif s == 1:  # vertex nodes (all of the same weight): rank the vertices, no sort
            vid = mesh.cells[:, np.argmax(weights[nodes], axis=1)]  # (num_cells, n_1)
            used = np.zeros(mesh.num_points, dtype=bool)  # (num_points,)
            used[vid] = True
            ids = (np.cumsum(used) - 1)[vid]  # (num_cells, n_1)
            count = int(np.count_nonzero(used))
        else:
            w = weights[nodes]  # (n_s, num_corners)
            corner = np.argsort(w == 0, axis=1, kind="stable")[:, :s]  # (n_s, s) nonzero corners
            w = np.take_along_axis(w, corner, axis=1)  # (n_s, s)
            vid = mesh.cells[:, corner]  # (num_cells, n_s, s)
            # pack (vertex id, weight) into one int64 and sort by vertex id
            key = np.sort(vid * (max_weight + 1) + w, axis=2)  # (num_cells, n_s, s)
            ids, count = unique_rows(key.reshape(-1, s))  # (num_cells * n_s,)
        offsets[:, nodes] = num_nodes + ids.reshape(mesh.num_cells, nodes.size)
        num_nodes += count
    return H1Numbering(mesh, order, offsets, num_nodes, lattice, weights)
