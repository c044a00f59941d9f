"""Operators of the algebra tests, assembled by hand from restrictions, bases and QFunctions.

The tests of the algebra layer (restrictions, bases, operators, backends)
build BP operators on an ``n^dim`` box without meshes, spaces or forms, as a
libCEED user would: nodes of order p are numbered lexicographically over the
whole box (x fastest).  Users and the benchmarks build operators through
:mod:`hofem.forms` instead.
"""

import numpy as np

import hofem as hf
from hofem.basis import cell_center
from hofem.geometry import choose_geometry, geometry_costs

__all__ = ["box_coordinates", "box_offsets", "box_operator"]


def box_offsets(n, p, dim=3):
    """Offsets of an ``n^dim`` grid of order ``p``, x fastest.

    Returns
    -------
    offsets : ndarray (n**dim, (p+1)**dim), int64
    num_nodes : int
        ``(n p + 1)**dim``.
    """
    side = n * p + 1
    local = np.arange(p + 1)
    elem = np.arange(n)
    ids = np.zeros([n] * dim + [p + 1] * dim, dtype=np.int64)  # (e_z, e_y, e_x, i_z, i_y, i_x)
    for d in range(dim):  # d = 0 is x: the last element axis and the last node axis
        e_shape = [1] * (2 * dim)
        e_shape[dim - 1 - d] = n
        n_shape = [1] * (2 * dim)
        n_shape[2 * dim - 1 - d] = p + 1
        ids = ids + (elem.reshape(e_shape) * p + local.reshape(n_shape)) * side**d
    return ids.reshape(n**dim, (p + 1) ** dim), side**dim


def box_coordinates(n, p, dim=3, warp=0.0):
    """Node coordinates ``(dim * num_nodes,)``, component-major, of the unit box.

    ``warp`` bends the interior smoothly (``x_d += warp (d+1)/dim prod sin(pi x)``),
    keeping the boundary fixed, so Jacobians vary from point to point.
    """
    nodes = (hf.lobatto_quadrature(p + 1)[0][:-1] + 1) / 2  # (p,) on [0, 1)
    x1d = np.concatenate([e + nodes for e in range(n)] + [[n]]) / n  # (n p + 1,)
    grids = np.meshgrid(*[x1d] * dim, indexing="ij")[::-1]  # x first
    x = np.stack([g.ravel() for g in grids])  # (dim, num_nodes)
    bump = np.prod(np.sin(np.pi * x), axis=0)  # (num_nodes,)
    x = x + warp * bump * np.arange(1, dim + 1)[:, None] / dim
    return x.ravel()


_FORMS = {
    "mass": ("Mass{dim}DBuild", "MassApply", ("u", "v")),
    "diffusion": ("Poisson{dim}DBuild", "Poisson{dim}DApply", ("du", "dv")),
}


def box_operator(ceed, form, n, p, dim=3, q=None, warp=0.0, quad_mode=hf.GAUSS, geometry="stored"):
    """Mass or diffusion operator on a structured ``n^dim`` box of order ``p``.

    Parameters
    ----------
    form : {"mass", "diffusion"}
    q : int, optional
        Quadrature points per direction (default ``p + 2``).
    geometry : {"stored", "on_the_fly", "auto"}
        As for :func:`hofem.mass`; on the fly, ``parts["build"]`` and
        ``parts["qdata"]`` are None, and the operator reads the coordinates of
        the box's vertices (``P_1d = 2``, through :func:`hofem.cell_center`:
        the cells are affine), or of the order-p nodes where ``warp`` bends the box.

    Returns
    -------
    op : Operator
        Square, ``num_nodes``; no boundary conditions.
    parts : dict
        ``build`` (the qdata setup operator), ``r_u``, ``r_q`` (restrictions),
        ``basis``, ``qdata`` (stored quadrature data L-vector), ``offsets``,
        ``num_nodes``, ``geometry`` (``"stored"`` or ``"on_the_fly"``) — for
        tests that look inside.
    """
    build_name, apply_name, (name_in, name_out) = _FORMS[form]
    q = p + 2 if q is None else q
    offsets, num_nodes = box_offsets(n, p, dim)
    num_elem, P = offsets.shape
    Q = q**dim
    qdata_size = 1 if form == "mass" else dim * (dim + 1) // 2
    r_u = ceed.ElemRestriction(num_elem, P, 1, 1, num_nodes, offsets)
    r_q = ceed.StridedElemRestriction(
        num_elem, Q, qdata_size, num_elem * Q * qdata_size, hf.STRIDES_BACKEND
    )
    basis = ceed.BasisTensorH1Lagrange(dim, 1, p + 1, q, quad_mode)
    p_x = p if warp else 1  # on the fly: the lowest order that carries the geometry
    geo_x = ceed.BasisTensorH1Lagrange(dim, dim, p_x + 1, q, quad_mode)
    if not warp:  # parallelepipeds: the Jacobian once per element
        geo_x = cell_center(geo_x)
    costs = geometry_costs(form, basis, qdata_size, geo_x)
    geometry = choose_geometry(geometry, ceed.resource, costs)
    build = qdata = None
    if geometry == "on_the_fly":
        kind = "Mass" if form == "mass" else "Poisson"
        x_offsets, x_nodes = box_offsets(n, p_x, dim)
        op = ceed.Operator(ceed.QFunctionByName(f"{kind}{dim}DApplyGeometry"))
        op.set_field(name_in, r_u, basis, hf.VECTOR_ACTIVE)
        r_x = ceed.ElemRestriction(
            num_elem, (p_x + 1) ** dim, dim, x_nodes, dim * x_nodes, x_offsets
        )
        op.set_field("dx", r_x, geo_x, ceed.asarray(box_coordinates(n, p_x, dim, warp)))
        op.set_field("weights", hf.ELEMRESTRICTION_NONE, geo_x, hf.VECTOR_NONE)
    else:
        x = ceed.asarray(box_coordinates(n, p, dim, warp))
        r_x = ceed.ElemRestriction(num_elem, P, dim, num_nodes, dim * num_nodes, offsets)
        geo = ceed.BasisTensorH1Lagrange(dim, dim, p + 1, q, quad_mode)  # the build's
        build = ceed.Operator(ceed.QFunctionByName(build_name.format(dim=dim)))
        build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
        build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
        build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
        qdata = build(x)
        op = ceed.Operator(ceed.QFunctionByName(apply_name.format(dim=dim)))
        op.set_field(name_in, r_u, basis, hf.VECTOR_ACTIVE)
        op.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
    op.set_field(name_out, r_u, basis, hf.VECTOR_ACTIVE)
    parts = {
        "build": build,
        "r_u": r_u,
        "r_q": r_q,
        "basis": basis,
        "qdata": qdata,
        "offsets": offsets,
        "num_nodes": num_nodes,
        "geometry": geometry,
    }
    return op, parts
