"""The ``/cpu/self/numba`` kernel cache is best effort: never the reason a run fails.

Each case runs fresh processes on a small generated module (one ``cache=CACHE``
kernel), so Numba's disk cache and ``HOFEM_CACHE_DIR`` are really exercised
and nothing of the developer's own caches is touched.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("numba")

# a fresh module per test: the source hash names the cache files
KERNEL = textwrap.dedent(
    """\
    import numba


    @numba.njit(cache=CACHE)
    def twice(x):
        return 2.0 * x  # {tag}
    """
)

SCRIPT = textwrap.dedent(
    """\
    import pathlib, sys, time
    from hofem.backends.numba.codegen import load_module

    barrier = sys.argv[2:]  # files: touch the first, wait for all (a simultaneous start)
    if barrier:
        pathlib.Path(barrier[0]).touch()
        while not all(pathlib.Path(b).exists() for b in barrier):
            time.sleep(0.01)
    module = load_module(pathlib.Path(sys.argv[1]).read_text(), cache=True)
    print(module.twice(21.0), sum(module.twice.stats.cache_hits.values()))
    """
)


@pytest.fixture
def kernel(tmp_path, request):
    path = tmp_path / "kernel_source.py"
    path.write_text(KERNEL.format(tag=request.node.name))
    return path


def run(cache_dir, kernel, *barrier):
    """Start the script in a fresh process with ``HOFEM_CACHE_DIR=cache_dir``."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["HOFEM_CACHE_DIR"] = str(cache_dir)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(kernel), *map(str, barrier)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process):
    """(stdout, stderr) of a process that must succeed."""
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return out.split(), err


UNWRITABLE = textwrap.dedent(
    """\
    import pathlib, sys
    import hofem.backends.numba.kernels  # its tile module goes through the cache too
    from hofem.backends.numba.codegen import load_module

    source = pathlib.Path(sys.argv[1]).read_text()
    load_module(source + "# another kernel", cache=True)
    module = load_module(source, cache=True)
    print(module.twice(21.0), sum(module.twice.stats.cache_hits.values()))
    """
)


@pytest.mark.parametrize("where", ["/proc/hofem-cache", "a-file/below"])
def test_unwritable_cache_compiles_in_memory_with_one_warning(tmp_path, kernel, where):
    (tmp_path / "a-file").write_text("not a folder")
    cache_dir = where if where.startswith("/") else tmp_path / where
    env = {**os.environ, "HOFEM_CACHE_DIR": str(cache_dir), "PYTHONWARNINGS": "always"}
    result = subprocess.run(
        [sys.executable, "-c", UNWRITABLE, str(kernel)], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["42.0", "0"]
    assert result.stderr.count("RuntimeWarning") == 1, result.stderr
    assert "compiling in memory" in result.stderr and "HOFEM_CACHE_DIR" in result.stderr


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_truncated_cache_entry_is_rebuilt_with_a_warning(tmp_path, kernel, suffix):
    cache_dir = tmp_path / "cache"
    assert finish(run(cache_dir, kernel)) == (["42.0", "0"], "")
    entries = sorted(cache_dir.rglob(f"*{suffix}"))
    assert entries, "Numba wrote no cache entry"
    for entry in entries:  # a process killed mid-write, a full disk
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2])

    out, err = finish(run(cache_dir, kernel))
    assert out == ["42.0", "0"]
    assert "corrupt Numba cache entry" in err and "compiled again" in err
    assert finish(run(cache_dir, kernel)) == (["42.0", "1"], ""), "rebuilt entry not reused"


def test_processes_compiling_one_kernel_at_once_all_succeed(tmp_path, kernel):
    cache_dir = tmp_path / "cache"
    barrier = [tmp_path / f"ready-{i}" for i in range(3)]
    processes = [run(cache_dir, kernel, *barrier[i:], *barrier[:i]) for i in range(3)]
    for process in processes:
        out, err = finish(process)
        assert out[0] == "42.0" and not err
    assert not list(cache_dir.rglob("*.tmp*")), "temporary files left behind"
    assert finish(run(cache_dir, kernel)) == (["42.0", "1"], "")
