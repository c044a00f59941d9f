"""gen's fused kernel register-blocked: the slab with two x-adjacent columns per thread.

The slab of :mod:`.operator_fuse` gives each thread one z column of its element and
contracts x and y through the element's shared buffer.  At ``Q_1d = 9, 10`` (p = 7, 8), past
the one-warp-per-element layout, it is bound by shared-memory loads: along y each
multiply-add loads its operand (a column read, ``buf(k, i, x)``), along x the compiler pairs
the row reads (``buf(k, y, i), buf(k, y, i + 1)``) but each value still serves one
multiply-add.  The blocked layout (``kernel_source(..., blocking=2)``, ``basis_blocked.cuh``)
gives each thread the columns ``x = 2 tx, 2 tx + 1`` at ``y = ty``, so that every load serves
both columns: half the threads per element (``ceil(T_1d / 2) T_1d``), twice the registers
along the slowest axis, two elements per block (:func:`~.operator_fuse.fused_block`).

The count, per column and per stage, for ``P_1d = 9, Q_1d = 10`` (the forward stages: IN =
9, OUT = 10; the transposes the other way; 90 multiply-adds a stage, 100 for the collocated
derivative's), in shared loads per multiply-add of the buffer and the matrices (the thread's
matrix rows read once per stage):

=========================  ================================  ================================
stage                      slab                              blocked
=========================  ================================  ================================
z (constant ``B``)         0                                 0
z^T (shared ``Bt``)        0.5 (broadcast pairs)             0.25 (one entry, both columns)
y, y^T                     1 + row/90: 1.1                   0.5 (one pair, both columns)
x, x^T                     0.5 (pairs) + row: 0.6            0.25 (a pair, two rows) + rows
D along x (BP3), D^T       0.5 + 0.1: 0.6                    0.25 + 0.2 / 2: 0.35
D along y (BP3), D^T       1 + 0.1: 1.1                      0.5 + 0.05: 0.55
D slowest (shared ``D``)   0.5                               0.25
=========================  ================================  ================================

so about 0.65 loads per multiply-add for the slab's BP1 and 0.3 for the blocked one.  The
sm_90 PTX agrees (``python -m bakeoff.ab.ab_blocked count``: BP1 p = 8 stored, 491 shared
loads per slab thread of one column against 426 per blocked thread of two; BP3 1131
against 986).  Registers per thread (sm_90, ``nvcc -Xptxas -v``, the CG variant): BP1 176-182
against the slab's 100-134, no spills; BP3 255 for both, the blocked kernels spilling 376-616
bytes (the two columns' three gradient blocks in and out, 120 values, beside the
prefetched q-data).

:func:`use_blocked_layout` chooses it where the A/B run on a GPU
(``bakeoff/ab/ab_blocked.py``, numbers in ``bakeoff/JOURNAL.md``) measured it faster than the
slab: :data:`BLOCKED_SHAPES` for operators that interpolate one value per point (BP1 at
``Q_1d = 9``), :data:`BLOCKED_GRAD_SHAPES` for those with gradients (none: the spills above
cost more than the loads save).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import tuning
from .operator_fuse import FusedOperator, has_grad, point_rows

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import OperatorLike as Operator

__all__ = ["BLOCKED_GRAD_SHAPES", "BLOCKED_SHAPES", "BlockedFusedOperator", "use_blocked_layout"]

# the (dim, P_1d, Q_1d) that run the blocked layout, for one interpolated value per point
# and with gradients: where two columns a thread save more shared loads than their extra
# registers cost (cuda_fused.json, measured by bakeoff/ab/ab_blocked.py)
BLOCKED_SHAPES = tuning.fused().blocked_shapes
BLOCKED_GRAD_SHAPES = tuning.fused().blocked_grad_shapes


def use_blocked_layout(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``, ``(dim, P_1d, Q_1d)``) in the blocked
    layout rather than the slab: 3D, ``shape`` in :data:`BLOCKED_GRAD_SHAPES` where the main
    basis has gradients, else in :data:`BLOCKED_SHAPES` where one value per point goes in and
    out (more add registers the A/B run has not measured; the coordinates read on the fly
    are on a cell-constant basis and count for neither)."""
    if shape[0] != 3:
        return False
    if has_grad(op):
        return tuple(shape) in BLOCKED_GRAD_SHAPES
    return max(point_rows(op)) == 1 and tuple(shape) in BLOCKED_SHAPES


class BlockedFusedOperator(FusedOperator):
    """:class:`~.operator_fuse.FusedOperator` register-blocked over two x-adjacent columns
    per thread (3D shapes; the slab's arguments, its CG variant, its register cap; never the
    tensor-core stages).

    Parameters
    ----------
    op : Operator
        On a batched CUDA backend, traceable.
    shape : tuple
        ``(3, P_1d, Q_1d)`` from :func:`~.operator_fuse.fusable_shape`.

    Raises
    ------
    ValueError
        ``shape`` not 3D.
    """

    layout = "blocked"
    blocking = 2

    def __init__(self, op, shape):
        if shape[0] != 3:
            raise ValueError(f"the blocked layout needs a 3D operator, not shape {shape}")
        super().__init__(op, shape)
