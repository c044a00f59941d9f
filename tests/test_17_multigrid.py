"""p-multigrid: transfers (exactness, adjointness), Galerkin coarse operators, PCG with hf.pmg."""

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.linalg

import hofem as hf
from hofem import meshes
from hofem.forms import multigrid_hierarchy
from hofem.multigrid import AMGCycle, WholeVectorCycle, coarse_orders, smoothed_aggregation
from hofem.operator import SubOperator

pytest.importorskip("pyamg", reason="hf.pmg needs pyamg: pip install hofem[amg]")

CASES = [("hex", 3, 1), ("hex", 4, 2), ("tet", 3, 1)]  # (cells, fine order, coarse order)


def box(cells, n=2):
    return meshes.box(n, dim=3, simplex=cells == "tet")


def columns(transfer, ceed):
    """The dense matrix (host) of a transfer, column by column."""
    out, n_in = transfer.shape
    v = ceed.xp.empty(out)
    cols = []
    for i in range(n_in):
        transfer.apply(ceed.asarray(np.eye(1, n_in, i)[0]), v)
        cols.append(ceed.to_numpy(v).copy())
    return np.stack(cols, 1)  # (out, n_in)


@pytest.mark.parametrize(("cells", "p", "p_c"), CASES)
def test_prolongation_is_exact_and_restriction_its_transpose(ceed, cells, p, p_c):
    mesh = box(cells)
    fine, coarse = hf.H1Space(ceed, mesh, p), hf.H1Space(ceed, mesh, p_c)
    op_c, prolong, restrict = hf.diffusion(fine).multigrid_level(coarse.restriction)
    for q in range(p_c + 1):  # every degree the coarse space holds

        def f(x, q=q):
            return x[:, 0] ** q + 2 * x[:, 1] ** max(q - 1, 0) * x[:, 2] - x[:, 2] ** q

        err = prolong(coarse.interpolate(f)) - fine.interpolate(f)
        assert float(abs(err).max()) < 1e-12, (q, float(abs(err).max()))
    rng = np.random.default_rng(0)
    u = ceed.asarray(rng.standard_normal(coarse.num_dofs))
    v = ceed.asarray(rng.standard_normal(fine.num_dofs))
    lhs, rhs = float(v @ prolong(u)), float(restrict(v) @ u)
    assert abs(lhs - rhs) <= 1e-13 * (abs(lhs) + 1.0)
    assert op_c.shape == (coarse.num_dofs, coarse.num_dofs)


@pytest.mark.parametrize("galerkin", [True, False], ids=["galerkin", "rediscretized"])
@pytest.mark.parametrize("restricted", [False, True], ids=["full", "restrict_dofs"])
@pytest.mark.parametrize(("cells", "p"), [("hex", 4), ("tet", 2)])
def test_coarse_operator_is_galerkin(ceed, cells, p, restricted, galerkin):
    """multigrid_level's coarse operators are P^T A P; on affine cells the rediscretized
    ones (each order's own quadrature, exact there) are the same matrices."""
    space = hf.H1Space(ceed, box(cells), p)
    A = hf.diffusion(space)
    if restricted:
        A = hf.restrict_dofs(A, space.free_dofs())
    levels = multigrid_hierarchy(A, galerkin=galerkin)
    for level, (P, R) in enumerate(zip(levels.prolong, levels.restrict, strict=True)):
        fine, coarse = levels.operators[level], levels.operators[level + 1]
        P_dense, R_dense = columns(P, ceed), columns(R, ceed)
        np.testing.assert_allclose(R_dense, P_dense.T, atol=1e-14)
        A_f = ceed.to_numpy(fine.linear_assemble().toarray())
        A_c = ceed.to_numpy(coarse.linear_assemble().toarray())
        np.testing.assert_allclose(P_dense.T @ A_f @ P_dense, A_c, atol=1e-12 * abs(A_c).max())
    if restricted:  # the coarse free DOFs are the coarse space's
        coarsest = levels.operators[-1]
        expected = hf.H1Space(ceed, box(cells), 1).free_dofs()
        np.testing.assert_array_equal(ceed.to_numpy(coarsest.free_dofs), expected)


def _solve_both(ceed, space, rtol=1e-10):
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    b = ceed.asarray(np.random.default_rng(2).standard_normal(A.shape[0]))
    M = hf.pmg(A)
    x, info = hf.cg(A, b, M=M, rtol=rtol)
    x_cg, info_cg = hf.cg(A, b, rtol=rtol)
    assert info == 0 and info_cg == 0, (info.message, info_cg.message)
    err = float(abs(x - x_cg).max()) / float(abs(x_cg).max())
    assert err < 1e-8, err
    assert info.iterations < info_cg.iterations
    return info.iterations


@pytest.mark.parametrize(("cells", "p"), [("hex", 3), ("tet", 2)])
def test_pcg_with_pmg_matches_cg_on_the_box(ceed, cells, p):
    _solve_both(ceed, hf.H1Space(ceed, box(cells, 3), p))


@pytest.mark.parametrize("name", ["lshape_hex.msh", "curved_tet10.msh"])
def test_pcg_with_pmg_matches_cg_on_gmsh_files(ceed, name):
    pytest.importorskip("meshio")
    mesh = meshes.read(meshes.data_path(name))
    _solve_both(ceed, hf.H1Space(ceed, mesh, 2))


@pytest.mark.parametrize("p", [2, 3, 4])
def test_bp3_hex_iterations(ref, p):
    space = hf.H1Space(ref, meshes.box(4, dim=3), p)
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    b = ref.asarray(np.random.default_rng(3).standard_normal(A.shape[0]))
    _, info = hf.cg(A, b, M=hf.pmg(A), rtol=1e-8)
    assert info == 0 and info.iterations <= 15, info


def test_pmg_is_symmetric_and_a_scipy_preconditioner(ref):
    space = hf.H1Space(ref, meshes.box(3, dim=2), 4)
    A = hf.restrict_dofs(hf.mass(space), space.free_dofs())
    M = hf.pmg(A, orders=[4, 1], degree=3)
    rng = np.random.default_rng(4)
    u, v = rng.standard_normal((2, A.shape[0]))
    assert abs(v @ M(u) - u @ M(v)) <= 1e-12 * abs(v @ M(u))
    assert u @ M(u) > 0
    b = rng.standard_normal(A.shape[0])
    x, info = scipy.sparse.linalg.cg(
        A.as_linear_operator(), b, rtol=1e-10, M=M.as_linear_operator()
    )
    assert info == 0
    np.testing.assert_allclose(A(x), b, atol=1e-8 * np.abs(b).max())


def test_amg_cycle_is_symmetric_with_numpy():
    pyamg = pytest.importorskip("pyamg")
    A = pyamg.gallery.poisson((40, 40), format="csr")
    cycle = AMGCycle(*smoothed_aggregation(A, max_coarse=20), np, cycles=2)
    assert len(cycle.levels) >= 2
    rng = np.random.default_rng(5)
    u, v = rng.standard_normal((2, A.shape[0]))
    assert abs(v @ cycle(u) - u @ cycle(v)) <= 1e-12 * abs(v @ cycle(u))
    M = scipy.sparse.linalg.LinearOperator(A.shape, matvec=cycle, dtype=np.float64)
    _, info = scipy.sparse.linalg.cg(A, u, rtol=1e-10, M=M)
    assert info == 0


def trilinear_laplacian(n):
    """The order-1 Laplacian (27-point stencil, unit spacing) on ``n³`` interior nodes."""
    pyamg = pytest.importorskip("pyamg")
    stencil = np.empty((3, 3, 3))
    for i, j, k in np.ndindex(3, 3, 3):  # by how many of the three offsets are nonzero
        stencil[i, j, k] = (8 / 3, 0.0, -1 / 6, -1 / 12)[abs(i - 1) + abs(j - 1) + abs(k - 1)]
    return pyamg.gallery.stencil_grid(stencil, (n, n, n), format="csr")


def test_smoothed_aggregation_estimates_and_contraction():
    """Each AMG level's Lanczos estimate lies within the Chebyshev margin below the
    largest eigenvalue of ``D^-1 A``, and one V-cycle contracts the error of a
    3-level trilinear Laplacian by at most 0.11 (0.14 with the prolongator smoothed
    by local row sums, pyamg's ``weighting="local"``, which degrades with levels)."""
    A = trilinear_laplacian(20)  # 8000 rows: 8000, 343, 8
    levels, coarsest = smoothed_aggregation(A, max_coarse=10)
    assert len(levels) == 2
    for level in levels:
        scale = scipy.sparse.diags(np.sqrt(level.inv_diag))
        S = scale @ level.A @ scale  # D^-1/2 A D^-1/2: the spectrum of D^-1 A
        top = scipy.sparse.linalg.eigsh(S, k=1, which="LA", return_eigenvectors=False)[0]
        assert level.lambda_max <= top * (1 + 1e-12) <= 1.1 * level.lambda_max
    cycle = AMGCycle(levels, coarsest, np)
    error = scipy.sparse.linalg.LinearOperator(
        A.shape, matvec=lambda e: e - cycle(A @ e), dtype=np.float64
    )  # I - M A: A-self-adjoint, real spectrum
    contraction = abs(scipy.sparse.linalg.eigs(error, k=1, return_eigenvectors=False, tol=1e-4))
    assert contraction[0] <= 0.11, contraction


def host_hierarchy(A, lambdas, omega=4.0 / 3.0):
    """pyamg's steps one by one on the host with SciPy, each level's prolongator smoothed
    with the given estimate: ``(P per level, coarsest)``, the reference of
    :func:`smoothed_aggregation` (which skips the strength matrix)."""
    from pyamg.aggregation import fit_candidates, standard_aggregation
    from pyamg.relaxation.relaxation import gauss_seidel
    from pyamg.strength import symmetric_strength_of_connection

    B = np.ones(A.shape[0])
    gauss_seidel(A, B, np.zeros_like(B), iterations=4, sweep="symmetric")
    prolongators = []
    for lam in lambdas:
        aggregates = standard_aggregation(symmetric_strength_of_connection(A, 0.0))[0]
        T, B = fit_candidates(aggregates, B.reshape(-1, 1))
        T = scipy.sparse.csr_matrix(T)
        P = scipy.sparse.csr_matrix(T - scipy.sparse.diags(omega / lam / A.diagonal()) @ (A @ T))
        prolongators.append(P)
        A = scipy.sparse.csr_matrix(P.T @ A @ P)
        A.sort_indices()  # the aggregation's order, whichever library multiplied
    return prolongators, A


def test_smoothed_aggregation_is_pyamgs_steps_with_xps_products(ceed):
    """On the backend's arrays (SciPy's or cuSPARSE's products, its Lanczos estimates)
    the hierarchy is the host one of pyamg's strength, aggregation and candidate with
    SciPy's products, given the same estimates: same sizes, P and coarse matrices to
    1e-12."""
    xp = ceed.xp
    A = trilinear_laplacian(20)  # 8000, 343, 8 rows
    levels, coarsest = smoothed_aggregation(A, xp, max_coarse=10)
    prolongators, expected = host_hierarchy(A, [level.lambda_max for level in levels])
    assert len(levels) == len(prolongators) == 2

    def assert_close(M, N):  # M: on the backend, or the host's coarsest
        M = M if isinstance(M, scipy.sparse.spmatrix | scipy.sparse.sparray) else M.get()
        assert M.shape == N.shape
        assert abs(M - N).max() <= 1e-12 * abs(N).max()

    for level, P in zip(levels, prolongators, strict=True):
        assert_close(level.P, P)
        assert_close(level.R, P.T)
    assert_close(levels[1].A, prolongators[0].T @ A @ prolongators[0])
    assert_close(coarsest, expected)


def test_order_schedules():
    assert coarse_orders(8) == [8, 4, 2, 1]
    assert coarse_orders(6) == [6, 3, 1]
    assert coarse_orders(1) == [1]
    assert coarse_orders(5, [5, 3, 1]) == [5, 3, 1]
    for bad in ([5, 5, 1], [5, 2, 3, 1], [4, 2], [3, 2, 1]):
        with pytest.raises(ValueError, match="orders must decrease strictly from"):
            coarse_orders(5, bad)


def test_bad_input(ref, monkeypatch):
    space = hf.H1Space(ref, box("hex"), 2)
    A = hf.diffusion(space)
    with pytest.raises(ValueError, match="orders must decrease strictly"):
        hf.pmg(A, orders=[2, 2, 1])
    with pytest.raises(ValueError, match="degree must be an integer >= 1"):
        hf.pmg(A, degree=0)
    # an active basis that is not hofem's H1 Lagrange (Lagrange on Gauss nodes)
    b = space.basis()
    x, _ = hf.gauss_quadrature(3)
    from hofem.polynomials import lagrange_deriv_matrix, lagrange_interp_matrix

    gauss = ref.BasisTensorH1(
        3, 1, 3, b.Q_1d, lagrange_interp_matrix(x, b.q_ref_1d),
        lagrange_deriv_matrix(x, b.q_ref_1d), b.q_ref_1d, b.q_weight_1d,
    )  # fmt: skip
    op = ref.Operator(ref.QFunctionByName("Poisson3DApply"))
    qdata = A.fields["qdata"]
    op.set_field("du", space.restriction, gauss, hf.VECTOR_ACTIVE)
    op.set_field("qdata", qdata.restriction, hf.BASIS_NONE, qdata.vector)
    op.set_field("dv", space.restriction, gauss, hf.VECTOR_ACTIVE)
    coarse = hf.H1Space(ref, box("hex"), 1).restriction
    with pytest.raises(ValueError, match="needs an operator whose active fields share one H1"):
        op.multigrid_level(coarse)
    with pytest.raises(ValueError, match=r"pmg needs an operator made by hofem\.mass"):
        hf.pmg(op)
    with pytest.raises(ValueError, match="restriction_coarse must be an ElemRestriction of a"):
        A.multigrid_level(space.restriction)
    monkeypatch.setitem(sys.modules, "pyamg", None)
    with pytest.raises(ImportError, match=r"pip install 'hofem\[amg\]'"):
        hf.pmg(A)


MPIEXEC = shutil.which(
    "mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
)


@pytest.mark.mpi
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpich)")
@pytest.mark.parametrize("n", [2, 3])
def test_distributed_pmg_equals_serial(n):
    """BP3 hex p = 4 and tet p = 2 under mpiexec: the serial solution, iterations within one."""
    pytest.importorskip("mpi4py")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    cases = root / "tests" / "mpi" / "cases.py"
    run = subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, str(cases), "pmg", "/cpu/self/ref"],
        capture_output=True, text=True, timeout=600, env=env, cwd=root,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "OK pmg"


def _vectors(ceed, n, count, seed=6):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(n) for _ in range(count)]


@pytest.mark.parametrize("zero", [False, True], ids=["from_x", "from_zero"])
def test_vector_ops_chebyshev_steps_match_numpy(ceed, zero):
    """Every backend's fused Chebyshev steps against the NumPy expressions."""
    n, a, c = 1003, 0.37, -1.9
    ops = ceed.backend.vector_ops()
    inv_diag, b, Ad, d, x, r = _vectors(ceed, n, 6)
    on = [ceed.asarray(v.copy()) for v in (inv_diag, b, Ad, d, x, r)]
    got = {}

    def host(name, v):
        got[name] = ceed.to_numpy(v).copy()

    # start: r = b - Ad; d = c D^-1 r; from zero: d = c D^-1 b
    ops.chebyshev_start(c, on[0], on[1], None if zero else on[2], on[5], on[3])
    host("start_d", on[3])
    r_start = r if zero else b - Ad
    d_start = c * inv_diag * (b if zero else r_start)
    np.testing.assert_allclose(got["start_d"], d_start, rtol=1e-14, atol=1e-14)
    if not zero:
        np.testing.assert_allclose(ceed.to_numpy(on[5]), r_start, rtol=1e-14, atol=1e-14)
    # step: x += d; r -= Ad; d = a d + c D^-1 r; from zero: x = d; r = b - Ad
    on = [ceed.asarray(v.copy()) for v in (inv_diag, b, Ad, d, x, r)]
    ops.chebyshev_step(a, c, *on[:1], on[2], on[3], on[4], on[5], on[1] if zero else None)
    x_new = d if zero else x + d
    r_new = b - Ad if zero else r - Ad
    d_new = a * d + c * inv_diag * r_new
    for v, expected in zip(on[3:], (d_new, x_new, r_new), strict=True):
        np.testing.assert_allclose(ceed.to_numpy(v), expected, rtol=1e-13, atol=1e-13)
    # last: x += d; r -= Ad (r None: x only); from zero: x = d; r = b - Ad
    for with_r in (True, False):
        if zero and not with_r:
            continue
        on = [ceed.asarray(v.copy()) for v in (inv_diag, b, Ad, d, x, r)]
        ops.chebyshev_last(on[2], on[3], on[4], on[5] if with_r else None, on[1] if zero else None)
        np.testing.assert_allclose(ceed.to_numpy(on[4]), x_new, rtol=1e-14, atol=1e-14)
        r_expected = r_new if with_r else r
        np.testing.assert_allclose(ceed.to_numpy(on[5]), r_expected, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "scaled"])
def test_vector_ops_scaled_scatter_gather_match_numpy(ceed, scaled):
    """Every backend's scaled scatter and gather (set and add) against NumPy indexing."""
    l_size, rng = 517, np.random.default_rng(7)
    index = np.sort(rng.choice(l_size, 301, replace=False))
    values, scale, w, v = (
        rng.standard_normal(301),
        rng.standard_normal(301),
        *_vectors(ceed, l_size, 1),
        rng.standard_normal(301),
    )
    ops = ceed.backend.vector_ops()
    for dtype in (np.int32, np.int64):
        idx = ceed.asarray(index.astype(dtype))
        s = ceed.asarray(scale) if scaled else None
        factor = scale if scaled else 1.0
        out = ceed.asarray(np.zeros(l_size))
        ops.scatter_scaled(ceed.asarray(values), idx, s, out)
        expected = np.zeros(l_size)
        expected[index] = factor * values
        np.testing.assert_allclose(ceed.to_numpy(out), expected, rtol=1e-15)
        for add in (False, True):
            got = ceed.asarray(v.copy())
            ops.gather_scaled(ceed.asarray(w), idx, s, got, add=add)
            expected = factor * w[index] + (v if add else 0.0)
            np.testing.assert_allclose(ceed.to_numpy(got), expected, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize(
    ("form", "dim", "p"), [("diffusion", 3, 3), ("mass", 3, 2), ("diffusion", 2, 4)]
)
def test_sum_factorized_diagonal_is_the_assembled_one(ceed, form, dim, p):
    """The tensor-product diagonal (hf.pmg's smoother scaling) against the assembled matrix."""
    space = hf.H1Space(ceed, meshes.box(2, dim=dim), p)
    for geometry in ("stored", "on_the_fly"):
        A = getattr(hf, form)(space, geometry=geometry)
        diag = ceed.to_numpy(A.linear_assemble_diagonal())
        matrix = A.linear_assemble()
        matrix = matrix if ceed.xp is np else matrix.get()
        np.testing.assert_allclose(diag, matrix.diagonal(), rtol=1e-12, atol=1e-14)


def _probed_diagonal(op):
    """The backend's diagonal of ``op`` from its QFunction, not from a form's q-data."""
    inner = op.op if isinstance(op, SubOperator) else op
    diag = inner.ceed.backend.operator_assemble_diagonal(inner)
    return diag if inner is op else diag[op.free_dofs]


@pytest.mark.parametrize("cells", ["hex", "tet"])
@pytest.mark.parametrize("form", ["mass", "diffusion"])
def test_forms_assemble_their_diagonal_from_the_q_data(ceed, cells, form):
    """hf.mass/hf.diffusion's linear_assemble_diagonal (LevelAssembly, what hf.jacobi and
    pmg take) equals the backend's diagonal probed through the QFunction."""
    mesh = meshes.box(2, 3, simplex=cells == "tet", distort=0.1)
    for geometry, num_comp in itertools.product(("stored", "on_the_fly"), (1, 3)):
        A = getattr(hf, form)(hf.H1Space(ceed, mesh, 3, num_comp), geometry=geometry)
        assert A.diagonal_assembly is not None
        expected = ceed.to_numpy(_probed_diagonal(A))
        got = ceed.to_numpy(A.linear_assemble_diagonal())
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14 * abs(expected).max())


@pytest.mark.parametrize(
    ("cells", "dim", "p", "form", "num_comp", "restricted", "coefficient"),
    [
        ("hex", 3, 4, "diffusion", 1, True, None),
        ("hex", 3, 3, "diffusion", 1, False, "callable"),
        ("hex", 2, 4, "diffusion", 1, False, None),
        ("hex", 2, 8, "diffusion", 1, True, None),
        ("hex", 1, 4, "diffusion", 1, False, None),
        ("hex", 3, 2, "mass", 1, False, 2.0),
        ("hex", 3, 2, "diffusion", 3, False, None),
        ("tet", 3, 2, "diffusion", 1, True, None),
        ("tet", 3, 3, "mass", 1, False, None),
        ("tet", 2, 4, "diffusion", 1, False, None),
    ],
)
def test_level_assembly_is_the_operators_assembly(
    ceed, cells, dim, p, form, num_comp, restricted, coefficient
):
    """The hierarchy's diagonals and coarsest matrix, sum-factorized from the q-data (one
    pass shared by the levels of the fine quadrature with ``galerkin``), against
    ``linear_assemble_diagonal`` and ``linear_assemble`` of each level's operator."""
    space = hf.H1Space(ceed, meshes.box(2, dim=dim, simplex=cells == "tet"), p, num_comp=num_comp)
    if coefficient == "callable":
        coefficient = lambda x: 1.0 + x[:, 0] * x[:, 1]  # noqa: E731
    geometries = ("stored", "on_the_fly") if coefficient is None and cells == "hex" else ("stored",)
    for geometry, galerkin in itertools.product(geometries, (False, True)):
        A = getattr(hf, form)(space, coefficient, geometry=geometry)
        if restricted:
            A = hf.restrict_dofs(A, space.free_dofs())
        levels = multigrid_hierarchy(A, galerkin=galerkin)
        for op, assembly in zip(levels.operators, levels.assembly, strict=True):
            expected = ceed.to_numpy(_probed_diagonal(op))
            got = ceed.to_numpy(assembly.linear_assemble_diagonal())
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14 * abs(expected).max())
        expected = op.linear_assemble()
        expected = (expected if ceed.xp is np else expected.get()).toarray()
        got = assembly.linear_assemble()
        assert isinstance(got, scipy.sparse.csr_matrix)
        np.testing.assert_allclose(got.toarray(), expected, atol=1e-13 * abs(expected).max())


def test_level_assembly_in_chunks_is_the_one_chunk_assembly(ceed, monkeypatch):
    """The hierarchy's diagonals and coarsest matrix filled in many chunks per level (each
    level's own lengths, taken together in cell order, coordinate blocks that chunks
    straddle; levels 4 and 2 share a curved coordinate space, level 1 has its own) equal
    the one-chunk fill."""
    from hofem import forms, level_assembly

    mesh = meshes.box((3, 2, 3), order=2, distort=0.1)

    def assemble():
        space = hf.H1Space(ceed, mesh, 4)
        A = hf.restrict_dofs(hf.diffusion(space, geometry="stored"), space.free_dofs())
        levels = multigrid_hierarchy(A)
        assert levels.orders == [4, 2, 1]
        diagonals = [ceed.to_numpy(a.linear_assemble_diagonal()) for a in levels.assembly]
        return diagonals, levels.assembly[-1].linear_assemble().toarray()

    whole = assemble()
    # chunks of 2 (Q = 6^3), 7 (4^3) and 18 (3^3) cells; blocks of 3 and 12 cells; the
    # host contracts the p = 4 level's 6 entries a cell at a time
    monkeypatch.setattr(hf.H1Space, "CHUNK_POINTS", 500)
    monkeypatch.setattr(forms._CoordinateBlocks, "VALUES", 300)
    monkeypatch.setattr(level_assembly, "HOST_CONTRACT_ENTRIES", 6 * 6**3)
    chunked = assemble()
    for got, expected in zip(chunked[0], whole[0], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15 * abs(expected).max())
    np.testing.assert_allclose(chunked[1], whole[1], rtol=0, atol=1e-13 * abs(whole[1]).max())


def _diagonals_and_iterations(ceed, mesh, p, form):
    """Every level's diagonal (host) and pmg's CG iterations on ``form``'s BP (on the fly)."""
    space = hf.H1Space(ceed, mesh, p)
    A = hf.restrict_dofs(getattr(hf, form)(space, geometry="on_the_fly"), space.free_dofs())
    diagonals = [
        ceed.to_numpy(a.linear_assemble_diagonal()) for a in multigrid_hierarchy(A).assembly
    ]
    b = ceed.asarray(np.random.default_rng(17).standard_normal(A.shape[0]))
    _, info = hf.cg(A, b, M=hf.pmg(A), rtol=1e-8)
    assert info == 0, info.message
    return diagonals, info.iterations


@pytest.mark.gpu
@pytest.mark.parametrize("resource", ["/gpu/cuda/batched", "/gpu/cuda/gen"])
@pytest.mark.parametrize(
    ("dim", "p", "form"), [(3, 6, "diffusion"), (3, 4, "mass"), (2, 8, "diffusion")]
)
def test_cuda_level_diagonals_are_numpys_and_pmg_iterates_alike(
    resource, dim, p, form, monkeypatch
):
    """The CUDA backends' level diagonals from the generated kernel of
    ``tensor_element_diagonal`` (BP3 at p = 6 as the bake-off's set-up, BP1, 2D) equal
    NumPy's to 1e-13, and pmg takes as many CG iterations as with the batched products
    the kernel replaces (on the same device: the smoothers' random start vectors differ
    between NumPy and CuPy)."""
    if resource not in hf.backends.available():
        pytest.skip(f"{resource} is not available here")
    from hofem.backends.cuda import element_diagonal

    mesh = meshes.box(3, dim=dim, distort=0.1)
    expected, _ = _diagonals_and_iterations(hf.Ceed("/cpu/self/ref"), mesh, p, form)
    with monkeypatch.context() as patch:  # no launch: the inherited batched products
        patch.setattr(element_diagonal, "diagonal_launch", lambda *shape: None)
        _, products = _diagonals_and_iterations(hf.Ceed(resource), mesh, p, form)
    calls = []
    kernel = element_diagonal.add_element_diagonal
    spy = lambda *args: calls.append(args[0]) or kernel(*args)  # noqa: E731
    monkeypatch.setattr(element_diagonal, "add_element_diagonal", spy)
    got, iterations = _diagonals_and_iterations(hf.Ceed(resource), mesh, p, form)
    assert (dim, p + 1) in {(launch.dim, launch.K) for launch in calls}, calls
    for level, want in zip(got, expected, strict=True):
        np.testing.assert_allclose(level, want, rtol=1e-13, atol=1e-15 * abs(want).max())
    assert iterations == products


@pytest.mark.parametrize("cells", ["hex", "tet"])
def test_level_fill_gathers_on_the_fly_coordinates_as_the_blocks_interpolate(
    ceed, cells, monkeypatch
):
    """On-the-fly levels fill their diagonals and coarsest matrix from chunks of coordinates
    gathered from the operators' coordinate L-vector (where it lives): the same as from the
    host-interpolated, uploaded coordinate blocks, on a curved mesh in many chunks."""
    from hofem import forms

    mesh = meshes.box((3, 2, 2), order=2, distort=0.1, simplex=cells == "tet")
    monkeypatch.setattr(hf.H1Space, "CHUNK_POINTS", 500)
    monkeypatch.setattr(forms._CoordinateBlocks, "VALUES", 300)

    def assemble():
        space = hf.H1Space(ceed, mesh, 4 if cells == "hex" else 2)
        A = hf.diffusion(space, geometry="on_the_fly")
        levels = multigrid_hierarchy(hf.restrict_dofs(A, space.free_dofs()))
        diagonals = [ceed.to_numpy(a.linear_assemble_diagonal()) for a in levels.assembly]
        return diagonals, levels.assembly[-1].linear_assemble().toarray()

    gathers = []
    real_gather = forms._CoordinateGather.__init__

    def counted(self, coords, x_l):
        gathers.append(coords)
        real_gather(self, coords, x_l)

    monkeypatch.setattr(forms._CoordinateGather, "__init__", counted)
    gathered = assemble()
    assert gathers, "no level gathered its coordinates"
    monkeypatch.setattr(forms._CoordinateGather, "usable", staticmethod(lambda c, x: False))
    interpolated = assemble()
    for got, expected in zip(gathered[0], interpolated[0], strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15 * abs(expected).max())
    np.testing.assert_allclose(
        gathered[1], interpolated[1], rtol=0, atol=1e-13 * abs(interpolated[1]).max()
    )


@pytest.mark.parametrize(
    ("dim", "p", "form"), [(3, 2, "diffusion"), (3, 3, "mass"), (2, 4, "diffusion")]
)
def test_sum_factorized_element_matrices_are_the_operators_matrix(ceed, dim, p, form):
    """form_assembly's matrix where its dense weights would be too large (sum factorization
    one q-data entry at a time, both orders of the off-diagonal ones) against the backend's
    linear_assemble."""
    from hofem.forms import _QDATA_PAIRS, form_assembly

    space = hf.H1Space(ceed, meshes.box(2, dim, distort=0.1), p)
    A = getattr(hf, form)(space, geometry="stored")
    assembly = form_assembly(A, matrix=True)
    pairs = _QDATA_PAIRS["Mass" if form == "mass" else "Poisson"][dim]
    assert assembly._weights_of(tuple(pairs)).matrices is None
    expected = A.linear_assemble()
    expected = (expected if ceed.xp is np else expected.get()).toarray()
    got = assembly.linear_assemble().toarray()
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13 * abs(expected).max())


@pytest.mark.parametrize(("cells", "p"), [("hex", 4), ("tet", 3)])
def test_whole_vector_cycle_is_the_cycle_on_the_free_dofs(ceed, cells, p):
    """The V-cycle of a restrict_dofs hierarchy, run on whole L-vectors, against the same
    cycle through the restricted operators and transfers."""
    space = hf.H1Space(ceed, box(cells, 3), p)
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    M = hf.pmg(A)
    assert M._whole is not None
    r = ceed.asarray(np.random.default_rng(8).standard_normal(A.shape[0]))
    expected = ceed.to_numpy(M._cycle(0, r))
    got = ceed.to_numpy(M(r))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * abs(expected).max())
    M.hierarchy.free_to_free = False  # a builder that does not promise it: no whole vectors
    assert WholeVectorCycle.of(M.hierarchy, M.smoothers, M.coarse) is None


def test_smoothers_the_whole_vector_cycle_replaces_hold_no_work_vectors(ceed):
    """A restrict_dofs hierarchy smooths with the whole-vector cycle's smoothers; the free-DOF
    smoothers (kept for the cycle through the restricted operators) hold only their inverse
    diagonals until they smooth: three vectors per level less."""
    from hofem.memory import memory_report

    space = hf.H1Space(ceed, box("hex", 3), 4)
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    M = hf.pmg(A)
    M(ceed.asarray(np.ones(A.shape[0])))
    held = memory_report(M.smoothers[0])
    assert held["host_bytes"] + held["device_bytes"] == 8 * A.shape[0]  # inv_diag only
    M._cycle(0, ceed.asarray(np.ones(A.shape[0])))  # the restricted cycle makes them
    held = memory_report(M.smoothers[0])
    assert held["host_bytes"] + held["device_bytes"] == 4 * 8 * A.shape[0]


def test_level_assemblies_are_freed_without_the_garbage_collector(ceed):
    """A form's diagonal (and the pmg set-up's) leaves no element-sized buffer behind: the
    LevelAssembly that held it is freed by its last reference, not at the collector's next
    pass (a reference cycle would keep device memory too)."""
    import gc
    import weakref

    from hofem.forms import form_assembly

    A = hf.diffusion(hf.H1Space(ceed, box("hex", 2), 3))
    enabled = gc.isenabled()
    gc.disable()
    try:
        assembly = form_assembly(A, matrix=True)
        diag = assembly.linear_assemble_diagonal()
        assembly.linear_assemble()
        ref = weakref.ref(assembly)
        del assembly
        assert ref() is None, "a reference cycle keeps the LevelAssembly alive"
        np.testing.assert_allclose(
            ceed.to_numpy(diag), ceed.to_numpy(A.linear_assemble_diagonal()), rtol=1e-14
        )
    finally:
        if enabled:
            gc.enable()


def test_pmg_holds_few_fine_vectors(ref):
    """What ``hf.pmg`` of a restricted form keeps after its set-up and a solve, counted by
    tracemalloc in vectors of the fine L-vector: the smoothers, the whole-vector cycle and
    the transfers, not the set-up's element diagonals and matrices nor the free-DOF
    transfers' buffers that the whole-vector cycle never uses (holding those would pass
    the bound on this 12^3 box at p = 4)."""
    import tracemalloc

    space = hf.H1Space(ref, meshes.box(12, 3), 4)
    A = hf.restrict_dofs(hf.diffusion(space, geometry="on_the_fly"), space.free_dofs())
    b = np.ones(A.shape[0])
    hf.cg(A, b, rtol=0.0, maxiter=2)  # the operator's own lazily made arrays
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        M = hf.pmg(A)
        x, info = hf.cg(A, b, rtol=1e-8, M=M)
        del x
        held = (tracemalloc.get_traced_memory()[0] - base) / (8 * A.op.shape[0])
    finally:
        tracemalloc.stop()
    assert info == 0
    assert held < 17, f"pmg holds {held:.1f} fine vectors"
