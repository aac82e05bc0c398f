"""The CPU backend's default search: :func:`distgrail.query.bidir.bidirectional_search_numpy`
compiled with numba, one query at a time per thread.

Same search, same answers, same round count: every round a query grows the side whose frontier
has the fewer edges (ties forward); the same level, interval, DT-subtree and support-mask tests
on every vertex entered; a hit on the other side's marks or a positive cut answers "reachable",
a side running empty answers "not reachable". The vectorised search's rounds are per query
(its queries never interact), so the round count of a batch is the largest round at which one
of its queries ended, whichever way the queries are grouped; this module returns that maximum.

Why numba: the NumPy search pays for temporary arrays on every edge (gathers, sorts, bitmap
probes), and this is the whole CPU query cost on dense DAGs; the compiled loop is left with the
cache misses (docs/benchmarks.md). A hand-written C extension would need a compiler at install
time; numba is one well-kept wheel.

Memory layout, what made it fast (the search is bound by cache misses on random components):
one packed record per component (:func:`_layout`: DT ranks, intervals and masks in one 64-byte
line at d = 5, K = 64, built once per index), level tests made on component ids where the
components are numbered by level (every build numbers them so: no level read), and per thread
one uint8 stamp per component (``2 e + 1`` forward, ``2 e + 2`` backward for the thread's e-th
query, cleared every 127 queries; a vertex never carries both marks of a live query, since
meeting the other side's mark ends it) and three int32 frontier buffers of C ids. Scratch: 13 C bytes per thread; records 4 R C bytes per index.

An index whose components are not numbered by level (an update that kept the component ids raised
levels in place: :data:`~distgrail.indexfile.layout.BY_LEVEL`) is searched by a second
specialisation of the same loops, which reads each entered component's level (``level[c]``) where
the first compares its id: :func:`_layout` gives ``level_ptr`` None for it, numba prunes the
branches on ``level_ptr is None`` when it compiles each, so the id-ordered search's code is as it
was. Dead components (no vertex maps to them, no edge reaches them) are never entered.

Threads: the caller and kept plain Python threads (the compiled loop releases the GIL;
:func:`run_blocks`), each taking blocks of queries from a shared counter; numba's own thread pool
is not used, so concurrent callers and fork() are safe. Their number: ``NUMBA_NUM_THREADS`` when set; else the cores this process may
run on (``os.sched_getaffinity``), divided among the MPI ranks of this node when the launcher
says how many there are (``OMPI_COMM_WORLD_LOCAL_SIZE``, ``MPI_LOCALNRANKS``, ``PMI_LOCAL_SIZE``, ``SLURM_NTASKS_PER_NODE``)
and the ranks were not already bound to their own cores (see :func:`search_threads`).

First call: numba's import and a compile for one set of array dtypes with a cold cache; import,
cache load and the packed records with the cache warm (``cache=True``: ``__pycache__`` beside
this file, or numba's user cache directory when that is not writable); the next call only
searches (figures: docs/benchmarks.md).
:attr:`SearchOptions.compiled_min_pairs <distgrail.query.stats.SearchOptions>`: smaller batches
run the NumPy search (same answers and rounds), so a handful of pairs never pays the import or
the compile.
"""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np
from .. import cores
from ..arrays import populate
from ..jit import njit

from .bidir import bidirectional_search_numpy, reverse_csr
from .stats import Labels, read_only

__all__ = ["compiled_search", "query_rounds", "search_threads", "run_blocks", "BLOCK_QUERIES"]

#: queries a thread takes from the shared counter at a time
BLOCK_QUERIES = 256
#: queries between two clearings of a thread's uint8 stamps (marks 2 e + 1 and 2 e + 2, e < 127)
_EPOCHS = 127
#: components the int32 frontier buffers can hold
_MAX_C = 1 << 31

def _local_ranks(env) -> int:
    for key in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        v = env.get(key, "").strip()
        if v.isdigit() and int(v) > 0:
            return int(v)
    return 1


def search_threads(env=None, affinity=None, cpu_count=None) -> int:
    """Threads of the compiled search: ``NUMBA_NUM_THREADS`` if set, else the usable cores
    shared among this node's MPI ranks (unless the launcher already bound this rank to a subset
    of the cores, in which case that subset is all of its share).

    >>> search_threads({"NUMBA_NUM_THREADS": "3"}), search_threads({}, set(range(8)), 8)
    (3, 8)
    >>> search_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, set(range(8)), 8)  # 4 unbound ranks
    2
    >>> search_threads({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, {2, 3}, 8)  # bound to 2 cores
    2
    """
    env = os.environ if env is None else env
    v = env.get("NUMBA_NUM_THREADS", "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except AttributeError:  # pragma: no cover - not on Linux
            affinity = range(os.cpu_count() or 1)
    cores = max(1, len(affinity))
    total = cpu_count if cpu_count is not None else (os.cpu_count() or cores)
    if cores < total:  # already bound (taskset, srun --cpu-bind, mpirun --bind-to): this is our share
        return cores
    return max(1, cores // _local_ranks(env))


def _layout(L: Labels):
    """(rec, level_ptr) for the compiled search, built once per ``L`` (:attr:`Labels.packed`,
    read-only after): ``rec`` (C, R) uint32, one
    row per component, 64-byte aligned rows of R = 2 + 2 d + 4 W (rounded up to 16): start0,
    post0, (lo_k, hi_k) per dimension, then the out- and in-masks as 32-bit halves (a mask test
    holds for 64 bits iff for one of its halves). One cache line per component at d = 5, K = 64:
    the separate NumPy columns cost a cache miss each. ``level_ptr[l]``: the first component of
    level l where the components are numbered by level (``level`` non-decreasing, decided here from
    ``L.level`` once), so level tests compare ids and read no memory; None where they are not (the
    search then reads ``level[c]``: module doc)."""
    return L.packed.get(lambda: _pack(L))


def _pack(L: Labels):
    C, d, W = L.C, L.d, L.W
    level = np.asarray(L.level)
    level_ptr = None  # (not numbered by level: the levels are read)
    if not (C and np.any(level[1:] < level[:-1])):
        top = int(level[-1]) + 2 if C else 1
        level_ptr = read_only(np.searchsorted(level, np.arange(top + 1)).astype(np.int64))
    R = -(-(2 + 2 * d + 4 * W) // 16) * 16
    raw = np.zeros(C * R + 16, dtype=np.uint32)
    populate(raw)  # (its pages mapped over the host threads: the column writes below would fault each in, in turn)
    off = (-raw.ctypes.data % 64) // 4
    rec = raw[off:off + C * R].reshape(C, R)
    rec[:, 0], rec[:, 1] = L.start0, L.post0
    rec[:, 2:2 + 2 * d:2], rec[:, 3:3 + 2 * d:2] = L.lo.T, L.hi.T
    B = 2 + 2 * d
    if W:
        rec[:, B:B + 2 * W] = np.ascontiguousarray(L.out.T).view(np.uint32)
        rec[:, B + 2 * W:B + 4 * W] = np.ascontiguousarray(L.inn.T).view(np.uint32)
    return read_only(rec), level_ptr


@njit(nogil=True)
def _one(u, v, fmark, bmark, d, W2, rec, level, level_ptr, indptr, indices, rptr, ridx, stamp, fa, ba, na):
    # level tests on a key: the component's id where the components are numbered by level (its
    # level's bounds from level_ptr), else its level (level_ptr None: numba prunes the branches on
    # it at compile time, one specialisation each)
    lu, lv = level[u], level[v]
    if level_ptr is not None:
        f_le, f_lt = level_ptr[lv + 1], level_ptr[lv]  # c < f_le: level(c) <= level(v); c < f_lt: <
        b_ge, b_gt = level_ptr[lu], level_ptr[lu + 1]  # p >= b_ge: level(p) >= level(u); p >= b_gt: >
    else:  # the same bounds on levels
        f_le, f_lt = np.int64(lv) + 1, np.int64(lv)
        b_ge, b_gt = np.int64(lu), np.int64(lu) + 1
    B = 2 + 2 * d
    stamp[u] = fmark
    stamp[v] = bmark
    fa[0], ba[0] = u, v
    nf, nb = 1, 1
    fe, be = indptr[u + 1] - indptr[u], rptr[v + 1] - rptr[v]
    ru, rv = rec[u], rec[v]
    r = 0
    while True:
        r += 1
        nn, ne = 0, 0
        if fe <= be:  # forward: children c of the frontier
            for i in range(nf):
                x = fa[i]
                for e in range(indptr[x], indptr[x + 1]):
                    c = np.int64(indices[e])
                    if level_ptr is not None:
                        kc = c
                    else:
                        kc = np.int64(level[c])
                    if kc >= f_le:
                        continue
                    s = stamp[c]
                    if s == bmark:
                        return True, r
                    if kc >= f_lt or s == fmark:
                        continue
                    stamp[c] = fmark
                    rc = rec[c]
                    ok = True
                    for k in range(2, B, 2):  # L_v inside L_c
                        if rc[k] > rv[k] or rv[k + 1] > rc[k + 1]:
                            ok = False
                            break
                    if not ok:
                        continue
                    cut = rc[0] <= rv[1] and rv[1] <= rc[1]
                    for w in range(B, B + W2):  # support masks of (c, v): out at w, in at w + W2
                        oc, ic, ov, iv = rc[w], rc[w + W2], rv[w], rv[w + W2]
                        if (ic & ~iv) | (ov & ~oc):
                            ok = False
                            break
                        if oc & iv:
                            cut = True
                    if not ok:
                        continue
                    if cut:
                        return True, r
                    na[nn] = c
                    nn += 1
                    ne += indptr[c + 1] - indptr[c]
            if nn == 0:
                return False, r
            fa, na = na, fa
            nf, fe = nn, ne
        else:  # backward: parents p of the frontier
            for i in range(nb):
                y = ba[i]
                for e in range(rptr[y], rptr[y + 1]):
                    p = np.int64(ridx[e])
                    if level_ptr is not None:
                        kp = p
                    else:
                        kp = np.int64(level[p])
                    if kp < b_ge:
                        continue
                    s = stamp[p]
                    if s == fmark:
                        return True, r
                    if kp < b_gt or s == bmark:
                        continue
                    stamp[p] = bmark
                    rp = rec[p]
                    ok = True
                    for k in range(2, B, 2):  # L_p inside L_u
                        if ru[k] > rp[k] or rp[k + 1] > ru[k + 1]:
                            ok = False
                            break
                    if not ok:
                        continue
                    cut = ru[0] <= rp[1] and rp[1] <= ru[1]
                    for w in range(B, B + W2):  # support masks of (u, p)
                        ou, iu, op, ip = ru[w], ru[w + W2], rp[w], rp[w + W2]
                        if (iu & ~ip) | (op & ~ou):
                            ok = False
                            break
                        if ou & ip:
                            cut = True
                    if not ok:
                        continue
                    if cut:
                        return True, r
                    na[nn] = p
                    nn += 1
                    ne += rptr[p + 1] - rptr[p]
            if nn == 0:
                return False, r
            ba, na = na, ba
            nb, be = nn, ne


@njit(nogil=True)
def _block(q0, q1, cu, cv, d, W2, rec, level, level_ptr, indptr, indices, rptr, ridx, stamp, epoch, fa, ba,
           na, found, rounds):
    for q in range(q0, q1):
        e = epoch[0]
        if e == _EPOCHS:  # every uint8 stamp value used: start again from a clean array
            stamp[:] = 0
            e = 0
        epoch[0] = e + 1
        f, r = _one(np.int64(cu[q]), np.int64(cv[q]), np.uint8(2 * e + 1), np.uint8(2 * e + 2), d, W2, rec, level,
                    level_ptr, indptr, indices, rptr, ridx, stamp, fa, ba, na)
        found[q] = f
        rounds[q] = r


def compiled_search(L: Labels, cu: np.ndarray, cv: np.ndarray, threads: int | None = None):
    """Answers for component pairs that passed the prefilters, and the round count: the same
    (answers, rounds) as :func:`bidirectional_search_numpy`."""
    if cu.size == 0 or L.C >= _MAX_C:
        return bidirectional_search_numpy(L, cu, cv)
    found, rounds = query_rounds(L, cu, cv, threads)
    L.searched.get(lambda: True)
    return found, int(rounds.max())


def query_rounds(L: Labels, cu: np.ndarray, cv: np.ndarray, threads: int | None = None):
    """The compiled search whatever the batch size: (answers, rounds of each query). Needs
    fewer than 2^31 components (int32 frontiers; :func:`compiled_search` falls back above)."""
    k = int(cu.size)
    found = np.zeros(k, dtype=np.bool_)
    rounds = np.zeros(k, dtype=np.int32)
    if k == 0:
        return found, rounds
    rptr, ridx, _ = reverse_csr(L)
    cu = np.ascontiguousarray(cu)
    cv = np.ascontiguousarray(cv)
    rec, level_ptr = _layout(L)
    arrays = (L.d, 2 * L.W, rec, L.level, level_ptr, L.indptr, L.indices, rptr, ridx)
    nblk = -(-k // BLOCK_QUERIES)
    C = max(L.C, 1)

    def scratch():  # one thread's: uint8 stamps, the epoch, three frontier buffers
        return (np.zeros(C, dtype=np.uint8), np.zeros(1, dtype=np.int64),
                *(np.empty(C, dtype=np.int32) for _ in range(3)))

    def body(b, s):
        q0 = b * BLOCK_QUERIES
        _block(q0, min(k, q0 + BLOCK_QUERIES), cu, cv, *arrays, *s, found, rounds)

    run_blocks(nblk, threads or search_threads(), body, scratch)
    return found, rounds


class _Helpers:
    """The threads that run :func:`run_blocks`' blocks beside its caller: started on first use,
    kept for the next call (starting and joining threads on every call was a tenth or more of a
    batch of 100,000 pairs on a small index, and a CPU batch makes two such calls:
    docs/benchmarks.md), daemons (they never hold up the interpreter's exit), and forgotten in a
    forked child, which starts its own (a fork copies no thread but the caller)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tasks = None
        self.count = 0

    def submit(self, n: int, task) -> None:
        import queue

        with self.lock:
            if self.tasks is None:
                self.tasks, self.count = queue.SimpleQueue(), 0
            while self.count < min(n, cores.usable()):  # (more threads than cores: only queued)
                threading.Thread(target=self._serve, args=(self.tasks,), daemon=True,
                                 name=f"distgrail-search-{self.count}").start()
                self.count += 1
            for _ in range(n):
                self.tasks.put(task)

    @staticmethod
    def _serve(tasks):
        while True:
            tasks.get()()

    def forget(self):  # in a forked child: the parent's threads are not there
        self.lock = threading.Lock()
        self.tasks = None
        self.count = 0


_HELPERS = _Helpers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_HELPERS.forget)


def run_blocks(nblk: int, threads: int, body, scratch=lambda: None) -> None:
    """``body(b, s)`` for every block ``b < nblk`` on up to ``threads`` threads (the compiled loops
    release the GIL; numba's own pool is not used, so concurrent callers and ``fork()`` are
    safe): the caller and ``threads - 1`` kept helper threads (:class:`_Helpers`, at most one per
    core), each taking the next block from a shared counter, ``s = scratch()`` its own. A helper
    that only starts once the call is closed does nothing (another call's work may have held it)
    and holds nothing of it; the caller waits only for the helpers that took part, so no block
    runs after this returns. The first error (Ctrl-C in the caller included) stops every thread
    after its current block and is raised here."""
    blocks = itertools.count()
    errors = []

    def worker():
        try:
            s = scratch()
            while not errors:
                b = next(blocks)
                if b >= nblk:
                    return
                body(b, s)
        except BaseException as e:  # pragma: no cover - re-raised in the caller
            errors.append(e)

    T = max(1, min(int(threads), nblk))
    if T == 1:
        worker()
    else:
        done = threading.Condition()
        call = {"work": worker, "started": 0, "ended": 0}  # "work" None: closed

        def helper():
            with done:
                work = call["work"]
                if work is None:
                    return
                call["started"] += 1
            try:
                work()
            finally:
                with done:
                    call["ended"] += 1
                    done.notify_all()

        try:
            _HELPERS.submit(T - 1, helper)
            worker()
        except BaseException as e:  # (an interrupt outside worker's own blocks: the helpers stop too)
            errors.append(e)
        finally:
            with done:
                call["work"] = None
                done.wait_for(lambda: call["ended"] == call["started"])
    if errors:
        raise errors[0]
