"""QFunction D: pointwise physics at quadrature points, written in Python."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from .constants import EVAL_WEIGHT, EvalMode
from .typing import Array, CeedLike

__all__ = ["QFunction", "QFunctionField", "make_context"]


class QFunctionField(NamedTuple):
    """One QFunction field: its name, rows of its Q-vector, and eval mode."""

    name: str
    size: int
    eval_mode: EvalMode


# A field as the user gives it: (name, size, eval_mode)
FieldSpec = tuple[str, int, EvalMode]


def make_context(context: Any) -> np.void | None:
    """Canonical QFunction context: a NumPy structured scalar (``np.void``) or None.

    A dict of scalars becomes a record with float64 fields (int64 for Python
    ints, bool for bools), readable as ``ctx["name"]`` in NumPy, CuPy and Numba
    code alike.

    Raises
    ------
    TypeError
        Not a dict, structured scalar/array of one element, or None; or a dict
        value that is not a real scalar.
    """
    if context is None:
        return None
    if isinstance(context, np.void) and context.dtype.names:
        return context
    if isinstance(context, np.ndarray) and context.dtype.names and context.size == 1:
        return context.reshape(())[()]
    if not isinstance(context, dict):
        raise TypeError(
            "context must be a dict of scalars or a NumPy structured scalar, got "
            f"{type(context).__name__}"
        )
    fields = []
    for key, value in context.items():
        if isinstance(value, (bool, np.bool_)):
            fields.append((key, np.bool_))
        elif isinstance(value, (int, np.integer)):
            fields.append((key, np.int64))
        elif isinstance(value, (float, np.floating)):
            fields.append((key, np.float64))
        else:
            raise TypeError(
                f"context[{key!r}] must be a real scalar (bool, int or float), got "
                f"{type(value).__name__}"
            )
    record = np.zeros((), dtype=fields)
    for key, value in context.items():
        record[key] = value
    return record[()]


def _fields(specs, what):
    fields = []
    for spec in specs:
        try:
            name, size, eval_mode = spec
        except (TypeError, ValueError):
            raise ValueError(
                f"each {what} field must be (name, size, eval_mode), got {spec!r}"
            ) from None
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{what} field name must be an identifier string, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"{what} field {name!r}: size must be an integer >= 1, got {size!r}")
        if not isinstance(eval_mode, EvalMode):
            raise ValueError(
                f"{what} field {name!r}: eval_mode must be an hf.EVAL_*, got {eval_mode!r}"
            )
        if eval_mode is EVAL_WEIGHT and (what == "output" or size != 1):
            raise ValueError(f"{what} field {name!r}: EVAL_WEIGHT is an input of size 1 only")
        fields.append(QFunctionField(name, int(size), eval_mode))
    return fields


class QFunction:
    """Pointwise function ``func(ctx, *inputs, *outputs)`` at quadrature points.

    Create through :meth:`hofem.Ceed.QFunction` or
    :meth:`hofem.Ceed.QFunctionByName`.

    The body must run both vectorized, on ``(size, Q)`` arrays (NumPy or
    CuPy), and pointwise, on ``(size,)`` arrays inside compiled code (Numba
    on the CPU): use indexing, arithmetic and ``math``/NumPy ufuncs only, and
    write outputs with ``out[i] = ...``.

    Parameters
    ----------
    ceed : hofem.Ceed
    func : callable
    inputs, outputs : list of (name, size, eval_mode)
        ``size`` is the number of rows of the field: ``num_comp`` for
        EVAL_INTERP/EVAL_NONE, ``dim * num_comp`` for EVAL_GRAD (ordered
        ``[dim][comp]``), 1 for EVAL_WEIGHT.
    context : dict of scalars, NumPy structured scalar, or None
        Passed as ``ctx``; read it as ``ctx["name"]``.

    Raises
    ------
    TypeError, ValueError
        ``func`` not callable, malformed fields, duplicate names, bad context.
    """

    def __init__(
        self,
        ceed: CeedLike,
        func: Callable[..., None],
        inputs: Iterable[FieldSpec],
        outputs: Iterable[FieldSpec],
        context: Any = None,
        name: str | None = None,
    ) -> None:
        if not callable(func):
            raise TypeError(f"func must be callable, got {type(func).__name__}")
        self.ceed = ceed
        self.func = func
        self.name = name or getattr(func, "__name__", "qfunction")
        self.inputs = _fields(inputs, "input")
        self.outputs = _fields(outputs, "output")
        if not self.outputs:
            raise ValueError("a QFunction needs at least one output field")
        names = [f.name for f in self.inputs + self.outputs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"QFunction field names must be unique; repeated: {duplicates}")
        self.context = make_context(context)

    def set_context(self, context: Any) -> None:
        """Replace the context (same rules as the constructor)."""
        self.context = make_context(context)

    def field(self, name: str) -> QFunctionField:
        """The input or output field called ``name`` (ValueError if none)."""
        for f in self.inputs + self.outputs:
            if f.name == name:
                return f
        raise ValueError(
            f"QFunction {self.name!r} has no field {name!r}; fields: "
            f"{[f.name for f in self.inputs + self.outputs]}"
        )

    def _check(self, inputs, outputs):
        if len(inputs) != len(self.inputs) or len(outputs) != len(self.outputs):
            raise ValueError(
                f"QFunction {self.name!r} takes {len(self.inputs)} inputs and "
                f"{len(self.outputs)} outputs, got {len(inputs)} and {len(outputs)}"
            )
        num_qpts = None
        arrays = list(inputs) + list(outputs)
        for field, array in zip(self.inputs + self.outputs, arrays, strict=True):
            self.ceed.backend.check_vector(array, field.name, None)
            if array.ndim != 2 or array.shape[0] != field.size:
                raise ValueError(
                    f"field {field.name!r} must have shape ({field.size}, Q), got {array.shape}"
                )
            if num_qpts is None:
                num_qpts = array.shape[1]
            elif array.shape[1] != num_qpts:
                raise ValueError(
                    f"field {field.name!r} has {array.shape[1]} points, the others {num_qpts}"
                )

    def apply(self, inputs: Sequence[Array], outputs: Sequence[Array]) -> None:
        """Run the body vectorized over all points.

        Parameters
        ----------
        inputs, outputs : sequence of arrays, each ``(size, Q)`` float64
            In field order; outputs are written in place.
        """
        self._check(inputs, outputs)
        self.func(self.context, *inputs, *outputs)

    def apply_pointwise(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Run the body once per point on ``(size,)`` views (slow; for testing).

        Same arguments as :meth:`apply`; host (NumPy) arrays only.
        """
        self._check(inputs, outputs)
        num_qpts = (list(inputs) + list(outputs))[0].shape[1]
        for q in range(num_qpts):
            self.func(self.context, *[a[:, q] for a in inputs], *[a[:, q] for a in outputs])

    def __repr__(self) -> str:
        fmt = ", ".join
        return (
            f"QFunction({self.name}, inputs=[{fmt(f.name for f in self.inputs)}], "
            f"outputs=[{fmt(f.name for f in self.outputs)}])"
        )
