"""CG: agreement with SciPy, preconditioning, LinearOperator interop, breakdown, validation."""

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg
from util import mass_operator, poisson_operator

import hofem as hf
from hofem import meshes


def shifted_poisson(ceed):
    """Poisson + mass on a warped 3D grid: SPD, non-trivial conditioning."""
    poisson, _ = poisson_operator(ceed, n=3, p=2, dim=3, warp=0.1)
    mass, _ = mass_operator(ceed, n=3, p=2, dim=3, warp=0.1)
    return ceed.CompositeOperator([poisson, mass])


def test_cg_matches_scipy(ceed):
    op = shifted_poisson(ceed)
    rng = np.random.default_rng(0)
    b_host = rng.standard_normal(op.shape[0])
    x, info = hf.cg(op, ceed.asarray(b_host), rtol=1e-10)
    assert info == 0 and info.iterations > 5
    A = ceed.to_numpy(op.linear_assemble().toarray())
    x_ref = scipy.sparse.linalg.cg(scipy.sparse.csr_matrix(A), b_host, rtol=1e-10, maxiter=1000)[0]
    np.testing.assert_allclose(ceed.to_numpy(x), x_ref, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(A @ ceed.to_numpy(x), b_host, atol=1e-9 * np.linalg.norm(b_host))
    # the same iteration count SciPy needs, within a couple of steps (rounding)
    count = []
    scipy.sparse.linalg.cg(
        scipy.sparse.csr_matrix(A), b_host, rtol=1e-10, callback=lambda xk: count.append(1)
    )
    assert abs(info.iterations - len(count)) <= 2


def test_jacobi_reduces_iterations_and_linear_operator(ceed):
    op = shifted_poisson(ceed)
    b = ceed.asarray(np.ones(op.shape[0]))
    _, plain = hf.cg(op, b, rtol=1e-9)
    M = hf.jacobi(op)
    assert isinstance(M, hf.Jacobi) and M.inv_diag.shape == (op.shape[0],)
    x, pre = hf.cg(op.as_linear_operator(), b, rtol=1e-9, M=M)
    assert plain == 0 and pre == 0
    assert pre.iterations < plain.iterations
    residual = ceed.to_numpy(b - op(x))
    assert np.linalg.norm(residual) <= 1e-9 * np.sqrt(op.shape[0]) * 1.01


def test_x0_callback_maxiter_and_info(ref):
    A = scipy.sparse.diags(np.arange(1.0, 51.0))
    b = np.ones(50)
    seen = []
    x, info = hf.cg(A, b, x0=np.full(50, 0.5), callback=lambda xk: seen.append(xk.copy()))
    assert info == 0 and len(seen) == info.iterations
    np.testing.assert_allclose(x, 1 / np.arange(1.0, 51.0), rtol=1e-7)
    x, info = hf.cg(A, b, maxiter=3)
    assert info == 3 and info.iterations == 3 and "not converged in 3" in info.message
    x, info = hf.cg(lambda v: 2 * v, b, check_every=4)
    assert info == 0 and info.iterations == 4  # converged at 1, noticed at the check
    assert hf.cg(A, np.zeros(50))[1].iterations == 0


def test_breakdown_is_reported(ref):
    A = np.diag([1.0, -1.0, 2.0])
    _, info = hf.cg(A, np.array([1.0, 1.0, 0.0]))
    assert info < 0 and "breakdown" in info.message
    _x, info = hf.cg(lambda v: v * np.nan, np.ones(3))
    assert info < 0


def test_validation(ref):
    with pytest.raises(TypeError, match="b must be a NumPy or CuPy array"):
        hf.cg(np.eye(2), [1.0, 2.0])
    with pytest.raises(TypeError, match="A must be an Operator"):
        hf.cg(3, np.ones(2))
    with pytest.raises(ValueError, match=r"x0 must have shape \(2,\)"):
        hf.cg(np.eye(2), np.ones(2), x0=np.ones(3))
    with pytest.raises(ValueError, match="rtol and atol must be >= 0"):
        hf.cg(np.eye(2), np.ones(2), rtol=-1)
    with pytest.raises(ValueError, match="maxiter and check_every must be >= 1"):
        hf.cg(np.eye(2), np.ones(2), maxiter=0)
    with pytest.raises(ValueError, match="it must be square of size 2"):
        hf.cg(np.ones((3, 2)), np.ones(2), x0=np.zeros(2))
    op, _ = poisson_operator(ref, n=1, p=1, dim=1)
    with pytest.raises(ValueError, match=r"diagonal entry \d+ is zero"):
        hf.jacobi(ref.CompositeOperator([op, _zero_operator(ref, op)]))


def _zero_operator(ceed, like):
    """-1 * like: makes the composite diagonal exactly zero."""
    qf = ceed.QFunction(
        _negate, [("du", 1, hf.EVAL_GRAD), ("qdata", 1, hf.EVAL_NONE)], [("dv", 1, hf.EVAL_GRAD)]
    )
    neg = ceed.Operator(qf)
    for name, field in like.fields.items():
        neg.set_field(name, field.restriction, field.basis or hf.BASIS_NONE, field.vector)
    return neg


def _negate(ctx, du, qdata, dv):
    dv[0] = -qdata[0] * du[0]


def _cg_problems(ceed):
    """(name, A, b): an operator, a composite one and a restricted one (Dirichlet)."""
    rng = np.random.default_rng(1)
    mass, _ = mass_operator(ceed, n=3, p=3, dim=3, warp=0.1)
    space = hf.H1Space(ceed, meshes.box(3, dim=3), 3)
    restricted = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    problems = []
    for name, A in (
        ("operator", mass),
        ("composite", shifted_poisson(ceed)),
        ("restricted", restricted),
    ):
        problems.append((name, A, ceed.asarray(rng.standard_normal(A.shape[0]))))
    return problems


@pytest.mark.parametrize("precondition", [False, True])
def test_device_loop_matches_the_host_loop(ceed, precondition):
    """Both loops agree; the device loop stops at the same iteration however seldom it checks."""
    device = ceed.backend.device_cg is not None
    for name, A, b in _cg_problems(ceed):
        M = hf.jacobi(A) if precondition else None
        x_host, host = hf.cg(A, b, rtol=1e-9, M=M, device_loop=False)
        x_one, one = hf.cg(A, b, rtol=1e-9, M=M, check_every=1)
        assert host == 0 and one == 0, (name, one.message)
        # other reduction orders: the threshold may be crossed one iteration apart
        assert abs(one.iterations - host.iterations) <= 1, name
        scale = float(np.linalg.norm(ceed.to_numpy(x_host)))
        error = float(np.linalg.norm(ceed.to_numpy(x_one - x_host)))
        assert error <= 1e-8 * scale, (name, error / scale)  # Krylov rounding
        for check_every in (None, 7):
            x, info = hf.cg(A, b, rtol=1e-9, M=M, check_every=check_every)
            assert info == 0, (name, info.message)
            if device or check_every is None:  # the same iteration as check_every=1
                # (to rounding: GPU operators add into Ap with atomics, in no fixed order)
                assert abs(info.iterations - one.iterations) <= 1, (name, check_every)
                error = float(np.linalg.norm(ceed.to_numpy(x - x_one)))
                assert error <= 1e-8 * scale, (name, check_every, error / scale)
            else:  # the host loop notices convergence at a multiple of check_every
                assert info.iterations % check_every == 0
                assert 0 <= info.iterations - one.iterations < check_every


def test_device_loop_maxiter_breakdown_and_x0(ceed):
    _, A, b = _cg_problems(ceed)[2]
    assert A.free_dofs.shape == (A.shape[0],)
    free = ceed.to_numpy(A.free_dofs)
    expected = np.setdiff1d(np.arange(A.op.shape[1]), free)
    np.testing.assert_array_equal(ceed.to_numpy(A.constrained_dofs), expected)
    assert all(w.shape == A.op.shape[:1] for w in A.work_vectors)
    x, info = hf.cg(A, b, maxiter=3, check_every=2)
    x_host, _ = hf.cg(A, b, maxiter=3, device_loop=False)
    assert info == 3 and info.iterations == 3 and "not converged in 3" in info.message
    np.testing.assert_allclose(ceed.to_numpy(x), ceed.to_numpy(x_host), rtol=1e-12, atol=1e-14)
    # restarting from the third iterate finishes the solve
    x_full, full = hf.cg(A, b, rtol=1e-9)
    x, rest = hf.cg(A, b, x0=x, rtol=1e-9)
    assert full == 0 and rest == 0 and rest.iterations > 0
    np.testing.assert_allclose(ceed.to_numpy(x), ceed.to_numpy(x_full), rtol=1e-6, atol=1e-9)
    # an already converged start: no iteration
    assert hf.cg(A, b, x0=x_full, rtol=1.0)[1].iterations == 0
    space = hf.H1Space(ceed, meshes.box(3, dim=3), 3)
    negative = hf.restrict_dofs(hf.diffusion(space, coefficient=-1.0), space.free_dofs())
    _, info = hf.cg(negative, b)
    assert info < 0 and "breakdown by iteration 1" in info.message


def test_device_loop_validation(ceed):
    _, A, b = _cg_problems(ceed)[0]
    if ceed.backend.device_cg is None:
        with pytest.raises(ValueError, match="device_loop=True does not apply: A must be a hofem"):
            hf.cg(A, b, device_loop=True)
        return
    with pytest.raises(ValueError, match="device_loop=True does not apply: a callback"):
        hf.cg(A, b, device_loop=True, callback=lambda x: None)
    with pytest.raises(ValueError, match="M must be None or a Jacobi"):
        hf.cg(A, b, device_loop=True, M=lambda r: r)
    with pytest.raises(TypeError, match=r"b must be a cupy\.ndarray"):
        hf.cg(A, ceed.to_numpy(b))
    with pytest.raises(ValueError, match=r"x0 must have shape"):
        hf.cg(A, b, x0=b[:-1])


VARIANTS = ("single_reduction", "pipelined")


def _variant_allowance(variant, iterations):
    """Iterations a variant may differ from standard CG (docs/solvers.md, "CG variants"):
    Chronopoulos-Gear 1 + 2% (the threshold crossed a few iterations apart: +2 of 253 on
    the dense SPD matrices with one BLAS, +5 of 252 with another), pipelined CG's larger
    rounding 1 + 5% (up to +4.7% at rtol 1e-8)."""
    share = 0.02 if variant == "single_reduction" else 0.05
    return 1 + round(share * iterations)


@pytest.mark.parametrize("precondition", [False, True])
def test_cg_variants_match_standard(ceed, precondition):
    """Every variant: standard CG's solution to the tolerance, its iteration count within
    the documented rounding difference, the same CGInfo; operators of every kind."""
    for name, A, b in _cg_problems(ceed):
        M = hf.jacobi(A) if precondition else None
        x_std, std = hf.cg(A, b, rtol=1e-9, M=M)
        scale = float(np.linalg.norm(ceed.to_numpy(x_std)))
        b_norm = float(np.linalg.norm(ceed.to_numpy(b)))
        for variant in VARIANTS:
            x, info = hf.cg(A, b, rtol=1e-9, M=M, variant=variant)
            assert info == 0 and info.message == "converged", (name, variant, info.message)
            allowed = _variant_allowance(variant, std.iterations)
            assert abs(info.iterations - std.iterations) <= allowed, (name, variant, info)
            assert info.residual_norm <= 1e-9 * b_norm
            true = float(np.linalg.norm(ceed.to_numpy(b - A(x))))
            assert true <= 1.1e-9 * b_norm, (name, variant, true / b_norm)
            error = float(np.linalg.norm(ceed.to_numpy(x - x_std)))
            assert error <= 1e-7 * scale, (name, variant, error / scale)


def test_cg_variants_with_pmg(ceed):
    """A callable preconditioner (hf.pmg): the same iterations and solution."""
    _, A, b = _cg_problems(ceed)[2]
    M = hf.pmg(A)
    x_std, std = hf.cg(A, b, rtol=1e-10, M=M)
    for variant in VARIANTS:
        x, info = hf.cg(A, b, rtol=1e-10, M=M, variant=variant)
        assert info == 0 and abs(info.iterations - std.iterations) <= 1, (variant, info)
        error = float(np.linalg.norm(ceed.to_numpy(x - x_std)))
        assert error <= 1e-8 * float(np.linalg.norm(ceed.to_numpy(x_std))), variant


def _spd_matrix(n, condition, seed):
    """A dense SPD matrix (n, n) with eigenvalues spaced logarithmically in [1, condition]."""
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return (Q * np.logspace(0, np.log10(condition), n)) @ Q.T, rng.standard_normal(n)


@pytest.mark.parametrize("precondition", [False, True])
def test_cg_variants_on_spd_matrices(ref, precondition):
    """Random SPD matrices (about 250 iterations at rtol 1e-8): the documented differences."""
    A, b = _spd_matrix(300, 1e3, 0)
    M = scipy.sparse.diags(1 / np.diag(A)) if precondition else None
    x_std, std = hf.cg(A, b, rtol=1e-8, M=M)
    for variant in VARIANTS:
        x, info = hf.cg(scipy.sparse.csr_matrix(A), b, rtol=1e-8, M=M, variant=variant)
        assert info == 0 and std == 0
        assert abs(info.iterations - std.iterations) <= _variant_allowance(variant, 250), info
        assert np.linalg.norm(b - A @ x) <= 1.1e-8 * np.linalg.norm(b), variant
        np.testing.assert_allclose(x, x_std, rtol=0, atol=1e-6 * np.abs(x_std).max())


@pytest.mark.parametrize("variant", VARIANTS)
def test_cg_variants_x0_callback_maxiter_breakdown(ref, variant):
    A = scipy.sparse.diags(np.arange(1.0, 51.0))
    b = np.ones(50)
    seen = []
    x, info = hf.cg(
        A, b, x0=np.full(50, 0.5), variant=variant, callback=lambda xk: seen.append(xk.copy())
    )
    assert info == 0 and len(seen) == info.iterations
    np.testing.assert_allclose(x, 1 / np.arange(1.0, 51.0), rtol=1e-7)
    x, info = hf.cg(A, b, maxiter=3, variant=variant)
    x_std, _ = hf.cg(A, b, maxiter=3)
    assert info == 3 and info.iterations == 3 and "not converged in 3" in info.message
    np.testing.assert_allclose(x, x_std, rtol=1e-12)  # the same Krylov iterate
    x, info = hf.cg(lambda v: 2 * v, b, check_every=4, variant=variant)
    assert info == 0 and info.iterations == 4  # converged at 1, noticed at the check
    assert hf.cg(A, np.zeros(50), variant=variant)[1].iterations == 0
    _, info = hf.cg(np.diag([1.0, -1.0, 2.0]), np.array([1.0, 1.0, 0.0]), variant=variant)
    assert info < 0 and "breakdown by iteration 1" in info.message
    _, info = hf.cg(lambda v: v * np.nan, np.ones(3), variant=variant)
    assert info < 0


def test_cg_variant_validation(ceed):
    _, A, b = _cg_problems(ceed)[0]
    with pytest.raises(ValueError, match="variant must be one of 'standard', 'single_reduction'"):
        hf.cg(A, b, variant="chebyshev")
    with pytest.raises(ValueError, match="device_loop=True runs standard CG only"):
        hf.cg(A, b, variant="pipelined", device_loop=True)
