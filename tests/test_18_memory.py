"""Set-up memory: index widths past 2^31 entries, chunked q-data, what a solve holds."""

import gc
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import hofem as hf
from hofem.memory import memory_report, peak_rss_bytes
from hofem.meshes import box, h1_numbering
from hofem.restriction import index_dtype
from hofem.space import free_indices

INT32_MAX = 2**31 - 1


def test_index_dtype_switches_at_int32_max():
    assert index_dtype(0) is np.int32
    assert index_dtype(INT32_MAX) is np.int32
    assert index_dtype(INT32_MAX + 1) is np.int64
    assert index_dtype(3 * 10**9) is np.int64


def test_offset_indices_past_int32_do_not_overflow(ceed):
    """Components above 2^31 - 1: int64 indices, exact values (no wrap-around)."""
    stride = 2**30 + 7
    offsets = np.array([[0, 5], [5, 9]], dtype=np.int32)  # int32 offsets, int64 L-vector
    r = ceed.ElemRestriction(2, 2, 3, stride, 2 * stride + 10, offsets)
    indices = r.indices
    assert indices.dtype == np.int64
    assert int(indices[1, 2, 1]) == 2 * stride + 9 > INT32_MAX
    small = ceed.ElemRestriction(2, 2, 3, 10, 30, offsets)
    assert small.indices.dtype == np.int32


def test_strided_indices_are_made_on_access_and_exact(ceed):
    r = ceed.StridedElemRestriction(3, 2, 1, 2**31 + 6, (1, 1, 2**30 + 1))
    indices = r.indices  # computed now, never stored
    assert indices.dtype == np.int64
    assert int(indices[2, 0, 1]) == 2 * (2**30 + 1) + 1
    assert not r.is_identity
    q = ceed.StridedElemRestriction(4, 5, 2, 40, (1, 5, 10))  # the E-vector layout
    assert q.is_identity
    u = ceed.asarray(np.arange(40.0))
    np.testing.assert_array_equal(ceed.to_numpy(q.apply(u)).ravel(), np.arange(40.0))
    np.testing.assert_array_equal(ceed.to_numpy(q.apply(q.apply(u), hf.TRANSPOSE)), np.arange(40))


@pytest.mark.parametrize("layout", ["component-major", "interleaved", "strided"])
def test_compact_indices_hold_one_component(ceed, layout):
    """``compact_indices``: component 0 plus a stride gives ``indices``; 1/num_comp stored."""
    offsets = np.array([[0, 2, 4], [4, 6, 8]], dtype=np.int64)  # 2 elements of 3 nodes
    if layout == "component-major":
        r = ceed.ElemRestriction(2, 3, 3, 9, 27, offsets)
    elif layout == "interleaved":
        r = ceed.ElemRestriction(2, 3, 3, 1, 30, 3 * offsets)
    else:
        r = ceed.StridedElemRestriction(2, 3, 3, 18, (1, 3, 9))
    compact, stride = r.compact_indices()
    assert compact.shape == (2, 1, 3) and stride == r.component_stride
    expanded = compact + stride * np.arange(3)[None, :, None]
    np.testing.assert_array_equal(r.indices, expanded)
    if layout != "strided" and ceed.xp is np:  # host backends keep the offsets, once
        assert compact is r.compact_indices()[0]
        assert memory_report(r)["host_bytes"] == compact.nbytes
    if ceed.xp is not np and not r.is_identity:  # device backends: component 0, int32
        report = memory_report(r)
        assert report["host_bytes"] == 0 and report["device_bytes"] == 6 * 4
    u = np.arange(float(r.l_size))  # the kernels add the stride themselves
    e = ceed.to_numpy(r.apply(ceed.asarray(u)))  # (2, 3, 3)
    np.testing.assert_array_equal(e, u[expanded])
    v = ceed.to_numpy(r.apply(ceed.asarray(e), hf.TRANSPOSE))
    np.testing.assert_array_equal(v, np.bincount(expanded.ravel(), e.ravel(), r.l_size))


def test_numbering_offsets_are_int32_and_shared_by_the_restriction(ceed):
    mesh = box(3)
    numbering = h1_numbering(mesh, 3)
    assert numbering.offsets.dtype == np.int32
    space = hf.H1Space(ceed, mesh, 3, numbering=numbering)
    report = memory_report(space)
    # offsets (E, P) int32 counted once, whether through the numbering or the restriction
    indices = sum(report["host"].get(k, 0) for k in ("H1Numbering", "ElemRestriction"))
    indices += sum(report["device"].get(k, 0) for k in ("H1Numbering", "ElemRestriction"))
    assert indices <= 2 * numbering.offsets.nbytes + 64 * space.num_dofs


def test_free_indices():
    np.testing.assert_array_equal(free_indices(6, np.array([0, 3, 3])), [1, 2, 4, 5])
    assert free_indices(3, np.array([], dtype=np.int64)).tolist() == [0, 1, 2]
    constrained = np.array([0, 4, 5, 11, 12, 19])
    chunked = free_indices(20, constrained, chunk=3)  # chunks of the mask, no int64 array
    assert chunked.dtype == np.int32
    np.testing.assert_array_equal(chunked, np.setdiff1d(np.arange(20), constrained))


@pytest.mark.parametrize("coefficient", [None, 2.5, lambda x: 1 + x[:, 0] * x[:, 2]])
@pytest.mark.parametrize("form", [hf.mass, hf.diffusion])
def test_chunked_setup_matches_one_chunk(ceed, form, coefficient):
    """q-data built (and scaled) in many cell chunks (a short last one) equals one chunk's."""
    mesh = box((3, 2, 3), order=2, distort=0.1)
    whole = hf.H1Space(ceed, mesh, 2)
    chunked = hf.H1Space(ceed, mesh, 2)
    chunked.CHUNK_POINTS = 4 * 27  # 4 cells of q = 3^3 points: chunks of 4, 4, 4, 4, 2
    assert [b - a for a, b in chunked.cell_chunks(27)] == [4, 4, 4, 4, 2]
    u = ceed.asarray(np.random.default_rng(0).standard_normal(whole.num_dofs))
    kwargs = {"coefficient": coefficient, "geometry": "stored"}
    a, b = ceed.to_numpy(form(whole, **kwargs)(u)), ceed.to_numpy(form(chunked, **kwargs)(u))
    np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-13 * np.abs(a).max())
    f = lambda x: np.sin(x[:, 0]) + x[:, 1]  # noqa: E731
    np.testing.assert_allclose(
        ceed.to_numpy(chunked.load_vector(f)), ceed.to_numpy(whole.load_vector(f)), atol=1e-14
    )


def test_element_coordinates_match_the_coordinate_l_vector(ceed):
    mesh = box(2, order=2, distort=0.1)
    space = hf.H1Space(ceed, mesh, 3)
    r_x = space.make_restriction(space.dim)
    e = ceed.to_numpy(r_x.apply(space.coordinates))  # (E, dim, P)
    np.testing.assert_allclose(space.element_coordinates(), e, atol=1e-15)
    subset = space.element_subset(3, 7)
    np.testing.assert_allclose(subset.element_coordinates(1, 3), e[4:6], atol=1e-15)


def test_element_subsets_share_one_coordinate_vector(ceed):
    """On-the-fly operators on two subsets hold one coordinate L-vector; a lone space none."""
    mesh = box(3, distort=0.1)
    space = hf.H1Space(ceed, mesh, 2)
    assert space.coordinates is not space.coordinates  # computed per access, never kept
    first, second = space.element_subsets((0, 10), (10, space.num_elem))
    assert first._shared["coordinates"] is None  # nothing computed before it is read
    ops = [hf.diffusion(s, geometry="on_the_fly") for s in (first, second)]
    assert first.coordinates is second.coordinates
    np.testing.assert_array_equal(
        ceed.to_numpy(first.coordinates), ceed.to_numpy(space.coordinates)
    )
    total = ceed.CompositeOperator(ops)
    whole = hf.diffusion(space, geometry="on_the_fly")
    u = ceed.asarray(np.random.default_rng(2).standard_normal(space.num_dofs))
    np.testing.assert_allclose(ceed.to_numpy(total(u)), ceed.to_numpy(whole(u)), atol=1e-12)
    assert ops[0].fields["dx"].vector is ops[1].fields["dx"].vector
    held = memory_report(ops)
    fields = held["host"].get("OperatorField", 0) + held["device"].get("OperatorField", 0)
    # one coordinate L-vector, not two: the straight-sided mesh's vertices
    assert fields == space.dim * mesh.num_points * 8


def test_memory_report_counts_what_a_form_holds(ceed):
    mesh = box(3)
    space = hf.H1Space(ceed, mesh, 2)
    op = hf.mass(space)
    report = memory_report(op)
    Q = 4**3  # q = p + 2 Gauss points per direction
    qdata = space.num_elem * Q * 8
    held = report["host_bytes"] + report["device_bytes"]
    fields = report["host"].get("OperatorField", 0) + report["device"].get("OperatorField", 0)
    assert fields == qdata  # the q-data, no coordinate or index copies
    assert held < qdata + 64 * space.num_dofs  # plus indices, offsets, mesh, basis
    assert peak_rss_bytes() > 0


def test_memory_report_skips_array_classes():
    """Classes with array attributes (the CUDA backends keep ``index_dtype``, ``np.int32``)."""
    report = memory_report({"index_dtype": np.int32, "kind": np.ndarray, "x": np.zeros(4)})
    assert report["host_bytes"] == 32 and report["device_bytes"] == 0


def test_memory_report_leaves_out_the_backends_vector_ops(ceed):
    """A smoother holds its inverse diagonal; the backend's VectorOps it calls (the CUDA
    one keeps a reduction scratch of a few KB) serves every object and counts for none."""
    from hofem.multigrid import Chebyshev

    inv_diag = ceed.asarray(np.ones(100))
    ops = ceed.backend.vector_ops()
    smoother = Chebyshev(lambda u, v: None, inv_diag, 2.0, ops=ops)
    report = memory_report(smoother)
    assert report["host_bytes"] + report["device_bytes"] == 8 * 100


def test_form_setup_peak_is_bounded():
    """tracemalloc peak of a BP3 form's set-up: q-data plus chunk-sized temporaries only."""
    ceed = hf.Ceed("/cpu/self/ref")
    space = hf.H1Space(ceed, box(6), 3)
    space.CHUNK_POINTS = 1 << 12
    qdata = space.num_elem * 5**3 * 6 * 8
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        op = hf.diffusion(space)
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert op.shape == (space.num_dofs, space.num_dofs)
    # whole-mesh Jacobians alone would be 9 / 6 of the q-data; chunks keep them small
    assert peak < 1.3 * qdata + 2e6, (peak, qdata)


def test_offsets_stay_int32_when_only_the_components_pass_2_31(ceed):
    """A 3-component field of 2^30 nodes: 3 * 2^30 L-entries, int32 component-0 offsets."""
    n = 2**30
    r = ceed.ElemRestriction(1, 2, 3, n, 3 * n, np.array([[0, n - 1]]))
    offsets, stride = r.compact_indices()
    assert r.offsets_dtype is np.int32 and offsets.dtype == np.int32 and stride == n
    assert r.indices.dtype == np.int64 and r.indices[0, 2, 1] == 3 * n - 1  # expanded: wide
    device = ceed.backend.restriction_device_offsets(r)
    assert device is None or device.dtype == np.int32
    assert ceed.ElemRestriction(1, 2, 1, 3 * n, 3 * n, [[0, 1]]).offsets_dtype is np.int64


def test_restrictions_of_a_space_share_its_device_offsets(ceed):
    """A space's offsets are read-only; its restrictions (any num_comp) share one device copy."""
    space = hf.H1Space(ceed, box(2), 2)
    assert not space.offsets.flags.writeable
    scalar, coords = space.make_restriction(1), space.make_restriction(3)
    held = memory_report(scalar, coords)
    assert held["host_bytes"] + held["device_bytes"] <= space.offsets.nbytes
    u = np.arange(3.0 * space.num_nodes)
    e = ceed.to_numpy(coords.apply(ceed.asarray(u)))  # (E, 3, P)
    np.testing.assert_array_equal(
        e, u[space.offsets[:, None, :] + space.num_nodes * np.arange(3)[:, None]]
    )
    writeable = np.array(space.offsets)  # a user's array: copied for each restriction
    a, b = (
        ceed.ElemRestriction(space.num_elem, space.elem_size, 1, 1, space.num_nodes, writeable)
        for _ in range(2)
    )
    if ceed.xp is not np:  # device backends: one upload, which goes with its numbering
        offsets = ceed.backend.restriction_device_offsets
        assert offsets(scalar) is offsets(coords)
        assert offsets(a) is not offsets(b)
        shared = ceed.backend._shared_offsets
        gc.collect()  # earlier tests' spaces, unreachable but not yet collected
        before = len(shared)
        other = hf.H1Space(ceed, box(2), 1)
        assert len(shared) == before + 1  # its offsets, uploaded once while it lives
        del other
        gc.collect()
        assert len(shared) == before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_peak_rss_is_the_programs_own():
    """A program started by a process holding 300 MiB reports its own peak: ru_maxrss would
    report the parent's (Linux carries the pre-exec peak over to the exec'd program)."""
    held = np.ones(300 * 2**20 // 8)  # (39321600,) resident in this process
    script = "from hofem.memory import peak_rss_bytes; print(peak_rss_bytes())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(out.stdout) < 200 * 2**20 < held.nbytes
