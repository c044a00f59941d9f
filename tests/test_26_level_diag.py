"""The generated element-diagonal kernel of the CUDA backends (``element_diagonal.py``),
checked without a GPU.

:meth:`~hofem.backends.contract.Backend.tensor_element_diagonal` adds to ``out`` the
element diagonals of a chunk's pointwise matrix ``q (n, size, Q_1d**dim)`` from each
entry's 1D factors; the reference is :func:`hofem.entry_contraction.contract_entries`
summed over the entries.  Each generated source is compiled by the host C++ compiler with
``cuda_host_shim.h`` (a std::thread per CUDA thread, a barrier for ``__syncthreads()``,
``host_kernels.py``) and run on random q-data, the factors those of a real level
(:class:`~hofem.level_assembly.LevelAssembly`: BP1's mass and BP3's Poisson pointwise
matrices, sizes 1 and ``dim (dim + 1) / 2``, p = 1..8, Gauss points ``Q_1d = p + 2`` and
the collocated Gauss-Lobatto ones ``Q_1d = P_1d``, 1D to 3D), with the device's launch and
with an odd one (37 threads, two elements per block: loops past the threads, a partial last
group of elements, blocks looping over groups).  A kernel broken on purpose must fail the
comparison.  The backend method's glue (launch, arguments) runs behind a real hierarchy's
level fill with its kernels on the host.  Every source also compiles with nvcc for sm_90,
without spills.  The device test is in ``test_17_multigrid.py``.
"""

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from host_kernels import CXX, NVCC, build, ctypes_args, params, precompiled_shim, rel_error

import hofem as hf
from hofem import level_assembly, meshes
from hofem.backends.cuda import element_diagonal as ed
from hofem.entry_contraction import contract_entries
from hofem.forms import _QDATA_PAIRS

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")

NUM_ELEM = 5  # per chunk: with two elements per block, a partial last group
GRID = 2  # blocks: with one or two elements per block, each loops over groups


def _factors(dim, p, quad_mode, kind):
    """``(left, right)`` of a level's diagonal (``LevelAssembly``'s), sum-factorized at any
    size (its dense weights turned off) and ``kind``'s pairs."""
    ref = hf.Ceed("/cpu/self/ref")
    space = hf.H1Space(ref, meshes.box(1, dim), p)
    Q_1d = p + 2 if quad_mode is hf.GAUSS else p + 1
    basis = ref.BasisTensorH1Lagrange(dim, 1, p + 1, Q_1d, quad_mode)
    mode = hf.EVAL_INTERP if kind == "Mass" else hf.EVAL_GRAD
    assembly = level_assembly.LevelAssembly(space.restriction, basis, mode)
    saved = level_assembly.DENSE_ENTRIES
    level_assembly.DENSE_ENTRIES = 0
    try:
        weights = assembly._weights_of(tuple(_QDATA_PAIRS[kind][dim]))
    finally:
        level_assembly.DENSE_ENTRIES = saved
    return weights.diag_factors


def _cases():
    """``(name, launch, left, right)`` of every shape and launch."""
    cases = []
    for dim in (1, 2, 3):
        for p in range(1, 9):
            for quad_mode in (hf.GAUSS, hf.GAUSS_LOBATTO):
                for kind in ("Mass", "Poisson"):
                    left, right = _factors(dim, p, quad_mode, kind)
                    size, Q_1d, K = right.shape
                    device = ed.diagonal_launch(dim, K, Q_1d, size)
                    assert device is not None, (dim, p)  # every order up to 8 fits
                    odd = ed.DiagonalLaunch(dim, K, Q_1d, size, threads=37, elems=2)
                    name = f"{dim}d-p{p}-{quad_mode.name}-{kind}"
                    cases += [
                        (f"{name}-device", device, left, right),
                        (f"{name}-odd", odd, left, right),
                    ]
    return cases


@pytest.fixture(scope="module")
def cases():
    return _cases()


def _run(lib, k, source, launch, q, left, right, out):
    """Kernel ``k`` on ``GRID`` blocks of ``launch.threads``: ``out += `` the diagonals."""
    args = [np.int64(q.shape[0]), q, right, *left, out]
    getattr(lib, f"launch_{k}")(GRID, launch.threads, *ctypes_args(params(source), args))


def _check(lib, k, source, case, rng):
    """The relative error of kernel ``k`` on random q-data and a random ``out``."""
    _, launch, left, right = case
    q = rng.standard_normal((NUM_ELEM, launch.size, launch.Q_1d**launch.dim))
    out = rng.standard_normal((NUM_ELEM, launch.K**launch.dim))
    want = out + contract_entries(np, q, left, right).sum(axis=1)
    _run(lib, k, source, launch, q, left, right, out)
    return rel_error(out, want)


def _build_all(sources, folder):
    """Shared libraries of ``sources``, a few translation units built two at a time."""
    shim = precompiled_shim(folder)
    units = [sources[i : i + 24] for i in range(0, len(sources), 24)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(
            pool.map(lambda u: build(u[1], folder / f"diag{u[0]}.so", shim), enumerate(units))
        ), units


def test_generated_kernel_is_the_contraction_on_the_host(cases, tmp_path):
    """Every shape and launch within 1e-13 of the batched contraction, and a kernel that
    drops the first entry (``k`` from 1) far from it: the comparison can fail."""
    sources = [ed.diagonal_source(launch) for _, launch, _, _ in cases]
    broken = sources[-1].replace("int k = 0; k < SIZE", "int k = 1; k < SIZE")
    assert broken != sources[-1]
    libs, units = _build_all([*sources, broken], tmp_path)
    rng = np.random.default_rng(26)
    found, k = [], 0
    for lib, unit in zip(libs, units, strict=True):
        for j, source in enumerate(unit):
            if k < len(cases):
                err = _check(lib, j, source, cases[k], rng)
                if not err <= 1e-13:  # NaN fails too
                    found.append(f"{cases[k][0]} {cases[k][1]}: {err:.2e}")
            else:
                assert _check(lib, j, source, cases[-1], rng) > 1e-3, "the broken kernel passed"
            k += 1
    assert not found, "\n".join(found)


def test_cuda_backend_method_fills_the_levels_on_the_host(tmp_path, monkeypatch):
    """The batched CUDA backends' ``tensor_element_diagonal`` (the shape's launch, the
    arguments in the kernel's order) behind a real hierarchy's level fill, its kernels run
    on the host (CuPy's calls made NumPy's): every level's diagonal equals the NumPy
    backend's, BP3 3D p = 4 and 2D p = 7 (each fine level sum-factorized)."""
    from types import SimpleNamespace

    from hofem.backends.cuda.batched import CudaBatchedBackend
    from hofem.forms import multigrid_hierarchy

    def host_kernel(launch):
        source = ed.diagonal_source(launch)
        lib = build([source], tmp_path / f"{launch.dim}d-{launch.K}.so")
        calls.append(launch)
        return lambda grid, block, args: lib.launch_0(
            grid[0], block[0], *ctypes_args(params(source), args)
        )

    calls = []
    device = SimpleNamespace(id=0)
    fake_cupy = SimpleNamespace(
        ascontiguousarray=np.ascontiguousarray, cuda=SimpleNamespace(Device=lambda: device)
    )
    for dim, p in ((3, 4), (2, 7)):
        ref = hf.Ceed("/cpu/self/ref")
        space = hf.H1Space(ref, meshes.box(2, dim, distort=0.1), p)
        A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
        want = [a.linear_assemble_diagonal() for a in multigrid_hierarchy(A).assembly]
        with monkeypatch.context() as patch:
            patch.setattr(ed, "cupy", fake_cupy)
            patch.setattr(ed, "_kernel", host_kernel)
            patch.setattr(ed, "_sm_count", lambda device_id: 1)  # 8 blocks: they loop
            method = CudaBatchedBackend().tensor_element_diagonal
            patch.setattr(ref.backend, "tensor_element_diagonal", method)
            got = [a.linear_assemble_diagonal() for a in multigrid_hierarchy(A).assembly]
        for level, expected in zip(got, want, strict=True):
            assert rel_error(level, expected) <= 1e-13
        assert calls[-1] == ed.diagonal_launch(dim, p + 1, p + 2, dim * (dim + 1) // 2)
    assert len(calls) == 2


def test_launch_shapes():
    """The device's launch: elements per block by the threads they fill, within the static
    shared memory; BP3 p = 6 (K = 7, Q_1d = 8) one element a block in 15.4 KiB; shapes
    past the limit (p = 15 in 3D) have no launch (the batched products serve them)."""
    bp3 = ed.diagonal_launch(3, 7, 8, 6)
    assert (bp3.threads, bp3.elems) == (256, 1)
    assert bp3.buffers() == (512, 448)
    assert bp3.shared_bytes() == 8 * (3 * 6 * 8 * 7 + 512 + 448)
    bp3_2d = ed.diagonal_launch(2, 7, 8, 3)
    assert bp3_2d.elems == 4 and bp3_2d.buffers() == (64, 56)
    assert ed.diagonal_launch(1, 3, 4, 1).buffers() == (4, 0)
    assert ed.diagonal_launch(3, 16, 17, 6) is None
    p10 = ed.diagonal_launch(3, 11, 12, 6)
    assert p10 is not None and p10.shared_bytes() <= ed.MAX_SHARED_BYTES


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_generated_kernels_compile_for_sm_90_without_spills(cases, tmp_path):
    """Every device launch's source compiles for sm_90 (CUDA-only errors the host build
    would not see), with no local-memory spills and at most 64 registers a thread (8 blocks
    of 256 threads per SM)."""

    def compile_one(item):
        k, launch = item
        path = tmp_path / f"diag{k}.cu"
        path.write_text(ed.diagonal_source(launch))
        cmd = [NVCC, "-arch=sm_90", "-cubin", "-std=c++17", "-Xptxas", "-v", str(path)]
        proc = subprocess.run([*cmd, "-o", str(path.with_suffix(".cubin"))], capture_output=True)
        return launch, proc

    launches = sorted({case[1] for case in cases if case[0].endswith("device")}, key=str)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, enumerate(launches)))
    found = []
    for launch, proc in results:
        log = proc.stderr.decode()
        registers = re.search(r"Used (\d+) registers", log)
        spills = [int(n) for n in re.findall(r"(\d+) bytes spill", log)]
        if proc.returncode or registers is None:
            found.append(f"{launch}:\n{log}")
        elif int(registers.group(1)) > 64 or any(spills):
            found.append(f"{launch}: {registers.group(0)}, spills {spills}")
    assert not found, "\n".join(found)
