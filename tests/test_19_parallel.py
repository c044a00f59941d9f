"""The distributed layer under ``mpiexec -n 2`` and ``-n 3``: equal to serial, clear failures.

Each test runs ``tests/mpi/cases.py`` (or the CLI, or the docs example) as an
``mpiexec`` subprocess with a timeout, so a hang fails the test instead of
stalling the suite. Serial pieces (partitioners, blocks) are tested in-process.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hofem as hf
from hofem import meshes

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "mpi" / "cases.py"
TIMEOUT = 600

mpi4py = pytest.importorskip("mpi4py", reason="the MPI tests need mpi4py: pip install hofem[mpi]")
MPIEXEC = shutil.which(
    "mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
)
needs_mpiexec = pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (pip install mpich)")
RANKS = [2, 3]


def mpiexec(n, *args, timeout=TIMEOUT):
    """Run ``python ARGS`` on ``n`` ranks; return the completed process (never hangs)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    return subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_distributed_equals_serial(n, ceed):
    """BP1/BP3, hex and tet boxes and Gmsh files, p = 1..4: apply, CG solution and iterations."""
    if ceed.resource.startswith("/gpu"):
        pytest.skip("GPU ranks are tested on the GPU machine (docs/parallel.md)")
    run = mpiexec(n, str(CASES), "equal", ceed.resource)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "OK equal"


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("resource", ["/cpu/self/ref", "/cpu/self/numba"])
def test_cg_variants_equal_serial_with_one_reduction(n, resource):
    """hf.cg(variant=...) on ParOperator: the serial solution and count, one all-reduce each."""
    if resource not in hf.available():
        pytest.skip(f"{resource} is not available here")
    run = mpiexec(n, str(CASES), "variants", resource)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "OK variants"


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("resource", ["/cpu/self/ref", "/cpu/self/numba"])
@pytest.mark.parametrize("group", ["pmg", "pmg_galerkin", "pmg_assembly"])
def test_pmg_equals_serial(n, resource, group):
    """hf.pmg on ParOperator: the serial solution and iterations (rediscretized and Galerkin
    levels); the levels' diagonals and order-1 matrix equal the generic assembly."""
    if resource not in hf.available():
        pytest.skip(f"{resource} is not available here")
    run = mpiexec(n, str(CASES), group, resource)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == f"OK {group}"


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_device_cg_exchange_segments_are_p_and_its_transpose(n):
    """The device CG's in-place L-vector messages (one per neighbour and component), played
    over MPI on host arrays, move what ``Exchange.prolong`` and ``prolong_transpose`` do."""
    run = mpiexec(n, str(CASES), "l_path", "/cpu/self/ref")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "OK l_path"


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_ipc_segments_are_p_and_its_transpose(n):
    """The "ipc" transport's L-vector messages, paired as ``IpcChannel`` pairs them (each
    sender writes at the receiver's offsets), played over MPI on host arrays: ``P`` and
    ``Pᵀ``, one component (in place) and three (staged ghosts)."""
    run = mpiexec(n, str(CASES), "ipc_plan", "/cpu/self/ref")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().splitlines()[-1] == "OK ipc_plan"


def test_transport_resolution_and_its_errors():
    """ "auto" is "ipc" for several GPU ranks of one node, NCCL for one rank or several
    nodes, MPI for host arrays or shared GPUs; each refusal is one line naming the
    argument and the fix."""
    from hofem.parallel.exchange import resolve_transport

    gpu = ["nccl", "ipc", "mpi"]
    assert resolve_transport("auto", True, gpu, ["a", "a"]) == "ipc"
    assert resolve_transport("auto", True, gpu, ["a", "a", "b"]) == "nccl"
    assert resolve_transport("auto", True, gpu, ["a"]) == "nccl"
    assert resolve_transport("auto", True, gpu, ["a", "a"], shared_gpu=True) == "mpi"
    assert resolve_transport("auto", False, ["mpi"]) == "mpi"
    assert resolve_transport("auto", True, ["mpi"]) == "mpi"  # CuPy without NCCL
    assert resolve_transport("ipc", True, gpu, ["a", "a"]) == "ipc"
    assert resolve_transport("nccl", True, gpu, ["a", "b"]) == "nccl"
    assert resolve_transport("mpi", True, gpu, ["a", "a"], shared_gpu=True) == "mpi"
    refused = [
        (("tcp", True, gpu), "transport 'tcp' is unknown: choose from"),
        (("ipc", False, ["mpi"]), "transport 'ipc' moves GPU arrays, and these vectors are host"),
        (("nccl", False, ["mpi"]), "use transport='mpi' (or 'auto'), or a /gpu backend"),
        (("ipc", True, ["mpi"]), "transport 'ipc' needs CuPy with NCCL"),
        (("ipc", True, gpu, ["a", "a"], True), "transport 'ipc' needs one GPU per rank"),
        (("nccl", True, gpu, ["a", "a"], True), "or use transport='mpi'"),
        (("ipc", True, gpu, ["a", "b", "a"]), "ranks run on 2 nodes: use transport='nccl'"),
    ]
    for args, message in refused:
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            resolve_transport(*args)
        assert "\n" not in str(error.value)


def test_host_vectors_refuse_the_device_transports():
    """An exchange of host arrays over "ipc" or "nccl" stops at construction (one rank)."""
    from mpi4py import MPI

    from hofem import parallel as par

    ceed = hf.Ceed("/cpu/self/ref")
    local = par.box_local(MPI.COMM_SELF, 2)
    for transport in ("ipc", "nccl"):
        with pytest.raises(ValueError, match=f"transport '{transport}' moves GPU arrays"):
            par.ParH1Space(ceed, local, 1, comm=MPI.COMM_SELF, transport=transport)
    assert par.ParH1Space(ceed, local, 1, comm=MPI.COMM_SELF).exchange.transport == "mpi"


def test_ipc_copies_pair_each_send_with_the_receivers_segment():
    """The ``k``-th segment sent to a rank lands at that rank's ``k``-th receive offset;
    segments that differ between the two sides are refused."""
    from hofem.parallel.ipc import pair_copies, segments_by_rank

    sends = [(1, 0, 4), (2, 4, 3), (1, 7, 2)]
    assert segments_by_rank(sends) == {1: [(0, 4), (7, 2)], 2: [(4, 3)]}
    remote = {1: [(10, 4), (30, 2)], 2: [(5, 3)]}
    assert pair_copies(sends, remote, rank=0) == [(1, 0, 10, 4), (1, 7, 30, 2), (2, 4, 5, 3)]
    with pytest.raises(ValueError, match=r"rank 0 sends segments of \[4, 2\] values to rank 1"):
        pair_copies(sends, {1: [(10, 2), (30, 4)], 2: [(5, 3)]}, rank=0)
    with pytest.raises(ValueError, match=r"which receives \[\] from it"):
        pair_copies(sends, {1: [(10, 4), (30, 2)]}, rank=0)


def test_ipc_mappings_open_each_allocation_once_and_replace_stale_ones():
    """One mapping per neighbour allocation, counted; a new allocation over the addresses of
    a mapped one under another handle (the neighbour freed it) closes the stale mapping
    before opening (CUDA refuses a second mapping: "resource already mapped")."""
    from hofem.parallel.ipc import Mappings

    opened, closed = [], []
    mappings = Mappings(lambda h: opened.append(h) or 1000 * len(opened), closed.append)
    a, b = (1, 0x7000, 0x100), (2, 0x7000, 0x100)  # two ranks, same addresses
    assert mappings.open(a, b"a") == 1000
    assert mappings.open(a, b"a") == 1000 and opened == [b"a"]
    assert mappings.open(b, b"b") == 2000
    assert mappings.open((1, 0x7100, 0x100), b"n") == 3000  # adjacent: both stay
    mappings.close(a, b"a")
    assert closed == []  # one user left
    assert mappings.open((1, 0x7080, 0x100), b"c") == 4000  # over a and the adjacent one
    assert closed == [1000, 3000] and len(mappings) == 2
    mappings.close(a, b"a")  # a stale user: leaves the others alone
    assert closed == [1000, 3000] and len(mappings) == 2
    mappings.close((1, 0x7080, 0x100), b"c")
    mappings.close(b, b"b")
    assert closed == [1000, 3000, 4000, 2000] and len(mappings) == 0

    def refuse(handle):
        raise OSError("cudaErrorAlreadyMapped: resource already mapped")

    failing = Mappings(refuse, closed.append)
    with pytest.raises(RuntimeError, match=r"mapping rank 1's allocation at 0x7000 \(256 bytes"):
        failing.open(a, b"a")


def test_ipc_channel_handshake_maps_the_neighbours_arrays(monkeypatch):
    """Two ranks' :class:`IpcChannel` handshakes (the flags, then a receive array), run in
    two threads over an in-process wire with CUDA's IPC calls faked: each rank writes its
    flag and its segments at the addresses where the neighbour's arrays are mapped, at the
    neighbour's offsets. The message formats of the set-up, which otherwise run on GPUs."""
    import collections
    import queue
    import threading
    import types

    from hofem.parallel import ipc

    wire = collections.defaultdict(queue.Queue)  # (source, destination, tag) -> messages

    def swap(comm, messages, sources, tag):
        for q, message in messages.items():
            wire[comm.rank, q, tag].put(message)
        return {q: wire[q, comm.rank, tag].get(timeout=10) for q in sources}

    pointers = {b"flags0": 0x10000, b"flags1": 0x20000, b"recv0": 0x30000, b"recv1": 0x40000}
    mappings = ipc.Mappings(pointers.__getitem__, lambda pointer: None)
    runtime = types.SimpleNamespace(deviceGetPCIBusId=lambda device: "0000:00:00.0")
    fake_cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=runtime, Device=lambda: types.SimpleNamespace(id=0)))  # fmt: skip
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(ipc, "neighbour_swap", swap)
    monkeypatch.setattr(ipc, "_mappings", lambda: mappings)
    monkeypatch.setattr(ipc, "_check_peer", lambda *args: None)
    monkeypatch.setattr(ipc, "_check_device_array", lambda array, name: None)
    # a fake array: its handle, (allocation address, size) in its own process, byte offset
    monkeypatch.setattr(ipc, "_describe", lambda a: (a.handle, (a.base, 4096), a.offset))

    def array(handle, base, offset):
        data = types.SimpleNamespace(ptr=base + offset)
        return types.SimpleNamespace(handle=handle, base=base, offset=offset, data=data)

    # rank 0 sends 3 values to rank 1, which receives them at offset 5; rank 1 sends 2,
    # which rank 0 receives at offset 3
    plans = {0: ([(1, 0, 3)], [(1, 3, 2)]), 1: ([(0, 0, 2)], [(0, 5, 3)])}
    channels, results = {}, {}
    for r, (sends, recvs) in plans.items():
        channel = object.__new__(ipc.IpcChannel)
        channel.comm, channel.tag = types.SimpleNamespace(rank=r), 23
        channel._sends, channel._recvs = sends, recvs
        channel._sources = sorted(ipc.segments_by_rank(recvs))
        channel._targets = sorted(ipc.segments_by_rank(sends))
        channel._mapped, channel._targets_of = [], {}
        channel._flags = array(f"flags{r}".encode(), 0x1000 * (r + 1), 16)
        channels[r] = channel

    def handshake(r):
        flags = channels[r]._exchange_flags()
        recv = array(f"recv{r}".encode(), 0x5000 * (r + 1), 64)
        results[r] = flags, channels[r]._register(recv)

    threads = [threading.Thread(target=handshake, args=(r,)) for r in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert set(results) == {0, 1}
    # rank 0's flag slot at rank 1: rank 1's flags mapped here, its offset 16, slot 0
    assert results[0] == ({1: 0x20000 + 16}, [(1, 0, 0x40000 + 64 + 8 * 5, 3)])
    assert results[1] == ({0: 0x10000 + 16}, [(0, 0, 0x30000 + 64 + 8 * 3, 2)])
    assert len(mappings) == 4  # each rank's flags and receive array, mapped once each


def test_ipc_channel_refuses_neighbours_it_cannot_map():
    """A neighbour on another node, or on this rank's GPU: one line naming the fix."""
    from hofem.parallel.ipc import _check_peer

    _check_peer(0, ("node-a", "0000:19:00.0"), 1, ("node-a", "0000:3b:00.0"))
    with pytest.raises(ValueError, match=r"rank 1 runs on node 'node-b' .* use transport='nccl'"):
        _check_peer(0, ("node-a", "0000:19:00.0"), 1, ("node-b", "0000:3b:00.0"))
    with pytest.raises(ValueError, match=r"ranks 1 and 0 use one GPU \(0000:19:00.0\)"):
        _check_peer(0, ("node-a", "0000:19:00.0"), 1, ("node-a", "0000:19:00.0"))


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_bad_input_fails_on_every_rank(n):
    run = mpiexec(n, str(CASES), "errors", "/cpu/self/ref")
    assert run.returncode == 0, run.stdout + run.stderr
    for name, message in [
        ("more ranks than cells", f"cannot split a box of 1x1x1 cells into {n} non-empty blocks"),
        ("mesh smaller than ranks", f"cannot split a mesh of 1 cells into {n} non-empty parts"),
        ("unreadable file", "/nonexistent/mesh.msh"),
        ("backends differ", "ranks use different backends"),
    ]:
        for rank in range(n):
            line = next(
                (l for l in run.stdout.splitlines() if l.startswith(f"rank {rank}: {name}:")), ""
            )
            assert "ParallelError: rank " in line and message in line, (name, rank, run.stdout)


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_exception_on_one_rank_ends_all(n):
    run = mpiexec(n, str(CASES), "crash", "/cpu/self/ref", timeout=120)
    assert run.returncode != 0
    assert f"hofem: error on rank {n - 1}: planted failure on the last rank" in run.stderr
    assert "OK crash" not in run.stdout


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_cli_runs_distributed(n, tmp_path):
    """``mpiexec -n N python -m hofem.bakeoff``: rank 0 prints once, ``ranks`` in the JSON."""
    args = [
        "-m",
        "hofem.bakeoff",
        "bp3",
        "--order",
        "2",
        "--elements",
        "3",
        "--ceed",
        "/cpu/self/ref",
    ]
    run = mpiexec(n, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    assert sum(line.startswith("BP3 on 27 hex cells") for line in lines) == 1
    assert re.search(rf"^{n} ranks \(mpi halos\): owned DOFs per rank", run.stdout, re.M)
    result = json.loads(lines[-1])
    serial = json.loads(
        subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, check=True, cwd=ROOT
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert result["ranks"] == n and serial["ranks"] == 1
    assert (
        result["dofs"] == serial["dofs"] and abs(result["iterations"] - serial["iterations"]) <= 1
    )
    assert result["l2_error"] == pytest.approx(serial["l2_error"], rel=1e-6)
    # a file mesh, partitioned
    mesh = str(meshes.data_path("lshape_hex.msh"))
    run = mpiexec(
        n, "-m", "hofem.bakeoff", "bp3", "--order", "2", "--mesh", mesh, "--ceed", "/cpu/self/ref"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1])["elements"] == 192


@pytest.mark.mpi
@needs_mpiexec
def test_cli_error_is_one_line_on_every_rank():
    run = mpiexec(2, "-m", "hofem.bakeoff", "bp3", "--elements", "1", "--ceed", "/cpu/self/ref")
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "python -m hofem.bakeoff: error: rank 0: cannot split a box of 1x1x1 cells into 2 "
        "non-empty blocks (one per rank): use fewer ranks or more elements (2 ranks failed)"
    )


@pytest.mark.mpi
@needs_mpiexec
def test_docs_parallel_example_runs_on_two_ranks(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "parallel.md").read_text(), re.S)
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    run = mpiexec(2, str(script))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "CG converged" in run.stdout


# --- serial pieces ---------------------------------------------------------------------------
def test_rcb_parts_are_balanced_and_compact():
    from hofem.parallel.partition import rcb

    points = np.random.default_rng(0).random((1000, 3))
    for parts in (1, 2, 3, 5, 8):
        part = rcb(points, parts)
        counts = np.bincount(part, minlength=parts)
        assert counts.max() - counts.min() <= 1
    with pytest.raises(ValueError, match="cannot split 3 cells into 4 non-empty parts"):
        rcb(points[:3], 4)


def test_dual_graph_of_a_box():
    from hofem.parallel.partition import dual_graph

    xadj, adjncy = dual_graph(meshes.box(3))
    degree = np.diff(xadj)
    assert degree.sum() == 2 * 3 * 3 * 3 * 2  # interior faces, counted from both cells
    assert degree.min() == 3 and degree.max() == 6
    assert set(adjncy[xadj[13] : xadj[14]]) == {4, 10, 12, 14, 16, 22}  # the centre cell


def test_box_blocks_tile_the_box():
    """The blocks of box_block cover the cells of box exactly, with the same coordinates."""
    full = meshes.box((4, 3, 2), distort=0.1, order=2)
    pieces = [
        meshes.box_block((4, 3, 2), [(0, 2), (0, 3), (0, 2)], distort=0.1, order=2),
        meshes.box_block((4, 3, 2), [(2, 4), (0, 3), (0, 2)], distort=0.1, order=2),
    ]
    cells = np.vstack([ids[m.cells] for m, ids in pieces])
    assert np.array_equal(np.sort(np.sort(cells, 1), 0), np.sort(np.sort(full.cells, 1), 0))
    for m, ids in pieces:
        np.testing.assert_array_equal(m.points, full.points[ids])
    assert sum(len(m.facets) for m, _ in pieces) == len(full.facets)  # no interface facets
    with pytest.raises(ValueError, match="is empty"):
        meshes.box_block(2, [(1, 1), (0, 2), (0, 2)])


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("n", [(25, 25, 25), (4, 3, 7), (5, 9)])
def test_uneven_slabs_split_cells_not_layers(n, size):
    """A box whose layers do not divide among the ranks is cut into runs of cells that
    differ by at most one cell, each built from at most 2 dim - 1 blocks in order."""
    from hofem.parallel.distribute import _block_grid, _lex_boxes, _uneven_slabs, balanced_slabs

    total = int(np.prod(n))
    starts = balanced_slabs(total, size)
    counts = np.diff(starts)
    assert counts.max() - counts.min() <= 1 and starts[-1] == total
    strides = np.cumprod([1, *n[:-1]])
    for r in range(size):
        boxes = _lex_boxes(int(starts[r]), int(starts[r + 1]), n)
        assert 1 <= len(boxes) <= 2 * len(n) - 1
        cells = []
        for box in boxes:  # each box's cells x fastest, as box_block makes them
            grids = np.meshgrid(*[np.arange(a, b) for a, b in box], indexing="ij")
            cells.append(sum(g * s for g, s in zip(grids, strides, strict=True)).ravel(order="F"))
        np.testing.assert_array_equal(np.concatenate(cells), np.arange(starts[r], starts[r + 1]))
    if n == (25, 25, 25):  # whole layers would be 12 and 13 (or 8, 8, 9): uneven slabs
        assert _uneven_slabs(n, _block_grid(n, size))


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n", RANKS)
def test_sweep_under_mpiexec(n, tmp_path):
    """``mpiexec -n N python -m hofem.bakeoff sweep``: ranks in every line, resumable, verified."""
    from hofem.bakeoff.results import convergence_rates, read_results, schema_errors

    out = tmp_path / "results.jsonl"
    sweep = ["-m", "hofem.bakeoff", "sweep", "--problems", "bp1", "bp3", "--orders", "1", "2"]
    sweep += ["--elements", "1", "3", "4", "--ceed", "/cpu/self/ref", "--out", str(out)]
    run = mpiexec(n, *sweep)
    records = read_results(out)
    assert len(records) == 12, run.stdout + run.stderr
    assert run.returncode == 1  # the n = 1 boxes cannot be split: recorded as failed
    for record in records:
        assert record["ranks"] == n and not schema_errors(record)
        if record["elements_1d"] == 1:
            assert record["status"] == "failed" and "cannot split a box" in record["reason"]
        else:
            assert record["status"] == "ok" and record["converged"]
    for (bp, p, *_), pairs in convergence_rates(records).items():
        assert pairs[-1][2] > p + 1 - 0.5, (bp, p, pairs)
    again = mpiexec(n, *sweep, "--progress", "lines")
    assert f"0 cases to run on {n} ranks, 12 already in" in again.stderr
    assert len(read_results(out)) == 12


def test_metis_cuts_fewer_facets_than_rcb():
    """On an unstructured mesh METIS's parts share fewer facets; both cover every cell."""
    pytest.importorskip("pymetis", reason="METIS partitions need pymetis")
    from hofem.parallel.partition import dual_graph, partition

    mesh = meshes.read(meshes.data_path("lshape_hex.msh"))
    xadj, adjncy = dual_graph(mesh)
    rows = np.repeat(np.arange(mesh.num_cells), np.diff(xadj))
    cuts = {}
    for method in ("rcb", "metis"):
        part = partition(mesh, 4, method)
        assert np.array_equal(np.unique(part), np.arange(4))
        assert np.bincount(part).max() <= 1.1 * mesh.num_cells / 4
        cuts[method] = np.count_nonzero(part[rows] != part[adjncy]) // 2
    assert 0 < cuts["metis"] <= cuts["rcb"], cuts
    with pytest.raises(ValueError, match="partition method must be one of"):
        partition(mesh, 2, "scotch")


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("geometry", ["stored", "on_the_fly"])
def test_bench_parallel_line(geometry):
    """``bench-parallel``: one JSON line from rank 0 with the scaling and memory keys."""
    args = ["-m", "hofem.bakeoff", "bench-parallel", "--ceed", "/cpu/self/ref", "--bp", "bp3"]
    args += ["--order", "2", "--dofs", "3000", "--iterations", "3", "--geometry", geometry]
    run = mpiexec(2, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1, lines
    result = json.loads(lines[0])
    assert result["ranks"] == 2 and result["geometry_used"] == geometry
    assert result["iterations"] == 3 and result["dofs"] == 15**3  # 7 cells of p = 2 a side
    for key in ("host_bytes_per_local_dof", "footprint_bytes_per_local_dof", "dof_balance"):
        assert result[key] > 0, key
    bad = mpiexec(2, *args[:-1], "sideways")
    assert bad.returncode == 2
    assert "--geometry: invalid choice: 'sideways'" in bad.stderr


@pytest.mark.mpi
@needs_mpiexec
def test_bench_parallel_solves_to_rtol():
    """``--rtol``: the solve runs to the tolerance (``--iterations`` the cap) and the line
    says whether it converged; a cap too small exits 1 with ``converged`` false."""
    args = ["-m", "hofem.bakeoff", "bench-parallel", "--ceed", "/cpu/self/ref", "--bp", "bp3"]
    args += ["--order", "2", "--dofs", "3000", "--rtol", "1e-8", "--jacobi"]
    lines = {}
    for cap, status in (("200", 0), ("3", 1)):
        run = mpiexec(2, *args, "--iterations", cap)
        assert run.returncode == status, run.stdout + run.stderr
        lines[cap] = json.loads(run.stdout.strip().splitlines()[-1])
    solved, capped = lines["200"], lines["3"]
    assert solved["converged"] and solved["rtol"] == 1e-8 and 3 < solved["iterations"] < 200
    assert solved["time_to_solution_s"] >= solved["solve_s"] > 0
    assert not capped["converged"] and capped["iterations"] == 3


class _OneRank:
    """Rank ``rank`` of ``size`` for the box numberings, which send no message."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def allgather(self, value):
        return [value] * self.size


def _lattice_points(numbering, n, p):
    """Box lattice coordinates ``(num_nodes, dim)`` of a numbering's nodes (unit box, corner
    0 of every cell lowest)."""
    mesh = numbering.mesh
    corner = np.rint(mesh.points[mesh.cells[:, 0]] * np.asarray(n) * p).astype(np.int64)
    points = corner[:, None, :] + numbering.node_lattice[None, :, :]  # (cells, P, dim)
    out = np.empty((numbering.num_nodes, len(n)), dtype=np.int64)
    out[numbering.offsets.ravel()] = points.reshape(-1, len(n))
    return out


@pytest.mark.parametrize("p", [1, 2, 4])
@pytest.mark.parametrize(
    ("n", "size", "runs"),
    [
        ((4, 3, 5), 1, False),
        ((4, 3, 5), 2, False),
        ((4, 4, 6), 4, False),
        ((6, 5), 3, False),
        ((7,), 2, True),
        ((3, 3, 7), 2, True),
        ((2, 2, 7), 3, True),
    ],
)
def test_box_numbering_owner_order_is_the_serial_order(n, size, runs, p):
    """Blocks and runs of cells: one lattice point has one global id on every rank, each
    owner's ids are contiguous and follow the serial box numbering's order of its points
    (class by class, for locality), and every send list is its receiver's ghosts of that
    owner, in order. One rank: the serial numbering."""
    from hofem.parallel.distribute import box_local
    from hofem.parallel.numbering import distributed_numbering

    serial = hf.meshes.h1_numbering(meshes.box(n, len(n)), p)
    side = [m * p + 1 for m in n]
    serial_id = np.empty(int(np.prod(side)), dtype=np.int64)  # by lattice point, x fastest
    flat = _lattice_points(serial, n, p) @ np.cumprod([1, *side[:-1]])
    serial_id[flat] = np.arange(serial.num_nodes)
    gid = np.full(len(serial_id), -1, dtype=np.int64)
    local = [box_local(_OneRank(r, size), n, len(n)) for r in range(size)]
    assert all((m.box_ranges is not None) == runs for m in local)
    parts = [distributed_numbering(_OneRank(r, size), m, p) for r, m in enumerate(local)]
    if size == 1:
        np.testing.assert_array_equal(parts[0].local.offsets, serial.offsets)
    for rank, part in enumerate(parts):
        ids = _lattice_points(part.local, n, p) @ np.cumprod([1, *side[:-1]])
        seen = gid[ids] >= 0
        np.testing.assert_array_equal(gid[ids][seen], part.global_ids[seen])
        gid[ids] = part.global_ids
        assert np.all(np.diff(serial_id[ids[: part.num_owned]]) > 0), rank
        for q, nodes in zip(part.send_ranks, part.send_nodes, strict=True):
            other = parts[q]
            k = int(np.flatnonzero(other.recv_ranks == rank)[0])
            a = int(other.recv_counts[:k].sum())
            ghosts = other.ghost_global[a : a + other.recv_counts[k]]
            np.testing.assert_array_equal(part.first_global + nodes, ghosts)
    np.testing.assert_array_equal(np.sort(gid), np.arange(len(gid)))
    np.testing.assert_array_equal(
        [p.first_global for p in parts], np.cumsum([0] + [p.num_owned for p in parts[:-1]])
    )
