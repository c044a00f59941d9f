"""hofem over MPI: partitioned meshes, distributed H1 spaces, the P operator, parallel CG.

The serial layers stay as they are; this package wraps them. Each rank holds
its part of the mesh (:func:`box_local` builds a block of a box in place,
:func:`distribute_mesh` partitions a mesh or file on rank 0 and scatters it),
a :class:`ParH1Space` numbers the DOFs across ranks and moves values between
owners and sharers (``P``/``Pᵀ``, over MPI or NCCL), and a
:class:`ParOperator` applies ``Pᵀ A_local P`` with the halo exchange
overlapped. :func:`hofem.cg` solves with it unchanged: the operator supplies
inner products summed over the ranks.

Importing this package imports mpi4py (``pip install hofem[mpi]``); nothing
else in hofem does.
"""

try:
    import mpi4py  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised without the extra only
    raise ImportError("hofem.parallel needs mpi4py: pip install 'hofem[mpi]'") from err

from .comm import ParallelError, abort_on_error, bind_device, check_all, world
from .distribute import LocalMesh, box_local, distribute_mesh
from .exchange import Exchange
from .layout import ParNumbering
from .multigrid import ParLevel, ParTransfer, par_multigrid_hierarchy
from .numbering import distributed_numbering
from .operator import ParallelVectorOps, ParOperator, diffusion, mass
from .partition import balance, dual_graph, partition, rcb
from .space import ParH1Space

__all__ = [
    "Exchange",
    "LocalMesh",
    "ParH1Space",
    "ParLevel",
    "ParNumbering",
    "ParOperator",
    "ParTransfer",
    "ParallelError",
    "ParallelVectorOps",
    "abort_on_error",
    "balance",
    "bind_device",
    "box_local",
    "check_all",
    "diffusion",
    "distribute_mesh",
    "distributed_numbering",
    "dual_graph",
    "mass",
    "par_multigrid_hierarchy",
    "partition",
    "rcb",
    "world",
]
