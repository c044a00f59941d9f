"""Basis B: values and derivatives at quadrature points (libCEED's ``CeedBasis``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from .constants import (
    EVAL_GRAD,
    EVAL_INTERP,
    EVAL_WEIGHT,
    GAUSS,
    GAUSS_LOBATTO,
    HEX,
    LINE,
    NOTRANSPOSE,
    QUAD,
    TRANSPOSE,
    EvalMode,
    QuadMode,
    Topology,
    TransposeMode,
)
from .polynomials import (
    lagrange_deriv_matrix,
    lagrange_interp_matrix,
    simplex_lagrange,
    simplex_vandermonde,
    simplex_vandermonde_grad,
)
from .quadrature import gauss_quadrature, lobatto_quadrature, simplex_quadrature
from .restriction import _positive_int
from .typing import Array, ArrayLike, CeedLike, FloatArray

__all__ = ["Basis", "cell_center", "collocated_grad", "gll_lagrange_1d", "tensor_topology"]

_TENSOR_TOPOLOGY = {1: LINE, 2: QUAD, 3: HEX}


def tensor_topology(dim: int) -> Topology:
    """The tensor-product topology of dimension ``dim`` (LINE, QUAD or HEX)."""
    if dim not in _TENSOR_TOPOLOGY:
        raise ValueError(f"dim must be 1, 2 or 3, got {dim!r}")
    return _TENSOR_TOPOLOGY[dim]


def _matrix(a, name, shape):
    a = np.asarray(a, dtype=np.float64)
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
    a = a.reshape(shape)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


def kron_dense(mats_per_dim: Sequence[FloatArray]) -> FloatArray:
    """Dense tensor-product matrix; ``mats_per_dim[d]`` acts on x_d (rows, columns x fastest)."""
    out = np.ones((1, 1))
    for m in mats_per_dim:  # x first: kron(later, earlier) keeps x fastest
        out = np.kron(m, out)
    return out


class Basis:
    """Basis functions of one reference element evaluated at quadrature points.

    Create through :meth:`hofem.Ceed.BasisTensorH1Lagrange`,
    :meth:`~hofem.Ceed.BasisTensorH1`, :meth:`~hofem.Ceed.BasisH1` or
    :meth:`~hofem.Ceed.BasisH1Lagrange`.

    Tensor bases (``is_tensor``) keep only the 1D matrices and apply them by
    sum factorization; the dense ``interp``/``grad`` properties exist for
    testing and assembly.

    Attributes
    ----------
    topology : hf.Topology
    dim, num_comp : int
    num_nodes : int
        ``P``: nodes per element (``P_1d**dim`` for tensor bases).
    num_qpts : int
        ``Q``: quadrature points per element (``Q_1d**dim`` for tensor bases).
    P_1d, Q_1d : int or None
        Tensor bases only.
    interp_1d, grad_1d : ndarray, (Q_1d, P_1d), or None
    q_ref_1d, q_weight_1d : ndarray, (Q_1d,), or None
        Read-only for :meth:`~hofem.Ceed.BasisTensorH1Lagrange` bases: every basis of
        the same ``P``, ``Q`` and rule shares one copy (copy them to modify).
    interp : ndarray, (num_qpts, num_nodes)
    grad : ndarray, (dim, num_qpts, num_nodes)
    q_ref : ndarray, (num_qpts, dim)
    q_weight : ndarray, (num_qpts,)
    backend_data : object
        The backend's record for this basis (its device matrices, compiled
        programs), set by ``backend.basis_setup``; only the backend reads it.
    """

    def __init__(
        self, ceed: CeedLike, topology: Topology, num_comp: int, **data: FloatArray
    ) -> None:
        self.ceed = ceed
        self.topology = topology
        self.dim = topology.dim
        self.num_comp = _positive_int(num_comp, "num_comp")
        self.is_tensor = "interp_1d" in data
        self._first_point = None  # first_point(), made on demand
        if self.is_tensor:
            self.P_1d, self.Q_1d = data["interp_1d"].shape[1], data["interp_1d"].shape[0]
            self.interp_1d = data["interp_1d"]  # (Q_1d, P_1d)
            self.grad_1d = data["grad_1d"]  # (Q_1d, P_1d)
            self.q_ref_1d = data["q_ref_1d"]  # (Q_1d,)
            self.q_weight_1d = data["q_weight_1d"]  # (Q_1d,)
            self.num_nodes = self.P_1d**self.dim
            self.num_qpts = self.Q_1d**self.dim
            self._dense = None
        else:
            self.P_1d = self.Q_1d = None
            self.interp_1d = self.grad_1d = self.q_ref_1d = self.q_weight_1d = None
            self.num_qpts, self.num_nodes = data["interp"].shape
            self._dense = (data["interp"], data["grad"], data["q_ref"], data["q_weight"])
        self.backend_data = None  # set by the backend
        ceed.backend.basis_setup(self)

    # dense matrices (computed once on demand for tensor bases)
    def _dense_data(self):
        if self._dense is None:
            B, G = self.interp_1d, self.grad_1d
            interp = kron_dense([B] * self.dim)
            grad = np.stack(
                [kron_dense([G if e == d else B for e in range(self.dim)]) for d in range(self.dim)]
            )
            grids = np.meshgrid(*[self.q_ref_1d] * self.dim, indexing="ij")  # [z][y][x]
            q_ref = np.stack([grids[self.dim - 1 - d].ravel() for d in range(self.dim)], axis=-1)
            q_weight = kron_dense([self.q_weight_1d[:, None]] * self.dim).ravel()
            self._dense = (interp, grad, q_ref, q_weight)
        return self._dense

    @property
    def interp(self) -> FloatArray:
        return self._dense_data()[0]

    @property
    def grad(self) -> FloatArray:
        return self._dense_data()[1]

    @property
    def q_ref(self) -> FloatArray:
        return self._dense_data()[2]

    @property
    def q_weight(self) -> FloatArray:
        return self._dense_data()[3]

    @property
    def is_cell_constant(self) -> bool:
        """Whether every point gets the same values: all rows of ``interp_1d`` are equal,
        and all rows of ``grad_1d`` (tensor bases), or of ``interp`` and each ``grad[d]``.

        Such a basis (:func:`cell_center`) may be evaluated once per element, on
        :meth:`first_point`, and the result used at every point; the fused
        backends do so.
        """
        if not self.is_tensor:
            B, G = self.interp, self.grad  # (Q, P), (dim, Q, P)
            return bool(np.all(B == B[:1]) and np.all(G == G[:, :1]))
        B, G = self.interp_1d, self.grad_1d  # (Q_1d, P_1d)
        return bool(np.all(B == B[:1]) and np.all(G == G[:1]))

    @property
    def interpolates_identity(self) -> bool:
        """Whether a tensor basis's 1D interpolation is exactly the identity: its points are
        its nodes (Gauss-Lobatto points on Gauss-Lobatto nodes, BP5 and BP6), so the values
        at the points are the nodes and the fused backends skip the contraction."""
        if not self.is_tensor or self.Q_1d != self.P_1d:
            return False
        return bool(np.array_equal(self.interp_1d, np.eye(self.P_1d)))

    def first_point(self) -> Basis:
        """This basis on its first quadrature point only (``Q_1d = 1``, or ``Q = 1``).

        For a basis that :attr:`is_cell_constant`, what it gives at every point.
        Made once and kept.
        """
        if self._first_point is None and not self.is_tensor:
            interp, grad, q_ref, q_weight = self._dense_data()
            self._first_point = h1(
                self.ceed,
                self.topology,
                self.num_comp,
                self.num_nodes,
                1,
                interp[:1],
                grad[:, :1],
                q_ref[:1],
                q_weight[:1],
            )
        if self._first_point is None:
            self._first_point = tensor_h1(
                self.ceed,
                self.dim,
                self.num_comp,
                self.P_1d,
                1,
                self.interp_1d[:1],
                self.grad_1d[:1],
                self.q_ref_1d[:1],
                self.q_weight_1d[:1],
            )
        return self._first_point

    def eval_size(self, eval_mode: EvalMode) -> int:
        """Rows of the Q-vector field for ``eval_mode`` (num_comp, dim*num_comp, or 1)."""
        return {EVAL_INTERP: self.num_comp, EVAL_GRAD: self.dim * self.num_comp, EVAL_WEIGHT: 1}[
            eval_mode
        ]

    def apply(
        self, num_elem: int, t_mode: TransposeMode, eval_mode: EvalMode, u: Array | None = None
    ) -> Array:
        """Evaluate (or apply the transpose of) the basis for ``num_elem`` elements.

        Parameters
        ----------
        num_elem : int
        t_mode : hf.NOTRANSPOSE or hf.TRANSPOSE
        eval_mode : hf.EVAL_INTERP, hf.EVAL_GRAD or hf.EVAL_WEIGHT
        u : array of the backend, float64
            NOTRANSPOSE: ``(num_elem, num_comp, P)``.  TRANSPOSE: INTERP
            ``(num_elem, num_comp, Q)``, GRAD ``(num_elem, dim, num_comp, Q)``.
            Not used for EVAL_WEIGHT.

        Returns
        -------
        array, float64
            NOTRANSPOSE: INTERP ``(num_elem, num_comp, Q)``, GRAD
            ``(num_elem, dim, num_comp, Q)``, WEIGHT ``(num_elem, Q)``.
            TRANSPOSE: ``(num_elem, num_comp, P)``.

        Raises
        ------
        ValueError
            Unknown or unsupported mode (EVAL_NONE, transpose of WEIGHT), or
            ``u`` of the wrong shape.
        TypeError
            ``u`` is not a float64 array of this backend's array module.
        """
        num_elem = _positive_int(num_elem, "num_elem")
        if not isinstance(t_mode, TransposeMode):
            raise ValueError(f"t_mode must be hf.NOTRANSPOSE or hf.TRANSPOSE, got {t_mode!r}")
        if eval_mode not in (EVAL_INTERP, EVAL_GRAD, EVAL_WEIGHT):
            raise ValueError(
                f"eval_mode must be hf.EVAL_INTERP, hf.EVAL_GRAD or hf.EVAL_WEIGHT, got "
                f"{eval_mode!r}"
            )
        backend = self.ceed.backend
        if eval_mode is EVAL_WEIGHT:
            if t_mode is TRANSPOSE:
                raise ValueError("EVAL_WEIGHT has no transpose")
            return backend.basis_weight(self, num_elem)
        nodes = (num_elem, self.num_comp, self.num_nodes)
        qpts = (num_elem, self.num_comp, self.num_qpts)
        if eval_mode is EVAL_GRAD:
            qpts = (num_elem, self.dim, self.num_comp, self.num_qpts)
        backend.check_vector(u, "u", nodes if t_mode is NOTRANSPOSE else qpts)
        return backend.basis_apply(self, t_mode, eval_mode, u)

    def __repr__(self) -> str:
        if self.is_tensor:
            return (
                f"Basis(tensor, dim={self.dim}, num_comp={self.num_comp}, P_1d={self.P_1d}, "
                f"Q_1d={self.Q_1d})"
            )
        return (
            f"Basis({self.topology.value[0]}, num_comp={self.num_comp}, P={self.num_nodes}, "
            f"Q={self.num_qpts})"
        )


def cell_center(basis: Basis) -> Basis:
    """``basis`` evaluated at the cell centre, the same values at each of its points.

    ``INTERP`` gives, at every point, a field's value at the centre of the
    reference cell (``xi = 0``), and ``GRAD`` its reference gradient there.
    For a field that is affine on the cell, the gradient is exact at every
    point: this is how operators recompute the Jacobian of parallelepiped
    cells from their vertices (``geometry="on_the_fly"`` on a mesh that
    :attr:`~hofem.meshes.Mesh.is_affine`).  The result
    :attr:`~Basis.is_cell_constant`, so the fused backends evaluate it once per
    element.

    Parameters
    ----------
    basis : Basis
        A tensor basis with ``Q_1d >= P_1d`` (the 1D matrices determine the
        polynomials then), or a simplex Lagrange basis
        (:meth:`~hofem.Ceed.BasisH1Lagrange`) with ``Q >= P``; its centre is the
        centroid.

    Returns
    -------
    Basis
        Same ``dim``, ``num_comp``, ``P_1d``, points and weights; every row of
        its 1D (or dense) matrices is the centre's.

    Raises
    ------
    ValueError
        ``Q_1d < P_1d``; a dense basis with ``Q < P`` or whose ``P`` is no simplex
        polynomial space's dimension.
    """
    if not basis.is_tensor:
        return _simplex_cell_center(basis)
    P_1d, Q_1d = basis.P_1d, basis.Q_1d
    if Q_1d < P_1d:
        raise ValueError(
            f"cell_center needs Q_1d >= P_1d to recover the polynomials, got {basis!r}"
        )
    # the columns are polynomials of degree P_1d - 1 in xi; fit them on the points
    vander = np.polynomial.polynomial.polyvander(basis.q_ref_1d, P_1d - 1)  # (Q_1d, P_1d)
    coef = np.linalg.lstsq(vander, basis.interp_1d, rcond=None)[0]  # (P_1d, P_1d) by power
    center_b = coef[0]  # (P_1d,): the value at xi = 0
    center_g = coef[1] if P_1d > 1 else np.zeros(P_1d)  # (P_1d,): the derivative there
    return tensor_h1(
        basis.ceed,
        basis.dim,
        basis.num_comp,
        P_1d,
        Q_1d,
        np.tile(center_b, (Q_1d, 1)),
        np.tile(center_g, (Q_1d, 1)),
        basis.q_ref_1d,
        basis.q_weight_1d,
    )


def _simplex_cell_center(basis):
    """:func:`cell_center` of a dense basis of complete polynomials on the unit simplex."""
    dim, P, Q = basis.dim, basis.num_nodes, basis.num_qpts
    order = next((k for k in range(P) if math.comb(k + dim, dim) >= P), None)
    if basis.topology.is_tensor or math.comb(order + dim, dim) != P or Q < P:
        raise ValueError(
            f"cell_center needs a tensor basis or a simplex Lagrange basis with "
            f"num_qpts >= num_nodes, got {basis!r}"
        )
    # the columns are polynomials of degree `order`; fit them in the orthonormal basis
    vander = simplex_vandermonde(dim, order, basis.q_ref)  # (Q, P)
    coef = np.linalg.lstsq(vander, basis.interp, rcond=None)[0]  # (P modes, P nodes)
    centroid = np.full((1, dim), 1.0 / (dim + 1))
    center_b = simplex_vandermonde(dim, order, centroid) @ coef  # (1, P)
    center_g = simplex_vandermonde_grad(dim, order, centroid) @ coef  # (dim, 1, P)
    return h1(
        basis.ceed,
        basis.topology,
        basis.num_comp,
        P,
        Q,
        np.repeat(center_b, Q, axis=0),
        np.repeat(center_g, Q, axis=1),
        basis.q_ref,
        basis.q_weight,
    )


def collocated_grad(B: FloatArray, G: FloatArray) -> FloatArray | None:
    """The derivative at the points, ``D`` (Q_1d, Q_1d) with ``D @ B == G``, or None.

    Parameters
    ----------
    B, G : ndarray, (Q_1d, P_1d)
        1D interpolation and derivative matrices (host).

    Returns
    -------
    ndarray (Q_1d, Q_1d) or None
        ``G @ pinv(B)``; None when ``Q_1d < P_1d`` or ``B`` has rank below ``P_1d``
        (then no such ``D`` exists in general).
    """
    B, G = np.asarray(B, dtype=np.float64), np.asarray(G, dtype=np.float64)
    return _collocated_grad(B.shape, B.tobytes(), G.tobytes())


@functools.lru_cache(maxsize=128)
def _collocated_grad(shape, B_bytes, G_bytes):
    """:func:`collocated_grad` of the matrices with these bytes, computed once (each basis of
    the same points and nodes, and each operator's kernel, asks again), read-only."""
    Q_1d, P_1d = shape
    B = np.frombuffer(B_bytes).reshape(shape)  # (Q_1d, P_1d)
    if Q_1d < P_1d or np.linalg.matrix_rank(B) < P_1d:
        return None
    D = np.frombuffer(G_bytes).reshape(shape) @ np.linalg.pinv(B)  # (Q_1d, Q_1d)
    D.setflags(write=False)
    return D


def gll_lagrange_1d(P: int, points: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The Lagrange interpolation and derivative matrices of the ``P`` Gauss-Lobatto nodes at
    ``points``: the 1D matrices of every H1 Lagrange tensor basis and transfer.

    Parameters
    ----------
    P : int
        Nodes, >= 2.
    points : ndarray (Q,)

    Returns
    -------
    interp, grad : ndarray (Q, P)
        Read-only: computed once per ``P`` and points' values, shared (copy to modify).
    """
    points = np.asarray(points, dtype=np.float64)
    return _gll_lagrange_1d(int(P), points.tobytes())


@functools.lru_cache(maxsize=256)
def _gll_lagrange_1d(P, points_bytes):
    nodes = lobatto_quadrature(P)[0]  # (P,)
    points = np.frombuffer(points_bytes)  # (Q,)
    interp = lagrange_interp_matrix(nodes, points)  # (Q, P)
    grad = lagrange_deriv_matrix(nodes, points)  # (Q, P)
    interp.setflags(write=False)
    grad.setflags(write=False)
    return interp, grad


@functools.lru_cache(maxsize=128)
def _lagrange_1d(P, Q, quad_mode):
    """The 1D data ``(interp_1d, grad_1d, q_ref_1d, q_weight_1d)`` of
    :func:`tensor_h1_lagrange`, computed once per ``(P, Q, quad_mode)``, read-only."""
    rule = gauss_quadrature if quad_mode is GAUSS else lobatto_quadrature
    q_ref_1d, q_weight_1d = rule(Q)  # (Q,), (Q,): fresh copies, made read-only here
    q_ref_1d.setflags(write=False)
    q_weight_1d.setflags(write=False)
    return (*gll_lagrange_1d(P, q_ref_1d), q_ref_1d, q_weight_1d)


def tensor_h1(
    ceed: CeedLike,
    dim: int,
    num_comp: int,
    P_1d: int,
    Q_1d: int,
    interp_1d: ArrayLike,  # (Q_1d, P_1d)
    grad_1d: ArrayLike,  # (Q_1d, P_1d)
    q_ref_1d: ArrayLike,  # (Q_1d,)
    q_weight_1d: ArrayLike,  # (Q_1d,)
) -> Basis:
    """Validate user 1D matrices and build a tensor basis (``Ceed.BasisTensorH1``)."""
    topology = tensor_topology(dim)
    P_1d = _positive_int(P_1d, "P_1d")
    Q_1d = _positive_int(Q_1d, "Q_1d")
    return Basis(
        ceed,
        topology,
        num_comp,
        interp_1d=_matrix(interp_1d, "interp_1d", (Q_1d, P_1d)),
        grad_1d=_matrix(grad_1d, "grad_1d", (Q_1d, P_1d)),
        q_ref_1d=_matrix(q_ref_1d, "q_ref_1d", (Q_1d,)),
        q_weight_1d=_matrix(q_weight_1d, "q_weight_1d", (Q_1d,)),
    )


def tensor_h1_lagrange(
    ceed: CeedLike, dim: int, num_comp: int, P: int, Q: int, quad_mode: QuadMode
) -> Basis:
    """Lagrange basis on P Gauss-Lobatto nodes, Q-point Gauss or Gauss-Lobatto rule."""
    P = _positive_int(P, "P", 2)
    Q = _positive_int(Q, "Q", 1)
    if quad_mode is GAUSS_LOBATTO and Q < 2:
        raise ValueError(f"Q must be >= 2 for hf.GAUSS_LOBATTO, got {Q}")
    if quad_mode is not GAUSS and quad_mode is not GAUSS_LOBATTO:
        raise ValueError(f"quad_mode must be hf.GAUSS or hf.GAUSS_LOBATTO, got {quad_mode!r}")
    interp_1d, grad_1d, q_ref_1d, q_weight_1d = _lagrange_1d(P, Q, quad_mode)  # read-only
    return tensor_h1(ceed, dim, num_comp, P, Q, interp_1d, grad_1d, q_ref_1d, q_weight_1d)


def h1(
    ceed: CeedLike,
    topology: Topology,
    num_comp: int,
    num_nodes: int,
    num_qpts: int,
    interp: ArrayLike,  # (num_qpts, num_nodes)
    grad: ArrayLike,  # (dim, num_qpts, num_nodes)
    q_ref: ArrayLike,  # (num_qpts, dim)
    q_weight: ArrayLike,  # (num_qpts,)
) -> Basis:
    """Validate user dense matrices and build a non-tensor basis (``Ceed.BasisH1``)."""
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be one of hf.LINE/TRIANGLE/QUAD/TET/HEX, got {topology!r}")
    P = _positive_int(num_nodes, "num_nodes")
    Q = _positive_int(num_qpts, "num_qpts")
    dim = topology.dim
    return Basis(
        ceed,
        topology,
        num_comp,
        interp=_matrix(interp, "interp", (Q, P)),
        grad=_matrix(grad, "grad", (dim, Q, P)),
        q_ref=_matrix(q_ref, "q_ref", (Q, dim)),
        q_weight=_matrix(q_weight, "q_weight", (Q,)),
    )


def h1_lagrange(
    ceed: CeedLike,
    topology: Topology,
    num_comp: int,
    order: int,
    q_order: int,
    rule: str = "collapsed",
) -> Basis:
    """Simplex Lagrange basis of ``order`` with a simplex rule exact to degree ``q_order``.

    ``rule`` picks the simplex rule (:func:`hofem.quadrature.simplex_quadrature`):
    ``"collapsed"`` Gauss-Jacobi product or ``"symmetric"`` with the fewest points.
    """
    if topology not in (Topology.LINE, Topology.TRIANGLE, Topology.TET):
        raise ValueError(
            f"BasisH1Lagrange builds hf.LINE, hf.TRIANGLE or hf.TET bases, got {topology!r}; "
            "use BasisTensorH1Lagrange for quads and hexes"
        )
    order = _positive_int(order, "order")
    q_order = _positive_int(q_order, "q_order", 0)
    dim = topology.dim
    q_ref, q_weight = simplex_quadrature(dim, q_order, rule)  # (Q, dim), (Q,)
    interp, grad = simplex_lagrange(dim, order, q_ref)  # (Q, P), (dim, Q, P)
    return h1(
        ceed, topology, num_comp, interp.shape[1], q_ref.shape[0], interp, grad, q_ref, q_weight
    )
