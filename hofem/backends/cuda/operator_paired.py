"""gen's fused kernel in the paired layout: the slab with its buffer read two entries a load.

The slab of :mod:`.operator_fuse` gives each thread a z column of its element and contracts
x and y through the element's shared buffer, one output row per thread: each multiply-add
loads its operand from the buffer and its matrix entry at a thread-dependent index, two
shared loads per multiply-add, and that pipe bounds the kernel at ``Q_1d = 9, 10`` (p = 7,
8), where one warp cannot hold an element (:mod:`.operator_warp` stops at 8).  The paired
layout (``basis_tensor.cuh``'s ``PAIRED``) keeps the slab's threads, points and QFunction
stage and changes the stages through the buffer:

- the thread's matrix row (or column, for the transposes of the collocated derivative) is
  read once per stage into registers;
- the buffer holds two copies of the element's levels, x-contiguous and y-contiguous, rows
  padded to an even length, so that the x stage reads its lines along x and the y stage
  along y as 16-byte pairs: one shared load per two multiply-adds, conflict-free across the
  quarter-warp at ``T_1d = 9, 10`` (rows 80 bytes apart);
- the y stage writes its output into the other copy, so one barrier of the slab's four per
  contraction goes, and the collocated derivative's transposes run x and y in one pass.

Per thread of BP1 at p = 8 (``P_1d = 9, Q_1d = 10``, stored q-data, sm_90 PTX, every loop
unrolled) both kernels issue 540 multiply-adds; the slab 404 shared loads (84 of them
16-byte: the compiler pairs the x stage's reads, not the y stage's column reads), the paired
layout 320 (168 of 16 bytes; 90 of its 8-byte ones are the z^T stage's broadcast reads of
``Bt``, outside the constant-memory budget).  A block holds
:func:`~.operator_fuse.fused_block`'s elements (two at ``T_1d = 10``, three at 9).  The z
stage stays in registers with the matrices in constant memory, as in the slab.

:func:`use_paired_layout` chooses it for the shapes of :data:`PAIRED_SHAPES` (none until
measured: ``bakeoff/ab/ab_paired.py`` times it against the slab).
"""

from .operator_fuse import FusedOperator

__all__ = ["PAIRED_SHAPES", "PairedFusedOperator", "use_paired_layout"]

# the (dim, P_1d, Q_1d) of gen's fused kernels that run the paired layout: none until an A/B
# run on a device (bakeoff/ab/ab_paired.py) measures it faster than the slab
PAIRED_SHAPES = frozenset()


def use_paired_layout(op, shape) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``, ``(dim, P_1d, Q_1d)``) in the paired
    layout rather than the slab: ``shape`` in :data:`PAIRED_SHAPES` (3D)."""
    return shape[0] == 3 and tuple(shape) in PAIRED_SHAPES


class PairedFusedOperator(FusedOperator):
    """:class:`~.operator_fuse.FusedOperator` in the paired layout (3D shapes; the slab's
    arguments, its CG variant, its register cap; never the tensor-core stages).

    Parameters
    ----------
    op : Operator
        On a batched CUDA backend, traceable.
    shape : tuple
        ``(3, P_1d, Q_1d)`` from :func:`~.operator_fuse.fusable_shape`.
    """

    layout = "paired"
    paired = True

    def __init__(self, op, shape):
        if shape[0] != 3:
            raise ValueError(f"the paired layout needs a 3D operator, not shape {shape}")
        super().__init__(op, shape)
