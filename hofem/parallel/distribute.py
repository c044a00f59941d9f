"""Each rank's part of the mesh: a block of the box built in place, or a file mesh scattered."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import TYPE_CHECKING

import numpy as np

from ..meshes import box_block
from ..meshes import read as read_mesh
from ..meshes.mesh import Mesh
from ..typing import ArrayLike, IndexArray
from .comm import check_all
from .partition import partition

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["LocalMesh", "box_local", "distribute_mesh"]


@dataclass(frozen=True, eq=False)
class LocalMesh:
    """One rank's cells of a distributed mesh.

    Attributes
    ----------
    mesh : hofem.meshes.Mesh
        The rank's cells with local vertex ids; its facets are the rank's
        facets on the boundary of the *global* mesh (with their tags), never
        the faces shared with other ranks.
    vertex_ids : ndarray of int64, shape ``(mesh.num_points,)``
        Global id of each local vertex: equal ids on two ranks are the same
        vertex. This is what the distributed numbering matches.
    num_global_cells : int
    box_cuts : tuple of ndarray or None
        For a block of a box of tensor cells (:func:`box_local`): the cell
        indices where the blocks start along each direction, ``(ranks_d + 1,)``
        each; the numbering is then computed in closed form
        (:func:`~hofem.parallel.box_numbering.box_numbering`).
    box_ranges : (tuple of int, ndarray) or None
        For a run of cells of a box of tensor cells (:func:`box_local` with uneven
        slabs): the box's cells per direction and each rank's first cell in the
        x-fastest order, ``(size + 1,)``; numbered in closed form by
        :func:`~hofem.parallel.box_numbering.range_numbering`.
    """

    mesh: Mesh
    vertex_ids: IndexArray  # (mesh.num_points,)
    num_global_cells: int
    box_cuts: tuple[IndexArray, ...] | None = None
    box_ranges: tuple | None = None


def _lex_boxes(c0, c1, n):
    """The cells ``c0 <= C < c1`` of a grid of ``n`` cells (x fastest) as boxes, in order.

    Returns
    -------
    list of list of (start, stop)
        At most ``2 dim - 1`` boxes, each ``dim`` ranges, whose cells in turn (each x
        fastest) are the range in lexicographic order.
    """
    if len(n) == 1:
        return [[(c0, c1)]] if c1 > c0 else []
    inner = int(np.prod(n[:-1]))
    (k0, r0), (k1, r1) = divmod(c0, inner), divmod(c1, inner)
    if k0 == k1:
        return [[*b, (k0, k0 + 1)] for b in _lex_boxes(r0, r1, n[:-1])]
    boxes = []
    if r0:
        boxes += [[*b, (k0, k0 + 1)] for b in _lex_boxes(r0, inner, n[:-1])]
        k0 += 1
    if k1 > k0:
        boxes.append([(0, m) for m in n[:-1]] + [(k0, k1)])
    if r1:
        boxes += [[*b, (k1, k1 + 1)] for b in _lex_boxes(0, r1, n[:-1])]
    return boxes


def _merge_blocks(pieces):
    """One mesh of :func:`box_block` pieces, their shared vertices joined by global id."""
    meshes = [m for m, _ in pieces]
    if len(meshes) == 1:
        return pieces[0]
    ids, first, inverse = np.unique(
        np.concatenate([v for _, v in pieces]), return_index=True, return_inverse=True
    )
    points = np.concatenate([m.points for m in meshes])[first]
    shift = np.cumsum([0] + [m.num_points for m in meshes])  # local vertex id offsets
    cells = np.concatenate([inverse[m.cells + o] for m, o in zip(meshes, shift, strict=False)])
    facets = np.concatenate([inverse[m.facets + o] for m, o in zip(meshes, shift, strict=False)])
    geometry = None if meshes[0].geometry is None else np.concatenate([m.geometry for m in meshes])
    m0 = meshes[0]
    mesh = Mesh(
        points,
        m0.cell_type,
        cells,
        facets,
        np.concatenate([m.facet_tags for m in meshes]),
        m0.tag_names,
        geometry,
    )
    return mesh, ids


def balanced_slabs(num_cells: int, size: int) -> np.ndarray:
    """First cell of each rank's part when ``num_cells`` cells are cut into ``size`` runs.

    Returns
    -------
    ndarray of int64, shape ``(size + 1,)``
        ``r * num_cells // size``: the parts differ by at most one cell.
    """
    return np.arange(size + 1, dtype=np.int64) * num_cells // size


def _block_grid(n, size):
    """Ranks per direction ``(dim,)``, product ``size``, fitting ``n``: the most cubic blocks."""
    dim = len(n)
    best, best_cost = None, None
    for dims in itertools.product(range(1, size + 1), repeat=dim):
        if np.prod(dims) != size or any(d > m for d, m in zip(dims, n, strict=True)):
            continue
        block = [-(-m // d) for d, m in zip(dims, n, strict=True)]  # largest block extent
        cost = (np.prod(block), sum(np.prod(block) / b for b in block))  # volume, then surface
        if best_cost is None or cost < best_cost:
            best, best_cost = dims, cost
    return best


def _uneven_slabs(n, dims):
    """The block grid is slabs along the last axis whose layers do not divide evenly."""
    return all(d == 1 for d in dims[:-1]) and dims[-1] > 1 and n[-1] % dims[-1] != 0


def box_local(
    comm: MPI.Comm,
    n: int | Sequence[int],
    dim: int = 3,
    simplex: bool = False,
    order: int = 1,
    distort: float = 0.0,
    bounds: ArrayLike | None = None,
) -> LocalMesh:
    """This rank's block of :func:`hofem.meshes.box`, built without the rest of the box.

    The grid of ``n`` cells per direction is cut into ``prod(dims) = comm.size``
    blocks (the most cube-like split whose block counts fit ``n``); rank ``r``
    takes block ``r`` (x fastest). When that split is slabs along the last axis
    whose layers do not divide evenly, rank ``r`` takes the ``r``-th of
    ``comm.size`` runs of cells in x-fastest order instead (:func:`balanced_slabs`:
    the runs differ by at most one cell). Arguments are those of
    :func:`hofem.meshes.box`.

    Returns
    -------
    LocalMesh

    Raises
    ------
    hofem.parallel.ParallelError
        On every rank: bad box arguments, or no split of the grid into
        ``comm.size`` non-empty blocks (more ranks than cells per direction
        allow); the message says what would fit.
    """
    error, result = None, None
    try:
        n_d = (n,) * dim if isinstance(n, (int, np.integer)) else tuple(n)
        if len(n_d) != dim or any(not isinstance(m, (int, np.integer)) or m < 1 for m in n_d):
            raise ValueError(f"n must be a positive int or {dim} positive ints, got {n!r}")
        dims = _block_grid(n_d, comm.size)
        if dims is None:
            raise ValueError(
                f"cannot split a box of {'x'.join(map(str, n_d))} cells into {comm.size} "
                f"non-empty blocks (one per rank): use fewer ranks or more elements"
            )
        tensor = not simplex or dim == 1
        num_cells = int(np.prod(n_d)) * (1 if tensor else math.factorial(dim))
        if _uneven_slabs(n_d, dims):
            # whole layers would leave the ranks up to a layer apart: cut the cells
            # (x fastest, the split axis slowest) into runs that differ by one cell
            starts = balanced_slabs(int(np.prod(n_d)), comm.size)
            boxes = _lex_boxes(int(starts[comm.rank]), int(starts[comm.rank + 1]), n_d)
            pieces = [box_block(n_d, b, dim, simplex, order, distort, bounds) for b in boxes]
            mesh, vertex_ids = _merge_blocks(pieces)
            ranges = (n_d, starts) if tensor else None
            result = LocalMesh(mesh, vertex_ids, num_cells, None, ranges)
        else:
            coords = np.unravel_index(comm.rank, dims[::-1])[::-1]  # x fastest
            cuts = tuple(np.arange(d + 1) * m // d for m, d in zip(n_d, dims, strict=True))
            block = [(cut[c], cut[c + 1]) for cut, c in zip(cuts, coords, strict=True)]
            mesh, vertex_ids = box_block(n_d, block, dim, simplex, order, distort, bounds)
            result = LocalMesh(mesh, vertex_ids, num_cells, cuts if tensor else None)
    except (ValueError, TypeError) as exc:
        error = exc
    check_all(comm, error)
    return result


def _piece(mesh, cells):
    """The sub-mesh of ``mesh`` on ``cells`` (sorted global ids) as a picklable dict."""
    vertices, local_cells = np.unique(mesh.cells[cells], return_inverse=True)
    facet_cells = mesh.facet_cells()[:, 0]  # (num_facets,)
    keep = np.isin(facet_cells, cells)
    facets = np.searchsorted(vertices, mesh.facets[keep])
    return {
        "points": mesh.points[vertices],
        "cell_type": mesh.cell_type,
        "cells": local_cells.reshape(len(cells), -1),
        "facets": facets,
        "facet_tags": mesh.facet_tags[keep],
        "tag_names": mesh.tag_names,
        "geometry": None if mesh.geometry is None else mesh.geometry[cells],
        "source": mesh.source,
        "vertex_ids": vertices,
        "num_global_cells": mesh.num_cells,
    }


def distribute_mesh(
    comm: MPI.Comm, mesh: Mesh | str | PathLike | None, method: str = "rcb"
) -> LocalMesh:
    """Partition a mesh on rank 0 and send each rank its cells.

    Only rank 0 reads and holds the whole mesh; the others receive their part.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
    mesh : hofem.meshes.Mesh or str or pathlib.Path
        On rank 0: the mesh or a file to read (:func:`hofem.meshes.read`).
        Ignored on the other ranks.
    method : {"rcb", "metis"}
        See :func:`hofem.parallel.partition.partition`.

    Returns
    -------
    LocalMesh

    Raises
    ------
    hofem.parallel.ParallelError
        On every rank: unreadable file, bad mesh, more ranks than cells, a
        missing partitioner, an empty part.
    """
    error, pieces = None, None
    if comm.rank == 0:
        try:
            if not isinstance(mesh, Mesh):
                mesh = read_mesh(mesh)
            part = partition(mesh, comm.size, method)
            pieces = [_piece(mesh, np.flatnonzero(part == r)) for r in range(comm.size)]
        except (ValueError, TypeError, OSError, ImportError) as exc:
            error = exc
    check_all(comm, error)
    piece = comm.scatter(pieces, root=0)
    local = Mesh(
        piece["points"],
        piece["cell_type"],
        piece["cells"],
        piece["facets"],
        piece["facet_tags"],
        piece["tag_names"],
        piece["geometry"],
        source=piece["source"],
    )
    return LocalMesh(local, piece["vertex_ids"], piece["num_global_cells"])
