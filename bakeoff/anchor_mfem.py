"""MFEM anchor for the CPU benchmark: BP1/BP3 with partial assembly on the same hex boxes.

Usage::

    PYTHONPATH=/path/to/pymfem python -m bakeoff anchor-mfem
        [--problems bp1 bp3] [--orders 1 ... 8] [--dofs 3e5 2e6] [--repeat N]

Builds BP1 (``MassIntegrator``) and BP3 (``DiffusionIntegrator``) as MFEM
``BilinearForm`` s with ``AssemblyLevel.PARTIAL`` (q-data stored at the
points, sum-factorized tensor kernels) on an ``n^3`` Cartesian hex mesh of the
unit box, continuous Q_p on Gauss-Lobatto nodes, ``q = p + 2`` Gauss points
per direction (the rule of order ``2 q - 1``), no boundary conditions: the
problem of :func:`bakeoff.common.box_operator`.  Prints one JSON line per case
with the apply DOFs/s (median of ``--repeat`` timed ``Mult`` after a
warm-up), in the format of ``python -m bakeoff bench-cpu``.

MFEM is optional: PyMFEM (``pip install mfem``, the serial wheel), e.g. in a
separate environment whose ``site-packages`` is put on ``PYTHONPATH``.
"""

import json

import numpy as np

from hofem.bakeoff.common import Parser, box_side, median_seconds

from .common import add_case_arguments

__all__ = ["bp_operator", "run_case"]


def _mfem():
    try:
        import mfem.ser as mfem
    except ImportError as exc:
        raise SystemExit(
            "PyMFEM is not importable: `pip install mfem` (a separate venv is fine; put its "
            "site-packages on PYTHONPATH)"
        ) from exc
    return mfem


def bp_operator(bp, n, p):
    """MFEM partial-assembly operator of BP1 or BP3 on the ``n^3`` box of order ``p``.

    Returns
    -------
    apply : callable
        ``apply()`` runs one ``Mult`` on fixed random vectors.
    num_dofs : int
    num_elem : int
    """
    mfem = _mfem()
    mesh = mfem.Mesh.MakeCartesian3D(n, n, n, mfem.Element.HEXAHEDRON, 1.0, 1.0, 1.0)
    fec = mfem.H1_FECollection(p, 3, mfem.BasisType.GaussLobatto)
    space = mfem.FiniteElementSpace(mesh, fec)
    form = mfem.BilinearForm(space)
    integrator = mfem.MassIntegrator() if bp == "bp1" else mfem.DiffusionIntegrator()
    q = p + 2
    integrator.SetIntRule(mfem.IntRules.Get(mfem.Geometry.CUBE, 2 * q - 1))
    form.AddDomainIntegrator(integrator)
    form.SetAssemblyLevel(mfem.AssemblyLevel_PARTIAL)
    form.Assemble()
    num_dofs = space.GetTrueVSize()
    x = mfem.Vector(np.random.default_rng(0).standard_normal(num_dofs))
    y = mfem.Vector(num_dofs)
    keep = (mesh, fec, space, integrator, x, y)

    def apply():
        form.Mult(x, y)

    apply.keep = keep  # the objects MFEM's form points into
    return apply, num_dofs, mesh.GetNE()


def run_case(bp, p, dofs, repeat):
    """Median apply time of one case; the result line (dict)."""
    apply, num_dofs, num_elem = bp_operator(bp, box_side(dofs, p), p)
    apply()  # warm-up
    seconds = median_seconds(apply, repeat)
    result = {"bp": bp, "p": p, "q": p + 2, "dofs": num_dofs, "elements": num_elem}
    result.update(backend="mfem partial assembly", threads=1)
    result["apply_dofs_per_s"] = num_dofs / seconds
    return result


def main(argv=None):
    parser = Parser(prog="python -m bakeoff anchor-mfem", description=__doc__)
    add_case_arguments(parser)
    args = parser.parse_args(argv)
    for dofs in args.dofs:
        for bp in args.problems:
            for p in args.orders:
                print(json.dumps(run_case(bp, p, dofs, args.repeat)), flush=True)
    return 0
