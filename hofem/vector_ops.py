"""The vector work of CG, one object per array library or backend.

:func:`hofem.cg` does all its vector arithmetic through a :class:`VectorOps`:
NumPy array expressions here, fused CuPy kernels in :class:`CupyVectorOps`, and
a backend may supply its own (``backend.vector_ops()``, e.g. parallel Numba
loops on ``/cpu/self/numba``).  Scalars (``rz``, ``pAp``) stay 0-d arrays of the
vectors' library, so on a GPU nothing synchronizes with the host.
"""

import functools
import math

import numpy as np

__all__ = ["CupyVectorOps", "VectorOps", "backend_vector_ops", "vector_ops"]


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


class CupyVectorOps(VectorOps):
    """CuPy: one kernel per step; ``update_xr_rr`` is one pass (``cuda/cg.cu``)."""

    def __init__(self):
        import cupy

        from .backends.cuda import kernels

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
def _cupy_ops():
    return CupyVectorOps()


def backend_vector_ops(backend):
    """The :class:`VectorOps` of a backend: its own ``vector_ops()``, else its array library's."""
    if hasattr(backend, "vector_ops"):
        return backend.vector_ops()
    return VectorOps(np) if backend.xp is np else _cupy_ops()


def vector_ops(A, b):
    """The :class:`VectorOps` for solving ``A x = b``.

    ``A.vector_ops()`` when ``A`` has it (hofem operators; distributed
    operators reduce across ranks), else ``A``'s backend's, else by ``b``'s
    library.

    Raises
    ------
    TypeError
        ``b`` is neither a NumPy nor a CuPy array.
    """
    own = getattr(A, "vector_ops", None)
    if callable(own):
        return own()
    backend = getattr(getattr(A, "ceed", None), "backend", None)
    if hasattr(backend, "vector_ops"):
        return backend.vector_ops()
    if isinstance(b, np.ndarray):
        return VectorOps(np)
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None and isinstance(b, cupy.ndarray):
        return _cupy_ops()
    raise TypeError(f"b must be a NumPy or CuPy array, got {type(b).__name__}")
