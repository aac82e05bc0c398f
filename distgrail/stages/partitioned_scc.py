"""Condensation of a graph whose edges are partitioned over ranks: trimming and colouring sweeps
over replicated vertex state (Orzan's colouring; Slota et al., "BFS and coloring-based parallel
algorithms for strongly connected components"), written once against an array module ``xp``
(NumPy on the CPU backend, CuPy on a GPU backend) and an exchange object, with no MPI here.

Each rank holds ITS edges (``src, dst``, about 1/N of them, where they were parsed) and arrays
of length n that are the same on every rank (``alive``, ``rep``, ``color``, ``reached``). A
*sweep* applies the rank's edges to its copy, then the copies are combined (an ``allreduce``, or
an ``allgather`` of the frontier); every copy then equals the combination, so every rank takes the
same decisions without another message. The passes over a rank's edges (filters, presence
bits, colour and backward steps) are :mod:`distgrail.stages.partitioned_sweeps`: fused CUDA
kernels on a GPU, their array-code twin on the CPU.

- **peel** (:func:`peeled_keys`, when the condensed DAG may stay spread): Kahn's levels over the
  distinct edges first; an acyclic graph needs nothing more, and on another the vertices peeled
  (on no cycle) are SCCs of their own before the sweeps below.
- **trim**: an alive vertex with no alive in-edge or no alive out-edge (presence bitmaps, packed:
  ``allreduce`` OR over n/4 bytes) is a singleton SCC; repeated while a round removes at least
  1/64 of the alive vertices.
- **colour**: ``color[v]`` = largest alive id reaching v (scatter-max along the alive edges out of
  the last sweep's frontier, until nothing changes); each root (``color[r] == r``) claims, by a
  backward sweep along edges inside its colour, the vertices of its colour that reach it: r's SCC.
  Each sweep sends its frontier (:func:`combine_max`, :func:`combine_or`): the changed ids (and
  colours) of every rank when they are the smaller, else the whole array (MAX) or bitmap (OR),
  judged by the last sweep's frontier (known on every rank: no message to choose); the
  fixpoint, and so every colour, is the same either way.
- **gather**: when the alive edges left (SUM over the ranks) are at most ``gather_edges``, they go
  to the root, which finishes them (on the CPU SciPy's strong components, on a GPU the
  one-process steps :func:`distgrail.stages.scc.scc_reps` on ``CudaSteps``) and broadcasts the result: deep
  chains of cycles cost one gather, not one sweep per link. With ``rounds`` (a number of
  exchanges: trim rounds and colour and claim sweeps; ``index --partition auto`` sets it when it
  partitions a graph rank 0's GPU also holds, for speed) the alive edges go to the root once that
  many were spent, whatever their number: a deep DAG or a long chain of cycles needs a sweep per
  level, thousands, where a web or social graph needs a few dozen (docs/benchmarks.md).
  Without ``rounds``, a ``narrow`` rule (:data:`NARROW_EXCHANGES`) does the same for sweeps that
  crawl: at that many exchanges and each doubling, where at the pace of the exchanges since the
  last check (alive edges gone per exchange) the ``left`` alive edges would take more exchanges
  than were spent so far (a long chain trims two vertices an exchange, a deep layered DAG a
  level's edges, a long cycle's colour moves one hop and takes none) and ``narrow(left)`` says
  the root may take them, they go to the root: a 10 M chain was millions of exchanges.

Then every SCC's representative is its smallest vertex (a scatter-min on the replicated arrays,
no message), SCCs get compact ids in that order, each rank maps ITS edges to compact ids, drops
the ones inside an SCC and duplicates (:func:`partitioned_keys`). Either the condensed edges
(int64 keys) stay where they are (a DAG too large for the root: :mod:`.partitioned_dag`), or they
are gathered to the root (:func:`gather_condensed`), which condenses that small graph of
singleton SCCs with the existing
:func:`~distgrail.stages.condense.condense` / ``condense_cuda``: the canonical numbering by
(level, smallest vertex) of the whole graph is the numbering by (level, compact id) of the small
one, so :func:`expand_dag` gives exactly the DAG that condensing the whole graph gives.

The exchange (``ex``): ``allreduce(a, op)`` (op "max", "min", "sum" or "bor"; returns the combination),
``gather(a)`` (the concatenation in rank order on the root, None elsewhere), ``bcast(a)`` (the
root's array everywhere) and ``root`` (True on the root). :class:`Counted` wraps one and counts
the bytes each rank sends. Only these calls communicate; a rank's failure inside this module
(out of memory) is not shared, so the placement checks sizes before it starts.
"""

from __future__ import annotations


from ..arrays import scatter_max, scatter_min, sorted_distinct, unique

__all__ = ["DEFAULT_GATHER_EDGES", "Counted", "partitioned_reps", "condensed_keys", "partitioned_keys", "peeled_keys",
           "gather_condensed", "partitioned_condensed_edges",
           "expand_dag", "condense_partitioned", "combine_max", "combine_or"]

#: alive edges (over all ranks) up to which the rest of the SCC search runs on the root
DEFAULT_GATHER_EDGES = 4 << 20
#: exchanges after which (and each doubling) :func:`partitioned_reps` asks whether its sweeps
#: crawl (module doc: ``narrow``); a web or social graph's sweeps end in a few dozen
NARROW_EXCHANGES = 64
#: the most components whose condensed edges fit int64 keys ``cu * C + cv`` (C^2 <= 2^63)
MAX_KEYED_COMPONENTS = 3_037_000_499
#: trimming goes on while a round removes at least this share of the alive vertices
TRIM_SHARE = 1 / 64


def _is_cupy(xp) -> bool:
    return getattr(xp, "__name__", "") == "cupy"


class Counted:
    """An exchange that counts what this rank sends: ``exchanges`` (every call), ``sweeps`` (allreduce calls),
    ``allreduce_bytes``, ``gathered_bytes`` (its blocks sent to the root, and the broadcasts) and
    ``exchanged_bytes`` (allgather and alltoall: what it sent to the other ranks)."""

    def __init__(self, ex):
        self.ex = ex
        self.root = ex.root
        if hasattr(ex, "peel_block"):
            self.peel_block = ex.peel_block
        self.rank, self.size = getattr(ex, "rank", 0), getattr(ex, "size", 1)
        self.exchanged_bytes = 0
        self.exchanges = 0
        self.sweeps = 0
        self.allreduce_bytes = 0
        self.gathered_bytes = 0

    def allreduce(self, a, op):
        self.exchanges += 1
        self.sweeps += 1
        self.allreduce_bytes += int(a.nbytes)
        return self.ex.allreduce(a, op)

    def gather(self, a):
        self.exchanges += 1
        self.gathered_bytes += int(a.nbytes)
        return self.ex.gather(a)

    def bcast(self, a):
        self.exchanges += 1
        out = self.ex.bcast(a)
        self.gathered_bytes += int(out.nbytes)
        return out

    def bcast_from(self, a, root):
        self.exchanges += 1
        out = self.ex.bcast_from(a, root)
        self.gathered_bytes += int(out.nbytes)
        return out

    def counts(self, k):
        self.exchanges += 1
        return self.ex.counts(k)

    def agree(self, step, error):
        self.exchanges += 1
        return self.ex.agree(step, error)

    def allgather(self, a, counts=None):
        self.exchanges += 1
        self.exchanged_bytes += int(a.nbytes)
        return self.ex.allgather(a) if counts is None else self.ex.allgather(a, counts)

    def alltoall(self, parts):
        self.exchanges += 1
        self.exchanged_bytes += sum(int(p.nbytes) for j, p in enumerate(parts) if j != self.rank)
        return self.ex.alltoall(parts)

    def stats(self) -> dict:
        return {"exchanges": self.exchanges, "sweeps": self.sweeps, "allreduce bytes": self.allreduce_bytes, "gathered bytes": self.gathered_bytes,
                "exchanged bytes": self.exchanged_bytes}


def combine_max(xp, ex, old, nxt, hint: int):
    """Collective: the elementwise maximum of every rank's ``nxt`` (each ``>= old``, ``old`` the
    same on every rank; ``nxt`` may be updated in place).
    What crosses is the smaller of the frontier — every rank's changed (position, value) pairs,
    by allgather — and the whole array (allreduce MAX), judged by ``hint``: the size of the last
    frontier, the same on every rank (so the choice costs no message). The result is the same."""
    n = int(old.shape[0])
    if 2 * int(hint) * ex.size >= n:
        return ex.allreduce(nxt, "max")
    mine = xp.flatnonzero(nxt != old)
    pairs = ex.allgather(xp.stack((mine.astype(old.dtype), nxt[mine]), axis=1).reshape(-1)).reshape(-1, 2)
    scatter_max(xp, nxt, pairs[:, 0], pairs[:, 1])
    return nxt


def combine_or(xp, ex, old, nxt, hint: int):
    """Collective: the OR of every rank's boolean ``nxt`` (each a superset of ``old``): the newly
    set ids of every rank (allgather) when ``hint`` (the
    last frontier's size, the same on every rank) says their 8 bytes each would be fewer than a
    bitmap of n bits, else the packed bitmaps (allreduce OR)."""
    n = int(old.shape[0])
    if 64 * int(hint) * ex.size >= n:
        return xp.unpackbits(ex.allreduce(xp.packbits(nxt), "bor"))[:n].astype(xp.bool_)
    nxt[ex.allgather(xp.flatnonzero(nxt != old))] = True
    return nxt


def _root_reps(xp, s, d, k):
    """The one-process SCC steps on a graph of ``k`` vertices: each vertex's smallest member. On
    the CPU SciPy's strong components (linear, as the one-process CPU condensation), not the
    array-code trimming of :class:`~distgrail.stages.scc.NumpySteps`, which takes a NumPy pass per
    level: a long chain finished on the root spent most of the build there (docs/benchmarks.md).
    On a GPU the CUDA steps, handing a deep, narrow graph to SciPy's on the host as the
    one-process condensation hands it to the CPU (:class:`~distgrail.stages.scc.NarrowPeel`,
    with the same notice): a long chain gathered to the root was trimmed a vertex a round."""
    if not _is_cupy(xp):
        return _root_reps_scipy(s, d, k)
    from . import deep
    from .scc import CudaSteps, NarrowPeel, scc_reps

    steps = CudaSteps(narrow_rounds=deep.HOST_DEEP_LEVELS)
    ptr, idx = steps.edge_csr(s.astype(xp.int32), d.astype(xp.int32), k)
    try:
        rep, _, _ = scc_reps(steps, ptr, idx, k)
    except NarrowPeel as e:
        why = str(e)  # (SciPy runs after the except block: its traceback held the steps' device arrays)
    else:
        return xp.arange(k, dtype=xp.int64) if rep is None else rep.astype(xp.int64)
    from .phases import notice

    del ptr, idx, steps
    notice(f"condensing on the CPU: {why}")
    return xp.asarray(_root_reps_scipy(xp.asnumpy(s), xp.asnumpy(d), k))


def _root_reps_scipy(s, d, k):
    """:func:`_root_reps` on the CPU: SciPy's strong components, each labelled by its smallest
    vertex (a scatter-min over the labels)."""
    import numpy as np
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    ids = np.arange(k, dtype=np.int64)
    if k == 0 or s.size == 0:
        return ids
    a = sp.csr_matrix((np.ones(s.size, dtype=np.bool_), (np.asarray(s), np.asarray(d))), shape=(k, k))
    ncomp, labels = connected_components(a, directed=True, connection="strong")
    smallest = np.full(ncomp, k, dtype=np.int64)
    scatter_min(np, smallest, labels, ids)
    return smallest[labels]


def _finish_on_root(xp, ex, s, d, alive, rep, ids):
    """The alive subgraph's edges to the root, its SCCs there (over the vertices they touch, at
    most twice the edges), the members' representatives back; the other alive vertices touch no
    alive edge: each its own SCC."""
    rep[alive] = ids[alive]
    s_all, d_all = ex.gather(s), ex.gather(d)
    got = None
    if ex.root:  # the touched vertices by a mark per vertex, not a sort of 2L ids (past 2^31 items)
        mark = xp.zeros(int(ids.shape[0]), dtype=xp.bool_)
        mark[s_all] = True
        mark[d_all] = True
        touched = xp.flatnonzero(mark).astype(ids.dtype)
        pos = xp.cumsum(mark, dtype=ids.dtype)
        pos -= 1  # a touched vertex's place among them: what searchsorted in ``touched`` gives
        del mark
        s_all, d_all = pos[s_all], pos[d_all]
        del pos
        local = _root_reps(xp, s_all, d_all, int(touched.size))
        del s_all, d_all
        got = xp.stack((touched, touched[local])).astype(ids.dtype)
    got = ex.bcast(got)
    rep[got[0]] = got[1]


def partitioned_reps(xp, src, dst, n: int, ex, gather_edges: int = DEFAULT_GATHER_EDGES, rounds=None, done=None,
                     narrow=None):
    """SCCs of the graph on ``n`` vertices whose edges ``src[i] -> dst[i]`` are this rank's part:
    ``rep`` (length n, the same on every rank), ``rep[v]`` the smallest vertex of v's SCC.
    ``gather_edges``: see the module doc (0: never gather by the count of alive edges); ``rounds``:
    exchanges after which the rest goes to the root (None: no limit; module doc). Every rank
    counts the same rounds: each is decided by values every rank holds. ``done``: vertices known
    to be SCCs of their own (on no cycle: :func:`peeled_keys`' peel), the same on every rank.
    ``narrow``: with ``rounds`` None, a collective ``narrow(left) -> bool``, whether the root may
    take ``left`` alive edges, asked where the sweeps crawl (module doc; None: never asked)."""
    from .partitioned_sweeps import ALIVE, NO_LOOP, SAME, sweeps_for

    ops = sweeps_for(xp)  # the passes over this rank's edges: CUDA kernels on a GPU, array code on the CPU
    n = int(n)
    idt = xp.int32 if n < 2**31 - 1 else xp.int64
    ids = xp.arange(n, dtype=idt)
    alive = xp.ones(n, dtype=xp.bool_) if done is None else ~done
    rep = xp.full(n, -1, dtype=idt) if done is None else xp.where(done, ids, -1).astype(idt)
    s, d = ops.filter(NO_LOOP, src.astype(idt, copy=False), dst.astype(idt, copy=False))  # a self-loop joins nothing
    spent = [0]  # exchanges so far (a list: the inner loops add to it)
    crawl = [NARROW_EXCHANGES, None, False]  # the next check, (alive edges, exchanges) at the last, stopped

    def alive_edges() -> int:
        return int(ex.allreduce(xp.asarray([s.size], dtype=xp.int64), "sum")[0])

    def more() -> bool:  # one more exchange within ``rounds`` (or until the sweeps crawl)
        spent[0] += 1
        if rounds is not None:
            return spent[0] <= rounds
        if narrow is not None and not crawl[2] and spent[0] >= crawl[0]:  # (every rank: the same exchange)
            left, then = alive_edges(), crawl[1]
            crawl[0], crawl[1] = 2 * spent[0], (left, spent[0])
            slow = (then[0] - left) * spent[0] < left * (spent[0] - then[1])  # (left / pace > spent)
            crawl[2] = bool(slow and narrow(left))
        return not crawl[2]

    def out() -> bool:  # the exchanges spent: the rest goes to the root
        return crawl[2] or rounds is not None and spent[0] > rounds

    while True:
        s, d = ops.filter(ALIVE, s, d, alive=alive)
        if not bool(alive.any()):
            break
        left = alive_edges()
        if crawl[1] is None:  # (the narrow rule's first check measures from here)
            crawl[1] = (left, spent[0])
        if left == 0:  # no alive edge on any rank: every alive vertex is its own SCC
            rep[alive] = ids[alive]
            break
        if left <= gather_edges or not more():
            _finish_on_root(xp, ex, s, d, alive, rep, ids)
            break
        # trimming
        removed_any = False
        while more():
            # bit v: an alive in-edge, bit n + u: an alive out-edge; packed: n/4 bytes, not 2n
            has = xp.unpackbits(ex.allreduce(ops.presence(s, d, n), "bor"))[:2 * n]
            dead = alive & ((has[:n] == 0) | (has[n:] == 0))
            gone = int(xp.count_nonzero(dead))
            if gone:
                rep[dead] = ids[dead]
                alive[dead] = False
                s, d = ops.filter(ALIVE, s, d, alive=alive)
                removed_any = True
            if gone < TRIM_SHARE * int(xp.count_nonzero(alive)) or gone == 0:
                break
        if removed_any or out():
            continue  # the threshold (or the rounds spent) is looked at again
        # colouring: colour = largest alive id reaching each vertex
        color = xp.where(alive, ids, -1).astype(idt)
        fresh = alive  # the frontier: vertices whose colour changed in the last sweep
        hint = int(xp.count_nonzero(alive))
        while hint:
            if not more():
                break  # unfinished colours are dropped: the root finishes from alive and rep
            nxt = color.copy()
            ops.colour(s, d, fresh, color, nxt)
            nxt = combine_max(xp, ex, color, nxt, hint)
            fresh, color = nxt != color, nxt
            hint = int(xp.count_nonzero(fresh))  # the same on every rank: 0 ends the sweeps
        if hint:
            continue  # out of rounds
        # each root claims the vertices of its colour that reach it (backward along same-colour edges)
        reached = alive & (color == ids)
        bs, bd = ops.filter(SAME, s, d, color=color)
        fresh = reached
        hint = int(xp.count_nonzero(reached))
        while hint:
            if not more():
                break
            nxt = reached.copy()
            ops.back(bs, bd, fresh, nxt)
            nxt = combine_or(xp, ex, reached, nxt, hint)
            fresh, reached = nxt & ~reached, nxt
            hint = int(xp.count_nonzero(fresh))
        if hint:
            continue  # out of rounds: the claims are unfinished, so none is taken
        got = reached
        rep[got] = color[got]
        alive[got] = False
        del color, reached, bs, bd, got
    minv = xp.full(n, n, dtype=idt)
    scatter_min(xp, minv, rep, ids)
    return minv[rep]


def condensed_keys(xp, src, dst, rep):
    """``(compact, C, keys)``: each vertex's compact SCC id (ordered by smallest member), the
    number of SCCs, and this rank's condensed edges as sorted distinct int64 keys ``cu * C + cv``."""
    n = int(rep.shape[0])
    idt = rep.dtype
    heads = xp.flatnonzero(rep == xp.arange(n, dtype=idt))
    C = int(heads.size)
    compact = xp.empty(n, dtype=idt)
    compact[heads] = xp.arange(C, dtype=idt)
    compact = compact[rep]
    if C > MAX_KEYED_COMPONENTS:
        from ..errors import DistGrailError

        raise DistGrailError(f"{C:,} strongly connected components: the partitioned build keys condensed edges "
                             f"as cu * C + cv in 64 bits, which holds at most {MAX_KEYED_COMPONENTS:,} components")
    keys = compact[src].astype(xp.int64)  # built in place: 8 bytes per edge, then the sort's copy
    keys *= C
    keys += compact[dst]
    keys = keys[keys % (C + 1) != 0] if C else keys[:0]  # cu == cv: (cu * C + cu) is a multiple of C + 1
    return compact, C, sorted_distinct(xp, keys)


def partitioned_keys(xp, src, dst, n: int, ex, gather_edges: int = DEFAULT_GATHER_EDGES, rounds=None, narrow=None):
    """Collective: ``(compact, C, keys)`` of :func:`condensed_keys` for the SCCs of
    :func:`partitioned_reps` (the keys: this rank's condensed edges)."""
    rep = partitioned_reps(xp, src, dst, n, ex, gather_edges, rounds, narrow=narrow)
    return condensed_keys(xp, src, dst, rep)


def peeled_keys(xp, src, dst, n: int, ex, gather_edges: int = DEFAULT_GATHER_EDGES, narrow=None):
    """Collective: ``(compact, C, keys, levels)``: :func:`partitioned_keys`, after a peel of the
    graph from its sources (Kahn's levels, :func:`~distgrail.stages.partitioned_dag.csr_levels`,
    one exchange per level, over this rank's edges as a CSR by source that two kernels count and fill
    on a GPU, :meth:`~distgrail.stages.partitioned_sweeps.ArraySweeps.rows`: no sort, 4 or 8 bytes an
    edge and 16 a vertex).
    When the peel reaches every vertex the graph is acyclic (self-loops aside): every vertex is
    its own SCC and ``levels`` = ``(level, L)`` are the condensed DAG's, so no trimming or
    colouring sweep runs and the spread DAG does not peel again
    (:func:`~distgrail.stages.partitioned_dag.spread_dag`). Otherwise the peeled vertices (none
    of them on a cycle) are SCCs of their own, the sweeps start from the rest, and ``levels`` is
    None. A DAG too large for one GPU is where this pays: its sweeps trim a level or two per
    exchange, each a pass over every edge still alive. On a graph with a giant SCC the peel
    stops after a few levels and costs its two passes and their 4 or 8 bytes an edge."""
    from .partitioned_dag import csr_levels
    from .partitioned_sweeps import sweeps_for

    n = int(n)
    idt = xp.int32 if n < 2**31 - 1 else xp.int64
    if n > MAX_KEYED_COMPONENTS or n == 0:
        return (*partitioned_keys(xp, src, dst, n, ex, gather_edges, narrow=narrow), None)
    ptr, head = sweeps_for(xp).rows(src, dst, n)
    head = head.astype(idt, copy=False)  # (the same width on every rank: the peel's blocks are equal)
    level, L = csr_levels(xp, ex, n, ptr, head, partial=True)
    del ptr, head
    done = level >= 0
    if bool(done.all()):  # acyclic: every vertex its own component, the compact ids the vertices'
        compact, C, keys = condensed_keys(xp, src, dst, xp.arange(n, dtype=idt))
        return compact, C, keys, (level, L)
    del level
    rep = partitioned_reps(xp, src, dst, n, ex, gather_edges, None, done=done, narrow=narrow)
    return (*condensed_keys(xp, src, dst, rep), None)


def gather_condensed(xp, ex, C: int, keys):
    """Collective: ``(cu, cv)``, the condensed graph's distinct edges (compact ids, sorted) on the
    root, gathered from every rank's ``keys``; ``(None, None)`` elsewhere."""
    allk = ex.gather(keys)
    if not ex.root:
        return None, None
    allk = unique(xp, allk)
    if C == 0:
        return allk, allk
    dt = xp.int32 if C < 2**31 - 1 else xp.int64
    return (allk // C).astype(dt), (allk % C).astype(dt)


def partitioned_condensed_edges(xp, src, dst, n: int, ex, gather_edges: int = DEFAULT_GATHER_EDGES, rounds=None):
    """Collective: ``(compact, C, cu, cv)``: compact SCC ids of every vertex and C on every rank;
    the condensed graph's distinct edges (compact ids, sorted) on the root, None elsewhere."""
    compact, C, keys = partitioned_keys(xp, src, dst, n, ex, gather_edges, rounds)
    cu, cv = gather_condensed(xp, ex, C, keys)
    return compact, C, cu, cv


def expand_dag(dag, compact, n: int):
    """The DAG of the whole graph from the DAG of its condensed graph (singleton SCCs numbered by
    smallest member): every vertex takes its SCC's component."""
    dag.comp = dag.comp[compact]
    dag.n = int(n)
    return dag


def condense_partitioned(xp, src, dst, n: int, ex, gather_edges: int = DEFAULT_GATHER_EDGES, rounds=None):
    """Collective, NumPy: the :class:`~distgrail.stages.condense.DAG` of the whole graph on the
    root (what :func:`~distgrail.stages.condense.condense` gives it), None elsewhere."""
    from ..io.graph import EdgeGraph
    from .condense import condense

    compact, C, cu, cv = partitioned_condensed_edges(xp, src, dst, n, ex, gather_edges, rounds)
    if not ex.root:
        return None
    return expand_dag(condense(EdgeGraph(n=C, src=cu, dst=cv)), compact, n)
