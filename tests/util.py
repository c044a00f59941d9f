"""Small structured-grid builders for the algebra tests (no mesh module)."""

import numpy as np

import hofem as hf


def grid_offsets(n, p, dim):
    """Offsets (n**dim, (p+1)**dim) of a structured tensor grid of order p, x fastest."""
    side = n * p + 1
    local = np.arange(p + 1)
    elem = np.arange(n)
    ids = np.zeros([n] * dim + [p + 1] * dim, dtype=np.int64)
    for d in range(dim):  # d = 0 is x: the last element axis and the last node axis
        e_shape = [1] * (2 * dim)
        e_shape[dim - 1 - d] = n
        n_shape = [1] * (2 * dim)
        n_shape[2 * dim - 1 - d] = p + 1
        ids = ids + (elem.reshape(e_shape) * p + local.reshape(n_shape)) * side**d
    return ids.reshape(n**dim, (p + 1) ** dim), side**dim


def grid_coords(n, p, dim, warp=0.0):
    """Node coordinates (dim * num_nodes,), component-major, of the [0,1]^dim grid.

    ``warp`` bends the interior smoothly (boundary fixed) so Jacobians vary.
    """
    x1d = (
        np.concatenate(
            [e + (hf.lobatto_quadrature(p + 1)[0][:-1] + 1) / 2 for e in range(n)] + [[n]]
        )
        / n
    )
    grids = np.meshgrid(*[x1d] * dim, indexing="ij")[::-1]  # x first
    x = np.stack([g.ravel() for g in grids])  # (dim, num_nodes)
    bump = np.prod(np.sin(np.pi * x), axis=0)
    x = x + warp * bump * np.roll(np.arange(1, dim + 1), 0)[:, None] / dim
    return x.ravel()


def setup_qdata(ceed, n, p, q, dim, build_name, qdata_size, warp=0.0, quad=hf.GAUSS):
    """Restrictions, bases and qdata of a grid for a gallery build QFunction."""
    offsets, num_nodes = grid_offsets(n, p, dim)
    num_elem, P = offsets.shape
    r_x = ceed.ElemRestriction(num_elem, P, dim, num_nodes, dim * num_nodes, offsets)
    r_u = ceed.ElemRestriction(num_elem, P, 1, 1, num_nodes, offsets)
    geo = ceed.BasisTensorH1Lagrange(dim, dim, p + 1, q, quad)
    basis = ceed.BasisTensorH1Lagrange(dim, 1, p + 1, q, quad)
    Q = q**dim
    r_q = ceed.StridedElemRestriction(
        num_elem, Q, qdata_size, num_elem * Q * qdata_size, hf.STRIDES_BACKEND
    )
    build = ceed.Operator(ceed.QFunctionByName(build_name))
    build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
    build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
    build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
    qdata = build(ceed.asarray(grid_coords(n, p, dim, warp)))
    return {
        "r_u": r_u,
        "r_q": r_q,
        "basis": basis,
        "qdata": qdata,
        "offsets": offsets,
        "num_nodes": num_nodes,
    }


def mass_operator(ceed, n=2, p=2, dim=3, warp=0.0, q=None):
    s = setup_qdata(ceed, n, p, q or p + 2, dim, f"Mass{dim}DBuild", 1, warp)
    op = ceed.Operator(ceed.QFunctionByName("MassApply"))
    op.set_field("u", s["r_u"], s["basis"], hf.VECTOR_ACTIVE)
    op.set_field("qdata", s["r_q"], hf.BASIS_NONE, s["qdata"])
    op.set_field("v", s["r_u"], s["basis"], hf.VECTOR_ACTIVE)
    return op, s


def poisson_operator(ceed, n=2, p=2, dim=3, warp=0.0, q=None):
    s = setup_qdata(ceed, n, p, q or p + 2, dim, f"Poisson{dim}DBuild", dim * (dim + 1) // 2, warp)
    op = ceed.Operator(ceed.QFunctionByName(f"Poisson{dim}DApply"))
    op.set_field("du", s["r_u"], s["basis"], hf.VECTOR_ACTIVE)
    op.set_field("qdata", s["r_q"], hf.BASIS_NONE, s["qdata"])
    op.set_field("dv", s["r_u"], s["basis"], hf.VECTOR_ACTIVE)
    return op, s
