"""Type aliases of hofem's public API; the ground layer, importing nothing of hofem.

Annotations give the array library and dtype; the shapes are in each
docstring (``(num_elem, num_comp, elem_size)``, ...), since ``npt.NDArray``
does not carry them.

- :data:`Array`: an array of a backend's array module (``Ceed.xp``): a
  ``numpy.ndarray`` on the CPU backends, a ``cupy.ndarray`` on the CUDA ones.
  It is ``Any``: CuPy is an optional extra, and naming its type would import
  it (or leave a name that type checkers without CuPy cannot resolve).
- :data:`FloatArray`, :data:`IndexArray`, :data:`BoolArray`: host NumPy arrays
  of float64, of any integer type, of bools.
- :data:`ArrayLike`: anything ``numpy.asarray`` takes (lists, NumPy arrays).
- :data:`Tags`: facet tags or tag names of a mesh (``Mesh.tag_names``), one or
  several; None for the whole boundary.
- :class:`CeedLike`: what restrictions, bases, QFunctions and operators use of the
  :class:`hofem.Ceed` that made them (its backend, array module and conversions);
  typed as a protocol so that those layers need not import the ``Ceed`` above them.
- :data:`BasisLike`, :data:`OperatorLike`, :data:`FieldLike`, :data:`RestrictionLike`,
  :data:`QFunctionLike`: a :class:`hofem.Basis`, :class:`hofem.Operator` (and one of its
  fields), :class:`hofem.ElemRestriction`, :class:`hofem.QFunction` as a backend receives
  them; ``Any``, since no backend imports the interface objects it serves (design
  contract), not even for its annotations.
- :data:`SparseMatrix`, :data:`LinearOperator`: SciPy's (CPU backends) or
  CuPy's (``cupyx.scipy.sparse``, CUDA backends) CSR matrix and
  ``LinearOperator``; ``Any`` for the reason :data:`Array` is.
"""

from collections.abc import Iterable
from types import ModuleType
from typing import Any, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = [
    "Array",
    "ArrayLike",
    "BasisLike",
    "BoolArray",
    "CeedLike",
    "FieldLike",
    "FloatArray",
    "IndexArray",
    "LinearOperator",
    "OperatorLike",
    "QFunctionLike",
    "RestrictionLike",
    "SparseMatrix",
    "Tags",
]

#: numpy.ndarray or cupy.ndarray: an array of the backend's array module (``Ceed.xp``).
Array: TypeAlias = Any
#: A host float64 array.
FloatArray: TypeAlias = npt.NDArray[np.float64]
#: A host array of any integer type (int32 or int64 indices).
IndexArray: TypeAlias = npt.NDArray[np.integer]
#: A host bool array.
BoolArray: TypeAlias = npt.NDArray[np.bool_]
#: A hofem.Basis, as a backend receives it.
BasisLike: TypeAlias = Any
#: A hofem.Operator, as a backend receives it.
OperatorLike: TypeAlias = Any
#: A field of a hofem.Operator (OperatorField), as a backend receives it.
FieldLike: TypeAlias = Any
#: A hofem.ElemRestriction, as a backend receives it.
RestrictionLike: TypeAlias = Any
#: A hofem.QFunction, as a backend receives it.
QFunctionLike: TypeAlias = Any
#: Anything ``numpy.asarray`` takes.
ArrayLike: TypeAlias = npt.ArrayLike
#: scipy.sparse.csr_matrix or cupyx.scipy.sparse.csr_matrix.
SparseMatrix: TypeAlias = Any
#: scipy.sparse.linalg.LinearOperator or cupyx.scipy.sparse.linalg.LinearOperator.
LinearOperator: TypeAlias = Any
#: Facet tags or tag names (``Mesh.tag_names``), one or several; None: the whole boundary.
Tags: TypeAlias = int | str | Iterable[int | str] | None


class CeedLike(Protocol):
    """The face of a :class:`hofem.Ceed` that the objects it creates use."""

    backend: Any  # the resolved backend (hofem.backends.contract.Backend)

    @property
    def resource(self) -> str: ...

    @property
    def xp(self) -> ModuleType: ...

    def asarray(self, x: Any, dtype: Any = None) -> Any: ...

    def to_numpy(self, x: Any) -> np.ndarray: ...
