"""``distgrail serve`` under MPI: rank 0 serves HTTP, every rank answers a share of each big batch.

Every collective runs in the same order on every rank, so one thread per rank calls MPI after
start-up: on rank 0 the :class:`Dispatcher` (the main thread; the HTTP event loop and the
threads that answer small batches never touch MPI, so MPI's ``THREAD_FUNNELED`` is enough), on
the other ranks :func:`follow`. Per batch rank 0 broadcasts a header ``[kind, pairs, origin rank,
origin request]`` (the origin: an update a :class:`Forwarder` sent, else -1, -1); for a
query the pairs are cut in contiguous shards, each rank answers its own (the step runs through
:func:`~distgrail.mpi.errors.run_shared`), and the answers and stats are gathered on rank 0:
through node-shared arrays kept from batch to batch when every rank is on one node
(:class:`~distgrail.mpi.query.SharedBatches`), else by Scatterv and Gatherv. An ``UPDATE`` header (``POST /edges``) broadcasts rank 0's checked edges and every rank
inserts them into its own copy of the index (:func:`apply_update`, deterministic: every rank gets
the same arrays); only when every rank has succeeded does every rank move to the new version, between
two batches. A ``STOP`` header ends every rank's loop. A signal caught on a rank > 0 (SIGTERM,
SIGINT) is sent to rank 0 (:class:`SignalRelay`), whose dispatcher then stops every rank as for
one of its own.

With a front end on every rank (``serve --front ranks``) each rank listens on the same port
(``SO_REUSEPORT``: the kernel spreads the connections) and answers its own clients' batches alone
on its own GPU: no batch is sharded and no query passes through MPI. An update that reaches a
rank > 0 is sent to rank 0 by that rank's :class:`Forwarder` (from :func:`follow`, its one MPI
thread), and rank 0's dispatcher broadcasts it like one of its own, the header naming the rank
and request it came from; after every rank has inserted it, every rank moves its front end to
the new version (``on_version``, between two barriers: the ranks move within one barrier's time of
each other, and a client on another connection may meanwhile be answered by a rank not yet
moved) before the request is answered: a client told "inserted" is answered by the new version
on every rank.

Failures: an error while a rank answers its shard (a GPU out of memory, say) is shared by every
rank as the same :class:`~distgrail.mpi.errors.RankError`: every rank leaves that batch at the
same step, the ranks stay in step, the client gets it as a 500, and the server goes on. Any
other failure in a collective (an MPI error, a bug) leaves the ranks out of step: the job ends
(``MPI_Abort``) with that error printed.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from ..errors import DistGrailError
from ..query.stats import QueryStats
from .collectives import bcast_array, gather_rows, offsets, scatter_rows, split_counts
from .errors import RankError, run_shared
from .query import answer_in_windows

__all__ = ["Dispatcher", "Forwarder", "follow", "answer_shard", "apply_update", "warm_batch", "Stopping",
           "SignalRelay", "absorb_late_signals", "STOP", "QUERY", "UPDATE"]

#: header kinds (int64 ``[kind, pairs, origin rank, origin request]``, broadcast from rank 0; the
#: origin is an update's, forwarded by a rank > 0, else ``-1, -1``)
STOP, QUERY, UPDATE = 0, 1, 2
#: tag of the message a rank > 0 sends rank 0 when it caught a signal (one int64: the signal)
SIGNAL_TAG = 7301
#: tag of an update a rank > 0 forwards to rank 0 (pickled ``(request, sources, targets)``)
EDGES_TAG = 7302
#: seconds the dispatcher waits on its queue before it looks again (signal handlers run between);
#: with a front end on every rank, :data:`POLL_FORWARDED` (a forwarded update waits no longer)
POLL = 0.5
POLL_FORWARDED = 0.005
NO_ORIGIN = (-1, -1)
#: seconds an idle rank sleeps between looks at the next header (a blocking broadcast would spin
#: a core per rank while the server waits for clients; this adds at most a millisecond a batch)
HEADER_NAP = 0.001


class Stopping(DistGrailError):
    """The server is stopping: the batch was not answered (the client gets a 503)."""


def _header(comm, kind: int = STOP, k: int = 0, relay=None, origin=NO_ORIGIN, forward=None):
    """Collective: rank 0's ``(kind, pairs, (origin rank, origin request))`` on every rank. A
    non-blocking broadcast, waited for with naps: an idle rank sleeps instead of spinning, and its
    signal handlers run (``relay``: a signal caught meanwhile goes to rank 0; ``forward``: a
    :class:`Forwarder`'s updates go to rank 0 meanwhile)."""
    from .errors import mpi

    h = np.array([kind, k, *origin], dtype=np.int64)
    req = comm.Ibcast([h, mpi().INT64_T], root=0)
    while not req.Test():
        if relay is not None:
            relay.poll()
        if forward is not None:
            forward.poll()
        time.sleep(HEADER_NAP)
    return int(h[0]), int(h[1]), (int(h[2]), int(h[3]))


#: seconds after a served job stops in which a SIGTERM/SIGINT is taken as the launcher's late copy
#: of the signal that stopped it (:func:`absorb_late_signals`)
LATE_SIGNAL_SECONDS = 5.0


def absorb_late_signals(before: dict, seconds: float | None = None) -> None:
    """Put back the handlers ``before`` (signal -> handler) of a rank whose serving has ended,
    except that for ``seconds`` (:data:`LATE_SIGNAL_SECONDS`) a SIGTERM or SIGINT is absorbed.
    ``mpiexec`` sends its signal on to every rank; a rank that rank 0 stopped first (its ``STOP``
    came before the copy) would otherwise die of that copy once its handlers are back, and the job
    of a server that stopped cleanly ended with status 15. After the window a signal goes to the
    handler it would have had (the first such signal puts it back and is sent again)."""
    import signal

    end = time.monotonic() + (LATE_SIGNAL_SECONDS if seconds is None else seconds)

    def late(sig, frame):
        if time.monotonic() < end:
            return
        for s, handler in before.items():
            signal.signal(s, handler)
        os.kill(os.getpid(), sig)

    for sig in before:
        signal.signal(sig, late)


class SignalRelay:
    """Ranks > 0 while serving: a signal their handler noted in ``caught`` is sent to rank 0 once
    (a point-to-point message, from this rank's one MPI thread, between two headers); rank 0's
    :class:`Dispatcher` then stops every rank. :meth:`finish` (collective, after ``STOP``) tells
    rank 0 which ranks sent one, so that none is left unreceived."""

    def __init__(self, comm, caught):
        self.comm, self.caught, self.request = comm, caught, None
        self.buf = np.zeros(1, dtype=np.int64)

    def poll(self) -> None:
        """Send the first signal caught to rank 0, once."""
        if self.caught and self.request is None:
            from .errors import mpi

            self.buf[0] = int(self.caught[0])
            self.request = self.comm.Isend([self.buf, mpi().INT64_T], dest=0, tag=SIGNAL_TAG)

    def finish(self, forwarded: int = 0) -> None:
        """Collective, after ``STOP`` (rank 0's :meth:`Dispatcher.run` gathers the same): whether
        this rank sent a signal message, and how many updates it forwarded (``forwarded``)."""
        self.comm.gather((self.request is not None, int(forwarded)), root=0)
        if self.request is not None:
            self.request.Wait()


class Forwarder:
    """A rank > 0 with a front end of its own (``serve --front ranks``): its updates (``POST
    /edges``, from the service's update thread) go to rank 0, sent by this rank's one MPI thread
    (:func:`follow`, through :meth:`poll`); the caller waits until the ``UPDATE`` header that names
    this rank and request has been applied on every rank (:meth:`settle`). The service calls
    :meth:`update` as it calls :meth:`Dispatcher.update`."""

    batches = pairs = failed = running = 0  # (health: nothing is sharded from here)

    def __init__(self, comm):
        self.comm = comm
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self.sent = 0  # updates sent to rank 0
        self._waiting: dict = {}  # request number -> Future, until its header has come back
        self._requests: list = []  # the sends, waited for at the end

    def update(self, sources, targets):
        """Insert ``sources -> targets`` (checked int64 ids) on every rank; ``(new index, report)``
        once every rank serves it, or the :class:`RankError` of a failed update, or
        :class:`Stopping`."""
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise Stopping("the server is stopping: the update was not applied")
            self._q.put((fut, sources, targets))
        return fut.result()

    def poll(self) -> None:
        """(This rank's MPI thread) the updates queued meanwhile sent to rank 0; the sends rank 0
        has taken let go (each holds its pickled edges until then)."""
        if self._requests:
            self._requests = [r for r in self._requests if not r.test()[0]]
        while True:
            try:
                fut, s, t = self._q.get_nowait()
            except queue.Empty:
                return
            self._waiting[self.sent] = fut
            self._requests.append(self.comm.isend((self.sent, s, t), dest=0, tag=EDGES_TAG))
            self.sent += 1

    def settle(self, request: int, result=None, error: BaseException | None = None) -> None:
        """The update ``request`` of this rank was applied (``result``) or failed (``error``)."""
        fut = self._waiting.pop(request, None)
        if fut is None:
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def abandon(self) -> None:
        """(Not collective) every update queued or sent and not yet applied is refused
        (:class:`Stopping`), and no more are taken: after ``STOP``, or when serving ended before
        it (a failed start), so that no update thread waits for ever."""
        with self._lock:
            self._closed = True
        while True:
            try:
                fut, _, _ = self._q.get_nowait()
            except queue.Empty:
                break
            fut.set_exception(Stopping("the server is stopping: the update was not applied"))
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(Stopping("the server is stopping: the update was not applied"))
        self._waiting.clear()

    def close(self) -> None:
        """After ``STOP``: :meth:`abandon`, then the sends are waited for (rank 0 receives every
        forwarded update it had not taken, and drops it)."""
        self.abandon()
        for r in self._requests:
            r.wait()
        self._requests = []


def warm_batch(comm, index, be, sources=None, targets=None, shared=None):
    """Collective, before serving: one batch of rank 0's pairs through the sharded path on every
    rank (a failure is the same :class:`RankError` on every rank, which then ends the start)."""
    kind, k, _ = _header(comm, QUERY, int(sources.size) if comm.Get_rank() == 0 else 0)
    return answer_shard(comm, index, be, k, sources, targets, shared=shared)


def answer_shard(comm, index, be, k: int, sources=None, targets=None, search=None, shared=None):
    """Collective, after a ``QUERY`` header of ``k`` pairs: rank 0's checked ids (int64, or int32
    widened on their way) cut into
    contiguous shards, each rank answers its own on ``be``. Returns ``(answers, stats)`` on rank 0
    (stats summed over the ranks, ``ranks`` = the communicator's size, ``seconds`` = the wall time
    of the call on rank 0, or with ``shared`` on the slowest rank, whose ``mpi_seconds`` then
    part it), ``(None, None)`` elsewhere. ``shared``: the serve's
    :class:`~distgrail.mpi.query.SharedBatches`: a batch it takes goes through its node-shared
    arrays, not MPI messages. A failure on any rank while answering is the same
    :class:`RankError` on every rank."""
    me, size = comm.Get_rank(), comm.Get_size()
    t0 = time.perf_counter()
    counts = split_counts(k, size)
    lo, hi = int(offsets(counts)[me]), int(offsets(counts)[me + 1])
    what = f"answering queries {lo}..{hi - 1} of a served batch" if hi > lo else "answering (none on this rank)"
    windows = shared.arrays(k) if shared is not None else None
    if windows is not None:
        answers, merged = answer_in_windows(
            comm, windows, be, (sources, targets), k, (lo, hi), what,
            lambda s, t, what: run_shared(comm, what, index._query_local, s, t, be, search), 0, False, t0, [])
        return (answers, merged) if me == 0 else (None, None)
    s = scatter_rows(comm, sources, counts, (), np.int64)
    t = scatter_rows(comm, targets, counts, (), np.int64)
    ans, stats = run_shared(comm, what, index._query_local, s, t, be, search)
    out = np.empty(k, dtype=bool) if me == 0 else None
    gather_rows(comm, np.ascontiguousarray(ans, dtype=bool), counts, out)
    every = comm.gather(stats)
    if me != 0:
        return None, None
    merged = QueryStats(backend=be.name, ranks=size)
    for st in every:
        merged = merged.merge(st)
    merged.backend, merged.ranks = be.name, size
    merged.seconds = time.perf_counter() - t0
    return out, merged


def apply_update(comm, index, be, sources=None, targets=None):
    """Collective, after an ``UPDATE`` header: rank 0's checked int64 edges broadcast, inserted by
    every rank into its own ``index`` (:func:`distgrail.update.insert_edges` on ``be``, the new
    query state made there too). Returns ``(new index, report)`` on every rank; a failure on any
    rank is the same :class:`RankError` on every rank, and every rank keeps ``index``."""
    from ..update import insert_edges

    s = bcast_array(comm, sources if comm.Get_rank() == 0 else None)
    t = bcast_array(comm, targets if comm.Get_rank() == 0 else None)

    def insert():
        with be.on_device():
            new, report = insert_edges(index, s, t, backend=be)
            new._state(be)  # its query state made here, not by the next batch
        return new, report

    return run_shared(comm, f"inserting {s.size:,} edges of an update", insert)


class Dispatcher:
    """Rank 0's one caller of MPI while serving: batches arrive from any thread through
    :meth:`answer` (a queue; the caller waits on a future) and go through the collective one
    after another in :meth:`run`, as do the updates other ranks' :class:`Forwarder` send.
    ``on_version(new index, edges)``: called here on every update applied, before the barrier
    that every rank meets once it serves the new version. :meth:`stop` may be called from a
    signal handler."""

    def __init__(self, comm, index, be, shared=None, on_version=None, poll: float = POLL):
        self.comm, self.index, self.be, self.shared = comm, index, be, shared
        self.on_version, self.poll = on_version, float(poll)
        self._q: queue.SimpleQueue = queue.SimpleQueue()  # put() is reentrant: safe in a signal handler
        self._lock = threading.Lock()
        self._closed = False
        self.batches = self.pairs = self.failed = 0
        self.running = 0  # 1 while a batch is in the collective (health: sharded_running)
        #: ``(signal, rank)`` of a signal caught on a rank > 0 that stopped the server, else None
        self.peer_signal = None
        self._heard: set = set()  # ranks whose signal message was received
        self._forwarded: dict = {}  # rank -> updates received from it (Forwarder)

    def submit(self, sources, targets, kind: int = QUERY) -> Future:
        """Queue rank 0's checked int64 ids; the future gives ``(answers, stats)`` (``kind``
        ``UPDATE``: ``(new index, report)``, the edges ``sources -> targets``), or the
        :class:`RankError` of a failed batch, or :class:`Stopping`."""
        fut: Future = Future()
        with self._lock:
            if self._closed:
                what = "the update was not applied" if kind == UPDATE else "the batch was not answered"
                fut.set_exception(Stopping(f"the server is stopping: {what}"))
            else:
                self._q.put((fut, sources, targets, kind, None, NO_ORIGIN))
        return fut

    def update(self, sources, targets):
        """Insert edges on every rank (:func:`apply_update`) between two batches and wait; returns
        ``(new index, report)`` (rank 0's dispatcher answers with the new index from then on)."""
        return self.submit(sources, targets, UPDATE).result()

    def answer(self, sources, targets, timeout: float | None = None):
        """:meth:`submit` and wait (``TimeoutError`` after ``timeout`` s; a batch not begun then is dropped)."""
        fut = self.submit(sources, targets)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()  # only a batch still queued: one in the collective runs to its end
            raise

    def stop(self) -> None:
        self._q.put(None)

    def run_batch(self, fut: Future | None, sources, targets, kind: int = QUERY, search=None, origin=NO_ORIGIN):
        """Collective (rank 0's side): one batch through header, scatter, answer, gather (or an
        update: header, broadcast, insert, ``on_version`` and a barrier; the new index served from
        then on; ``origin``: the rank and request of an update a :class:`Forwarder` sent). A
        :class:`RankError` (every rank has it, the ranks are in step) goes to ``fut`` or is
        raised; anything else ends the job (MPI_Abort)."""
        if fut is not None and not fut.set_running_or_notify_cancel():
            return None  # cancelled while queued (its request timed out): no collective
        k = int(sources.size)
        self.running = 1
        try:
            _header(self.comm, kind, k, origin=origin)
            if kind == UPDATE:
                out = apply_update(self.comm, self.index, self.be, sources, targets)
                self.index = out[0]
                self.comm.Barrier()  # every rank has it: the ranks move together (a window of the barrier's length)
                if self.on_version is not None:
                    self.on_version(self.index, k)
                self.comm.Barrier()  # every rank serves the new version before the update is answered
            else:
                out = answer_shard(self.comm, self.index, self.be, k, sources, targets, search, self.shared)
        except RankError as e:
            self.failed += 1
            if fut is None:
                raise
            fut.set_exception(e)
            return None
        except BaseException:
            abort(self.comm, "rank 0, serving a batch")
        finally:
            self.running = 0
        if kind != UPDATE:
            self.batches += 1
            self.pairs += k
        if fut is not None:
            fut.set_result(out)
        return out

    def _signal_message(self, block_from: int | None = None) -> bool:
        """Receive a rank's signal message (:class:`SignalRelay`), waiting for the one of rank
        ``block_from`` when given; True when one was received."""
        from .errors import mpi

        MPI = mpi()
        st = MPI.Status()
        if block_from is None and not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=SIGNAL_TAG, status=st):
            return False
        buf = np.zeros(1, dtype=np.int64)
        src = block_from if block_from is not None else st.Get_source()
        self.comm.Recv([buf, MPI.INT64_T], source=src, tag=SIGNAL_TAG)
        self._heard.add(src)
        if self.peer_signal is None:
            self.peer_signal = (int(buf[0]), src)
        return True

    def abandon(self) -> None:
        """(Not collective) what is queued is refused (:class:`Stopping`), and nothing more is
        taken: at the end of :meth:`run`, or when serving ended before it ran (a failed start),
        so that no HTTP or update thread waits for ever."""
        with self._lock:
            self._closed = True
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if item is not None and item[0].set_running_or_notify_cancel():
                what = "the update was not applied" if item[3] == UPDATE else "the batch was not answered"
                item[0].set_exception(Stopping(f"the server is stopping: {what}"))

    def _forwarded_update(self, block_from: int | None = None):
        """An update a rank's :class:`Forwarder` sent (the one of rank ``block_from`` when given,
        waited for): ``(rank, request, sources, targets)``, or None when none has come."""
        from .errors import mpi

        MPI = mpi()
        st = MPI.Status()
        if block_from is None and not self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=EDGES_TAG, status=st):
            return None
        src = block_from if block_from is not None else st.Get_source()
        request, s, t = self.comm.recv(source=src, tag=EDGES_TAG)
        self._forwarded[src] = self._forwarded.get(src, 0) + 1
        return src, request, s, t

    def run(self) -> None:
        """Serve queued batches and forwarded updates until :meth:`stop` or a signal on another
        rank; then refuse what is queued (:class:`Stopping`) and broadcast ``STOP``: every rank's
        :func:`follow` returns."""
        while True:
            if self.comm.Get_size() > 1:
                if self._signal_message():
                    break
                got = self._forwarded_update()
                if got is not None:  # answered on its rank (its Forwarder), here only applied
                    src, request, s, t = got
                    # (a failure every rank shares goes to the Future: run_batch raises nothing then)
                    self.run_batch(Future(), s, t, UPDATE, None, (src, request))
                    continue
            try:
                item = self._q.get(timeout=self.poll)
            except queue.Empty:
                continue
            if item is None:
                break
            self.run_batch(*item)
        self.abandon()
        _header(self.comm, STOP)
        # (SignalRelay.finish) the signal messages not yet received, and the updates forwarded
        # but not taken: received, and dropped (their ranks refused them)
        sent = self.comm.gather((False, 0), root=0)
        for r, (signalled, forwarded) in enumerate(sent):
            if signalled and r not in self._heard:
                self._signal_message(block_from=r)
            for _ in range(forwarded - self._forwarded.get(r, 0)):
                self._forwarded_update(block_from=r)


def follow(comm, index, be, search=None, shared=None, caught=(), forward=None, on_version=None) -> int:
    """Ranks > 0: answer rank 0's batches until its ``STOP`` header, moving to each new version
    of the index its ``UPDATE`` headers make; returns the batches taken part in. ``shared``: the
    same :class:`~distgrail.mpi.query.SharedBatches` as rank 0's :class:`Dispatcher`. A batch or
    update that failed on some rank (:class:`RankError`, on every rank) is skipped here as on
    rank 0 (a failed update leaves the version as it was); anything else ends the job (MPI_Abort).
    ``caught``: the signals this rank's handler noted (a list it appends to): the first goes to
    rank 0, which stops every rank (:class:`SignalRelay`). With a front end on this rank:
    ``forward``, its :class:`Forwarder` (its updates sent to rank 0 while waiting for a header,
    answered when their header has been applied); ``on_version(new index, edges)``, called on
    every update applied, before the barrier every rank meets."""
    done = 0
    relay = SignalRelay(comm, caught)
    me = comm.Get_rank()
    while True:
        try:
            kind, k, origin = _header(comm, relay=relay, forward=forward)
            if kind == STOP:
                relay.finish(forward.sent if forward is not None else 0)
                if forward is not None:
                    forward.close()
                return done
            if kind == UPDATE:
                mine = forward is not None and origin[0] == me
                try:
                    index, report = apply_update(comm, index, be)
                except RankError as e:
                    if mine:
                        forward.settle(origin[1], error=e)
                    continue
                comm.Barrier()  # every rank has it: the ranks move together (as rank 0's run_batch)
                if on_version is not None:
                    on_version(index, k)
                comm.Barrier()  # every rank serves the new version before the update is answered
                if mine:
                    forward.settle(origin[1], (index, report))
                continue
            answer_shard(comm, index, be, k, search=search, shared=shared)
            done += 1
        except RankError:
            continue
        except BaseException:
            abort(comm, f"rank {comm.Get_rank()}, serving a batch")


def abort(comm, where: str) -> None:
    """The ranks are out of step (a failure outside a shared step): print it and end the job."""
    print(f"distgrail: error: {where}: the ranks can no longer keep in step; ending the job", file=sys.stderr)
    traceback.print_exc(file=sys.stderr)
    sys.stderr.flush()
    comm.Abort(1)
    os._exit(1)  # pragma: no cover - Abort does not return
