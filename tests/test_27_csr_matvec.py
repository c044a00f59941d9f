"""``VectorOps.csr_matvec``: ``out = A x`` for the AMG levels' CSR matrices (hofem.multigrid).

Every backend's method against SciPy's product (on a GPU: its ``csr.cu`` kernel on
``cupyx`` matrices).  Without a GPU, ``csr.cu`` is compiled by the host C++ compiler with
``cuda_host_shim.h`` (a std::thread per CUDA thread, the warp's shuffles between barriers,
``host_kernels.py``) and run with the device's launch (:func:`csr_launch`) and with a grid
of one small block (its warps loop over the rows), on random matrices of every row-length
regime: empty rows, one row, rows of a few entries (1 to 16 lanes a row), the order-1
Laplacian's 27-entry rows, rows longer than a warp, a rectangular ``P``; a kernel broken on
purpose must fail.  ``CupyVectorOps.csr_matvec``'s glue runs the host kernel too.  nvcc
compiles the source for sm_90 in ``test_12_nvcc.py``.  The AMG cycle makes every product
through the method, and a small AMG level of a GPU cycle is estimated on the host.
"""

import ctypes
import subprocess
import types

import numpy as np
import pytest
import scipy.sparse
from host_kernels import CXX, SHIM, rel_error

from hofem import multigrid
from hofem.backends.cuda import kernels
from hofem.backends.cuda import vector_ops as cuda_vector_ops
from hofem.multigrid import AMGCycle, device_matrix, smoothed_aggregation
from hofem.vector_ops import VectorOps


def _matrix(rng, lengths, cols):
    """A CSR matrix of ``len(lengths)`` rows, row ``i`` holding ``lengths[i]`` entries at
    random columns of ``range(cols)`` (repeats included: they add up, as in SciPy)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = rng.integers(0, cols, indptr[-1]).astype(np.int32)
    data = rng.standard_normal(indptr[-1])
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=(lengths.size, cols))


def _trilinear_laplacian(n):
    """The 27-point stencil on ``n³`` nodes (the order-1 level's rows)."""
    pyamg = pytest.importorskip("pyamg")
    stencil = -np.ones((3, 3, 3))
    stencil[1, 1, 1] = 26.0
    return pyamg.gallery.stencil_grid(stencil, (n, n, n), format="csr")


def _cases():
    """``(name, A)``: every row-length regime of the kernel's lane choice."""
    rng = np.random.default_rng(27)
    return [
        ("one-row", _matrix(rng, [45], 60)),
        ("empty-rows", _matrix(rng, rng.integers(0, 2, 90) * rng.integers(1, 9, 90), 70)),
        ("all-empty", _matrix(rng, np.zeros(40, dtype=int), 40)),
        ("one-entry", _matrix(rng, np.ones(130, dtype=int), 50)),
        ("short", _matrix(rng, rng.integers(1, 5, 150), 80)),
        ("mid", _matrix(rng, rng.integers(6, 20, 70), 90)),
        ("laplacian", _trilinear_laplacian(5)),
        ("long", _matrix(rng, rng.integers(0, 300, 25), 400)),
        ("prolongation", _matrix(rng, rng.integers(1, 9, 120), 17)),
    ]


def test_csr_matvec_is_the_product(ceed):
    """Every backend's ``csr_matvec`` on ``xp``'s CSR matrix equals SciPy's ``A @ x``."""
    ops, xp = ceed.backend.vector_ops(), ceed.xp
    rng = np.random.default_rng(5)
    for name, A in _cases():
        x = rng.standard_normal(A.shape[1])
        out = ceed.asarray(np.full(A.shape[0], np.nan))  # every entry must be written
        ops.csr_matvec(device_matrix(A, xp), ceed.asarray(x), out)
        assert rel_error(ceed.to_numpy(out), A @ x) <= 1e-14, name


# the C++ launcher of csr.cu's kernel, after its source
_LAUNCHER = """
extern "C" void launch(int grid, int block, int num_rows, int lanes, const int *indptr,
                       const int *indices, const double *data, const double *x, double *y) {
  shim_launch(grid, block, [&] { csr_matvec(num_rows, lanes, indptr, indices, data, x, y); });
}
"""


def _build(source, path):
    """The shared library of ``source`` (csr.cu's text) and its launcher, on the shim."""
    path.with_suffix(".cpp").write_text(source + _LAUNCHER)
    cmd = [CXX, "-std=c++20", "-O1", "-fPIC", "-pthread", "-shared", "-include", str(SHIM)]
    proc = subprocess.run(
        [*cmd, str(path.with_suffix(".cpp")), "-o", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ctypes.CDLL(str(path))


def _host_kernel(lib):
    """``kernel((grid,), (block,), args)`` as CuPy launches it, run by ``lib`` on the host."""

    def kernel(grid, block, args):
        rows, lanes, *arrays = args
        assert rows.dtype == lanes.dtype == np.int32
        dtypes = (np.int32, np.int32, np.float64, np.float64, np.float64)
        for array, dtype in zip(arrays, dtypes, strict=True):
            assert array.dtype == dtype and array.flags.c_contiguous
        pointers = [ctypes.c_void_p(a.ctypes.data) for a in arrays]
        lib.launch(grid[0], block[0], ctypes.c_int(int(rows)), ctypes.c_int(int(lanes)), *pointers)

    return kernel


def _errors(kernel, rng):
    """Relative errors of ``kernel`` against SciPy, per case, with the device's launch and
    with one block of 64 threads."""
    found = {}
    for name, A in _cases():
        x = rng.standard_normal(A.shape[1])
        for launch in ("device", "one-block"):
            out = np.full(A.shape[0], np.nan)
            grid, block, args = cuda_vector_ops.csr_launch(A, x, out)
            if launch == "one-block":
                grid, block = 1, 64
            kernel((grid,), (block,), args)
            found[f"{name}-{launch}"] = rel_error(out, A @ x)
    return found


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")
def test_csr_kernel_is_scipys_product_on_the_host(tmp_path):
    """csr.cu on the shim equals SciPy's product to 1e-14 in every case and launch (a NaN
    left in ``out`` fails), and a kernel whose shuffles skip the first half of the lanes'
    sums is far from it: the comparison can fail."""
    source = kernels.source("csr.cu")
    broken = source.replace("int offset = lanes / 2;", "int offset = lanes / 4;")
    assert broken != source
    rng = np.random.default_rng(3)
    errors = _errors(_host_kernel(_build(source, tmp_path / "csr.so")), rng)
    bad = {name: err for name, err in errors.items() if not err <= 1e-14}  # NaN fails too
    assert not bad, bad
    errors = _errors(_host_kernel(_build(broken, tmp_path / "broken.so")), rng)
    assert errors["laplacian-device"] > 1e-3, errors


def test_csr_launch_lanes_and_grid():
    """Lanes a row: the smallest power of two covering the mean row, at most a warp; the
    grid covers every row once; no launch for a matrix of no rows."""
    rng = np.random.default_rng(1)
    for lengths, lanes in (([1] * 7, 1), ([2, 3] * 5, 4), ([5] * 9, 8), ([27] * 64, 32)):
        A = _matrix(rng, lengths, 40)
        grid, block, args = cuda_vector_ops.csr_launch(A, None, None)
        assert int(args[1]) == lanes and block == cuda_vector_ops.CSR_THREADS
        assert (grid - 1) * block < len(lengths) * lanes <= grid * block
    assert cuda_vector_ops.csr_launch(_matrix(rng, [300, 400], 5), None, None)[2][1] == 32
    assert cuda_vector_ops.csr_launch(scipy.sparse.csr_matrix((0, 4)), None, None) is None


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")
def test_cupy_vector_ops_launches_the_kernel(tmp_path):
    """``CupyVectorOps.csr_matvec`` (made without CuPy, its kernel the host one): int32
    matrices through the kernel, int64 ones through the library's product."""
    calls = []
    kernel = _host_kernel(_build(kernels.source("csr.cu"), tmp_path / "csr.so"))
    ops = cuda_vector_ops.CupyVectorOps.__new__(cuda_vector_ops.CupyVectorOps)
    ops.__dict__["_csr_kernel"] = lambda *launch: (calls.append(launch), kernel(*launch))
    rng = np.random.default_rng(9)
    A = _trilinear_laplacian(4)
    x = rng.standard_normal(A.shape[1])
    for indices in (np.int32, np.int64):
        B = A.copy()
        B.indices, B.indptr = B.indices.astype(indices), B.indptr.astype(indices)
        out = np.full(A.shape[0], np.nan)
        ops.csr_matvec(B, x, out)
        assert rel_error(out, A @ x) <= 1e-14
    assert len(calls) == 1


class CountingOps(VectorOps):
    """NumPy's vector steps, counting the sparse products."""

    def __init__(self):
        super().__init__(np)
        self.products = 0

    def csr_matvec(self, A, x, out):
        self.products += 1
        super().csr_matvec(A, x, out)


def test_amg_cycle_products_go_through_csr_matvec():
    """Every product of an AMG cycle is one ``csr_matvec`` (per level: 2 + 2 smoother
    applications at degree 2, ``R`` and ``P``), into the cycle's ``out`` when given, the
    same result as into a new array."""
    ops = CountingOps()
    levels, coarsest = smoothed_aggregation(_trilinear_laplacian(10), max_coarse=10)
    cycle = AMGCycle(levels, coarsest, np, ops=ops)
    b = np.random.default_rng(2).standard_normal(cycle.shape[0])
    x = cycle(b)
    assert ops.products == 6 * len(levels) == 12
    out = np.empty_like(b)
    assert cycle(b, out) is out
    np.testing.assert_array_equal(out, x)


def test_small_levels_are_estimated_on_the_host():
    """A level below ``HOST_ESTIMATE_ROWS`` of a non-NumPy cycle gets NumPy's estimate of
    its host matrix (the cycle's arrays, ops and matrix unused)."""
    A = _trilinear_laplacian(6)  # 216 rows
    assert A.shape[0] < multigrid.HOST_ESTIMATE_ROWS
    other_xp = types.SimpleNamespace()  # where a GPU cycle's arrays would live
    got = multigrid._level_estimate(A, None, None, other_xp, None, 10)
    ops = VectorOps(np)
    apply = multigrid._matrix_apply(A, ops)
    assert got == multigrid.estimate_max_eigenvalue(apply, 1.0 / A.diagonal(), ops, 10)
