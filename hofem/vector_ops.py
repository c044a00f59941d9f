"""The vector work of CG, one object per array library or backend.

:func:`hofem.cg` does all its vector arithmetic through a :class:`VectorOps`:
array expressions of NumPy or CuPy here; every backend hands out its own
(``backend.vector_ops()``: these expressions by default, fused CuPy kernels on the
CUDA backends, :class:`hofem.backends.cuda.vector_ops.CupyVectorOps`, parallel
Numba loops on ``/cpu/self/numba``).  Scalars (``rz``, ``pAp``) stay 0-d arrays
of the vectors' library, so on a GPU nothing synchronizes with the host.
"""

import contextlib
import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from .typing import Array

__all__ = ["VectorOps"]


class VectorOps:
    """CG's vector steps as array expressions of ``xp`` (NumPy or CuPy).

    Every step that forms ``alpha = rz / pAp`` also raises ``breakdown`` (a 0-d
    bool array, updated in place) where ``p.Ap <= 0`` with ``rz != 0`` or ``pAp``
    is not finite; ``alpha`` is then ``rz`` (a non-positive ``pAp`` is replaced
    by 1), as is ``beta`` for ``rz = 0``.
    """

    def __init__(self, xp: ModuleType = np) -> None:
        self.xp = xp

    def dot(self, a: Array, b: Array) -> Array:
        """``a . b`` as a 0-d array."""
        return self.xp.vdot(a, b)

    def norm(self, a: Array) -> float:
        """``||a||`` as a host float (one synchronization on a GPU)."""
        return math.sqrt(float(self.dot(a, a)))

    def length(self, a: Array) -> int:
        """Entries of ``a`` (over all ranks, for distributed vectors)."""
        return a.size

    def solve_scope(self, n: int) -> contextlib.AbstractContextManager:
        """The context a host-loop solve of ``n`` local unknowns runs in: where the
        backend chooses its host threads by size (Numba), that choice; else nothing."""
        return contextlib.nullcontext()

    def _alpha(self, rz, pAp, breakdown):
        xp = self.xp
        breakdown |= ~xp.isfinite(pAp) | ((pAp <= 0) & (rz != 0))
        return rz / xp.where(pAp > 0, pAp, 1.0)

    def update_xr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> None:
        """``x += alpha p; r -= alpha Ap`` with ``alpha = rz / pAp``."""
        alpha = self._alpha(rz, pAp, breakdown)
        x += alpha * p
        r -= alpha * Ap

    def update_xr_rr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> Array:
        """:meth:`update_xr`, then return ``r . r`` (fused where the library can)."""
        self.update_xr(rz, pAp, breakdown, p, Ap, x, r)
        return self.dot(r, r)

    def _beta(self, rz_new, rz):
        return rz_new / self.xp.where(rz != 0, rz, 1.0)

    def update_p(self, z: Array, rz_new: Array, rz: Array, p: Array) -> None:
        """``p = z + beta p`` in place, ``beta = rz_new / rz``."""
        p *= self._beta(rz_new, rz)
        p += z

    # --- CG variants (hofem.cg(variant=...)): one reduction of k values per iteration ---------
    def local_dots(self, pairs: Sequence[tuple[Array, Array]]) -> Array:
        """``[a . b for (a, b) in pairs]`` over this process's entries, a (k,) array.

        One pass over the vectors where the library can (Numba, CUDA); the
        expressions here make one pass per pair.
        """
        xp = self.xp
        return xp.stack([xp.vdot(a, b) for a, b in pairs])

    def sum_start(self, values: Array) -> Any:
        """Start summing the (k,) ``values`` over the ranks; :meth:`sum_finish` takes
        what this returns.  Work done in between overlaps the reduction.  One process:
        nothing to sum."""
        return values

    def sum_finish(self, pending: Any) -> Array:
        """The (k,) sums over the ranks started by :meth:`sum_start`."""
        return pending

    def dots(self, pairs: Sequence[tuple[Array, Array]]) -> Array:
        """The inner products of ``pairs`` as a (k,) array, summed over the ranks at once."""
        return self.sum_finish(self.sum_start(self.local_dots(pairs)))

    def variant_scalars(
        self,
        gamma: Array,
        gamma_old: Array,
        delta: Array,
        alpha_old: Array,
        first: bool,
        breakdown: Array,
    ) -> tuple[Array, Array]:
        """``alpha, beta`` (0-d arrays) of Chronopoulos-Gear and Ghysels-Vanroose CG.

        ``beta = gamma / gamma_old`` and ``alpha = gamma / (delta - beta gamma /
        alpha_old)`` with ``gamma = r . u``, ``delta = w . u`` (``u = M r``, ``w = A u``);
        the denominator is ``p . A p`` in exact arithmetic, so it raises ``breakdown``
        as :meth:`update_xr` does.  ``first``: ``beta = 0``, ``alpha = gamma / delta``.
        """
        xp = self.xp
        if first:
            beta = xp.zeros(())
            denominator = delta
        else:
            beta = self._beta(gamma, gamma_old)
            denominator = delta - beta * gamma / xp.where(alpha_old != 0, alpha_old, 1.0)
        return self._alpha(gamma, denominator, breakdown), beta

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
        """Chronopoulos-Gear: ``p = u + beta p; s = w + beta s; x += alpha p;
        r -= alpha s`` (all (n,); ``u`` may be ``r``)."""
        p *= beta
        p += u
        s *= beta
        s += w
        x += alpha * p
        r -= alpha * s

    def pipelined_update(self, alpha: Array, beta: Array, vectors: Sequence[Array | None]) -> Array:
        """Ghysels-Vanroose: the recurrences of one iteration, then the local dots of the next.

        ``vectors``: ``x r u w m n p s q z``, all (n,), with ``u``, ``m``, ``q`` None
        unpreconditioned (``u = r``, ``m = w``, ``q = s``).  ``z = n + beta z;
        q = m + beta q; s = w + beta s; p = u + beta p; x += alpha p; r -= alpha s;
        u -= alpha q; w -= alpha z``; returns :meth:`local_dots` of ``(r, u), (w, u),
        (r, r)`` for the new vectors (unpreconditioned ``(r, r), (w, r)``).
        """
        x, r, u, w, m, n, p, s, q, z = vectors
        z *= beta
        z += n
        s *= beta
        s += w
        p *= beta
        p += r if u is None else u
        if u is not None:
            q *= beta
            q += m
            u -= alpha * q
        x += alpha * p
        r -= alpha * s
        w -= alpha * z
        if u is None:
            return self.local_dots(((r, r), (w, r)))
        return self.local_dots(((r, u), (w, u), (r, r)))

    # --- Chebyshev smoothing, transfers and sparse products (hofem.multigrid) --------------
    def chebyshev_start(
        self, c: float, inv_diag: Array, b: Array, Ax: Array | None, r: Array, d: Array
    ) -> None:
        """``r = b - Ax; d = c D^-1 r``; from zero (``Ax`` None): ``d = c D^-1 b``, ``r`` unused.

        ``c`` a float, ``inv_diag`` ``D^-1`` (n,); the rest (n,) vectors.
        """
        xp = self.xp
        if Ax is not None:
            xp.subtract(b, Ax, out=r)
            b = r
        xp.multiply(inv_diag, b, out=d)
        d *= c

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
        """``x += d; r -= Ad; d = a d + c D^-1 r``;
        from zero (``b`` given): ``x = d; r = b - Ad``, then the same ``d``."""
        xp = self.xp
        if b is None:
            x += d
            r -= Ad
        else:
            x[...] = d
            xp.subtract(b, Ad, out=r)
        d *= a
        d += c * (inv_diag * r)

    def chebyshev_last(
        self, Ad: Array, d: Array, x: Array, r: Array, b: Array | None = None
    ) -> None:
        """The last step: ``x += d; r -= Ad`` (``r`` None: ``x += d`` only);
        from zero (``b`` given): ``x = d; r = b - Ad``."""
        if b is not None:
            x[...] = d
            self.xp.subtract(b, Ad, out=r)
            return
        x += d
        if r is not None:
            r -= Ad

    def csr_matvec(self, A: Any, x: Array, out: Array) -> None:
        """``out = A x`` for a CSR matrix ``A`` (m, n) of ``xp``'s sparse library.

        ``x`` (n,) and ``out`` (m,) are distinct vectors.  The sparse library's product
        here (SciPy's on the host, one ``cupyx`` product with a temporary otherwise);
        the CUDA backends launch one kernel of their own on ``A.data``, ``A.indices`` and
        ``A.indptr``, without the library's per-call set-up.
        """
        out[...] = A @ x

    def scatter_scaled(self, values: Array, index: Array, scale: Array, out: Array) -> None:
        """``out[index] = scale * values`` (``scale`` None: 1); ``index`` distinct, (n,)."""
        out[index] = values if scale is None else scale * values

    def gather_scaled(
        self, w: Array, index: Array, scale: Array, v: Array, add: bool = False
    ) -> None:
        """``v = scale * w[index]``, or ``v +=`` with ``add`` (``scale`` None: 1); ``v`` (n,)."""
        part = w[index] if scale is None else scale * w[index]
        if add:
            v += part
        else:
            v[...] = part
