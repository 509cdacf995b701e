"""Where a communicator's ranks are: how many nodes, how many ranks on each.

A node is what MPI calls a shared-memory domain
(``MPI.COMM_TYPE_SHARED``): ranks on one node talk through shared memory,
ranks on different nodes through the network. The performance model
(:mod:`mpicomp.model`) and the node-aware collectives need this layout;
finding it is collective (one ``Split_type`` and one small allgather).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from mpi4py import MPI

__all__ = ["Layout", "layout", "node_comms", "rail_comm"]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The nodes of a communicator's ranks.

    ``node_of[r]`` numbers rank ``r``'s node (0 for the node of rank 0,
    then in order of each node's lowest rank), the same on every rank.
    """

    node_of: tuple[int, ...]
    #: ranks
    size: int = dataclasses.field(init=False)
    #: nodes
    nodes: int = dataclasses.field(init=False)
    #: the most ranks on one node
    ppn: int = dataclasses.field(init=False)
    #: whether every node holds the same number of ranks
    uniform: bool = dataclasses.field(init=False)
    #: whether there is more than one node
    spans_nodes: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        # computed once: the model reads them at every prediction
        nodes = max(self.node_of) + 1 if self.node_of else 0
        per_node = [self.node_of.count(i) for i in range(nodes)]
        for name, value in (("size", len(self.node_of)), ("nodes", nodes),
                            ("ppn", max(per_node, default=0)),
                            ("uniform", len(set(per_node)) <= 1), ("spans_nodes", nodes > 1)):
            object.__setattr__(self, name, value)

    def describe(self) -> str:
        return f"{self.size} ranks on {self.nodes} node(s), at most {self.ppn} per node"

    def key(self) -> str:
        """A string naming this layout (for the calibration cache and files)."""
        return ",".join(map(str, self.node_of))


def layout(comm: MPI.Intracomm) -> Layout:
    """The layout of ``comm`` (collective over ``comm``).

    Buffer collectives only: mpi4py's lowercase ones duplicate a communicator
    on their first use while holding the GIL, and a worker thread of this
    process (a nonblocking call's) blocked in such a collective kept the main
    thread from reaching the one that the other ranks waited in (a hang seen
    with Open MPI).
    """
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    me = np.array([comm.Get_rank()], np.int64)
    leader = np.empty(1, np.int64)
    try:
        local.Allreduce(me, leader, op=MPI.MIN)
    finally:
        local.Free()
    everyone = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(leader, everyone)
    leaders = everyone.tolist()
    numbering: dict[int, int] = {}
    for lead in leaders:
        numbering.setdefault(lead, len(numbering))
    return Layout(tuple(numbering[lead] for lead in leaders))


def node_comms(comm: MPI.Intracomm, lay: Layout) -> tuple[MPI.Intracomm, MPI.Intracomm]:
    """(this rank's node, the node leaders) as communicators (collective over ``comm``).

    The node communicator holds the ranks of this rank's node in ``comm``'s
    order (its rank 0, the node's lowest rank, is the leader); the leaders'
    communicator holds one rank per node, in node order, and is
    ``MPI.COMM_NULL`` on the other ranks. The caller frees both.
    """
    me = comm.Get_rank()
    node = comm.Split(lay.node_of[me], me)
    leaders = comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, lay.node_of[me])
    return node, leaders


def rail_comm(comm: MPI.Intracomm, lay: Layout) -> MPI.Intracomm:
    """The ranks that hold this rank's place on every node, as a communicator (collective
    over ``comm``): node ``i``'s ``j``-th rank (in ``comm``'s order) joins rail ``j``, whose
    rank ``i`` it is. Only for a uniform layout (every node holds the same number of
    ranks, so every rail reaches every node); the caller frees it."""
    if not lay.uniform:
        raise ValueError(f"rails need the same number of ranks on every node: {lay.describe()}")
    me = comm.Get_rank()
    place = lay.node_of[:me].count(lay.node_of[me])
    return comm.Split(place, lay.node_of[me])
