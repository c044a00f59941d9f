"""Meshes: box generator, validation, meshio I/O and continuous H1 numbering."""

import itertools
import math
import sys

import numpy as np
import pytest

from hofem.jacobian import det as jacobian_det
from hofem.meshes import Mesh, boundary_facets, box, data_path, h1_numbering, read, write
from hofem.meshes import reference as ref
from hofem.meshes.box import box_block
from hofem.meshes.make_samples import lshape_hex
from hofem.meshes.mesh import unique_rows

meshio = pytest.importorskip("meshio")

CASES = [(1, False), (2, False), (2, True), (3, False), (3, True)]  # (dim, simplex)


def equispaced_positions(mesh, order):
    """Physical positions of each cell's equispaced order-p lattice through its
    affine/multilinear corner map: shape (num_cells, num_nodes, gdim)."""
    nodes = ref.lattice(mesh.cell_type, order) / order  # (num_nodes, dim) in [0, 1]
    if not ref.is_simplex(mesh.cell_type):
        nodes = 2.0 * nodes - 1.0
    shape = ref.linear_shape_functions(mesh.cell_type, nodes)  # (num_nodes, num_corners)
    return np.einsum("nv,cvi->cni", shape, mesh.points[mesh.cells])


def position_classes(positions):
    """Equal positions (to 1e-9) get equal ids: (num_cells, num_nodes) int64, count."""
    keys = np.round(positions.reshape(-1, positions.shape[-1]) * 1e9).astype(np.int64)
    ids, count = unique_rows(keys)
    return ids.reshape(positions.shape[:2]), count


def assert_bijection(a, b):
    """Integer labelings a, b of the same items induce the same partition."""
    pairs = np.unique(np.column_stack([a.ravel(), b.ravel()]), axis=0)
    assert len(pairs) == len(np.unique(a)) == len(np.unique(b))


def cell_rotations(cell_type):
    """Orientation-preserving local corner permutations: shape (num_rotations, num_corners)."""
    dim = ref.CELL_DIM[cell_type]
    if ref.is_simplex(cell_type):
        perms = [
            p
            for p in itertools.permutations(range(dim + 1))
            if np.linalg.det(np.eye(dim + 1)[list(p)]) > 0
        ]
        return np.array(perms)
    corners = ref.corner_coordinates(cell_type)  # (num_corners, dim)
    rotations = []
    for perm in itertools.permutations(range(dim)):
        for signs in itertools.product([-1, 1], repeat=dim):
            r = np.eye(dim)[list(perm)] * np.array(signs)[:, None]
            if np.linalg.det(r) > 0:
                moved = corners @ r.T  # corner i of the new cell sits at old corner moved[i]
                dist = np.abs(moved[:, None, :] - corners[None, :, :]).sum(axis=2)
                rotations.append(np.argmin(dist, axis=1))
    return np.array(rotations)


# ---------------------------------------------------------------- box


@pytest.mark.parametrize(("dim", "simplex"), CASES)
def test_box_counts(dim, simplex):
    n = (2, 3, 4)[:dim]
    mesh = box(n, dim=dim, simplex=simplex)
    split = math.factorial(dim) if simplex else 1
    assert (
        mesh.cell_type
        == {
            (1, False): "line",
            (2, False): "quad",
            (2, True): "triangle",
            (3, False): "hexahedron",
            (3, True): "tetra",
        }[dim, simplex]
    )
    assert (mesh.dim, mesh.gdim, mesh.geometry_order) == (dim, dim, 1)
    assert mesh.num_points == math.prod(m + 1 for m in n)
    assert mesh.num_cells == math.prod(n) * split
    assert mesh.cells.dtype == np.int64 and mesh.facet_tags.dtype == np.int32
    facet_split = math.factorial(dim - 1) if simplex else 1
    for d in range(dim):
        across = math.prod(n) // n[d] * facet_split
        assert np.count_nonzero(mesh.facet_tags == 2 * d + 1) == across
        assert np.count_nonzero(mesh.facet_tags == 2 * d + 2) == across
    names = ["left", "right", "bottom", "top", "front", "back"][: 2 * dim]
    assert mesh.tag_names == {name: t for t, name in enumerate(names, start=1)}
    # the tagged facets are exactly the boundary facets
    assert {tuple(f) for f in np.sort(mesh.facets, axis=1)} == {
        tuple(f) for f in np.sort(mesh.boundary_facets(), axis=1)
    }


@pytest.mark.parametrize(("dim", "simplex"), CASES)
def test_box_bounds_and_tags(dim, simplex):
    bounds = [(-1.0, 2.0), (0.5, 0.75), (3.0, 4.0)][:dim]
    mesh = box(3, dim=dim, simplex=simplex, bounds=bounds)
    np.testing.assert_array_equal(mesh.points.min(axis=0), [b[0] for b in bounds])
    np.testing.assert_array_equal(mesh.points.max(axis=0), [b[1] for b in bounds])
    x = mesh.points[mesh.facets]  # (num_facets, corners, dim)
    for d in range(dim):
        assert np.all(x[mesh.facet_tags == 2 * d + 1][:, :, d] == bounds[d][0])
        assert np.all(x[mesh.facet_tags == 2 * d + 2][:, :, d] == bounds[d][1])


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("distort", [0.0, 0.15])
def test_simplices_positively_oriented(dim, distort):
    mesh = box(3, dim=dim, simplex=True, distort=distort)
    x = mesh.points[mesh.cells]  # (num_cells, dim + 1, dim)
    det = np.linalg.det(x[:, 1:] - x[:, :1])
    assert np.all(det > 0)
    if distort == 0.0:  # the Kuhn simplices fill each cube cell
        np.testing.assert_allclose(det.sum() / math.factorial(dim), 1.0)


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("order", [1, 2, 3])
def test_distort_fixes_boundary_moves_interior(dim, simplex, order):
    plain = box(4, dim=dim, simplex=simplex, order=order)
    curved = box(4, dim=dim, simplex=simplex, order=order, distort=0.15)
    x0, x1 = plain.cell_coordinates(), curved.cell_coordinates()  # (cells, nodes, dim)
    assert x0.shape == (plain.num_cells, ref.num_lattice_nodes(plain.cell_type, order), dim)
    on_boundary = np.any((np.abs(x0) < 1e-12) | (np.abs(x0 - 1) < 1e-12), axis=2)
    np.testing.assert_allclose(x1[on_boundary], x0[on_boundary], rtol=0, atol=1e-15)
    assert np.abs(x1[~on_boundary] - x0[~on_boundary]).min(axis=1).max() > 1e-3
    # the geometric corner nodes are the vertices
    corners = ref.corner_nodes(curved.cell_type, order)
    np.testing.assert_allclose(x1[:, corners], curved.points[curved.cells], atol=1e-15)
    if order > 1:  # straight cells: the geometric nodes are the affinely mapped reference nodes
        shape = ref.linear_shape_functions(
            plain.cell_type, ref.geometry_nodes(plain.cell_type, order)
        )
        np.testing.assert_allclose(x0, np.einsum("nv,cvi->cni", shape, plain.points[plain.cells]))


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("block", [None, [(1, 3), (0, 2), (2, 4)]])
def test_box_facets_match_the_generic_search(dim, simplex, block):
    """The box's facets found from the grid are those of the search over all cell facets."""
    n = (3, 2, 4)[:dim]
    mesh, _ = box_block(n, None if block is None else block[:dim], dim, simplex)
    searched = Mesh(mesh.points, mesh.cell_type, mesh.cells, mesh.facets, mesh.facet_tags)
    np.testing.assert_array_equal(mesh.facet_cells(), searched.facet_cells())
    if block is None:  # the whole box: the facets in exactly one cell, in that order
        np.testing.assert_array_equal(mesh.facets, boundary_facets(mesh.cell_type, mesh.cells))


def test_mesh_checks_given_facet_cells():
    mesh = box(2, dim=3, simplex=True)
    args = (mesh.points, mesh.cell_type, mesh.cells, mesh.facets, mesh.facet_tags)
    wrong = mesh.facet_cells().copy()
    wrong[3, 1] = (wrong[3, 1] + 1) % 4
    with pytest.raises(ValueError, match=r"facet 3 .* is not local facet"):
        Mesh(*args, facet_cells=wrong)
    with pytest.raises(ValueError, match="facet_cells"):
        Mesh(*args, facet_cells=mesh.facet_cells()[1:])
    with pytest.raises(ValueError, match="facet_cells"):
        Mesh(*args, facet_cells=mesh.facet_cells() + np.array([mesh.num_cells, 0]))


def test_box_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dim"):
        box(2, dim=4)
    with pytest.raises(ValueError, match="n must be"):
        box((2, 2), dim=3)
    with pytest.raises(ValueError, match="order"):
        box(2, order=0)
    with pytest.raises(ValueError, match="bounds"):
        box(2, dim=2, bounds=[(0, 1), (1, 0)])
    with pytest.raises(ValueError, match="inverted"):
        box(4, dim=2, distort=0.6)


# ---------------------------------------------------------------- Mesh validation


def test_mesh_validation():
    points = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0], [2.0, 1.0]]
    cells = [[0, 1, 2, 3], [1, 4, 3, 5]]
    mesh = Mesh(points, "quad", cells)
    assert mesh.tag_names == {"boundary": 1} and len(mesh.facets) == 6
    with pytest.raises(ValueError, match=r"inverted or degenerate quad cell 1"):
        Mesh(points, "quad", [[0, 1, 2, 3], [4, 1, 5, 3]])
    with pytest.raises(ValueError, match="unsupported cell type 'wedge'"):
        Mesh(points, "wedge", cells)
    with pytest.raises(ValueError, match="outside"):
        Mesh(points, "quad", [[0, 1, 2, 6]])
    with pytest.raises(ValueError, match="shape"):
        Mesh(points, "quad", [[0, 1, 2]])
    with pytest.raises(TypeError, match="integers"):
        Mesh(points, "quad", np.array(cells, dtype=float))
    with pytest.raises(ValueError, match="not a facet"):
        Mesh(points, "quad", cells, facets=[[0, 3]])
    with pytest.raises(ValueError, match="geometry"):
        Mesh(points, "quad", cells, geometry=np.zeros((2, 5, 2)))


def test_curved_cell_inversion_detected_at_lattice_nodes():
    mesh = box(1, dim=2, order=2)
    geometry = mesh.geometry.copy()  # (1, 9, 2)
    geometry[0, 4] = [0.95, 0.95]  # center node pushed to a corner: corners fine, curve folds
    with pytest.raises(ValueError, match="quad cell 0"):
        Mesh(mesh.points, "quad", mesh.cells, geometry=geometry)


# ---------------------------------------------------------------- H1 numbering


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_numbering_counts_and_positions(dim, simplex, p):
    n = 3
    mesh = box(n, dim=dim, simplex=simplex)
    num = h1_numbering(mesh, p)
    nodes_per_cell = ref.num_lattice_nodes(mesh.cell_type, p)
    assert num.offsets.shape == (mesh.num_cells, nodes_per_cell)
    assert num.offsets.dtype == np.int32  # int64 only where ids could pass 2^31 - 1
    assert num.num_nodes == (n * p + 1) ** dim  # the Kuhn split has the box lattice
    assert num.node_lattice.shape == (nodes_per_cell, dim + 1 if simplex else dim)
    # vertex nodes first, numbered as the vertices
    np.testing.assert_array_equal(num.offsets[:, ref.corner_nodes(mesh.cell_type, p)], mesh.cells)
    # one global id per physical position, distinct positions distinct ids
    positions, count = position_classes(equispaced_positions(mesh, p))
    assert count == num.num_nodes
    assert_bijection(positions, num.offsets)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_box_numbering_closed_form_matches_keys(dim, p):
    """The closed-form box numbering is the key numbering relabeled within each class."""
    mesh = box((3, 2, 4)[:dim], dim=dim, distort=0.1)
    assert mesh.box_shape == (3, 2, 4)[:dim]
    keyed = mesh.permute_cells(np.arange(mesh.num_cells))  # same cells, no box_shape
    assert keyed.box_shape is None
    closed, keys = h1_numbering(mesh, p), h1_numbering(keyed, p)
    assert closed.offsets.dtype == keys.offsets.dtype and closed.num_nodes == keys.num_nodes
    assert_bijection(closed.offsets, keys.offsets)
    # same classes in the same id ranges: vertices (identical), edges, faces, interiors
    support = np.count_nonzero(closed.node_weights, axis=1)  # (P,)
    for s in np.unique(support):
        nodes = support == s
        lo, hi = keys.offsets[:, nodes].min(), keys.offsets[:, nodes].max()
        assert (closed.offsets[:, nodes].min(), closed.offsets[:, nodes].max()) == (lo, hi)
    corners = ref.corner_nodes(mesh.cell_type, p)
    np.testing.assert_array_equal(closed.offsets[:, corners], mesh.cells)
    interior = support == support.max()  # interiors come cell by cell
    if p > 1:
        np.testing.assert_array_equal(
            np.diff(closed.offsets[:, interior].min(axis=1)), (p - 1) ** dim
        )


def test_box_shape_errors():
    mesh = box((2, 3), dim=2)
    with pytest.raises(ValueError, match="box_shape"):
        Mesh(mesh.points, mesh.cell_type, mesh.cells, box_shape=(3, 3))
    with pytest.raises(ValueError, match="box_shape"):
        Mesh(
            box(2, dim=2, simplex=True).points,
            "triangle",
            box(2, dim=2, simplex=True).cells,
            box_shape=(2, 2),
        )
    flipped = mesh.cells[::-1]  # a valid mesh, its cells not in grid order
    shuffled = Mesh(mesh.points, mesh.cell_type, flipped, box_shape=(2, 3))
    with pytest.raises(ValueError, match="not in box grid order"):
        h1_numbering(shuffled, 2)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("p", [1, 3])
def test_numbering_multiplicity(dim, p):
    n = 3
    mesh = box(n, dim=dim)
    num = h1_numbering(mesh, p)
    mult = np.bincount(num.offsets.ravel(), minlength=num.num_nodes)  # (num_nodes,)
    grid = np.zeros((num.num_nodes, dim), dtype=np.int64)  # node positions in units h / p
    grid[num.offsets] = np.rint(equispaced_positions(mesh, p) * n * p).astype(np.int64)
    shared = (grid % p == 0) & (grid > 0) & (grid < n * p)  # on an interior grid plane
    np.testing.assert_array_equal(mult, np.prod(np.where(shared, 2, 1), axis=1))


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("p", [2, 3, 5])
def test_numbering_invariant_under_relabeling(dim, simplex, p):
    rng = np.random.default_rng(7 + dim + p)
    mesh = box((3, 2, 2)[:dim], dim=dim, simplex=simplex, distort=0.1)
    relabel = rng.permutation(mesh.num_points)  # new id of each vertex
    points = np.empty_like(mesh.points)
    points[relabel] = mesh.points
    rotations = cell_rotations(mesh.cell_type)  # (num_rotations, num_corners)
    choice = rng.integers(len(rotations), size=mesh.num_cells)
    cells = np.take_along_axis(relabel[mesh.cells], rotations[choice], axis=1)
    moved = Mesh(points, mesh.cell_type, cells, relabel[mesh.facets], mesh.facet_tags)
    a, b = h1_numbering(mesh, p), h1_numbering(moved, p)
    assert a.num_nodes == b.num_nodes
    pos_a, pos_b = equispaced_positions(mesh, p), equispaced_positions(moved, p)
    classes, count = position_classes(np.concatenate([pos_a, pos_b]))
    assert count == a.num_nodes
    assert_bijection(classes[: mesh.num_cells], a.offsets)
    assert_bijection(classes[mesh.num_cells :], b.offsets)
    # both numberings induce the position partition; map a's ids to b's through it
    id_a = np.empty(count, dtype=np.int64)
    id_b = np.empty(count, dtype=np.int64)
    id_a[classes[: mesh.num_cells]] = a.offsets
    id_b[classes[mesh.num_cells :]] = b.offsets
    a_to_b = np.empty(a.num_nodes, dtype=np.int64)
    a_to_b[id_a] = id_b
    for tags in (None, 1, [2, 3]):
        np.testing.assert_array_equal(
            np.sort(a_to_b[a.boundary_nodes(tags)]), b.boundary_nodes(tags)
        )


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("p", [1, 2, 4])
def test_boundary_nodes(dim, simplex, p):
    mesh = box(3, dim=dim, simplex=simplex)
    num = h1_numbering(mesh, p)
    x = np.zeros((num.num_nodes, dim))
    x[num.offsets] = equispaced_positions(mesh, p)
    on = (np.abs(x) < 1e-12) | (np.abs(x - 1) < 1e-12)  # (num_nodes, dim)
    all_nodes = num.boundary_nodes()
    assert all_nodes.dtype == np.int64
    np.testing.assert_array_equal(all_nodes, np.flatnonzero(on.any(axis=1)))
    for d in range(dim):
        for side, tag in ((0.0, 2 * d + 1), (1.0, 2 * d + 2)):
            expected = np.flatnonzero(np.abs(x[:, d] - side) < 1e-12)
            np.testing.assert_array_equal(num.boundary_nodes(tag), expected)
    np.testing.assert_array_equal(num.boundary_nodes(["left", 2]), num.boundary_nodes([1, 2]))


def sorted_key_numbering(mesh, p):
    """The numbering's definition, by one sort of all keys (the oracle): (offsets, count)."""
    weights = ref.corner_weights(mesh.cell_type, p)  # (nodes, corners)
    support = np.count_nonzero(weights, axis=1)  # (nodes,)
    offsets = np.empty((mesh.num_cells, len(weights)), dtype=np.int64)
    count = 0
    for s in np.unique(support):
        nodes = np.flatnonzero(support == s)
        if s == weights.shape[1]:  # interior: never shared, cell by cell
            ids = np.arange(mesh.num_cells * nodes.size)
        else:
            pairs = [
                sorted((v, w) for v, w in zip(mesh.cells[c], weights[k], strict=True) if w > 0)
                for c in range(mesh.num_cells)
                for k in nodes
            ]
            _, ids = np.unique(np.array(pairs).reshape(len(pairs), -1), axis=0, return_inverse=True)
        offsets[:, nodes] = count + ids.reshape(mesh.num_cells, nodes.size)
        count += int(ids.max()) + 1
    return offsets, count


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_numbering_equals_the_sorted_key_definition(dim, simplex, p):
    mesh = box((3, 2, 2)[:dim], dim=dim, simplex=simplex)
    mesh = mesh.permute_cells(np.random.default_rng(p).permutation(mesh.num_cells))
    offsets, count = sorted_key_numbering(mesh, p)
    num = h1_numbering(mesh, p)
    np.testing.assert_array_equal(num.offsets, offsets)
    assert num.num_nodes == count


def test_numbering_high_order_hex():
    mesh = box(2, dim=3)
    num = h1_numbering(mesh, 8)
    assert num.num_nodes == 17**3
    positions, _ = position_classes(equispaced_positions(mesh, 8))
    assert_bijection(positions, num.offsets)


# ---------------------------------------------------------------- I/O

FORMATS = [
    ("msh", "gmsh", True),
    ("msh", "gmsh", False),
    ("msh", "gmsh22", True),
    ("msh", "gmsh22", False),
    ("vtk", "vtk", True),
    ("vtk", "vtk", False),
    ("vtu", "vtu", True),
]


def facet_keys(mesh):
    """Rows (sorted vertex coordinates, tag) of the tagged facets, sorted."""
    x = np.sort(np.round(mesh.points[mesh.facets] * 1e9), axis=1).reshape(len(mesh.facets), -1)
    rows = np.column_stack([x, mesh.facet_tags])
    return rows[np.lexsort(rows.T[::-1])]


@pytest.mark.parametrize(("dim", "simplex"), CASES)
@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize(("ext", "file_format", "binary"), FORMATS)
def test_round_trip(tmp_path, dim, simplex, order, ext, file_format, binary):
    mesh = box(2, dim=dim, simplex=simplex, order=order, distort=0.1)
    path = tmp_path / f"mesh.{ext}"
    write(path, mesh, file_format=file_format, binary=binary)
    back = read(path)
    assert back.cell_type == mesh.cell_type
    assert (back.gdim, back.geometry_order, back.num_cells) == (dim, order, mesh.num_cells)
    assert back.num_points == mesh.num_points
    np.testing.assert_allclose(back.cell_coordinates(), mesh.cell_coordinates(), atol=1e-14)
    np.testing.assert_array_equal(facet_keys(back), facet_keys(mesh))
    if file_format.startswith("gmsh"):
        assert back.tag_names == mesh.tag_names


@pytest.mark.parametrize(("ext", "file_format", "binary"), [f for f in FORMATS if f[1] != "gmsh"])
def test_write_point_data(tmp_path, ext, file_format, binary):
    mesh = box(2, dim=3, order=2)  # straight cells: the linear function x is interpolated exactly
    path = tmp_path / f"mesh.{ext}"
    u = mesh.points @ [1.0, 2.0, 3.0]  # (num_points,)
    write(path, mesh, {"u": u, "x": mesh.points}, file_format=file_format, binary=binary)
    raw = meshio.read(path)
    assert len(raw.points) == 5**3
    np.testing.assert_allclose(raw.point_data["u"], raw.points @ [1.0, 2.0, 3.0], atol=1e-13)
    np.testing.assert_allclose(raw.point_data["x"], raw.points, atol=1e-14)


def test_vtu_ascii_keeps_twelve_digits(tmp_path):
    mesh = box(2, dim=2, order=2, distort=0.1)
    write(tmp_path / "m.vtu", mesh, binary=False)
    np.testing.assert_allclose(read(tmp_path / "m.vtu").geometry, mesh.geometry, atol=1e-11)


# Gmsh's documented node orderings, in Gmsh's reference coordinates (the same
# cells as hofem's), written by hand: checks meshio's and hofem's permutations.
_Q = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
_H = [(x, y, z) for z in (-1, 1) for (x, y) in _Q]
_T = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
_GMSH_HEX_EDGES = [(0, 1), (0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (2, 6), (3, 7)]
_GMSH_HEX_EDGES += [(4, 5), (4, 7), (5, 6), (6, 7)]
_GMSH_HEX_FACES = [(0, 0, -1), (0, -1, 0), (-1, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]


def _midpoints(corners, edges):
    return [np.mean([corners[a], corners[b]], axis=0) for a, b in edges]


_GMSH_NODES = {
    9: ("triangle", [(0, 0), (1, 0), (0, 1), (0.5, 0), (0.5, 0.5), (0, 0.5)]),
    10: ("quad", [*_Q, (0, -1), (1, 0), (0, 1), (-1, 0), (0, 0)]),
    11: ("tetra", [*_T, *_midpoints(_T, [(0, 1), (1, 2), (0, 2), (0, 3), (2, 3), (1, 3)])]),
    12: ("hexahedron", [*_H, *_midpoints(_H, _GMSH_HEX_EDGES), *_GMSH_HEX_FACES, (0, 0, 0)]),
}


@pytest.mark.parametrize("gmsh_type", sorted(_GMSH_NODES))
def test_read_gmsh_quadratic_node_ordering(tmp_path, gmsh_type):
    cell_type, xi = _GMSH_NODES[gmsh_type]
    xi = np.array(xi, dtype=float)  # (num_nodes, dim)
    dim = xi.shape[1]
    a = np.array([[2.0, 0.3, -0.2], [0.1, 1.5, 0.4], [0.2, -0.3, 1.2]])[:dim, :dim]
    x = xi @ a.T + np.arange(1, dim + 1)  # an affine cell
    x3 = np.column_stack([x, np.zeros((len(x), 3 - dim))])
    lines = ["$MeshFormat", "2.2 0 8", "$EndMeshFormat", "$Nodes", str(len(x))]
    lines += [f"{i + 1} " + " ".join(repr(float(c)) for c in row) for i, row in enumerate(x3)]
    lines += ["$EndNodes", "$Elements", "1", f"1 {gmsh_type} 2 0 1 "]
    lines[-1] += " ".join(str(i + 1) for i in range(len(x)))
    lines += ["$EndElements", ""]
    path = tmp_path / "cell.msh"
    path.write_text("\n".join(lines))
    mesh = read(path)
    assert mesh.cell_type == cell_type and mesh.geometry_order == 2
    expected = ref.geometry_nodes(cell_type, 2) @ a.T + np.arange(1, dim + 1)
    np.testing.assert_allclose(mesh.geometry[0], expected, atol=1e-14)
    np.testing.assert_allclose(mesh.points[mesh.cells[0]], expected[ref.corner_nodes(cell_type, 2)])
    assert mesh.tag_names == {"boundary": 1} and np.all(mesh.facet_tags == 1)


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.msh"):
        read(tmp_path / "nope.msh")

    with pytest.raises(IsADirectoryError, match="is a directory, not a mesh file"):
        read(tmp_path)

    (tmp_path / "garbage.msh").write_text("not a mesh\n")
    with pytest.raises(ValueError, match=r"garbage\.msh is not a mesh file .*formats tried: gmsh"):
        read(tmp_path / "garbage.msh")

    (tmp_path / "cut.msh").write_text("$MeshFormat\n4.1 0 8\n$EndMeshFormat\n$Nodes\n1 2\n")
    with pytest.raises(ValueError, match=r"cut\.msh .*gmsh: ValueError: not enough values"):
        read(tmp_path / "cut.msh")

    (tmp_path / "notes.txt").write_text("not a mesh\n")
    with pytest.raises(
        ValueError, match=r"notes\.txt is not a mesh file: no meshio format .*'\.txt'"
    ):
        read(tmp_path / "notes.txt")

    points = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1.0]])
    meshio.write(tmp_path / "wedge.vtu", meshio.Mesh(points, [("wedge", [[0, 1, 2, 3, 4, 5]])]))
    with pytest.raises(ValueError, match=r"wedge\.vtu.*'wedge'.*supported.*hexahedron27"):
        read(tmp_path / "wedge.vtu")

    mixed = meshio.Mesh(points, [("tetra", [[0, 1, 2, 3]]), ("wedge", [[0, 1, 2, 3, 4, 5]])])
    meshio.write(tmp_path / "mixed.vtu", mixed)
    with pytest.raises(ValueError, match=r"mixed\.vtu.*tetra, wedge"):
        read(tmp_path / "mixed.vtu")

    inverted = meshio.Mesh(points, [("tetra", [[0, 1, 2, 3], [1, 0, 4, 3]])])
    meshio.write(tmp_path / "inverted.msh", inverted, file_format="gmsh22")
    with pytest.raises(ValueError, match=r"tetra cell 1 in .*inverted\.msh"):
        read(tmp_path / "inverted.msh")


def test_write_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        write(tmp_path / "m.xyz", box(1, dim=2))
    with pytest.raises(ValueError, match="order 3"):
        write(tmp_path / "m.vtu", box(1, dim=2, order=3))


# ---------------------------------------------------------------- samples


def test_samples():
    lshape = read(data_path("lshape_hex.msh"))
    assert lshape.cell_type == "hexahedron" and lshape.num_cells == 192
    assert lshape.tag_names["reentrant"] == 7
    np.testing.assert_array_equal(facet_keys(lshape), facet_keys(lshape_hex()))
    tet = read(data_path("curved_tet10.msh"))
    assert (tet.cell_type, tet.geometry_order) == ("tetra", 2)
    assert set(tet.tag_names) == {"left", "right", "bottom", "top", "front", "back"}
    quad = read(data_path("quad9_box.vtu"))
    assert (quad.cell_type, quad.geometry_order, quad.gdim) == ("quad", 2, 2)
    tri = read(data_path("tri_box.vtk"))
    assert (tri.cell_type, tri.num_cells) == ("triangle", 32)
    assert set(np.unique(tri.facet_tags)) == {1, 2, 3, 4}
    with pytest.raises(FileNotFoundError, match="available"):
        data_path("nothing.msh")


def test_missing_meshio_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "meshio", None)
    with pytest.raises(ImportError, match=r"pip install hofem\[mesh\]"):
        write(tmp_path / "m.vtu", box(1, dim=2))


@pytest.mark.parametrize("d", [1, 2, 3])
def test_jacobian_det_matches_lu(d):
    a = np.random.default_rng(d).standard_normal((4, 5, d, d))
    np.testing.assert_allclose(jacobian_det(a), np.linalg.det(a), rtol=1e-13, atol=1e-14)


def test_jacobian_det_rejects_other_shapes():
    with pytest.raises(ValueError, match=r"\(\.\.\., d, d\)"):
        jacobian_det(np.zeros((3, 4, 4)))
    with pytest.raises(ValueError, match="d = 1, 2, 3"):
        jacobian_det(np.zeros((3, 2, 3)))
