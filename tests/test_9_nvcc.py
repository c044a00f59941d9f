"""Every ``.cu`` file under ``hofem/`` compiles with nvcc for sm_90 (CI has nvcc, no GPU)."""

import pathlib
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

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
    cmd = [NVCC, "-arch=sm_90", "--ptx", "-std=c++17", *flags, str(path), "-o", str(out)]
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
