"""CG's vector work as CuPy kernels: what the CUDA backends hand out as ``vector_ops()``."""

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...typing import Array
from ...vector_ops import VectorOps
from . import kernels
from .device import cupy

__all__ = ["CSR_THREADS", "CupyVectorOps", "csr_launch", "cupy_vector_ops"]

CSR_THREADS = 256  # threads per block of csr.cu's csr_matvec (a multiple of the warp's 32)


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

    def update_xr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> None:
        self._xr(self._alpha(rz, pAp, breakdown), p, Ap, x, r)

    def update_xr_rr(
        self, rz: Array, pAp: Array, breakdown: Array, p: Array, Ap: Array, x: Array, r: Array
    ) -> Array:
        """One pass; the per-block partial sums are added in a fixed order (reproducible)."""
        self._alpha(rz, pAp, breakdown)  # the breakdown flag; the kernel forms alpha itself
        args = (np.int64(r.size), rz, pAp, p, Ap, x, r, self._partial)
        self._xr_rr((self._blocks,), (256,), args)
        return self._partial.sum()

    def update_p(self, z: Array, rz_new: Array, rz: Array, p: Array) -> None:
        self._p(z, rz_new, rz, p)

    @functools.cached_property
    def _variant_kernels(self):
        """The CG variants' kernels (compiled on first use): scalars, updates, dots."""
        ek = cupy.ElementwiseKernel
        scalars = ek(
            "T gamma, T gamma_old, T delta, T alpha_old, bool first",
            "bool breakdown, T alpha, T beta",
            "T b = first ? 0.0 : gamma / (gamma_old != 0 ? gamma_old : 1.0);"
            "T d = first ? delta : delta - b * gamma / (alpha_old != 0 ? alpha_old : 1.0);"
            "breakdown = breakdown || !isfinite(d) || (d <= 0 && gamma != 0);"
            "alpha = gamma / (d > 0 ? d : 1.0); beta = b",
            "hofem_cg_variant_scalars",
        )
        # u = M r (preconditioned) or r itself (the kernel without u)
        single = ek(
            "T alpha, T beta, T u, T w",
            "T p, T s, T x, T r",
            "T p_i = u + beta * p; T s_i = w + beta * s; p = p_i; s = s_i;"
            "x += alpha * p_i; r -= alpha * s_i",
            "hofem_cg_single_reduction",
        )
        single_r = ek(
            "T alpha, T beta, T w",
            "T p, T s, T x, T r",
            "T p_i = r + beta * p; T s_i = w + beta * s; p = p_i; s = s_i;"
            "x += alpha * p_i; r -= alpha * s_i",
            "hofem_cg_single_reduction_r",
        )
        pipelined = ek(
            "T alpha, T beta, T m, T nv",
            "T x, T r, T u, T w, T p, T s, T q, T z",
            "T z_i = nv + beta * z; T q_i = m + beta * q; T s_i = w + beta * s;"
            "T p_i = u + beta * p; z = z_i; q = q_i; s = s_i; p = p_i; x += alpha * p_i;"
            "r -= alpha * s_i; u -= alpha * q_i; w -= alpha * z_i",
            "hofem_cg_pipelined",
        )
        pipelined_r = ek(
            "T alpha, T beta, T nv",
            "T x, T r, T w, T p, T s, T z",
            "T z_i = nv + beta * z; T s_i = w + beta * s; T p_i = r + beta * p;"
            "z = z_i; s = s_i; p = p_i; x += alpha * p_i; r -= alpha * s_i; w -= alpha * z_i",
            "hofem_cg_pipelined_r",
        )
        dots = kernels.cg_module().get_function("variant_dots")
        return scalars, single, single_r, pipelined, pipelined_r, dots

    def local_dots(self, pairs: Sequence[tuple[Array, Array]]) -> Array:
        """Up to three inner products in one kernel, then one sum of the block partials."""
        if len(pairs) > 3:
            return super().local_dots(pairs)
        *_, dots = self._variant_kernels
        k = len(pairs)
        vectors = [v for pair in pairs for v in pair] + [pairs[0][0]] * (6 - 2 * k)
        partial = cupy.empty((3, self._blocks))  # (3, blocks): rows past k unused
        n = pairs[0][0].size
        dots((self._blocks,), (256,), (np.int64(n), np.int32(k), *vectors, partial))
        return partial[:k].sum(axis=1)

    def variant_scalars(
        self,
        gamma: Array,
        gamma_old: Array,
        delta: Array,
        alpha_old: Array,
        first: bool,
        breakdown: Array,
    ) -> tuple[Array, Array]:
        scalars, *_ = self._variant_kernels
        alpha, beta = self.xp.empty(()), self.xp.empty(())
        gamma_old = gamma if first else gamma_old
        alpha_old = gamma if first else alpha_old
        scalars(gamma, gamma_old, delta, alpha_old, np.bool_(first), breakdown, alpha, beta)
        return alpha, beta

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
        _, single, single_r, *_ = self._variant_kernels
        if u is r:
            single_r(alpha, beta, w, p, s, x, r)
        else:
            single(alpha, beta, u, w, p, s, x, r)

    def pipelined_update(self, alpha: Array, beta: Array, vectors: Sequence[Array | None]) -> Array:
        """One kernel for the eight recurrences, one for the next local inner products."""
        x, r, u, w, m, n, p, s, q, z = vectors
        *_, pipelined, pipelined_r, _ = self._variant_kernels
        if u is None:
            pipelined_r(alpha, beta, n, x, r, w, p, s, z)
            return self.local_dots(((r, r), (w, r)))
        pipelined(alpha, beta, m, n, x, r, u, w, p, s, q, z)
        return self.local_dots(((r, u), (w, u), (r, r)))

    # --- Chebyshev smoothing and transfers: one elementwise kernel per step ---------------
    def chebyshev_start(
        self, c: float, inv_diag: Array, b: Array, Ax: Array | None, r: Array, d: Array
    ) -> None:
        if Ax is None:
            _chebyshev_kernels()["scale"](float(c), inv_diag, b, d)
        else:
            _chebyshev_kernels()["start"](float(c), inv_diag, b, Ax, r, d)

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
        kernels = _chebyshev_kernels()
        if b is None:
            kernels["step"](float(a), float(c), inv_diag, Ad, d, x, r)
        else:
            kernels["step_zero"](float(a), float(c), inv_diag, Ad, b, d, x, r)

    def chebyshev_last(
        self, Ad: Array, d: Array, x: Array, r: Array | None, b: Array | None = None
    ) -> None:
        if b is not None:
            _chebyshev_kernels()["last_zero"](Ad, b, d, x, r)
        elif r is None:
            x += d
        else:
            self._xr(1.0, d, Ad, x, r)

    @functools.cached_property
    def _csr_kernel(self):
        return kernels.csr_module().get_function("csr_matvec")

    def csr_matvec(self, A: Any, x: Array, out: Array) -> None:
        """One launch of ``csr.cu``'s kernel for float64 entries and int32 indices (what
        ``cupyx.scipy.sparse`` holds); cuSPARSE's product for any other matrix."""
        int32 = A.indices.dtype == np.int32 and A.indptr.dtype == np.int32
        if not int32 or A.data.dtype != np.float64 or x.dtype != np.float64:
            super().csr_matvec(A, x, out)
            return
        launch = csr_launch(A, x, out)
        if launch is not None:
            grid, block, args = launch
            self._csr_kernel((grid,), (block,), args)

    def scatter_scaled(self, values: Array, index: Array, scale: Array | None, out: Array) -> None:
        if scale is None:
            _chebyshev_kernels()["scatter"](values, index, out)
        else:
            _chebyshev_kernels()["scatter_scaled"](values, index, scale, out)

    def gather_scaled(
        self, w: Array, index: Array, scale: Array | None, v: Array, add: bool = False
    ) -> None:
        name = ("gather_add" if add else "gather") + ("" if scale is None else "_scaled")
        args = (w, index, v) if scale is None else (w, index, scale, v)
        _chebyshev_kernels()[name](*args)


def csr_launch(A: Any, x: Array, out: Array) -> tuple[int, int, tuple] | None:
    """``(grid, block, arguments)`` of ``csr_matvec`` for ``out = A x``, or None for a
    matrix of no rows.

    ``A`` a CSR matrix (m, n) with int32 ``indptr`` and ``indices``, ``x`` (n,), ``out``
    (m,).  Each row gets the smallest power of two of lanes, up to the warp's 32, that
    covers the mean row: the order-1 Laplacian's 27-entry rows and ``P^T``'s longer ones a
    warp, ``P``'s few entries a row a few lanes, so that no warp idles on short rows.  One
    row per group: the grid covers the rows once.
    """
    rows = int(A.shape[0])
    if rows == 0:
        return None
    mean = -(-int(A.nnz) // rows)  # entries a row, rounded up
    lanes = 1 << max(mean - 1, 0).bit_length() if mean <= 32 else 32
    grid = -(-rows * lanes // CSR_THREADS)
    args = (np.int32(rows), np.int32(lanes), A.indptr, A.indices, A.data, x, out)
    return grid, CSR_THREADS, args


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
