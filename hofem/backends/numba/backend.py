"""``/cpu/self/numba``: Numba JIT backend, the whole operator fused per element block.

Overrides the reference backend's restriction gather/transpose, basis actions
and operator apply; assembly (diagonal, CSR) is inherited from
:class:`~hofem.backends.ref.RefBackend` and so runs through the kernels here
where it gathers or applies bases.  See :mod:`.operator` for the fused
kernel and its race-free parallel scatter, :mod:`.codegen` for the
sum-factorization programs and the on-disk module cache, :mod:`.kernels`
for the shape-independent compiled kernels (contractions, gather, scatter).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...constants import EVAL_GRAD, NOTRANSPOSE, TRANSPOSE, EvalMode, TransposeMode
from ...typing import Array, FloatArray, IndexArray
from ...vector_ops import VectorOps
from ..ref import RefBackend
from .codegen import BLK

try:
    import numba
except ImportError:  # reported by check_available
    numba = None
else:
    from numba.core.errors import NumbaError

    from . import kernels as numba_kernels
    from . import operator as numba_operator
    from . import threads as numba_threads

if TYPE_CHECKING:  # the interface objects as Any: a backend imports none of them
    from ...typing import BasisLike as Basis
    from ...typing import OperatorLike as Operator
    from ...typing import RestrictionLike as ElemRestriction

__all__ = ["NumbaBackend", "NumbaBasisData", "NumbaRestrictionData"]


@dataclass
class NumbaRestrictionData:
    """A restriction's data on ``/cpu/self/numba``, built on the first transpose.

    Attributes
    ----------
    csr : (row_ptr, entries) or None
        The transpose map (:func:`.numba_kernels.transpose_map`).
    signs_flat : float64 array (e_size,) or None
        The signs of an oriented restriction, one per E-vector entry.
    """

    csr: tuple | None = None
    signs_flat: np.ndarray | None = None


@dataclass
class NumbaBasisData:
    """A basis's matrix stack and its contraction programs by ``(t_mode, eval_mode)``."""

    mats: np.ndarray | None = None
    programs: dict = field(default_factory=dict)


class NumbaVectorOps(VectorOps):
    """Parallel Numba loops for CG; reductions over fixed chunks (thread-count independent)."""

    def solve_scope(self, n: int) -> contextlib.AbstractContextManager:
        """One thread for the whole solve below ``SERIAL_ENTRIES`` unknowns: every
        parallel loop of an iteration (operator, restrictions, vector steps) would
        otherwise wake the sleeping threads for less work than that costs."""
        return numba_kernels.thread_scope(n)

    def dot(self, a: FloatArray, b: FloatArray) -> np.float64:
        with numba_kernels.dynamic_schedule(a.size):
            return numba_kernels.cg_dot(a, b).sum()

    def update_xr(
        self,
        rz: Array,
        pAp: Array,
        breakdown: Array,
        p: FloatArray,
        Ap: FloatArray,
        x: FloatArray,
        r: FloatArray,
    ) -> None:
        alpha = float(self._alpha(rz, pAp, breakdown))
        with numba_kernels.dynamic_schedule(x.size):
            numba_kernels.cg_update_xr(alpha, p, Ap, x, r)

    def update_xr_rr(
        self,
        rz: Array,
        pAp: Array,
        breakdown: Array,
        p: FloatArray,
        Ap: FloatArray,
        x: FloatArray,
        r: FloatArray,
    ) -> np.float64:
        alpha = float(self._alpha(rz, pAp, breakdown))
        with numba_kernels.dynamic_schedule(x.size):
            return numba_kernels.cg_update_xr_rr(alpha, p, Ap, x, r).sum()

    def update_p(self, z: FloatArray, rz_new: Array, rz: Array, p: FloatArray) -> None:
        beta = float(self._beta(rz_new, rz))
        with numba_kernels.dynamic_schedule(p.size):
            numba_kernels.cg_update_p(z, beta, p)

    def local_dots(self, pairs: Sequence[tuple[FloatArray, FloatArray]]) -> FloatArray:
        """All the inner products in one parallel pass over fixed chunks."""
        left, right = zip(*pairs, strict=True)
        return numba_kernels.cg_dots(left, right).sum(axis=0)

    def single_reduction_update(
        self,
        alpha: Array,
        beta: Array,
        u: FloatArray,
        w: FloatArray,
        p: FloatArray,
        s: FloatArray,
        x: FloatArray,
        r: FloatArray,
    ) -> None:
        numba_kernels.cg_single_reduction_update(float(alpha), float(beta), u, w, p, s, x, r)

    def pipelined_update(
        self, alpha: Array, beta: Array, vectors: Sequence[FloatArray | None]
    ) -> FloatArray:
        """One parallel pass: the eight recurrences and the next local inner products."""
        x, r, u, w, m, n, p, s, q, z = vectors
        pre = u is not None
        args = (x, r, u, w, m, n, p, s, q, z) if pre else (x, r, r, w, w, n, p, s, s, z)
        partial = numba_kernels.cg_pipelined_update(float(alpha), float(beta), *args, pre)
        sums = partial.sum(axis=0)  # (3,): r . u, w . u, r . r
        return sums if pre else sums[:2]

    def chebyshev_start(
        self,
        c: float,
        inv_diag: FloatArray,
        b: FloatArray,
        Ax: FloatArray | None,
        r: FloatArray,
        d: FloatArray,
    ) -> None:
        if Ax is None:
            numba_kernels.chebyshev_scale(float(c), inv_diag, b, d)
        else:
            numba_kernels.chebyshev_start(float(c), inv_diag, b, Ax, r, d)

    def chebyshev_step(
        self,
        a: float,
        c: float,
        inv_diag: FloatArray,
        Ad: FloatArray,
        d: FloatArray,
        x: FloatArray,
        r: FloatArray,
        b: FloatArray | None = None,
    ) -> None:
        if b is None:
            numba_kernels.chebyshev_step(float(a), float(c), inv_diag, Ad, d, x, r)
        else:
            numba_kernels.chebyshev_step_zero(float(a), float(c), inv_diag, Ad, b, d, x, r)

    def chebyshev_last(
        self,
        Ad: FloatArray,
        d: FloatArray,
        x: FloatArray,
        r: FloatArray | None,
        b: FloatArray | None = None,
    ) -> None:
        if b is not None:
            numba_kernels.chebyshev_last_zero(Ad, b, d, x, r)
        elif r is None:
            numba_kernels.add_to(d, x)
        else:
            numba_kernels.cg_update_xr(1.0, d, Ad, x, r)

    def scatter_scaled(
        self, values: FloatArray, index: IndexArray, scale: FloatArray | None, out: FloatArray
    ) -> None:
        if scale is None:
            numba_kernels.scatter_entries(values, index, out)
        else:
            numba_kernels.scatter_scaled(values, index, scale, out)

    def gather_scaled(
        self,
        w: FloatArray,
        index: IndexArray,
        scale: FloatArray | None,
        v: FloatArray,
        add: bool = False,
    ) -> None:
        if scale is None:
            kernel = numba_kernels.gather_add_entries if add else numba_kernels.gather_entries
            kernel(w, index, v)
        else:
            kernel = numba_kernels.gather_scaled_add if add else numba_kernels.gather_scaled
            kernel(w, index, scale, v)


class NumbaBackend(RefBackend):
    """Numba-compiled CPU backend; delegates what it does not override to the reference."""

    resource = "/cpu/self/numba"
    # hf.STRIDES_BACKEND interleaves the elements of each SIMD block, as the kernels hold them:
    # stored quadrature data is read in place as whole vectors (see operator.py)
    STRIDES_LANES = BLK

    def __init__(self) -> None:
        super().__init__()
        numba_threads.configure_threads()

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError naming the extra when Numba is not installed."""
        if numba is None:
            raise ImportError("Numba is not installed; install it with `pip install hofem[numba]`")

    # --- arrays ------------------------------------------------------------------------------
    @staticmethod
    def scatter_entries(values: FloatArray, index: IndexArray, out: FloatArray) -> None:
        """``out[index] = values`` in one parallel pass (NumPy's fancy indexing is serial)."""
        numba_kernels.scatter_entries(values, index, out)

    @staticmethod
    def gather_add_entries(w: FloatArray, index: IndexArray, v: FloatArray) -> None:
        """``v += w[index]`` in one parallel pass, without a temporary."""
        numba_kernels.gather_add_entries(w, index, v)

    # --- restriction -------------------------------------------------------------------------
    def restriction_setup(self, r: ElemRestriction) -> None:
        """Keep the host indices and signs; the transpose map is built on first use."""
        r.backend_data = NumbaRestrictionData()

    def restriction_device_offsets(self, r: ElemRestriction) -> None:
        """None: the host offsets stay with the restriction."""
        return None

    def restriction_apply(
        self, r: ElemRestriction, u: FloatArray, t_mode: TransposeMode, signed: bool = True
    ) -> FloatArray:
        """Gather L (l_size,) -> E (num_elem, num_comp, elem_size), or sum back (owner-computes)."""
        signs = r.signs if signed else None
        shape = (r.num_elem, r.num_comp, r.elem_size)
        if t_mode is NOTRANSPOSE and r.lanes > 1:  # the blocked layout: no one component stride
            e = np.asarray(u)[r.indices]
            return e * signs if signs is not None else e
        if t_mode is NOTRANSPOSE:
            out = np.empty(shape)
            offsets, stride = r.compact_indices()  # no expanded indices per application
            numba_kernels.gather(np.ascontiguousarray(u), offsets, stride, signs, out)
            return out
        data = r.backend_data
        if data.csr is None:
            data.csr = numba_kernels.transpose_map(r.indices, r.l_size)
            if r.signs is not None:
                data.signs_flat = np.broadcast_to(r.signs, shape).ravel()  # (e_size,)
        row_ptr, entries = data.csr
        out = np.empty(r.l_size)
        e = np.ascontiguousarray(u, dtype=np.float64).reshape(-1)  # (e_size,)
        numba_kernels.scatter_csr(e, row_ptr, entries, data.signs_flat if signed else None, out)
        return out

    # --- basis -------------------------------------------------------------------------------
    def basis_setup(self, b: Basis) -> None:
        """Matrix stack now; a contraction program per (t_mode, eval_mode) on first use."""
        b.backend_data = NumbaBasisData()

    def basis_apply(
        self, b: Basis, t_mode: TransposeMode, eval_mode: EvalMode, u: FloatArray
    ) -> FloatArray:
        """Interp/grad and transposes: a sum-factorization (or GEMM) program per element block."""
        data = b.backend_data
        key = (t_mode, eval_mode)
        if key not in data.programs:
            numba_kernels.compile_contract()
            data.mats = numba_operator.matrix_stack(b)
            data.programs[key] = numba_operator.standalone_program(
                b, t_mode is TRANSPOSE, eval_mode
            )
        num_elem = u.shape[0]
        if t_mode is TRANSPOSE:
            shape = (num_elem, b.num_comp, b.num_nodes)
        elif eval_mode is EVAL_GRAD:
            shape = (num_elem, b.dim, b.num_comp, b.num_qpts)
        else:
            shape = (num_elem, b.num_comp, b.num_qpts)
        out = np.empty(shape)
        u2 = np.ascontiguousarray(u, dtype=np.float64).reshape(num_elem, -1)  # (num_elem, size_in)
        program, scratch = data.programs[key]
        numba_kernels.basis_program(u2, out.reshape(num_elem, -1), data.mats, program, scratch)
        return out

    # --- solvers -------------------------------------------------------------------------------
    def vector_ops(self) -> NumbaVectorOps:
        """CG's vector work as parallel Numba loops (see :mod:`hofem.vector_ops`)."""
        return NumbaVectorOps()

    # --- operator ----------------------------------------------------------------------------
    def _plan(self, op, dot=False):
        """Kernel, static arguments and colouring of ``op`` (its ``u . Au`` variant with
        ``dot``), cached in ``op.backend_data``."""
        key = "numba-dot" if dot else "numba"
        plan = op.backend_data.get(key)
        context = numba_operator.context_key(op.qf.context)
        if plan is None or plan["context"] != context:
            kernel, names, static, traced = numba_operator.operator_kernel(op, dot)
            if "numba-schedule" not in op.backend_data:
                outputs = [f.restriction for f in op.output_fields]
                op.backend_data["numba-schedule"] = numba_operator.colour_chunks(
                    op.num_elem, numba_operator.BLK, outputs
                )
            for n in names:
                if n not in static and not (n[0] in "lx" and n[1:].isdigit()):
                    static[n] = numba_operator.field_arrays(op, n, None)
            plan = {"kernel": kernel, "names": names, "static": static}
            plan["schedule"] = op.backend_data["numba-schedule"]
            plan["context"], plan["traced"] = context, traced
            op.backend_data[key] = plan
        return plan

    def _run(self, plan, op, u, v):
        """Run ``plan``'s kernel on ``op``: ``v += A u``, and its result (the per-chunk
        ``u . Au`` of a dot plan).  A QFunction Numba cannot compile marks the plan
        ``fallback`` (warned once per operator), and nothing runs."""
        static = plan["static"]
        args = [
            static[n] if n in static else numba_operator.field_arrays(op, n, u)
            for n in plan["names"]
        ]
        try:
            ctx = op.qf.context
            ctx = None if ctx is None else np.array([ctx], dtype=ctx.dtype)  # (1,) records
            # an inlined QFunction's lanes vectorize in (first-call) compilation with SLP on
            with numba_kernels._slp_vectorize() if plan["traced"] else contextlib.nullcontext():
                with numba_kernels.dynamic_schedule(v.size):
                    return plan["kernel"](ctx, static["meta"], *plan["schedule"], *args, v)
        except NumbaError as exc:
            plan["fallback"] = True
            warnings.warn(
                f"/cpu/self/numba cannot compile QFunction {op.qf.name!r} "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0]}); "
                "this operator uses the NumPy reference path",
                RuntimeWarning,
                stacklevel=5,
            )
            return None

    def operator_apply_add(self, op: Operator, u: FloatArray | None, v: FloatArray) -> None:
        """``v += A u`` through the fused kernel (reference path if the QFunction won't compile)."""
        plan = self._plan(op)
        if not plan.get("fallback"):
            self._run(plan, op, u, v)
        if plan.get("fallback"):
            super().operator_apply_add(op, u, v)

    def operator_apply_dot(self, op: Operator, u: FloatArray, v: FloatArray) -> np.float64 | None:
        """``v = A u`` and ``u . v``, the product formed inside the fused kernel where
        :func:`.operator.dot_fields` allows; else None (apply, then the vector dot)."""
        data = op.backend_data
        if "numba-dot-fields" not in data:
            data["numba-dot-fields"] = numba_operator.dot_fields(op)
        if data["numba-dot-fields"] is None:
            return None
        plan = self._plan(op, dot=True)
        if plan.get("fallback"):
            return None
        v[...] = 0.0
        partial = self._run(plan, op, u, v)  # (num_chunks,)
        return None if plan.get("fallback") else partial.sum()
