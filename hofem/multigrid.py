"""p-multigrid preconditioning: Chebyshev smoothing, V-cycles, the AMG coarse solve, ``pmg``.

The algebra of :func:`pmg`, on any array module (NumPy or CuPy): a hierarchy of
operators of decreasing polynomial order (from ``Operator.multigrid_level``,
built by the discretization layer, :func:`hofem.forms.multigrid_hierarchy`),
Chebyshev smoothing of the Jacobi-scaled operator on each level, and on the
order-1 level an algebraic multigrid V-cycle whose smoothed-aggregation hierarchy
is built once, aggregated on the host by pyamg and multiplied with the backend's
sparse matrices (:func:`smoothed_aggregation`; :class:`AMGCycle` runs it with them).
Every piece is symmetric (the same polynomial smoother before and after the
coarse correction, a symmetric coarse cycle), so the preconditioner is
symmetric positive definite and CG stays CG.

Which hierarchy an operator has is looked up by its type in a registry
(:func:`register_hierarchy`) that the layers above fill: the forms for serial
operators, :mod:`hofem.parallel` for distributed ones.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from .operator import Operator, SubOperator
from .transfer import Transfer
from .typing import Array, LinearOperator, SparseMatrix
from .vector_ops import VectorOps

__all__ = [
    "PMG",
    "AMGCycle",
    "AMGLevel",
    "Chebyshev",
    "Hierarchy",
    "RestrictedTransfer",
    "WholeVectorCycle",
    "coarse_orders",
    "estimate_max_eigenvalue",
    "pmg",
    "register_hierarchy",
    "smoothed_aggregation",
    "start_max_eigenvalue",
]

_HIERARCHIES = []  # (class, builder) pairs, see register_hierarchy


def import_pyamg() -> ModuleType:
    """pyamg, or ImportError naming the extra that installs it."""
    try:
        import pyamg
    except ImportError as err:
        raise ImportError("hf.pmg's coarse solve needs pyamg: pip install 'hofem[amg]'") from err
    return pyamg


@dataclass
class Hierarchy:
    """The levels of a p-multigrid preconditioner, fine to coarse.

    Attributes
    ----------
    operators : list
        ``operators[0]`` the operator to precondition, then each coarser one;
        each has ``shape``, ``apply(u, v)``, ``linear_assemble_diagonal()``
        and ``vector_ops()``.
    prolong, restrict : list
        ``prolong[l]`` maps level ``l + 1`` to level ``l`` (``apply(u, v)``),
        ``restrict[l]`` is its transpose.
    orders : list of int
    coarse_solver : callable or None
        ``coarse_solver()`` -> ``build``, then ``build(make)`` -> ``solve(b) -> x``
        on the coarsest level, where ``make(A_host_csr, xp)`` builds a
        host-assembled solver.  The first call does the assembly that needs the
        device (the serial hierarchy's order-1 matrix comes to the host there), so
        that :func:`pmg` can queue device work before the host work of ``build``;
        the distributed hierarchy gathers the matrix and the vectors around it in
        ``build``.  :func:`pmg` drops it once it has the solve.
    assembly : list or None
        Per level, an object whose ``linear_assemble_diagonal()`` (and, on the
        coarsest, ``linear_assemble()``, a host matrix) are those of ``operators``,
        cheaper to compute (:class:`hofem.level_assembly.LevelAssembly`); None:
        assemble ``operators``.  :func:`pmg` drops them after its set-up.
    free_to_free : bool
        The transfers join the free DOFs of one level to the free DOFs of the
        other only (exact zeros elsewhere), so the cycle may run on whole
        L-vectors (:class:`WholeVectorCycle`).
    """

    operators: list
    prolong: list
    restrict: list
    orders: list
    coarse_solver: Callable | None
    info: dict = field(default_factory=dict)
    assembly: list | None = None
    free_to_free: bool = False


def register_hierarchy(cls: type, builder: Callable) -> None:
    """Make ``builder(A, orders) -> Hierarchy`` the hierarchy of operators of type ``cls``
    (and of :func:`hofem.restrict_dofs` of them)."""
    _HIERARCHIES.insert(0, (cls, builder))


def coarse_orders(order: int, orders: Sequence[int] | None = None) -> list:
    """The order schedule from ``order`` down to 1: halving by default (8, 4, 2, 1; 6, 3, 1).

    Parameters
    ----------
    order : int
        The fine order.
    orders : sequence of int, optional
        The schedule, starting at ``order``, strictly decreasing, ending at 1.

    Raises
    ------
    ValueError
        A schedule that does not start at ``order``, end at 1, or decrease.
    """
    if orders is None:
        out = [int(order)]
        while out[-1] > 1:
            out.append(out[-1] // 2)
        return out
    out = [int(p) for p in orders]
    if (
        not out
        or out[0] != order
        or out[-1] != 1
        or any(a <= b for a, b in itertools.pairwise(out))
    ):
        raise ValueError(
            f"orders must decrease strictly from the operator's order {order} to 1, e.g. "
            f"{coarse_orders(order)}; got {list(orders)}"
        )
    return out


def estimate_max_eigenvalue(
    apply: Callable[[Array, Array], object],
    inv_diag: Array,
    ops: VectorOps,
    steps: int = 10,
    seed: int = 0,
) -> float:
    """Largest eigenvalue of ``D^-1 A`` from ``steps`` Jacobi-preconditioned CG steps (Lanczos).

    :func:`start_max_eigenvalue` and its result at once.

    Parameters
    ----------
    apply : callable
        ``apply(u, v)``: ``v = A u``, ``A`` symmetric positive (semi-)definite.
    inv_diag : array (n,)
    ops : hofem.vector_ops.VectorOps
        Inner products (summed over ranks for distributed vectors).
    steps : int
    seed : int

    Returns
    -------
    float
        The largest Ritz value of the CG tridiagonal matrix (a lower bound
        that converges fast to the largest eigenvalue).
    """
    return start_max_eigenvalue(apply, inv_diag, ops, steps, seed)()


def start_max_eigenvalue(
    apply: Callable[[Array, Array], object],
    inv_diag: Array,
    ops: VectorOps,
    steps: int = 10,
    seed: int = 0,
) -> Callable[[], float]:
    """Run the steps of :func:`estimate_max_eigenvalue` and defer their one synchronization.

    The CG scalars stay where the vectors live (0-d arrays) and come to the host once, when
    the returned callable is called: on a GPU the steps are only queued on the device, so the
    host may do other work (:func:`pmg` builds the coarse AMG hierarchy) while they run.  A
    breakdown (``p.Ap <= 0`` or ``r.z <= 0``) ends the tridiagonal matrix at the step before
    it, as a loop that stopped there would (the later steps' values are dropped).

    Parameters
    ----------
    apply, inv_diag, ops, steps, seed
        As :func:`estimate_max_eigenvalue`.

    Returns
    -------
    callable
        ``() -> float``: the largest Ritz value (waits for the device).
    """
    xp = ops.xp
    n = inv_diag.shape[0]
    r = xp.random.default_rng(seed).standard_normal(n)  # (n,) drawn where the vectors live
    z = inv_diag * r
    p, Ap = z.copy(), xp.empty_like(z)
    rz, pAp = [ops.dot(r, z)], []  # 0-d arrays: rz[j] = r_j . z_j, pAp[j] = p_j . A p_j
    with np.errstate(divide="ignore", invalid="ignore"):  # after a breakdown: dropped below
        for step in range(steps):
            apply(p, Ap)
            pAp.append(ops.dot(p, Ap))
            if step == steps - 1:  # T needs no later beta
                break
            Ap *= rz[-1] / pAp[-1]  # alpha_j, in place: no temporaries of n entries
            r -= Ap
            xp.multiply(inv_diag, r, out=z)
            rz.append(ops.dot(r, z))
            p *= rz[-1] / rz[-2]  # beta_j
            p += z
    # the vectors may go: the device's stream-ordered memory pool reuses them after the steps
    return lambda: _ritz_max(_host_scalars(xp, rz), _host_scalars(xp, pAp))


def _ritz_max(rz, pAp):
    """The largest eigenvalue of the CG tridiagonal matrix of the host scalars ``rz``
    ``(steps,)`` and ``pAp`` ``(steps,)``, up to the first breakdown (1.0 at the first step)."""
    k = 0
    while k < pAp.size and pAp[k] > 0 and rz[k] > 0:
        k += 1
    if k == 0:
        return 1.0
    alphas, betas = rz[:k] / pAp[:k], rz[1:k] / rz[: k - 1]  # the loop's own divisions
    T = np.zeros((k, k))
    for j in range(k):
        T[j, j] = 1.0 / alphas[j] + (betas[j - 1] / alphas[j - 1] if j else 0.0)
        if j + 1 < k:
            T[j, j + 1] = T[j + 1, j] = math.sqrt(betas[j]) / alphas[j]
    return float(np.linalg.eigvalsh(T)[-1])


def _host_scalars(xp, values):
    """0-d arrays of ``xp`` (or host scalars) as one host array ``(len(values),)``: one copy."""
    stacked = xp.stack([xp.asarray(v).reshape(()) for v in values])
    return stacked if xp is np else stacked.get()


class Chebyshev:
    """Chebyshev polynomial smoother of ``D^-1 A`` on ``[lower, upper] * lambda_max``.

    The smoothing step ``x += q(D^-1 A) D^-1 (b - A x)`` with the degree-``degree``
    Chebyshev polynomial of that interval (Saad, Iterative Methods, Alg. 12.1);
    its error propagator ``I - q(D^-1 A) D^-1 A`` is A-self-adjoint, so the same
    smoother before and after a coarse correction gives a symmetric cycle.
    Each step is one application of ``A`` and one fused vector pass
    (:meth:`hofem.vector_ops.VectorOps.chebyshev_step`); the three work vectors
    are allocated once, at the first ``smooth`` (a smoother that a whole-vector
    cycle replaces never holds them).

    Parameters
    ----------
    apply : callable
        ``apply(u, v)``: ``v = A u``.
    inv_diag : array (n,)
    lambda_max : float
        Estimate of the largest eigenvalue of ``D^-1 A``.
    degree : int
        Operator applications per smoothing step.
    bounds : (float, float)
        The interval as fractions of ``lambda_max`` (PETSc's default ``(0.1, 1.1)``).
    ops : hofem.vector_ops.VectorOps, optional
        The vectors' fused steps; default NumPy's expressions.
    """

    def __init__(self, apply, inv_diag, lambda_max, degree=2, bounds=(0.1, 1.1), ops=None):
        self.apply_op = apply
        self.inv_diag = inv_diag
        self.lambda_max, self.bounds = lambda_max, bounds
        self.degree = int(degree)
        self.ops = VectorOps(np) if ops is None else ops
        lo, hi = bounds[0] * lambda_max, bounds[1] * lambda_max
        theta, delta = (hi + lo) / 2, (hi - lo) / 2
        self.theta, self.delta = theta, delta
        # d_0 = c_0 D^-1 r_0, then d_k = a_k d_{k-1} + c_k D^-1 r_k (the three-term recurrence)
        self.c0, self.coefficients = 1.0 / theta, []
        sigma = theta / delta
        rho = 1.0 / sigma
        for _ in range(self.degree - 1):
            rho_new = 1.0 / (2.0 * sigma - rho)
            self.coefficients.append((rho_new * rho, 2.0 * rho_new / delta))
            rho = rho_new
        self._work = None  # (A d, d, r), each (n,): made at the first smooth

    def smooth(
        self, b: Array, x: Array | None = None, out: Array | None = None
    ) -> tuple[Array, Array | None]:
        """Smooth ``A x = b``: from zero (``x`` None) or in place on ``x``.

        Both cost ``degree`` applications of ``A``.

        Parameters
        ----------
        b : array (n,)
        x : array (n,), optional
            The iterate to smooth in place; None: start from zero.
        out : array (n,), optional
            From zero: where ``x`` goes (default a new array).

        Returns
        -------
        x : array (n,)
        r : array (n,) or None
            ``b - A x`` when ``x`` was None (the last application gives it; a work
            vector of this smoother, valid until its next ``smooth``), else None.
        """
        if self._work is None:
            self._work = tuple(self.ops.xp.empty_like(self.inv_diag) for _ in range(3))
        ops, inv_diag = self.ops, self.inv_diag
        Ad, d, r = self._work
        zero = x is None
        if zero:
            x = ops.xp.empty_like(b) if out is None else out
            ops.chebyshev_start(self.c0, inv_diag, b, None, None, d)
        else:
            self.apply_op(x, Ad)
            ops.chebyshev_start(self.c0, inv_diag, b, Ad, r, d)
        for k, (a, c) in enumerate(self.coefficients):
            self.apply_op(d, Ad)
            ops.chebyshev_step(a, c, inv_diag, Ad, d, x, r, b if zero and k == 0 else None)
        if zero:  # the last step's application gives the residual the coarse level needs
            self.apply_op(d, Ad)
            ops.chebyshev_last(Ad, d, x, r, b if self.degree == 1 else None)
            return x, r
        ops.chebyshev_last(None, d, x, None)
        return x, None


def device_matrix(A: SparseMatrix, xp: ModuleType) -> SparseMatrix:
    """Host sparse matrix ``A`` as a CSR matrix of ``xp``'s sparse library (SciPy or CuPy)."""
    return A.tocsr() if xp is np else sparse_module(xp).csr_matrix(A.tocsr())


def _matrix_apply(A: SparseMatrix, ops: VectorOps | None = None) -> Callable[[Array, Array], None]:
    """``apply(u, v)``: ``v = A u`` for ``xp``'s CSR matrix ``A``, by ``ops.csr_matvec``
    (default the sparse library's product)."""
    matvec = (VectorOps() if ops is None else ops).csr_matvec

    def apply(u, v):
        matvec(A, u, v)

    return apply


@dataclass
class AMGLevel:
    """A level of an :class:`AMGCycle` above its coarsest, on the cycle's arrays.

    Attributes
    ----------
    A : sparse matrix (n, n)
        ``xp``'s CSR.
    inv_diag : array (n,)
    lambda_max : float
        Estimate of the largest eigenvalue of ``D^-1 A``.
    P, R : sparse matrices (n, n_c), (n_c, n)
        Prolongation and its transpose, ``xp``'s CSR.
    """

    A: Any
    inv_diag: Array
    lambda_max: float
    P: Any
    R: Any


class AMGCycle:
    """Symmetric V-cycles of an algebraic multigrid hierarchy, run with ``xp``'s arrays.

    The hierarchy is built once (:func:`smoothed_aggregation`); the cycle itself is
    the fused vector steps and sparse products of ``ops``
    (:meth:`~hofem.vector_ops.VectorOps.csr_matvec` on ``xp``'s CSR matrices: one
    kernel of its own per product on a GPU, SciPy's on the host), one code for both.
    Its work vectors are made once, here and at each smoother's first smoothing, so a
    cycle is a fixed sequence of kernel launches.  Smoothing is Chebyshev on the
    Jacobi-scaled level matrix (symmetric, no triangular solves); the coarsest level
    is solved with its dense pseudo-inverse (a matrix product).

    Parameters
    ----------
    levels : list of AMGLevel
        Fine to coarse, all but the coarsest.
    coarsest : host sparse matrix (n_c, n_c)
    xp : module
        NumPy or CuPy.
    cycles : int
        V-cycles per application (each from the last iterate): the result is
        still a fixed linear, symmetric map.
    degree : int
        Chebyshev degree of the level smoothers.
    bounds : (float, float)
        Chebyshev interval as fractions of each level's ``lambda_max``.
    ops : hofem.vector_ops.VectorOps, optional
        The smoothers' fused vector steps on ``xp``'s arrays; default ``VectorOps(xp)``.
    """

    def __init__(
        self,
        levels: list[AMGLevel],
        coarsest: Any,
        xp: Any = np,
        cycles: int = 1,
        degree: int = 2,
        bounds: tuple = (0.3, 1.1),
        ops: VectorOps | None = None,
    ) -> None:
        import scipy.linalg

        self.xp, self.cycles = xp, int(cycles)
        self.ops = ops = VectorOps(xp) if ops is None else ops
        self.levels = [  # (A, P, R, smoother) on xp, fine to coarse
            (lv.A, lv.P, lv.R, Chebyshev(_matrix_apply(lv.A, ops), lv.inv_diag, lv.lambda_max,
                                         degree, bounds, ops))
            for lv in levels
        ]  # fmt: skip
        dense = np.asarray(coarsest.toarray())
        self.coarse_inverse = xp.asarray(scipy.linalg.pinvh(dense))  # (n_c, n_c)
        self.A = self.levels[0][0] if self.levels else xp.asarray(dense)
        self.shape = self.A.shape
        sizes = [lv.inv_diag.shape[0] for lv in levels] + [dense.shape[0]]  # rows per level
        # below the finest: each level's right-hand side (the restricted residual) and
        # iterate; above the coarsest: the prolonged correction
        self._b = [None] + [xp.empty(n) for n in sizes[1:]]
        self._x = [None] + [xp.empty(n) for n in sizes[1:]]
        self._e = [xp.empty(n) for n in sizes[:-1]]
        # the later cycles' residual and correction on the finest level, (n,) each
        self._later = [xp.empty(sizes[0]) for _ in range(2)] if self.cycles > 1 else None

    def __call__(self, b: Array, out: Array | None = None) -> Array:
        """``x`` approximating ``A^-1 b``: ``cycles`` V-cycles from zero.

        ``b`` (n,); ``x`` goes to ``out`` (n,), default a new array.
        """
        x = self.xp.empty_like(b) if out is None else out
        self._cycle(0, b, x)
        for _ in range(self.cycles - 1):
            r, e = self._later
            self._apply(x, r)
            self.xp.subtract(b, r, out=r)
            x += self._cycle(0, r, e)
        return x

    matvec = __call__

    def _apply(self, u, v):
        """``v = A u`` on the finest level."""
        if self.levels:
            self.ops.csr_matvec(self.A, u, v)
        else:
            self.xp.dot(self.A, u, out=v)

    def _cycle(self, level, b, x):
        """One V-cycle from zero of ``level`` for ``b`` into its iterate ``x``; returns ``x``."""
        if level == len(self.levels):
            return self.xp.dot(self.coarse_inverse, b, out=x)
        _, P, R, smoother = self.levels[level]
        _, r = smoother.smooth(b, out=x)
        b_c, x_c, e = self._b[level + 1], self._x[level + 1], self._e[level]
        self.ops.csr_matvec(R, r, b_c)
        self._cycle(level + 1, b_c, x_c)
        self.ops.csr_matvec(P, x_c, e)
        x += e
        smoother.smooth(b, x)
        return x


def sparse_module(xp: Any) -> Any:
    """``xp``'s sparse library: ``scipy.sparse`` for NumPy, ``cupyx.scipy.sparse`` for CuPy."""
    if xp is np:
        import scipy.sparse

        return scipy.sparse
    import cupyx.scipy.sparse

    return cupyx.scipy.sparse


def _host_coarse_matrix(A_x: Any, xp: Any) -> Any:
    """A Galerkin product made by ``xp``'s sparse library as the host CSR that the next
    level's aggregation reads: exact zeros dropped, columns sorted within each row.

    SciPy's product drops exact zeros and leaves each row's columns unsorted, cuSPARSE
    keeps the zeros and sorts; standard aggregation reads the graph, and its second pass
    joins a node to the first aggregated neighbour in storage order, so both libraries'
    products must come to the same graph in the same order to give the same aggregates.
    """
    A = A_x if xp is np else A_x.get()  # the NumPy level's own matrix: reordering is harmless
    A.eliminate_zeros()
    A.sort_indices()
    return A


# An AMG level of fewer rows than this has its Lanczos estimate run on the host copy of its
# matrix when the cycle runs on a GPU: on a small level a step's dozen small launches cost
# more host time than the host's own product, which grows with the level's entries while the
# launches' cost does not.
HOST_ESTIMATE_ROWS = 2048


def _level_estimate(A, A_x, inv_diag, xp, ops, eig_steps):
    """The Lanczos estimate of ``lambda_max(D^-1 A)`` of one AMG level: where the cycle runs
    (``A_x``, ``inv_diag`` on ``xp``), or on the host (``A``) for a small level on a GPU
    (:data:`HOST_ESTIMATE_ROWS`, its start vector NumPy's)."""
    if xp is not np and A.shape[0] < HOST_ESTIMATE_ROWS:
        host = VectorOps(np)
        return estimate_max_eigenvalue(_matrix_apply(A, host), 1.0 / A.diagonal(), host, eig_steps)
    return estimate_max_eigenvalue(_matrix_apply(A_x, ops), inv_diag, ops, eig_steps)


def _smoothed_level(A_x, A, aggregates, B, xp, ops, eig_steps, omega):
    """One level of :func:`smoothed_aggregation` on ``xp`` and the next level's candidate.

    Parameters
    ----------
    A_x : xp's sparse matrix (n, n)
    A : host CSR (n, n)
        The same matrix on the host.
    aggregates : host CSR (n, n_c)
        pyamg's aggregation operator.
    B : host array (n,) or (n, 1)
        The near-null-space candidate.

    Returns
    -------
    level : AMGLevel
    B_c : host array (n_c, 1)
    """
    import scipy.sparse
    from pyamg.aggregation import fit_candidates

    inv_diag = xp.asarray(1.0 / A.diagonal())  # (n,)
    lam = _level_estimate(A, A_x, inv_diag, xp, ops, eig_steps)
    T, B_c = fit_candidates(aggregates, B.reshape(-1, 1))  # T (n, n_c): one entry a row
    T_x = device_matrix(scipy.sparse.csr_matrix(T), xp)
    n = inv_diag.shape[0]
    # omega / lam D^-1, (n, n): diagonals and offsets as lists, the form both libraries document
    jacobi = sparse_module(xp).diags([inv_diag * (omega / lam)], [0], shape=(n, n), format="csr")
    P = (T_x - jacobi @ (A_x @ T_x)).tocsr()  # (n, n_c)
    return AMGLevel(A_x, inv_diag, lam, P, P.T.tocsr()), B_c


def smoothed_aggregation(
    A_host: Any,
    xp: Any = np,
    ops: VectorOps | None = None,
    *,
    max_coarse: int = 500,
    max_levels: int = 10,
    eig_steps: int = 10,
    omega: float = 4.0 / 3.0,
) -> tuple[list[AMGLevel], Any]:
    """The levels of a smoothed-aggregation hierarchy of ``A_host`` (SPD, host sparse).

    pyamg's smoothed aggregation with its defaults (standard aggregation of the
    symmetric strength-of-connection graph with ``theta = 0``, the constant
    candidate improved by four symmetric Gauss-Seidel sweeps on the first level),
    but the tentative prolongator ``T`` is smoothed
    as ``P = (I - omega / lambda_max D^-1 A) T`` with each level's Lanczos estimate
    of ``lambda_max`` (:func:`estimate_max_eigenvalue`, run where the cycle runs, but on
    the host for levels of fewer than :data:`HOST_ESTIMATE_ROWS` rows on a GPU), the
    same estimate its Chebyshev smoother then uses.  A bound from local row
    sums instead (pyamg's ``weighting="local"``) overestimates ``lambda_max`` by a
    third on a trilinear Laplacian, so ``P`` is under-smoothed, and the cycle's
    contraction then degrades with the number of levels; pyamg's own estimate
    (``weighting="diagonal"``) is Arnoldi on the host from a random vector.

    With ``theta = 0`` the symmetric strength keeps every stored entry and standard
    aggregation reads the graph only, so each level's own sparsity pattern is
    aggregated, without building the strength matrix.  The aggregation, the
    candidate and ``T`` are made on the host (pyamg); the products ``A T``, ``P``,
    ``R = P^T`` and the Galerkin ``R A P`` with ``xp``'s sparse matrices
    (cuSPARSE with CuPy), and only each coarse matrix comes back to the host, for
    the next aggregation and diagonal (exact zeros dropped and each row's columns
    sorted, so that SciPy's and cuSPARSE's products give the same aggregates).

    Parameters
    ----------
    A_host : scipy.sparse matrix (n, n)
    xp : module
        Where the levels' matrices go, their products and the estimates run
        (NumPy or CuPy).
    ops : hofem.vector_ops.VectorOps, optional
        Inner products of the estimates; default ``VectorOps(xp)``.
    max_coarse : int
        Coarsen until at most this many rows.
    max_levels : int
    eig_steps : int
        Lanczos steps of each level's estimate.
    omega : float
        Jacobi weight of the prolongation smoothing, over ``lambda_max``.

    Returns
    -------
    levels : list of AMGLevel
        Fine to coarse, all but the coarsest.
    coarsest : scipy.sparse.csr_matrix (n_c, n_c)
    """
    import_pyamg()
    import scipy.sparse
    from pyamg.aggregation import standard_aggregation
    from pyamg.relaxation.relaxation import gauss_seidel

    ops = VectorOps(xp) if ops is None else ops
    A = scipy.sparse.csr_matrix(A_host)  # host: the aggregation's graph and the diagonal
    A_x = device_matrix(A, xp)  # (n, n) where the products run
    B = np.ones(A.shape[0])  # (n,) near-null-space candidate
    levels = []
    while A.shape[0] > max_coarse and len(levels) < max_levels - 1:
        if not levels:  # pyamg's improve_candidates: B relaxed on A B = 0
            gauss_seidel(A, B, np.zeros_like(B), iterations=4, sweep="symmetric")
        aggregates = standard_aggregation(A)[0]  # (n, n_c)
        if not 0 < aggregates.shape[1] < A.shape[0]:  # nothing left to coarsen
            break
        level, B = _smoothed_level(A_x, A, aggregates, B, xp, ops, eig_steps, omega)
        levels.append(level)
        A_x = level.R @ A_x @ level.P  # (n_c, n_c)
        A = _host_coarse_matrix(A_x, xp)
    return levels, A


def amg_solver(
    A_host: Any, xp: Any, cycles: int = 1, ops: VectorOps | None = None, max_coarse: int = 500
) -> AMGCycle:
    """:class:`AMGCycle` of the smoothed-aggregation hierarchy of ``A_host`` (host sparse),
    :func:`smoothed_aggregation`."""
    levels, coarsest = smoothed_aggregation(A_host, xp, ops, max_coarse=max_coarse)
    return AMGCycle(levels, coarsest, xp, cycles, ops=ops)


class RestrictedTransfer:
    """A transfer between the free DOFs of two levels: ``T[free_out][:, free_in]``.

    On a serial :class:`~hofem.transfer.Transfer` the multiplicity scaling rides
    on the scatter (restriction) or on the gather (prolongation): one pass each
    side of the matrix-free operator (:meth:`~hofem.vector_ops.VectorOps.scatter_scaled`,
    :meth:`~hofem.vector_ops.VectorOps.gather_scaled`).

    Its two whole-vector buffers and the free entries' weights are made at the
    first application: a :class:`WholeVectorCycle` applies ``transfer`` itself, and
    then these are never needed.

    Parameters
    ----------
    transfer : hofem.transfer.Transfer or a distributed transfer
    free_out, free_in : int arrays of the backend
        Sorted free L-vector indices of the output and input levels.
    """

    def __init__(self, transfer, free_out, free_in):
        self.ceed, self.transfer = transfer.ceed, transfer
        self.free_out, self.free_in = free_out, free_in
        self.ops = self.ceed.backend.vector_ops()  # rank-local: scatter and gather only
        self.shape = (free_out.size, free_in.size)
        self._apply = transfer.op.apply if isinstance(transfer, Transfer) else transfer.apply
        self._buffers = None  # (in, out, scale_in, scale_out), see _run

    def _make_buffers(self):
        """Whole input (zero on the constrained entries) and output vectors, and a serial
        transfer's weight on the free entries (``None`` where the transfer scales itself)."""
        xp, transfer = self.ceed.xp, self.transfer
        scale_in = scale_out = None
        if isinstance(transfer, Transfer):  # its weight here, on the free entries only
            if transfer.transpose:
                scale_in = transfer.weight[self.free_in]  # (n_in,)
            else:
                scale_out = transfer.weight[self.free_out]  # (n_out,)
        # (in l_size,): constrained entries stay 0; (out l_size,)
        return xp.zeros(transfer.shape[1]), xp.empty(transfer.shape[0]), scale_in, scale_out

    def apply(self, u: Array, v: Array) -> None:
        """``v = T[free_out][:, free_in] u``."""
        self._run(u, v, add=False)

    def apply_add(self, u: Array, v: Array) -> None:
        """``v += T[free_out][:, free_in] u``."""
        self._run(u, v, add=True)

    def _run(self, u, v, add):
        if self._buffers is None:
            self._buffers = self._make_buffers()
        whole_in, whole_out, scale_in, scale_out = self._buffers
        self.ops.scatter_scaled(u, self.free_in, scale_in, whole_in)
        self._apply(whole_in, whole_out)
        self.ops.gather_scaled(whole_out, self.free_out, scale_out, v, add)


class WholeVectorCycle:
    """The V-cycle of a serial :func:`hofem.restrict_dofs` hierarchy on whole L-vectors.

    Each level smooths on its wrapped operator's L-vectors with ``D^-1`` zero on
    the constrained entries, so the iterate and the Chebyshev directions stay
    zero there; whatever the residual holds there never reaches a free entry,
    because the transfers join the free DOFs of one level to the free DOFs of the
    other only (``Hierarchy.free_to_free``: :func:`hofem.forms.multigrid_hierarchy`
    makes them so, and the interpolation matrices hold exact zeros,
    :func:`hofem.transfer.interpolation_basis`).
    The free entries follow the cycle on the free DOFs, while each application
    skips ``restrict_dofs``' scatter, fill and gather.  Make it with :meth:`of`.
    """

    def __init__(
        self, hierarchy: Hierarchy, smoothers: list[Chebyshev], coarse: Callable[[Array], Array]
    ) -> None:
        ops = hierarchy.operators
        self.ceed, self.coarse = ops[0].ceed, coarse
        xp, self.ops = self.ceed.xp, smoothers[0].ops
        self.free = [op.free_dofs for op in ops]
        full = [op.op.shape[0] for op in ops]  # whole L-vector sizes
        self.smoothers = []
        for op, s, n in zip(ops, smoothers, full, strict=False):
            inv_diag = xp.zeros(n)  # (l_size,): zero on the constrained entries
            inv_diag[op.free_dofs] = s.inv_diag
            self.smoothers.append(
                Chebyshev(op.op.apply, inv_diag, s.lambda_max, s.degree, s.bounds, s.ops)
            )
        self.restrict = [R.transfer for R in hierarchy.restrict]
        self.prolong = [P.transfer for P in hierarchy.prolong]
        # zeros where nothing writes: the constrained entries of the fine right-hand side and
        # of the coarsest correction
        self._b = [xp.zeros(n) for n in full]
        self._x = [xp.empty(n) for n in full[:-1]] + [xp.zeros(full[-1])]
        self._e = [xp.empty(n) for n in full[:-1]]
        self._b_free = xp.empty(ops[-1].shape[0])  # (coarsest n_free,)

    @classmethod
    def of(
        cls, hierarchy: Hierarchy, smoothers: list[Chebyshev], coarse: Callable[[Array], Array]
    ) -> WholeVectorCycle | None:
        """The cycle of ``hierarchy``, or None unless it is ``free_to_free``, every level
        is ``restrict_dofs`` of a serial :class:`~hofem.operator.Operator` and every
        transfer a serial one."""
        transfers = hierarchy.prolong + hierarchy.restrict
        if (
            not hierarchy.free_to_free
            or not smoothers
            or not all(isinstance(op, SubOperator) for op in hierarchy.operators)
            or not all(isinstance(op.op, Operator) for op in hierarchy.operators)
            or not all(isinstance(T, RestrictedTransfer) for T in transfers)
            or not all(isinstance(T.transfer, Transfer) for T in transfers)
        ):
            return None
        return cls(hierarchy, smoothers, coarse)

    def __call__(self, r: Array) -> Array:
        """``z = M r`` on the free DOFs, a new array."""
        ops = self.ops
        ops.scatter_scaled(r, self.free[0], None, self._b[0])
        x = self._cycle(0)
        z = self.ceed.xp.empty_like(r)
        ops.gather_scaled(x, self.free[0], None, z)
        return z

    def _cycle(self, level):
        b = self._b[level]
        if level == len(self.smoothers):
            self.ops.gather_scaled(b, self.free[level], None, self._b_free)
            x = self._x[level]
            self.ops.scatter_scaled(self.coarse(self._b_free), self.free[level], None, x)
            return x
        smoother = self.smoothers[level]
        x, r = smoother.smooth(b, out=self._x[level])
        self.restrict[level].apply(r, self._b[level + 1])
        e = self._e[level]
        self.prolong[level].apply(self._cycle(level + 1), e)
        x += e
        smoother.smooth(b, x)
        return x


class PMG:
    """The p-multigrid V-cycle preconditioner; make it with :func:`pmg`.

    Attributes
    ----------
    hierarchy : Hierarchy
    smoothers : list of Chebyshev
        One per level but the coarsest.
    coarse : callable
        The coarsest level's solve.
    shape : (int, int)
    setup_seconds : float
        Wall time of the set-up (levels, diagonals, eigenvalue estimates, AMG);
        ``hierarchy.info["setup_seconds"]`` splits it into those four.
    """

    def __init__(
        self,
        hierarchy: Hierarchy,
        smoothers: list[Chebyshev],
        coarse: Callable[[Array], Array],
        setup_seconds: float,
    ) -> None:
        self.hierarchy, self.smoothers, self.coarse = hierarchy, smoothers, coarse
        self.shape = hierarchy.operators[0].shape
        self.ceed = hierarchy.operators[0].ceed
        self.setup_seconds = setup_seconds
        xp = self.ceed.xp
        # per level below the finest: its right-hand side (the restricted residual) and
        # iterate; per level above the coarsest: the prolonged correction (non-fused transfers)
        self._b = [None] + [xp.empty(op.shape[0]) for op in hierarchy.operators[1:]]
        self._x = [None] + [xp.empty(op.shape[0]) for op in hierarchy.operators[1:-1]]
        self._e = [
            None if isinstance(P, RestrictedTransfer) else xp.empty(P.shape[0])
            for P in hierarchy.prolong
        ]
        self._whole = WholeVectorCycle.of(hierarchy, smoothers, coarse)

    def __call__(self, r: Array) -> Array:
        """``z = M r`` (one V-cycle from zero), a new array."""
        if self._whole is not None:
            return self._whole(r)
        return self._cycle(0, r)

    matvec = __call__

    def _cycle(self, level, b):
        if level == len(self.smoothers):
            return self.coarse(b)
        restrict, prolong = self.hierarchy.restrict[level], self.hierarchy.prolong[level]
        smoother = self.smoothers[level]
        x, r = smoother.smooth(b, out=self._x[level])
        b_c = self._b[level + 1]
        restrict.apply(r, b_c)
        x_c = self._cycle(level + 1, b_c)
        if self._e[level] is None:
            prolong.apply_add(x_c, x)
        else:
            prolong.apply(x_c, self._e[level])
            x += self._e[level]
        smoother.smooth(b, x)
        return x

    def as_linear_operator(self) -> LinearOperator:
        """A SciPy (CPU) or CuPy (GPU) ``LinearOperator`` applying the V-cycle."""
        return self.ceed.backend.linear_operator(self.shape, self)

    def __repr__(self):
        sizes = [op.shape[0] for op in self.hierarchy.operators]
        return f"PMG(orders={self.hierarchy.orders}, sizes={sizes})"


def _whole_vectors(op, inv_diag):
    """``(apply, inv_diag)`` of ``op`` on its wrapped operator's L-vectors, ``D^-1`` zero on
    the constrained entries, for a serial ``restrict_dofs`` level (else as given).

    The Jacobi-preconditioned Lanczos steps then keep zero there, and their inner
    products are those on the free DOFs, without a scatter and gather per step.
    """
    if not isinstance(op, SubOperator) or not isinstance(op.op, Operator):
        return op.apply, inv_diag
    whole = op.ceed.xp.zeros(op.op.shape[0])  # (l_size,)
    whole[op.free_dofs] = inv_diag
    return op.op.apply, whole


def _check_options(degree, bounds, eig_steps, coarse_cycles):
    for name, value in (
        ("degree", degree),
        ("eig_steps", eig_steps),
        ("coarse_cycles", coarse_cycles),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    lo, hi = bounds
    if not 0 < lo < hi:
        raise ValueError(f"bounds must be (lower, upper) with 0 < lower < upper, got {bounds!r}")


def pmg(
    A: Any,
    orders: Sequence[int] | None = None,
    *,
    degree: int = 2,
    bounds: tuple = (0.1, 1.1),
    eig_steps: int = 10,
    coarse_cycles: int = 1,
) -> PMG:
    """p-multigrid preconditioner for ``A``: ``M=`` of :func:`hofem.cg`, SciPy's and CuPy's ``cg``.

    One V-cycle per application: on each level of order ``p`` (the schedule
    ``orders``), Chebyshev smoothing of degree ``degree`` on the Jacobi-scaled
    operator, the residual restricted to the next order; on order 1 an
    algebraic multigrid V-cycle (pyamg's smoothed aggregation, built on the
    host; its cycle runs on the backend's arrays).  Symmetric positive definite.

    Parameters
    ----------
    A : operator
        :func:`hofem.mass` or :func:`hofem.diffusion` of an H1 space,
        :func:`hofem.restrict_dofs` of one, or their :mod:`hofem.parallel` versions.
    orders : sequence of int, optional
        From the space's order down to 1, strictly decreasing; default halving
        (8, 4, 2, 1; 6, 3, 1).
    degree : int, default 2
        Chebyshev degree (operator applications per smoothing step).
    bounds : (float, float), default (0.1, 1.1)
        Chebyshev interval as fractions of the estimated largest eigenvalue of ``D^-1 A``.
    eig_steps : int, default 10
        CG (Lanczos) steps of the eigenvalue estimate, per level.
    coarse_cycles : int, default 1
        AMG V-cycles per coarse solve.

    Returns
    -------
    PMG
        Callable ``z = M(r)``; ``as_linear_operator()``; ``setup_seconds``.

    Raises
    ------
    ImportError
        pyamg is missing (``pip install 'hofem[amg]'``).
    ValueError
        An operator of no registered hierarchy (not made by ``hofem.mass`` /
        ``hofem.diffusion``), a bad order schedule or option.
    """
    start = time.perf_counter()
    import_pyamg()
    _check_options(degree, bounds, eig_steps, coarse_cycles)
    inner = A.op if isinstance(A, SubOperator) else A  # restrict_dofs: the wrapped operator's
    builder = next((b for cls, b in _HIERARCHIES if isinstance(inner, cls)), None)
    if builder is None:
        raise ValueError(
            f"pmg needs an operator made by hofem.mass or hofem.diffusion (or restrict_dofs of "
            f"one, or their hofem.parallel versions), got {type(A).__name__}"
        )
    hierarchy = builder(A, orders)
    seconds = {"levels": time.perf_counter() - start}
    mark = time.perf_counter()
    smoothed = hierarchy.operators[:-1]  # each level but the coarsest, and its assembly
    vector_ops = [op.vector_ops() for op in smoothed]
    assembly = (hierarchy.assembly or hierarchy.operators)[:-1]
    inv_diags = [1.0 / twin.linear_assemble_diagonal() for twin in assembly]
    seconds["diagonals"] = time.perf_counter() - mark
    mark = time.perf_counter()
    build_coarse = hierarchy.coarse_solver()  # the order-1 matrix, before the queued steps
    seconds["coarse"] = time.perf_counter() - mark
    mark = time.perf_counter()
    estimates = [
        start_max_eigenvalue(*_whole_vectors(op, d), ops, eig_steps)
        for op, d, ops in zip(smoothed, inv_diags, vector_ops, strict=True)
    ]
    seconds["eigenvalues"] = time.perf_counter() - mark
    mark = time.perf_counter()
    local_ops = hierarchy.operators[0].ceed.backend.vector_ops()

    def make(A_host, xp):  # xp: where the cycle runs (a distributed hierarchy's rank 0)
        return amg_solver(A_host, xp, coarse_cycles, local_ops if local_ops.xp is xp else None)

    # the AMG set-up's host work (aggregation, candidate) runs while a GPU does the steps
    coarse = build_coarse(make)
    # the set-up's parts: the level assemblies (element diagonals and matrices), which
    # the coarse solver's builder reaches too
    hierarchy.assembly = hierarchy.coarse_solver = None
    seconds["coarse"] += time.perf_counter() - mark  # order-1 matrix and AMG hierarchy
    mark = time.perf_counter()
    smoothers = [
        Chebyshev(op.apply, d, lam(), degree, bounds, ops)
        for op, d, lam, ops in zip(smoothed, inv_diags, estimates, vector_ops, strict=True)
    ]
    seconds["eigenvalues"] += time.perf_counter() - mark  # what the host waited for them
    hierarchy.info["setup_seconds"] = seconds
    return PMG(hierarchy, smoothers, coarse, time.perf_counter() - start)
