"""The collocated gradient tile kernels of ``/gpu/cuda/gen`` (``operator_tiles_grad.py``: one
warp per element, every contraction a GEMM on the fp64 tensor cores, three buffers in one
point layout), checked without a GPU.

Each generated source (:func:`~hofem.backends.cuda.operator_tiles_grad.tile_grad_kernel_source`)
is compiled by the host C++ compiler with ``cuda_host_shim.h`` (a std::thread per CUDA
thread, ``mma_m8n8k4`` emulated per warp, the dynamic shared memory filled with NaN before
each block).  The results are compared with ``/cpu/self/ref`` for BP5 (Gauss-Lobatto points
at the nodes) at p = 8 and p = 4, stored q-data on distorted cells and the Jacobian of affine
cells on the fly, the apply and the CG variant (its partial sums of ``u . Au`` and its
stopped status), several warps per block with a partial last block, and blocks looping over
the elements.  ``test_12_nvcc.py`` compiles the sources for sm_90 and checks that p = 8
spills nothing.
"""

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from host_kernels import (
    CXX,
    build,
    ctypes_args,
    failures,
    field_arguments,
    params,
    precompiled_shim,
)

import hofem as hf
from hofem import meshes
from hofem.backends.cuda import operator_fuse as of
from hofem.backends.cuda import operator_tiles_grad as tg

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")

# cells per direction: 27 elements, so that the last block of 2 or 4 warps is partial
CELLS = 3
# (order, warps per block): BP5 at the layout's order and a smaller shape
CASES = [(8, 2), (4, 4)]
GLL = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO}


def _cases():
    """``(name, operator on /cpu/self/ref, shape, warps)``: BP5 with stored q-data on
    distorted cells and with the Jacobian of affine cells on the fly."""
    ref = hf.Ceed("/cpu/self/ref")
    out = []
    for p, warps in CASES:
        space = hf.H1Space(ref, meshes.box(CELLS, 3, distort=0.1), p)
        op = hf.diffusion(space, geometry="stored", **GLL)
        out.append((f"bp5-p{p}-w{warps}", op, of.fusable_shape(op, 16), warps))
        affine = hf.H1Space(ref, meshes.box(CELLS, 3), p)
        op = hf.diffusion(affine, geometry="on_the_fly", **GLL)
        out.append((f"on_the_fly-p{p}-w{warps}", op, of.fusable_shape(op, 16), warps))
    return out


@pytest.fixture(scope="module")
def kernels():
    """``(name, op, shape, warps, source, dot)``: each case's apply and CG variant."""
    return [
        (name, op, shape, warps, tg.tile_grad_kernel_source(op, shape, dot, warps), dot)
        for name, op, shape, warps in _cases()
        for dot in (False, True)
    ]


def _grid(op, warps):
    """Blocks that cover the elements in two rounds (the grid-stride loop, the last round
    partial)."""
    return math.ceil(op.num_elem / (2 * warps))


def _run_kernel(lib, kernel, u, stopped):
    """``(v, partial)`` of ``kernel`` (built in ``lib``) on ``u``: the output and, for the CG
    variant, the block partial sums (``stopped``: CG's status set)."""
    _, op, _, warps, source, dot = kernel
    grid = _grid(op, warps)
    v = np.zeros(op.shape[0])
    args = [np.int32(op.num_elem), *field_arguments(op, u, v, weights=False)]
    partial = np.full(grid, np.nan)
    if dot:
        args += [partial, np.array([int(stopped), 0, 0], dtype=np.int64)]
    lib.launch_0(grid, 32 * warps, *ctypes_args(params(source), args))
    return v, partial


def test_tile_grad_kernels_match_ref_on_the_host(kernels, tmp_path):
    shim = precompiled_shim(tmp_path)

    def compile_one(k):
        _, _, shape, warps, source, _ = kernels[k]
        shared = [tg.tile_grad_shared_bytes(shape, warps)]
        return build([source], tmp_path / f"tiles_grad{k}.so", shim, shared)

    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(compile_one, range(len(kernels))))
    found = []
    for k, (lib, kernel) in enumerate(zip(libs, kernels, strict=True)):
        name, op, shape, _, _, dot = kernel
        u = np.random.default_rng(k).standard_normal(op.shape[1])
        label = f"{name} {shape} dot={dot}"
        run = lambda stopped, lib=lib, kernel=kernel, u=u: _run_kernel(lib, kernel, u, stopped)  # noqa: E731
        found += failures(label, run, u, op(u), dot, 1e-12)
    assert not found, "\n".join(found)


def test_every_case_covers_its_path(kernels):
    """The cases exercise what they claim: p = 8 and a smaller shape, several warps per
    block with a partial last block, blocks that loop, a partial last m tile (``Q_1d^2``
    rows, not a multiple of 8), the weights' table and the cell values on the fly."""
    assert {shape for _, _, shape, *_ in kernels} == {(3, 9, 9), (3, 5, 5)}
    for name, op, shape, warps, source, _ in kernels:
        assert warps > 1 and op.num_elem % warps != 0, name  # a partial last block
        assert _grid(op, warps) * warps < op.num_elem, name  # the blocks loop
        assert f"#define PITCH {tg.pitch(shape)}" in source, name
        assert ("c_w[" in source) == name.startswith("on_the_fly"), name
        assert ("warp_cell_values" in source) == name.startswith("on_the_fly"), name
        assert shape[2] ** 2 % 8, name


def test_shared_memory_and_counts():
    """Three buffers of ``Q_1d^2`` rows of the pitch a warp: 23 KiB at p = 8, so that the SM
    holds eight warps at one, two or four a block."""
    assert tg.tile_grad_shared_bytes((3, 9, 9), 1) == 3 * 81 * 12 * 8
    assert [tg.resident_blocks((3, 9, 9), w) * w for w in (1, 2, 4, 8)] == [9, 8, 8, 8]
    assert tg.launch_blocks((3, 9, 9), 2) == tg.resident_blocks((3, 9, 9), 2)


def test_gen_takes_the_layout_only_for_its_shapes(kernels):
    """gen's rule: the measured tables (BP5 p = 8 either geometry), chosen by the operator's
    inputs, with one warp a block on the fly and two with stored q-data; BP3 on Gauss points
    (the interpolation not the identity), the mass, 2D and three components are not
    tile_grad_fusable, and the source generator refuses them."""
    assert tg.TILE_GRAD_SHAPES == {(3, 9, 9)} and tg.TILE_GRAD_CELL_SHAPES == {(3, 9, 9)}
    for name, op, *_ in kernels:
        assert tg.tile_grad_fusable(op)
        cells = name.startswith("on_the_fly")
        want = tg.TILE_GRAD_CELL_SHAPES if cells else tg.TILE_GRAD_SHAPES
        assert tg.tile_grad_shapes(op) is want, name
        assert tg.default_warps(op) == (tg.WARPS if cells else tg.WARPS_STORED), name
    assert (tg.WARPS, tg.WARPS_STORED) == (1, 2)
    ref = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(1, 3)
    refused = [
        hf.diffusion(hf.H1Space(ref, mesh, 8), geometry="stored"),
        hf.mass(hf.H1Space(ref, mesh, 8), geometry="stored", **GLL),
        hf.diffusion(hf.H1Space(ref, meshes.box(1, 2), 8), geometry="stored", **GLL),
        hf.diffusion(hf.H1Space(ref, mesh, 8, num_comp=3), geometry="stored", **GLL),
    ]
    for op in refused:
        assert not tg.tile_grad_fusable(op)
        with pytest.raises(ValueError, match="gradient tile layout"):
            tg.tile_grad_kernel_source(op, of.fusable_shape(op, 16))
    # BP6 reaches the layout one component at a time (component_split)
    bp6 = hf.diffusion(hf.H1Space(ref, mesh, 8, num_comp=3), geometry="stored", **GLL)
    assert tg.tile_grad_fusable(bp6.component_operator())


def test_lab_script_parses_its_variants_on_the_host():
    """``bakeoff/ab/ab_tiles_grad.py`` imports without a GPU, puts ``table`` (the reference)
    first and refuses a variant it cannot build before any device work."""
    from bakeoff.ab import ab_tiles_grad

    args = ab_tiles_grad.parse(["8", "--form", "vector-diffusion-gll", "--geometry", "stored"])
    assert args.orders == [8] and args.variants == ["table", "w1", "w2", "w4", "w8"]
    args = ab_tiles_grad.parse(["8", "4", "--variants", "w4", "table", "--dot"])
    assert args.variants == ["table", "w4"] and args.dot and args.form == "diffusion-gll"
    assert [ab_tiles_grad.warps(v) for v in ("table", "w1", "w8")] == [None, 1, 8]
    for bad in ("w0", "slab", "w", "w2r0"):
        with pytest.raises(ValueError, match="table or wN"):
            ab_tiles_grad.warps(bad)
    with pytest.raises(SystemExit) as exit_info:  # the command line: one line, status 2
        ab_tiles_grad.parse(["8", "--variants", "table", "w0"])
    assert exit_info.value.code == 2
