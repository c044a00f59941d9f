"""``/gpu/cuda/gen``: each operator generated as one fused CUDA kernel.

G, B, the QFunction, B^T and G^T run in one kernel per operator
(:mod:`hofem.backends.cuda.operator_fuse`): E-vectors and Q-vectors stay in
registers and shared memory; 3D operators of ``P_1d, Q_1d <= 8`` run one warp per element
with every x and y stage (and the collocated derivative's) on the fp64 tensor cores where
that measured faster (:mod:`hofem.backends.cuda.operator_warp`), those of
:mod:`hofem.backends.cuda.operator_tiles` one warp per element with every contraction a
GEMM on them (and of :mod:`hofem.backends.cuda.operator_tiles_grad` the gradients at
Gauss-Lobatto nodes the same way), the shapes of
:mod:`hofem.backends.cuda.operator_blocked` give each thread two columns, and those of
:mod:`hofem.backends.cuda.component_split` run a vector form's scalar kernel on each
component (or, at the shapes of ``operator_warp.in_turn_shapes``, one warp kernel of it
that takes the components in turn).  Operators of dense
(simplex) bases fuse into one kernel of gather, point and node stages
(:mod:`hofem.backends.cuda.operator_simplex`).  Operators that cannot
fuse (tensor and dense bases mixed, oriented restrictions, QFunction bodies that cannot be
traced, simplex elements whose arrays overflow shared memory) and
everything else (restrictions, bases, assembly) are inherited from
``/gpu/cuda/batched``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .batched import _MAX_T_1D, CudaBatchedBackend

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import Array
    from ...typing import OperatorLike as Operator
    from .operator_fuse import FusedOperator

__all__ = ["CudaGenBackend"]


class CudaGenBackend(CudaBatchedBackend):
    """Whole-operator fusion on top of the batched kernels.

    Gradients use the collocated derivative where the basis has one (see
    ``CudaBatchedBackend.collocated``, read when a basis is created).
    """

    resource = "/gpu/cuda/gen"

    def _fused_operator(self, op):
        """The bound fused kernel of ``op`` (None when it cannot fuse), cached per context."""
        from .component_split import ComponentSplitOperator, use_component_split
        from .operator_blocked import BlockedFusedOperator, use_blocked_layout
        from .operator_fuse import FusedOperator, fusable_shape
        from .operator_simplex import simplex_operator
        from .operator_tiles import TileFusedOperator, use_tile_layout
        from .operator_tiles_grad import TileGradFusedOperator, use_tile_grad_layout
        from .operator_warp import WarpFusedOperator, use_components_in_turn, use_warp_layout

        def build(op):
            shape = fusable_shape(op, _MAX_T_1D)
            if shape is None:  # dense (simplex) bases, or None
                return simplex_operator(op)
            if use_component_split(op, shape):
                scalar = op.component_operator()
                run = self._fused_operator(scalar)
                if run is not None:
                    num_comp = op.active_restriction(False).num_comp
                    return ComponentSplitOperator(run, num_comp, scalar.shape[1])
            if use_components_in_turn(op, shape):  # one kernel, the components in turn
                scalar = op.component_operator()
                num_comp = op.active_restriction(False).num_comp
                return WarpFusedOperator(scalar, shape, num_comp, scalar.shape[1])
            if use_tile_layout(op, shape):  # every contraction a GEMM, one warp per element
                return TileFusedOperator(op, shape)
            if use_tile_grad_layout(op, shape):  # the same for gradients at the nodes
                return TileGradFusedOperator(op, shape)
            fused = WarpFusedOperator if use_warp_layout(op, shape) else FusedOperator
            if fused is FusedOperator and use_blocked_layout(op, shape):
                fused = BlockedFusedOperator
            return fused(op, shape)

        return self._traced(op, "gen", build)

    def cg_apply_dot(self, op: Operator) -> FusedOperator | None:
        """``op``'s fused kernel where it can also return ``u . Au`` (``dot_pairs``), or None.

        ``op`` is a single operator (``DeviceCGTarget.fusable``; ``operator_apply_dot``).
        """
        from .operator_fuse import dot_pairs

        run = self._fused_operator(op)
        return run if run is not None and dot_pairs(op) is not None else None

    def operator_apply_dot(self, op: Operator, u: Array, v: Array) -> Array | None:
        """``v = A u`` and ``u . v`` from the fused kernel's dot variant where it has one
        (:meth:`cg_apply_dot`, the block partial sums added in order), else None."""
        run = self.cg_apply_dot(op)
        if run is None:
            return None
        buffers = op.backend_data.get("gen-dot")
        if buffers is None:  # (num_blocks,) partial sums; a zero status: run
            buffers = (self.xp.empty(run.num_blocks), self.xp.zeros(1, dtype=np.int64))
            op.backend_data["gen-dot"] = buffers
        v[...] = 0.0
        run.apply_dot(u, v, *buffers)
        return buffers[0].sum()

    def operator_apply_add(self, op: Operator, u: Array | None, v: Array) -> None:
        """v += A u in one fused kernel, or by the batched stages when ``op`` cannot fuse."""
        run = self._fused_operator(op)
        if run is None:
            super().operator_apply_add(op, u, v)
            return
        run(u, v)
