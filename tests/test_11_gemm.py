"""Non-tensor GEMM path of /gpu/cuda/batched: tuning-table selector (CPU), GEMM configs (GPU).

The selector tests run without CuPy, on fake tables written to ``tmp_path``.
GPU tests check every configuration (plain, batched with and without columns
left over) against the ``/cpu/self/ref`` oracle.
"""

import json

import numpy as np
import pytest
from lab import ROOT  # noqa: F401  (puts the laboratory on sys.path)

import hofem as hf
from bakeoff import tune_gemm
from hofem import meshes
from hofem.backends.cuda import gemm

N, T = hf.NOTRANSPOSE, hf.TRANSPOSE


def entry(t_mode, P, Q, n, batch_count):
    return {"t_mode": t_mode, "P": P, "Q": Q, "n": n, "batch_count": batch_count}


def write(path, entries, fmt=gemm.TABLE_FORMAT):
    path.write_text(json.dumps({"format": fmt, "metadata": {}, "entries": entries}))
    return path


@pytest.fixture
def table(tmp_path):
    return write(
        tmp_path / "table.json",
        [
            entry("notranspose", 35, 216, 10_000, 16),  # eta 625
            entry("notranspose", 35, 216, 1_000_000, 1),
            entry("transpose", 35, 216, 10_000, 40),  # eta 250
            entry("notranspose", 165, 1000, 10_000, 1),
            entry("notranspose", 165, 3000, 10_000, 5),
        ],
    )


# --- selector (no GPU) -----------------------------------------------------------------------
def test_exact_shape_hit(table):
    assert gemm.select(N, 35, 216, 10_000, table) == 16
    assert gemm.select(T, 35, 216, 10_000, table) == 40
    assert gemm.select(N, 165, 1000, 10_000, table) == 1
    assert gemm.select(N, 165, 3000, 10_000, table) == 5


def test_nearest_n_keeps_columns_per_gemm(table):
    assert gemm.select(N, 35, 216, 20_000, table) == 32  # eta 625 kept
    assert gemm.select(N, 35, 216, 3_001, table) == 5  # round(3001 / 625)
    assert gemm.select(N, 35, 216, 100, table) == 1  # fewer columns than eta
    assert gemm.select(N, 35, 216, 5_000_000, table) == 1  # nearest n: the plain entry
    assert gemm.select(T, 35, 216, 1_000, table) == 4  # eta 250


def test_nearest_shape_rule(table):
    assert gemm.select(N, 36, 220, 10_000, table) == 16  # nearest (35, 216)
    assert gemm.select(N, 165, 2500, 10_000, table) == 5  # nearer 3000 than 1000
    assert gemm.select(N, 165, 1400, 10_000, table) == 1  # nearer 1000 (plain)
    assert gemm.select(N, 10, 64, 10_000, table) == 1  # more than a factor 2 from any shape
    assert gemm.select(T, 165, 1000, 10_000, table) == 1  # no transpose entry near it


def test_no_table_is_plain_gemm(tmp_path, monkeypatch, table):
    assert gemm.select(N, 35, 216, 10_000, tmp_path / "absent.json") == 1
    assert gemm.select(N, 35, 216, 10_000, "none") == 1
    monkeypatch.setenv(gemm.TABLE_ENV, str(table))
    assert gemm.select(N, 35, 216, 10_000) == 16
    monkeypatch.setenv(gemm.TABLE_ENV, "none")
    assert gemm.select(N, 35, 216, 10_000) == 1


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "cannot be read as JSON"),
        (json.dumps([]), "'format': 1"),
        (json.dumps({"format": 2, "entries": []}), "'format': 1"),
        (json.dumps({"format": 1}), "'entries' must be a list"),
        (json.dumps({"format": 1, "entries": [{"t_mode": "notranspose"}]}), "has no 'P'"),
        (json.dumps({"format": 1, "entries": [entry("sideways", 4, 27, 10, 1)]}), "t_mode"),
        (json.dumps({"format": 1, "entries": [entry("transpose", 4, 27, 10, 0)]}), "positive"),
        (json.dumps({"format": 1, "entries": [entry("transpose", 4, 27, 10, 11)]}), "> n"),
    ],
)
def test_malformed_table_names_the_file(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match) as info:
        gemm.select(N, 4, 27, 10, path)
    assert str(path) in str(info.value) and "bakeoff tune-gemm" in str(info.value)


def test_select_rejects_bad_arguments(table):
    with pytest.raises(ValueError, match="t_mode"):
        gemm.select("notranspose", 35, 216, 10, table)
    with pytest.raises(ValueError, match="n must be a positive"):
        gemm.select(N, 35, 216, 0, table)


def test_packaged_table_is_valid():
    if not gemm.TABLE_PATH.is_file():
        pytest.skip("no tuning table committed yet: plain GEMMs everywhere")
    entries = gemm.load_table(str(gemm.TABLE_PATH))
    shapes = {(e["P"], e["Q"]) for e in entries}
    assert {(27, 64), (125, 216), (729, 1000)} <= shapes
    assert {tune_gemm.tet_shape(p) for p in range(1, 9)} <= shapes


# --- sweep logic (no GPU) --------------------------------------------------------------------
def test_tet_shapes_are_the_bakeoff_spaces(ref):
    mesh = meshes.box(1, 3, simplex=True)
    for p in (1, 2, 5):
        basis = hf.H1Space(ref, mesh, p).basis()
        assert tune_gemm.tet_shape(p) == (basis.num_nodes, basis.num_qpts)
    assert tune_gemm.tet_shape(4) == (35, 216)


def test_sweep_cases_and_candidates():
    cases = tune_gemm.cases(max_bytes=1e9)
    shapes = {(c["P"], c["Q"]) for c in cases}
    for P, Q in [*tune_gemm.SEED_SHAPES, *(tune_gemm.tet_shape(p) for p in range(1, 9))]:
        assert {(P, Q), (P, 3 * Q)} <= shapes
    assert all(8 * c["n"] * (c["P"] + c["Q"]) <= 1e9 for c in cases)
    counts = tune_gemm.batch_counts(10_000)
    assert {2, 16, 25, 125, 512} <= set(counts) and max(counts) <= 10_000 // tune_gemm.MIN_ETA
    assert tune_gemm.batch_counts(10) == []


def test_best_entry_needs_the_margin_and_round_trips(tmp_path):
    case = {"t_mode": "transpose", "P": 35, "Q": 216, "n": 10_000}
    assert tune_gemm.best_entry(case, {1: 1.0, 8: 0.99, 16: 1.2}, 0.02)["batch_count"] == 1
    best = tune_gemm.best_entry(case, {1: 1.0, 8: 0.9, 16: 0.8}, 0.02)
    assert (best["batch_count"], best["seconds"], best["gemm_seconds"]) == (16, 0.8, 1.0)
    path = tmp_path / "written.json"
    tune_gemm.write_table(path, {"device": "fake"}, [best])
    assert gemm.select(T, 35, 216, 10_000, path) == 16


# --- GPU -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batched():
    pytest.importorskip("cupy")
    if "/gpu/cuda/batched" not in hf.backends.available():
        pytest.skip("no CUDA device visible to CuPy")
    return hf.Ceed("/gpu/cuda/batched")


def rel_error(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


@pytest.mark.gpu
@pytest.mark.parametrize("t_mode", [N, T])
@pytest.mark.parametrize("batch_count", [1, 2, 7, 64, 1001])
def test_gemm_configs_on_strided_views(batched, t_mode, batch_count):
    """y = x @ J.T (or x @ J) on row-strided views, n = 1001 columns, beta 0 and 1."""
    import cupy

    rng = np.random.default_rng(batch_count)
    Q, P, n = 27, 10, 1001
    k, m = (P, Q) if t_mode is N else (Q, P)
    mat = rng.standard_normal((Q, P))
    x = rng.standard_normal((n, 3, k))  # rows of x: x[:, 1]
    y0 = rng.standard_normal((n, 2, m))  # rows of y: y[:, 0]
    op = mat.T if t_mode is N else mat
    for beta in (0.0, 1.0):
        y = cupy.asarray(y0)
        gemm.gemm(cupy.asarray(mat), t_mode, cupy.asarray(x)[:, 1], y[:, 0], beta, batch_count)
        want = x[:, 1] @ op + beta * y0[:, 0]
        assert rel_error(y[:, 0].get(), want) < 1e-13, beta
        np.testing.assert_array_equal(y[:, 1].get(), y0[:, 1])  # untouched


@pytest.mark.gpu
def test_gemm_rejects_bad_config(batched):
    import cupy

    mat, x, y = cupy.zeros((4, 3)), cupy.zeros((5, 3)), cupy.zeros((5, 4))
    with pytest.raises(ValueError, match=r"batch_count must be in 1\.\.n"):
        gemm.gemm(mat, N, x, y, batch_count=6)
    with pytest.raises(ValueError, match="x must be a float64"):
        gemm.gemm(mat, N, y, y)
    with pytest.raises(ValueError, match="contiguous"):
        gemm.gemm(mat, N, cupy.zeros((5, 6))[:, ::2], y)


def tet_basis(ceed, p, num_comp):
    return ceed.BasisH1Lagrange(hf.TET, num_comp, p, 2 * (p + 2) - 1)


@pytest.mark.gpu
@pytest.mark.parametrize("p", range(1, 9))
@pytest.mark.parametrize("num_comp", [1, 3])
def test_tet_basis_every_config_matches_ref(batched, ref, p, num_comp):
    """Basis layout and Q-vector layout, interp/grad and transposes, 37 elements."""
    import cupy

    num_elem = 37
    b_ref = tet_basis(ref, p, num_comp)
    b_gpu = tet_basis(batched, p, num_comp)
    interp, grad = b_gpu.backend_data.interp, b_gpu.backend_data.grad
    dim, Q, P = 3, b_ref.num_qpts, b_ref.num_nodes
    rng = np.random.default_rng(p * 10 + num_comp)
    nodes = rng.standard_normal((num_elem, num_comp, P))
    shapes = {hf.EVAL_INTERP: (num_elem, num_comp, Q), hf.EVAL_GRAD: (num_elem, dim, num_comp, Q)}
    backend = ref.backend
    for mode, shape in shapes.items():
        qpts = rng.standard_normal(shape)
        want_q = b_ref.apply(num_elem, N, mode, nodes)
        want_n = b_ref.apply(num_elem, T, mode, qpts)
        qvec = backend._to_qvec(qpts, num_elem, Q)  # (size, E*Q)
        for count in (1, 2, 5, 36, None):
            got_q = cupy.empty(shape)
            gemm.apply_basis(interp, grad, N, mode, cupy.asarray(nodes), got_q, batch_count=count)
            assert rel_error(got_q.get(), want_q) < 1e-12, (mode, count)
            got_n = cupy.empty(nodes.shape)
            gemm.apply_basis(interp, grad, T, mode, got_n, cupy.asarray(qpts), batch_count=count)
            assert rel_error(got_n.get(), want_n) < 1e-12, (mode, count)
            got_qv = cupy.empty(qvec.shape)
            gemm.apply_basis(
                interp, grad, N, mode, cupy.asarray(nodes), got_qv, qvec=True, batch_count=count
            )
            assert rel_error(got_qv.get(), backend._to_qvec(want_q, num_elem, Q)) < 1e-12
            got_n = cupy.empty(nodes.shape)
            gemm.apply_basis(
                interp, grad, T, mode, got_n, cupy.asarray(qvec), qvec=True, batch_count=count
            )
            assert rel_error(got_n.get(), want_n) < 1e-12, (mode, count, "qvec")
        got = b_gpu.apply(num_elem, N, mode, batched.asarray(nodes))  # Basis.apply, table config
        assert got.shape == want_q.shape and rel_error(got.get(), want_q) < 1e-12
        got = b_gpu.apply(num_elem, T, mode, batched.asarray(qpts))
        assert got.shape == want_n.shape and rel_error(got.get(), want_n) < 1e-12


@pytest.fixture(params=["none", "fake"])
def gemm_table(request, tmp_path, monkeypatch):
    """No table (plain GEMMs), or a fake one forcing batched GEMMs of 7 columns for tets."""
    if request.param == "fake":
        entries = [
            entry(t, P, rows, 700, 100)
            for P, Q in (tune_gemm.tet_shape(p) for p in range(1, 5))
            for rows in (Q, 3 * Q)
            for t in ("notranspose", "transpose")
        ]
        monkeypatch.setenv(gemm.TABLE_ENV, str(write(tmp_path / "fake.json", entries)))
    else:
        monkeypatch.setenv(gemm.TABLE_ENV, "none")
    return request.param


@pytest.mark.gpu
@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize(("form", "num_comp"), [("mass", 1), ("diffusion", 1), ("diffusion", 3)])
def test_tet_operators_match_ref(batched, ref, gemm_table, p, form, num_comp):
    mesh = meshes.box(2, 3, simplex=True, distort=0.1)  # 48 tets
    ops = {}
    for ceed in (batched, ref):
        space = hf.H1Space(ceed, mesh, p, num_comp=num_comp)
        ops[ceed] = getattr(hf, form)(space)
    if gemm_table == "fake":
        E = ops[ref].num_elem
        assert gemm.select(N, *tune_gemm.tet_shape(p), E) == round(E / 7) > 1
    u = np.random.default_rng(p).standard_normal(ops[ref].shape[1])
    got = batched.to_numpy(ops[batched](batched.asarray(u)))
    assert rel_error(got, ops[ref](u)) < 1e-12
