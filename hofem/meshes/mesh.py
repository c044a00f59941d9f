"""The ``Mesh`` container: vertices, one cell type, tagged boundary facets."""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Sequence

import numpy as np

from ..jacobian import det as jacobian_det
from ..restriction import index_dtype
from ..typing import ArrayLike, FloatArray, IndexArray
from . import reference as ref

CHECK_CHUNK = 1 << 20  # geometric nodes per chunk of the orientation check


def unique_rows(a: IndexArray) -> IndexArray:
    """Number the distinct rows of an integer array in lexicographic order.

    Parameters
    ----------
    a : ndarray of int32 or int64, shape ``(n, m)``

    Returns
    -------
    inverse : ndarray of int32 (int64 when ``n`` passes 2^31 - 1), shape ``(n,)``
        Id of each row's class; equal rows get equal ids, ids ascend with the
        rows' lexicographic order (column 0 most significant).
    count : int
        Number of distinct rows.
    """
    n = a.shape[0]
    dtype = index_dtype(n)
    if n == 0:
        return np.empty(0, dtype=dtype), 0
    order = np.lexsort(a.T[::-1])  # (n,)
    s = a[order]  # (n, m)
    new = np.ones(n, dtype=bool)  # (n,)
    new[1:] = np.any(s[1:] != s[:-1], axis=1)
    del s
    ids = np.cumsum(new, dtype=dtype) - 1  # (n,)
    inverse = np.empty(n, dtype=dtype)  # (n,)
    inverse[order] = ids
    return inverse, int(ids[-1]) + 1


def boundary_facets(cell_type: str, cells: IndexArray) -> IndexArray:
    """Facets belonging to exactly one cell.

    Parameters
    ----------
    cell_type : str
    cells : ndarray of int64, shape ``(num_cells, num_corners)``

    Returns
    -------
    ndarray of int64, shape ``(num_boundary_facets, corners_per_facet)``
        Vertex ids in the hofem corner ordering of the facet type, ordered by
        cell then local facet (:data:`reference.FACETS`); orientation is not
        normalized.
    """
    local = ref.FACETS[cell_type]  # (facets_per_cell, corners_per_facet)
    all_facets = cells[:, local].reshape(-1, local.shape[1])  # (num_cells * facets_per_cell, cpf)
    ids, count = unique_rows(np.sort(all_facets, axis=1))  # (num_cells * facets_per_cell,)
    return all_facets[np.bincount(ids, minlength=count)[ids] == 1]


def _where(source):
    return f" in {source}" if source else ""


class Mesh:
    """An unstructured conforming mesh of one cell type.

    Parameters
    ----------
    points : array_like of float, shape ``(num_points, gdim)``
        Vertex coordinates, ``gdim >= dim``.
    cell_type : str
        One of "line", "triangle", "quad", "tetra", "hexahedron" (meshio names).
    cells : array_like of int, shape ``(num_cells, num_corners)``
        Vertex ids of each cell in hofem corner ordering (see
        :mod:`hofem.meshes.reference`).
    facets : array_like of int, shape ``(num_facets, corners_per_facet)``, optional
        Tagged boundary facets (vertex ids, any ordering); each must be a facet
        of some cell. Default: the facets belonging to exactly one cell.
    facet_tags : array_like of int, shape ``(num_facets,)``, optional
        Default: all 1.
    tag_names : dict[str, int], optional
        Names of facet tags. Default ``{"boundary": 1}`` when the facets are
        computed, else ``{}``.
    geometry : array_like of float, shape ``(num_cells, num_geom_nodes, gdim)``, optional
        Coordinates of each cell's order-``k`` geometric Lagrange nodes, ``k >= 2``,
        in hofem lattice ordering (GLL positions for tensor cells, equispaced
        for simplices); ``k`` is inferred from ``num_geom_nodes``.
    source : str, optional
        Where the mesh came from (a file name), quoted in error messages.
    box_shape : sequence of ``dim`` int, optional
        Cells per direction when the mesh is a tensor-cell box grid in the
        order :func:`hofem.meshes.box` makes it (vertices and cells x fastest,
        corner 0 lowest). :func:`hofem.meshes.h1_numbering` then numbers the
        nodes in closed form instead of sorting keys. Dropped by
        :meth:`permute_cells`.
    facet_cells : array_like of int, shape ``(num_facets, 2)``, optional
        ``[cell, local facet]`` of each of ``facets`` when the caller knows them
        (:func:`~hofem.meshes.box` does): checked against the cells, not searched
        for among all cell facets (a sort of ``facets_per_cell * num_cells`` rows).

    The arrays are taken as immutable after construction (facet-to-cell
    matches are cached).

    Attributes
    ----------
    dim : int
        Topological dimension.
    geometry_order : int
        1 without ``geometry``, else ``k``.
    is_affine : bool
        Every cell is an affine image of the reference cell (simplices of
        order 1, parallelepipeds, curved-order geometry whose nodes are placed
        affinely): its Jacobian is the same at every geometric node, to
        ``1e-12`` of the cell's coordinates.  Operators then recompute the
        geometry once per cell (:func:`hofem.cell_center`).  False when
        ``gdim > dim``.

    Raises
    ------
    ValueError
        Unknown cell type, wrong shapes, vertex ids out of range, facets that
        are not cell facets, geometry of no order, or an inverted or degenerate
        cell (Jacobian determinant <= 0 at a geometric node; checked when
        ``gdim == dim``): the message names the first bad cell and ``source``.
        A ``box_shape`` that does not match the cell type, cells or points.
    TypeError
        Non-integer ``cells``/``facets``/``facet_tags`` or non-real coordinates.
    """

    def __init__(
        self,
        points: ArrayLike,  # (num_points, gdim)
        cell_type: str,
        cells: ArrayLike,  # (num_cells, num_corners)
        facets: ArrayLike | None = None,  # (num_facets, corners_per_facet)
        facet_tags: ArrayLike | None = None,  # (num_facets,)
        tag_names: dict[str, int] | None = None,
        geometry: ArrayLike | None = None,  # (num_cells, num_geom_nodes, gdim)
        *,
        source: str | None = None,
        box_shape: Sequence[int] | None = None,
        facet_cells: ArrayLike | None = None,  # (num_facets, 2)
    ) -> None:
        self.source = source
        where = _where(source)
        if cell_type not in ref.CELL_TYPES:
            supported = ", ".join(ref.CELL_TYPES)
            raise ValueError(f"unsupported cell type {cell_type!r}{where}; supported: {supported}")
        self.cell_type = cell_type
        self.dim = ref.CELL_DIM[cell_type]
        self.points = _real_array(points, "points", 2)  # (num_points, gdim)
        if self.points.shape[1] < self.dim:
            raise ValueError(
                f"points{where} have {self.points.shape[1]} coordinates, "
                f"fewer than the dimension {self.dim} of {cell_type} cells"
            )
        self.cells = _index_array(cells, "cells", 2)  # (num_cells, num_corners)
        _check_ids(self.cells, ref.NUM_CORNERS[cell_type], len(self.points), "cells", where)

        if facets is None:
            self.facets = self.boundary_facets()  # (num_facets, corners_per_facet)
            tag_names = {"boundary": 1} if tag_names is None else tag_names
        else:
            self.facets = _index_array(facets, "facets", 2)  # (num_facets, corners_per_facet)
            corners_per_facet = ref.FACETS[cell_type].shape[1]
            _check_ids(self.facets, corners_per_facet, len(self.points), "facets", where)
        if facet_tags is None:
            facet_tags = np.ones(len(self.facets), dtype=np.int32)
        self.facet_tags = _index_array(facet_tags, "facet_tags", 1).astype(np.int32)
        if self.facet_tags.shape != (len(self.facets),):
            raise ValueError(
                f"facet_tags{where} has shape {self.facet_tags.shape}, "
                f"expected ({len(self.facets)},)"
            )
        self.tag_names = dict(tag_names or {})
        if facet_cells is None:
            self._facet_cells = self._match_facets()  # (num_facets, 2)
        else:
            self._facet_cells = self._checked_facet_cells(facet_cells)  # (num_facets, 2)

        self.geometry = None
        self.geometry_order = 1
        if geometry is not None:
            self._set_geometry(geometry)
        self._check_orientation()
        self.box_shape = None if box_shape is None else self._box_shape(box_shape, where)

    def _box_shape(self, box_shape, where):
        """``box_shape`` as a tuple of int, checked against the cells and points."""
        shape = tuple(int(n) for n in box_shape)
        if (
            ref.is_simplex(self.cell_type)
            or len(shape) != self.dim
            or math.prod(shape) != self.num_cells
            or math.prod(n + 1 for n in shape) != self.num_points
        ):
            raise ValueError(
                f"box_shape {shape}{where} does not describe this mesh "
                f"({self.num_cells} {self.cell_type} cells, {self.num_points} points): "
                f"it needs {self.dim} cell counts of a tensor-cell grid"
            )
        return shape

    @property
    def gdim(self) -> int:
        """Geometric dimension (number of point coordinates)."""
        return self.points.shape[1]

    @property
    def num_cells(self) -> int:
        """Number of cells."""
        return self.cells.shape[0]

    @property
    def num_points(self) -> int:
        """Number of vertices."""
        return self.points.shape[0]

    def __repr__(self) -> str:
        return (
            f"Mesh({self.cell_type}, num_cells={self.num_cells}, num_points={self.num_points}, "
            f"gdim={self.gdim}, geometry_order={self.geometry_order}, "
            f"num_facets={len(self.facets)})"
        )

    def cell_coordinates(self, start: int = 0, stop: int | None = None) -> FloatArray:
        """Coordinates of the geometric nodes of cells ``start:stop`` (default all).

        Returns
        -------
        ndarray of float64, shape ``(stop - start, num_geom_nodes, gdim)``
            ``geometry`` if present, else the corners ``points[cells]``
            (the order-1 lattice, which is the corner ordering).
        """
        if self.geometry is not None:
            return self.geometry[start:stop]
        # take, not fancy indexing: a row gather along one axis, 2-3 times faster
        return np.take(self.points, self.cells[start:stop], axis=0)

    def permute_cells(self, order: ArrayLike) -> Mesh:
        """The same mesh with its cells in the order ``order`` (a permutation).

        Cell ``i`` of the result is cell ``order[i]`` of this mesh; facets, tags
        and geometry follow. Nothing is re-validated: a permutation keeps a
        valid mesh valid.

        Parameters
        ----------
        order : ndarray of int, shape ``(num_cells,)``

        Returns
        -------
        Mesh
        """
        order = np.asarray(order, dtype=np.int64)
        if order.shape != (self.num_cells,) or not np.array_equal(
            np.sort(order), np.arange(self.num_cells)
        ):
            raise ValueError(f"order must be a permutation of the {self.num_cells} cells")
        new = copy.copy(self)
        new.cells = self.cells[order]
        new.box_shape = None  # cells no longer in grid order
        new.geometry = None if self.geometry is None else self.geometry[order]
        position = np.empty_like(order)
        position[order] = np.arange(self.num_cells)
        new._facet_cells = np.column_stack(
            [position[self._facet_cells[:, 0]], self._facet_cells[:, 1]]
        )
        return new

    def cell_facets(self) -> IndexArray:
        """Vertex ids of every local facet of every cell.

        Returns
        -------
        ndarray of int64, shape ``(num_cells, facets_per_cell, corners_per_facet)``
            In the order of :data:`reference.FACETS`.
        """
        return self.cells[:, ref.FACETS[self.cell_type]]

    def boundary_facets(self) -> IndexArray:
        """Facets belonging to exactly one cell; see :func:`boundary_facets`."""
        return boundary_facets(self.cell_type, self.cells)

    def facet_cells(self) -> IndexArray:
        """The cell and local facet index of each tagged facet.

        Returns
        -------
        ndarray of int64, shape ``(num_facets, 2)``
            ``[cell, local facet]``, local facets numbered as in
            :data:`reference.FACETS`.
        """
        return self._facet_cells

    def _match_facets(self):
        local = self.cell_facets()  # (num_cells, facets_per_cell, corners_per_facet)
        facets_per_cell, corners_per_facet = local.shape[1:]
        rows = np.sort(np.vstack([self.facets, local.reshape(-1, corners_per_facet)]), axis=1)
        ids, count = unique_rows(rows)
        first = np.full(count, -1, dtype=np.int64)  # (count,): a local facet of each class
        first[ids[len(self.facets) :]] = np.arange(local.shape[0] * facets_per_cell)
        match = first[ids[: len(self.facets)]]  # (num_facets,)
        if np.any(match < 0):
            bad = int(np.argmax(match < 0))
            raise ValueError(
                f"facet {bad} {self.facets[bad].tolist()}{_where(self.source)} "
                f"is not a facet of any {self.cell_type} cell"
            )
        return np.column_stack(np.divmod(match, facets_per_cell))

    def _checked_facet_cells(self, facet_cells):
        local = ref.FACETS[self.cell_type]  # (facets_per_cell, corners_per_facet)
        facet_cells = _index_array(facet_cells, "facet_cells", 2)  # (num_facets, 2)
        cell, face = facet_cells.T if facet_cells.size else np.zeros((2, 0), dtype=np.int64)
        ok = facet_cells.shape == (len(self.facets), 2)
        ok = ok and np.all((cell >= 0) & (cell < self.num_cells))
        ok = ok and np.all((face >= 0) & (face < len(local)))
        if not ok:
            raise ValueError(
                f"facet_cells{_where(self.source)} must be (num_facets={len(self.facets)}, 2) "
                f"pairs [cell, local facet] inside the {self.num_cells} cells"
            )
        corners = self.cells[cell[:, None], local[face]]  # (num_facets, corners_per_facet)
        wrong = np.any(np.sort(corners, axis=1) != np.sort(self.facets, axis=1), axis=1)
        if np.any(wrong):
            bad = int(np.argmax(wrong))
            raise ValueError(
                f"facet {bad} {self.facets[bad].tolist()}{_where(self.source)} is not local "
                f"facet {face[bad]} of cell {cell[bad]} (facet_cells)"
            )
        return facet_cells

    def _set_geometry(self, geometry):
        where = _where(self.source)
        geometry = _real_array(geometry, "geometry", 3)  # (num_cells, num_geom_nodes, gdim)
        order = next(
            (
                k
                for k in range(2, 65)
                if ref.num_lattice_nodes(self.cell_type, k) == geometry.shape[1]
            ),
            None,
        )
        if geometry.shape[0] != self.num_cells or geometry.shape[2] != self.gdim or order is None:
            raise ValueError(
                f"geometry{where} has shape {geometry.shape}; expected (num_cells={self.num_cells},"
                f" num_geom_nodes, gdim={self.gdim}) with num_geom_nodes that of a "
                f"{self.cell_type} lattice of order >= 2"
            )
        self.geometry = geometry
        self.geometry_order = order

    def _check_orientation(self):
        """Raise unless det J > 0 at every geometric node (once per affine simplex);
        set :attr:`is_affine` from the same Jacobians.

        Runs over chunks of cells, so its temporaries do not grow with the mesh.
        """
        self.is_affine = self.gdim == self.dim
        if self.gdim != self.dim or self.num_cells == 0:
            return
        k = self.geometry_order
        nodes = ref.geometry_nodes(self.cell_type, k)  # (num_geom_nodes, dim)
        if ref.is_simplex(self.cell_type) and k == 1:
            nodes = nodes[:1]  # affine: the same Jacobian at every node
        dphi = ref.lagrange_derivatives(self.cell_type, k, nodes)  # (dim, num_nodes, G)
        chunk = max(1, CHECK_CHUNK // dphi.shape[2])
        for start in range(0, self.num_cells, chunk):
            stop = min(start + chunk, self.num_cells)
            x = self._corner_major_coordinates(start, stop)  # (G, n, gdim)
            # jac[d]: (num_nodes, n, gdim), one BLAS product per reference direction
            jac = np.stack([np.tensordot(dphi[d], x, axes=(1, 0)) for d in range(self.dim)])
            det = jacobian_det(jac.transpose(1, 2, 3, 0))  # (num_nodes, n)
            low, high = x[0].copy(), x[0].copy()  # (n, gdim) bounding box
            for g in range(1, len(x)):
                np.minimum(low, x[g], out=low)
                np.maximum(high, x[g], out=high)
            extent = high - low  # (n, gdim)
            scale = functools.reduce(np.maximum, extent.T) ** self.dim  # (n,)
            bad = np.any(det <= 1e-12 * scale, axis=0)  # (n,)
            if self.is_affine:  # the same Jacobian at every node, to rounding
                spread = np.abs(jac - jac[:, :1]).max(axis=(0, 1, 3))  # (n,)
                size = np.maximum(np.abs(x).max(axis=(0, 2)), extent.max(axis=1))  # (n,)
                self.is_affine = bool(np.all(spread <= 1e-12 * size))
            if np.any(bad):
                c = int(np.argmax(bad))
                raise ValueError(
                    f"inverted or degenerate {self.cell_type} cell {start + c}"
                    f"{_where(self.source)}: Jacobian determinant {det[:, c].min():.3g} <= 0 "
                    f"(vertices {self.cells[start + c].tolist()})"
                )

    def _corner_major_coordinates(self, start, stop):
        """:meth:`cell_coordinates` of cells ``start:stop`` node-major: ``(G, n, gdim)``."""
        if self.geometry is not None:
            return np.ascontiguousarray(self.geometry[start:stop].transpose(1, 0, 2))
        return self.points[self.cells[start:stop].T]


def _real_array(a, name, ndim):
    a = np.asarray(a)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name} must be real numbers, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float64)


def _index_array(a, name, ndim):
    a = np.asarray(a)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)
    if not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _check_ids(ids, width, num_points, name, where):
    if ids.shape[1] != width:
        raise ValueError(f"{name}{where} has shape {ids.shape}, expected (n, {width})")
    if ids.size and (ids.min() < 0 or ids.max() >= num_points):
        bad = int(np.argmax(np.any((ids < 0) | (ids >= num_points), axis=1)))
        raise ValueError(
            f"{name}[{bad}] = {ids[bad].tolist()}{where} has vertex ids outside [0, {num_points})"
        )
