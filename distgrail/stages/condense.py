"""Condensation: strongly connected components → a DAG numbered by level.

Components are numbered canonically by (level, smallest original vertex id), where level is
the longest-path distance from a source. This is a topological order in which every level is
one contiguous id range ``level_ptr[l] .. level_ptr[l+1]``, so the level sweeps of the four
phases walk slices instead of frontiers. The numbering does not depend on SciPy's internal
component order, so every backend and rank sees the same DAG.

On the CPU, large graphs take compiled loops (:mod:`distgrail.stages.scc_jit`,
:mod:`distgrail.stages.deep_jit`); where one fails to compile at its first call, the whole
condensation runs again from the edges on SciPy's search and the NumPy steps
(:func:`distgrail.jit.restarts`): the arrays an earlier compiled call wrote are not trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import id_range
from ..io.graph import EdgeGraph, id_dtype
from ..jit import guard, load, restarts
from ..segments import gather_rows
from . import deep

__all__ = ["DAG", "condense", "dag_from_csr", "condense_numpy", "condense_cuda", "condense_cuda_of", "condense_bytes",
           "dag_to_host"]


@dataclass
class DAG:
    """The condensed graph. Components ``0..C-1`` are sorted by level.

    Attributes
    ----------
    n : int            vertices of the input graph
    comp : ndarray     component of each input vertex, shape (n,)
    indptr, indices    CSR of the DAG (children sorted by id, no duplicates)
    rindptr, rindices  reverse CSR (parents sorted by id)
    level : ndarray    longest-path distance from a source, shape (C,)
    level_ptr : ndarray  components of level l are level_ptr[l]:level_ptr[l+1]
    timings : dict     seconds of the sub-stages (GPU condensation: csr, trim, scc, levels, renumber)

    The arrays are NumPy arrays, or CuPy device arrays from :func:`condense_cuda`
    (:func:`dag_to_host` brings them back).
    """

    n: int
    comp: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    rindptr: np.ndarray
    rindices: np.ndarray
    level: np.ndarray
    level_ptr: np.ndarray
    meta: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)

    @property
    def C(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def m(self) -> int:
        return int(self.indices.shape[0])

    @property
    def n_levels(self) -> int:
        return int(self.level_ptr.shape[0] - 1)


def _sparse():
    """scipy.sparse with csgraph, imported on first use (the GPU path never needs it, and its import is slow)."""
    import scipy.sparse
    import scipy.sparse.csgraph  # noqa: F401 - makes scipy.sparse.csgraph an attribute

    return scipy.sparse


@restarts
def _kahn_levels(indptr, indices, C):
    """Longest-path level of every vertex of a DAG given in CSR (any numbering): a frontier per
    NumPy iteration; past :data:`~distgrail.stages.deep.DEEP_LEVELS` levels the rest in one
    compiled loop (:mod:`distgrail.stages.deep`), which sets the same levels (where that loop
    fails to compile, all again in NumPy: :func:`~distgrail.jit.restarts`)."""
    indeg = np.bincount(indices, minlength=C).astype(np.int64)
    level = np.full(C, -1, dtype=np.int64)
    frontier = np.flatnonzero(indeg == 0)
    lev = 0
    while frontier.size:
        if lev == deep.DEEP_LEVELS:  # asked once: a DAG of more levels than that
            jit = deep.compiled_sweeps(lev + 1)
            if jit is not None:
                jit.kahn_rest(indptr, indices, indeg, level, frontier, lev)
                break
        level[frontier] = lev
        ch, _ = gather_rows(indptr, indices, frontier)
        if ch.size == 0:
            break
        if ch.size * 8 > C:
            cnt = np.bincount(ch, minlength=C)
            indeg -= cnt
            u = np.flatnonzero(cnt)
        else:  # sort + run lengths (numpy 2's hash-based unique is slower here)
            s = np.sort(ch)
            brk = np.flatnonzero(s[1:] != s[:-1]) + 1
            u = s[np.concatenate(([0], brk))]
            indeg[u] -= np.diff(np.concatenate(([0], brk, [s.size])))
        frontier = u[indeg[u] == 0]
        lev += 1
    if (level < 0).any():  # pragma: no cover - condensation guarantees a DAG
        raise RuntimeError("condensed graph has a cycle")
    return level


def _csr(src, dst, C):
    """CSR with sorted, unique column indices per row (structure only)."""
    dt = id_dtype(C)
    if src.size == 0:
        return np.zeros(C + 1, dtype=np.int64), np.zeros(0, dtype=dt)
    if (src[1:] >= src[:-1]).all() and ((src[1:] != src[:-1]) | (dst[1:] > dst[:-1])).all():
        indptr = np.zeros(C + 1, dtype=np.int64)  # already sorted and distinct: no conversion
        np.cumsum(np.bincount(src, minlength=C), out=indptr[1:])
        return indptr, dst.astype(dt, copy=False)
    a = _sparse().csr_matrix((np.ones(src.size, dtype=np.bool_), (src, dst)), shape=(C, C))
    a.sum_duplicates()
    return a.indptr.astype(np.int64), a.indices.astype(dt)


def _transpose(indptr, indices, C):
    """Transposed CSR by a counting sort (SciPy's csr_tocsc, linear time): each output row lists
    its entries in input row order, so it comes out sorted when the input rows are visited in order."""
    a = _sparse().csr_matrix((np.ones(indices.size, dtype=np.bool_), indices, indptr), shape=(C, C))
    t = a.tocsc()
    return t.indptr.astype(np.int64), t.indices.astype(id_dtype(C))


def _permute(ptr, ind, order, new_of_old, C, block: int = 1 << 23):
    """Rows in new order (new id i = old id order[i]), entries renumbered (not sorted).
    Gathered in blocks of about ``block`` entries to keep the index temporaries small."""
    dt = id_dtype(C)
    counts = np.diff(ptr)[order]
    pptr = np.zeros(C + 1, dtype=np.int64)
    np.cumsum(counts, out=pptr[1:])
    out = np.empty(int(pptr[-1]), dtype=dt)
    relabel = new_of_old.astype(dt)
    shift = ptr[order] - pptr[:-1]  # old position - new position, per row
    r = 0
    while r < C:
        r1 = min(max(int(np.searchsorted(pptr, pptr[r] + block, side="right")) - 1, r + 1), C)
        e0, e1 = int(pptr[r]), int(pptr[r1])
        idx = np.repeat(shift[r:r1], counts[r:r1])
        idx += np.arange(e0, e1, dtype=np.int64)
        out[e0:e1] = relabel[ind[idx]]
        r = r1
    return pptr, out


def _renumber(ip0, ix0, rev0, order, new_of_old, C):
    """Forward and reverse CSR after renumbering, rows sorted, without sorting: permute the rows
    of the old forward (reverse) CSR into new order and transpose; a transpose lists each row's
    entries in the order the rows were visited, i.e. sorted. The two run on two threads (SciPy's
    and NumPy's loops release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as ex:
        fwd = ex.submit(lambda: _transpose(*_permute(*rev0.result(), order, new_of_old, C), C))
        rindptr, rindices = _transpose(*_permute(ip0, ix0, order, new_of_old, C), C)
        indptr, indices = fwd.result()
    return indptr, indices, rindptr, rindices


def dag_from_csr(n, comp, indptr, indices):
    """Build a :class:`DAG` from a CSR whose ids are already level-sorted (binary files)."""
    C = indptr.size - 1
    src = np.repeat(np.arange(C, dtype=id_dtype(C)), np.diff(indptr))
    rindptr, rindices = _csr(indices, src, C)
    level = _kahn_levels(indptr, indices, C)
    level_ptr = np.searchsorted(level, np.arange(int(level.max(initial=-1)) + 2))
    return DAG(n=n, comp=comp, indptr=indptr, indices=indices, rindptr=rindptr, rindices=rindices,
               level=level.astype(np.int32), level_ptr=level_ptr.astype(np.int64))


#: edges from which the CPU backend finds strong components with the compiled search
#: (:mod:`distgrail.stages.scc_jit`) rather than SciPy's: about where numba's import and cache
#: load cost less than the search saves (docs/benchmarks.md, session 43)
COMPILED_SCC_EDGES = 1 << 23
#: what the warnings about :mod:`distgrail.stages.scc_jit` call it
_SCC_WHAT = "strong components"


def _strong_components(src, dst, n, cap=None):
    """``(ncomp, labels, cu, cv, jit)``: a component number per vertex, the components of every
    edge (``cu``, ``cv``), from SciPy's search (``jit`` None); on large graphs from the compiled
    one (``jit``: :mod:`distgrail.stages.scc_jit`, whose numbers are in closing order, and
    ``cu``, ``cv`` only the edges between components). Its compiled calls go through
    :func:`distgrail.jit.guard`: one that fails to compile raises
    :class:`~distgrail.jit.CompileFailed` (the caller, :func:`condense`, starts again on SciPy's)."""
    jit = None
    if src.size >= COMPILED_SCC_EDGES:
        jit = load(f"{__package__}.scc_jit", _SCC_WHAT, stacklevel=5)  # (restarts: one more frame)
    dt = id_dtype(n)
    if jit is not None:
        call = guard(jit, _SCC_WHAT)
        src, dst = np.ascontiguousarray(src), np.ascontiguousarray(dst)
        if not call.ids_within(src, dst, n):
            raise ValueError("an edge's end lies " + id_range(n, lead="outside the graph's vertices"))
        indptr = np.empty(n + 1, dtype=np.int64)
        indices = call.rows_of(src, dst, n, indptr)
        labels = np.zeros(n, dtype=dt)
        work = np.empty(n, dtype=dt), np.empty(n, dtype=dt), np.empty(n, dtype=np.int64), np.empty(n, np.bool_)
        # the edges between components that the search records: half the edges' room (int32 ids:
        # 4 bytes an input edge, int64: 8)
        cap = src.size // 2 + 1024 if cap is None else cap
        cu, cv = np.empty(cap, dtype=dt), np.empty(cap, dtype=dt)
        ncomp, k = call.strong_components(indptr, indices, labels, *work, cu, cv)
        del work, indptr, indices
        if k <= cap:
            return int(ncomp), labels, cu[:k], cv[:k], jit
        del cu, cv  # more than it could hold (a graph mostly acyclic): every edge's components
        cu, cv = labels[src], labels[dst]
        keep = cu != cv
        return int(ncomp), labels, cu[keep], cv[keep], jit
    if src.size and (min(int(src.min()), int(dst.min())) < 0 or max(int(src.max()), int(dst.max())) >= n):
        raise ValueError("an edge's end lies " + id_range(n, lead="outside the graph's vertices"))
    if (src[1:] >= src[:-1]).all():  # rows already grouped: build the CSR directly
        indptr0 = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr0[1:])
        a = _sparse().csr_matrix((np.ones(src.size, dtype=np.bool_), dst, indptr0), shape=(n, n))
    else:
        a = _sparse().csr_matrix((np.ones(src.size, dtype=np.bool_), (src, dst)), shape=(n, n))
    ncomp, labels = _sparse().csgraph.connected_components(a, directed=True, connection="strong")
    del a
    labels = labels.astype(dt)
    return ncomp, labels, labels[src], labels[dst], None


@restarts
def condense(graph: EdgeGraph) -> DAG:
    """Condense ``graph``'s SCCs into a level-sorted DAG (a compiled step that fails to compile:
    all again from ``graph`` without it, module doc).

    Examples
    --------
    >>> from distgrail.io.read import as_graph
    >>> g = as_graph((np.array([0, 1, 2, 2]), np.array([1, 0, 3, 3])))
    >>> d = condense(g)
    >>> d.C, d.m, d.comp.tolist()
    (3, 1, [0, 0, 1, 2])
    """
    stored = graph.meta.get("condensation") if isinstance(getattr(graph, "meta", None), dict) else None
    if stored is not None:  # read from a binary graph file (distgrail convert)
        dag = stored() if callable(stored) else stored
        if dag is not None and dag.n == graph.n:
            return dag
    n = graph.n
    if n == 0:
        z = np.zeros(0, np.int64)
        return DAG(n=0, comp=z.astype(np.int32), indptr=np.zeros(1, np.int64), indices=z.astype(np.int32),
                   rindptr=np.zeros(1, np.int64), rindices=z.astype(np.int32), level=z.astype(np.int32),
                   level_ptr=np.zeros(1, np.int64))
    src, dst = graph.src, graph.dst
    if graph.m == 0 or (src <= dst).all() or (src >= dst).all():
        # vertex order (or its reverse) is topological: every component is one vertex
        ncomp, labels, jit = n, None, None
        cu, cv = src, dst
    else:
        ncomp, labels, cu, cv, jit = _strong_components(src, dst, n)
    jit = guard(jit, _SCC_WHAT)  # (its later steps too: a compile failure restarts the condensation)
    if jit is None:
        keep = cu != cv
        if not keep.all():
            cu, cv = cu[keep], cv[keep]
        del keep
    ip0, ix0 = _csr(cu, cv, ncomp)
    del cu, cv
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)  # the old reverse CSR, beside the level sweep
    rev0 = pool.submit(_transpose, ip0, ix0, ncomp)
    try:  # (the compiled search's numbers are in closing order: its levels in one pass)
        lev0 = _kahn_levels(ip0, ix0, ncomp) if jit is None else jit.closing_levels(ip0, ix0)
        if labels is None:
            order = np.argsort(lev0, kind="stable")  # ties: smallest vertex id first
        elif jit is not None:
            order = jit.canonical_order(labels, lev0, ncomp)
        else:
            # smallest original vertex of each component: first occurrence in vertex order
            by_label = np.argsort(labels, kind="stable")
            sl = labels[by_label]
            head = np.ones(n, dtype=bool)
            head[1:] = sl[1:] != sl[:-1]
            first = by_label[head]
            del by_label, sl, head
            order = np.lexsort((first, lev0))  # new id -> old label
    except BaseException:  # (a compile failure too: the pool's thread ends before the restart)
        rev0.cancel()
        pool.shutdown(wait=True)
        raise
    new_of_old = np.empty(ncomp, dtype=np.int64)
    new_of_old[order] = np.arange(ncomp)
    C = ncomp
    dt = id_dtype(C)
    try:
        if jit is None:
            indptr, indices, rindptr, rindices = _renumber(ip0, ix0, rev0, order, new_of_old, C)
        else:  # the same arrays by two compiled counting passes a direction, the two on two threads
            indptr, rindptr = np.empty(C + 1, np.int64), np.empty(C + 1, np.int64)
            indices, rindices = np.empty(ix0.size, dt), np.empty(ix0.size, dt)
            rptr0, rind0 = rev0.result()
            fwd = pool.submit(jit.renumbered_transpose, rptr0, rind0, order, new_of_old, indptr, indices)
            jit.renumbered_transpose(ip0, ix0, order, new_of_old, rindptr, rindices)
            fwd.result()
    finally:
        pool.shutdown(wait=True)
    del ip0, ix0, rev0
    level = lev0[order]
    n_levels = int(level.max()) + 1
    level_ptr = np.searchsorted(level, np.arange(n_levels + 1)).astype(np.int64)
    comp = new_of_old.astype(dt) if labels is None else new_of_old.astype(dt)[labels]
    return DAG(n=n, comp=comp, indptr=indptr, indices=indices,
               rindptr=rindptr, rindices=rindices, level=level.astype(np.int32), level_ptr=level_ptr)


# --- GPU condensation (kernels/condense.cu) and its NumPy twin, one shared flow ---------------------

_ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


def _empty_dag(xp):
    z = xp.zeros(0, dtype=xp.int32)
    return DAG(n=0, comp=z, indptr=xp.zeros(1, dtype=xp.int64), indices=z.copy(), rindptr=xp.zeros(1, dtype=xp.int64),
               rindices=z.copy(), level=z.copy(), level_ptr=xp.zeros(1, dtype=xp.int64))


def _condense_steps(steps, src, dst, n):
    """The GPU flow, step by step: CSR (sorted, deduplicated, no self-loops) → trimming / SCCs →
    condensed CSR and its Kahn levels → canonical order (level, smallest vertex) → renumbered CSR
    and reverse CSR. ``steps`` is :class:`~distgrail.stages.scc.NumpySteps` or ``CudaSteps``."""
    return _condense_held(steps, [src, dst], n)


def _condense_held(steps, held, n):
    """:func:`_condense_steps` of the edges ``held`` (``[src, dst]``, handed to the CSR's step,
    which empties it: :meth:`~distgrail.stages.scc.CudaSteps.edge_csr_of`)."""
    import time

    from .scc import scc_reps

    xp = steps.xp
    tm: dict = {}
    if n == 0:
        held.clear()
        return _empty_dag(xp)
    t = time.perf_counter()
    ptr, idx = steps.edge_csr_of(held, n)
    steps.sync()
    tm["csr"] = time.perf_counter() - t
    rep, lev0, info = scc_reps(steps, ptr, idx, n, tm)
    t = time.perf_counter()
    if rep is None:  # acyclic: trimming gave the levels, the CSR is the condensed graph
        C, lab = n, None
        steps.check_renumber(C, int(idx.size))  # (renumber sorts the keys of every edge)
    else:
        heads = xp.flatnonzero(rep == xp.arange(n, dtype=xp.int32)).astype(xp.int32)
        C = int(heads.size)
        lab = xp.empty(n, dtype=xp.int32)
        lab[heads] = xp.arange(C, dtype=xp.int32)  # old labels ordered by smallest member
        lab = lab[rep]
        ptr, idx = steps.mapped_csr(ptr, idx, lab, C)
        lev0 = xp.full(C, -1, dtype=xp.int32)
        info["level_rounds"] = steps.peel(ptr, idx, xp.full(C, -1, dtype=xp.int32), steps.count(ptr, idx, xp.full(
            C, -1, dtype=xp.int32)), lev0)
    steps.sync()
    tm["levels"] = time.perf_counter() - t
    t = time.perf_counter()
    key = (lev0.astype(xp.uint64) << xp.uint64(32)) | xp.arange(C, dtype=xp.uint64)
    key.sort()
    order = (key & xp.uint64(0xFFFFFFFF)).astype(xp.int32)
    level = (key >> xp.uint64(32)).astype(xp.int32)
    del key
    new_of_old = xp.empty(C, dtype=xp.int32)
    new_of_old[order] = xp.arange(C, dtype=xp.int32)
    comp = new_of_old if lab is None else new_of_old[lab]
    n_levels = int(level[-1]) + 1
    level_ptr = xp.searchsorted(level, xp.arange(n_levels + 1, dtype=xp.int32)).astype(xp.int64)
    steps.sync()
    tm["renumber"] = time.perf_counter() - t
    t = time.perf_counter()
    csr = [ptr, idx]
    del ptr, idx  # renumber frees the old CSR once its keys are made
    indptr, indices, rindptr, rindices = steps.renumber(csr, new_of_old, C)
    steps.sync()
    tm["csr"] += time.perf_counter() - t
    dag = DAG(n=n, comp=comp, indptr=indptr, indices=indices, rindptr=rindptr, rindices=rindices, level=level,
              level_ptr=level_ptr, timings=tm)
    dag.meta["condense"] = info
    return dag


def condense_numpy(graph: EdgeGraph, limit: int = 2**31 - 1) -> DAG:
    """The NumPy twin of :func:`condense_cuda`: the same steps on the host; equals :func:`condense`.
    ``limit``: as :func:`condense_cuda`'s (a small one runs the steps of the wide path).

    >>> from distgrail.io.read import as_graph
    >>> d = condense_numpy(as_graph((np.array([0, 1, 2, 2]), np.array([1, 0, 3, 3]))))
    >>> d.C, d.m, d.comp.tolist(), d.level.tolist()
    (3, 1, [0, 0, 1, 2], [0, 0, 1])
    """
    from .scc import NumpySteps

    src = np.asarray(graph.src).astype(np.int32, copy=False)
    dst = np.asarray(graph.dst).astype(np.int32, copy=False)
    return _condense_steps(NumpySteps(limit), src, dst, int(graph.n))


def condense_bytes(n: int, m: int, limit: int = 2**31 - 1, sorted_input: bool = False) -> int:
    """Peak GPU memory of :func:`condense_cuda` beyond its input edges: a 64-bit key per edge and
    the sort's second key buffer (the row buckets past ``limit`` keys), the previous step's int32
    CSR column array held beside them (20 bytes per edge); past ``limit`` edges, the scan of the
    keep flags is int64, and keys, scan, new and old column arrays make 24 bytes per edge; about
    sixteen int32 / int64 arrays per vertex, plus 64 MiB for the sort's own scratch
    (:func:`distgrail.gpu.memory.gpu_bytes_needed` counts the same).

    Past ``limit`` edges also :data:`distgrail.gpu.memory.WIDE_EXTRA` (2 GiB: the row buckets'
    sort scratch, as CuPy's pool showed: docs/benchmarks.md).

    ``sorted_input``: the edges sorted and distinct (a ``.h5`` graph's CSR), so no key is sorted
    before the components are found: the column array less its self-loops (4 bytes per edge) and
    the reverse CSR's (4) are the most held beside the input; the condensed CSR's keys are made
    a piece of rows at a time and only those between components kept. :func:`condense_cuda`
    checks this much first, and each key sort (this function's count of its keys, less what is
    already held and counted here: the kept keys, or the input edges handed over, which go before
    the sort: :func:`condense_cuda_of`) once its count is known
    (:attr:`CudaSteps.sort_check <distgrail.stages.scc.CudaSteps.sort_check>`): the unsorted
    input's, the kept keys' after each piece, an acyclic input's renumber of every edge.

    >>> condense_bytes(0, 2**31 + 5) - condense_bytes(0, 2**31 + 5, limit=2**32) == 4 * (2**31 + 5) + 2**31
    True
    >>> condense_bytes(10, 1000, sorted_input=True) == 8 * 1000 + 64 * 11 + (64 << 20)
    True
    """
    from ..gpu.memory import WIDE_EXTRA, offset_dtype

    if sorted_input:
        return 8 * int(m) + 64 * (int(n) + 1) + (64 << 20)
    wide = offset_dtype(m, limit) == np.int64
    return (24 if wide else 20) * int(m) + 64 * (int(n) + 1) + (64 << 20) + (WIDE_EXTRA if wide else 0)


def condense_cuda(src, dst, n: int, be=None, limit: int = 2**31 - 1, narrow_rounds: int | None = None) -> DAG:
    """Condense the graph of device edges ``src[i] -> dst[i]`` (CuPy int32) on the GPU.

    Returns a :class:`DAG` of CuPy arrays with exactly the numbers and dtypes of
    :func:`condense` (sub-stage seconds in ``DAG.timings``). Any edge count: past ``limit``
    (2^31 - 1) edges the keep-flag scans are int64 and run in pieces, and the keys are sorted in
    row buckets of at most ``limit`` (CuPy's scan and sort index with 32 bits); GPU tests pass a
    small ``limit`` to run that path. Raises :class:`~distgrail.errors.BackendError` (callers
    fall back to the CPU path) when vertex ids need 64 bits
    (:func:`~distgrail.gpu.memory.condense_gpu_problem`) or the estimate :func:`condense_bytes`
    (of a sorted input first; an unsorted one's when the edges show it) does not fit the free
    GPU memory, or, with ``narrow_rounds``, the
    :class:`~distgrail.stages.scc.NarrowPeel` of a deep, narrow graph that the host condenses
    faster (:attr:`CudaSteps.narrow_rounds <distgrail.stages.scc.CudaSteps.narrow_rounds>`).
    The caller keeps its edges (:func:`condense_cuda_of` takes them).
    """
    return condense_cuda_of([src, dst], n, be, limit, narrow_rounds, kept=True)


def condense_cuda_of(held: list, n: int, be=None, limit: int = 2**31 - 1, narrow_rounds: int | None = None,
                     kept: bool = False) -> DAG:
    """:func:`condense_cuda` of the edges ``held`` (``[src, dst]``): the list is emptied once the
    checks pass and the condensation lets go of each array as soon as it is done with it, so a
    caller that keeps no other reference gets the input's memory back before the key sort (an
    unsorted graph's 8 bytes an edge) and the strong components' search; the key sort's memory
    check then counts them as held (:attr:`CudaSteps.handed <distgrail.stages.scc.CudaSteps.handed>`).
    ``kept``: the caller keeps its own references (nothing comes back). After an error the list
    is empty unless it came before that (the checks); the caller then has the edges no more."""
    from ..errors import BackendError
    from ..gpu.memory import condense_gpu_problem, ensure_fits, oom_guard
    from .scc import CudaSteps

    n = int(n)
    m = int(held[0].size)
    steps = CudaSteps(limit, narrow_rounds)
    steps.whole = n + m  # (what the host would condense instead of a narrow peel)
    steps.handed = not kept
    steps.sort_check = lambda n, m, held=0: ensure_fits(condense_bytes(n, m, limit) - held, "condensation")
    cp = steps.xp
    why = condense_gpu_problem(n, m)
    if why:
        raise BackendError(f"{why}; use --backend cpu")
    ensure_fits(condense_bytes(n, m, limit, sorted_input=True), "condensation")  # (unsorted: edge_csr_of)
    held[:] = [cp.asarray(a, dtype=cp.int32) for a in held]
    dev = None if be is None else getattr(be, "device", None)
    with cp.cuda.Device(dev if dev is not None else cp.cuda.Device().id):
        return oom_guard(_condense_held)(steps, held, n)


def dag_to_host(dag: DAG, be=None) -> DAG:
    """The DAG with NumPy arrays (device arrays downloaded; host arrays kept as they are)."""
    def host(a):
        if isinstance(a, np.ndarray):
            return a
        return be.to_host(a) if be is not None else a.get()

    out = DAG(n=dag.n, **{k: host(getattr(dag, k)) for k in _ARRAYS}, meta=dict(dag.meta), timings=dict(dag.timings))
    return out
