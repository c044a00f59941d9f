"""QFunctions: vectorized and pointwise execution agree, contexts, gallery, validation."""

import numpy as np
import pytest

import hofem as hf
from hofem.qfunction_registry import gallery_names

GALLERY = [
    "Mass1DBuild",
    "Mass2DBuild",
    "Mass3DBuild",
    "MassApply",
    "Poisson1DBuild",
    "Poisson2DBuild",
    "Poisson3DBuild",
    "Poisson1DApply",
    "Poisson2DApply",
    "Poisson3DApply",
    "Vector3MassApply",
    "Vector3Poisson1DApply",
    "Vector3Poisson2DApply",
    "Vector3Poisson3DApply",
    "Identity",
    "Scale",
]


def random_inputs(qf, num_qpts, rng):
    inputs = []
    for f in qf.inputs:
        a = rng.standard_normal((f.size, num_qpts))
        if f.name == "dx":  # keep Jacobians well away from singular
            dim = round(np.sqrt(f.size))
            a = np.eye(dim).ravel()[:, None] * 2 + 0.3 * a
        inputs.append(a)
    return inputs


@pytest.mark.parametrize("name", GALLERY)
def test_gallery_vectorized_equals_pointwise(ref, name):
    rng = np.random.default_rng(0)
    qf = ref.QFunctionByName(name)
    inputs = random_inputs(qf, 7, rng)
    out_v = [np.zeros((f.size, 7)) for f in qf.outputs]
    out_p = [np.zeros((f.size, 7)) for f in qf.outputs]
    qf.apply(inputs, out_v)
    qf.apply_pointwise(inputs, out_p)
    for a, b in zip(out_v, out_p, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-14)
        assert np.abs(a).sum() > 0


def test_gallery_is_complete(ref):
    ref.QFunctionByName("MassApply")
    assert set(GALLERY) <= set(gallery_names())


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_build_qfunctions_against_linear_algebra(ref, dim):
    rng = np.random.default_rng(dim)
    A = np.eye(dim) * 2 + 0.3 * rng.standard_normal((dim, dim))  # A[d, c] = dx_c / dxi_d
    w = 0.7
    mass = ref.QFunctionByName(f"Mass{dim}DBuild")
    poisson = ref.QFunctionByName(f"Poisson{dim}DBuild")
    dx, weights = A.reshape(-1, 1), np.array([[w]])
    m = np.zeros((1, 1))
    mass.apply([dx, weights], [m])
    assert m[0, 0] == pytest.approx(w * np.linalg.det(A))
    q = np.zeros((poisson.outputs[0].size, 1))
    poisson.apply([dx, weights], [q])
    expected = w * np.linalg.det(A) * np.linalg.inv(A @ A.T)
    voigt = {
        1: [(0, 0)],
        2: [(0, 0), (1, 1), (0, 1)],
        3: [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)],
    }[dim]
    np.testing.assert_allclose(q[:, 0], [expected[i, j] for i, j in voigt], rtol=1e-13)
    apply = ref.QFunctionByName(f"Poisson{dim}DApply")
    du = rng.standard_normal((dim, 1))
    dv = np.zeros((dim, 1))
    apply.apply([du, q], [dv])
    np.testing.assert_allclose(dv[:, 0], expected @ du[:, 0], rtol=1e-13)
    vector = ref.QFunctionByName(f"Vector3Poisson{dim}DApply")
    du3 = rng.standard_normal((dim * 3, 1))
    dv3 = np.zeros((dim * 3, 1))
    vector.apply([du3, q], [dv3])
    np.testing.assert_allclose(
        dv3[:, 0].reshape(dim, 3), expected @ du3[:, 0].reshape(dim, 3), rtol=1e-13
    )


def scaled_mass(ctx, u, qdata, v):
    v[0] = ctx["alpha"] * qdata[0] * u[0] + ctx["shift"]


def test_user_qfunction_with_context(ref):
    qf = ref.QFunction(
        scaled_mass,
        inputs=[("u", 1, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)],
        outputs=[("v", 1, hf.EVAL_INTERP)],
        context={"alpha": 2.5, "shift": 1},
    )
    u, qd = np.arange(4.0)[None], np.full((1, 4), 2.0)
    for run in (qf.apply, qf.apply_pointwise):
        v = np.zeros((1, 4))
        run([u, qd], [v])
        np.testing.assert_allclose(v[0], 5.0 * np.arange(4.0) + 1)
    qf.set_context({"alpha": 1.0, "shift": 0.0})
    v = np.zeros((1, 4))
    qf.apply([u, qd], [v])
    np.testing.assert_allclose(v[0], 2.0 * np.arange(4.0))
    assert qf.context.dtype.names == ("alpha", "shift")


def test_structured_context_and_scale(ref):
    rec = np.zeros((), dtype=[("size", np.int64), ("scale", np.float64)])
    rec["size"], rec["scale"] = 2, -3.0
    qf = ref.QFunctionByName("Scale", size=2, scale=-3.0)
    assert qf.context == rec[()]
    out = np.zeros((2, 3))
    qf.apply([np.ones((2, 3))], [out])
    np.testing.assert_array_equal(out, -3.0)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"func": 3}, TypeError, "func must be callable"),
        ({"inputs": [("u", 0, hf.EVAL_INTERP)]}, ValueError, "size must be an integer >= 1"),
        ({"inputs": [("u", 1, "interp")]}, ValueError, r"eval_mode must be an hf.EVAL_\*"),
        ({"inputs": [("u", 1)]}, ValueError, r"must be \(name, size, eval_mode\)"),
        ({"inputs": [("1u", 1, hf.EVAL_INTERP)]}, ValueError, "identifier"),
        ({"inputs": [("w", 2, hf.EVAL_WEIGHT)]}, ValueError, "EVAL_WEIGHT is an input of size 1"),
        ({"outputs": [("u", 1, hf.EVAL_INTERP)]}, ValueError, r"unique; repeated: \['u'\]"),
        ({"outputs": []}, ValueError, "at least one output"),
        ({"context": {"a": "x"}}, TypeError, r"context\['a'\] must be a real scalar"),
        ({"context": [1.0]}, TypeError, "context must be a dict"),
    ],
)
def test_validation(ref, kwargs, error, message):
    args = {
        "func": scaled_mass,
        "inputs": [("u", 1, hf.EVAL_INTERP)],
        "outputs": [("v", 1, hf.EVAL_INTERP)],
    }
    args.update(kwargs)
    with pytest.raises(error, match=message):
        ref.QFunction(**args)


def test_apply_and_lookup_validation(ref):
    qf = ref.QFunctionByName("MassApply")
    with pytest.raises(ValueError, match=r"field 'qdata' must have shape \(1, Q\)"):
        qf.apply([np.zeros((1, 3)), np.zeros((2, 3))], [np.zeros((1, 3))])
    with pytest.raises(ValueError, match="has 4 points, the others 3"):
        qf.apply([np.zeros((1, 3)), np.zeros((1, 4))], [np.zeros((1, 3))])
    with pytest.raises(ValueError, match="takes 2 inputs and 1 outputs"):
        qf.apply([np.zeros((1, 3))], [np.zeros((1, 3))])
    with pytest.raises(ValueError, match="no gallery QFunction named 'Nope'; available: "):
        ref.QFunctionByName("Nope")
    with pytest.raises(ValueError, match="size must be an integer >= 1"):
        ref.QFunctionByName("Identity", size=0)


def first_row_only(ctx, u, v):
    v[0] = 2.0 * u[0]


def test_trace_zero_unwritten(ref):
    """Traced bodies store 0 in the output rows they never write when asked (the batched
    GPU QFunction kernel's outputs then need no zero fill), and leave them alone otherwise."""
    from hofem.qfunction_trace import trace_body

    qf = ref.QFunction(
        first_row_only, inputs=[("u", 1, hf.EVAL_INTERP)], outputs=[("v", 2, hf.EVAL_INTERP)]
    )

    def trace(zero):
        return trace_body(
            qf, lambda k, row: f"in[{row}]", lambda k, row: f"out[{row}]", zero_unwritten=zero
        )

    assert [line for line in trace(False) if line.startswith("out[")] == ["out[0] = t1;"]
    assert [line for line in trace(True) if line.startswith("out[")] == [
        "out[0] = t1;",
        "out[1] = 0.0;",
    ]


@pytest.mark.parametrize("name", GALLERY)
def test_recorded_gallery_traces_match_fresh_ones(ref, name):
    """A gallery body is traced once per sizes, context and dialect, and replayed: every later
    trace, with other load/store strings, is the statement list a fresh trace gives, the
    callables called in the same order."""
    from hofem import qfunction_trace as qt

    qf = ref.QFunctionByName(name, **({"scale": 2.5} if name == "Scale" else {}))
    for dialect in (qt.CPP, qt.PYTHON):
        for ctx_load in (None, lambda key: f"ctx_{key}"):
            for tag in ("a", "bb"):
                calls, fresh_calls = [], []

                def callables(log, tag=tag):
                    load = lambda k, row: log.append(("l", k, row)) or f"{tag}in{k}[{row}]"  # noqa: E731
                    store = lambda k, row: log.append(("s", k, row)) or f"{tag}out{k}[{row}]"  # noqa: E731
                    return load, store

                got = qt.trace_body(qf, *callables(calls), dialect, ctx_load, zero_unwritten=True)
                want = qt._trace(qf, *callables(fresh_calls), dialect, ctx_load, True)
                assert got == want and calls == fresh_calls
    assert qt._trace_key(qf, qt.CPP, False, True) in qt._RECORDED


def test_recorded_traces_keep_each_context_apart(ref):
    """A context baked into the statements is part of what a recorded trace is kept by."""
    from hofem.qfunction_trace import trace_body

    def body(scale):
        qf = ref.QFunctionByName("Scale", scale=scale)
        return trace_body(qf, lambda k, row: f"u[{row}]", lambda k, row: f"v[{row}]")

    assert body(2.0) != body(3.0)
    assert body(2.0) == body(2.0)


def test_bodies_outside_the_gallery_are_traced_each_time(ref):
    from hofem import qfunction_trace as qt

    qf = ref.QFunction(
        first_row_only, inputs=[("u", 1, hf.EVAL_INTERP)], outputs=[("v", 2, hf.EVAL_INTERP)]
    )
    assert qt._trace_key(qf, qt.CPP, False, False) is None
