"""Generated CUDA kernels compiled by the host C++ compiler and run on the CPU, for the tests
without a GPU (``test_23_simplex_gen.py``, ``test_24_warp_gen.py``).

``cuda_host_shim.h`` runs each CUDA thread as a std::thread; :func:`build` compiles sources
into one shared library, kernel ``k`` launched by ``launch_k(grid, block, parameters...)``,
and :func:`field_arguments` and :func:`ctypes_args` bind a fused operator's arguments as
``FusedOperator._args`` does on the device.  Sources that must not share a translation unit
(their headers' inline functions depend on the kernel's defines) are built one by one with
:func:`precompiled_shim`, which halves each build (the shim's standard headers parsed once).
"""

import ctypes
import pathlib
import re
import shutil
import subprocess
from collections.abc import Sequence

import numpy as np

import hofem as hf
from hofem.backends.cuda import operator_fuse

CXX = shutil.which("g++") or shutil.which("clang++")
NVCC = shutil.which("nvcc")
SHIM = pathlib.Path(__file__).resolve().parent / "cuda_host_shim.h"
INCLUDE = pathlib.Path(operator_fuse.__file__).parent  # the installed headers (*.cuh)


def params(source: str) -> list[str]:
    """The kernel ``apply``'s parameter declarations, as generated."""
    head = re.search(r"apply\(\n(.*?)\) \{", source, re.S).group(1)
    return [decl.strip() for decl in head.split(",\n")]


def unit(
    sources: Sequence[str], shared_bytes: Sequence[int] | None = None, block_3d: bool = False
) -> str:
    """One C++ translation unit of ``sources``: kernel k renamed ``kernel_k`` and launched
    by ``launch_k(grid, block, parameters...)`` with ``shared_bytes[k]`` of dynamic shared
    memory (default none); with ``block_3d`` by ``launch_k(grid, bx, by, bz, parameters...)``
    on blocks of ``(bx, by, bz)`` threads (the slab kernels' ``(T, T, elems)``)."""
    parts = []
    block = "int bx, int by, int bz" if block_3d else "int block"
    shape = "shim_dim3{(unsigned)bx, (unsigned)by, (unsigned)bz}" if block_3d else "block"
    for k, source in enumerate(sources):
        decls = params(source)
        names = ", ".join(re.search(r"(\w+)$", d).group(1) for d in decls)
        dynamic = shared_bytes[k] if shared_bytes else 0
        parts += [
            f"#define apply kernel_{k}",
            source,
            "#undef apply",
            f'extern "C" void launch_{k}(int grid, {block}, {", ".join(decls)}) {{',
            f"  shim_launch(grid, {shape}, [&] {{ kernel_{k}({names}); }}, {dynamic});",
            "}",
        ]
    return "\n".join(parts)


# the compiler's flags, the same for the shim's precompiled header and each source
_FLAGS = ["-std=c++20", "-O1", "-fPIC", "-pthread"]


def precompiled_shim(folder: pathlib.Path) -> pathlib.Path:
    """A copy of the shim in ``folder`` with its precompiled header beside it, which the
    compiler reads in its place (:func:`build` with ``shim``); g++ only (another compiler
    parses the copy)."""
    shim = folder / SHIM.name
    shutil.copy(SHIM, shim)
    if "g++" in pathlib.Path(CXX).name:
        cmd = [CXX, *_FLAGS, "-x", "c++-header", str(shim), "-o", f"{shim}.gch"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-4000:]
    return shim


def build(
    sources: Sequence[str],
    path: pathlib.Path,
    shim: pathlib.Path = SHIM,
    shared_bytes: Sequence[int] | None = None,
    block_3d: bool = False,
) -> ctypes.CDLL:
    """The shared library at ``path`` (its ``.cpp`` beside it) of :func:`unit`'s ``sources``,
    ``shared_bytes`` and ``block_3d``, compiled after ``shim`` (default
    ``cuda_host_shim.h``)."""
    path.with_suffix(".cpp").write_text(unit(sources, shared_bytes, block_3d))
    cmd = [CXX, *_FLAGS, "-shared", f"-I{INCLUDE}", "-include", str(shim)]
    proc = subprocess.run(
        [*cmd, str(path.with_suffix(".cpp")), "-o", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ctypes.CDLL(str(path))


def _indices(field):
    """A field's restriction arguments: none for the identity, else the offsets and the
    component stride."""
    r = field.restriction
    if r.is_identity:
        return []
    offsets = np.ascontiguousarray(r.compact_indices()[0].ravel(), dtype=r.offsets_dtype)
    return [offsets, np.int64(r.component_stride)]


def field_arguments(op: hf.Operator, u: np.ndarray, v: np.ndarray, weights: bool = True) -> list:
    """The kernel's arguments after ``num_elem`` and the matrices, in
    ``FusedOperator._args``'s order: each input (``u`` for the active one, or with
    ``weights`` its 1D quadrature weights' tensor for ``EVAL_WEIGHT``), then ``v`` for each
    active output; restriction offsets after each."""
    args = []
    for field in op.input_fields:
        if field.eval_mode is not hf.EVAL_WEIGHT:
            args += [u if field.is_active else np.ascontiguousarray(field.vector)]
            args += _indices(field)
        elif weights:
            args.append(np.ascontiguousarray(field.basis.q_weight))
    for field in op.output_fields:
        if field.is_active:
            args += [v, *_indices(field)]
    return args


_C_TYPES = {"double": np.float64, "int": np.int32, "long long": np.int64}


def ctypes_args(decls: Sequence[str], args: Sequence) -> list:
    """ctypes values of ``args``, each checked against its C++ declaration."""
    assert len(decls) == len(args), (decls, len(args))
    out = []
    for decl, arg in zip(decls, args, strict=True):
        if "*" in decl:
            base = re.match(r"(?:const )?(double|int|long long) \*", decl).group(1)
            assert arg.dtype == _C_TYPES[base] and arg.flags.c_contiguous, decl
            out.append(ctypes.c_void_p(arg.ctypes.data))
        elif decl.startswith("const int "):
            out.append(ctypes.c_int(int(arg)))
        else:  # const index_t
            out.append(ctypes.c_longlong(int(arg)))
    return out


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """``|a - b| / |b|`` in the 2-norm."""
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def failures(name: str, run, u: np.ndarray, want: np.ndarray, dot: bool, tol: float) -> list[str]:
    """What is wrong with one kernel: ``run(stopped)`` runs it and returns ``(v, partial)``
    (the output, and with ``dot`` the block partial sums of u . Au). The output must equal
    ``want`` to ``tol`` (a NaN fails), the partial sums add up to ``u . want``, and a stopped
    CG's run (status set) writes nothing."""
    found = []
    v, partial = run(False)
    err = rel_error(v, want)
    if not err <= tol:  # NaN fails too
        found.append(f"{name}: {err:.2e}")
    if dot and not np.isclose(partial.sum(), u @ want, rtol=1e-12, atol=0.0):
        found.append(f"{name}: u . Au {partial.sum()} != {u @ want}")
    if dot:
        v, partial = run(True)
        if np.any(v != 0.0) or not np.all(np.isnan(partial)):
            found.append(f"{name}: the stopped variant wrote its outputs")
    return found
