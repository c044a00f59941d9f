"""Time one rank's local operator against the serial box operator, per cell, in one process.

Usage (one thread)::

    NUMBA_NUM_THREADS=1 python bakeoff/par_local_rate.py --box 26 26 26 --ranks 2 \
        --rank 0 1 --serial 26 26 13 --order 4 --repeat 15

Rank ``r`` of ``--ranks`` builds its part of the ``--box`` exactly as
:func:`hofem.parallel.box_local` and :class:`hofem.parallel.ParH1Space` do (the
block or run of cells, its distributed numbering, cells touching no ghost
first), through a stand-in communicator: the box numberings are arithmetic and
send no message, so each rank is timed alone, with no other process spinning in
a barrier. The local operator is BP3's diffusion (``--geometry``, default on the
fly) on that rank's L-vector, without the halo exchange; the serial one is the
same form on :func:`hofem.meshes.box` of ``--serial`` cells. Prints one JSON
line per operator: median wall and process ns per cell of ``--repeat`` applies,
and the cache lines of the L-vector (64 bytes, float64) an element touches on
average (a locality measure of the numbering, independent of the machine's load).
"""

import argparse
import json
import time

import numpy as np

import hofem as hf
from hofem import meshes
from hofem import parallel as par
from hofem.bakeoff.problems import PROBLEMS
from hofem.parallel.numbering import distributed_numbering
from hofem.parallel.space import _interior_first


class OneRank:
    """Rank ``rank`` of a communicator of ``size`` ranks where no rank sends anything.

    Enough for :func:`hofem.parallel.box_local` (whose only collective is the
    error check) and the closed-form box numberings (which read ``rank`` and ``size``).
    """

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def allgather(self, value):
        """Every rank's ``value``: this rank's, as no rank failed."""
        return [value] * self.size


def cache_lines(offsets: np.ndarray) -> float:
    """Mean distinct 64-byte lines of a float64 L-vector that an element's nodes touch."""
    lines = np.sort(offsets.astype(np.int64) // 8, axis=1)  # (num_cells, P)
    return float(np.mean(1 + np.count_nonzero(np.diff(lines, axis=1), axis=1)))


def median_apply(op, n: int, repeat: int):
    """(median wall seconds, median process seconds) of ``repeat`` applies after a warm-up."""
    u, v = np.random.default_rng(0).standard_normal(n), np.zeros(n)
    op.apply(u, v)  # compiles
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        op.apply(u, v)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return float(np.median(walls)), float(np.median(cpus))


def measure(name, ceed, mesh, numbering, args):
    """One JSON line: ns per cell (wall, process) and cache lines per element."""
    bp = PROBLEMS["bp3"]
    space = hf.H1Space(ceed, mesh, args.order, numbering=numbering)
    op = hf.diffusion(space, q_extra=bp.q_extra, quad_mode=bp.quad_mode, geometry=args.geometry)
    wall, cpu = median_apply(op, space.num_dofs, args.repeat)
    cells = mesh.num_cells
    row = {
        "operator": name,
        "cells": cells,
        "nodes": space.num_dofs,
        "wall_ns_per_cell": round(wall / cells * 1e9, 1),
        "cpu_ns_per_cell": round(cpu / cells * 1e9, 1),
        "cache_lines_per_element": round(cache_lines(space.numbering.offsets), 2),
    }
    print(json.dumps(row), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--box", type=int, nargs=3, default=[26, 26, 26], help="global cells")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank", type=int, nargs="+", default=[0], help="ranks to time")
    parser.add_argument("--serial", type=int, nargs=3, default=None, help="serial box cells")
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--geometry", default="on_the_fly")
    parser.add_argument("--ceed", default="/cpu/self/numba")
    args = parser.parse_args(argv)
    ceed = hf.Ceed(args.ceed)
    if args.serial:
        mesh = meshes.box(tuple(args.serial), 3)
        measure(f"serial {'x'.join(map(str, args.serial))}", ceed, mesh, None, args)
    for r in args.rank:
        comm = OneRank(r, args.ranks)
        local_mesh = par.box_local(comm, tuple(args.box), 3)
        numbering, _, _ = _interior_first(distributed_numbering(comm, local_mesh, args.order))
        measure(f"rank {r}/{args.ranks}", ceed, numbering.mesh, numbering, args)


if __name__ == "__main__":
    main()
