"""hofem: high-order finite-element operators applied matrix-free, libCEED-style.

The facade re-exports the libCEED layer (``Ceed`` and its objects, constants,
quadrature, solvers) and the discretization layer.
"""

from .backends import BackendUnavailable, available
from .basis import Basis, cell_center
from .ceed import Ceed
from .constants import *  # noqa: F403
from .constants import __all__ as _constants
from .forms import diffusion, form_quadrature, mass, resolve_geometry, restrict_dofs
from .multigrid import PMG, pmg
from .operator import CompositeOperator, Operator
from .qfunction import QFunction
from .quadrature import (
    gauss_quadrature,
    lobatto_quadrature,
    simplex_quadrature,
    symmetric_rule_degrees,
)
from .restriction import ElemRestriction
from .solvers import Jacobi, cg, jacobi
from .space import H1Space

__version__ = "0.1.0"

__all__ = [
    *_constants,
    "BackendUnavailable",
    "Basis",
    "Ceed",
    "H1Space",
    "CompositeOperator",
    "Jacobi",
    "ElemRestriction",
    "Operator",
    "PMG",
    "QFunction",
    "available",
    "cell_center",
    "cg",
    "diffusion",
    "form_quadrature",
    "gauss_quadrature",
    "jacobi",
    "lobatto_quadrature",
    "mass",
    "pmg",
    "resolve_geometry",
    "restrict_dofs",
    "simplex_quadrature",
    "symmetric_rule_degrees",
]
