"""The bake-off command line: sweep (schema, resume, progress, skips), plot, bad values, timing.

The sweep and plot run as users type them (subprocesses, stderr not a
terminal); argument checks run in-process on every command's parser.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from util import assert_usage_error, without_cupy

import hofem as hf
from hofem import meshes
from hofem.bakeoff import __main__ as cli
from hofem.bakeoff import plot, sweep
from hofem.bakeoff.problems import (
    DEFAULT_RTOL,
    _minus_laplacian_exact,
    exact_solution,
    setup,
    solve,
)
from hofem.bakeoff.results import SCHEMA, rate_lines, read_results, schema_errors

SWEEP = [
    *("sweep --problems bp1 3 --orders 1 2 --elements 2 3".split()),
    *("--ceed /cpu/self/ref /cpu/self/numba".split()),
]
REQUIRED = ("bp", "p", "dofs", "backend", "iterations", "dofs_x_iter_per_s", "l2_error")


def bakeoff(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "hofem.bakeoff", *args],
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A tiny sweep (2 problems x 2 orders x 2 sizes x ref, numba) and its process."""
    out = tmp_path_factory.mktemp("sweep") / "results.jsonl"
    run = bakeoff(*SWEEP, "--out", str(out))
    return out, run


def test_sweep_lines_match_the_schema_and_verify(swept):
    out, run = swept
    assert run.returncode == 0, run.stderr
    records = read_results(out)
    assert len(records) == 16
    for r in records:
        assert schema_errors(r) == [], r
        assert set(REQUIRED) <= set(r) and r["status"] == "ok" and r["converged"]
        assert r["ranks"] == 1 and r["dofs"] == (r["elements_1d"] * r["p"] + 1) ** 3
    by_case = {(r["bp"], r["p"], r["elements_1d"], r["backend"]): r for r in records}
    for (bp, p, n, backend), r in by_case.items():
        if n == 2:  # the error falls with h; both backends agree
            assert by_case[bp, p, 3, backend]["l2_error"] < r["l2_error"]
            other = by_case[bp, p, n, "/cpu/self/ref"]["l2_error"]
            assert r["l2_error"] == pytest.approx(other, rel=1e-8)
    rates = [line for line in run.stdout.splitlines() if "L2 rate" in line]
    assert len(rates) == 8
    for line in rates:  # "bp1 p=1 hex /cpu/self/ref auto: L2 rate 2->3: 2.03 (expected 2)"
        p = int(line.split()[1][2:])
        assert p + 0.5 < float(line.split(": ")[-1].split()[0]) < p + 1.3, line


def test_rates_at_the_rounding_floor_are_marked():
    """A rate whose finer error is at fp64's floor is flagged, not read as a failed order."""
    base = {"status": "ok", "bp": "bp1", "p": 6, "cell": "hex", "ceed": "/gpu/cuda/gen",
            "ranks": 1, "rtol": 1e-14, "preconditioner": "none"}  # fmt: skip
    errors = {8: 1e-9, 16: 6e-12, 32: 5e-14}
    records = [dict(base, elements_1d=n, l2_error=e) for n, e in errors.items()]
    (line,) = rate_lines(records)
    assert line.startswith("bp1 p=6 hex /gpu/cuda/gen stored: L2 rate 8->16: 7.38, 16->32: 6.91 (")
    assert line.count("(rounding floor)") == 1 and line.endswith("(expected 7)")


def test_progress_is_plain_lines_off_a_terminal(swept):
    _, run = swept
    lines = run.stderr.splitlines()
    assert "\r" not in run.stderr and "\x1b" not in run.stderr  # no bar, no cursor moves
    assert lines[0] == f"16 cases to run, 0 already in {swept[0]}"
    assert [line.split()[0] for line in lines[1:]] == [f"[{i}/16]" for i in range(1, 17)]
    assert all("ETA" in line for line in lines[1:])


def test_second_sweep_resumes_without_recomputing(swept):
    out, _ = swept
    before = out.read_text()
    run = bakeoff(*SWEEP, "--out", str(out), "--progress", "off")
    assert run.returncode == 0 and run.stderr == ""
    assert out.read_text() == before  # nothing appended, nothing recomputed


def test_plot_writes_images_and_a_table(swept, tmp_path):
    out, _ = swept
    run = bakeoff("plot", str(out), "--out", str(tmp_path / "figures"))
    assert run.returncode == 0, run.stderr
    written = run.stdout.split()
    images = [f for f in written if f.endswith(".png")]
    names = {os.path.basename(f) for f in images}
    assert {
        "throughput_hex_cpu-self-numba.png",
        "time_per_iteration_hex_cpu-self-ref.png",
        "ratio_hex_cpu-self-numba_over_cpu-self-ref.png",
    } <= names
    for f in images:
        with open(f, "rb") as image:
            data = image.read()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    table = (tmp_path / "figures" / "results.md").read_text()
    assert table.count("### BP") == 4 and "| 2 | 3 | 343 |" in table


def test_plot_separates_devices(swept, tmp_path):
    """A results file of two devices: one figure per device, titled and named by it."""
    out, _ = swept
    mixed = tmp_path / "mixed.jsonl"
    lines = out.read_text().splitlines()
    moved = [json.loads(line) for line in lines if '"/cpu/self/numba"' in line]
    for record in moved:  # the same cases again, as if measured on a second machine
        record.update(device="Other CPU", elements_1d=record["elements_1d"] + 10)
    mixed.write_text("\n".join(lines + [json.dumps(r) for r in moved]) + "\n")
    run = bakeoff("plot", str(mixed), "--out", str(tmp_path / "figures"))
    assert run.returncode == 0, run.stderr
    names = {os.path.basename(f) for f in run.stdout.split()}
    device = json.loads(lines[0])["device"]
    assert f"throughput_hex_cpu-self-numba_{plot._slug(device)}.png" in names
    assert "throughput_hex_cpu-self-numba_Other-CPU.png" in names
    assert "ratio_hex_cpu-self-numba_over_cpu-self-ref_Other-CPU.png" not in names  # no ref there
    table = (tmp_path / "figures" / "results.md").read_text()
    assert "/cpu/self/numba (Other CPU)" in table and f"/cpu/self/numba ({device})" in table


def test_a_case_that_will_not_fit_is_skipped_with_the_reason(tmp_path):
    out = tmp_path / "r.jsonl"
    argv = ["--problems", "bp2", "--orders", "3", "--elements", "4", "--ceed", "/cpu/self/ref"]
    argv += ["--out", str(out), "--max-memory", "0.001", "--in-process", "--progress", "off"]
    assert sweep.main(argv) == 0
    (record,) = read_results(out)
    assert schema_errors(record) == []
    assert record["status"] == "skipped" and record["iterations"] is None
    assert record["memory_estimate_bytes"] > 1e6 and "0.001 GB available" in record["reason"]


@pytest.mark.parametrize(("cell", "resource"), [("tet", "/cpu/self/ref"), ("hex", "/cpu/self/ref")])
def test_the_memory_estimate_bounds_the_measured_peak(cell, resource):
    """The estimate is above a case's measured peak (maximum resident set of its own
    process), and within a factor 2.5 of it: the sweep neither runs what will not fit
    nor skips what would (the tet estimate was 3.2 times this peak, 30 times at 1e6 DOFs)."""
    n = 36  # 5e4 DOFs; tets: 2.8e5 cells, q-data 0.36 GB, peak about 1.5 GB
    script = f"""
        import json
        from hofem.bakeoff import sweep
        from hofem.memory import peak_rss_bytes
        case = dict(bp="bp3", p=1, cell="{cell}", elements_1d={n}, ceed="{resource}",
                    geometry="stored", ranks=1, rtol=1e-6, preconditioner=None, maxiter=5,
                    repeat=1)
        record = sweep.run_case(case)
        print(json.dumps([record["status"], record["memory_estimate_bytes"], peak_rss_bytes()]))
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, check=True
    )
    status, estimate, peak = json.loads(out.stdout.splitlines()[-1])
    assert status == "ok"
    assert peak < estimate < 2.5 * peak


def test_a_case_past_its_timeout_is_recorded_and_the_sweep_goes_on(tmp_path):
    out = tmp_path / "r.jsonl"
    argv = ["--problems", "bp1", "--orders", "1", "2", "--elements", "2", "--ceed"]
    argv += ["/cpu/self/ref", "--out", str(out), "--timeout", "0.01", "--progress", "off"]
    assert sweep.main(argv) == 1
    records = read_results(out)
    assert [r["status"] for r in records] == ["timeout", "timeout"]
    assert all(schema_errors(r) == [] and "0.01 s" in r["reason"] for r in records)


def test_schema_errors_catch_a_bad_line():
    record = dict.fromkeys(SCHEMA)
    assert "missing 'bp'" not in schema_errors(record)
    assert "'p' = None is not int" in schema_errors(record)
    assert "missing 'bp'" in schema_errors({})


@pytest.mark.parametrize(
    ("parse", "argv", "expected"),
    [
        (cli.parse_args, ["3"], "bp3"),
        (cli.parse_args, ["BP5"], "bp5"),
        (sweep.parse_args, ["--problems", "1", "bp3"], ["bp1", "bp3"]),
    ],
)
def test_problems_are_normalized(parse, argv, expected):
    args = parse(argv)
    assert (args.bp if parse is cli.parse_args else args.problems) == expected


BAD = [
    ["bp7"],
    ["7"],
    ["--order", "0"],
    ["--order", "9"],
    ["--order", "two"],
    ["--ceed", "/cpu/self/fast"],
    ["--rtol", "0"],
    ["--rtol", "-1e-8"],
    ["--elements", "-2"],
    ["sweep", "--problems", "bp9"],
    ["sweep", "--orders", "1", "9"],
    ["sweep", "--elements", "-1"],
    ["sweep", "--dofs", "-5"],
    ["sweep", "--ceed", "/gpu/opencl"],
    ["sweep", "--rtol", "0"],
    ["sweep", "--timeout", "-1"],
    ["plot", "no-such-results.jsonl"],
    ["compare-gpu"],  # the laboratory's command: python -m bakeoff compare-gpu
]


@pytest.mark.parametrize("argv", BAD, ids=" ".join)
def test_bad_values_exit_2_with_one_line(argv, capsys):
    assert_usage_error(cli.main, argv, capsys, "python -m hofem.bakeoff")


def test_bad_value_from_the_shell_no_traceback():
    run = bakeoff("sweep", "--orders", "9")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (
        "python -m hofem.bakeoff sweep: error: argument --orders/--order/-p: "
        "order 9 is outside the supported 1..8 (see --help)\n"
    )


@pytest.mark.parametrize(("bp", "p"), [("bp1", 4), ("bp1", 6), ("bp1", 8), ("bp3", 8)])
def test_default_rtol_reaches_the_discretization_error(bp, p):
    """Twice the iterations change the L2 error by < 0.1% (or within the 1e-13 rounding floor)."""
    problem = setup(bp, hf.Ceed("/cpu/self/ref"), p, meshes.box(2, 3))
    result = solve(problem)
    assert result["converged"] and result["rtol"] == DEFAULT_RTOL
    longer = solve(problem, rtol=1e-300, maxiter=2 * result["iterations"])["l2_error"]
    assert abs(result["l2_error"] - longer) <= 1e-3 * longer + 1e-13
    if bp == "bp1" and p >= 6:  # the old default stopped above it
        assert solve(problem, rtol=1e-8)["l2_error"] > 10 * longer


COMPILE_PROBE = textwrap.dedent(
    """
    import json
    from numba.core import event
    import hofem as hf
    from hofem.bakeoff import __main__ as cli

    compiles = []
    cg = hf.cg

    def counting_cg(*args, **kwargs):
        with event.install_recorder("numba:compile") as recorder:
            out = cg(*args, **kwargs)
        compiles.append(len(recorder.buffer))
        return out

    hf.cg = counting_cg
    cli.main(["bp1", "--order", "1", "--elements", "1", "--ceed", "/cpu/self/numba", "--jacobi"])
    print(json.dumps(compiles))
    """
)


def test_timed_solve_compiles_nothing(tmp_path):
    """First run on empty caches: the warm-up compiles, the timed CG (with Jacobi) does not."""
    env = dict(os.environ, HOFEM_CACHE_DIR=str(tmp_path / "h"), NUMBA_CACHE_DIR=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "-c", COMPILE_PROBE], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    warmup, timed = json.loads(lines[-1])
    assert warmup > 0 and timed == 0  # compilation happened, and all of it in the warm-up
    result = json.loads(lines[-2])
    assert result["compile_s"] > 0 and result["solve_s"] < result["compile_s"]
    assert any(line.startswith("compiling kernels, first run only: ") for line in lines)


def test_plot_markdown_lists_cases_not_run():
    record = dict.fromkeys(SCHEMA)
    record.update(bp="bp2", p=3, cell="hex", elements_1d=4, ceed="/cpu/self/ref")
    record.update(status="skipped", reason="needs about 1 GB, 0.5 GB available")
    assert "| skipped | needs about 1 GB, 0.5 GB available |" in plot.markdown_table([record])


def test_max_time_stops_before_the_next_case(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    argv = ["--problems", "bp1", "--orders", "1", "--elements", "2", "3", "--ceed"]
    argv += ["/cpu/self/ref", "--out", str(out), "--max-time", "1e-9", "--progress", "off"]
    assert sweep.main(argv) == 0
    assert not out.exists()
    assert "--max-time reached: 2 cases left" in capsys.readouterr().out


def test_docs_list_every_results_key():
    page = (Path(__file__).resolve().parents[1] / "docs" / "bakeoff.md").read_text()
    rows = {line.split("|")[1].strip(" `") for line in page.splitlines() if line.startswith("| `")}
    assert set(SCHEMA) <= rows


@pytest.mark.parametrize("dim", [2, 3])
def test_poisson_right_hand_side_is_minus_the_laplacian(dim):
    x = np.random.default_rng(dim).random((20, dim))
    h = 1e-4
    shifts = np.eye(dim) * h
    laplacian = sum(
        (exact_solution(x + e) - 2 * exact_solution(x) + exact_solution(x - e)) / h**2
        for e in shifts
    )
    assert np.allclose(_minus_laplacian_exact(x), -laplacian, atol=1e-5)


def test_poisson_p1_needs_real_cg_iterations():
    """The right-hand side is no eigenvector of the uniform p = 1 Laplacian."""
    result = solve(setup("bp3", hf.Ceed("/cpu/self/ref"), 1, meshes.box(8, 3)))
    assert result["converged"] and result["iterations"] > 10  # was 1 for prod sin(pi x)


@without_cupy
def test_a_missing_gpu_is_one_line_not_a_traceback(capsys):
    assert cli.main(["--ceed", "/gpu/cuda/gen"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("python -m hofem.bakeoff: ") and "gpu" in line
