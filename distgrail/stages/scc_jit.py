"""The CPU backend's strongly connected components as compiled loops (numba): Pearce's
single-pass variant of Tarjan's depth-first search, with an explicit call stack.

SciPy's ``connected_components(connection="strong")`` runs the same algorithm, but takes a
``csr_matrix``: the edge arrays are copied into it, its values cast to float64 (8 bytes an edge),
and each edge's visit reads two arrays. Here the search runs on the edge arrays themselves, and
one array, ``rindex``, holds both a vertex's depth-first index while it is open and its
component's number once it is closed (Pearce: closed numbers count down from ``n``, above every
open index), so an edge's visit is one random read; the edges between components are recorded
as the search meets them, so the edges are not read again (docs/benchmarks.md, session 43).

The partition is the same as SciPy's (a graph's components do not depend on the search); the
numbering is the order in which components close, sinks first, which
:func:`distgrail.stages.condense.condense` replaces by its canonical (level, smallest vertex)
order. Imported only for graphs of at least :data:`~distgrail.stages.condense.COMPILED_SCC_EDGES`
edges (numba's import and cache load are paid by large graphs only); where numba does not
import, SciPy's search runs (same components).
"""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["ids_within", "rows_of", "strong_components", "closing_levels", "canonical_order",
           "renumbered_transpose"]


@njit(nogil=True)
def ids_within(src, dst, n):
    """Whether every edge's ends lie in 0 .. n-1 (the search reads its arrays unchecked)."""
    for e in range(src.shape[0]):
        if src[e] < 0 or src[e] >= n or dst[e] < 0 or dst[e] >= n:
            return False
    return True


@njit(nogil=True)
def rows_of(src, dst, n, indptr):
    """Fill ``indptr`` (n + 1, int64) with the row starts of the edges grouped by ``src``; returns
    the column array: ``dst`` itself when ``src`` is already grouped (non-decreasing), else a new
    array, each row's entries in input order.

    Ungrouped edges are counted and moved block by block: first into at most 1,024 blocks of
    consecutive rows (few counters, few write streams), then within each block into its rows (a
    block's counters and entries stay in cache), where counting and moving over all rows at once
    would miss the cache at nearly every edge."""
    m = src.shape[0]
    shift = 0
    while n > 0 and ((n - 1) >> shift) >= 1024:
        shift += 1
    blocks = ((n - 1) >> shift) + 1 if n > 0 else 0
    start = np.zeros(blocks + 1, dtype=np.int64)
    grouped = True
    prev = 0
    for e in range(m):
        s = src[e]
        start[(s >> shift) + 1] += 1
        if s < prev:
            grouped = False
        prev = s
    for b in range(blocks):
        start[b + 1] += start[b]
    for i in range(n + 1):
        indptr[i] = 0
    if grouped:  # rows in order: one sequential count
        for e in range(m):
            indptr[src[e] + 1] += 1
        for i in range(n):
            indptr[i + 1] += indptr[i]
        return dst
    out = np.empty(m, dtype=dst.dtype)
    rows = np.empty(m, dtype=src.dtype)
    fill = start[:blocks].copy()
    for e in range(m):  # into blocks, input order kept in each
        s = src[e]
        b = s >> shift
        j = fill[b]
        out[j] = dst[e]
        rows[j] = s
        fill[b] = j + 1
    widest = 0
    for b in range(blocks):
        widest = max(widest, start[b + 1] - start[b])
    held = np.empty(widest, dtype=dst.dtype)
    for b in range(blocks):  # each block: count its rows, then its entries into them
        a = start[b]
        z = start[b + 1]
        r0 = b << shift
        r1 = min((b + 1) << shift, n)
        for i in range(a, z):
            indptr[rows[i] + 1] += 1
        indptr[r0] = a
        for r in range(r0, r1):
            indptr[r + 1] += indptr[r]
        held[:z - a] = out[a:z]
        for i in range(a, z):  # indptr[r] moves to the row's end, then back to its start
            r = rows[i]
            out[indptr[r]] = held[i - a]
            indptr[r] += 1
        for r in range(r1 - 1, r0, -1):
            indptr[r] = indptr[r - 1]
        indptr[r0] = a
    indptr[n] = m
    return out


@njit(nogil=True)
def strong_components(indptr, indices, rindex, scratch, calls, edges, is_root, cu, cv):
    """Pearce's search over the CSR (``indptr``, ``indices``) of ``n = rindex.size`` vertices.

    ``rindex`` (zeros, a signed type holding ``n``) ends as each vertex's component number,
    0 .. ncomp-1 in closing order (a component closes after every component it reaches, so sinks
    come first and every edge between components goes from a larger number to a smaller one).
    ``scratch``, ``calls`` (the type of ``rindex``), ``edges`` (int64) and ``is_root`` (bool),
    each of ``n`` entries, are work space.

    Returns ``(ncomp, k)``: ``k`` edges join two components; the first ``min(k, cu.size)`` of
    them are written to ``cu``, ``cv`` (the type of ``rindex``) as component pairs, duplicates
    kept, in search order. An edge ``v -> w`` joins two components exactly when ``w`` is
    closed once the edge is done (at its visit, or when the search comes back from ``w``): a
    ``w`` still open is on the search's stack, so it reaches ``v`` and ``v`` reaches it."""
    n = rindex.shape[0]
    cap = cu.shape[0]
    k = 0
    sp = 0  # entries on the open-vertex stack (``scratch``)
    nxt = 1  # next depth-first index; indices of closed vertices are given back
    c = n  # next closed component's value; values in use lie above every open index
    for s in range(n):
        if rindex[s] != 0:
            continue
        top = 0
        calls[0] = s
        edges[0] = indptr[s]
        is_root[0] = True
        rindex[s] = nxt
        nxt += 1
        while top >= 0:
            v = calls[top]
            e = edges[top]
            end = indptr[v + 1]
            rv = rindex[v]
            descended = False
            while e < end:
                w = indices[e]
                e += 1
                rw = rindex[w]
                if rw == 0:  # unvisited: descend into w, come back to v's next edge
                    edges[top] = e
                    rindex[v] = rv
                    top += 1
                    calls[top] = w
                    edges[top] = indptr[w]
                    is_root[top] = True
                    rindex[w] = nxt
                    nxt += 1
                    descended = True
                    break
                if rw > c:  # closed: another component
                    if k < cap:
                        cu[k] = v
                        cv[k] = rw
                    k += 1
                elif rw < rv:  # open and older: v is not a root
                    rv = rw
                    is_root[top] = False
            if descended:
                continue
            rindex[v] = rv
            if is_root[top]:  # v closes its component: itself and the stack's entries above it
                nxt -= 1
                while sp > 0 and rindex[scratch[sp - 1]] >= rv:
                    sp -= 1
                    rindex[scratch[sp]] = c
                    nxt -= 1
                rindex[v] = c
                c -= 1
            else:
                scratch[sp] = v
                sp += 1
            top -= 1
            if top >= 0:
                u = calls[top]
                rv = rindex[v]
                if rv > c:  # the edge u -> v ends in a closed component
                    if k < cap:
                        cu[k] = u
                        cv[k] = rv
                    k += 1
                elif rv < rindex[u]:
                    rindex[u] = rv
                    is_root[top] = False
    for v in range(n):
        rindex[v] = n - rindex[v]
    for i in range(min(k, cap)):
        cu[i] = rindex[cu[i]]
        cv[i] = n - cv[i]
    return n - c, k


@njit(nogil=True)
def closing_levels(indptr, indices):
    """Longest-path level from a source of every component of the condensed CSR whose rows are
    the components in closing order (every edge goes from a larger number to a smaller one):
    the rows taken from the last down, each pushing its level + 1 to its children, so a row is
    final before it pushes. Kahn's levels (:func:`distgrail.stages.condense._kahn_levels`) in
    one pass."""
    C = indptr.shape[0] - 1
    level = np.zeros(C, dtype=np.int64)
    for u in range(C - 1, -1, -1):
        up = level[u] + 1
        for e in range(indptr[u], indptr[u + 1]):
            c = indices[e]
            if level[c] < up:
                level[c] = up
    return level


@njit(nogil=True)
def canonical_order(labels, level, ncomp):
    """The components (``labels``' numbers) by (level, smallest vertex): in the order their first
    vertex comes, then stably by level (a counting sort): ``np.lexsort((first, level))``."""
    seen = np.zeros(ncomp, dtype=np.bool_)
    by_first = np.empty(ncomp, dtype=np.int64)
    k = 0
    for v in range(labels.shape[0]):
        lab = labels[v]
        if not seen[lab]:
            seen[lab] = True
            by_first[k] = lab
            k += 1
    top = 0
    for c in range(ncomp):
        top = max(top, level[c])
    start = np.zeros(top + 2, dtype=np.int64)
    for c in range(ncomp):
        start[level[c] + 1] += 1
    for lev in range(top + 1):
        start[lev + 1] += start[lev]
    order = np.empty(ncomp, dtype=np.int64)
    for i in range(ncomp):
        c = by_first[i]
        order[start[level[c]]] = c
        start[level[c]] += 1
    return order


@njit(nogil=True)
def renumbered_transpose(ptr, ind, order, new_of_old, tptr, tind):
    """The transpose of the CSR (``ptr``, ``ind``) once its rows and entries are renumbered
    (new id ``i`` = old ``order[i]``; ``new_of_old`` the inverse), into ``tptr`` (C + 1, int64)
    and ``tind``: a counting sort that visits the new rows in order, so each transposed row
    comes out sorted. :func:`distgrail.stages.condense._renumber`'s permute and transpose in
    two passes."""
    C = order.shape[0]
    for j in range(C + 1):
        tptr[j] = 0
    for e in range(ind.shape[0]):
        tptr[new_of_old[ind[e]] + 1] += 1
    for j in range(C):
        tptr[j + 1] += tptr[j]
    fill = tptr[:C].copy()
    for i in range(C):
        r = order[i]
        for e in range(ptr[r], ptr[r + 1]):
            j = new_of_old[ind[e]]
            tind[fill[j]] = i
            fill[j] += 1
