"""Operators: apply vs assembled matrix vs element matrices, volumes, diagonal, validation."""

import numpy as np
import pytest
import scipy.sparse
from util import grid_coords, grid_offsets, mass_fields, mass_operator, poisson_operator

import hofem as hf
from hofem.backends.contract import Backend
from hofem.polynomials import simplex_nodes
from hofem.vector_ops import VectorOps


@pytest.fixture
def rng():
    return np.random.default_rng(5)


def dense_apply(ceed, op):
    """The operator's matrix by applying it to unit vectors."""
    _n_out, n_in = op.shape
    cols = []
    for j in range(n_in):
        e = np.zeros(n_in)
        e[j] = 1.0
        cols.append(ceed.to_numpy(op(ceed.asarray(e))))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("kind", ["mass", "poisson"])
def test_apply_equals_assembled_and_element_matrices(ceed, dim, kind):
    build = mass_operator if kind == "mass" else poisson_operator
    op, s = build(ceed, n=2, p=2, dim=dim, warp=0.15)
    A = op.linear_assemble()
    assert scipy.sparse.issparse(A) or type(A).__module__.startswith("cupyx")
    A = A.toarray()
    A = ceed.to_numpy(A)
    np.testing.assert_allclose(dense_apply(ceed, op), A, atol=1e-13)
    np.testing.assert_allclose(A, A.T, atol=1e-13)
    # independent oracle: element matrices from dense basis matrices and the stored qdata
    b = s["basis"]
    qdata = ceed.to_numpy(s["r_q"].apply(s["qdata"]))  # (num_elem, size, Q)
    num_elem, Q = s["offsets"].shape[0], b.num_qpts
    expected = np.zeros_like(A)
    for e in range(num_elem):
        if kind == "mass":
            qd = qdata[e, 0]
            Ae = b.interp.T @ (qd[:, None] * b.interp)
        else:
            qd = qdata[e]
            pairs = {
                1: [(0, 0)],
                2: [(0, 0), (1, 1), (0, 1)],
                3: [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)],
            }[dim]
            K = np.zeros((dim, dim, Q))
            for k, (i, j) in enumerate(pairs):
                K[i, j] = K[j, i] = qd[k]
            Ae = np.einsum("iqa,ijq,jqb->ab", b.grad, K, b.grad)
        idx = s["offsets"][e]
        expected[np.ix_(idx, idx)] += Ae
    np.testing.assert_allclose(A, expected, atol=1e-13)


def test_diagonal_matches_assembled(ceed):
    for build in (mass_operator, poisson_operator):
        op, _ = build(ceed, n=2, p=3, dim=3, warp=0.1)
        diag = ceed.to_numpy(op.linear_assemble_diagonal())
        np.testing.assert_allclose(diag, ceed.to_numpy(op.linear_assemble().diagonal()), rtol=1e-13)


@pytest.mark.parametrize("dim", [2, 3])
def test_volume_and_poisson_energy_of_warped_box(ceed, dim):
    """1^T M 1 = |box| = 1 and x^T K x = |box| for the warped (boundary-fixed) unit box."""
    mass, _ = mass_operator(ceed, n=3, p=3, dim=dim, warp=0.2)
    one = ceed.asarray(np.ones(mass.shape[0]))
    assert float(one @ mass(one)) == pytest.approx(1.0, rel=1e-13)
    poisson, _ = poisson_operator(ceed, n=3, p=3, dim=dim, warp=0.2)
    x = ceed.asarray(grid_coords(3, 3, dim, 0.2)[: poisson.shape[0]])
    assert float(x @ poisson(x)) == pytest.approx(1.0, rel=1e-12)
    assert float(abs(poisson(one)).max()) < 1e-12


def test_skewed_hex_volume(ceed):
    """Order-3 mass operator on one trilinear skewed hex: exact volume."""
    corners = np.array(
        [
            [0, 0, 0],
            [2, 0, 0],
            [0, 1, 0],
            [2, 1.5, 0],
            [0.3, 0, 1],
            [2.1, 0, 1.2],
            [0.2, 1, 1],
            [2.4, 1.4, 1.1],
        ]
    )
    P, q = 4, 5
    x1d = (hf.lobatto_quadrature(P)[0] + 1) / 2
    t = np.stack(np.meshgrid(x1d, x1d, x1d, indexing="ij")[::-1], -1).reshape(-1, 3)
    shape = np.prod(
        [np.where(np.arange(8)[:, None] >> d & 1, t[:, d], 1 - t[:, d]) for d in range(3)], axis=0
    )
    coords = (shape.T @ corners).T.ravel()
    offsets = np.arange(P**3).reshape(1, -1)
    r_x = ceed.ElemRestriction(1, P**3, 3, P**3, 3 * P**3, offsets)
    r_u = ceed.ElemRestriction(1, P**3, 1, 1, P**3, offsets)
    r_q = ceed.StridedElemRestriction(1, q**3, 1, q**3, hf.STRIDES_BACKEND)
    geo = ceed.BasisTensorH1Lagrange(3, 3, P, q)
    basis = ceed.BasisTensorH1Lagrange(3, 1, P, q)
    build = ceed.Operator(ceed.QFunctionByName("Mass3DBuild"))
    build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
    build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
    build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
    qdata = build(ceed.asarray(coords))
    mass = ceed.Operator(ceed.QFunctionByName("MassApply"))
    mass.set_field("u", r_u, basis, hf.VECTOR_ACTIVE)
    mass.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
    mass.set_field("v", r_u, basis, hf.VECTOR_ACTIVE)
    one = ceed.asarray(np.ones(P**3))
    # exact: trilinear det J has degree <= 2 per direction, integrated exactly by 5 Gauss points
    g, w = np.polynomial.legendre.leggauss(4)
    g, w = (g + 1) / 2, w / 2
    volume = 0.0
    for i, j, k in np.ndindex(4, 4, 4):
        p = np.array([g[i], g[j], g[k]])
        J = np.zeros((3, 3))
        for a in range(8):
            bits = [(a >> d) & 1 for d in range(3)]
            for d in range(3):
                f = [(p[e] if bits[e] else 1 - p[e]) for e in range(3)]
                f[d] = 1.0 if bits[d] else -1.0
                J[:, d] += np.prod(f) * corners[a]
        volume += w[i] * w[j] * w[k] * np.linalg.det(J)
    assert float(one @ mass(one)) == pytest.approx(volume, rel=1e-13)


@pytest.mark.parametrize("order", [1, 3])
def test_tet_volume_and_poisson(ceed, order):
    """One affine tet: volume |det|/6 and exact stiffness energy of a linear function."""
    verts = np.array([[0.1, 0, 0], [1.2, 0.1, 0], [0.2, 0.9, 0.1], [0.3, 0.2, 1.4]])
    A = verts[1:] - verts[0]  # rows: edge vectors = dx/dxi_d
    nodes = simplex_nodes(3, order)  # (P, 3)
    x = verts[0] + nodes @ A  # (P, 3) physical node coordinates
    P = len(nodes)
    geo = ceed.BasisH1Lagrange(hf.TET, 3, order, 2 * order)
    basis = ceed.BasisH1Lagrange(hf.TET, 1, order, 2 * order)
    Q = basis.num_qpts
    offsets = np.arange(P).reshape(1, P)
    r_x = ceed.ElemRestriction(1, P, 3, P, 3 * P, offsets)
    r_u = ceed.ElemRestriction(1, P, 1, 1, P, offsets)
    out = {}
    for name, size in (("Mass3DBuild", 1), ("Poisson3DBuild", 6)):
        r_q = ceed.StridedElemRestriction(1, Q, size, Q * size, hf.STRIDES_BACKEND)
        build = ceed.Operator(ceed.QFunctionByName(name))
        build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
        build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
        build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
        out[name] = (r_q, build(ceed.asarray(x.T.ravel())))
    mass = ceed.Operator(ceed.QFunctionByName("MassApply"))
    mass.set_field("u", r_u, basis, hf.VECTOR_ACTIVE)
    mass.set_field("qdata", *out["Mass3DBuild"][:1], hf.BASIS_NONE, out["Mass3DBuild"][1])
    mass.set_field("v", r_u, basis, hf.VECTOR_ACTIVE)
    one = ceed.asarray(np.ones(P))
    assert float(one @ mass(one)) == pytest.approx(abs(np.linalg.det(A)) / 6, rel=1e-13)
    lap = ceed.Operator(ceed.QFunctionByName("Poisson3DApply"))
    lap.set_field("du", r_u, basis, hf.VECTOR_ACTIVE)
    lap.set_field("qdata", out["Poisson3DBuild"][0], hf.BASIS_NONE, out["Poisson3DBuild"][1])
    lap.set_field("dv", r_u, basis, hf.VECTOR_ACTIVE)
    g = np.array([1.0, -2.0, 0.5])
    u = ceed.asarray(x @ g + 3.0)
    energy = float(u @ lap(u))
    assert energy == pytest.approx(g @ g * abs(np.linalg.det(A)) / 6, rel=1e-12)


def test_vector_mass_is_block_diagonal(ceed):
    mass, s = mass_operator(ceed, n=2, p=2, dim=3)
    n = s["num_nodes"]
    offsets = s["offsets"]
    r3 = ceed.ElemRestriction(offsets.shape[0], offsets.shape[1], 3, n, 3 * n, offsets)
    b3 = ceed.BasisTensorH1Lagrange(3, 3, 3, 4)
    op = ceed.Operator(ceed.QFunctionByName("Vector3MassApply"))
    op.set_field("u", r3, b3, hf.VECTOR_ACTIVE)
    op.set_field("qdata", s["r_q"], hf.BASIS_NONE, s["qdata"])
    op.set_field("v", r3, b3, hf.VECTOR_ACTIVE)
    M = ceed.to_numpy(mass.linear_assemble().toarray())
    np.testing.assert_allclose(
        ceed.to_numpy(op.linear_assemble().toarray()), np.kron(np.eye(3), M), atol=1e-14
    )
    np.testing.assert_allclose(
        ceed.to_numpy(op.linear_assemble_diagonal()), np.tile(np.diag(M), 3), rtol=1e-13
    )


def alpha_mass(ctx, u, qdata, v):
    v[0] = ctx["alpha"] * qdata[0] * u[0]


def alpha_mass_qfunction(ceed, alpha, v_mode=hf.EVAL_INTERP):
    """:func:`alpha_mass` as a QFunction: u interpolated, qdata stored, v in ``v_mode``."""
    return ceed.QFunction(
        alpha_mass,
        [("u", 1, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)],
        [("v", 1, v_mode)],
        context={"alpha": alpha},
    )


def test_user_qfunction_and_composite(ceed, rng):
    mass, s = mass_operator(ceed, n=2, p=2, dim=2)
    poisson, _ = poisson_operator(ceed, n=2, p=2, dim=2)
    scaled = mass_fields(ceed, alpha_mass_qfunction(ceed, 3.0), s)
    u = ceed.asarray(rng.standard_normal(mass.shape[1]))
    np.testing.assert_allclose(ceed.to_numpy(scaled(u)), 3 * ceed.to_numpy(mass(u)), rtol=1e-13)
    composite = ceed.CompositeOperator([scaled, poisson])
    expected = 3 * ceed.to_numpy(mass(u)) + ceed.to_numpy(poisson(u))
    np.testing.assert_allclose(ceed.to_numpy(composite(u)), expected, rtol=1e-12)
    v = ceed.asarray(np.ones(mass.shape[0]))
    composite.apply_add(u, v)
    np.testing.assert_allclose(ceed.to_numpy(v), expected + 1, rtol=1e-12)
    np.testing.assert_allclose(
        ceed.to_numpy(composite.linear_assemble().toarray()) @ ceed.to_numpy(u),
        expected,
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        ceed.to_numpy(composite.linear_assemble_diagonal()),
        3 * ceed.to_numpy(mass.linear_assemble_diagonal())
        + ceed.to_numpy(poisson.linear_assemble_diagonal()),
        rtol=1e-13,
    )
    linop = composite.as_linear_operator()
    assert linop.shape == composite.shape
    np.testing.assert_allclose(ceed.to_numpy(linop @ u), expected, rtol=1e-12)


def test_oriented_restriction_assembly(ceed, rng):
    """Sign flips S: the operator becomes S A S, apply and assembly agree."""
    _op, s = mass_operator(ceed, n=2, p=2, dim=2)
    offsets = s["offsets"]
    orients = rng.random(offsets.shape) < 0.3
    r = ceed.ElemRestriction(*offsets.shape, 1, 1, s["num_nodes"], offsets, orients=orients)
    oriented = mass_fields(ceed, ceed.QFunctionByName("MassApply"), s, r_u=r)
    A = ceed.to_numpy(oriented.linear_assemble().toarray())
    np.testing.assert_allclose(dense_apply(ceed, oriented), A, atol=1e-14)
    np.testing.assert_allclose(
        ceed.to_numpy(oriented.linear_assemble_diagonal()), np.diag(A), rtol=1e-13
    )


def test_apply_add_and_validation(ceed):
    op, s = mass_operator(ceed, n=2, p=1, dim=2)
    u = ceed.asarray(np.ones(op.shape[1]))
    v = ceed.asarray(np.ones(op.shape[0]))
    op.apply_add(u, v)
    assert float(v.sum()) == pytest.approx(1.0 + op.shape[0])
    with pytest.raises(ValueError, match=r"u must have shape \(9,\)"):
        op(ceed.asarray(np.ones(8)))
    with pytest.raises(TypeError, match=r"ceed\.asarray"):
        op.apply(list(range(9)), v)
    r_u, b, r_q, qd = s["r_u"], s["basis"], s["r_q"], s["qdata"]
    fresh = ceed.Operator(ceed.QFunctionByName("MassApply"))
    with pytest.raises(ValueError, match=r"operator fields not set: \['u', 'qdata', 'v'\]"):
        fresh(u)
    with pytest.raises(ValueError, match="has no field 'w'"):
        fresh.set_field("w", r_u, b, hf.VECTOR_ACTIVE)
    with pytest.raises(ValueError, match=r"EVAL_NONE fields take hf\.BASIS_NONE"):
        fresh.set_field("qdata", r_q, b, qd)
    b3 = ceed.BasisTensorH1Lagrange(2, 3, 2, 3)
    with pytest.raises(ValueError, match="QFunction field size 1 does not match the basis"):
        fresh.set_field("u", r_u, b3, hf.VECTOR_ACTIVE)
    b_p = ceed.BasisTensorH1Lagrange(2, 1, 3, 3)
    with pytest.raises(ValueError, match="restriction elem_size=4 but basis has 9 nodes"):
        fresh.set_field("u", r_u, b_p, hf.VECTOR_ACTIVE)
    fresh.set_field("u", r_u, b, hf.VECTOR_ACTIVE)
    with pytest.raises(ValueError, match="already set"):
        fresh.set_field("u", r_u, b, hf.VECTOR_ACTIVE)
    b_q = ceed.BasisTensorH1Lagrange(2, 1, 2, 4)
    with pytest.raises(ValueError, match="16 quadrature points per element, the fields set"):
        fresh.set_field("v", r_u, b_q, hf.VECTOR_ACTIVE)
    r_other = ceed.ElemRestriction(3, 4, 1, 1, 9, grid_offsets(2, 1, 2)[0][:3])
    with pytest.raises(ValueError, match="num_elem=3, the fields set before have 4"):
        fresh.set_field("v", r_other, b, hf.VECTOR_ACTIVE)
    with pytest.raises(ValueError, match=r"vector of field 'qdata' must have shape \(36,\)"):
        fresh.set_field("qdata", r_q, hf.BASIS_NONE, ceed.asarray(np.ones(5)))
    with pytest.raises(ValueError, match="VECTOR_NONE is only for EVAL_WEIGHT"):
        fresh.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_NONE)
    other = hf.Ceed("/cpu/self/ref")
    with pytest.raises(TypeError, match="belongs to another Ceed"):
        fresh.set_field(
            "v", other.ElemRestriction(4, 4, 1, 1, 9, s["offsets"]), b, hf.VECTOR_ACTIVE
        )
    build = ceed.Operator(ceed.QFunctionByName("Mass2DBuild"))
    with pytest.raises(ValueError, match=r"use \(hf.ELEMRESTRICTION_NONE, basis, hf.VECTOR_NONE"):
        build.set_field("weights", r_u, b, hf.VECTOR_NONE)
    with pytest.raises(ValueError, match="not square"):
        build.set_field(
            "dx",
            ceed.ElemRestriction(4, 4, 2, 9, 18, s["offsets"]),
            ceed.BasisTensorH1Lagrange(2, 2, 2, 3),
            hf.VECTOR_ACTIVE,
        )
        build.set_field("weights", hf.ELEMRESTRICTION_NONE, b, hf.VECTOR_NONE)
        build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
        build.linear_assemble_diagonal()


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_restrict_dofs_equals_submatrix(ceed, rng, index_dtype):
    """``restrict_dofs(A, free)`` applies ``A[free][:, free]``, call after call."""
    op, s = poisson_operator(ceed, n=3, p=2, dim=3, warp=0.1)
    A = ceed.to_numpy(op.linear_assemble().toarray())
    free = np.sort(rng.choice(s["num_nodes"], s["num_nodes"] // 2, replace=False))
    sub = hf.restrict_dofs(op, free.astype(index_dtype))
    expected_matrix = A[np.ix_(free, free)]
    np.testing.assert_allclose(
        ceed.to_numpy(sub.linear_assemble().toarray()), expected_matrix, atol=1e-13
    )
    np.testing.assert_allclose(
        ceed.to_numpy(sub.linear_assemble_diagonal()), np.diag(expected_matrix), rtol=1e-13
    )
    for _ in range(2):  # the second apply must not see the first one's values
        u = rng.standard_normal(free.size)
        u_dev = ceed.asarray(u)
        v = ceed.asarray(np.ones(free.size))
        sub.apply_add(u_dev, v)
        np.testing.assert_allclose(ceed.to_numpy(v), expected_matrix @ u + 1, atol=1e-12)
        np.testing.assert_array_equal(ceed.to_numpy(u_dev), u)  # input untouched


def test_vector_mass_interleaved_components(ceed, rng):
    """Components interleaved (``comp_stride = 1``): the same operator, permuted."""
    mass, s = mass_operator(ceed, n=2, p=2, dim=3)
    n, offsets = s["num_nodes"], s["offsets"]
    b3 = ceed.BasisTensorH1Lagrange(3, 3, 3, 4)
    ops = {}
    for name, stride, nodes in (("major", n, offsets), ("interleaved", 1, 3 * offsets)):
        r3 = ceed.ElemRestriction(offsets.shape[0], offsets.shape[1], 3, stride, 3 * n, nodes)
        op = ceed.Operator(ceed.QFunctionByName("Vector3MassApply"))
        op.set_field("u", r3, b3, hf.VECTOR_ACTIVE)
        op.set_field("qdata", s["r_q"], hf.BASIS_NONE, s["qdata"])
        op.set_field("v", r3, b3, hf.VECTOR_ACTIVE)
        ops[name] = op
    u = rng.standard_normal((3, n))  # (num_comp, num_nodes)
    major = ceed.to_numpy(ops["major"](ceed.asarray(u.ravel()))).reshape(3, n)
    inter = ceed.to_numpy(ops["interleaved"](ceed.asarray(u.T.ravel()))).reshape(n, 3)
    np.testing.assert_allclose(inter.T, major, rtol=1e-13, atol=1e-15)
    M = ceed.to_numpy(mass.linear_assemble().toarray())
    np.testing.assert_allclose(major, u @ M.T, rtol=1e-12, atol=1e-14)


def test_apply_dot_is_apply_and_u_dot_Au(ceed, rng):
    """``apply_dot(u, v)``: v = A u and u . A u, for plain, oriented (signs), composite and
    restricted operators; the product may come from inside the operator kernel."""
    mass, s = mass_operator(ceed, n=3, p=3, dim=3, warp=0.1)
    poisson, _ = poisson_operator(ceed, n=3, p=3, dim=3, warp=0.1)
    offsets = s["offsets"]
    r = ceed.ElemRestriction(
        *offsets.shape, 1, 1, s["num_nodes"], offsets, orients=rng.random(offsets.shape) < 0.3
    )
    oriented = mass_fields(ceed, ceed.QFunctionByName("MassApply"), s, r_u=r)
    free = np.sort(rng.choice(s["num_nodes"], s["num_nodes"] // 2, replace=False))
    ops = {
        "mass": mass,
        "poisson": poisson,
        "oriented": oriented,
        "composite": ceed.CompositeOperator([mass, poisson]),
        "restricted": hf.restrict_dofs(poisson, free),
    }
    for name, op in ops.items():
        u = ceed.asarray(rng.standard_normal(op.shape[1]))
        v = ceed.asarray(np.full(op.shape[0], np.nan))  # overwritten
        dot = op.apply_dot(u, v)
        expected = ceed.to_numpy(op(u))
        np.testing.assert_allclose(ceed.to_numpy(v), expected, rtol=1e-13, atol=1e-15, err_msg=name)
        assert float(dot) == pytest.approx(float(ceed.to_numpy(u) @ expected), rel=1e-13), name
    with pytest.raises(ValueError, match=r"v must have shape \(\d+,\)"):
        mass.apply_dot(ceed.asarray(np.zeros(mass.shape[1])), ceed.asarray(np.zeros(3)))


def test_apply_dot_needs_a_square_operator(ceed):
    _mass, s = mass_operator(ceed, n=2, p=2, dim=2)
    qf = alpha_mass_qfunction(ceed, 1.0, v_mode=hf.EVAL_NONE)
    to_points = mass_fields(ceed, qf, s, r_v=s["r_q"], v_basis=hf.BASIS_NONE)  # L -> points
    out_size, in_size = to_points.shape
    assert out_size != in_size
    with pytest.raises(ValueError, match="apply_dot needs a square operator"):
        to_points.apply_dot(ceed.asarray(np.zeros(in_size)), ceed.asarray(np.zeros(out_size)))


def test_backend_declares_the_contract(ceed):
    """Every backend is a ``Backend``; its abilities are declared, and what the operator
    tells a device CG matches the operator (square ones only, restricted ones their DOFs)."""
    backend = ceed.backend
    assert isinstance(backend, Backend)
    assert isinstance(backend.vector_ops(), VectorOps)
    assert backend.device_cg is None or callable(backend.device_cg)
    mass, s = mass_operator(ceed, n=2, p=2, dim=2)
    target = mass.device_cg_target()
    assert target.operator is mass and target.fusable and target.free_dofs is None
    composite = ceed.CompositeOperator([mass, mass]).device_cg_target()
    assert composite.operator.operators == [mass, mass] and not composite.fusable
    free = np.arange(0, s["num_nodes"], 2)
    restricted = hf.restrict_dofs(mass, free)
    target = restricted.device_cg_target()
    assert target.operator is mass and target.fusable
    np.testing.assert_array_equal(ceed.to_numpy(target.free_dofs), free)
    assert all(a is b for a, b in zip(target.work_vectors, restricted.work_vectors, strict=True))
    constrained = ceed.to_numpy(target.constrained_dofs())
    np.testing.assert_array_equal(constrained, np.arange(1, s["num_nodes"], 2))
    assert hf.restrict_dofs(restricted, np.arange(3)).device_cg_target() is None
    qf = alpha_mass_qfunction(ceed, 1.0, v_mode=hf.EVAL_NONE)
    to_points = mass_fields(ceed, qf, s, r_v=s["r_q"], v_basis=hf.BASIS_NONE)
    assert to_points.device_cg_target() is None  # not square
