"""Quadrature rules: Gauss and Gauss–Lobatto on [-1, 1], collapsed Gauss–Jacobi on simplices.

Conventions
-----------
- The tensor reference interval is [-1, 1]; weights sum to 2.
- Simplex rules live on the *unit* simplex: the triangle with vertices (0,0), (1,0), (0,1)
  (weights sum to 1/2) and the tetrahedron with vertices (0,0,0), (1,0,0), (0,1,0), (0,0,1)
  (weights sum to 1/6).  ``dim=1`` gives Gauss on [0, 1] (weights sum to 1).
- Every array is float64.

The 1D rules are computed from the Golub–Welsch eigenvalues of the Jacobi matrix, polished
by Newton iteration on the Legendre three-term recurrence and symmetrized about 0, so the
points and weights are accurate to a few ulps for any number of points.
"""

import numbers

import numpy as np
from scipy.linalg import eigvalsh_tridiagonal
from scipy.special import roots_jacobi

__all__ = ["gauss_quadrature", "lobatto_quadrature", "simplex_quadrature"]


def _check_int(value, name, minimum, allowed):
    """Return ``value`` as a Python int, or raise ValueError naming ``name`` and ``allowed``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer {allowed}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be an integer {allowed}, got {value}")
    return value


def _legendre_and_prev(n, x):
    """Legendre P_n(x) and P_{n-1}(x) by the three-term recurrence.

    Parameters
    ----------
    n : int, n >= 1
    x : ndarray of float64, shape (m,)

    Returns
    -------
    p_n, p_nm1 : ndarray of float64, shape (m,) each
    """
    p_prev = np.ones_like(x)  # (m,)
    p = x.copy()  # (m,)
    for k in range(2, n + 1):
        p_prev, p = p, ((2 * k - 1) * x * p - (k - 1) * p_prev) / k
    return p, p_prev


def _symmetrize(points, weights):
    """Make an ascending rule exactly symmetric about 0 (points odd, weights even)."""
    points = 0.5 * (points - points[::-1])  # (Q,)
    weights = 0.5 * (weights + weights[::-1])  # (Q,)
    return points, weights


def gauss_quadrature(Q):
    """Gauss–Legendre quadrature with ``Q`` points on [-1, 1].

    Exact for polynomials of degree <= 2Q - 1.

    Parameters
    ----------
    Q : int
        Number of points, Q >= 1.

    Returns
    -------
    points : ndarray of float64, shape (Q,)
        Ascending, symmetric about 0, all inside (-1, 1).
    weights : ndarray of float64, shape (Q,)
        Positive, summing to 2.

    Raises
    ------
    ValueError
        If ``Q`` is not an integer >= 1.
    """
    Q = _check_int(Q, "Q", 1, ">= 1 (number of Gauss points)")
    if Q == 1:
        return np.zeros(1), np.full(1, 2.0)
    k = np.arange(1, Q, dtype=np.float64)  # (Q-1,)
    offdiag = k / np.sqrt(4.0 * k * k - 1.0)  # (Q-1,)
    x = eigvalsh_tridiagonal(np.zeros(Q), offdiag)  # (Q,) ascending
    # Newton polish on P_Q(x) = 0.
    for _ in range(3):
        p, p_prev = _legendre_and_prev(Q, x)
        dp = Q * (p_prev - x * p) / (1.0 - x * x)  # (Q,) P_Q'(x)
        x = x - p / dp
    p, p_prev = _legendre_and_prev(Q, x)
    dp = Q * (p_prev - x * p) / (1.0 - x * x)  # (Q,)
    w = 2.0 / ((1.0 - x * x) * dp * dp)  # (Q,)
    return _symmetrize(x, w)


def lobatto_quadrature(Q):
    """Gauss–Lobatto–Legendre (GLL) quadrature with ``Q`` points on [-1, 1].

    Exact for polynomials of degree <= 2Q - 3.  The endpoints are exactly -1 and 1.

    Parameters
    ----------
    Q : int
        Number of points, Q >= 2.

    Returns
    -------
    points : ndarray of float64, shape (Q,)
        Ascending, symmetric about 0, ``points[0] == -1.0`` and ``points[-1] == 1.0``.
    weights : ndarray of float64, shape (Q,)
        Positive, summing to 2; the endpoint weights are 2 / (Q (Q - 1)).

    Raises
    ------
    ValueError
        If ``Q`` is not an integer >= 2.
    """
    Q = _check_int(Q, "Q", 2, ">= 2 (number of Gauss-Lobatto points, endpoints included)")
    N = Q - 1  # polynomial degree; interior points are the roots of P_N'
    x = np.empty(Q)  # (Q,)
    x[0], x[-1] = -1.0, 1.0
    if Q > 2:
        # Interior points: roots of the Jacobi(1, 1) polynomial of degree Q - 2.
        n = Q - 2
        k = np.arange(1, n, dtype=np.float64)  # (n-1,)
        offdiag = np.sqrt(k * (k + 2.0) / ((2.0 * k + 1.0) * (2.0 * k + 3.0)))  # (n-1,)
        xi = eigvalsh_tridiagonal(np.zeros(n), offdiag) if n > 1 else np.zeros(1)  # (n,)
        # Newton polish on P_N'(x) = 0.
        for _ in range(3):
            p, p_prev = _legendre_and_prev(N, xi)
            one_m_x2 = 1.0 - xi * xi
            dp = N * (p_prev - xi * p) / one_m_x2  # (n,) P_N'
            d2p = (2.0 * xi * dp - N * (N + 1) * p) / one_m_x2  # (n,) P_N''
            xi = xi - dp / d2p
        x[1:-1] = xi
    p, _ = _legendre_and_prev(N, x)  # (Q,)
    w = 2.0 / (N * (N + 1) * p * p)  # (Q,)
    x, w = _symmetrize(x, w)
    return x, w


def _gauss_jacobi_01(n, alpha):
    """Gauss–Jacobi rule for the weight (1 - v)^alpha on [0, 1].

    Returns
    -------
    points : ndarray of float64, shape (n,)
    weights : ndarray of float64, shape (n,), summing to 1 / (alpha + 1)
    """
    if alpha == 0:
        t, w = gauss_quadrature(n)
    else:
        t, w = roots_jacobi(n, alpha, 0.0)  # weight (1 - t)^alpha on [-1, 1]
    v = 0.5 * (1.0 + t)  # (n,)
    w = np.asarray(w, dtype=np.float64) * 0.5 ** (alpha + 1)  # (n,)
    return np.asarray(v, dtype=np.float64), w


def simplex_quadrature(dim, degree):
    """Quadrature on the unit simplex, exact for polynomials of total degree <= ``degree``.

    A conical product (collapsed coordinates, Duffy transform) of Gauss–Jacobi rules with
    ``n = degree // 2 + 1`` points per direction, hence ``n**dim`` points.  For dim = 2,
    ``x = u (1 - v)``, ``y = v``; for dim = 3, ``x = u (1 - v)(1 - w)``, ``y = v (1 - w)``,
    ``z = w``, with Gauss–Legendre in u and Gauss–Jacobi rules for the weights (1 - v) and
    (1 - w)^2 absorbing the Jacobian.  All points lie strictly inside the simplex and all
    weights are positive.

    Parameters
    ----------
    dim : int
        1 (the interval [0, 1]), 2 (unit triangle) or 3 (unit tetrahedron).
    degree : int
        Total polynomial degree integrated exactly, degree >= 0.

    Returns
    -------
    points : ndarray of float64, shape (num_qpts, dim)
    weights : ndarray of float64, shape (num_qpts,)
        Summing to the reference volume 1, 1/2, 1/6 for dim 1, 2, 3.

    Raises
    ------
    ValueError
        If ``dim`` is not 1, 2 or 3, or ``degree`` is not an integer >= 0.
    """
    dim = _check_int(dim, "dim", 1, "in 1..3")
    if dim > 3:
        raise ValueError(f"dim must be an integer in 1..3, got {dim}")
    degree = _check_int(degree, "degree", 0, ">= 0 (total polynomial degree)")
    n = degree // 2 + 1
    u, wu = _gauss_jacobi_01(n, 0)  # (n,), (n,)
    if dim == 1:
        return u.reshape(n, 1).copy(), wu
    v, wv = _gauss_jacobi_01(n, 1)  # (n,), (n,)
    if dim == 2:
        U, V = np.meshgrid(u, v, indexing="ij")  # (n, n) each
        points = np.stack([U * (1.0 - V), V], axis=-1).reshape(n * n, 2)  # (n*n, 2)
        weights = np.outer(wu, wv).reshape(n * n)  # (n*n,)
        return points, weights
    w, ww = _gauss_jacobi_01(n, 2)  # (n,), (n,)
    U, V, W = np.meshgrid(u, v, w, indexing="ij")  # (n, n, n) each
    x = U * (1.0 - V) * (1.0 - W)
    y = V * (1.0 - W)
    points = np.stack([x, y, W], axis=-1).reshape(n**3, 3)  # (n**3, 3)
    weights = (wu[:, None, None] * wv[None, :, None] * ww[None, None, :]).reshape(n**3)
    return points, weights
