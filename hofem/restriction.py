"""Element restriction G: L-vector <-> E-vector (libCEED's ``CeedElemRestriction``)."""

from __future__ import annotations

from types import ModuleType

import numpy as np

from .constants import NOTRANSPOSE, STRIDES_BACKEND, TRANSPOSE, TransposeMode, _Sentinel
from .typing import Array, ArrayLike, CeedLike, IndexArray

__all__ = ["ElemRestriction"]


def _positive_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def index_dtype(bound: int) -> type[np.signedinteger]:
    """int32 when every index below ``bound`` fits, else int64."""
    return np.int32 if bound <= np.iinfo(np.int32).max else np.int64


def _read_only(offsets):
    """A read-only view of ``offsets`` (num_elem, 1, elem_size): what restrictions hand out.

    Kernels never write offsets, and one array kind means one compiled Numba signature.
    """
    view = offsets.view()
    view.flags.writeable = False
    return view


def expand_offsets(
    offsets: Array, num_comp: int, stride: int, l_size: int, xp: ModuleType = np
) -> Array:
    """Indices of every component from component 0's offsets, libCEED's compact form.

    Parameters
    ----------
    offsets : int array (num_elem, 1, elem_size), of ``xp``
    num_comp, stride : int
        Component ``c`` of a node is at ``offset + c * stride``.
    l_size : int
        Bounds the indices: int32 while they fit, else int64 (the components may
        pass int32 where the offsets do not).
    xp : module
        NumPy, or CuPy for device offsets.

    Returns
    -------
    int array (num_elem, num_comp, elem_size): ``offsets`` itself for one component.
    """
    if num_comp == 1:
        return offsets
    dtype = index_dtype(l_size)
    comp = xp.arange(num_comp, dtype=dtype) * stride  # (num_comp,)
    return offsets.astype(dtype, copy=False) + comp[:, None]


class ElemRestriction:
    """Map between an L-vector and the element-local E-vector.

    Create through :meth:`hofem.Ceed.ElemRestriction` (offsets, optional
    orientations) or :meth:`hofem.Ceed.StridedElemRestriction`.

    Node ``i``, component ``j`` of element ``k`` lives at L-vector index
    ``offsets[k, i] + j * comp_stride`` (offset-based) or
    ``i * strides[0] + j * strides[1] + k * strides[2]`` (strided).  Oriented
    restrictions flip the sign of the entries where ``orients[k, i]`` is True.

    ``hf.STRIDES_BACKEND`` leaves the layout to the backend, as in libCEED: the
    vector is only meant for operators of the same backend (stored quadrature
    data).  The reference and CUDA backends take the E-vector layout
    ``(1, elem_size, elem_size * num_comp)``.  ``/cpu/self/numba`` interleaves
    elements in blocks of ``lanes = 8``, as its kernels hold them (libCEED's
    blocked CPU backends do the same): block ``kb`` of ``n_b`` elements (8, the
    last one fewer) starts at ``8 kb elem_size num_comp``, and entry ``(k, j,
    i)`` sits at ``(j elem_size + i) n_b + k - 8 kb`` from there.  Read such a
    vector through :meth:`apply` (an E-vector), never by reshaping it.

    Attributes
    ----------
    num_elem, elem_size, num_comp, l_size : int
    e_size : int
        ``num_elem * num_comp * elem_size``.
    comp_stride : int or None
        Offset-based restrictions only.
    strides : tuple of 3 int or None
        Strided restrictions only.  With ``lanes > 1`` the strides of a full block
        ``(lanes, lanes * elem_size, lanes * elem_size * num_comp)``: node,
        component and block, an element's lane adding 1.
    lanes : int
        Elements interleaved per block of the backend layout (see above); 1 for
        every other restriction.
    indices : ndarray, (num_elem, num_comp, elem_size), int32 or int64
        L-vector index of every E-vector entry, on the host (for assembly and
        the reference kernels). Offset restrictions store only the offsets of
        component 0 (:meth:`compact_indices`, what the fused CPU kernels read),
        so for ``num_comp > 1`` each access adds the component strides; for one
        component it is the stored offsets themselves.  Backends with device
        memory drop the host offsets after upload (:meth:`release_host_indices`),
        and then each access copies the indices back.  Strided restrictions
        never store it: each access computes it.
    signs : ndarray, (num_elem, 1, elem_size), float64, or None
        -1 where oriented, else 1; None for unoriented restrictions.
    backend_data : object
        The backend's record for this restriction (device indices, transpose
        maps), set by ``backend.restriction_setup``; only the backend reads it
        (the device offsets through ``backend.restriction_device_offsets``).
    """

    def __init__(
        self,
        ceed: CeedLike,
        num_elem: int,
        elem_size: int,
        num_comp: int,
        l_size: int,
        *,
        comp_stride: int | None = None,
        offsets: ArrayLike | None = None,  # (num_elem, elem_size)
        orients: ArrayLike | None = None,  # (num_elem, elem_size) bool
        strides: tuple[int, int, int] | _Sentinel | None = None,
    ) -> None:
        self.ceed = ceed
        self.num_elem = _positive_int(num_elem, "num_elem")
        self.elem_size = _positive_int(elem_size, "elem_size")
        self.num_comp = _positive_int(num_comp, "num_comp")
        self.l_size = _positive_int(l_size, "l_size")
        self.comp_stride = None
        self.strides = None
        self.lanes = 1
        self.signs = None
        self._offsets = None  # (num_elem, 1, elem_size) host, offset restrictions
        if strides is None:
            self.comp_stride = _positive_int(comp_stride, "comp_stride")
            self._offsets = self._checked_offsets(offsets)
            if orients is not None:
                self.signs = self._signs(orients)
        elif strides is STRIDES_BACKEND:
            self.lanes = ceed.backend.STRIDES_LANES
            self.strides = tuple(
                self.lanes * n for n in (1, self.elem_size, self.elem_size * self.num_comp)
            )
            if self.l_size < self.e_size:
                raise ValueError(
                    f"l_size = {self.l_size} is below num_elem * num_comp * elem_size = "
                    f"{self.e_size}: hf.STRIDES_BACKEND stores every E-vector entry"
                )
        else:
            self.strides = self._checked_strides(strides)
        self.backend_data = None  # set by the backend
        ceed.backend.restriction_setup(self)

    @property
    def indices(self) -> IndexArray:
        """See the class's Attributes: a host array, stored or made on access."""
        if self.lanes > 1:
            return self._lane_indices()
        offsets, stride = self.compact_indices()
        return expand_offsets(offsets, self.num_comp, stride, self.l_size)

    def _lane_indices(self):
        """:attr:`indices` of the blocked backend layout: (num_elem, num_comp, elem_size)."""
        dtype = index_dtype(self.l_size)
        lanes, block = self.lanes, self.strides[2]
        k = np.arange(self.num_elem, dtype=dtype)  # (num_elem,)
        first = k - k % lanes  # first element of each one's block
        n_b = np.minimum(lanes, self.num_elem - first)  # (num_elem,) lanes of its block
        entry = np.arange(self.num_comp * self.elem_size, dtype=dtype)  # (j elem_size + i)
        index = (first // lanes * block + k - first)[:, None] + n_b[:, None] * entry[None, :]
        return _read_only(index.reshape(self.num_elem, self.num_comp, self.elem_size))

    def compact_indices(self) -> tuple[IndexArray, int]:
        """Indices as component-0 offsets and a component stride, libCEED's form.

        Every restriction maps component ``j`` of an element's node to
        ``offsets[k, 0, i] + j * stride``, so kernels that add the stride
        themselves read ``1 / num_comp`` of :attr:`indices`' bytes.

        Returns
        -------
        offsets : ndarray (num_elem, 1, elem_size), int32 or int64
            Stored (offset restrictions: no copy) or computed (strided, or
            after :meth:`release_host_indices`).
        stride : int
            ``comp_stride``, or ``strides[1]`` of a strided restriction.

        Raises
        ------
        ValueError
            A blocked backend layout (``lanes > 1``) of several components whose
            last block is partial: its components are ``n_b * elem_size`` apart
            there, so no one stride exists.  Use :attr:`indices`.
        """
        if self.lanes > 1:
            if self.num_comp > 1 and self.num_elem % self.lanes:
                raise ValueError(
                    f"this restriction's blocked backend layout (lanes = {self.lanes}, "
                    f"num_comp = {self.num_comp}, num_elem = {self.num_elem} not a multiple "
                    "of lanes) has no single component stride; use .indices"
                )
            return _read_only(np.ascontiguousarray(self._lane_indices()[:, :1])), self.strides[1]
        if self.strides is not None:
            dtype = self.offsets_dtype
            s0, _, s2 = (dtype(s) for s in self.strides)
            node = np.arange(self.elem_size, dtype=dtype)[None, None, :] * s0
            elem = np.arange(self.num_elem, dtype=dtype)[:, None, None] * s2
            return _read_only(elem + node), self.component_stride
        if self._offsets is None:  # released: copy the device's back
            offsets = self.ceed.to_numpy(self.kept_offsets())  # (num_elem, elem_size)
            return offsets[:, None, :], self.component_stride
        return self._offsets, self.component_stride

    def kept_offsets(self) -> Array:
        """Component-0 offsets ``(num_elem, elem_size)`` where they are kept: the backend's
        device array when it holds one (no copy back to the host), else the host
        offsets of :meth:`compact_indices`.  Component ``j`` adds ``j *``
        :attr:`component_stride`."""
        device = self.ceed.backend.restriction_device_offsets(self)  # (num_elem * elem_size,)
        if device is None:
            return self.compact_indices()[0].reshape(self.num_elem, self.elem_size)
        return device.reshape(self.num_elem, self.elem_size)

    @property
    def offsets_dtype(self) -> type[np.signedinteger]:
        """int32 or int64: the narrowest type of the :meth:`compact_indices` offsets.

        Component-0 offsets stay below ``l_size - (num_comp - 1) * comp_stride``, so
        a 3-component field of 1e9 nodes (3e9 L-vector entries) keeps int32
        offsets; kernels add ``c * stride`` in 64 bits.
        """
        if self.strides is not None:
            return index_dtype(self.l_size)
        return index_dtype(self.l_size - (self.num_comp - 1) * self.comp_stride)

    @property
    def component_stride(self) -> int:
        """L-vector distance between two components of a node: ``comp_stride`` or ``strides[1]``."""
        return self.comp_stride if self.strides is None else self.strides[1]

    def release_host_indices(self) -> None:
        """Drop the host copy of the offsets (a backend holds the indices in device memory).

        Called by backends from ``restriction_setup`` once they hold the component-0
        offsets of :meth:`compact_indices` in device memory, flattened ``(num_elem *
        elem_size,)``, and hand them out by ``backend.restriction_device_offsets``;
        :attr:`indices` then copies them back on access.
        """
        self._offsets = None

    @property
    def e_size(self) -> int:
        return self.num_elem * self.num_comp * self.elem_size

    @property
    def is_oriented(self) -> bool:
        return self.signs is not None

    @property
    def is_identity(self) -> bool:
        """True when the E-vector is the L-vector itself (strided in backend order, tiling it)."""
        return (
            self.strides == (1, self.elem_size, self.elem_size * self.num_comp)
            and self.l_size == self.e_size
            and self.lanes == 1
        )

    def _checked_offsets(self, offsets):
        """``offsets`` checked to stay in the L-vector, as (num_elem, 1, elem_size) int32/int64."""
        shape = (self.num_elem, self.elem_size)
        offsets = np.asarray(self.ceed.to_numpy(offsets) if offsets is not None else None)
        if offsets.dtype.kind not in "iu":
            raise ValueError(
                f"offsets must be an integer array (int32 or int64), got dtype {offsets.dtype}"
            )
        if offsets.size != self.num_elem * self.elem_size:
            raise ValueError(
                f"offsets must have shape (num_elem, elem_size) = {shape}, got {offsets.shape}"
            )
        offsets = offsets.reshape(shape)
        last = (self.num_comp - 1) * self.comp_stride
        if offsets.size and (int(offsets.min()) < 0 or int(offsets.max()) + last >= self.l_size):
            bad = (offsets < 0) | (offsets.astype(np.int64) + last >= self.l_size)
            k, i = (int(a[0]) for a in np.nonzero(bad))
            raise ValueError(
                f"offsets[{k}, {i}] = {offsets[k, i]} is out of range: entries must satisfy "
                f"0 <= offset and offset + (num_comp - 1) * comp_stride = offset + {last} "
                f"< l_size = {self.l_size}"
            )
        # in range, so every offset fits: no int64 temporary
        return _read_only(np.ascontiguousarray(offsets, dtype=self.offsets_dtype)[:, None, :])

    def _signs(self, orients):
        shape = (self.num_elem, self.elem_size)
        orients = np.asarray(self.ceed.to_numpy(orients))
        if orients.dtype != np.bool_:
            raise ValueError(f"orients must be a bool array, got dtype {orients.dtype}")
        if orients.size != self.num_elem * self.elem_size:
            raise ValueError(
                f"orients must have shape (num_elem, elem_size) = {shape}, got {orients.shape}"
            )
        signs = np.where(orients.reshape(shape), -1.0, 1.0)
        return signs[:, None, :]  # (num_elem, 1, elem_size)

    def _checked_strides(self, strides):
        """``strides`` as 3 ints (node, component, element), checked to stay in the L-vector."""
        try:
            strides = tuple(int(s) for s in strides)
        except TypeError:
            strides = ()
        if len(strides) != 3:
            raise ValueError(
                "strides must be 3 integers (node, component, element) or hf.STRIDES_BACKEND"
            )
        counts = (self.elem_size, self.num_comp, self.num_elem)
        ends = [(n - 1) * st for n, st in zip(counts, strides, strict=True)]
        low = sum(min(0, e) for e in ends)
        high = sum(max(0, e) for e in ends)
        if low < 0 or high >= self.l_size:
            raise ValueError(
                f"strides {strides} reach L-vector index {high} (min {low}), outside "
                f"[0, l_size = {self.l_size})"
            )
        return strides

    def apply(self, u: Array, t_mode: TransposeMode = NOTRANSPOSE) -> Array:
        """Apply the restriction (L -> E) or its transpose (E -> L, summing shared nodes).

        Parameters
        ----------
        u : array of the backend, float64
            NOTRANSPOSE: L-vector, shape ``(l_size,)``.  TRANSPOSE: E-vector,
            shape ``(num_elem, num_comp, elem_size)`` or ``(e_size,)``.
        t_mode : hf.NOTRANSPOSE or hf.TRANSPOSE

        Returns
        -------
        array
            ``(num_elem, num_comp, elem_size)`` or ``(l_size,)``.

        Raises
        ------
        TypeError
            ``u`` is not an array of this backend's array module or not float64.
        ValueError
            Wrong shape.
        """
        if not isinstance(t_mode, TransposeMode):
            raise ValueError(f"t_mode must be hf.NOTRANSPOSE or hf.TRANSPOSE, got {t_mode!r}")
        backend = self.ceed.backend
        if t_mode is NOTRANSPOSE:
            backend.check_vector(u, "u", (self.l_size,))
            return backend.restriction_apply(self, u, t_mode)
        backend.check_vector(u, "u", (self.num_elem, self.num_comp, self.elem_size), flat_ok=True)
        e = u.reshape(self.num_elem, self.num_comp, self.elem_size)
        return backend.restriction_apply(self, e, TRANSPOSE)

    def multiplicity(self) -> Array:
        """Number of E-vector entries that map to each L-vector entry.

        Returns
        -------
        array, (l_size,), float64
        """
        xp = self.ceed.xp
        ones = xp.ones((self.num_elem, self.num_comp, self.elem_size))
        return self.ceed.backend.restriction_apply(self, ones, TRANSPOSE, signed=False)

    def __repr__(self) -> str:
        kind = (
            "strided" if self.strides is not None else "oriented" if self.signs is not None else ""
        )
        return (
            f"ElemRestriction({kind + ', ' if kind else ''}num_elem={self.num_elem}, "
            f"elem_size={self.elem_size}, num_comp={self.num_comp}, l_size={self.l_size})"
        )
