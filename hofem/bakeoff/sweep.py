"""``python -m hofem.bakeoff sweep``: problems x orders x sizes x backends, verified, resumable.

Usage::

    python -m hofem.bakeoff sweep --problems bp1 bp3 --orders 1 2 --elements 2 3
        --ceed /cpu/self/ref /cpu/self/numba --out results.jsonl
        [--cells hex tet | --dofs 1e4 1e5 ...] [--rtol R] [--jacobi] [--timeout S]
        [--max-memory GB] [--max-time S] [--progress auto|bar|lines|off] [--retry]
        [--in-process]

Each case (a problem, order, cell type, box size and backend) is set up on
the unit box, solved with CG (after a warm-up that compiles everything the
solve runs), verified against the exact solution (L2 error) and timed; one
JSON line per case is appended to ``--out`` (schema: :data:`results.SCHEMA`,
docs/bakeoff.md).  Cases already in the file are skipped, so an interrupted
sweep resumes where it stopped (``--retry`` reruns the skipped, timed-out
and failed ones).  Before a case allocates anything its peak memory is
estimated; one that would not fit in the free host (or GPU) memory, or in
``--max-memory``, is recorded as skipped with the reason.  Cases run in a
worker process that is killed after ``--timeout`` seconds (recorded as a
timeout) and replaced; a worker that dies takes only its case with it.

Under ``mpiexec`` every case runs distributed over all the ranks (``ranks`` is
part of each line and of the resume key; see :func:`main_distributed`).

Progress goes to stderr: a bar with elapsed time and ETA on a terminal (tqdm,
``pip install hofem[plot]``), one plain line per case otherwise.  At the end,
the observed L2 convergence rates of each size series (expected p + 1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import hofem as hf
from hofem import meshes

from .common import (
    EXIT_STATUS_EPILOG,
    Parser,
    UsageError,
    add_ceed_argument,
    add_geometry_argument,
    add_preconditioner_argument,
    add_problem_arguments,
    box_side,
    check_writable,
    positive_float,
    positive_int,
    preconditioner_of,
    run_metadata,
    utc_now,
)
from .distributed import launched_under_mpi, setup_distributed
from .estimate import box_shape, case_estimate, estimate_memory
from .problems import DEFAULT_RTOL, PROBLEMS, setup, solve, time_apply
from .results import SCHEMA, SCHEMA_VERSION, case_key, rate_lines, read_results

if TYPE_CHECKING:
    from mpi4py import MPI

CELLS = ("hex", "tet")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog="python -m hofem.bakeoff sweep", description=__doc__, epilog=EXIT_STATUS_EPILOG
    )
    add_problem_arguments(parser, sorted(PROBLEMS), range(1, 5))
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument(
        "--elements",
        "-n",
        nargs="+",
        type=positive_int,
        metavar="N",
        help="box cells per direction (default 2 4)",
    )
    sizes.add_argument(
        "--dofs",
        nargs="+",
        type=positive_float,
        metavar="D",
        help="target DOFs instead: cells per direction chosen per order",
    )
    add_ceed_argument(parser, "/cpu/self", many=True)
    add_geometry_argument(parser)
    parser.add_argument("--cells", nargs="+", choices=CELLS, default=["hex"], help="(hex)")
    parser.add_argument("--out", default="results.jsonl", help="results file, appended to")
    parser.add_argument(
        "--rtol", type=positive_float, default=DEFAULT_RTOL, help=f"CG (default {DEFAULT_RTOL:g})"
    )
    parser.add_argument("--maxiter", type=positive_int, default=None, help="CG iteration limit")
    add_preconditioner_argument(parser)
    parser.add_argument("--repeat", type=positive_int, default=5, help="timed applies (5)")
    parser.add_argument(
        "--timeout", type=positive_float, default=600.0, help="seconds per case (600)"
    )
    parser.add_argument(
        "--max-memory", type=positive_float, help="GB a case may use (default: what is free)"
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "lines", "off"),
        default="auto",
        help="auto: a bar on a terminal, plain lines otherwise",
    )
    parser.add_argument(
        "--max-time",
        type=positive_float,
        help="seconds after which no new case starts (run again to resume)",
    )
    parser.add_argument("--retry", action="store_true", help="rerun cases that were not ok")
    parser.add_argument(
        "--in-process", action="store_true", help="run cases here: no worker, no timeout"
    )
    args = parser.parse_args(argv)
    if args.elements is None and args.dofs is None:
        args.elements = [2, 4]
    return args


def cases(args: argparse.Namespace, ranks: int = 1) -> list[dict[str, Any]]:
    """The sweep's cases (dicts), in the order they run: backend, problem, cell, order, size."""
    out = []
    for ceed in args.ceed:
        for bp in args.problems:
            for cell in args.cells:
                for p in args.orders:
                    sizes = args.elements or sorted({box_side(d, p) for d in args.dofs})
                    for n in sizes:
                        out.append(
                            {
                                "bp": bp,
                                "p": p,
                                "cell": cell,
                                "elements_1d": n,
                                "ceed": ceed,
                                "geometry": args.geometry,
                                "ranks": ranks,
                                "rtol": args.rtol,
                                "preconditioner": preconditioner_of(args),
                                "maxiter": args.maxiter,
                                "repeat": args.repeat,
                            }
                        )
    return out


def base_record(case: dict[str, Any]) -> dict[str, Any]:
    """A results line for ``case`` with what is known before running it (results None).

    The memory estimate takes stored q-data where the geometry is ``auto`` (the
    larger); :func:`run_case` replaces it with the estimate of what will run.
    """
    bp, p, n = PROBLEMS[case["bp"]], case["p"], case["elements_1d"]
    num_elem, num_nodes, P, Q = box_shape(case["bp"], p, n, case["cell"] == "tet")
    geometry = "stored" if case["geometry"] == "auto" else case["geometry"]
    estimate = estimate_memory(
        case["bp"], num_elem, num_nodes, P, Q, resource=case["ceed"], geometry=geometry,
        ranks=case["ranks"], preconditioner=case["preconditioner"],
    )  # fmt: skip
    record = dict.fromkeys(SCHEMA)
    record.update(
        {k: case[k] for k in ("bp", "p", "cell", "elements_1d", "ceed", "geometry", "ranks")}
    )
    record.update(rtol=case["rtol"], preconditioner=case["preconditioner"])
    record.update(
        schema=SCHEMA_VERSION,
        q=p + 1 + bp.q_extra,
        elements=num_elem,
        dofs=num_nodes * bp.num_comp,
        memory_estimate_bytes=estimate.total,
    )
    record.update(run_metadata(None))
    return record


def run_case(
    case: dict[str, Any], max_memory: float | None = None, comm: MPI.Comm | None = None
) -> dict[str, Any]:
    """Set up, solve, verify and time one case; its results line (dict).

    The case is skipped (status "skipped", with the reason) when its memory
    estimate (:func:`~hofem.bakeoff.estimate.case_estimate`, host and device)
    exceeds the free memory or ``max_memory`` bytes. With ``comm`` (under
    ``mpiexec``) every rank of it runs the case together, distributed
    (:func:`~hofem.bakeoff.distributed.setup_distributed`); the estimate is
    then per rank.
    """
    ceed = hf.Ceed(case["ceed"])
    record = base_record(case)
    record.update(run_metadata(ceed), backend=ceed.resource)
    simplex = case["cell"] == "tet"
    estimate, refusal = case_estimate(
        case["bp"], ceed, case["p"], elements=case["elements_1d"], simplex=simplex,
        geometry=case["geometry"], preconditioner=case["preconditioner"], comm=comm,
        max_memory=max_memory, hint="skipped",
    )  # fmt: skip
    record.update(memory_estimate_bytes=estimate.total)
    if refusal is not None:
        record.update(status="skipped", reason=refusal.removesuffix("; skipped"))
        return record
    if comm is None:
        mesh = meshes.box(case["elements_1d"], 3, simplex)
        problem = setup(case["bp"], ceed, case["p"], mesh, case["geometry"])
    else:
        n = case["elements_1d"]
        problem = setup_distributed(
            case["bp"], ceed, case["p"], comm, n, simplex=simplex, geometry=case["geometry"]
        )
    result = solve(
        problem,
        rtol=case["rtol"],
        maxiter=case["maxiter"],
        preconditioner=case["preconditioner"],
    )
    result.update(time_apply(problem, case["repeat"]))
    record.update({k: v for k, v in result.items() if k in SCHEMA})
    record.update(status="ok", date=utc_now())
    return record


def failed(case: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
    """The results line of a case that did not finish."""
    record = base_record(case)
    record.update(status=status, reason=reason)
    return record


def _serve(conn, max_memory):
    """Worker process: run the cases received on ``conn`` until ``None`` (or the sweep ends)."""
    while True:
        try:
            case = conn.recv()
        except EOFError:  # the sweep was killed
            return
        if case is None:
            return
        try:
            record = run_case(case, max_memory)
        except Exception as exc:  # reported in the results line; the sweep goes on
            record = failed(case, "failed", f"{type(exc).__name__}: {exc}")
        conn.send(record)


class Runner:
    """Runs cases in a worker process (kept between cases: compiled kernels stay warm).

    Parameters
    ----------
    timeout : float or None
        Seconds per case; None runs the cases in this process (no timeout).
    max_memory : float or None
        Bytes a case may use.
    """

    def __init__(self, timeout: float | None, max_memory: float | None) -> None:
        self.timeout, self.max_memory = timeout, max_memory
        self.process = self.conn = None

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        """The results line of ``case``."""
        if self.timeout is None:
            try:
                return run_case(case, self.max_memory)
            except Exception as exc:
                return failed(case, "failed", f"{type(exc).__name__}: {exc}")
        if self.process is None:
            context = multiprocessing.get_context("spawn")
            self.conn, child = context.Pipe()
            self.process = context.Process(
                target=_serve, args=(child, self.max_memory), daemon=True
            )
            self.process.start()
            child.close()
        self.conn.send(case)
        if not self.conn.poll(self.timeout):
            self.close(kill=True)
            return failed(case, "timeout", f"took longer than {self.timeout:g} s")
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join()
            code = self.process.exitcode
            self.close(kill=True)
            return failed(case, "failed", f"worker died (exit code {code}; out of memory?)")

    def close(self, kill: bool = False) -> None:
        """Stop the worker: ask it to finish, or kill it."""
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.conn.send(None)
        self.process.join()
        self.conn.close()
        self.process = self.conn = None


def _label(case):
    return f"{case['bp']} p={case['p']} {case['cell']} n={case['elements_1d']} {case['ceed']}"


def _summary(record):
    if record["status"] != "ok":
        return f"{record['status']}: {record['reason']}"
    state = "" if record["converged"] else ", NOT converged"
    return (
        f"{record['iterations']} it{state}, {record['dofs_x_iter_per_s'] / 1e6:.3g} "
        f"MDOF x it/s, L2 error {record['l2_error']:.2e}"
    )


def _clock(seconds):
    return str(datetime.timedelta(seconds=round(seconds)))


class Progress:
    """Progress on stderr: a tqdm bar, plain lines (elapsed, ETA), or nothing."""

    def __init__(self, total: int, mode: str) -> None:
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "lines"
        self.bar = None
        if mode == "bar":
            try:
                from tqdm import tqdm
            except ImportError:
                mode = "lines"
            else:
                self.bar = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True)
        self.mode, self.total, self.done = mode, total, 0
        self.start_time = time.perf_counter()

    def start(self, case: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.set_description(_label(case))

    def finish(self, case: dict[str, Any], record: dict[str, Any]) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            if record["status"] != "ok":
                self.bar.write(f"{_label(case)}: {_summary(record)}", file=sys.stderr)
        elif self.mode == "lines":
            elapsed = time.perf_counter() - self.start_time
            eta = elapsed / self.done * (self.total - self.done)
            print(
                f"[{self.done}/{self.total}] {_label(case)}: {_summary(record)} "
                f"({_clock(elapsed)} elapsed, ETA {_clock(eta)})",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if launched_under_mpi():
        return main_distributed(args)
    check_writable(args.out)
    done = {
        case_key(r)
        for r in read_results(args.out)
        if not (args.retry and r.get("status") != "ok") and all(k in r for k in SCHEMA)
    }
    todo = [c for c in cases(args) if case_key(c) not in done]
    skipped = len(cases(args)) - len(todo)
    if args.progress != "off":
        print(f"{len(todo)} cases to run, {skipped} already in {args.out}", file=sys.stderr)
    max_memory = None if args.max_memory is None else args.max_memory * 1e9
    runner = Runner(None if args.in_process else args.timeout, max_memory)
    progress = Progress(len(todo), args.progress)
    bad = 0
    start = time.perf_counter()
    try:
        for i, case in enumerate(todo):
            if args.max_time is not None and time.perf_counter() - start > args.max_time:
                print(f"--max-time reached: {len(todo) - i} cases left, run again to resume")
                break
            progress.start(case)
            record = runner.run(case)
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            bad += record["status"] in ("failed", "timeout") or record["converged"] is False
            progress.finish(case, record)
    finally:
        progress.close()
        runner.close()
    print("\n".join(rate_lines(read_results(args.out))))
    return 1 if bad else 0


def main_distributed(args: argparse.Namespace) -> int:
    """The sweep on the ranks of ``mpiexec``: every case distributed over all of them.

    Rank 0 reads and appends the results file and reports progress; each case
    is set up and solved by all ranks together, in this process (``--timeout``
    does not apply: a rank cannot be replaced mid-collective; ``--max-time``
    does). A case that fails on every rank alike (a
    :class:`~hofem.parallel.ParallelError`, e.g. more ranks than the box has
    cells) is recorded as failed; any other error ends all ranks.
    """
    from hofem import parallel as par

    comm = par.world()
    with par.abort_on_error(prog="python -m hofem.bakeoff sweep"):
        error = None
        try:
            if comm.rank == 0:
                check_writable(args.out)
            if any(c.startswith("/gpu") for c in args.ceed):
                par.bind_device(comm)
        except (UsageError, ImportError) as exc:
            error = exc
        par.check_all(comm, error)
        everything = cases(args, comm.size)
        todo = None
        if comm.rank == 0:
            done = {
                case_key(r)
                for r in read_results(args.out)
                if not (args.retry and r.get("status") != "ok") and all(k in r for k in SCHEMA)
            }
            todo = [c for c in everything if case_key(c) not in done]
            if args.progress != "off":
                print(
                    f"{len(todo)} cases to run on {comm.size} ranks, "
                    f"{len(everything) - len(todo)} already in {args.out}",
                    file=sys.stderr,
                )
        todo = comm.bcast(todo, root=0)
        max_memory = None if args.max_memory is None else args.max_memory * 1e9
        progress = Progress(len(todo), args.progress if comm.rank == 0 else "off")
        bad, start = 0, time.perf_counter()
        for i, case in enumerate(todo):
            elapsed = comm.bcast(time.perf_counter() - start, root=0)
            if args.max_time is not None and elapsed > args.max_time:
                if comm.rank == 0:
                    print(f"--max-time reached: {len(todo) - i} cases left, run again to resume")
                break
            progress.start(case)
            try:
                record = run_case(case, max_memory, comm)
            except par.ParallelError as exc:
                record = failed(case, "failed", str(exc))
            if comm.rank == 0:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")
            bad += record["status"] in ("failed", "timeout") or record["converged"] is False
            progress.finish(case, record)
        progress.close()
        if comm.rank == 0:
            print("\n".join(rate_lines(read_results(args.out))))
    return 1 if bad else 0
