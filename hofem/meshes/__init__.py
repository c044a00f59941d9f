"""Meshes for hofem: box generators, meshio I/O, continuous H1 node numbering.

Pure NumPy (+ meshio for files); imports nothing from the rest of hofem.
"""

from pathlib import Path

from .box import box, box_block
from .io import MeshFileError, read, write
from .mesh import Mesh, boundary_facets
from .numbering import H1Numbering, h1_numbering

__all__ = [
    "H1Numbering",
    "Mesh",
    "MeshFileError",
    "boundary_facets",
    "box",
    "box_block",
    "data_path",
    "h1_numbering",
    "read",
    "write",
]

_DATA = Path(__file__).parent / "data"


def data_path(name: str) -> Path:
    """Path of a sample mesh file shipped in ``hofem/meshes/data``.

    Raises
    ------
    FileNotFoundError
        No such sample; the message lists the available ones.
    """
    path = _DATA / name
    if not path.is_file():
        available = ", ".join(sorted(p.name for p in _DATA.iterdir() if p.is_file()))
        raise FileNotFoundError(f"no sample mesh {name!r} in {_DATA}; available: {available}")
    return path
