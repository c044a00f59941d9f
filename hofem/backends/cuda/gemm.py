"""Non-tensor basis actions as cuBLAS GEMMs, plain or strided batched, chosen from a tuning table.

A non-tensor basis action is ``V = J U`` with ``J`` a basis matrix, ``(Q, P)``
row-major (``interp``, one ``grad[d]`` or the stacked gradient
``grad.reshape(dim * Q, P)``; ``Q`` here is the number of rows of ``J``), and
``U`` the ``(P, n)`` matrix whose column ``j`` is row ``j`` of the E-vector
``(num_elem * num_comp, P)``; the transpose is ``U = J^T V``.  It runs either as
one ``cublasDgemm`` over the ``n`` columns or as one
``cublasDgemmStridedBatched`` of ``batch_count`` GEMMs of ``eta = n //
batch_count`` columns each (``J`` has batch stride 0), plus one plain GEMM over
the ``n % batch_count`` columns left over.

Which one is fastest depends on the shape and the GPU; ``python -m
bakeoff tune-gemm`` measures it and writes the table
``gemm_table.json`` beside this file, and :func:`select` reads it.  The table
part of this module is pure Python (CI tests it without CuPy); CuPy is imported
only by the functions that run GEMMs.
"""

import functools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ...constants import EVAL_GRAD, EVAL_INTERP, NOTRANSPOSE, TRANSPOSE, EvalMode, TransposeMode
from ...typing import Array

__all__ = ["TABLE_ENV", "TABLE_PATH", "apply_basis", "gemm", "load_table", "select"]

TABLE_PATH = Path(__file__).with_name("gemm_table.json")
# environment variable naming another table; "none" (or empty): no table, plain GEMMs everywhere
TABLE_ENV = "HOFEM_GEMM_TABLE"
TABLE_FORMAT = 1
# a tuned shape further than this factor away in P or Q is no evidence: plain GEMM
_MAX_SHAPE_RATIO = 2.0
_INT32_MAX = np.iinfo(np.int32).max
_ONE = np.ones(1)  # host alpha for cuBLAS (pointer mode host)
_ENTRY_KEYS = ("t_mode", "P", "Q", "n", "batch_count")


# --- tuning table (pure Python) ---------------------------------------------------------------
def _table_path(table):
    """The table file to read (None: no table) from the argument, $HOFEM_GEMM_TABLE, the default."""
    if table is None:
        table = os.environ.get(TABLE_ENV, TABLE_PATH)
    if str(table).strip().lower() in ("", "none"):
        return None
    return str(Path(table).expanduser().resolve())


def _bad_table(path, what):
    return ValueError(
        f"GEMM tuning table {path} is malformed: {what}; regenerate it with "
        f"`python -m bakeoff tune-gemm --out {path}` or set {TABLE_ENV}=none"
    )


def _check_entry(path, i, entry):
    if not isinstance(entry, dict):
        raise _bad_table(path, f"entries[{i}] is not an object")
    for key in _ENTRY_KEYS:
        if key not in entry:
            raise _bad_table(path, f"entries[{i}] has no {key!r}")
    if entry["t_mode"] not in ("notranspose", "transpose"):
        raise _bad_table(
            path,
            f"entries[{i}]['t_mode'] must be 'notranspose' or 'transpose', not {entry['t_mode']!r}",
        )
    for key in _ENTRY_KEYS[1:]:
        value = entry[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _bad_table(
                path, f"entries[{i}][{key!r}] must be a positive integer, not {value!r}"
            )
    if entry["batch_count"] > entry["n"]:
        raise _bad_table(path, f"entries[{i}] has batch_count > n")


@functools.lru_cache(maxsize=16)
def load_table(path: str | None) -> tuple[dict[str, Any], ...]:
    """Validated entries of the tuning table at ``path`` (read once per process).

    Parameters
    ----------
    path : str or None
        A JSON file ``{"format": 1, "metadata": {...}, "entries": [...]}``;
        each entry has ``t_mode`` ("notranspose" or "transpose"), ``P``, ``Q``,
        ``n`` and ``batch_count`` (positive integers, ``batch_count <= n``;
        1 is the plain GEMM); other keys (timings) are ignored.

    Returns
    -------
    tuple of dict
        Empty when ``path`` is None or the file does not exist.

    Raises
    ------
    ValueError
        The file is not such a table; the message names the file.
    """
    if path is None or not Path(path).is_file():
        return ()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad_table(path, f"cannot be read as JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
        raise _bad_table(path, f"the top-level object must have 'format': {TABLE_FORMAT}")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise _bad_table(path, "'entries' must be a list")
    for i, entry in enumerate(entries):
        _check_entry(path, i, entry)
    return tuple(entries)


def select(
    t_mode: TransposeMode, P: int, Q: int, n: int, table: str | os.PathLike[str] | None = None
) -> int:
    """Batch count for the GEMM of a ``(Q, P)`` basis matrix ``J`` on ``n`` columns.

    The rule: among the table's entries of the same ``t_mode``, take the
    shape ``(P', Q')`` nearest to ``(P, Q)`` in ``max(|ln P'/P|, |ln Q'/Q|)``
    (the first in table order on ties); if it is more than a factor 2 away in
    ``P`` or ``Q``, or there is none, use the plain GEMM.  Among that shape's
    entries take the ``n'`` nearest to ``n`` in ``|ln n'/n|``: if its
    ``batch_count'`` is 1, the plain GEMM; otherwise the columns per GEMM
    ``eta = n' / batch_count'`` are kept for ``n``: ``batch_count = round(n /
    eta)``, clipped to ``1..n``.

    Parameters
    ----------
    t_mode : hf.NOTRANSPOSE (``V = J U``) or hf.TRANSPOSE (``U = J^T V``)
    P, Q : int
        Columns and rows of ``J``.
    n : int
        Columns of ``U``.
    table : str or path-like, optional
        Table file; default ``$HOFEM_GEMM_TABLE`` if set, else
        ``gemm_table.json`` beside this module.  "none": no table.

    Returns
    -------
    int
        1: one plain GEMM; ``b > 1``: a strided batched GEMM of ``b`` GEMMs.

    Raises
    ------
    ValueError
        Bad ``t_mode``, or a malformed table (see :func:`load_table`).
    """
    if not isinstance(t_mode, TransposeMode):
        raise ValueError(f"t_mode must be hf.NOTRANSPOSE or hf.TRANSPOSE, got {t_mode!r}")
    for name, value in (("P", P), ("Q", Q), ("n", n)):
        if int(value) < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return _select(_table_path(table), t_mode.value, int(P), int(Q), int(n))


@functools.lru_cache(maxsize=4096)
def _select(path, t_mode, P, Q, n):
    entries = [e for e in load_table(path) if e["t_mode"] == t_mode]
    if not entries:
        return 1

    def shape_distance(e):
        return max(abs(math.log(e["P"] / P)), abs(math.log(e["Q"] / Q)))

    nearest = min(entries, key=shape_distance)
    if shape_distance(nearest) > math.log(_MAX_SHAPE_RATIO):
        return 1
    shape = (nearest["P"], nearest["Q"])
    same = [e for e in entries if (e["P"], e["Q"]) == shape]
    best = min(same, key=lambda e: abs(math.log(e["n"] / n)))
    if best["batch_count"] == 1:
        return 1
    eta = best["n"] / best["batch_count"]
    return max(1, min(n, round(n / eta)))


# --- execution (CuPy) -------------------------------------------------------------------------
def _row_stride(a, name, width):
    """Leading dimension (in elements) of a 2-D view ``a`` whose rows are GEMM columns."""
    if a.ndim != 2 or a.shape[1] != width or a.dtype != np.float64:
        raise ValueError(f"{name} must be a float64 (n, {width}) array, got {a.dtype} {a.shape}")
    if a.shape[0] == 1:
        return width
    if a.strides[1] != a.itemsize or a.strides[0] < width * a.itemsize:
        raise ValueError(
            f"{name} must have contiguous, non-overlapping rows (strides {a.strides}); "
            "pass a view of a C-contiguous array"
        )
    return a.strides[0] // a.itemsize


def gemm(
    mat: Array,
    t_mode: TransposeMode,
    x: Array,
    y: Array,
    beta: float = 0.0,
    batch_count: int | None = None,
    table: str | os.PathLike[str] | None = None,
) -> None:
    """``y = x @ mat.T`` (NOTRANSPOSE) or ``y = x @ mat`` (TRANSPOSE), plus ``beta * y``.

    Each row of ``x`` is one column of ``U``: NOTRANSPOSE computes
    ``y[j] = mat @ x[j]``, TRANSPOSE ``y[j] = mat.T @ x[j]``, for ``j < n``.

    Parameters
    ----------
    mat : cupy.ndarray (Q, P), float64, C-contiguous
        ``J``.
    t_mode : hf.NOTRANSPOSE or hf.TRANSPOSE
    x : cupy.ndarray (n, P) [NOTRANSPOSE] or (n, Q) [TRANSPOSE], float64
        Rows contiguous; any row stride (a view into an E-vector or Q-vector).
    y : cupy.ndarray (n, Q) [NOTRANSPOSE] or (n, P) [TRANSPOSE], float64
        Written in place, same rules as ``x``; not read when ``beta == 0``.
    beta : float
    batch_count : int, optional
        1: one ``cublasDgemm``; ``b > 1``: ``cublasDgemmStridedBatched`` of
        ``b`` GEMMs of ``n // b`` columns, then one GEMM of the ``n % b``
        columns left over.  Default: :func:`select` from the tuning table.
    table : str or path-like, optional
        Passed to :func:`select`.

    Raises
    ------
    ValueError
        Shapes, dtypes or strides that do not fit, ``batch_count`` not in ``1..n``.
    """
    import cupy
    from cupy.cuda import cublas

    if mat.ndim != 2 or mat.dtype != np.float64 or not mat.flags.c_contiguous:
        raise ValueError(
            f"mat must be a C-contiguous float64 2-D array, got {mat.dtype} {mat.shape}; "
            "use cupy.ascontiguousarray(mat)"
        )
    if t_mode not in (NOTRANSPOSE, TRANSPOSE):
        raise ValueError(f"t_mode must be hf.NOTRANSPOSE or hf.TRANSPOSE, got {t_mode!r}")
    Q, P = mat.shape
    k, m = (P, Q) if t_mode is NOTRANSPOSE else (Q, P)  # y[j] (m,) = op(mat) (m, k) @ x[j] (k,)
    ldx, ldy = _row_stride(x, "x", k), _row_stride(y, "y", m)
    n = x.shape[0]
    if y.shape[0] != n:
        raise ValueError(f"x and y must have the same number of rows, got {n} and {y.shape[0]}")
    if batch_count is None:
        batch_count = select(t_mode, P, Q, n, table)
    if not 1 <= batch_count <= n:
        raise ValueError(f"batch_count must be in 1..n = 1..{n}, got {batch_count}")
    batch_count = max(batch_count, -(-n // _INT32_MAX))  # cuBLAS sizes are int32
    eta, rest = divmod(n, batch_count)
    # cuBLAS is column-major: row-major mat (Q, P) is column-major (P, Q), lda = P
    transa = cublas.CUBLAS_OP_T if t_mode is NOTRANSPOSE else cublas.CUBLAS_OP_N
    beta_host = np.full(1, beta, dtype=np.float64)
    alpha_ptr, beta_ptr = _ONE.ctypes.data, beta_host.ctypes.data
    handle = cupy.cuda.device.get_cublas_handle()
    mode = cublas.getPointerMode(handle)
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    try:
        x_ptr, y_ptr = x.data.ptr, y.data.ptr
        cols = n
        if batch_count > 1:
            cublas.dgemmStridedBatched(
                handle, transa, cublas.CUBLAS_OP_N, m, eta, k, alpha_ptr, mat.data.ptr, P, 0,
                x_ptr, ldx, eta * ldx, beta_ptr, y_ptr, ldy, eta * ldy, batch_count,
            )  # fmt: skip
            x_ptr += batch_count * eta * ldx * x.itemsize
            y_ptr += batch_count * eta * ldy * y.itemsize
            cols = rest
        if cols:
            cublas.dgemm(
                handle, transa, cublas.CUBLAS_OP_N, m, cols, k, alpha_ptr, mat.data.ptr, P,
                x_ptr, ldx, beta_ptr, y_ptr, ldy,
            )  # fmt: skip
    finally:
        cublas.setPointerMode(handle, mode)


def _slabs(interp, grad, eval_mode, nodes, qpts, qvec):
    """The GEMMs of one basis action: ``(J, nodes view, points view, first)`` each.

    Views are 2-D, one GEMM column per row; ``first`` is false for the
    derivative directions d > 0, which the transpose accumulates (beta = 1).
    """
    E, C, P = nodes.shape
    if eval_mode is EVAL_INTERP:
        Q = interp.shape[0]
        if not qvec:  # (E*C, P) -> (E*C, Q): one GEMM over every element and component
            return [(interp, nodes.reshape(E * C, P), qpts.reshape(E * C, Q), True)]
        rows = qpts.reshape(C, E, Q)  # Q-vector row c
        return [(interp, nodes[:, c], rows[c], True) for c in range(C)]
    dim, Q, _ = grad.shape
    if C == 1 and not qvec:  # (E, P) -> (E, dim*Q) with the stacked (dim*Q, P) gradient
        return [(grad.reshape(dim * Q, P), nodes.reshape(E, P), qpts.reshape(E, dim * Q), True)]
    if qvec:
        rows = qpts.reshape(dim, C, E, Q)  # Q-vector row d*C + c
    else:
        rows = qpts.reshape(E, dim, C, Q).transpose(1, 2, 0, 3)  # (dim, C, E, Q) view
    return [(grad[d], nodes[:, c], rows[d, c], d == 0) for c in range(C) for d in range(dim)]


def apply_basis(
    interp: Array,
    grad: Array,
    t_mode: TransposeMode,
    eval_mode: EvalMode,
    nodes: Array,
    qpts: Array,
    *,
    qvec: bool = False,
    batch_count: int | None = None,
    table: str | os.PathLike[str] | None = None,
) -> None:
    """Non-tensor interp/grad (NOTRANSPOSE: nodes -> qpts) or transpose (qpts -> nodes).

    Parameters
    ----------
    interp : cupy.ndarray (Q, P), float64, C-contiguous
    grad : cupy.ndarray (dim, Q, P), float64, C-contiguous
    t_mode : hf.NOTRANSPOSE or hf.TRANSPOSE
    eval_mode : hf.EVAL_INTERP or hf.EVAL_GRAD
    nodes : cupy.ndarray (num_elem, num_comp, P), float64, C-contiguous
        E-vector: read for NOTRANSPOSE, overwritten for TRANSPOSE.
    qpts : cupy.ndarray, float64, C-contiguous
        Basis layout ``(num_elem, num_comp, Q)`` (INTERP) or ``(num_elem, dim,
        num_comp, Q)`` (GRAD); with ``qvec`` the Q-vector ``(size, num_elem*Q)``,
        rows ``[dim][comp]``.  Overwritten for NOTRANSPOSE, read for TRANSPOSE.
    qvec : bool
        Points side in the operator's Q-vector layout: written (read) directly,
        one GEMM per component and direction (``num_elem`` columns each).
    batch_count : int, optional
        Force one configuration (see :func:`gemm`); default from the table.
    table : str or path-like, optional
        Passed to :func:`select`.

    Raises
    ------
    ValueError
        Unsupported mode, or arrays of the wrong size or not C-contiguous.
    """
    if eval_mode not in (EVAL_INTERP, EVAL_GRAD):
        raise ValueError(f"eval_mode must be hf.EVAL_INTERP or hf.EVAL_GRAD, got {eval_mode!r}")
    E, C, _ = nodes.shape
    mats = interp[None] if eval_mode is EVAL_INTERP else grad  # (dim or 1, Q, P)
    size = mats.shape[0] * C * E * mats.shape[1]
    for name, a in (("nodes", nodes), ("qpts", qpts)):
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous; use cupy.ascontiguousarray({name})")
    if qpts.size != size:
        raise ValueError(f"qpts must have {size} entries for nodes {nodes.shape}, got {qpts.shape}")
    for J, x_nodes, x_qpts, first in _slabs(interp, grad, eval_mode, nodes, qpts, qvec):
        if t_mode is NOTRANSPOSE:
            gemm(J, t_mode, x_nodes, x_qpts, batch_count=batch_count, table=table)
        else:
            beta = 0.0 if first else 1.0
            gemm(J, t_mode, x_qpts, x_nodes, beta, batch_count=batch_count, table=table)
