"""The vector work of CG, one object per array library or backend.

:func:`hofem.cg` does all its vector arithmetic through a :class:`VectorOps`:
array expressions of NumPy or CuPy here; every backend hands out its own
(``backend.vector_ops()``: these expressions by default, fused CuPy kernels on the
CUDA backends, :class:`hofem.backends.cuda.vector_ops.CupyVectorOps`, parallel
Numba loops on ``/cpu/self/numba``).  Scalars (``rz``, ``pAp``) stay 0-d arrays
of the vectors' library, so on a GPU nothing synchronizes with the host.
"""

import math
from types import ModuleType

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
