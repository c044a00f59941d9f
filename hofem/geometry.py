"""Stored q-data or geometry on the fly: the ``geometry=`` of :func:`hofem.mass`, ``diffusion``.

``"stored"`` runs the build QFunction once and stores ``w det J`` (mass) or
``w det J J^{-1} J^{-T}`` (Poisson, 3 values in 2D, 6 in 3D) at every
quadrature point; the apply reads them.  ``"on_the_fly"`` builds an apply
operator that also takes the coordinate field (GRAD) and the quadrature
weights and recomputes them at every point, or once per element on affine
cells (``*ApplyGeometry`` gallery QFunctions).  The coordinate field is that of
:meth:`hofem.H1Space.coordinate_space`: the lowest order that carries the
geometry exactly, the mesh's vertices (``P_1d = 2``) on straight-sided
cells.  ``"auto"`` asks :func:`choose_geometry`.

Cost model (per element and apply; ``P``, ``Q`` nodes and points per
element, ``size`` stored values per point):

- saved bytes: the q-data read, ``8 size Q``;
- added bytes: the coordinate nodes and their indices, about
  ``dim (8 (P_1d - 1)^dim + 4 P)`` (nodes are shared by neighbours);
- added flops: the coordinate gradient at the points, ``dim`` components of
  :func:`grad_flops`, plus the pointwise determinant / adjugate
  (:data:`POINT_FLOPS` per point).  On affine cells the coordinate basis is
  :func:`hofem.cell_center`'s, evaluated once per element: the gradient
  at one point, and per point only what the stored q-data's apply does not
  do (:data:`AFFINE_POINT_FLOPS`).

On the fly wins when ``flops < balance (saved - added)``, with ``balance``
the flops the backend executes in the time it reads one byte
(:data:`MACHINE_BALANCE`, by resolved resource: the backends that recompute the
geometry inside their operator kernels; ``/gpu/cuda/gen``'s is 0, it measured
no faster on the fly in any case, its kernels are not bound by the q-data
bytes).  Where a backend's kernel layout rather than its bytes decides, :data:`ON_THE_FLY_SHAPES`
comes first: ``/gpu/cuda/gen`` recomputes the Jacobian of affine cells at the solution
shapes where it runs BP3 one warp per element on the tensor cores, whatever its balance.
Backends that are not in the table (``/cpu/self/ref``,
``/gpu/cuda/ref``, ``/gpu/cuda/batched``) form the coordinate gradient as a
Q-vector in memory (``dim^2`` values per point, more than the ``size``
stored ones), so on the fly never saves bytes there: ``auto`` keeps stored
q-data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import tuning

if TYPE_CHECKING:
    from .basis import Basis

__all__ = [
    "AFFINE_POINT_FLOPS",
    "GEOMETRY_MODES",
    "MACHINE_BALANCE",
    "ON_THE_FLY_SHAPES",
    "ON_THE_FLY_SIMPLEX_SHAPES",
    "POINT_FLOPS",
    "check_geometry",
    "choose_geometry",
    "geometry_costs",
    "grad_flops",
]

GEOMETRY_MODES = ("stored", "on_the_fly", "auto")
_TUNING = tuning.geometry()  # geometry.json: the numbers, with the runs that measured them
# Effective flops per byte of memory traffic, by resolved resource, fitted to measurements
# of on the fly (vertex coordinates, P_1d = 2) against stored q-data, where this model's
# flops / (saved - added) bytes for BP3 are 3.0 at p = 1, then 2.6 (p = 2) down to 2.2 (p = 8),
# and 7.5-24 for BP1.  /cpu/self/numba's sits just below BP3's ratios: it reads the stored
# q-data in place as vectors, and on the fly ties with it at best, so auto keeps stored
# q-data at every p (on the fly still saves the q-data memory when asked for).
# /gpu/cuda/gen's is 0: its fused kernels are bound by shared-memory passes and
# synchronizations, not by the q-data bytes, and the recomputed geometry costs registers.
MACHINE_BALANCE = _TUNING.machine_balance
# Solution shapes (dim, P_1d, Q_1d) where "auto" recomputes the Jacobian of affine cells
# (cell-constant coordinates, hofem.cell_center) whatever the balance, by resolved resource and
# form: where the kernel's layout, not its bytes, makes on the fly the faster choice.
# /gpu/cuda/gen runs the Poisson operator one warp per element on the tensor cores at these
# shapes with the geometry on the fly (operator_warp.WARP_GRAD_SHAPES), and the mass operator
# one warp per element with the Jacobian as a cell input (operator_warp.WARP_CELL_SHAPES):
# there the recomputed geometry fits the layout's registers, and it saves the q-data reads.
# BP1 keeps its one stored value per point at p <= 4, where on the fly measured slower
ON_THE_FLY_SHAPES = _TUNING.on_the_fly_shapes
# The same for simplex bases, by (dim, P, Q) nodes and points per element: /gpu/cuda/gen's
# tensor-core simplex kernel holds the vertices and one Jacobian per element in registers
# and saves the q-data reads where its products leave the rest of the time to memory
ON_THE_FLY_SIMPLEX_SHAPES = _TUNING.on_the_fly_simplex_shapes
# Multiply-adds per element a resource's element-matrix form of the mass operator (one
# product with B^T W B, scaled per element, on non-tensor bases with cell-constant geometry:
# hofem.backends.element_matrix) must save over B and B^T for "auto" to recompute the
# Jacobian: that form needs it, and saves more than the q-data bytes
ELEMENT_MATRIX_SAVINGS = _TUNING.element_matrix_savings
# pointwise flops of recomputing the geometry, by dim (mass: det; Poisson: adjugate, det and
# the 3 or 6 values scale / det (b^T b)_ij, then the weight's products with du; the apply's
# own multiply-adds are the stored path's too)
POINT_FLOPS = {"mass": {1: 1, 2: 4, 3: 15}, "diffusion": {1: 2, 2: 18, 3: 72}}
# ... on affine cells, where the Jacobian's functions are the element's (hoisted out of the
# point loop): Poisson in 2D and 3D, the weight's products with du (hofem.qfunctions.geometry
# writes the cell's part first).  Forms that store one value per point (mass;
# Poisson in 1D) count 16, the cost of the one stored value at MACHINE_BALANCE: the numba
# kernel reads that value in place while it computes (it copies larger q-data first), and on
# the fly measured slower than stored for BP1, so auto keeps them stored
AFFINE_POINT_FLOPS = {"mass": {1: 16, 2: 16, 3: 16}, "diffusion": {1: 16, 2: 2, 3: 3}}


def check_geometry(geometry: str) -> None:
    """Raise ValueError unless ``geometry`` is one of :data:`GEOMETRY_MODES`."""
    if geometry not in GEOMETRY_MODES:
        raise ValueError(
            f"geometry must be one of {', '.join(map(repr, GEOMETRY_MODES))}, got {geometry!r}"
        )


def grad_flops(dim: int, num_comp: int, P_1d: int, Q_1d: int) -> int:
    """Flops of the gradient at the points of ``num_comp`` components of a tensor basis.

    Sum factorization with shared prefixes (what the fused backends run):
    along axis ``k`` there are ``min(k + 2, dim)`` contractions of
    ``2 num_comp P_1d^(dim - k) Q_1d^(k + 1)`` flops.
    """
    return sum(
        min(k + 2, dim) * 2 * num_comp * P_1d ** (dim - k) * Q_1d ** (k + 1) for k in range(dim)
    )


def geometry_costs(
    form: str, basis: Basis, qdata_size: int, coordinates: Basis | None = None
) -> dict[str, Any]:
    """Bytes saved and flops added per element by recomputing the geometry.

    Parameters
    ----------
    form : {"mass", "diffusion"}
    basis : Basis
        The solution basis (tensor or not).
    qdata_size : int
        Stored values per point.
    coordinates : Basis, optional
        The coordinate field's basis, on the same points
        (:meth:`hofem.H1Space.coordinate_space`: ``P_1d = 2`` on straight-sided
        hexes); default: ``basis`` itself (coordinates on the solution's nodes).

    Returns
    -------
    dict
        ``saved_bytes``, ``added_bytes``, ``added_flops`` (floats, per element); ``form``;
        ``shape``, the solution basis's ``(dim, P_1d, Q_1d)`` (None if not a tensor
        basis); ``simplex_shape``, its ``(dim, P, Q)`` if not a tensor basis (else None);
        ``cell_constant``, whether the coordinates are evaluated once per element;
        ``element_matrix_savings``, the multiply-adds ``num_comp (2 P Q - P^2)`` of B and
        B^T over one product with B^T W B (0 for a tensor basis).
    """
    geo = basis if coordinates is None else coordinates
    dim, P, Q = basis.dim, geo.num_nodes, basis.num_qpts
    shape = (dim, basis.P_1d, basis.Q_1d) if basis.is_tensor else None
    simplex_shape = None if basis.is_tensor else (dim, basis.num_nodes, Q)
    layout = {"form": form, "shape": shape, "simplex_shape": simplex_shape}
    layout["cell_constant"] = geo.is_cell_constant
    nodes = basis.num_nodes
    layout["element_matrix_savings"] = (
        0.0 if basis.is_tensor else float(basis.num_comp * (2 * nodes * Q - nodes * nodes))
    )
    # coordinate nodes per element: tets share each vertex among many elements
    unique_nodes = (geo.P_1d - 1) ** dim if geo.is_tensor else P / 6
    if geo.is_cell_constant:  # once per element
        return layout | {
            "saved_bytes": 8.0 * qdata_size * Q,
            "added_bytes": dim * (8.0 * unique_nodes + 4.0 * P),
            "added_flops": float(2 * dim * dim * P + AFFINE_POINT_FLOPS[form][dim] * Q),
        }
    if geo.is_tensor:
        flops = grad_flops(dim, dim, geo.P_1d, geo.Q_1d)
    else:
        flops = 2 * dim * dim * P * Q
    return layout | {
        "saved_bytes": 8.0 * qdata_size * Q,
        "added_bytes": dim * (8.0 * unique_nodes + 4.0 * P),
        "added_flops": float(flops + POINT_FLOPS[form][dim] * Q),
    }


def choose_geometry(geometry: str, resource: str, costs: dict[str, Any]) -> str:
    """``"stored"`` or ``"on_the_fly"`` for a requested ``geometry``.

    Parameters
    ----------
    geometry : {"stored", "on_the_fly", "auto"}
    resource : str
        The backend's resolved resource (``ceed.resource``).
    costs : dict
        From :func:`geometry_costs`.

    Returns
    -------
    {"stored", "on_the_fly"}
        ``geometry`` unless ``"auto"``; then ``"on_the_fly"`` for cell-constant coordinates
        at a shape of :data:`ON_THE_FLY_SHAPES` (or :data:`ON_THE_FLY_SIMPLEX_SHAPES`), or for
        a mass form whose element-matrix form saves at least :data:`ELEMENT_MATRIX_SAVINGS`,
        else by the balance of :data:`MACHINE_BALANCE`.
    """
    check_geometry(geometry)
    if geometry != "auto":
        return geometry
    shapes = ON_THE_FLY_SHAPES.get(resource, {}).get(costs["form"], ())
    simplex = ON_THE_FLY_SIMPLEX_SHAPES.get(resource, {}).get(costs["form"], ())
    if costs["cell_constant"] and (costs["shape"] in shapes or costs["simplex_shape"] in simplex):
        return "on_the_fly"
    least = ELEMENT_MATRIX_SAVINGS.get(resource)
    mass = costs["form"] == "mass" and costs["cell_constant"]
    if mass and least is not None and costs["element_matrix_savings"] >= least:
        return "on_the_fly"
    balance = MACHINE_BALANCE.get(resource, 0.0)
    saved = costs["saved_bytes"] - costs["added_bytes"]
    return "on_the_fly" if costs["added_flops"] < balance * saved else "stored"
