"""Strongly connected components by frontier sweeps: the steps of GPU condensation, each as a NumPy
twin (:class:`NumpySteps`) and a CUDA launcher (:class:`CudaSteps`, kernels/condense.cu), driven by
one shared control flow (:func:`scc_reps`) so the two compute the same numbers step by step.

Vertices carry ``rep``: -1 while undecided, else a vertex of their component. Sweeps:

- **peel** (trimming): repeatedly remove undecided vertices with no undecided in-neighbour (on
  the forward CSR; on the reverse CSR: no out-neighbour). Removed vertices are singleton
  components. On the whole graph this is Kahn's algorithm and gives longest-path levels; on a DAG
  it decides every vertex.
- **reach** (forward-backward): vertices reachable from a pivot through undecided vertices, one
  bit per direction; both bits = the pivot's component (the giant one, usually).
- **color** (max-id propagation) then **color_back**: every undecided vertex takes the largest id
  that reaches it; each root (colour = own id) claims the vertices of its colour that reach it.

The partition found does not depend on the order of work inside a sweep, so the twins agree with
the kernels exactly; rounds agree too, except colour propagation's (the GPU may go further in a
round). The sweep of a frontier that is small (length + edges <= ``SMALL_WORK``) runs many rounds
in one single-block launch; larger frontiers get a grid launch per round.

On the GPU a row goes to a warp, except *hub* rows (more than ``CudaSteps.hub_edges`` =
:data:`~distgrail.constants.HUB` entries): skipped and listed, then swept by teams of warps, a
team a row (a row of millions of entries held one warp's level peel too long: docs/benchmarks.md). Same numbers.
"""

from __future__ import annotations

import time

import numpy as np

from ..arrays import sorted_distinct
from ..constants import HUB
from ..errors import BackendError
from ..segments import gather_rows
from .csr_keys import SENTINEL, key_buckets, keys_csr_numpy, sort_keys_in_buckets
from . import deep

__all__ = ["PEEL", "REACH", "COLOR", "COLOR_BACK", "SMALL_WORK", "NumpySteps", "CudaSteps", "scc_reps",
           "keys_csr_numpy", "key_buckets", "sort_keys_in_buckets", "hub_capacity"]

PEEL, REACH, COLOR, COLOR_BACK = 0, 1, 2, 3
#: frontier length + its rows' entries up to which rounds run inside one block
SMALL_WORK = 1 << 15


def hub_capacity(m: int, n: int, hub_edges: int) -> int:
    """Entries of a hub list for a CSR of ``n`` rows and ``m`` entries: at most min(n, m /
    (hub_edges + 1)) rows have more than ``hub_edges`` entries; one more slot for the count."""
    return 1 + max(0, min(int(n), int(m) // (int(hub_edges) + 1)))


class _Steps:
    """Shared steps written once against ``xp`` (NumPy or CuPy); ``sweep`` is backend-specific."""

    xp = np

    def sync(self):
        pass

    def edge_csr_of(self, held: list, n, handed=None):
        """:meth:`edge_csr` of the edges ``held`` (``[src, dst]``, emptied here): a caller that
        keeps no other reference to them gets their memory back as soon as the steps are done
        with them (:class:`CudaSteps`: before the key sort; here, on the host, at the end;
        ``handed`` matters to :class:`CudaSteps`' memory check only)."""
        src, dst = held
        held.clear()
        return self.edge_csr(src, dst, n)

    def check_renumber(self, C, m):
        """Before renumbering an acyclic input's ``m`` edges: nothing to check on the host."""

    def peel(self, ptr, idx, rep, cnt, level=None):
        """Remove undecided vertices with cnt 0, repeatedly (cnt from :meth:`count`); returns rounds."""
        xp = self.xp
        front = xp.flatnonzero((rep < 0) & (cnt == 0)).astype(xp.int32)
        rep[front] = front
        if level is not None:
            level[front] = 0
        return self.sweep(PEEL, ptr, idx, front, rep, cnt=cnt, level=level)

    def reach(self, ptr, idx, rep, mark, pivot, bit):
        """Set ``bit`` in mark[v] for every undecided v that ``pivot`` reaches through undecided vertices."""
        xp = self.xp
        mark[pivot] |= bit
        return self.sweep(REACH, ptr, idx, xp.asarray([pivot], dtype=xp.int32), rep, mark=mark, bit=bit)

    def color(self, ptr, idx, rep, color, mark):
        """color[v] = largest undecided id reaching v (color starts as arange(n))."""
        xp = self.xp
        mark[...] = 0
        return self.sweep(COLOR, ptr, idx, xp.flatnonzero(rep < 0).astype(xp.int32), rep, color=color, mark=mark)

    def color_back(self, rptr, ridx, rep, color, roots):
        """Each root claims (rep = root) the undecided vertices of its colour that reach it."""
        rep[roots] = roots
        return self.sweep(COLOR_BACK, rptr, ridx, roots, rep, color=color)

    def pivot(self, ptr, rptr, rem):
        """The undecided vertex with the largest in-degree x out-degree (first = smallest id)."""
        xp = self.xp
        deg = (ptr[rem + 1] - ptr[rem]) * (rptr[rem + 1] - rptr[rem])
        return int(rem[int(xp.argmax(deg))])


class NumpySteps(_Steps):
    """The NumPy twins of the kernels; ``limit``: the most items one library sort or scan takes
    (past it, the wide path's steps: :func:`keys_csr_numpy`)."""

    xp = np

    def __init__(self, limit: int = 2**31 - 1):
        self.limit = int(limit)

    def edge_csr(self, src, dst, n):
        return keys_csr_numpy(src, dst, n, self.limit)

    def mapped_csr(self, ptr, idx, f, C, swap=False):
        """CSR of the edges (f[u], f[v]) (swapped: (f[v], f[u])) of CSR ``ptr, idx``, f[u] != f[v]."""
        rows = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
        a, b = f[rows], f[idx]
        return keys_csr_numpy(b, a, C, self.limit) if swap else keys_csr_numpy(a, b, C, self.limit)

    def renumber(self, csr, f, C):
        """Forward and reverse CSR of ``csr = [ptr, idx]`` (emptied) after renumbering by the bijection ``f``."""
        ptr, idx = csr
        csr.clear()
        return (*self.mapped_csr(ptr, idx, f, C), *self.mapped_csr(ptr, idx, f, C, swap=True))

    def count(self, ptr, idx, rep):
        rows = np.repeat(np.arange(ptr.size - 1, dtype=np.int64), np.diff(ptr))
        live = (rep[rows] < 0) & (rep[idx] < 0)
        return np.bincount(idx[live], minlength=rep.size).astype(np.int32)

    def transpose(self, ptr, idx, n):
        rows = np.repeat(np.arange(n, dtype=np.int32), np.diff(ptr))
        return keys_csr_numpy(idx, rows, n, self.limit)

    def min_member(self, rep, n):
        minm = np.full(n, n, dtype=np.int32)
        np.minimum.at(minm, rep, np.arange(n, dtype=np.int32))
        return minm

    def sweep(self, mode, ptr, idx, front, rep, cnt=None, color=None, mark=None, level=None, bit=0):
        rounds = 0
        while front.size:
            v, counts = gather_rows(ptr, idx, front)
            u = np.repeat(front, counts)
            live = rep[v] < 0
            if mode == PEEL:
                nxt, c = np.unique(v[live], return_counts=True)
                cnt[nxt] -= c.astype(np.int32)
                nxt = nxt[cnt[nxt] == 0]
                rep[nxt] = nxt
                if level is not None:
                    level[nxt] = rounds + 1
            elif mode == REACH:
                nxt = sorted_distinct(np, v[live & ((mark[v] & bit) == 0)])
                mark[nxt] |= bit
            elif mode == COLOR:
                v, u = v[live], u[live]
                old = color[v]
                np.maximum.at(color, v, color[u])
                nxt = sorted_distinct(np, v[color[v] > old])
            else:  # COLOR_BACK
                sel = live & (color[v] == color[u])
                nxt = sorted_distinct(np, v[sel])
                rep[nxt] = color[nxt]
            front = nxt.astype(np.int32)
            rounds += 1
        return rounds


class CudaSteps(_Steps):
    """The CUDA launchers (kernels/condense.cu); arrays are CuPy device arrays. ``limit``: the
    most items one CuPy sort, scan or search takes, and the largest edge count whose positions
    stay int32 (default 2^31 - 1; GPU tests force small ones to run the wide path)."""

    #: rows with more entries are swept by teams of warps (module doc); GPU tests set small ones
    hub_edges = HUB
    #: entries a piece of :meth:`mapped_csr`'s rows makes keys for (None: about a sixteenth of the
    #: CSR, :func:`~distgrail.gpu.memory.working_piece`); tests set small ones
    key_piece = None

    def __init__(self, limit: int = 2**31 - 1, narrow_rounds: int | None = None):
        from ..gpu.sweep import cupy

        self.xp = cupy()
        self.limit = int(limit)
        #: a peel is asked after this many rounds and each doubling whether it is a deep, narrow
        #: DAG the host condenses faster (:meth:`_hand_over`: :class:`NarrowPeel`; None: never;
        #: :func:`distgrail.stages.phases.condense_on` passes :data:`~distgrail.stages.deep.HOST_DEEP_LEVELS`)
        self.narrow_rounds = narrow_rounds
        #: vertices plus edges of the whole graph being condensed, which the host would condense
        #: instead (set by :func:`~distgrail.stages.condense.condense_cuda`; None: the swept CSR's):
        #: the levels' peel over the condensed CSR weighs the host's cost of the whole condensation
        self.whole = None
        #: ``sort_check(n, m, held=0)``, called before a key sort of ``m`` keys into ``n`` rows once
        #: ``m`` is known (``held``: bytes it counts already on the device: those keys made, or the
        #: input edges handed over, :attr:`handed`): :meth:`edge_csr`'s of
        #: unsorted edges, :meth:`mapped_csr`'s of the kept keys (after each piece, with the count
        #: so far), and :meth:`check_renumber`'s of an acyclic input's every edge
        #: (:func:`~distgrail.stages.condense.condense_cuda`: their memory checked, a sorted
        #: input's smaller estimate having been checked first); None: no check. Once an unsorted
        #: input's sort is checked, no later one is: that count of every edge covers theirs
        self.sort_check = None
        self._all_checked = False
        #: the edges given to :meth:`edge_csr_of` are the steps' alone (set by
        #: :func:`~distgrail.stages.condense.condense_cuda_of` for a caller that keeps none): they
        #: go before the input's key sort, so its check counts them as held (``held``), as
        #: :func:`~distgrail.gpu.memory.gpu_bytes_needed` with ``held_edges=False`` does
        self.handed = False

    def _hub_args(self, ptr, m):
        """``(hub, hubs, any)``: a row kernel's last two arguments for the CSR ``ptr`` of ``m``
        entries (hub list, count 0) and whether a row can be a hub (then ``*_hubs`` must run)."""
        cp = self.xp
        if m <= self.hub_edges:
            return np.int64(m), cp.zeros(1, dtype=cp.int64), False
        return np.int64(self.hub_edges), cp.zeros(hub_capacity(m, ptr.size - 1, self.hub_edges), dtype=cp.int64), True

    def _over_rows(self, rows, hubs_of, ptr, m, head, tail=()):
        """Kernel ``rows`` a warp a row over the rows of ``ptr`` (``m`` entries; arguments ``head``,
        n, ``tail``, hub, hubs), then kernel ``hubs_of`` over the hub rows it listed (``head``,
        ``tail``, hubs)."""
        n = ptr.size - 1
        hub, hubs, any_hub = self._hub_args(ptr, m)
        self._k(rows)(*self._grid(n * 32), (*head, np.int64(n), *tail, hub, hubs))
        if any_hub:
            self._k(hubs_of)(*self._grid(m), (*head, *tail, hubs))

    def _k(self, name):
        from ..gpu.sweep import kernel

        return kernel("condense", name)

    def _grid(self, threads):
        from ..gpu.sweep import GRID_THREADS, sm_count

        return (max(1, min(-(-int(threads) // GRID_THREADS), sm_count() * 32)),), (GRID_THREADS,)

    def sync(self):
        self.xp.cuda.get_current_stream().synchronize()

    def _sort(self, keys, n):
        """``keys`` sorted (in place up to ``limit`` keys; past it a new array, in row buckets)."""
        if keys.size <= self.limit:
            keys.sort()
            return keys
        from ..gpu.memory import scan_in_pieces

        cp, i64 = self.xp, np.int64

        def count(keys, n):
            cnt = cp.zeros(n + 2, dtype=cp.uint64)
            self._k("dg_cond_key_rows")(*self._grid(keys.size), (keys, i64(keys.size), i64(n), cnt))
            return scan_in_pieces(cp, cnt, cp.int64, self.limit)

        def scatter(keys, n, bounds, starts):
            out = cp.empty(keys.size, dtype=cp.uint64)
            cursor = cp.asarray(starts[:-1].astype(np.uint64))
            self._k("dg_cond_bucket")(*self._grid(keys.size), (keys, i64(keys.size), i64(n), cp.asarray(bounds),
                                                               np.int32(bounds.size - 1), cursor, out))
            return out

        return sort_keys_in_buckets(cp, keys, n, self.limit, count, scatter)

    def _sorted_keys_csr(self, keys, C, dedup):
        """CSR from keys sorted (dedup: drop repeats and sentinels); returns (ptr, idx, sorted keys)."""
        from ..gpu.memory import offset_dtype, scan_in_pieces

        cp, i64 = self.xp, np.int64
        m = keys.size
        ptr = cp.empty(C + 1, dtype=cp.int64)
        if m == 0:
            ptr.fill(0)
            return ptr, cp.empty(0, dtype=cp.int32), keys
        keys = self._sort(keys, C)
        wide = offset_dtype(m, self.limit) == np.int64
        if dedup:
            keep = cp.empty(m, dtype=cp.uint8)
            self._k("dg_cond_keep")(*self._grid(m), (keys, i64(m), keep))
            pos = scan_in_pieces(cp, keep, cp.int64 if wide else cp.int32, self.limit)
            del keep
            out = cp.empty(int(pos[-1]), dtype=cp.int32)
        else:
            pos = cp.zeros(1, dtype=cp.int64 if wide else cp.int32)
            out = cp.empty(m, dtype=cp.int32)
        has = np.int32(1 if dedup else 0)
        tail = "64" if wide else ""
        self._k("dg_cond_compact" + tail)(*self._grid(m), (keys, pos, has, i64(m), out))
        self._k("dg_cond_row_ptr" + tail)(*self._grid(C + 1), (keys, pos, has, i64(m), i64(C), ptr))
        return ptr, out, keys

    def edge_csr(self, src, dst, n):
        return self.edge_csr_of([src, dst], n, handed=False)

    def edge_csr_of(self, held, n, handed=None):
        """The CSR of the edges ``held`` (``[src, dst]``, emptied here: each is let go of as soon
        as the CSR or its keys no longer need it, so a caller that keeps no other reference gets
        the parsed edges' memory back before the key sort and the strong components' search).
        Sorted and distinct, the edge list is the CSR less its self-loops; else the keys sorted
        (their memory checked first: :attr:`sort_check`, the edges counted as held when they are
        the steps' alone: ``handed``, default :attr:`handed`)."""
        cp, i64 = self.xp, np.int64
        handed = self.handed if handed is None else handed
        src, dst = held
        held.clear()
        m = int(src.size)
        flags = cp.zeros(1, dtype=cp.int32)
        if m:
            self._k("dg_cond_check")(*self._grid(m), (src, dst, i64(m), flags))
        found = int(flags.get()[0])  # bit 1: unsorted or repeated; bit 2: a self-loop
        if found & 1 == 0:  # sorted and distinct: the edge list is the CSR (less its self-loops)
            if m <= self.limit:
                ptr = cp.searchsorted(src, cp.arange(n + 1, dtype=cp.int32)).astype(cp.int64)
            else:
                ptr = cp.empty(n + 1, dtype=cp.int64)
                self._k("dg_cond_src_ptr")(*self._grid(n + 1), (src, i64(m), i64(n), ptr))
            if found == 0:
                return ptr, dst
            pair = [src, dst]
            del src, dst
            return self._without_self_loops(ptr, pair, n)
        self._check(n, m, held=int(src.nbytes) + int(dst.nbytes) if handed else 0)  # (handed: back before the sort)
        self._all_checked = True
        keys = cp.empty(m, dtype=cp.uint64)
        self._k("dg_cond_pack")(*self._grid(m), (src, dst, keys, i64(m)))
        del src, dst  # (the caller's were handed over: their memory is back for the sort)
        return self._sorted_keys_csr(keys, n, True)[:2]

    def _check(self, n, m, held=0):
        if self.sort_check is not None and not self._all_checked:
            self.sort_check(n, m, held=held)

    def check_renumber(self, C, m):
        """The memory of :meth:`renumber`'s key sorts of ``m`` edges, checked before an acyclic
        input's (every edge: nothing sorted, so nothing checked, before it); a cyclic input's
        were checked with the kept keys in :meth:`mapped_csr`."""
        self._check(C, m)

    def _without_self_loops(self, ptr, pair, n):
        """The CSR ``ptr, dst`` (sorted, distinct: at most one self-loop a row; ``pair`` is
        ``[src, dst]``, emptied here) less its self-loops: the other targets selected in order,
        and each row pointer less the self-loops of the rows before it; ``src`` is let go of once
        the rows with a self-loop are known. A ``.h5`` graph is such a CSR (R-MAT's keeps its
        self-loops); the key sort it took before held a 64-bit key an edge and the sort's second
        buffer beside the edges."""
        from ..gpu.memory import scan_in_pieces, select_in_pieces

        cp = self.xp
        src, dst = pair
        pair.clear()
        keep = src != dst
        loops = select_in_pieces(cp, src, ~keep, self.limit)  # (the rows with a self-loop, once each)
        del src
        cut = cp.zeros(n + 1, dtype=cp.uint8)
        cut[loops.astype(cp.int64) + 1] = 1
        ptr -= scan_in_pieces(cp, cut, cp.int64, self.limit)
        return ptr, select_in_pieces(cp, dst, keep, self.limit)

    def _csr_keys(self, ptr, idx, f, swap, row0: int = 0, base: int = 0):
        """The keys of the CSR rows ``ptr`` (a view from row ``row0``, offsets of the whole CSR;
        entries from ``base``): one a row entry, the sentinel inside one component of ``f``."""
        m = int(ptr[-1]) - int(base) if ptr.size > 1 else 0
        keys = self.xp.empty(m, dtype=self.xp.uint64)
        self._over_rows("dg_cond_csr_keys", "dg_cond_csr_keys_hubs", ptr, m, (ptr, idx, f, keys),
                        (np.int32(swap), np.int64(row0), np.int64(base)))
        return keys

    def row_pieces(self, ptr, m: int) -> list:
        """``(row0, row1)`` spans of the CSR ``ptr`` of ``m`` entries, each of about
        :attr:`key_piece` entries (a row of more alone): cut at the rows whose first entry comes
        first at or past each multiple."""
        from ..gpu.memory import working_piece

        n = int(ptr.size) - 1
        step = int(self.key_piece or 0) or working_piece(m, self.limit)
        if m <= step:
            return [(0, n)]
        at = self.xp.searchsorted(ptr, self.xp.arange(step, m, step, dtype=self.xp.int64))
        cuts = sorted({0, n, *(int(r) for r in at.tolist())})
        return list(zip(cuts[:-1], cuts[1:]))

    def mapped_csr(self, ptr, idx, f, C, swap=False):
        """The condensed CSR from the keys of the edges between components only: the rows a piece
        at a time (:meth:`row_pieces`), each piece's keys made (an edge inside one component is the
        sentinel) and the sentinels dropped, then only the kept keys sorted. A web or social
        graph's giant component holds most edges (R-MAT: about 2 % of them join two components);
        a key for every edge at once held 8 bytes an edge beside the CSR (the build's peak). The
        kept keys' sort (with :meth:`renumber`'s after it) is checked after each piece with the
        count so far (:attr:`sort_check`, the kept keys held): a nearly acyclic graph keeps
        nearly every edge, more than a sorted input's up-front estimate holds."""
        from ..gpu.memory import drop_in_pieces

        cp, kept, count = self.xp, [], 0
        for r0, r1 in self.row_pieces(ptr, int(idx.size)):
            keys = self._csr_keys(ptr[r0:r1 + 1], idx, f, swap, r0, int(ptr[r0]))
            between = drop_in_pieces(cp, keys, cp.uint64(SENTINEL), self.limit) if keys.size else keys
            del keys
            if between.size:
                kept.append(between)
                count += int(between.size)
                self._check(C, count, held=8 * count)
            del between
        keys = kept[0] if len(kept) == 1 else (cp.concatenate(kept) if kept else cp.empty(0, dtype=cp.uint64))
        del kept
        return self._sorted_keys_csr(keys, C, True)[:2]

    def renumber(self, csr, f, C):
        """Forward CSR by one key sort; the reverse by swapping the halves of the same sorted keys
        in place and sorting again (no second key buffer). ``csr = [ptr, idx]`` is emptied, so the
        old CSR is freed as soon as its keys are made."""
        keys = self._csr_keys(*csr, f, False)
        csr.clear()
        fptr, fidx, keys = self._sorted_keys_csr(keys, C, False)
        if keys.size:
            self._k("dg_cond_swap")(*self._grid(keys.size), (keys, np.int64(keys.size)))
        rptr, ridx, keys = self._sorted_keys_csr(keys, C, False)
        return fptr, fidx, rptr, ridx

    def count(self, ptr, idx, rep):
        n = rep.size
        cnt = self.xp.zeros(n, dtype=self.xp.int32)
        self._over_rows("dg_cond_count", "dg_cond_count_hubs", ptr, idx.size, (ptr, idx, rep, cnt))
        return cnt

    def transpose(self, ptr, idx, n):
        """Reverse CSR with rows in no particular order (the searches do not need it). In-degrees
        by the count kernel (every vertex undecided), not CuPy's ``bincount``, which held thousands
        of bytes a vertex of its own beside them (more than the rest of the condensation on a
        graph of a million vertices: docs/benchmarks.md) and takes at most 2^31 - 1 items."""
        cp = self.xp
        rptr = cp.zeros(n + 1, dtype=cp.int64)
        cp.cumsum(self.count(ptr, idx, cp.full(n, -1, dtype=cp.int32)), out=rptr[1:])
        cursor = rptr[:-1].copy()
        ridx = cp.empty(idx.size, dtype=cp.int32)
        self._over_rows("dg_cond_transpose", "dg_cond_transpose_hubs", ptr, idx.size, (ptr, idx, cursor, ridx))
        return rptr, ridx

    def min_member(self, rep, n):
        minm = self.xp.full(n, n, dtype=self.xp.int32)
        self._k("dg_cond_min_member")(*self._grid(n), (rep, minm, np.int64(n)))
        return minm

    def sweep(self, mode, ptr, idx, front, rep, cnt=None, color=None, mark=None, level=None, bit=0):
        cp, i32, i64 = self.xp, np.int32, np.int64
        nf = int(front.size)
        if nf == 0:
            return 0
        n = ptr.size - 1
        fa, fb = cp.empty(n, dtype=cp.int32), cp.empty(n, dtype=cp.int32)
        fa[:nf] = front
        dummy = cp.zeros(1, dtype=cp.int32)
        args = (i32(mode), ptr, idx, rep, dummy if cnt is None else cnt, dummy if color is None else color,
                dummy if mark is None else mark, dummy if level is None else level, i32(level is not None), i32(bit))
        work = int((ptr[front + 1] - ptr[front]).sum())
        state = cp.zeros(5, dtype=cp.int64)
        status = cp.zeros(2, dtype=cp.uint64)
        small, big, hubs_k = self._k("dg_cond_sweep_small"), self._k("dg_cond_sweep"), self._k("dg_cond_sweep_hubs")
        hub, hubs, _ = self._hub_args(ptr, int(idx.size))
        rnd = cur = rounds = 0
        check = self.narrow_rounds if mode == PEEL else None
        # (decided, rounds) at the last check: the width is that of the rounds since; from the start
        # the first frontier (sources, isolated vertices: decided by peel) is not counted, and the
        # first check judges too (a chain of narrow_rounds to twice that was never handed over)
        since = [int(self.xp.count_nonzero(rep >= 0)), 0] if check is not None else []
        while nf:
            if check is not None and rounds >= check:
                check = self._hand_over(rep, rounds, self.whole or n + int(idx.size), since)
            if nf + work <= SMALL_WORK:
                cap = 0 if check is None else max(1, check - rounds)
                state.set(np.array([nf, rnd, work, cur, cap], dtype=np.int64))
                small((1,), (1024,), (*args, fa, fb, state, i64(SMALL_WORK)))
                nf, rnd, work, cur, done = (int(x) for x in state.get())
                rounds += done
            else:
                fin, fout = (fb, fa) if cur else (fa, fb)
                status.fill(0)
                some_hub = work > self.hub_edges  # (no row of a frontier has more entries than all of them)
                if some_hub:
                    hubs[:1].fill(0)
                big(*self._grid(nf * 32), (*args, fin, i64(nf), fout, status, i32(rnd), hub, hubs))
                if some_hub:
                    hubs_k(*self._grid(work), (*args, hubs, fout, status, i32(rnd)))
                nf, work = (int(x) for x in status.get())
                rnd, cur, rounds = rnd + 1, cur ^ 1, rounds + 1
        return rounds

    def _hand_over(self, rep, rounds: int, size: int, since: list):
        """The round to ask again at (twice ``rounds``), or None (never again: the host's compiled
        sweeps do not load, and its twins would be slower still); raises :class:`NarrowPeel` where
        the rounds since the last check (``since``: ``[decided, rounds]`` then, updated here; the
        sweep starts it at its first frontier, decided before its first round; empty: this check
        only records) decided fewer than
        :data:`~distgrail.stages.deep.HOST_LEVEL_WIDTH` vertices a round and the peel's ``rounds``
        rounds cost more than the host's whole condensation of a graph of ``size`` vertices plus
        edges would (:data:`~distgrail.stages.deep.HOST_TRIM_RATIO`). The width is that of the
        latest rounds, not of all: a graph's sources and isolated vertices, decided in the first
        round, do not make a long chain after them look wide, and a peel that narrows is seen."""
        decided = int(self.xp.count_nonzero(rep >= 0))
        then = tuple(since) or None
        since[:] = [decided, rounds]
        if then is None or decided - then[0] >= deep.HOST_LEVEL_WIDTH * (rounds - then[1]):
            return 2 * rounds
        if deep.HOST_TRIM_RATIO * rounds >= size:
            if not deep.host_sweeps_compiled():  # (the host would level it a Python iteration a level)
                return None
            raise NarrowPeel(rounds, decided - then[0], rounds - then[1])
        return 2 * rounds


class NarrowPeel(BackendError):
    """A GPU peel that ran :attr:`rounds` rounds, the last :attr:`latest` of them deciding
    :attr:`decided` vertices, fewer than :data:`~distgrail.stages.deep.HOST_LEVEL_WIDTH` a round:
    a deep, narrow DAG, which the CPU path condenses faster (the caller's fallback; the same DAG)."""

    def __init__(self, rounds: int, decided: int, latest: int | None = None):
        latest = rounds if latest is None else latest
        super().__init__(f"a deep, narrow graph: after {rounds:,} rounds of trimming on the GPU, the last {latest:,} "
                         f"decided {decided:,} vertices, fewer than {deep.HOST_LEVEL_WIDTH} a round; the CPU's "
                         "search condenses it faster")
        self.rounds, self.decided, self.latest = rounds, decided, latest


def scc_reps(steps, ptr, idx, n, timings=None):
    """SCCs of the graph in CSR ``ptr, idx`` (no self-loops needed, none harmful).

    Returns ``(rep, level, info)``: ``rep[v]`` the smallest vertex of v's component, or None when
    the graph is acyclic, and then ``level`` holds every vertex's longest-path level (else -1 for
    vertices that trimming from the sources did not reach). ``info`` counts rounds and iterations.
    """
    xp = steps.xp
    t = time.perf_counter()
    rep = xp.full(n, -1, dtype=xp.int32)
    level = xp.full(n, -1, dtype=xp.int32)
    info = {"trim_rounds": steps.peel(ptr, idx, rep, steps.count(ptr, idx, rep), level), "scc_iterations": 0}
    steps.sync()
    if timings is not None:
        timings["trim"] = time.perf_counter() - t
    t = time.perf_counter()
    if not bool((rep < 0).any()):
        if timings is not None:
            timings["scc"] = 0.0
        return None, level, info
    rptr, ridx = steps.transpose(ptr, idx, n)
    while True:
        steps.peel(rptr, ridx, rep, steps.count(rptr, ridx, rep))
        steps.peel(ptr, idx, rep, steps.count(ptr, idx, rep))
        rem = xp.flatnonzero(rep < 0).astype(xp.int32)
        if rem.size == 0:
            break
        mark = xp.zeros(n, dtype=xp.int32)
        if info["scc_iterations"] == 0:  # forward-backward from a pivot: the giant component
            pivot = steps.pivot(ptr, rptr, rem)
            steps.reach(ptr, idx, rep, mark, pivot, 1)
            steps.reach(rptr, ridx, rep, mark, pivot, 2)
            rep[xp.flatnonzero(mark == 3)] = pivot
            info["pivot"] = pivot
        else:  # colouring: every root of a colour claims its component
            color = xp.arange(n, dtype=xp.int32)
            steps.color(ptr, idx, rep, color, mark)
            roots = rem[color[rem] == rem]
            steps.color_back(rptr, ridx, rep, color, roots)
        info["scc_iterations"] += 1
    del rptr, ridx
    minm = steps.min_member(rep, n)
    rep = minm[rep]
    steps.sync()
    if timings is not None:
        timings["scc"] = time.perf_counter() - t
    return rep, level, info
