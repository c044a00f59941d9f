"""Reference cells: corners, facets and node lattices in hofem ordering.

Tensor cells (line, quad, hexahedron) live on ``[-1, 1]^dim`` with corners in
lexicographic order, x fastest: corner ``(a, b, c)`` in ``{0, 1}^3`` is local
vertex ``a + 2 b + 4 c``. Simplices (triangle, tetra) live on the unit simplex,
vertex 0 at the origin and vertex ``m`` at ``e_m``.

The order-``p`` node lattice of a tensor cell is ``(i, j, k)`` in ``0..p``,
index ``i + (p + 1) j + (p + 1)^2 k``; of a simplex the points ``(i, j, k)``
with ``i + j + k <= p`` ordered ``for k: for j: for i``.
"""

import math

import numpy as np
from numpy.polynomial import legendre

from ..typing import ArrayLike, FloatArray, IndexArray

TENSOR_TYPES = ("line", "quad", "hexahedron")
SIMPLEX_TYPES = ("triangle", "tetra")
CELL_TYPES = ("line", "triangle", "quad", "tetra", "hexahedron")

CELL_DIM = {"line": 1, "triangle": 2, "quad": 2, "tetra": 3, "hexahedron": 3}
NUM_CORNERS = {"line": 2, "triangle": 3, "quad": 4, "tetra": 4, "hexahedron": 8}
FACET_TYPE = {
    "line": "vertex",
    "triangle": "line",
    "quad": "line",
    "tetra": "triangle",
    "hexahedron": "quad",
}

# Local facets as lists of local corners, each in the hofem corner ordering of
# the facet's own cell type. Tensor cells: x = -1, x = +1, y = -1, y = +1,
# z = -1, z = +1; simplices: the facet opposite vertex m, for m = 0..dim.
FACETS = {
    "line": np.array([[0], [1]]),
    "triangle": np.array([[1, 2], [0, 2], [0, 1]]),
    "quad": np.array([[0, 2], [1, 3], [0, 1], [2, 3]]),
    "tetra": np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]),
    "hexahedron": np.array(
        [
            [0, 2, 4, 6],
            [1, 3, 5, 7],
            [0, 1, 4, 5],
            [2, 3, 6, 7],
            [0, 1, 2, 3],
            [4, 5, 6, 7],
        ]
    ),
}


def is_simplex(cell_type: str) -> bool:
    """Whether ``cell_type`` is a simplex ("triangle", "tetra")."""
    return cell_type in SIMPLEX_TYPES


def tensor_lattice(p: int, dim: int) -> IndexArray:
    """Tensor node lattice, x fastest.

    Returns
    -------
    ndarray of int64, shape ``((p + 1)**dim, dim)``
    """
    grids = np.meshgrid(*[np.arange(p + 1)] * dim, indexing="ij")  # dim x (p+1,)*dim
    return np.stack([g.ravel(order="F") for g in grids], axis=1).astype(np.int64)


def simplex_lattice(p: int, dim: int) -> IndexArray:
    """Simplex node lattice ``i + j (+ k) <= p``, ordered ``for k: for j: for i``.

    Returns
    -------
    ndarray of int64, shape ``(binom(p + dim, dim), dim)``
    """
    full = tensor_lattice(p, dim)  # ((p+1)**dim, dim), x fastest
    return full[full.sum(axis=1) <= p]


def num_lattice_nodes(cell_type: str, p: int) -> int:
    """Number of order-``p`` lattice nodes of a cell."""
    dim = CELL_DIM[cell_type]
    return math.comb(p + dim, dim) if is_simplex(cell_type) else (p + 1) ** dim


def lattice(cell_type: str, p: int) -> IndexArray:
    """Integer node lattice of order ``p``: shape ``(num_nodes, dim)`` int64."""
    dim = CELL_DIM[cell_type]
    return simplex_lattice(p, dim) if is_simplex(cell_type) else tensor_lattice(p, dim)


def corner_coordinates(cell_type: str) -> FloatArray:
    """Reference coordinates of the corners: shape ``(num_corners, dim)`` float64."""
    dim = CELL_DIM[cell_type]
    if is_simplex(cell_type):
        return np.vstack([np.zeros(dim), np.eye(dim)])
    return 2.0 * tensor_lattice(1, dim) - 1.0


def corner_weights(cell_type: str, p: int) -> IndexArray:
    """Integer weights of each order-``p`` lattice node on the cell's corners.

    Tensor cells: node ``(i_d)`` has weight ``prod_d (i_d if a_d == 1 else
    p - i_d)`` at corner ``(a_d)`` (``p**dim`` times the multilinear shape
    function at the equispaced lattice point). Simplices: the barycentric
    lattice indices ``(p - i - j - k, i, j, k)``. A node's weights identify its
    position relative to the corners independently of the corner ordering.

    Returns
    -------
    ndarray of int64, shape ``(num_nodes, num_corners)``
    """
    nodes = lattice(cell_type, p)  # (num_nodes, dim)
    if is_simplex(cell_type):
        return np.column_stack([p - nodes.sum(axis=1), nodes])
    corners = tensor_lattice(1, CELL_DIM[cell_type])  # (num_corners, dim)
    w = np.where(corners[None, :, :] == 1, nodes[:, None, :], p - nodes[:, None, :])
    return w.prod(axis=2)  # (num_nodes, num_corners)


def corner_nodes(cell_type: str, p: int) -> IndexArray:
    """Lattice indices of the corners, in corner order: shape ``(num_corners,)`` int64."""
    w = corner_weights(cell_type, p)  # (num_nodes, num_corners)
    return np.argmax(w, axis=0)


def gll_points(k: int) -> FloatArray:
    """The ``k + 1`` Gauss-Lobatto-Legendre points on ``[-1, 1]``, ascending.

    Returns
    -------
    ndarray of float64, shape ``(k + 1,)``
    """
    inner = legendre.Legendre.basis(k).deriv().roots() if k > 1 else np.empty(0)
    x = np.concatenate([[-1.0], np.sort(inner.real), [1.0]])
    return 0.5 * (x - x[::-1])  # exactly antisymmetric


def geometry_nodes(cell_type: str, k: int) -> FloatArray:
    """Reference coordinates of the order-``k`` geometric Lagrange nodes.

    Tensor cells: GLL points in each direction; simplices: equispaced lattice
    ``(i, j, k) / k``.

    Returns
    -------
    ndarray of float64, shape ``(num_nodes, dim)``
    """
    nodes = lattice(cell_type, k)  # (num_nodes, dim)
    if is_simplex(cell_type):
        return nodes / k
    return gll_points(k)[nodes]


def lagrange_derivatives(cell_type: str, k: int, x: FloatArray) -> FloatArray:
    """Derivatives of the order-``k`` geometric Lagrange basis at points ``x``.

    Parameters
    ----------
    x : ndarray, shape ``(num_points, dim)``
        Reference coordinates.

    Returns
    -------
    ndarray of float64, shape ``(dim, num_points, num_nodes)``
    """
    dim = CELL_DIM[cell_type]
    nodes = geometry_nodes(cell_type, k)  # (num_nodes, dim)
    degrees = lattice(cell_type, k)  # (num_nodes, dim): a Legendre degree per direction

    def legendre_products(y, deriv_dir):
        # Products of Legendre polynomials, in [-1, 1] coordinates for tensor cells
        # and 2 y - 1 for simplices; shape (len(y), num_nodes).
        scale = 2.0 if is_simplex(cell_type) else 1.0
        t = scale * y + (1.0 - scale)  # (len(y), dim)
        out = np.ones((len(y), len(degrees)))
        for d in range(dim):
            vals = legendre.legvander(t[:, d], k)  # (len(y), k + 1)
            if d == deriv_dir:
                eye = np.eye(k + 1)
                vals = scale * np.stack(
                    [legendre.legval(t[:, d], legendre.legder(eye[n])) for n in range(k + 1)],
                    axis=1,
                )
            out *= vals[:, degrees[:, d]]
        return out

    inv_vandermonde = np.linalg.inv(legendre_products(nodes, -1))  # (num_nodes, num_nodes)
    return np.stack([legendre_products(x, d) @ inv_vandermonde for d in range(dim)])


def linear_shape_functions(cell_type: str, x: ArrayLike) -> FloatArray:
    """The affine (simplex) or multilinear (tensor) corner shape functions.

    Parameters
    ----------
    x : ndarray, shape ``(num_points, dim)``
        Reference coordinates.

    Returns
    -------
    ndarray of float64, shape ``(num_points, num_corners)``
    """
    x = np.asarray(x, dtype=np.float64)
    if is_simplex(cell_type):
        return np.column_stack([1.0 - x.sum(axis=1), x])
    corners = tensor_lattice(1, CELL_DIM[cell_type])  # (num_corners, dim)
    factors = np.where(corners[None] == 1, 1.0 + x[:, None], 1.0 - x[:, None])  # (n, nc, dim)
    return factors.prod(axis=2) / 2 ** x.shape[1]
