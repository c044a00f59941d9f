"""The bake-off command line refuses in one line: memory estimates, unreadable meshes,
missing backends, unwritable results files; and its first-run compile line.

Each refusal runs as a user types it (a subprocess): exit status 2, exactly one line on
stderr, no traceback, nothing on stdout, and quickly (nothing is allocated first).
"""

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from util import without_cupy

import hofem as hf
from hofem import meshes
from hofem.bakeoff.estimate import (
    SAFETY_MARGIN,
    MemoryEstimate,
    box_shape,
    estimate_memory,
    memory_refusal,
)
from hofem.memory import available_host_memory, cgroup_memory_room

PROG = "python -m hofem.bakeoff"
H200_FREE = 149e9  # about 139 GiB of the 141 GB free once the CUDA context is made
H100_FREE = 84e9


def bakeoff(*args, env=None, launcher=(), timeout=120):
    """Run ``python -m hofem.bakeoff ARGS``; the finished process and its seconds."""
    start = time.perf_counter()
    run = subprocess.run(
        [*launcher, sys.executable, "-m", "hofem.bakeoff", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    return run, time.perf_counter() - start


def assert_one_line_refusal(run, *words):
    assert run.returncode == 2, run.stderr
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"{PROG}") and ": error: " in line, line
    for word in words:
        assert word in line, line
    return line


# --- the estimate -------------------------------------------------------------------------


def gen(bp, p, n, geometry, ranks=1):
    return estimate_memory(
        bp, *box_shape(bp, p, n), resource="/gpu/cuda/gen", geometry=geometry, ranks=ranks
    )


def test_known_large_gpu_runs_fit_and_are_not_underestimated():
    """The runs measured on the H200 and on 4 H100s: the estimate covers the measured
    peak and, with its margin, still fits the device they ran on."""
    bp1 = gen("bp1", 6, 191, "stored")  # 1.51e9 DOFs, 81 B/DOF in CuPy's pool
    assert bp1.dofs == (191 * 6 + 1) ** 3
    assert 81 * bp1.dofs < bp1.device < H200_FREE
    assert 19 * bp1.dofs < bp1.host < 100e9  # measured 28.7 GB of the host's 128 GiB
    bp3 = gen("bp3", 4, 300, "on_the_fly")  # 1.73e9 DOFs, 130.7 GiB by nvidia-smi
    assert 130.7 * 2**30 < bp3.device < H200_FREE
    ranks = 4  # 2.0e9 DOFs of BP1 p = 6, 85 B/DOF device and 14 B/DOF host per rank
    per_rank = gen("bp1", 6, 210, "on_the_fly", ranks)
    local = per_rank.dofs / ranks
    assert per_rank.dofs > 2e9 and 85 * local < per_rank.device < H100_FREE
    assert 14 * local < per_rank.host and ranks * per_rank.host < 500e9


@pytest.mark.parametrize(
    ("bp", "p", "n", "geometry", "measured"),
    [
        ("bp1", 6, 80, "stored", 81.8),
        ("bp1", 6, 80, "on_the_fly", 63.2),
        ("bp3", 4, 110, "on_the_fly", 90.0),
        ("bp3", 4, 70, "stored", 245.5),
        ("bp2", 3, 60, "stored", 67.9),
    ],
)
def test_the_device_estimate_covers_the_measured_pool_peak(bp, p, n, geometry, measured):
    """Peaks of CuPy's pool (B/DOF) of set-up and solve on one H100, /gpu/cuda/gen: the
    estimate is above each, within 15% of it from 5e7 DOFs on (below, the fixed 0.6 GB
    of set-up and verification chunks weigh more)."""
    estimate = gen(bp, p, n, geometry)
    per_dof = estimate.device / estimate.dofs
    assert measured < per_dof < (1.15 if estimate.dofs > 5e7 else 1.7) * measured


def test_the_pmg_estimate_covers_the_measured_pool_peak():
    """2 H100s, ``bench-parallel --preconditioner pmg``, BP3 p = 4 on the fly, 1e7 DOFs per
    rank: 362.5 B per local DOF in CuPy's pool (the set-up's temporaries kept there)."""
    estimate = estimate_memory(
        "bp3", *box_shape("bp3", 4, 68), resource="/gpu/cuda/gen", geometry="on_the_fly",
        ranks=2, preconditioner="pmg",
    )  # fmt: skip
    assert estimate.dofs == 20346417
    assert 362.5 < estimate.device / (estimate.dofs / 2) < 1.15 * 362.5


def test_the_pmg_estimate_counts_rank_0s_gathered_matrix():
    """On several ranks rank 0 holds the whole order-1 matrix and its AMG hierarchy: 1e9
    DOFs of BP3 p = 4 with pmg on 4 ranks measured 366 B per local DOF in rank 0's pool
    (4 H200s), past an 80 GB card; the estimate says so, and fits a 141 GB one."""
    shape = box_shape("bp3", 4, 250)  # 1.003e9 DOFs, 1.56e7 cells (order-1 rows)
    kwargs = dict(resource="/gpu/cuda/gen", geometry="on_the_fly", ranks=4)
    pmg = estimate_memory("bp3", *shape, preconditioner="pmg", **kwargs)
    none = estimate_memory("bp3", *shape, **kwargs)
    whole = 2 * 27 * 12 * shape[0]  # rank 0's matrix and hierarchy on the device
    assert pmg.device - none.device > SAFETY_MARGIN * (20 * 8 * 1.05 * shape[1] / 4 + whole)
    assert H100_FREE < pmg.device < H200_FREE
    assert pmg.host - none.host >= SAFETY_MARGIN * 2 * whole  # triplets, CSR, hierarchy


def test_the_estimate_counts_what_grows():
    """q-data only where stored; more ranks hold less each; int64 offsets past 2^31 nodes."""
    stored, fly = gen("bp3", 4, 100, "stored"), gen("bp3", 4, 100, "on_the_fly")
    qdata = 6 * 8 * 100**3 * 6**3  # 6 doubles per point
    assert stored.device - fly.device == pytest.approx(SAFETY_MARGIN * qdata, rel=0.01)
    assert gen("bp3", 4, 100, "stored", ranks=4).device < stored.device / 3
    small, large = gen("bp1", 1, 1289, "on_the_fly"), gen("bp1", 1, 1291, "on_the_fly")
    assert small.dofs < 2**31 < large.dofs  # offsets double in width
    assert large.device / large.dofs > small.device / small.dofs + 4
    cpu = estimate_memory("bp1", *box_shape("bp1", 6, 191), resource="/cpu/self/numba",
                          geometry="stored")  # fmt: skip
    assert cpu.device == 0 and cpu.host > gen("bp1", 6, 191, "stored").device


def test_refusal_line_has_the_numbers():
    estimate = MemoryEstimate(host=190e9, device=0, dofs=4_100_000_000)
    line = memory_refusal(estimate, 22e9, None, "BP3 p = 4 on 400^3 hex cells", "use fewer")
    assert line == (
        "BP3 p = 4 on 400^3 hex cells (4.1e9 DOFs) needs about 190 GB of host memory, "
        "22 GB available; use fewer"
    )
    assert memory_refusal(estimate, 200e9, None, "x", "y") is None
    both = MemoryEstimate(host=1e9, device=90e9, dofs=10**9)
    assert "of device memory per rank of 4, 80 GB" in memory_refusal(both, 1e12, 80e9, "x", "y", 4)


# --- available host memory ----------------------------------------------------------------


def test_cgroup_limit_minus_usage_is_the_room(tmp_path):
    """v2 (``memory.max``) and v1 (``memory.limit_in_bytes``), the least over the ancestors;
    ``max`` and v1's huge "unlimited" are no limit."""
    v2 = tmp_path / "v2" / "job" / "step"
    v2.mkdir(parents=True)
    (v2 / "memory.max").write_text("8000\n")
    (v2 / "memory.current").write_text("1000\n")
    (v2.parent / "memory.max").write_text("5000\n")
    (v2.parent / "memory.current").write_text("2000\n")
    (tmp_path / "v2" / "memory.max").write_text("max\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/job/step\n")
    assert cgroup_memory_room(tmp_path / "v2", proc) == 3000
    v1 = tmp_path / "v1" / "memory" / "box"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc.write_text("4:memory:/box\n1:cpu:/\n")
    assert cgroup_memory_room(tmp_path / "v1", proc) is None
    (v1 / "memory.limit_in_bytes").write_text("6000\n")
    (v1 / "memory.usage_in_bytes").write_text("500\n")
    assert cgroup_memory_room(tmp_path / "v1", proc) == 5500
    assert available_host_memory() > 0


# --- refusals from the shell --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["bp3", "--elements", "2000"],
        ["bp3", "--order", "4", "--elements", "400", "--ceed", "/cpu/self/numba"],
        ["bp1", "--elements", "2000", "--simplex", "--ceed", "/cpu/self/ref"],
    ],
    ids=" ".join,
)
def test_a_case_that_cannot_fit_is_refused_before_the_mesh(argv):
    run, seconds = bakeoff(*argv)
    assert_one_line_refusal(run, "GB of host memory", "available", "--force")
    assert seconds < 15  # nothing built: a 400^3 box alone takes minutes


def test_bench_parallel_refuses_before_the_first_case():
    run, seconds = bakeoff("bench-parallel", "--dofs", "1e12", "--ceed", "/cpu/self/ref")
    assert_one_line_refusal(run, "GB of host memory", "--dofs")
    assert seconds < 15


def test_mpiexec_refuses_on_every_rank_with_one_line():
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec")
    pytest.importorskip("mpi4py")
    run, _ = bakeoff("bp3", "--elements", "2000", launcher=("mpiexec", "-n", "2"), timeout=90)
    assert_one_line_refusal(run, "per rank of 2", "GB of host memory")


@pytest.fixture(scope="module")
def bad_meshes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("meshes")
    (folder / "empty.msh").write_text("")
    good = meshes.data_path("curved_tet10.msh").read_bytes()
    (folder / "truncated.msh").write_bytes(good[: len(good) // 3])
    return folder


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("missing.msh", ("not found", "missing.msh")),
        ("/etc/passwd", ("/etc/passwd", "not a mesh file")),
        ("empty.msh", ("empty.msh is empty",)),
        ("truncated.msh", ("truncated.msh", "not a mesh file")),
        (".", ("is a directory",)),
    ],
)
def test_an_unreadable_mesh_is_one_line(bad_meshes, name, words):
    run, _ = bakeoff("--mesh", str(bad_meshes / name))
    assert_one_line_refusal(run, *words)


def test_meshes_read_names_the_file_and_why(bad_meshes):
    for name in ("empty.msh", "truncated.msh"):
        with pytest.raises(meshes.MeshFileError, match=name):
            meshes.read(bad_meshes / name)
    assert issubclass(meshes.MeshFileError, ValueError)


@without_cupy
def test_a_missing_backend_or_extra_is_exit_2():
    run, _ = bakeoff("--ceed", "/gpu/cuda/gen")
    assert_one_line_refusal(run, "/gpu/cuda/gen", "unavailable")
    run, _ = bakeoff("bp3", "--elements", "2", "--preconditioner", "pmg", "--ceed", "/gpu/cuda")
    assert_one_line_refusal(run, "/gpu/cuda", "unavailable")


def test_an_unwritable_results_file_is_refused_before_the_first_case(tmp_path):
    run, seconds = bakeoff("sweep", "--problems", "bp3", "--orders", "4", "--out",
                           "/proc/nope.jsonl")  # fmt: skip
    assert_one_line_refusal(run, "/proc/nope.jsonl")
    assert seconds < 15
    run, _ = bakeoff("sweep", "--out", str(tmp_path / "no" / "dir" / "r.jsonl"))
    assert_one_line_refusal(run, "r.jsonl")


def test_help_gives_the_order_range_and_the_exit_statuses():
    run, _ = bakeoff("--help")
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    assert "polynomial order 1..8" in text and "--force" in text
    assert "exit status: 0 done" in text and "2 usage" in text
    run, _ = bakeoff("--order", "9")
    assert_one_line_refusal(run, "1..8")


def test_compile_line_only_when_kernels_were_compiled(tmp_path):
    """A second run with the same caches compiles nothing: no compile line, and the JSON
    says so (``kernels_compiled``); ``compile_s`` stays."""
    env = dict(os.environ, HOFEM_CACHE_DIR=str(tmp_path / "h"), NUMBA_CACHE_DIR=str(tmp_path))
    argv = ("bp1", "--order", "2", "--elements", "2", "--ceed", "/cpu/self/numba")
    first, _ = bakeoff(*argv, env=env)
    second, _ = bakeoff(*argv, env=env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert "compiling kernels, first run only: " in first.stdout
    assert "compiling kernels" not in second.stdout
    assert '"kernels_compiled": true' in first.stdout
    assert '"kernels_compiled": false, ' in second.stdout and '"compile_s": ' in second.stdout


# --- the library's own messages -----------------------------------------------------------


def test_ceed_lists_backends_and_prefixes():
    with pytest.raises(ValueError, match="prefix") as info:
        hf.Ceed("/nonsense")
    message = str(info.value)
    for name in ("/cpu/self/ref", "/gpu/cuda/gen", "/cpu/self,", "/gpu/cuda", "/cpu,", "/gpu,"):
        assert name in message + ",", message


def test_cg_names_the_argument_that_does_not_match():
    ceed = hf.Ceed("/cpu/self/ref")
    A = hf.mass(hf.H1Space(ceed, meshes.box(2, 3), 2))  # 125 DOFs
    b = np.ones(125)
    with pytest.raises(ValueError, match=r"^b must have shape \(125,\) to match A, got \(10,\)"):
        hf.cg(A, np.ones(10))
    with pytest.raises(ValueError, match=r"^x0 must have shape \(125,\) to match b, got \(3,\)"):
        hf.cg(A, b, x0=np.ones(3))
    M = hf.jacobi(hf.mass(hf.H1Space(ceed, meshes.box(1, 3), 2)))  # 27 DOFs
    with pytest.raises(ValueError, match=r"^M must have shape \(125, 125\) to match b, got"):
        hf.cg(A, b, M=M)
    x, info = hf.cg(A, b, M=hf.jacobi(A))
    assert info == 0 and x.shape == (125,)
