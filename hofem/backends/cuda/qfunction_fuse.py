"""QFunction bodies fused into one CUDA kernel by tracing them with symbolic arrays.

The body is traced into straight-line C++ by
:func:`hofem.qfunction_trace.trace_body` (one local per intermediate); the
context is read at trace time and baked in as constants.  The result is a
grid-stride kernel over the points, compiled once per (body, context,
layouts) by NVRTC.  A body that branches on values, calls a function that is
not a known ufunc or otherwise escapes tracing raises :class:`~hofem.qfunction_trace.Untraceable`;
the caller then runs it vectorized instead.

Each field is addressed as ``row * row_stride + (j / Q) * elem_stride + j % Q``
for point ``j``, so an input may be a Q-vector ``(size, E*Q)`` (strides ``(n,
Q)``) or an E-vector ``(E, size, Q)`` (strides ``(Q, size*Q)``) read in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from ...qfunction_trace import trace_body
from .ref import cupy

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import Array
    from ...typing import QFunctionLike as QFunction

    #: ``(array, row_stride, elem_stride)`` of one field of a fused QFunction kernel
    FieldArg: TypeAlias = tuple[Array, int, int]

__all__ = ["fused_kernel"]


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


def fused_kernel(
    qf: QFunction, num_qpts: int
) -> Callable[[int, Iterable[FieldArg], Iterable[FieldArg]], None]:
    """Trace ``qf`` and compile it, or raise :class:`~hofem.qfunction_trace.Untraceable`.

    Returns
    -------
    callable
        ``run(npts, inputs, outputs)`` where ``inputs``/``outputs`` are lists of
        ``(array, row_stride, elem_stride)``; ``npts = num_elem * num_qpts``.
        Every entry of every output is written (rows the body leaves alone get
        0): outputs need no zero fill.
    """
    body = trace_body(
        qf,
        lambda k, row: _address(f"in{k}", row),
        lambda k, row: _address(f"out{k}", row),
        zero_unwritten=True,
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
