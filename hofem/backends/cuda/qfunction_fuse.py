"""QFunction bodies fused into one CUDA kernel by tracing them with symbolic arrays.

The Python body ``f(ctx, *inputs, *outputs)`` is called once with symbolic
fields: reading ``u[i]`` yields an expression, arithmetic and NumPy ufuncs build
straight-line code (one local per intermediate), and ``v[i] = expr`` records a
store.  The context is read at trace time and baked in as constants.  The
result is a grid-stride kernel over the points, compiled once per (body,
context, layouts) by NVRTC.  A body that branches on values, calls a function
that is not a known ufunc or otherwise escapes tracing raises
:class:`Untraceable`; the caller then runs it vectorized instead.

Each field is addressed as ``row * row_stride + (j / Q) * elem_stride + j % Q``
for point ``j``, so an input may be a Q-vector ``(size, E*Q)`` (strides ``(n,
Q)``) or an E-vector ``(E, size, Q)`` (strides ``(Q, size*Q)``) read in place.
"""

import functools

import numpy as np

from .ref import cupy

__all__ = ["Untraceable", "fused_kernel", "trace_body"]

_UFUNCS = {
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
}


class Untraceable(Exception):
    """The body cannot be traced into straight-line code."""


class _Trace:
    def __init__(self):
        self.lines = []  # (statement,) in program order

    def local(self, code):
        name = f"t{len(self.lines)}"
        self.lines.append(f"const double {name} = {code};")
        return _Expr(self, name)


def _code(value):
    if isinstance(value, _Expr):
        return value.name
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise Untraceable(f"unsupported operand {type(value).__name__}")
    return repr(float(value))


class _Expr:
    """A double-valued local of the traced kernel."""

    def __init__(self, trace, name):
        self.trace = trace
        self.name = name

    def _apply(self, fmt, *args):
        return self.trace.local(fmt.format(*(_code(a) for a in args)))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs or ufunc.__name__ not in _UFUNCS:
            raise Untraceable(f"ufunc {ufunc.__name__}.{method}")
        return self._apply(_UFUNCS[ufunc.__name__], *inputs)

    def __neg__(self):
        return self._apply("(-{})", self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self._apply("fabs({})", self)

    def __bool__(self):
        raise Untraceable("branching on a point value")

    def __float__(self):
        raise Untraceable("converting a point value to a Python float")


def _binary(fmt, reflected):
    if reflected:
        return lambda self, other: self._apply(fmt, other, self)
    return lambda self, other: self._apply(fmt, self, other)


for _name, _ufunc in (
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "true_divide"),
    ("pow", "power"),
):
    setattr(_Expr, f"__{_name}__", _binary(_UFUNCS[_ufunc], False))
    setattr(_Expr, f"__r{_name}__", _binary(_UFUNCS[_ufunc], True))


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
        self.rows[self._row(i)] = _Expr(self.trace, _code(value))


def trace_body(qf, load, store):
    """Straight-line C++ statements computing ``qf``'s body at one point.

    Parameters
    ----------
    qf : QFunction
    load : callable
        ``load(k, row)`` -> C++ expression (double) reading row ``row`` of input ``k``.
    store : callable
        ``store(k, row)`` -> C++ lvalue of row ``row`` of output ``k``.  Rows the
        body never writes are not stored: the caller zeroes them.

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
    trace = _Trace()
    inputs = [
        _Field(trace, f"in{k}", f.size, functools.partial(load, k)) for k, f in enumerate(qf.inputs)
    ]
    outputs = [_Field(trace, f"out{k}", f.size) for k, f in enumerate(qf.outputs)]
    try:
        qf.func(qf.context, *inputs, *outputs)
    except Untraceable:
        raise
    except Exception as exc:  # anything array-only (reshape, slicing, ...) in the body
        raise Untraceable(f"{type(exc).__name__}: {exc}") from exc
    stores = [
        f"{store(k, row)} = {expr.name};"
        for k, field in enumerate(outputs)
        for row, expr in sorted(field.rows.items())
    ]
    return trace.lines + stores


def _address(name, row):
    return f"{name}[{row} * {name}_rs + (j / NUM_QPTS) * {name}_es + j % NUM_QPTS]"


@functools.cache
def _compile(body, num_inputs, num_outputs, num_qpts):
    params = ["const long long n"]
    for k in range(num_inputs):
        params.append(f"const double *__restrict__ in{k}, const long long in{k}_rs")
        params.append(f"const long long in{k}_es")
    for k in range(num_outputs):
        params.append(f"double *__restrict__ out{k}, const long long out{k}_rs")
        params.append(f"const long long out{k}_es")
    code = (
        f"#define NUM_QPTS {num_qpts}LL\n"
        f'extern "C" __global__ void qfunction({", ".join(params)}) {{\n'
        "  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;\n"
        "       j += (long long)gridDim.x * blockDim.x) {\n"
        f"    {body}\n"
        "  }\n}\n"
    )
    return cupy.RawKernel(code, "qfunction", options=("--std=c++17",))


def fused_kernel(qf, num_qpts):
    """Trace ``qf`` and compile it, or raise :class:`Untraceable`.

    Returns
    -------
    callable
        ``run(npts, inputs, outputs)`` where ``inputs``/``outputs`` are lists of
        ``(array, row_stride, elem_stride)``; ``npts = num_elem * num_qpts``.
    """
    body = trace_body(
        qf, lambda k, row: _address(f"in{k}", row), lambda k, row: _address(f"out{k}", row)
    )
    kernel = _compile("\n    ".join(body), len(qf.inputs), len(qf.outputs), num_qpts)

    def run(npts, inputs, outputs):
        args = [np.int64(npts)]
        for array, row_stride, elem_stride in list(inputs) + list(outputs):
            args += [array, np.int64(row_stride), np.int64(elem_stride)]
        threads = 256
        blocks = max(1, min(1 << 20, -(-npts // threads)))
        kernel((blocks,), (threads,), tuple(args))

    return run
