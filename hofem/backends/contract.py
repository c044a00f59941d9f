"""The backend contract: what every backend provides, and the abilities it may declare.

The interface objects (:class:`~hofem.ElemRestriction`, :class:`~hofem.Basis`,
:class:`~hofem.Operator`, :class:`~hofem.Ceed`, :func:`hofem.cg`) validate their
arguments and then call their Ceed's backend through the methods of
:class:`Backend`, and only those. A backend keeps what it prepares for an object in
that object's ``backend_data`` (a record of its own type, set in the ``*_setup``
hook; an operator's is a cache of compiled plans by slot, emptied when a field
changes): the interface never reads it, it asks the backend
(:meth:`Backend.restriction_device_offsets`).

Optional abilities are declared, never probed:

- ``device_cg``: a device-resident CG loop, or None. :func:`hofem.cg` hands the
  backend the :class:`DeviceCGTarget` the operator describes itself with
  (:meth:`hofem.Operator.device_cg_target`), so no backend imports the operator
  types it serves.
- ``vector_ops()``: CG's vector work; every backend returns one (the array
  library's by default, its own kernels where it has them).
- ``operator_apply_dot(op, u, v)``: ``v = A u`` with ``u . A u`` formed inside the
  operator kernel, or None where the kernel does not form it.

:class:`hofem.backends.ref.RefBackend`, the root of every delegation chain,
subclasses :class:`Backend` and implements all of it (``device_cg = None``); a new
backend subclasses the simplest backend of its array module and overrides what it
makes faster, abilities included.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..typing import Array  # the shapes are in each method's docstring
from ..vector_ops import VectorOps

__all__ = [
    "Array",
    "Backend",
    "DeviceCG",
    "DeviceCGTarget",
    "DeviceExchange",
    "DistributedParts",
    "SupportsApply",
]


class SupportsApply(Protocol):
    """A square operator on vectors of one backend: what a device CG applies."""

    shape: tuple[int, int]

    def apply(self, u: Array, v: Array) -> None:
        """``v = A u``, ``u`` and ``v`` of shape ``(shape[1],)`` and ``(shape[0],)``."""

    def apply_add(self, u: Array, v: Array) -> None:
        """``v += A u``."""


class DeviceExchange(Protocol):
    """A distributed operator's communication, for a device CG on its rank's L-vectors.

    An L-vector holds the rank's owned entries (the T-vector's: with one component its
    first ``num_owned``, see :attr:`DistributedParts.owned`) and the ghosts, which
    these calls fill from their owners and send back to them in place. Every call
    only queues work on the current stream (no host synchronization), so the whole
    iteration can be captured as a CUDA graph.
    """

    num_owned: int

    def start_prolong_l(self, x_l: Array) -> None:
        """Begin filling the ghost entries of ``x_l (l_size,)`` from their owners."""

    def finish_prolong_l(self) -> None:
        """Order the current stream after the ghosts of :meth:`start_prolong_l` arrived."""

    def start_transpose_l(self, y_l: Array) -> None:
        """Begin sending the ghost entries of ``y_l (l_size,)`` to their owners."""

    def finish_transpose_l(self) -> list[tuple[Array, Array]]:
        """``(index (k,), values (k,))`` pairs to add into ``y_l`` (indices unique per pair)."""

    def allreduce_inplace(self, values: Array) -> None:
        """Sum the float64 ``values (k,)`` over the ranks, in place, stream-ordered."""

    def agree(self, count: int) -> int:
        """The smallest ``count`` over the ranks (host collective): every rank must replay
        the same number of iterations, since each one holds collective calls."""


@dataclass(frozen=True)
class DistributedParts:
    """A distributed operator on a rank: two local operators and the exchange between them.

    Attributes
    ----------
    exchange : DeviceExchange
    before, after : SupportsApply or None
        Square operators on the rank's L-vectors adding their part of ``A``
        (``apply_add``): ``before`` touches no ghost (it runs while the ghosts
        arrive), ``after`` the rest.
    l_size : int
    owned : array (t_size,) of int64, or None
        The L positions of the T-vector's entries where they are not the L-vector's
        head (several components, each a block of the L-vector); None: the first
        ``t_size``.
    """

    exchange: DeviceExchange
    before: SupportsApply | None
    after: SupportsApply | None
    l_size: int
    owned: Array | None = None


@dataclass(frozen=True)
class DeviceCGTarget:
    """What a device CG needs from the operator it solves with; the operator fills it.

    A square hofem operator describes itself (:meth:`hofem.Operator.device_cg_target`),
    so the backend's loop branches on these fields, not on operator types.

    Attributes
    ----------
    operator : SupportsApply
        The square operator on L-vectors of size ``n`` that each iteration applies
        (a restricted operator's wrapped one).
    fusable : bool
        ``operator`` is a single :class:`hofem.Operator`, whose backend may form
        ``p . Ap`` inside its kernel (``cg_apply_dot`` of the CUDA backends).
    free_dofs : array (n_free,) or None
        Sorted free L-vector indices of a restricted operator
        (:func:`hofem.restrict_dofs`), on the device; None: every DOF is free.
    work_vectors : (array, array) or None
        Vectors the loop may use for ``p`` and ``Ap``: a restricted operator's input
        and output L-vectors ``(n,)``, zero on the constrained DOFs (the loop keeps
        them zero), or a distributed operator's scratch L-vectors ``(l_size,)``.
    constrained_dofs : callable () -> int64 array (n - n_free,), or None
        The L-vector indices not in ``free_dofs`` (made on first call).
    distributed : DistributedParts or None
        A distributed operator's parts (``operator`` is then the operator on
        T-vectors of size ``n``, and each iteration runs on the rank's L-vectors).
    """

    operator: SupportsApply
    fusable: bool
    free_dofs: Array | None = None
    work_vectors: tuple[Array, Array] | None = None
    constrained_dofs: Callable[[], Array] | None = None
    distributed: DistributedParts | None = None


class DeviceCG(Protocol):
    """A backend's device-resident CG for one operator (``Backend.device_cg``'s result)."""

    def solve(
        self,
        b: Array,
        x0: Array | None,
        tol: float,
        maxiter: int,
        inv_diag: Array | None = None,
        check_every: int | None = None,
    ) -> tuple[Array, str, int, float]:
        """Solve to ``||b - A x|| <= tol``.

        Returns ``(x, status, iterations, r_norm)``, ``status`` one of
        ``"converged"``, ``"breakdown"``, ``"maxiter"``; ``x`` shaped like ``b``.
        """


@runtime_checkable
class Backend(Protocol):
    """Every backend: the arithmetic of the interface objects, and declared abilities.

    Shapes follow the layouts of ``docs/design.md``: L-vectors ``(l_size,)``,
    E-vectors ``(num_elem, num_comp, elem_size)``, basis arrays ``(num_elem,
    [dim,] num_comp, Q or P)``, all float64 arrays of :attr:`xp`.

    Attributes
    ----------
    resource : str
        The full resource name, e.g. ``"/cpu/self/ref"``.
    xp : module
        The array module of the backend's vectors (NumPy or CuPy).
    STRIDES_LANES : int
        Elements interleaved per block in the ``hf.STRIDES_BACKEND`` layout.
    device_cg : callable (A, DeviceCGTarget) -> DeviceCG or None, or None
        The optional device CG loop: None where the backend has none; where it
        has one, returns None for operators it cannot solve with.
    """

    resource: ClassVar[str]
    xp: ClassVar[Any]
    STRIDES_LANES: ClassVar[int]
    device_cg: Callable[[SupportsApply, DeviceCGTarget], DeviceCG | None] | None

    @classmethod
    def check_available(cls) -> None:
        """Raise ImportError (naming the extra to install) when the backend cannot run here."""

    # --- arrays and vectors
    def asarray(self, x: Any, dtype: Any = None) -> Array:
        """``x`` (host or device) as an array of :attr:`xp`."""

    def to_numpy(self, x: Any) -> Any:
        """``x`` as a host NumPy array (copied from the device where needed)."""

    def check_vector(self, x: Any, name: str, shape: tuple | None, flat_ok: bool = False) -> None:
        """Raise TypeError/ValueError (naming ``name``) unless ``x`` is a float64 array of
        :attr:`xp` of ``shape`` (or its flattened size with ``flat_ok``)."""

    def synchronize(self) -> None:
        """Wait for queued device work."""

    def release_cached_memory(self) -> None:
        """Give cached free device memory back."""

    def scatter_entries(self, values: Array, index: Array, out: Array) -> None:
        """``out[index] = values``: ``values`` (n,), ``index`` (n,) distinct, ``out`` (l_size,)."""

    def gather_add_entries(self, w: Array, index: Array, v: Array) -> None:
        """``v += w[index]``: ``w`` (l_size,), ``index`` (n,), ``v`` (n,)."""

    def vector_ops(self) -> VectorOps:
        """CG's vector work on this backend's vectors (see :mod:`hofem.vector_ops`)."""

    # --- restriction G
    def restriction_setup(self, r: Any) -> None:
        """Prepare ``r`` (set ``r.backend_data``), after its arguments were checked."""

    def restriction_apply(self, r: Any, u: Array, t_mode: Any, signed: bool = True) -> Array:
        """L ``(l_size,)`` -> E ``(num_elem, num_comp, elem_size)``, or the transpose
        (summing shared entries); ``signed=False`` ignores orientations."""

    def restriction_device_offsets(self, r: Any) -> Array | None:
        """The component-0 offsets ``(num_elem * elem_size,)`` the backend holds in device
        memory for ``r``, or None where it keeps none (host backends, identity layouts)."""

    # --- basis B
    def basis_setup(self, b: Any) -> None:
        """Prepare ``b`` (set ``b.backend_data``), e.g. move its matrices to the device."""

    def basis_apply(self, b: Any, t_mode: Any, eval_mode: Any, u: Array) -> Array:
        """Interp/grad and transposes, the layouts of :meth:`hofem.Basis.apply`."""

    def basis_weight(self, b: Any, num_elem: int) -> Array:
        """Quadrature weights broadcast to ``(num_elem, Q)``."""

    # --- operator
    def operator_apply_add(self, op: Any, u: Array | None, v: Array) -> None:
        """``v += A u`` on the active L-vectors."""

    def operator_apply_dot(self, op: Any, u: Array, v: Array) -> Array | None:
        """``v = A u`` and ``u . v`` (0-d array) formed inside the operator kernel; None
        where the backend does not form it (the operator then applies, then dots)."""

    def operator_assemble_diagonal(self, op: Any) -> Array:
        """The assembled diagonal, an L-vector ``(out_size,)``."""

    def element_matrices(self, op: Any) -> tuple[Array, Any, Any]:
        """``(num_elem, C_out * P_out, C_in * P_in)`` element matrices, unsigned, and the
        active input and output restrictions."""

    def operator_assemble(self, op: Any) -> Any:
        """The CSR matrix ``(out_size, in_size)`` in the backend's sparse type."""

    def tensor_element_diagonal(self, q: Array, left: list, right: Array, out: Array) -> None:
        """Add the sum-factorized element diagonals of a pointwise matrix's entries to ``out``:
        ``out[e, j] += sum_k sum_q q[e, k, q] prod_d F_d[k][q_d, j_d]``.

        ``F_d[k]`` ``(Q_1d, K)`` is entry ``k``'s 1D factor in direction ``d`` (its weight
        folded in), direction 0 the fastest axis of the points ``q`` and of the nodes ``j``
        (:func:`hofem.entry_contraction.contract_entries`, the reference implementation).

        Parameters
        ----------
        q : array (n, size, Q_1d**dim), C-contiguous
            The pointwise matrix's distinct entries at each element's points.
        left : list of dim - 1 arrays (size, K, Q_1d)
            ``left[d - 1][k]`` is ``F_d[k]`` transposed, for ``d = 1 .. dim - 1``.
        right : array (size, Q_1d, K)
            ``right[k]`` is ``F_0[k]``.
        out : array (n, K**dim), C-contiguous
            Updated in place (a view of the caller's element diagonals).
        """

    def host_csr(self, values: Array, rows: Array, cols: Array, shape: tuple[int, int]) -> Any:
        """The host ``scipy.sparse.csr_matrix`` of COO triplets ``(n,)`` held by the backend,
        duplicates summed where the triplets live (e.g. for pyamg)."""

    def linear_operator(self, shape: tuple[int, int], op: Any) -> Any:
        """A SciPy or CuPy ``LinearOperator`` applying ``op``."""
