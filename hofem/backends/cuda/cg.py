"""CG with its scalars and its control on the device (``cg.cu``), for every CUDA backend.

:func:`hofem.cg` hands a solve here when ``A`` is an operator of a CUDA
backend (see :meth:`CudaRefBackend.device_cg`).  One iteration is six
launches and no host synchronization:

1. ``Ap = A p``: on ``/gpu/cuda/gen`` the operator's fused kernel also writes
   the block partial sums of ``p . Ap`` (:class:`.operator_fuse.FusedOperator`);
   other operators apply, then ``cg_dot`` adds up ``p . Ap``;
2. ``cg_zero_entries``: ``Ap = 0`` on the constrained DOFs of a restricted
   operator (:func:`hofem.restrict_dofs`); the solve runs on L-vectors whose
   constrained entries stay zero, so no scatter or gather per iteration;
3. ``cg_alpha`` (one block): ``pAp``, ``alpha`` and the breakdown test;
4. ``cg_update_r``: ``r -= alpha Ap`` and the partial sums of ``r . r`` (and
   of ``r . z``, ``z = r / diag(A)`` for Jacobi, never stored);
5. ``cg_beta`` (one block): the iteration count, the convergence and
   ``maxiter`` tests, ``beta``;
6. ``cg_update_px``: ``x += alpha p`` (deferred from step 4: this pass reads
   ``p`` anyway), ``p = z + beta p``, and ``Ap = 0`` for the fused kernel,
   which adds into it.

Vector traffic per iteration besides the operator: 24 + 48 = 72 bytes per DOF
(Jacobi: 88), against 96 for the host loop (``p . Ap``, the fused x/r update
with ``r . r``, the p update, zeroing ``Ap``), plus 40 for a restricted
operator's scatter and gather there.

Every kernel returns at once once the device status says the solve stopped,
so the host checks only every ``check_every`` iterations and still gets the
iterate and the iteration count of the iteration that stopped (the last
iteration's deferred ``x += alpha p`` is added then).  On ``/gpu/cuda/gen``
the iteration is captured once as a CUDA graph and replayed.

A distributed operator (``DeviceCGTarget.distributed``: a rank's two local
operators and its :class:`~hofem.backends.contract.DeviceExchange`) runs the
same iteration with ``p`` and ``Ap`` on the rank's L-vectors, whose head is
the T-vector with one component (with several, each component is a block of
the L-vector: ``x`` and ``r`` are L-vectors too, zero on the ghosts, which
step 2 zeroes in ``Ap`` with the constrained DOFs): step 1 becomes the ghosts
of ``p`` received into their places while the interior cells run, the boundary
cells, the ghost entries of ``Ap`` sent to the owners and added there
(``cg_add_entries``), and ``p . Ap`` summed by one block (``cg_reduce``) and
then over the ranks (a NCCL all-reduce of one value); ``r . r`` (and
``r . z``) likewise after step 4.  Every collective
call is inside the captured graph, one after the other on the stream, and
every rank replays the same number of iterations between checks.
"""

import functools
import itertools
import math
import time
from collections.abc import Callable

import numpy as np

from ..contract import Array, DeviceCGTarget
from . import kernels
from .device import cupy

__all__ = ["DeviceCG"]

# the state arrays of cg.cu
S_RZ, S_ALPHA, S_BETA, S_RR, S_TOL, NUM_SCALARS = range(6)
F_STATUS, F_ITERATIONS, F_MAXITER, NUM_FLAGS = range(4)
RUNNING, CONVERGED, BREAKDOWN, MAXITER_REACHED, NONFINITE = range(5)
# RUNNING is reported only when the initial residual already met the tolerance
_STATUS_NAMES = {RUNNING: "converged", CONVERGED: "converged", BREAKDOWN: "breakdown"}
_STATUS_NAMES |= {MAXITER_REACHED: "maxiter", NONFINITE: "breakdown"}
# stops in cg_beta with a finite residual: that iteration's x += alpha p (cg_update_px)
# is still to add; a breakdown leaves x at the last iterate with a finite residual
_X_PENDING = (CONVERGED, MAXITER_REACHED)

_THREADS = 256  # vector kernels; the one-block reductions use 1024
# GPU work between two convergence checks when check_every is automatic: a check
# (one synchronization, then the queue refilled) costs about 20-50 us, so about 2%
_CHECK_SECONDS = 2.5e-3
_MAX_CHECK_EVERY = 1000
_NULL = np.uint64(0)  # a null pointer argument


def _flags(f):
    """(status, iterations) read from the device state ``f`` (one synchronization)."""
    host = f.get()  # (NUM_FLAGS,)
    return int(host[F_STATUS]), int(host[F_ITERATIONS])


@functools.cache
def _solver_stream(device_id):
    """The stream the device CG iterates on, one per device (its pool blocks are reused)."""
    with cupy.cuda.Device(device_id):
        return cupy.cuda.Stream(non_blocking=True)


class DeviceCG:
    """Conjugate gradients on the device for one operator.

    Parameters
    ----------
    backend : CudaRefBackend or a subclass
        The backend of the operator (its ``cg_apply_dot``).
    A : callable
        Applies the solved operator to a vector of ``b``'s size (``A(x0)`` for the
        initial residual): an operator, or a restricted one, on a CUDA backend.
    target : DeviceCGTarget
        What ``A`` tells of itself (:meth:`hofem.Operator.device_cg_target`): the
        square operator each iteration applies on L-vectors, whether its backend may
        fuse ``p . Ap`` into it, and a restricted operator's free DOFs.
    """

    def __init__(self, backend, A: Callable[[Array], Array], target: DeviceCGTarget):
        self.A = A
        self.target = target
        self.inner, self.free = target.operator, target.free_dofs  # free: (n_free,) or None
        self.n = self.inner.shape[0]
        self.module = kernels.cg_module()
        self.blocks = 4 * cupy.cuda.Device().attributes["MultiProcessorCount"]
        self.parts = target.distributed
        if self.parts is None:
            # the fused kernel that also forms p . Ap, or None
            self.fused = backend.cg_apply_dot(self.inner) if target.fusable else None
            self.l_size, self.exchange = self.n, None
        else:  # p and Ap are the rank's L-vectors, whose first n entries are the T-vector
            local = [op for op in (self.parts.before, self.parts.after) if op is not None]
            fused = [backend.cg_apply_dot(op) for op in local]
            self.fused = fused if all(k is not None for k in fused) else None
            self.l_size, self.exchange = self.parts.l_size, self.parts.exchange
            owned = self.parts.owned  # (t_size,) or None: the T-vector is p's head
            if owned is not None:  # x and r on L-vectors too, zero outside the solved DOFs
                self.free = owned if self.free is None else owned[self.free]
                self.n = self.l_size

    def _to_l(self, a):
        """A vector of the solve's size as an L-vector: zero on the constrained DOFs."""
        if self.free is None:
            return a.copy()
        out = cupy.zeros(self.n)
        out[self.free] = a
        return out

    def solve(
        self,
        b: Array,
        x0: Array | None,
        tol: float,
        maxiter: int,
        inv_diag: Array | None = None,
        check_every: int | None = None,
    ) -> tuple[Array, str, int, float]:
        """Solve ``A x = b`` to ``||r|| <= tol``.

        Parameters
        ----------
        b : cupy.ndarray (m,), float64
            ``m`` is ``A.shape[0]`` (the free DOFs of a restricted operator).
        x0 : cupy.ndarray (m,) or None
        tol : float
            Absolute tolerance on ``||b - A x||``.
        maxiter : int
        inv_diag : cupy.ndarray (m,), optional
            Jacobi preconditioning: ``z = inv_diag * r``.
        check_every : int or None
            Iterations between host checks; None: as many as run in about
            2.5 ms (measured), at most 1000.

        Returns
        -------
        x : cupy.ndarray (m,)
        status : {"converged", "breakdown", "maxiter"}
            A breakdown (``p . Ap <= 0``, NaN or Inf) leaves ``x`` as it was
            before the failing iteration.
        iterations : int
            Iterations completed (a breakdown's failed one not counted).
        r_norm : float
            ``sqrt(r . r)`` of the recurrence after the last iteration.
        """
        r0 = b if x0 is None else b - self.A(x0)  # (m,)
        r = self._to_l(r0)  # (n,) constrained entries 0, as for x, p, z and Ap
        del r0
        x = cupy.zeros(self.n) if x0 is None else self._to_l(x0)
        inv = None if inv_diag is None else self._to_l(inv_diag)  # (n,)
        p, Ap = self._work_vectors()  # (l_size,): p[:n] is the T-vector p, zero where constrained
        p_t = p[: self.n]
        p_t[...] = r if inv is None else inv * r  # z
        Ap[...] = 0.0
        rr, rz = self._sums(r, p_t if inv is not None else None)
        if math.sqrt(rr) <= tol:
            return self._result(x, RUNNING, 0, math.sqrt(rr))
        s = cupy.zeros(NUM_SCALARS)  # (NUM_SCALARS,) the scalars of cg.cu
        s[S_RZ], s[S_TOL] = rz, tol
        f = cupy.asarray(np.array([RUNNING, 0, maxiter], dtype=np.int64))  # (NUM_FLAGS,)
        step = self._step(x, r, p, Ap, inv, s, f)  # allocates its partial sums here
        # the iterations run on a stream of their own (captured there as a graph), after
        # the caller's stream; the arrays above stay in the caller's stream's pool
        stream = _solver_stream(cupy.cuda.Device().id)
        stream.wait_event(cupy.cuda.get_current_stream().record())
        with stream:
            status, iterations = self._iterate(step, f, maxiter, check_every, stream)
            if status in _X_PENDING:
                x += s[S_ALPHA] * p_t
        stream.synchronize()
        del r, inv
        return self._result(x, status, iterations, math.sqrt(float(s[S_RR])))

    def _work_vectors(self):
        """``p`` and ``Ap`` of the iteration, ``(l_size,)``: the target's own work vectors
        (a restricted serial operator's T-vectors, a distributed operator's scratch
        L-vectors; both set here before use), else new ones."""
        if self.target.work_vectors is not None:
            return self.target.work_vectors
        return cupy.zeros(self.l_size), cupy.zeros(self.l_size)

    def _sums(self, r, z):
        """``(r . r, r . z)`` over every rank, on the host (``z`` None: ``r . r`` twice)."""
        sums = cupy.stack([cupy.vdot(r, r), cupy.vdot(r, r if z is None else z)])  # (2,)
        if self.exchange is not None:
            self.exchange.allreduce_inplace(sums)
        rr, rz = (float(v) for v in sums.get())
        return rr, rz

    def _iterate(self, step, f, maxiter, check_every, stream):
        """Launch iterations, checking ``f`` between batches; return (status, iterations)."""
        step()  # the first iteration compiles what is not yet compiled, outside any graph
        launch = self._graph(step, stream) if self.fused is not None else step
        launched, batch = 1, 2 if check_every is None else int(check_every)
        status, iterations = _flags(f)
        while status == RUNNING and launched < maxiter:
            count = min(batch, maxiter - launched)
            if self.exchange is not None:  # every rank replays the same collectives
                count = self.exchange.agree(count)
            start = time.perf_counter()
            for _ in range(count):
                launch()
            launched += count
            status, iterations = _flags(f)  # the only synchronization
            if check_every is None:
                seconds = (time.perf_counter() - start) / count
                batch = max(1, min(_MAX_CHECK_EVERY, int(_CHECK_SECONDS / max(seconds, 1e-9))))
        return status, iterations

    def _result(self, x, status, iterations, r_norm):
        if status == NONFINITE:  # cg_beta counted the failed iteration
            iterations -= 1
        x = x if self.free is None else x[self.free]  # (m,)
        return x, _STATUS_NAMES[status], iterations, r_norm

    def _step(self, x, r, p, Ap, inv, s, f):
        """One iteration's launches on the current stream, allocation-free."""
        n, m = np.int64(self.n), self.module
        grid, threads = (self.blocks,), (_THREADS,)
        apply_pap, pap, num_pap = self._apply_stage(p, Ap, f)
        r_partial = cupy.empty(2 * self.blocks)  # (2, blocks) partial sums of r . r, r . z
        rr_partial = r_partial[: self.blocks]
        rz_partial = r_partial[self.blocks :] if inv is not None else None
        reduce_r = None
        if self.exchange is not None:  # the sums over every rank, one value each
            sum_r, r_sums = self._local_sums(
                r_partial if inv is not None else rr_partial, 2 if inv is not None else 1, f
            )

            def reduce_r():
                sum_r()
                self.exchange.allreduce_inplace(r_sums)

        constrained = self._constrained()
        names = ("cg_zero_entries", "cg_alpha", "cg_update_r", "cg_beta", "cg_update_px")
        zero, alpha, update_r, beta, update_px = (m.get_function(k) for k in names)
        pointer = lambda a: _NULL if a is None else a  # noqa: E731
        num_constrained = np.int64(0 if constrained is None else constrained.size)
        inv_p = pointer(inv)
        if reduce_r is None:
            rr_args = (rr_partial, pointer(rz_partial), np.int64(self.blocks))
        else:
            rr_args = (r_sums, r_sums[1:] if inv is not None else _NULL, np.int64(1))
        # the kernels that add into Ap need it zero: cg_update_px clears the T-vector part
        zeroed = pointer(Ap if self.fused is not None or self.parts is not None else None)
        ghosts = Ap[self.n :] if self.l_size > self.n else None  # (l_size - n,)

        def step():
            apply_pap()
            if constrained is not None:
                zero(grid, threads, (num_constrained, constrained, Ap, f))
            alpha((1,), (1024,), (pap, num_pap, s, f))
            update_r(grid, threads, (n, s, f, Ap, r, inv_p, rr_partial, pointer(rz_partial)))
            if reduce_r is not None:
                reduce_r()
            beta((1,), (1024,), (*rr_args, s, f))
            update_px(grid, threads, (n, s, f, r, inv_p, x, p, zeroed))
            if ghosts is not None:
                ghosts.fill(0.0)

        return step

    def _constrained(self):
        """``(n - n_free,)`` int64: the entries where ``Ap`` is set to zero after each
        apply (a restricted operator's constrained DOFs; on the L-vectors of a
        distributed operator of several components, also the ghosts, already sent to
        their owners); None where every entry is solved (no launch)."""
        if self.free is None or self.free.size == self.n:
            return None
        if self.parts is None or self.parts.owned is None:
            return self.target.constrained_dofs()
        solved = cupy.zeros(self.n, dtype=bool)
        solved[self.free] = True
        return cupy.flatnonzero(~solved).astype(np.int64)

    def _apply_stage(self, p, Ap, f):
        """``Ap = A p`` and ``p . Ap``: ``(launch, pAp partial sums, their count)``."""
        dot = self.module.get_function("cg_dot")
        grid, threads = (self.blocks,), (_THREADS,)
        if self.parts is None:
            fused = self.fused
            pap = cupy.empty(fused.num_blocks if fused is not None else self.blocks)

            def serial():  # Ap is zero here for the fused kernel (cg_update_px, or set before)
                if fused is not None:
                    fused.apply_dot(p, Ap, pap, f)
                else:
                    self.inner.apply(p, Ap)
                    dot(grid, threads, (np.int64(self.n), p, Ap, pap, f))

            return serial, pap, np.int64(pap.size)
        return self._distributed_apply(p, Ap, f)

    def _distributed_apply(self, p, Ap, f):
        """The rank's part of ``Ap`` on L-vectors, ghosts exchanged, ``p . Ap`` summed over
        the ranks.  ``pᵀ A p = Σ_ranks p_l . (A_local p_l)`` (``p_l = P p``), so the local
        operator's ``p . Ap``, before its ghosts go to their owners, adds up to it.

        The collective calls (the exchanges and the all-reduce) are ordered one after
        the other on the stream: NCCL calls of one communicator must not run concurrently.
        """
        parts, exchange, fused = self.parts, self.exchange, self.fused
        local = [op for op in (parts.before, parts.after) if op is not None]
        sizes = [k.num_blocks for k in fused] if fused is not None else [self.blocks]
        pap = cupy.empty(sum(sizes))  # (sum(sizes),) this rank's partial sums of p . Ap
        views = [pap[a:b] for a, b in itertools.pairwise(np.cumsum([0, *sizes]))]
        sum_local, pap_sum = self._local_sums(pap, 1, f)
        dot, add = (self.module.get_function(k) for k in ("cg_dot", "cg_add_entries"))
        grid, threads = (self.blocks,), (_THREADS,)

        def distributed():
            exchange.start_prolong_l(p)
            for j, op in enumerate(local):
                if op is parts.after:  # the cells that touch ghosts
                    exchange.finish_prolong_l()
                if fused is not None:
                    fused[j].apply_dot(p, Ap, views[j], f)
                else:
                    op.apply_add(p, Ap)
            if parts.after is None:
                exchange.finish_prolong_l()
            if fused is None:
                dot(grid, threads, (np.int64(self.l_size), p, Ap, pap, f))
            exchange.start_transpose_l(Ap)
            sum_local()  # overlaps the transfer
            for index, values in exchange.finish_transpose_l():
                add(grid, threads, (np.int64(index.size), index, values, Ap, f))
            exchange.allreduce_inplace(pap_sum)

        return distributed, pap_sum, np.int64(1)

    def _local_sums(self, partial, k, f):
        """``(launch, out (k,))``: the launch sums ``k`` equal rows of ``partial`` into
        ``out`` (one block, a fixed order), which the caller then sums over the ranks."""
        kernel = self.module.get_function("cg_reduce")
        out = cupy.zeros(k)  # (k,)
        n = np.int64(partial.size // k)
        return lambda: kernel((1,), (1024,), (partial, n, np.int32(k), out, f)), out

    @staticmethod
    def _graph(step, stream):
        """``step`` captured once as a CUDA graph: returns its replay."""
        stream.begin_capture()
        try:
            step()
        finally:
            graph = stream.end_capture()
        return lambda: graph.launch(stream)
