"""
Poisson on a Gmsh mesh of a ball
================================

A curved, unstructured tetrahedral mesh of the unit ball made with the Gmsh
Python API, read through meshio, solved, written to VTU for ParaView, and
looked at on the slice :math:`z = 0`.

The problem: :math:`-\\Delta u = 1` in the ball, :math:`u = 0` on the sphere.
Its solution is :math:`u = (1 - r^2) / 6`, a quadratic, so an order-2 space
holds it exactly: what error remains comes from the mesh, whose quadratic
(``tetra10``) cells only approximate the sphere.

Needs ``pip install gmsh meshio`` (the ``docs`` extra has both). The gmsh
wheel links the system's ``libGLU``, ``libXcursor``, ``libXft`` and
``libXinerama`` even when run headless (Debian:
``apt-get install libglu1-mesa libxcursor1 libxft2 libxinerama1``).
"""

import tempfile
from pathlib import Path

import gmsh
import matplotlib.pyplot as plt
import numpy as np
from scipy.interpolate import LinearNDInterpolator

import hofem as hf
from hofem import meshes

workdir = Path(tempfile.mkdtemp())

# %%
# The mesh, with Gmsh
# -------------------
# OpenCASCADE's sphere, meshed with cells of size about 0.3 and raised to
# order 2, so the cells bend to the sphere. Physical groups name what the
# file keeps: the volume cells and the boundary surface ("sphere"), which
# hofem reads as a tagged facet set.

gmsh.initialize(interruptible=False)
gmsh.option.setNumber("General.Terminal", 0)
gmsh.model.add("ball")
gmsh.model.occ.addSphere(0, 0, 0, 1)
gmsh.model.occ.synchronize()
gmsh.model.addPhysicalGroup(3, [1], name="ball")
gmsh.model.addPhysicalGroup(2, [1], name="sphere")
gmsh.option.setNumber("Mesh.MeshSizeMax", 0.3)
gmsh.model.mesh.generate(3)
gmsh.model.mesh.setOrder(2)
gmsh.write(str(workdir / "ball.msh"))
gmsh.finalize()

# %%
# Read it through meshio
# ----------------------
# :func:`hofem.meshes.read` keeps the quadratic geometry and the facet tags.

mesh = meshes.read(workdir / "ball.msh")
print(mesh)
print("boundary tags:", mesh.tag_names)

# %%
# Solve
# -----
# An order-2 space on the curved mesh; every boundary node is Dirichlet.

ceed = hf.Ceed("/cpu/self/ref")
space = hf.H1Space(ceed, mesh, order=2)
free = ceed.asarray(space.free_dofs("sphere"))
A = hf.restrict_dofs(hf.diffusion(space), free)
b = space.load_vector(lambda x: np.ones(len(x)))[free]
x, info = hf.cg(A, b, rtol=1e-10, M=hf.jacobi(A))
u = ceed.xp.zeros(space.num_dofs)
u[free] = x


def exact(x):
    return (1 - (x**2).sum(axis=1)) / 6


l2 = space.errors(u, exact)
print(f"{space.num_dofs} DOFs, CG: {info.iterations} iterations, L2 error {l2:.1e}")
assert info == 0 and l2 < 1e-3

# %%
# Write it for ParaView
# ---------------------
# :func:`hofem.meshes.write` stores the mesh with vertex values (the
# vertices are the first nodes of the space's numbering). Open
# ``ball_u.vtu`` in ParaView and add a *Slice* or *Clip* filter.

values = ceed.to_numpy(u)
meshes.write(workdir / "ball_u.vtu", mesh, point_data={"u": values[: mesh.num_points]})
print("wrote", (workdir / "ball_u.vtu").name, f"({(workdir / 'ball_u.vtu').stat().st_size} bytes)")

# %%
# The slice z = 0
# ---------------
# Interpolate the nodal values (vertices and edge midpoints) linearly onto a
# grid of the equatorial disc, and compare with the exact solution along
# the x axis.

nodes = space.node_coordinates()  # (num_nodes, 3)
slice_at = LinearNDInterpolator(nodes, values)
t = np.linspace(-1, 1, 161)
X, Y = np.meshgrid(t, t)
inside = X**2 + Y**2 < 0.98**2
U = np.where(inside, slice_at(X, Y, np.zeros_like(X)), np.nan)

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4.2))
image = ax0.contourf(X, Y, U, levels=16, cmap="magma")
ax0.set_aspect("equal")
ax0.set_title("u on the slice z = 0")
fig.colorbar(image, ax=ax0)
ax1.plot(t, exact(np.stack([t, 0 * t, 0 * t], axis=1)), "k-", label="exact (1 - r²)/6")
ax1.plot(t, slice_at(t, 0 * t, 0 * t), "--", label="hofem, p = 2")
ax1.set_xlabel("x (y = z = 0)")
ax1.legend()
fig.tight_layout()
