"""Tests of hofem.quadrature and hofem.polynomials."""

import itertools
import math

import numpy as np
import pytest
from numpy.polynomial import legendre as npleg

from hofem.polynomials import (
    lagrange_deriv_matrix,
    lagrange_interp_matrix,
    simplex_barycentric_nodes,
    simplex_lagrange,
    simplex_lattice,
    simplex_nodes,
    simplex_vandermonde,
    simplex_vandermonde_grad,
)
from hofem.quadrature import (
    gauss_quadrature,
    lobatto_quadrature,
    simplex_quadrature,
    symmetric_rule_degrees,
)

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def monomial_integral_interval(k):
    """Integral of x^k over [-1, 1]."""
    return 0.0 if k % 2 else 2.0 / (k + 1)


def monomial_integral_simplex(exponents):
    """Integral of prod x_d^a_d over the unit simplex: prod a_d! / (sum a_d + dim)!."""
    dim = len(exponents)
    num = math.prod(math.factorial(a) for a in exponents)
    return num / math.factorial(sum(exponents) + dim)


def exponents_up_to(dim, degree):
    """All exponent tuples of total degree <= degree."""
    return [e for e in itertools.product(range(degree + 1), repeat=dim) if sum(e) <= degree]


def vertices(dim):
    """Vertices of the unit simplex, (dim + 1, dim): origin first, then e_1..e_dim."""
    return np.vstack([np.zeros(dim), np.eye(dim)])


def simplex_sample(dim, m):
    """Equispaced lattice of order m on the unit simplex (dense sample), (num, dim)."""
    lat = simplex_lattice(dim, m)
    return lat[:, 1:] / m


def random_simplex_points(dim, n, rng):
    """Random points inside the unit simplex, (n, dim)."""
    lam = rng.dirichlet(np.ones(dim + 1), size=n)  # (n, dim+1)
    return lam[:, 1:]


def random_polynomial(dim, degree, rng):
    """Random polynomial of total degree `degree`: (f, grad f) callables of (n, dim) points."""
    exps = exponents_up_to(dim, degree)
    coef = rng.standard_normal(len(exps))

    def f(x):
        return sum(c * np.prod(x ** np.array(e), axis=1) for c, e in zip(coef, exps, strict=True))

    def grad(x):
        out = np.zeros((dim, x.shape[0]))
        for c, e in zip(coef, exps, strict=True):
            for d in range(dim):
                if e[d] == 0:
                    continue
                ed = np.array(e)
                ed[d] -= 1
                out[d] += c * e[d] * np.prod(x**ed, axis=1)
        return out

    return f, grad


# ---------------------------------------------------------------------------------------------
# 1D Gauss and Gauss-Lobatto
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("Q", range(1, 21))
def test_gauss_exact_on_monomials(Q):
    x, w = gauss_quadrature(Q)
    assert x.shape == (Q,) and w.shape == (Q,)
    assert x.dtype == np.float64 and w.dtype == np.float64
    for k in range(2 * Q):
        assert np.sum(w * x**k) == pytest.approx(monomial_integral_interval(k), abs=1e-14)
    # x^(2Q) has the closed-form Gauss error 2^(2Q+1) (Q!)^4 / ((2Q+1) ((2Q)!)^2)
    f = math.factorial
    expected_error = 2 ** (2 * Q + 1) * f(Q) ** 4 / ((2 * Q + 1) * f(2 * Q) ** 2)
    error = monomial_integral_interval(2 * Q) - np.sum(w * x ** (2 * Q))
    assert error == pytest.approx(expected_error, rel=1e-6, abs=2e-14)


@pytest.mark.parametrize("Q", range(1, 21))
def test_gauss_structure_and_reference(Q):
    x, w = gauss_quadrature(Q)
    assert np.all(np.diff(x) > 0)
    assert np.all((x > -1) & (x < 1))
    assert np.all(w > 0)
    np.testing.assert_array_equal(x, -x[::-1])
    np.testing.assert_array_equal(w, w[::-1])
    ref_x, ref_w = npleg.leggauss(Q)
    np.testing.assert_allclose(x, ref_x, rtol=0, atol=2e-15)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=5e-15)
    # the points are the roots of P_Q
    PQ = npleg.Legendre.basis(Q)
    assert np.max(np.abs(PQ(x))) < 1e-13


def test_gauss_known_values():
    x, w = gauss_quadrature(1)
    np.testing.assert_array_equal(x, [0.0])
    np.testing.assert_array_equal(w, [2.0])
    x, w = gauss_quadrature(2)
    np.testing.assert_allclose(x, [-1 / math.sqrt(3), 1 / math.sqrt(3)], rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(w, [1.0, 1.0], rtol=1e-15, atol=1e-16)
    x, w = gauss_quadrature(3)
    s = math.sqrt(3 / 5)
    np.testing.assert_allclose(x, [-s, 0.0, s], rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(w, [5 / 9, 8 / 9, 5 / 9], rtol=1e-15, atol=1e-16)


def test_gauss_large_Q():
    for Q in (40, 64, 100):
        x, w = gauss_quadrature(Q)
        assert np.sum(w) == pytest.approx(2.0, abs=1e-14)
        ref_x, ref_w = npleg.leggauss(Q)
        np.testing.assert_allclose(x, ref_x, rtol=0, atol=1e-15)
        np.testing.assert_allclose(w, ref_w, rtol=0, atol=5e-15)


@pytest.mark.parametrize("Q", range(2, 21))
def test_lobatto_exact_on_monomials(Q):
    x, w = lobatto_quadrature(Q)
    assert x.shape == (Q,) and w.shape == (Q,)
    for k in range(2 * Q - 2):
        assert np.sum(w * x**k) == pytest.approx(monomial_integral_interval(k), abs=1e-14)
    # x^(2Q-2) has the closed-form GLL error Q (Q-1)^3 2^(2Q-1) ((Q-2)!)^4 / ((2Q-1) ((2Q-2)!)^2)
    f = math.factorial
    expected_error = (
        Q * (Q - 1) ** 3 * 2 ** (2 * Q - 1) * f(Q - 2) ** 4 / ((2 * Q - 1) * f(2 * Q - 2) ** 2)
    )
    error = np.sum(w * x ** (2 * Q - 2)) - monomial_integral_interval(2 * Q - 2)
    assert error == pytest.approx(expected_error, rel=1e-6, abs=2e-14)


@pytest.mark.parametrize("Q", range(2, 21))
def test_lobatto_structure(Q):
    x, w = lobatto_quadrature(Q)
    assert x[0] == -1.0 and x[-1] == 1.0
    assert np.all(np.diff(x) > 0)
    assert np.all(w > 0)
    np.testing.assert_array_equal(x, -x[::-1])
    np.testing.assert_array_equal(w, w[::-1])
    N = Q - 1
    assert w[0] == pytest.approx(2.0 / (N * (N + 1)), rel=1e-15)
    # interior points are the roots of P_N'
    dPN = npleg.Legendre.basis(N).deriv()
    assert np.all(np.abs(dPN(x[1:-1])) < 1e-12)
    # weights are 2 / (N (N + 1) P_N(x)^2)
    PN = npleg.Legendre.basis(N)
    np.testing.assert_allclose(w, 2.0 / (N * (N + 1) * PN(x) ** 2), rtol=1e-14)


def test_lobatto_known_values():
    x, w = lobatto_quadrature(2)
    np.testing.assert_array_equal(x, [-1.0, 1.0])
    np.testing.assert_array_equal(w, [1.0, 1.0])
    x, w = lobatto_quadrature(3)
    np.testing.assert_array_equal(x, [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(w, [1 / 3, 4 / 3, 1 / 3], rtol=1e-15, atol=1e-16)
    x, w = lobatto_quadrature(4)
    s = 1 / math.sqrt(5)
    np.testing.assert_allclose(x, [-1, -s, s, 1], rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(w, [1 / 6, 5 / 6, 5 / 6, 1 / 6], rtol=1e-15, atol=1e-16)


# ---------------------------------------------------------------------------------------------
# Simplex quadrature
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("degree", range(19))
def test_simplex_quadrature_exact_on_monomials(dim, degree):
    x, w = simplex_quadrature(dim, degree)
    assert x.ndim == 2 and x.shape[1] == dim and w.shape == (x.shape[0],)
    assert x.dtype == np.float64 and w.dtype == np.float64
    exps = exponents_up_to(dim, degree)
    E = np.array(exps)  # (num_monomials, dim)
    values = np.prod(x[:, None, :] ** E[None, :, :], axis=2)  # (num_qpts, num_monomials)
    computed = w @ values
    exact = np.array([monomial_integral_simplex(e) for e in exps])
    np.testing.assert_allclose(computed, exact, rtol=1e-13, atol=0)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("degree", [0, 1, 7, 18, 30])
def test_simplex_quadrature_points_inside_weights_positive(dim, degree):
    x, w = simplex_quadrature(dim, degree)
    assert np.all(x > 0)
    assert np.all(x.sum(axis=1) < 1)
    assert np.all(w > 0)
    assert w.sum() == pytest.approx(1 / math.factorial(dim), rel=1e-14)


def test_simplex_quadrature_degree_30_exact():
    for dim in (2, 3):
        x, w = simplex_quadrature(dim, 30)
        for e in [(30,) + (0,) * (dim - 1), (10, 20) + (0,) * (dim - 2), (10,) * dim]:
            value = w @ np.prod(x ** np.array(e), axis=1)
            assert value == pytest.approx(monomial_integral_simplex(e), rel=1e-12)


def test_simplex_quadrature_dim1_is_gauss_on_unit_interval():
    x, w = simplex_quadrature(1, 5)
    g, gw = gauss_quadrature(3)
    np.testing.assert_allclose(x[:, 0], (g + 1) / 2, rtol=0, atol=1e-16)
    np.testing.assert_allclose(w, gw / 2, rtol=0, atol=1e-16)


# ---------------------------------------------------------------------------------------------
# Symmetric simplex rules (Witherden-Vincent tables)
# ---------------------------------------------------------------------------------------------

# Points per degree in the published tables (Witherden & Vincent 2015 and PyFR's files
# pyfr/quadrules/{tri,tet}/*-nN-dD-sp.txt) whose weights are positive and points inside:
# a degree without such a rule (tri 3, 16; tet 4, 11, 12, 14) takes the next one up.
SYMMETRIC_POINTS = {
    2: [1, 3, 6, 6, 7, 12, 15, 16, 19, 25, 28, 33, 37, 42, 49, 60, 60, 67, 73, 79],
    3: [1, 4, 8, 14, 14, 24, 35, 46, 59, 79, 145, 145, 145, 213, 213, 251, 290, 352],
}


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("degree", range(23))
def test_symmetric_simplex_rule_exact_on_monomials(dim, degree):
    x, w = simplex_quadrature(dim, degree, rule="symmetric")
    assert x.shape == (w.size, dim) and x.dtype == np.float64 and w.dtype == np.float64
    exps = exponents_up_to(dim, degree)
    E = np.array(exps)  # (num_monomials, dim)
    values = np.prod(x[:, None, :] ** E[None, :, :], axis=2)  # (num_qpts, num_monomials)
    exact = np.array([monomial_integral_simplex(e) for e in exps])
    np.testing.assert_allclose(w @ values, exact, rtol=1e-13, atol=0)


@pytest.mark.parametrize(
    ("dim", "degree"), [(dim, d) for dim in (2, 3) for d in range(len(SYMMETRIC_POINTS[dim]) + 1)]
)
def test_symmetric_simplex_rule_positive_inside_and_symmetric(dim, degree):
    x, w = simplex_quadrature(dim, degree, rule="symmetric")
    lam = np.hstack([1 - x.sum(axis=1, keepdims=True), x])  # (Q, dim + 1) barycentric
    assert np.all(w > 0)
    assert np.all(lam > 0)
    assert w.sum() == pytest.approx(1 / math.factorial(dim), rel=1e-14)
    # invariant under every permutation of the vertices: each permuted point is a point
    # of the rule with the same weight
    key = np.round(np.hstack([lam, w[:, None]]), 12)  # (Q, dim + 2)
    rows = {tuple(r) for r in key}
    for perm in itertools.permutations(range(dim + 1)):
        moved = np.hstack([lam[:, perm], w[:, None]])
        assert {tuple(r) for r in np.round(moved, 12)} == rows, perm


@pytest.mark.parametrize("dim", [2, 3])
def test_symmetric_simplex_rule_sizes_are_the_tables(dim):
    sizes = symmetric_rule_degrees(dim)
    assert sizes == dict(enumerate(SYMMETRIC_POINTS[dim], start=1))
    for degree, n in sizes.items():
        assert simplex_quadrature(dim, degree, rule="symmetric")[1].size == n
        # never more points than the collapsed rule of the same degree, except on the
        # triangle at degree 3 (6 symmetric points against a 2 x 2 product)
        collapsed = simplex_quadrature(dim, degree)[1].size
        assert n <= collapsed or (dim, degree) == (2, 3)
    if dim == 3:
        assert sizes[6] == 24 and simplex_quadrature(3, 6)[1].size == 64  # stiffness, p = 4
        assert sizes[16] == 251 and simplex_quadrature(3, 16)[1].size == 729  # mass, p = 8


def test_symmetric_simplex_rule_degree_zero_and_beyond_the_tables():
    for dim in (2, 3):
        x0, w0 = simplex_quadrature(dim, 0, rule="symmetric")
        x1, w1 = simplex_quadrature(dim, 1, rule="symmetric")
        np.testing.assert_array_equal(x0, x1)
        np.testing.assert_array_equal(w0, w1)
        for degree in (len(SYMMETRIC_POINTS[dim]) + 1, 24):  # the collapsed rule takes over
            xs, ws = simplex_quadrature(dim, degree, rule="symmetric")
            xc, wc = simplex_quadrature(dim, degree)
            np.testing.assert_array_equal(xs, xc)
            np.testing.assert_array_equal(ws, wc)
    xs, ws = simplex_quadrature(1, 5, rule="symmetric")
    xc, wc = simplex_quadrature(1, 5)
    np.testing.assert_array_equal(xs, xc)
    np.testing.assert_array_equal(ws, wc)


def test_symmetric_simplex_rule_returns_copies():
    x, w = simplex_quadrature(3, 6, rule="symmetric")
    x[:] = -1.0
    w[:] = -1.0
    x, w = simplex_quadrature(3, 6, rule="symmetric")
    assert np.all(x > 0) and np.all(w > 0)


def test_simplex_rule_tables_carry_their_provenance():
    import json
    from pathlib import Path

    import hofem

    folder = Path(hofem.__file__).parent / "data" / "simplex_rules"
    for name in ("triangle", "tet"):
        data = json.loads((folder / f"{name}.json").read_text())
        assert "github.com/PyFR/PyFR" in data["source"]
        assert "Witherden" in data["citation"] and "BSD-3-Clause" in data["license"]
        assert all(r["num_points"] == len(r["points_weights"]) for r in data["rules"])


def test_simplex_quadrature_bad_rule():
    with pytest.raises(ValueError, match=r"rule must be 'collapsed' or 'symmetric'"):
        simplex_quadrature(3, 2, rule="gauss")


@pytest.mark.parametrize("dim", [1, 4])
def test_symmetric_rule_degrees_bad_dim(dim):
    with pytest.raises(ValueError, match=r"dim must be 2 \(triangle\) or 3"):
        symmetric_rule_degrees(dim)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("Q", [0, -3, 2.5, 2.0, "3", None, True])
def test_gauss_bad_Q(Q):
    with pytest.raises(ValueError, match=r"Q must be an integer >= 1"):
        gauss_quadrature(Q)


@pytest.mark.parametrize("Q", [1, 0, 3.5])
def test_lobatto_bad_Q(Q):
    with pytest.raises(ValueError, match=r"Q must be an integer >= 2"):
        lobatto_quadrature(Q)


def test_integer_like_inputs_accepted():
    x, _ = gauss_quadrature(np.int64(3))
    assert x.shape == (3,)
    x, _ = simplex_quadrature(np.int32(2), np.int64(4))
    assert x.shape[1] == 2


@pytest.mark.parametrize("dim", [0, 4, 2.0, -1])
def test_simplex_quadrature_bad_dim(dim):
    with pytest.raises(ValueError, match=r"dim must be an integer in 1\.\.3"):
        simplex_quadrature(dim, 2)


@pytest.mark.parametrize("degree", [-1, 1.5])
def test_simplex_quadrature_bad_degree(degree):
    with pytest.raises(ValueError, match=r"degree must be an integer >= 0"):
        simplex_quadrature(2, degree)


def test_polynomials_bad_input():
    with pytest.raises(ValueError, match=r"order must be an integer >= 1"):
        simplex_nodes(2, 0)
    with pytest.raises(ValueError, match=r"order must be an integer >= 1"):
        simplex_lagrange(3, 0, np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"dim must be an integer in 1\.\.3"):
        simplex_nodes(4, 2)
    with pytest.raises(ValueError, match=r"dim must be an integer in 1\.\.3"):
        simplex_lattice(0, 2)
    with pytest.raises(ValueError, match=r"order must be an integer >= 0"):
        simplex_lattice(2, -1)
    with pytest.raises(ValueError, match=r"order must be an integer >= 0"):
        simplex_vandermonde(2, 1.5, np.zeros((1, 2)))
    with pytest.raises(ValueError, match=r"points must have shape \(num_points, 2\)"):
        simplex_vandermonde(2, 2, np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"points must have shape \(num_points, 3\)"):
        simplex_lagrange(3, 2, np.zeros(4))
    with pytest.raises(ValueError, match=r"nodes must be distinct"):
        lagrange_interp_matrix([0.0, 0.5, 0.5], [0.1])
    with pytest.raises(ValueError, match=r"nodes must be distinct"):
        lagrange_deriv_matrix([1.0, -1.0, 1.0], [0.1])
    with pytest.raises(ValueError, match=r"nodes must be a non-empty 1D array"):
        lagrange_interp_matrix(np.zeros((2, 2)), [0.1])


# ---------------------------------------------------------------------------------------------
# 1D Lagrange matrices
# ---------------------------------------------------------------------------------------------


def node_sets():
    rng = np.random.default_rng(1)
    yield lobatto_quadrature(7)[0]
    yield gauss_quadrature(5)[0]
    yield np.array([3.0])
    yield np.array([0.25, 2.0])
    yield np.sort(rng.uniform(2.0, 5.0, 6))
    yield rng.permutation(lobatto_quadrature(12)[0])  # unsorted nodes are allowed


@pytest.mark.parametrize("nodes", list(node_sets()))
def test_lagrange_cardinality(nodes):
    B = lagrange_interp_matrix(nodes, nodes)
    np.testing.assert_array_equal(B, np.eye(nodes.size))
    assert B.dtype == np.float64


@pytest.mark.parametrize("nodes", list(node_sets()))
def test_lagrange_exact_on_polynomials(nodes):
    rng = np.random.default_rng(2)
    n = nodes.size
    lo, hi = nodes.min(), nodes.max()
    points = np.concatenate([rng.uniform(lo - 0.2, hi + 0.2, 9), nodes])
    B = lagrange_interp_matrix(nodes, points)
    D = lagrange_deriv_matrix(nodes, points)
    assert B.shape == (points.size, n) and D.shape == (points.size, n)
    scale = max(1.0, abs(lo), abs(hi))
    for deg in range(n):
        c = np.zeros(deg + 1)
        c[-1] = 1.0
        poly = np.polynomial.Polynomial(c, domain=[lo, hi] if hi > lo else [-1, 1])
        tol = 1e-12 * scale**deg * n
        np.testing.assert_allclose(B @ poly(nodes), poly(points), rtol=0, atol=tol)
        np.testing.assert_allclose(D @ poly(nodes), poly.deriv()(points), rtol=0, atol=tol * n)


def test_lagrange_deriv_known_gll3():
    nodes, _ = lobatto_quadrature(3)
    D = lagrange_deriv_matrix(nodes, nodes)
    expected = np.array([[-1.5, 2.0, -0.5], [-0.5, 0.0, 0.5], [0.5, -2.0, 1.5]])
    np.testing.assert_allclose(D, expected, rtol=0, atol=1e-15)


def test_lagrange_deriv_rows_sum_to_zero():
    nodes, _ = lobatto_quadrature(10)
    points = np.linspace(-1, 1, 33)
    np.testing.assert_allclose(lagrange_deriv_matrix(nodes, points).sum(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(lagrange_interp_matrix(nodes, points).sum(axis=1), 1, atol=1e-14)


# ---------------------------------------------------------------------------------------------
# Simplex lattice and nodes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", range(0, 7))
def test_simplex_lattice_ordering(dim, order):
    lat = simplex_lattice(dim, order)
    expected = []
    p = order
    if dim == 1:
        expected = [(p - i, i) for i in range(p + 1)]
    elif dim == 2:
        expected = [(p - i - j, i, j) for j in range(p + 1) for i in range(p + 1 - j)]
    else:
        expected = [
            (p - i - j - k, i, j, k)
            for k in range(p + 1)
            for j in range(p + 1 - k)
            for i in range(p + 1 - j - k)
        ]
    np.testing.assert_array_equal(lat, np.array(expected).reshape(-1, dim + 1))
    assert np.issubdtype(lat.dtype, np.integer)
    assert lat.shape == (math.comb(order + dim, dim), dim + 1)


def test_simplex_lattice_small_triangle_literal():
    lat = simplex_lattice(2, 2)
    expected = [(2, 0, 0), (1, 1, 0), (0, 2, 0), (1, 0, 1), (0, 1, 1), (0, 0, 2)]
    np.testing.assert_array_equal(lat, expected)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", range(1, 11))
def test_simplex_nodes_count_and_inside(dim, order):
    x = simplex_nodes(dim, order)
    assert x.shape == (math.comb(order + dim, dim), dim)
    assert x.dtype == np.float64
    assert np.all(x >= 0)
    assert np.all(x.sum(axis=1) <= 1 + 2e-16)
    lam = simplex_barycentric_nodes(dim, order)
    np.testing.assert_array_equal(lam[:, 1:], x)
    np.testing.assert_allclose(lam.sum(axis=1), 1.0, rtol=0, atol=4e-16)
    # distinct nodes
    assert np.unique(np.round(x, 12), axis=0).shape[0] == x.shape[0]


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 2])
def test_simplex_nodes_equispaced_for_low_order(dim, order):
    x = simplex_nodes(dim, order)
    lat = simplex_lattice(dim, order)
    np.testing.assert_array_equal(x, lat[:, 1:] / order)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", range(1, 13))
def test_simplex_nodes_on_edges_are_gll(dim, order):
    lat = simplex_lattice(dim, order)
    lam = simplex_barycentric_nodes(dim, order)
    x = simplex_nodes(dim, order)
    V = vertices(dim)
    gll, _ = lobatto_quadrature(order + 1)
    for a, b in itertools.combinations(range(dim + 1), 2):
        others = [c for c in range(dim + 1) if c not in (a, b)]
        on_edge = np.all(lat[:, others] == 0, axis=1)
        assert on_edge.sum() == order + 1
        # exactly on the edge: the other barycentric coordinates are exactly zero
        assert np.all(lam[on_edge][:, others] == 0.0)
        # the node with lattice index i at vertex b sits at GLL point i mapped from a to b
        i_b = lat[on_edge, b]
        expected = np.outer((1 - gll[i_b]) / 2, V[a]) + np.outer((1 + gll[i_b]) / 2, V[b])
        np.testing.assert_allclose(x[on_edge], expected, rtol=0, atol=2e-16)
        # reversing the edge gives the same node set (bit for bit)
        s_a = np.sort(lam[on_edge, a])
        s_b = np.sort(lam[on_edge, b])
        np.testing.assert_array_equal(s_a, s_b)
        # and each node's parameter from a is one minus its parameter from b
        np.testing.assert_allclose(lam[on_edge, a], 1 - lam[on_edge, b], rtol=0, atol=2e-16)
    if dim >= 2:
        # the hypotenuse of the triangle: x + y == 1 exactly
        on_hyp = np.all(lat[:, [0, *range(3, dim + 1)]] == 0, axis=1)
        assert np.all(x[on_hyp, 0] + x[on_hyp, 1] == 1.0)


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("order", range(1, 11))
def test_simplex_nodes_permutation_equivariant(dim, order):
    """Any vertex relabeling maps the node set onto itself bit for bit: shared edges and
    faces get identical nodes whichever element and vertex order they are computed from."""
    lat = simplex_lattice(dim, order)
    lam = simplex_barycentric_nodes(dim, order)
    where = {tuple(row): n for n, row in enumerate(lat)}
    for perm in itertools.permutations(range(dim + 1)):
        perm = list(perm)
        image = [where[tuple(row[perm])] for row in lat]
        np.testing.assert_array_equal(lam[image], lam[:, perm])


def test_tet_face_nodes_lie_on_faces():
    order = 7
    lat = simplex_lattice(3, order)
    lam = simplex_barycentric_nodes(3, order)
    for c in range(4):
        on_face = lat[:, c] == 0
        assert on_face.sum() == math.comb(order + 2, 2)
        assert np.all(lam[on_face, c] == 0.0)
    x = simplex_nodes(3, order)
    assert np.all(x[lat[:, 1] == 0, 0] == 0.0)  # face x = 0
    assert np.all(x[lat[:, 2] == 0, 1] == 0.0)  # face y = 0
    assert np.all(x[lat[:, 3] == 0, 2] == 0.0)  # face z = 0


def test_simplex_nodes_dim1_are_gll():
    for order in range(1, 10):
        x = simplex_nodes(1, order)
        gll, _ = lobatto_quadrature(order + 1)
        np.testing.assert_allclose(x[:, 0], (gll + 1) / 2, rtol=0, atol=1e-16)


def lebesgue_constant(dim, nodes, sample):
    V_nodes = simplex_vandermonde(dim, order_from_count(dim, nodes.shape[0]), nodes)
    V = simplex_vandermonde(dim, order_from_count(dim, nodes.shape[0]), sample)
    cardinal = np.linalg.solve(V_nodes.T, V.T).T  # (num_sample, num_nodes)
    return np.abs(cardinal).sum(axis=1).max()


def order_from_count(dim, num_nodes):
    p = 0
    while math.comb(p + dim, dim) < num_nodes:
        p += 1
    assert math.comb(p + dim, dim) == num_nodes
    return p


def test_lebesgue_constant_triangle_p8():
    p = 8
    sample = simplex_sample(2, 120)
    warp = lebesgue_constant(2, simplex_nodes(2, p), sample)
    equi = lebesgue_constant(2, simplex_lattice(2, p)[:, 1:] / p, sample)
    assert warp < 10
    assert warp < equi / 3
    # growth is moderate: each order adds little
    previous = [lebesgue_constant(2, simplex_nodes(2, q), sample) for q in range(1, p)]
    assert np.all(np.diff([*previous, warp]) < 1.5)


def test_lebesgue_constant_tet_p6():
    p = 6
    sample = simplex_sample(3, 30)
    warp = lebesgue_constant(3, simplex_nodes(3, p), sample)
    equi = lebesgue_constant(3, simplex_lattice(3, p)[:, 1:] / p, sample)
    assert warp < 10
    assert warp < equi / 1.5


# ---------------------------------------------------------------------------------------------
# Orthonormal basis and nodal Lagrange basis
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [0, 1, 4, 7])
def test_simplex_vandermonde_orthonormal(dim, order):
    x, w = simplex_quadrature(dim, 2 * order)
    V = simplex_vandermonde(dim, order, x)
    assert V.shape == (x.shape[0], math.comb(order + dim, dim))
    mass = V.T @ (w[:, None] * V)
    np.testing.assert_allclose(mass, np.eye(V.shape[1]), rtol=0, atol=1e-13)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_simplex_vandermonde_hierarchical(dim):
    rng = np.random.default_rng(3)
    x = random_simplex_points(dim, 20, rng)
    V5 = simplex_vandermonde(dim, 5, x)
    V3 = simplex_vandermonde(dim, 3, x)
    np.testing.assert_array_equal(V5[:, : V3.shape[1]], V3)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_simplex_vandermonde_grad_finite_differences(dim):
    rng = np.random.default_rng(4)
    order = 5
    x = random_simplex_points(dim, 30, rng) * 0.9 + 0.02
    G = simplex_vandermonde_grad(dim, order, x)
    assert G.shape == (dim, x.shape[0], math.comb(order + dim, dim))
    h = 1e-6
    for d in range(dim):
        e = np.zeros(dim)
        e[d] = h
        fd = (simplex_vandermonde(dim, order, x + e) - simplex_vandermonde(dim, order, x - e)) / (
            2 * h
        )
        np.testing.assert_allclose(G[d], fd, rtol=0, atol=1e-7 * np.abs(G[d]).max())


@pytest.mark.parametrize("dim", [2, 3])
def test_simplex_vandermonde_grad_at_collapsed_vertex(dim):
    """The gradient at the top vertex (and collapsed edge) is the limit from inside."""
    order = 6
    top = np.zeros((1, dim))
    top[0, -1] = 1.0
    G_top = simplex_vandermonde_grad(dim, order, top)
    assert np.all(np.isfinite(G_top))
    rng = np.random.default_rng(5)
    direction = rng.dirichlet(np.ones(dim + 1))[1:] - top[0]  # points into the simplex
    near = top + 1e-7 * direction
    G_near = simplex_vandermonde_grad(dim, order, near)
    np.testing.assert_allclose(G_top, G_near, rtol=0, atol=1e-4 * np.abs(G_top).max())
    # values at the vertex are finite and match too
    V_top = simplex_vandermonde(dim, order, top)
    V_near = simplex_vandermonde(dim, order, near)
    np.testing.assert_allclose(V_top, V_near, rtol=0, atol=1e-4 * np.abs(V_top).max())


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 2, 3, 5, 8])
def test_simplex_lagrange_cardinality_and_partition_of_unity(dim, order):
    nodes = simplex_nodes(dim, order)
    interp, grad = simplex_lagrange(dim, order, nodes)
    n = nodes.shape[0]
    assert interp.shape == (n, n) and grad.shape == (dim, n, n)
    np.testing.assert_allclose(interp, np.eye(n), rtol=0, atol=1e-12)
    rng = np.random.default_rng(6)
    x = random_simplex_points(dim, 25, rng)
    interp, grad = simplex_lagrange(dim, order, x)
    np.testing.assert_allclose(interp.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad.sum(axis=2), 0.0, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("order", [1, 2, 4, 6])
def test_simplex_lagrange_exact_on_polynomials(dim, order):
    rng = np.random.default_rng(7 + order)
    nodes = simplex_nodes(dim, order)
    # random interior points, the nodes themselves and the vertices (collapsed vertex included)
    x = np.vstack([random_simplex_points(dim, 20, rng), nodes, vertices(dim)])
    interp, grad = simplex_lagrange(dim, order, x)
    for degree in sorted({1, order}):
        f, df = random_polynomial(dim, degree, rng)
        u = f(nodes)
        np.testing.assert_allclose(interp @ u, f(x), rtol=0, atol=1e-11)
        np.testing.assert_allclose(grad @ u, df(x), rtol=0, atol=1e-9)


def test_simplex_lagrange_linear_gradient_is_constant():
    for dim in (2, 3):
        x = random_simplex_points(dim, 10, np.random.default_rng(8))
        _, grad = simplex_lagrange(dim, 1, x)
        # phi_0 = 1 - sum x, phi_m = x_m
        expected = np.vstack([-np.ones(dim), np.eye(dim)]).T  # (dim, num_nodes)
        np.testing.assert_allclose(grad, np.broadcast_to(expected[:, None, :], grad.shape),
                                   atol=1e-14)  # fmt: skip


def test_simplex_lagrange_dim1_matches_1d_lagrange():
    order = 6
    nodes = simplex_nodes(1, order)[:, 0]
    points = np.linspace(0, 1, 17)
    interp, grad = simplex_lagrange(1, order, points[:, None])
    np.testing.assert_allclose(interp, lagrange_interp_matrix(nodes, points), atol=1e-12)
    np.testing.assert_allclose(grad[0], lagrange_deriv_matrix(nodes, points), atol=1e-10)
