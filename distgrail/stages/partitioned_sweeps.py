"""The passes of the partitioned condensation (:mod:`distgrail.stages.partitioned_scc`) over one
rank's edge list ``s[i] -> d[i]``: the array code (:class:`ArraySweeps`, NumPy or CuPy array
operations: the twin) and the fused CUDA kernels of ``kernels/partitioned_sweeps.cu``
(:class:`CudaSweeps`, the launcher), which compute the same arrays, bit for bit.

- :meth:`~ArraySweeps.filter`: the edges that pass a predicate (:data:`NO_LOOP`: no self-loop;
  :data:`ALIVE`: both ends alive; :data:`SAME`: both ends of one colour), in their order; the
  input arrays themselves when every edge passes.
- :meth:`~ArraySweeps.presence`: the 2n-bit bitmap, packed as ``numpy.packbits`` packs it, of
  "v has an edge in" (bit v) and "u has an edge out" (bit n + u).
- :meth:`~ArraySweeps.colour`: ``nxt[d] = max(nxt[d], color[s])`` over the edges whose source is
  in the frontier ``fresh``.
- :meth:`~ArraySweeps.back`: ``nxt[s] = True`` over the edges whose head is in ``fresh``.
- :meth:`~ArraySweeps.rows`: the peel's CSR by source of a rank's raw edges (self-loops left
  out, duplicates kept), built by counting instead of sorting: a row-size pass, a scan, a fill
  pass, the heads of a row in the kernels' atomics' order (the twin: the edges' order).
- :meth:`~ArraySweeps.expand` and :meth:`~ArraySweeps.settle`: a level of the peel from the
  sources (:func:`~distgrail.stages.partitioned_dag.kahn_levels`, over this rank's edges as a
  CSR by source): the heads of the edges out of the frontier; then, once every rank's heads are
  exchanged, one in-degree off per head and the vertices at 0 the next frontier, their level
  set. The kernels append in their atomics' order, the twin in sorted order: the same sets.

Why kernels: with CuPy's array operations each pass is several launches over the edges with
temporaries of their size (a gather per end, a mask, a scan and a gather per array kept; what
that cost: docs/benchmarks.md).
The kernels read each edge once; the filter counts each tile of ``PSW_THREADS * PSW_ROUNDS`` edges,
then writes the tile's passing edges in order at the exclusive sum of the counts (one int32 per
tile, not one per edge). The flags looked up at random (alive, fresh) go to the kernels packed
(``packbits``: n/8 bytes, which stay in the GPU's L2 cache).
"""

from __future__ import annotations

import numpy as np

from ..arrays import csr_positions, scatter_at, scatter_max, to_host, unique
from ..constants import PSW_ALIVE, PSW_NO_LOOP, PSW_ROUNDS, PSW_SAME, PSW_THREADS
from ..gpu.sweep import kernel

__all__ = ["NO_LOOP", "ALIVE", "SAME", "ArraySweeps", "CudaSweeps", "sweeps_for", "plan_tiles", "grid_blocks",
           "block_bytes"]

NO_LOOP, ALIVE, SAME = PSW_NO_LOOP, PSW_ALIVE, PSW_SAME
#: edges of one tile of the filter
TILE = PSW_THREADS * PSW_ROUNDS


def plan_tiles(m: int, sms: int) -> tuple:
    """``(tiles, blocks)`` of the filter over ``m`` edges: one block a tile, grid-stride, at most
    8 blocks per SM.

    >>> plan_tiles(0, 132), plan_tiles(1, 132), plan_tiles(10 * TILE + 1, 132), plan_tiles(2**31, 132)
    ((0, 0), (1, 1), (11, 11), (524288, 1056))
    """
    tiles = -(-int(m) // TILE)
    return tiles, min(tiles, 8 * int(sms))


def grid_blocks(m: int, sms: int) -> int:
    """Blocks of ``PSW_THREADS`` for a grid-stride pass over ``m`` edges (at most 32 per SM).

    >>> grid_blocks(1, 132), grid_blocks(2**31, 132)
    (1, 4224)
    """
    return max(1, min(-(-int(m) // PSW_THREADS), 32 * int(sms)))


class ArraySweeps:
    """The twin: the passes as array operations of ``xp`` (NumPy, or CuPy)."""

    def __init__(self, xp):
        self.xp = xp

    def filter(self, mode, s, d, alive=None, color=None):
        if mode == NO_LOOP:
            keep = s != d
        elif mode == ALIVE:
            keep = alive[s] & alive[d]
        else:
            keep = color[s] == color[d]
        if bool(keep.all()):
            return s, d
        return s[keep], d[keep]

    def presence(self, s, d, n: int):
        xp = self.xp
        has = xp.zeros(2 * int(n), dtype=xp.bool_)
        has[d] = True
        has[int(n):][s] = True  # a view: n + s would wrap in int32 from n = 2^30
        return xp.packbits(has)

    def colour(self, s, d, fresh, color, nxt) -> None:
        sel = fresh[s]
        scatter_max(self.xp, nxt, d[sel], color[s[sel]])

    def back(self, bs, bd, fresh, nxt) -> None:
        nxt[bs[fresh[bd]]] = True

    def rows(self, s, d, n: int):
        """``(ptr, head)``: the CSR by source of the edges ``s -> d`` but self-loops (duplicates
        kept), ``ptr`` int64 of ``n + 1``, ``head`` of ``d``'s dtype; the twin keeps each row's
        heads in the edges' order (the kernels in the atomics' order: the peel reads rows as sets)."""
        xp = self.xp
        keep = s != d
        if not bool(keep.all()):
            s, d = s[keep], d[keep]
        head = d[xp.argsort(s, kind="stable")]
        ptr = xp.zeros(int(n) + 1, dtype=xp.int64)
        if s.size:
            xp.cumsum(xp.bincount(s, minlength=int(n)), out=ptr[1:])
        return ptr, head

    def expand(self, ptr, head, front):
        """The heads of the edges (CSR ``ptr`` (int64) / ``head``) out of the vertices ``front``."""
        return head[csr_positions(self.xp, ptr, front)]

    def settle(self, got, indeg, level, lev: int):
        """One off ``indeg`` (int64) for each id of ``got``; the ids at 0 now take level ``lev``
        in ``level`` (int32) and are returned (the next frontier, ``got``'s dtype)."""
        xp = self.xp
        scatter_at(xp, "add", indeg, got, xp.full(got.size, -1, dtype=xp.int64))
        cand = unique(xp, got)
        front = cand[indeg[cand] == 0]
        level[front] = lev
        return front

    # the peel's level in one exchange (csr_levels): a frontier as the passes hold it, this rank's
    # heads in a block of fixed size, every rank's blocks settled from the gathered bytes

    def front(self, ids):
        """The frontier ``ids`` as :meth:`expand_block` takes it (the twin: the array itself)."""
        return ids

    def front_ids(self, front):
        """The frontier's ids as an array (the kernels' frontier: a host wait for its size)."""
        return front

    def expand_block(self, ptr, head, front, cap: int):
        """This rank's block of one peel level: 8 bytes of the count of heads out of ``front``
        (uint64), then ``cap`` slots of ``head``'s dtype, the first ``min(count, cap)`` of them
        those heads (:meth:`expand`); uint8, :func:`block_bytes` long."""
        xp = self.xp
        t = self.expand(ptr, head, front)
        block = xp.zeros(block_bytes(cap, head.dtype.itemsize), dtype=xp.uint8)
        block[:8] = xp.asarray(np.array([t.size], dtype=np.uint64).view(np.uint8))
        k = min(int(t.size), int(cap))
        block[8:8 + k * head.dtype.itemsize] = t[:k].view(xp.uint8)
        return block

    def block_counts(self, got, size: int) -> list:
        """The counts in the headers of the ``size`` blocks gathered end to end in ``got``."""
        head = self.xp.ascontiguousarray(got.reshape(int(size), -1)[:, :8])
        return [int(c) for c in np.asarray(to_host(head)).view(np.uint64).ravel()]

    def settle_blocks(self, got, size: int, cap: int, dtype, counts, indeg, level, lev: int):
        """:meth:`settle` over the heads of every gathered block (each count at most ``cap``)."""
        xp = self.xp
        rows = got.reshape(int(size), -1)
        isz = np.dtype(dtype).itemsize
        heads = [rows[r, 8:8 + int(c) * isz].copy().view(dtype) for r, c in enumerate(counts)]
        return self.settle(xp.concatenate(heads) if heads else xp.zeros(0, dtype), indeg, level, lev)


class CudaSweeps(ArraySweeps):
    """The launcher: each pass one or two kernels of ``kernels/partitioned_sweeps.cu`` on the
    current device (the caller's ``be.on_device()``); ids int32 or int64, ``s`` and ``d`` alike."""

    @staticmethod
    def _w(ids) -> int:
        """The kernels' template argument: 1 for int64 ids, 0 for int32."""
        return int(ids.dtype.itemsize == 8)

    @staticmethod
    def _sms():
        from ..gpu.sweep import sm_count

        return sm_count()

    @staticmethod
    def _check(*ids):
        """The kernels read raw pointers: one id dtype (int32 or int64), contiguous."""
        t = ids[0].dtype
        if t.kind != "i" or t.itemsize not in (4, 8) or any(a.dtype != t or not a.flags.c_contiguous for a in ids):
            from ..errors import BackendError

            raise BackendError(f"partitioned sweeps: need contiguous id arrays of one dtype, int32 or int64; got "
                               f"{[(str(a.dtype), a.flags.c_contiguous) for a in ids]}")

    def filter(self, mode, s, d, alive=None, color=None):
        cp = self.xp
        self._check(s, d, *(() if color is None else (color,)))
        m = int(s.shape[0])
        tiles, blocks = plan_tiles(m, self._sms())
        if not tiles:
            return s, d
        a = cp.packbits(alive) if alive is not None else cp.zeros(1, cp.uint8)
        c = color if color is not None else cp.zeros(1, s.dtype)
        head = (np.int32(mode), s, d, np.int64(m), a, c, np.int64(tiles))
        counts = cp.empty(tiles, cp.int32)
        kernel("partitioned_sweeps", f"dg_psw_count<{self._w(s)}>")((blocks,), (PSW_THREADS,), head + (counts,))
        start = cp.empty(tiles + 1, cp.int64)
        start[0] = 0
        cp.cumsum(counts, dtype=cp.int64, out=start[1:])
        del counts
        kept = int(start[-1])  # (a host wait: the size of what comes out)
        if kept == m:
            return s, d
        out_s, out_d = cp.empty(kept, s.dtype), cp.empty(kept, d.dtype)
        kernel("partitioned_sweeps", f"dg_psw_compact<{self._w(s)}>")((blocks,), (PSW_THREADS,),
                                                                     head + (start, out_s, out_d))
        return out_s, out_d

    def presence(self, s, d, n: int):
        cp = self.xp
        self._check(s, d)
        n, m = int(n), int(s.shape[0])
        words = cp.zeros(-(-2 * n // 32), cp.uint32)
        if m:
            kernel("partitioned_sweeps", f"dg_psw_presence<{self._w(s)}>")(
                (grid_blocks(m, self._sms()),), (PSW_THREADS,), (s, d, np.int64(m), np.int64(n), words))
        return words.view(cp.uint8)[: -(-2 * n // 8)]

    def colour(self, s, d, fresh, color, nxt) -> None:
        self._check(s, d, color, nxt)
        m = int(s.shape[0])
        if m:
            kernel("partitioned_sweeps", f"dg_psw_colour<{self._w(s)}>")((grid_blocks(m, self._sms()),), (PSW_THREADS,),
                                        (s, d, np.int64(m), self.xp.packbits(fresh), color, nxt))

    def back(self, bs, bd, fresh, nxt) -> None:
        self._check(bs, bd)
        m = int(bs.shape[0])
        if m:
            kernel("partitioned_sweeps", f"dg_psw_back<{self._w(bs)}>")((grid_blocks(m, self._sms()),), (PSW_THREADS,),
                                       (bs, bd, np.int64(m), self.xp.packbits(fresh), nxt))


    def _buffers(self, m: int, C: int, dt):
        """The peel's reused device buffers: the expanded heads (``m``, this rank's edges), the
        next frontier (``C``) and two counters."""
        b = getattr(self, "_peel", None)
        if b is None or b[0].size < max(m, 1) or b[1].size < max(C, 1) or b[0].dtype != dt:
            cp = self.xp
            b = self._peel = (cp.empty(max(m, 1), dt), cp.empty(max(C, 1), dt), cp.zeros(2, cp.uint64))
        return b

    def expand(self, ptr, head, front):
        self._check(head, front)
        out, _, count = self._buffers(int(head.shape[0]), int(ptr.shape[0]) - 1, head.dtype)
        f = int(front.shape[0])
        if not f:
            return out[:0]
        count.data.memset_async(0, 8)
        blocks = max(1, min(-(-f // (PSW_THREADS // 32)), 32 * self._sms()))
        kernel("partitioned_sweeps", f"dg_psw_expand<{self._w(head)}>")(
            (blocks,), (PSW_THREADS,), (front, np.int64(f), ptr, head, out, count))
        return out[:int(count[0].get())]

    def rows(self, s, d, n: int):
        cp = self.xp
        self._check(s, d)
        n, m = int(n), int(s.shape[0])
        ptr = cp.zeros(n + 1, cp.int64)
        if not m:
            return ptr, cp.empty(0, d.dtype)
        grid = ((grid_blocks(m, self._sms()),), (PSW_THREADS,))
        kernel("partitioned_sweeps", f"dg_psw_rowsize<{self._w(s)}>")(*grid, (s, d, np.int64(m), ptr[1:]))
        ptr[1:] = cp.cumsum(ptr[1:])
        cursor = ptr[:-1].copy()
        head = cp.empty(int(ptr[-1]), d.dtype)  # (a host wait: the edges but self-loops)
        kernel("partitioned_sweeps", f"dg_psw_rowfill<{self._w(s)}>")(*grid, (s, d, np.int64(m), cursor, head))
        return ptr, head

    def settle(self, got, indeg, level, lev: int):
        self._check(got)
        _, front, count = self._buffers(1, int(indeg.shape[0]), got.dtype)
        g = int(got.shape[0])
        if not g:
            return front[:0]
        count.data.memset_async(0, 16)
        kernel("partitioned_sweeps", f"dg_psw_settle<{self._w(got)}>")(
            (grid_blocks(g, self._sms()),), (PSW_THREADS,), (got, np.int64(g), indeg, level, np.int32(lev), front,
                                                            count[1:]))
        return front[:int(count[1].get())]

    def front(self, ids):
        """``(ids, count, most)``: the ids' buffer, their number on the device (uint64, what the
        kernels read) and a host bound on it (the grid's size)."""
        return ids, self.xp.asarray(np.array([ids.size], dtype=np.uint64)), int(ids.size)

    def front_ids(self, front):
        ids, count, _ = front
        return ids[:int(count.get()[0])]

    def expand_block(self, ptr, head, front, cap: int):
        self._check(head, front[0])
        cp = self.xp
        ids, count, most = front
        block = cp.empty(block_bytes(cap, head.dtype.itemsize), dtype=cp.uint8)
        block[:8].fill(0)
        if most:
            blocks = max(1, min(-(-most // (PSW_THREADS // 32)), 32 * self._sms()))
            kernel("partitioned_sweeps", f"dg_psw_expand_block<{self._w(head)}>")(
                (blocks,), (PSW_THREADS,), (ids, count, ptr, head, block, np.int64(cap)))
        return block

    def settle_blocks(self, got, size: int, cap: int, dtype, counts, indeg, level, lev: int):
        _, front, count = self._buffers(1, int(indeg.shape[0]), np.dtype(dtype))
        fcount = count[1:2]
        fcount.fill(0)
        most = min(max(counts), int(cap)) if counts else 0
        if most:
            kernel("partitioned_sweeps", f"dg_psw_settle_blocks<{self._w(front)}>")(
                (grid_blocks(most, self._sms()),), (PSW_THREADS,),
                (got, np.int32(size), np.int64(got.size // int(size)), np.int64(cap), indeg, level, np.int32(lev),
                 front, fcount))
        return front, fcount, min(sum(counts), int(indeg.shape[0]))


def block_bytes(cap: int, itemsize: int) -> int:
    """The bytes of a peel block (:meth:`ArraySweeps.expand_block`): the 8-byte count and ``cap``
    slots, rounded up to 8 bytes so that every gathered block's count is an aligned uint64.

    >>> block_bytes(3, 4), block_bytes(4, 4), block_bytes(3, 8)
    (24, 24, 32)
    """
    return 8 + -(-int(cap) * int(itemsize) // 8) * 8


def sweeps_for(xp):
    """The passes for array module ``xp``: the kernels for CuPy, the array code for NumPy."""
    return CudaSweeps(xp) if getattr(xp, "__name__", "") == "cupy" else ArraySweeps(xp)
