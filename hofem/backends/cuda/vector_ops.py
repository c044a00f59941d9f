"""CG's vector work as CuPy kernels: what the CUDA backends hand out as ``vector_ops()``."""

import functools

import numpy as np

from ...vector_ops import VectorOps
from . import kernels
from .device import cupy

__all__ = ["CupyVectorOps", "cupy_vector_ops"]


class CupyVectorOps(VectorOps):
    """CuPy: one kernel per step; ``update_xr_rr`` is one pass (``cuda/cg.cu``)."""

    def __init__(self):
        super().__init__(cupy)
        self._step = cupy.ElementwiseKernel(
            "T rz, T pAp",
            "bool breakdown, T alpha",
            "breakdown = breakdown || !isfinite(pAp) || (pAp <= 0 && rz != 0);"
            "alpha = rz / (pAp > 0 ? pAp : 1.0)",
            "hofem_cg_step",
        )
        self._xr = cupy.ElementwiseKernel(
            "T alpha, T p, T Ap", "T x, T r", "x += alpha * p; r -= alpha * Ap", "hofem_cg_xr"
        )
        self._p = cupy.ElementwiseKernel(
            "T z, T rz_new, T rz",
            "T p",
            "p = z + rz_new / (rz != 0 ? rz : 1.0) * p",
            "hofem_cg_p",
        )
        self._xr_rr = kernels.cg_module().get_function("update_xr_rr")
        self._blocks = 4 * cupy.cuda.Device().attributes["MultiProcessorCount"]
        self._partial = cupy.empty(self._blocks)  # (blocks,) per-block sums of r^2

    def _alpha(self, rz, pAp, breakdown):
        alpha = self.xp.empty(())
        self._step(rz, pAp, breakdown, alpha)
        return alpha

    def update_xr(self, rz, pAp, breakdown, p, Ap, x, r):
        self._xr(self._alpha(rz, pAp, breakdown), p, Ap, x, r)

    def update_xr_rr(self, rz, pAp, breakdown, p, Ap, x, r):
        """One pass; the per-block partial sums are added in a fixed order (reproducible)."""
        self._alpha(rz, pAp, breakdown)  # the breakdown flag; the kernel forms alpha itself
        args = (np.int64(r.size), rz, pAp, p, Ap, x, r, self._partial)
        self._xr_rr((self._blocks,), (256,), args)
        return self._partial.sum()

    def update_p(self, z, rz_new, rz, p):
        self._p(z, rz_new, rz, p)


@functools.cache
def cupy_vector_ops() -> CupyVectorOps:
    """The one :class:`CupyVectorOps` of this process (its kernels compile on first use)."""
    return CupyVectorOps()
