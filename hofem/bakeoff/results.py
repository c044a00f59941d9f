"""The sweep's results file: one JSON object per line, its schema, reading, rates.

Shared by ``sweep`` (which appends to it and resumes from it) and ``plot``
(which reads it).  The schema is :data:`SCHEMA`; docs/bakeoff.md lists it.
"""

import itertools
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "KEY",
    "KEY_DEFAULTS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "case_key",
    "convergence_rates",
    "rate_lines",
    "read_results",
    "schema_errors",
]

SCHEMA_VERSION = 2
# an L2 error below this is at fp64's rounding floor for the bake-off solutions (|u| ~ 1):
# a rate that ends there measures rounding, not the discretization (BP1 p >= 5 on the H100)
ROUNDING_FLOOR = 1e-12
_NUM = (int, float)
_NONE = type(None)
# key -> (allowed types, meaning). Result fields are None unless status is "ok".
SCHEMA = {
    "schema": (int, "results format version (2; 1: before the geometry keys, stored q-data)"),
    "status": (str, '"ok", "skipped" (would not fit in memory), "timeout" or "failed"'),
    "reason": ((str, _NONE), "why a case was skipped or failed; None when ok"),
    "bp": (str, "problem, bp1..bp6"),
    "p": (int, "polynomial order"),
    "q": (int, "quadrature points per direction of the hex rule (p + 2, BP5/6: p + 1)"),
    "cell": (str, '"hex" or "tet" (6 per box cell)'),
    "elements_1d": (int, "box cells per direction"),
    "elements": (int, "mesh elements"),
    "dofs": (int, "unique nodes x components, boundary nodes included"),
    "ceed": (str, "backend resource asked for"),
    "backend": ((str, _NONE), "backend that ran (the resolved resource)"),
    "geometry": (str, '--geometry asked for: "stored", "on_the_fly" or "auto"'),
    "geometry_used": ((str, _NONE), '"stored" q-data or "on_the_fly" (what "auto" chose)'),
    "device": ((str, _NONE), "GPU name, or CPU model"),
    "threads": ((int, _NONE), "CPU threads (Numba); 1 without Numba"),
    "ranks": (int, "MPI ranks (1: serial)"),
    "rtol": (float, "CG relative residual tolerance"),
    "preconditioner": ((str, _NONE), 'None, "jacobi" or "pmg"'),
    "iterations": ((int, _NONE), "CG iterations"),
    "converged": ((bool, _NONE), "CG reached rtol"),
    "setup_s": ((*_NUM, _NONE), "seconds: space, operator, quadrature data, right-hand side"),
    "compile_s": ((*_NUM, _NONE), "seconds of the warm-up (JIT compilation on a first run)"),
    "solve_s": ((*_NUM, _NONE), "seconds of the CG solve alone"),
    "precond_setup_s": ((*_NUM, _NONE), "seconds of the preconditioner's set-up (0: none)"),
    "time_to_solution_s": ((*_NUM, _NONE), "precond_setup_s + solve_s"),
    "apply_s": ((*_NUM, _NONE), "seconds of one operator apply (median)"),
    "apply_dofs_per_s": ((*_NUM, _NONE), "dofs / apply_s"),
    "dofs_x_iter_per_s": ((*_NUM, _NONE), "dofs x iterations / solve_s: the bake-off metric"),
    "rel_residual": ((*_NUM, _NONE), "||b - A x|| / ||b|| after the solve"),
    "l2_error": ((*_NUM, _NONE), "L2 norm of the error against the exact solution"),
    "memory_estimate_bytes": (int, "estimated peak bytes, checked before allocating"),
    "hofem_version": (str, "hofem.__version__"),
    "git_hash": ((str, _NONE), "commit of the source tree (+dirty: local changes)"),
    "date": (str, "UTC, ISO 8601, when the case finished"),
    "python": (str, "Python version"),
}
# the fields that identify a case: a results line with the same ones is the same case
KEY = ("bp", "p", "cell", "elements_1d", "ceed", "geometry", "ranks", "rtol", "preconditioner")
# KEY fields absent from older lines: what those runs did
KEY_DEFAULTS = {"geometry": "stored"}


def case_key(record: dict[str, Any], keys: Sequence[str] = KEY) -> tuple[Any, ...]:
    """The tuple of ``keys`` fields of a case or results line (:data:`KEY_DEFAULTS` if absent)."""
    return tuple(record[k] if k in record else KEY_DEFAULTS[k] for k in keys)


def schema_errors(record: dict[str, Any]) -> list[str]:
    """What is wrong with one results line against :data:`SCHEMA` (empty list: nothing).

    Parameters
    ----------
    record : dict

    Returns
    -------
    list of str
    """
    errors = [f"missing {k!r}" for k in SCHEMA if k not in record]
    for key, (types, _) in SCHEMA.items():
        value = record.get(key)
        types = types if isinstance(types, tuple) else (types,)
        wrong = not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
        if key in record and wrong:
            errors.append(f"{key!r} = {value!r} is not {' or '.join(t.__name__ for t in types)}")
    if record.get("status") == "ok":
        errors += [
            f"{k!r} is None in an ok line"
            for k in ("iterations", "converged", "solve_s", "dofs_x_iter_per_s", "l2_error")
            if record.get(k) is None
        ]
    return errors


def read_results(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The results lines of ``path`` (list of dict); none if it does not exist.

    A line that is not a JSON object (a run killed while writing) is skipped.
    """
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        pass
    return records


def convergence_rates(
    records: Iterable[dict[str, Any]],
) -> dict[tuple[Any, ...], list[tuple[int, int, float, bool]]]:
    """Observed L2 convergence rates of each size series of ok lines.

    A series is the lines that differ only in ``elements_1d``; the rate between
    consecutive sizes is ``log(e_1 / e_2) / log(n_2 / n_1)`` (h = 1 / n),
    expected p + 1, unless ``e_2`` is below :data:`ROUNDING_FLOOR`.

    Returns
    -------
    dict
        ``(bp, p, cell, ceed, geometry, ranks, rtol, preconditioner) -> list of (n_1, n_2,
        rate, at_floor)``, sizes increasing, ``at_floor`` true when ``e_2 <
        ROUNDING_FLOOR``; series of one size are left out.
    """
    series = defaultdict(dict)
    for r in records:
        if r.get("status") == "ok" and r.get("l2_error"):
            key = case_key(r, tuple(k for k in KEY if k != "elements_1d"))
            series[key][r["elements_1d"]] = r["l2_error"]
    rates = {}
    for key, errors in series.items():
        sizes = sorted(errors)
        if len(sizes) > 1:
            rates[key] = [
                (
                    n1,
                    n2,
                    math.log(errors[n1] / errors[n2]) / math.log(n2 / n1),
                    errors[n2] < ROUNDING_FLOOR,
                )
                for n1, n2 in itertools.pairwise(sizes)
            ]
    return rates


def rate_lines(records: Iterable[dict[str, Any]]) -> list[str]:
    """One line per size series, e.g. ``bp1 p=2 hex /cpu/self/ref auto: L2 rate 2->3: 2.98
    (expected 3)``.

    A rate whose finer error is at the rounding floor is followed by ``(rounding floor)``.
    """
    lines = []
    for (bp, p, cell, ceed, geometry, *_), pairs in convergence_rates(records).items():
        rates = ", ".join(
            f"{n1}->{n2}: {rate:.2f}" + (" (rounding floor)" if floor else "")
            for n1, n2, rate, floor in pairs
        )
        lines.append(f"{bp} p={p} {cell} {ceed} {geometry}: L2 rate {rates} (expected {p + 1})")
    return lines
