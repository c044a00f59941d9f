"""Run-time compiled CUDA kernels: ``.cu`` sources next to this file, NVRTC via CuPy.

A kernel module is specialized by ``-D`` defines and compiled on first use, then
cached per specialization (in memory here, on disk by CuPy's kernel cache).
Nothing compiles at import.  CuPy's cache is keyed by the source text and the
options, not by the headers a source includes, so every module's source starts
with a digest of the ``.cuh`` files here (:func:`raw_module`): a changed header
compiles again instead of loading a stale kernel.
"""

from __future__ import annotations

import functools
import hashlib
import pathlib
from typing import TYPE_CHECKING, Any, TypeAlias

from .device import cupy

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "basis_block",
    "basis_module",
    "cg_module",
    "csr_module",
    "ipc_module",
    "raw_module",
    "restriction_module",
    "source",
]

_HERE = pathlib.Path(__file__).parent
# sha1 of the headers every kernel may include, in name order
HEADERS_DIGEST = hashlib.sha1(
    b"".join(path.read_bytes() for path in sorted(_HERE.glob("*.cuh")))
).hexdigest()

# threads per block the tensor basis kernels aim for, and the cap on their scratch
BASIS_THREADS = 256
_MAX_SCRATCH_BYTES = 32 * 1024

#: cupy.RawModule; Any for the reason hofem.typing.Array is (CuPy is an optional extra)
RawModule: TypeAlias = Any


@functools.cache
def source(name: str) -> str:
    """The text of the ``.cu`` file ``name`` beside this module."""
    return (_HERE / name).read_text()


def raw_module(code: str, options: tuple[str, ...] = ()) -> RawModule:
    """``cupy.RawModule`` of ``code`` compiled with C++17 and this folder's headers, the
    headers' digest in its first line (CuPy's disk cache key)."""
    code = f"// hofem CUDA headers sha1 {HEADERS_DIGEST}\n{code}"
    return cupy.RawModule(code=code, options=("--std=c++17", f"-I{_HERE}", *options))


@functools.cache
def _module(name, defines):
    return raw_module(source(name), tuple(f"-D{key}={value}" for key, value in defines))


def basis_block(
    dim: int, P_1d: int, Q_1d: int, target_threads: int = BASIS_THREADS
) -> tuple[int, tuple[int, int, int]]:
    """Thread configuration of the tensor basis kernels (and the fused operators).

    Parameters
    ----------
    dim, P_1d, Q_1d : int
    target_threads : int
        Threads per block to aim for (at most 256, so any register count launches).

    Returns
    -------
    elems_per_block : int
        Elements sharing one block: ``target_threads`` // threads per element (at
        least 1), scratch <= 32 KiB.
    block : tuple of 3 int
        ``(T, T, elems)`` in 3D, ``(T, elems, 1)`` in 1D and 2D, ``T = max(P_1d, Q_1d)``.
    """
    T = max(P_1d, Q_1d)
    threads = T ** max(dim - 1, 1)
    elems = max(1, target_threads // threads)
    elems = max(1, min(elems, _MAX_SCRATCH_BYTES // (8 * T**dim)))
    block = (T, T, elems) if dim == 3 else (T, elems, 1)
    return elems, block


def basis_module(dim: int, num_comp: int, P_1d: int, Q_1d: int) -> RawModule:
    """Compiled ``basis_tensor.cu`` of one specialization: interp, interp_t, grad, grad_t."""
    elems, _ = basis_block(dim, P_1d, Q_1d)
    defines = (
        ("DIM", dim),
        ("NUM_COMP", num_comp),
        ("P_1D", P_1d),
        ("Q_1D", Q_1d),
        ("T_1D", max(P_1d, Q_1d)),
        ("ELEMS_PER_BLOCK", elems),
    )
    return _module("basis_tensor.cu", defines)


def cg_module() -> RawModule:
    """Compiled ``cg.cu``: ``update_xr_rr``, CG's x/r update fused with ``r . r``."""
    return _module("cg.cu", ())


def csr_module() -> RawModule:
    """Compiled ``csr.cu``: ``csr_matvec``, ``y = A x`` for an int32 CSR matrix."""
    return _module("csr.cu", ())


def ipc_module() -> RawModule:
    """Compiled ``ipc.cu``: the round counter and the flag wait of a CUDA IPC halo channel
    (:class:`hofem.parallel.ipc.IpcChannel`)."""
    return _module("ipc.cu", ())


def restriction_module(index_dtype: npt.DTypeLike) -> RawModule:
    """Compiled ``restriction.cu`` for int32/int64 indices: gather, scatter_atomic, scatter_map."""
    index_t = "int" if cupy.dtype(index_dtype) == cupy.int32 else "long long"
    return _module("restriction.cu", (("INDEX_T", index_t),))
