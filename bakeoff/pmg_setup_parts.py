"""Time the host-heavy parts of hf.pmg's set-up on a BP3 box: the hierarchy, the level fill.

Usage::

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python bakeoff/pmg_setup_parts.py \
        --ceed /cpu/self/numba --order 6 --cells 40 --repeat 2 --out /tmp/parts.jsonl
    python bakeoff/pmg_setup_parts.py --ceed /gpu/cuda/gen --order 6 --cells 72 --out F

On ``restrict_dofs(diffusion(space), free)`` of ``cells``^3 hexahedra at ``order``: the
hierarchy (``multigrid_hierarchy``: the coarse spaces' numberings and restrictions, the
coarse forms, the transfers, the free coarse DOFs) and the fill of every level's
``LevelAssembly`` (each level's diagonal and the coarsest element matrices), in wall and
process seconds (the backend synchronized), each ``repeat`` times after one warm-up; then
one more round under cProfile for the calls and cumulative seconds of the set-up's host
pieces (numbering, coordinates, chunks, contractions, products).  One JSON line per run,
appended to ``--out``.
"""

import argparse
import cProfile
import pstats
import time

import hofem as hf
from hofem import meshes
from hofem.bakeoff.common import emit_line
from hofem.forms import multigrid_hierarchy

# (file name end, function) pairs whose calls and cumulative seconds are reported
_WATCHED = (
    ("numbering.py", "_box_offsets"),
    ("numbering.py", "h1_numbering"),
    ("space.py", "element_coordinates"),
    ("mesh.py", "cell_coordinates"),
    ("forms.py", "cells"),
    ("forms.py", "build"),
    ("forms.py", "_pointwise_chunks"),
    ("forms.py", "_fill_levels"),
    ("level_assembly.py", "add"),
    ("entry_contraction.py", "contract_entries"),
    ("element_diagonal.py", "add_element_diagonal"),
    ("level_assembly.py", "linear_assemble_diagonal"),
)


def parts(A):
    """``(hierarchy, fill)`` seconds, each ``(wall, process)``, of one hierarchy of ``A``."""
    sync = A.ceed.backend.synchronize
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    hierarchy = multigrid_hierarchy(A)
    sync()
    levels = (time.perf_counter() - wall, time.process_time() - cpu)
    wall, cpu = time.perf_counter(), time.process_time()
    for assembly in hierarchy.assembly[:-1]:
        assembly.linear_assemble_diagonal()
    hierarchy.assembly[-1].fill()  # the coarsest element matrices (and diagonal)
    sync()
    return levels, (time.perf_counter() - wall, time.process_time() - cpu)


def watched_calls(A):
    """``{"file:function": [calls, cumulative seconds]}`` of one :func:`parts` under cProfile."""
    profiler = cProfile.Profile()
    profiler.runcall(parts, A)
    found = {}
    for (path, _, name), (_, calls, _, cumulative, _) in pstats.Stats(profiler).stats.items():
        for ending, function in _WATCHED:
            if name == function and path.endswith(ending):
                found[f"{ending}:{name}"] = [calls, round(cumulative, 4)]
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ceed", default="/cpu/self/numba")
    parser.add_argument("--order", type=int, default=6)
    parser.add_argument("--cells", type=int, default=40, help="cells per direction")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ceed = hf.Ceed(args.ceed)
    space = hf.H1Space(ceed, meshes.box(args.cells, 3), args.order)
    A = hf.restrict_dofs(hf.diffusion(space), space.free_dofs())
    parts(A)  # compile the coarse operators' and the set-up operators' kernels
    runs = [parts(A) for _ in range(args.repeat)]
    record = dict(
        ceed=ceed.resource, order=args.order, cells=args.cells, dofs=A.shape[0],
        hierarchy_s=[[round(s, 4) for s in run[0]] for run in runs],
        fill_s=[[round(s, 4) for s in run[1]] for run in runs],
        calls=watched_calls(A),
    )  # fmt: skip
    emit_line(args.out, record)


if __name__ == "__main__":
    main()
