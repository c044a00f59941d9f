"""Memory a bake-off case needs, estimated before anything is allocated, and the check.

One estimate serves the one-case command, ``sweep`` and ``bench-parallel``: the
bytes of host and of device memory that one rank of a case holds at its peak,
from the sizes of the mesh and the basis alone (:func:`estimate_memory`), and
the check of those bytes against what the machine has free
(:func:`memory_refusal`). Every term below is an array that the set-up or the
solve allocates, sized as the code sizes it; the per-DOF totals reproduce the
measured peaks (docs/bakeoff.md, "Memory estimate"):

- ``/gpu/cuda/gen``, BP1 p = 6, stored q-data, 1.5e9 DOFs: 81 B/DOF device (CuPy's pool
  after the solve), 19 B/DOF host;
- ``/gpu/cuda/gen``, BP3 p = 4, geometry on the fly, 1.7e9 DOFs: 81 B/DOF device
  (``nvidia-smi`` peak);
- ``/gpu/cuda/gen``, BP1 p = 6 on 4 ranks, 5e8 DOFs each: 85 B/DOF device, 14 B/DOF host;
- ``/gpu/cuda/gen`` on one H100, the peak of CuPy's pool: BP1 p = 6 on 1.1e8 DOFs 82 B/DOF
  stored, 63 on the fly; BP3 p = 4 on 8.6e7 DOFs 90 on the fly, on 2.2e7 DOFs 246 stored.

The estimate is multiplied by :data:`SAFETY_MARGIN`, and the interpreter's and the
libraries' own memory (:data:`HOST_BASE_BYTES`) is added on the host.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import hofem as hf
from hofem import meshes
from hofem.memory import available_host_memory

from .problems import PROBLEMS, resolve_geometry

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = [
    "FUSED_BACKENDS",
    "SAFETY_MARGIN",
    "MemoryEstimate",
    "box_shape",
    "case_estimate",
    "estimate_memory",
    "free_memory",
    "memory_refusal",
    "mesh_shape",
]

# backends whose apply runs G, B, D, B^T, G^T per element, never holding whole-mesh
# E- or Q-vectors (the others materialize them during an apply)
FUSED_BACKENDS = ("/cpu/self/numba", "/gpu/cuda/gen")

# Factor on every estimate: the terms already follow the measured peaks (docs/bakeoff.md,
# "Memory estimate"), and a larger factor would refuse the largest runs that do fit.
SAFETY_MARGIN = 1.05
# host memory of the interpreter, NumPy/SciPy and Numba (a GPU process: CuPy and the
# CUDA context too), measured as the peak resident set of a case on a 2^3-cell box
HOST_BASE_BYTES = {"cpu": 0.3e9, "gpu": 1.5e9}
# points of one set-up chunk (hofem.H1Space.CHUNK_POINTS) times the 8-byte words each
# holds while it is built: points, weights, function values, Jacobians, E-vectors
CHUNK_BYTES = (1 << 20) * 24 * 8
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank of a case holds at its peak.

    Attributes
    ----------
    host, device : int
        Host memory; device memory (0 on a CPU backend, where all is host).
    dofs : int
        DOFs of the whole case (all ranks).
    """

    host: int
    device: int
    dofs: int

    @property
    def total(self) -> int:
        """Host and device bytes together."""
        return self.host + self.device


def box_shape(bp_name: str, p: int, n: int, simplex: bool = False) -> tuple[int, int, int, int]:
    """``(num_elem, num_nodes, P, Q)`` of bake-off problem ``bp_name`` at order ``p`` on
    the unit box of ``n^3`` cells (6 Kuhn tets per cell with ``simplex``).

    ``num_nodes`` counts scalar nodes: ``(n p + 1)^3`` for hexes and Kuhn tets alike.
    """
    bp = PROBLEMS[bp_name]
    if simplex:
        P = (p + 1) * (p + 2) * (p + 3) // 6
        Q = _tet_points(2 * (p + 2) - 1)
        return 6 * n**3, (n * p + 1) ** 3, P, Q
    return n**3, (n * p + 1) ** 3, (p + 1) ** 3, (p + 1 + bp.q_extra) ** 3


def _tet_points(degree: int) -> int:
    """Points of the tet rule that hofem's bake-off bases use for ``degree``."""
    return hf.Ceed("/cpu/self/ref").BasisH1Lagrange(hf.TET, 1, 1, degree).num_qpts


def mesh_shape(bp_name: str, p: int, mesh: meshes.Mesh) -> tuple[int, int, int, int]:
    """``(num_elem, num_nodes, P, Q)`` of ``bp_name`` at order ``p`` on a 3-D ``mesh``,
    without numbering it: ``num_nodes`` is about ``p^3`` per hex (``p^3 / 6`` per
    tet) plus the vertices, an upper bound of the order-p nodes."""
    simplex = mesh.cell_type == "tetra"
    _, _, P, Q = box_shape(bp_name, p, 1, simplex)
    per_cell = p**3 / 6 if simplex else p**3
    return mesh.num_cells, math.ceil(mesh.num_cells * per_cell) + mesh.num_points, P, Q


def estimate_memory(
    bp_name: str,
    num_elem: int,
    num_nodes: int,
    nodes_per_elem: int,
    points_per_elem: int,
    *,
    resource: str,
    geometry: str,
    ranks: int = 1,
    preconditioner: str | None = None,
    key_numbering: bool = False,
) -> MemoryEstimate:
    """Peak host and device bytes of one rank of a bake-off case, before allocating.

    Parameters
    ----------
    bp_name : str
        "bp1" .. "bp6".
    num_elem, num_nodes : int
        Elements and scalar nodes of the whole mesh's space (all ranks).
    nodes_per_elem, points_per_elem : int
        Basis nodes ``P`` and quadrature points ``Q`` per element.
    resource : str
        The resolved backend (``ceed.resource``).
    geometry : {"stored", "on_the_fly"}
        What the operator runs (``"auto"`` resolved first, see
        :func:`hofem.bakeoff.problems.resolve_geometry`).
    ranks : int
        MPI ranks the case is split over (each holds about ``1 / ranks``; the
        estimate allows 5% for block imbalance and the ghost layer).
    preconditioner : {None, "jacobi", "pmg"}
        Jacobi: the diagonal and ``z``. pmg: twenty more vectors: held, the fine
        level's two inverse diagonals, its smoother's three and the cycle's three
        work vectors, the transfers' two buffers and weights, ``z``, the coarser
        levels' 1/8 each; in the set-up, the level assembly's element diagonals
        (two vectors at p = 4) and the Lanczos steps' four, which CuPy's pool keeps
        (a distributed run measured 362 B per local DOF in the pool at BP3 p = 4);
        and the order-1 matrix (``_order1_bytes``).
    key_numbering : bool
        The mesh came from a file: numbered by sorted keys (41-62 B per node at
        its peak), not in closed form on the box lattice (7 B per node).

    Returns
    -------
    MemoryEstimate
    """
    if geometry not in ("stored", "on_the_fly"):
        raise ValueError(f"geometry must be 'stored' or 'on_the_fly', got {geometry!r}")
    bp = PROBLEMS[bp_name]
    share = 1.0 if ranks == 1 else 1.05 / ranks
    elems, nodes = num_elem * share, num_nodes * share
    dofs = nodes * bp.num_comp
    idx = 4 if num_nodes - 1 <= _INT32_MAX else 8  # offsets hold component 0's node ids
    entries, points = elems * nodes_per_elem, elems * points_per_elem  # E-vector, Q-points
    # The operator's arrays: q-data (or, on the fly, only the vertices), offsets, vectors.
    qdata_words = 1 if bp.form == "mass" else 6
    data = entries * idx
    # on the fly: a vertex (3 doubles) and 8 int32 vertex offsets per cell
    data += points * qdata_words * 8 if geometry == "stored" else elems * (24 + 32)
    # rhs, solution, CG's r, p, Ap, and two for the warm-up and the verification (op(x),
    # b - op(x)); Jacobi: the diagonal and z; Dirichlet: the right-hand side on the whole
    # space while its free part is copied out and the solution's free part (1.5 vectors,
    # measured), and the free indices; several ranks: ParOperator's two local L-vectors
    # and the halo buffers (one vector, measured)
    vectors = 7 + 1.5 * bp.dirichlet + 3 * (ranks > 1)
    vectors += {None: 0, "jacobi": 2, "pmg": 20}[preconditioner]
    data += 8 * dofs * vectors + (idx * dofs if bp.dirichlet else 0)
    pmg_data, gathered = _order1_bytes(bp, elems, num_elem, ranks, preconditioner)
    data += pmg_data
    # chunks of points where functions are evaluated (the right-hand side's at set-up, the
    # L2 error's and its E-vectors at the verification): 3 chunks, 0.6 GB, as measured
    data += 3 * CHUNK_BYTES
    if resource not in FUSED_BACKENDS:  # the E- and Q-vectors of an apply
        grad = 1 if bp.form == "mass" else 3
        data += 8 * bp.num_comp * (2 * entries + 4 * grad * points)
    # Host work beside the operator: the numbering (its closed form peaks at 7 B per node,
    # the sorted keys of a file mesh at 41-62) and the mesh (8 int64 corners and about
    # one vertex per cell).
    work = nodes * (62 if key_numbering else 8) + elems * (64 + 24)
    if resource.startswith("/gpu"):
        # the offsets are built on the host (and converted once) before the upload;
        # Dirichlet problems find the free DOFs there (a mask and the indices)
        host = work + 2 * entries * idx + (dofs * (idx + 1) if bp.dirichlet else 0)
        host += CHUNK_BYTES + HOST_BASE_BYTES["gpu"] + gathered
        device = data
    else:
        host = data + work + HOST_BASE_BYTES["cpu"]
        if resource == "/cpu/self/numba":
            # the transpose map (an index per E-vector entry and a row pointer per node)
            # and the colouring of the element chunks (16 B per node, during the first apply)
            host += (entries + nodes) * idx + 16 * nodes
        device = 0.0
    return MemoryEstimate(
        host=math.ceil(SAFETY_MARGIN * host),
        device=math.ceil(SAFETY_MARGIN * device),
        dofs=int(num_nodes * bp.num_comp),
    )


def _order1_bytes(bp, elems, num_elem, ranks, preconditioner):
    """pmg's order-1 matrix: ``(bytes where the backend computes, rank 0's host bytes)``.

    27 entries (12 B in CSR) per row, about one row per cell: the rank's part three
    times over (assembly, the AMG hierarchy); on several ranks rank 0 also holds the
    whole matrix and its hierarchy where the cycle runs and, on the host besides (GPU),
    the gathered triplets (twice the CSR's bytes), the CSR and the hierarchy's build.
    """
    if preconditioner != "pmg":
        return 0.0, 0.0
    order1 = 27 * 12 * bp.num_comp
    if ranks == 1:
        return 3 * order1 * elems, 0.0
    return 3 * order1 * elems + 2 * order1 * num_elem, 4 * order1 * num_elem


def memory_refusal(
    estimate: MemoryEstimate,
    host_free: float,
    device_free: float | None,
    what: str,
    hint: str,
    ranks: int = 1,
    note: str = "",
) -> str | None:
    """Why ``estimate`` does not fit, as one line; None when it fits.

    Parameters
    ----------
    estimate : MemoryEstimate
    host_free, device_free : float
        Bytes available (to one rank) on the host and on the device (None: no device).
    what : str
        The case, e.g. ``"BP3 p = 4 on 400^3 hex cells"``.
    hint : str
        What to change, e.g. ``"use fewer --elements or more ranks"``.
    ranks : int
        Ranks the case is split over: the bytes are per rank.
    note : str
        Added after the DOFs, e.g. ``", stored geometry"``.
    """
    dofs = f"{estimate.dofs:.2g}".replace("e+0", "e").replace("e+", "e")
    each = f" per rank of {ranks}" if ranks > 1 else ""
    for name, need, free in (
        ("device", estimate.device, device_free),
        ("host", estimate.host, host_free),
    ):
        if free is not None and need > free:
            return (
                f"{what} ({dofs} DOFs{note}) needs about {_gb(need)} GB of {name} "
                f"memory{each}, {_gb(free)} GB available; {hint}"
            )
    return None


def _gb(nbytes):
    """Gigabytes, 3 significant digits (whole ones from 1000 on)."""
    gb = nbytes / 1e9
    return f"{gb:.3g}" if gb < 1000 else f"{gb:,.0f}"


def free_memory(ceed: hf.Ceed) -> tuple[int, int | None]:
    """Bytes free for a case: host (:func:`hofem.memory.available_host_memory`) and,
    on a CUDA backend, the current GPU's (free device memory and CuPy's cached
    blocks), else None."""
    host = available_host_memory()
    if not ceed.resource.startswith("/gpu"):
        return host, None
    import cupy

    free = cupy.cuda.Device().mem_info[0] + cupy.get_default_memory_pool().free_bytes()
    return host, int(free)


def _geometry(bp_name, ceed, p, simplex, distort, geometry):
    """``geometry`` resolved for the case: ``"auto"`` asks the backend's cost model on a
    2^3-cell box of the same kind (the choice depends on the basis, not the size)."""
    if geometry != "auto":
        return geometry
    bp = PROBLEMS[bp_name]
    space = hf.H1Space(ceed, meshes.box(2, 3, simplex=simplex, distort=distort), p, bp.num_comp)
    return resolve_geometry(bp, space, geometry)


def _node_share(comm):
    """Ranks of ``comm`` on this host, which share its memory."""
    hosts = comm.allgather(socket.gethostname())
    return hosts.count(hosts[comm.rank])


def case_estimate(
    bp_name: str,
    ceed: hf.Ceed,
    p: int,
    *,
    elements: int | None = None,
    mesh: meshes.Mesh | None = None,
    simplex: bool = False,
    distort: float = 0.0,
    geometry: str = "auto",
    preconditioner: str | None = None,
    comm: MPI.Comm | None = None,
    max_memory: float | None = None,
    hint: str = "use fewer --elements or more ranks (or --force to try anyway)",
) -> tuple[MemoryEstimate, str | None]:
    """The case's estimate, and why it would not fit in the memory free here (one line;
    None if it fits).

    The case is the box of ``elements^3`` cells, or ``mesh``; with ``comm`` (under
    ``mpiexec``, collective) it is split over the ranks, each GPU rank has its
    own device, and the ranks on one host share its memory; the answer is the
    same on every rank.

    Parameters
    ----------
    bp_name, ceed, p, elements, mesh, simplex, distort, geometry, preconditioner
        The case (see :func:`hofem.bakeoff.problems.setup`).
    comm : mpi4py.MPI.Comm, optional
    max_memory : float, optional
        Bytes a case may use at most, host and device alike.
    hint : str
        The end of the line: what to change.
    """
    if mesh is not None:
        shape, where = mesh_shape(bp_name, p, mesh), f"{mesh.num_cells} cells of {mesh.source}"
        simplex = mesh.cell_type == "tetra"
    else:
        cells = "tet" if simplex else "hex"
        shape = box_shape(bp_name, p, elements, simplex)
        where = f"{elements}^3 {cells} cells"
    used = _geometry(bp_name, ceed, p, simplex, distort, geometry)
    ranks = 1 if comm is None else comm.size
    estimate = estimate_memory(
        bp_name, *shape, resource=ceed.resource, geometry=used, ranks=ranks,
        preconditioner=preconditioner,        key_numbering=mesh is not None,
    )  # fmt: skip
    host, device = free_memory(ceed)
    if comm is not None:
        host //= _node_share(comm)
        host = min(comm.allgather(host))
        device = None if device is None else min(comm.allgather(device))
    if max_memory is not None:
        host = min(host, max_memory)
        device = None if device is None else min(device, max_memory)
    what = f"{bp_name.upper()} p = {p} on {where}"
    return estimate, memory_refusal(estimate, host, device, what, hint, ranks, f", {used} geometry")
