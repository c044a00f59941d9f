"""Element groups that sum their scatter in shared memory before adding it to the L-vector.

gen's element kernels add every element node's result to the output L-vector with one fp64
atomic add per node and component; at low order, where an element's nodes are few and
shared by many elements, those adds bound the kernel (``bakeoff/ab/ab_scatter.py`` times
them).  Elements consecutive in the mesh's order share the
nodes of their common faces, so a block that applies a group of them can first add its
elements' values per distinct node in shared memory (``slot``: each element node's place
among its group's distinct nodes) and then add each distinct node to the L-vector once
(``uniq``, in ascending order: whole sectors per warp instruction).

The tables depend only on the restriction's offsets and the group size (the elements a
block applies at once); :func:`group_tables` builds them on the device that holds the
offsets.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType
from typing import Any

# slots are 16-bit: a group has at most this many distinct nodes
MAX_GROUP_NODES = 1 << 16


@dataclasses.dataclass(frozen=True)
class GroupTables:
    """A restriction's element groups (:func:`group_tables`).

    Attributes
    ----------
    uptr : int32 array (num_groups + 1,)
        Group ``g``'s distinct L-vector entries are ``uniq[uptr[g]:uptr[g + 1]]``.
    uniq : array (uptr[-1],), the offsets' dtype
        Each group's distinct entries (component 0's offsets), ascending.
    slot : uint16 array (num_elem * elem_size,)
        Element node ``i``'s (in the offsets' order) place among its group's entries.
    max_nodes : int
        The most distinct entries of any group (the shared accumulator's length).
    """

    uptr: Any
    uniq: Any
    slot: Any
    max_nodes: int

    @property
    def nbytes(self) -> int:
        """Device bytes of the three arrays."""
        return int(self.uptr.nbytes + self.uniq.nbytes + self.slot.nbytes)


def group_tables(indices: Any, elem_size: int, group: int, xp: ModuleType) -> GroupTables:
    """The element groups of ``group`` consecutive elements of a restriction.

    Parameters
    ----------
    indices : integer array (num_elem * elem_size,) of ``xp``
        Component 0's offsets, element by element.
    elem_size : int
        Nodes per element.
    group : int
        Elements per group (the last one may have fewer).
    xp : module
        ``numpy`` or ``cupy``: where ``indices`` live and the tables are built.

    Raises
    ------
    ValueError
        A group would have :data:`MAX_GROUP_NODES` distinct entries or more.
    """
    n = int(indices.size)
    span = int(indices.max()) + 1
    group_of = xp.arange(n, dtype=xp.int64) // (group * elem_size)  # (n,)
    keys = group_of * span + indices.astype(xp.int64)  # (n,): group-major, then entry
    order = xp.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = xp.empty(n, dtype=bool)
    first[0] = True
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    distinct = sorted_keys[first]  # (total distinct,)
    num_groups = int(group_of[-1]) + 1
    uptr = xp.searchsorted(distinct // span, xp.arange(num_groups + 1))  # (num_groups + 1,)
    rank = xp.empty(n, dtype=xp.int64)
    rank[order] = xp.cumsum(first) - 1
    max_nodes = int(xp.diff(uptr).max())
    if max_nodes >= MAX_GROUP_NODES:
        raise ValueError(
            f"group={group}: a group of elements has {max_nodes} distinct nodes, slots hold "
            f"fewer than {MAX_GROUP_NODES}; use smaller groups"
        )
    return GroupTables(
        uptr=uptr.astype(xp.int32),
        uniq=(distinct % span).astype(indices.dtype),
        slot=(rank - uptr[group_of]).astype(xp.uint16),
        max_nodes=max_nodes,
    )
