"""Volume of one skewed hexahedron from a 3D mass operator of order 3 (no mesh module needed)."""

import numpy as np

import hofem as hf

ceed = hf.Ceed("/cpu/self")
p, q = 3, 5  # polynomial order, quadrature points per direction
P = p + 1  # nodes per direction
corners = np.array(
    [
        [0, 0, 0],
        [2, 0, 0],
        [0, 1, 0],
        [2, 1.5, 0],
        [0.3, 0, 1],
        [2.1, 0, 1.2],
        [0.2, 1, 1],
        [2.4, 1.4, 1.1],
    ]
)  # (8, 3)

# coordinates of the P^3 Gauss-Lobatto nodes: trilinear map of the corners
x1d, _ = hf.lobatto_quadrature(P)
t = (np.stack(np.meshgrid(x1d, x1d, x1d, indexing="ij")[::-1], -1).reshape(-1, 3) + 1) / 2
shape = np.prod(
    [np.where(np.arange(8)[:, None] >> d & 1, t[:, d], 1 - t[:, d]) for d in range(3)], axis=0
)  # (8, P^3): trilinear shape functions at the nodes
coords = (shape.T @ corners).T.ravel()  # (3 * P^3,), component-major

geo = ceed.BasisTensorH1Lagrange(3, 3, P, q, hf.GAUSS)  # coordinate field, 3 components
basis = ceed.BasisTensorH1Lagrange(3, 1, P, q, hf.GAUSS)
offsets = np.arange(P**3, dtype=np.int32).reshape(1, P**3)
r_x = ceed.ElemRestriction(1, P**3, 3, P**3, 3 * P**3, offsets)
r_u = ceed.ElemRestriction(1, P**3, 1, 1, P**3, offsets)
r_q = ceed.StridedElemRestriction(1, q**3, 1, q**3, hf.STRIDES_BACKEND)

build = ceed.Operator(ceed.QFunctionByName("Mass3DBuild"))
build.set_field("dx", r_x, geo, hf.VECTOR_ACTIVE)
build.set_field("weights", hf.ELEMRESTRICTION_NONE, geo, hf.VECTOR_NONE)
build.set_field("qdata", r_q, hf.BASIS_NONE, hf.VECTOR_ACTIVE)
qdata = build(ceed.asarray(coords))  # w det J at the q^3 points

mass = ceed.Operator(ceed.QFunctionByName("MassApply"))
mass.set_field("u", r_u, basis, hf.VECTOR_ACTIVE)
mass.set_field("qdata", r_q, hf.BASIS_NONE, qdata)
mass.set_field("v", r_u, basis, hf.VECTOR_ACTIVE)
ones = ceed.asarray(np.ones(P**3))
print(f"volume = {float(ones @ mass(ones)):.12f}")
