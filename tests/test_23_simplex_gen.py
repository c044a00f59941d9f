"""The fused simplex kernels of ``/gpu/cuda/gen`` (``operator_simplex.py``), checked without a GPU.

Each generated source is compiled by the host C++ compiler with ``cuda_host_shim.h``
(a std::thread per CUDA thread, a barrier for ``__syncthreads()``) and run over every
block, with the block sizes of the device launch, 1 and an odd few; the results are
compared with ``/cpu/self/ref`` on triangles and tetrahedra, p = 1..6, mass and
diffusion, stored and on-the-fly geometry (affine: one Jacobian per element; order-2
tets: per point), scalar and vector, with the CG variant's ``u . Au``.  Every source
also compiles with nvcc for sm_90 where nvcc is on PATH.  The device tests are in
``test_10_cuda.py``.
"""

import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from host_kernels import CXX, INCLUDE, NVCC, build, ctypes_args, failures, field_arguments, params

import hofem as hf
from hofem import meshes
from hofem.backends.cuda import operator_simplex as osx
from hofem.backends.cuda.operator_fuse import dot_pairs
from hofem.backends.cuda.simplex_factored import FactoredOperator, factored_view

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")


def _cases():
    """``(name, operator on /cpu/self/ref)`` of every shape the simplex kernel covers."""
    ref = hf.Ceed("/cpu/self/ref")
    cases = []
    for dim, n in ((2, 3), (3, 2)):  # 18 triangles, 48 tets
        mesh = meshes.box(n, dim, simplex=True, distort=0.1)
        affine = meshes.box(n, dim, simplex=True)
        for p in range(1, 7):
            for form in (hf.mass, hf.diffusion):
                name = f"{dim}d-p{p}-{form.__name__}"
                cases.append((f"{name}-stored", form(hf.H1Space(ref, mesh, p), geometry="stored")))
                space = hf.H1Space(ref, affine, p)
                cases.append((f"{name}-affine", form(space, geometry="on_the_fly")))
                if form is hf.mass:  # c_e B^T W B: the kernel of its factored rule too
                    cases.append((f"{name}-factored", factored_view(cases[-1][1])))
    curved = meshes.read(meshes.data_path("curved_tet10.msh"))  # order-2 geometry
    for p in (2, 3):
        for form in (hf.mass, hf.diffusion):
            for geometry in ("stored", "on_the_fly"):
                op = form(hf.H1Space(ref, curved, p), geometry=geometry)
                cases.append((f"curved-p{p}-{form.__name__}-{geometry}", op))
    vector = hf.H1Space(ref, meshes.box(2, 3, simplex=True, distort=0.1), 2, num_comp=3)
    cases += [
        (f"vector-{f.__name__}", f(vector, geometry="stored")) for f in (hf.mass, hf.diffusion)
    ]
    affine = hf.H1Space(ref, meshes.box(2, 3, simplex=True), 2, num_comp=3)
    cases.append(("vector-factored", factored_view(hf.mass(affine, geometry="on_the_fly"))))
    return cases


def _operator(op):
    """The operator whose result a kernel of ``op`` must give (a factored view's own)."""
    return op.op if isinstance(op, FactoredOperator) else op


# (dot, block size or None for the launch's threads, launch overrides): the device's
# launch, the CG variant on an odd block, and the matrices from global memory; the
# tensor-core variant (simplex_mma.py) with two warps (fewer than its units, so that
# warps loop) and its CG variant with one warp, one tile per unit
VARIANTS = [
    (False, None, {}),
    (True, 5, {}),
    (False, 1, {"shared_matrices": False, "points_per_thread": 3, "elems": 2}),
    (False, None, {"tensor_cores": True, "threads": 64, "elems": 16}),
    (True, None, {"tensor_cores": True, "threads": 32, "elems": 8, "tiles": 1}),
]


def _run(lib, k, source, launch, op, u, block, dot, stopped=False):
    """``v = A u`` and, for ``dot``, the partial sums of ``u . Au`` from kernel ``k`` on 3
    blocks (``stopped``: CG's status set, so the dot variant writes nothing)."""
    grid = 3
    v = np.zeros(op.shape[0])
    args = [np.int32(op.num_elem), *osx.host_matrices(op, launch), *field_arguments(op, u, v)]
    partial = np.full(grid, np.nan)
    if dot:
        args += [partial, np.array([int(stopped), 0, 0], dtype=np.int64)]
    getattr(lib, f"launch_{k}")(grid, block or launch.threads, *ctypes_args(params(source), args))
    return v, partial


def _kernels(name, op):
    """``(name, op, source, launch, dot, block)`` of each variant of ``op``."""
    shape = osx.simplex_shape(op)
    assert shape is not None, f"{name} does not fuse"
    out = []
    for dot, block, overrides in VARIANTS:
        if dot and dot_pairs(op) is None:
            continue
        launch = osx.simplex_launch(op, shape, **overrides)
        assert launch is not None, name
        out.append((name, op, osx.kernel_source(op, launch, dot), launch, dot, block))
    return out


@pytest.fixture(scope="module")
def kernels():
    return [k for name, op in _cases() for k in _kernels(name, op)]


def _dynamic(launch):
    """Dynamic shared memory bytes of a launch (the tensor-core kernel's)."""
    return launch.used_bytes if launch.tensor_cores else 0


def test_generated_kernels_match_ref_on_the_host(kernels, tmp_path):
    chunks = [kernels[i : i + 24] for i in range(0, len(kernels), 24)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(
            pool.map(
                lambda c: build(
                    [k[2] for k in c[1]],
                    tmp_path / f"unit{c[0]}.so",
                    shared_bytes=[_dynamic(k[3]) for k in c[1]],
                ),
                enumerate(chunks),
            )
        )
    found = []
    for lib, chunk in zip(libs, chunks, strict=True):
        for k, (name, op, source, launch, dot, block) in enumerate(chunk):
            u = np.random.default_rng(k).standard_normal(op.shape[1])

            def run(stopped, args=(lib, k, source, launch, op, u, block, dot)):
                return _run(*args, stopped=stopped)

            want = _operator(op)(u)
            found += failures(f"{name} dot={dot} block={block} {launch}", run, u, want, dot, 1e-12)
    assert not found, "\n".join(found)


def test_every_case_covers_its_path(kernels):
    """The cases exercise what they claim: cell-constant geometry, per-point geometry of
    two matrix sets, matrices in shared and in global memory, several elements per block;
    the tensor-core variant's products, for both matrix sets of curved tets."""
    scalar, mma = {}, {}
    for name, _, source, launch, dot, block in kernels:
        if block is None and not dot:
            (mma if launch.tensor_cores else scalar)[name] = source
    assert "c_in1" in scalar["3d-p3-diffusion-affine"]  # the Jacobian once per thread
    assert "c_in1" not in scalar["curved-p3-diffusion-on_the_fly"]
    assert "G1" in scalar["curved-p3-diffusion-on_the_fly"]  # the order-2 coordinates' set
    assert "c_in1" in mma["3d-p3-diffusion-affine"]  # cell-constant: not on the tensor cores
    assert mma["3d-p6-diffusion-stored"].count("simplex_mma_points<") == 1
    assert mma["3d-p6-diffusion-stored"].count("simplex_mma_nodes<") == 1
    assert "s_G1, s_pts" in mma["curved-p3-diffusion-on_the_fly"]  # coordinates per point
    launches = [launch for *_, launch, _, block in kernels if block is None]
    launches = [launch for launch in launches if not launch.tensor_cores]
    assert any(launch.shared for launch in launches)
    assert any(not launch.shared for launch in launches)
    assert any(launch.elems > 1 for launch in launches)


def test_fallback_where_it_cannot_fuse():
    """Tensor bases are not simplex operators; one element's arrays past the shared
    memory give no launch (gen then runs the batched stages)."""
    ref = hf.Ceed("/cpu/self/ref")
    hexes = hf.mass(hf.H1Space(ref, meshes.box(2, 3), 2))
    assert osx.simplex_shape(hexes) is None
    tets = hf.diffusion(hf.H1Space(ref, meshes.box(1, 3, simplex=True), 6, num_comp=3))
    shape = osx.simplex_shape(tets)
    assert shape is not None
    assert osx.simplex_launch(tets, shape, shared_bytes=8 * 1024) is None


@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_generated_kernels_compile_for_sm_90(kernels, tmp_path):
    """Every source, renamed kernel by kernel into a few translation units (as the host
    build), compiles for sm_90: CUDA-only errors that the host shim would not see."""

    def compile_one(item):
        k, sources = item
        path = tmp_path / f"simplex{k}.cu"
        path.write_text(
            "\n".join(
                f"#define apply kernel_{j}\n{src}\n#undef apply" for j, src in enumerate(sources)
            )
        )
        cmd = [NVCC, "-arch=sm_90", "--ptx", "-std=c++17", f"-I{INCLUDE}", str(path)]
        proc = subprocess.run([*cmd, "-o", str(path.with_suffix(".ptx"))], capture_output=True)
        return path, proc

    sources = sorted({k[2] for k in kernels})
    units = [sources[i : i + 48] for i in range(0, len(sources), 48)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, enumerate(units)))
    failures = [f"{p.name}:\n{proc.stderr.decode()}" for p, proc in results if proc.returncode]
    assert not failures, "\n".join(failures)


def test_tensor_core_table_launches_fit():
    """The launches of ``cuda_simplex.json``'s tensor-core table (BP1 p = 3, 5, 6, BP3 p = 3..6,
    BP1 p = 4 on the collapsed rule) fit the H100's opt-in shared memory at their shapes,
    stored and on the fly; the other shapes keep the default launch."""
    from hofem.backends.cuda import simplex_mma as mma

    ref = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(1, 3, simplex=True)
    for form, p, q_extra in ((hf.mass, 3, None), (hf.mass, 5, None), (hf.mass, 6, None),
                             (hf.diffusion, 3, None), (hf.diffusion, 4, None),
                             (hf.diffusion, 5, None), (hf.diffusion, 6, None),
                             (hf.mass, 4, 1)):  # fmt: skip
        for geometry in ("stored", "on_the_fly"):
            op = form(hf.H1Space(ref, mesh, p), geometry=geometry, q_extra=q_extra)
            shape = osx.simplex_shape(op)
            tuned = osx.tensor_core_overrides(shape)
            assert tuned, shape
            launch = osx.simplex_launch(op, shape, tensor_cores=True, **tuned)
            assert launch.used_bytes <= mma.MMA_SHARED_BYTES, (shape, geometry)
            assert all(getattr(launch, key) == value for key, value in tuned.items())
    for p in (3, 4, 5, 6):  # the factored rules of the mass on the fly
        view = factored_view(hf.mass(hf.H1Space(ref, mesh, p), geometry="on_the_fly"))
        shape = osx.simplex_shape(view)
        launch = osx.simplex_launch(
            view, shape, tensor_cores=True, **osx.tensor_core_overrides(shape)
        )
        assert launch.used_bytes <= mma.MMA_SHARED_BYTES, shape
    assert osx.tensor_core_overrides((3, 35, 46)) == {}  # BP1 p = 4: the default


def test_tensor_core_launch_budget():
    """The tensor-core variant's shared memory: the padded matrices (D, QR, MP) and slack,
    per element the gathered nodes and the point buffer, the block sum's scratch; the
    most elements (a multiple of 8, up to MMA_ELEMS) that fit the H100's 227 KiB."""
    from hofem.backends.cuda import simplex_mma as mma

    assert [mma.mma_pitch(n) for n in (4, 8, 36, 56, 84, 88)] == [4, 12, 36, 60, 84, 92]
    ref = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(1, 3, simplex=True)
    launches = {}
    for p in (4, 5, 6):
        for form in (hf.mass, hf.diffusion):
            op = form(hf.H1Space(ref, mesh, p), geometry="stored")
            launch = osx.simplex_launch(op, osx.simplex_shape(op), tensor_cores=True)
            launches[form.__name__, p] = launch
            assert launch.tensor_cores and launch.used_bytes <= mma.MMA_SHARED_BYTES
    # BP3 p = 6: G (3, 80, 84) + 4, per element 84 nodes and 3 rows of 80 points + 4, and
    # MMA_THREADS doubles of block sum: 32 elements do not fit, 24 do
    bp3 = launches["diffusion", 6]
    assert (bp3.elems, bp3.shared) == (24, frozenset({"G0"}))
    assert bp3.used_bytes == 8 * (3 * 80 * 84 + 4 + 24 * (84 + 244) + mma.MMA_THREADS)
    # BP1 p = 6: B (152, 84) + 4, per element 84 nodes and 152 + 4 points
    bp1 = launches["mass", 6]
    assert bp1.elems == 32
    assert bp1.used_bytes == 8 * (152 * 84 + 4 + 32 * (84 + 156) + mma.MMA_THREADS)
    assert all(launches[key].elems == mma.MMA_ELEMS for key in launches if key[1] < 6)
    op = hf.diffusion(hf.H1Space(ref, mesh, 6), geometry="stored")
    shape = osx.simplex_shape(op)
    assert osx.simplex_launch(op, shape, 160 * 1024, tensor_cores=True) is None  # G: 161 KB
    assert osx.simplex_launch(op, shape, tensor_cores=True, elems=8).used_bytes < bp3.used_bytes
    with pytest.raises(ValueError, match="elems=12"):
        osx.simplex_launch(op, shape, tensor_cores=True, elems=12)
    with pytest.raises(ValueError, match="threads=48"):
        osx.simplex_launch(op, shape, tensor_cores=True, threads=48)
    # the scalar launch is unchanged by the variant's arguments
    assert not osx.simplex_launch(op, shape).tensor_cores
