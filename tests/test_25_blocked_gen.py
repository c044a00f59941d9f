"""The register-blocked slab kernels of ``/gpu/cuda/gen`` (``operator_blocked.py``), and the
slab they would replace, checked without a GPU.

Each generated source (:func:`~hofem.backends.cuda.operator_fuse.kernel_source` with
``blocking=2`` and 1) is compiled by the host C++ compiler with ``cuda_host_shim.h``: a
std::thread per CUDA thread of the ``(ceil(T_1d / 2), T_1d, elems)`` block (the slab's
``(T_1d, T_1d, 1)``), a barrier per block for ``__syncthreads()`` (``host_kernels.py``).  The
results are compared with ``/cpu/self/ref`` for BP1 and BP3 at p = 7 and 8 (``Q_1d = 9, 10``:
past the one-warp-per-element layout), BP2 and BP4 at one of them, stored q-data on
distorted cells and the geometry on the fly, the apply and the CG variant (its partial sums
of ``u . Au`` and its stopped status), two elements per block with a partial last block, and
blocks looping over the elements.  The device tests are in ``test_10_cuda.py``;
``test_12_nvcc.py`` compiles such sources for sm_90.
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
from hofem.basis import collocated_grad

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) on PATH")

# cells per direction: 27 elements, so that the last block of two elements is partial
CELLS = 3
# name -> (form, components, the (order, geometry) cases): BP1 and BP3 at both orders and
# geometries, the vector forms (BP2, BP4: three components) at one of each
FORMS = {
    "bp1": (hf.mass, 1, [(p, g) for p in (7, 8) for g in ("stored", "on_the_fly")]),
    "bp3": (hf.diffusion, 1, [(p, g) for p in (7, 8) for g in ("stored", "on_the_fly")]),
    "bp2": (hf.mass, 3, [(8, "stored")]),
    "bp4": (hf.diffusion, 3, [(7, "on_the_fly")]),
}


def _cases():
    """``(name, operator on /cpu/self/ref, shape, collocated)`` of :data:`FORMS`: stored
    q-data on distorted cells, the Jacobian of affine cells on the fly."""
    ref = hf.Ceed("/cpu/self/ref")
    cases = []
    for name, (form, num_comp, orders) in FORMS.items():
        for p, geometry in orders:
            mesh = meshes.box(CELLS, 3, distort=0.1 if geometry == "stored" else 0.0)
            op = form(hf.H1Space(ref, mesh, p, num_comp=num_comp), geometry=geometry)
            shape = of.fusable_shape(op, 16)
            basis = of._matrix_bases(op)[0][0]
            collocated = collocated_grad(basis.interp_1d, basis.grad_1d) is not None
            cases.append((f"{name}-p{p}-{geometry}", op, shape, collocated))
    return cases


def _kernels():
    """``(name, op, shape, collocated, source, blocking, dot)``: each case's apply and CG
    variant register-blocked, and the slab's apply as a control of the harness."""
    out = []
    for name, op, shape, collocated in _cases():
        for blocking, dot in ((2, False), (2, True), (1, False)):
            source = of.kernel_source(op, shape, collocated, dot, blocking=blocking)
            out.append((name, op, shape, collocated, source, blocking, dot))
    return out


@pytest.fixture(scope="module")
def kernels():
    return _kernels()


def _matrices(op, collocated):
    """The kernel's matrix arguments in ``kernel_source``'s order: ``B, G, Bt, Gt`` of each
    matrix set, then ``D`` (Q_1d, Q_1d) where ``collocated``."""
    bases, _ = of._matrix_bases(op)
    out = []
    for b in bases:
        out += [b.interp_1d, b.grad_1d, b.interp_1d.T, b.grad_1d.T]
    if collocated:
        out.append(collocated_grad(bases[0].interp_1d, bases[0].grad_1d))
    return [np.ascontiguousarray(m, dtype=np.float64) for m in out]


def _launch(shape, blocking, num_elem):
    """``(grid, block)``: the device's block and blocks that cover the elements in two rounds
    (the grid-stride loop, the last round partial)."""
    elems, block = of.fused_block(shape, blocking)
    return math.ceil(num_elem / (2 * elems)), block


def _run_kernel(lib, kernel, u, stopped):
    """``(v, partial)`` of ``kernel`` (built in ``lib``) on ``u``: the output and, for the CG
    variant, the block partial sums (``stopped``: CG's status set)."""
    _, op, shape, collocated, source, blocking, dot = kernel
    grid, block = _launch(shape, blocking, op.num_elem)
    v = np.zeros(op.shape[0])
    args = [np.int32(op.num_elem), *_matrices(op, collocated), *field_arguments(op, u, v)]
    partial = np.full(grid, np.nan)
    if dot:
        args += [partial, np.array([int(stopped), 0, 0], dtype=np.int64)]
    lib.launch_0(grid, *block, *ctypes_args(params(source), args))
    return v, partial


def _check(lib, k, kernel):
    """The failures of ``kernel`` (the ``k``-th, built in ``lib``) against ``/cpu/self/ref``."""
    name, op, shape, _, _, blocking, dot = kernel
    u = np.random.default_rng(k).standard_normal(op.shape[1])
    label = f"{name} {shape} blocking={blocking} dot={dot}"
    return failures(
        label, lambda stopped: _run_kernel(lib, kernel, u, stopped), u, op(u), dot, 1e-13
    )


def _build_all(kernels, folder):
    """One library per kernel, each source in a translation unit of its own
    (basis_tensor.cuh's defines differ)."""
    shim = precompiled_shim(folder)

    def compile_one(k):
        return build([kernels[k][4]], folder / f"blocked{k}.so", shim, block_3d=True)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(compile_one, range(len(kernels))))


def test_blocked_kernels_match_ref_on_the_host(kernels, tmp_path):
    libs = _build_all(kernels, tmp_path)
    found = []
    for k, (lib, kernel) in enumerate(zip(libs, kernels, strict=True)):
        found += _check(lib, k, kernel)
    assert not found, "\n".join(found)


def test_every_case_covers_its_path(kernels):
    """The cases exercise what they claim: the blocked stages (and not in the control), the
    collocated derivative for BP3, stored q-data and the geometry on the fly, two elements
    per block with a partial last block, blocks that loop, both shapes (T_1d odd and even)."""
    for name, op, shape, collocated, source, blocking, _ in kernels:
        assert ("#define BLOCKED 1" in source) == (blocking == 2), name
        assert collocated, name  # D passed as gen passes it (used by BP3's gradients)
        assert ("grad_collocated(" in source) == name.startswith(("bp3", "bp4")), name
        elems, block = of.fused_block(shape, blocking)
        grid, _ = _launch(shape, blocking, op.num_elem)
        if blocking == 2:
            assert block[0] == -(-max(shape[1:]) // 2), name
            assert elems > 1 and op.num_elem % elems != 0, name  # a partial last block
        assert grid * elems < op.num_elem, name  # the blocks loop
    geometries = {name.split("-")[-1] for name, *_ in kernels}
    assert geometries == {"stored", "on_the_fly"}
    assert {shape for _, _, shape, *_ in kernels} == {(3, 8, 9), (3, 9, 10)}


def test_blocking_needs_a_3d_shape_without_tensor_cores(kernels):
    """One clear error for a blocking the kernel cannot take."""
    _, op, shape, collocated, *_ = kernels[0]
    for bad in ({"blocking": 3}, {"blocking": 2, "tensor_cores": True}):
        with pytest.raises(ValueError, match="blocking="):
            of.kernel_source(op, shape, collocated, **bad)
    with pytest.raises(ValueError, match="blocking="):
        of.kernel_source(op, (2, 9, 10), collocated, blocking=2)


def test_gen_runs_the_blocked_layout_where_it_measured_faster(kernels):
    """gen's rule (``use_blocked_layout``): BP1 at p = 7 with stored q-data and on the fly
    (the coordinates' cell-constant basis counts neither as gradients nor as values per
    point), the slab for BP1 p = 8, BP2 (three values per point) and every gradient form;
    never a 2D shape."""
    from hofem.backends.cuda.operator_blocked import use_blocked_layout

    chosen = {name for name, op, shape, *_ in kernels if use_blocked_layout(op, shape)}
    assert chosen == {"bp1-p7-stored", "bp1-p7-on_the_fly"}
    _, op, shape, *_ = kernels[0]
    assert not use_blocked_layout(op, (2, *shape[1:]))


def test_slab_register_caps_go_to_one_component_kernels_by_kind():
    """``cuda_fused.json``'s register caps of the slab at ``Q_1d = 10``: 128 for BP1 at p = 8
    and 168 for BP3 at p = 8, either geometry (the coordinates' cell-constant basis counts for
    neither kind); none for the three-component forms, nor at p = 7 (the register_cap rule)."""
    caps = {name: of.slab_register_cap(op, shape) for name, op, shape, _ in _cases()}
    expected = {f"bp1-p8-{g}": 128 for g in ("stored", "on_the_fly")}
    expected |= {f"bp3-p8-{g}": 168 for g in ("stored", "on_the_fly")}
    assert {name: cap for name, cap in caps.items() if cap is not None} == expected
    assert {"bp2-p8-stored", "bp4-p7-on_the_fly", "bp1-p7-stored"} <= set(caps)
