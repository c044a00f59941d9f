"""CG with one reduction per iteration: Chronopoulos-Gear and Ghysels-Vanroose.

The loops :func:`hofem.cg` runs for ``variant="single_reduction"`` and
``variant="pipelined"``.  Both compute the inner products of an iteration
together, ``gamma = r . u``, ``delta = w . u`` and ``r . r`` (``u = M r``,
``w = A u``), and sum them over the ranks in one reduction of three values
(:meth:`hofem.vector_ops.VectorOps.dots`); standard CG needs two (``p . Ap`` and
``r . z``, a third for ``||r||`` when preconditioned).  The pipelined loop also
starts that reduction before the iteration's preconditioner and operator
application and finishes it after them, so a non-blocking reduction overlaps the
application (:meth:`~hofem.vector_ops.VectorOps.sum_start`).

The stopping test is standard CG's: ``||r_i|| <= tol`` on the recursively updated
residual, looked at every ``check_every`` iterations.  ``r_i . r_i`` arrives with
the next iteration's reduction, so each loop applies the operator once more than
standard CG before it stops, and reports the same iteration count ``i``.

Each loop returns ``(status, iterations, residual_norm)`` with ``status`` one of
``"converged"``, ``"breakdown"``, ``"maxiter"`` (:mod:`hofem.solvers` reports it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from .typing import Array

if TYPE_CHECKING:
    from .vector_ops import VectorOps

__all__ = ["VARIANTS", "pipelined_loop", "single_reduction_loop"]

VARIANTS = ("standard", "single_reduction", "pipelined")


def _stop(iteration, rr, breakdown, tol, maxiter, check_every):
    """The loop's outcome at a check of ``r_iteration . r_iteration = rr``, else None."""
    if iteration % check_every != 0 and iteration < maxiter:
        return None
    r_norm = math.sqrt(float(rr))  # one host synchronization per check
    if iteration > 0 and (bool(breakdown) or not math.isfinite(r_norm)):
        return "breakdown", iteration, r_norm
    if r_norm <= tol:
        return "converged", iteration, r_norm
    if iteration >= maxiter:
        return "maxiter", iteration, r_norm
    return None


def _pairs(r, u, w):
    """The inner products of one iteration: ``r . u, w . u`` and, preconditioned, ``r . r``."""
    if u is None:  # u = r: gamma is r . r
        return (r, r), (w, r)
    return (r, u), (w, u), (r, r)


def single_reduction_loop(
    ops: VectorOps,
    apply: Callable[[Array, Array], object],
    precond: Callable[[Array], Array] | None,
    x: Array,
    r: Array,
    tol: float,
    maxiter: int,
    check_every: int,
    callback: Callable[[Array], object] | None,
) -> tuple[str, int, float]:
    """Chronopoulos-Gear CG from ``x`` (n,) and its residual ``r`` (n,), both updated in place.

    Per iteration: ``u = M r; w = A u``; one reduction of ``r . u, w . u, r . r``;
    ``p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s`` in one pass.
    ``apply(v, out)`` writes ``A v`` into ``out``.
    """
    xp = ops.xp
    breakdown = xp.zeros((), dtype=bool)  # device flag, as in the standard loop
    p, s, w = (xp.zeros_like(r) for _ in range(3))  # (n,) each
    gamma_old = alpha = None
    iteration = 0
    while True:
        u = precond(r) if precond else None
        apply(r if u is None else u, w)
        values = ops.dots(_pairs(r, u, w))  # (2,) or (3,): the one reduction
        rr = values[0] if u is None else values[2]
        stop = _stop(iteration, rr, breakdown, tol, maxiter, check_every)
        if stop is not None:
            return stop
        gamma = values[0]
        alpha, beta = ops.variant_scalars(
            gamma, gamma_old, values[1], alpha, iteration == 0, breakdown
        )
        ops.single_reduction_update(alpha, beta, r if u is None else u, w, p, s, x, r)
        gamma_old = gamma
        iteration += 1
        if callback is not None:
            callback(x)


def pipelined_loop(
    ops: VectorOps,
    apply: Callable[[Array, Array], object],
    precond: Callable[[Array], Array] | None,
    x: Array,
    r: Array,
    tol: float,
    maxiter: int,
    check_every: int,
    callback: Callable[[Array], object] | None,
) -> tuple[str, int, float]:
    """Ghysels-Vanroose pipelined CG from ``x`` (n,) and its residual ``r`` (n,), in place.

    Keeps ``u = M r``, ``w = A u``, ``s = A p``, ``q = M s``, ``z = A q`` by
    recurrences.  Per iteration: start the reduction of ``r . u, w . u, r . r``;
    ``m = M w; n = A m`` while it runs; finish it; update the eight vectors and
    form the next local inner products in one pass
    (:meth:`~hofem.vector_ops.VectorOps.pipelined_update`).  Unpreconditioned,
    ``u``, ``m``, ``q`` are ``r``, ``w``, ``s`` and are not stored.
    """
    xp = ops.xp
    breakdown = xp.zeros((), dtype=bool)
    u = None if precond is None else xp.array(precond(r), copy=True)  # (n,)
    w, n, p, s, z = (xp.zeros_like(r) for _ in range(5))  # (n,) each
    q = None if precond is None else xp.zeros_like(r)
    apply(r if u is None else u, w)
    pending = ops.sum_start(ops.local_dots(_pairs(r, u, w)))
    gamma_old = alpha = None
    iteration = 0
    while True:
        m = precond(w) if precond else None
        apply(w if m is None else m, n)  # overlaps the reduction in flight
        values = ops.sum_finish(pending)
        rr = values[0] if u is None else values[2]
        stop = _stop(iteration, rr, breakdown, tol, maxiter, check_every)
        if stop is not None:
            return stop
        gamma = values[0]
        alpha, beta = ops.variant_scalars(
            gamma, gamma_old, values[1], alpha, iteration == 0, breakdown
        )
        local = ops.pipelined_update(alpha, beta, (x, r, u, w, m, n, p, s, q, z))
        pending = ops.sum_start(local)
        gamma_old = gamma
        iteration += 1
        if callback is not None:
            callback(x)
