"""Structured box meshes: tensor cells or their Kuhn simplex split, optionally curved."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence

import numpy as np

from ..typing import ArrayLike, IndexArray
from . import reference as ref
from .mesh import Mesh

BOX_TAG_NAMES = {"left": 1, "right": 2, "bottom": 3, "top": 4, "front": 5, "back": 6}


def box(
    n: int | Sequence[int],
    dim: int = 3,
    simplex: bool = False,
    order: int = 1,
    distort: float = 0.0,
    bounds: ArrayLike | None = None,  # (dim, 2): (lo, hi) per direction
) -> Mesh:
    """Mesh of a box with ``n`` cells per direction.

    Vertices are the grid points, numbered x fastest; cells are the grid cells,
    x fastest, each split into ``dim!`` simplices when ``simplex`` is true (the
    Kuhn/Freudenthal split: the simplices are the monotone corner-to-corner
    paths along the cell's main diagonal, so the split is conforming; all are
    positively oriented).

    Boundary facets are tagged x = min -> 1 "left", x = max -> 2 "right",
    y = min -> 3 "bottom", y = max -> 4 "top", z = min -> 5 "front",
    z = max -> 6 "back".

    ``distort`` applies, with ``xhat = (x - lo) / L`` in ``[0, 1]^dim``, the map

        x_i <- x_i + distort * L_i * prod_j sin(pi xhat_j) * cos(pi (xhat_{i+1 mod dim} - 1/4))

    which is smooth, fixes the box boundary pointwise and has a positive
    Jacobian for ``|distort| <= 0.25``; the cells it makes passed the inversion
    check for ``distort <= 0.15`` with ``n`` = 1..6 and ``order`` = 1..3 in
    every dimension (coarse curved simplices can fail above that). With ``order == 1`` it moves the
    vertices only; with ``order >= 2`` the mesh carries ``geometry``, the map
    evaluated at each cell's geometric nodes, so cells are genuinely curved.

    Parameters
    ----------
    n : int or tuple of int
        Cells per direction (``dim`` entries), each >= 1.
    dim : int
        1, 2 or 3.
    simplex : bool
        Triangles/tetrahedra instead of quads/hexahedra (no effect in 1D).
    order : int
        Geometry order, >= 1.
    distort : float
        Amplitude of the distortion map (0: affine cells).
    bounds : sequence of (float, float), optional
        ``(lo, hi)`` per direction; default the unit box.

    Returns
    -------
    Mesh

    Raises
    ------
    ValueError
        Bad ``dim``, ``n``, ``order`` or ``bounds``, or cells inverted by a too
        large ``distort``.
    """
    mesh, _ = box_block(n, None, dim, simplex, order, distort, bounds)
    return mesh


def box_block(
    n: int | Sequence[int],
    block: Sequence[tuple[int, int]] | None = None,  # (dim, 2): (start, stop) per direction
    dim: int = 3,
    simplex: bool = False,
    order: int = 1,
    distort: float = 0.0,
    bounds: ArrayLike | None = None,  # (dim, 2)
) -> tuple[Mesh, IndexArray]:
    """The cells of one block of the :func:`box` grid, built without the rest of the box.

    The distributed layer builds each rank's block this way, so no process
    ever holds the whole mesh. Cells, vertices and the geometry are exactly
    those of :func:`box` (same arguments) restricted to the block; the facets
    are the block's facets on the *box* boundary (with the box's tags), never
    the faces it shares with neighbouring blocks.

    Parameters
    ----------
    n, dim, simplex, order, distort, bounds
        As for :func:`box`.
    block : sequence of ``dim`` pairs ``(start, stop)``, optional
        Grid-cell index range per direction, ``0 <= start < stop <= n_d``;
        default the whole grid.

    Returns
    -------
    mesh : Mesh
        The block, with local vertex ids ``0..num_points - 1``.
    vertex_ids : ndarray of int64, shape ``(mesh.num_points,)``
        The id of each local vertex in the whole box (x fastest).

    Raises
    ------
    ValueError
        As :func:`box`, or a block outside the grid or empty.
    """
    if dim not in (1, 2, 3):
        raise ValueError(f"dim must be 1, 2 or 3, got {dim!r}")
    n = (n,) * dim if isinstance(n, numbers.Integral) else tuple(n)
    if len(n) != dim or not all(isinstance(m, numbers.Integral) and m >= 1 for m in n):
        raise ValueError(f"n must be a positive int or {dim} positive ints, got {n!r}")
    if not isinstance(order, numbers.Integral) or order < 1:
        raise ValueError(f"order must be an int >= 1, got {order!r}")
    bounds = np.array([(0.0, 1.0)] * dim if bounds is None else bounds, dtype=np.float64)
    if bounds.shape != (dim, 2) or np.any(bounds[:, 1] <= bounds[:, 0]):
        raise ValueError(f"bounds must be {dim} pairs (lo, hi) with lo < hi, got {bounds.tolist()}")
    lo, length = bounds[:, 0], bounds[:, 1] - bounds[:, 0]  # (dim,), (dim,)
    n = np.array(n, dtype=np.int64)  # (dim,)
    block = np.array([(0, m) for m in n] if block is None else block, dtype=np.int64)
    if block.shape != (dim, 2) or np.any(block[:, 0] < 0) or np.any(block[:, 1] > n):
        raise ValueError(f"block must be {dim} ranges (start, stop) inside n = {n.tolist()}")
    if np.any(block[:, 1] <= block[:, 0]):
        raise ValueError(f"block {block.tolist()} is empty")

    m = block[:, 1] - block[:, 0]  # (dim,) cells of the block per direction
    grid = _grid(m + 1) + block[:, 0]  # (num_points, dim): global grid index of each vertex
    strides = np.cumprod(np.concatenate([[1], m[:-1] + 1]))  # (dim,) local vertex strides
    origins = _grid(m) @ strides  # (num_grid_cells,): local vertex id of each cell's corner 0
    corner_offsets = ref.tensor_lattice(1, dim) @ strides  # (2**dim,)
    cells = origins[:, None] + corner_offsets[None, :]  # (num_grid_cells, 2**dim)
    cell_type = {1: "line", 2: "quad", 3: "hexahedron"}[dim]
    shapes = np.arange(2**dim)[None]  # (1, 2**dim): a tensor cell is its grid cell
    if simplex and dim > 1:
        cell_type = {2: "triangle", 3: "tetra"}[dim]
        shapes = _kuhn_simplices(dim)  # (dim!, dim + 1)
        cells = cells[:, shapes].reshape(-1, dim + 1)  # (num_cells, dim + 1)
    facet_cells, tags = _box_facets(cell_type, shapes, _grid(m) + block[:, 0], n)
    facets = cells[facet_cells[:, 0, None], ref.FACETS[cell_type][facet_cells[:, 1]]]

    t = grid / n  # (num_points, dim) in [0, 1]
    undistorted = bounds[:, 0] * (1.0 - t) + bounds[:, 1] * t  # (num_points, dim), exact ends
    points = _distortion(undistorted, lo, length, distort)  # (num_points, dim)
    geometry = None
    if order > 1:
        shape = ref.linear_shape_functions(cell_type, ref.geometry_nodes(cell_type, order))
        linear = np.einsum("gv,cvi->cgi", shape, undistorted[cells])  # (num_cells, nodes, dim)
        geometry = _distortion(linear, lo, length, distort)  # (num_cells, num_geom_nodes, dim)
    tag_names = {name: t for name, t in BOX_TAG_NAMES.items() if t <= 2 * dim}
    global_strides = np.cumprod(np.concatenate([[1], n[:-1] + 1]))  # (dim,)
    vertex_ids = grid @ global_strides  # (num_points,)
    box_shape = None if ref.is_simplex(cell_type) else m
    mesh = Mesh(
        points,
        cell_type,
        cells,
        facets,
        tags,
        tag_names,
        geometry,
        facet_cells=facet_cells,
        box_shape=box_shape,
    )
    return mesh, vertex_ids


def _box_facets(cell_type, shapes, grid_cells, n):
    """The cells' facets on the box boundary, found from the grid without a sort.

    A local facet lies on the face ``x_d = 0`` (``x_d = n_d``) of the box when its
    grid cell is in the first (last) layer along ``d`` and all the facet's
    corners are the cube's corners with offset 0 (1) along ``d``; such a facet
    belongs to one cell only. Only the grid cells of the outer layers are looked at.

    Parameters
    ----------
    cell_type : str
    shapes : ndarray of int64, shape ``(cells_per_grid_cell, num_corners)``
        Cube corners of each cell of a grid cell (the identity for tensor cells).
    grid_cells : ndarray of int64, shape ``(num_grid_cells, dim)``
        Global grid index of each grid cell, x fastest.
    n : ndarray of int64, shape ``(dim,)``
        Cells of the whole box per direction.

    Returns
    -------
    facet_cells : ndarray of int64, shape ``(num_facets, 2)``
        ``[cell, local facet]``, ordered by cell then local facet (cell ``g * S + s``
        is cell ``s`` of grid cell ``g``).
    tags : ndarray of int32, shape ``(num_facets,)``
        ``2 d + 1`` on ``x_d = 0``, ``2 d + 2`` on ``x_d = n_d``.
    """
    dim = grid_cells.shape[1]
    offsets = ref.tensor_lattice(1, dim)[shapes[:, ref.FACETS[cell_type]]]  # (S, F, cpf, dim)
    on_side = [np.all(offsets == side, axis=2) for side in (0, 1)]  # 2 x (S, F, dim)
    outer = np.flatnonzero(np.any((grid_cells == 0) | (grid_cells == n - 1), axis=1))
    g = grid_cells[outer]  # (num_outer, dim)
    tags = np.zeros((len(outer), *offsets.shape[:2]), dtype=np.int32)  # (num_outer, S, F)
    for d in range(dim):
        for side, layer in ((0, 0), (1, n[d] - 1)):
            tags[(g[:, d] == layer)[:, None, None] & on_side[side][None, :, :, d]] = (
                2 * d + 1 + side
            )
    i, s, f = np.nonzero(tags)  # each (num_facets,), by grid cell, cell, local facet
    facet_cells = np.column_stack([outer[i] * len(shapes) + s, f])
    return facet_cells, tags[i, s, f]


def _grid(m):
    """Integer grid points ``0..m_d - 1``, x fastest: shape ``(prod(m), len(m))`` int64."""
    axes = np.meshgrid(*[np.arange(k) for k in m], indexing="ij")
    return np.stack([a.ravel(order="F") for a in axes], axis=1).astype(np.int64)


def _kuhn_simplices(dim):
    """Local corners of the ``dim!`` Kuhn simplices of the reference cube.

    Returns
    -------
    ndarray of int64, shape ``(dim!, dim + 1)``
        Each row walks from corner 0 to corner ``2**dim - 1`` adding one unit
        direction at a time; the last two entries are swapped where needed for
        a positive orientation.
    """
    corners = ref.tensor_lattice(1, dim).astype(np.float64)  # (2**dim, dim)
    simplices = []
    for perm in itertools.permutations(range(dim)):
        path = np.cumsum([0] + [1 << d for d in perm])  # (dim + 1,)
        if np.linalg.det(corners[path[1:]] - corners[path[0]]) < 0:
            path[[-2, -1]] = path[[-1, -2]]
        simplices.append(path)
    return np.array(simplices, dtype=np.int64)


def _distortion(x, lo, length, distort):
    """Apply the box distortion map to coordinates ``x`` of shape ``(..., dim)``."""
    if distort == 0.0:
        return x
    xhat = (x - lo) / length  # (..., dim)
    # sin(pi min(xhat, 1 - xhat)) vanishes exactly on the boundary
    bubble = np.prod(np.sin(np.pi * np.minimum(xhat, 1.0 - xhat)), axis=-1, keepdims=True)
    swirl = np.cos(np.pi * (np.roll(xhat, -1, axis=-1) - 0.25))  # (..., dim)
    return x + distort * length * bubble * swirl
