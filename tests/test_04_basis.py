"""Bases: tensor sum factorization vs dense Kronecker, adjointness, exactness, simplices."""

import numpy as np
import pytest

import hofem as hf
from hofem.polynomials import simplex_nodes


@pytest.fixture
def rng():
    return np.random.default_rng(3)


def apply_np(ceed, b, num_elem, t_mode, eval_mode, u):
    u = None if u is None else ceed.asarray(u)
    return ceed.to_numpy(b.apply(num_elem, t_mode, eval_mode, u))


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize(
    ("P", "Q", "mode"),
    [(2, 1, hf.GAUSS), (3, 5, hf.GAUSS), (5, 4, hf.GAUSS_LOBATTO), (4, 4, hf.GAUSS)],
)
def test_tensor_matches_dense_kronecker(ceed, rng, dim, P, Q, mode):
    num_comp, num_elem = 2, 3
    b = ceed.BasisTensorH1Lagrange(dim, num_comp, P, Q, mode)
    u = rng.standard_normal((num_elem, num_comp, P**dim))
    interp = apply_np(ceed, b, num_elem, hf.NOTRANSPOSE, hf.EVAL_INTERP, u)
    np.testing.assert_allclose(interp, u @ b.interp.T, rtol=1e-13, atol=1e-13)
    grad = apply_np(ceed, b, num_elem, hf.NOTRANSPOSE, hf.EVAL_GRAD, u)
    np.testing.assert_allclose(grad, np.einsum("dqp,ecp->edcq", b.grad, u), atol=1e-12)
    v = rng.standard_normal((num_elem, dim, num_comp, Q**dim))
    gt = apply_np(ceed, b, num_elem, hf.TRANSPOSE, hf.EVAL_GRAD, v)
    np.testing.assert_allclose(gt, np.einsum("dqp,edcq->ecp", b.grad, v), atol=1e-12)
    weight = apply_np(ceed, b, num_elem, hf.NOTRANSPOSE, hf.EVAL_WEIGHT, None)
    np.testing.assert_allclose(weight, np.broadcast_to(b.q_weight, (num_elem, Q**dim)))
    assert b.q_weight.sum() == pytest.approx(2.0**dim)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_tensor_matches_same_basis_given_densely(ceed, rng, dim):
    b = ceed.BasisTensorH1Lagrange(dim, 1, 4, 5, hf.GAUSS)
    topology = {1: hf.LINE, 2: hf.QUAD, 3: hf.HEX}[dim]
    dense = ceed.BasisH1(
        topology, 1, b.num_nodes, b.num_qpts, b.interp, b.grad, b.q_ref, b.q_weight
    )
    u = rng.standard_normal((2, 1, b.num_nodes))
    for mode in (hf.EVAL_INTERP, hf.EVAL_GRAD):
        np.testing.assert_allclose(
            apply_np(ceed, b, 2, hf.NOTRANSPOSE, mode, u),
            apply_np(ceed, dense, 2, hf.NOTRANSPOSE, mode, u),
            atol=1e-12,
        )


def all_bases(ceed):
    yield ceed.BasisTensorH1Lagrange(3, 2, 3, 4, hf.GAUSS)
    yield ceed.BasisTensorH1Lagrange(2, 1, 5, 5, hf.GAUSS_LOBATTO)
    yield ceed.BasisTensorH1Lagrange(1, 3, 2, 3, hf.GAUSS)
    yield ceed.BasisH1Lagrange(hf.TRIANGLE, 2, 3, 6)
    yield ceed.BasisH1Lagrange(hf.TET, 1, 2, 4)


def test_transposes_are_adjoint(ceed, rng):
    num_elem = 3
    for b in all_bases(ceed):
        u = rng.standard_normal((num_elem, b.num_comp, b.num_nodes))
        for mode in (hf.EVAL_INTERP, hf.EVAL_GRAD):
            bu = b.apply(num_elem, hf.NOTRANSPOSE, mode, ceed.asarray(u))
            v = ceed.asarray(rng.standard_normal(bu.shape))
            btv = b.apply(num_elem, hf.TRANSPOSE, mode, v)
            lhs, rhs = float((bu * v).sum()), float((ceed.asarray(u) * btv).sum())
            assert lhs == pytest.approx(rhs, rel=1e-12), (b, mode)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_tensor_polynomial_exactness(ceed, dim):
    """Interpolating a degree-(P-1) polynomial and its gradient is exact at Q points."""
    P, Q = 4, 3
    b = ceed.BasisTensorH1Lagrange(dim, 1, P, Q, hf.GAUSS)
    nodes, _ = hf.lobatto_quadrature(P)
    grid = np.stack(np.meshgrid(*[nodes] * dim, indexing="ij")[::-1], -1).reshape(-1, dim)
    coef = np.arange(1, dim + 1)

    def f(x):
        return np.prod(x**3 + coef * x**2, axis=-1)

    def df(x):
        parts = []
        for d in range(dim):
            g = np.prod(np.delete(x**3 + coef * x**2, d, axis=-1), axis=-1)
            parts.append(g * (3 * x[:, d] ** 2 + 2 * coef[d] * x[:, d]))
        return np.stack(parts)

    u = f(grid)[None, None]
    np.testing.assert_allclose(
        apply_np(ceed, b, 1, hf.NOTRANSPOSE, hf.EVAL_INTERP, u)[0, 0], f(b.q_ref), atol=1e-12
    )
    np.testing.assert_allclose(
        apply_np(ceed, b, 1, hf.NOTRANSPOSE, hf.EVAL_GRAD, u)[0, :, 0], df(b.q_ref), atol=1e-11
    )


@pytest.mark.parametrize(("topology", "dim"), [(hf.TRIANGLE, 2), (hf.TET, 3)])
@pytest.mark.parametrize("order", [1, 2, 4, 8])
def test_simplex_partition_of_unity_and_linear_gradient(ceed, topology, dim, order):
    b = ceed.BasisH1Lagrange(topology, 1, order, 2 * order)
    np.testing.assert_allclose(b.interp.sum(axis=1), 1.0, atol=1e-11)
    np.testing.assert_allclose(b.grad.sum(axis=2), 0.0, atol=1e-9)
    nodes = simplex_nodes(dim, order)
    a = np.array([0.5, -2.0, 3.0][:dim])
    u = (nodes @ a + 1.0)[None, None]
    grad = apply_np(ceed, b, 1, hf.NOTRANSPOSE, hf.EVAL_GRAD, u)[0, :, 0]
    np.testing.assert_allclose(grad, np.broadcast_to(a[:, None], grad.shape), atol=1e-9)
    assert b.q_weight.sum() == pytest.approx(1.0 / (2 if dim == 2 else 6))


def test_properties(ceed):
    b = ceed.BasisTensorH1Lagrange(3, 2, 3, 4, hf.GAUSS)
    assert (b.dim, b.num_comp, b.num_nodes, b.num_qpts, b.P_1d, b.Q_1d) == (3, 2, 27, 64, 3, 4)
    assert b.interp.shape == (64, 27) and b.grad.shape == (3, 64, 27) and b.q_ref.shape == (64, 3)
    np.testing.assert_allclose(b.q_ref[1] - b.q_ref[0], [b.q_ref_1d[1] - b.q_ref_1d[0], 0, 0])
    t = ceed.BasisH1Lagrange(hf.TET, 1, 3, 6)
    assert t.num_nodes == 20 and not t.is_tensor and t.topology is hf.TET


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda c: c.BasisTensorH1Lagrange(4, 1, 3, 3), "dim must be 1, 2 or 3"),
        (lambda c: c.BasisTensorH1Lagrange(3, 1, 1, 3), "P must be an integer >= 2"),
        (lambda c: c.BasisTensorH1Lagrange(3, 1, 3, 0), "Q must be an integer >= 1"),
        (lambda c: c.BasisTensorH1Lagrange(3, 1, 3, 1, hf.GAUSS_LOBATTO), "Q must be >= 2"),
        (lambda c: c.BasisTensorH1Lagrange(3, 0, 3, 3), "num_comp must be an integer >= 1"),
        (lambda c: c.BasisTensorH1Lagrange(3, 1, 3, 3, "gauss"), "quad_mode must be"),
        (
            lambda c: c.BasisTensorH1(1, 1, 2, 2, np.eye(3), np.eye(2), [0, 1], [1, 1]),
            r"interp_1d must have shape \(2, 2\)",
        ),
        (
            lambda c: c.BasisH1(
                hf.TRIANGLE,
                1,
                3,
                2,
                np.ones((2, 3)),
                np.ones((3, 2, 3)),
                np.ones((2, 2)),
                np.ones(2),
            ),
            r"grad must have shape \(2, 2, 3\)",
        ),
        (lambda c: c.BasisH1("tri", 1, 3, 1, 0, 0, 0, 0), "topology must be one of"),
        (lambda c: c.BasisH1Lagrange(hf.HEX, 1, 2, 4), "use BasisTensorH1Lagrange"),
        (lambda c: c.BasisH1Lagrange(hf.TET, 1, 0, 4), "order must be an integer >= 1"),
    ],
)
def test_construction_validation(ceed, build, message):
    with pytest.raises(ValueError, match=message):
        build(ceed)


def test_apply_validation(ceed):
    b = ceed.BasisTensorH1Lagrange(2, 1, 3, 3)
    u = ceed.asarray(np.zeros((2, 1, 9)))
    with pytest.raises(ValueError, match=r"u must have shape \(3, 1, 9\)"):
        b.apply(3, hf.NOTRANSPOSE, hf.EVAL_INTERP, u)
    with pytest.raises(ValueError, match=r"u must have shape \(2, 2, 1, 9\)"):
        b.apply(2, hf.TRANSPOSE, hf.EVAL_GRAD, u)
    with pytest.raises(ValueError, match="eval_mode must be"):
        b.apply(2, hf.NOTRANSPOSE, hf.EVAL_NONE, u)
    with pytest.raises(ValueError, match="EVAL_WEIGHT has no transpose"):
        b.apply(2, hf.TRANSPOSE, hf.EVAL_WEIGHT)
    with pytest.raises(TypeError, match="dtype float64"):
        b.apply(2, hf.NOTRANSPOSE, hf.EVAL_INTERP, ceed.asarray(np.zeros((2, 1, 9), np.int64)))
