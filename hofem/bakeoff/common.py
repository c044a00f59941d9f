"""Helpers shared by the bake-off commands: argument types, run metadata.

Every command of ``python -m hofem.bakeoff`` (and of the repository's
laboratory, ``python -m bakeoff``) parses its options with :class:`Parser` and
the types below, so that problems, orders, backends and sizes are written one
way everywhere and a bad value ends the command with one line on stderr and
exit status 2.
"""

import argparse
import datetime
import functools
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

import hofem as hf
from hofem import backends
from hofem.cg_variants import VARIANTS as CG_VARIANTS
from hofem.geometry import GEOMETRY_MODES

from .problems import PROBLEMS, median_seconds

__all__ = ["median_seconds"]  # re-exported for the commands of the repository's bakeoff/

MAX_ORDER = 8  # the bake-off's orders are 1..8 (BAKEOFF.md)
RESOURCES = tuple(sorted({*backends.registered(), "/cpu/self", "/gpu/cuda"}))


class UsageError(Exception):
    """A command cannot run as asked (a mesh it cannot read, a case that does not fit, a
    results file it cannot write): ``python -m hofem.bakeoff`` prints the message as one
    line on stderr and exits with status 2."""


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise :class:`UsageError` unless ``path`` can be appended to (created if missing).

    Checked by opening it, before any case runs, so that no result is lost to a path
    that cannot take it; a file that did not exist is removed again.
    """
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(f"cannot write the results file {path}: {exc.strerror or exc}") from None
    if not existed:
        os.remove(path)


EXTRAS = {
    "cupy": "gpu",
    "numba": "numba",
    "meshio": "mesh",
    "matplotlib": "plot",
    "pyamg": "amg",
}  # module -> the extra that installs it


def run_reporting_usage_errors(prog: str, command: Callable[[], int]) -> int:
    """``command()``'s exit status; a usage error, an unavailable backend or a missing
    optional package (:data:`EXTRAS`) is one line on stderr and exit status 2."""
    from hofem.backends import BackendUnavailable

    try:
        return command()
    except (UsageError, BackendUnavailable) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
    except ModuleNotFoundError as exc:
        if exc.name not in EXTRAS:
            raise
        extra = EXTRAS[exc.name]
        print(f"{prog}: error: this needs {exc.name}: pip install hofem[{extra}]", file=sys.stderr)
    return 2


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose errors are one line on stderr, exit status 2, no usage dump."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


EXIT_STATUS_EPILOG = """exit status:
  0  done (every case converged)
  1  a case did not converge or failed: a result, reported on stdout
  2  usage: a bad option value, a mesh file that cannot be read, a backend or an
     optional package missing here, a case that does not fit in memory, a results
     file that cannot be written; one line on stderr, nothing run"""


def bp_name(text: str) -> str:
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


def order(text: str) -> int:
    """Polynomial order, an int in ``1..MAX_ORDER``."""
    p = _number(text, int, "an integer order")
    if not 1 <= p <= MAX_ORDER:
        raise argparse.ArgumentTypeError(f"order {p} is outside the supported 1..{MAX_ORDER}")
    return p


def positive_int(text: str) -> int:
    """An int ``>= 1``."""
    n = _number(text, int, "an integer")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} must be a positive integer")
    return n


def positive_float(text: str) -> float:
    """A finite float ``> 0`` (``1e-10``, ``3e5``)."""
    x = _number(text, float, "a number")
    if not (x > 0 and np.isfinite(x)):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return x


def add_problem_arguments(
    parser: argparse.ArgumentParser,
    problems: Sequence[str],
    orders: Sequence[int],
    choices: Sequence[str] = tuple(PROBLEMS),
) -> None:
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


def add_geometry_argument(parser: argparse.ArgumentParser, many: bool = False) -> None:
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


def add_preconditioner_argument(parser: argparse.ArgumentParser) -> None:
    """``--preconditioner none|jacobi|pmg`` and its alias ``--jacobi``; read with
    :func:`preconditioner_of`."""
    parser.add_argument(
        "--preconditioner",
        choices=PRECONDITIONERS,
        default="none",
        help="CG preconditioner: none, jacobi, or pmg (p-multigrid, hf.pmg; needs pyamg)",
    )
    parser.add_argument("--jacobi", action="store_true", help="alias of --preconditioner jacobi")


def preconditioner_of(args: argparse.Namespace) -> str | None:
    """The preconditioner the arguments ask for: None, "jacobi" or "pmg"."""
    name = "jacobi" if args.jacobi else args.preconditioner
    return None if name == "none" else name


def add_cg_variant_argument(parser: argparse.ArgumentParser) -> None:
    """``--cg-variant standard|single_reduction|pipelined`` (``hf.cg``'s ``variant``)."""
    parser.add_argument(
        "--cg-variant",
        choices=CG_VARIANTS,
        default="standard",
        help="CG variant (default standard; single_reduction: Chronopoulos-Gear, pipelined: "
        "Ghysels-Vanroose; both one all-reduce an iteration, in the host loop)",
    )


def add_ceed_argument(parser: argparse.ArgumentParser, default: str, many: bool = False) -> None:
    """``--ceed`` resource(s), one of :data:`RESOURCES`."""
    parser.add_argument(
        "--ceed",
        nargs="+" if many else None,
        choices=RESOURCES,
        default=[default] if many else default,
        metavar="RES",
        help=f"backend resource{'s' if many else ''} (default {default}): {', '.join(RESOURCES)}",
    )


def box_side(dofs: float, p: int) -> int:
    """Elements per side of the order-``p`` box with about ``dofs`` nodes (at least 1)."""
    return max(1, round((dofs ** (1 / 3) - 1) / p))


def tet_shape(p: int) -> tuple[int, int]:
    """(P, Q) of the tet basis of order ``p`` with the bake-off rule of ``H1Space.basis()``.

    ``q_extra = 1``: a simplex rule exact to degree ``2 (p + 2) - 1``.
    """
    b = hf.Ceed("/cpu/self/ref").BasisH1Lagrange(hf.TET, 1, p, 2 * (p + 2) - 1)
    return b.num_nodes, b.num_qpts


def threads() -> int:
    """Threads the CPU backend uses: Numba's current count, 1 when Numba is absent."""
    try:
        import numba
    except ImportError:
        return 1
    return numba.get_num_threads()


def device_name(ceed: hf.Ceed) -> str:
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
def git_hash() -> str | None:
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


def emit_line(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Print ``record`` as one JSON line and append that line to the file ``path``."""
    line = json.dumps(record)
    print(line, flush=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def utc_now() -> str:
    """The date and time now, UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_metadata(ceed: hf.Ceed | None = None) -> dict[str, Any]:
    """Device and threads (None without ``ceed``), hofem version, git hash, date, Python."""
    return {
        "device": None if ceed is None else device_name(ceed),
        "threads": None if ceed is None else threads(),
        "hofem_version": hf.__version__,
        "git_hash": git_hash(),
        "date": utc_now(),
        "python": sys.version.split()[0],
    }
