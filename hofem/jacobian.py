"""Determinants of stacks of small Jacobians, written out (NumPy or CuPy)."""

from .typing import Array

__all__ = ["det"]


def det(a: Array) -> Array:
    """Determinants of the trailing ``(d, d)`` matrices of ``a``, ``d`` = 1, 2 or 3.

    The cofactor expansion as array expressions of ``a``'s own library: several
    times faster than the batched LU of ``numpy.linalg.det`` on millions of
    3x3 matrices, and it runs on the GPU for CuPy arrays.

    Parameters
    ----------
    a : ndarray (..., d, d), float64, NumPy or CuPy

    Returns
    -------
    ndarray (...)

    Raises
    ------
    ValueError
        The trailing axes are not square of size 1, 2 or 3.
    """
    d = a.shape[-1]
    if a.ndim < 2 or a.shape[-2] != d or d not in (1, 2, 3):
        raise ValueError(f"det needs (..., d, d) matrices with d = 1, 2, 3, got shape {a.shape}")
    if d == 1:
        return a[..., 0, 0].copy()
    if d == 2:
        return a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    return (
        a[..., 0, 0] * (a[..., 1, 1] * a[..., 2, 2] - a[..., 1, 2] * a[..., 2, 1])
        - a[..., 0, 1] * (a[..., 1, 0] * a[..., 2, 2] - a[..., 1, 2] * a[..., 2, 0])
        + a[..., 0, 2] * (a[..., 1, 0] * a[..., 2, 1] - a[..., 1, 1] * a[..., 2, 0])
    )
