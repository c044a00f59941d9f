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

    # --- Chebyshev smoothing and transfers: one elementwise kernel per step ---------------
    def chebyshev_start(self, c, inv_diag, b, Ax, r, d):
        if Ax is None:
            _chebyshev_kernels()["scale"](float(c), inv_diag, b, d)
        else:
            _chebyshev_kernels()["start"](float(c), inv_diag, b, Ax, r, d)

    def chebyshev_step(self, a, c, inv_diag, Ad, d, x, r, b=None):
        kernels = _chebyshev_kernels()
        if b is None:
            kernels["step"](float(a), float(c), inv_diag, Ad, d, x, r)
        else:
            kernels["step_zero"](float(a), float(c), inv_diag, Ad, b, d, x, r)

    def chebyshev_last(self, Ad, d, x, r, b=None):
        if b is not None:
            _chebyshev_kernels()["last_zero"](Ad, b, d, x, r)
        elif r is None:
            x += d
        else:
            self._xr(1.0, d, Ad, x, r)

    def scatter_scaled(self, values, index, scale, out):
        if scale is None:
            _chebyshev_kernels()["scatter"](values, index, out)
        else:
            _chebyshev_kernels()["scatter_scaled"](values, index, scale, out)

    def gather_scaled(self, w, index, scale, v, add=False):
        name = ("gather_add" if add else "gather") + ("" if scale is None else "_scaled")
        args = (w, index, v) if scale is None else (w, index, scale, v)
        _chebyshev_kernels()[name](*args)


@functools.cache
def _chebyshev_kernels():
    """The elementwise kernels of :meth:`CupyVectorOps.chebyshev_step` and the transfers.

    ``I`` is the index type (int32 or int64); the gathered/scattered vector is ``raw``.
    """
    kernel = cupy.ElementwiseKernel
    return {
        "start": kernel(
            "float64 c, float64 inv_diag, float64 b, float64 Ax",
            "float64 r, float64 d",
            "double r_i = b - Ax; r = r_i; d = c * inv_diag * r_i",
            "hofem_cheb_start",
        ),
        "scale": kernel(
            "float64 c, float64 inv_diag, float64 b",
            "float64 d",
            "d = c * inv_diag * b",
            "hofem_cheb_scale",
        ),
        "step": kernel(
            "float64 a, float64 c, float64 inv_diag, float64 Ad",
            "float64 d, float64 x, float64 r",
            "double r_i = r - Ad; double d_i = d; x += d_i; r = r_i;"
            "d = a * d_i + c * inv_diag * r_i",
            "hofem_cheb_step",
        ),
        "step_zero": kernel(
            "float64 a, float64 c, float64 inv_diag, float64 Ad, float64 b",
            "float64 d, float64 x, float64 r",
            "double r_i = b - Ad; double d_i = d; x = d_i; r = r_i;"
            "d = a * d_i + c * inv_diag * r_i",
            "hofem_cheb_step_zero",
        ),
        "last_zero": kernel(
            "float64 Ad, float64 b, float64 d",
            "float64 x, float64 r",
            "x = d; r = b - Ad",
            "hofem_cheb_last_zero",
        ),
        "scatter": kernel(
            "float64 values, I index", "raw float64 dest", "dest[index] = values", "hofem_scatter"
        ),
        "scatter_scaled": kernel(
            "float64 values, I index, float64 scale",
            "raw float64 dest",
            "dest[index] = scale * values",
            "hofem_scatter_scaled",
        ),
        "gather": kernel("raw float64 w, I index", "float64 v", "v = w[index]", "hofem_gather"),
        "gather_add": kernel(
            "raw float64 w, I index", "float64 v", "v += w[index]", "hofem_gather_add"
        ),
        "gather_scaled": kernel(
            "raw float64 w, I index, float64 scale",
            "float64 v",
            "v = scale * w[index]",
            "hofem_gather_scaled",
        ),
        "gather_add_scaled": kernel(
            "raw float64 w, I index, float64 scale",
            "float64 v",
            "v += scale * w[index]",
            "hofem_gather_add_scaled",
        ),
    }


@functools.cache
def cupy_vector_ops() -> CupyVectorOps:
    """The one :class:`CupyVectorOps` of this process (its kernels compile on first use)."""
    return CupyVectorOps()
