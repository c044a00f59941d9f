"""The laboratory (the repository's ``bakeoff/``, not in the wheel): its command line and
the side-by-side timing it shares.

Imported from the checkout (``python -m bakeoff`` runs from the repository root), also
when the tests run against an installed wheel.
"""

import json
import subprocess
import sys

import pytest
from lab import ROOT
from util import assert_usage_error, without_cupy

import hofem as hf
from bakeoff import __main__ as lab
from bakeoff import benchmark_gpu, compare_cpu
from bakeoff.compare import alternate, summarize


def test_problems_are_normalized():
    assert benchmark_gpu.parse_args(["--bp", "1", "3"]).problems == ["bp1", "bp3"]


BAD = [
    ["bench-cpu", "--orders", "0"],
    ["bench-cpu", "--problems", "bp2"],
    ["bench-gpu", "--ceed", "cuda"],
    ["bench-gpu", "--dofs", "-1e7"],
    ["tune-gemm", "--repeat", "0"],
    ["anchor-libceed", "--orders", "10"],
    ["compare-cpu", "--rounds", "0"],
    ["compare-cpu", "--problems", "bp7"],
    ["compare-gpu", "--ceed", "/gpu/cuda/fast"],
    ["compare-gpu", "--batch", "0"],
    ["compare-gpu", "--geometry", "auto"],
    ["compare-gpu", "--ceed", "/gpu/cuda/batched", "--geometry", "on_the_fly"],
    ["sweep"],  # the library's command: python -m hofem.bakeoff sweep
    [],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda argv: " ".join(argv) or "nothing")
def test_bad_values_exit_2_with_one_line(argv, capsys):
    assert_usage_error(lab.main, argv, capsys, "python -m bakeoff")


def test_help_from_the_repository_root():
    run = subprocess.run(
        [sys.executable, "-m", "bakeoff", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert all(command in run.stdout for command in lab.COMMANDS)


@without_cupy
def test_a_missing_gpu_is_one_line_not_a_traceback(capsys):
    assert lab.main(["bench-gpu", "--cases", "basis"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m bakeoff: ") and "gpu" in line


def test_ratios_are_medians_of_ratios_within_rounds():
    apply_times = {"ours": [1.0, 2.0, 4.0], "anchor": [3.0, 2.0, 5.0]}
    solve_times = {"ours": [10.0, 10.0, 80.0]}
    out = summarize(100, apply_times, solve_times, ["ours"], iterations=10)
    assert out["ratios"] == {"ours/anchor": 1.25}  # rounds 3, 1, 1.25; medians give 1.5
    assert out["cg_over_apply"] == {"ours": 1.0}  # rounds 1, 2, 0.5
    assert out["mdofs"] == {"ours": 100 / 2.0 / 1e6, "anchor": 100 / 3.0 / 1e6}


def test_alternate_warms_up_then_times_in_turn():
    calls = []
    applies = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    solves = {"a": lambda: calls.append("cg a")}

    def timer(fn, repeat):
        for _ in range(repeat):
            fn()
        return float(len(calls))

    apply_times, solve_times = alternate(applies, solves, rounds=2, batch=2, timer=timer)
    assert calls == ["a", "b", "cg a"] + 2 * ["a", "a", "b", "b", "cg a"]
    assert apply_times == {"a": [5.0, 10.0], "b": [7.0, 12.0]}
    assert solve_times == {"a": [8.0, 13.0]}


def test_compare_cpu_line(capsys):
    """The line has hofem's operators and the anchors that import: libCEED (the test extra
    installs it) and MFEM; each anchor's ratio is formed within a round."""
    import importlib.util

    argv = "--ceed /cpu/self/ref --problems bp3 --orders 2 --dofs 200 --rounds 2 --batch 1"
    compare_cpu.main(argv.split())
    (line,) = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    assert {"stored", "on_the_fly"} <= set(result["mdofs"])
    assert ("libceed" in result["mdofs"]) == (importlib.util.find_spec("libceed") is not None)
    assert set(result["cg_over_apply"]) == {"stored", "on_the_fly"}
    assert all(ratio > 0 for ratio in result["ratios"].values())


def test_compare_gpu_operators_agree(capsys):
    """compare-gpu's line on a GPU (libCEED anchors where this libCEED runs them): every
    operator's output equals gen's, and on-the-fly geometry is timed on gen only."""
    pytest.importorskip("cupy")
    from bakeoff import compare_gpu

    try:
        hf.Ceed("/gpu/cuda/gen")
    except Exception as exc:  # CuPy without a device
        pytest.skip(f"no CUDA device: {exc}")
    argv = "--problems bp3 --orders 2 --dofs 2e3 --rounds 2 --batch 1 --cg-iters 3"
    compare_gpu.main(argv.split())
    (line,) = capsys.readouterr().out.splitlines()
    result = json.loads(line)
    assert {"gen stored", "gen on_the_fly", "batched stored"} <= set(result["mdofs"])
    assert "batched on_the_fly" not in result["mdofs"]
    assert set(result["cg_over_apply"]) == {"gen stored", "gen on_the_fly", "batched stored"}
    assert result["max_rel_diff"] and max(result["max_rel_diff"].values()) < 1e-12


@pytest.mark.parametrize("cells", ["hex", "tet"])
@pytest.mark.parametrize("bp", ["bp1", "bp2", "bp3", "bp4", "bp5", "bp6"])
def test_libceed_anchor_is_hofems_matrix(bp, cells):
    """libCEED's operator of the anchor (its gallery QFunctions, its tensor or non-tensor
    basis) applies the matrix of hofem's reference operator of the same problem, on the
    same nodes, rule and component layout."""
    pytest.importorskip("libceed")
    import numpy as np

    from bakeoff import anchor_libceed
    from bakeoff.common import bp_form, bp_space
    from bakeoff.compare import active_basis

    ceed = anchor_libceed.open_ceed(anchor_libceed.RESOURCES)
    space = bp_space(hf.Ceed("/cpu/self/ref"), bp, 2, cells=cells, n=2)
    op, _ = bp_form(space, bp, "stored")
    basis = active_basis(op) if cells == "tet" else None
    u = np.random.default_rng(0).standard_normal(space.num_dofs)
    apply, output = anchor_libceed.bp_apply(ceed, bp, space, u, basis)
    apply()
    expected = op(u)
    assert np.abs(output() - expected).max() <= 1e-13 * np.abs(expected).max()


def test_vector_size_counts_every_component():
    """``bakeoff.common.vector_size`` (the zero vectors of ``dot_args``): a fused operator's
    own operator, every component of a component split and of a warp kernel that takes the
    components in turn (stand-ins: the kernels need a GPU to compile)."""
    from types import SimpleNamespace

    from bakeoff.common import vector_size
    from hofem.backends.cuda.component_split import ComponentSplitOperator
    from hofem.backends.cuda.operator_warp import WarpFusedOperator

    scalar = SimpleNamespace(_op=SimpleNamespace(shape=(125, 125)), num_blocks=2, layout="warp")
    assert vector_size(scalar) == 125
    assert vector_size(ComponentSplitOperator(scalar, 3, 125)) == 375
    in_turn = object.__new__(WarpFusedOperator)  # its attributes as __init__ sets them
    in_turn._op, in_turn._components, in_turn._comp_step = scalar._op, 3, 125
    assert vector_size(in_turn) == 375
    in_turn._components = 1
    assert vector_size(in_turn) == 125
