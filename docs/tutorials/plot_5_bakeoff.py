"""
The bake-off: a sweep, its figures and its convergence rates
============================================================

The CEED bake-off problems measure throughput as DOFs x CG iterations per
second. Each case is also verified: its L2 error against the manufactured
solution falls at the rate ``p + 1`` as the mesh is refined. This tutorial runs
a small sweep with the command line exactly as a user types it, plots it with
the ``plot`` command, and reads the results file. See :doc:`/bakeoff` for the
schema, the options and the measured CPU and GPU results.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

from hofem.bakeoff.results import convergence_rates, read_results

work = Path(tempfile.mkdtemp())
results = work / "results.jsonl"

# %%
# A sweep
# -------
# BP1 (mass) and BP3 (Poisson), orders 1 and 2, boxes of 2, 3 and 4 cells per
# direction, on the reference backend. Each case becomes one JSON line of the
# results file. Running the same command again skips the cases already in the
# file, so an interrupted sweep resumes.

sweep = [
    sys.executable, "-m", "hofem.bakeoff", "sweep",
    "--problems", "bp1", "bp3", "--orders", "1", "2", "--elements", "2", "3", "4",
    "--ceed", "/cpu/self/ref", "--out", str(results),
]  # fmt: skip
run = subprocess.run(sweep, capture_output=True, text=True, timeout=600)
print(run.stdout[-1500:])
assert run.returncode == 0, run.stderr
records = read_results(results)
print(json.dumps(records[0], indent=1)[:800])

# %%
# Every case is verified
# ----------------------
# Along each size series the L2 error falls at the rate ``p + 1``.

for (bp, p, *_), series in sorted(convergence_rates(records).items()):
    rates = ", ".join(f"{n1}->{n2}: {rate:.2f}" for n1, n2, rate, _ in series)
    print(f"{bp} p={p}: L2 rates {rates} (expected {p + 1})")
    assert series[-1][2] > p + 1 - 0.5

# %%
# Figures
# -------
# The ``plot`` command writes CEED-style figures (throughput against DOFs, one
# line per order; throughput against time per iteration) and a markdown table.
# On boxes this small the fixed cost of each iteration dominates, which is
# exactly what the second view shows.

out = work / "figures"
run = subprocess.run(
    [sys.executable, "-m", "hofem.bakeoff", "plot", str(results), "--out", str(out)],
    capture_output=True,
    text=True,
    timeout=300,
)
assert run.returncode == 0, run.stderr
pictures = sorted(out.glob("*.png"))
print("\n".join(p.name for p in pictures))
for picture in pictures[:2]:
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.imshow(plt.imread(picture))
    ax.set_axis_off()
    fig.tight_layout()
