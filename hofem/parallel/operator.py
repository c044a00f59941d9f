"""``ParOperator``: ``y_T = Pᵀ A_local P x_T``, the halo exchange hidden behind interior work."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..backends.contract import DeviceCGTarget, DistributedParts
from ..forms import diffusion as _diffusion
from ..forms import mass as _mass
from ..operator import _OperatorBase
from ..typing import Array
from ..vector_ops import VectorOps

if TYPE_CHECKING:
    from ..space import H1Space
    from .exchange import Exchange
    from .space import ParH1Space

__all__ = ["ParOperator", "ParallelVectorOps", "diffusion", "mass"]


class ParallelVectorOps(VectorOps):
    """CG's vector work on T-vectors: a rank's own :class:`~hofem.vector_ops.VectorOps`
    for the updates, and every inner product summed over the ranks (``norm``
    follows from ``dot``).

    Parameters
    ----------
    inner : hofem.vector_ops.VectorOps
    exchange : hofem.parallel.exchange.Exchange
        Its ``allreduce`` (0-d array -> its sum over the ranks) and
        ``allreduce_start`` ((k,) array -> ``finish()`` returning the sums: one
        reduction per CG iteration, started at once).
    """

    def __init__(self, inner: VectorOps, exchange: Exchange) -> None:
        super().__init__(inner.xp)
        self.inner = inner
        self._sum = exchange.allreduce
        self._sum_start = exchange.allreduce_start

    def dot(self, a: Array, b: Array) -> Array:
        return self._sum(self.inner.dot(a, b))

    def length(self, a: Array) -> int:
        return round(float(self._sum(self.xp.asarray(float(a.size)))))

    def solve_scope(self, n: int) -> contextlib.AbstractContextManager:
        return self.inner.solve_scope(n)

    def update_xr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> None:
        self.inner.update_xr(rz, pAp, breakdown, p, Ap, x, r)

    def update_xr_rr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> Array:
        return self._sum(self.inner.update_xr_rr(rz, pAp, breakdown, p, Ap, x, r))

    def update_p(self, z: Array, rz_new: Array, rz: Array, p: Array) -> None:
        self.inner.update_p(z, rz_new, rz, p)

    def local_dots(self, pairs: Sequence[tuple[Array, Array]]) -> Array:
        return self.inner.local_dots(pairs)

    def sum_start(self, values: Array) -> Callable[[], Array]:
        """One all-reduce of the (k,) ``values`` for the whole iteration, started now."""
        return self._sum_start(values)

    def sum_finish(self, pending: Callable[[], Array]) -> Array:
        return pending()

    def variant_scalars(
        self,
        gamma: Array,
        gamma_old: Array,
        delta: Array,
        alpha_old: Array,
        first: bool,
        breakdown: Array,
    ) -> tuple[Array, Array]:
        return self.inner.variant_scalars(gamma, gamma_old, delta, alpha_old, first, breakdown)

    def single_reduction_update(
        self,
        alpha: Array,
        beta: Array,
        u: Array,
        w: Array,
        p: Array,
        s: Array,
        x: Array,
        r: Array,
    ) -> None:
        self.inner.single_reduction_update(alpha, beta, u, w, p, s, x, r)

    def pipelined_update(self, alpha: Array, beta: Array, vectors: Sequence[Array | None]) -> Array:
        """The rank's recurrences; returns its local inner products (for :meth:`sum_start`)."""
        return self.inner.pipelined_update(alpha, beta, vectors)

    def chebyshev_start(
        self, c: float, inv_diag: Array, b: Array, Ax: Array | None, r: Array, d: Array
    ) -> None:
        self.inner.chebyshev_start(c, inv_diag, b, Ax, r, d)

    def chebyshev_step(
        self,
        a: float,
        c: float,
        inv_diag: Array,
        Ad: Array,
        d: Array,
        x: Array,
        r: Array,
        b: Array | None = None,
    ) -> None:
        self.inner.chebyshev_step(a, c, inv_diag, Ad, d, x, r, b)

    def chebyshev_last(
        self, Ad: Array, d: Array, x: Array, r: Array, b: Array | None = None
    ) -> None:
        self.inner.chebyshev_last(Ad, d, x, r, b)

    def scatter_scaled(self, values: Array, index: Array, scale: Array, out: Array) -> None:
        self.inner.scatter_scaled(values, index, scale, out)

    def gather_scaled(
        self, w: Array, index: Array, scale: Array, v: Array, add: bool = False
    ) -> None:
        self.inner.gather_scaled(w, index, scale, v, add)


class ParOperator(_OperatorBase):
    """A distributed square operator on the T-vectors of a :class:`ParH1Space`.

    ``build(space)`` makes an ordinary hofem operator on an
    :class:`hofem.H1Space` (e.g. ``hofem.diffusion``); it is called on the
    rank's interior cells (touching no ghost node) and on the rest, and an
    application overlaps communication with the interior work:

    1. start ``P`` (owned values to the ranks that ghost them);
    2. apply the interior cells;
    3. finish ``P``, apply the cells that touch ghosts;
    4. ``Pᵀ``: ghost contributions summed into their owners.

    Works with :func:`hofem.cg` (inner products are summed over the ranks),
    :func:`hofem.jacobi`, :func:`hofem.restrict_dofs` (with T-vector indices
    such as ``space.free_dofs()``) and :meth:`as_linear_operator`.

    Parameters
    ----------
    space : ParH1Space
    build : callable
        ``build(h1_space) -> Operator`` on the L-vectors of that space.

    Attributes
    ----------
    interior, boundary : Operator or None
        The local operators on the two cell ranges (None where a range is empty).
    build : callable
        As given: the same operator on another space (a multigrid level).
    """

    def __init__(self, space: ParH1Space, build: Callable[[H1Space], _OperatorBase]) -> None:
        local, k = space.local, space.num_interior
        self.space, self.build = space, build
        self.ceed = space.ceed
        ranges = [r for r in ((0, k), (k, local.num_elem)) if r[0] < r[1]]
        parts = dict(zip(ranges, local.element_subsets(*ranges), strict=True))
        self.interior = build(parts[0, k]) if k > 0 else None
        self.boundary = build(parts[k, local.num_elem]) if k < local.num_elem else None
        for op in (self.interior, self.boundary):
            if op is not None and op.shape != (local.num_dofs, local.num_dofs):
                raise ValueError(
                    f"build(space) returned an operator of shape {op.shape}; it must be square "
                    f"on the space's L-vector ({local.num_dofs})"
                )
        xp = self.ceed.xp
        self._x = xp.zeros(local.num_dofs)  # (l_size,) P x
        self._y = xp.zeros(local.num_dofs)  # (l_size,) A P x

    @property
    def shape(self) -> tuple[int, int]:
        n = self.space.num_owned_dofs
        return (n, n)

    def _add(self, u, v):
        exchange, x, y = self.space.exchange, self._x, self._y
        exchange.start_prolong(u, x)
        y[...] = 0.0
        if self.interior is not None:
            self.interior.apply_add(x, y)
        exchange.finish_prolong(x)
        if self.boundary is not None:
            self.boundary.apply_add(x, y)
        exchange.prolong_transpose_add(y, v)

    def linear_assemble_diagonal(self) -> Array:
        """Diagonal of the global matrix on the owned DOFs: local diagonals summed with ``Pᵀ``."""
        diag = self.ceed.xp.zeros(self.space.local.num_dofs)
        for op in (self.interior, self.boundary):
            if op is not None:
                diag += op.linear_assemble_diagonal()
        return self.space.exchange.prolong_transpose(diag)

    def device_cg_target(self) -> DeviceCGTarget | None:
        """The rank's parts for a device CG on its L-vectors (CUDA backends, the ``nccl``
        or ``ipc`` transport), else None (host loop)."""
        exchange = self.space.exchange
        if self.ceed.backend.device_cg is None or exchange.transport == "mpi":
            return None
        parts = DistributedParts(
            exchange, self.interior, self.boundary, exchange.l_size, exchange.owned_l()
        )
        # the loop's p and A p are L-vectors like this operator's scratch ones, which
        # nothing else uses while the loop runs
        return DeviceCGTarget(
            operator=self, fusable=False, work_vectors=(self._x, self._y), distributed=parts
        )

    def vector_ops(self) -> VectorOps:
        """Inner products summed over the ranks (see :class:`ParallelVectorOps`)."""
        return ParallelVectorOps(super().vector_ops(), self.space.exchange)

    def __repr__(self) -> str:
        return f"ParOperator(shape={self.shape}, space={self.space!r})"


def mass(space: ParH1Space, **kwargs: Any) -> ParOperator:
    """Distributed :func:`hofem.mass` on a :class:`ParH1Space` (same keyword arguments)."""
    return ParOperator(space, lambda s: _mass(s, **kwargs))


def diffusion(space: ParH1Space, **kwargs: Any) -> ParOperator:
    """Distributed :func:`hofem.diffusion` on a :class:`ParH1Space` (same keyword arguments)."""
    return ParOperator(space, lambda s: _diffusion(s, **kwargs))
