"""CuPy and the CUDA device check, for every module of the CUDA backends.

The one place that imports CuPy at module level: the backend modules take ``cupy``
from here (None where it is not installed; :func:`require_device` says so when a
CUDA backend is asked for), so importing them never fails for a missing CuPy.
"""

try:
    import cupy
except ImportError:  # the backends report it through check_available
    cupy = None

__all__ = ["cupy", "require_device"]

_INSTALL_HINT = "install CuPy with `pip install hofem[gpu]` (CUDA 12) or `hofem[gpu13]` (CUDA 13)"


def require_device() -> None:
    """Raise ImportError unless CuPy imports and sees at least one CUDA device."""
    if cupy is None:
        raise ImportError(f"CuPy is not installed; {_INSTALL_HINT}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        raise ImportError(f"no CUDA device is visible to CuPy ({exc}); {_INSTALL_HINT}") from exc
    if count < 1:
        raise ImportError(f"no CUDA device is visible to CuPy; {_INSTALL_HINT}")
