"""Krylov solvers on any array module (NumPy or CuPy), for operators or matrices."""

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from . import backends
from .cg_variants import VARIANTS, pipelined_loop, single_reduction_loop
from .operator import _OperatorBase
from .typing import Array
from .vector_ops import VectorOps

__all__ = ["CGInfo", "Jacobi", "SupportsMatmul", "SupportsMatvec", "cg", "jacobi"]


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

    @classmethod
    def converged(cls, iterations: int, residual_norm: float) -> "CGInfo":
        return cls(0, iterations, residual_norm, "converged")

    @classmethod
    def breakdown(cls, iteration: int, residual_norm: float) -> "CGInfo":
        """``-1``: ``p.Ap <= 0`` or NaN/Inf seen by ``iteration``."""
        return cls(
            -1,
            iteration,
            residual_norm,
            f"breakdown by iteration {iteration} (||r|| = {residual_norm:.3e}): p.Ap <= 0 or "
            "NaN/Inf; A (and M) must be symmetric positive definite",
        )

    @classmethod
    def not_converged(cls, iterations: int, residual_norm: float, tol: float) -> "CGInfo":
        return cls(
            iterations,
            iterations,
            residual_norm,
            f"not converged in {iterations} iterations: ||r|| = {residual_norm:.3e} > "
            f"tol = {tol:.3e}",
        )


@runtime_checkable
class SupportsMatvec(Protocol):
    """Applies itself by ``matvec``: hofem operators, SciPy and CuPy ``LinearOperator`` s."""

    def matvec(self, x: Any) -> Any: ...


@runtime_checkable
class SupportsMatmul(Protocol):
    """Applies itself by ``@``: dense and sparse matrices of NumPy, SciPy, CuPy."""

    def __matmul__(self, x: Any) -> Any: ...


def _matvec(A, name):
    """A function applying ``A``: Operator, LinearOperator, matrix, or callable."""
    if isinstance(A, SupportsMatvec):
        return A.matvec
    if isinstance(A, SupportsMatmul) and not callable(A):
        return lambda x: A @ x
    if callable(A):
        return A
    raise TypeError(
        f"{name} must be an Operator, LinearOperator, matrix or callable, got {type(A).__name__}"
    )


def _vector_ops(A, b) -> VectorOps:
    """The :class:`VectorOps` for solving ``A x = b``.

    A hofem operator's own (``A.vector_ops()``: its backend's; distributed operators
    reduce across ranks), else that of the backend whose array module holds ``b``.

    Raises
    ------
    TypeError
        ``b`` is neither a NumPy nor a CuPy array.
    """
    if isinstance(A, _OperatorBase):
        return A.vector_ops()
    backend = backends.array_backend(b)
    if backend is None:
        raise TypeError(f"b must be a NumPy or CuPy array, got {type(b).__name__}")
    return backend.vector_ops()


def _check_shapes(A, b, x0, M):
    """Raise ValueError naming the argument whose shape does not match ``A`` (or ``b``).

    Only operators and matrices with a 2-D ``shape`` are checked here; callables
    are checked by the shape of what they return.
    """
    shape = getattr(A, "shape", None)  # a non-square A is reported by the loop's matvec
    if shape is not None and len(shape) == 2 and shape[0] == shape[1] and b.shape != (shape[0],):
        raise ValueError(f"b must have shape ({shape[0]},) to match A, got {b.shape}")
    if x0 is not None and getattr(x0, "shape", b.shape) != b.shape:
        raise ValueError(f"x0 must have shape {b.shape} to match b, got {x0.shape}")
    n = b.shape[0]
    if isinstance(M, Jacobi):
        m_shape = (M.inv_diag.shape[0],) * 2
    else:
        m_shape = getattr(M, "shape", None)
    if m_shape is not None and tuple(m_shape) != (n, n):
        raise ValueError(f"M must have shape ({n}, {n}) to match b, got {tuple(m_shape)}")


def cg(
    A: Any,
    b: npt.NDArray[np.float64],
    x0: npt.NDArray[np.float64] | None = None,
    *,
    rtol: float = 1e-8,
    atol: float = 0.0,
    maxiter: int | None = None,
    M: Any = None,
    callback: Callable[[npt.NDArray[np.float64]], None] | None = None,
    check_every: int | None = None,
    device_loop: bool | None = None,
    variant: str = "standard",
) -> tuple[npt.NDArray[np.float64], CGInfo]:
    """Conjugate gradients for symmetric positive definite ``A``, SciPy's conventions.

    Converged when ``||r|| <= max(rtol * ||b||, atol)``.

    Two loops run the same iteration:

    - the **device loop**, for hofem operators on a backend that declares one
      (``backend.device_cg``: the CUDA backends), restricted ones
      (:func:`hofem.restrict_dofs`) and distributed scalar ones
      (:class:`hofem.parallel.ParOperator` over NCCL, the exchanges and all-reduces
      inside the loop), with no callback and ``M`` None or a :class:`Jacobi`:
      CG's scalars and its convergence test live on the device
      (:mod:`hofem.backends.cuda.cg`), vector updates are fused with the
      reductions that follow them, ``/gpu/cuda/gen`` forms ``p . Ap`` inside the
      operator kernel and replays the iteration as a CUDA graph.  The host only
      looks every ``check_every`` iterations, and the solve still stops at the
      iteration that converged.
    - the **host loop** otherwise: vector updates are array expressions of the
      array module of ``b`` (or the backend's :class:`~hofem.vector_ops.VectorOps`),
      ``p . Ap`` comes with the application (:meth:`Operator.apply_dot
      <hofem.Operator.apply_dot>`; ``/cpu/self/numba`` forms it inside the operator
      kernel); the only host synchronization is the convergence check every
      ``check_every`` iterations, and the reported count is the multiple of
      ``check_every`` at which a check found convergence.

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
    check_every : int, optional
        Iterations between host checks (each is one synchronization).  Default:
        1 in the host loop; in the device loop as many iterations as run in
        about 2.5 ms (measured during the solve), so checks cost about 2%.
    device_loop : bool, optional
        Default (None): the device loop where it applies.  False: always the
        host loop.  True: the device loop, or ValueError where it does not apply.
    variant : {"standard", "single_reduction", "pipelined"}
        ``"single_reduction"``: Chronopoulos-Gear CG, ``"pipelined"``:
        Ghysels-Vanroose CG (:mod:`hofem.cg_variants`); both sum the inner products
        of an iteration in one reduction (one all-reduce of three values on a
        distributed operator, against two or three), the pipelined one overlapping
        it with the operator.  Same stopping test and :class:`CGInfo`.  They run
        in the host loop (the device loop is standard CG only).  See "CG variants"
        in ``docs/solvers.md`` for their rounding and when each wins.

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
        negative tolerances; ``device_loop=True`` where it does not apply;
        an unknown ``variant``.
    """
    ops, maxiter = _checked_arguments(A, b, rtol, atol, maxiter, check_every)
    _check_shapes(A, b, x0, M)
    _check_variant(variant, device_loop)
    device = None if variant != "standard" else _device_cg(A, b, x0, M, callback, device_loop)
    if device is not None:
        inv_diag = None if M is None else M.inv_diag
        tol = max(rtol * ops.norm(b), atol)
        return _device_solve(device, b, x0, tol, maxiter, inv_diag, check_every)
    with ops.solve_scope(b.size):
        return _host_solve(A, b, x0, M, ops, rtol, atol, maxiter, check_every, callback, variant)


def _host_solve(A, b, x0, M, ops, rtol, atol, maxiter, check_every, callback, variant):
    """:func:`cg` in the host loop of ``variant``: ``(x, CGInfo)``."""
    check_every = 1 if check_every is None else int(check_every)
    matvec, apply_dot = _host_apply(A, b, ops)
    precond = _matvec(M, "M") if M is not None else None
    x = ops.xp.zeros_like(b) if x0 is None else ops.xp.array(x0, dtype=b.dtype, copy=True)
    tol = max(rtol * ops.norm(b), atol)
    r = b - matvec(x) if x0 is not None else b.copy()  # (n,)
    if variant == "standard":
        return _host_loop(ops, apply_dot, precond, x, r, tol, maxiter, check_every, callback)
    loop = single_reduction_loop if variant == "single_reduction" else pipelined_loop
    apply = A.apply if _applies_in_place(A, b) else _apply_into(matvec)
    status, iterations, r_norm = loop(
        ops, apply, precond, x, r, tol, maxiter, check_every, callback
    )
    return x, _report(status, iterations, r_norm, tol)


def _check_variant(variant, device_loop):
    """Raise ValueError for an unknown ``variant`` or one asked of the device loop."""
    if variant not in VARIANTS:
        choices = ", ".join(repr(v) for v in VARIANTS)
        raise ValueError(f"variant must be one of {choices}; got {variant!r}")
    if variant != "standard" and device_loop:
        raise ValueError(
            f"device_loop=True runs standard CG only; variant={variant!r} runs in the host "
            "loop: leave device_loop=None"
        )


def _applies_in_place(A, b):
    """Whether ``A.apply(v, out)`` writes ``A v`` into ``out``: a square hofem operator."""
    return isinstance(A, _OperatorBase) and A.shape == (b.shape[0],) * 2


def _apply_into(matvec):
    """``apply(v, out)``: ``out = matvec(v)`` for matrices, LinearOperators, callables."""

    def apply(v, out):
        out[...] = matvec(v)

    return apply


def _report(status, iterations, r_norm, tol):
    """The :class:`CGInfo` of a loop's ``(status, iterations, residual_norm)``."""
    if status == "converged":
        return CGInfo.converged(iterations, r_norm)
    if status == "breakdown":
        return CGInfo.breakdown(iterations, r_norm)
    return CGInfo.not_converged(iterations, r_norm, tol)


def _checked_arguments(A, b, rtol, atol, maxiter, check_every):
    """CG's vector operations and ``maxiter`` (default ``10 n``), after checking the
    arguments every loop shares; raises TypeError/ValueError naming the bad one."""
    ops = _vector_ops(A, b)
    if b.ndim != 1:
        raise ValueError(f"b must be 1-D, got shape {b.shape}")
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    maxiter = 10 * ops.length(b) if maxiter is None else int(maxiter)
    if maxiter < 1 or (check_every is not None and int(check_every) < 1):
        raise ValueError(f"maxiter and check_every must be >= 1, got {maxiter}, {check_every}")
    return ops, maxiter


def _host_apply(A, b, ops):
    """``matvec(v)`` (a new array, shape-checked) and ``apply_dot(v, out)`` (``out = A v``
    in place, returning ``v . out``) for the host loop."""
    n = b.shape[0]
    raw_matvec = _matvec(A, "A")

    def matvec(v):
        out = raw_matvec(v)
        if out.shape != b.shape:
            raise ValueError(
                f"A maps shape {v.shape} to {out.shape}; it must be square of size {n}"
            )
        return out

    if isinstance(A, _OperatorBase) and A.shape == (n, n):
        # out = A v in place (no allocation per iteration) and v . out, which a backend
        # may form inside its operator kernel (no pass over the vectors)
        return matvec, A.apply_dot

    def apply_dot(v, out):
        out[...] = matvec(v)
        return ops.dot(v, out)

    return matvec, apply_dot


def _host_loop(ops, apply_dot, precond, x, r, tol, maxiter, check_every, callback):
    """CG's iterations from the iterate ``x`` (n,) and its residual ``r`` (n,), both
    updated in place; returns ``(x, CGInfo)``."""
    xp = ops.xp
    r_norm = ops.norm(r)
    if r_norm <= tol:
        return x, CGInfo.converged(0, r_norm)
    z = precond(r) if precond else r
    p = z.copy()
    rz = ops.dot(r, z)
    breakdown = xp.zeros((), dtype=bool)  # device flag: p.Ap <= 0 or NaN/Inf seen
    Ap = xp.empty_like(r)  # (n,) reused: operators apply into it
    iteration = 0
    while iteration < maxiter:
        pAp = apply_dot(p, Ap)
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
                return x, CGInfo.breakdown(iteration, r_norm)
            if r_norm <= tol:
                return x, CGInfo.converged(iteration, r_norm)
        if precond is not None:
            z = precond(r)
            rz_new = ops.dot(r, z)
        ops.update_p(z, rz_new, rz, p)
        rz = rz_new
    return x, CGInfo.not_converged(iteration, r_norm, tol)


def _device_cg(A, b, x0, M, callback, device_loop):
    """The backend's device CG for this solve, or None for the host loop.

    Raises ValueError for ``device_loop=True`` where the device loop does not apply.
    """
    if device_loop is False:
        return None
    backend = A.ceed.backend if isinstance(A, _OperatorBase) else None
    solver = why = None
    if backend is None or backend.device_cg is None:
        why = "A must be a hofem operator on a CUDA backend"
    elif callback is not None:
        why = "a callback needs every iterate on the host"
    elif M is not None and not isinstance(M, Jacobi):
        why = "M must be None or a Jacobi preconditioner (hofem.jacobi)"
    else:
        target = A.device_cg_target()
        solver = None if target is None else backend.device_cg(A, target)
        why = (
            "A must be square (or restricted, restrict_dofs), and a distributed operator "
            "needs the nccl or ipc transport"
        )
    if solver is None:
        if device_loop:
            raise ValueError(f"device_loop=True does not apply: {why}; leave device_loop=None")
        return None
    inv_diag = None if M is None else M.inv_diag
    for name, vector in (("b", b), ("x0", x0), ("M.inv_diag", inv_diag)):
        if vector is not None:
            backend.check_vector(vector, name, (A.shape[0],))
    return solver


def _device_solve(solver, b, x0, tol, maxiter, inv_diag, check_every):
    """Run a :class:`~hofem.backends.cuda.cg.DeviceCG` and report as the host loop does."""
    x, status, iterations, r_norm = solver.solve(b, x0, tol, maxiter, inv_diag, check_every)
    if status == "converged":
        return x, CGInfo.converged(iterations, r_norm)
    if status == "breakdown":
        return x, CGInfo.breakdown(iterations + 1, r_norm)
    return x, CGInfo.not_converged(iterations, r_norm, tol)


class Jacobi:
    """Jacobi preconditioner ``r -> inv_diag * r``; make it with :func:`jacobi`.

    Parameters
    ----------
    inv_diag : array (n,), float64
        The inverse of ``diag(A)``, on the operator's backend.
    """

    def __init__(self, inv_diag: Array) -> None:
        self.inv_diag = inv_diag

    def __call__(self, r: Array) -> Array:
        """``inv_diag * r`` as a new array, ``(n,)``."""
        return self.inv_diag * r


def jacobi(op: _OperatorBase) -> Jacobi:
    """Jacobi preconditioner ``r -> r / diag(A)`` from the assembled diagonal.

    Parameters
    ----------
    op : Operator or CompositeOperator
        Square; its diagonal must be nonzero.

    Returns
    -------
    Jacobi
        Applies the inverse diagonal to an L-vector (callable).

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
    return Jacobi(1.0 / diag)
