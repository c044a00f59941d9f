"""The one-warp-per-element kernels of ``/gpu/cuda/gen`` (``operator_warp.py``), checked
without a GPU.

Each generated source is compiled by the host C++ compiler with ``cuda_host_shim.h``: a
std::thread per CUDA thread, a barrier per block for ``__syncthreads()`` and per warp for
``__syncwarp()``, the shuffles and the fp64 tensor-core tile ``mma_m8n8k4`` as exchanges
between a warp's 32 threads (``host_kernels.py``).  The results are compared with
``/cpu/self/ref`` on small boxes: BP1 to BP6, stored q-data (distorted cells) and the
geometry on the fly (affine cells: the Jacobian once per element), one element per warp and
four (``warp_side``), the Gauss-Lobatto gather (``warp_gather_points``), the stages'
operands in registers and in the shared table, a partial last group of elements, the
vector Poisson as its one-component kernel taking the components in turn, and the CG
variant's partial sums of ``u . Au`` and its stopped status.  The shapes need not be in
the tuning tables: :func:`warp_kernel_source` generates any :func:`warp_fusable` one.  The
device tests are in ``test_10_cuda.py``; ``test_12_nvcc.py`` compiles such sources for
sm_90.
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
from hofem.backends.cuda import operator_warp as ow
from hofem.backends.cuda.operator_fuse import dot_pairs, fusable_shape

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")

GLL = {"q_extra": 0, "quad_mode": hf.GAUSS_LOBATTO}
# (name, form, components, quadrature, orders): BP1 at every order the layout takes (Gauss
# points Q_1d = P_1d + 1 up to p = 6; Gauss-Lobatto at the nodes up to p = 7), the others
# at the smallest shape (four elements per warp), a middle one and the largest
PROBLEMS = [
    ("bp1", hf.mass, 1, {}, (1, 2, 3, 4, 5, 6)),
    ("bp1-gll", hf.mass, 1, GLL, (3, 7)),
    ("bp2", hf.mass, 3, {}, (2, 4, 6)),
    ("bp3", hf.diffusion, 1, {}, (2, 4, 6)),
    ("bp4", hf.diffusion, 3, {}, (2, 4, 6)),
    ("bp5", hf.diffusion, 1, GLL, (2, 4, 7)),
    ("bp6", hf.diffusion, 3, GLL, (3, 5, 7)),
]
# cells per direction: 27 elements, a multiple of no block's elements, so that the last
# group of every launch is partial (_launch)
CELLS = 3


def _cases():
    """``(name, operator on /cpu/self/ref, shape)`` of every problem, order and geometry:
    stored q-data on distorted cells, the Jacobian of affine cells on the fly."""
    ref = hf.Ceed("/cpu/self/ref")
    meshes_by_geometry = {
        "stored": meshes.box(CELLS, 3, distort=0.1),
        "on_the_fly": meshes.box(CELLS, 3),
    }
    cases = []
    for name, form, num_comp, quadrature, orders in PROBLEMS:
        for p in orders:
            for geometry, mesh in meshes_by_geometry.items():
                space = hf.H1Space(ref, mesh, p, num_comp=num_comp)
                op = form(space, geometry=geometry, **quadrature)
                shape = fusable_shape(op, 8)
                assert shape is not None and ow.warp_fusable(op), f"{name} p={p} {geometry}"
                cases.append((f"{name}-p{p}-{geometry}", op, shape))
    return cases


# the vector Poisson cases that also run as their one-component kernel taking the three
# components in turn (warp_kernel_source's components): four elements per warp, and one
# with the Gauss-Lobatto gather
IN_TURN = ("bp4-p2", "bp6-p5")


def _kernels():
    """``(name, op, shape, source, dot, scalar)``: each case's apply and CG variant, one with
    the stages' operands in registers and the other from the shared table (alternating); for
    the cases of :data:`IN_TURN` also the kernel of the component operator ``scalar`` that
    takes the components in turn (``scalar`` None elsewhere)."""
    out = []
    for k, (name, op, shape) in enumerate(_cases()):
        assert dot_pairs(op) is not None, name
        for dot in (False, True):
            source = ow.warp_kernel_source(op, shape, dot, registers=(k + dot) % 2 == 0)
            out.append((name, op, shape, source, dot, None))
            if name.rsplit("-", 1)[0] in IN_TURN:  # without the geometry
                scalar = op.component_operator()
                source = ow.warp_kernel_source(scalar, shape, dot, components=3)
                out.append((f"{name}-turn", op, shape, source, dot, scalar))
    return out


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def _launch(op, shape):
    """``(grid, block)``: the device's block (32 threads per warp), and blocks that cover the
    elements in two rounds (the device's grid-stride loop, the last round partial)."""
    warps = ow.warps_per_block(ow._slots(op))
    elems = warps * (8 // ow.warp_side(shape)) ** 2  # a block's elements
    return math.ceil(op.num_elem / (2 * elems)), 32 * warps


def _run(lib, source, op, shape, u, dot, stopped=False, scalar=None):
    """``v = A u`` and, for ``dot``, the blocks' partial sums of ``u . Au`` from the kernel of
    ``lib`` (``stopped``: CG's status set, so that the dot variant writes nothing); with
    ``scalar``, the kernel of ``op``'s component operator that takes the components in turn."""
    kernel_op = op if scalar is None else scalar
    grid, block = _launch(kernel_op, shape)
    v = np.zeros(op.shape[0])
    head = [np.int32(op.num_elem)]
    if scalar is not None:
        head.append(np.int64(scalar.shape[1]))  # comp_step: one component's entries
    args = [*head, *field_arguments(kernel_op, u, v, weights=False)]
    partial = np.full(grid, np.nan)
    if dot:
        args += [partial, np.array([int(stopped), 0, 0], dtype=np.int64)]
    lib.launch_0(grid, block, *ctypes_args(params(source), args))
    return v, partial


def _check(lib, k, kernel):
    """The failures of ``kernel`` (the ``k``-th, built in ``lib``) against ``/cpu/self/ref``."""
    name, op, shape, source, dot, scalar = kernel
    u = np.random.default_rng(k).standard_normal(op.shape[1])

    def run(stopped):
        return _run(lib, source, op, shape, u, dot, stopped=stopped, scalar=scalar)

    return failures(f"{name} {shape} dot={dot}", run, u, op(u), dot, 1e-13)


def test_warp_kernels_match_ref_on_the_host(kernels, tmp_path):
    """Each source in a translation unit of its own: warp_element.cuh's inline functions
    take the kernel's WARP_SIDE where the header is first included."""
    shim = precompiled_shim(tmp_path)
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(
            pool.map(
                lambda k: build([kernels[k][3]], tmp_path / f"warp{k}.so", shim),
                range(len(kernels)),
            )
        )
    found = []
    for k, (lib, kernel) in enumerate(zip(libs, kernels, strict=True)):
        found += _check(lib, k, kernel)
    assert not found, "\n".join(found)


def test_every_case_covers_its_path(kernels):
    """The cases exercise what they claim: four elements per warp and one, the Gauss-Lobatto
    gather and scatter, the interpolation's contractions, the Jacobian once per element (its
    shuffles), stored q-data prefetched and read at each point, both operand placements,
    gradients of one and of three components, blocks of four and of two warps, and a
    partial last group of elements."""
    sources = {name: source for name, _, _, source, dot, _ in kernels if not dot}
    side4 = [s for s in sources.values() if "#define WARP_SIDE 4" in s]
    assert side4 and len(side4) < len(sources)
    assert "warp_gather_points<" in sources["bp5-p2-stored"]
    assert "warp_interp<" not in sources["bp5-p2-stored"]
    assert "warp_interp_t<" in sources["bp3-p6-stored"]
    assert "warp_cell_values<" in sources["bp1-p1-on_the_fly"]
    assert "warp_load_points<" in sources["bp1-p1-stored"]  # 1 value: prefetched
    assert "warp_load_points<" not in sources["bp3-p2-stored"]  # 6: at each point
    placements = {"WarpRegs frag" in s for s in sources.values()}
    assert placements == {True, False}
    assert "warp_grad_level<" in sources["bp4-p4-on_the_fly"]
    turns = [name for name, source in sources.items() if "comp * comp_step" in source]
    assert len(turns) == 2 * len(IN_TURN) and all(name.endswith("-turn") for name in turns)
    assert "warp_gather_points<" in sources["bp6-p5-stored-turn"]
    assert "warp_cell_values<" in sources["bp4-p2-on_the_fly-turn"]
    blocks = {_launch(op, shape)[1] for _, op, shape, _, _, _ in kernels}
    assert blocks == {128, 64}
    for _, op, shape, _, _, scalar in kernels:
        grid, block = _launch(op if scalar is None else scalar, shape)
        elems = block // 32 * (8 // ow.warp_side(shape)) ** 2
        assert op.num_elem % elems != 0 and grid * elems < op.num_elem  # partial, and loops


def test_in_turn_fusable_takes_the_measured_structure():
    """The vector Poisson form's component operator takes the components in turn with stored
    q-data and with the affine Jacobian on the fly, not with the coordinates of curved cells
    on the fly (their gradient would be formed again for each component); a vector operator
    is refused one line by the generator."""
    ref = hf.Ceed("/cpu/self/ref")
    # curved: cells of order p, so that the coordinates are on the solution's basis
    for geometry, order, expected in (("stored", 3, True), ("on_the_fly", 1, True),
                                      ("on_the_fly", 3, False)):  # fmt: skip
        mesh = meshes.box(2, 3, order=order, distort=0.1 if order > 1 else 0.0)
        op = hf.diffusion(hf.H1Space(ref, mesh, 3, num_comp=3), geometry=geometry, **GLL)
        assert ow.warp_fusable(op.component_operator()), (geometry, order)
        assert ow.in_turn_fusable(op.component_operator()) is expected, (geometry, order)
    with pytest.raises(ValueError, match="components=3: use 1, or more for a one-component"):
        ow.warp_kernel_source(op, fusable_shape(op, 8), components=3)
