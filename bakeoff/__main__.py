"""``python -m bakeoff COMMAND ...``: the laboratory's commands, run from the repository root.

What developers run to compare hofem with other codes and to tune it; users
run ``python -m hofem.bakeoff`` (the problems, ``sweep``, ``plot``,
``bench-parallel``).  ``python -m bakeoff COMMAND --help`` for each:

  bench-cpu       CPU operator apply and fixed-iteration CG throughput
  bench-gpu       GPU kernels, operators and CG (CUDA events)
  tune-gemm       GPU GEMM tuning table for simplex bases
  anchor-libceed  libCEED's own BP1/BP3 on the same boxes
  anchor-mfem     MFEM partial assembly BP1/BP3 on the same boxes
  compare-cpu     /cpu/self/numba, libCEED and MFEM side by side (alternating)
  compare-gpu     hofem's CUDA backends and libCEED's side by side (alternating)

The A/B scripts of single design choices are ``bakeoff/ab/*.py``; results files
and figures are under ``bakeoff/results/``; the dated history of what was
measured is ``bakeoff/JOURNAL.md``.
"""

import importlib
import sys

from hofem.bakeoff.common import Parser, run_reporting_usage_errors

PROG = "python -m bakeoff"
COMMANDS = {
    "bench-cpu": "benchmark_cpu",
    "bench-gpu": "benchmark_gpu",
    "tune-gemm": "tune_gemm",
    "anchor-libceed": "anchor_libceed",
    "anchor-mfem": "anchor_mfem",
    "compare-cpu": "compare_cpu",
    "compare-gpu": "compare_gpu",
}


def parse_command(argv):
    """The command name (``argv[0]``); ``--help`` or a bad name exits (0, or 2 with one line)."""
    parser = Parser(prog=PROG, description=__doc__)
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND")
    return parser.parse_args(argv[:1]).command


def main(argv=None):
    """Run one command of :data:`COMMANDS` with the rest of ``argv``.

    A backend or an optional package that this machine lacks ends the
    command with one line on stderr and exit status 2, as ``python -m hofem.bakeoff``.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    name = parse_command(argv)

    def command():
        module = importlib.import_module(f"{__package__}.{COMMANDS[name]}")
        return module.main(argv[1:])

    return run_reporting_usage_errors(PROG, command)


if __name__ == "__main__":
    sys.exit(main())
