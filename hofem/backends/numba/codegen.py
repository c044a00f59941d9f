"""Source generation for the ``/cpu/self/numba`` kernels, contraction programs, module cache.

Element data lives *interleaved* in one flat per-block scratch array: entry
``k`` of element ``b`` of a block of ``BLK`` elements is ``s[OFFSET + k * BLK + b]``,
so every contraction runs on rows of ``BLK`` (or ``C * BLK``) contiguous
doubles, like libCEED's ``/cpu/self/avx/blocked``.

A basis action is a *program*: rows of integers, one per 1D contraction (see
:func:`contraction_rows`), run by :func:`~.kernels.contract_program`.
Sizes travel in the program, not in the code, so the compiled kernels do not
depend on dim, P_1d, Q_1d or num_comp: one kernel per QFunction.

A generated module is written to ``$HOFEM_CACHE_DIR/numba_kernels`` (default
``~/.cache/hofem``) under the hash of its source and imported from there, so
its ``@numba.njit(cache=CACHE)`` kernels are compiled once per machine, not
once per process.  The cache is best effort: a folder that cannot be written
compiles in memory (one :class:`RuntimeWarning` per process); a corrupt Numba
cache entry (a truncated file) is removed, warned about and rebuilt; files are
written atomically, so processes compiling the same kernel at once all succeed.
"""

# no ``from __future__ import annotations`` here: ``compile`` in :func:`load_module` would
# pass the future flag on to the generated modules (the ``Basis`` annotations are quoted)
import hashlib
import importlib.util
import io
import os
import pickletools
import sys
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ...basis import collocated_grad
from ...constants import EVAL_GRAD, EVAL_INTERP, EvalMode
from ...typing import FloatArray, IndexArray

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import BasisLike as Basis

__all__ = [
    "BLK",
    "JIT",
    "JIT_SERIAL",
    "Source",
    "basis_program",
    "check_disk_cache",
    "load_module",
    "matrix_stack",
]

# elements per SIMD block, and doubles per register tile row of the contractions
BLK = 8
# ``CACHE`` is a global of every generated module: True when it is imported from the
# cache folder, False when it is compiled in memory (see :func:`load_module`)
JIT_SERIAL = 'numba.njit(cache=CACHE, fastmath={"contract"}, error_model="numpy")'
JIT = 'numba.njit(parallel=True, cache=CACHE, error_model="numpy")'

# index of D in a tensor basis' matrix_stack (D^T follows)
_D = 4
# the collocated grad must save this share of the multiply-adds (use_collocated)
_COLLOCATED_GAIN = 0.95
# cache root -> its ``numba_kernels`` folder, or None once it proved unusable
_CACHE_DIRS = {}


def _warn(message):
    warnings.warn(f"hofem: {message}", RuntimeWarning, stacklevel=4)


def _disable(root, path, err):
    """Compile in memory from now on, saying so once per process."""
    _CACHE_DIRS[root] = None
    _warn(
        f"cannot write the kernel cache {path} ({err}); compiling in memory, so kernels "
        "compile again in every process (set HOFEM_CACHE_DIR to a writable folder)"
    )


def _cache_dir():
    """The writable module cache folder, or None (already warned) when there is none."""
    root = str(os.environ.get("HOFEM_CACHE_DIR") or Path.home() / ".cache" / "hofem")
    if root not in _CACHE_DIRS:
        path = Path(root) / "numba_kernels"
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):  # writable, not only present
                pass
        except OSError as err:
            _disable(root, path, err)
        else:
            _CACHE_DIRS[root] = path
    return _CACHE_DIRS[root]


def _write_source(path, source):
    """Write ``source`` to ``path`` atomically (a reader sees the old file or the new one).

    Returns
    -------
    bool
        False when writing failed (full disk, permissions); already warned.
    """
    if path.is_file() and path.read_text() == source:
        return True
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        _disable(str(path.parent.parent), path.parent, err)
        return False
    return True


def _entry_is_complete(file):
    """Whether a Numba index (``.nbi``) or data (``.nbc``) file holds complete pickles.

    An index is two pickles (Numba's version, then the index proper), a data
    file one.  The opcode streams are walked, not executed: no object is built.
    """
    stream = io.BytesIO(file.read_bytes())
    try:
        for _ in range(2 if file.suffix == ".nbi" else 1):
            for _ in pickletools.genops(stream):
                pass
    except ValueError:  # "pickle exhausted before seeing STOP", a cut argument
        return False
    return not stream.read()


def check_disk_cache(module: ModuleType) -> None:
    """Remove corrupt Numba disk-cache entries of ``module``'s kernels, with a warning.

    Numba unpickles its cache files without a guard, so one truncated file (a
    process killed mid-write, a full disk) would fail every later run.  Each
    index and data file of the module is read once here, before any kernel
    compiles; a file whose pickles end early is removed with the rest of the
    module's entries, which Numba then rebuilds.

    Parameters
    ----------
    module : module
        Imported, kernels not yet compiled; its ``cache=True`` dispatchers say
        where Numba keeps their files.
    """
    folders = set()
    for obj in vars(module).values():
        folder = getattr(getattr(obj, "_cache", None), "_cache_path", None)
        if folder is not None and getattr(obj, "__module__", None) == module.__name__:
            folders.add(Path(folder))
    stem = Path(module.__file__).stem
    for folder in folders:
        files = sorted(folder.glob(f"{stem}.*.nb[ic]"))
        for file in files:
            try:
                complete = _entry_is_complete(file)
            except FileNotFoundError:  # replaced by a concurrent writer meanwhile
                continue
            if not complete:
                for stale in files:
                    stale.unlink(missing_ok=True)
                _warn(
                    f"corrupt Numba cache entry {file} (a truncated file); removed, "
                    "its kernels are compiled again"
                )
                break


def load_module(source: str, cache: bool, namespace: dict[str, Any] | None = None) -> ModuleType:
    """Import generated ``source`` as a module.

    Parameters
    ----------
    source : str
        Module text; its kernels are decorated with ``cache=CACHE`` (a global
        this function sets).
    cache : bool
        Write the text to the cache folder (file named by its hash) so that
        Numba's on-disk cache applies (``CACHE = True``); otherwise, or when
        the folder cannot be written (one warning), execute it in a fresh
        namespace (``CACHE = False``).
    namespace : dict, optional
        Globals set before the kernels first compile (e.g. a jitted QFunction
        that cannot be imported by name).

    Returns
    -------
    module
    """
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    name = f"hofem_numba_kernel_{digest}"
    if cache and name in sys.modules:
        return sys.modules[name]
    folder = _cache_dir() if cache else None
    path = None if folder is None else folder / f"{name}.py"
    if path is None or not _write_source(path, source):
        module = type(sys)(name)
        module.__dict__.update(namespace or {}, CACHE=False)
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    else:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        module.__dict__.update(namespace or {}, CACHE=True)
        spec.loader.exec_module(module)
        check_disk_cache(module)
    if cache:
        sys.modules[name] = module
    return module


class Source:
    """Indented source lines with a running indentation level."""

    def __init__(self) -> None:
        self.lines = []
        self.level = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def indent(self, by: int = 1) -> None:
        self.level += by

    def dedent(self, by: int = 1) -> None:
        self.level -= by

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# --- contraction programs ---------------------------------------------------------------------
def _collocated(basis):
    """The collocated derivative ``D`` (Q_1d, Q_1d) of a tensor basis, or None."""
    return collocated_grad(basis.interp_1d, basis.grad_1d)


def matrix_stack(basis: "Basis") -> FloatArray:
    """The matrices a basis program indexes, zero-padded to one square shape.

    Returns
    -------
    float64 (num_mats, S, S)
        Tensor bases: ``B, G, B^T, G^T`` (1D, ``S = max(P_1d, Q_1d)``), then
        ``D, D^T`` where the basis has a collocated derivative (``Q_1d >=
        P_1d``, :func:`hofem.basis.collocated_grad`); others: ``B, G_0, ...,
        G_{dim-1}, B^T, G_0^T, ...`` (``S = max(P, Q)``).
    """
    if basis.is_tensor:
        mats = [basis.interp_1d, basis.grad_1d]  # (Q_1d, P_1d) each
        D = _collocated(basis)
        mats += [m.T for m in mats] + ([] if D is None else [D, D.T])
    else:
        mats = [basis.interp, *basis.grad]  # (Q, P) each
        mats += [m.T for m in mats]
    size = max(max(m.shape) for m in mats)
    stack = np.zeros((len(mats), size, size))
    for k, m in enumerate(mats):
        stack[k, : m.shape[0], : m.shape[1]] = m
    return stack


def _mat_index(basis, grad, transpose, d=0):
    """Index in :func:`matrix_stack` of B or G (G_d for non-tensor bases), maybe transposed."""
    if basis.is_tensor:
        return 2 * transpose + grad
    count = 1 + basis.dim
    return transpose * count + (1 + d if grad else 0)


def tensor_forward(
    basis: "Basis", num_comp: int, eval_mode: EvalMode, u_off: int, q_off: int, t_off: int
) -> list[tuple[int, ...]]:
    """Rows of interp or grad of a tensor basis: ``(nc, P^dim)`` at ``u_off`` -> ``q_off``.

    Output ``(num_comp, Q^dim)`` (INTERP) or ``(dim, num_comp, Q^dim)`` (GRAD);
    offsets count doubles of one element (scaled by BLK in :func:`basis_program`).
    """
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    size_q = num_comp * Q**dim
    rows = []
    # nodes: key = mats applied so far ("B"/"G" per axis, at most one G) -> offset
    nodes = {"": u_off}
    temp = t_off
    for axis in range(dim):
        A, C = num_comp * P ** (dim - 1 - axis), Q**axis
        step = A * Q ** (axis + 1)
        new = {}
        for key, off in nodes.items():
            if "G" in key or eval_mode is EVAL_INTERP:
                choices = ["B"]
            else:  # a plain-B result is only needed before the last axis
                choices = ["G"] if axis == dim - 1 else ["B", "G"]
            for m in choices:
                k = key + m
                if axis == dim - 1:
                    dest = q_off + max(k.find("G"), 0) * size_q
                else:
                    dest, temp = temp, temp + step
                new[k] = dest
                rows.append((_mat_index(basis, m == "G", 0), A, P, Q, C, dest, off, 0))
        nodes = new
    return rows


def tensor_transpose(
    basis: "Basis", num_comp: int, eval_mode: EvalMode, q_off: int, v_off: int, t_off: int
) -> list[tuple[int, ...]]:
    """Rows of the transpose: points at ``q_off`` -> ``(num_comp, P^dim)`` at ``v_off``."""
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    size_q = num_comp * Q**dim
    num_in = dim if eval_mode is EVAL_GRAD else 1
    rows = []
    # pending[d]: offset of data whose x_d-derivative is still to apply; full: data needing B^T only
    pending = {d: q_off + d * size_q for d in range(num_in)}
    full = None
    if eval_mode is EVAL_INTERP:
        full, pending = pending.pop(0), {}
    temp = t_off
    for axis in range(dim - 1, -1, -1):
        A, C = num_comp * P ** (dim - 1 - axis), Q**axis
        step = A * P * Q**axis
        dest_full = v_off if axis == 0 else temp
        temp += step
        added = 0
        if full is not None:
            rows.append((_mat_index(basis, False, 1), A, Q, P, C, dest_full, full, 0))
            added = 1
        if axis in pending:
            grad = pending.pop(axis)
            rows.append((_mat_index(basis, True, 1), A, Q, P, C, dest_full, grad, added))
        full = dest_full
        for d in sorted(pending):
            rows.append((_mat_index(basis, False, 1), A, Q, P, C, temp, pending[d], 0))
            pending[d], temp = temp, temp + step
    return rows


def collocated_forward(
    basis: "Basis", num_comp: int, u_off: int, q_off: int, t_off: int
) -> list[tuple[int, ...]]:
    """Rows of grad as interp to the points, then ``D`` along each axis at the points.

    The interpolated values ``(num_comp, Q^dim)`` go to ``t_off``, the
    temporaries of the interpolation after them; where the interpolation is the identity
    (:attr:`hofem.Basis.interpolates_identity`) ``D`` reads the nodes at ``u_off`` instead.
    """
    dim, Q = basis.dim, basis.Q_1d
    size_q = num_comp * Q**dim
    rows, values = [], u_off
    if not basis.interpolates_identity:
        rows = tensor_forward(basis, num_comp, EVAL_INTERP, u_off, t_off, t_off + size_q)
        values = t_off
    for axis in range(dim):
        A, C = num_comp * Q ** (dim - 1 - axis), Q**axis
        rows.append((_D, A, Q, Q, C, q_off + axis * size_q, values, 0))
    return rows


def collocated_transpose(
    basis: "Basis", num_comp: int, q_off: int, v_off: int, t_off: int
) -> list[tuple[int, ...]]:
    """Rows of the transpose: ``sum_d D_d^T`` into ``t_off``, then interp^T from there (or
    straight into ``v_off`` where the interpolation is the identity)."""
    dim, Q = basis.dim, basis.Q_1d
    size_q = num_comp * Q**dim
    identity = basis.interpolates_identity
    values = v_off if identity else t_off
    rows = []
    for axis in range(dim):
        A, C = num_comp * Q ** (dim - 1 - axis), Q**axis
        rows.append((_D + 1, A, Q, Q, C, values, q_off + axis * size_q, int(axis > 0)))
    if identity:
        return rows
    return rows + tensor_transpose(basis, num_comp, EVAL_INTERP, t_off, v_off, t_off + size_q)


def multiply_adds(rows: Iterable[tuple[int, ...]]) -> int:
    """Multiply-adds per element of program rows (``A N M C`` each)."""
    return sum(A * N * M * C for _, A, N, M, C, *_ in rows)


def use_collocated(basis: "Basis", num_comp: int, eval_mode: EvalMode) -> bool:
    """Whether a tensor grad (and its transpose) runs through the collocated derivative.

    True where ``D`` exists and interp + ``dim`` contractions by ``D``
    (``Q^(dim+1)`` multiply-adds each) count at most ``_COLLOCATED_GAIN`` of
    the multiply-adds of the prefix-sharing scheme of :func:`tensor_forward`
    (the transpose counts the same): in 3D with ``Q_1d = P_1d + 1`` that is
    ``P_1d >= 4`` (3095 against 3340 at ``P_1d = 4``, 21752 against 25648 at
    ``P_1d = 7``; at ``P_1d = 3``, 1212 against 1224, the extra pass through
    the values at the points measured no gain).
    """
    if not basis.is_tensor or eval_mode is not EVAL_GRAD or _collocated(basis) is None:
        return False
    plain = multiply_adds(tensor_forward(basis, num_comp, eval_mode, 0, 0, 0))
    return multiply_adds(collocated_forward(basis, num_comp, 0, 0, 0)) <= _COLLOCATED_GAIN * plain


def dense_forward(
    basis: "Basis", num_comp: int, eval_mode: EvalMode, u_off: int, q_off: int
) -> list[tuple[int, ...]]:
    """Rows of a non-tensor interp/grad: ``(num_comp, P)`` -> ``([dim,] num_comp, Q)`` (GEMM)."""
    P, Q = basis.num_nodes, basis.num_qpts
    grads = range(basis.dim) if eval_mode is EVAL_GRAD else [None]
    return [
        (_mat_index(basis, d is not None, 0, d or 0), num_comp, P, Q, 1,
         q_off + (d or 0) * num_comp * Q, u_off, 0)
        for d in grads
    ]  # fmt: skip


def dense_transpose(
    basis: "Basis", num_comp: int, eval_mode: EvalMode, q_off: int, v_off: int
) -> list[tuple[int, ...]]:
    """Rows of the non-tensor transpose: ``([dim,] num_comp, Q)`` -> ``(num_comp, P)``."""
    P, Q = basis.num_nodes, basis.num_qpts
    grads = range(basis.dim) if eval_mode is EVAL_GRAD else [None]
    return [
        (_mat_index(basis, d is not None, 1, d or 0), num_comp, Q, P, 1,
         v_off, q_off + (d or 0) * num_comp * Q, int(bool(d)))
        for d in grads
    ]  # fmt: skip


def temp_size(basis: "Basis", num_comp: int, eval_mode: EvalMode, transpose: bool) -> int:
    """Doubles of temporaries (per element) of a basis action (0 for non-tensor bases)."""
    if not basis.is_tensor:
        return 0
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    if use_collocated(basis, num_comp, eval_mode):  # the values at the points, then interp's
        if basis.interpolates_identity:  # D reads the nodes and writes the output directly
            return 0
        return num_comp * Q**dim + temp_size(basis, num_comp, EVAL_INTERP, transpose)
    total = 0
    for axis in range(dim - 1):
        if transpose:  # after the contraction along axis + 1 (last axis first)
            count = 1 + (axis + 1 if eval_mode is EVAL_GRAD else 0)
            total += count * num_comp * Q ** (axis + 1) * P ** (dim - 1 - axis)
        else:
            count = 1 if eval_mode is EVAL_INTERP else axis + 2
            total += count * num_comp * P ** (dim - 1 - axis) * Q ** (axis + 1)
    return total


def basis_program(
    basis: "Basis",
    num_comp: int,
    eval_mode: EvalMode,
    transpose: bool,
    in_off: int,
    out_off: int,
    t_off: int,
) -> IndexArray:
    """Contraction program of a basis action on the interleaved scratch.

    Parameters
    ----------
    basis : Basis
    num_comp : int
    eval_mode : EVAL_INTERP or EVAL_GRAD
    transpose : bool
    in_off, out_off, t_off : int
        Offsets (doubles per element) of the input, output and temporaries.

    Returns
    -------
    int64 (num_steps, 8)
        Rows ``(mat, A, N, M, C, out, inp, add)``: ``s[out] (+)= mats[mat][:M, :N]``
        applied along the middle axis of ``s[inp]`` (A, N, C * BLK); offsets
        already multiplied by BLK, ``C`` counts BLK-wide rows.
    """
    if use_collocated(basis, num_comp, eval_mode):
        action = collocated_transpose if transpose else collocated_forward
        rows = action(basis, num_comp, in_off, out_off, t_off)
    elif basis.is_tensor:
        action = tensor_transpose if transpose else tensor_forward
        rows = action(basis, num_comp, eval_mode, in_off, out_off, t_off)
    else:
        action = dense_transpose if transpose else dense_forward
        rows = action(basis, num_comp, eval_mode, in_off, out_off)
    program = np.array(rows, dtype=np.int64).reshape(-1, 8)
    program[:, 5:7] *= BLK
    return program
