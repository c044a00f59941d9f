"""QFunction bodies traced into straight-line code, for the code-generating backends.

The Python body ``f(ctx, *inputs, *outputs)`` is called once with symbolic
fields: reading ``u[i]`` yields an expression, arithmetic and NumPy ufuncs build
straight-line code (one local per intermediate), and ``v[i] = expr`` records a
store.  A body that branches on values, calls a function that is not a known
ufunc or otherwise escapes tracing raises :class:`Untraceable`; the caller then
runs it some other way.  The statements are written in a *dialect*:
:data:`CPP` (CUDA kernels) or :data:`PYTHON` (Numba kernels).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .qfunction import QFunction

__all__ = ["CPP", "PYTHON", "Untraceable", "trace_body"]


class Dialect:
    """How a traced statement is spelled.

    Parameters
    ----------
    local : str
        Format of a local definition, ``{name}`` and ``{code}``.
    store : str
        Format of a store, ``{target}`` and ``{code}``.
    ufuncs : dict
        NumPy ufunc name -> format of its call on ``{}`` operands.
    number : callable
        ``float`` -> literal.
    """

    def __init__(self, local, store, ufuncs, number):
        self.local, self.store, self.ufuncs, self.number = local, store, ufuncs, number


CPP = Dialect(
    "const double {name} = {code};",
    "{target} = {code};",
    {
        "add": "({} + {})",
        "subtract": "({} - {})",
        "multiply": "({} * {})",
        "true_divide": "({} / {})",
        "divide": "({} / {})",
        "negative": "(-{})",
        "positive": "(+{})",
        "power": "pow({}, {})",
        "sqrt": "sqrt({})",
        "cbrt": "cbrt({})",
        "exp": "exp({})",
        "log": "log({})",
        "sin": "sin({})",
        "cos": "cos({})",
        "tan": "tan({})",
        "arctan": "atan({})",
        "absolute": "fabs({})",
        "fabs": "fabs({})",
        "minimum": "fmin({}, {})",
        "maximum": "fmax({}, {})",
    },
    repr,
)


def _python_number(value):
    return repr(value) if math.isfinite(value) else f"float({str(value)!r})"


# the generated module imports math and numpy as np
PYTHON = Dialect(
    "{name} = {code}",
    "{target} = {code}",
    {
        **{k: v for k, v in CPP.ufuncs.items() if v.startswith("(")},
        "power": "({} ** {})",
        "sqrt": "math.sqrt({})",
        "cbrt": "np.cbrt({})",
        "exp": "math.exp({})",
        "log": "math.log({})",
        "sin": "math.sin({})",
        "cos": "math.cos({})",
        "tan": "math.tan({})",
        "arctan": "math.atan({})",
        "absolute": "abs({})",
        "fabs": "abs({})",
        "minimum": "min({}, {})",
        "maximum": "max({}, {})",
    },
    _python_number,
)


class Untraceable(Exception):
    """The body cannot be traced into straight-line code."""


class _Trace:
    def __init__(self, dialect):
        self.dialect = dialect
        self.lines = []  # (statement,) in program order

    def local(self, code):
        name = f"t{len(self.lines)}"
        self.lines.append(self.dialect.local.format(name=name, code=code))
        return _Expr(self, name)

    def code(self, value):
        if isinstance(value, _Expr):
            return value.name
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise Untraceable(f"unsupported operand {type(value).__name__}")
        return self.dialect.number(float(value))


class _Expr:
    """A double-valued local of the traced code."""

    def __init__(self, trace, name):
        self.trace = trace
        self.name = name

    def _apply(self, ufunc, *args):
        fmt = self.trace.dialect.ufuncs[ufunc]
        return self.trace.local(fmt.format(*(self.trace.code(a) for a in args)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc.__name__ not in self.trace.dialect.ufuncs:
            raise Untraceable(f"ufunc {ufunc.__name__}.{method}")
        return self._apply(ufunc.__name__, *inputs)

    def __neg__(self):
        return self._apply("negative", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._apply("fabs", self)

    def __bool__(self):
        raise Untraceable("branching on a point value")

    def __float__(self):
        raise Untraceable("converting a point value to a Python float")


def _binary(ufunc, reflected):
    if reflected:
        return lambda self, other: self._apply(ufunc, other, self)
    return lambda self, other: self._apply(ufunc, self, other)


for _name, _ufunc in (
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "true_divide"),
    ("pow", "power"),
):
    setattr(_Expr, f"__{_name}__", _binary(_ufunc, False))
    setattr(_Expr, f"__r{_name}__", _binary(_ufunc, True))


class _Field:
    """Symbolic ``(size, Q)`` field: ``f[i]`` reads row i, ``f[i] = e`` stores it."""

    def __init__(self, trace, name, size, load=None):
        self.trace, self.name, self.size, self.load = trace, name, size, load
        self.writable = load is None
        self.rows = {}  # row -> _Expr last stored (outputs) or loaded (inputs)

    def _row(self, i):
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise Untraceable(f"field {self.name} indexed with {type(i).__name__}")
        if not -self.size <= i < self.size:
            raise Untraceable(f"field {self.name} row {i} out of range")
        return int(i) % self.size

    def __getitem__(self, i):
        row = self._row(i)
        if row not in self.rows:
            if self.writable:  # outputs start at zero
                return _Expr(self.trace, "0.0")
            self.rows[row] = self.trace.local(self.load(row))
        return self.rows[row]

    def __setitem__(self, i, value):
        if not self.writable:
            raise Untraceable(f"input field {self.name} written")
        self.rows[self._row(i)] = _Expr(self.trace, self.trace.code(value))


class _Context:
    """Symbolic context: float fields read ``load(name)``, other fields their values."""

    def __init__(self, trace, context, load):
        self.trace, self.context, self.load = trace, context, load

    def __getitem__(self, name):
        value = self.context[name]
        if not isinstance(value, np.floating):
            return value
        return _Expr(self.trace, self.load(name))


def trace_body(
    qf: QFunction,
    load: Callable[[int, int], str],
    store: Callable[[int, int], str],
    dialect: Dialect = CPP,
    context_load: Callable[[str], str] | None = None,
    zero_unwritten: bool = False,
) -> list[str]:
    """Straight-line statements computing ``qf``'s body at one point.

    Parameters
    ----------
    qf : QFunction
    load : callable
        ``load(k, row)`` -> expression (double) reading row ``row`` of input ``k``.
    store : callable
        ``store(k, row)`` -> lvalue of row ``row`` of output ``k``.  Rows the
        body never writes are not stored (the caller zeroes them) unless
        ``zero_unwritten``.
    dialect : Dialect
        :data:`CPP` or :data:`PYTHON`.
    context_load : callable, optional
        ``context_load(name)`` -> expression reading the float context field
        ``name``; its other (integer, bool) fields are read at trace time.
        Without it the whole context is baked in as constants.
    zero_unwritten : bool
        Also store 0 in the rows the body never writes, so the caller's outputs
        need no zero fill.

    Returns
    -------
    list of str
        The statements, in program order.

    Raises
    ------
    Untraceable
        The body branches on values, calls an unknown function, or uses array-only
        operations.
    """
    key = _trace_key(qf, dialect, context_load is not None, zero_unwritten)
    if key is None:
        return _trace(qf, load, store, dialect, context_load, zero_unwritten)
    recorded = _RECORDED.get(key)
    if recorded is None:
        recorded = _Recorded(qf, dialect, context_load is not None, zero_unwritten)
        if len(_RECORDED) >= _RECORDED_MAX:  # the oldest goes
            del _RECORDED[next(iter(_RECORDED))]
        _RECORDED[key] = recorded
    return recorded.replay(load, store, context_load)


def _trace(qf, load, store, dialect, context_load, zero_unwritten):
    """:func:`trace_body`, traced now."""
    trace = _Trace(dialect)
    inputs = [
        _Field(trace, f"in{k}", f.size, functools.partial(load, k)) for k, f in enumerate(qf.inputs)
    ]
    outputs = [_Field(trace, f"out{k}", f.size) for k, f in enumerate(qf.outputs)]
    context = qf.context
    if context_load is not None and context is not None:
        context = _Context(trace, context, context_load)
    try:
        qf.func(context, *inputs, *outputs)
    except Untraceable:
        raise
    except Exception as exc:  # anything array-only (reshape, slicing, ...) in the body
        raise Untraceable(f"{type(exc).__name__}: {exc}") from exc
    stores = [
        dialect.store.format(
            target=store(k, row), code=field.rows[row].name if row in field.rows else "0.0"
        )
        for k, field in enumerate(outputs)
        for row in range(field.size)
        if row in field.rows or zero_unwritten
    ]
    return trace.lines + stores


# the traces of the gallery's bodies (what each trace depends on: _trace_key) -> _Recorded;
# every new operator of a gallery QFunction (each multigrid level, transfer, set-up
# operator) is traced again otherwise
_RECORDED: dict[tuple, _Recorded] = {}
_RECORDED_MAX = 128
_GALLERY_MODULE = "hofem.qfunctions."
_MARK = "\x00"  # around a recorded call's index in the lines; in no dialect's code


def _trace_key(qf, dialect, context_load, zero_unwritten):
    """What a trace of ``qf`` depends on besides the callables' strings, or None where it
    may depend on more: a body outside the gallery might read state other than its context
    (the gallery's bodies are functions of the context and the fields alone)."""
    if not getattr(qf.func, "__module__", "").startswith(_GALLERY_MODULE):
        return None
    context = qf.context
    values = None if context is None else (context.dtype, context.tobytes())
    sizes = tuple(f.size for f in qf.inputs), tuple(f.size for f in qf.outputs)
    return qf.func, sizes, values, dialect, context_load, zero_unwritten


class _Recorded:
    """A trace made once with marked strings for the loads, stores and context loads: each
    call's index between two ``_MARK``; :meth:`replay` makes the calls again, in the same
    order, and puts their strings in.  The statements are those a trace made with the
    callables gives: the body sees the strings only as names to write."""

    def __init__(self, qf, dialect, context_load, zero_unwritten):
        self.calls = []  # (kind, arguments) in the order the trace made them

        def marked(kind):
            def call(*args):
                self.calls.append((kind, args))
                return f"{_MARK}{len(self.calls) - 1}{_MARK}"

            return call

        ctx_load = marked("context") if context_load else None
        lines = _trace(qf, marked("load"), marked("store"), dialect, ctx_load, zero_unwritten)
        # each line split at the marks: text, call index, text, ...
        self.lines = [line.split(_MARK) for line in lines]

    def replay(self, load, store, context_load):
        """The statements for these callables."""
        fns = {"load": load, "store": store, "context": context_load}
        strings = [fns[kind](*args) for kind, args in self.calls]
        return [
            "".join(strings[int(part)] if j % 2 else part for j, part in enumerate(parts))
            for parts in self.lines
        ]
