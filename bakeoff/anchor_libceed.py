"""libCEED anchor for the CPU benchmark: BP1-BP6 operator apply on the same hex boxes.

Usage::

    PYTHONPATH=/path/to/libceed python -m bakeoff anchor-libceed
        [--problems bp1 bp3] [--orders 1 ... 8] [--dofs 3e5 2e6] [--repeat N]
        [--ceed /cpu/self/avx/blocked]

Builds the bake-off problems with libCEED's own gallery QFunctions (``MassApply``,
``Poisson3DApply`` and their three-component ``Vector3`` forms) on the box of
:func:`bakeoff.common.box_space` (the same offsets and node coordinates as hofem's
operators and the problem's rule: p + 2 Gauss points, p + 1 Gauss-Lobatto points for
BP5/BP6) and prints one JSON line
per case with the apply DOFs/s (median of ``--repeat`` timed applies after a
warm-up), in the format of ``python -m bakeoff bench-cpu``.  The resource falls back to
``/cpu/self/opt/blocked`` when AVX is unavailable; the line reports the one used.

libCEED is optional (``pip install libceed==0.12.0``, e.g. into a separate
environment whose ``site-packages`` is put on ``PYTHONPATH``).
"""

import functools
import json
import subprocess
import sys

import numpy as np

import hofem as hf
from hofem.bakeoff.common import Parser, box_side, median_seconds
from hofem.bakeoff.problems import PROBLEMS

from .common import add_case_arguments, box_space

# the gallery's (build, apply, q-data size, input, output) of each form and component count
_QFUNCTIONS = {
    ("mass", 1): ("Mass3DBuild", "MassApply", 1, "u", "v"),
    ("mass", 3): ("Mass3DBuild", "Vector3MassApply", 1, "u", "v"),
    ("diffusion", 1): ("Poisson3DBuild", "Poisson3DApply", 6, "du", "dv"),
    ("diffusion", 3): ("Poisson3DBuild", "Vector3Poisson3DApply", 6, "du", "dv"),
}
RESOURCES = ("/cpu/self/avx/blocked", "/cpu/self/opt/blocked")


def _libceed():
    try:
        import libceed
    except ImportError as exc:
        raise SystemExit(
            "libCEED is not importable: `pip install libceed==0.12.0` (a separate venv is "
            "fine; put its site-packages on PYTHONPATH)"
        ) from exc
    return libceed


@functools.cache
def resolves(resource):
    """Whether libCEED initializes ``resource`` as itself.

    Probed in a child process: libCEED aborts the process on a backend it
    was built without, whatever its error handler.
    """
    code = f"import libceed; print(libceed.Ceed({resource!r}).get_resource())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.strip() == resource


def applies(resource, bp, p, cells):
    """Whether libCEED's ``resource`` applies problem ``bp`` at order ``p`` on ``cells``
    (``"hex"`` or ``"tet"``), and its error line where it does not.

    Probed on a two-cell box in a child process: a kernel that libCEED cannot launch (its
    non-tensor kernels of more points than a block's threads) leaves the output vector
    locked, and libCEED aborts the process when the vector is destroyed.
    """
    code = (
        "import sys, numpy as np, hofem as hf\n"
        "from bakeoff import anchor_libceed as lc\n"
        "from bakeoff.common import bp_form, bp_space\n"
        "from bakeoff.compare import active_basis\n"
        f"bp, p, cells = {bp!r}, {p}, {cells!r}\n"
        "space = bp_space(hf.Ceed(), bp, p, cells=cells, n=2)\n"
        "op, _ = bp_form(space, bp, 'stored')\n"
        "basis = active_basis(op) if cells == 'tet' else None\n"
        f"ceed = lc.open_ceed(({resource!r},))\n"
        "apply, _ = lc.bp_apply(ceed, bp, space, np.ones(space.num_dofs), basis)\n"
        "try:\n"
        "    apply()\n"
        "except Exception as exc:\n"
        "    print(str(exc).splitlines()[0], file=sys.stderr, flush=True)\n"
        "    import os; os._exit(1)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode == 0:
        return True, ""
    lines = done.stderr.strip().splitlines()
    return False, lines[-1] if lines else f"exit status {done.returncode}"


def open_ceed(resources):
    """A libCEED context of the first resource of ``resources`` this libCEED runs.

    Raises
    ------
    SystemExit
        libCEED is not importable, or runs none of ``resources``.
    """
    libceed = _libceed()
    for resource in resources:
        if resolves(resource):
            return libceed.Ceed(resource)
    raise SystemExit(f"none of {resources} is available in this libCEED")


def vector(ceed, array):
    """libCEED vector holding a copy of the float64 array ``array`` (n,)."""
    vec = ceed.Vector(array.shape[0])
    vec.set_array(np.ascontiguousarray(array, dtype=np.float64))
    return vec


def _bases(ceed, bp, space, basis):
    """libCEED's ``(geometry basis (3 components), solution basis, Q)`` on ``space``:
    tensor Lagrange with problem ``bp``'s rule on hexes, else ``basis``'s matrices (a
    hofem non-tensor :class:`hofem.Basis` of ``space``'s nodes: the same rule)."""
    libceed = _libceed()
    problem = PROBLEMS[bp]
    if basis is None:
        p, q = space.order, space.order + 1 + problem.q_extra
        mode = libceed.GAUSS_LOBATTO if problem.quad_mode is hf.GAUSS_LOBATTO else libceed.GAUSS
        return (ceed.BasisTensorH1Lagrange(3, 3, p + 1, q, mode),
                ceed.BasisTensorH1Lagrange(3, problem.num_comp, p + 1, q, mode), q**3)  # fmt: skip
    if basis.is_tensor or basis.topology is not hf.TET:
        raise ValueError(f"the libCEED anchor takes a tet basis, got {basis.topology}")
    Q, P = basis.interp.shape
    matrices = [np.ascontiguousarray(a, dtype=np.float64).ravel()
                for a in (basis.interp, basis.grad, basis.q_ref.T, basis.q_weight)]  # fmt: skip
    return (ceed.BasisH1(libceed.TET, 3, P, Q, *matrices),
            ceed.BasisH1(libceed.TET, problem.num_comp, P, Q, *matrices), Q)  # fmt: skip


def bp_operator(ceed, bp, space, basis=None):
    """libCEED operator of problem ``bp`` on the scalar ``space`` (an ``H1Space``), and the
    L-vector's size (``num_comp`` times the nodes, component-major as hofem's).

    The restriction reads ``space.offsets`` and the q-data is built from
    ``space.node_coordinates()``: the operator is the matrix of hofem's on ``space``.
    On tets ``basis`` is the hofem operator's active basis: libCEED applies the same
    matrices at the same points (its non-tensor path).
    """
    libceed = _libceed()
    problem = PROBLEMS[bp]
    num_comp = problem.num_comp
    build_name, apply_name, qdata_size, name_in, name_out = _QFUNCTIONS[problem.form, num_comp]
    num_nodes = space.num_nodes
    offsets = space.offsets.astype(np.int32)  # (num_elem, P)
    num_elem, P = offsets.shape
    geo, basis, Q = _bases(ceed, bp, space, basis)
    r_x = ceed.ElemRestriction(num_elem, P, 3, num_nodes, 3 * num_nodes, offsets)
    r_u = ceed.ElemRestriction(num_elem, P, num_comp, num_nodes, num_comp * num_nodes, offsets)
    strides = np.array([1, Q, Q * qdata_size], dtype=np.int32)
    r_q = ceed.StridedElemRestriction(num_elem, Q, qdata_size, num_elem * Q * qdata_size, strides)
    build = ceed.Operator(ceed.QFunctionByName(build_name))
    build.set_field("dx", r_x, geo, libceed.VECTOR_ACTIVE)
    build.set_field("weights", libceed.ELEMRESTRICTION_NONE, geo, libceed.VECTOR_NONE)
    build.set_field("qdata", r_q, libceed.BASIS_NONE, libceed.VECTOR_ACTIVE)
    qdata = ceed.Vector(num_elem * Q * qdata_size)
    qdata.set_value(0.0)
    x = space.node_coordinates().T.ravel()  # (3 * num_nodes,) component-major
    build.apply(vector(ceed, x), qdata)
    op = ceed.Operator(ceed.QFunctionByName(apply_name))
    op.set_field(name_in, r_u, basis, libceed.VECTOR_ACTIVE)
    op.set_field("qdata", r_q, libceed.BASIS_NONE, qdata)
    op.set_field(name_out, r_u, basis, libceed.VECTOR_ACTIVE)
    # keep the restrictions, bases and qdata alive with the operator
    return op, num_comp * num_nodes, num_elem, (r_x, r_u, r_q, geo, basis, qdata)


def bp_apply(ceed, bp, space, u, basis=None):
    """libCEED's BP operator of :func:`bp_operator` bound to an input.

    Parameters
    ----------
    ceed : libceed.Ceed
    bp : str
    space : H1Space
        Scalar, on a hex or tet box (:func:`bakeoff.common.box_space`).
    u : ndarray (num_comp * space.num_nodes,), float64
        Input of every apply (copied into a libCEED vector), component-major.
    basis : hofem.Basis, optional
        Tets: the basis (and so the rule) of hofem's operator (:func:`bp_operator`).

    Returns
    -------
    apply : callable
        ``apply()`` applies the operator to ``u``.
    output : callable
        ``output()``: the last result, a NumPy array shaped as ``u``.
    """
    op, size, _, keep = bp_operator(ceed, bp, space, basis)
    u_lc, v_lc = vector(ceed, u), ceed.Vector(size)

    def apply(keep=keep):  # holds the restrictions, bases and q-data with the operator
        op.apply(u_lc, v_lc)

    def output():
        with v_lc.array_read() as values:
            return values.copy()

    return apply, output


def run_case(ceed, bp, p, dofs, repeat):
    """Median apply time of one case; the result line (dict)."""
    n = box_side(dofs, p)
    space = box_space(hf.Ceed("/cpu/self/ref"), n, p)  # the numbering and coordinates only
    num_nodes = space.num_nodes
    apply, _ = bp_apply(ceed, bp, space, np.random.default_rng(0).standard_normal(num_nodes))
    apply()  # warm-up
    seconds = median_seconds(apply, repeat)
    result = {"bp": bp, "p": p, "q": p + 2, "dofs": num_nodes, "elements": n**3}
    result.update(backend="libceed " + ceed.get_resource(), threads=1)
    result["apply_dofs_per_s"] = num_nodes / seconds
    return result


def main(argv=None):
    parser = Parser(prog="python -m bakeoff anchor-libceed", description=__doc__)
    add_case_arguments(parser)
    parser.add_argument(
        "--ceed", choices=RESOURCES, default=RESOURCES[0], help="libCEED resource (falls back)"
    )
    args = parser.parse_args(argv)
    ceed = open_ceed((args.ceed, *RESOURCES))
    for dofs in args.dofs:
        for bp in args.problems:
            for p in args.orders:
                print(json.dumps(run_case(ceed, bp, p, dofs, args.repeat)), flush=True)
    return 0
