"""Every ``.cu`` file under ``hofem/`` compiles with nvcc for sm_90 (CI has nvcc, no GPU)."""

import itertools
import pathlib
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from box import box_operator

import hofem as hf
from hofem import meshes

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")

ROOT = pathlib.Path(__file__).resolve().parent.parent / "hofem"


def _tensor(dim, comp, P, Q, elems):
    return {
        "DIM": dim,
        "NUM_COMP": comp,
        "P_1D": P,
        "Q_1D": Q,
        "T_1D": max(P, Q),
        "ELEMS_PER_BLOCK": elems,
    }


# representative defines per file, including the specialization range edges
DEFINES = {
    "basis_tensor.cu": [
        _tensor(1, 1, 2, 1, 128),
        _tensor(2, 3, 10, 11, 8),
        _tensor(3, 1, 2, 11, 2),
        _tensor(3, 3, 10, 11, 1),
        _tensor(3, 1, 5, 7, 5),
    ],
    "restriction.cu": [{"INDEX_T": "int"}, {"INDEX_T": "long long"}],
    "cg.cu": [{}],
    "csr.cu": [{}],
    "ipc.cu": [{}],
}


def _jobs():
    sources = sorted(ROOT.rglob("*.cu"))
    assert sources, "no .cu files found under hofem/"
    for path in sources:
        assert path.name in DEFINES, f"{path} has no representative defines in this test"
        for defines in DEFINES[path.name]:
            yield path, defines


def _compile(job, out_dir):
    path, defines = job
    flags = [f"-D{key}={value}" for key, value in defines.items()]
    out = out_dir / f"{path.stem}-{abs(hash(tuple(flags)))}.ptx"
    cmd = [NVCC, "-arch=sm_90", "--ptx", "-std=c++17", f"-I{path.parent}", *flags, str(path)]
    cmd += ["-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return job, proc


def test_every_cu_file_compiles(tmp_path):
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: _compile(job, tmp_path), _jobs()))
    failures = [
        f"{path.name} {defines}:\n{proc.stderr}"
        for (path, defines), proc in results
        if proc.returncode != 0
    ]
    assert not failures, "\n".join(failures)


def _fused_operators():
    """Representative operators for the generated fused kernels of /gpu/cuda/gen."""
    ceed = hf.Ceed("/cpu/self/ref")
    ops = []
    for dim, p in ((1, 1), (2, 4), (3, 2), (3, 8)):
        for form in ("mass", "diffusion"):
            op, parts = box_operator(ceed, form, 2, p, dim)
            ops += [op, parts["build"]]
    space = hf.H1Space(ceed, meshes.box(2), 2, num_comp=3)
    ops += [hf.mass(space), hf.diffusion(space)]
    # geometry on the fly: the vertex coordinates (P_1d = 2) beside the order-p solution
    for p, num_comp in ((4, 1), (3, 3)):
        space = hf.H1Space(ceed, meshes.box(2, distort=0.1), p, num_comp=num_comp)
        ops += [form(space, geometry="on_the_fly") for form in (hf.mass, hf.diffusion)]
    # ... and the Jacobian once per element from the vertices of affine cells
    ops.append(hf.diffusion(hf.H1Space(ceed, meshes.box(2), 4), geometry="on_the_fly"))
    # ... and from the order-p coordinates of curved cells (one warp per element: 4 buffers)
    ops.append(box_operator(ceed, "diffusion", 2, 3, warp=0.1, geometry="on_the_fly")[0])
    # Gauss-Lobatto points at the nodes (BP5 stored, BP6 on the fly): the identity
    # interpolation, which the warp kernel replaces by a gather and a scatter
    gll = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO}
    ops.append(hf.diffusion(hf.H1Space(ceed, meshes.box(2), 2), geometry="stored", **gll))
    vector = hf.H1Space(ceed, meshes.box(2), 3, num_comp=3)
    ops.append(hf.diffusion(vector, geometry="on_the_fly", **gll))
    return ops


def test_generated_operator_kernels_compile(tmp_path):
    from hofem.backends.cuda.operator_fuse import dot_pairs, fusable_shape, kernel_source

    jobs = []
    dots = 0
    for k, op in enumerate(_fused_operators()):
        shape = fusable_shape(op, 16)
        assert shape is not None, f"operator {k} ({op.qf.name}) does not fuse"
        # the CG variant (u . Au partial sums) for square operators on one restriction
        variants = (False, True) if dot_pairs(op) is not None else (False,)
        dots += len(variants) - 1
        for collocated in (False, True):
            for dot in variants:
                path = tmp_path / f"op{k}-{int(collocated)}-{int(dot)}.cu"
                path.write_text(kernel_source(op, shape, collocated, dot=dot))
                jobs.append(path)
            if shape[0] == 3:  # the x and y stages on the tensor cores; two columns a thread
                path = tmp_path / f"op{k}-{int(collocated)}-mma.cu"
                path.write_text(kernel_source(op, shape, collocated, tensor_cores=True))
                jobs.append(path)
                path = tmp_path / f"op{k}-{int(collocated)}-blocked.cu"
                path.write_text(kernel_source(op, shape, collocated, dot=variants[-1], blocking=2))
                jobs.append(path)
    assert dots == 18  # the apply operators: 13 scalar and 5 vector ones
    from hofem.backends.cuda.operator_fuse import has_grad
    from hofem.backends.cuda.operator_warp import warp_fusable, warp_kernel_source

    warps = turns = 0
    for k, op in enumerate(_fused_operators()):  # one warp per element (operator_warp)
        shape = fusable_shape(op, 16)
        if shape[0] == 3 and max(shape[1:]) <= 8 and warp_fusable(op):
            # the gen's choice of where the operands live, then both choices (the CG variant)
            for dot, registers in ((False, None), (True, False), (True, True)):
                path = tmp_path / f"op{k}-warp-{int(dot)}-{registers}.cu"
                path.write_text(warp_kernel_source(op, shape, dot, registers))
                jobs.append(path)
            warps += 1
            if op.component_operator is not None and has_grad(op):  # the components in turn
                for dot in (False, True):
                    path = tmp_path / f"op{k}-turn-{int(dot)}.cu"
                    scalar = op.component_operator()
                    path.write_text(warp_kernel_source(scalar, shape, dot, components=3))
                    jobs.append(path)
                turns += 1
    # scalar and vector mass and Poisson, Poisson on the fly (affine, curved), BP5 and BP6
    assert warps == 8
    from hofem.backends.cuda.operator_tiles import tile_fusable, tile_kernel_source

    tiles = 0
    for k, op in enumerate(_fused_operators()):  # every contraction a GEMM (operator_tiles)
        if tile_fusable(op):
            for dot in (False, True):
                path = tmp_path / f"op{k}-tiles-{int(dot)}.cu"
                path.write_text(tile_kernel_source(op, fusable_shape(op, 16), dot))
                jobs.append(path)
            tiles += 1
    assert tiles == 2  # the 3D mass with stored q-data, p = 2 and 8
    assert turns == 2  # the vector Poisson forms (BP4, BP6)
    include = ROOT / "backends" / "cuda"

    def compile_one(path):
        cmd = [NVCC, "-arch=sm_90", "--ptx", "-std=c++17", f"-I{include}", str(path)]
        return path, subprocess.run(
            [*cmd, "-o", str(path.with_suffix(".ptx"))], capture_output=True, text=True
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(compile_one, jobs))
    failures = [
        f"{path.name}:\n{proc.stderr}\n{path.read_text()}"
        for path, proc in results
        if proc.returncode != 0
    ]
    assert not failures, "\n".join(failures)


def _cubin_and_ptx(paths, include):
    """``(path, cubin, ptx)`` for each CUDA source: ``nvcc -arch=sm_90`` to a cubin with
    ptxas' register report (``cubin.stderr``) and to PTX beside it (``path.with_suffix(".ptx")``),
    two at a time."""
    common = [NVCC, "-arch=sm_90", "-std=c++17", f"-I{include}"]

    def compile_one(path):
        cubin = path.with_suffix(".cubin")
        run = [*common, "-cubin", "-Xptxas", "-v", str(path), "-o", str(cubin)]
        ptx = [*common, "--ptx", str(path), "-o", str(path.with_suffix(".ptx"))]
        return (
            path,
            subprocess.run(run, capture_output=True, text=True),
            subprocess.run(ptx, capture_output=True, text=True),
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(compile_one, paths))


def test_simplex_tensor_core_kernels_compile_without_spills(tmp_path):
    """The tensor-core simplex kernel (``simplex_launch(..., tensor_cores=True)``): BP1 and
    BP3 on tets, p = 2, 4, 6, with and without the CG's u . Au, compile for sm_90 to
    mma.sync tiles and spill no registers (ptxas -v)."""
    from hofem.backends.cuda import operator_simplex as osx

    ceed = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(1, 3, simplex=True)
    include = ROOT / "backends" / "cuda"
    jobs = []
    for p in (2, 4, 6):
        for form in (hf.mass, hf.diffusion):
            op = form(hf.H1Space(ceed, mesh, p), geometry="stored")
            launch = osx.simplex_launch(op, osx.simplex_shape(op), tensor_cores=True)
            for dot in (False, True):
                path = tmp_path / f"{form.__name__}-p{p}-{int(dot)}.cu"
                path.write_text(osx.kernel_source(op, launch, dot))
                jobs.append(path)

    failures = []
    for path, proc, ptx in _cubin_and_ptx(jobs, include):
        if proc.returncode or ptx.returncode:
            failures.append(f"{path.name}:\n{proc.stderr}\n{ptx.stderr}")
        elif "0 bytes spill stores" not in proc.stderr or "mma.sync.aligned.m8n8k4" not in (
            path.with_suffix(".ptx").read_text()
        ):
            failures.append(f"{path.name} spills or has no fp64 mma:\n{proc.stderr}")
    assert not failures, "\n".join(failures)


def test_blocked_mass_kernels_compile_without_spills(tmp_path):
    """The register-blocked slab (``kernel_source(..., blocking=2)``, operator_blocked): BP1 at
    p = 7, 8, stored and on the fly, the apply and the CG variant, compile for sm_90 without
    spilling, and read the buffer in 16-byte pairs (``ld.shared.v2.f64``).  (Its BP3 kernels
    spill at 255 registers: operator_blocked's docstring.)"""
    from hofem.backends.cuda.operator_fuse import fusable_shape, kernel_source

    ceed = hf.Ceed("/cpu/self/ref")
    include = ROOT / "backends" / "cuda"
    jobs = []
    for p in (7, 8):
        for geometry in ("stored", "on_the_fly"):
            op = hf.mass(hf.H1Space(ceed, meshes.box(2), p), geometry=geometry)
            for dot in (False, True):
                path = tmp_path / f"mass-p{p}-{geometry}-{int(dot)}.cu"
                path.write_text(kernel_source(op, fusable_shape(op, 16), True, dot, blocking=2))
                jobs.append(path)

    failures = []
    for path, proc, ptx in _cubin_and_ptx(jobs, include):
        if proc.returncode or ptx.returncode:
            failures.append(f"{path.name}:\n{proc.stderr}\n{ptx.stderr}")
        elif "0 bytes spill stores" not in proc.stderr:
            failures.append(f"{path.name} spills:\n{proc.stderr}")
        elif "ld.shared.v2.f64" not in path.with_suffix(".ptx").read_text():
            failures.append(f"{path.name} reads no 16-byte pairs")
    assert not failures, "\n".join(failures)


_TILE_LAUNCHES = {}  # tile source file name -> (shape, (elements per block, team))


def _tile_sources(tmp_path):
    """The tile kernels (operator_tiles), apply and CG variant: BP1 stored at p = 7, 8 and a
    smaller shape (p = 4), at gen's elements per block and at 8; at p = 7, 8 teams of 2
    warps (one a block) and 4 (two a block), and BP1 with the Jacobian of affine cells on the
    fly at gen's launch and those teams."""
    from hofem.backends.cuda.operator_fuse import fusable_shape
    from hofem.backends.cuda.operator_tiles import TEAM, WARPS, tile_kernel_source

    ceed = hf.Ceed("/cpu/self/ref")
    paths = []

    def write(op, geometry, launches):
        shape = fusable_shape(op, 16)
        for (warps, team), dot in itertools.product(launches, (False, True)):
            path = tmp_path / f"tiles-p{p}-{geometry}-{int(dot)}-w{warps}t{team}.cu"
            path.write_text(tile_kernel_source(op, shape, dot, warps, team))
            paths.append(path)
            _TILE_LAUNCHES[path.name] = shape, (warps, team)

    for p in (4, 7, 8):
        teams = [(1, 2), (2, 4)] if p > 4 else []
        op = hf.mass(hf.H1Space(ceed, meshes.box(2, distort=0.1), p), geometry="stored")
        write(op, "stored", [(WARPS, TEAM), (8, 1), *teams])
        if p > 4:
            op = hf.mass(hf.H1Space(ceed, meshes.box(2), p), geometry="on_the_fly")
            write(op, "on_the_fly", [(WARPS, TEAM), *teams])
    return paths


def _mma_registers(path, proc, ptx):
    """``(registers, None)`` of a tile kernel that compiled (``_cubin_and_ptx``), spilled
    nothing and runs fp64 ``mma``, else ``(None, the failure)``."""
    if proc.returncode or ptx.returncode:
        return None, f"{path.name}:\n{proc.stderr}\n{ptx.stderr}"
    if "0 bytes spill stores" not in proc.stderr or "mma.sync.aligned.m8n8k4" not in (
        path.with_suffix(".ptx").read_text()
    ):
        return None, f"{path.name} spills or has no fp64 mma:\n{proc.stderr}"
    return int(re.search(r"Used (\d+) registers", proc.stderr).group(1)), None


def test_tile_kernels_compile_to_fp64_mma_without_spills(tmp_path):
    """The tile kernels compile for sm_90 to mma.sync tiles and spill no registers (ptxas -v)
    within the registers of their ``__launch_bounds__`` (``launch_blocks``): at p = 7, 8 and
    one warp per element the blocks that the shared memory lets reside; teams meet at
    ``bar.sync`` (named barriers, or __syncthreads' where the block is one team)."""
    from hofem.backends.cuda.operator_tiles import launch_blocks, resident_blocks

    failures = []
    for path, proc, ptx in _cubin_and_ptx(_tile_sources(tmp_path), ROOT / "backends" / "cuda"):
        registers, failure = _mma_registers(path, proc, ptx)
        if failure:
            failures.append(failure)
        else:
            shape, (warps, team) = _TILE_LAUNCHES[path.name]
            blocks = launch_blocks(shape, warps, team)
            if 32 * warps * team * blocks * registers > 65536:
                failures.append(f"{path.name}: {registers} registers")
            if shape[2] > 8 and team == 1 and blocks != resident_blocks(shape, warps):
                failures.append(f"{path.name}: registers bound the blocks per SM")
            if team > 1 and "bar.sync" not in path.with_suffix(".ptx").read_text():
                failures.append(f"{path.name}: no barrier for the team")
    assert not failures, "\n".join(failures)


def _tile_grad_sources(tmp_path):
    """The collocated gradient tile kernels (operator_tiles_grad), apply and CG variant: BP5
    at p = 4 and 8, stored q-data on distorted cells and the Jacobian of affine cells on the
    fly, at gen's warps per block (default_warps) and at 8; ``{path: (shape, warps)}``."""
    from hofem.backends.cuda.operator_fuse import fusable_shape
    from hofem.backends.cuda.operator_tiles_grad import default_warps, tile_grad_kernel_source

    ceed = hf.Ceed("/cpu/self/ref")
    gll = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO}
    launches = {}
    for p in (4, 8):
        for geometry, distort in (("stored", 0.1), ("on_the_fly", 0.0)):
            space = hf.H1Space(ceed, meshes.box(2, distort=distort), p)
            op = hf.diffusion(space, geometry=geometry, **gll)
            shape = fusable_shape(op, 16)
            for dot in (False, True):
                for warps in (default_warps(op), 8):
                    path = tmp_path / f"tiles-grad-p{p}-{geometry}-{int(dot)}-w{warps}.cu"
                    path.write_text(tile_grad_kernel_source(op, shape, dot, warps))
                    launches[path] = shape, warps
    return launches


def test_tile_grad_kernels_compile_to_fp64_mma_without_spills(tmp_path):
    """The collocated gradient tile kernels compile for sm_90 to mma.sync tiles and spill no
    registers (ptxas -v) within the registers of their ``__launch_bounds__``
    (``launch_blocks``): at p = 8 the blocks that the shared memory lets reside."""
    from hofem.backends.cuda.operator_tiles_grad import launch_blocks, resident_blocks

    launches = _tile_grad_sources(tmp_path)
    failures = []
    for path, proc, ptx in _cubin_and_ptx(list(launches), ROOT / "backends" / "cuda"):
        registers, failure = _mma_registers(path, proc, ptx)
        if failure:
            failures.append(failure)
        else:
            shape, warps = launches[path]
            if 32 * warps * launch_blocks(shape, warps) * registers > 65536:
                failures.append(f"{path.name}: {registers} registers")
            if shape[2] > 8 and launch_blocks(shape, warps) != resident_blocks(shape, warps):
                failures.append(f"{path.name}: registers bound the blocks per SM")
    assert not failures, "\n".join(failures)
