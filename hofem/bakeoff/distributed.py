"""The bake-off problems over MPI ranks: a box built block by block, or a partitioned mesh file.

``mpiexec -n N python -m hofem.bakeoff bp3 ...`` comes here (see
:func:`launched_under_mpi`); results equal the serial run's up to the CG
stopping test, and only rank 0 prints.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from .problems import PROBLEMS, BakeoffProblem, assemble, resolve_geometry

if TYPE_CHECKING:
    from mpi4py import MPI

    from hofem import Ceed
    from hofem.meshes import Mesh
    from hofem.parallel import LocalMesh

__all__ = ["launched_under_mpi", "setup_distributed"]

_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


def launched_under_mpi() -> bool:
    """True when this process is one of several started by ``mpiexec``/``srun``.

    Read from the launchers' environment variables (Open MPI, MPICH/Hydra,
    PMIx), so serial runs never import mpi4py.
    """
    for name in _SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return True
    return False


def ceed_on_every_rank(comm: MPI.Comm, resource: str) -> Ceed:
    """``hf.Ceed(resource)`` on every rank (each bound to its GPU for ``/gpu``), collective.

    A backend or extra missing on any rank raises on every rank
    (``hofem.parallel.check_all``), so rank 0 reports it in one line and none hangs.
    """
    import hofem as hf
    from hofem import parallel as par
    from hofem.backends import BackendUnavailable

    error, ceed = None, None
    try:
        if resource.startswith("/gpu"):
            par.bind_device(comm)
        ceed = hf.Ceed(resource)
    except (BackendUnavailable, ImportError) as exc:
        error = exc
    par.check_all(comm, error)
    return ceed


def setup_distributed(
    bp_name: str,
    ceed: Ceed,
    order: int,
    comm: MPI.Comm,
    elements: int = 6,
    mesh: str | os.PathLike[str] | Mesh | LocalMesh | None = None,
    simplex: bool = False,
    distort: float = 0.0,
    method: str = "rcb",
    transport: str = "auto",
    geometry: str = "auto",
) -> BakeoffProblem:
    """Build a bake-off problem distributed over the ranks of ``comm`` (collective).

    Parameters
    ----------
    bp_name : str
        "bp1" .. "bp6".
    ceed : hofem.Ceed
        This rank's backend (the same resource on every rank).
    order : int
    comm : mpi4py.MPI.Comm
    elements : int
        Cells per direction of the unit box, when ``mesh`` is None.
    mesh : str or pathlib.Path or hofem.meshes.Mesh or hofem.parallel.LocalMesh, optional
        A mesh (file) read on rank 0, partitioned with ``method`` and
        scattered; or this rank's part, already distributed.
    simplex, distort
        As for :func:`hofem.meshes.box`.
    method : {"rcb", "metis"}
    transport : {"auto", "mpi", "nccl", "ipc"}
        As for :class:`hofem.parallel.Exchange`.
    geometry : {"auto", "stored", "on_the_fly"}
        As for :func:`hofem.mass`.

    Returns
    -------
    BakeoffProblem
        ``space`` is a :class:`hofem.parallel.ParH1Space`, ``operator`` acts on
        T-vectors (free DOFs only for Dirichlet problems).
    """
    from hofem import parallel as par

    bp = PROBLEMS[bp_name]
    comm.Barrier()
    start = time.perf_counter()
    if mesh is None:
        local_mesh = par.box_local(comm, elements, 3, simplex=simplex, distort=distort)
    elif isinstance(mesh, par.LocalMesh):
        local_mesh = mesh
    else:
        local_mesh = par.distribute_mesh(comm, mesh, method)
    space = par.ParH1Space(ceed, local_mesh, order, bp.num_comp, comm, transport)
    op, rhs, exact, free = assemble(bp, space, par.mass, par.diffusion, geometry)
    ceed.backend.release_cached_memory()  # set-up temporaries' pool blocks (synchronizes)
    comm.Barrier()
    seconds = time.perf_counter() - start
    used = resolve_geometry(bp, space, geometry)
    return BakeoffProblem(bp, space, op, rhs, exact, free, seconds, used)
