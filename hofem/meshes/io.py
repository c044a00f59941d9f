"""Mesh files through meshio: Gmsh .msh (2.2, 4.1), VTK .vtk and .vtu.

meshio keeps cell nodes in VTK ordering (its Gmsh reader and writer convert).
Each VTK node is the centroid of some of the cell's VTK corners; matching
those reference positions to hofem's corner and lattice nodes gives the
permutations used here, for linear and quadratic cells alike.
"""

import contextlib
import io
from os import PathLike
from pathlib import Path

import numpy as np

from ..typing import ArrayLike
from . import reference as ref
from .mesh import Mesh
from .numbering import h1_numbering


class MeshFileError(ValueError):
    """A file that is not a mesh hofem can read; the message names the file and why."""


# VTK corner m is hofem corner _VTK_CORNERS[cell_type][m]
_VTK_CORNERS = {
    "vertex": [0],
    "line": [0, 1],
    "triangle": [0, 1, 2],
    "quad": [0, 1, 3, 2],
    "tetra": [0, 1, 2, 3],
    "hexahedron": [0, 1, 3, 2, 4, 5, 7, 6],
}

_HEX_EDGES = ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4))
_HEX_EDGES += ((0, 4), (1, 5), (2, 6), (3, 7))
_HEX_FACES = ((0, 4, 7, 3), (1, 2, 6, 5), (0, 1, 5, 4), (3, 2, 6, 7), (0, 1, 2, 3), (4, 5, 6, 7))

# meshio (VTK) cell type -> (hofem cell type, order, VTK corners whose centroid is each node)
_MESHIO_TYPES = {
    "line": ("line", 1, None),
    "line3": ("line", 2, ((0,), (1,), (0, 1))),
    "triangle": ("triangle", 1, None),
    "triangle6": ("triangle", 2, ((0,), (1,), (2,), (0, 1), (1, 2), (2, 0))),
    "quad": ("quad", 1, None),
    "quad9": (
        "quad",
        2,
        ((0,), (1,), (2,), (3,), (0, 1), (1, 2), (2, 3), (3, 0), (0, 1, 2, 3)),
    ),
    "tetra": ("tetra", 1, None),
    "tetra10": (
        "tetra",
        2,
        (*((m,) for m in range(4)), (0, 1), (1, 2), (2, 0), (0, 3), (1, 3), (2, 3)),
    ),
    "hexahedron": ("hexahedron", 1, None),
    "hexahedron27": (
        "hexahedron",
        2,
        tuple((m,) for m in range(8)) + _HEX_EDGES + _HEX_FACES + (tuple(range(8)),),
    ),
}
# lower-dimensional cells read as facets (their corners only)
_FACET_TYPES = {
    "vertex": "vertex",
    "line": "line",
    "line3": "line",
    "triangle": "triangle",
    "triangle6": "triangle",
    "quad": "quad",
    "quad8": "quad",
    "quad9": "quad",
}
_FORMATS = {".msh": "gmsh", ".vtk": "vtk", ".vtu": "vtu"}
_SUPPORTED = ", ".join(_MESHIO_TYPES)


def _meshio():
    try:
        import meshio
    except ImportError as err:
        raise ImportError(
            "reading and writing mesh files needs meshio: pip install hofem[mesh]"
        ) from err
    return meshio


def _hofem_from_vtk(meshio_type):
    """Permutation ``perm`` with ``hofem_nodes = vtk_nodes[:, perm]``: shape ``(num_nodes,)``."""
    if meshio_type in _VTK_CORNERS:
        return np.argsort(_VTK_CORNERS[meshio_type])
    cell_type, order, groups = _MESHIO_TYPES[meshio_type]
    corners = ref.corner_coordinates(cell_type)[_VTK_CORNERS[cell_type]]  # VTK corner coords
    vtk_nodes = np.array([corners[list(g)].mean(axis=0) for g in groups])  # (num_nodes, dim)
    hofem_nodes = ref.geometry_nodes(cell_type, order)  # (num_nodes, dim)
    dist = np.abs(hofem_nodes[:, None, :] - vtk_nodes[None, :, :]).sum(axis=2)
    return np.argmin(dist, axis=1)


def _vtk_type(cell_type, order):
    return next(t for t, (c, k, _) in _MESHIO_TYPES.items() if c == cell_type and k == order)


def _meshio_read(meshio, path):
    """``meshio.read`` in each format the suffix names; a ValueError gives every reason.

    meshio prints why a format failed and then exits; the output is kept for
    the message instead.
    """
    suffix = path.suffix.lower()
    formats = (
        [_FORMATS[suffix]] if suffix in _FORMATS else meshio.extension_to_filetypes.get(suffix)
    )
    if not formats:
        raise MeshFileError(
            f"{path} is not a mesh file: no meshio format has the suffix {suffix or '(none)'!r} "
            "(Gmsh .msh, VTK .vtu and .vtk, or another meshio format by its suffix)"
        )
    reasons = []
    for fmt in formats:
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
                return meshio.read(path, file_format=fmt)
        except SystemExit:  # meshio printed its reader's reason (if any), then a summary
            printed = [line for line in said.getvalue().splitlines() if line.strip()][:-1]
            reasons.append(f"{fmt}: {printed[0] if printed else 'invalid, meshio gives no detail'}")
        except Exception as err:
            reasons.append(f"{fmt}: {type(err).__name__}: {err}")
    raise MeshFileError(
        f"{path} is not a mesh file meshio can read ({'; '.join(reasons)}); "
        f"formats tried: {', '.join(formats)}"
    )


def read(path: str | PathLike) -> Mesh:
    """Read a mesh file through meshio.

    The highest-dimensional cells (one type) become the cells; cells one
    dimension lower that carry ``gmsh:physical`` tags become the tagged
    facets, and ``tag_names`` come from the physical names of that dimension.
    Without tagged facets, the boundary facets are computed and tagged 1
    ("boundary"). Quadratic cells give ``geometry`` of order 2; ``points``
    keeps the vertices only. Coordinates beyond the cells' dimension that are
    all zero are dropped (``gdim = dim``).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    Mesh

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    IsADirectoryError
        ``path`` is a directory.
    PermissionError
        ``path`` cannot be read.
    MeshFileError
        A ``ValueError``: an empty file, not a mesh file (meshio's reason and the
        formats tried), mixed or unsupported cell types
        (supported: line, line3, triangle, triangle6, quad, quad9, tetra,
        tetra10, hexahedron, hexahedron27), or invalid cells (e.g. inverted);
        the message names the file.
    ImportError
        meshio is not installed.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a mesh file")
    if not path.is_file():
        raise FileNotFoundError(f"mesh file not found: {path}")
    try:
        with open(path, "rb") as f:
            empty = not f.read(1)
    except OSError as err:
        raise type(err)(f"cannot read the mesh file {path}: {err.strerror or err}") from None
    if empty:
        raise MeshFileError(f"{path} is empty, not a mesh file")
    m = _meshio_read(_meshio(), path)

    dim = max((b.dim for b in m.cells), default=-1)
    volume = [b for b in m.cells if b.dim == dim]
    types = sorted({b.type for b in volume})
    if len(types) != 1:
        found = ", ".join(types) if types else "no cells"
        raise MeshFileError(
            f"{path}: expected one cell type of dimension {dim}, found {found}; "
            f"supported cell types: {_SUPPORTED}"
        )
    if types[0] not in _MESHIO_TYPES:
        raise MeshFileError(
            f"{path}: unsupported cell type {types[0]!r}; supported cell types: {_SUPPORTED}"
        )
    cell_type, order, _ = _MESHIO_TYPES[types[0]]
    nodes = np.vstack([b.data for b in volume])[:, _hofem_from_vtk(types[0])]  # (C, nodes)

    raw = np.asarray(m.points, dtype=np.float64)  # (num_file_points, 2 or 3)
    nonzero = np.flatnonzero(np.any(raw != 0.0, axis=0))  # (columns,)
    gdim = max(dim, int(nonzero[-1]) + 1 if nonzero.size else 0)
    corner_ids = nodes[:, ref.corner_nodes(cell_type, order)]  # (num_cells, num_corners)
    vertices, cells = np.unique(corner_ids, return_inverse=True)
    cells = cells.reshape(corner_ids.shape)  # (num_cells, num_corners)
    vertex_of = np.full(len(raw), -1, dtype=np.int64)  # (num_file_points,)
    vertex_of[vertices] = np.arange(len(vertices))
    geometry = raw[nodes, :gdim] if order > 1 else None  # (num_cells, nodes, gdim)

    facets, tags = _read_facets(m, dim, cell_type, path)
    tag_names = None
    if facets is not None:
        facets = vertex_of[facets]  # (num_facets, corners_per_facet)
        if np.any(facets < 0):
            raise MeshFileError(f"{path}: a tagged facet has a node that is no cell corner")
        tag_names = {
            name: int(value[0])
            for name, value in m.field_data.items()
            if np.shape(value) == (2,) and int(value[1]) == dim - 1
        }
    points = raw[vertices, :gdim]  # (num_vertices, gdim)
    try:
        return Mesh(points, cell_type, cells, facets, tags, tag_names, geometry, source=str(path))
    except ValueError as err:  # invalid cells (e.g. inverted): say which file
        raise MeshFileError(f"{path}: {err}") from None


def _read_facets(m, dim, cell_type, path):
    """Tagged facets (file point ids, hofem corner order) and tags, or (None, None)."""
    physical = m.cell_data.get("gmsh:physical")
    if physical is None:
        return None, None
    facets, tags = [], []
    for block, tag in zip(m.cells, physical, strict=True):
        if block.dim != dim - 1:
            continue
        linear = _FACET_TYPES.get(block.type)
        if linear != ref.FACET_TYPE[cell_type]:
            raise MeshFileError(
                f"{path}: facet cells of type {block.type!r} do not bound {cell_type} cells"
            )
        num_corners = len(_VTK_CORNERS[linear])
        facets.append(block.data[:, :num_corners][:, _hofem_from_vtk(linear)])
        tags.append(np.asarray(tag).reshape(-1))
    if not facets:
        return None, None
    return np.vstack(facets), np.concatenate(tags).astype(np.int32)


def write(
    path: str | PathLike,
    mesh: Mesh,
    point_data: dict[str, ArrayLike] | None = None,  # each (num_points, ...)
    *,
    file_format: str | None = None,
    binary: bool = True,
) -> None:
    """Write a mesh through meshio.

    Cells are written linear, or quadratic when ``mesh.geometry_order == 2``
    (nodes: the vertices first, in vertex order, then the other order-2
    lattice nodes). Facets are written as linear cells, one block per tag,
    with cell data ``gmsh:physical`` (the volume cells get physical tag 1 of
    their own dimension) and, for Gmsh, the tag names as physical names.

    Parameters
    ----------
    path : str or os.PathLike
    mesh : Mesh
    point_data : dict[str, array_like], optional
        Vertex values, each of shape ``(num_points, ...)``; with quadratic
        geometry they are interpolated linearly to the other nodes.
    file_format : str, optional
        "gmsh" (Gmsh 4.1), "gmsh22", "vtk" or "vtu"; default from the suffix
        (.msh -> Gmsh 4.1, .vtk, .vtu).
    binary : bool
        Binary (VTU: zlib-compressed) or ASCII. meshio's VTU ASCII keeps 12
        significant digits; the other formats are exact.

    Raises
    ------
    ValueError
        Unknown format, geometry order above 2, or ``point_data`` of a wrong
        length.
    ImportError
        meshio is not installed.
    """
    path = Path(path)
    fmt = file_format or _FORMATS.get(path.suffix.lower())
    if fmt not in ("gmsh", "gmsh22", "vtk", "vtu"):
        raise ValueError(
            f"cannot write {path}: unknown format {fmt or path.suffix!r}; "
            "use .msh, .vtk, .vtu or file_format='gmsh', 'gmsh22', 'vtk', 'vtu'"
        )
    if mesh.geometry_order > 2:
        raise ValueError(
            f"cannot write {path}: geometry of order {mesh.geometry_order}; "
            "meshio writes linear and quadratic cells only"
        )
    meshio = _meshio()
    order = mesh.geometry_order
    node_of, num_file_nodes = _file_nodes(mesh)  # (num_cells, nodes), int
    coords = np.zeros((num_file_nodes, 3))  # meshio's Gmsh and VTK writers want 3-D points
    coords[: mesh.num_points, : mesh.gdim] = mesh.points
    coords[node_of, : mesh.gdim] = mesh.cell_coordinates()

    data = {}
    weights = ref.corner_weights(mesh.cell_type, order)  # (nodes, num_corners)
    shape = weights / weights.sum(axis=1, keepdims=True)  # linear interpolation weights
    for name, values in (point_data or {}).items():
        values = np.asarray(values)
        if values.shape[:1] != (mesh.num_points,):
            raise ValueError(
                f"point_data[{name!r}] has shape {values.shape}, expected ({mesh.num_points}, ...)"
            )
        out = np.zeros((num_file_nodes, *values.shape[1:]), dtype=values.dtype)
        out[: mesh.num_points] = values
        out[node_of] = np.einsum("nv,cv...->cn...", shape, values[mesh.cells])
        # meshio's ASCII Gmsh writer prints repr() of each value: give it Python floats
        data[name] = out.astype(object) if fmt.startswith("gmsh") and not binary else out

    vtk_cells = node_of[:, np.argsort(_hofem_from_vtk(_vtk_type(mesh.cell_type, order)))]
    blocks = [(_vtk_type(mesh.cell_type, order), vtk_cells)]
    physical = [np.ones(mesh.num_cells, dtype=np.int32)]
    facet_type = ref.FACET_TYPE[mesh.cell_type]
    cell, local = mesh.facet_cells().T  # (num_facets,), (num_facets,)
    facets = mesh.cells[cell[:, None], ref.FACETS[mesh.cell_type][local]]  # (F, corners)
    facets = facets[:, np.argsort(_hofem_from_vtk(facet_type))]  # VTK corner order
    for tag in np.unique(mesh.facet_tags):
        selected = mesh.facet_tags == tag
        blocks.append((facet_type, facets[selected]))
        physical.append(mesh.facet_tags[selected])
    cell_data = {"gmsh:physical": physical}
    field_data = {}
    if fmt.startswith("gmsh"):
        cell_data["gmsh:geometrical"] = physical
        field_data = {name: np.array([tag, mesh.dim - 1]) for name, tag in mesh.tag_names.items()}
        if fmt == "gmsh":
            data["gmsh:dim_tags"] = _gmsh_dim_tags(num_file_nodes, mesh, facets, path)
    out = meshio.Mesh(coords, blocks, point_data=data, cell_data=cell_data, field_data=field_data)
    meshio.write(path, out, file_format=fmt, binary=binary)


def _file_nodes(mesh):
    """File node id of each cell's geometric nodes, vertices first.

    Returns
    -------
    node_of : ndarray of int64, shape ``(num_cells, num_geom_nodes)``
    num_file_nodes : int
    """
    if mesh.geometry_order == 1:
        return mesh.cells, mesh.num_points
    numbering = h1_numbering(mesh, mesh.geometry_order)
    file_id = np.full(numbering.num_nodes, -1, dtype=np.int64)  # (num_nodes,)
    file_id[numbering.offsets[:, ref.corner_nodes(mesh.cell_type, numbering.order)]] = mesh.cells
    others = file_id < 0  # (num_nodes,)
    file_id[others] = mesh.num_points + np.arange(np.count_nonzero(others))
    return file_id[numbering.offsets], mesh.num_points + int(np.count_nonzero(others))


def _gmsh_dim_tags(num_nodes, mesh, facets, path):
    """Gmsh 4.1 node entities ``(entity dim, entity tag)``: shape ``(num_nodes, 2)``.

    Entity 0 is the volume ``(dim, 1)``, entity ``e`` the facets of the
    ``e``-th tag in ascending order, ``(dim - 1, tag)``; ``facets`` holds the
    vertex ids of ``mesh.facets``. meshio writes an entity (and its
    physical tag) only if some node belongs to it, so every entity gets at
    least one node: its own facets' nodes, stolen where needed from an entity
    with more than one.
    """
    tags = np.unique(mesh.facet_tags)  # (num_tags,)
    own_nodes = [np.empty(0, dtype=np.int64)] + [facets[mesh.facet_tags == t].ravel() for t in tags]
    entity = np.zeros(num_nodes, dtype=np.int64)  # (num_nodes,)
    for e, nodes in enumerate(own_nodes):
        entity[nodes] = e
    count = np.bincount(entity, minlength=len(own_nodes))  # (num_entities,)
    for e in np.flatnonzero(count == 0):
        own = own_nodes[e]
        candidates = np.concatenate([own, np.arange(num_nodes)])
        donor = count[entity[candidates]] > 1
        if not donor.any():
            raise ValueError(
                f"cannot write {path} as Gmsh 4.1: fewer nodes than entities "
                "(one per facet tag plus the volume); use file_format='gmsh22'"
            )
        node = candidates[np.argmax(donor)]
        count[entity[node]] -= 1
        entity[node] = e
        count[e] = 1
    table = np.array([(mesh.dim, 1)] + [(mesh.dim - 1, t) for t in tags], dtype=np.int64)
    return table[entity]
