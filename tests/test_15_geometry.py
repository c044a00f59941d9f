"""Geometry on the fly (``geometry="on_the_fly"``) gives the stored q-data operator to round-off.

Mass and diffusion, scalar and 3-component, 1D/2D/3D, affine boxes, curved
boxes whose order-p coordinates are perturbed at every node, simplices and
the curved sample meshes; orders 1..8 sampled.  The stored operator is the
oracle.
"""

import re

import numpy as np
import pytest

import hofem as hf
from hofem import meshes
from hofem.backends.cuda.operator_warp import WARP_CELL_SHAPES, WARP_GRAD_SHAPES
from hofem.basis import cell_center
from hofem.geometry import (
    AFFINE_POINT_FLOPS,
    MACHINE_BALANCE,
    ON_THE_FLY_SHAPES,
    ON_THE_FLY_SIMPLEX_SHAPES,
    choose_geometry,
    geometry_costs,
    grad_flops,
)
from hofem.meshes import box

RTOL = 1e-13


def _perturbed(mesh, n, scale, seed=0):
    """``mesh`` (``n`` cells per direction) with every geometry node moved by up to ``scale``
    times the node spacing: curved cells that no box map describes."""
    h = 1.0 / (n * 2)  # the order-2 geometry's node spacing
    noise = np.random.default_rng(seed).uniform(-1.0, 1.0, mesh.points.shape)
    mesh.points = mesh.points + scale * h * noise
    return mesh


def _compare(space, form, coefficient=None):
    """Relative max difference of on-the-fly and stored applies on a random vector."""
    stored = form(space, coefficient=coefficient, geometry="stored")
    fly = form(space, coefficient=coefficient, geometry="on_the_fly")
    assert "qdata" not in [f.name for f in fly.input_fields]
    ceed = space.ceed
    u = ceed.asarray(np.random.default_rng(1).standard_normal(space.num_dofs))
    a, b = ceed.to_numpy(stored(u)), ceed.to_numpy(fly(u))
    return np.abs(a - b).max() / np.abs(a).max()


# (dim, order, num_comp, elements per direction, curved)
CASES = [
    (1, 5, 1, 4, True),
    (1, 3, 3, 3, False),
    (2, 1, 1, 3, True),
    (2, 4, 3, 2, True),
    (2, 7, 1, 2, False),
    (3, 1, 1, 2, True),
    (3, 2, 3, 2, True),
    (3, 3, 1, 2, False),
    (3, 6, 1, 2, True),
    (3, 8, 1, 1, True),
]


@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize(("dim", "order", "num_comp", "n", "curved"), CASES)
def test_on_the_fly_equals_stored_box(ceed, form, dim, order, num_comp, n, curved):
    mesh = box(n, dim, order=2 if curved else 1, distort=0.1 if curved else 0.0)
    if curved:
        mesh = _perturbed(mesh, n, 0.05)
    assert mesh.is_affine is not curved
    space = hf.H1Space(ceed, mesh, order, num_comp=num_comp)
    assert _compare(space, form) < RTOL
    # affine cells: the Jacobian once per element, from the basis at the cell centre
    dx = form(space, geometry="on_the_fly").fields["dx"].basis
    assert dx.is_cell_constant is not curved


def _sheared(n, dim):
    """A box of ``n`` cells per direction under a full linear map: parallelepipeds whose
    Jacobian has no zero entry, in a different order of magnitude than the unit box."""
    unit = box(n, dim)
    A = np.array([[2.0, 0.3, -0.2], [0.5, 1.5, 0.4], [-0.1, 0.6, 3.0]])[:dim, :dim]
    return meshes.Mesh(1e3 * (unit.points @ A.T) + 7.0, unit.cell_type, unit.cells)


@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize(("dim", "order", "num_comp"), [(2, 3, 1), (3, 2, 3), (3, 5, 1)])
def test_on_the_fly_on_parallelepipeds(ceed, form, dim, order, num_comp):
    """Sheared cells (12 and 27 of them: full and partial SIMD blocks) through the
    cell-centre basis equal the stored q-data of the trilinear map."""
    mesh = _sheared(3, dim)
    assert mesh.is_affine
    space = hf.H1Space(ceed, mesh, order, num_comp=num_comp)
    assert form(space, geometry="on_the_fly").fields["dx"].basis.is_cell_constant
    assert _compare(space, form) < RTOL


def test_mesh_is_affine():
    """Affine cells: the same Jacobian at every geometric node, to rounding."""
    assert box(3).is_affine and box(2, 2).is_affine and box(4, 1).is_affine
    assert box(2, simplex=True).is_affine and box(2, order=2).is_affine
    assert not box(3, distort=0.1).is_affine
    assert not box(2, order=3, distort=0.05).is_affine
    square = box(1, 2)
    trapezoid = square.points + np.array([[0, 0], [0, 0], [0, 0], [0.1, 0]])
    assert not meshes.Mesh(trapezoid, "quad", square.cells).is_affine
    assert meshes.Mesh(trapezoid[[0, 1, 2]], "triangle", [[0, 1, 2]]).is_affine
    surface = meshes.Mesh(np.c_[box(2, 2).points, np.zeros(9)], "quad", box(2, 2).cells)
    assert not surface.is_affine  # gdim > dim
    assert _sheared(2, 3).is_affine


def test_cell_center_basis(ceed):
    """GRAD of the cell-centre basis is exact at every point for affine fields; INTERP is the
    centre value; first_point is one row; errors name the argument."""
    from hofem.basis import cell_center

    b = ceed.BasisTensorH1Lagrange(3, 1, 3, 4, hf.GAUSS)
    c = cell_center(b)
    assert c.is_cell_constant and not b.is_cell_constant
    assert (c.P_1d, c.Q_1d) == (3, 4)
    np.testing.assert_array_equal(c.q_weight_1d, b.q_weight_1d)
    # an affine field at the order-2 GLL nodes (x fastest): f = 1 + 2 x - y + 0.5 z
    g = np.array([-1.0, 0.0, 1.0])
    z, y, x = np.meshgrid(g, g, g, indexing="ij")
    f = (1 + 2 * x - y + 0.5 * z).ravel()
    grad = ceed.to_numpy(c.apply(1, hf.NOTRANSPOSE, hf.EVAL_GRAD, ceed.asarray(f[None, None])))
    np.testing.assert_allclose(grad[0, :, 0], np.tile([[2.0], [-1.0], [0.5]], 64), atol=1e-14)
    value = ceed.to_numpy(c.apply(1, hf.NOTRANSPOSE, hf.EVAL_INTERP, ceed.asarray(f[None, None])))
    np.testing.assert_allclose(value[0, 0], 1.0, atol=1e-14)  # the centre's, at every point
    one = c.first_point()
    assert (one.Q_1d, one.num_qpts) == (1, 1) and one is c.first_point()
    np.testing.assert_array_equal(one.grad_1d, c.grad_1d[:1])
    with pytest.raises(ValueError, match="Q_1d >= P_1d"):
        cell_center(ceed.BasisTensorH1Lagrange(2, 1, 4, 3, hf.GAUSS))
    tet = ceed.BasisH1Lagrange(hf.TET, 1, 1, 2)  # simplex bases: tests/test_16_simplex_rules.py
    assert not tet.is_cell_constant and cell_center(tet).is_cell_constant
    with pytest.raises(ValueError, match="num_qpts >= num_nodes"):
        cell_center(ceed.BasisH1Lagrange(hf.TET, 1, 2, 2))  # Q = 8 < P = 10


@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize(
    ("source", "order"),
    [("tri_box.vtk", 3), ("quad9_box.vtu", 4), ("curved_tet10.msh", 2), ("lshape_hex.msh", 3)],
)
def test_on_the_fly_equals_stored_sample_meshes(ceed, form, source, order):
    mesh = meshes.read(meshes.data_path(source))
    assert _compare(hf.H1Space(ceed, mesh, order), form) < RTOL


def test_coordinate_space_is_the_lowest_exact_order(ceed):
    """On the fly reads the mesh's vertices on straight-sided cells, the geometry's own
    order on curved ones, never above the space's order; one per space, subsets share it."""
    mesh = box(3, 3, distort=0.1)  # straight-sided, geometry order 1
    space = hf.H1Space(ceed, mesh, 4)
    coords = space.coordinate_space()
    assert coords is space.coordinate_space()
    assert (coords.order, coords.num_comp, coords.num_nodes) == (1, 3, mesh.num_points)
    x = ceed.to_numpy(coords.coordinates).reshape(3, -1).T  # (num_points, 3)
    np.testing.assert_allclose(x, mesh.points, atol=1e-15)
    op = hf.diffusion(space, geometry="on_the_fly")
    assert (op.fields["dx"].basis.P_1d, op.fields["dx"].basis.Q_1d) == (2, 6)
    subset = space.element_subset(5, 20).coordinate_space()
    assert subset.num_elem == 15
    np.testing.assert_array_equal(subset.offsets, coords.offsets[5:20])
    curved = _perturbed(box(2, 3, order=2, distort=0.1), 2, 0.05)
    assert hf.H1Space(ceed, curved, 3).coordinate_space().order == 2
    low = hf.H1Space(ceed, curved, 1)
    assert low.coordinate_space().offsets is low.offsets  # order 1 already: its numbering


def test_orders_of_one_mesh_share_its_coordinate_space(ceed):
    """with_order keeps the coordinate space (and the coordinate L-vector the on-the-fly
    levels read) where both orders reach the geometry's; the order-k space its numbering."""
    space = hf.H1Space(ceed, box(3, 3, distort=0.1), 4)
    coords = space.coordinate_space()
    assert space.with_order(2).coordinate_space() is coords
    low = space.with_order(1)
    assert low.coordinate_space() is coords and low.offsets is coords.offsets
    subset = space.element_subset(5, 20).with_order(2)
    assert subset.num_elem == 15
    np.testing.assert_array_equal(subset.coordinate_space().offsets, coords.offsets[5:20])
    curved = _perturbed(box(2, 3, order=2, distort=0.1), 2, 0.05)
    fine = hf.H1Space(ceed, curved, 4)
    assert fine.with_order(2).coordinate_space() is fine.coordinate_space()
    assert fine.with_order(1).coordinate_space().order == 1  # below the geometry's order
    op = hf.diffusion(space, geometry="on_the_fly")
    M = hf.pmg(hf.restrict_dofs(op, space.free_dofs()))
    x = [level.op.fields["dx"].vector for level in M.hierarchy.operators]
    assert x[1] is x[0] and x[2] is x[0]  # one coordinate L-vector for every level


@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
def test_constant_coefficient_scales_on_the_fly(ceed, form):
    space = hf.H1Space(ceed, _perturbed(box(2, 3, order=2, distort=0.1), 2, 0.05), 3)
    assert _compare(space, form, coefficient=2.5) < RTOL
    one = space.ceed.asarray(np.ones(space.num_dofs))
    plain = space.ceed.to_numpy(form(space, geometry="on_the_fly")(one))
    scaled = space.ceed.to_numpy(form(space, coefficient=2.5, geometry="on_the_fly")(one))
    np.testing.assert_allclose(scaled, 2.5 * plain, rtol=1e-13, atol=1e-14)


def test_auto_gives_the_same_operator(ceed):
    space = hf.H1Space(ceed, _perturbed(box(2, 3, order=2, distort=0.1), 2, 0.05), 4)
    u = ceed.asarray(np.random.default_rng(2).standard_normal(space.num_dofs))
    for form in (hf.mass, hf.diffusion):
        a = ceed.to_numpy(form(space, geometry="stored")(u))
        b = ceed.to_numpy(form(space)(u))  # geometry="auto" is the default
        assert np.abs(a - b).max() <= RTOL * np.abs(a).max()


def test_geometry_argument_errors(ref):
    space = hf.H1Space(ref, box(1, 2), 2)
    for form in (hf.mass, hf.diffusion):
        with pytest.raises(ValueError, match="geometry must be one of 'stored', 'on_the_fly'"):
            form(space, geometry="fly")
        with pytest.raises(ValueError, match="geometry='on_the_fly' needs a constant coefficient"):
            form(space, coefficient=lambda x: x[:, 0], geometry="on_the_fly")
        # a callable coefficient under "auto" is stored q-data
        op = form(space, coefficient=lambda x: 1 + x[:, 0])
        assert "qdata" in [f.name for f in op.input_fields]


def test_cost_model():
    ref = hf.Ceed("/cpu/self/ref")
    space = hf.H1Space(ref, box(1, 3), 6)
    basis = space.basis()
    costs = geometry_costs("diffusion", basis, 6)
    assert costs["saved_bytes"] == 8 * 6 * 8**3
    assert costs["added_flops"] > grad_flops(3, 3, 7, 8)
    # 3D grad of one component on P_1d = 2, Q_1d = 3: 2 + 3 + 3 contractions
    assert grad_flops(3, 1, 2, 3) == 2 * 2 * (8 * 3) + 3 * 2 * (4 * 9) + 3 * 2 * (2 * 27)
    assert choose_geometry("auto", "/cpu/self/ref", costs) == "stored"  # not fused
    assert choose_geometry("stored", "/gpu/cuda/gen", costs) == "stored"
    assert choose_geometry("on_the_fly", "/cpu/self/ref", costs) == "on_the_fly"
    # BP1 stores 1 value per point: recomputing 9 never pays on any backend in the table
    mass = geometry_costs("mass", basis, 1)
    assert all(choose_geometry("auto", r, mass) == "stored" for r in MACHINE_BALANCE)
    # the vertex coordinates (P_1d = 2): BP3's model ratio (flops per saved byte) falls from
    # 2.86 at p = 2 to 2.43 at p = 8, above both fused backends' balance: stored everywhere,
    # and a balance of 2.5 would recompute from p = 6 on
    for p, recompute_at_2_5 in ((2, False), (5, False), (6, True), (8, True)):
        solution = ref.BasisTensorH1Lagrange(3, 1, p + 1, p + 2, hf.GAUSS)
        vertices = ref.BasisTensorH1Lagrange(3, 3, 2, p + 2, hf.GAUSS)
        costs = geometry_costs("diffusion", solution, 6, vertices)
        assert costs["added_bytes"] == 3 * (8 + 4 * 8)
        for resource in ("/cpu/self/numba", "/gpu/cuda/gen"):
            assert choose_geometry("auto", resource, costs) == "stored"
        saved = costs["saved_bytes"] - costs["added_bytes"]
        assert (costs["added_flops"] < 2.5 * saved) == recompute_at_2_5
        bp1 = geometry_costs("mass", solution, 1, vertices)
        assert all(choose_geometry("auto", r, bp1) == "stored" for r in MACHINE_BALANCE)
        # affine cells (the Jacobian once per element): BP3 recomputes on numba, BP1 keeps
        # its one stored value per point; gen recomputes BP3 at every order (one warp per
        # element at p = 1..6, the slab at p = 7, 8) and BP1 at p = 5..8 (one warp per
        # element, then the tiles layout), else keeps stored q-data (balance 0)
        centre = cell_center(vertices)
        bp3 = geometry_costs("diffusion", solution, 6, centre)
        assert bp3["added_flops"] == 2 * 9 * 8 + AFFINE_POINT_FLOPS["diffusion"][3] * (p + 2) ** 3
        assert choose_geometry("auto", "/cpu/self/numba", bp3) == "on_the_fly"
        assert choose_geometry("auto", "/gpu/cuda/gen", bp3) == "on_the_fly"
        bp1 = geometry_costs("mass", solution, 1, centre)
        assert choose_geometry("auto", "/cpu/self/numba", bp1) == "stored"
        expected = "on_the_fly" if p in (5, 6, 8) else "stored"
        assert choose_geometry("auto", "/gpu/cuda/gen", bp1) == expected


def test_gen_recomputes_where_it_runs_one_warp_per_element():
    """gen's "auto" shapes are shapes where it runs the operator with the geometry on the fly
    one warp per element: every such shape of the Poisson operator, the mass operator's at
    p = 5, 6 (a test, so that the tables cannot drift apart); the Poisson operator's
    shapes past the warp layout (``Q_1d > 8``: BP3 p = 7, 8 and BP5 p = 8), whose slab also
    measured faster on the fly; the mass operator's at p = 7, 8, where the tiles layout
    with the affine Jacobian ran faster than with stored q-data (at p = 8: its CG kernel
    faster than the slab's with stored q-data, the apply as fast)."""
    from hofem.backends.cuda.operator_tiles import TILE_CELL_SHAPES

    shapes = ON_THE_FLY_SHAPES["/gpu/cuda/gen"]
    slab = {(3, 8, 9), (3, 9, 10), (3, 9, 9)}
    assert shapes["diffusion"] == set(WARP_GRAD_SHAPES) | slab
    assert shapes["mass"] == {(3, 6, 7), (3, 7, 8), (3, 8, 9), (3, 9, 10)}
    assert shapes["mass"] <= set(WARP_CELL_SHAPES) | TILE_CELL_SHAPES
    assert set(shapes) == {"diffusion", "mass"}


def test_gen_recomputes_tets_where_its_tensor_core_kernel_ran_faster():
    """gen's "auto" on affine tets with the user defaults (symmetric rules): on the fly at the
    shapes of ``ON_THE_FLY_SIMPLEX_SHAPES`` (BP1 and BP3 at p = 5, 6), which are shapes of its
    tensor-core simplex kernel; stored q-data at p = 4 (balance 0)."""
    from hofem import tuning

    ref = hf.Ceed("/cpu/self/ref")
    mesh = box(1, 3, simplex=True)
    for p in (4, 5, 6):
        space = hf.H1Space(ref, mesh, p)
        for form, size in (("mass", 1), ("diffusion", 6)):
            rule = hf.form_quadrature(space, form)
            centre = cell_center(space.coordinate_space().basis(**rule))
            costs = geometry_costs(form, space.basis(**rule), size, centre)
            assert costs["shape"] is None and costs["cell_constant"]
            assert costs["simplex_shape"] in tuning.simplex().tensor_cores
            want = "on_the_fly" if p >= 5 else "stored"
            assert choose_geometry("auto", "/gpu/cuda/gen", costs) == want, (p, form)
    shapes = ON_THE_FLY_SIMPLEX_SHAPES["/gpu/cuda/gen"]
    assert set(shapes) == {"mass", "diffusion"}
    assert shapes["mass"] | shapes["diffusion"] <= tuning.simplex().tensor_cores


def test_register_cap_policy():
    """Kernels of REGISTER_CAP_FROM registers or more get the REGISTER_CAP ceiling while T_1d
    is small (past it: capped; below it: room to use more); others are kept."""
    from hofem.backends.cuda.operator_fuse import (
        REGISTER_CAP,
        REGISTER_CAP_FROM,
        REGISTER_CAP_MAX_T_1D,
        register_cap,
    )

    assert REGISTER_CAP_FROM <= REGISTER_CAP
    assert register_cap(REGISTER_CAP + 1, REGISTER_CAP_MAX_T_1D) == REGISTER_CAP
    assert register_cap(255, 6) == REGISTER_CAP
    assert register_cap(REGISTER_CAP_FROM, 6) == REGISTER_CAP  # a ceiling above its count
    assert register_cap(REGISTER_CAP_FROM - 1, 6) is None  # the BP1 kernels: kept
    assert register_cap(255, REGISTER_CAP_MAX_T_1D + 1) is None  # spills would cost more


def test_constant_matrix_copies_follow_the_budget():
    """The fused kernel reads the slowest axis's 1D matrices from exact constant-memory
    copies, taken while they fit the budget in the order the source is generated (inputs,
    outputs, direct evaluations at the points); the other axes, and every axis in 1D, read
    the shared copies.  Needs no device."""
    from box import box_operator

    from hofem.backends.cuda.operator_fuse import fusable_shape, kernel_source

    ceed = hf.Ceed("/cpu/self/ref")

    def tables(op, budget, collocated=True):  # name -> (Q_1d x P_1d entries) of each copy
        code = kernel_source(op, fusable_shape(op, 16), collocated, constant_bytes=budget)
        found = re.findall(r"__constant__ double c_(\w+)\[(\d+)\] = \{([^}]*)\}", code)
        for name, size, values in found:
            assert f"c_{name}," in code  # read by the contractions
            assert len(values.split(",")) == int(size)
        return {
            name: np.array([float.fromhex(v) for v in values.split(",")])
            for name, _, values in found
        }

    op, _ = box_operator(ceed, "diffusion", 2, 3, 3)  # P_1d 4, Q_1d 5; D is 5 x 5
    basis = op.input_fields[0].basis
    assert tables(op, 0) == {}
    everything = tables(op, 10**6)
    assert list(everything) == ["B0", "D", "Bt0"]  # interpolate, differentiate, back
    assert np.array_equal(everything["B0"], basis.interp_1d.ravel())  # bit for bit
    assert np.array_equal(everything["Bt0"], basis.interp_1d.T.ravel())
    assert list(tables(op, 8 * 20)) == ["B0"]
    assert list(tables(op, 8 * 20 + 8 * 25 - 1)) == ["B0", "Bt0"]  # D does not fit
    assert list(tables(op, 10**6, collocated=False)) == ["B0", "G0", "Bt0", "Gt0"]
    assert tables(box_operator(ceed, "diffusion", 2, 3, 1)[0], 10**6) == {}  # 1D
    # on the fly: the vertex coordinates' B1, G1 (P_1d = 2), read by direct_at at the points
    otf = box_operator(ceed, "diffusion", 2, 3, 3, geometry="on_the_fly")[0]
    copies = tables(otf, 10**6)
    assert list(copies) == ["B0", "D", "Bt0", "B1", "G1"]
    (vertex,) = {f.basis for f in otf.input_fields if f.basis and f.basis.P_1d == 2}
    assert np.array_equal(copies["G1"], vertex.grad_1d.ravel())


def test_warp_kernels_weigh_from_the_1d_weights():
    """gen's one-warp-per-element kernels form the quadrature weights at each point from an
    exact constant copy of the 1D weights (no weight parameter: the level's factor, times the
    lane's product of the other two in its operand table); the slab kernel reads the
    tensor-product table.  Weight fields of different 1D weights are not warp-fusable.  Needs
    no device."""
    from box import box_operator

    from hofem.backends.cuda.operator_fuse import fusable_shape, kernel_source
    from hofem.backends.cuda.operator_warp import warp_fusable, warp_kernel_source

    ceed = hf.Ceed("/cpu/self/ref")
    op = box_operator(ceed, "mass", 2, 3, geometry="on_the_fly")[0]  # weights: input 2
    shape = fusable_shape(op, 16)
    code = warp_kernel_source(op, shape)
    (values,) = re.findall(r"__constant__ double c_w\[\d+\] = \{([^}]*)\}", code)
    weights = np.array([float.fromhex(v) for v in values.split(",")])
    assert np.array_equal(weights, op.input_fields[0].basis.q_weight_1d)  # bit for bit
    assert "c_w[k] * frag(WF_W + h)" in code and " in2" not in code
    assert "const double *__restrict__ in2" in kernel_source(op, shape)
    lobatto = ceed.BasisTensorH1Lagrange(3, 1, 2, shape[2], hf.GAUSS_LOBATTO)
    inputs = [("a", 1, hf.EVAL_WEIGHT), ("b", 1, hf.EVAL_WEIGHT), ("u", 1, hf.EVAL_INTERP)]
    two = ceed.Operator(ceed.QFunction(_two_weights, inputs, [("v", 1, hf.EVAL_INTERP)]))
    u = op.input_fields[0]
    for name, basis in (("a", u.basis), ("b", lobatto)):
        two.set_field(name, hf.ELEMRESTRICTION_NONE, basis, hf.VECTOR_NONE)
    two.set_field("u", u.restriction, u.basis, hf.VECTOR_ACTIVE)
    two.set_field("v", u.restriction, u.basis, hf.VECTOR_ACTIVE)
    assert not warp_fusable(two)


def _two_weights(ctx, a, b, u, v):
    v[0] = (a[0] + b[0]) * u[0]


def test_fusable_shape_mixed_orders():
    """/gpu/cuda/gen fuses fields of different P_1d on one set of points (the shape takes
    the largest P_1d); other points do not.  Needs no device."""
    from hofem.backends.cuda.operator_fuse import fusable_shape

    ceed = hf.Ceed("/cpu/self/ref")
    space = hf.H1Space(ceed, box(2, distort=0.1), 5)
    assert fusable_shape(hf.diffusion(space, geometry="on_the_fly"), 16) == (3, 6, 7)
    assert fusable_shape(hf.diffusion(space, geometry="on_the_fly"), 6) is None  # Q_1d 7 > 6

    def mixed(P_geo, Q_geo, quad_mode):
        op = ceed.Operator(ceed.QFunctionByName("Poisson3DApplyGeometry"))
        op.set_field("du", space.restriction, space.basis(), hf.VECTOR_ACTIVE)
        geo = ceed.BasisTensorH1Lagrange(3, 3, P_geo, Q_geo, quad_mode)
        coords = space.coordinate_space()
        op.set_field("dx", coords.restriction, geo, coords.coordinates)
        op.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
        op.set_field("dv", space.restriction, space.basis(), hf.VECTOR_ACTIVE)
        return fusable_shape(op, 16)

    assert mixed(2, 7, hf.GAUSS) == (3, 6, 7)
    assert mixed(2, 7, hf.GAUSS_LOBATTO) is None  # same Q_1d, other points
    with pytest.raises(ValueError, match="quadrature points per element"):
        mixed(2, 6, hf.GAUSS)  # the operator itself refuses another Q_1d


def _signed_mass_geometry(ctx, u, dx, weights, v):
    # untraceable (np.sign is not in the tracer's table): the numba kernel calls it per point
    det = dx[0] * dx[3] - dx[1] * dx[2]
    v[0] = np.sign(det) * det * weights[0] * u[0]


def test_cell_constant_field_in_a_called_qfunction(ceed):
    """A user QFunction the numba backend cannot trace reads the cell-centre gradient on
    its one-point scratch at every point, like the traced path and every other backend."""
    mesh = _sheared(3, 2)
    space = hf.H1Space(ceed, mesh, 3)
    stored = hf.mass(space, geometry="stored")
    coords = space.coordinate_space()
    geo = cell_center(coords.basis(q_extra=1 + space.order - coords.order))
    qf = ceed.QFunction(
        _signed_mass_geometry,
        [("u", 1, hf.EVAL_INTERP), ("dx", 4, hf.EVAL_GRAD), ("weights", 1, hf.EVAL_WEIGHT)],
        [("v", 1, hf.EVAL_INTERP)],
    )
    op = ceed.Operator(qf)
    op.set_field("u", space.restriction, space.basis(), hf.VECTOR_ACTIVE)
    op.set_field("dx", coords.restriction, geo, coords.coordinates)
    op.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
    op.set_field("v", space.restriction, space.basis(), hf.VECTOR_ACTIVE)
    u = ceed.asarray(np.random.default_rng(3).standard_normal(space.num_dofs))
    a, b = ceed.to_numpy(stored(u)), ceed.to_numpy(op(u))
    assert np.abs(a - b).max() < RTOL * np.abs(a).max()


def test_numba_recomputes_simplex_mass_where_the_element_product_saves_enough():
    """The element-matrix form of the mass on affine simplices (numba only) decides "auto"
    by the multiply-adds it saves over B and B^T; tensor bases and the Poisson form are
    left to the cost model, and the other backends keep stored q-data."""
    from hofem.geometry import ELEMENT_MATRIX_SAVINGS

    least = ELEMENT_MATRIX_SAVINGS["/cpu/self/numba"]
    nb = hf.Ceed("/cpu/self/numba") if "/cpu/self/numba" in hf.available() else None
    for p in (2, 3, 4, 6):
        space = hf.H1Space(hf.Ceed("/cpu/self/ref"), box(1, 3, simplex=True), p)
        rule = hf.form_quadrature(space, "mass")
        basis = space.basis(**rule)
        P, Q = basis.num_nodes, basis.num_qpts
        centre = cell_center(space.coordinate_space().basis(**rule))
        costs = geometry_costs("mass", basis, 1, centre)
        assert costs["element_matrix_savings"] == 2 * P * Q - P * P
        want = "on_the_fly" if 2 * P * Q - P * P >= least else "stored"
        assert want == ("on_the_fly" if p >= 4 else "stored")
        assert choose_geometry("auto", "/cpu/self/numba", costs) == want
        gen = "on_the_fly" if p == 6 else "stored"  # ON_THE_FLY_SIMPLEX_SHAPES, not savings
        assert choose_geometry("auto", "/gpu/cuda/gen", costs) == gen
        assert choose_geometry("auto", "/cpu/self/ref", costs) == "stored"
        if nb is not None:
            assert hf.resolve_geometry(hf.H1Space(nb, space.mesh, p), "mass") == want
    hexes = hf.H1Space(hf.Ceed("/cpu/self/ref"), box(1, 3), 6)
    assert geometry_costs("mass", hexes.basis(), 1)["element_matrix_savings"] == 0
