"""Offline sweep: plain vs strided batched cuBLAS GEMM for non-tensor basis shapes.

For every shape ``(P, Q)`` (the seeds' ``(27, 64)``, ``(125, 216)``, ``(729,
1000)`` and the tet bases of order p = 1..8 with the bake-off rule), every
basis matrix the ``/gpu/cuda/batched`` backend multiplies by (``J`` with ``Q``
rows for interp and one gradient direction, ``dim * Q`` rows for the stacked
gradient), both directions (``V = J U`` and ``U = J^T V``) and each column count
``n`` (10,000, and for tets the elements of a ~1e7-DOF mesh, capped by
``--max-bytes``), times the plain GEMM and the strided batched GEMM for a set of
batch counts with CUDA events (median of ``--repeat`` after warm-up), prints one
JSON line per case and writes the table read by
:func:`hofem.backends.cuda.gemm.select`.  A batched configuration is kept only
when it beats the plain GEMM by ``--margin``.

Usage::

    python -m bakeoff tune-gemm [--out PATH] [--repeat N] [--max-bytes B]
"""

import datetime
import json
import sys

import hofem as hf
from hofem.backends.cuda import gemm
from hofem.bakeoff.common import Parser, positive_float, positive_int, tet_shape

from .common import emit, time_events

SEED_SHAPES = ((27, 64), (125, 216), (729, 1000))  # (P, Q) of the seeds, tuned at SEED_COLUMNS
SEED_COLUMNS = 10_000
TET_ORDERS = range(1, 9)
TARGET_DOFS = 1e7
# batched candidates: at least MIN_ETA columns per GEMM, at most MAX_BATCH GEMMs
MIN_ETA = 16
MAX_BATCH = 1 << 14


def tet_columns(p):
    """Elements of a tet box mesh (6 tets per cell) of order ``p`` with about TARGET_DOFS DOFs."""
    cells = TARGET_DOFS ** (1 / 3) / p  # cells per direction: (cells p + 1)^3 DOFs
    return max(1, int(6 * cells**3))


def cases(max_bytes):
    """The sweep: dicts ``t_mode`` ("notranspose"/"transpose"), ``P``, ``Q`` (rows of J), ``n``.

    Column counts are capped so that ``x`` and ``y`` together take at most
    ``max_bytes``.
    """
    shapes = [(P, Q, (SEED_COLUMNS,)) for P, Q in SEED_SHAPES]
    for p in TET_ORDERS:
        P, Q = tet_shape(p)
        shapes.append((P, Q, (SEED_COLUMNS, tet_columns(p))))
    out = []
    for P, Q_bar, columns in shapes:
        for Q in (Q_bar, 3 * Q_bar):  # interp / one gradient direction; stacked 3D gradient
            for t_mode in ("notranspose", "transpose"):
                for n in columns:
                    n = max(1, min(n, int(max_bytes) // (8 * (P + Q))))
                    out.append({"t_mode": t_mode, "P": P, "Q": Q, "n": n})
    return out


def batch_counts(n):
    """Batched candidates for ``n`` columns: powers of two and the divisors of ``n`` nearest them.

    Returns
    -------
    list of int
        Sorted, each in ``2..min(MAX_BATCH, n // MIN_ETA)``.
    """
    top = min(MAX_BATCH, n // MIN_ETA)
    divisors = [d for d in range(2, top + 1) if n % d == 0]
    counts = set()
    b = 2
    while b <= top:
        counts.add(b)
        if divisors:
            counts.add(min(divisors, key=lambda d, b=b: (abs(d - b), d)))
        b *= 2
    return sorted(counts)


def best_entry(case, timings, margin):
    """Table entry for ``case`` from ``timings`` {batch_count: seconds} (1: plain GEMM).

    The fastest batched count wins only if it takes at most ``(1 - margin)``
    of the plain GEMM's time; otherwise the plain GEMM (batch_count 1).
    """
    plain = timings[1]
    count, seconds = min(timings.items(), key=lambda item: (item[1], item[0]))
    if seconds > (1 - margin) * plain:
        count, seconds = 1, plain
    return {**case, "batch_count": count, "seconds": seconds, "gemm_seconds": plain}


def time_case(case, repeat):
    """Median seconds {batch_count: s} of every configuration of ``case`` (random data)."""
    import cupy

    P, Q, n = case["P"], case["Q"], case["n"]
    t_mode = hf.NOTRANSPOSE if case["t_mode"] == "notranspose" else hf.TRANSPOSE
    k, m = (P, Q) if t_mode is hf.NOTRANSPOSE else (Q, P)
    rng = cupy.random.default_rng(0)
    mat = rng.standard_normal((Q, P))  # (Q, P)
    x = rng.standard_normal((n, k))  # (n, k): one column of U per row
    y = cupy.empty((n, m))  # (n, m)
    timings = {}
    for count in [1, *batch_counts(n)]:
        timings[count] = time_events(
            lambda c=count: gemm.gemm(mat, t_mode, x, y, batch_count=c), repeat, warmup=2
        )
    return timings


def metadata(args, argv):
    """Device, software versions, date and command of this sweep."""
    import cupy

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(cupy.cuda.Device().id)
    return {
        "device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "compute_capability": cupy.cuda.Device().compute_capability,
        "cupy": cupy.__version__,
        "cuda_runtime": runtime.runtimeGetVersion(),
        "cuda_driver": runtime.driverGetVersion(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python -m bakeoff tune-gemm " + " ".join(argv),
        "repeat": args.repeat,
        "margin": args.margin,
        "max_bytes": args.max_bytes,
    }


def write_table(path, meta, entries):
    """Write the table (format 1): metadata, then one entry per line."""
    lines = ",\n  ".join(json.dumps(e) for e in entries)
    text = (
        f'{{\n "format": {gemm.TABLE_FORMAT},\n "metadata": {json.dumps(meta)},\n'
        f' "entries": [\n  {lines}\n ]\n}}\n'
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m bakeoff tune-gemm", description=__doc__)
    parser.add_argument("--out", default=str(gemm.TABLE_PATH), help="table file to write")
    parser.add_argument(
        "--repeat", type=positive_int, default=10, help="timed calls per configuration"
    )
    parser.add_argument(
        "--margin", type=positive_float, default=0.02, help="batched must win by this"
    )
    parser.add_argument(
        "--max-bytes", type=positive_float, default=1e9, help="cap on x + y bytes per case (sets n)"
    )
    args = parser.parse_args(argv)
    import cupy

    meta = metadata(args, argv)
    entries = []
    for case in cases(args.max_bytes):
        timings = time_case(case, args.repeat)
        cupy.get_default_memory_pool().free_all_blocks()
        entry = best_entry(case, timings, args.margin)
        entries.append(entry)
        emit(
            case="gemm",
            **entry,
            speedup=entry["gemm_seconds"] / entry["seconds"],
            timings={str(c): s for c, s in timings.items()},
        )
    write_table(args.out, meta, entries)
    gemm.load_table.cache_clear()
    gemm.load_table(str(args.out))  # what was written reads back
    print(f"wrote {len(entries)} entries to {args.out}", file=sys.stderr)
    return 0
