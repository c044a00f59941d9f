"""Source generation for the ``/cpu/self/numba`` kernels, and their on-disk module cache.

Kernels are generated as Python source with every size (dim, num_comp,
P_1d, Q_1d, elements per SIMD block) written as a literal, so LLVM sees
compile-time trip counts.  Element data lives *interleaved* in one flat
per-block scratch array: entry ``k`` of element ``b`` of a block is
``s[OFFSET + k * BLK + b]``, so every contraction's innermost loop runs over
``C * BLK`` contiguous doubles (``BLK`` elements side by side, like libCEED's
``/cpu/self/avx/blocked``) and vectorizes whatever the polynomial order.

A generated module is written to ``$HOFEM_CACHE_DIR`` (default
``~/.cache/hofem``) under the hash of its source and imported from there, so
its ``@numba.njit(cache=True)`` kernels are compiled once per machine, not
once per process.
"""

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

from ..constants import EVAL_GRAD, EVAL_INTERP

__all__ = ["JIT", "JIT_SERIAL", "Source", "load_module"]

JIT_SERIAL = 'numba.njit(cache={cache}, fastmath={{"contract"}}, error_model="numpy")'
JIT = 'numba.njit(parallel=True, cache={cache}, error_model="numpy")'


def _cache_dir():
    root = os.environ.get("HOFEM_CACHE_DIR") or Path.home() / ".cache" / "hofem"
    path = Path(root) / "numba_kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_module(source, cache, namespace=None):
    """Import generated ``source`` as a module.

    Parameters
    ----------
    source : str
        Module text; its kernels are decorated with ``cache=True`` when ``cache``.
    cache : bool
        Write the text to the cache directory (file named by its hash) so that
        Numba's on-disk cache applies; otherwise execute it in a fresh namespace.
    namespace : dict, optional
        Globals set before the kernels first compile (e.g. a jitted QFunction
        that cannot be imported by name).

    Returns
    -------
    module or types.SimpleNamespace
    """
    digest = hashlib.sha1(source.encode()).hexdigest()[:20]
    name = f"hofem_numba_kernel_{digest}"
    if not cache:
        module = type(sys)(name)
        module.__dict__.update(namespace or {})
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
        return module
    if name in sys.modules:
        return sys.modules[name]
    path = _cache_dir() / f"{name}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


class Source:
    """Indented source lines with a running indentation level."""

    def __init__(self):
        self.lines = []
        self.level = 0

    def __call__(self, line):
        self.lines.append("    " * self.level + line)

    def indent(self, by=1):
        self.level += by

    def dedent(self, by=1):
        self.level -= by

    def text(self):
        return "\n".join(self.lines) + "\n"


# --- basis actions on interleaved scratch -----------------------------------------------------
def contract(src, mat, A, N, M, C, out, inp, add):
    """Emit ``s[out] (+)= mat (M, N)`` applied along the middle axis of ``s[inp]`` (A, N, C).

    ``src`` is a :class:`Source` (emit a call) or a list (append the step as
    a row of integers, see :func:`~.numba_kernels.basis_program`).

    ``mat`` is ``(source of a matrix, transposed)``; offsets ``out``, ``inp``
    are source expressions; ``C`` already includes the BLK lanes.  The loops
    live in :func:`hofem.backends.numba_kernels.contract` (compiled once,
    cached), which keeps generated kernels small and quick to compile.
    """
    name, transpose = mat
    if isinstance(src, list):  # a program for numba_kernels.basis_program
        kind, d = (0, 0) if name == "B" else (1, int(name[2:-1]) if "[" in name else 0)
        src.append((kind, d, transpose, A, N, M, C, _value(out), _value(inp), add))
        return
    src(f"contract(s, {name}, {transpose}, {A}, {N}, {M}, {C}, {out}, {inp}, {add})")


def _value(expr):
    """Integer value of an offset expression ``"a + b"`` or ``a``."""
    return sum(int(term) for term in str(expr).split("+"))


def _mat(name, transpose, d=None):
    """A matrix argument of :func:`contract`: ``name`` or its slice ``name[d]``."""
    return (name if d is None else f"{name}[{d}]", transpose)


def tensor_forward(src, basis, num_comp, blk, eval_mode, names, u_off, q_off, t_off):
    """Emit interp or grad of a tensor basis: ``s[u_off]`` (nc, P^dim) -> ``s[q_off]``.

    Output layout ``(num_comp, Q^dim)`` (INTERP) or ``(dim, num_comp, Q^dim)``
    (GRAD), each entry BLK lanes wide; temporaries start at ``t_off``.
    """
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    B, G = names
    size_q = num_comp * Q**dim * blk
    # nodes: key = mats applied so far ("B"/"G" per axis, at most one G) -> offset
    nodes = {"": u_off}
    temp = t_off
    for axis in range(dim):
        A = num_comp * P ** (dim - 1 - axis)
        C = Q**axis * blk
        step = num_comp * P ** (dim - 1 - axis) * Q ** (axis + 1) * blk
        new = {}
        for key, off in nodes.items():
            if "G" in key or eval_mode is EVAL_INTERP:
                choices = ["B"]
            else:  # a plain-B result is only needed before the last axis
                choices = ["G"] if axis == dim - 1 else ["B", "G"]
            for m in choices:
                k = key + m
                if axis == dim - 1:
                    d = k.find("G")
                    dest = f"{q_off} + {max(d, 0) * size_q}"
                else:
                    dest, temp = str(temp), temp + step
                new[k] = dest
                contract(src, _mat(B if m == "B" else G, False), A, P, Q, C, dest, off, False)
        nodes = new


def tensor_transpose(src, basis, num_comp, blk, eval_mode, names, q_off, v_off, t_off):
    """Emit the transpose: ``s[q_off]`` at points -> ``s[v_off]`` (num_comp, P^dim), overwritten."""
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    B, G = names
    size_q = num_comp * Q**dim * blk
    num_in = dim if eval_mode is EVAL_GRAD else 1
    # pending[d]: offset of data whose x_d-derivative is still to apply; full: data needing B^T only
    pending = {d: f"{q_off} + {d * size_q}" for d in range(num_in)}
    full = None
    if eval_mode is EVAL_INTERP:
        full, pending = pending.pop(0), {}
    temp = t_off
    for axis in range(dim - 1, -1, -1):
        A = num_comp * P ** (dim - 1 - axis)
        C = Q**axis * blk
        step = num_comp * Q**axis * P ** (dim - axis) * blk
        dest_full = v_off if axis == 0 else str(temp)
        temp += step
        added = False
        if full is not None:
            contract(src, _mat(B, True), A, Q, P, C, dest_full, full, False)
            added = True
        if axis in pending:
            contract(src, _mat(G, True), A, Q, P, C, dest_full, pending.pop(axis), added)
        full = dest_full
        for d in sorted(pending):
            dest, temp = str(temp), temp + step
            contract(src, _mat(B, True), A, Q, P, C, dest, pending[d], False)
            pending[d] = dest


def dense_forward(src, basis, num_comp, blk, eval_mode, names, u_off, q_off):
    """Emit a non-tensor interp/grad: ``(num_comp, P)`` -> ``([dim,] num_comp, Q)`` by GEMM."""
    B, G = names
    P, Q = basis.num_nodes, basis.num_qpts
    if eval_mode is EVAL_INTERP:
        contract(src, _mat(B, False), num_comp, P, Q, blk, q_off, u_off, False)
        return
    for d in range(basis.dim):
        out = f"{q_off} + {d * num_comp * Q * blk}"
        contract(src, _mat(G, False, d), num_comp, P, Q, blk, out, u_off, False)


def dense_transpose(src, basis, num_comp, blk, eval_mode, names, q_off, v_off):
    """Emit the non-tensor transpose: ``([dim,] num_comp, Q)`` -> ``(num_comp, P)``."""
    B, G = names
    P, Q = basis.num_nodes, basis.num_qpts
    if eval_mode is EVAL_INTERP:
        contract(src, _mat(B, True), num_comp, Q, P, blk, v_off, q_off, False)
        return
    for d in range(basis.dim):
        inp = f"{q_off} + {d * num_comp * Q * blk}"
        contract(src, _mat(G, True, d), num_comp, Q, P, blk, v_off, inp, d > 0)


def forward_temp(basis, num_comp, blk, eval_mode):
    """Doubles of temporaries :func:`tensor_forward` needs (0 for non-tensor bases)."""
    if not basis.is_tensor:
        return 0
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    total = 0
    for axis in range(dim - 1):
        count = 1 if eval_mode is EVAL_INTERP else axis + 2
        total += count * num_comp * P ** (dim - 1 - axis) * Q ** (axis + 1) * blk
    return total


def transpose_temp(basis, num_comp, blk, eval_mode):
    """Doubles of temporaries :func:`tensor_transpose` needs (0 for non-tensor bases)."""
    if not basis.is_tensor:
        return 0
    dim, P, Q = basis.dim, basis.P_1d, basis.Q_1d
    total = 0
    for axis in range(dim - 1, 0, -1):
        count = 1 + (axis if eval_mode is EVAL_GRAD else 0)
        total += count * num_comp * Q**axis * P ** (dim - axis) * blk
    return total


def basis_forward(src, basis, num_comp, blk, eval_mode, names, u_off, q_off, t_off):
    """Emit interp/grad of any basis (tensor by sum factorization, else GEMM)."""
    if basis.is_tensor:
        tensor_forward(src, basis, num_comp, blk, eval_mode, names, u_off, q_off, t_off)
    else:
        dense_forward(src, basis, num_comp, blk, eval_mode, names, u_off, q_off)


def basis_transpose(src, basis, num_comp, blk, eval_mode, names, q_off, v_off, t_off):
    """Emit the transpose of interp/grad of any basis, overwriting ``s[v_off]``."""
    if basis.is_tensor:
        tensor_transpose(src, basis, num_comp, blk, eval_mode, names, q_off, v_off, t_off)
    else:
        dense_transpose(src, basis, num_comp, blk, eval_mode, names, q_off, v_off)
