"""``H1Space``: continuous Lagrange elements of order p on a mesh (restriction, basis, nodes)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .basis import kron_dense
from .constants import (
    EVAL_GRAD,
    EVAL_INTERP,
    GAUSS,
    HEX,
    LINE,
    NOTRANSPOSE,
    QUAD,
    TET,
    TRANSPOSE,
    TRIANGLE,
    QuadMode,
)
from .memory import chunk_ranges
from .polynomials import lagrange_interp_matrix, simplex_nodes, simplex_vandermonde
from .qdata import build_operator
from .quadrature import lobatto_quadrature
from .restriction import ElemRestriction, index_dtype
from .typing import Array, ArrayLike, FloatArray, IndexArray, Tags

if TYPE_CHECKING:
    from .basis import Basis
    from .ceed import Ceed
    from .meshes import H1Numbering, Mesh

__all__ = ["H1Space"]

_TOPOLOGY = {"line": LINE, "triangle": TRIANGLE, "quad": QUAD, "tetra": TET, "hexahedron": HEX}


def free_indices(size: int, constrained: ArrayLike, chunk: int = 1 << 24) -> IndexArray:
    """Sorted indices of ``0..size - 1`` not in ``constrained``, by a mask (no sort).

    Parameters
    ----------
    size : int
    constrained : int array (n,)
    chunk : int
        Mask entries turned into indices at a time (no int64 array of ``size``).

    Returns
    -------
    ndarray (size - number of distinct constrained,), int32 (int64 when ``size``
    passes 2^31 - 1)
    """
    free = np.ones(size, dtype=bool)  # (size,)
    free[constrained] = False
    out = np.empty(int(np.count_nonzero(free)), dtype=index_dtype(size))  # (n_free,)
    count = 0
    for start in range(0, size, chunk):
        local = np.flatnonzero(free[start : start + chunk])  # (<= chunk,)
        out[count : count + local.size] = local + start
        count += local.size
    return out


class H1Space:
    """Continuous Lagrange finite elements of order ``order`` on a conforming mesh.

    Tensor cells (line, quad, hex) use Gauss-Lobatto tensor nodes; simplices
    (triangle, tet) the warp-and-blend nodes of :func:`hofem.polynomials.simplex_nodes`.
    Global numbering comes from :func:`hofem.meshes.h1_numbering`, which makes
    nodes on shared edges and faces agree whatever the cells' orientations.

    Parameters
    ----------
    ceed : hofem.Ceed
    mesh : hofem.meshes.Mesh
        One cell type, ``gdim == dim``.
    order : int
        Polynomial order p, 1..8 (higher works but is untested).
    num_comp : int, default 1
        Components of the field (3 for the vector bake-off problems).
    numbering : hofem.meshes.H1Numbering, optional
        The node numbering to use instead of :func:`hofem.meshes.h1_numbering`
        of ``mesh`` (the distributed layer passes each rank's local numbering,
        owned nodes first); its ``offsets`` follow ``mesh``'s cells.

    Attributes
    ----------
    topology : hf.Topology
    dim, order, num_comp : int
    num_nodes : int
        Global scalar nodes.
    num_dofs : int
        ``num_nodes * num_comp``: the L-vector size (component-major:
        component ``c`` of node ``i`` at ``c * num_nodes + i``).
    offsets : ndarray (num_elem, P) int
    restriction : ElemRestriction
        ``num_comp`` components.
    first_cell : int
        This space's cells are the mesh's cells ``first_cell:first_cell + num_elem``
        (0 but for :meth:`element_subset`).

    Notes
    -----
    Node coordinates are not stored: :attr:`coordinates` (the L-vector) and
    :meth:`element_coordinates` (E-vectors of cell ranges) interpolate the mesh
    geometry when asked.
    """

    CHUNK_POINTS = 1 << 20  # quadrature points per chunk: load_vector, errors, form set-up

    def __init__(
        self,
        ceed: Ceed,
        mesh: Mesh,
        order: int,
        num_comp: int = 1,
        numbering: H1Numbering | None = None,
    ) -> None:
        from .meshes import h1_numbering

        if mesh.cell_type not in _TOPOLOGY:
            raise ValueError(f"unsupported cell type {mesh.cell_type!r}")
        if mesh.gdim != mesh.dim:
            raise ValueError(f"H1Space needs gdim == dim, got gdim={mesh.gdim}, dim={mesh.dim}")
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
            raise ValueError(f"order must be an integer >= 1, got {order!r}")
        self.ceed = ceed
        self.mesh = mesh
        self.order = int(order)
        self.num_comp = int(num_comp)
        self.topology = _TOPOLOGY[mesh.cell_type]
        self.dim = mesh.dim
        self.numbering = h1_numbering(mesh, self.order) if numbering is None else numbering
        if self.numbering.offsets.shape[0] != mesh.num_cells or self.numbering.order != self.order:
            raise ValueError(
                f"numbering has {self.numbering.offsets.shape[0]} cells of order "
                f"{self.numbering.order}; the mesh has {mesh.num_cells}, the space order {order}"
            )
        self.offsets = self.numbering.offsets  # (num_elem, P), read-only
        self.num_elem, self.elem_size = self.offsets.shape
        self.first_cell = 0
        self.num_nodes = self.numbering.num_nodes
        self.num_dofs = self.num_nodes * self.num_comp
        self.restriction = self.make_restriction(self.num_comp)
        self._shared = None  # subsets from element_subsets: {"coordinates", "parent"}
        self._geometry = {}  # coordinate_space's, shared with every subset (shallow copies)

    @property
    def coordinates(self) -> Array:
        """Node coordinates L-vector ``(dim * num_nodes,)`` of the backend, component-major.

        The mesh geometry interpolated at order p (curved where the mesh is),
        computed on each access (24 bytes per node in 3D): hold on to it only
        while needed.  Spaces made together by :meth:`element_subsets` compute
        it once and return that one array to each other.
        """
        if self._shared is None:
            return self._node_coordinates(self.ceed)
        if self._shared["coordinates"] is None:  # the parent's: every subset's nodes set
            self._shared["coordinates"] = self._shared.pop("parent").coordinates
        return self._shared["coordinates"]

    @property
    def cell_type(self) -> str:
        """The mesh's cell type (meshio name)."""
        return self.mesh.cell_type

    @property
    def vector_size(self) -> int:
        """Size of a solution vector on this process: ``num_dofs`` (the L-vector)."""
        return self.num_dofs

    def element_subset(self, start: int, stop: int) -> H1Space:
        """The same space on the contiguous range of cells ``start:stop`` only.

        Shares the numbering, L-vector size and coordinates with this space;
        forms built on it (:func:`hofem.mass`, ...) integrate over those cells
        only, so operators on complementary ranges sum to the whole. The
        distributed operator builds its interior and boundary parts this way.

        Parameters
        ----------
        start, stop : int
            ``0 <= start < stop <= num_elem``.

        Returns
        -------
        H1Space

        Raises
        ------
        ValueError
            An empty or out-of-range subset.
        """
        if not 0 <= start < stop <= self.num_elem:
            raise ValueError(f"element range {start}:{stop} is empty or outside 0:{self.num_elem}")
        subset = copy.copy(self)
        subset.offsets = self.offsets[start:stop]  # (stop - start, P), a view
        subset.num_elem = stop - start
        subset.first_cell = self.first_cell + start
        subset.restriction = subset.make_restriction(self.num_comp)
        subset._shared = None
        return subset

    def element_subsets(self, *ranges: tuple[int, int]) -> list[H1Space]:
        """:meth:`element_subset` of each ``(start, stop)``, sharing one coordinates vector.

        The first access of :attr:`coordinates` on any of them computes this
        space's (a single subset sets only its own nodes); the others then
        return the same array (not a copy, so change it in place for
        none of them).  Operators that read the geometry on the fly, one built
        on each subset, hold one coordinate L-vector between them instead of one
        each; nothing is computed for operators that never read it.

        Parameters
        ----------
        *ranges : (int, int)

        Returns
        -------
        list of H1Space

        Raises
        ------
        ValueError
            An empty or out-of-range subset.
        """
        shared = {"coordinates": None, "parent": self}
        subsets = [self.element_subset(start, stop) for start, stop in ranges]
        for subset in subsets:
            subset._shared = shared
        return subsets

    def coordinate_space(self) -> H1Space:
        """The ``dim``-component space of this space's geometry at the lowest exact order.

        Order ``k = min(mesh.geometry_order, order)``: the mesh's vertices
        (``P_1d = 2`` on tensor cells) for straight-sided meshes, the curved
        geometry's own order otherwise, never above this space's order (whose
        coordinates interpolate the geometry at ``order``).  Its
        :attr:`coordinates` are the geometry this space's stored q-data is built
        from, with ``(k + 1)^dim`` instead of ``(order + 1)^dim`` nodes per
        cell: operators that recompute the geometry at the points
        (``geometry="on_the_fly"``) read these.

        Made once per space (its numbering: closed form on boxes) and shared
        with the space's :meth:`element_subset` s, which also share one
        coordinate L-vector; at ``k == order`` it reuses this space's numbering.

        Returns
        -------
        H1Space
            Same cells as this space (a subset of the mesh's when this space is
            one), ``num_comp = dim``.
        """
        shared = self._geometry
        if "coordinate_space" not in shared:
            k = min(self.mesh.geometry_order, self.order)
            numbering = self.numbering if k == self.order else None
            whole = H1Space(self.ceed, self.mesh, k, num_comp=self.dim, numbering=numbering)
            shared["coordinate_space"] = whole
            shared["coordinate_links"] = {"coordinates": None, "parent": whole}
        whole = shared["coordinate_space"]
        if (self.first_cell, self.num_elem) == (0, whole.num_elem):
            return whole
        cells = whole.element_subset(self.first_cell, self.first_cell + self.num_elem)
        cells._shared = shared["coordinate_links"]  # one coordinate L-vector for all subsets
        return cells

    def with_order(self, order: int) -> H1Space:
        """This space's mesh, cells and ``num_comp`` at another order (e.g. a multigrid level).

        Parameters
        ----------
        order : int
            ``>= 1``.

        Returns
        -------
        H1Space
            With its own numbering (:func:`hofem.meshes.h1_numbering`); a subset of
            the mesh's cells where this space is one (:meth:`element_subset`).
            Where both orders are at least the mesh's geometry order ``k`` the two
            spaces share one :meth:`coordinate_space`, and a space of order ``k``
            takes that one's numbering: multigrid levels number and interpolate
            the geometry once.
        """
        k = self.mesh.geometry_order
        shared = self._geometry if min(order, self.order) >= k else None
        numbering = None
        if shared is not None and "coordinate_space" in shared and order == k:
            numbering = shared["coordinate_space"].numbering
        whole = H1Space(self.ceed, self.mesh, order, num_comp=self.num_comp, numbering=numbering)
        if shared is not None:
            whole._geometry = shared
        if (self.first_cell, self.num_elem) == (0, whole.num_elem):
            return whole
        return whole.element_subset(self.first_cell, self.first_cell + self.num_elem)

    # --- pieces ----------------------------------------------------------------------------
    def make_restriction(self, num_comp: int) -> ElemRestriction:
        """Restriction of a ``num_comp``-component field on this space's nodes."""
        return self.ceed.ElemRestriction(
            self.num_elem,
            self.elem_size,
            num_comp,
            self.num_nodes,
            num_comp * self.num_nodes,
            self.offsets,
        )

    def basis(
        self,
        num_comp: int | None = None,
        q_extra: int = 1,
        quad_mode: QuadMode = GAUSS,
        q_degree: int | None = None,
    ) -> Basis:
        """Basis of the space at quadrature points.

        Tensor cells: ``Q_1d = order + 1 + q_extra`` points of ``quad_mode``
        per direction (the bake-off's ``q = p + 2`` Gauss is ``q_extra = 1``;
        BP5/6's collocated ``q = p + 1`` Gauss-Lobatto is ``q_extra = 0`` with
        ``hf.GAUSS_LOBATTO``). Simplices: the collapsed Gauss-Jacobi rule exact to
        the same degree, ``2 (order + 1 + q_extra) - 1``.

        Parameters
        ----------
        num_comp : int, optional
            Default: the space's.
        q_extra : int
        quad_mode : hf.GAUSS or hf.GAUSS_LOBATTO
        q_degree : int, optional
            A rule exact to this total degree instead of ``q_extra``'s: on simplices
            the symmetric rule with the fewest points
            (:func:`hofem.simplex_quadrature` with ``rule="symmetric"``), on tensor
            cells the fewest ``quad_mode`` points per direction.
        """
        num_comp = self.num_comp if num_comp is None else num_comp
        P = self.order + 1
        if self.topology.is_tensor:
            Q = P + q_extra
            if q_degree is not None:  # Gauss: 2 Q - 1 >= q_degree; Lobatto: 2 Q - 3
                Q = q_degree // 2 + (1 if quad_mode is GAUSS else 2)
            return self.ceed.BasisTensorH1Lagrange(self.dim, num_comp, P, Q, quad_mode)
        if q_degree is not None:
            return self.ceed.BasisH1Lagrange(
                self.topology, num_comp, self.order, q_degree, "symmetric"
            )
        return self.ceed.BasisH1Lagrange(self.topology, num_comp, self.order, 2 * (P + q_extra) - 1)

    def reference_nodes(self) -> FloatArray:
        """Reference coordinates of the element nodes, ``(P, dim)`` in restriction order."""
        if self.topology.is_tensor:
            x1d = lobatto_quadrature(self.order + 1)[0]
            grids = np.meshgrid(*[x1d] * self.dim, indexing="ij")  # [z][y][x]
            return np.stack([grids[self.dim - 1 - d].ravel() for d in range(self.dim)], axis=-1)
        return simplex_nodes(self.dim, self.order)

    def _geometry_interp(self):
        """(P, num_geom_nodes): mesh geometry's Lagrange basis at this space's nodes."""
        from .meshes.reference import geometry_nodes

        k = self.mesh.geometry_order
        if self.topology.is_tensor:
            gll_k = lobatto_quadrature(k + 1)[0]
            gll_p = lobatto_quadrature(self.order + 1)[0]
            return kron_dense([lagrange_interp_matrix(gll_k, gll_p)] * self.dim)
        nodes_k = geometry_nodes(self.mesh.cell_type, k)  # (G, dim) equispaced
        vandermonde = simplex_vandermonde(self.dim, k, nodes_k)  # (G, G)
        return simplex_vandermonde(self.dim, k, self.reference_nodes()) @ np.linalg.inv(vandermonde)

    def cell_chunks(self, points_per_cell: int, multiple: int = 1) -> list[tuple[int, int]]:
        """Ranges ``(start, stop)`` of this space's cells, ``CHUNK_POINTS`` points at most each.

        Parameters
        ----------
        points_per_cell : int
            Points (quadrature points, nodes) each cell contributes.
        multiple : int
            Every range but the last holds a multiple of this many cells (so that
            each is a slice of a blocked layout of ``multiple`` lanes).

        Returns
        -------
        list of (int, int)
            Consecutive ranges covering ``0:num_elem``.
        """
        return chunk_ranges(self.num_elem, points_per_cell, self.CHUNK_POINTS, multiple)

    def element_coordinates(self, start: int = 0, stop: int | None = None) -> FloatArray:
        """Node coordinates of this space's cells ``start:stop`` as a host E-vector.

        Interpolated from the mesh geometry directly, without the L-vector.

        Returns
        -------
        ndarray (stop - start, dim, P), float64
            The layout of a ``dim``-component E-vector of :meth:`make_restriction`.
        """
        return self._interpolated_coordinates(start, stop, (0, 2, 1))

    def _component_coordinates(self, start=0, stop=None):
        """:meth:`element_coordinates` one coordinate at a time: ``(dim, stop - start, P)``."""
        return self._interpolated_coordinates(start, stop, (2, 0, 1))

    def _interpolated_coordinates(self, start, stop, axes):
        """Coordinates of cells ``start:stop`` at this space's nodes, the mesh's
        ``(cells, G, dim)`` axes in the order ``axes``, with nodes last.

        The geometry is put in that layout first and then interpolated (``G`` values a
        cell and coordinate, against ``P`` after), in one BLAS product; none where the
        nodes are the geometry's own (the tensor space of the geometry's order, the
        coordinate space of a straight-sided mesh).
        """
        stop = self.num_elem if stop is None else stop
        first = self.first_cell
        cell_x = self.mesh.cell_coordinates(first + start, first + stop)  # (n, G, dim)
        cell_x = np.ascontiguousarray(cell_x.transpose(axes))  # (., ., G)
        interp = self._node_interp  # (P, G) or None
        if interp is None:
            return cell_x
        x = cell_x.reshape(-1, cell_x.shape[-1]) @ interp.T  # (. * ., P)
        return x.reshape(*cell_x.shape[:-1], self.elem_size)

    @functools.cached_property
    def _node_interp(self):
        """:meth:`_geometry_interp`, or None where it is exactly the identity (tensor cells
        of the geometry's order): the coordinates are then the geometry's values."""
        interp = self._geometry_interp()  # (P, G)
        if interp.shape[0] == interp.shape[1] and np.array_equal(interp, np.eye(len(interp))):
            return None
        return interp

    def _node_coordinates(self, ceed=None):
        """(dim * num_nodes,) physical node coordinates, component-major like the L-vector.

        Written chunk by chunk of cells into an array of ``ceed``'s backend (a host
        array without ``ceed``): on a GPU the whole field never exists on the host.
        """
        xp = np if ceed is None else ceed.xp
        to_backend = np.asarray if ceed is None else ceed.asarray
        N = self.num_nodes
        x = xp.zeros(self.dim * N)  # (dim * num_nodes,)
        wide = index_dtype(self.dim * N)  # c * N + node may pass int32 where node does not
        for a, b in self.cell_chunks(self.elem_size):
            nodes = to_backend(self.offsets[a:b].astype(wide, copy=False))  # (b - a, P)
            cell_x = to_backend(self._component_coordinates(a, b))  # (dim, b - a, P)
            for c in range(self.dim):
                x[c * N + nodes] = cell_x[c]
        return x

    def node_coordinates(self) -> FloatArray:
        """Host array ``(num_nodes, dim)`` of the global node coordinates."""
        return self._node_coordinates().reshape(self.dim, self.num_nodes).T

    # --- boundary --------------------------------------------------------------------------
    def boundary_dofs(self, tags: Tags = None) -> IndexArray:
        """L-vector indices of the DOFs on tagged boundary facets (all components).

        Parameters
        ----------
        tags : int, str, iterable of them, or None
            Facet tags or tag names; None: the whole boundary.

        Returns
        -------
        ndarray (n,), int64, sorted
        """
        nodes = self.numbering.boundary_nodes(tags)
        return (nodes[None, :] + self.num_nodes * np.arange(self.num_comp)[:, None]).ravel()

    def free_dofs(self, tags: Tags = None) -> IndexArray:
        """Sorted L-vector indices not in :meth:`boundary_dofs` ``(tags)``, int32 or int64."""
        return free_indices(self.num_dofs, self.boundary_dofs(tags))

    # --- functions -------------------------------------------------------------------------
    def _call(self, f, x):
        """``f(x)`` as a float64 array of the backend, for points ``x`` of the backend.

        ``f`` is first called with the backend's arrays, so that NumPy ufuncs and
        functions in it (``np.sin``, ``np.stack``, ...) run on the device through
        CuPy's dispatch and no point leaves the GPU. A function that only takes
        host arrays (it raises ``TypeError`` on CuPy arrays, e.g. through
        ``np.asarray``) is called again with host arrays.
        """
        xp = self.ceed.xp
        try:
            return xp.asarray(f(x), dtype=xp.float64)
        except TypeError:
            if xp is np:
                raise
            return xp.asarray(np.asarray(f(self.ceed.to_numpy(x)), dtype=np.float64))

    def _evaluate(self, f, x):
        """f at points x (n, dim) of the backend as a backend array (num_comp, n)."""
        values = self._call(f, x)
        n = x.shape[0]
        if values.shape == (n,) and self.num_comp == 1:
            return values[None]
        if values.shape == (n, self.num_comp):
            return values.T
        raise ValueError(
            f"function must return shape ({n},) or ({n}, {self.num_comp}) for points of shape "
            f"{x.shape}, got {values.shape}"
        )

    def interpolate(self, f: Callable[[Array], Array]) -> Array:
        """Nodal interpolant of ``f`` as an L-vector of the backend.

        Parameters
        ----------
        f : callable
            ``f(x)`` with ``x`` of shape ``(n, dim)``; returns ``(n,)`` or
            ``(n, num_comp)``. On a GPU backend ``x`` is a CuPy array, so that the
            values are computed on the device: NumPy ufuncs and functions
            (``np.sin(x)``, ``np.stack``) dispatch to CuPy. A function that needs
            host arrays (it raises ``TypeError`` on a CuPy array, as
            ``np.asarray(x)`` does) is called again with a NumPy copy of ``x``.
        """
        x = self._node_coordinates(self.ceed).reshape(self.dim, self.num_nodes).T  # (N, dim)
        return self._evaluate(f, x).ravel()

    def quadrature(
        self, q_extra: int = 1, quad_mode: QuadMode = GAUSS
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Physical points and weights of the element quadrature (host arrays).

        ``q_extra`` and ``quad_mode`` choose the rule as in :meth:`basis`.

        Returns
        -------
        x : ndarray (num_elem, Q, dim)
        w_det_j : ndarray (num_elem, Q)
            Quadrature weight times the Jacobian determinant.
        jacobian : ndarray (num_elem, Q, dim, dim)
            ``jacobian[e, q, c, d] = d x_c / d xi_d``.
        """
        x, w_det_j, jac = self._quadrature(q_extra, quad_mode, jacobian=True)
        to_numpy = self.ceed.to_numpy
        return to_numpy(x), to_numpy(w_det_j), to_numpy(jac)

    def _quadrature(self, q_extra, quad_mode, jacobian):
        """:meth:`quadrature` as arrays of the backend, the Jacobians only when ``jacobian``.

        The points are interpolated one coordinate at a time into a
        ``(dim, num_elem, Q)`` array, so ``x.reshape(-1, dim)`` is a view with
        contiguous columns; ``w det J`` comes from the gallery's ``Mass{dim}DBuild``
        operator (the Jacobians are not formed for it). Everything after the
        element coordinates (host, from the mesh) stays on the backend's device.
        """
        ceed, dim, E, P = self.ceed, self.dim, self.num_elem, self.elem_size
        scalar, geo = self.basis(1, q_extra, quad_mode), self.basis(dim, q_extra, quad_mode)
        xc = self._component_coordinates()  # (dim, E, P)
        x = scalar.apply(dim * E, NOTRANSPOSE, EVAL_INTERP, ceed.asarray(xc.reshape(-1, 1, P)))
        x = x.reshape(dim, E, scalar.num_qpts)  # (dim, E, Q)
        e = ceed.asarray(np.ascontiguousarray(xc.transpose(1, 0, 2)))  # (E, dim, P)
        Q = scalar.num_qpts
        w_det_j = build_operator(self, "Mass", geo, 1, E, (1, Q, Q))(e.ravel())  # (E * Q,)
        w_det_j = w_det_j.reshape(E, Q)
        jac = None
        if jacobian:
            dx = geo.apply(E, NOTRANSPOSE, EVAL_GRAD, e)  # (E, dim d, comp c, Q)
            jac = dx.transpose(0, 3, 2, 1)  # (E, Q, comp c, dim d)
        return x.transpose(1, 2, 0), w_det_j, jac

    def load_vector(self, f: Callable[[Array], Array], q_extra: int = 1) -> Array:
        """L-vector ``b_i = integral f phi_i`` by quadrature (f evaluated at the points).

        Parameters
        ----------
        f : callable
            As for :meth:`interpolate`.
        """
        chunks = self._chunks(q_extra)
        b = next(chunks)._load_vector(f, q_extra)
        for chunk in chunks:
            b += chunk._load_vector(f, q_extra)
        return b

    def _load_vector(self, f, q_extra):
        x, w_det_j, _ = self._quadrature(q_extra, GAUSS, jacobian=False)
        num_elem, Q, _ = x.shape
        values = self._evaluate(f, x.reshape(-1, self.dim)).reshape(self.num_comp, num_elem, Q)
        qvec = values.transpose(1, 0, 2) * w_det_j[:, None, :]  # (num_elem, num_comp, Q)
        b = self.basis(q_extra=q_extra)
        e = b.apply(num_elem, TRANSPOSE, EVAL_INTERP, self.ceed.xp.ascontiguousarray(qvec))
        return self.restriction.apply(e, TRANSPOSE)

    def _chunks(self, q_extra):
        """This space in element ranges of at most ``CHUNK_POINTS`` quadrature points each.

        Host-side quadrature work (:meth:`load_vector`, :meth:`errors`) runs
        chunk by chunk, so its memory does not grow with the mesh.
        """
        chunks = self.cell_chunks(self.basis(q_extra=q_extra).num_qpts)
        if len(chunks) == 1:
            yield self
            return
        for start, stop in chunks:
            yield self.element_subset(start, stop)

    def errors(
        self,
        u: Array,
        exact: Callable[[Array], Array],
        grad_exact: Callable[[Array], Array] | None = None,
        q_extra: int = 2,
    ) -> float | tuple[float, float]:
        """L2 (and H1-seminorm) errors of the L-vector ``u`` against exact functions.

        Parameters
        ----------
        u : array (num_dofs,) of the backend
        exact : callable
            As for :meth:`interpolate`.
        grad_exact : callable, optional
            ``grad_exact(x)`` of shape ``(n, dim)`` (scalar fields) or
            ``(n, num_comp, dim)``; when given, the H1-seminorm error is returned too.
        q_extra : int, default 2
            Extra quadrature points over the operator's rule, so the error is
            not hidden by a rule that is exact on the discrete solution.

        Returns
        -------
        l2 : float
        h1 : float
            Only when ``grad_exact`` is given.
        """
        self.ceed.backend.check_vector(u, "u", (self.num_dofs,))
        squares = sum(
            np.asarray(chunk._squared_errors(u, exact, grad_exact, q_extra))
            for chunk in self._chunks(q_extra)
        )
        if grad_exact is None:
            return float(np.sqrt(squares))
        return float(np.sqrt(squares[0])), float(np.sqrt(squares[1]))

    def _squared_errors(self, u, exact, grad_exact, q_extra):
        """Squared L2 (and H1-seminorm) errors over this space's cells (on the backend)."""
        xp = self.ceed.xp
        x, w_det_j, jacobian = self._quadrature(q_extra, GAUSS, grad_exact is not None)
        num_elem, Q, dim = x.shape
        b = self.basis(q_extra=q_extra)
        e = self.restriction.apply(u)
        uh = b.apply(num_elem, NOTRANSPOSE, EVAL_INTERP, e)  # (E, C, Q)
        ue = self._evaluate(exact, x.reshape(-1, dim)).reshape(self.num_comp, num_elem, Q)
        l2 = float(xp.sum(w_det_j[:, None] * (uh - ue.transpose(1, 0, 2)) ** 2))
        if grad_exact is None:
            return l2
        duh = b.apply(num_elem, NOTRANSPOSE, EVAL_GRAD, e)  # (E, dim, C, Q)
        # physical gradient: du/dx_c = sum_d (J^{-1})[d, c] du/dxi_d
        inv_j = xp.linalg.inv(jacobian)  # (E, Q, d, c)
        grad = xp.einsum("eqdc,edkq->ekqc", inv_j, duh)  # (E, C, Q, dim)
        g = self._call(grad_exact, x.reshape(-1, dim))  # (E Q, dim) or (E Q, C, dim)
        g = g.reshape(num_elem, Q, self.num_comp, dim).transpose(0, 2, 1, 3)
        h1 = float(xp.sum(w_det_j[:, None, :, None] * (grad - g) ** 2))
        return l2, h1

    def __repr__(self) -> str:
        return (
            f"H1Space({self.mesh.cell_type}, order={self.order}, num_comp={self.num_comp}, "
            f"num_elem={self.num_elem}, num_dofs={self.num_dofs})"
        )
