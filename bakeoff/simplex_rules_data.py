"""Regenerate ``hofem/data/simplex_rules/{triangle,tet}.json`` from PyFR's rule tables.

PyFR (https://github.com/PyFR/PyFR, BSD-3-Clause) carries the Witherden-Vincent
symmetric simplex rules as text files ``pyfr/quadrules/{tri,tet}/NAME-nN-dD-FLAGS.txt``
(one point per line: coordinates on the biunit simplex, then the weight; weights sum to
the biunit volume 2 or 4/3).  This script keeps, for every degree, the rule with the
fewest points among those of that degree or higher whose flags say symmetric (``s``) and
positive (``p``), checked: all weights positive and all points strictly inside the
simplex (ties: the Witherden-Vincent files, given to 38 digits), maps it to hofem's unit
simplex in decimal arithmetic (``x = (xi + 1) / 2``, ``w = w_biunit / 2**dim``) and
rounds once to float64.

Usage (from a checkout; ``PYFR`` is a git directory of PyFR)::

    python bakeoff/simplex_rules_data.py PYFR [COMMIT]
"""

import decimal
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "hofem" / "data" / "simplex_rules"
SHAPES = {"triangle": ("tri", 2), "tet": ("tet", 3)}
# Points this near a face are face points written with rounding (their float64 unit-simplex
# coordinates round to 0); the nearest kept ones are 6e-10 (tet d9) and 1.4e-9 (tet d10) in.
MARGIN = decimal.Decimal("1e-12")
NAME = re.compile(r"([a-zA-Z0-9\-~+]+)-n(\d+)-d(\d+)-([pstu]+)\.txt$")
CITATION = (
    "F. D. Witherden and P. E. Vincent, On the identification of symmetric quadrature "
    "rules for finite element methods, Computers & Mathematics with Applications 69(10), "
    "1232-1241, 2015, doi:10.1016/j.camwa.2015.03.017 (files witherden-vincent-*); the "
    "files witherden-* are rules of higher degree found by F. D. Witherden with the same "
    "method (polyquad) and published in PyFR"
)
LICENSE = (
    "Tables from PyFR (https://github.com/PyFR/PyFR), BSD-3-Clause, Copyright (c) "
    "2012-2026 Imperial College London; redistributed with attribution, points mapped "
    "to the unit simplex"
)


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True)


def candidates(repo, commit, folder):
    """(num_points, degree, path) of the symmetric positive rules with a degree."""
    names = git(repo, "ls-tree", "-r", commit, "--name-only").stdout.split()
    out = []
    for path in names:
        if not path.startswith(f"pyfr/quadrules/{folder}/"):
            continue
        m = NAME.search(path)
        if m and {"s", "p"} <= set(m[4]):
            out.append((int(m[2]), int(m[3]), path))
    return out


def _preference(rule):
    """Fewest points, then highest degree, then the Witherden(-Vincent) tables, which
    carry 38 digits (some others carry 15)."""
    n, d, path = rule
    return n, -d, not Path(path).name.startswith("witherden")


def fewest(rules):
    """The rules that are the fewest-point choice for some degree."""
    chosen = {}
    for degree in range(1, max(d for _, d, _ in rules) + 1):
        n, d, path = min((r for r in rules if r[1] >= degree), key=_preference)
        chosen[path] = (n, d, path)
    return sorted(chosen.values(), key=lambda r: r[1])


def interior_positive(repo, commit, path, dim):
    """Whether every weight is positive and every point lies inside the simplex by more
    than ``MARGIN`` (barycentric, unit simplex).  Not every file flagged ``p`` passes:
    tet witherden-n172-d14 has negative weights, tri witherden-vincent-n55-d16 points on
    an edge, tet witherden-n96-d11, n123-d12, n411-d19 and n474-d20 points on a face (to
    1e-16)."""
    for line in git(repo, "show", f"{commit}:{path}").stdout.split("\n"):
        fields = [decimal.Decimal(f) for f in line.split()]
        if not fields:
            continue
        lam = [(x + 1) / 2 for x in fields[:dim]]  # unit-simplex coordinates
        if min(*lam, 1 - sum(lam)) <= MARGIN or fields[dim] <= 0:
            return False
    return True


def convert(text, dim):
    """Points on the unit simplex and weights summing to 1 / dim!, as float64 values."""
    decimal.getcontext().prec = 50
    half, points, weights = decimal.Decimal(1) / 2, [], []
    for line in text.split("\n"):
        fields = [decimal.Decimal(f) for f in line.split()]
        if not fields:
            continue
        if len(fields) != dim + 1:
            raise ValueError(f"expected {dim + 1} numbers per line, got {line!r}")
        points.append([float((x + 1) * half) for x in fields[:dim]])
        weights.append(float(fields[dim] * half**dim))
    return points, weights


def dumps(data):
    """JSON with one line per point (the tables stay readable and diff by point)."""
    text = json.dumps({**data, "rules": "RULES"}, indent=1)
    rules = []
    for r in data["rules"]:
        head = json.dumps({k: v for k, v in r.items() if k not in ("points", "weights")})
        rows = ",\n   ".join(
            json.dumps([*x, w]) for x, w in zip(r["points"], r["weights"], strict=True)
        )
        rules.append(f'  {head[:-1]}, "points_weights": [\n   {rows}\n  ]}}')
    return text.replace('"RULES"', "[\n" + ",\n".join(rules) + "\n ]") + "\n"


def main(repo, commit="HEAD"):
    commit = git(repo, "rev-parse", commit).stdout.strip()
    for shape, (folder, dim) in SHAPES.items():
        rules = []
        usable = [
            r
            for r in candidates(repo, commit, folder)
            if interior_positive(repo, commit, r[2], dim)
        ]
        for n, d, path in fewest(usable):
            points, weights = convert(git(repo, "show", f"{commit}:{path}").stdout, dim)
            if len(points) != n:
                raise ValueError(f"{path}: {len(points)} points, the name says {n}")
            rules.append(
                {
                    "degree": d,
                    "num_points": n,
                    "source_file": path,
                    "points": points,
                    "weights": weights,
                }
            )
        data = {
            "shape": shape,
            "reference": "unit simplex: vertices at the origin and the unit vectors; "
            "weights sum to its volume",
            "source": f"https://github.com/PyFR/PyFR/tree/{commit}/pyfr/quadrules/{folder}",
            "citation": CITATION,
            "license": LICENSE,
            "generated_by": "bakeoff/simplex_rules_data.py",
            "rules": rules,
        }
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{shape}.json").write_text(dumps(data))
        print(shape, [(r["degree"], r["num_points"]) for r in rules])


if __name__ == "__main__":
    main(*sys.argv[1:])
