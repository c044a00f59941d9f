"""Polynomial tools: 1D Lagrange matrices, simplex node lattices, warp-and-blend nodes,
the orthonormal (Dubiner/PKDO) simplex basis and the nodal Lagrange basis built on it.

Conventions
-----------
- Simplices are the *unit* simplices: triangle (0,0), (1,0), (0,1); tetrahedron (0,0,0),
  (1,0,0), (0,1,0), (0,0,1).  Barycentric coordinate 0 belongs to the vertex at the origin,
  coordinate m (m >= 1) to the vertex e_m, so the Cartesian coordinate x_d equals the
  barycentric coordinate d + 1 (0-based d).
- Node lattice ordering (shared with :mod:`hofem.meshes`): the nodes of order p are
  indexed by integer points (i[, j[, k]]) with i + j + k <= p, ordered ``for k: for j: for i``
  (i fastest).  The barycentric lattice index is (p - i - j - k, i, j, k).
- Orthonormal modes are ordered by total degree n = 0..order; within one degree, by
  ``for k: for j`` (i = n - j - k decreasing), so the first binomial(q + dim, dim) modes
  span the polynomials of degree <= q.
- Every float array is float64.
"""

import math
import numbers

import numpy as np
from scipy.special import eval_jacobi

from .quadrature import lobatto_quadrature
from .typing import ArrayLike, FloatArray, IndexArray

__all__ = [
    "lagrange_deriv_matrix",
    "lagrange_interp_matrix",
    "simplex_barycentric_nodes",
    "simplex_lagrange",
    "simplex_lattice",
    "simplex_nodes",
    "simplex_vandermonde",
    "simplex_vandermonde_grad",
]

# Warburton's optimized blending parameters alpha, indexed by order p = 1..15
# (Hesthaven & Warburton, "Nodal Discontinuous Galerkin Methods", 2008, Nodes2D / Nodes3D).
_ALPHA_OPT_2D = (0.0, 0.0, 1.4152, 0.1001, 0.2751, 0.9800, 1.0999, 1.2832, 1.3648, 1.4773,
                 1.4959, 1.5743, 1.5770, 1.6223, 1.6258)  # fmt: skip
_ALPHA_OPT_3D = (0.0, 0.0, 0.0, 0.1002, 1.1332, 1.5608, 1.3413, 1.2577, 1.1603, 1.10153,
                 0.6080, 0.4523, 0.8856, 0.8717, 0.9655)  # fmt: skip
_ALPHA_HIGH_2D = 5.0 / 3.0  # used beyond the table, as in the reference implementation
_ALPHA_HIGH_3D = 1.0


def _check_int(value, name, minimum, allowed, maximum=None):
    """Return ``value`` as a Python int, or raise ValueError naming ``name`` and ``allowed``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer {allowed}, got {value}")
    return value


def _check_dim(dim):
    return _check_int(dim, "dim", 1, "in 1..3", maximum=3)


# ---------------------------------------------------------------------------------------------
# 1D Lagrange matrices
# ---------------------------------------------------------------------------------------------


def _check_nodes_points(nodes, points):
    nodes = np.asarray(nodes, dtype=np.float64)
    points = np.asarray(points, dtype=np.float64)
    if nodes.ndim != 1 or nodes.size < 1:
        raise ValueError(f"nodes must be a non-empty 1D array, got shape {nodes.shape}")
    if points.ndim != 1:
        raise ValueError(f"points must be a 1D array, got shape {points.shape}")
    if not (np.all(np.isfinite(nodes)) and np.all(np.isfinite(points))):
        raise ValueError("nodes and points must be finite")
    if np.unique(nodes).size != nodes.size:
        raise ValueError("nodes must be distinct (duplicate nodes found)")
    return nodes, points


def _leave_one_out_products(factors):
    """Products of all columns but one: out[:, j] = prod_{k != j} factors[:, k].

    Parameters
    ----------
    factors : ndarray of float64, shape (m, n)

    Returns
    -------
    ndarray of float64, shape (m, n)
    """
    m, n = factors.shape
    prefix = np.ones((m, n + 1))  # (m, n+1): prefix[:, j] = prod_{k < j}
    suffix = np.ones((m, n + 1))  # (m, n+1): suffix[:, j] = prod_{k >= j}
    prefix[:, 1:] = np.cumprod(factors, axis=1)
    suffix[:, :-1] = np.cumprod(factors[:, ::-1], axis=1)[:, ::-1]
    return prefix[:, :-1] * suffix[:, 1:]


def _scaled_nodes(nodes, points):
    """Map nodes and points by the affine map taking the node hull to [-1, 1]."""
    center = 0.5 * (nodes.max() + nodes.min())
    half = 0.5 * (nodes.max() - nodes.min())
    if half == 0.0:
        half = 1.0
    return (nodes - center) / half, (points - center) / half, half


def lagrange_interp_matrix(nodes: ArrayLike, points: ArrayLike) -> FloatArray:
    """Values of the 1D Lagrange cardinal functions of ``nodes`` at ``points``.

    Uses the (division-free) first barycentric form
    ``l_j(x) = w_j prod_{k != j} (x - x_k)``, which is backward stable, exact (0 or 1) at
    points equal to a node, and never divides by zero.

    Parameters
    ----------
    nodes : array_like of float, shape (num_nodes,)
        Distinct interpolation nodes, any order.
    points : array_like of float, shape (num_points,)
        Evaluation points.

    Returns
    -------
    ndarray of float64, shape (num_points, num_nodes)
        ``B[q, j] = l_j(points[q])``.

    Raises
    ------
    ValueError
        If ``nodes`` is not a non-empty 1D array of distinct finite values, or ``points``
        is not a 1D array of finite values.
    """
    nodes, points = _check_nodes_points(nodes, points)
    t_nodes, t_points, _ = _scaled_nodes(nodes, points)
    n = t_nodes.size
    diff_nodes = t_nodes[:, None] - t_nodes[None, :]  # (n, n)
    np.fill_diagonal(diff_nodes, 1.0)
    bary = 1.0 / np.prod(diff_nodes, axis=1)  # (n,) barycentric weights
    factors = t_points[:, None] - t_nodes[None, :]  # (num_points, n)
    B = _leave_one_out_products(factors) * bary[None, :]  # (num_points, n)
    # Exact cardinality where a point coincides with a node.
    hit_q, hit_j = np.nonzero(factors == 0.0)
    B[hit_q, :] = 0.0
    B[hit_q, hit_j] = 1.0
    if n == 1:
        B[:] = 1.0
    return B


def lagrange_deriv_matrix(nodes: ArrayLike, points: ArrayLike) -> FloatArray:
    """Derivatives of the 1D Lagrange cardinal functions of ``nodes`` at ``points``.

    ``l_j'(x) = w_j sum_{m != j} prod_{k != j, m} (x - x_k)``, evaluated without any
    division, so it is exact at points that coincide with nodes.

    Parameters
    ----------
    nodes : array_like of float, shape (num_nodes,)
        Distinct interpolation nodes, any order.
    points : array_like of float, shape (num_points,)
        Evaluation points.

    Returns
    -------
    ndarray of float64, shape (num_points, num_nodes)
        ``D[q, j] = l_j'(points[q])``.

    Raises
    ------
    ValueError
        As :func:`lagrange_interp_matrix`.
    """
    nodes, points = _check_nodes_points(nodes, points)
    t_nodes, t_points, half = _scaled_nodes(nodes, points)
    n = t_nodes.size
    D = np.zeros((t_points.size, n))  # (num_points, n)
    if n == 1:
        return D
    diff_nodes = t_nodes[:, None] - t_nodes[None, :]  # (n, n)
    np.fill_diagonal(diff_nodes, 1.0)
    bary = 1.0 / np.prod(diff_nodes, axis=1)  # (n,)
    factors = t_points[:, None] - t_nodes[None, :]  # (num_points, n)
    for j in range(n):
        others = np.delete(factors, j, axis=1)  # (num_points, n-1)
        D[:, j] = bary[j] * _leave_one_out_products(others).sum(axis=1)
    return D / half


# ---------------------------------------------------------------------------------------------
# Simplex lattices and nodes
# ---------------------------------------------------------------------------------------------


def simplex_lattice(dim: int, order: int) -> IndexArray:
    """Barycentric lattice indices of the order-``order`` nodes on the ``dim``-simplex.

    Ordering: dim 1 ``for i in 0..p``; dim 2 ``for j in 0..p: for i in 0..p-j``; dim 3
    ``for k: for j: for i`` (i fastest).  Row = (p - i - j - k, i, j, k) truncated to
    ``dim + 1`` entries; entry 0 belongs to the vertex at the origin, entry m to e_m.

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Polynomial order p >= 0 (p = 0 gives the single index (0, ..., 0)).

    Returns
    -------
    ndarray of int64, shape (num_nodes, dim + 1)
        ``num_nodes = binomial(p + dim, dim)``; each row sums to p.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, or ``order`` is not an integer >= 0.
    """
    dim = _check_dim(dim)
    p = _check_int(order, "order", 0, ">= 0")
    rows = []
    if dim == 1:
        for i in range(p + 1):
            rows.append((p - i, i))
    elif dim == 2:
        for j in range(p + 1):
            for i in range(p + 1 - j):
                rows.append((p - i - j, i, j))
    else:
        for k in range(p + 1):
            for j in range(p + 1 - k):
                for i in range(p + 1 - j - k):
                    rows.append((p - i - j - k, i, j, k))
    return np.array(rows, dtype=np.int64).reshape(-1, dim + 1)  # (num_nodes, dim+1)


def _interior_warp(p):
    """The 1D warp function divided by (1 - r^2), as a callable r -> values.

    warp(r) interpolates (GLL_i - equispaced_i) on the p + 1 equispaced points of [-1, 1];
    it vanishes at r = +-1, so warp(r) / (1 - r^2) is a polynomial of degree p - 2: it is the
    interpolant through the interior equispaced points of (GLL_i - eq_i) / (1 - eq_i^2).
    """
    if p < 2:
        return lambda r: np.zeros_like(r)
    gll, _ = lobatto_quadrature(p + 1)  # (p+1,)
    eq = np.linspace(-1.0, 1.0, p + 1)  # (p+1,)
    eq_in = eq[1:-1]  # (p-1,)
    values = (gll[1:-1] - eq_in) / (1.0 - eq_in**2)  # (p-1,)

    def warp(r):
        shape = np.shape(r)
        flat = np.ravel(r)
        return (lagrange_interp_matrix(eq_in, flat) @ values).reshape(shape)

    return warp


def _face_shift(lam, face, warp, alpha):
    """Barycentric displacement of Warburton's 2D warp & blend on one triangle (face).

    For each edge (a, b) of the face with opposite face vertex m, the node moves along the
    edge (of length 2 in the equilateral picture) by
    ``w = 4 lam_a lam_b warp(lam_b - lam_a) (1 + (alpha lam_m)^2)``, i.e. lam_b += w / 2,
    lam_a -= w / 2.  The formula is invariant under swapping a and b (warp is odd).

    Parameters
    ----------
    lam : ndarray of float64, shape (n, dim + 1)
    face : tuple of 3 ints, barycentric columns of the face vertices
    warp : callable, the interior warp of :func:`_interior_warp`
    alpha : float

    Returns
    -------
    ndarray of float64, shape (n, dim + 1), rows summing to 0
    """
    shift = np.zeros_like(lam)  # (n, dim+1)
    for e in range(3):
        m, a, b = face[e], face[(e + 1) % 3], face[(e + 2) % 3]
        la, lb, lm = lam[:, a], lam[:, b], lam[:, m]
        w = 4.0 * la * lb * warp(lb - la) * (1.0 + (alpha * lm) ** 2)  # (n,)
        shift[:, b] += 0.5 * w
        shift[:, a] -= 0.5 * w
    return shift


def _warp_blend_triangle(lam, warp, alpha):
    """Warp & blend of barycentric points of a triangle. lam: (n, 3) -> (n, 3)."""
    return lam + _face_shift(lam, (0, 1, 2), warp, alpha)


def _warp_blend_tet(lam, warp, alpha):
    """Warp & blend of barycentric points strictly inside a tet. lam: (n, 4) -> (n, 4)."""
    out = lam.copy()  # (n, 4)
    for a in range(4):
        face = tuple(c for c in range(4) if c != a)
        la = lam[:, a]
        lb, lc, ld = lam[:, face[0]], lam[:, face[1]], lam[:, face[2]]
        blend = (1.0 + (alpha * la) ** 2) * lb * lc * ld
        blend /= (lb + 0.5 * la) * (lc + 0.5 * la) * (ld + 0.5 * la)
        out += blend[:, None] * _face_shift(lam, face, warp, alpha)
    return out


def _alpha(dim, p):
    if dim == 2:
        return _ALPHA_OPT_2D[p - 1] if p <= 15 else _ALPHA_HIGH_2D
    return _ALPHA_OPT_3D[p - 1] if p <= 15 else _ALPHA_HIGH_3D


def simplex_barycentric_nodes(dim: int, order: int) -> FloatArray:
    """Barycentric coordinates of :func:`simplex_nodes`, shape (num_nodes, dim + 1).

    Each node's coordinates are computed from the lattice indices of the vertices of the
    smallest sub-simplex (vertex, edge, face, cell) containing it, by a rule that is
    exactly equivariant under permutations of those vertices, and the coordinates of the
    other vertices are exactly 0.  So two elements sharing an edge or face compute
    bit-identical barycentric coordinates for their shared nodes, whatever their vertex
    order.  Edge nodes: coordinates ((1 - g) / 2, (1 + g) / 2) with g the (exactly
    antisymmetric) GLL points of :func:`hofem.quadrature.lobatto_quadrature`.  Triangle
    faces/interiors: Warburton's warp & blend (alpha-optimized; a tetrahedron's faces use
    the tetrahedron's alpha, as Warburton's 3D construction does).  Tet interiors: the 3D
    warp & blend.

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Polynomial order p >= 1.

    Returns
    -------
    ndarray of float64, shape (num_nodes, dim + 1)
        Rows in :func:`simplex_lattice` order; column 0 belongs to the origin vertex.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, or ``order`` is not an integer >= 1.
    """
    dim = _check_dim(dim)
    p = _check_int(order, "order", 1, ">= 1 (H1 Lagrange nodes need order >= 1)")
    lattice = simplex_lattice(dim, p)  # (num_nodes, dim+1)
    gll, _ = lobatto_quadrature(p + 1)  # (p+1,), exactly antisymmetric
    edge_coord = 0.5 * (1.0 + gll)  # (p+1,): coordinate of a vertex with lattice index i
    alpha = 0.0 if dim == 1 else _alpha(dim, p)
    warp = _interior_warp(p)
    lam = np.zeros(lattice.shape)  # (num_nodes, dim+1)
    pending = {3: [], 4: []}  # support size -> [(row, support sorted by lattice index)]
    for row, idx in enumerate(lattice):
        support = [c for c in range(dim + 1) if idx[c] > 0]
        if len(support) == 1:
            lam[row, support[0]] = 1.0
        elif len(support) == 2:
            lam[row, support] = edge_coord[idx[support]]
        else:
            # Canonical representative: the support sorted by lattice index (stable).
            pending[len(support)].append((row, sorted(support, key=lambda c: idx[c])))
    for size, items in pending.items():
        if not items:
            continue
        keys = sorted({tuple(int(lattice[row, c]) for c in sup) for row, sup in items})
        canon = np.array(keys, dtype=np.float64) / p  # (num_keys, size)
        if size == 3:
            values = _warp_blend_triangle(canon, warp, alpha)  # (num_keys, 3)
        else:
            values = _warp_blend_tet(canon, warp, alpha)  # (num_keys, 4)
        table = {}
        for key, value in zip(keys, values, strict=True):
            # Tied lattice indices get exactly equal coordinates (equal by symmetry).
            for tie in set(key):
                tied = [s for s, kk in enumerate(key) if kk == tie]
                if len(tied) > 1:
                    value[tied] = value[tied].mean()
            table[key] = value
        for row, sup in items:
            lam[row, sup] = table[tuple(int(lattice[row, c]) for c in sup)]
    return lam


def simplex_nodes(dim: int, order: int) -> FloatArray:
    """Well-conditioned Lagrange interpolation nodes of order ``order`` on the unit simplex.

    Warburton's warp & blend nodes (T. Warburton, J. Eng. Math. 56, 2006) with the
    alpha-optimized blending parameters for p <= 15 (alpha = 5/3 (triangle), 1 (tet)
    beyond), in the :func:`simplex_lattice` ordering.  Nodes on an edge are the GLL points
    mapped to that edge; nodes on an edge or face lie exactly on it (coordinates of the
    other vertices are exactly 0), and shared nodes are computed identically from any
    vertex order (see :func:`simplex_barycentric_nodes`); on the triangle's hypotenuse
    ``x + y == 1`` holds exactly, on the tet's slanted face ``x + y + z`` is 1 up to one
    rounding.  For p <= 2 the nodes are the equispaced lattice points ``(i, j, k) / p``
    (3-point GLL is equispaced).  dim = 1 gives the GLL points mapped to [0, 1].

    Lebesgue constants (dense sampling): triangle 2.11, 3.70, 4.96 at p = 3, 6, 8
    (equispaced: 2.27, 8.74, 23.9); tetrahedron 2.92, 6.95, 12.4 at p = 3, 6, 8
    (equispaced: 3.02, 13.4, 40.2), matching Warburton's published values.

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Polynomial order p >= 1.

    Returns
    -------
    ndarray of float64, shape (num_nodes, dim)
        ``num_nodes = binomial(p + dim, dim)``; ``nodes[n, d]`` is the barycentric
        coordinate d + 1 of node n.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, or ``order`` is not an integer >= 1.
    """
    lam = simplex_barycentric_nodes(dim, order)  # (num_nodes, dim+1)
    return np.ascontiguousarray(lam[:, 1:])  # (num_nodes, dim)


# ---------------------------------------------------------------------------------------------
# Orthonormal (Dubiner / PKDO) basis
# ---------------------------------------------------------------------------------------------


def _mode_indices(dim, order):
    """Mode multi-indices ordered by total degree, then ``for k: for j``. (num_modes, dim)."""
    modes = []
    for n in range(order + 1):
        if dim == 1:
            modes.append((n,))
        elif dim == 2:
            for j in range(n + 1):
                modes.append((n - j, j))
        else:
            for k in range(n + 1):
                for j in range(n - k + 1):
                    modes.append((n - j - k, j, k))
    return modes


def _jacobi_normalized(n, a, x):
    """Orthonormal Jacobi polynomial P_n^{(a,0)} on [-1, 1] w.r.t. (1 - x)^a, and derivative.

    Returns
    -------
    values, derivs : ndarray of float64, shape like x
    """
    h = 2.0 ** (a + 1) / (2 * n + a + 1)  # norm^2 for beta = 0: Gamma ratios cancel
    scale = 1.0 / math.sqrt(h)
    values = eval_jacobi(n, a, 0.0, x) * scale
    if n == 0:
        derivs = np.zeros_like(x)
    else:
        derivs = 0.5 * (n + a + 1) * eval_jacobi(n - 1, a + 1, 1.0, x) * scale
    return values, derivs


def _check_points(dim, points):
    points = np.asarray(points, dtype=np.float64)
    if dim == 1 and points.ndim == 1:
        points = points[:, None]
    if points.ndim != 2 or points.shape[1] != dim:
        raise ValueError(
            f"points must have shape (num_points, {dim}) for dim={dim}, got {points.shape}"
        )
    return points


def _collapsed(dim, points):
    """Collapsed coordinates on [-1, 1]^dim of points of the unit simplex.

    At the collapsed (singular) edge/vertex, the undefined coordinate is set to -1; every
    mode and gradient formula below is independent of it there.

    Returns
    -------
    list of ndarray of float64, each shape (num_points,)
    """
    x = points[:, 0]
    if dim == 1:
        return [2.0 * x - 1.0]
    tiny = 1e-14
    if dim == 2:
        y = points[:, 1]
        den = 1.0 - y
        safe = np.abs(den) > tiny
        a = np.where(safe, 2.0 * x / np.where(safe, den, 1.0) - 1.0, -1.0)
        return [a, 2.0 * y - 1.0]
    y, z = points[:, 1], points[:, 2]
    den_a = 1.0 - y - z
    safe_a = np.abs(den_a) > tiny
    a = np.where(safe_a, 2.0 * x / np.where(safe_a, den_a, 1.0) - 1.0, -1.0)
    den_b = 1.0 - z
    safe_b = np.abs(den_b) > tiny
    b = np.where(safe_b, 2.0 * y / np.where(safe_b, den_b, 1.0) - 1.0, -1.0)
    return [a, b, 2.0 * z - 1.0]


def _pow(base, e):
    """base**e for integer e >= 0, with 0**0 = 1 and no negative exponents evaluated."""
    return base**e if e > 0 else np.ones_like(base)


def _modes_and_grads(dim, order, points, want_grad):
    """Orthonormal modes (num_points, num_modes) and gradients (dim, num_points, num_modes)."""
    cols = _collapsed(dim, points)
    num_points = points.shape[0]
    modes = _mode_indices(dim, order)
    cache = {}

    def jac(n, a, which):
        """Cached orthonormal Jacobi values/derivatives on collapsed coordinate ``which``."""
        key = (n, a, which)
        if key not in cache:
            cache[key] = _jacobi_normalized(n, a, cols[which])
        return cache[key]

    V = np.empty((num_points, len(modes)))  # (num_points, num_modes)
    G = (
        np.empty((dim, num_points, len(modes))) if want_grad else None
    )  # (dim, num_points, num_modes)
    if dim == 1:
        for m, (i,) in enumerate(modes):
            f, df = jac(i, 0, 0)
            V[:, m] = math.sqrt(2.0) * f  # orthonormal on [0, 1]
            if want_grad:
                G[0, :, m] = math.sqrt(2.0) * 2.0 * df
        return V, G
    if dim == 2:
        a, b = cols
        hb = 0.5 * (1.0 - b)  # (num_points,) = 1 - y
        # Biunit-orthonormal psi = sqrt(2) f_i(a) g_ij(b) (1 - b)^i, times 2 = sqrt(area ratio 4)
        # for the unit triangle; (1 - b)^i = 2^i hb^i.
        for m, (i, j) in enumerate(modes):
            f, df = jac(i, 0, 0)
            g, dg = jac(j, 2 * i + 1, 1)
            scale = 2.0 * math.sqrt(2.0) * 2.0**i
            V[:, m] = scale * f * g * _pow(hb, i)
            if want_grad:
                # d/dr with r = 2x - 1, s = 2y - 1: da/dr = 2 / (1 - b) = 1 / hb.
                dr = df * g * _pow(hb, i - 1) if i > 0 else np.zeros(num_points)
                ds = 0.5 * (1.0 + a) * dr
                tmp = dg * _pow(hb, i)
                if i > 0:
                    tmp = tmp - 0.5 * i * g * _pow(hb, i - 1)
                ds = ds + f * tmp
                # d/dx = 2 d/dr, d/dy = 2 d/ds
                G[0, :, m] = 2.0 * scale * dr
                G[1, :, m] = 2.0 * scale * ds
        return V, G
    a, b, c = cols
    hb = 0.5 * (1.0 - b)
    hc = 0.5 * (1.0 - c)
    for m, (i, j, k) in enumerate(modes):
        f, df = jac(i, 0, 0)
        g, dg = jac(j, 2 * i + 1, 1)
        h, dh = jac(k, 2 * (i + j) + 2, 2)
        # Biunit-orthonormal psi = 2 sqrt(2) f g (1 - b)^i h (1 - c)^(i+j), times sqrt(8) =
        # sqrt(volume ratio (4/3) / (1/6)) for the unit tetrahedron.
        scale = 2.0 * math.sqrt(2.0) * math.sqrt(8.0) * 2.0 ** (2 * i + j)
        V[:, m] = scale * f * g * _pow(hb, i) * h * _pow(hc, i + j)
        if want_grad:
            dr = df * g * h
            dr = dr * _pow(hb, i - 1) if i > 0 else np.zeros(num_points)
            if i + j > 0:
                dr = dr * _pow(hc, i + j - 1)
            else:
                dr = np.zeros(num_points)
            ds = 0.5 * (1.0 + a) * dr
            tmp = dg * _pow(hb, i)
            if i > 0:
                tmp = tmp - 0.5 * i * g * _pow(hb, i - 1)
            tmp = tmp * _pow(hc, i + j - 1) if i + j > 0 else np.zeros(num_points)
            tmp = f * tmp * h
            ds = ds + tmp
            dt = 0.5 * (1.0 + a) * dr + 0.5 * (1.0 + b) * tmp
            tmp2 = dh * _pow(hc, i + j)
            if i + j > 0:
                tmp2 = tmp2 - 0.5 * (i + j) * h * _pow(hc, i + j - 1)
            dt = dt + f * g * _pow(hb, i) * tmp2
            G[0, :, m] = 2.0 * scale * dr
            G[1, :, m] = 2.0 * scale * ds
            G[2, :, m] = 2.0 * scale * dt
    return V, G


def simplex_vandermonde(dim: int, order: int, points: ArrayLike) -> FloatArray:
    """Orthonormal (Dubiner/PKDO) basis of total degree <= ``order`` on the unit simplex.

    The modes are orthonormal in L2 of the unit simplex (volume 1, 1/2, 1/6); dim = 1 gives
    the orthonormal Legendre polynomials on [0, 1].  Mode order: by total degree, then
    ``for k: for j`` (see the module docstring).

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Maximal total degree, >= 0.
    points : array_like of float, shape (num_points, dim) (or (num_points,) for dim = 1)

    Returns
    -------
    V : ndarray of float64, shape (num_points, num_modes)
        ``num_modes = binomial(order + dim, dim)``; ``V[q, m] = psi_m(points[q])``.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, ``order`` is not an integer >= 0, or ``points`` has
        the wrong shape.
    """
    dim = _check_dim(dim)
    order = _check_int(order, "order", 0, ">= 0")
    points = _check_points(dim, points)
    V, _ = _modes_and_grads(dim, order, points, want_grad=False)
    return V


def simplex_vandermonde_grad(dim: int, order: int, points: ArrayLike) -> FloatArray:
    """Gradients of the orthonormal simplex basis of :func:`simplex_vandermonde`.

    Exact (no singularity) at the collapsed vertex/edge of the Duffy map, the top vertex
    included.

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Maximal total degree, >= 0.
    points : array_like of float, shape (num_points, dim) (or (num_points,) for dim = 1)

    Returns
    -------
    ndarray of float64, shape (dim, num_points, num_modes)
        ``[d, q, m] = d psi_m / d x_d (points[q])``.

    Raises
    ------
    ValueError
        As :func:`simplex_vandermonde`.
    """
    dim = _check_dim(dim)
    order = _check_int(order, "order", 0, ">= 0")
    points = _check_points(dim, points)
    _, G = _modes_and_grads(dim, order, points, want_grad=True)
    return G


def simplex_lagrange(dim: int, order: int, points: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Nodal Lagrange basis on :func:`simplex_nodes` evaluated at ``points``.

    Computed as ``V(points) V(nodes)^{-1}`` with the orthonormal basis, and likewise for the
    gradients.

    Parameters
    ----------
    dim : int
        1, 2 or 3.
    order : int
        Polynomial order p >= 1.
    points : array_like of float, shape (num_points, dim) (or (num_points,) for dim = 1)

    Returns
    -------
    interp : ndarray of float64, shape (num_points, num_nodes)
        ``interp[q, j] = phi_j(points[q])``.
    grad : ndarray of float64, shape (dim, num_points, num_nodes)
        ``grad[d, q, j] = d phi_j / d x_d (points[q])``.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, ``order`` is not an integer >= 1, or ``points`` has
        the wrong shape.
    """
    dim = _check_dim(dim)
    order = _check_int(order, "order", 1, ">= 1 (H1 Lagrange nodes need order >= 1)")
    points = _check_points(dim, points)
    nodes = simplex_nodes(dim, order)  # (num_nodes, dim)
    V_nodes, _ = _modes_and_grads(dim, order, nodes, want_grad=False)  # (num_nodes, num_modes)
    V, G = _modes_and_grads(dim, order, points, want_grad=True)
    # phi(x) = psi(x) @ inv(V_nodes): cardinal at the nodes.
    V_inv = np.linalg.inv(V_nodes)  # (num_modes, num_nodes)
    interp = V @ V_inv  # (num_points, num_nodes)
    grad = G @ V_inv  # (dim, num_points, num_nodes)
    return interp, grad
