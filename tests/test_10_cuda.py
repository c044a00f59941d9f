"""GPU backends: kernels at the specialization edges, int64 indices, CuPy interop, CG.

Oracle: ``/cpu/self/ref``.  Skips cleanly without CuPy or a CUDA device.
"""

import itertools

import numpy as np
import pytest
from util import box_operator, half_written_operator, mass_operator, poisson_operator

import hofem as hf
from hofem import meshes

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
if "/gpu/cuda/ref" not in hf.backends.available():
    pytest.skip("no CUDA device visible to CuPy", allow_module_level=True)

GPU = ["/gpu/cuda/ref", "/gpu/cuda/batched", "/gpu/cuda/gen"]


def rel_error(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


@pytest.fixture(scope="module")
def batched():
    return hf.Ceed("/gpu/cuda/batched")


@pytest.fixture(scope="module", params=GPU)
def gpu(request):
    return hf.Ceed(request.param)


def test_gpu_cuda_resolves_to_gen():
    assert hf.Ceed("/gpu/cuda").resource == "/gpu/cuda/gen"
    assert hf.Ceed("/gpu").resource == "/gpu/cuda/gen"


# (dim, num_comp, P_1d, Q_1d): every range edge (P 2, 10; Q 1, 11; dim 1-3; comp 1-3)
EDGES = [
    (dim, comp, P, Q)
    for dim in (1, 2, 3)
    for comp, P, Q in ((1, 2, 1), (3, 2, 11), (2, 10, 1), (1, 10, 11), (3, 4, 6))
]


@pytest.mark.parametrize("collocated", [True, False])
@pytest.mark.parametrize(("dim", "num_comp", "P", "Q"), EDGES)
def test_tensor_kernels_match_ref(batched, ref, dim, num_comp, P, Q, collocated):
    """Collocated gradients apply where Q >= P; the other grad kernels everywhere."""
    from hofem.backends.cuda import kernels

    elems, _ = kernels.basis_block(dim, P, Q)
    num_elem = 2 * elems + 1  # not a multiple of the elements per block
    rng = np.random.default_rng(dim * 1000 + P * 10 + Q)
    batched.backend.collocated = collocated
    try:
        b_gpu = batched.BasisTensorH1Lagrange(dim, num_comp, P, Q, hf.GAUSS)
    finally:
        batched.backend.collocated = type(batched.backend).collocated
    assert (b_gpu.backend_data.collocated is not None) == (collocated and Q >= P)
    b_ref = ref.BasisTensorH1Lagrange(dim, num_comp, P, Q, hf.GAUSS)
    nodes = (num_elem, num_comp, P**dim)
    for mode, qpts in (
        (hf.EVAL_INTERP, (num_elem, num_comp, Q**dim)),
        (hf.EVAL_GRAD, (num_elem, dim, num_comp, Q**dim)),
    ):
        for t_mode, shape in ((hf.NOTRANSPOSE, nodes), (hf.TRANSPOSE, qpts)):
            u = rng.standard_normal(shape)
            got = b_gpu.apply(num_elem, t_mode, mode, batched.asarray(u))
            want = b_ref.apply(num_elem, t_mode, mode, u)
            assert got.shape == want.shape
            assert rel_error(batched.to_numpy(got), want) < 1e-12, (mode, t_mode)


@pytest.mark.parametrize("scatter", ["map", "atomic"])
def test_restriction_kernels_match_ref(batched, ref, scatter):
    rng = np.random.default_rng(7)
    num_elem, elem_size, num_comp, comp_stride, n = 37, 5, 3, 41, 41
    offsets = rng.integers(0, n, size=(num_elem, elem_size))
    args = (num_elem, elem_size, num_comp, comp_stride, num_comp * n, offsets)
    r_gpu, r_ref = batched.ElemRestriction(*args), ref.ElemRestriction(*args)
    u = rng.standard_normal(num_comp * n)
    e = rng.standard_normal((num_elem, num_comp, elem_size))
    batched.backend.scatter = scatter
    try:
        got_e = r_gpu.apply(batched.asarray(u))
        got_u = r_gpu.apply(batched.asarray(e), hf.TRANSPOSE)
    finally:
        batched.backend.scatter = type(batched.backend).scatter
    np.testing.assert_array_equal(batched.to_numpy(got_e), r_ref.apply(u))
    assert rel_error(batched.to_numpy(got_u), r_ref.apply(e, hf.TRANSPOSE)) < 1e-14


@pytest.mark.parametrize("scatter", ["map", "atomic"])
def test_int64_index_path(batched, scatter):
    """l_size > 2^31: int64 indices, a few elements at both ends of the L-vector."""
    l_size = 2**31 + 17
    offsets = np.array([[0, 3, l_size - 1], [5, l_size - 2, 3], [l_size - 9, 1, 2]])
    r = batched.ElemRestriction(3, 3, 1, 1, l_size, offsets)
    assert r.backend_data.index_dtype == np.int64
    rng = np.random.default_rng(3)
    touched = np.unique(offsets)
    values = rng.standard_normal(touched.size)
    u = cupy.zeros(l_size)
    u[cupy.asarray(touched)] = cupy.asarray(values)
    e = r.apply(u)
    lookup = dict(zip(touched.tolist(), values.tolist(), strict=True))
    np.testing.assert_array_equal(
        batched.to_numpy(e).reshape(3, 3), np.vectorize(lookup.get)(offsets)
    )
    del u
    batched.backend.scatter = scatter
    try:
        v = r.apply(e, hf.TRANSPOSE)
    finally:
        batched.backend.scatter = type(batched.backend).scatter
    expected = np.bincount(
        np.searchsorted(touched, offsets.ravel()), weights=batched.to_numpy(e).ravel()
    )
    np.testing.assert_allclose(batched.to_numpy(v[cupy.asarray(touched)]), expected, rtol=1e-15)
    assert float(cupy.abs(v).sum()) == pytest.approx(float(np.abs(expected).sum()))


@pytest.mark.parametrize("build", [mass_operator, poisson_operator])
def test_operator_matches_ref_odd_elements(gpu, ref, build):
    op_gpu, _ = build(gpu, n=3, p=4, dim=3, warp=0.1)  # 27 elements
    op_ref, _ = build(ref, n=3, p=4, dim=3, warp=0.1)
    u = np.random.default_rng(1).standard_normal(op_ref.shape[1])
    assert rel_error(gpu.to_numpy(op_gpu(gpu.asarray(u))), op_ref(u)) < 1e-12
    diag = gpu.to_numpy(op_gpu.linear_assemble_diagonal())
    assert rel_error(diag, op_ref.linear_assemble_diagonal()) < 1e-12


def test_host_arrays_rejected(gpu):
    op, s = mass_operator(gpu, n=2, p=2, dim=2)
    host = np.zeros(op.shape[1])
    with pytest.raises(TypeError, match=r"ceed\.asarray"):
        op(host)
    with pytest.raises(TypeError, match=r"ceed\.asarray"):
        s["r_u"].apply(host)
    with pytest.raises(TypeError, match=r"ceed\.asarray"):
        s["basis"].apply(4, hf.NOTRANSPOSE, hf.EVAL_INTERP, np.zeros((4, 1, 9)))


def test_linear_operator_is_cupyx_and_solves(gpu):
    import cupyx.scipy.sparse.linalg

    op, _ = mass_operator(gpu, n=3, p=2, dim=3, warp=0.1)
    A = op.as_linear_operator()
    assert isinstance(A, cupyx.scipy.sparse.linalg.LinearOperator)
    b = gpu.asarray(np.random.default_rng(2).standard_normal(op.shape[0]))
    x, info = cupyx.scipy.sparse.linalg.cg(A, b, rtol=1e-12, maxiter=500)
    assert info == 0
    assert float(cupy.linalg.norm(op(x) - b)) < 1e-9 * float(cupy.linalg.norm(b))
    assert isinstance(op.linear_assemble(), cupyx.scipy.sparse.csr_matrix)


def test_gpu_cg_matches_cpu_cg(gpu, ref):
    rng = np.random.default_rng(4)
    ops = {}
    for ceed in (gpu, ref):
        poisson, _ = poisson_operator(ceed, n=3, p=3, dim=3, warp=0.1)
        mass, _ = mass_operator(ceed, n=3, p=3, dim=3, warp=0.1)
        ops[ceed] = ceed.CompositeOperator([poisson, mass])
    b = rng.standard_normal(ops[ref].shape[0])
    x_ref, info_ref = hf.cg(ops[ref], b, rtol=1e-10, M=hf.jacobi(ops[ref]))
    x_gpu, info_gpu = hf.cg(
        ops[gpu], gpu.asarray(b), rtol=1e-10, M=hf.jacobi(ops[gpu]), check_every=5
    )
    assert info_ref == 0 and info_gpu == 0
    assert abs(info_gpu.iterations - info_ref.iterations) <= 5
    assert rel_error(gpu.to_numpy(x_gpu), x_ref) < 1e-8


@pytest.fixture(scope="module")
def gen():
    return hf.Ceed("/gpu/cuda/gen")


def _fused(op):
    """Apply once and report whether /gpu/cuda/gen ran it as one fused kernel."""
    op(op.ceed.xp.zeros(op.shape[1]))
    return op.backend_data["gen"][1] is not None


@pytest.mark.parametrize("collocated", [True, False])
@pytest.mark.parametrize(("dim", "p"), [(1, 1), (1, 8), (2, 2), (2, 9), (3, 1), (3, 4), (3, 9)])
@pytest.mark.parametrize("form", ["mass", "diffusion"])
def test_gen_fuses_and_matches_ref(gen, ref, dim, p, form, collocated):
    """One fused kernel per operator, odd element counts, P_1d 2..10, Q_1d 3..11."""
    n = 3 if dim == 3 else 5
    gen.backend.collocated = collocated
    try:
        op_gen, parts = box_operator(gen, form, n, p, dim, warp=0.1)
        assert _fused(op_gen)
    finally:
        gen.backend.collocated = type(gen.backend).collocated
    op_ref, _ = box_operator(ref, form, n, p, dim, warp=0.1)
    assert _fused(parts["build"])
    u = np.random.default_rng(p).standard_normal(op_ref.shape[1])
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), op_ref(u)) < 1e-12


@pytest.mark.parametrize(
    ("dim", "p"), [(1, 1), (2, 2), (2, 9), (3, 1), (3, 2), (3, 4), (3, 5), (3, 6), (3, 9)]
)
@pytest.mark.parametrize("form", ["mass", "diffusion"])
def test_gen_kernel_returns_u_dot_Au(gen, dim, p, form):
    """CG's kernel variant: the block partial sums add up to u . Au, and a stop skips it."""
    n = {1: 40, 2: 12, 3: 6}[dim]  # more blocks than one, threads idle where T_1D > P_1d
    op, _ = box_operator(gen, form, n, p, dim, warp=0.1)
    _check_dot(gen, op)


def _check_dot(gen, op, run=None):
    """``apply_dot``'s partial sums add up to u . Au; a stopped CG's status skips it.
    ``run``: the kernel to check (default: the one gen's CG takes for ``op``)."""
    run = gen.backend.cg_apply_dot(op) if run is None else run
    assert run is not None
    u = cupy.random.default_rng(3).standard_normal(op.shape[1])
    v = cupy.zeros_like(u)
    partial = cupy.full(run.num_blocks, cupy.nan)  # (blocks,) every entry written
    status = cupy.zeros(3, dtype=cupy.int64)
    run.apply_dot(u, v, partial, status)
    assert rel_error(v.get(), op(u).get()) < 1e-13
    assert float(partial.sum()) == pytest.approx(float(cupy.vdot(u, v)), rel=1e-12)
    status[0] = 1  # a stopped solve: the kernel leaves everything as it is
    run.apply_dot(u, v, partial, status)
    assert rel_error(v.get(), op(u).get()) < 1e-13


def test_gen_apply_dot_from_the_fused_kernel(gen):
    """Operator.apply_dot on gen (CG's host loop) takes u . Au from the kernel's dot variant."""
    op, _ = box_operator(gen, "diffusion", 5, 3, 3, warp=0.1)
    u = cupy.random.default_rng(8).standard_normal(op.shape[1])
    v = cupy.full(op.shape[0], cupy.nan)
    dot = op.apply_dot(u, v)
    assert "gen-dot" in op.backend_data
    assert rel_error(v.get(), op(u).get()) < 1e-13
    assert float(dot) == pytest.approx(float(cupy.vdot(u, op(u))), rel=1e-12)


@pytest.mark.parametrize("p", [4, 8])
def test_gen_register_cap_keeps_results(gen, p):
    """A fused kernel compiled at the register cap computes what the uncapped one does (to
    the rounding of the atomic adds' order); the operator runs the one its shape's cap
    (slab_register_cap, p = 8: 168) or else the register_cap rule picks."""
    from hofem.backends.cuda import operator_fuse as of

    op, _ = box_operator(gen, "diffusion", 4, p, 3, warp=0.1)
    fused = gen.backend._fused_operator(op)
    code = fused._source()
    plain = of._compile_options(code, ())
    capped = of._compile_options(code, (f"--maxrregcount={of.REGISTER_CAP}",))
    assert capped.num_regs <= of.REGISTER_CAP
    cap = of.slab_register_cap(op, fused._shape)
    if cap is None:
        cap = of.register_cap(plain.num_regs, max(fused._shape[1:]))
    expected = plain if cap is None else of._compile_options(code, (f"--maxrregcount={cap}",))
    assert fused._kernel is expected
    u = cupy.random.default_rng(p).standard_normal(op.shape[1])
    outputs = []
    for kernel in (plain, capped):
        fused._kernel = kernel
        v = cupy.zeros_like(u)
        fused(u, v)
        outputs.append(v.get())
    assert rel_error(outputs[0], outputs[1]) < 1e-14


@pytest.mark.parametrize(("p", "geometry"), [(2, "stored"), (6, "on_the_fly")])
def test_gen_constant_matrices_keep_results(gen, p, geometry):
    """A fused kernel reading the slowest axis's matrices from constant memory computes
    what the one reading shared memory does (to the rounding of the atomic adds' order)."""
    from hofem.backends.cuda import operator_fuse as of

    op, _ = box_operator(gen, "diffusion", 3, p, 3, warp=0.1, geometry=geometry)
    fused = of.FusedOperator(op, gen.backend._fused_operator(op)._shape)  # the slab kernel
    t_1d = max(fused._shape[1:])
    u = cupy.random.default_rng(p).standard_normal(op.shape[1])
    outputs = []
    for budget in (0, 10**6):
        code = of.kernel_source(op, fused._shape, fused._collocated, constant_bytes=budget)
        assert ("__constant__" in code) == (budget > 0)
        fused._kernel = of._compile(code, t_1d)
        v = cupy.zeros_like(u)
        fused(u, v)
        outputs.append(v.get())
    assert rel_error(outputs[0], outputs[1]) < 1e-14


@pytest.mark.parametrize("p", range(1, 9))
@pytest.mark.parametrize(
    ("form", "geometry", "collocated"),
    [("mass", "stored", True), ("diffusion", "stored", True), ("diffusion", "on_the_fly", False)],
)
def test_gen_tensor_cores_keep_results(gen, p, form, geometry, collocated):
    """The x and y contraction stages on the fp64 tensor cores compute what the scalar stages
    do (interp, the collocated derivative and the full gradient, forward and transposed, and
    the vertex coordinates beside the solution), with elements split across warps."""
    from hofem.backends.cuda import operator_fuse as of

    gen.backend.collocated = collocated
    try:
        op, _ = box_operator(gen, form, 3, p, 3, warp=0.1, geometry=geometry)
    finally:
        gen.backend.collocated = type(gen.backend).collocated
    fused = of.FusedOperator(op, gen.backend._fused_operator(op)._shape)  # the slab kernel
    assert fused._collocated == collocated
    u = cupy.random.default_rng(p).standard_normal(op.shape[1])
    outputs = []
    for on in (False, True):
        code = of.kernel_source(op, fused._shape, fused._collocated, tensor_cores=on)
        assert ("#define TENSOR_CORES" in code) == on
        fused._kernel = of._compile(code, max(fused._shape[1:]))
        v = cupy.zeros_like(u)
        fused(u, v)
        outputs.append(v.get())
    assert rel_error(outputs[0], outputs[1]) < 1e-13


@pytest.mark.parametrize(("form", "p", "expected"), [("mass", 6, True), ("mass", 4, False)])
def test_gen_tensor_core_policy(gen, monkeypatch, form, p, expected):
    """The slab's tensor-core stages run for the shapes of TENSOR_CORE_SHAPES whose scalar
    kernel is below REGISTER_CAP_FROM (BP1 p = 6), in the CG kernel too; elsewhere the scalar
    stages.  (gen runs these two with one warp per element: the slab is asked for here.)"""
    from hofem.backends.cuda import operator_fuse as of
    from hofem.backends.cuda import operator_warp as ow

    monkeypatch.setattr(ow, "use_warp_layout", lambda op, shape: False)
    op, _ = box_operator(gen, form, 4, p, 3)
    fused = gen.backend._fused_operator(op)
    assert fused.layout == "slab"
    assert fused._tensor_cores == expected
    assert fused._tensor_cores == of.use_tensor_cores(fused._shape, 0)
    assert not of.use_tensor_cores(fused._shape, of.REGISTER_CAP_FROM)
    assert ("#define TENSOR_CORES" in fused._source(dot=True)) == expected
    rhs = op(cupy.ones(op.shape[1]))
    x, info = hf.cg(op, rhs, rtol=1e-10, maxiter=500, device_loop=True)
    assert info == 0
    assert rel_error(op(x).get(), rhs.get()) < 1e-8


def test_gen_vector_and_setup_operators(gen, ref):
    """Three-component fields fuse too."""
    from hofem import meshes

    ops = {}
    for ceed in (gen, ref):
        space = hf.H1Space(ceed, meshes.box(2, distort=0.1), 3, num_comp=3)
        ops[ceed] = [hf.mass(space), hf.diffusion(space)]
    u = np.random.default_rng(5).standard_normal(ops[ref][0].shape[1])
    for op_gen, op_ref in zip(ops[gen], ops[ref], strict=True):
        assert _fused(op_gen)
        assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), op_ref(u)) < 1e-12


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "distorted"])
@pytest.mark.parametrize("collocated", [True, False])
@pytest.mark.parametrize(("dim", "p", "num_comp"), [(1, 9, 1), (2, 3, 3), (3, 1, 1), (3, 6, 1)])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
def test_gen_fuses_geometry_on_the_fly(
    gen, ref, monkeypatch, dim, p, num_comp, form, collocated, affine
):
    """The vertex coordinates (P_1d = 2) beside the order-p solution fuse into one kernel
    (each thread evaluates them from all nodes; on affine cells once, at the centre, with
    the solution's collocated derivative kept) and give the stored q-data operator.  (gen
    runs some of these one warp per element, test_gen_warp_layout_gradients: the slab is
    asked for here.)"""
    from hofem import meshes
    from hofem.backends.cuda import operator_warp as ow

    monkeypatch.setattr(ow, "use_warp_layout", lambda op, shape: False)

    mesh = meshes.box(3, dim, distort=0.0 if affine else 0.1)
    gen.backend.collocated = collocated
    try:
        space = hf.H1Space(gen, mesh, p, num_comp=num_comp)
        op = form(space, geometry="on_the_fly")
        dx = op.fields["dx"].basis
        constant = affine or dim == 1  # every 1D cell is affine
        assert dx.P_1d == 2 and dx.is_cell_constant is constant and _fused(op)
        fused = op.backend_data["gen"][1]
        assert fused._collocated is collocated  # the centre basis does not break D
        assert ("r_in1 + 0, 0, 0); }" in fused._source()) is constant  # at one point
    finally:
        gen.backend.collocated = type(gen.backend).collocated
    stored = form(hf.H1Space(ref, mesh, p, num_comp=num_comp), geometry="stored")
    u = np.random.default_rng(p).standard_normal(op.shape[1])
    assert rel_error(gen.to_numpy(op(gen.asarray(u))), stored(u)) < 1e-13
    _check_dot(gen, op)


def test_unwritten_output_rows_are_zero(gpu, ref):
    """Output rows a QFunction never writes are zero (batched writes its Q-vectors without a
    zero fill first: the traced kernel stores 0 there), on a pool full of old values."""
    results = []
    for ceed in (gpu, ref):
        op, u = half_written_operator(ceed, 2)
        if ceed is gpu:
            junk = cupy.full(1 << 20, cupy.nan)  # leave NaNs in the memory pool
            del junk
        results.append(ceed.to_numpy(op(ceed.asarray(u))))
    n = results[1].size // 2
    assert np.all(results[0][n:] == 0.0)
    assert rel_error(results[0], results[1]) < 1e-13


def test_gen_two_active_outputs_and_context(gen, ref):
    """A user QFunction with a context and two active outputs (mass + diffusion)."""

    def body(ctx, u, du, qd, v, dv):
        v[0] = ctx["alpha"] * qd[0] * u[0]
        for d in range(3):
            dv[d] = ctx["beta"] * qd[0] * du[d]

    results = []
    for ceed in (gen, ref):
        _, parts = mass_operator(ceed, n=3, p=3, dim=3, warp=0.1)
        qf = ceed.QFunction(
            body,
            inputs=[("u", 1, hf.EVAL_INTERP), ("du", 3, hf.EVAL_GRAD), ("qd", 1, hf.EVAL_NONE)],
            outputs=[("v", 1, hf.EVAL_INTERP), ("dv", 3, hf.EVAL_GRAD)],
            context={"alpha": 2.0, "beta": 0.5},
        )
        op = ceed.Operator(qf)
        r, b = parts["r_u"], parts["basis"]
        for name in ("u", "du"):
            op.set_field(name, r, b, hf.VECTOR_ACTIVE)
        op.set_field("qd", parts["r_q"], hf.BASIS_NONE, parts["qdata"])
        for name in ("v", "dv"):
            op.set_field(name, r, b, hf.VECTOR_ACTIVE)
        u = np.random.default_rng(6).standard_normal(op.shape[1])
        if ceed is gen:
            assert _fused(op)
            _check_dot(gen, op)  # u . Au sums over both outputs
        results.append(ceed.to_numpy(op(ceed.asarray(u))))
    assert rel_error(*results) < 1e-12


def test_gen_falls_back_when_untraceable(gen, ref):
    """A body that branches on values runs through the batched stages, same result."""

    def body(ctx, u, qd, v):
        v[0] = qd[0] * u[0] if float(qd[0][0]) > 0 else u[0]

    results = []
    for ceed in (gen, ref):
        _, parts = mass_operator(ceed, n=2, p=2, dim=3)
        qf = ceed.QFunction(
            body,
            inputs=[("u", 1, hf.EVAL_INTERP), ("qd", 1, hf.EVAL_NONE)],
            outputs=[("v", 1, hf.EVAL_INTERP)],
        )
        op = ceed.Operator(qf)
        op.set_field("u", parts["r_u"], parts["basis"], hf.VECTOR_ACTIVE)
        op.set_field("qd", parts["r_q"], hf.BASIS_NONE, parts["qdata"])
        op.set_field("v", parts["r_u"], parts["basis"], hf.VECTOR_ACTIVE)
        if ceed is gen:
            assert not _fused(op)
        u = np.random.default_rng(8).standard_normal(op.shape[1])
        results.append(ceed.to_numpy(op(ceed.asarray(u))))
    assert rel_error(*results) < 1e-12


@pytest.mark.parametrize("check_every", [1, 7])
def test_gpu_cg_unpreconditioned_matches_cpu(gpu, ref, check_every):
    """The fused x/r update + r.r path (no preconditioner) follows the CPU recurrence."""
    ops = {ceed: poisson_operator(ceed, n=3, p=3, dim=3, warp=0.1)[0] for ceed in (gpu, ref)}
    shifted = {
        ceed: ceed.CompositeOperator([op, mass_operator(ceed, n=3, p=3, dim=3)[0]])
        for ceed, op in ops.items()
    }
    b = np.random.default_rng(9).standard_normal(ops[ref].shape[0])
    x_ref, info_ref = hf.cg(shifted[ref], b, rtol=1e-10)
    x_gpu, info_gpu = hf.cg(shifted[gpu], gpu.asarray(b), rtol=1e-10, check_every=check_every)
    assert info_ref == 0 and info_gpu == 0
    assert abs(info_gpu.iterations - info_ref.iterations) <= check_every
    assert rel_error(gpu.to_numpy(x_gpu), x_ref) < 1e-8


def test_gpu_cg_flags_breakdown(gpu):
    """An indefinite operator (-A) is reported as a breakdown, not a wrong answer."""
    op, _ = mass_operator(gpu, n=2, p=2, dim=3)
    b = gpu.asarray(np.random.default_rng(10).standard_normal(op.shape[0]))
    _, info = hf.cg(lambda v: -op(v), b, rtol=1e-10, check_every=3)
    assert info < 0 and "breakdown" in info.message


@pytest.fixture
def every_warp_shape(monkeypatch):
    """gen runs every warp-fusable 3D operator of P_1d, Q_1d <= 8 one warp per element,
    however many values per point it keeps."""
    from hofem.backends.cuda import operator_warp as ow

    shapes = {(3, P, Q): ow.MIN_BLOCKS for P in range(1, 9) for Q in range(1, 9)}
    for table in (
        "WARP_SHAPES",
        "WARP_CELL_SHAPES",
        "WARP_VECTOR_SHAPES",
        "WARP_GRAD_SHAPES",
        "WARP_GRAD_STORED_SHAPES",
        "WARP_VECTOR_GRAD_SHAPES",
        "WARP_VECTOR_GRAD_STORED_SHAPES",
    ):
        monkeypatch.setattr(ow, table, shapes)
    monkeypatch.setattr(ow, "MAX_POINT_ROWS", 12)
    monkeypatch.setattr(ow, "MAX_GRAD_ROWS", 12)


def _check_box_layout(gen, ref, form, p, warp, geometry, layout="warp", **box):
    """gen runs ``form`` on a 27-element box in ``layout`` (one warp per element by default),
    equal to ref to 1e-13, and its u . Au variant (:func:`_check_dot`); ``box``: more
    arguments of ``box_operator`` (``q``, ``quad_mode``)."""
    op_gen, _ = box_operator(gen, form, 3, p, warp=warp, geometry=geometry, **box)
    assert gen.backend._fused_operator(op_gen).layout == layout
    op_ref, _ = box_operator(ref, form, 3, p, warp=warp, geometry=geometry, **box)
    u = np.random.default_rng(p).standard_normal(op_ref.shape[1])
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), op_ref(u)) < 1e-13
    _check_dot(gen, op_gen)


@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("form", ["mass", "diffusion"])
@pytest.mark.parametrize("p", [7, 8])
def test_gen_blocked_layout_matches_ref(gen, ref, monkeypatch, p, form, geometry):
    """The register-blocked slab (operator_blocked, two columns a thread) where the warp layout
    stops, Q_1d = 9, 10: BP1 and BP3 on 27 elements (two per block: a partial last block),
    stored q-data on distorted cells and the Jacobian of affine cells on the fly, equal to
    ref; the u . Au variant and a stopped CG's status.  The slab at the same shape is the
    control."""
    from hofem.backends.cuda import operator_blocked, operator_tiles

    warp = 0.1 if geometry == "stored" else 0.0
    for table in ("TILE_SHAPES", "TILE_CELL_SHAPES"):  # BP1 p = 7, 8: the tiles layout's
        monkeypatch.setattr(operator_tiles, table, frozenset())
    monkeypatch.setattr(operator_blocked, "BLOCKED_SHAPES", frozenset())
    _check_box_layout(gen, ref, form, p, warp, geometry, layout="slab")
    shape = (3, p + 1, p + 2)  # box_operator's Q_1d = P_1d + 1 Gauss points
    table = "BLOCKED_SHAPES" if form == "mass" else "BLOCKED_GRAD_SHAPES"
    monkeypatch.setattr(operator_blocked, table, frozenset({shape}))
    _check_box_layout(gen, ref, form, p, warp, geometry, layout="blocked")


@pytest.mark.parametrize(("warps", "team"), [(1, 1), (4, 1), (2, 2)])
@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("p", [7, 8])
def test_gen_tile_layout_matches_ref(gen, ref, monkeypatch, p, geometry, warps, team):
    """The tiles layout (operator_tiles: a team of warps per element, every contraction a
    GEMM) at Q_1d = 9, 10 once its table lists the shape: BP1 on 27 elements at one and four
    elements a block of one warp each and two of two warps (a partial last block; the teams'
    named barriers), stored q-data on distorted cells and the Jacobian of affine cells on the
    fly, equal to ref; the u . Au variant and a stopped CG's status."""
    from hofem.backends.cuda import operator_tiles

    warp = 0.1 if geometry == "stored" else 0.0
    for table in ("TILE_SHAPES", "TILE_CELL_SHAPES"):
        monkeypatch.setattr(operator_tiles, table, frozenset({(3, p + 1, p + 2)}))
    monkeypatch.setattr(operator_tiles, "WARPS", warps)
    monkeypatch.setattr(operator_tiles, "TEAM", team)
    _check_box_layout(gen, ref, "mass", p, warp, geometry, layout="tiles")


@pytest.mark.parametrize("warps", [1, 4])
@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("p", [4, 8])
def test_gen_tile_grad_layout_matches_ref(gen, ref, monkeypatch, p, geometry, warps):
    """The collocated gradient tiles layout (operator_tiles_grad: one warp per element, every
    contraction a GEMM) once its tables list the shape: BP5 (Gauss-Lobatto points at the
    nodes) on 27 elements at one and four warps a block (a partial last block), stored
    q-data on distorted cells and the Jacobian of affine cells on the fly, equal to ref; the
    u . Au variant and a stopped CG's status.  BP6 runs it on each component
    (component_split)."""
    from hofem.backends.cuda import component_split, operator_tiles_grad

    shape = (3, p + 1, p + 1)
    for table in ("TILE_GRAD_SHAPES", "TILE_GRAD_CELL_SHAPES"):
        monkeypatch.setattr(operator_tiles_grad, table, frozenset({shape}))
    for table in ("SPLIT_GRAD_SHAPES", "SPLIT_GRAD_ON_THE_FLY_SHAPES"):
        monkeypatch.setattr(component_split, table, frozenset({shape}))
    for default in ("WARPS", "WARPS_STORED"):
        monkeypatch.setattr(operator_tiles_grad, default, warps)
    warp = 0.1 if geometry == "stored" else 0.0
    gll = {"q": p + 1, "quad_mode": hf.GAUSS_LOBATTO}
    _check_box_layout(gen, ref, "diffusion", p, warp, geometry, "tiles, gradients", **gll)
    mesh = meshes.box(3, 3, distort=warp)
    ops = [
        hf.diffusion(hf.H1Space(ceed, mesh, p, num_comp=3), geometry=geometry, q_extra=0,
                     quad_mode=hf.GAUSS_LOBATTO)
        for ceed in (gen, ref)
    ]  # fmt: skip
    assert gen.backend._fused_operator(ops[0]).layout == "tiles, gradients per component"
    u = np.random.default_rng(p).standard_normal(ops[1].shape[1])
    assert rel_error(gen.to_numpy(ops[0](gen.asarray(u))), ops[1](u)) < 1e-13
    _check_dot(gen, ops[0])


@pytest.mark.parametrize(("form", "cap"), [("mass", 128), ("diffusion", 168)])
def test_gen_slab_compiles_at_the_tables_register_cap(gen, monkeypatch, form, cap):
    """BP1 and BP3 at p = 8 (``Q_1d = 10``, the slab) compile their apply kernel once, at
    ``cuda_fused.json``'s cap, and the CG variant at the rule, without it
    (``test_gen_blocked_layout_matches_ref`` checks their output)."""
    from hofem.backends.cuda import operator_fuse as of

    op, _ = box_operator(gen, form, 1, 8)
    assert gen.backend._fused_operator(op).layout == "slab"
    options, compile_options = [], of._compile_options

    def recorded(code, opts):
        options.append(opts)
        return compile_options(code, opts)

    monkeypatch.setattr(of, "_compile_options", recorded)
    fused = of.FusedOperator(op, of.fusable_shape(op, 16))
    assert options == [(f"--maxrregcount={cap}",)]
    assert fused._kernel.num_regs <= cap
    options.clear()
    _check_dot(gen, op, fused)
    assert options and f"--maxrregcount={cap}" not in sum(options, ())


def _check_interior_cg(gen, ref, ops, spaces):
    """Jacobi-preconditioned CG on the interior DOFs of ``ops[c]`` (on ``spaces[c]``, for
    ``c`` in ``gen``, ``ref``; the pure Neumann Poisson operator is singular): gen's solution
    equals ref's."""
    A = {c: hf.restrict_dofs(op, op.ceed.asarray(spaces[c].free_dofs())) for c, op in ops.items()}
    b = np.random.default_rng(1).standard_normal(A[ref].shape[0])
    x_ref, info_ref = hf.cg(A[ref], b, rtol=1e-10, M=hf.jacobi(A[ref]))
    x_gen, info_gen = hf.cg(A[gen], gen.asarray(b), rtol=1e-10, M=hf.jacobi(A[gen]))
    assert info_ref == 0 and info_gen == 0
    assert rel_error(gen.to_numpy(x_gen), x_ref) < 1e-8


@pytest.mark.parametrize(
    ("form", "rule", "geometry", "p"),
    [("mass", {}, "stored", 2), ("diffusion", {}, "on_the_fly", 3), ("diffusion", {}, "stored", 2),
     ("diffusion", {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO}, "on_the_fly", 3)],
)  # fmt: skip
def test_gen_component_split_matches_ref(gen, ref, monkeypatch, form, rule, geometry, p):
    """A vector form (BP2, BP4, BP6) run as its scalar kernel on each component block
    (component_split) where the table holds its shape: equal to ref and to gen's own vector
    kernel, its u . Au partial sums over the three blocks, and a device CG equal to ref's."""
    from hofem.backends.cuda import component_split

    make = hf.mass if form == "mass" else hf.diffusion
    ops, spaces = {}, {}
    for ceed in (ref, gen):  # 27 distorted cells (stored) or affine ones (on the fly)
        mesh = meshes.box(3, 3, distort=0.1 if geometry == "stored" else 0.0)
        spaces[ceed] = hf.H1Space(ceed, mesh, p, num_comp=3)
        ops[ceed] = make(spaces[ceed], geometry=geometry, **rule)
    op_gen = ops[gen]
    u = np.random.default_rng(p).standard_normal(op_gen.shape[1])
    vector = gen.to_numpy(op_gen(gen.asarray(u)))
    split_type = component_split.ComponentSplitOperator
    assert not isinstance(gen.backend._fused_operator(op_gen), split_type)
    table = {"mass": "SPLIT_SHAPES", "diffusion": "SPLIT_GRAD_SHAPES"}[form]
    if form == "diffusion" and geometry == "on_the_fly":
        table = "SPLIT_GRAD_ON_THE_FLY_SHAPES"
    shape = (3, p + 1, p + 1 + rule.get("q_extra", 1))
    monkeypatch.setattr(component_split, table, frozenset({shape}))
    op_gen.backend_data.clear()
    split = gen.backend._fused_operator(op_gen)
    assert isinstance(split, split_type)
    assert split.num_blocks == 3 * split.run.num_blocks
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), ops[ref](u)) < 1e-13
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), vector) < 1e-13
    _check_dot(gen, op_gen)
    _check_interior_cg(gen, ref, ops, spaces)


@pytest.mark.parametrize(("quad_mode", "geometry", "p"), [(hf.GAUSS, "stored", 2),
    (hf.GAUSS, "on_the_fly", 3), (hf.GAUSS_LOBATTO, "stored", 4),
    (hf.GAUSS_LOBATTO, "on_the_fly", 2), (hf.GAUSS_LOBATTO, "on_the_fly", 7)])  # fmt: skip
def test_gen_components_in_turn_matches_ref(gen, ref, monkeypatch, quad_mode, geometry, p):
    """BP4 and BP6 as one warp kernel of the scalar Poisson form that takes the three
    components in turn (operator_warp.use_components_in_turn) where its table holds the
    shape: equal to ref and to gen's own vector kernel, its u . Au partial sums, and a device
    CG equal to ref's; the stored q-data of distorted cells read at each point."""
    from hofem.backends.cuda import component_split
    from hofem.backends.cuda import operator_warp as ow

    for table in ("SPLIT_GRAD_SHAPES", "SPLIT_GRAD_ON_THE_FLY_SHAPES"):
        monkeypatch.setattr(component_split, table, frozenset())
    for table in ("WARP_IN_TURN_SHAPES", "WARP_IN_TURN_STORED_SHAPES"):
        monkeypatch.setattr(ow, table, {})
    q_extra = 1 if quad_mode is hf.GAUSS else 0
    ops, spaces = {}, {}
    for ceed in (ref, gen):
        mesh = meshes.box(3, 3, distort=0.1 if geometry == "stored" else 0.0)
        spaces[ceed] = hf.H1Space(ceed, mesh, p, num_comp=3)
        ops[ceed] = hf.diffusion(spaces[ceed], q_extra=q_extra, quad_mode=quad_mode,
                                 geometry=geometry)  # fmt: skip
    op_gen = ops[gen]
    u = np.random.default_rng(p).standard_normal(op_gen.shape[1])
    vector = gen.to_numpy(op_gen(gen.asarray(u)))
    assert gen.backend._fused_operator(op_gen).layout != "warp, components in turn"
    table = "WARP_IN_TURN_STORED_SHAPES" if geometry == "stored" else "WARP_IN_TURN_SHAPES"
    monkeypatch.setattr(ow, table, {(3, p + 1, p + 1 + q_extra): 5})
    op_gen.backend_data.clear()
    fused = gen.backend._fused_operator(op_gen)
    assert fused.layout == "warp, components in turn"
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), ops[ref](u)) < 1e-13
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), vector) < 1e-13
    _check_dot(gen, op_gen)
    _check_interior_cg(gen, ref, ops, spaces)


@pytest.mark.parametrize("p", range(1, 7))
def test_gen_warp_layout_matches_ref(gen, ref, every_warp_shape, p):
    """One warp per element (operator_warp): mass on 27 distorted elements (warps of a block
    on different elements, a partial last block), P_1d 2..7, Q_1d 3..8 padded to 8 on the
    tensor cores; the u . Au variant and a stopped CG's status."""
    op_gen, _ = mass_operator(gen, n=3, p=p, warp=0.1)
    fused = gen.backend._fused_operator(op_gen)
    assert fused.layout == "warp"
    op_ref, _ = mass_operator(ref, n=3, p=p, warp=0.1)
    u = np.random.default_rng(p).standard_normal(op_ref.shape[1])
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), op_ref(u)) < 1e-13
    _check_dot(gen, op_gen)


@pytest.mark.parametrize("p", range(1, 7))
@pytest.mark.parametrize(("form", "geometry", "warp"), [("diffusion", "stored", 0.1),
    ("diffusion", "on_the_fly", 0.0), ("diffusion", "on_the_fly", 0.1),
    ("mass", "on_the_fly", 0.0), ("mass", "on_the_fly", 0.1)])  # fmt: skip
def test_gen_warp_layout_gradients(gen, ref, every_warp_shape, p, form, geometry, warp):
    """Diffusion one warp per element, the collocated derivative's x and y stages on the
    tensor cores, against ref: 6 stored values per point read at each point; the Jacobian
    once per element from the vertices of affine cells (cell_center, evaluated per element);
    the order-p coordinates of curved cells (a 3-component gradient on the solution's
    basis: 4 buffers per warp).  Mass with the geometry on the fly likewise.  The u . Au
    variant and a stopped CG's status."""
    _check_box_layout(gen, ref, form, p, warp, geometry)


@pytest.mark.parametrize("p", range(2, 8))
@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
def test_gen_warp_layout_collocated(gen, ref, p, geometry):
    """BP5's shapes (Q_1d = P_1d Gauss-Lobatto points: the interpolation is the identity,
    P_1d up to 8) run one warp per element from gen's own tables and equal the reference,
    the u . Au variant too; with stored q-data p = 4 keeps the slab (the two tied)."""
    layout = "slab" if (geometry, p) == ("stored", 4) else "warp"
    box = {"q": p + 1, "quad_mode": hf.GAUSS_LOBATTO}
    _check_box_layout(gen, ref, "diffusion", p, 0.0, geometry, layout, **box)


def _reaction_diffusion(ctx, w, u, du, v, dv):
    v[0] = w[0] * (u[0] + du[0] * du[1])  # nonlinear: the values and the gradient together
    for d in range(3):
        dv[d] = w[0] * (du[d] + (d + 1.0) * u[0])


def test_gen_warp_layout_values_and_gradients(gen, ref, every_warp_shape):
    """A QFunction that takes a field's values and its gradient and adds both outputs to one
    vector, and the vector Poisson operator (3 components: 3 buffers per warp), one warp per
    element, against ref."""
    outputs = {}
    for ceed in (gen, ref):
        s = hf.H1Space(ceed, meshes.box(3, distort=0.1), 4)
        vector = hf.H1Space(ceed, meshes.box(2), 3, num_comp=3)
        qf = ceed.QFunction(
            _reaction_diffusion,
            [("w", 1, hf.EVAL_WEIGHT), ("u", 1, hf.EVAL_INTERP), ("du", 3, hf.EVAL_GRAD)],
            [("v", 1, hf.EVAL_INTERP), ("dv", 3, hf.EVAL_GRAD)],
        )
        op = ceed.Operator(qf)
        op.set_field("w", hf.ELEMRESTRICTION_NONE, s.basis(), hf.VECTOR_NONE)
        for name in ("u", "du", "v", "dv"):
            op.set_field(name, s.restriction, s.basis(), hf.VECTOR_ACTIVE)
        ops = [op, hf.diffusion(vector, geometry="stored")]
        rng = np.random.default_rng(5)
        inputs = [ceed.asarray(rng.standard_normal(o.shape[1])) for o in ops]
        outputs[ceed.resource] = [ceed.to_numpy(o(x)) for o, x in zip(ops, inputs, strict=True)]
        if ceed is gen:
            assert [gen.backend._fused_operator(o).layout for o in ops] == ["warp"] * 2
    for got, want in zip(outputs["/gpu/cuda/gen"], outputs["/cpu/self/ref"], strict=True):
        assert rel_error(got, want) < 1e-13


def _affine_mass(ctx, w, u, qdata, v):
    v[0] = qdata[0] * (u[0] + w[0])  # nonzero where u is zero: padded points must add nothing
    v[1] = qdata[0] * u[1] * u[2]  # v[2] never written: zero


def test_gen_warp_layout_fields(gen, ref, every_warp_shape):
    """The vector mass (three components, q-data in the identity layout), and a QFunction
    that is nonzero at zero input and leaves an output row unwritten, its first field the
    weights of a basis of another P_1d, against the reference."""
    space = {c: hf.H1Space(c, meshes.box(3, distort=0.1), 3, num_comp=3) for c in (gen, ref)}
    u = np.random.default_rng(7).standard_normal(space[ref].num_dofs)
    outputs = {}
    for ceed in (gen, ref):
        s = space[ceed]
        mass = hf.mass(s, geometry="stored")
        qdata = mass.input_fields[1]
        qf = ceed.QFunction(
            _affine_mass,
            [("w", 1, hf.EVAL_WEIGHT), ("u", 3, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)],
            [("v", 3, hf.EVAL_INTERP)],
        )
        op = ceed.Operator(qf)
        vertices = ceed.BasisTensorH1Lagrange(3, 1, 2, s.basis().Q_1d, hf.GAUSS)  # P_1d = 2
        op.set_field("w", hf.ELEMRESTRICTION_NONE, vertices, hf.VECTOR_NONE)
        op.set_field("u", s.restriction, s.basis(), hf.VECTOR_ACTIVE)
        op.set_field("qdata", qdata.restriction, hf.BASIS_NONE, qdata.vector)
        op.set_field("v", s.restriction, s.basis(), hf.VECTOR_ACTIVE)
        outputs[ceed.resource] = [ceed.to_numpy(o(ceed.asarray(u))) for o in (mass, op)]
        if ceed is gen:
            assert [gen.backend._fused_operator(o).layout for o in (mass, op)] == ["warp"] * 2
    for got, want in zip(outputs["/gpu/cuda/gen"], outputs["/cpu/self/ref"], strict=True):
        assert rel_error(got, want) < 1e-13


def test_gen_warp_layout_register_tables(gen):
    """Each kind of warp kernel takes its own measured budgets: the scalar mass (BP1) with
    stored q-data and on the fly (the Jacobian of affine cells, a cell input), the vector mass
    (BP2, three values per point: more registers), Poisson with stored q-data and on the fly
    (BP3)."""
    from hofem.backends.cuda import operator_warp as ow

    vector = hf.mass(hf.H1Space(gen, meshes.box(2), 3, num_comp=3), geometry="stored")
    kinds = [(vector, ow.WARP_VECTOR_SHAPES), (box_operator(gen, "mass", 2, 3)[0], ow.WARP_SHAPES)]
    cell = box_operator(gen, "mass", 2, 3, geometry="on_the_fly")[0]
    kinds.append((cell, ow.WARP_CELL_SHAPES))
    for geometry in ("stored", "on_the_fly"):
        table = ow.WARP_GRAD_STORED_SHAPES if geometry == "stored" else ow.WARP_GRAD_SHAPES
        kinds.append((box_operator(gen, "diffusion", 2, 3, geometry=geometry)[0], table))
    for op, table in kinds:
        assert ow.warp_shapes(op) is table
    # BP1 p = 2 holds the stages' operands in registers, stored or on the fly; p = 3 and the
    # others read the table
    for p, geometry in itertools.product((2, 3), ("stored", "on_the_fly")):
        op = box_operator(gen, "mass", 2, p, geometry=geometry)[0]
        assert ow.operand_registers(op, (3, p + 1, p + 2)) == (p == 2)
    assert not ow.operand_registers(vector, (3, 3, 4))


@pytest.mark.parametrize("p", range(1, 7))
@pytest.mark.parametrize(("form", "geometry"), [("mass", "stored"), ("diffusion", "on_the_fly")])
def test_gen_warp_layout_register_operands(gen, ref, every_warp_shape, monkeypatch, p, form,
                                           geometry):  # fmt: skip
    """The stages' operands in registers (WarpRegs) rather than the shared table give the
    reference's result too, the u . Au variant included."""
    from hofem.backends.cuda import operator_warp as ow

    monkeypatch.setattr(ow, "operand_registers", lambda op, shape: True)
    warp = 0.1 if form == "mass" else 0.0  # curved cells, or affine ones on the fly
    _check_box_layout(gen, ref, form, p, warp, geometry)


@pytest.mark.parametrize(("form", "p", "geometry", "layout"), [("mass", 1, "stored", "slab"),
    ("mass", 2, "stored", "warp"), ("mass", 6, "stored", "warp"), ("mass", 7, "stored", "tiles"),
    ("mass", 8, "stored", "slab"), ("mass", 8, "on_the_fly", "tiles"),
    ("diffusion", 7, "stored", "slab"), ("diffusion", 4, "stored", "warp"),
    ("diffusion", 3, "on_the_fly", "warp"), ("diffusion", 2, "on_the_fly", "warp"),
    ("diffusion", 4, "on_the_fly", "warp"), ("diffusion", 7, "on_the_fly", "slab")])  # fmt: skip
def test_gen_warp_layout_policy(gen, form, p, geometry, layout):
    """gen's rule: one warp per element (four at p = 2) for the shapes of the tables where it
    measured faster (BP1 p = 2..6; BP3 p = 2..6 with stored q-data or on the fly), every
    contraction a GEMM for BP1 p = 7 and, with the affine Jacobian on the fly, p = 8
    (operator_tiles' tables), the slab elsewhere (p = 1 not measured, Q_1d > 8); CG runs."""
    from hofem.backends.cuda import operator_warp as ow

    op, _ = box_operator(gen, form, 4, p, 3, geometry=geometry)
    fused = gen.backend._fused_operator(op)
    assert fused.layout == layout
    assert (layout == "warp") == ow.use_warp_layout(op, fused._shape)
    rhs = op(cupy.ones(op.shape[1]))
    x, info = hf.cg(op, rhs, rtol=1e-10, maxiter=500, device_loop=True)
    assert info == 0
    assert rel_error(op(x).get(), rhs.get()) < 1e-8


@pytest.mark.parametrize(("quad_mode", "p", "layout"), [(hf.GAUSS, 2, "warp"),
    (hf.GAUSS, 5, "warp"), (hf.GAUSS, 7, "slab"), (hf.GAUSS_LOBATTO, 2, "warp"),
    (hf.GAUSS_LOBATTO, 4, "warp"), (hf.GAUSS_LOBATTO, 7, "warp")])  # fmt: skip
@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
def test_gen_vector_poisson_layout(gen, ref, monkeypatch, quad_mode, p, layout, geometry):
    """BP4 (p + 2 Gauss points) and BP6 (p + 1 Gauss-Lobatto points), the 3-component
    Poisson operator's own kernel (the component split's and the in-turn tables emptied:
    test_gen_component_split_matches_ref and test_gen_components_in_turn_matches_ref test
    those kernels), one warp per element at the shapes
    of their tables (BP6 up to p = 7, BP4 to p = 6) and the slab past them, equal to ref,
    with the u . Au variant."""
    from hofem.backends.cuda import component_split
    from hofem.backends.cuda import operator_warp as ow

    for table in ("SPLIT_GRAD_SHAPES", "SPLIT_GRAD_ON_THE_FLY_SHAPES"):
        monkeypatch.setattr(component_split, table, frozenset())
    for table in ("WARP_IN_TURN_SHAPES", "WARP_IN_TURN_STORED_SHAPES"):
        monkeypatch.setattr(ow, table, {})

    q_extra = 1 if quad_mode is hf.GAUSS else 0
    ops = {}
    for ceed in (gen, ref):
        space = hf.H1Space(ceed, meshes.box(2), p, num_comp=3)
        ops[ceed] = hf.diffusion(space, q_extra=q_extra, quad_mode=quad_mode, geometry=geometry)
    fused = gen.backend._fused_operator(ops[gen])
    assert fused.layout == layout
    if layout == "warp":
        table = "STORED_" if geometry == "stored" else ""
        assert ow.warp_shapes(ops[gen]) is getattr(ow, f"WARP_VECTOR_GRAD_{table}SHAPES")
    u = np.random.default_rng(p).standard_normal(ops[ref].shape[1])
    assert rel_error(gen.to_numpy(ops[gen](gen.asarray(u))), ops[ref](u)) < 1e-13
    _check_dot(gen, ops[gen])


def _check_simplex(gen, ref, make, tol=1e-12):
    """``make(ceed)`` on gen runs as the fused simplex kernel (or, at the shapes of
    ``cuda_simplex.json``, as batched), equals ``/cpu/self/ref``, and the simplex kernel
    itself equals it and gives ``u . Au`` from its dot variant."""
    from hofem.backends.cuda import operator_simplex as osx

    op_gen, op_ref = make(gen), make(ref)
    u = np.random.default_rng(op_ref.shape[1]).standard_normal(op_ref.shape[1])
    assert rel_error(gen.to_numpy(op_gen(gen.asarray(u))), op_ref(u)) < tol
    kernel = osx.simplex_operator(op_gen)
    if kernel is not None:
        assert _fused(op_gen) and op_gen.backend_data["gen"][1].layout == "simplex"
        _check_dot(gen, op_gen)
        if not kernel.launch.tensor_cores:
            return
    else:
        assert not _fused(op_gen)  # handed to batched, which measured faster there
    # the scalar kernel, which gen leaves for the tensor cores or batched at these shapes
    _check_simplex_launch(gen, op_gen, op_ref, u, {}, tol)


def _check_simplex_launch(gen, op_gen, op_ref, u, overrides, tol):
    """The simplex kernel of ``op_gen`` at ``simplex_launch(..., **overrides)`` equals
    ``op_ref`` on ``u`` and gives ``u . Au`` from its dot variant."""
    from hofem.backends.cuda import operator_simplex as osx

    shape = osx.simplex_shape(op_gen)
    launch = osx.simplex_launch(op_gen, shape, **overrides)
    assert launch is not None and launch.tensor_cores == overrides.get("tensor_cores", False)
    kernel = osx.SimplexOperator(op_gen, shape, launch)
    v = cupy.zeros(op_gen.shape[0])
    kernel(gen.asarray(u), v)
    assert rel_error(v.get(), op_ref(u)) < tol
    _check_dot(gen, op_gen, kernel)


@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("dim", [2, 3])
def test_gen_fuses_simplex_operators(gen, ref, dim, p, form, geometry):
    """Triangles and tets, p = 1..6: the fused simplex kernel (on the fly: one Jacobian per
    affine element) matches /cpu/self/ref, many blocks, matrices in shared and global memory."""
    mesh = meshes.box(3 if dim == 3 else 8, dim, simplex=True, distort=0.1)
    _check_simplex(gen, ref, lambda ceed: form(hf.H1Space(ceed, mesh, p), geometry=geometry))


@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize("p", [2, 3])
def test_gen_fuses_curved_and_vector_tets(gen, ref, p, form, geometry):
    """Order-2 tets (per-point geometry from a second matrix set) and 3-component spaces."""
    curved = meshes.read(meshes.data_path("curved_tet10.msh"))
    _check_simplex(gen, ref, lambda ceed: form(hf.H1Space(ceed, curved, p), geometry=geometry))
    box = meshes.box(2, 3, simplex=True, distort=0.1)
    vector = lambda ceed: form(hf.H1Space(ceed, box, p, num_comp=3), geometry=geometry)  # noqa: E731
    _check_simplex(gen, ref, vector)


@pytest.mark.parametrize("num_comp", [1, 3])
@pytest.mark.parametrize("p", [2, 3, 4, 5, 6])
def test_gen_runs_scaled_simplex_mass_on_its_factored_rule(gen, ref, p, num_comp):
    """The mass on the fly on affine tets (``c_e B^T W B``) runs on its factored rule of P
    points (``simplex_factored``; the tensor cores from p = 3, at the table's launch) and
    equals /cpu/self/ref, ``u . Au`` too."""
    from hofem.backends.cuda import operator_simplex as osx

    mesh = meshes.box(3, 3, simplex=True, distort=0.1)
    space = lambda ceed: hf.H1Space(ceed, mesh, p, num_comp=num_comp)  # noqa: E731
    make = lambda ceed: hf.mass(space(ceed), coefficient=2.5, geometry="on_the_fly")  # noqa: E731
    kernel = osx.simplex_operator(make(gen))
    P = kernel.shape[1]
    assert kernel.shape == (3, P, P) and kernel.launch.tensor_cores == (p >= 3)
    tuned = osx.tensor_core_overrides(kernel.shape)
    assert all(getattr(kernel.launch, key) == value for key, value in tuned.items())
    _check_simplex(gen, ref, make)


def _check_simplex_mma(gen, ref, make, tol=1e-12):
    """The tensor-core simplex kernel (``simplex_launch(..., tensor_cores=True)``) of
    ``make(ceed)`` equals ``/cpu/self/ref`` and gives ``u . Au`` from its dot variant."""

    op_gen, op_ref = make(gen), make(ref)
    u = np.random.default_rng(op_ref.shape[1]).standard_normal(op_ref.shape[1])
    _check_simplex_launch(gen, op_gen, op_ref, u, {"tensor_cores": True}, tol)


@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6])
def test_gen_simplex_tensor_cores(gen, ref, p, form, geometry):
    """Tets, p = 1..6: the fused simplex kernel with its products on the fp64 tensor cores
    (stored q-data; on the fly, the Jacobian from the vertices at each point) matches
    /cpu/self/ref, over many blocks and a last partial group of elements."""
    mesh = meshes.box(3, 3, simplex=True, distort=0.1)  # 162 tets: one partial group
    _check_simplex_mma(gen, ref, lambda ceed: form(hf.H1Space(ceed, mesh, p), geometry=geometry))


@pytest.mark.parametrize("form", [hf.mass, hf.diffusion], ids=["mass", "diffusion"])
def test_gen_simplex_tensor_cores_curved_and_vector(gen, ref, form):
    """Order-2 tets (the coordinates' own matrix set on the tensor cores) and 3 components."""
    curved = meshes.read(meshes.data_path("curved_tet10.msh"))
    make = lambda ceed: form(hf.H1Space(ceed, curved, 3), geometry="on_the_fly")  # noqa: E731
    _check_simplex_mma(gen, ref, make)
    box = meshes.box(2, 3, simplex=True, distort=0.1)
    vector = lambda ceed: form(hf.H1Space(ceed, box, 3, num_comp=3), geometry="stored")  # noqa: E731
    _check_simplex_mma(gen, ref, vector)


def test_gen_simplex_tensor_cores_checks_the_device(gen):
    """More shared memory than the device's opt-in maximum: one clear error, no launch."""
    import dataclasses

    from hofem.backends.cuda import operator_simplex as osx

    op = hf.diffusion(hf.H1Space(gen, meshes.box(1, 3, simplex=True), 6), geometry="stored")
    shape = osx.simplex_shape(op)
    launch = osx.simplex_launch(op, shape, tensor_cores=True)
    limit = cupy.cuda.Device().attributes["MaxSharedMemoryPerBlockOptin"]
    too_big = dataclasses.replace(launch, used_bytes=limit + 8)
    with pytest.raises(ValueError, match=f"this device allows {limit}"):
        osx.SimplexOperator(op, shape, too_big)


@pytest.mark.parametrize(
    "form, p, q_extra, geometry, runs",
    [
        ("mass", 1, None, "auto", "scalar"),
        ("mass", 3, None, "auto", "tensor_cores"),
        ("mass", 2, None, "auto", "scalar"),
        ("diffusion", 3, None, "auto", "tensor_cores"),  # 256 threads
        ("diffusion", 4, None, "auto", "tensor_cores"),  # the table's launch: 256 threads, 1 tile
        ("diffusion", 6, None, "auto", "tensor_cores"),
        ("mass", 2, 1, "auto", "tensor_cores"),  # the collapsed rule, 64 points
        ("diffusion", 4, 1, "stored", "batched_over_tensor_cores"),  # 216 points: too large
        ("diffusion", 4, 1, "on_the_fly", "batched_over_tensor_cores"),  # fits; batched faster
        ("mass", 5, 1, "stored", "batched"),  # 343 points
        ("diffusion", 5, 1, "on_the_fly", "batched"),
    ],
)
def test_gen_simplex_default_takes_the_tensor_cores_at_its_shapes(
    gen, form, p, q_extra, geometry, runs
):
    """gen's simplex kernel is the tensor-core variant at the shapes of ``cuda_simplex.json``'s
    ``tensor_cores`` (this device has fp64 ``mma``) where its launch fits and batched did not
    beat it, else batched's shapes go to batched and the others run the scalar kernel."""
    from hofem import tuning
    from hofem.backends.cuda import operator_simplex as osx

    assert int(cupy.cuda.Device().compute_capability) >= 80
    space = hf.H1Space(gen, meshes.box(2, 3, simplex=True), p)
    op = getattr(hf, form)(space, q_extra=q_extra, geometry=geometry)
    kernel = osx.simplex_operator(op)
    tensor_cores = osx.simplex_shape(op) in tuning.simplex().tensor_cores
    if runs.startswith("batched"):
        assert kernel is None and tensor_cores == (runs == "batched_over_tensor_cores")
        return
    assert kernel.launch.tensor_cores == tensor_cores == (runs == "tensor_cores")
    tuned = osx.tensor_core_overrides(osx.simplex_shape(op)) if tensor_cores else {}
    assert all(getattr(kernel.launch, key) == value for key, value in tuned.items())


def test_gen_device_cg_on_tets(gen, ref):
    """The device CG takes p . Ap from the simplex kernel's dot variant."""
    from hofem.backends.cuda.operator_simplex import SimplexOperator

    mesh = meshes.box(3, 3, simplex=True, distort=0.1)
    ops = {ceed: hf.mass(hf.H1Space(ceed, mesh, 3), geometry="stored") for ceed in (gen, ref)}
    assert isinstance(gen.backend.cg_apply_dot(ops[gen]), SimplexOperator)
    b = np.random.default_rng(11).standard_normal(ops[ref].shape[0])
    x_ref, info_ref = hf.cg(ops[ref], b, rtol=1e-10)
    x_gen, info_gen = hf.cg(ops[gen], gen.asarray(b), rtol=1e-10, check_every=3)
    assert info_ref == 0 and info_gen == 0
    assert abs(info_gen.iterations - info_ref.iterations) <= 3
    assert rel_error(gen.to_numpy(x_gen), x_ref) < 1e-8
