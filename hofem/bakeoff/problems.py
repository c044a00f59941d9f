"""The CEED bake-off problems BP1..BP6: definitions, set-up and a verified CG solve.

See ``../shared/BAKEOFF.md``. All problems live on the unit box (or a mesh
file), with continuous order-p Lagrange elements on Gauss-Lobatto nodes.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

import hofem as hf
from hofem.memory import memory_report, peak_rss_bytes
from hofem.typing import Array, IndexArray

if TYPE_CHECKING:
    from hofem.meshes import Mesh
    from hofem.operator import Operator, SubOperator
    from hofem.parallel import ParH1Space, ParOperator

__all__ = [
    "BP",
    "DEFAULT_RTOL",
    "PROBLEMS",
    "BakeoffProblem",
    "assemble",
    "median_seconds",
    "resolve_geometry",
    "setup",
    "solve",
    "solve_footprint",
    "time_apply",
]


# CG relative residual tolerance at which the L2 error is the discretization error, or
# its rounding floor (about 1e-13), for p = 1..8: 1e-8 stops BP1 above it from p = 4 on,
# 1e-12 from p = 7 on (docs/bakeoff.md, "Tolerance").
DEFAULT_RTOL = 1e-14
CELL_NAMES = {"hexahedron": "hex", "tetra": "tet", "quad": "quad", "triangle": "tri"}


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


def _product(columns):
    """Entrywise product of a list of ``(n,)`` arrays (a loop: ``prod(axis=1)`` over a
    short axis is several times slower)."""
    out = columns[0].copy()
    for c in columns[1:]:
        out *= c
    return out


def exact_solution(x: Array) -> Array:
    """Manufactured solution ``(n, dim)`` points -> ``(n,)``: zero on the unit box's boundary.

    ``u = prod_i sin(pi x_i) (1 + prod_i x_i)``: the factor ``1 + prod x_i`` keeps the
    right-hand side off the discrete operator's eigenvectors (for ``prod sin`` alone,
    CG on a uniform p = 1 mesh converges in a handful of iterations).
    """
    xs = [x[:, i].copy() for i in range(x.shape[1])]  # (n,) each, contiguous
    return _product([np.sin(np.pi * c) for c in xs]) * (1 + _product(xs))


def _minus_laplacian_exact(x):
    """``-laplace u`` of :func:`exact_solution`, ``(n, dim)`` -> ``(n,)``.

    With ``s = prod sin(pi x_i)`` and the harmonic ``g = 1 + prod x_i``:
    ``-laplace(s g) = dim pi^2 s g - 2 grad s . grad g``.
    """
    dim = x.shape[1]
    xs = [x[:, i].copy() for i in range(dim)]  # (n,) each, contiguous
    sines = [np.sin(np.pi * c) for c in xs]
    f = dim * np.pi**2 * _product(sines) * (1 + _product(xs))
    for i in range(dim):
        others = [j for j in range(dim) if j != i]
        term = np.pi * np.cos(np.pi * xs[i])  # d s / d x_i, times d g / d x_i below
        if others:  # (1D: d g / d x = 1)
            term *= _product([sines[j] for j in others])
            term *= _product([xs[j] for j in others])
        f -= 2 * term
    return f


def _rhs_function(bp):
    """Right-hand side f of the strong problem, and the exact solution, for ``num_comp``."""
    if bp.form == "mass":  # M u = b with b = (u, v): any smooth u

        def exact(x):
            return np.exp(x[:, 0]) * np.cos(x[:, 1:].sum(axis=1)) + x[:, 0] * x[:, -1]

        f = exact
    else:  # -laplace u = f
        exact, f = exact_solution, _minus_laplacian_exact

    if bp.num_comp == 1:
        return f, exact

    def vector(g):
        def g_vector(x):  # component c: (c + 1) g; np.stack dispatches to CuPy arrays too
            gx = g(x)  # (n,)
            return np.stack([(c + 1.0) * gx for c in range(bp.num_comp)], axis=1)

        return g_vector

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
    geometry: str = "stored"  # what the operator runs: "stored" or "on_the_fly"


def setup(
    bp_name: str, ceed: hf.Ceed, order: int, mesh: Mesh, geometry: str = "auto"
) -> BakeoffProblem:
    """Build a bake-off problem on ``mesh``.

    Parameters
    ----------
    bp_name : str
        "bp1" .. "bp6".
    ceed : hofem.Ceed
    order : int
    mesh : hofem.meshes.Mesh
        Dirichlet problems constrain the whole tagged boundary.
    geometry : {"auto", "stored", "on_the_fly"}
        As for :func:`hofem.mass`.
    """
    if bp_name not in PROBLEMS:
        raise ValueError(f"unknown problem {bp_name!r}; choose from {', '.join(PROBLEMS)}")
    bp = PROBLEMS[bp_name]
    start = time.perf_counter()
    space = hf.H1Space(ceed, mesh, order, num_comp=bp.num_comp)
    op, rhs, exact, free = assemble(bp, space, hf.mass, hf.diffusion, geometry)
    ceed.backend.release_cached_memory()  # set-up temporaries' pool blocks
    seconds = time.perf_counter() - start
    used = resolve_geometry(bp, space, geometry)
    return BakeoffProblem(bp, space, op, rhs, exact, free, seconds, used)


def resolve_geometry(bp: BP, space: hf.H1Space | ParH1Space, geometry: str) -> str:
    """``"stored"`` or ``"on_the_fly"``: what ``geometry`` becomes for ``bp`` on ``space``.

    ``space`` is an :class:`hofem.H1Space` or a distributed space (its rank's
    ``local`` space decides).
    """
    local = getattr(space, "local", space)
    return hf.resolve_geometry(local, bp.form, None, bp.q_extra, bp.quad_mode, geometry)


def assemble(
    bp: BP,
    space: hf.H1Space | ParH1Space,
    mass: Callable[..., Operator | ParOperator],
    diffusion: Callable[..., Operator | ParOperator],
    geometry: str = "auto",
) -> tuple[
    Operator | SubOperator | ParOperator, Array, Callable[[Array], Array], IndexArray | None
]:
    """The operator, right-hand side, exact solution and free DOFs of ``bp`` on ``space``.

    Parameters
    ----------
    bp : BP
    space : hofem.H1Space or hofem.parallel.ParH1Space
    mass, diffusion : callable
        The forms for that space (``hofem.mass`` / ``hofem.diffusion``, or the
        distributed ones of :mod:`hofem.parallel`).
    geometry : {"auto", "stored", "on_the_fly"}
        As for :func:`hofem.mass`.

    Returns
    -------
    op : operator on the free DOFs (all DOFs without Dirichlet conditions)
    rhs : array of the backend
    exact : callable
    free : ndarray of int or None
    """
    form = mass if bp.form == "mass" else diffusion
    op = form(space, q_extra=bp.q_extra, quad_mode=bp.quad_mode, geometry=geometry)
    f, exact = _rhs_function(bp)
    rhs = space.load_vector(f, q_extra=1)
    free = None
    if bp.dirichlet:
        free = space.free_dofs()
        op = hf.restrict_dofs(op, free)
        rhs = rhs[space.ceed.asarray(free)]
    return op, rhs, exact, free


class CompileWatch:
    """Context manager: did the code inside compile any kernel?

    ``compiled`` is True after the block when Numba compiled a function in it (its
    ``numba:compile`` event fires on a real compilation only, not when a kernel
    comes from its disk cache) or CuPy wrote a new kernel into its compile cache
    (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``: a kernel found there or in memory is
    not compiled again). Only libraries already imported are watched: one that
    is imported later has compiled nothing before.
    """

    def __init__(self):
        self.compiled = False
        self._stack = contextlib.ExitStack()
        self._recorder = self._cupy_dir = self._cupy_files = None

    def __enter__(self):
        if "numba" in sys.modules:
            from numba.core import event

            self._recorder = self._stack.enter_context(event.install_recorder("numba:compile"))
        if "cupy" in sys.modules:
            default = os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")
            self._cupy_dir = os.environ.get("CUPY_CACHE_DIR", default)
            self._cupy_files = _files(self._cupy_dir)
        return self

    def __exit__(self, *exc_info):
        self._stack.close()
        numba_compiled = self._recorder is not None and len(self._recorder.buffer) > 0
        cupy_compiled = self._cupy_dir is not None and bool(
            _files(self._cupy_dir) - self._cupy_files
        )
        self.compiled = numba_compiled or cupy_compiled
        return False


def _files(directory):
    """Names of the files in ``directory`` (empty if it does not exist)."""
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def make_preconditioner(
    name: str | None, op: Operator | SubOperator | ParOperator
) -> hf.Jacobi | hf.PMG | None:
    """The preconditioner ``name`` (None, "jacobi" or "pmg") of ``op``, or None."""
    return {None: lambda A: None, "jacobi": hf.jacobi, "pmg": hf.pmg}[name](op)


def accuracy(problem: BakeoffProblem, x: Array) -> tuple[float, float]:
    """The relative residual of ``x`` and its L2 error against the exact solution."""
    op, space = problem.operator, problem.space
    norm = op.vector_ops().norm  # global norms on distributed operators
    residual = norm(problem.rhs - op(x)) / norm(problem.rhs)
    if problem.free is not None:
        full = space.ceed.xp.zeros(space.vector_size)
        full[space.ceed.asarray(problem.free)] = x
    else:
        full = x
    return residual, space.errors(full, problem.exact)


def solve(
    problem: BakeoffProblem,
    rtol: float = DEFAULT_RTOL,
    maxiter: int | None = None,
    preconditioner: str | None = None,
    variant: str = "standard",
) -> dict[str, Any]:
    """Solve with CG and verify against the exact solution.

    A warm-up before the timed solve runs everything the solve runs (the
    operator, CG's vector kernels and the preconditioner, for two iterations):
    JIT compilation and caches fill there, and its seconds are reported on
    their own (``compile_s``), not in ``solve_s``.

    Parameters
    ----------
    problem : BakeoffProblem
    rtol : float
        CG relative residual tolerance; the default :data:`DEFAULT_RTOL`
        reaches the discretization error for p = 1..8.
    maxiter : int, optional
        CG iteration limit (default ``10 * size``).
    preconditioner : None, "jacobi" or "pmg"
        Its set-up (:func:`hofem.jacobi`, :func:`hofem.pmg`) is timed on its
        own (``precond_setup_s``; on a first run it includes the JIT
        compilation of the coarse levels); ``time_to_solution_s`` is set-up plus solve.
    variant : str
        :func:`hofem.cg`'s ``variant`` (standard, single_reduction, pipelined).

    Returns
    -------
    dict
        bp, p, q, cell, elements, dofs, backend, geometry_used, ranks (1 when serial),
        rtol, preconditioner, cg_variant, iterations, converged, setup_s,
        precond_setup_s, time_to_solution_s (precond_setup_s + solve_s), compile_s (the
        warm-up), kernels_compiled (:class:`CompileWatch`), solve_s, dofs_x_iter_per_s
        (of the solve alone), rel_residual, l2_error, host_peak_bytes (peak resident
        memory before the error computation), footprint_bytes (:func:`solve_footprint`);
        on several ranks the largest rank's bytes.

    Raises
    ------
    ValueError
        Unknown ``preconditioner``.
    """
    if preconditioner not in (None, "jacobi", "pmg"):
        raise ValueError(f"preconditioner must be None, 'jacobi' or 'pmg', got {preconditioner!r}")
    op, space, ceed = problem.operator, problem.space, problem.space.ceed
    comm = getattr(space, "comm", None)  # distributed spaces: time all ranks together

    def synchronize():
        ceed.backend.synchronize()
        if comm is not None:
            comm.Barrier()

    synchronize()
    start = time.perf_counter()
    M = make_preconditioner(preconditioner, op)
    synchronize()
    precond_setup_s = time.perf_counter() - start
    start = time.perf_counter()
    with CompileWatch() as watch:
        # warm-up: compiles all the solve runs
        hf.cg(op, problem.rhs, rtol=0.0, maxiter=2, M=M, variant=variant)
        synchronize()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    x, info = hf.cg(op, problem.rhs, rtol=rtol, maxiter=maxiter, M=M, variant=variant)
    synchronize()
    seconds = time.perf_counter() - start
    footprint = solve_footprint(problem, x, M, variant)["bytes"]
    host_peak = peak_rss_bytes()
    if comm is not None:
        per_rank = comm.allgather((footprint, host_peak))
        footprint, host_peak = (max(v) for v in zip(*per_rank, strict=True))
    residual, l2 = accuracy(problem, x)
    q_1d = space.order + 1 + problem.bp.q_extra
    return {
        "bp": problem.bp.name,
        "p": space.order,
        "q": q_1d,
        "cell": CELL_NAMES.get(space.cell_type, space.cell_type),
        "elements": space.num_elem,
        "dofs": space.num_dofs,
        "backend": ceed.resource,
        "geometry_used": problem.geometry,
        "ranks": 1 if comm is None else comm.size,
        "rtol": rtol,
        "preconditioner": preconditioner,
        "cg_variant": variant,
        "iterations": info.iterations,
        "converged": info == 0,
        "setup_s": problem.setup_seconds,
        "compile_s": compile_s,
        "kernels_compiled": watch.compiled,
        "solve_s": seconds,
        "precond_setup_s": precond_setup_s,
        "time_to_solution_s": precond_setup_s + seconds,
        "dofs_x_iter_per_s": space.num_dofs * info.iterations / seconds if seconds else math.nan,
        "rel_residual": residual,
        "l2_error": l2,
        "host_peak_bytes": host_peak,
        "footprint_bytes": footprint,
    }


# work vectors hf.cg allocates, (unpreconditioned, preconditioned), by variant: standard
# r, p, Ap (+ z); Chronopoulos-Gear r, p, s, w (+ u); Ghysels-Vanroose r, w, n, p, s, z
# (+ u, m, q)
CG_WORK_VECTORS = {"standard": (3, 4), "single_reduction": (4, 5), "pipelined": (6, 9)}


def solve_footprint(
    problem: BakeoffProblem,
    x: Array,
    M: hf.Jacobi | hf.PMG | None = None,
    variant: str = "standard",
) -> dict[str, Any]:
    """Bytes a CG solve of ``problem`` holds: its arrays plus CG's work vectors.

    The arrays reachable from the operator, space, right-hand side, free DOFs,
    solution ``x`` and preconditioner ``M`` (:func:`hofem.memory.memory_report`:
    q-data, restriction indices, offsets, mesh, halo buffers, scratch vectors),
    and the vectors :func:`hofem.cg` allocates while it runs (r, p, Ap; z
    with a preconditioner; more for the CG ``variant``, :data:`CG_WORK_VECTORS`).
    Memory-pool slack and temporaries are not counted.

    Returns
    -------
    dict
        ``bytes``; ``host``, ``device``: by holder (see ``memory_report``);
        ``cg_vectors`` (bytes).
    """
    report = memory_report(problem.operator, problem.space, problem.rhs, problem.free, x, M)
    cg_vectors = CG_WORK_VECTORS[variant][M is not None] * 8 * int(problem.rhs.size)
    total = report["host_bytes"] + report["device_bytes"] + cg_vectors
    return {
        "bytes": total,
        "host": report["host"],
        "device": report["device"],
        "cg_vectors": cg_vectors,
    }


def median_seconds(func: Callable[[], object], repeat: int) -> float:
    """Median wall-clock seconds of ``repeat`` calls of ``func()``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_apply(problem: BakeoffProblem, repeat: int = 5) -> dict[str, float]:
    """Median seconds of one operator apply (after the solve's warm-up), and DOFs / s.

    Returns
    -------
    dict
        apply_s, apply_dofs_per_s.
    """
    op, ceed = problem.operator, problem.space.ceed
    u = problem.rhs
    v = ceed.xp.empty_like(u)
    op.apply(u, v)

    def apply():
        op.apply(u, v)
        ceed.backend.synchronize()

    seconds = median_seconds(apply, repeat)
    return {"apply_s": seconds, "apply_dofs_per_s": problem.space.num_dofs / seconds}
