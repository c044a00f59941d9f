"""Structured-grid operators for the algebra tests: see box.py."""

import importlib.util
from functools import partial

import pytest
from box import box_coordinates as grid_coords  # noqa: F401
from box import box_offsets as grid_offsets  # noqa: F401
from box import box_operator

mass_operator = partial(box_operator, form="mass")
poisson_operator = partial(box_operator, form="diffusion")


def mass_fields(ceed, qf, parts, r_u=None, r_v=None, v_basis=None):
    """An operator of ``qf`` (fields ``u``, ``qdata``, ``v``) on ``mass_operator``'s ``parts``.

    ``u`` through ``r_u`` (default ``parts["r_u"]``) and the basis; ``v`` through ``r_v``
    (default: ``u``'s restriction) and ``v_basis`` (default the basis; ``hf.BASIS_NONE``
    for values at the points through ``parts["r_q"]``); ``qdata`` is the stored q-data.
    """
    import hofem as hf

    r_u = parts["r_u"] if r_u is None else r_u
    op = ceed.Operator(qf)
    op.set_field("u", r_u, parts["basis"], hf.VECTOR_ACTIVE)
    op.set_field("qdata", parts["r_q"], hf.BASIS_NONE, parts["qdata"])
    v_basis = parts["basis"] if v_basis is None else v_basis
    op.set_field("v", r_u if r_v is None else r_v, v_basis, hf.VECTOR_ACTIVE)
    return op


def _first_component_only(ctx, u, v):
    v[0] = 2.0 * u[0]  # v[1] never written: zero


def half_written_operator(ceed, n):
    """An operator on ``meshes.box(n)`` (p = 2) whose QFunction writes row 0 of its
    2-component output and never row 1: ``(op, u)`` with a random input ``u``
    (host array)."""
    import numpy as np

    import hofem as hf
    from hofem import meshes

    space = hf.H1Space(ceed, meshes.box(n, distort=0.1), 2)
    qf = ceed.QFunction(
        _first_component_only,
        inputs=[("u", 1, hf.EVAL_INTERP)],
        outputs=[("v", 2, hf.EVAL_INTERP)],
    )
    op = ceed.Operator(qf)
    op.set_field("u", space.restriction, space.basis(), hf.VECTOR_ACTIVE)
    op.set_field("v", space.make_restriction(2), space.basis(2), hf.VECTOR_ACTIVE)
    return op, np.random.default_rng(7).standard_normal(space.num_dofs)


def assert_usage_error(main, argv, capsys, prog):
    """``main(argv)`` exits 2 with nothing on stdout and one ``PROG ...: error: ...`` line."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(prog) and ": error: " in line


# tests of what a machine without CuPy is told (the refusal of a GPU backend)
without_cupy = pytest.mark.skipif(
    importlib.util.find_spec("cupy") is not None, reason="CuPy is installed"
)
