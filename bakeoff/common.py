"""What the laboratory's commands share: box operators built through :mod:`hofem.forms`,
the structured-box options, CUDA-event timing and JSON lines.

Every operator the laboratory times is built the way a user builds one:
:func:`hofem.meshes.box`, an :class:`hofem.H1Space` and :func:`hofem.mass` or
:func:`hofem.diffusion`.  The anchors (libCEED) read the same space's offsets and
node coordinates, so every side-by-side run compares the same matrix.
"""

import json

import numpy as np

import hofem as hf
from hofem import meshes
from hofem.bakeoff.common import (
    MAX_ORDER,
    add_problem_arguments,
    box_side,
    positive_float,
    positive_int,
)
from hofem.bakeoff.problems import PROBLEMS

__all__ = [
    "STRUCTURED",
    "add_case_arguments",
    "box_form",
    "box_operator",
    "box_space",
    "bp_form",
    "bp_space",
    "emit",
    "event_seconds",
    "time_events",
]

STRUCTURED = ("bp1", "bp3")  # the problems of the box benchmarks: mass and Poisson
FORMS = {"mass": hf.mass, "diffusion": hf.diffusion}


def add_case_arguments(parser):
    """``--problems --orders --dofs --repeat`` of the box benchmarks (CPU, libCEED, MFEM)."""
    add_problem_arguments(parser, STRUCTURED, range(1, MAX_ORDER + 1), choices=STRUCTURED)
    parser.add_argument(
        "--dofs", type=positive_float, nargs="+", default=[3e5, 2e6], help="target DOFs"
    )
    parser.add_argument("--repeat", type=positive_int, default=10, help="timed calls per case")


def box_space(ceed, n, p, dim=3, distort=0.0, simplex=False, num_comp=1):
    """The order-``p`` :class:`hofem.H1Space` of ``num_comp`` components on
    ``meshes.box(n, dim)``: hexes in 3D (with ``simplex``: 6 Kuhn tets per cube, the same
    nodes).

    ``distort`` bends the interior (:func:`hofem.meshes.box`), so that Jacobians
    vary from point to point; 0 keeps the cells affine.
    """
    mesh = meshes.box(n, dim, distort=distort, simplex=simplex)
    return hf.H1Space(ceed, mesh, p, num_comp=num_comp)


def box_form(space, form, geometry="auto", q=None, quad_mode=hf.GAUSS):
    """Mass or diffusion on ``space``, through :mod:`hofem.forms`.

    Parameters
    ----------
    space : H1Space
    form : {"mass", "diffusion"}
    geometry : {"auto", "stored", "on_the_fly"}
        As for :func:`hofem.mass`.
    q : int, optional
        Quadrature points per direction (default ``p + 2``).
    quad_mode : hofem.GAUSS or hofem.GAUSS_LOBATTO

    Returns
    -------
    op : Operator
        Square, ``space.num_dofs``; no boundary conditions.
    geometry_used : {"stored", "on_the_fly"}
        What ``geometry`` became (:func:`hofem.resolve_geometry`).
    """
    q_extra = 1 if q is None else q - space.order - 1
    options = {"q_extra": q_extra, "quad_mode": quad_mode, "geometry": geometry}
    used = hf.resolve_geometry(space, form, **options)
    return FORMS[form](space, **options), used


def bp_space(ceed, bp, p, dofs=None, cells="hex", n=None):
    """The box of problem ``bp`` (its components, :data:`hofem.bakeoff.problems.PROBLEMS`) at
    order ``p``: ``n`` cells per direction, or about ``dofs`` DOFs; hexes or ``"tet"``."""
    problem = PROBLEMS[bp]
    n = box_side(dofs / problem.num_comp, p) if n is None else n
    return box_space(ceed, n, p, simplex=cells == "tet", num_comp=problem.num_comp)


def bp_form(space, bp, geometry="auto"):
    """Problem ``bp``'s operator on ``space`` (its form and rule), no boundary conditions:
    ``(op, geometry_used)`` as :func:`box_form`."""
    problem = PROBLEMS[bp]
    q = space.order + 1 + problem.q_extra
    return box_form(space, problem.form, geometry, q, problem.quad_mode)


def box_operator(ceed, form, n, p, geometry="auto", q=None, quad_mode=hf.GAUSS, distort=0.0):
    """:func:`box_form` on :func:`box_space`: ``(op, space, geometry_used)``."""
    space = box_space(ceed, n, p, distort=distort)
    op, used = box_form(space, form, geometry, q, quad_mode)
    return op, space, used


def time_events(fn, repeat, warmup=3):
    """Median seconds of ``fn()`` by CUDA events, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    return event_seconds(fn, repeat)


def alternating_times(runs, rounds, repeat=5):
    """``{key: [median seconds of round 0, 1, ...]}``: each of ``runs`` (key -> callable)
    timed in turn by :func:`time_events` (``repeat`` calls after one warm-up), ``rounds``
    times over, so that a drift of the machine's load hits every variant alike."""
    times = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            times[key].append(time_events(run, repeat, 1))
    return times


def check_same(outputs, first, label, tol=1e-12):
    """Raise AssertionError where an output of ``outputs`` (key -> array) differs from that
    of key ``first`` by more than ``tol`` relative to its largest entry."""
    reference = outputs[first]
    for key, out in outputs.items():
        diff = float(abs(out - reference).max() / abs(reference).max())
        if diff > tol:
            raise AssertionError(f"{label} {key}: {diff:.1e} from {first}")


def event_seconds(fn, repeat):
    """Median seconds of ``repeat`` calls of ``fn()``, each between two CUDA events.

    The events go on CuPy's current stream; on the legacy default stream (CuPy's
    and libCEED's) they also wait for work that other libraries launched there.
    """
    import cupy

    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def vector_size(fused) -> int:
    """Entries of the L-vectors that a gen fused operator's ``fused(u, v)`` takes: its
    operator's, or every component's for a component split (``num_comp`` blocks of ``n``)
    and for a warp kernel taking the components in turn (``components`` of ``comp_step``)."""
    from hofem.backends.cuda.component_split import ComponentSplitOperator
    from hofem.backends.cuda.operator_warp import WarpFusedOperator

    if isinstance(fused, ComponentSplitOperator):
        return fused.num_comp * fused.n
    if isinstance(fused, WarpFusedOperator) and fused._components > 1:
        return fused._components * fused._comp_step
    return fused._op.shape[1]


def dot_args(fused, u=None, v=None):
    """Arguments of a fused kernel's ``apply_dot`` (``gen``'s CG variant): ``u``, ``v``
    (zeros of :func:`vector_size` where None), the partial sums and a running status."""
    import cupy

    u = cupy.zeros(vector_size(fused)) if u is None else u  # (l_size,)
    v = cupy.zeros_like(u) if v is None else v  # (l_size,)
    return u, v, cupy.empty(fused.num_blocks), cupy.zeros(1, dtype=cupy.int64)


def emit(**record):
    """Print ``record`` as one JSON line on stdout."""
    print(json.dumps(record), flush=True)
