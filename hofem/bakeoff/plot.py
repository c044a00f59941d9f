"""``python -m hofem.bakeoff plot RESULTS.jsonl --out DIR``: CEED-style figures and a table.

Usage::

    python -m hofem.bakeoff plot results.jsonl --out figures/ [--baseline RES] [--format png]

Reads a sweep's results file (the ok lines; of a case run twice, the last)
and writes, for each cell type and backend (and device, when the file holds
results of several: the device's name then ends each figure's file name), with
one panel per problem and one line per order p:

- ``throughput_{cell}_{backend}.png``: DOFs x CG iterations / s against DOFs;
- ``time_per_iteration_{cell}_{backend}.png``: the same against seconds per
  CG iteration (the strong-scaling view: where does the line fall off);
- ``ratio_{cell}_{backend}_over_{baseline}.png``: this backend's throughput
  over the baseline backend's on the same cases;
- ``time_to_solution_{cell}_{backend}.png``: seconds to solution (the
  preconditioner's set-up included) against DOFs, one line per order and
  preconditioner (none, jacobi, pmg);

and ``results.md``: one table per cell type, backend and problem (DOFs,
iterations, throughput, apply rate, L2 error and its observed convergence
rate, warm-up seconds), then the cases skipped or failed.  Needs matplotlib
(``pip install hofem[plot]``).
"""

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

from .common import RESOURCES, Parser
from .results import case_key, convergence_rates, read_results

PANEL_COLUMNS = 3
# (cell, backend [geometry], device) -> bp -> p -> results lines sorted by DOFs
_Groups: TypeAlias = dict[tuple[str, str, str | None], dict[str, dict[int, list[dict[str, Any]]]]]


def _slug(resource):
    return re.sub(r"[^A-Za-z0-9]+", "-", resource).strip("-")


def _latest(records):
    """The last line of each case (a rerun replaces an earlier line)."""
    return list({case_key(r): r for r in records}.values())


def _label(ceed, geometry):
    """The backend, followed by ``on_the_fly`` when that geometry was asked for.

    "stored" and "auto" lines share a series (put them in separate results files to
    compare them).
    """
    return f"{ceed} on_the_fly" if geometry == "on_the_fly" else ceed


def _series(record):
    """:func:`_label` of a line (lines before schema 2 ran stored q-data)."""
    return _label(record["ceed"], record.get("geometry", "stored"))


def _groups(records):
    """``(cell, backend [geometry], device) -> bp -> p -> lines sorted by DOFs`` of the ok lines."""
    groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in records:
        if r["status"] == "ok" and r["iterations"]:
            groups[r["cell"], _series(r), r["device"]][r["bp"]][r["p"]].append(r)
    for by_bp in groups.values():
        for by_p in by_bp.values():
            for lines in by_p.values():
                lines.sort(key=lambda r: r["dofs"])
    return groups


def _panels(plt, problems, title):
    """A figure with one log-log panel per problem; (figure, {bp: axes})."""
    cols = min(PANEL_COLUMNS, len(problems))
    rows = math.ceil(len(problems) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, constrained_layout=True
    )
    for ax in axes.flat[len(problems) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    panels = dict(zip(problems, axes.flat, strict=False))
    for bp, ax in panels.items():
        ax.set_title(bp.upper())
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    return fig, panels


def _color(plt, p):
    return plt.get_cmap("viridis")((p - 1) / 7)


def _save(fig, plt, path, written):
    fig.savefig(path, dpi=80)
    plt.close(fig)
    written.append(path)


def _seconds_per_iteration(record):
    return record["solve_s"] / record["iterations"]


def _suffix(groups):
    """File-name suffix of a device: empty unless the results hold several devices."""
    several = len({device for _, _, device in groups}) > 1
    return lambda device: f"_{_slug(device)}" if several else ""


def plot_throughput(
    plt: ModuleType, groups: _Groups, out: Path, fmt: str, written: list[Path]
) -> None:
    """Throughput against DOFs and against seconds per iteration, per cell, backend, device."""
    suffix = _suffix(groups)
    for (cell, ceed, device), by_bp in sorted(groups.items()):
        views = (
            ("throughput", "DOFs", lambda r: r["dofs"]),
            (
                "time_per_iteration",
                "seconds per CG iteration",
                lambda r: r["solve_s"] / r["iterations"],
            ),
        )
        for name, xlabel, x in views:
            fig, panels = _panels(plt, sorted(by_bp), f"{ceed} ({device}), {cell}")
            for bp, ax in panels.items():
                for p, lines in sorted(by_bp[bp].items()):
                    xs = [x(r) for r in lines]
                    ys = [r["dofs_x_iter_per_s"] / 1e6 for r in lines]
                    ax.plot(xs, ys, "o-", color=_color(plt, p), label=f"p = {p}")
                ax.set_xlabel(xlabel)
                ax.set_ylabel("MDOF x CG iterations / s")
                ax.set_ylim(bottom=0)
                ax.legend(fontsize="small")
            _save(fig, plt, out / f"{name}_{cell}_{_slug(ceed)}{suffix(device)}.{fmt}", written)


_PRECOND_STYLE = {"none": "o-", "jacobi": "s--", "pmg": "^:"}


def _time_to_solution(record):
    """Set-up of the preconditioner plus solve (lines before these keys: the solve alone)."""
    total = record.get("time_to_solution_s")
    return record["solve_s"] if total is None else total


def plot_time_to_solution(
    plt: ModuleType, groups: _Groups, out: Path, fmt: str, written: list[Path]
) -> None:
    """Time to solution against DOFs per preconditioner, per cell, backend, device."""
    suffix = _suffix(groups)
    for (cell, ceed, device), by_bp in sorted(groups.items()):
        fig, panels = _panels(plt, sorted(by_bp), f"{ceed} ({device}), {cell}")
        for bp, ax in panels.items():
            series = defaultdict(list)  # (p, preconditioner) -> lines, sorted by DOFs
            for p, lines in by_bp[bp].items():
                for r in lines:
                    series[p, r["preconditioner"] or "none"].append(r)
            for (p, name), lines in sorted(series.items()):
                xs, ys = [r["dofs"] for r in lines], [_time_to_solution(r) for r in lines]
                style = _PRECOND_STYLE.get(name, "x-")
                ax.plot(xs, ys, style, color=_color(plt, p), label=f"p = {p}, {name}")
            ax.set_yscale("log")
            ax.set_xlabel("DOFs")
            ax.set_ylabel("time to solution, s")
            ax.legend(fontsize="small")
        path = out / f"time_to_solution_{cell}_{_slug(ceed)}{suffix(device)}.{fmt}"
        _save(fig, plt, path, written)


def plot_ratios(
    plt: ModuleType, groups: _Groups, baseline: str, out: Path, fmt: str, written: list[Path]
) -> None:
    """Throughput of each backend over ``baseline``'s on the same cases and device."""
    suffix = _suffix(groups)
    for (cell, ceed, device), by_bp in sorted(groups.items()):
        base = groups.get((cell, baseline, device))
        if ceed == baseline or base is None:
            continue
        fig, panels = _panels(plt, sorted(set(by_bp) & set(base)), f"{ceed} / {baseline}, {cell}")
        for bp, ax in panels.items():
            for p, lines in sorted(by_bp[bp].items()):
                ref = {r["elements_1d"]: r for r in base[bp].get(p, [])}
                pairs = [(r, ref[r["elements_1d"]]) for r in lines if r["elements_1d"] in ref]
                if pairs:
                    xs = [r["dofs"] for r, _ in pairs]
                    ys = [r["dofs_x_iter_per_s"] / b["dofs_x_iter_per_s"] for r, b in pairs]
                    ax.plot(xs, ys, "o-", color=_color(plt, p), label=f"p = {p}")
            ax.axhline(1.0, color="gray", lw=0.8)
            ax.set_xlabel("DOFs")
            ax.set_ylabel("throughput ratio")
            ax.set_yscale("log")
            ax.yaxis.set_minor_formatter(plt.NullFormatter())
            ax.legend(fontsize="small")
        name = f"ratio_{cell}_{_slug(ceed)}_over_{_slug(baseline)}{suffix(device)}.{fmt}"
        _save(fig, plt, out / name, written)


def markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """The results as markdown: one table per cell, backend and problem; then the misses."""
    rates = {
        (*key[:3], _label(*key[3:5]), n2): f"{rate:.2f}" + (" (floor)" if floor else "")
        for key, pairs in convergence_rates(records).items()
        for _, n2, rate, floor in pairs
    }
    lines = []
    for (cell, ceed, device), by_bp in sorted(_groups(records).items()):
        for bp, by_p in sorted(by_bp.items()):
            lines += [
                f"### {bp.upper()}, {cell}, {ceed} ({device})",
                "",
                "| p | n | DOFs | CG it | MDOF x it / s | apply MDOF / s | L2 error | rate "
                "| warm-up s |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            for p, rows in sorted(by_p.items()):
                for r in rows:
                    rate = rates.get((bp, p, cell, ceed, r["elements_1d"]))
                    its = f"{r['iterations']}" + ("" if r["converged"] else " (not converged)")
                    lines.append(
                        f"| {p} | {r['elements_1d']} | {r['dofs']} | {its} "
                        f"| {r['dofs_x_iter_per_s'] / 1e6:.3g} | {r['apply_dofs_per_s'] / 1e6:.3g} "
                        f"| {r['l2_error']:.2e} | {rate or ''} "
                        f"| {r['compile_s']:.2g} |"
                    )
            lines.append("")
    misses = [r for r in records if r["status"] != "ok"]
    if misses:
        lines += ["### Not run", "", "| case | status | reason |", "|---|---|---|"]
        lines += [
            f"| {r['bp']} p={r['p']} {r['cell']} n={r['elements_1d']} {r['ceed']} "
            f"| {r['status']} | {r['reason']} |"
            for r in misses
        ]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = Parser(prog="python -m hofem.bakeoff plot", description=__doc__)
    parser.add_argument("results", help="results file of `python -m hofem.bakeoff sweep`")
    parser.add_argument("--out", "-o", default="figures", help="directory (default figures)")
    parser.add_argument(
        "--baseline",
        choices=RESOURCES,
        metavar="RES",
        help="backend the ratios divide by (default /cpu/self/ref, else the first by name)",
    )
    parser.add_argument("--format", choices=("png", "svg"), default="png", help="(png)")
    args = parser.parse_args(argv)
    if not Path(args.results).is_file():
        parser.error(f"no results file {args.results!r}")
    records = _latest(read_results(args.results))
    groups = _groups(records)
    if not groups:
        parser.error(f"{args.results!r} has no completed cases to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        parser.exit(2, "plot needs matplotlib: pip install hofem[plot]\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    plot_throughput(plt, groups, out, args.format, written)
    plot_time_to_solution(plt, groups, out, args.format, written)
    backends = sorted(ceed for _, ceed, _ in groups)
    baseline = args.baseline or ("/cpu/self/ref" if "/cpu/self/ref" in backends else backends[0])
    plot_ratios(plt, groups, baseline, out, args.format, written)
    table = out / "results.md"
    table.write_text(markdown_table(records), encoding="utf-8")
    for path in [*written, table]:
        print(path)
    return 0
