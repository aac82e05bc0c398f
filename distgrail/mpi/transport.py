"""Moving big arrays between ranks: GPU to GPU through NCCL, or through host memory and MPI.

:func:`transport_for` (collective) picks one :class:`Transport` for a communicator and a
backend, the same on every rank:

* ``"nccl"`` when the backend is a GPU backend, the communicator has more than one rank,
  ``cupy.cuda.nccl`` imports and is ``available`` on every rank, and ``DISTGRAIL_NCCL`` is not
  ``0``. The NCCL communicator is built from the MPI one: rank 0's unique id goes by MPI
  broadcast on the main thread, then ``NcclCommunicator(size, uid, rank)`` (slow:
  docs/benchmarks.md) runs on a background thread on the rank's bound GPU, followed by a warm-up
  of one small broadcast and one small grouped gather (the first NCCL calls are slow too), while
  the main thread goes on (reading, condensing). Transfers of at most :data:`EARLY_HOST_BYTES`
  that come before the set-up is over on every rank go through host memory as on the ``"mpi"``
  transport (the ranks decide together, per transfer); a larger one, or the first one after the
  set-up, joins the thread (:meth:`NcclTransport.ready`);
  ``DISTGRAIL_NCCL_EARLY=wait`` (rank 0's) makes the first transfer wait for the set-up
  instead. Every MPI call stays on the main thread. The
  communicator is cached on the MPI communicator (an MPI attribute) and destroyed when that
  communicator is freed, so repeated builds on one communicator set NCCL up once.
* ``"mpi"`` otherwise: the host path (download, buffer-based MPI collectives in chunks below
  2^31 bytes, upload), :mod:`distgrail.mpi.collectives`.

Any failure before ``ncclCommInitRank`` (the import, a rank's GPU, the unique id), on any rank,
makes every rank fall back to ``"mpi"`` (the ranks agree by gathering their outcomes) with one
notice on rank 0's stderr. A failure of the background set-up itself (``ncclCommInitRank`` or
the warm-up) becomes every rank's :class:`~distgrail.mpi.errors.RankError` at the first
transfer after it
(:func:`~distgrail.mpi.errors.run_shared`; ``DISTGRAIL_NCCL=0`` then takes the host path). The
one step that cannot be made hang-proof is ``ncclCommInitRank`` itself: every rank first checks
what could fail locally so that all ranks enter it or none does. Each rank's set-up times go to
:meth:`Transport.take_timings`: ``nccl_init`` (``ncclCommInitRank``), ``nccl_warmup`` (the
first calls) on the thread, ``nccl_wait`` (how long the main thread waited at the join) and
``nccl_before_ready`` (a count: the transfers that went through host memory meanwhile).

Both transports have the same two calls, on arrays that live on the rank's device (CuPy on a
GPU backend, NumPy on the CPU): :meth:`Transport.bcast` and :meth:`Transport.gatherv`.
Headers (shapes, dtypes, row counts) go by MPI pickles; allocations run under
:func:`~distgrail.mpi.errors.run_shared`, so a failure on one rank fails every rank instead of
leaving the others waiting in a transfer. Big NCCL transfers go in calls of at most
:data:`~distgrail.mpi.collectives.CHUNK_BYTES` bytes.
"""

from __future__ import annotations

import importlib
import sys
import time

import numpy as np

from ..errors import DistGrailError
from .collectives import CHUNK_BYTES, bcast_array, gather_rows, offsets, receive_buffer
from .errors import mpi, run_shared
from .ncclinit import BackgroundInit, nccl_early, nccl_switch, pointer as _ptr, wait_everywhere as _wait_everywhere

__all__ = ["Transport", "MpiTransport", "NcclTransport", "transport_for", "nccl_transport", "nccl_wanted",
           "nccl_early"]


def _notice(text: str) -> None:
    print(f"distgrail: notice: {text}", file=sys.stderr, flush=True)


def nccl_wanted() -> bool:
    """False when ``DISTGRAIL_NCCL`` turns NCCL off (``0``, ``no``, ``off``, ``false``)."""
    return nccl_switch("DISTGRAIL_NCCL")


def _nccl_module():
    """``cupy.cuda.nccl`` (raises when it does not import or NCCL is not available)."""
    nccl = importlib.import_module("cupy.cuda.nccl")
    if not getattr(nccl, "available", False):
        raise DistGrailError("cupy.cuda.nccl is not available (CuPy was built without NCCL, or "
                             "the NCCL library is missing: pip install nvidia-nccl-cu13)")
    return nccl


def _header(a):
    return tuple(int(s) for s in a.shape), np.dtype(a.dtype).str


def _check_rows(heads):
    """Row counts of every rank's block; every block has the same trailing shape and dtype."""
    trail = {(tuple(s[1:]), dt) for s, dt in heads}
    if any(len(s) == 0 for s, _ in heads) or len(trail) != 1:
        raise DistGrailError("gatherv: every rank's block needs the same trailing shape and dtype, got "
                             + ", ".join(f"rank {r}: {dt} {s}" for r, (s, dt) in enumerate(heads)))
    (rest, dt), = trail
    return np.array([s[0] for s, _ in heads], np.int64), rest, dt


#: while NCCL's set-up still runs in the background, a transfer of at most this many bytes (every
#: rank's together) goes through host memory; a larger one waits for the set-up, which ends
#: sooner than the host path would move a graph's edges (docs/benchmarks.md)
EARLY_HOST_BYTES = 1 << 28


class Transport:
    """Broadcast and gather of device arrays between the ranks of ``comm``."""

    name = "?"

    def __init__(self, comm, be):
        self.comm, self.be = comm, be

    def bcast(self, a, root: int = 0):
        """Collective: root's array ``a`` (on its device; None elsewhere) on every rank's device."""
        raise NotImplementedError

    def gatherv(self, a, root: int = 0):
        """Collective: every rank's ``a`` (any length along axis 0, same trailing shape and dtype)
        concatenated in rank order on root's device; None on the other ranks."""
        raise NotImplementedError

    def close(self):
        """Release what the transport holds (collective for NCCL)."""

    def ready(self):
        """Collective: the transport is set up on every rank (joins a background set-up)."""

    def take_timings(self) -> dict:
        """This rank's set-up seconds not yet reported (``nccl_init``, ``nccl_warmup``,
        ``nccl_wait``); each is handed out once, to the build that set the transport up."""
        t, self._timings = getattr(self, "_timings", {}), {}
        return t

    def _alloc(self, shape, dtype):
        be = self.be
        with be.on_device():
            return be.xp.empty(shape, dtype=np.dtype(dtype)) if be.is_gpu else receive_buffer(shape, dtype)


class MpiTransport(Transport):
    """Through host memory: download, MPI collectives in chunks, upload."""

    name = "mpi"

    def bcast(self, a, root: int = 0):
        comm, be = self.comm, self.be
        here = comm.Get_rank() == root
        host = run_shared(comm, "copying a broadcast to the host", be.to_host if here else None, a)
        got = bcast_array(comm, host, root)
        up = run_shared(comm, f"uploading a broadcast {got.dtype} {got.shape}", be.asarray if not here else None, got)
        return a if here else up

    def gatherv(self, a, root: int = 0, keep_own: bool = True):
        comm, be = self.comm, self.be
        here = comm.Get_rank() == root
        counts, rest, dt = _check_rows(comm.allgather(_header(a)))
        host = run_shared(comm, "copying a block to the host", be.to_host, a)
        out = run_shared(comm, "allocating a gather", receive_buffer if here else None,
                         (int(counts.sum()),) + rest, dt)
        out = gather_rows(comm, host, counts, out, root)
        if here and not keep_own:  # leave root's own rows out
            out = np.concatenate((out[:int(counts[:root].sum())], out[int(counts[:root + 1].sum()):]))
        return run_shared(comm, "uploading a gather", be.asarray if here else None, out)


class NcclTransport(Transport):
    """GPU to GPU through an NCCL communicator ``nc`` (module ``nccl`` gives the group calls
    and datatypes), or one still being set up in the background (``setup``, joined by the
    first collective: :meth:`ready`). Bytes travel as ``NCCL_UINT8`` in calls of at most
    ``CHUNK_BYTES``."""

    name = "nccl"

    def __init__(self, comm, be, nccl, nc=None, setup=None, early: str = "host"):
        super().__init__(comm, be)
        self.nccl, self.nc, self._setup, self.early = nccl, nc, setup, early
        self.device = getattr(be, "device", None)
        self._timings = {}

    @property
    def usable(self) -> bool:
        """Set up, or being set up in the background (not failed, not closed)."""
        return self.nc is not None or self._setup is not None

    def ready(self):
        """Collective: join the background set-up (``nccl_wait``: how long this thread waited);
        a failure there on any rank is a :class:`~distgrail.mpi.errors.RankError` on every rank
        (the communicators that came up are aborted)."""
        s = self._setup
        if s is None:
            return
        self._setup = None
        t = time.perf_counter()
        state = _wait_everywhere(self.comm, s)
        self._timings.update(s.timings, nccl_wait=time.perf_counter() - t)
        try:
            self.nc = run_shared(self.comm, "setting up NCCL (ncclCommInitRank in the background; "
                                 "DISTGRAIL_NCCL=0 takes the host path)", s.join if state != "running" else None)
        except BaseException:
            s.abandon()
            raise

    def _by_nccl(self, nbytes: int = 0, mine: int | None = None) -> bool:
        """Collective: True where this transfer goes by NCCL. While the background set-up still
        runs on some rank (and none failed), with ``early="host"`` (``DISTGRAIL_NCCL_EARLY``,
        rank 0's) a transfer of at most :data:`EARLY_HOST_BYTES` goes through host memory instead
        (``nccl_before_ready`` counts those); a larger one, or any with ``early="wait"``, joins the
        set-up (:meth:`ready`). ``nbytes``: the transfer's bytes over every rank, the same on each;
        or ``mine``: this rank's, summed here (only while the set-up runs)."""
        s = self._setup
        if s is not None and self.early == "host":
            if mine is not None:
                nbytes = self.comm.allreduce(int(mine))
            if nbytes <= EARLY_HOST_BYTES:
                states = self.comm.allgather(s.state)
                if "failed" not in states and "running" in states:
                    self._timings["nccl_before_ready"] = self._timings.get("nccl_before_ready", 0.0) + 1.0
                    return False
        self.ready()
        return True

    def _stream(self):
        return self.be.xp.cuda.get_current_stream().ptr if self.be.is_gpu else 0

    def bcast(self, a, root: int = 0):
        comm, be = self.comm, self.be
        here = comm.Get_rank() == root
        shape, dt = comm.bcast(_header(a) if here else None, root=root)
        if not self._by_nccl(int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize):
            return MpiTransport.bcast(self, a, root)

        def prepare():  # root: its array, contiguous; the others: a buffer to receive into
            if here:
                with be.on_device():
                    return be.xp.ascontiguousarray(a)
            return self._alloc(shape, dt)

        a = run_shared(comm, f"allocating {np.dtype(dt).name} {shape} to receive a broadcast", prepare)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        with be.on_device():
            base, stream = _ptr(a) if nbytes else 0, self._stream()
            for lo in range(0, nbytes, CHUNK_BYTES):
                self.nc.bcast(base + lo, min(CHUNK_BYTES, nbytes - lo), self.nccl.NCCL_UINT8, root, stream)
        be.synchronize()
        return a

    def gatherv(self, a, root: int = 0, keep_own: bool = True):
        """As :meth:`Transport.gatherv`; ``keep_own=False`` (root): root's result leaves its own
        block out (it has it already)."""
        comm, be = self.comm, self.be
        me, size = comm.Get_rank(), comm.Get_size()
        here = me == root
        counts, rest, dt = _check_rows(comm.allgather(_header(a)))
        if not self._by_nccl(int(counts.sum()) * np.dtype(dt).itemsize * int(np.prod(rest, dtype=np.int64))):
            return MpiTransport.gatherv(self, a, root, keep_own)
        if not keep_own and here:
            counts[root] = 0  # nothing to receive from itself, no row of its own in the result
        row = np.dtype(dt).itemsize * int(np.prod(rest, dtype=np.int64))
        nbytes = counts * row
        off = offsets(nbytes)

        def prepare():
            with be.on_device():
                mine = be.xp.ascontiguousarray(a)
            return mine, (self._alloc((int(counts.sum()),) + rest, dt) if here else None)

        mine, out = run_shared(comm, "allocating a gather", prepare)
        u8 = self.nccl.NCCL_UINT8
        with be.on_device():
            stream = self._stream()
            self.nccl.groupStart()
            try:
                if here:
                    base = _ptr(out) if off[-1] else 0
                    for r in range(size):
                        for lo in range(0, int(nbytes[r]) if r != root else 0, CHUNK_BYTES):
                            self.nc.recv(base + int(off[r]) + lo, min(CHUNK_BYTES, int(nbytes[r]) - lo), u8, r, stream)
                else:
                    base = _ptr(mine) if nbytes[me] else 0
                    for lo in range(0, int(nbytes[me]), CHUNK_BYTES):
                        self.nc.send(base + lo, min(CHUNK_BYTES, int(nbytes[me]) - lo), u8, root, stream)
            finally:
                self.nccl.groupEnd()
            if here and counts[me]:
                ro = offsets(counts)
                out[int(ro[me]):int(ro[me + 1])] = mine  # the root's own block, device to device
        be.synchronize()
        return out

    def close(self):
        s, self._setup = self._setup, None
        if s is not None:  # never joined collectively: whether every rank's came up is unknown
            s.abandon()
        nc, self.nc = self.nc, None
        if nc is not None:
            nc.destroy()  # an intra-node collective: called where every rank calls it (Comm.Free)


# -- choosing a transport ----------------------------------------------------------------------

_KEYVAL = None


def _keyval():
    global _KEYVAL
    if _KEYVAL is None:
        def delete(comm, key, tp):  # the MPI communicator is freed: so is its NCCL communicator
            tp.close()

        _KEYVAL = mpi().Comm.Create_keyval(delete_fn=delete)
    return _KEYVAL


def _outcome(comm, fn, *args):
    """Collective: ``(result, None)`` when ``fn`` worked on every rank, else ``(result or None,
    "rank r: message")`` naming the lowest failing rank. Never raises ``fn``'s errors."""
    out, err = None, None
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - any failure means: no NCCL
        err = f"{type(e).__name__}: {e}" if not isinstance(e, DistGrailError) else str(e)
    errs = comm.allgather(err)
    bad = next((f"rank {r}: {e}" for r, e in enumerate(errs) if e is not None), None)
    return out, bad


def nccl_transport(comm, be, nccl=None, background: bool = False):
    """Collective: ``(NcclTransport, None)`` on ``comm``, or ``(None, why)`` where setting it up
    failed on some rank (then no rank holds an NCCL communicator). ``nccl``: the module to use
    (default ``cupy.cuda.nccl``; tests pass a fake). ``background``: return at once, with
    ``ncclCommInitRank`` and the warm-up still running on a thread (the first collective joins
    it; a failure there is every rank's error); else wait here and fall back on a failure."""
    me, size = comm.Get_rank(), comm.Get_size()

    def local():  # what can fail on one rank alone, before any rank enters ncclCommInitRank
        mod = _nccl_module() if nccl is None else nccl
        with be.on_device():
            if be.is_gpu:
                be.xp.empty(1, dtype=np.uint8)  # the GPU's context works
        return mod

    mod, why = _outcome(comm, local)
    if why:
        return None, why
    uid, why = _outcome(comm, mod.get_unique_id if me == 0 else (lambda: None))
    if why:
        return None, why
    uid, early = comm.bcast((uid, nccl_early()) if me == 0 else None, root=0)
    setup = BackgroundInit(mod, be, size, uid, me)
    if background:
        return NcclTransport(comm, be, mod, setup=setup, early=early), None
    t = time.perf_counter()
    state = _wait_everywhere(comm, setup)
    nc, why = _outcome(comm, setup.join if state != "running" else (lambda: None))
    if why:
        setup.abandon()
        return None, why
    tp = NcclTransport(comm, be, mod, nc)
    tp._timings.update(setup.timings, nccl_wait=time.perf_counter() - t)
    return tp, None


def _device_identity(be):
    """(host name, PCI bus id) of ``be``'s GPU: the same on two ranks only when they share it
    (None when CuPy cannot say)."""
    import socket

    try:
        import cupy

        return socket.gethostname(), str(cupy.cuda.Device(be.device).pci_bus_id)
    except Exception:  # noqa: BLE001 - no answer: NCCL is not tried
        return None


def transport_for(comm, be) -> Transport:
    """Collective: the transport every rank of ``comm`` uses with backend ``be`` (module doc)."""
    ok, why = False, None  # (DISTGRAIL_NCCL read inside run_shared: a bad value on one rank ends every rank)
    if comm.Get_size() > 1 and run_shared(comm, "reading DISTGRAIL_NCCL", nccl_wanted) and getattr(be, "is_gpu", False):
        try:
            _nccl_module()
            ok = True
        except Exception as e:  # noqa: BLE001 - any reason means: no NCCL
            why = str(e) or type(e).__name__
    where = _device_identity(be) if ok else None
    got = comm.allgather((ok, why, where))  # one collective whichever way each rank went
    if all(o for o, _, _ in got):
        seen = {}
        for r, (_, _, w) in enumerate(got):
            if w is None:  # not known: taken as its own GPU
                continue
            if w in seen:  # NCCL refuses two ranks on one GPU (ncclCommInitRank: invalid usage)
                if comm.Get_rank() == 0:
                    _notice(f"ranks {seen[w]} and {r} share GPU {w[1]} on {w[0]}; NCCL needs one GPU per rank, "
                            "so GPU arrays move through host memory and MPI")
                return MpiTransport(comm, be)
            seen[w] = r
    got = [(o, w) for o, w, _ in got]
    if not all(o for o, _ in got):
        bad = next((r for r, (_, w) in enumerate(got) if w is not None), None)
        if bad is not None and comm.Get_rank() == 0:
            _notice(f"NCCL not available on rank {bad} ({got[bad][1]}); GPU arrays move through host memory and MPI")
        return MpiTransport(comm, be)
    key = _keyval()
    cached = comm.Get_attr(key)
    reuse = cached is not None and cached.usable and cached.device == getattr(be, "device", None)
    if comm.allreduce(reuse, op=mpi().LAND):
        cached.be = be
        return cached
    if comm.allreduce(cached is not None, op=mpi().LOR):
        comm.Delete_attr(key)  # every rank at once: the old NCCL communicators are destroyed together
    tp, why = nccl_transport(comm, be, background=True)
    if tp is None:
        if comm.Get_rank() == 0:
            _notice(f"setting up NCCL failed ({why}); GPU arrays move through host memory and MPI")
        return MpiTransport(comm, be)
    comm.Set_attr(key, tp)
    return tp
