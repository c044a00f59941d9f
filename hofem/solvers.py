"""Krylov solvers on any array module (NumPy or CuPy), for operators or matrices."""

import math

from .operator import _OperatorBase
from .vector_ops import vector_ops

__all__ = ["CGInfo", "cg", "jacobi"]


class CGInfo(int):
    """SciPy's ``info`` convention as an int, with the solve's record attached.

    ``0``: converged; ``> 0``: not converged after that many iterations;
    ``< 0``: breakdown (non-positive curvature ``p.Ap <= 0``, or a NaN/Inf).

    Attributes
    ----------
    iterations : int
    residual_norm : float
        ``||b - A x||`` as tracked by the recurrence at the last check.
    message : str
    """

    def __new__(cls, value, iterations, residual_norm, message):
        obj = super().__new__(cls, value)
        obj.iterations = iterations
        obj.residual_norm = residual_norm
        obj.message = message
        return obj

    def __repr__(self):
        return f"CGInfo({int(self)}, iterations={self.iterations}, message={self.message!r})"


def _matvec(A, name):
    """A function applying ``A``: Operator, LinearOperator, matrix, or callable."""
    if hasattr(A, "matvec"):
        return A.matvec
    if hasattr(A, "__matmul__") and not callable(A):
        return lambda x: A @ x
    if callable(A):
        return A
    raise TypeError(
        f"{name} must be an Operator, LinearOperator, matrix or callable, got {type(A).__name__}"
    )


def cg(A, b, x0=None, *, rtol=1e-8, atol=0.0, maxiter=None, M=None, callback=None, check_every=1):
    """Conjugate gradients for symmetric positive definite ``A``, SciPy's conventions.

    Converged when ``||r|| <= max(rtol * ||b||, atol)``.  Vector updates are
    array expressions of the array module of ``b``; the only host
    synchronization is the convergence check every ``check_every`` iterations.

    Parameters
    ----------
    A : Operator, LinearOperator, sparse/dense matrix or callable
        Applies the matrix to an array shaped like ``b``.
    b : ndarray (n,), float64, NumPy or CuPy
    x0 : ndarray (n,), optional
        Initial guess (default zero); not modified.
    rtol, atol : float
    maxiter : int, optional
        Default ``10 * n`` (``n`` summed over the ranks of a distributed operator).
    M : Operator, LinearOperator, matrix or callable, optional
        Preconditioner approximating ``A^{-1}`` (see :func:`jacobi`).
    callback : callable, optional
        ``callback(xk)`` after every iteration.
    check_every : int, default 1
        Iterations between convergence checks (each is one host sync); the
        reported iteration count is then the multiple of it at which the check
        found convergence.

    Returns
    -------
    x : ndarray (n,)
    info : CGInfo
        An int (0 converged, > 0 iterations without convergence, < 0 breakdown)
        with ``.iterations``, ``.residual_norm`` and ``.message``.

    Raises
    ------
    TypeError
        ``A`` or ``M`` of an unsupported type; ``b`` not an array.
    ValueError
        Shapes that disagree, non-positive ``maxiter``/``check_every``,
        negative tolerances.
    """
    ops = vector_ops(A, b)
    xp = ops.xp
    if b.ndim != 1:
        raise ValueError(f"b must be 1-D, got shape {b.shape}")
    n = b.shape[0]
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    maxiter = 10 * ops.length(b) if maxiter is None else int(maxiter)
    if maxiter < 1 or int(check_every) < 1:
        raise ValueError(f"maxiter and check_every must be >= 1, got {maxiter}, {check_every}")
    raw_matvec = _matvec(A, "A")

    def matvec(v):
        out = raw_matvec(v)
        if out.shape != b.shape:
            raise ValueError(
                f"A maps shape {v.shape} to {out.shape}; it must be square of size {n}"
            )
        return out

    if isinstance(A, _OperatorBase) and A.shape == (n, n):
        matvec_into = A.apply  # out = A v in place: no allocation per iteration
    else:

        def matvec_into(v, out):
            out[...] = matvec(v)

    precond = _matvec(M, "M") if M is not None else None
    x = xp.zeros_like(b) if x0 is None else xp.array(x0, dtype=b.dtype, copy=True)
    if x.shape != b.shape:
        raise ValueError(f"x0 must have shape {b.shape}, got {x.shape}")

    b_norm = ops.norm(b)
    tol = max(rtol * b_norm, atol)
    r = b - matvec(x) if x0 is not None else b.copy()
    r_norm = ops.norm(r)
    if r_norm <= tol:
        return x, CGInfo(0, 0, r_norm, "converged")
    z = precond(r) if precond else r
    p = z.copy()
    rz = ops.dot(r, z)
    breakdown = xp.zeros((), dtype=bool)  # device flag: p.Ap <= 0 or NaN/Inf seen
    Ap = xp.empty_like(b)  # (n,) reused: operators apply into it
    iteration = 0
    while iteration < maxiter:
        matvec_into(p, Ap)
        pAp = ops.dot(p, Ap)
        if precond is None:  # z = r: the x/r update also gives r . r
            rz_new = ops.update_xr_rr(rz, pAp, breakdown, p, Ap, x, r)
        else:
            ops.update_xr(rz, pAp, breakdown, p, Ap, x, r)
        iteration += 1
        if callback is not None:
            callback(x)
        if iteration % check_every == 0 or iteration == maxiter:
            # unpreconditioned, r . r is already there: no second reduction per check
            r_norm = ops.norm(r) if precond is not None else math.sqrt(float(rz_new))
            if bool(breakdown) or not math.isfinite(r_norm):
                return x, CGInfo(
                    -1,
                    iteration,
                    r_norm,
                    f"breakdown by iteration {iteration} (||r|| = {r_norm:.3e}): "
                    "p.Ap <= 0 or NaN/Inf; A (and M) must be symmetric positive "
                    "definite",
                )
            if r_norm <= tol:
                return x, CGInfo(0, iteration, r_norm, "converged")
        if precond is not None:
            z = precond(r)
            rz_new = ops.dot(r, z)
        ops.update_p(z, rz_new, rz, p)
        rz = rz_new
    return x, CGInfo(
        iteration,
        iteration,
        r_norm,
        f"not converged in {iteration} iterations: ||r|| = {r_norm:.3e} > tol = {tol:.3e}",
    )


def jacobi(op):
    """Jacobi preconditioner ``r -> r / diag(A)`` from the assembled diagonal.

    Parameters
    ----------
    op : Operator or CompositeOperator
        Square; its diagonal must be nonzero.

    Returns
    -------
    callable
        Applies the inverse diagonal to an L-vector.

    Raises
    ------
    ValueError
        A zero diagonal entry (named).
    """
    diag = op.linear_assemble_diagonal()
    xp = op.ceed.xp
    zero = xp.nonzero(diag == 0)[0]
    if zero.size:
        raise ValueError(
            f"diagonal entry {int(zero[0])} is zero; Jacobi needs a nonzero "
            "diagonal (are constrained DOFs removed?)"
        )
    inv_diag = 1.0 / diag
    return lambda r: inv_diag * r
