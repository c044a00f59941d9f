"""Enumerations and sentinels of the libCEED interface (``hf.EVAL_GRAD``, ``hf.HEX``, ...)."""

import enum

__all__ = [
    "BASIS_NONE",
    "ELEMRESTRICTION_NONE",
    "EVAL_GRAD",
    "EVAL_INTERP",
    "EVAL_NONE",
    "EVAL_WEIGHT",
    "GAUSS",
    "GAUSS_LOBATTO",
    "HEX",
    "LINE",
    "NOTRANSPOSE",
    "QUAD",
    "STRIDES_BACKEND",
    "TET",
    "TRANSPOSE",
    "TRIANGLE",
    "VECTOR_ACTIVE",
    "VECTOR_NONE",
    "EvalMode",
    "QuadMode",
    "Topology",
    "TransposeMode",
]


class EvalMode(enum.Enum):
    """What a basis computes at quadrature points (libCEED's ``CeedEvalMode``)."""

    NONE = "none"
    INTERP = "interp"
    GRAD = "grad"
    WEIGHT = "weight"


class TransposeMode(enum.Enum):
    """Direction of a restriction or basis action (libCEED's ``CeedTransposeMode``)."""

    NOTRANSPOSE = "notranspose"
    TRANSPOSE = "transpose"


class QuadMode(enum.Enum):
    """1D quadrature family of a tensor Lagrange basis (libCEED's ``CeedQuadMode``)."""

    GAUSS = "gauss"
    GAUSS_LOBATTO = "gauss_lobatto"


class Topology(enum.Enum):
    """Reference element shape: ``value`` is ``(name, dim, tensor)``.

    Tensor shapes live on ``[-1, 1]^dim``; simplices on the unit simplex with
    vertices ``0, e_1, ..., e_dim``.
    """

    LINE = ("line", 1, True)
    TRIANGLE = ("triangle", 2, False)
    QUAD = ("quad", 2, True)
    TET = ("tet", 3, False)
    HEX = ("hex", 3, True)

    @property
    def dim(self) -> int:
        return self.value[1]

    @property
    def is_tensor(self) -> bool:
        return self.value[2]


class _Sentinel:
    """A named marker object (``VECTOR_ACTIVE`` and friends)."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"hofem.{self._name}"


EVAL_NONE = EvalMode.NONE
EVAL_INTERP = EvalMode.INTERP
EVAL_GRAD = EvalMode.GRAD
EVAL_WEIGHT = EvalMode.WEIGHT
NOTRANSPOSE = TransposeMode.NOTRANSPOSE
TRANSPOSE = TransposeMode.TRANSPOSE
GAUSS = QuadMode.GAUSS
GAUSS_LOBATTO = QuadMode.GAUSS_LOBATTO
LINE = Topology.LINE
TRIANGLE = Topology.TRIANGLE
QUAD = Topology.QUAD
TET = Topology.TET
HEX = Topology.HEX

VECTOR_ACTIVE = _Sentinel("VECTOR_ACTIVE")
VECTOR_NONE = _Sentinel("VECTOR_NONE")
BASIS_NONE = _Sentinel("BASIS_NONE")
ELEMRESTRICTION_NONE = _Sentinel("ELEMRESTRICTION_NONE")
STRIDES_BACKEND = _Sentinel("STRIDES_BACKEND")
