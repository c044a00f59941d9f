"""Stored q-data or geometry on the fly: the ``geometry=`` of :func:`hofem.mass`, ``diffusion``.

``"stored"`` runs the build QFunction once and stores ``w det J`` (mass) or
``w det J J^{-1} J^{-T}`` (Poisson, 3 values in 2D, 6 in 3D) at every
quadrature point; the apply reads them.  ``"on_the_fly"`` builds an apply
operator that also takes the coordinate field (GRAD) and the quadrature
weights and recomputes them at every point (``*ApplyGeometry`` gallery
QFunctions).  ``"auto"`` asks :func:`choose_geometry`.

Cost model (per element and apply; ``P``, ``Q`` nodes and points per
element, ``size`` stored values per point):

- saved bytes: the q-data read, ``8 size Q``;
- added bytes: the coordinate nodes and their indices, about
  ``dim (8 (P_1d - 1)^dim + 4 P)`` (nodes are shared by neighbours);
- added flops: the coordinate gradient at the points, ``dim`` components of
  :func:`grad_flops`, plus the pointwise determinant / adjugate
  (:data:`POINT_FLOPS` per point).

On the fly wins when ``flops < balance (saved - added)``, with ``balance``
the flops the backend executes in the time it reads one byte
(:data:`MACHINE_BALANCE`, by resolved resource).  Backends that are not in
the table (``/cpu/self/ref``, ``/gpu/cuda/ref``, ``/gpu/cuda/batched``)
form the coordinate gradient as a Q-vector in memory (``dim^2`` values per
point, more than the ``size`` stored ones), so on the fly never saves
bytes there: ``auto`` keeps stored q-data.
"""

__all__ = [
    "GEOMETRY_MODES",
    "MACHINE_BALANCE",
    "POINT_FLOPS",
    "check_geometry",
    "choose_geometry",
    "geometry_costs",
    "grad_flops",
]

GEOMETRY_MODES = ("stored", "on_the_fly", "auto")
# Effective flops per byte of memory traffic, by resolved resource:
# /cpu/self/numba: the register-tiled contractions run at 12-15 GFLOP/s on one core of the
#   reference machine against about 10-12 GB/s of streamed q-data per core; measured
#   (compare-cpu, docs/performance.md) on the fly ran at 0.6-0.8x of stored for BP3 and
#   0.2-0.35x for BP1, and 1 keeps stored q-data there at every p = 1..8.
# /gpu/cuda/gen: measured on the H100 (bench-gpu --cases operator, BP3, 4e6 DOFs, 2026-11-23):
#   on the fly ran at 0.42x (p = 4: 3.2 against 7.7 GDOF/s) and 0.37x (p = 6: 4.1 against
#   11.2) of stored, where this model's flops / saved bytes are 7.9 and 12.1: the fused
#   kernel's coordinate gradients (3 more components) are not free, and the effective
#   balance is below 3. 2 keeps stored q-data for BP3 at every p = 1..8 (the ratio is 3.0 at
#   p = 1, 4.4 at p = 2); on the fly stays available to save the q-data memory.
MACHINE_BALANCE = {"/cpu/self/numba": 1.0, "/gpu/cuda/gen": 2.0}
# pointwise flops of recomputing the geometry, by dim (mass: det; Poisson: adjugate, det, b^T b)
POINT_FLOPS = {"mass": {1: 1, 2: 4, 3: 15}, "diffusion": {1: 2, 2: 14, 3: 60}}


def check_geometry(geometry):
    """Raise ValueError unless ``geometry`` is one of :data:`GEOMETRY_MODES`."""
    if geometry not in GEOMETRY_MODES:
        raise ValueError(
            f"geometry must be one of {', '.join(map(repr, GEOMETRY_MODES))}, got {geometry!r}"
        )


def grad_flops(dim, num_comp, P_1d, Q_1d):
    """Flops of the gradient at the points of ``num_comp`` components of a tensor basis.

    Sum factorization with shared prefixes (what the fused backends run):
    along axis ``k`` there are ``min(k + 2, dim)`` contractions of
    ``2 num_comp P_1d^(dim - k) Q_1d^(k + 1)`` flops.
    """
    return sum(
        min(k + 2, dim) * 2 * num_comp * P_1d ** (dim - k) * Q_1d ** (k + 1) for k in range(dim)
    )


def geometry_costs(form, basis, qdata_size):
    """Bytes saved and flops added per element by recomputing the geometry.

    Parameters
    ----------
    form : {"mass", "diffusion"}
    basis : Basis
        The solution basis (tensor or not); the coordinates use the same nodes.
    qdata_size : int
        Stored values per point.

    Returns
    -------
    dict
        ``saved_bytes``, ``added_bytes``, ``added_flops`` (floats, per element).
    """
    dim, P, Q = basis.dim, basis.num_nodes, basis.num_qpts
    if basis.is_tensor:
        flops = grad_flops(dim, dim, basis.P_1d, basis.Q_1d)
        unique_nodes = (basis.P_1d - 1) ** dim
    else:
        flops = 2 * dim * dim * P * Q
        unique_nodes = P / 6  # tets share each vertex among many elements
    return {
        "saved_bytes": 8.0 * qdata_size * Q,
        "added_bytes": dim * (8.0 * unique_nodes + 4.0 * P),
        "added_flops": float(flops + POINT_FLOPS[form][dim] * Q),
    }


def choose_geometry(geometry, resource, costs):
    """``"stored"`` or ``"on_the_fly"`` for a requested ``geometry``.

    Parameters
    ----------
    geometry : {"stored", "on_the_fly", "auto"}
    resource : str
        The backend's resolved resource (``ceed.resource``).
    costs : dict
        From :func:`geometry_costs`.
    """
    check_geometry(geometry)
    if geometry != "auto":
        return geometry
    balance = MACHINE_BALANCE.get(resource, 0.0)
    saved = costs["saved_bytes"] - costs["added_bytes"]
    return "on_the_fly" if costs["added_flops"] < balance * saved else "stored"
