"""Ready-made operators on an :class:`~hofem.H1Space`: ``mass``, ``diffusion``; Dirichlet DOFs.

With stored geometry each form runs the gallery's setup QFunction
(``Mass{d}DBuild`` or ``Poisson{d}DBuild``) once to store quadrature data,
then returns the apply operator (``MassApply``/``Poisson{d}DApply``, or the
``Vector3`` versions for 3-component spaces) reading it.  With geometry on
the fly the apply operator reads the coordinate field of
:meth:`~hofem.H1Space.coordinate_space` (the mesh's vertices on straight-sided
meshes) and the quadrature weights instead
(``Mass{d}DApplyGeometry``/``Poisson{d}DApplyGeometry``, see :mod:`hofem.geometry`).

Quadrature (:func:`form_quadrature`): on tensor cells ``q = p + 2`` Gauss points per
direction unless ``q_extra``/``quad_mode`` say otherwise; on simplices, by default, the
symmetric rule with the fewest points exact to the degree the form needs (mass ``2p``,
stiffness ``2p - 2``, plus ``dim (k - 1)``, the degree of ``det J``, on cells of curved
geometry of order ``k``); an explicit ``q_extra`` gives the collapsed Gauss-Jacobi rule
exact to ``2 (p + 1 + q_extra) - 1`` instead.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .basis import cell_center
from .constants import (
    BASIS_NONE,
    ELEMRESTRICTION_NONE,
    EVAL_INTERP,
    GAUSS,
    NOTRANSPOSE,
    STRIDES_BACKEND,
    TRANSPOSE,
    VECTOR_ACTIVE,
    VECTOR_NONE,
)
from .geometry import check_geometry, choose_geometry, geometry_costs
from .level_assembly import LevelAssembly
from .memory import chunk_ranges
from .multigrid import Hierarchy, RestrictedTransfer, coarse_orders, register_hierarchy
from .operator import Operator, SubOperator
from .qdata import build_operator
from .restriction import index_dtype
from .transfer import interpolation_matrix, level_transfers
from .typing import Array, ArrayLike

if TYPE_CHECKING:
    from .constants import QuadMode
    from .operator import CompositeOperator
    from .space import H1Space

# c of (c u, v) and (c grad u, grad v): a constant, or f(x) of points (n, dim) -> (n,)
Coefficient = float | Callable[[Array], Array] | None

__all__ = [
    "diffusion",
    "form_assembly",
    "form_quadrature",
    "form_space",
    "interpolation_hits",
    "mass",
    "multigrid_hierarchy",
    "resolve_geometry",
    "restrict_dofs",
]

_SPACES = weakref.WeakKeyDictionary()  # operator made by a form -> its H1Space
# operator made by a form -> the _form arguments after ``space``: what remakes it on another
# space (a multigrid level) and what its q-data is
_FORM_ARGS = weakref.WeakKeyDictionary()

# a device fills the levels' diagonals in chunks of this many times H1Space.CHUNK_POINTS
# points: each chunk costs the same launches and Python calls whatever its size (the q-data
# build, the coordinates' gather, a contraction per direction, the sum), and chunks sized
# for a host's caches leave those costs unamortized on a GPU
DEVICE_CHUNK_FACTOR = 4

_QDATA_SIZE = {"Mass": {1: 1, 2: 1, 3: 1}, "Poisson": {1: 1, 2: 3, 3: 6}}
# the pointwise matrix entries (a, b), a <= b, of each q-data value: the gallery's order
_QDATA_PAIRS = {
    "Mass": {1: [(0, 0)], 2: [(0, 0)], 3: [(0, 0)]},
    "Poisson": {
        1: [(0, 0)],
        2: [(0, 0), (1, 1), (0, 1)],
        3: [(0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1)],
    },
}


def form_quadrature(
    space: H1Space, form: str, q_extra: int | None = None, quad_mode: QuadMode = GAUSS
) -> dict[str, Any]:
    """The quadrature rule of ``form`` on ``space``, as keyword arguments of
    :meth:`H1Space.basis <hofem.H1Space.basis>`.

    Parameters
    ----------
    space : H1Space
    form : {"mass", "diffusion"}
    q_extra : int, optional
        Given, or on tensor cells: ``Q_1d = p + 1 + q_extra`` points of ``quad_mode``
        (default ``q_extra = 1``), on simplices the collapsed Gauss-Jacobi rule of
        the same degree ``2 (p + 1 + q_extra) - 1``.  ``None`` on simplices: the
        symmetric rule with the fewest points exact to the form's degree on affine
        cells, mass ``2p``, stiffness ``2p - 2``, plus ``dim (k - 1)`` on a curved mesh
        whose coordinate field (:meth:`H1Space.coordinate_space
        <hofem.H1Space.coordinate_space>`) has order ``k``.  The mass integrand
        ``u v det J`` has exactly that degree; the stiffness integrand
        ``grad u . adj J adj J^T grad v / det J`` is rational on curved cells and the
        ``det J`` degree is the usual allowance (MFEM's ``OrderW``).  A callable
        coefficient adds nothing: pass ``q_extra`` to over-integrate it.
    quad_mode : hf.GAUSS or hf.GAUSS_LOBATTO
        Tensor cells only.

    Returns
    -------
    dict
        ``{"q_extra": int, "quad_mode": ..., "q_degree": int or None}``.
    """
    if form not in ("mass", "diffusion"):
        raise ValueError(f"form must be 'mass' or 'diffusion', got {form!r}")
    if q_extra is not None or space.topology.is_tensor:
        q_extra = 1 if q_extra is None else q_extra
        return {"q_extra": q_extra, "quad_mode": quad_mode, "q_degree": None}
    p = space.order
    k = 1 if space.mesh.is_affine else min(space.mesh.geometry_order, p)
    degree = (2 * p if form == "mass" else 2 * p - 2) + space.dim * (k - 1)
    return {"q_extra": 1, "quad_mode": quad_mode, "q_degree": degree}


def _qdata(space, kind, basis, rule, coefficient):
    """Stored quadrature data (strided restriction, L-vector) of the form ``kind``.

    Built in chunks of cells (:meth:`H1Space.cell_chunks`) from the coordinate
    E-vectors of each chunk, so no coordinate L-vector or whole-mesh Jacobians
    exist at any time; only the q-data itself is allocated at full size.  The
    coordinates are those of :meth:`H1Space.coordinate_space` (the geometry's
    own order, e.g. the 8 vertices of a straight hex), which represent the
    same map as the space's ``(p + 1)^dim`` nodes with fewer values to
    interpolate, copy and differentiate.  The
    chunks hold whole blocks of the backend's layout (``r_q.lanes``), so each
    chunk's q-data, in its own build's layout, is a slice of the whole.
    """
    ceed, dim = space.ceed, space.dim
    size = _QDATA_SIZE[kind][dim]
    Q = basis.num_qpts
    r_q = ceed.StridedElemRestriction(
        space.num_elem, Q, size, space.num_elem * Q * size, STRIDES_BACKEND
    )
    coords, geo = _coordinate_basis(space, rule)
    qdata = ceed.xp.empty(space.num_elem * size * Q)  # (num_elem * size * Q,) r_q's layout
    builds = {}  # one set-up operator per chunk length (at most two)
    blocks = _CoordinateBlocks(coords)
    for a, b in space.cell_chunks(Q, r_q.lanes):
        if b - a not in builds:
            builds[b - a] = build_operator(coords, kind, geo, size, b - a)
        x = blocks.cells(a, b)  # (chunk * dim * P_x,)
        chunk = qdata[a * size * Q : b * size * Q]
        build = builds[b - a]
        build.apply(x, chunk)
        if coefficient is not None:  # through the chunk's E-vector (b - a, size, Q)
            r_chunk = build.output_fields[0].restriction
            e = r_chunk.apply(chunk) * _coefficient(coords, a, b, coefficient, geo)
            chunk[...] = r_chunk.apply(e, TRANSPOSE)
    return r_q, qdata


class _CoordinateBlocks:
    """Coordinate E-vectors of increasing cell ranges on the backend, interpolated and
    uploaded a block of at least :attr:`VALUES` values at a time (the q-data chunks
    are far smaller than that for low-order coordinates: one host pass and copy per
    block, not per chunk)."""

    VALUES = 1 << 22

    def __init__(self, coords):
        self.coords, self.start, self.stop, self.x = coords, 0, 0, None
        self.per_cell = coords.dim * coords.elem_size  # values per cell

    def cells(self, a, b):
        """``(b - a) * dim * P_x`` coordinates of cells ``a:b`` (``a`` at or after the
        last range's start), flat in the E-vector layout."""
        n = self.per_cell
        if not self.start <= a <= b <= self.stop:
            self.start = a
            self.stop = min(self.coords.num_elem, max(b, a + self.VALUES // n))
            x = self.coords.element_coordinates(self.start, self.stop)  # (cells, dim, P_x)
            self.x = self.coords.ceed.asarray(x.ravel())
        return self.x[(a - self.start) * n : (b - self.start) * n]


class _CoordinateGather:
    """Coordinate E-vectors of cell ranges gathered from a coordinate L-vector on the
    backend (the one an on-the-fly operator reads, ``"dx"``): one gather a range where
    the vector lives, no host interpolation and no upload (:class:`_CoordinateBlocks`)."""

    def __init__(self, coords, x_l):
        r = coords.restriction
        self.x_l, self.offsets = x_l, r.kept_offsets()  # (l_size,), (num_elem, P_x)
        xp, dtype = coords.ceed.xp, index_dtype(r.l_size)  # component j's entries: + j * stride
        xp = np if isinstance(self.offsets, np.ndarray) else xp
        self.comp = xp.arange(r.num_comp, dtype=dtype)[None, :, None] * dtype(r.component_stride)

    @staticmethod
    def usable(coords, x_l):
        """Whether ``x_l`` and ``coords``' kept offsets live in one memory (both on the
        device, or both on the host), so that the gather moves nothing."""
        if x_l is None:
            return False
        on_host = isinstance(coords.restriction.kept_offsets(), np.ndarray)
        return on_host == isinstance(x_l, np.ndarray)

    def cells(self, a, b):
        """``(b - a) * dim * P_x`` coordinates of cells ``a:b``, flat in the E-vector layout."""
        return self.x_l[self.offsets[a:b, None, :] + self.comp].ravel()  # (b - a, dim, P_x)


def _coefficient(space, a, b, coefficient, geo):
    """The coefficient on cells ``a:b``: a float, or ``(b - a, 1, Q)`` values at the points."""
    if not callable(coefficient):
        return float(coefficient)
    dim, Q = space.dim, geo.num_qpts
    e = space.ceed.asarray(space.element_coordinates(a, b))  # (b - a, dim, P)
    x = space.ceed.to_numpy(geo.apply(b - a, NOTRANSPOSE, EVAL_INTERP, e))  # (b - a, dim, Q)
    c = np.asarray(coefficient(x.transpose(0, 2, 1).reshape(-1, dim)), dtype=np.float64)
    if c.shape != ((b - a) * Q,):
        raise ValueError(
            f"coefficient(x) must return shape ({(b - a) * Q},) for points of shape "
            f"({(b - a) * Q}, {dim}), got {c.shape}"
        )
    return space.ceed.asarray(c.reshape(b - a, 1, Q))


def resolve_geometry(
    space: H1Space,
    form: str,
    coefficient: Coefficient = None,
    q_extra: int | None = None,
    quad_mode: QuadMode = GAUSS,
    geometry: str = "auto",
) -> str:
    """What ``geometry`` becomes for :func:`mass` / :func:`diffusion` with these arguments.

    Parameters
    ----------
    space : H1Space
    form : {"mass", "diffusion"}
    coefficient, q_extra, quad_mode, geometry
        As for :func:`mass`.

    Returns
    -------
    {"stored", "on_the_fly"}
    """
    rule = form_quadrature(space, form, q_extra, quad_mode)
    return _geometry(space, form, coefficient, rule, geometry)[0]


def _coordinate_basis(space, rule):
    """The coordinate space (:meth:`H1Space.coordinate_space`) and its ``dim``-component
    basis at the points of ``space.basis(**rule)`` (``rule`` from :func:`form_quadrature`)."""
    coords = space.coordinate_space()  # order min(geometry order, p)
    if rule["q_degree"] is not None:  # the rule depends on the degree only
        return coords, coords.basis(**rule)
    q_extra = rule["q_extra"] + space.order - coords.order
    return coords, coords.basis(q_extra=q_extra, quad_mode=rule["quad_mode"])


def _coordinate_field(space, rule):
    """:func:`_coordinate_basis`, but on a mesh whose cells are all affine
    (:attr:`~hofem.meshes.Mesh.is_affine`: parallelepipeds, straight simplices) the basis
    at the cell centre (:func:`~hofem.cell_center`), whose gradient, the Jacobian, is
    exact at every point and is evaluated once per element."""
    coords, geo = _coordinate_basis(space, rule)
    enough = geo.Q_1d >= geo.P_1d if geo.is_tensor else geo.num_qpts >= geo.num_nodes
    if space.mesh.is_affine and enough:
        geo = cell_center(geo)
    return coords, geo


def _geometry(space, form, coefficient, rule, geometry, basis=None):
    """The geometry the form uses, ``"stored"`` or ``"on_the_fly"`` (see
    :mod:`hofem.geometry`), and the :func:`_coordinate_field` it made to choose (None
    unless ``geometry`` is ``"auto"``), so that a caller building the form makes it once.

    ``basis``: the form's ``space.basis(**rule)`` where the caller has it.
    """
    check_geometry(geometry)
    if callable(coefficient):
        if geometry == "on_the_fly":
            raise ValueError(
                "geometry='on_the_fly' needs a constant coefficient (a callable coefficient is "
                "evaluated into stored quadrature data); use geometry='stored' or 'auto'"
            )
        return "stored", None
    if geometry != "auto":
        return geometry, None
    kind = "Mass" if form == "mass" else "Poisson"
    basis = space.basis(**rule) if basis is None else basis
    coordinates = _coordinate_field(space, rule)
    costs = geometry_costs(form, basis, _QDATA_SIZE[kind][space.dim], coordinates[1])
    return choose_geometry(geometry, space.ceed.resource, costs), coordinates


def _form(space, form, fields, coefficient, q_extra, quad_mode, geometry, reuse=None):
    """The form's operator; ``reuse``: another form's operator whose coordinate L-vector
    this one reads too where both have the same coordinate space (multigrid levels)."""
    ceed, dim = space.ceed, space.dim
    kind = "Mass" if form == "mass" else "Poisson"
    prefix = _vector_prefix(space)
    rule = form_quadrature(space, form, q_extra, quad_mode)
    basis = space.basis(**rule)
    used, coordinates = _geometry(space, form, coefficient, rule, geometry, basis)
    if used == "on_the_fly":
        scale = 1.0 if coefficient is None else float(coefficient)
        qf_name, qf_args = f"{kind}{dim}DApplyGeometry", {"scale": scale}
        op = ceed.Operator(ceed.QFunctionByName(prefix + qf_name, **qf_args))
        op.set_field(fields[0], space.restriction, basis, VECTOR_ACTIVE)
        coords, geo = coordinates or _coordinate_field(space, rule)
        op.set_field("dx", coords.restriction, geo, _coordinates(coords, reuse))
        op.set_field("weights", ELEMRESTRICTION_NONE, geo, VECTOR_NONE)
    else:
        qf_name, qf_args = ("MassApply" if form == "mass" else f"Poisson{dim}DApply"), {}
        r_q, qdata = _qdata(space, kind, basis, rule, coefficient)
        op = ceed.Operator(ceed.QFunctionByName(prefix + qf_name))
        op.set_field(fields[0], space.restriction, basis, VECTOR_ACTIVE)
        op.set_field("qdata", r_q, BASIS_NONE, qdata)
    op.set_field(fields[1], space.restriction, basis, VECTOR_ACTIVE)
    _SPACES[op] = space
    _FORM_ARGS[op] = (form, fields, coefficient, q_extra, quad_mode, geometry)
    op.diagonal_assembly = _form_diagonal(weakref.ref(op))
    if prefix:  # the vector forms apply the scalar form to each component
        op.component_operator = _component_form(weakref.ref(op), space, qf_name, qf_args, rule)
    return op


def _component_form(ref, space, qf_name, qf_args, rule):
    """``component_operator()`` of the multi-component form ``ref()`` on ``space``: the
    scalar form ``qf_name`` on one component's nodes, with the same passive fields (q-data or
    coordinates and weights, the same vectors), built at the first call and kept; each call
    gives it the form's current QFunction context (a coefficient set since)."""
    made = []

    def component_operator():
        op = ref()
        if not made:
            ceed = space.ceed
            scalar = ceed.Operator(ceed.QFunctionByName(qf_name, **qf_args))
            restriction, basis = space.make_restriction(1), space.basis(1, **rule)
            for field in op.qf.inputs + op.qf.outputs:
                bound = op.fields[field.name]
                if bound.is_active:
                    scalar.set_field(field.name, restriction, basis, VECTOR_ACTIVE)
                else:
                    r = bound.restriction or ELEMRESTRICTION_NONE
                    scalar.set_field(field.name, r, bound.basis or BASIS_NONE, bound.vector)
            made.append(scalar)
        made[0].qf.set_context(op.qf.context)
        return made[0]

    return component_operator


def _coordinates(coords, reuse):
    """``coords.coordinates``, or the same vector ``reuse`` (an operator of :func:`_form`)
    already reads."""
    space = None if reuse is None else _SPACES.get(reuse)
    if space is not None and space.coordinate_space() is coords:
        x = next((f.vector for f in reuse.input_fields if f.name == "dx"), None)
        if x is not None:
            return x
    return coords.coordinates


def _form_diagonal(ref):
    """``diagonal()`` of the form ``ref()`` from its q-data (:class:`LevelAssembly`), the
    operator held weakly: it holds the function."""

    def diagonal():
        return form_assembly(ref()).linear_assemble_diagonal()

    return diagonal


def form_assembly(op: Operator, matrix: bool = False) -> LevelAssembly:
    """The diagonal (and element matrices) of an operator made by :func:`mass` or
    :func:`diffusion`, from its own q-data (:class:`~hofem.level_assembly.LevelAssembly`,
    filled on first use).

    Parameters
    ----------
    op : Operator
        Made by a form (:func:`form_space` is not None).
    matrix : bool
        Also the element matrices, for ``linear_assemble()`` (a host CSR on the
        L-vector).

    Raises
    ------
    ValueError
        ``op`` not made by a form.
    """
    space = form_space(op)
    if space is None:
        raise ValueError(
            f"form_assembly needs an operator made by hofem.mass or hofem.diffusion, got {op!r}"
        )
    return _level_assemblies([op], [space], _FORM_ARGS[op], coarsest_matrix=matrix)[0]


def _vector_prefix(space):
    if space.num_comp == 1:
        return ""
    if space.num_comp == 3:
        return "Vector3"
    raise ValueError(f"gallery forms exist for num_comp 1 or 3, the space has {space.num_comp}")


def mass(
    space: H1Space,
    coefficient: Coefficient = None,
    q_extra: int | None = None,
    quad_mode: QuadMode = GAUSS,
    geometry: str = "auto",
) -> Operator:
    """Mass operator ``(c u, v)`` on ``space`` (scalar or 3-component).

    Parameters
    ----------
    space : H1Space
    coefficient : float or callable, optional
        ``c``; a callable takes points ``(n, dim)`` and returns ``(n,)``.
    q_extra, quad_mode
        Quadrature, :func:`form_quadrature` (default: ``q = p + 2`` Gauss on tensor
        cells, the fewest-point symmetric rule exact to ``2p`` on affine simplices;
        ``q_extra`` given: the over-integrating collapsed rule on simplices).
    geometry : {"auto", "stored", "on_the_fly"}
        ``"stored"``: ``w det J`` is computed once and stored per quadrature
        point (``num_elem * Q`` doubles); ``"on_the_fly"``: the apply
        recomputes it from the coordinate field (no q-data; needs a constant
        or no coefficient); ``"auto"``: the cheaper of the two on the backend
        by a byte/flop cost model (:func:`hofem.geometry.choose_geometry`;
        stored for a callable coefficient).  Both give the same operator to
        round-off.

    Returns
    -------
    Operator
        Square, ``space.num_dofs``.

    Raises
    ------
    ValueError
        ``geometry`` not one of the three; ``"on_the_fly"`` with a callable
        coefficient; a space with ``num_comp`` other than 1 or 3.
    """
    return _form(space, "mass", ("u", "v"), coefficient, q_extra, quad_mode, geometry)


def diffusion(
    space: H1Space,
    coefficient: Coefficient = None,
    q_extra: int | None = None,
    quad_mode: QuadMode = GAUSS,
    geometry: str = "auto",
) -> Operator:
    """Diffusion (stiffness) operator ``(c grad u, grad v)``; arguments as for :func:`mass`.

    Stored geometry keeps ``w det J J^{-1} J^{-T}`` per point (1, 3 or 6
    doubles in 1D, 2D, 3D); on the fly recomputes it at every apply.  On affine
    simplices the default rule is exact to degree ``2p - 2`` (:func:`form_quadrature`).
    """
    return _form(space, "diffusion", ("du", "dv"), coefficient, q_extra, quad_mode, geometry)


def restrict_dofs(op: Operator | CompositeOperator, free_dofs: ArrayLike | Array) -> SubOperator:
    """The operator on the free DOFs only (homogeneous Dirichlet conditions elsewhere).

    ``restrict_dofs(A, free)`` applies ``A[free][:, free]`` matrix-free: the
    input is scattered into a zero L-vector, ``A`` applied, the free entries
    kept. It works with :func:`hofem.cg`, ``as_linear_operator``,
    ``linear_assemble`` and ``linear_assemble_diagonal``.

    Parameters
    ----------
    op : Operator or CompositeOperator, square
    free_dofs : int array (n_free,)
        Sorted, unique L-vector indices (e.g. ``space.free_dofs()``).
    """
    return SubOperator(op, free_dofs)


def form_space(op: object) -> H1Space | None:
    """The :class:`~hofem.H1Space` :func:`mass` or :func:`diffusion` built ``op`` on, or None."""
    return _SPACES.get(op) if isinstance(op, Operator) else None


def multigrid_hierarchy(
    A: Operator | SubOperator, orders: Sequence[int] | None = None, galerkin: bool = False
) -> Hierarchy:
    """The p-multigrid levels of a form (or :func:`restrict_dofs` of one), for :func:`hofem.pmg`.

    Each coarser level is the same form on the space of the coarser order
    (:meth:`H1Space.with_order`), with that order's quadrature; with
    ``galerkin=True`` it is ``multigrid_level`` of the one above instead: the
    same QFunction and fine quadrature, the Galerkin product ``Pᵀ A P``.  On
    affine cells both are the same operator (each rule integrates the form
    exactly); the rediscretized one applies and assembles on fewer points.  The
    transfers are ``multigrid_level``'s.  A restricted operator's coarse levels
    keep free the coarse DOFs whose interpolation touches no constrained fine
    DOF: on a facet-wise Dirichlet boundary, exactly the coarse space's free DOFs.

    The levels' diagonals and the coarsest matrix (``Hierarchy.assembly``) come
    from the forms' pointwise matrices, their q-data, computed in chunks of cells
    and shared by the levels on the same quadrature
    (:class:`hofem.level_assembly.LevelAssembly`), all in one pass over the cells
    at the first use of any: the levels on one coordinate space share its coordinates.

    Parameters
    ----------
    A : Operator (from :func:`mass` / :func:`diffusion`) or SubOperator of one
    orders : sequence of int, optional
        See :func:`hofem.multigrid.coarse_orders`.
    galerkin : bool
        Coarse operators on the fine quadrature (``multigrid_level``).

    Returns
    -------
    hofem.multigrid.Hierarchy

    Raises
    ------
    ValueError
        ``A`` not made by a form; a bad schedule.
    """
    restricted = isinstance(A, SubOperator)
    op = A.op if restricted else A
    space = form_space(op)
    if space is None:
        raise ValueError(
            "pmg needs an operator made by hofem.mass or hofem.diffusion (or restrict_dofs of "
            f"one); got {op!r}, built otherwise: use op.multigrid_level to build levels yourself"
        )
    orders = coarse_orders(space.order, orders)
    args = _FORM_ARGS[op]
    levels, prolong, restrict, sources = [A], [], [], [space]
    fine_free = A.free_dofs if restricted else None
    for order in orders[1:]:
        coarse_space = space.with_order(order)
        if galerkin:
            coarse, P, R = op.multigrid_level(coarse_space.restriction)
        else:  # multigrid_level's transfers, not its coarse operator
            coarse = _form(coarse_space, *args, reuse=op)
            field = next(f for f in op.input_fields if f.is_active)
            P, R = level_transfers(coarse_space.restriction, field.restriction, field.basis, order)
        sources.append(sources[0] if galerkin else coarse_space)
        if restricted:
            free = _coarse_free(space, coarse_space, fine_free)
            P, R = RestrictedTransfer(P, fine_free, free), RestrictedTransfer(R, free, fine_free)
            levels.append(SubOperator(coarse, free))
            fine_free = levels[-1].free_dofs
        else:
            levels.append(coarse)
        prolong.append(P)
        restrict.append(R)
        op, space = coarse, coarse_space
    assembly = _level_assemblies(levels, sources, args)

    def coarse_solver():
        A_host, xp = assembly[-1].linear_assemble(), levels[-1].ceed.xp  # (n_c, n_c) CSR
        return lambda make: make(A_host, xp)

    # free coarse DOFs are those whose interpolation misses every constrained fine DOF
    return Hierarchy(
        levels, prolong, restrict, orders, coarse_solver, assembly=assembly, free_to_free=True
    )


def _level_assemblies(levels, sources, args, coarsest_matrix=True):
    """A :class:`LevelAssembly` per level (the coarsest's with its matrix), all filled on the
    first use of any by one pass over the cells (:func:`_fill_levels`): the q-data of each
    space in ``sources`` (the one each level's quadrature and geometry are of), chunk by
    chunk; levels of one space share its chunks, and spaces of one coordinate space share
    the coordinates of each block of cells."""
    form, _, coefficient, q_extra, quad_mode, _ = args
    # id(space) -> [space, weak references to the levels it fills, the coordinate L-vector
    # an on-the-fly level reads or None]; weak, since each level
    # holds the fill: a cycle would keep the element diagonals and matrices (E-vectors)
    # alive until the garbage collector's next pass, in device memory too
    out, targets = [], {}

    def fill():
        if targets:  # emptied once every level is filled
            _fill_levels(list(targets.values()), form, coefficient, q_extra, quad_mode)
            targets.clear()

    for k, (level, space) in enumerate(zip(levels, sources, strict=True)):
        sub = isinstance(level, SubOperator)
        field = next(f for f in _field_owner(level).input_fields if f.is_active)
        free = level.free_dofs if sub else None
        out.append(
            LevelAssembly(field.restriction, field.basis, field.eval_mode, free,
                          matrix=coarsest_matrix and k == len(levels) - 1, fill=fill)
        )  # fmt: skip
        target = targets.setdefault(id(space), [space, [], None])
        target[1].append(weakref.ref(out[-1]))
        if target[2] is None:  # an on-the-fly level's coordinates: the pass gathers from them
            target[2] = next((f.vector for f in _field_owner(level).input_fields
                              if f.name == "dx"), None)  # fmt: skip
    return out


def _field_owner(level):
    """The operator whose fields a level has: a :func:`restrict_dofs` level's wrapped one."""
    return level.op if isinstance(level, SubOperator) else level


def _fill_levels(targets, form, coefficient, q_extra, quad_mode):
    """Add the q-data of every ``(space, level references, coordinate L-vector or None)`` of
    ``targets`` to its levels.

    Each space's chunks of cells (of ``CHUNK_POINTS`` points of its quadrature, times
    :data:`DEVICE_CHUNK_FACTOR` on a device) are
    taken in the order of their first cell, all spaces' together, so that one coordinate
    block (:class:`_CoordinateBlocks`) per coordinate space serves the chunks of every
    space on it: the coordinates are interpolated and uploaded about once, not once per
    level.  Where a level reads its coordinate L-vector on the fly, each chunk's
    coordinates are gathered from that vector instead (:class:`_CoordinateGather`), where
    it lives.  The chunks are built one after the other into one buffer.
    """
    kind = "Mass" if form == "mass" else "Poisson"
    passes = []
    for space, refs, x_l in targets:
        levels = [level for level in (ref() for ref in refs) if level is not None]
        if levels:
            rule = form_quadrature(space, form, q_extra, quad_mode)
            passes.append(_PointwisePass(space, kind, rule, coefficient, levels, x_l))
    if not passes or not passes[0].space.num_elem:
        return
    points = passes[0].space.CHUNK_POINTS  # per chunk
    points *= 1 if passes[0].space.ceed.xp is np else DEVICE_CHUNK_FACTOR
    chunks = sorted(
        (a, k, b)
        for k, p in enumerate(passes)
        for a, b in chunk_ranges(p.space.num_elem, p.Q, points)
    )
    size = max((b - a) * passes[k].size * passes[k].Q for a, k, b in chunks)
    buffer = passes[0].space.ceed.xp.empty(size)  # (largest chunk's size * Q,)
    # a coordinate space's numbering and first cell (what its values are of) -> its blocks
    blocks = {}
    for a, k, b in chunks:
        chunk = passes[k]
        coords = chunk.coords
        key = (id(coords.numbering), coords.first_cell)
        if key not in blocks:
            usable = _CoordinateGather.usable(coords, chunk.x_l)
            blocks[key] = (
                _CoordinateGather(coords, chunk.x_l) if usable else _CoordinateBlocks(coords)
            )
        x = blocks[key].cells(a, b)  # (chunk * dim * P_x,)
        q = chunk.build(a, b, x, buffer)  # (b - a, size, Q)
        for level in chunk.levels:
            level.add(a, b, q, chunk.pairs)


class _PointwisePass:
    """The q-data of the form ``kind`` on ``space``'s quadrature ``rule``, the distinct entries
    of its symmetric pointwise matrix (:data:`_QDATA_PAIRS`), cells ``a:b`` at a time, and the
    levels it fills.

    Each chunk is built as :func:`_qdata` builds the stored q-data, in the layout
    ``(cells, size, Q)``, into the caller's buffer: no chunk outlives its use (fresh host
    memory costs a page fault per page at its first write).
    """

    def __init__(self, space, kind, rule, coefficient, levels, x_l=None):
        self.space, self.kind, self.coefficient, self.levels = space, kind, coefficient, levels
        self.x_l = x_l  # the coordinate L-vector of an on-the-fly level, or None
        self.size = _QDATA_SIZE[kind][space.dim]
        self.pairs = _QDATA_PAIRS[kind][space.dim]
        self.coords, self.geo = _coordinate_basis(space, rule)
        self.Q = self.geo.num_qpts
        self.builds = {}  # chunk length -> its set-up operator; at most two

    def build(self, a, b, x, buffer):
        """The q-data ``(b - a, size, Q)`` of cells ``a:b`` from their coordinates ``x``
        (flat E-vector), a view of ``buffer``."""
        size, Q = self.size, self.Q
        if b - a not in self.builds:
            self.builds[b - a] = build_operator(
                self.coords, self.kind, self.geo, size, b - a, (1, Q, Q * size)
            )
        q = buffer[: (b - a) * size * Q]  # (chunk * size * Q,)
        self.builds[b - a].apply(x, q)
        q = q.reshape(b - a, size, Q)
        if self.coefficient is not None:
            q *= _coefficient(self.coords, a, b, self.coefficient, self.geo)
        return q


def _coarse_free(fine, coarse, fine_free):
    """Free DOFs of ``coarse``: those whose interpolation at ``fine``'s nodes misses every
    constrained fine DOF (sorted, on the backend)."""
    xp = fine.ceed.xp
    constrained = xp.ones(fine.num_dofs, dtype=bool)  # (fine num_dofs,)
    constrained[fine_free] = False
    constrained = constrained.reshape(fine.num_comp, fine.num_nodes)
    f_off = fine.restriction.kept_offsets()  # (num_elem, P_f)
    c_off = coarse.restriction.kept_offsets()  # (num_elem, P_c)
    hit = interpolation_hits(fine, coarse.order, constrained, coarse.num_nodes, f_off, c_off)
    return xp.flatnonzero(~hit.ravel()).astype(index_dtype(coarse.num_dofs))


def interpolation_hits(
    fine: H1Space,
    order: int,
    flagged: Array,
    num_coarse_nodes: int,
    fine_offsets: Array,
    coarse_offsets: Array,
) -> Array:
    """The coarse nodes of order ``order`` whose interpolation at ``fine``'s nodes reaches a
    flagged fine node (cells in chunks, no whole-mesh temporary).

    A coarse node off a facet has a trace that vanishes on it, so its values at
    that facet's fine nodes are round-off; a node on a facet reaches some of them.
    Only the cells with a flagged node (a boundary layer) are interpolated.

    Parameters
    ----------
    fine : H1Space
    order : int
        The coarse order.
    flagged : bool array (num_comp, fine num_nodes)
        NumPy, or the backend's array type (then so are the offsets).
    num_coarse_nodes : int
    fine_offsets : int array (num_elem, P_f)
        ``fine``'s component-0 offsets.
    coarse_offsets : int array (num_elem, P_c)
        The coarse nodes of ``fine``'s cells, in ``fine``'s cell order.

    Returns
    -------
    bool array (num_comp, num_coarse_nodes), of ``flagged``'s array type
    """
    xp = np if isinstance(flagged, np.ndarray) else fine.ceed.xp
    weights = np.abs(interpolation_matrix(fine.topology, fine.order, order))  # (P_f, P_c)
    weights = xp.asarray(weights)
    hit = xp.zeros((flagged.shape[0], num_coarse_nodes), dtype=bool)
    # as the form set-up's chunks: larger on a device, where each chunk's few small
    # operations and its synchronizing nonzero cost more than its entries
    entries = (1 << 22) * (1 if xp is np else DEVICE_CHUNK_FACTOR)
    for a, b in chunk_ranges(fine.num_elem, fine.elem_size, entries):
        for c in range(flagged.shape[0]):
            cells = flagged[c][fine_offsets[a:b]]  # (b - a, P_f)
            near = xp.flatnonzero(cells.any(axis=1))  # cells with a flagged node
            touched = cells[near].astype(np.float64) @ weights  # (near, P_c)
            hit[c][coarse_offsets[a:b][near][touched > 1e-8]] = True
    return hit


register_hierarchy(Operator, multigrid_hierarchy)
