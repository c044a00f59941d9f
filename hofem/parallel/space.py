"""``ParH1Space``: an H1 space distributed over MPI ranks (T-vectors, P, boundary DOFs)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..meshes.numbering import H1Numbering
from ..space import H1Space, free_indices
from ..typing import Array, IndexArray, Tags
from .comm import check_all
from .exchange import Exchange
from .numbering import distributed_numbering
from .partition import balance

if TYPE_CHECKING:
    from ..ceed import Ceed
    from .distribute import LocalMesh

__all__ = ["ParH1Space"]


def _interior_first(numbering):
    """Cells touching no ghost node first: the local numbering (and its mesh) reordered so.

    Returns
    -------
    local : H1Numbering
    num_interior : int
    order : ndarray (num_cells,)
        Local cell ``i`` is cell ``order[i]`` of the rank's mesh.
    """
    base = numbering.local
    mesh = base.mesh
    touches = np.any(base.offsets >= numbering.num_owned, axis=1)  # (num_cells,)
    order = np.argsort(touches, kind="stable")
    mesh = mesh.permute_cells(order)
    local = H1Numbering(
        mesh, base.order, base.offsets[order], base.num_nodes, base.node_lattice, base.node_weights
    )
    return local, int(np.count_nonzero(~touches)), order


class ParH1Space:
    """Continuous Lagrange elements of order ``order`` on a mesh distributed over ranks.

    Every rank holds its cells (a :class:`~hofem.parallel.LocalMesh`) and an
    ordinary :class:`hofem.H1Space` on them (``local``). The global DOFs are
    numbered so that each rank's owned DOFs are contiguous: the *T-vector* of a
    rank holds its owned DOFs, component-major ``(num_comp, num_owned)``; the
    *L-vector* its local nodes, owned first then ghosts, as ``local`` uses it.
    ``P`` (T -> L: owners' values copied to the ranks that share them) and
    ``Pᵀ`` (L -> T: shared contributions summed into the owner) go through
    ``exchange``. Collective: every rank of ``comm`` constructs it together.

    Parameters
    ----------
    ceed : hofem.Ceed
        This rank's backend; every rank must use the same resource.
    local_mesh : LocalMesh
        From :func:`hofem.parallel.box_local` or
        :func:`hofem.parallel.distribute_mesh`.
    order : int
    num_comp : int, default 1
    comm : mpi4py.MPI.Comm, optional
        Default ``MPI.COMM_WORLD``.
    transport : {"auto", "mpi", "nccl", "ipc"}
        How halos move (:class:`~hofem.parallel.Exchange`); ``"auto"`` picks ``"ipc"``
        for several GPU ranks on one node (the device CG's halo on the copy engines),
        ``"nccl"`` across nodes or on one GPU rank, else ``"mpi"`` (host-staged on GPUs).

    Attributes
    ----------
    local : hofem.H1Space
        The space on this rank's cells; its cells touching no ghost node come
        first (``num_interior`` of them), so a distributed operator can apply
        them while the halo is in flight.
    numbering : ParNumbering
    exchange : Exchange
    num_dofs : int
        Global DOFs.
    num_elem : int
        Global cells.
    cell_type : str
    num_owned_dofs : int
        This rank's T-vector size.
    first_dof : int
        Global number of this rank's first owned node.

    Raises
    ------
    hofem.parallel.ParallelError
        On every rank: ranks on different backends, an empty rank, a bad order.
    """

    def __init__(
        self,
        ceed: Ceed,
        local_mesh: LocalMesh,
        order: int,
        num_comp: int = 1,
        comm: MPI.Comm | None = None,
        transport: str = "auto",
    ) -> None:
        comm = MPI.COMM_WORLD if comm is None else comm
        resources = comm.allgather(ceed.resource)
        error = None
        if len(set(resources)) > 1:
            error = ValueError(
                f"ranks use different backends {sorted(set(resources))}; give every rank the "
                "same resource"
            )
        elif local_mesh.mesh.num_cells == 0:
            error = ValueError("this rank has no cells; use fewer ranks or a finer mesh")
        elif isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
            error = ValueError(f"order must be an integer >= 1, got {order!r}")
        check_all(comm, error)
        self.comm = comm
        self.ceed = ceed
        self.order = int(order)
        self.num_comp = int(num_comp)
        numbering = distributed_numbering(comm, local_mesh, self.order)
        local_numbering, self.num_interior, self.cell_order = _interior_first(numbering)
        self.local_mesh, self._transport = local_mesh, transport  # for with_order
        # keep the reordered cells only (the unpermuted offsets are dead weight)
        self.numbering = dataclasses.replace(numbering, local=local_numbering)
        mesh = local_numbering.mesh
        self.local = H1Space(ceed, mesh, self.order, self.num_comp, numbering=local_numbering)
        self.dim = self.local.dim
        self.exchange = Exchange(comm, self.numbering, self.num_comp, ceed.xp, transport)
        self.num_dofs = self.numbering.num_global * self.num_comp
        self.num_owned_dofs = self.numbering.num_owned * self.num_comp
        self.first_dof = self.numbering.first_global
        self.num_elem = comm.allreduce(self.local.num_elem)
        self.cell_type = mesh.cell_type

    def with_order(self, order: int) -> ParH1Space:
        """The same distributed mesh at another order (collective; e.g. a multigrid level).

        Its local cells may come in another order (interior first at that order):
        ``cell_order`` maps both to the rank's mesh.
        """
        return ParH1Space(
            self.ceed, self.local_mesh, order, self.num_comp, self.comm, self._transport
        )

    @property
    def vector_size(self) -> int:
        """Size of a solution vector on this rank: the T-vector, ``num_owned_dofs``."""
        return self.num_owned_dofs

    # --- T <-> L ---------------------------------------------------------------------------
    def prolong(self, x_t: Array) -> Array:
        """``P x_t``: the local L-vector of a T-vector (owners' values on every sharer)."""
        self.ceed.backend.check_vector(x_t, "x_t", (self.num_owned_dofs,))
        return self.exchange.prolong(x_t)

    def prolong_transpose(self, y_l: Array) -> Array:
        """``Pᵀ y_l``: local contributions summed into their owners' T-vectors."""
        self.ceed.backend.check_vector(y_l, "y_l", (self.local.num_dofs,))
        return self.exchange.prolong_transpose(y_l)

    def restrict(self, x_l: Array) -> Array:
        """The owned entries of an L-vector (a T-vector; the injection ``R``, ``R P = I``)."""
        self.ceed.backend.check_vector(x_l, "x_l", (self.local.num_dofs,))
        own = self.numbering.num_owned
        return x_l.reshape(self.num_comp, -1)[:, :own].ravel()

    def global_dofs(self) -> IndexArray:
        """Global DOF number of each T-vector entry, ``(num_owned_dofs,)`` int64 (host).

        Component ``c`` of global node ``g`` is ``c * num_global_nodes + g``,
        the component-major layout of a serial L-vector.
        """
        own, first = self.numbering.num_owned, self.first_dof
        nodes = np.arange(first, first + own, dtype=np.int64)
        comp = np.arange(self.num_comp, dtype=np.int64)[:, None] * self.numbering.num_global
        return (comp + nodes[None, :]).ravel()

    # --- reductions ------------------------------------------------------------------------
    def dot(self, a: Array, b: Array) -> Array:
        """Global ``a . b`` of two T-vectors (0-d array of the backend)."""
        return self.exchange.allreduce(self.ceed.xp.vdot(a, b))

    def norm(self, a: Array) -> float:
        """Global ``||a||`` of a T-vector (host float)."""
        return math.sqrt(float(self.dot(a, a)))

    # --- functions -------------------------------------------------------------------------
    def interpolate(self, f: Callable[[Array], Array]) -> Array:
        """Nodal interpolant of ``f`` as a T-vector (see :meth:`hofem.H1Space.interpolate`)."""
        return self.restrict(self.local.interpolate(f))

    def load_vector(self, f: Callable[[Array], Array], q_extra: int = 1) -> Array:
        """T-vector ``b_i = integral f phi_i`` (see :meth:`hofem.H1Space.load_vector`)."""
        return self.exchange.prolong_transpose(self.local.load_vector(f, q_extra))

    def boundary_dofs(self, tags: Tags = None) -> IndexArray:
        """T-vector indices of the owned DOFs on tagged boundary facets (all components).

        A node is on the boundary if any rank sees it on a boundary facet
        (the flags are summed into the owner with ``Pᵀ``).

        Returns
        -------
        ndarray (n,), int64, sorted
        """
        flag = np.zeros((self.num_comp, self.numbering.num_nodes))  # an L-vector
        flag[:, self.local.numbering.boundary_nodes(tags)] = 1.0
        summed = self.exchange.prolong_transpose(self.ceed.asarray(flag.ravel()))
        return np.flatnonzero(self.ceed.to_numpy(summed) > 0)

    def free_dofs(self, tags: Tags = None) -> IndexArray:
        """Sorted T-vector indices not in :meth:`boundary_dofs` ``(tags)``."""
        return free_indices(self.num_owned_dofs, self.boundary_dofs(tags))

    def errors(
        self,
        u_t: Array,
        exact: Callable[[Array], Array],
        grad_exact: Callable[[Array], Array] | None = None,
        q_extra: int = 2,
    ) -> float | tuple[float, float]:
        """Global L2 (and H1-seminorm) errors of a T-vector; see :meth:`hofem.H1Space.errors`."""
        local = self.local.errors(self.prolong(u_t), exact, grad_exact, q_extra)
        local = np.atleast_1d(local)
        squares = self.comm.allreduce(local**2, op=MPI.SUM)
        result = [float(v) for v in np.sqrt(squares)]
        return result[0] if grad_exact is None else tuple(result)

    def balance(self) -> dict[str, Any]:
        """Cells and owned DOFs of every rank, and their max/mean balance (collective).

        Returns
        -------
        dict
            ``elements``, ``dofs`` (lists, one entry per rank),
            ``element_balance``, ``dof_balance`` (max / mean).
        """
        counts = self.comm.allgather((self.local.num_elem, self.num_owned_dofs))
        elements, dofs = (list(c) for c in zip(*counts, strict=True))
        return {
            "elements": elements,
            "dofs": dofs,
            "element_balance": balance(elements),
            "dof_balance": balance(dofs),
        }

    def __repr__(self) -> str:
        return (
            f"ParH1Space({self.local.mesh.cell_type}, order={self.order}, "
            f"num_comp={self.num_comp}, rank {self.comm.rank}/{self.comm.size}, "
            f"num_dofs={self.num_dofs}, num_owned_dofs={self.num_owned_dofs})"
        )
