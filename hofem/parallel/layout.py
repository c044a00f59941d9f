"""``ParNumbering``: one rank's view of a global node numbering (owned, ghosts, neighbours)."""

from dataclasses import dataclass

import numpy as np

from ..meshes.numbering import H1Numbering
from ..typing import IndexArray

__all__ = ["ParNumbering"]


@dataclass(frozen=True, eq=False)
class ParNumbering:
    """One rank's view of a global H1 node numbering.

    Attributes
    ----------
    local : hofem.meshes.H1Numbering
        Offsets into the local node order: owned nodes ``0..num_owned - 1``,
        then ghosts.
    num_owned : int
    num_nodes : int
        Local nodes, owned and ghosts.
    first_global : int
        Global id of owned node 0 (owned node ``i`` is ``first_global + i``).
    num_global : int
    send_ranks : ndarray of int32, shape ``(num_send,)``
        Ranks that ghost some of this rank's owned nodes, ascending.
    send_nodes : list of ndarray of int64
        ``send_nodes[k]``: owned local nodes that ``send_ranks[k]`` ghosts, in
        its ghost order.
    recv_ranks : ndarray of int32, shape ``(num_recv,)``
        Owners of this rank's ghosts, ascending.
    recv_counts : ndarray of int64, shape ``(num_recv,)``
        Ghosts from each owner; ghosts of ``recv_ranks[k]`` are the local nodes
        ``num_owned + sum(recv_counts[:k]) + arange(recv_counts[k])``.
    ghost_global : ndarray of int64, shape ``(num_nodes - num_owned,)``
    """

    local: H1Numbering
    num_owned: int
    num_nodes: int
    first_global: int
    num_global: int
    send_ranks: IndexArray  # (num_send,)
    send_nodes: list[IndexArray]
    recv_ranks: IndexArray  # (num_recv,)
    recv_counts: IndexArray  # (num_recv,)
    ghost_global: IndexArray  # (num_nodes - num_owned,)

    @property
    def global_ids(self) -> IndexArray:
        """Global id of every local node, ``(num_nodes,)`` int64."""
        owned = np.arange(self.first_global, self.first_global + self.num_owned, dtype=np.int64)
        return np.concatenate([owned, self.ghost_global])
