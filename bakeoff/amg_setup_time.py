"""Time :func:`hofem.multigrid.smoothed_aggregation` alone on order-1 box Laplacians.

Usage::

    NUMBA_NUM_THREADS=1 python bakeoff/amg_setup_time.py --n 54 73 --repeat 5 \
        --out /tmp/sa.jsonl
    python bakeoff/amg_setup_time.py --xp cupy --n 54 73 --repeat 5 --out /tmp/sa_gpu.jsonl

The matrix is the order-1 diffusion operator of ``meshes.box(n, 3)`` on its free
(interior) DOFs, ``(n - 1)³`` rows, assembled once with ``--ceed`` and kept in
``--cache`` (``.npz``), so that the runs of two trees (``PYTHONPATH``) alternate on
the same matrix.  ``--xp cupy`` puts the levels on the GPU, as ``hf.pmg`` does on a
GPU backend (the products with cuSPARSE); the call ends with the coarsest matrix
copied to the host, so the wall clock covers the device's work.  One JSON line per
size: the wall and process seconds of each run (the first warms the caches and is
dropped from the medians when ``--repeat`` > 1; on a shared machine the process
seconds are what one uncontended core takes), their medians, the level sizes and
the tree's ``git describe``.
"""

import argparse
import importlib
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import scipy.sparse

import hofem as hf
from hofem import meshes
from hofem.bakeoff.common import emit_line
from hofem.multigrid import smoothed_aggregation


def order1_matrix(ceed: str, n: int, cache: Path) -> scipy.sparse.csr_matrix:
    """The order-1 Laplacian of the ``n³``-cell box on its free DOFs, from ``cache`` if there."""
    path = cache / f"order1_box_{n}.npz"
    if path.exists():
        return scipy.sparse.load_npz(path).tocsr()
    space = hf.H1Space(hf.Ceed(ceed), meshes.box(n, 3), 1)
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs()).linear_assemble()
    A = scipy.sparse.csr_matrix(A)
    cache.mkdir(parents=True, exist_ok=True)
    scipy.sparse.save_npz(path, A)
    return A


def tree() -> str:
    """``git describe`` of the imported hofem's checkout (which tree ran)."""
    root = Path(hf.__file__).resolve().parent.parent
    run = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return run.stdout.strip() or str(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--n", type=int, nargs="+", required=True, help="cells per side")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--xp", default="numpy", choices=("numpy", "cupy"))
    parser.add_argument("--cache", type=Path, default=Path("/tmp/hofem-amg-matrices"))
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    xp = importlib.import_module(args.xp)
    for n in args.n:
        A = order1_matrix(args.ceed, n, args.cache)
        seconds, cpu_seconds = [], []
        for _ in range(args.repeat):
            start, cpu = time.perf_counter(), time.process_time()
            levels, coarsest = smoothed_aggregation(A, xp)  # A is not modified
            seconds.append(time.perf_counter() - start)
            cpu_seconds.append(time.process_time() - cpu)
        first = 1 if len(seconds) > 1 else 0
        record = dict(
            n=n, rows=A.shape[0], nnz=A.nnz, seconds=seconds, cpu_seconds=cpu_seconds,
            median_s=statistics.median(seconds[first:]),
            median_cpu_s=statistics.median(cpu_seconds[first:]),
            levels=[lv.A.shape[0] for lv in levels] + [coarsest.shape[0]],
            lambdas=[lv.lambda_max for lv in levels], tree=tree(),
            xp=args.xp, threads=os.environ.get("NUMBA_NUM_THREADS"), numpy=np.__version__,
        )  # fmt: skip
        emit_line(args.out, record)


if __name__ == "__main__":
    main()
