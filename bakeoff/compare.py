"""Side-by-side timing shared by ``compare-cpu`` and ``compare-gpu``.

A shared, noisy machine moves a case's time by 15–30% from one minute to
the next, so operators are never compared across runs: :func:`alternate`
times every operator of a case in turn, round after round, and
:func:`summarize` forms each ratio within a round and reports the median
over rounds.
"""

import statistics

from hofem.bakeoff.common import MAX_ORDER, add_problem_arguments, positive_float, positive_int

from .common import STRUCTURED

__all__ = ["add_compare_arguments", "alternate", "summarize"]


def add_compare_arguments(parser, dofs, rounds, batch, geometries, problems=STRUCTURED):
    """The options both commands share, with their defaults.

    ``--problems`` (among ``problems``; default BP1 and BP3), ``--orders`` (default 2..8),
    ``--dofs`` (default ``[dofs]``), ``--rounds``, ``--batch``, ``--geometry`` (choices
    ``geometries``; default stored and on the fly) and ``--cells``.
    """
    add_problem_arguments(parser, STRUCTURED, range(2, MAX_ORDER + 1), choices=problems)
    parser.add_argument(
        "--dofs", type=positive_float, nargs="+", default=[dofs], help=f"target DOFs ({dofs:g})"
    )
    parser.add_argument(
        "--rounds", type=positive_int, default=rounds, help=f"alternating rounds ({rounds})"
    )
    parser.add_argument(
        "--batch", type=positive_int, default=batch, help=f"applies per round, median ({batch})"
    )
    parser.add_argument(
        "--geometry",
        nargs="+",
        choices=geometries,
        default=["stored", "on_the_fly"],
        help="geometry of hofem's operators (default: stored and on_the_fly)",
    )
    parser.add_argument(
        "--cells",
        choices=("hex", "tet"),
        default="hex",
        help="box cells (default hex); tet: 6 Kuhn tets per cube, libCEED given the basis "
        "matrices and rule of hofem's first operator",
    )


def active_basis(op):
    """The basis of ``op``'s active input (what libCEED's anchor reuses on tets)."""
    return next(f.basis for f in op.input_fields if f.is_active)


def alternate(applies, solves, rounds, batch, timer):
    """Time ``applies`` and ``solves`` in turn, ``rounds`` times.

    Parameters
    ----------
    applies : dict, name -> callable
        Operator applications; each round times ``batch`` calls of each.
    solves : dict, name -> callable
        Fixed-iteration solves; each round times one call of each.
    rounds, batch : int
    timer : callable
        ``timer(fn, repeat)``: median seconds of ``repeat`` calls of ``fn``.

    Returns
    -------
    apply_times, solve_times : dict, name -> list of float (rounds,)
        Seconds per round.
    """
    for fn in (*applies.values(), *solves.values()):
        fn()  # warm-up: compiles kernels, moves inputs to the device
    apply_times = {name: [] for name in applies}
    solve_times = {name: [] for name in solves}
    for _ in range(rounds):
        for name, fn in applies.items():
            apply_times[name].append(timer(fn, batch))
        for name, fn in solves.items():
            solve_times[name].append(timer(fn, 1))
    return apply_times, solve_times


def summarize(num_nodes, apply_times, solve_times, ours, iterations):
    """The figures of one case from :func:`alternate`'s times.

    Parameters
    ----------
    num_nodes : int
        DOFs of the operator.
    apply_times, solve_times : dict, name -> list of float (rounds,)
    ours : sequence of str
        Names of the operators compared; every other apply is an anchor.
    iterations : int
        Iterations of each solve (``solve_times`` is keyed by names in ``ours``).

    Returns
    -------
    dict
        ``mdofs``: median MDOF/s of each apply; ``ratios``: ``"ours/anchor"``,
        median over rounds of the anchor's time over ours (above 1: ours is
        faster); ``cg_over_apply``: median over rounds of the solve's
        DOFs x iterations / s over the apply's DOFs / s.
    """
    anchors = [name for name in apply_times if name not in ours]
    return {
        "mdofs": {k: num_nodes / statistics.median(t) / 1e6 for k, t in apply_times.items()},
        "ratios": {
            f"{o}/{a}": statistics.median(
                ta / to for to, ta in zip(apply_times[o], apply_times[a], strict=True)
            )
            for o in ours
            for a in anchors
        },
        "cg_over_apply": {
            o: statistics.median(
                ta * iterations / ts for ta, ts in zip(apply_times[o], solve_times[o], strict=True)
            )
            for o in solve_times
        },
    }
