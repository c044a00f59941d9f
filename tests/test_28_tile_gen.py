"""The tile kernels of ``/gpu/cuda/gen`` (``operator_tiles.py``: one warp per element, every
contraction a GEMM on the fp64 tensor cores), checked without a GPU.

Each generated source (:func:`~hofem.backends.cuda.operator_tiles.tile_kernel_source`) is
compiled by the host C++ compiler with ``cuda_host_shim.h``: a std::thread per CUDA thread,
the ``mma_m8n8k4`` tile emulated per warp, the dynamic shared memory filled with NaN before
each block (so that a stage reading an entry no stage wrote shows in the result).  The
results are compared with ``/cpu/self/ref`` for BP1 at p = 7 and 8 (``Q_1d = 9, 10``) and at
p = 4 (a smaller shape: one n tile along P), stored q-data on distorted cells (and a
QFunction that reads the quadrature weights, nonzero at zero input; and the Jacobian of
affine cells on the fly, evaluated once per element), the apply and
the CG variant (its partial sums of ``u . Au`` and its stopped status), several elements per
block with a partial last block, and blocks looping over the elements; one warp per element
and teams of 2 and 4 (named barriers, or ``__syncthreads`` where the block is one team).
``test_12_nvcc.py`` compiles the sources for sm_90 and checks that BP1 p = 8 spills nothing.
"""

import itertools
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
from hofem.backends.cuda import operator_tiles as ot

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")

# cells per direction: 27 elements, so that the last block of 2, 4 or 8 warps is partial
CELLS = 3
# (order, elements per block, warps per element): BP1 at the layout's orders, and a smaller
# shape, one warp per element; teams of 2 and 4 warps, several a block and one
CASES = [(7, 2, 1), (8, 4, 1), (4, 8, 1), (7, 2, 2), (8, 2, 4), (7, 1, 4), (8, 1, 2)]


def _weighted_mass(ctx, w, u, qdata, v):
    v[0] = qdata[0] * (u[0] + w[0])  # nonzero where u is zero: padded points must add nothing


def _weighted(ref, mass):
    """``mass`` with the QFunction :func:`_weighted_mass`: the quadrature weights (of a basis
    of another P_1d on the same points) beside the active field and the q-data."""
    qf = ref.QFunction(
        _weighted_mass,
        [("w", 1, hf.EVAL_WEIGHT), ("u", 1, hf.EVAL_INTERP), ("qdata", 1, hf.EVAL_NONE)],
        [("v", 1, hf.EVAL_INTERP)],
    )
    u, qdata = mass.input_fields
    op = ref.Operator(qf)
    vertices = ref.BasisTensorH1Lagrange(3, 1, 2, u.basis.Q_1d, hf.GAUSS)  # P_1d = 2
    op.set_field("w", hf.ELEMRESTRICTION_NONE, vertices, hf.VECTOR_NONE)
    op.set_field("u", u.restriction, u.basis, hf.VECTOR_ACTIVE)
    op.set_field("qdata", qdata.restriction, hf.BASIS_NONE, qdata.vector)
    op.set_field("v", u.restriction, u.basis, hf.VECTOR_ACTIVE)
    return op


def _cases():
    """``(name, operator on /cpu/self/ref, shape, (warps, team))``: BP1 with stored q-data on
    distorted cells; at p = 8 one warp per element, a QFunction that also reads the
    quadrature weights; BP1 with the Jacobian of affine cells on the fly (a cell-constant
    input) there and in every team."""
    ref = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(CELLS, 3, distort=0.1)
    out = []
    for p, warps, team in CASES:
        launch, tag = (warps, team), f"p{p}-w{warps}t{team}"
        op = hf.mass(hf.H1Space(ref, mesh, p), geometry="stored")
        shape = of.fusable_shape(op, 16)
        out.append((f"bp1-{tag}", op, shape, launch))
        if p == 8 and team == 1:
            out.append((f"weights-{tag}", _weighted(ref, op), shape, launch))
        if p == 8 or team > 1:
            affine = hf.H1Space(ref, meshes.box(CELLS, 3), p)  # the Jacobian on the fly
            out.append((f"on_the_fly-{tag}", hf.mass(affine, geometry="on_the_fly"), shape, launch))
    return out


def _kernels():
    """``(name, op, shape, (warps, team), source, dot)``: each case's apply and CG variant."""
    out = []
    for name, op, shape, launch in _cases():
        for dot in (False, True):
            source = ot.tile_kernel_source(op, shape, dot, *launch)
            out.append((name, op, shape, launch, source, dot))
    return out


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def _grid(op, warps):
    """Blocks of ``warps`` elements that cover the elements in two rounds (the grid-stride
    loop, the last round partial)."""
    return math.ceil(op.num_elem / (2 * warps))


def _run_kernel(lib, kernel, u, stopped):
    """``(v, partial)`` of ``kernel`` (built in ``lib``) on ``u``: the output and, for the CG
    variant, the block partial sums (``stopped``: CG's status set)."""
    _, op, _, (warps, team), source, dot = kernel
    grid = _grid(op, warps)
    v = np.zeros(op.shape[0])
    args = [np.int32(op.num_elem), *field_arguments(op, u, v, weights=False)]
    partial = np.full(grid, np.nan)
    if dot:
        args += [partial, np.array([int(stopped), 0, 0], dtype=np.int64)]
    lib.launch_0(grid, 32 * warps * team, *ctypes_args(params(source), args))
    return v, partial


def test_tile_kernels_match_ref_on_the_host(kernels, tmp_path):
    shim = precompiled_shim(tmp_path)

    def compile_one(k):
        _, _, shape, (warps, _), source, _ = kernels[k]
        shared = [ot.tile_shared_bytes(shape, warps)]
        return build([source], tmp_path / f"tiles{k}.so", shim, shared)

    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(compile_one, range(len(kernels))))
    found = []
    for k, (lib, kernel) in enumerate(zip(libs, kernels, strict=True)):
        name, op, shape, _, _, dot = kernel
        u = np.random.default_rng(k).standard_normal(op.shape[1])
        label = f"{name} {shape} dot={dot}"
        run = lambda stopped, lib=lib, kernel=kernel, u=u: _run_kernel(lib, kernel, u, stopped)  # noqa: E731
        found += failures(label, run, u, op(u), dot, 1e-13)
    assert not found, "\n".join(found)


def test_every_case_covers_its_path(kernels):
    """The cases exercise what they claim: both shapes past the warp layout and a smaller
    one, several elements per block with a partial last block, blocks that loop, a partial
    last m tile of the z stage (``Q_1d^2`` rows, not a multiple of 8), the weights' table;
    teams of 2 and 4 at p = 7 and 8, stored and on the fly, several a block (named barriers)
    and one (``__syncthreads``)."""
    assert {shape for _, _, shape, *_ in kernels} == {(3, 8, 9), (3, 9, 10), (3, 5, 6)}
    teams = {(name.split("-")[0], shape, launch) for name, _, shape, launch, *_ in kernels}
    shapes, kinds = ((3, 8, 9), (3, 9, 10)), ("bp1", "on_the_fly")
    for team, shape, kind in itertools.product((2, 4), shapes, kinds):
        assert any(t[:2] == (kind, shape) and t[2][1] == team for t in teams), (team, shape)
    assert {warps > 1 for _, _, (warps, team) in teams if team > 1} == {True, False}
    for name, op, shape, (warps, team), source, _ in kernels:
        assert warps == 1 or op.num_elem % warps != 0, name  # a partial last block
        assert _grid(op, warps) * warps < op.num_elem, name  # the blocks loop
        assert f"#define TILE_TEAM {team}\n" in source, name
        assert f"#define PITCH {ot.pitch(shape)}" in source, name
        assert ("c_w[" in source) == name.startswith(("weights", "on_the_fly")), name
        assert ("warp_cell_values" in source) == name.startswith("on_the_fly"), name
        assert shape[2] ** 2 % 8, name


def test_pitch_is_conflict_free_and_holds_the_rows():
    """A buffer row holds max(P_1d, Q_1d) doubles and is 4 modulo 8 doubles long (an A
    fragment's four rows per half-warp start at distinct multiples of 4 bank pairs); each
    buffer holds the rows of every stage that writes it."""
    for T in range(2, ot.MAX_T_1D + 1):
        shape = (3, T - 1, T)
        assert ot.pitch(shape) >= T and ot.pitch(shape) % 8 == 4
        starts = {g * ot.pitch(shape) % 16 for g in range(4)}
        assert starts == {0, 4, 8, 12}
        rows = {"gather": (T - 1) ** 2, "x": (T - 1) * T, "y": T * T, "z^T": (T - 1) * T}
        rows |= {"y^T": (T - 1) ** 2}
        buf0, buf1 = ot.buffer_sizes(shape)
        assert max(rows[s] for s in ("gather", "y", "y^T")) * ot.pitch(shape) <= buf0
        assert max(rows[s] for s in ("x", "z^T")) * ot.pitch(shape) <= buf1
        assert (T - 1) ** 3 <= buf1  # x^T's nodes
        assert ot.tile_shared_bytes(shape, 3) == 3 * 8 * (buf0 + buf1)
    assert ot.buffer_sizes((3, 9, 10)) == (1200, 1080)  # 18 KiB a warp at p = 8


def test_launches_fit_a_block_and_its_named_barriers():
    """A block holds at most 1024 threads, and past one team at most 15 teams (named
    barriers 1 to 15); a team's registers are asked for at least MIN_REGISTERS a thread, and
    its shared memory is an element's, whatever the team."""
    for warps, team in ((1, 1), (32, 1), (15, 2), (1, 32), (8, 4)):
        ot.check_launch(warps, team)
    for warps, team in ((0, 1), (1, 0), (33, 1), (16, 2), (4, 16)):
        with pytest.raises(ValueError):
            ot.check_launch(warps, team)
    shape = (3, 9, 10)
    for warps, team in ((1, 2), (2, 2), (1, 4), (2, 4)):
        blocks = ot.launch_blocks(shape, warps, team)
        assert 32 * warps * team * blocks * ot.MIN_REGISTERS <= 65536
        assert blocks <= ot.resident_blocks(shape, warps, team) == ot.resident_blocks(shape, warps)
    assert ot.resident_blocks(shape, 1, 4) * 4 == 48  # twelve elements of four warps


def test_gen_takes_the_tile_layout_only_for_its_shapes(kernels):
    """gen's rule: the measured tables (``cuda_fused.json``'s ``tile_shapes`` for stored
    q-data, ``tile_cell_shapes`` for the affine Jacobian on the fly), chosen by the
    operator's inputs; gradients, 2D operators and three values per point are not
    tile_fusable."""
    assert ot.TILE_SHAPES == {(3, 8, 9)}
    assert ot.TILE_CELL_SHAPES == {(3, 8, 9), (3, 9, 10)}
    for name, op, *_ in kernels:
        assert ot.tile_fusable(op)
        cells = name.startswith("on_the_fly")
        assert ot.tile_shapes(op) is (ot.TILE_CELL_SHAPES if cells else ot.TILE_SHAPES), name
    ref = hf.Ceed("/cpu/self/ref")
    mesh = meshes.box(1, 3)
    assert not ot.tile_fusable(hf.diffusion(hf.H1Space(ref, mesh, 8), geometry="stored"))
    assert not ot.tile_fusable(hf.mass(hf.H1Space(ref, mesh, 8, num_comp=3), geometry="stored"))
    assert not ot.tile_fusable(hf.mass(hf.H1Space(ref, meshes.box(1, 2), 8), geometry="stored"))
    with pytest.raises(ValueError, match="tile layout"):
        ot.tile_kernel_source(hf.diffusion(hf.H1Space(ref, mesh, 8)), (3, 9, 10))


def test_lab_script_parses_its_variants_on_the_host():
    """``bakeoff/ab/ab_tiles.py`` imports without a GPU, puts ``table`` (the reference) first
    and refuses a variant it cannot build before any device work."""
    from bakeoff.ab import ab_tiles

    args = ab_tiles.parse(["7", "8", "--form", "mass", "--geometry", "stored"])
    assert args.orders == [7, 8] and args.variants == ["table", "w1", "w2", "w4", "w8"]
    assert ab_tiles.parse(["8", "--variants", "w4", "table", "--dot"]).variants == ["table", "w4"]
    variants = [ab_tiles.tile_variant(v) for v in ("table", "w1", "w8", "w1t2", "w2t4")]
    assert variants == [None, (1, None), (8, None), (1, 2), (2, 4)]
    for bad in ("w0", "slab", "w", "w2r0", "w1t0", "w2t"):
        with pytest.raises(ValueError, match="table or wN"):
            ab_tiles.tile_variant(bad)
    with pytest.raises(SystemExit) as exit_info:  # the command line: one line, status 2
        ab_tiles.parse(["8", "--variants", "table", "w0"])
    assert exit_info.value.code == 2
