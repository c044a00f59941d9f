"""``/gpu/cuda/ref``: the reference backend's array code run on CuPy (+ cuBLAS).

Every method of :class:`hofem.backends.ref.RefBackend` is written against the
array module ``xp``; here ``xp`` is CuPy, so the same readable steps run on the
device.  Only what touches host-only types is overridden: host/device moves,
the sparse matrix and ``LinearOperator`` types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..ref import RefBackend
from .device import cupy, require_device
from .vector_ops import cupy_vector_ops

if TYPE_CHECKING:
    import scipy.sparse

    from ...typing import Array, LinearOperator, SparseMatrix
    from ...typing import OperatorLike as Operator
    from ..contract import DeviceCGTarget
    from .cg import DeviceCG
    from .vector_ops import CupyVectorOps

__all__ = ["CudaRefBackend", "cupy", "require_device"]


@functools.cache
def _gather_add_kernel():
    """``v[i] += w[index[i]]``, one thread per entry of ``v``."""
    return cupy.ElementwiseKernel(
        "raw float64 w, I index", "float64 v", "v += w[index]", "hofem_gather_add"
    )


class CudaRefBackend(RefBackend):
    """The NumPy reference code on CuPy arrays: the readable GPU baseline and GPU oracle."""

    resource = "/gpu/cuda/ref"
    xp = cupy

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError (naming ``pip install hofem[gpu]``) without CuPy or a device."""
        require_device()

    def asarray(self, x: Any, dtype: Any = None) -> Array:
        """``x`` as a CuPy array: device arrays stay on the device, host ones are copied.

        A host array is copied straight from its own memory (``ndarray.set``).
        ``cupy.asarray`` would first copy it into a pinned buffer of the same
        size, which CuPy's pinned pool then keeps: the host would hold every
        uploaded array twice until :meth:`release_cached_memory` (the set-up of
        1.5e9-DOF problems ran out of the host's 128 GiB that way).
        """
        if isinstance(x, cupy.ndarray):
            return cupy.asarray(x, dtype=dtype)
        host = np.asarray(x, dtype=dtype, order="C")
        if host.ndim == 0 or host.dtype.char not in "?bhilqBHILQefdFD":
            return cupy.asarray(host)  # scalars, and CuPy's error for unsupported dtypes
        out = cupy.empty(host.shape, host.dtype)
        if host.size:
            out.set(host)
        return out

    @staticmethod
    def gather_add_entries(w: Array, index: Array, v: Array) -> None:
        """``v += w[index]`` in one kernel: no ``w[index]`` temporary (an n-vector per call)."""
        _gather_add_kernel()(w, index, v)

    def vector_ops(self) -> CupyVectorOps:
        """CG's vector work as fused CuPy kernels (:class:`.vector_ops.CupyVectorOps`)."""
        return cupy_vector_ops()

    def device_cg(self, A: Callable[[Array], Array], target: DeviceCGTarget) -> DeviceCG:
        """A :class:`~hofem.backends.cuda.cg.DeviceCG` solving with ``A``.

        :func:`hofem.cg` uses it for square operators (and restricted ones), which
        describe themselves in ``target`` (:class:`~hofem.backends.contract.DeviceCGTarget`):
        CG's scalars and convergence test on the device, no per-iteration sync.
        """
        from .cg import DeviceCG

        return DeviceCG(self, A, target)

    def cg_apply_dot(self, op: Operator) -> Callable[..., Any] | None:
        """The operator's ``apply_dot(u, v, partial, status)`` (``u . Au`` in its kernel), or None.

        None here: the device CG applies ``op`` and adds ``p . Ap`` in a kernel of its own.
        """
        return None

    def synchronize(self) -> None:
        """Wait for the current device's queued work (before reading host clocks)."""
        cupy.cuda.Device().synchronize()

    def release_cached_memory(self) -> None:
        """Free the blocks CuPy's default memory pool caches but no array uses.

        Set-up temporaries (coordinate E-vectors, q-data build chunks, host
        transfers) return their blocks to the pool, which keeps them; this
        hands them back to the device so that the pool holds only live arrays.
        """
        self.synchronize()
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()

    def sparse_csr(self, matrix: scipy.sparse.csr_matrix) -> SparseMatrix:
        """The host CSR matrix as a ``cupyx.scipy.sparse.csr_matrix``."""
        import cupyx.scipy.sparse

        matrix.sum_duplicates()
        return cupyx.scipy.sparse.csr_matrix(matrix)

    def host_csr(
        self, values: Array, rows: Array, cols: Array, shape: tuple[int, int]
    ) -> scipy.sparse.csr_matrix:
        """COO to CSR on the device (a sort there), then copied to the host."""
        import cupyx.scipy.sparse

        coo = cupyx.scipy.sparse.coo_matrix((values, (rows, cols)), shape=shape)
        return coo.tocsr().get()

    def linear_operator(
        self, shape: tuple[int, int], op: Callable[[Array], Array]
    ) -> LinearOperator:
        """``cupyx.scipy.sparse.linalg.LinearOperator`` applying ``op`` to CuPy vectors."""
        import cupyx.scipy.sparse.linalg

        return cupyx.scipy.sparse.linalg.LinearOperator(shape, matvec=op.__call__, dtype=np.float64)
