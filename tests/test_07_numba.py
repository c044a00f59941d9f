"""Numba-specific behaviour: fallback, contexts, block tails, compile sharing, threads, CG hook."""

import decimal
import inspect
import sys
import warnings

import numpy as np
import pytest
from util import half_written_operator, mass_fields, mass_operator, poisson_operator

import hofem as hf

numba = pytest.importorskip("numba")
if "/cpu/self/numba" not in hf.available():
    pytest.skip("backend /cpu/self/numba unavailable", allow_module_level=True)


@pytest.fixture(scope="module")
def nb():
    return hf.Ceed("/cpu/self/numba")


def scaled_mass(ctx, u, qdata, v):
    v[0] = ctx["alpha"] * qdata[0] * u[0]


def uncompilable_mass(ctx, u, qdata, v):
    two = float(decimal.Decimal(2))  # Numba cannot type the decimal module
    v[0] = two * qdata[0] * np.asarray(u[0])  # an array escapes the tracer


def _with_qfunction(ceed, func, context, n=2):
    base, s = mass_operator(ceed, n=n, p=2, dim=2, warp=0.1)
    qf = ceed.QFunction(
        func,
        [("u", 1, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)],
        [("v", 1, hf.EVAL_INTERP)],
        context=context,
    )
    return mass_fields(ceed, qf, s), base


def test_context_qfunction_matches_ref(nb, ref):
    u = np.random.default_rng(0).standard_normal(25)
    out = {}
    for ceed in (nb, ref):
        op, _ = _with_qfunction(ceed, scaled_mass, {"alpha": 2.5})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out[ceed.resource] = op(ceed.asarray(u))
        op.qf.set_context({"alpha": -1.0})  # a new context is read at the next apply
        out[ceed.resource, "new"] = op(ceed.asarray(u))
    np.testing.assert_allclose(out["/cpu/self/numba"], out["/cpu/self/ref"], rtol=1e-13)
    np.testing.assert_allclose(out["/cpu/self/numba", "new"], -out["/cpu/self/numba"] / 2.5)


def test_uncompilable_qfunction_falls_back_with_one_warning(nb, ref):
    u = np.random.default_rng(1).standard_normal(25)
    op, base = _with_qfunction(nb, uncompilable_mass, None)
    with pytest.warns(RuntimeWarning, match="uncompilable_mass"):
        first = op(nb.asarray(u))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = op(nb.asarray(u))
    np.testing.assert_allclose(first, 2 * base(nb.asarray(u)), rtol=1e-13)
    np.testing.assert_array_equal(first, second)


def sign_mass(ctx, u, qdata, v):
    v[0] = np.sign(qdata[0]) * qdata[0] * u[0]  # untraceable: np.sign is not in the tracer's table


@pytest.mark.parametrize("func, traced", [(scaled_mass, True), (sign_mass, False)])
def test_traced_and_called_qfunctions_match_ref(nb, ref, func, traced):
    """A traceable body is inlined in the kernel source; an untraceable one is called;
    either way the kernel's u . Au variant compiles and agrees."""
    u = np.random.default_rng(4).standard_normal(25)
    ops = {ceed.resource: _with_qfunction(ceed, func, {"alpha": 2.5})[0] for ceed in (nb, ref)}
    out = {name: op(u) for name, op in ops.items()}
    kernel = ops["/cpu/self/numba"].backend_data["numba"]["kernel"]
    source = inspect.getsource(sys.modules[kernel.__module__])
    assert ("qfunction(" not in source) is traced
    np.testing.assert_allclose(out["/cpu/self/numba"], out["/cpu/self/ref"], rtol=1e-13)
    dot = ops["/cpu/self/numba"].apply_dot(u, np.empty(25))
    plan = ops["/cpu/self/numba"].backend_data["numba-dot"]
    assert plan["traced"] is traced and not plan.get("fallback")
    assert float(dot) == pytest.approx(u @ out["/cpu/self/ref"], rel=1e-13)


@pytest.mark.parametrize("n", [3, 5])
def test_odd_element_counts_match_ref(nb, ref, n):
    """9 and 25 elements: partial SIMD blocks and chunks."""
    u = np.random.default_rng(n).standard_normal((2 * n + 1) ** 2)
    got = mass_operator(nb, n=n, p=2, dim=2, warp=0.1)[0](nb.asarray(u))
    want = mass_operator(ref, n=n, p=2, dim=2, warp=0.1)[0](ref.asarray(u))
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("n, p, dim", [(3, 2, 2), (2, 3, 2), (2, 4, 3)])
def test_one_kernel_per_qfunction(nb, ref, n, p, dim):
    """Sizes are run-time data: other meshes, orders and dims reuse one compiled kernel."""
    first, _ = mass_operator(nb, n=2, p=2, dim=2)
    first(nb.asarray(np.ones(first.shape[1])))
    kernel = first.backend_data["numba"]["kernel"]
    second, _ = mass_operator(nb, n=n, p=p, dim=dim, warp=0.1)
    u = np.random.default_rng(p).standard_normal(second.shape[1])
    got = second(nb.asarray(u))
    assert second.backend_data["numba"]["kernel"] is kernel
    assert len(kernel.signatures) == 1
    want = mass_operator(ref, n=n, p=p, dim=dim, warp=0.1)[0](ref.asarray(u))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_threads_give_identical_results(nb):
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 threads")
    op, _ = mass_operator(nb, n=5, p=2, dim=2, warp=0.1)
    u = nb.asarray(np.random.default_rng(2).standard_normal(op.shape[1]))
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = op(u)
        numba.set_num_threads(2)
        two = op(u)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize(
    "available, local_ranks, want", [(2, 1, 2), (2, 2, 1), (16, 2, 8), (16, 3, 5), (1, 4, 1)]
)
def test_default_threads_share_the_cores_among_local_ranks(available, local_ranks, want):
    from hofem.backends.numba.threads import default_num_threads

    assert default_num_threads(available, local_ranks) == want


def test_default_threads_reject_bad_counts():
    from hofem.backends.numba.threads import default_num_threads

    with pytest.raises(ValueError, match="positive"):
        default_num_threads(0, 1)


@pytest.mark.parametrize(
    "environ, want",
    [
        ({}, 1),
        ({"MPI_LOCALNRANKS": "2"}, 2),
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),
        ({"MPI_LOCALNRANKS": "x", "PMIX_LOCAL_SIZE": "3"}, 3),
        ({"MPI_LOCALNRANKS": "0"}, 1),
    ],
)
def test_local_rank_count_from_the_launcher(environ, want):
    from hofem.backends.numba.threads import local_rank_count

    assert local_rank_count(environ) == want


def test_parallel_loops_hand_out_chunks_dynamically(nb, monkeypatch):
    """CG's vector kernels and the operator kernel run with Numba's chunk size 1 (chunks
    handed out one at a time); the caller's chunk size is restored after."""
    from hofem.backends.numba import kernels

    op, _ = mass_operator(nb, n=3, p=2, dim=2)
    seen = []

    def recording(kernel):
        def run(*args):
            seen.append(numba.get_parallel_chunksize())
            return kernel(*args)

        return run

    for name in ("cg_dot", "cg_update_xr_rr", "cg_update_p"):
        monkeypatch.setattr(kernels, name, recording(getattr(kernels, name)))
    b = np.ones(op.shape[0])
    hf.cg(op, b, rtol=0.0, maxiter=1)  # builds the operator's plans
    plans = [op.backend_data[k] for k in ("numba", "numba-dot") if k in op.backend_data]
    for plan in plans:
        monkeypatch.setitem(plan, "kernel", recording(plan["kernel"]))
    before = numba.get_parallel_chunksize()
    seen.clear()
    hf.cg(op, b, rtol=0.0, maxiter=3)
    assert plans and len(seen) >= 9 and set(seen) == {1}
    assert numba.get_parallel_chunksize() == before


@pytest.mark.parametrize("cells, threads", [(3, 1), (130, 2)])
def test_small_solves_run_on_one_thread(nb, cells, threads):
    """A host-loop solve below SERIAL_ENTRIES unknowns runs every parallel loop on the
    calling thread (waking the others costs more than they give there), a larger one on
    the backend's threads; the caller's setting is restored after."""
    from hofem.backends.numba.kernels import SERIAL_ENTRIES

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 threads")
    op, _ = mass_operator(nb, n=cells, p=2, dim=2)  # (2 * cells + 1)^2 unknowns
    assert (op.shape[0] < SERIAL_ENTRIES) == (threads == 1)
    seen = []
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(2)
        hf.cg(op, np.ones(op.shape[0]), rtol=0.0, maxiter=2,
              callback=lambda x: seen.append(numba.get_num_threads()))  # fmt: skip
        assert seen == [threads, threads] and numba.get_num_threads() == 2
    finally:
        numba.set_num_threads(saved)


@pytest.mark.parametrize("jacobi", [False, True])
def test_cg_uses_backend_vector_ops(nb, monkeypatch, jacobi):
    """hofem.cg takes the backend's parallel vector ops; iterates match the NumPy ones,
    and the chunked reductions give bitwise the same iterates for 1 and 2 threads."""
    op, _ = mass_operator(nb, n=4, p=3, dim=3, warp=0.1)
    b = np.random.default_rng(3).standard_normal(op.shape[0])
    M = hf.jacobi(op) if jacobi else None
    calls = []
    ops = nb.backend.vector_ops()
    monkeypatch.setattr(nb.backend, "vector_ops", lambda: calls.append(1) or ops)
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        x_one, info = hf.cg(op, b, rtol=0.0, maxiter=15, M=M)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        x_two, _ = hf.cg(op, b, rtol=0.0, maxiter=15, M=M)
    finally:
        numba.set_num_threads(saved)
    assert calls and info.iterations == 15
    np.testing.assert_array_equal(x_one, x_two)
    x_numpy, _ = hf.cg(op.as_linear_operator(), b, rtol=0.0, maxiter=15, M=M)  # NumPy ops
    np.testing.assert_allclose(x_one, x_numpy, rtol=1e-12, atol=1e-14 * np.abs(x_one).max())


@pytest.mark.parametrize("n", [1, 7, 63, 64, 513, 10_007])
def test_cg_dot_lanes_match_numpy(n):
    """The chunked dot covers every entry (short chunks, remainders)."""
    from hofem.backends.numba import kernels

    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n), rng.standard_normal(n)  # (n,)
    got = kernels.cg_dot(a, b).sum()
    want = float(np.sum(np.abs(a * b)))
    assert abs(got - a @ b) <= 1e-14 * want


def test_unwritten_output_rows_are_zero(nb, ref):
    """Output rows a traced QFunction never writes are zero: full blocks store 0 there (no
    zero fill of the scratch first), partial blocks fill it (27 elements: both)."""
    ops = {ceed: half_written_operator(ceed, 3) for ceed in (nb, ref)}
    results = [op(u) for op, u in ops.values()]
    assert ops[nb][0].backend_data["numba"]["traced"]  # the inlined point loop
    n = results[1].size // 2
    assert np.all(results[0][n:] == 0.0)
    np.testing.assert_allclose(results[0], results[1], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("num_pts", [5, 8, 27, 64])
@pytest.mark.parametrize("nb", [8, 3])
@pytest.mark.parametrize("layout", ["points", "elements"])
def test_gather_strided_interleaves_the_lanes(num_pts, nb, layout):
    """The copy of a strided field into the scratch: value r at point q of lane b at
    ``dest + (r * num_pts + q) * BLK + b``, idle lanes zero, whatever the strides (points
    contiguous: the 8 x 8 transposes and the remainder; elements contiguous: lane by lane)."""
    from hofem.backends.numba.codegen import BLK
    from hofem.backends.numba.kernels import gather_strided

    size, num_elem, e0, dest = 3, 20, 9, 5
    if layout == "points":
        strides = (1, num_pts, num_pts * size)
    else:
        strides = (num_elem, num_elem * num_pts, 1)
    x = np.random.default_rng(num_pts).standard_normal(num_elem * num_pts * size)  # (l_size,)
    s = np.full(dest + size * num_pts * BLK + 4, np.nan)  # (scratch,)
    gather_strided(s, dest, x, np.array(strides), size, num_pts, e0, nb)
    got = s[dest : dest + size * num_pts * BLK].reshape(size, num_pts, BLK)
    # (size, num_pts, BLK) each: the row, point and lane of every scratch entry
    r, q, b = np.meshgrid(np.arange(size), np.arange(num_pts), np.arange(BLK), indexing="ij")
    want = np.where(b < nb, x[q * strides[0] + r * strides[1] + (e0 + b) * strides[2]], 0.0)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(s[:dest]).all() and np.isnan(s[dest + size * num_pts * BLK :]).all()


def test_cg_iterates_match_ref(nb, ref):
    """CG on /cpu/self/numba (chunked reductions) follows /cpu/self/ref iterate for
    iterate to 1e-12 over the first 30 iterations, and converges in the same count to the
    same solution (Poisson + mass: SPD).  Later iterates of this 156-iteration solve
    drift apart to 1e-8 mid-solve, as they did before the lane dots: rounding of the
    operator apply, amplified where CG loses orthogonality."""
    A_nb, A_ref = (
        ceed.CompositeOperator(
            [form(ceed, n=3, p=3, dim=3, warp=0.1)[0] for form in (poisson_operator, mass_operator)]
        )
        for ceed in (nb, ref)
    )
    b = np.random.default_rng(4).standard_normal(A_nb.shape[0])  # (n,)
    iterates = {"nb": [], "ref": []}
    x_nb, info_nb = hf.cg(A_nb, b, rtol=1e-10, callback=lambda x: iterates["nb"].append(x.copy()))
    x_ref, info_ref = hf.cg(
        A_ref, b, rtol=1e-10, callback=lambda x: iterates["ref"].append(x.copy())
    )
    assert info_nb == info_ref == 0 and info_nb.iterations == info_ref.iterations > 30
    for k in range(30):
        want = iterates["ref"][k]  # (n,)
        scale = 1e-12 * np.abs(want).max()
        np.testing.assert_allclose(iterates["nb"][k], want, rtol=0, atol=scale, err_msg=k)
    np.testing.assert_allclose(x_nb, x_ref, rtol=0, atol=1e-12 * np.abs(x_ref).max())


def test_apply_dot_inside_the_kernel(nb):
    """u . Au from the fused kernel's E-vectors (block tails included), bitwise the same
    for 1 and 2 threads; an output restriction with equal offsets pairs with the input,
    other offsets do not, and that operator applies, then takes the vector dot."""
    from hofem.backends.numba import operator as numba_operator

    op, s = poisson_operator(nb, n=5, p=2, dim=3, warp=0.1)  # 125 elements: a tail block
    u = np.random.default_rng(6).standard_normal(op.shape[1])
    v = np.empty(op.shape[0])
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = op.apply_dot(u, v)
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        two = op.apply_dot(u, v)
    finally:
        numba.set_num_threads(saved)
    assert "numba-dot" in op.backend_data and one == two
    assert float(one) == pytest.approx(u @ op(u), rel=1e-13)

    mass, s = mass_operator(nb, n=3, p=2, dim=2)
    offsets = s["offsets"]

    def with_output(out_offsets):
        r = nb.ElemRestriction(*offsets.shape, 1, 1, s["num_nodes"], out_offsets)
        return mass_fields(nb, nb.QFunctionByName("MassApply"), s, r_v=r)

    same, other = with_output(offsets.copy()), with_output(offsets[::-1].copy())
    assert numba_operator.dot_fields(same) == (0, 0)
    assert numba_operator.dot_fields(other) is None
    u = np.random.default_rng(7).standard_normal(mass.shape[1])
    for op in (same, other):
        dot = op.apply_dot(u, v[: op.shape[0]])
        assert float(dot) == pytest.approx(u @ op(u), rel=1e-13)
    assert "numba-dot" in same.backend_data and "numba-dot" not in other.backend_data
    with pytest.raises(ValueError, match="one active input and output of one restriction"):
        numba_operator.operator_kernel(other, dot=True)


@pytest.mark.parametrize("n", [7, 40])
def test_colour_chunks_race_free(nb, n):
    """Chunks of one colour share no output entry; the chunks cover every element once."""
    from hofem.backends.numba import operator as numba_operator
    from hofem.meshes import box

    space = hf.H1Space(nb, box(n, dim=2), 2, num_comp=2)
    r = space.restriction
    colour_ptr, start, stop = numba_operator.colour_chunks(r.num_elem, 8, [r])
    covered = np.concatenate([np.arange(a, b) for a, b in zip(start, stop, strict=True)])
    np.testing.assert_array_equal(np.sort(covered), np.arange(r.num_elem))
    indices = r.indices.reshape(r.num_elem, -1)  # (num_elem, num_comp * elem_size)
    touched = [set(indices[a:b].ravel().tolist()) for a, b in zip(start, stop, strict=True)]
    colour = np.repeat(np.arange(len(colour_ptr) - 1), np.diff(colour_ptr))  # (num_chunks,)
    shared = 0
    for i in range(len(start)):
        for j in range(i + 1, len(start)):
            if touched[i] & touched[j]:
                shared += 1
                assert colour[i] != colour[j], (i, j)
    assert shared > 0 or len(start) == 1  # the case has conflicts to split


def test_point_independent_lines_leave_the_point_loop():
    """Traced lines that read no point (``q``, ``j``), directly or through a temporary, run
    once per block (the geometry of affine cells); the rest, and every store, stay in the
    loop in their order."""
    from hofem.backends.numba.operator import _hoist

    lines = [
        "t0 = dxr0_@",
        "t1 = w2[0, q]",
        "t2 = (t0 * c0)",
        "t3 = (1.0 / t2)",
        "t4 = (t1 * t3)",
        "t5 = q0r0[j + @]",
        "t6 = (t5 * t4)",
        "o0r0[j + @] = t6",
        "t7 = (t3 + t3)",
    ]
    hoisted, per_point = _hoist(lines)
    assert hoisted == ["t0 = dxr0_@", "t2 = (t0 * c0)", "t3 = (1.0 / t2)", "t7 = (t3 + t3)"]
    assert per_point == [
        "t1 = w2[0, q]",
        "t4 = (t1 * t3)",
        "t5 = q0r0[j + @]",
        "t6 = (t5 * t4)",
        "o0r0[j + @] = t6",
    ]


def two_component_mass(ctx, u, qdata, v):
    v[0] = qdata[0] * u[0]
    v[1] = qdata[0] * u[1]


def signed_two_component_mass(ctx, u, qdata, v):
    v[0] = np.sign(qdata[0]) * qdata[0] * u[0]  # untraceable: the called path
    v[1] = np.sign(qdata[0]) * qdata[0] * u[1]


@pytest.mark.parametrize("func", [two_component_mass, signed_two_component_mass])
def test_blocked_backend_layout_in_every_field_kind(nb, ref, func):
    """``hf.STRIDES_BACKEND`` fields on 19 elements (two full blocks of 8 lanes and a partial
    one): a 2-component input gathered for its basis, q-data read in place and the
    output scattered, traced and called; equal to the reference on the same E-vectors."""
    num_elem, P, Q = 19, 3, 4
    rng = np.random.default_rng(9)
    u_e = rng.standard_normal((num_elem, 2, P * P))
    q_e = rng.uniform(0.5, 2.0, (num_elem, 1, Q * Q))
    out = {}
    for ceed in (nb, ref):
        r_u = ceed.StridedElemRestriction(
            num_elem, P * P, 2, num_elem * 2 * P * P, hf.STRIDES_BACKEND
        )
        r_q = ceed.StridedElemRestriction(num_elem, Q * Q, 1, num_elem * Q * Q, hf.STRIDES_BACKEND)
        basis = ceed.BasisTensorH1Lagrange(2, 2, P, Q, hf.GAUSS)
        qf = ceed.QFunction(
            func, [("u", 2, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)], [("v", 2, hf.EVAL_INTERP)]
        )
        op = ceed.Operator(qf)
        op.set_field("u", r_u, basis, hf.VECTOR_ACTIVE)
        op.set_field("qdata", r_q, hf.BASIS_NONE, r_q.apply(ceed.asarray(q_e), hf.TRANSPOSE))
        op.set_field("v", r_u, basis, hf.VECTOR_ACTIVE)
        u = r_u.apply(ceed.asarray(u_e), hf.TRANSPOSE)  # (l_size,) in the backend's layout
        v = op(u)
        out[ceed.resource] = ceed.to_numpy(r_u.apply(v))  # (num_elem, 2, P * P)
        out[ceed.resource, "dot"] = float(op.apply_dot(u, ceed.asarray(np.empty(u.size))))
        assert r_u.lanes == (8 if ceed is nb else 1)
    np.testing.assert_allclose(out["/cpu/self/numba"], out["/cpu/self/ref"], rtol=1e-13)
    want = float((u_e * out["/cpu/self/ref"]).sum())
    assert out["/cpu/self/numba", "dot"] == pytest.approx(want, rel=1e-13)
    assert out["/cpu/self/ref", "dot"] == pytest.approx(want, rel=1e-13)


def _simplex_mass(ceed, dim, p, n, num_comp=1):
    """The mass operator of an affine simplex mesh with the geometry on the fly."""
    from hofem.meshes import box

    space = hf.H1Space(ceed, box(n, dim=dim, simplex=True), p, num_comp=num_comp)
    return hf.mass(space, coefficient=2.5, geometry="on_the_fly")


@pytest.mark.parametrize("dim, p, n, num_comp", [(3, 3, 3, 1), (2, 4, 3, 1), (3, 2, 2, 3)])
def test_scaled_mass_runs_as_one_element_product(nb, ref, dim, p, n, num_comp):
    """A mass form on affine simplices with the geometry on the fly is ``c_e B^T W B``: the
    kernel applies that one product (its matrix ``E0``), equal to the reference, ``u . Au``
    too; 162 tets, 18 triangles: partial blocks."""
    from hofem.backends.element_matrix import scaled_input

    op, op_ref = (_simplex_mass(c, dim, p, n, num_comp) for c in (nb, ref))
    assert scaled_input(op) == 0
    u = np.random.default_rng(11).standard_normal(op.shape[1])
    want = op_ref(u)
    np.testing.assert_allclose(op(u), want, rtol=1e-12, atol=1e-14 * np.abs(want).max())
    P = op.output_fields[0].basis.num_nodes
    assert op.backend_data["numba"]["static"]["E0"].shape == (1, P, P)
    dot = op.apply_dot(u, np.empty_like(u))
    assert float(dot) == pytest.approx(u @ want, rel=1e-12)


def _mass_variant(ceed, func):
    """The 2D on-the-fly mass operator's fields (18 triangles: a partial block, whose idle
    lanes divide by a zero determinant in ``_product``) with QFunction body ``func``."""
    base = _simplex_mass(ceed, 2, 2, 3)
    fields = base.input_fields + base.output_fields
    qf = ceed.QFunction(
        func,
        [(f.name, f.size, f.eval_mode) for f in base.input_fields],
        [(f.name, f.size, f.eval_mode) for f in base.output_fields],
    )
    op = ceed.Operator(qf)
    for f in fields:
        op.set_field(f.name, f.restriction or hf.ELEMRESTRICTION_NONE, f.basis, f.vector)
    return op


def _det(dx):
    return dx[0] * dx[3] - dx[1] * dx[2]


def _product(ctx, u, dx, w, v):
    v[0] = -(w[0] * (u[0] / _det(dx))) * 3.0


def _squared(ctx, u, dx, w, v):
    v[0] = w[0] * u[0] * u[0]


def _shifted(ctx, u, dx, w, v):
    v[0] = w[0] * _det(dx) * u[0] + w[0]


def _weight_squared(ctx, u, dx, w, v):
    v[0] = w[0] * w[0] * u[0]


def _by_weight(ctx, u, dx, w, v):
    v[0] = u[0] / w[0]


@pytest.mark.parametrize(
    "func, scaled",
    [(_product, True), (_squared, False), (_shifted, False), (_weight_squared, False),
     (_by_weight, False)],
)  # fmt: skip
def test_element_product_only_for_constant_times_weight_times_u(nb, ref, func, scaled):
    """Only a body that is a product of constants, the weight once and ``u`` once takes the
    element product; every body gives the reference's result."""
    from hofem.backends.element_matrix import scaled_input

    op, op_ref = _mass_variant(nb, func), _mass_variant(ref, func)
    assert (scaled_input(op) == 0) is scaled
    u = np.random.default_rng(12).standard_normal(op.shape[1])
    want = op_ref(u)
    np.testing.assert_allclose(op(u), want, rtol=1e-12, atol=1e-14 * np.abs(want).max())


def test_element_product_only_for_scaled_mass_fields(nb):
    """Stored q-data, the Poisson form and tensor bases keep the point loop."""
    from hofem.backends.element_matrix import scaled_input
    from hofem.meshes import box

    tets, hexes = (hf.H1Space(nb, box(2, simplex=simplex), 2) for simplex in (True, False))
    assert scaled_input(hf.mass(tets, geometry="stored")) is None
    assert scaled_input(hf.diffusion(tets, geometry="on_the_fly")) is None
    assert scaled_input(hf.mass(hexes, geometry="on_the_fly")) is None


@pytest.mark.parametrize("num_comp", [1, 3])
@pytest.mark.parametrize("p", [1, 2, 5])
def test_gauss_lobatto_gradient_reads_the_nodes(nb, ref, p, num_comp):
    """BP5 and BP6 (Gauss-Lobatto points at the nodes): the collocated gradient applies ``D``
    to the nodes and its transpose writes the output, with no interpolation rows or
    temporaries; the operator equals ref, stored and on the fly, vector and scalar."""
    from hofem import meshes
    from hofem.backends.numba import codegen

    basis = ref.BasisTensorH1Lagrange(3, num_comp, p + 1, p + 1, hf.GAUSS_LOBATTO)
    assert basis.interpolates_identity
    assert codegen.use_collocated(basis, num_comp, hf.EVAL_GRAD)
    for transpose in (False, True):
        program = codegen.basis_program(basis, num_comp, hf.EVAL_GRAD, transpose, 0, 0, 0)
        assert len(program) == 3 and set(program[:, 0]) == {4 + transpose}  # D or D^T only
        assert codegen.temp_size(basis, num_comp, hf.EVAL_GRAD, transpose) == 0
    gauss = ref.BasisTensorH1Lagrange(3, num_comp, p + 1, p + 2, hf.GAUSS)
    assert not gauss.interpolates_identity
    for geometry, distort in (("stored", 0.1), ("on_the_fly", 0.0)):
        ops = [
            hf.diffusion(hf.H1Space(c, meshes.box(2, distort=distort), p, num_comp=num_comp),
                         q_extra=0, quad_mode=hf.GAUSS_LOBATTO, geometry=geometry)
            for c in (nb, ref)
        ]  # fmt: skip
        u = np.random.default_rng(p).standard_normal(ops[1].shape[1])
        want = ops[1](u)
        assert np.abs(ops[0](u) - want).max() <= 1e-13 * np.abs(want).max()
