"""The private side of a communicator: a duplicate for mpicomp's own messages, and its memory.

Every compressed call runs on a :class:`PrivateComm`: a private duplicate of the
caller's communicator (so mpicomp's messages never meet the caller's), the
scratch buffers reused across calls, the device pools, and the node, leader
and rail communicators of the node-aware collectives. A communicator has one
PrivateComm for calls on the caller's thread and one for its worker thread
(nonblocking calls); each is used by one thread only.
"""
from __future__ import annotations

import concurrent.futures
import threading

from mpi4py import MPI

from . import topology
from .backend.device import DeviceMemory, DevicePools
from .backend.host import HostMemory, Scratch
from .policy import Resolved

__all__ = ["PrivateComm", "PrivateComms"]


class PrivateComm:
    """A private duplicate communicator and the scratch buffers used with it (one per thread)."""

    def __init__(self, parent: MPI.Intracomm) -> None:
        # a plain Intracomm: mpi4py's Dup returns the caller's class, and the
        # private communicator must never compress its own (agreement) traffic
        self.comm: MPI.Intracomm = MPI.Intracomm(MPI.Intracomm.Dup(parent))
        self.scratch = Scratch()
        #: where the values and streams of a call on host buffers live
        self.host = HostMemory(self.scratch)
        self.pools: DevicePools | None = None
        self._nodes: tuple[MPI.Intracomm, MPI.Intracomm] | None = None
        self._rail: MPI.Intracomm | None = None
        self._layout: topology.Layout | None = None

    def layout(self) -> topology.Layout:
        """Which node each rank is on (collective the first time)."""
        if self._layout is None:
            self._layout = topology.layout(self.comm)
        return self._layout

    def node_comms(self) -> tuple[MPI.Intracomm, MPI.Intracomm]:
        """(this rank's node, the node leaders or COMM_NULL) on the private communicator
        (collective the first time; see :func:`mpicomp.topology.node_comms`)."""
        if self._nodes is None:
            self._nodes = topology.node_comms(self.comm, self.layout())
        return self._nodes

    def rail_comm(self) -> MPI.Intracomm | None:
        """This rank's rail (the ranks of its place on every node) where every node holds
        the same number of ranks, else None (collective the first time; see
        :func:`mpicomp.topology.rail_comm`)."""
        lay = self.layout()
        if self._rail is None and lay.uniform:
            self._rail = topology.rail_comm(self.comm, lay)
        return self._rail

    def local_ranks(self, pol: Resolved, on_device: bool) -> frozenset[int]:
        """The ranks whose blocks a node-aware collective sends plain: this rank's node
        when the algorithm is ``hierarchical``, or ``auto`` and some node holds several
        ranks of a job that spans nodes; else none (host buffers only; collective)."""
        if on_device or pol.algorithm not in ("auto", "hierarchical"):
            return frozenset()
        lay = self.layout()
        if pol.algorithm == "auto" and not (lay.spans_nodes and lay.ppn > 1):
            return frozenset()
        me = lay.node_of[self.comm.Get_rank()]
        return frozenset(i for i, n in enumerate(lay.node_of) if n == me)

    def memory(self, on_device: bool) -> HostMemory | DeviceMemory:
        """Where this call's values and streams live (device: on the current stream)."""
        if not on_device:
            return self.host
        if self.pools is None:
            self.pools = DevicePools()
        return DeviceMemory(self.pools)

    def free(self) -> None:
        for c in (*(self._nodes or ()), self._rail, self.comm):
            if c is not None and c != MPI.COMM_NULL:
                c.Free()
        self._nodes = self._rail = None


class PrivateComms:
    """A communicator's privates: the caller's thread's, and the worker thread's with the
    worker (one thread, started by the first nonblocking call that compresses)."""

    def __init__(self, parent: MPI.Intracomm) -> None:
        self.parent = parent
        self._main: PrivateComm | None = None
        self._worker: PrivateComm | None = None
        self.executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def main(self) -> PrivateComm:
        """The private communicator of calls on the caller's thread (collective the first time)."""
        if self._main is None:
            self._main = PrivateComm(self.parent)
        return self._main

    def worker(self) -> tuple[PrivateComm, concurrent.futures.Executor]:
        """The worker thread's private communicator and the worker (collective the first time)."""
        with self._lock:
            if self._worker is None:
                private = PrivateComm(self.parent)
                # its layout here, in the caller's program order (collective), so that
                # the worker thread does not find it while this thread runs collectives
                private.layout()
                self._worker = private
                self.executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="mpicomp-worker"
                )
            assert self.executor is not None
            return self._worker, self.executor

    def free(self) -> None:
        """Stop the worker (after its work) and free the private communicators."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)
            self.executor = None
        for private in (self._main, self._worker):
            if private is not None:
                private.free()
        self._main = self._worker = None
