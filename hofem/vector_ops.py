"""The vector work of CG, one object per array library or backend.

:func:`hofem.cg` does all its vector arithmetic through a :class:`VectorOps`:
array expressions of NumPy or CuPy here; every backend hands out its own
(``backend.vector_ops()``: these expressions by default, fused CuPy kernels on the
CUDA backends, :class:`hofem.backends.cuda.vector_ops.CupyVectorOps`, parallel
Numba loops on ``/cpu/self/numba``).  Scalars (``rz``, ``pAp``) stay 0-d arrays
of the vectors' library, so on a GPU nothing synchronizes with the host.
"""

import math

import numpy as np

__all__ = ["VectorOps"]


class VectorOps:
    """CG's vector steps as array expressions of ``xp`` (NumPy or CuPy).

    Every step that forms ``alpha = rz / pAp`` also raises ``breakdown`` (a 0-d
    bool array, updated in place) where ``p.Ap <= 0`` with ``rz != 0`` or ``pAp``
    is not finite; ``alpha`` is then ``rz`` (a non-positive ``pAp`` is replaced
    by 1), as is ``beta`` for ``rz = 0``.
    """

    def __init__(self, xp=np):
        self.xp = xp

    def dot(self, a, b):
        """``a . b`` as a 0-d array."""
        return self.xp.vdot(a, b)

    def norm(self, a):
        """``||a||`` as a host float (one synchronization on a GPU)."""
        return math.sqrt(float(self.dot(a, a)))

    def length(self, a):
        """Entries of ``a`` (over all ranks, for distributed vectors)."""
        return a.size

    def _alpha(self, rz, pAp, breakdown):
        xp = self.xp
        breakdown |= ~xp.isfinite(pAp) | ((pAp <= 0) & (rz != 0))
        return rz / xp.where(pAp > 0, pAp, 1.0)

    def update_xr(self, rz, pAp, breakdown, p, Ap, x, r):
        """``x += alpha p; r -= alpha Ap`` with ``alpha = rz / pAp``."""
        alpha = self._alpha(rz, pAp, breakdown)
        x += alpha * p
        r -= alpha * Ap

    def update_xr_rr(self, rz, pAp, breakdown, p, Ap, x, r):
        """:meth:`update_xr`, then return ``r . r`` (fused where the library can)."""
        self.update_xr(rz, pAp, breakdown, p, Ap, x, r)
        return self.dot(r, r)

    def _beta(self, rz_new, rz):
        return rz_new / self.xp.where(rz != 0, rz, 1.0)

    def update_p(self, z, rz_new, rz, p):
        """``p = z + beta p`` in place, ``beta = rz_new / rz``."""
        p *= self._beta(rz_new, rz)
        p += z

    # --- Chebyshev smoothing and transfers (hofem.multigrid): one pass per step -------------
    def chebyshev_start(self, c, inv_diag, b, Ax, r, d):
        """``r = b - Ax; d = c D^-1 r``; from zero (``Ax`` None): ``d = c D^-1 b``, ``r`` unused.

        ``c`` a float, ``inv_diag`` ``D^-1`` (n,); the rest (n,) vectors.
        """
        xp = self.xp
        if Ax is not None:
            xp.subtract(b, Ax, out=r)
            b = r
        xp.multiply(inv_diag, b, out=d)
        d *= c

    def chebyshev_step(self, a, c, inv_diag, Ad, d, x, r, b=None):
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

    def chebyshev_last(self, Ad, d, x, r, b=None):
        """The last step: ``x += d; r -= Ad`` (``r`` None: ``x += d`` only);
        from zero (``b`` given): ``x = d; r = b - Ad``."""
        if b is not None:
            x[...] = d
            self.xp.subtract(b, Ad, out=r)
            return
        x += d
        if r is not None:
            r -= Ad

    def scatter_scaled(self, values, index, scale, out):
        """``out[index] = scale * values`` (``scale`` None: 1); ``index`` distinct, (n,)."""
        out[index] = values if scale is None else scale * values

    def gather_scaled(self, w, index, scale, v, add=False):
        """``v = scale * w[index]``, or ``v +=`` with ``add`` (``scale`` None: 1); ``v`` (n,)."""
        part = w[index] if scale is None else scale * w[index]
        if add:
            v += part
        else:
            v[...] = part
