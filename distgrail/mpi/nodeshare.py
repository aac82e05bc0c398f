"""Arrays shared by the MPI ranks of one node (MPI-3 shared-memory windows).

The distributed build gathers the labels through these: every rank writes (downloads from its
GPU) its block of dimensions straight into its node's shared copy of the label array, the node
leaders then exchange the blocks made on other nodes, and every rank finds all labels in its
node's copy. On one node no label byte goes through MPI messages (moving the labels that way
took longer than computing them: docs/benchmarks.md).

Ranks are grouped by ``Split_type(COMM_TYPE_SHARED)``. ``DISTGRAIL_RANKS_PER_NODE=k`` splits
each node further into groups of k ranks, so that the exchange between "nodes" can be tested
on one machine. Shared memory lives in ``/dev/shm`` (MPICH, Open MPI): :func:`room_for` checks
that it has room, and ``DISTGRAIL_SHM=0`` turns the shared path off (the caller then gathers
with ``Gatherv``).
"""

from __future__ import annotations

import os

import numpy as np

from .. import settings

__all__ = ["NodeGroups", "room_for", "shm_enabled"]

#: /dev/shm must keep this much free beyond the array
_SHM_MARGIN = 64 << 20


def shm_enabled() -> bool:
    return settings.get("DISTGRAIL_SHM")


def room_for(nbytes: int, path: str = "/dev/shm") -> bool:
    """True when ``path`` (the tmpfs MPI maps shared windows from) has room for ``nbytes``.
    Containers often mount a 64 MB /dev/shm; writing past it kills the process (SIGBUS)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return True  # no /dev/shm: the MPI library uses something else
    return st.f_bavail * st.f_frsize >= int(nbytes) + _SHM_MARGIN


class NodeGroups:
    """The ranks of ``comm`` grouped by node, with shared arrays on each node.

    Attributes
    ----------
    node : communicator of the ranks of this node (node rank 0 is the leader)
    leaders : communicator of the node leaders (None on other ranks)
    leader_of : ndarray, the leaders-communicator rank of every rank's leader
    """

    def __init__(self, comm):
        from mpi4py import MPI

        from .errors import run_shared

        self._MPI = MPI
        me = comm.Get_rank()
        # rank 0's setting for every rank, read before any split (one rank's own value, or its
        # error, would leave the others waiting in a split it never joins)
        per = comm.bcast(run_shared(comm, "reading DISTGRAIL_RANKS_PER_NODE", settings.get,
                                    "DISTGRAIL_RANKS_PER_NODE"), root=0)
        node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=me)
        if per is not None:
            sub = node.Split(node.Get_rank() // per, key=me)
            node.Free()
            node = sub
        self.node = node
        lead = node.Get_rank() == 0
        leaders = comm.Split(0 if lead else MPI.UNDEFINED, key=me)
        self.leaders = leaders if lead else None
        my_leader = node.bcast(leaders.Get_rank() if lead else None, root=0)
        self.leader_of = np.array(comm.allgather(my_leader), dtype=np.int64)
        self._windows = []

    def array(self, shape, dtype) -> np.ndarray:
        """Collective over ``comm``: an array of ``shape`` shared by the ranks of each node
        (one copy per node, allocated by its leader). Freed by :meth:`free`."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(nbytes, 1) if self.node.Get_rank() == 0 else 0
        win = self._MPI.Win.Allocate_shared(size, 1, comm=self.node)
        self._windows.append(win)
        buf, _ = win.Shared_query(0)
        return np.frombuffer(buf, dtype=np.uint8, count=nbytes).view(dtype).reshape(shape)

    def allgather_rows(self, a: np.ndarray, counts, chunk_bytes: int) -> None:
        """Collective: rank r has written rows ``offsets[r]:offsets[r+1]`` of its node's shared
        array ``a``; afterwards every node's copy holds all rows."""
        self.node.Barrier()  # every rank of the node has written its rows
        if self.leaders is not None and self.leaders.Get_size() > 1:
            MPI = self._MPI
            off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            row = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
            flat = a.reshape(-1).view(np.uint8)
            for leader, s, r in self._runs(counts):  # consecutive ranks of one node: one broadcast
                lo, hi = int(off[s]) * row, int(off[r + 1]) * row
                for c in range(lo, hi, chunk_bytes):
                    self.leaders.Bcast([flat[c:min(hi, c + chunk_bytes)], MPI.BYTE], root=leader)
        self.node.Barrier()  # the leader has received the other nodes' rows

    def _runs(self, counts):
        """``(leader, first rank, last rank)`` for each run of consecutive ranks of one node."""
        r, runs = 0, []
        while r < len(counts):
            s = r
            while r + 1 < len(counts) and self.leader_of[r + 1] == self.leader_of[s]:
                r += 1
            runs.append((int(self.leader_of[s]), s, r))
            r += 1
        return runs

    def gather_rows_to_root(self, a: np.ndarray, counts, chunk_bytes: int) -> None:
        """Collective: like :meth:`allgather_rows`, but only the node of rank 0 ends up with all
        rows (the other nodes' leaders send their rows to rank 0's leader, rank 0 itself)."""
        self.node.Barrier()
        if self.leaders is not None and self.leaders.Get_size() > 1:
            MPI = self._MPI
            off = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
            row = a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
            flat = a.reshape(-1).view(np.uint8)
            me, root = self.leaders.Get_rank(), int(self.leader_of[0])
            for tag, (leader, s, r) in enumerate(self._runs(counts)):
                if leader == root or me not in (leader, root):
                    continue
                lo, hi = int(off[s]) * row, int(off[r + 1]) * row
                for c in range(lo, hi, chunk_bytes):
                    piece = [flat[c:min(hi, c + chunk_bytes)], MPI.BYTE]
                    if me == leader:
                        self.leaders.Send(piece, dest=root, tag=tag)
                    else:
                        self.leaders.Recv(piece, source=leader, tag=tag)
        self.node.Barrier()

    def free_arrays(self) -> None:
        """Collective: free the shared arrays made so far, keep the groups (views of the arrays
        must not be used afterwards)."""
        while self._windows:
            self._windows.pop().Free()

    def free(self) -> None:
        """Collective: free the shared arrays (views of them must not be used afterwards)."""
        self.free_arrays()
        if self.leaders is not None:
            self.leaders.Free()
            self.leaders = None
        self.node.Free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
