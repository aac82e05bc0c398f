"""Setting an NCCL communicator up on a background thread (:mod:`distgrail.mpi.transport`).

:class:`BackgroundInit` runs ``NcclCommunicator(size, uid, rank)`` (``ncclCommInitRank``, the
slow part: docs/benchmarks.md) and :func:`warm_up` (the first NCCL calls) on a thread of
its own, on the rank's GPU, while the main thread goes on. The thread calls no MPI (mpi4py may run without
``MPI_THREAD_MULTIPLE``): the unique id was broadcast before, and the ranks share their
outcome on the main thread (:func:`wait_everywhere`). CuPy releases the GIL inside
``ncclCommInitRank``, so the main thread runs meanwhile.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .. import settings

__all__ = ["BackgroundInit", "warm_up", "pointer", "wait_everywhere", "nccl_early", "nccl_switch", "POLL_S"]


def nccl_switch(name: str) -> bool:
    """An NCCL switch of :mod:`distgrail.settings`: off with ``0``, ``no``, ``off``, ``false``."""
    return settings.get(name)


def nccl_early() -> str:
    """``DISTGRAIL_NCCL_EARLY``: ``wait`` makes the first transfer wait for the background NCCL
    set-up; anything else (default) moves transfers before it is over through host memory."""
    return settings.get("DISTGRAIL_NCCL_EARLY")


#: seconds between the ranks' looks at each other's background NCCL set-up while they wait for it
POLL_S = 0.002


def wait_everywhere(comm, setup) -> str:
    """Collective, main thread: wait until the background set-up ``setup`` is over on every
    rank, or has failed on some rank; returns this rank's state then (``"running"`` where it
    still runs: e.g. waiting in ``ncclCommInitRank`` for a rank whose set-up failed). The ranks
    look at each other every :data:`POLL_S` seconds, so no rank waits for a thread that cannot end."""
    while True:
        setup.thread.join(POLL_S)
        state = setup.state
        states = comm.allgather(state)
        if "failed" in states or all(x == "done" for x in states):
            return state


def pointer(a) -> int:
    """Address of the first byte of a contiguous CuPy or NumPy array."""
    p = getattr(getattr(a, "data", None), "ptr", None)
    return int(p) if p is not None else int(a.ctypes.data)


class BackgroundInit:
    """``NcclCommunicator(size, uid, rank)`` and the warm-up on a background thread (no MPI
    there). ``nc``: the communicator once it came up; ``error``: what failed; ``timings``:
    ``nccl_init`` and ``nccl_warmup`` seconds. :meth:`abandon` (from the main thread) aborts
    the communicator, also while the warm-up waits for a rank whose set-up failed; one that
    comes up after that is aborted by the thread itself."""

    def __init__(self, mod, be, size, uid, rank):
        self.nc, self.error, self.timings = None, None, {}
        self._lock, self._abandoned = threading.Lock(), False
        self.thread = threading.Thread(target=self._run, args=(mod, be, size, uid, rank),
                                       name="distgrail-nccl-init", daemon=True)
        self.thread.start()

    def _run(self, mod, be, size, uid, rank):
        try:
            with be.on_device():  # NCCL takes this thread's current device: be.device inside
                self._init(mod, be, size, uid, rank)
        except BaseException as e:  # noqa: BLE001 - reported at the join, on every rank
            self.error = e

    def _init(self, mod, be, size, uid, rank):
        t = time.perf_counter()
        nc = mod.NcclCommunicator(size, uid, rank)
        t1 = time.perf_counter()
        with self._lock:
            late = self._abandoned
            self.nc = None if late else nc
        if late:
            _abort(nc)
            return
        self.timings["nccl_init"] = t1 - t
        warm_up(mod, nc, be, size, rank)
        self.timings["nccl_warmup"] = time.perf_counter() - t1

    @property
    def state(self) -> str:
        """``"running"``, ``"failed"`` or ``"done"``."""
        if self.thread.is_alive():
            return "running"
        return "failed" if self.error is not None else "done"

    def join(self):
        """The communicator (waits for the thread); raises what failed there."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.nc

    def abandon(self):
        """Abort what came up, without waiting for the thread (not collective: safe whatever
        the other ranks did)."""
        with self._lock:
            self._abandoned = True
            nc, self.nc = self.nc, None
        if nc is not None:
            _abort(nc)


def _abort(nc):
    try:
        nc.abort()
    except Exception:  # noqa: BLE001 - already failing or closing
        pass


def warm_up(mod, nc, be, size, rank):
    """The first NCCL calls (slow: connections are made on first use), without MPI: a 4-byte
    broadcast from rank 0, a grouped gather of 4 bytes per rank to rank 0, and 4 bytes to the
    next rank of the ring (from the previous one: the ring of :class:`~distgrail.mpi.exchange.NcclExchange`'s
    OR, whose first call is many times slower than the next ones: docs/benchmarks.md), on a stream of their
    own, waited for."""
    u8 = mod.NCCL_UINT8
    stream = be.xp.cuda.Stream(non_blocking=True) if be.is_gpu else None
    sp = stream.ptr if stream is not None else 0
    buf = be.xp.zeros(4 * size, dtype=np.uint8)  # (no stray bytes on the wire)
    nc.bcast(pointer(buf), 4, u8, 0, sp)
    mod.groupStart()
    try:
        for r in range(1, size) if rank == 0 else ():
            nc.recv(pointer(buf) + 4 * r, 4, u8, r, sp)
        if rank != 0:
            nc.send(pointer(buf), 4, u8, 0, sp)
    finally:
        mod.groupEnd()
    if size > 1:
        ring = be.xp.zeros(8, dtype=np.uint8)
        mod.groupStart()
        try:
            nc.send(pointer(ring), 4, u8, (rank + 1) % size, sp)
            nc.recv(pointer(ring) + 4, 4, u8, (rank - 1) % size, sp)
        finally:
            mod.groupEnd()
    if stream is not None:
        stream.synchronize()
