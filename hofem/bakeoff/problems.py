"""The CEED bake-off problems BP1..BP6: definitions, set-up and a verified CG solve.

See ``../shared/BAKEOFF.md``. All problems live on the unit box (or a mesh
file), with continuous order-p Lagrange elements on Gauss-Lobatto nodes.
"""

import math
import time
from dataclasses import dataclass

import numpy as np

import hofem as hf

__all__ = ["BP", "PROBLEMS", "BakeoffProblem", "setup", "solve"]


@dataclass(frozen=True)
class BP:
    """One bake-off problem: operator, components, quadrature, boundary condition."""

    name: str
    form: str  # "mass" or "diffusion"
    num_comp: int
    q_extra: int  # Q_1d = p + 1 + q_extra
    quad_mode: object
    dirichlet: bool


PROBLEMS = {
    "bp1": BP("bp1", "mass", 1, 1, hf.GAUSS, False),
    "bp2": BP("bp2", "mass", 3, 1, hf.GAUSS, False),
    "bp3": BP("bp3", "diffusion", 1, 1, hf.GAUSS, True),
    "bp4": BP("bp4", "diffusion", 3, 1, hf.GAUSS, True),
    "bp5": BP("bp5", "diffusion", 1, 0, hf.GAUSS_LOBATTO, True),
    "bp6": BP("bp6", "diffusion", 3, 0, hf.GAUSS_LOBATTO, True),
}


def exact_solution(x):
    """Manufactured solution ``(n, 3)`` points -> ``(n,)``: zero on the unit box's boundary."""
    return np.prod(np.sin(np.pi * x), axis=1)


def _rhs_function(bp, dim):
    """Right-hand side f of the strong problem, and the exact solution, for ``num_comp``."""
    if bp.form == "mass":  # M u = b with b = (u, v): any smooth u

        def exact(x):
            return np.exp(x[:, 0]) * np.cos(x[:, 1:].sum(axis=1)) + x[:, 0] * x[:, -1]

        f = exact
    else:  # -laplace u = dim pi^2 u
        exact = exact_solution

        def f(x):
            return dim * np.pi**2 * exact_solution(x)

    if bp.num_comp == 1:
        return f, exact
    scale = np.arange(1.0, bp.num_comp + 1)  # component c: (c + 1) * u

    def vector(g):
        return lambda x: g(x)[:, None] * scale[None, :]

    return vector(f), vector(exact)


@dataclass
class BakeoffProblem:
    """A set-up bake-off problem: the operator on free DOFs, right-hand side, exact solution."""

    bp: BP
    space: object
    operator: object  # Operator, or SubOperator on the free DOFs
    rhs: object  # backend array (operator size,)
    exact: object  # callable
    free: object  # host int array or None (no Dirichlet DOFs)
    setup_seconds: float


def setup(bp_name, ceed, order, mesh):
    """Build a bake-off problem on ``mesh``.

    Parameters
    ----------
    bp_name : str
        "bp1" .. "bp6".
    ceed : hofem.Ceed
    order : int
    mesh : hofem.meshes.Mesh
        Dirichlet problems constrain the whole tagged boundary.
    """
    if bp_name not in PROBLEMS:
        raise ValueError(f"unknown problem {bp_name!r}; choose from {', '.join(PROBLEMS)}")
    bp = PROBLEMS[bp_name]
    start = time.perf_counter()
    space = hf.H1Space(ceed, mesh, order, num_comp=bp.num_comp)
    form = hf.mass if bp.form == "mass" else hf.diffusion
    op = form(space, q_extra=bp.q_extra, quad_mode=bp.quad_mode)
    f, exact = _rhs_function(bp, mesh.dim)
    rhs = space.load_vector(f, q_extra=1)
    free = None
    if bp.dirichlet:
        free = space.free_dofs()
        op = hf.restrict_dofs(op, free)
        rhs = rhs[ceed.asarray(free)]
    return BakeoffProblem(bp, space, op, rhs, exact, free, time.perf_counter() - start)


def solve(problem, rtol=1e-8, maxiter=None, preconditioner=None):
    """Solve with CG and verify against the exact solution.

    Parameters
    ----------
    preconditioner : None or "jacobi"

    Returns
    -------
    dict
        bp, p, q, elements, dofs, iterations, solve seconds, DOFs x iterations / s,
        relative residual, L2 error, converged, setup seconds, warm-up seconds
        (the first apply, which includes any JIT compilation; not in the solve time).
    """
    op, space, ceed = problem.operator, problem.space, problem.space.ceed
    comm = getattr(space, "comm", None)  # distributed spaces: time all ranks together

    def synchronize():
        ceed.backend.synchronize()
        if comm is not None:
            comm.Barrier()

    M = hf.jacobi(op) if preconditioner == "jacobi" else None
    synchronize()
    start = time.perf_counter()
    op(problem.rhs)  # warm-up: JIT compilation and caches stay out of the solve time
    synchronize()
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    x, info = hf.cg(op, problem.rhs, rtol=rtol, maxiter=maxiter, M=M)
    synchronize()
    seconds = time.perf_counter() - start
    norm = op.vector_ops().norm  # global norms on distributed operators
    residual = norm(problem.rhs - op(x)) / norm(problem.rhs)
    if problem.free is not None:
        full = ceed.xp.zeros(space.vector_size)
        full[ceed.asarray(problem.free)] = x
    else:
        full = x
    l2 = space.errors(full, problem.exact)
    q_1d = space.order + 1 + problem.bp.q_extra
    return {
        "bp": problem.bp.name,
        "p": space.order,
        "q": q_1d,
        "cell": space.cell_type,
        "elements": space.num_elem,
        "dofs": space.num_dofs,
        "backend": ceed.resource,
        "iterations": info.iterations,
        "converged": info == 0,
        "solve_s": seconds,
        "dofs_x_iter_per_s": space.num_dofs * info.iterations / seconds if seconds else math.nan,
        "rel_residual": residual,
        "l2_error": l2,
        "setup_s": problem.setup_seconds,
        "warmup_s": warmup,
        "ranks": 1 if comm is None else comm.size,
    }
