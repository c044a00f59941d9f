"""gen's multi-component forms one component at a time, where that runs faster.

A vector mass or Poisson form (BP2, BP4, BP6) applies the same scalar operator to each
component: on component-major L-vectors, ``A u = [B u_0; B u_1; B u_2]``
(:attr:`hofem.Operator.component_operator` gives ``B``, made by the form with the same
q-data or coordinates).  The fused kernel of ``A`` holds all components of a column or a
point at once: three times the values of ``B``'s kernel in registers and shared memory.
Where that spills (the vector Poisson at ``Q_1d`` = 9, 10), ``B``'s kernel launched once
per component block reads the geometry three times but runs at the scalar kernel's speed.

:func:`use_component_split` chooses it for the shapes of ``cuda_fused.json``'s
``component_split_shapes`` (one value per point: the mass),
``component_split_grad_shapes`` (gradients, stored q-data: Poisson) and
``component_split_grad_on_the_fly_shapes`` (gradients, the geometry on the fly), measured by
``bakeoff/ab/ab_component_split.py`` (numbers in ``bakeoff/JOURNAL.md``).  With stored
q-data each component's pass reads the q-data again (six values a point for Poisson), so the
split pays at fewer shapes than on the fly, where it recomputes a cell's Jacobian instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import tuning
from ...constants import EVAL_NONE
from .operator_fuse import has_grad

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import Array
    from ...typing import OperatorLike as Operator

__all__ = [
    "SPLIT_GRAD_ON_THE_FLY_SHAPES",
    "SPLIT_GRAD_SHAPES",
    "SPLIT_SHAPES",
    "ComponentSplitOperator",
    "use_component_split",
]

# the (dim, P_1d, Q_1d) of multi-component forms that run their one-component kernel per
# component: without gradients, with gradients and stored q-data, with gradients and the
# geometry on the fly (cuda_fused.json, measured by ab_component_split)
SPLIT_SHAPES = tuning.fused().component_split_shapes
SPLIT_GRAD_SHAPES = tuning.fused().component_split_grad_shapes
SPLIT_GRAD_ON_THE_FLY_SHAPES = tuning.fused().component_split_grad_on_the_fly_shapes


def use_component_split(op: Operator, shape: tuple[int, int, int]) -> bool:
    """Whether gen applies ``op`` (of fused ``shape``, ``(dim, P_1d, Q_1d)``) as its
    :attr:`~hofem.Operator.component_operator` on each component block."""
    if op.component_operator is None:
        return False
    if not has_grad(op):
        return tuple(shape) in SPLIT_SHAPES
    stored = any(f.eval_mode is EVAL_NONE for f in op.input_fields)
    return tuple(shape) in (SPLIT_GRAD_SHAPES if stored else SPLIT_GRAD_ON_THE_FLY_SHAPES)


class ComponentSplitOperator:
    """A one-component fused kernel run on each block of component-major L-vectors.

    It offers what gen and the device CG loop use of a fused kernel: ``run(u, v)``,
    ``apply_dot`` and ``num_blocks`` (the partial sums of the blocks one after the
    other), and ``layout``.

    Parameters
    ----------
    run : FusedOperator
        The kernel of the one-component operator, of L-vectors of ``n`` entries.
    num_comp : int
    n : int
        Entries of one component's block.
    """

    def __init__(self, run, num_comp: int, n: int) -> None:
        self.run, self.num_comp, self.n = run, num_comp, n
        self.num_blocks = num_comp * run.num_blocks
        self.layout = f"{run.layout} per component"

    def _blocks(self, a):
        return [a[c * self.n : (c + 1) * self.n] for c in range(self.num_comp)]  # (n,) views

    def __call__(self, u: Array, v: Array) -> None:
        """``v (num_comp n,) += A u``."""
        for u_c, v_c in zip(self._blocks(u), self._blocks(v), strict=True):
            self.run(u_c, v_c)

    def apply_dot(self, u: Array, v: Array, dot_partial: Array, status: Array) -> None:
        """``v += A u`` and the blocks' parts of ``u . Au`` in ``dot_partial``
        ``(num_blocks,)`` (component after component); as ``FusedOperator.apply_dot``."""
        step = self.run.num_blocks
        for c, (u_c, v_c) in enumerate(zip(self._blocks(u), self._blocks(v), strict=True)):
            self.run.apply_dot(u_c, v_c, dot_partial[c * step : (c + 1) * step], status)
