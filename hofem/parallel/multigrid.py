"""p-multigrid on distributed operators: levels per rank, P/Pᵀ around the transfers,
the order-1 matrix gathered to rank 0 for pyamg (registered for :func:`hofem.pmg`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import scipy.sparse

from ..forms import form_assembly, form_space, interpolation_hits
from ..multigrid import Hierarchy, RestrictedTransfer, coarse_orders, register_hierarchy
from ..operator import SubOperator, _OperatorBase
from ..restriction import index_dtype
from ..space import free_indices
from ..typing import Array
from .operator import ParallelVectorOps, ParOperator

__all__ = ["ParLevel", "ParTransfer", "par_multigrid_hierarchy"]


class ParLevel(_OperatorBase):
    """``Pᵀ (sum of local operators) P`` on the T-vectors of a :class:`ParH1Space`.

    A coarse level keeps the fine level's cell split (its local operators come
    from ``multigrid_level`` of the fine ones), so it applies without overlap:
    prolong, apply every part, sum into the owners.
    """

    def __init__(self, space, parts):
        self.space, self.ceed, self.parts = space, space.ceed, parts
        self._x = self.ceed.xp.zeros(space.local.num_dofs)  # (l_size,)
        self._y = self.ceed.xp.zeros(space.local.num_dofs)

    @property
    def shape(self) -> tuple[int, int]:
        n = self.space.num_owned_dofs
        return (n, n)

    def _add(self, u, v):
        self.space.exchange.prolong(u, self._x)
        self._y[...] = 0.0
        for op in self.parts:
            op.apply_add(self._x, self._y)
        self.space.exchange.prolong_transpose_add(self._y, v)

    def linear_assemble_diagonal(self) -> Array:
        """Diagonal on the owned DOFs: the parts' local diagonals summed with ``Pᵀ``."""
        diag = sum(op.linear_assemble_diagonal() for op in self.parts)
        return self.space.exchange.prolong_transpose(diag)

    def vector_ops(self) -> ParallelVectorOps:
        return ParallelVectorOps(super().vector_ops(), self.space.exchange)


class ParTransfer:
    """A distributed transfer: ``Pᵀ_out (sum of local transfers) P_in`` on T-vectors.

    With the fine nodes' weights ``1 / global multiplicity``, the prolongation
    interpolates and the restriction is its exact transpose.  The local
    transfers (:class:`hofem.transfer.Transfer`) share that weight, so it
    scales their summed output (prolongation) or the prolonged input
    (restriction) once, and each part adds its interpolation straight into the
    sum: no buffer per part.

    Parameters
    ----------
    parts : list of hofem.transfer.Transfer
        The local transfers of the rank's cell ranges, one weight array between them.
    space_in, space_out : ParH1Space
    reverse : ParTransfer, optional
        The transfer between the same spaces the other way (the restriction of this
        prolongation, or the reverse), whose two L-vector buffers this one uses: the
        two never run at once.
    """

    def __init__(self, parts, space_in, space_out, reverse=None):
        self.parts, self.space_in, self.space_out = parts, space_in, space_out
        self.ceed = space_in.ceed
        self.shape = (space_out.num_owned_dofs, space_in.num_owned_dofs)
        self.weight = parts[0].weight  # (fine l_size,)
        if any(t.weight is not self.weight or t.transpose != parts[0].transpose for t in parts):
            raise ValueError("the local transfers of a ParTransfer must share one weight")
        self.transpose = parts[0].transpose
        if reverse is not None:
            self._x, self._y = reverse._y, reverse._x
        else:
            xp = self.ceed.xp
            self._x = xp.zeros(space_in.local.num_dofs)  # (in l_size,)
            self._y = xp.zeros(space_out.local.num_dofs)  # (out l_size,)

    def apply(self, u: Array, v: Array) -> None:
        """``v = T u``."""
        x, y = self._x, self._y
        self.space_in.exchange.prolong(u, x)
        if self.transpose:  # the restriction: W on the fine input
            x *= self.weight
        y[...] = 0.0
        for transfer in self.parts:
            transfer.op.apply_add(x, y)
        if not self.transpose:  # the prolongation: W on the fine output
            y *= self.weight
        v[...] = 0.0
        self.space_out.exchange.prolong_transpose_add(y, v)


def _split(A):
    """(ParOperator or ParLevel, its parts, free T-dofs or None) of a level."""
    restricted = isinstance(A, SubOperator)
    level = A.op if restricted else A
    if isinstance(level, ParOperator):
        parts = [op for op in (level.interior, level.boundary) if op is not None]
    else:
        parts = level.parts
    return level, parts, (A.free_dofs if restricted else None)


def _coarse_offsets(fine, coarse):
    """The coarse space's local offsets in the fine space's local cell order."""
    inverse = np.empty_like(coarse.cell_order)
    inverse[coarse.cell_order] = np.arange(coarse.cell_order.size)
    return coarse.local.offsets[inverse[fine.cell_order]]  # (num_elem, P_c)


def _level(fine, parts, coarse):
    """Coarse local operators and local transfers of ``parts`` (fine cell ranges)."""
    ceed, local, nc = fine.ceed, coarse.local, coarse.num_comp
    offsets = _coarse_offsets(fine, coarse)
    multiplicity = sum(op.active_restriction(False).multiplicity() for op in parts)
    weight = 1.0 / fine.exchange.prolong(fine.exchange.prolong_transpose(multiplicity))
    ops, prolong, restrict, start = [], [], [], 0
    for op in parts:
        r_f = op.active_restriction(False)
        cells = offsets[start : start + r_f.num_elem]
        start += r_f.num_elem
        r_c = ceed.ElemRestriction(
            r_f.num_elem, cells.shape[1], nc, local.num_nodes, nc * local.num_nodes, cells
        )
        op_c, P, R = op.multigrid_level(r_c, weight=weight)
        ops.append(op_c)
        prolong.append(P)
        restrict.append(R)
    return ops, prolong, restrict, offsets


def _coarse_free(fine, coarse, offsets, free):
    """Coarse free T-dofs: those whose interpolation misses every constrained fine DOF."""
    ceed = fine.ceed
    flag = np.ones(fine.num_owned_dofs)  # (fine T,) 1 where constrained
    flag[ceed.to_numpy(free)] = 0.0
    flag_l = ceed.to_numpy(fine.exchange.prolong(ceed.asarray(flag)))  # (fine L,)
    constrained = flag_l.reshape(fine.num_comp, -1) > 0.5
    hit = interpolation_hits(
        fine.local, coarse.order, constrained, coarse.local.num_nodes, fine.local.offsets, offsets
    )
    hit = ceed.asarray(hit.ravel().astype(np.float64))  # (coarse L,)
    hit_t = ceed.to_numpy(coarse.exchange.prolong_transpose(hit))  # (coarse T,)
    return ceed.asarray(free_indices(coarse.num_owned_dofs, np.flatnonzero(hit_t > 0)))


def par_multigrid_hierarchy(
    A: ParOperator | ParLevel | SubOperator, orders: Sequence[int] | None = None
) -> Hierarchy:
    """The p-multigrid levels of a distributed form (or ``restrict_dofs`` of one).

    A :class:`ParOperator` whose local operators are forms (:func:`hofem.mass`,
    :func:`hofem.diffusion`) is rediscretized as the serial hierarchy is: each
    coarser level is a :class:`ParOperator` of the same ``build`` on the coarser
    :class:`ParH1Space` (its own interior/boundary split, its order's quadrature),
    whose diagonals come from the forms' q-data per rank
    (:func:`hofem.forms.form_assembly`) and are summed with ``Pᵀ``.  Other local
    operators get Galerkin levels (:class:`ParLevel` of their ``multigrid_level``
    with the coarse space's offsets and the fine nodes' global multiplicity),
    assembled through the backend.  The transfers wrap ``multigrid_level``'s in the
    two spaces' P and Pᵀ.  The order-1 matrix is assembled per rank, gathered to
    rank 0 in the numbering of the solved DOFs, and solved there by pyamg
    (:class:`GatheredSolver`), so the coarse solve is the same whatever the number
    of ranks.
    """
    level, parts, free = _split(A)
    space = level.space
    orders = coarse_orders(space.order, orders)
    forms = isinstance(level, ParOperator) and all(form_space(op) is not None for op in parts)
    levels, prolong, restrict = [A], [], []
    for order in orders[1:]:
        coarse = space.with_order(order)
        ops, P_parts, R_parts, offsets = _level(space, parts, coarse)
        R = ParTransfer(R_parts, space, coarse)
        P = ParTransfer(P_parts, coarse, space, reverse=R)
        op_c = ParOperator(coarse, level.build) if forms else ParLevel(coarse, ops)
        parts = _split(op_c)[1]
        if free is not None:
            free_c = _coarse_free(space, coarse, offsets, free)
            P, R = RestrictedTransfer(P, free, free_c), RestrictedTransfer(R, free_c, free)
            op_c = SubOperator(op_c, free_c)
            free = op_c.free_dofs
        levels.append(op_c)
        prolong.append(P)
        restrict.append(R)
        space = coarse

    def coarse_solver():
        local = None  # the backend's generic assembly of the parts
        if forms:  # the forms' element matrices from their q-data, summed over the parts
            local = sum(form_assembly(op, matrix=True).linear_assemble() for op in parts)
        return lambda make: GatheredSolver(levels[-1], make, local)

    return Hierarchy(levels, prolong, restrict, orders, coarse_solver)


def _solved_numbering(space, free):
    """Each local node's index among the solved DOFs of every rank (rank after rank, each
    rank's free T-dofs in order), -1 where constrained; and this rank's count of them.

    Returns
    -------
    number : int32 (while every global DOF id fits) or int64 array (L,), host
        The narrow type halves the triplets gathered to rank 0 and speeds its
        COO-to-CSR.
    count : int
    """
    ceed = space.ceed
    kept = np.arange(space.num_owned_dofs) if free is None else ceed.to_numpy(free)
    first = space.comm.exscan(int(kept.size)) or 0  # None on rank 0
    number = np.full(space.num_owned_dofs, -1.0)  # (T,) exact in float64 below 2^53
    number[kept] = first + np.arange(kept.size)
    number_l = ceed.to_numpy(space.exchange.prolong(ceed.asarray(number)))  # (L,)
    return np.rint(number_l).astype(index_dtype(space.num_dofs)), int(kept.size)


def _gather_arrays(comm, arrays):
    """Each of ``arrays`` (1-D host arrays, the same lengths on a rank) concatenated over
    the ranks in rank order on rank 0 (``Gatherv``: no pickling of the entries); None
    elsewhere."""
    lengths = comm.gather(arrays[0].size, root=0)
    root = comm.rank == 0
    out = []
    for a in arrays:
        whole = np.empty(sum(lengths), dtype=a.dtype) if root else None
        comm.Gatherv(np.ascontiguousarray(a), (whole, lengths) if root else None, root=0)
        out.append(whole)
    return out


class GatheredSolver:
    """The coarsest level's solve on rank 0: matrix and vectors gathered, result scattered.

    Each rank numbers its local matrix's rows and columns among the solved DOFs
    (:func:`_solved_numbering`: ``P`` carries the owners' numbers to the ghosts),
    drops the constrained ones and sends the rest; rank 0 builds the solved
    matrix from them directly.

    Parameters
    ----------
    A : ParOperator, ParLevel or restrict_dofs of one
    make : callable
        ``make(A_host_csr, xp) -> solve``: called on rank 0 with the backend's array
        module, so a GPU rank 0 runs the coarse cycle on its device.
    local : scipy.sparse matrix (L, L), optional
        The rank's part of the level on its L-vector; default assembled from the
        level's local operators through the backend.
    """

    def __init__(
        self,
        A: ParOperator | ParLevel | SubOperator,
        make: Callable,
        local: scipy.sparse.sparray | scipy.sparse.spmatrix | None = None,
    ) -> None:
        level, parts, free = _split(A)
        space, ceed = level.space, level.ceed
        self.comm, self.ceed = space.comm, ceed
        if local is None:
            local = sum(op.linear_assemble() for op in parts)
            local = local if ceed.xp is np else local.get()
        number, count = _solved_numbering(space, free)
        local = local.tocoo()
        rows, cols = number[local.row], number[local.col]
        kept = (rows >= 0) & (cols >= 0)
        triplets = (rows[kept], cols[kept], local.data[kept])  # (m,) each
        del local, rows, cols
        sizes = self.comm.gather(count, root=0)
        rows, cols, vals = _gather_arrays(self.comm, triplets)
        self.solver, self.count, self.sizes, self._gathered = None, count, None, None
        if self.comm.rank == 0:
            self.sizes = np.array(sizes, dtype=np.int64)  # (ranks,) solved DOFs per rank
            n = int(self.sizes.sum())
            self._gathered = np.empty(n)  # (n,) each solve's right-hand side, made once
            matrix = scipy.sparse.csr_matrix((vals, (rows, cols)), shape=(n, n))
            del rows, cols, vals
            self.solver = make(matrix, ceed.xp)

    def __call__(self, b: Array) -> Array:
        """``x`` (this rank's solved DOFs) of the coarsest system: ``b`` gathered to rank 0
        (``Gatherv`` of host buffers), solved there, scattered back."""
        ceed, root, gathered = self.ceed, self.comm.rank == 0, self._gathered
        self.comm.Gatherv(ceed.to_numpy(b), (gathered, self.sizes) if root else None, root=0)
        x = ceed.to_numpy(self.solver(ceed.asarray(gathered))) if root else None
        out = np.empty(self.count)  # (this rank's solved DOFs,)
        self.comm.Scatterv((x, self.sizes) if root else None, out, root=0)
        return ceed.asarray(out)


register_hierarchy(ParOperator, par_multigrid_hierarchy)
register_hierarchy(ParLevel, par_multigrid_hierarchy)
