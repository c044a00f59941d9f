"""H1 spaces and forms: numbering through the restriction, orientation invariance,
curved geometry, and convergence of the BP1/BP3 solves (rates p + 1)."""

import numpy as np
import pytest

import hofem as hf
from hofem import meshes
from hofem.bakeoff.problems import setup, solve
from hofem.meshes import Mesh, box


def test_interpolation_matches_elementwise_evaluation(ceed):
    """A continuous function interpolated globally equals its element-by-element values."""
    for simplex in (False, True):
        mesh = box(2, 3, simplex=simplex, order=2, distort=0.1)
        space = hf.H1Space(ceed, mesh, 3)

        def f(x):
            return np.cos(x[:, 0]) + x[:, 1] * x[:, 2] ** 2

        e = ceed.to_numpy(space.restriction.apply(space.interpolate(f)))[:, 0]  # (E, P)
        elem_x = np.einsum("pg,egd->epd", space._geometry_interp(), mesh.cell_coordinates())
        np.testing.assert_allclose(e, f(elem_x.reshape(-1, 3)).reshape(e.shape), atol=1e-13)


def test_multiplicity_counts_sharing_elements(ceed):
    mesh = box(3, 2)
    space = hf.H1Space(ceed, mesh, 2)
    mult = ceed.to_numpy(space.restriction.multiplicity())
    x = space.node_coordinates()
    # vertices of the structured grid: interior vertex shared by 4 quads, edge midpoints by 2
    on_vertex = np.all(np.isclose(x * 3, np.round(x * 3)), axis=1)
    interior = np.all((x > 1e-12) & (x < 1 - 1e-12), axis=1)
    assert np.all(mult[on_vertex & interior] == 4)
    assert np.all(mult[~on_vertex & interior] <= 2)
    assert mult.sum() == space.num_elem * space.elem_size


def _cube_symmetries():
    """Orientation-preserving relabelings of the 8 hex corners (24 rotations)."""
    import itertools

    out = []
    for perm in itertools.permutations(range(3)):
        for flips in itertools.product((0, 1), repeat=3):
            sign = np.linalg.det(np.eye(3)[list(perm)]) * (-1) ** sum(flips)
            if sign > 0:
                mapping = []
                for corner in range(8):
                    bits = [(corner >> d) & 1 for d in range(3)]
                    new = [bits[perm[d]] ^ flips[d] for d in range(3)]
                    mapping.append(new[0] + 2 * new[1] + 4 * new[2])
                out.append(mapping)
    return out


def _relabel(mesh, rng):
    """Random vertex renumbering and a random proper rotation of each cell's corners."""
    perm = rng.permutation(mesh.points.shape[0])
    inverse = np.argsort(perm)
    cells = inverse[mesh.cells]
    if mesh.cell_type == "tetra":
        even = [
            p
            for p in __import__("itertools").permutations(range(4))
            if np.linalg.det(np.eye(4)[list(p)]) > 0
        ]
        cells = np.stack([c[list(even[rng.integers(len(even))])] for c in cells])
    else:
        rotations = _cube_symmetries()
        cells = np.stack([c[rotations[rng.integers(len(rotations))]] for c in cells])
    return Mesh(mesh.points[perm], mesh.cell_type, cells)


@pytest.mark.parametrize(("simplex", "order"), [(False, 3), (True, 4)])
def test_assembled_matrix_invariant_under_relabeling(ref, simplex, order):
    rng = np.random.default_rng(7)
    mesh = box(2, 3, simplex=simplex, distort=0.1)
    relabeled = _relabel(mesh, rng)
    mats, coords = [], []
    for m in (mesh, relabeled):
        space = hf.H1Space(ref, m, order)
        mats.append(hf.diffusion(space).linear_assemble().toarray())
        coords.append(np.round(space.node_coordinates(), 10))
    order_a = np.lexsort(coords[0].T)
    order_b = np.lexsort(coords[1].T)
    np.testing.assert_array_equal(coords[0][order_a], coords[1][order_b])
    np.testing.assert_allclose(
        mats[0][np.ix_(order_a, order_a)], mats[1][np.ix_(order_b, order_b)], atol=1e-12
    )


@pytest.mark.parametrize("cell", ["hex", "tet", "quad", "tri"])
def test_curved_volume_and_linear_patch(ceed, cell):
    """Curved order-2 geometry, isoparametric p = 2: exact volume and exact energies of x, y."""
    dim = 3 if cell in ("hex", "tet") else 2
    bounds = [(0.0, 2.0), (-1.0, 0.5), (0.0, 3.0)][:dim]
    mesh = box(2, dim, simplex=cell in ("tet", "tri"), order=2, distort=0.15, bounds=bounds)
    space = hf.H1Space(ceed, mesh, 2)
    volume = np.prod([b - a for a, b in bounds])
    one = ceed.asarray(np.ones(space.num_dofs))
    assert float(one @ hf.mass(space)(one)) == pytest.approx(volume, rel=1e-12)
    K = hf.diffusion(space)
    x = space.interpolate(lambda p: p[:, 0])
    y = space.interpolate(lambda p: p[:, 1])
    assert float(x @ K(x)) == pytest.approx(volume, rel=1e-11)
    assert abs(float(x @ K(y))) < 1e-11
    assert float(abs(K(one)).max()) < 1e-11


def test_space_validation(ref):
    mesh = box(1, 2)
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        hf.H1Space(ref, mesh, 0)
    space = hf.H1Space(ref, mesh, 1)
    with pytest.raises(ValueError, match=r"function must return shape \(4,\)"):
        space.interpolate(lambda x: x)
    with pytest.raises(ValueError, match="num_comp 1 or 3"):
        hf.mass(hf.H1Space(ref, mesh, 1, num_comp=2))
    with pytest.raises(ValueError, match="free_dofs must be sorted, unique"):
        hf.restrict_dofs(hf.mass(space), np.array([2, 1]))


def _rate(bp, cell, p, distort, ns):
    errors, hs = [], []
    for n in ns:
        mesh = box(n, 3, simplex=cell == "tet", distort=distort)
        result = solve(setup(bp, hf.Ceed("/cpu/self/ref"), p, mesh), rtol=1e-12, maxiter=4000)
        assert result["converged"]
        errors.append(result["l2_error"])
        hs.append(1.0 / n)
    return np.polyfit(np.log(hs), np.log(errors), 1)[0], errors


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["hex", "tet"])
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("bp", ["bp1", "bp3"])
def test_convergence_rates(bp, cell, p):
    """L2 error rate ~ p + 1, fitted over 3 refinements, on a distorted and a plain box."""
    ns = {1: (4, 6, 8), 2: (3, 4, 6), 3: (2, 3, 4), 4: (3, 4, 6)}[p]
    if cell == "tet":
        ns = {1: (3, 4, 6), 2: (2, 3, 4), 3: (2, 3, 4), 4: (3, 4, 5)}[p]
    for distort in (0.0, 0.1):
        rate, errors = _rate(bp, cell, p, distort, ns)
        # distorted meshes are still pre-asymptotic at p = 4 on these sizes (fitted 4.6)
        assert rate > p + 1 - (0.5 if distort else 0.35), (distort, rate, errors)
        assert errors[-1] < errors[0]


def test_high_order_is_spectrally_accurate(ref):
    """p = 8 on a 2^3 box: far more accurate than p = 4 on the same mesh."""
    mesh = box(2, 3)
    e4 = solve(setup("bp3", ref, 4, mesh), rtol=1e-12)["l2_error"]
    e8 = solve(setup("bp3", ref, 8, mesh), rtol=1e-12)["l2_error"]
    assert e8 < 1e-6 and e8 < 1e-3 * e4


def test_imported_mesh_bp3(ref):
    """BP3 on the L-shaped hex mesh file: the manufactured solution vanishes on its boundary."""
    mesh = meshes.read(meshes.data_path("lshape_hex.msh"))
    errors = [solve(setup("bp3", ref, p, mesh), rtol=1e-12)["l2_error"] for p in (1, 2, 3)]
    assert errors[2] < 0.1 * errors[1] < 0.01 * errors[0]
    assert errors[2] < 5e-3


@pytest.mark.parametrize("quad_mode", [hf.GAUSS, hf.GAUSS_LOBATTO])
def test_form_coefficients(ref, quad_mode):
    """Constant and spatially varying coefficients scale the stored quadrature data."""
    space = hf.H1Space(ref, box(2, 3, distort=0.1), 2)
    one = np.ones(space.num_dofs)
    x = space.interpolate(lambda p: p[:, 0])
    kwargs = {"q_extra": 1 if quad_mode is hf.GAUSS else 0, "quad_mode": quad_mode}
    mass = hf.mass(space, **kwargs)
    scaled = hf.mass(space, coefficient=2.5, **kwargs)(x)
    np.testing.assert_allclose(scaled, 2.5 * mass(x), rtol=1e-13, atol=1e-16)
    # int (1 + x) over the unit box (boundary fixed by the distortion) = 1.5; the collocated
    # Gauss-Lobatto rule (q = p + 1) does not integrate the distorted geometry exactly
    varying = hf.mass(space, coefficient=lambda p: 1 + p[:, 0], **kwargs)
    assert one @ varying(one) == pytest.approx(1.5, rel=1e-6 if kwargs["q_extra"] == 0 else 1e-12)
    # int (1 + y) |grad x|^2 = int (1 + y) = 1.5
    stiff = hf.diffusion(space, coefficient=lambda p: 1 + p[:, 1], **kwargs)
    assert x @ stiff(x) == pytest.approx(1.5, rel=1e-6 if kwargs["q_extra"] == 0 else 1e-12)
    with pytest.raises(ValueError, match=r"coefficient\(x\) must return shape"):
        hf.mass(space, coefficient=lambda p: p)


def test_load_vector_and_errors_are_the_same_in_chunks(ref):
    """Host quadrature work runs in element chunks; the sums do not depend on the chunk size."""
    space = hf.H1Space(ref, box(3, 3, distort=0.1), 2)
    f = lambda x: np.sin(x[:, 0]) * x[:, 1]  # noqa: E731
    u = space.interpolate(f)
    whole = space.load_vector(f), space.errors(u, lambda x: f(x) + 1, lambda x: 0 * x)
    space.CHUNK_POINTS = 200  # 3 elements of 64 points per chunk
    assert len(list(space._chunks(1))) == 9
    chunked = space.load_vector(f), space.errors(u, lambda x: f(x) + 1, lambda x: 0 * x)
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(chunked[1], whole[1], rtol=1e-12)


def test_functions_run_on_the_backend_or_on_host_copies(ceed):
    """Functions get the backend's arrays; one that needs host arrays gets a host copy.

    ``np.asarray`` raises TypeError on a CuPy array, so on GPU backends the host-only
    function takes the fallback while the NumPy-ufunc one runs on the device; on CPU
    backends both take the same path. Other errors are not swallowed.
    """
    space = hf.H1Space(ceed, box(2, 2, distort=0.1), 2, num_comp=2)
    seen = []

    def device_f(x):  # (n, dim) -> (n, 2), ufuncs and np.stack only
        seen.append(type(x))
        return np.stack([np.sin(x[:, 0]) * x[:, 1], np.cos(x[:, 1])], axis=1)

    def host_f(x):
        x = np.asarray(x)  # TypeError on a CuPy array
        return np.stack([np.sin(x[:, 0]) * x[:, 1], np.cos(x[:, 1])], axis=1)

    def grad(x):  # (n, 2 components, dim)
        return np.zeros((x.shape[0], 2, x.shape[1]))

    xp = ceed.xp
    b = space.load_vector(device_f)
    assert seen and all(t is type(b) for t in seen)  # points on the backend
    np.testing.assert_allclose(
        ceed.to_numpy(space.load_vector(host_f)), ceed.to_numpy(b), rtol=1e-14, atol=1e-16
    )
    u = space.interpolate(device_f)
    np.testing.assert_allclose(ceed.to_numpy(space.interpolate(host_f)), ceed.to_numpy(u))
    assert isinstance(u, xp.ndarray) and space.errors(u, host_f) < 1e-3
    l2, h1 = space.errors(u, device_f, grad)
    assert l2 == pytest.approx(space.errors(u, host_f), rel=1e-12) and h1 > 0.1
    with pytest.raises(ValueError, match="boom"):
        space.load_vector(lambda x: (_ for _ in ()).throw(ValueError("boom")))


@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion])
@pytest.mark.parametrize("simplex", [False, True])
def test_vector_forms_are_their_component_operator_on_each_block(ceed, simplex, form, geometry):
    """A 3-component form's ``component_operator()`` is the scalar form of the same q-data or
    coordinates (shared vectors, made once) and the form applies it on each component block
    of its component-major L-vectors; scalar forms have none."""
    mesh = box(2, 3, simplex=simplex, distort=0.0 if geometry == "on_the_fly" else 0.1)
    space = hf.H1Space(ceed, mesh, 2, num_comp=3)
    op = form(space, geometry=geometry)
    scalar = op.component_operator()
    assert scalar is op.component_operator() and scalar.shape == (space.num_nodes,) * 2
    passive = [f.vector for f in op.fields.values() if not f.is_active]
    assert [f.vector for f in scalar.fields.values() if not f.is_active] == passive
    assert form(hf.H1Space(ceed, mesh, 2), geometry=geometry).component_operator is None
    n = space.num_nodes
    u = np.random.default_rng(0).standard_normal(3 * n)
    for scale in (None, 2.5):  # the form's coefficient changed on its QFunction since
        if scale is not None and op.qf.context is not None:
            op.qf.set_context({"scale": scale})
        scalar = op.component_operator()
        blocks = [ceed.to_numpy(scalar(ceed.asarray(u[c * n : (c + 1) * n]))) for c in range(3)]
        whole = ceed.to_numpy(op(ceed.asarray(u)))
        assert np.abs(np.concatenate(blocks) - whole).max() <= 1e-13 * np.abs(whole).max()
