"""Query batches sharded over MPI ranks.

Rank 0 holds the pairs (other ranks may pass ``None``). The batch is cut into contiguous
shards in input order, each rank answers its shard locally, and the answers are gathered in
input order: when every rank is on one node, through node-shared memory (rank 0 copies the pairs
in, each rank answers its shard from there and writes its answers beside them); else by
Scatterv, Gatherv and a broadcast: **every rank returns the same answers and
the same merged** :class:`~distgrail.query.stats.QueryStats` (counts summed over ranks, ``ranks``
= communicator size, ``seconds`` = wall time of the whole sharded call on the slowest rank, but
the index's upload to each rank's device, ``prepare_seconds``).
With a GPU backend each rank is bound to a GPU by node-local rank unless it is bound already.

:func:`query_rows_read_by_ranks` is the same cut with no pair passing through rank 0: each rank
reads its own rows of a pairs file (``distgrail query`` with a ``.npy`` file), only the answers
are gathered.
"""

from __future__ import annotations

import time

import numpy as np

from ..arrays import copy_many_parallel, copy_parallel
from ..gpu.dma import touch_pages
from ..errors import DistGrailError
from ..gpu.backend import get_backend
from ..query.stats import QueryStats
from .binding import ensure_bound
from .collectives import bcast_array, gather_rows, offsets, scatter_rows, split_counts
from .errors import own_comm, run_shared
from .nodeshare import NodeGroups, room_for, shm_enabled

__all__ = ["query_sharded", "same_index_everywhere", "merge_over_ranks", "answer_in_shards", "query_rows_read_by_ranks",
           "SharedBatches", "answer_in_windows"]


def same_index_everywhere(comm, index):
    """Collective: every rank must hold the same index (e.g. each opened its own copy of the file)."""
    m = index.meta
    mine = tuple(m.get(k) for k in ("source_digest", "n_vertices", "n_components", "n_dag_edges", "dims", "seed",
                                    "parent_rule")) + (_updates_of(index),)
    every = comm.allgather(mine)
    bad = [r for r, x in enumerate(every) if x != every[0]]
    if bad:
        raise DistGrailError(f"every rank must query the same index, but ranks {bad} hold another one than rank 0 "
                             f"(source digest, n, C, m, dims, seed, parent rule, inserted edges and their CRC-32: "
                             f"rank 0 {every[0]}, rank {bad[0]} {every[bad[0]]})")


def _updates_of(index):
    """``(inserted edges, CRC-32 of them)`` of an updated index, else None: two updates of one
    base with as many components and DAG edges differ here alone."""
    import zlib

    from ..indexfile.layout import UPDATES

    u = index.dataset(UPDATES)  # (not the swept arrays a served update's index may still be fetching)
    if u is None:
        return None
    a = np.ascontiguousarray(np.asarray(u), dtype=np.int64)
    return int(a.shape[0]), zlib.crc32(a.view(np.uint8).reshape(-1))


def merge_over_ranks(comm, be, stats, times, prepared: float = 0.0) -> QueryStats:
    """Collective: every rank's ``stats`` merged (counts summed, the most rounds), with
    ``seconds`` the slowest rank's whole call but the index's preparation, ``prepare_seconds``
    the slowest rank's ``prepared`` (its query state put on its device, before the clock), and
    ``mpi_seconds`` the slowest ``prepare``, ``scatter``, ``answer`` and ``gather``, from each
    rank's ``times`` = (start, scattered, answered, gathered)."""
    t0, t1, t2, t3 = times
    stats.prepare_seconds = max(stats.prepare_seconds, prepared)
    every = comm.allgather((stats, t3 - t0, t1 - t0, t2 - t1, t3 - t2))
    merged = QueryStats(backend=be.name, ranks=comm.Get_size())
    for st, *_ in every:
        merged = merged.merge(st)
    merged.backend, merged.ranks = be.name, comm.Get_size()
    merged.seconds = max(e[1] for e in every)
    merged.mpi_seconds = {"prepare": merged.prepare_seconds, "scatter": max(e[2] for e in every),
                          "answer": max(e[3] for e in every), "gather": max(e[4] for e in every)}
    return merged


def answer_in_shards(comm, index, be, sources, targets, answer, root: int = 0, prepare=None,
                     everywhere: bool = True, ids: bool = False):
    """Collective: root's pairs checked (``ids``: vertex ids, node labels looked up already),
    cut into contiguous shards (Scatterv), each answered by
    ``answer(s, t, what)`` -> ``(answers, stats)`` on its rank (``what`` names the shard for
    errors; a failure must be shared by ``answer``), gathered in input order and broadcast.
    ``prepare()``: each rank's query state put on its device first, timed apart (the first batch
    of a ``query`` command pays it; a server's, once). Returns ``(answers, merged stats)`` on
    every rank (:func:`merge_over_ranks`); ``everywhere=False``: the answers on root only (None
    elsewhere: no broadcast of them), the stats still on every rank."""
    me, size = comm.Get_rank(), comm.Get_size()
    here = me == root
    pairs = run_shared(comm, "checking the query pairs", index.check_pairs if here else None, sources, targets,
                       ids=ids)
    spent = []
    if prepare is not None:
        run_shared(comm, "putting the index on this rank's device", prepare, spent)
    t0 = time.perf_counter()
    k = comm.bcast(int(pairs[0].size) if here else None, root=root)
    counts = split_counts(k, size)
    lo, hi = int(offsets(counts)[me]), int(offsets(counts)[me + 1])
    what = f"answering queries {lo}..{hi - 1}" if hi > lo else "answering queries (none on this rank)"
    groups = _one_node(comm, k, root)
    if groups is not None:  # every rank on one node: the pairs and the answers in node-shared memory
        try:
            return _answer_shared(comm, groups, be, pairs, k, (lo, hi), what, answer, root, everywhere, t0, spent)
        finally:
            groups.free()
    s, t = pairs if here else (None, None)
    s = scatter_rows(comm, s, counts, (), np.int64, root)
    t = scatter_rows(comm, t, counts, (), np.int64, root)
    t1 = time.perf_counter()
    ans, stats = answer(s, t, what)
    t2 = time.perf_counter()
    out = run_shared(comm, "allocating the answers", (lambda: np.empty(k, dtype=bool)) if here else None)
    gather_rows(comm, np.ascontiguousarray(ans, dtype=bool), counts, out, root)
    answers = bcast_array(comm, out, root) if everywhere else out
    return answers, merge_over_ranks(comm, be, stats, (t0, t1, t2, time.perf_counter()), sum(spent))


#: batches of fewer pairs go by Scatterv/Gatherv (a shared window's set-up costs more than them)
SHARED_MIN_PAIRS = 1 << 16


def _one_node(comm, k: int, root: int, room: bool = True):
    """Collective: the ranks' :class:`~distgrail.mpi.nodeshare.NodeGroups` when they all share one
    node and (``room``) its shared memory can hold the batch (``17 k`` bytes: two int64 ids and
    an answer byte per pair; ``DISTGRAIL_SHM`` on), else None."""
    if k < SHARED_MIN_PAIRS:
        return None
    # root decides for every rank (a setting read on each rank could differ, and the ranks part);
    # read inside run_shared: root's malformed DISTGRAIL_SHM is every rank's error, not root's alone
    # while the others wait in the broadcast (then MPI_Abort after a grace, a /dev/shm segment left)
    wanted = run_shared(comm, "reading DISTGRAIL_SHM",
                        (lambda: shm_enabled() and (not room or room_for(17 * k))) if comm.Get_rank() == root else None)
    if not comm.bcast(wanted, root=root):
        return None
    groups = NodeGroups(comm)
    if comm.allreduce(groups.node.Get_size()) == comm.Get_size() ** 2:  # one group holds every rank
        return groups
    groups.free()
    return None


def _answer_shared(comm, groups, be, pairs, k, span, what, answer, root, everywhere, t0, spent):
    """:func:`answer_in_shards` on one node: node-shared arrays made for this batch, each rank
    faulting in the fresh pages of its own shard (all ranks at once, before root copies), then
    :func:`answer_in_windows`."""
    lo, hi = span
    windows = groups.array((k,), np.int64), groups.array((k,), np.int64), groups.array((k,), np.uint8)
    run_shared(comm, "preparing node-shared memory", _touch, [w[lo:hi] for w in windows])
    return answer_in_windows(comm, windows, be, pairs, k, span, what, answer, root, everywhere, t0, spent)


def _touch(parts) -> None:
    for a in parts:
        touch_pages(a.view(np.uint8))


def answer_in_windows(comm, windows, be, pairs, k, span, what, answer, root, everywhere, t0, spent):
    """Root copies its pairs into the node-shared arrays ``windows`` = (sources, targets, answer
    bytes) of at least ``k`` pairs (host threads), each rank answers its shard straight from them
    and writes its answers beside them, and root (every rank with ``everywhere``) copies the
    answers out. No pair or answer goes through an MPI message: rank 0's Scatterv and Gatherv of
    a large batch took longer than answering it (docs/benchmarks.md, session 22). Returns
    ``(answers or None, merged stats)``."""
    here = comm.Get_rank() == root
    lo, hi = span
    S, T, A = (w[:k] for w in windows)

    def put():
        copy_many_parallel([(S, pairs[0]), (T, pairs[1])])

    run_shared(comm, "copying the query pairs to node-shared memory", put if here else None)  # (a barrier too)
    t1 = time.perf_counter()
    ans, stats = answer(S[lo:hi], T[lo:hi], what)
    t2 = time.perf_counter()
    run_shared(comm, "writing the answers to node-shared memory", copy_parallel, A[lo:hi],
               np.asarray(ans, dtype=bool))

    def take():
        out = np.empty(k, dtype=bool)
        copy_parallel(out.view(np.uint8), A)
        return out

    answers = run_shared(comm, "reading the answers from node-shared memory", take if here or everywhere else None)
    return answers, merge_over_ranks(comm, be, stats, (t0, t1, t2, time.perf_counter()), sum(spent))


#: node-shared batch arrays of :class:`SharedBatches` grow in steps of this many pairs
GROW_PAIRS = 1 << 20
#: after this many batches in a row that each would be given at most a quarter of the node-shared
#: arrays' pairs afresh, :class:`SharedBatches` makes them again at the latest batch's size (one
#: large batch does not hold its memory for the server's life)
SHRINK_AFTER = 64


class SharedBatches:
    """Node-shared pair and answer arrays kept from batch to batch (``serve`` under MPI: a batch
    then costs no window set-up, no page faults and no MPI message for its pairs or answers).
    Made (collectively) when every rank is on one node and ``DISTGRAIL_SHM`` is on; grown,
    collectively and in steps of :data:`GROW_PAIRS`, when a batch is larger than any before, each
    rank faulting in the fresh pages of its shard of that batch once (first touch: their NUMA
    node is the rank's); made again at the latest batch's size after :data:`SHRINK_AFTER`
    batches in a row that each would be given at most a quarter of them afresh (in
    :data:`GROW_PAIRS` steps).
    :meth:`close` frees them (collective)."""

    def __init__(self, comm, root: int = 0):
        self.comm, self.root, self.cap, self._windows = comm, root, 0, None
        self.small = 0  # batches in a row that filled at most a quarter of the arrays
        self.groups = _one_node(comm, SHARED_MIN_PAIRS, root, room=False)

    def arrays(self, k: int):
        """Collective (every rank with the same ``k``): ``(sources, targets, answer bytes)`` of
        at least ``k`` pairs, or None when the batch goes by MPI messages (not one node, a small
        batch, or no room for it in ``/dev/shm``)."""
        if self.groups is None or k < SHARED_MIN_PAIRS:
            return None
        cap = -(-int(k) // GROW_PAIRS) * GROW_PAIRS  # what this batch would be given afresh
        self.small = self.small + 1 if 4 * cap <= self.cap else 0  # (a smaller step would be remade alike)
        if k > self.cap:  # grown: the room past what is freed first checked by root for every rank
            me = self.comm.Get_rank()
            if not self.comm.bcast(room_for(17 * (cap - self.cap)) if me == self.root else None, root=self.root):
                return None
            self._make(cap, k)
        elif self.small >= SHRINK_AFTER:  # made again smaller: no room to check
            self._make(cap, k)
        return self._windows

    def _make(self, cap: int, k: int) -> None:
        """Collective: the arrays freed and made again for ``cap`` pairs; each rank touches first
        the pages of its shard of a ``k``-pair batch (the last rank those past ``k`` too)."""
        comm, me, size = self.comm, self.comm.Get_rank(), self.comm.Get_size()
        self.small = 0
        self.groups.free_arrays()
        self.cap, self._windows = 0, None
        windows = (self.groups.array((cap,), np.int64), self.groups.array((cap,), np.int64),
                   self.groups.array((cap,), np.uint8))
        at = offsets(split_counts(int(k), size))
        a, b = int(at[me]), (int(at[me + 1]) if me < size - 1 else cap)
        run_shared(comm, "preparing node-shared memory", _touch, [w[a:b] for w in windows])
        self.cap, self._windows = cap, windows

    def close(self) -> None:
        """Collective: the arrays and the node groups freed."""
        if self.groups is not None:
            self.groups.free()
            self.groups, self._windows, self.cap = None, None, 0


def query_sharded(index, sources, targets, backend="auto", comm=None, root: int = 0, search=None,
                  everywhere: bool = True, ids: bool = False):
    """Collective: answer root's pairs with the batch cut into contiguous shards, one per rank.

    ``sources``/``targets`` are read on ``root`` only (other ranks may pass None). Returns
    ``(answers, stats)`` on every rank: answers in input order, identical to a one-process
    run; stats summed over ranks (``search_rounds`` is the most any rank needed, ``seconds``
    the wall time of the whole call on the slowest rank, but the index's upload to each rank's
    device, ``prepare_seconds``). ``stats.mpi_seconds`` holds ``prepare``, ``scatter``,
    ``answer`` (slowest rank) and ``gather`` times. ``search``: the
    :class:`~distgrail.query.stats.SearchOptions` every rank searches with (None: the defaults).
    ``everywhere=False``: the answers on root only, None elsewhere (the command line writes them
    on rank 0: no broadcast of every answer to every rank). ``ids``: the pairs are vertex ids
    where the index maps node labels (a pairs reader looked them up once).
    """
    comm, owned = own_comm(comm)
    try:
        run_shared(comm, "comparing the index of every rank", same_index_everywhere, comm, index)
        dev = ensure_bound(comm, backend)  # one GPU per node-local rank, unless bound already
        be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
        return answer_in_shards(comm, index, be, sources, targets,
                                lambda s, t, what: run_shared(comm, what, index._query_local, s, t, be, search), root,
                                prepare=lambda spent: index._state(be, spent), everywhere=everywhere, ids=ids)
    finally:
        if owned:
            comm.Free()


def query_rows_read_by_ranks(index, k: int, read_rows, backend="auto", comm=None, what: str = "the pairs",
                             as_rows: bool = True, deliver=None):
    """Collective: ``k`` pairs answered in contiguous shards, each rank reading its own rows with
    ``read_rows(lo, hi)`` -> ``(sources, targets)`` (checked; an error names the row in the whole
    file) and answering them; the answers are gathered on rank 0 in input order (None elsewhere).
    ``as_rows``: the columns ``read_rows`` gives are those of one (k, 2) array (what the GPU staging
    then uploads as rows: its slots are page-locked for that layout while the rows are read).
    Returns ``(answers, stats)``; ``stats.mpi_seconds``' ``scatter`` is here the slowest rank's
    read of its rows. Rank 0 reading and sending every pair cost more than one GPU's whole answer
    (docs/benchmarks.md, sessions 22-23).

    ``deliver(answers, counts)``: collective, called on every rank with its own answers instead of
    the gather to rank 0 (:func:`distgrail.mpi.answerwrite.write_by_ranks`: each rank writes its
    rows of the answer file); the answers returned are then None on every rank, and
    ``mpi_seconds``' ``gather`` is its time. On a GPU each rank's answers come down into a
    page-locked array made beside the read (:func:`~distgrail.query.staging.pinned_answers`)."""
    comm, owned = own_comm(comm)
    try:
        run_shared(comm, "comparing the index of every rank", same_index_everywhere, comm, index)
        dev = ensure_bound(comm, backend)
        be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
        me, size = comm.Get_rank(), comm.Get_size()
        counts = split_counts(int(k), size)
        lo, hi = int(offsets(counts)[me]), int(offsets(counts)[me + 1])
        rows = f"rows {lo}..{hi - 1}" if hi > lo else "no rows"
        from ..query.staging import DIRECT_PAIRS, pin_staging_beside

        # the staging page-locked while the index goes up and the rows are read (a process's first
        # page-locking costs far more than reading a rank's rows of a mapped file; ``as_rows``:
        # the columns read_rows gives are those of one (k, 2) array, the layout then staged)
        big = hi - lo > DIRECT_PAIRS
        pinning = pin_staging_beside(be, as_rows, answers=hi - lo if big else 0) if big else (lambda: None)
        spent = []
        locked = None
        try:
            try:
                run_shared(comm, "putting the index on this rank's device", index._state, be, spent)
                t0 = time.perf_counter()
                pairs = run_shared(comm, f"reading {rows} of {what}", read_rows, lo, hi)
            finally:
                locked = pinning()
            t1 = time.perf_counter()
            into = locked[0] if locked is not None else None
            ans, stats = run_shared(comm, f"answering queries of {rows}", index._query_local, pairs[0], pairs[1], be,
                                    None, into)
            t2 = time.perf_counter()
            if deliver is not None:
                deliver(ans, counts)
                out = None
            else:
                out = np.empty(int(k), dtype=bool) if me == 0 else None
                gather_rows(comm, np.ascontiguousarray(ans, dtype=bool), counts, out, 0)
        finally:
            if locked is not None:
                locked[1]()
        return out, merge_over_ranks(comm, be, stats, (t0, t1, t2, time.perf_counter()), sum(spent))
    finally:
        if owned:
            comm.Free()
