"""Regenerate the sample meshes in ``meshes/data``: ``python -m hofem.meshes.make_samples``.

- ``lshape_hex.msh``: hexahedra of the L-shaped prism ``([-1, 1]^2 minus
  (0, 1]^2) x [0, 1]``, Gmsh 4.1 ASCII, physical groups left/right/bottom/top
  (x, y = -1 / 1), front/back (z = 0 / 1) and reentrant (the faces x = 0, y = 0).
- ``curved_tet10.msh``: quadratic tetrahedra of a distorted unit cube, Gmsh 2.2
  ASCII, the box tags.
- ``quad9_box.vtu``: quadratic quadrilaterals of a distorted unit square, VTU.
- ``tri_box.vtk``: linear triangles of the unit square, legacy VTK ASCII.
"""

from pathlib import Path

import numpy as np

from .box import box
from .io import write
from .mesh import Mesh, boundary_facets

DATA = Path(__file__).parent / "data"


def lshape_hex(n: int = 4) -> Mesh:
    """Hexahedral mesh of the L-shaped prism with ``n`` cells per unit length in x, y."""
    full = box((2 * n, 2 * n, n), bounds=[(-1, 1), (-1, 1), (0, 1)])
    centers = full.points[full.cells].mean(axis=1)  # (num_cells, 3)
    kept = full.cells[~((centers[:, 0] > 0) & (centers[:, 1] > 0))]  # (num_kept, 8)
    vertices, cells = np.unique(kept, return_inverse=True)
    points = full.points[vertices]  # (num_points, 3)
    cells = cells.reshape(kept.shape)  # (num_kept, 8)
    facets = boundary_facets("hexahedron", cells)  # (num_facets, 4)
    x = points[facets]  # (num_facets, 4, 3)
    tags = np.full(len(facets), 7, dtype=np.int32)  # (num_facets,): reentrant by default
    for d, (lo, hi) in enumerate([(-1.0, 1.0), (-1.0, 1.0), (0.0, 1.0)]):
        tags[np.all(x[:, :, d] == lo, axis=1)] = 2 * d + 1
        tags[np.all(x[:, :, d] == hi, axis=1)] = 2 * d + 2
    names = {"left": 1, "right": 2, "bottom": 3, "top": 4, "front": 5, "back": 6, "reentrant": 7}
    return Mesh(points, "hexahedron", cells, facets, tags, names)


def main() -> None:
    """Write the sample meshes into ``DATA``."""
    DATA.mkdir(exist_ok=True)
    write(DATA / "lshape_hex.msh", lshape_hex(), file_format="gmsh", binary=False)
    curved = box(2, dim=3, simplex=True, order=2, distort=0.15)
    write(DATA / "curved_tet10.msh", curved, file_format="gmsh22", binary=False)
    write(DATA / "quad9_box.vtu", box(4, dim=2, order=2, distort=0.2))
    write(DATA / "tri_box.vtk", box(4, dim=2, simplex=True), binary=False)
    for path in sorted(DATA.iterdir()):
        print(f"{path.name}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
