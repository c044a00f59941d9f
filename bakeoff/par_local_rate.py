"""Time one rank's local operator against the serial box operator, per cell, in one process.

Usage (one thread)::

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 python bakeoff/par_local_rate.py --box 26 26 26 \
        --ranks 2 --rank 0 1 --serial 26 26 13 --order 4 --repeat 31 \
        [--other-numbering OLD_TREE/hofem/parallel/box_numbering.py]

Rank ``r`` of ``--ranks`` builds its part of the ``--box`` exactly as
:func:`hofem.parallel.box_local` and :class:`hofem.parallel.ParH1Space` do (the
block or run of cells, its distributed numbering, cells touching no ghost
first), through a stand-in communicator: the box numberings are arithmetic and
send no message, so each rank is timed alone, with no other process spinning in
a barrier. ``--other-numbering`` adds the same ranks numbered by another version
of ``box_numbering.py`` (an A/B of the numbering in one process). The local
operator is BP3's diffusion (``--geometry``, default on the fly) on the rank's
L-vector, without the halo exchange; the serial one is the same form on
:func:`hofem.meshes.box` of ``--serial`` cells. The applies are interleaved, one
of each operator per round, so a shared machine's load falls on all alike.
Prints one JSON line per operator: median wall and process ns per cell, the
median over rounds of its process time per cell over the serial one's, and the
cache lines of the L-vector (64 bytes, float64) an element touches on average
(the numbering's locality, independent of the load).
"""

import argparse
import importlib.util
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


def other_numbering(path):
    """``box_numbering.py`` at ``path`` imported as a module of :mod:`hofem.parallel`."""
    spec = importlib.util.spec_from_file_location("hofem.parallel._other_box_numbering", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rank_numbering(comm, local_mesh, order, module):
    """The rank's numbering by ``module`` (None: hofem's), cells touching no ghost first."""
    if module is None:
        numbering = distributed_numbering(comm, local_mesh, order)
    elif local_mesh.box_cuts is not None:
        numbering = module.box_numbering(comm, local_mesh, order)
    else:
        numbering = module.range_numbering(comm, local_mesh, order)
    return _interior_first(numbering)[0]


def operator(ceed, mesh, numbering, args):
    """(BP3's operator on ``mesh``, its L-vector size, cache lines per element)."""
    bp = PROBLEMS["bp3"]
    space = hf.H1Space(ceed, mesh, args.order, numbering=numbering)
    op = hf.diffusion(space, q_extra=bp.q_extra, quad_mode=bp.quad_mode, geometry=args.geometry)
    return op, space.num_dofs, cache_lines(space.numbering.offsets)


def interleaved(ops, repeat):
    """Wall and process seconds ``(repeat, len(ops))``: one apply of each op per round."""
    vectors = [(np.random.default_rng(0).standard_normal(n), np.zeros(n)) for _, n in ops]
    for (op, _), (u, v) in zip(ops, vectors, strict=True):
        op.apply(u, v)  # compiles
    wall, cpu = np.zeros((repeat, len(ops))), np.zeros((repeat, len(ops)))
    for r in range(repeat):
        for k, ((op, _), (u, v)) in enumerate(zip(ops, vectors, strict=True)):
            w, c = time.perf_counter(), time.process_time()
            op.apply(u, v)
            wall[r, k], cpu[r, k] = time.perf_counter() - w, time.process_time() - c
    return wall, cpu


def build(ceed, args):
    """The cases ``(name, cells, operator, L-vector size, cache lines)``, serial first."""
    shape = tuple(args.serial or args.box)
    mesh = meshes.box(shape, 3)
    cases = [
        (f"serial {'x'.join(map(str, shape))}", mesh.num_cells, *operator(ceed, mesh, None, args))
    ]
    modules = [("", None)]
    if args.other_numbering:
        modules.append((" other", other_numbering(args.other_numbering)))
    for r in args.rank:
        comm = OneRank(r, args.ranks)
        local_mesh = par.box_local(comm, tuple(args.box), 3)
        for label, module in modules:
            numbering = rank_numbering(comm, local_mesh, args.order, module)
            name, cells = f"rank {r}/{args.ranks}{label}", numbering.mesh.num_cells
            cases.append((name, cells, *operator(ceed, numbering.mesh, numbering, args)))
    return cases


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--box", type=int, nargs=3, default=[26, 26, 26], help="global cells")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rank", type=int, nargs="+", default=[0], help="ranks to time")
    parser.add_argument("--serial", type=int, nargs=3, help="serial box cells (default --box)")
    parser.add_argument("--order", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--geometry", default="on_the_fly")
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--other-numbering", default=None, help="another box_numbering.py")
    args = parser.parse_args(argv)
    cases = build(hf.Ceed(args.ceed), args)
    wall, cpu = interleaved([(op, n) for _, _, op, n, _ in cases], args.repeat)
    serial = cpu[:, 0] / cases[0][1]  # (repeat,) the serial process seconds per cell
    for k, (name, cells, _, nodes, lines) in enumerate(cases):
        row = {
            "operator": name,
            "cells": cells,
            "nodes": nodes,
            "wall_ns_per_cell": round(float(np.median(wall[:, k])) / cells * 1e9, 1),
            "cpu_ns_per_cell": round(float(np.median(cpu[:, k])) / cells * 1e9, 1),
            "cpu_to_serial": round(float(np.median(cpu[:, k] / cells / serial)), 4),
            "cache_lines_per_element": round(lines, 2),
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
