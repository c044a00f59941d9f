"""One line per run of a results folder's ``serial.jsonl`` and ``parallel.jsonl``:
problem, order, DOFs per GPU, ranks, halo transport, GDOF x iterations / s per GPU and µs
per iteration.

    python bakeoff/par_summary.py OUTDIR
"""

import json
import os
import sys


def main(out: str) -> None:
    for name in ("serial", "parallel"):
        path = f"{out}/{name}.jsonl"
        for line in open(path) if os.path.exists(path) else []:
            d = json.loads(line)
            rate = d.get("dofs_x_iter_per_s_per_rank", d.get("dofs_x_iter_per_s"))
            per = d.get("dofs_per_rank", d.get("dofs"))
            print(name, d.get("tag", ""), d.get("bp"), d.get("p"), f"{per:.3g}", d.get("ranks", 1),
                  d.get("transport", ""),
                  f"{rate / 1e9:.2f} GDOF*it/s per GPU, {per / rate * 1e6:.1f} us/it")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
