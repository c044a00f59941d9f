"""Helpers shared by the bake-off commands: argument types, timing, run metadata.

Every command of ``python -m hofem.bakeoff`` parses its options with
:class:`Parser` and the types below, so that problems, orders, backends and
sizes are written one way everywhere and a bad value ends the command with
one line on stderr and exit status 2.
"""

import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

import hofem as hf
from hofem import backends
from hofem.geometry import GEOMETRY_MODES

from .problems import PROBLEMS, median_seconds

__all__ = ["median_seconds"]  # re-exported for the benchmark commands

MAX_ORDER = 8  # the bake-off's orders are 1..8 (BAKEOFF.md)
RESOURCES = tuple(sorted({*backends.registered(), "/cpu/self", "/gpu/cuda"}))


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line on stderr, exit status 2, no usage dump."""

    def __init__(self, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def bp_name(text):
    """Problem name from ``"bp3"``, ``"BP3"`` or ``"3"``; ``"bp3"``.

    Raises
    ------
    argparse.ArgumentTypeError
        Anything else (the message lists the problems).
    """
    name = text.strip().lower()
    name = "bp" + name if name.isdigit() else name
    if name not in PROBLEMS:
        raise argparse.ArgumentTypeError(
            f"unknown problem {text!r}: choose from {', '.join(sorted(PROBLEMS))} (or 1..6)"
        )
    return name


def _number(text, kind, what):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def order(text):
    """Polynomial order, an int in ``1..MAX_ORDER``."""
    p = _number(text, int, "an integer order")
    if not 1 <= p <= MAX_ORDER:
        raise argparse.ArgumentTypeError(f"order {p} is outside the supported 1..{MAX_ORDER}")
    return p


def positive_int(text):
    """An int ``>= 1``."""
    n = _number(text, int, "an integer")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be a positive integer")
    return n


def positive_float(text):
    """A finite float ``> 0`` (``1e-10``, ``3e5``)."""
    x = _number(text, float, "a number")
    if not (x > 0 and np.isfinite(x)):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return x


def add_problem_arguments(parser, problems, orders, choices=tuple(PROBLEMS)):
    """``--problems`` (``bp1`` or ``1``, among ``choices``) and ``--orders``, with defaults."""
    parser.add_argument(
        "--problems",
        "--bp",
        nargs="+",
        type=bp_name,
        choices=choices,
        default=list(problems),
        metavar="BP",
        help=f"problems among {', '.join(choices)} ('bp3' or '3'; default {' '.join(problems)})",
    )
    parser.add_argument(
        "--orders",
        "--order",
        "-p",
        nargs="+",
        type=order,
        default=list(orders),
        metavar="P",
        help=f"polynomial orders 1..{MAX_ORDER} (default {' '.join(map(str, orders))})",
    )


STRUCTURED = ("bp1", "bp3")  # the problems of the structured-box benchmarks


def add_case_arguments(parser):
    """``--problems --orders --dofs --repeat`` of the structured-box benchmarks (CPU, libCEED)."""
    add_problem_arguments(parser, STRUCTURED, range(1, MAX_ORDER + 1), choices=STRUCTURED)
    parser.add_argument(
        "--dofs", type=positive_float, nargs="+", default=[3e5, 2e6], help="target DOFs"
    )
    parser.add_argument("--repeat", type=positive_int, default=10, help="timed calls per case")


def add_geometry_argument(parser, many=False):
    """``--geometry`` of the forms (:mod:`hofem.geometry`), default ``auto`` as in the library.

    ``many``: one or more modes (a list), each case run with each.
    """
    parser.add_argument(
        "--geometry",
        nargs="+" if many else None,
        choices=GEOMETRY_MODES,
        default=["auto"] if many else "auto",
        help="stored q-data, geometry recomputed on the fly, or auto: the backend's cost "
        "model decides (default auto)" + ("; several: each in turn" if many else ""),
    )


PRECONDITIONERS = ("none", "jacobi", "pmg")


def add_preconditioner_argument(parser):
    """``--preconditioner none|jacobi|pmg`` and its alias ``--jacobi``; read with
    :func:`preconditioner_of`."""
    parser.add_argument(
        "--preconditioner",
        choices=PRECONDITIONERS,
        default="none",
        help="CG preconditioner: none, jacobi, or pmg (p-multigrid, hf.pmg; needs pyamg)",
    )
    parser.add_argument("--jacobi", action="store_true", help="alias of --preconditioner jacobi")


def preconditioner_of(args):
    """The preconditioner the arguments ask for: None, "jacobi" or "pmg"."""
    name = "jacobi" if args.jacobi else args.preconditioner
    return None if name == "none" else name


def add_ceed_argument(parser, default, many=False):
    """``--ceed`` resource(s), one of :data:`RESOURCES`."""
    parser.add_argument(
        "--ceed",
        nargs="+" if many else None,
        choices=RESOURCES,
        default=[default] if many else default,
        metavar="RES",
        help=f"backend resource{'s' if many else ''} (default {default}): {', '.join(RESOURCES)}",
    )


def box_side(dofs, p):
    """Elements per side of the order-``p`` box with about ``dofs`` nodes (at least 1)."""
    return max(1, round((dofs ** (1 / 3) - 1) / p))


def tet_shape(p):
    """(P, Q) of the tet basis of order ``p`` with the bake-off rule of ``H1Space.basis()``.

    ``q_extra = 1``: a simplex rule exact to degree ``2 (p + 2) - 1``.
    """
    b = hf.Ceed("/cpu/self/ref").BasisH1Lagrange(hf.TET, 1, p, 2 * (p + 2) - 1)
    return b.num_nodes, b.num_qpts


def time_events(fn, repeat, warmup=3):
    """Median seconds of ``fn()`` by CUDA events, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    return event_seconds(fn, repeat)


def event_seconds(fn, repeat):
    """Median seconds of ``repeat`` calls of ``fn()``, each between two CUDA events.

    The events go on CuPy's current stream; on the legacy default stream (CuPy's
    and libCEED's) they also wait for work that other libraries launched there.
    """
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def emit(**record):
    """Print ``record`` as one JSON line on stdout."""
    print(json.dumps(record), flush=True)


def threads():
    """Threads the CPU backend uses: Numba's current count, 1 when Numba is absent."""
    try:
        import numba
    except ImportError:
        return 1
    return numba.get_num_threads()


def device_name(ceed):
    """The GPU's name for a CUDA backend, else the CPU model (Linux) or the machine type."""
    if ceed.resource.startswith("/gpu"):
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"]
        return name.decode() if isinstance(name, bytes) else name
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def git_hash():
    """Short commit hash of the source tree (``+dirty`` with local changes), or None."""
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty=+dirty", "--abbrev=10"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def available_memory(ceed):
    """Bytes free for a case: the GPU's free memory, else the host's ``MemAvailable``."""
    if ceed.resource.startswith("/gpu"):
        import cupy

        return cupy.cuda.runtime.memGetInfo()[0]
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def utc_now():
    """The date and time now, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_metadata(ceed=None):
    """Device and threads (None without ``ceed``), hofem version, git hash, date, Python."""
    return {
        "device": None if ceed is None else device_name(ceed),
        "threads": None if ceed is None else threads(),
        "hofem_version": hf.__version__,
        "git_hash": git_hash(),
        "date": utc_now(),
        "python": sys.version.split()[0],
    }
