"""Element restrictions: gather/scatter, adjointness, multiplicity, validation."""

import numpy as np
import pytest

import hofem as hf


def chain_offsets(num_elem, elem_size):
    """1D chain of elements sharing end nodes: (num_elem, elem_size)."""
    step = elem_size - 1
    return np.arange(num_elem)[:, None] * step + np.arange(elem_size)[None, :]


@pytest.fixture
def rng():
    return np.random.default_rng(42)


def test_gather_matches_indexing(ceed, rng):
    num_elem, elem_size, num_comp = 5, 4, 2
    offsets = chain_offsets(num_elem, elem_size)
    n_nodes = offsets.max() + 1
    r = ceed.ElemRestriction(num_elem, elem_size, num_comp, n_nodes, num_comp * n_nodes, offsets)
    u = rng.standard_normal(num_comp * n_nodes)
    e = ceed.to_numpy(r.apply(ceed.asarray(u)))
    assert e.shape == (num_elem, num_comp, elem_size)
    for c in range(num_comp):
        np.testing.assert_array_equal(e[:, c, :], u[offsets + c * n_nodes])


@pytest.mark.parametrize("kind", ["offsets", "interlaced", "strided", "backend", "oriented"])
def test_transpose_is_adjoint(ceed, rng, kind):
    num_elem, elem_size, num_comp = 7, 3, 3
    offsets = chain_offsets(num_elem, elem_size)
    n_nodes = offsets.max() + 1
    if kind == "offsets":
        r = ceed.ElemRestriction(
            num_elem, elem_size, num_comp, n_nodes, num_comp * n_nodes, offsets
        )
    elif kind == "interlaced":  # components interleaved: comp_stride 1
        r = ceed.ElemRestriction(
            num_elem,
            elem_size,
            num_comp,
            1,
            num_comp * n_nodes,
            num_comp * offsets.astype(np.int64),
        )
    elif kind == "strided":
        r = ceed.StridedElemRestriction(
            num_elem,
            elem_size,
            num_comp,
            num_elem * elem_size * num_comp,
            (num_comp, 1, elem_size * num_comp),
        )
    elif kind == "backend":
        r = ceed.StridedElemRestriction(
            num_elem, elem_size, num_comp, num_elem * elem_size * num_comp, hf.STRIDES_BACKEND
        )
    else:
        orients = rng.random((num_elem, elem_size)) < 0.5
        r = ceed.ElemRestriction(
            num_elem, elem_size, num_comp, n_nodes, num_comp * n_nodes, offsets, orients=orients
        )
    u = ceed.asarray(rng.standard_normal(r.l_size))
    e = ceed.asarray(rng.standard_normal((num_elem, num_comp, elem_size)))
    lhs = float((r.apply(u) * e).sum())
    rhs = float((u * r.apply(e, hf.TRANSPOSE)).sum())
    assert lhs == pytest.approx(rhs, rel=1e-13)


@pytest.mark.parametrize("num_elem", [4, 8, 19])
def test_strided_backend_layout(ceed, rng, num_elem):
    """The backend's layout: E-vector order on one lane, else blocks of ``lanes``
    interleaved elements (the last one partial); it tiles the L-vector exactly."""
    elem_size, num_comp = 5, 2
    e_size = num_elem * num_comp * elem_size
    r = ceed.StridedElemRestriction(num_elem, elem_size, num_comp, e_size, hf.STRIDES_BACKEND)
    lanes = r.lanes
    assert lanes == (8 if ceed.resource == "/cpu/self/numba" else 1)
    want = np.empty((num_elem, num_comp, elem_size), dtype=np.int64)
    for k in range(num_elem):
        first = k - k % lanes
        n_b = min(lanes, num_elem - first)
        for j in range(num_comp):
            for i in range(elem_size):
                want[k, j, i] = first * num_comp * elem_size + (j * elem_size + i) * n_b + k - first
    np.testing.assert_array_equal(r.indices, want)
    np.testing.assert_array_equal(np.sort(want.ravel()), np.arange(e_size))  # a tiling
    u = rng.standard_normal(e_size)
    e = ceed.to_numpy(r.apply(ceed.asarray(u)))
    np.testing.assert_array_equal(e, u[want])
    np.testing.assert_array_equal(ceed.to_numpy(r.apply(ceed.asarray(e), hf.TRANSPOSE)), u)
    assert r.is_identity == (lanes == 1)
    if lanes > 1 and num_elem % lanes:  # no single component stride in the partial block
        with pytest.raises(ValueError, match=r"no single component stride; use \.indices"):
            r.compact_indices()
    else:
        offsets, stride = r.compact_indices()
        np.testing.assert_array_equal(offsets[:, 0], want[:, 0])
        np.testing.assert_array_equal(want[:, 1], want[:, 0] + stride)


def test_strided_backend_needs_every_entry(ceed):
    with pytest.raises(ValueError, match=r"l_size = 39 is below num_elem \* num_comp"):
        ceed.StridedElemRestriction(4, 5, 2, 39, hf.STRIDES_BACKEND)


def test_oriented_flips_signs(ceed):
    offsets = chain_offsets(2, 3)
    orients = np.array([[False, True, False], [False, False, True]])
    r = ceed.ElemRestriction(2, 3, 1, 1, 5, offsets, orients=orients)
    u = np.arange(1.0, 6.0)
    e = ceed.to_numpy(r.apply(ceed.asarray(u)))
    np.testing.assert_array_equal(e[:, 0], [[1, -2, 3], [3, 4, -5]])
    np.testing.assert_array_equal(ceed.to_numpy(r.multiplicity()), [1, 1, 2, 1, 1])


def test_transpose_sums_shared_nodes_and_multiplicity(ceed):
    offsets = chain_offsets(3, 4)
    r = ceed.ElemRestriction(3, 4, 2, 10, 20, offsets)
    np.testing.assert_array_equal(
        ceed.to_numpy(r.multiplicity()), np.tile([1, 1, 1, 2, 1, 1, 2, 1, 1, 1], 2)
    )
    e = ceed.asarray(np.ones(r.e_size))  # flat E-vector accepted
    np.testing.assert_array_equal(
        ceed.to_numpy(r.apply(e, hf.TRANSPOSE)), ceed.to_numpy(r.multiplicity())
    )
    assert (r.l_size, r.e_size, r.num_elem, r.elem_size, r.num_comp) == (20, 24, 3, 4, 2)


def test_int64_offsets_and_index_width(ceed):
    offsets = chain_offsets(2, 3).astype(np.int64)
    r = ceed.ElemRestriction(2, 3, 1, 1, 5, offsets)
    assert r.indices.dtype == np.int32
    big = ceed.ElemRestriction(1, 2, 1, 1, 2**31 + 10, np.array([[0, 2**31 + 5]]))
    assert big.indices.dtype == np.int64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offsets": np.array([[0, 1, 9]])}, r"offsets\[0, 2\] = 9 is out of range"),
        ({"offsets": np.array([[0, -1, 2]])}, r"offsets\[0, 1\] = -1 is out of range"),
        ({"offsets": np.array([[0, 1]])}, r"offsets must have shape \(num_elem, elem_size\)"),
        ({"offsets": np.array([[0.0, 1.0, 2.0]])}, "offsets must be an integer array"),
        ({"num_comp": 2, "comp_stride": 3}, r"offset \+ \(num_comp - 1\) \* comp_stride"),
        ({"num_elem": 0}, "num_elem must be an integer >= 1"),
        ({"orients": np.array([[1, 0, 1]])}, "orients must be a bool array"),
    ],
)
def test_offset_validation(ceed, kwargs, message):
    args = {
        "num_elem": 1,
        "elem_size": 3,
        "num_comp": 1,
        "comp_stride": 1,
        "l_size": 5,
        "offsets": np.array([[0, 1, 2]]),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        ceed.ElemRestriction(**args)


def test_strided_validation(ceed):
    with pytest.raises(ValueError, match=r"strides \(1, 3, 3\) reach L-vector index"):
        ceed.StridedElemRestriction(2, 3, 1, 5, (1, 3, 3))
    with pytest.raises(ValueError, match="strides must be 3 integers"):
        ceed.StridedElemRestriction(2, 3, 1, 6, (1, 3))


def test_apply_validation(ceed):
    r = ceed.ElemRestriction(2, 3, 1, 1, 5, chain_offsets(2, 3))
    with pytest.raises(ValueError, match=r"u must have shape \(5,\)"):
        r.apply(ceed.asarray(np.zeros(4)))
    with pytest.raises(TypeError, match="dtype float64"):
        r.apply(ceed.asarray(np.zeros(5, dtype=np.float32)))
    with pytest.raises(TypeError, match=r"ceed\.asarray"):
        r.apply([0.0] * 5)
    with pytest.raises(ValueError, match="t_mode must be"):
        r.apply(ceed.asarray(np.zeros(5)), "transpose")
    with pytest.raises(ValueError, match=r"u must have shape \(2, 1, 3\)"):
        r.apply(ceed.asarray(np.zeros(5)), hf.TRANSPOSE)
