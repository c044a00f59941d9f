"""Element partitions: recursive coordinate bisection, METIS on the dual graph, balance."""

import numpy as np

from ..meshes import reference as ref
from ..meshes.mesh import Mesh, unique_rows
from ..typing import ArrayLike, IndexArray

__all__ = ["balance", "dual_graph", "partition", "rcb"]

METHODS = ("rcb", "metis")


def rcb(points: ArrayLike, num_parts: int) -> IndexArray:
    """Recursive coordinate bisection of points into ``num_parts`` parts.

    Each step splits a set along its longest extent at the weighted median,
    in proportion to the parts on each side, so any ``num_parts`` (not only
    powers of two) gives parts whose sizes differ by at most one.

    Parameters
    ----------
    points : ndarray of float, shape ``(n, dim)``
        E.g. cell centroids.
    num_parts : int
        ``1 <= num_parts <= n``.

    Returns
    -------
    ndarray of int32, shape ``(n,)``
        Part of each point, ``0..num_parts - 1``.

    Raises
    ------
    ValueError
        ``num_parts`` < 1 or larger than the number of points.
    """
    points = np.asarray(points, dtype=np.float64)
    n = len(points)
    if not 1 <= num_parts <= n:
        raise ValueError(f"cannot split {n} cells into {num_parts} non-empty parts")
    part = np.empty(n, dtype=np.int32)  # (n,)
    stack = [(np.arange(n), 0, num_parts)]
    while stack:
        idx, first, count = stack.pop()
        if count == 1:
            part[idx] = first
            continue
        x = points[idx]  # (m, dim)
        axis = int(np.argmax(np.ptp(x, axis=0)))
        left = count // 2
        cut = len(idx) * left // count  # elements of the left parts, proportional
        order = np.argsort(x[:, axis], kind="stable")  # (m,)
        stack.append((idx[order[:cut]], first, left))
        stack.append((idx[order[cut:]], first + left, count - left))
    return part


def dual_graph(mesh: Mesh) -> tuple[IndexArray, IndexArray]:
    """Cells adjacent through a facet, as CSR arrays (METIS's ``xadj``/``adjncy``).

    Parameters
    ----------
    mesh : hofem.meshes.Mesh

    Returns
    -------
    xadj : ndarray of int64, shape ``(num_cells + 1,)``
    adjncy : ndarray of int64, shape ``(xadj[-1],)``
        Neighbours of cell ``c`` are ``adjncy[xadj[c]:xadj[c + 1]]``.
    """
    local = ref.FACETS[mesh.cell_type]  # (facets_per_cell, corners_per_facet)
    facets = np.sort(mesh.cells[:, local], axis=2).reshape(-1, local.shape[1])
    ids, _ = unique_rows(facets)  # (num_cells * facets_per_cell,)
    cell = np.repeat(np.arange(mesh.num_cells), len(local))  # (num_cells * fpc,)
    order = np.argsort(ids, kind="stable")
    sid, scell = ids[order], cell[order]
    pair = np.flatnonzero(sid[1:] == sid[:-1])  # interior facets: two consecutive entries
    a, b = scell[pair], scell[pair + 1]
    rows = np.concatenate([a, b])
    cols = np.concatenate([b, a])
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    xadj = np.zeros(mesh.num_cells + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=mesh.num_cells), out=xadj[1:])
    return xadj, cols.astype(np.int64)


def partition(mesh: Mesh, num_parts: int, method: str = "rcb") -> IndexArray:
    """Partition a mesh's cells.

    Parameters
    ----------
    mesh : hofem.meshes.Mesh
    num_parts : int
    method : {"rcb", "metis"}
        ``"rcb"``: recursive coordinate bisection of the cell centroids (no
        extra dependency). ``"metis"``: METIS k-way on the dual graph through
        pymetis (``pip install hofem[mpi]`` or ``pip install pymetis``);
        fewer cut facets on unstructured meshes.

    Returns
    -------
    ndarray of int32, shape ``(num_cells,)``

    Raises
    ------
    ValueError
        Unknown method; more parts than cells; a part left empty.
    ImportError
        ``method="metis"`` without pymetis.
    """
    if method not in METHODS:
        raise ValueError(f"partition method must be one of {METHODS}, got {method!r}")
    if not 1 <= num_parts <= mesh.num_cells:
        raise ValueError(
            f"cannot split a mesh of {mesh.num_cells} cells into {num_parts} non-empty parts: "
            "use fewer ranks or a finer mesh"
        )
    if method == "rcb" or num_parts == 1:
        return rcb(mesh.cell_coordinates().mean(axis=1), num_parts)
    try:
        import pymetis
    except ImportError as err:
        raise ImportError(
            "partition method 'metis' needs pymetis: pip install pymetis (or use 'rcb')"
        ) from err
    xadj, adjncy = dual_graph(mesh)
    _, part = pymetis.part_graph(num_parts, adjacency=pymetis.CSRAdjacency(xadj, adjncy))
    part = np.asarray(part, dtype=np.int32)
    empty = np.setdiff1d(np.arange(num_parts), part)
    if empty.size:
        raise ValueError(
            f"METIS left part {int(empty[0])} of {num_parts} empty on {mesh.num_cells} cells; "
            "use fewer ranks or method 'rcb'"
        )
    return part


def balance(counts: ArrayLike) -> float:
    """Load balance of per-part counts: ``max / mean`` (1.0 is perfect).

    Parameters
    ----------
    counts : sequence of int
    """
    counts = np.asarray(counts, dtype=np.float64)
    return float(counts.max() / counts.mean()) if counts.size and counts.mean() > 0 else 1.0
