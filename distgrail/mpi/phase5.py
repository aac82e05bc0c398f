"""Phase 5 (support vertices and their reach masks) split over MPI ranks.

Rank 0 chooses the K supports; the ceil(K / 64) mask words are split over the ranks in contiguous
blocks, the later ranks taking the larger ones (:func:`word_split`: with K = 64 the one word is the
last rank's, or its two sides the last two ranks': below). Each rank starts its words when phase 5
starts (:func:`start_distributed`, before phases 1–2 in a build across ranks): on a GPU on a
non-blocking stream of its own, beside rank 0's phases 1–2 and every rank's phases 3–4 (as one
process runs it beside its phases 3–4, :func:`distgrail.stages.supports.start_supports`); on the
CPU at once. ``result()`` waits for the rank's sweep, then the blocks meet on rank 0 (the split
layout: on the last rank holding words): through host memory (``Gatherv``) with the MPI transport,
device to device with an NCCL transport (:mod:`distgrail.mpi.devicepath`), copied to host arrays
whose pages a thread touches from the start on (fresh pages cost as much as the copy:
docs/benchmarks.md), as (C, words): the stacked (words, C) blocks are transposed on the GPU
(:func:`~distgrail.mpi.devicepath.land_transposed`; on the host that transpose cost more than the
gather). The words are byte-identical to one process's: a mask word depends only on the supports it
holds.

With the word on the last rank, started before phases 1–2, its sweep overlaps rank 0's phases 1–4
instead of following them on rank 0 (figures: docs/benchmarks.md).

Sides: with at least twice as many ranks as words (K = 64 on two GPUs or more), one rank sweeping a
word's two sides beside its phases 3–4 slowed them (docs/benchmarks.md, session 36); there each
word's ``out`` side and ``in`` side go to two ranks (:func:`side_split`: ``in`` words on the
earlier ranks, ``out`` words after them), each sweeping its side alone
(:func:`distgrail.stages.supports.support_masks`' ``sides``), and the two sides are gathered apart
(each with its own word counts). ``DISTGRAIL_MASK_SIDES`` (rank 0's): ``auto`` splits on GPUs only
(on the CPU the sweep runs before phases 1–2, where rank 0's share would delay them), ``split``,
``whole``.
"""

from __future__ import annotations

import numpy as np

from .. import settings
from ..stages.supports import SIDES, choose_supports, words
from . import devicepath
from .collectives import bcast_array, gather_rows, offsets, split_counts
from .errors import run_shared

__all__ = ["start_distributed", "word_split", "side_split"]


def word_split(W: int, ranks: int) -> np.ndarray:
    """Mask words per rank, in rank order: contiguous blocks, the later ranks the larger (rank 0
    also computes phases 1–2 and writes the index).

    >>> word_split(1, 2).tolist(), word_split(3, 2).tolist(), word_split(16, 3).tolist()
    ([0, 1], [1, 2], [5, 5, 6])
    """
    return split_counts(W, ranks)[::-1].copy()


def side_split(W: int, ranks: int, split: bool = True):
    """``(out words, in words)`` per rank, in rank order. Where ``split`` and 2 W <= ranks, the 2 W
    sides of the words go one to a rank, the later ranks first: ``in`` words 0 .. W-1 on the
    earlier of those ranks, ``out`` words after them; else both sides of :func:`word_split`'s words.

    >>> [a.tolist() for a in side_split(1, 2)], [a.tolist() for a in side_split(1, 3)]
    ([[0, 1], [1, 0]], [[0, 0, 1], [0, 1, 0]])
    >>> [a.tolist() for a in side_split(2, 3)], [a.tolist() for a in side_split(1, 2, split=False)]
    ([[0, 1, 1], [0, 1, 1]], [[0, 1], [0, 1]])
    """
    if not split or 2 * W > ranks or W == 0:
        wc = word_split(W, ranks)
        return wc, wc.copy()
    held = word_split(2 * W, ranks)  # 0 or 1 side-word a rank
    unit = offsets(held)[:-1]
    return ((held > 0) & (unit >= W)).astype(np.int64), ((held > 0) & (unit < W)).astype(np.int64)


def _mask_sides(comm, be, root):
    """Collective: rank 0's DISTGRAIL_MASK_SIDES decides whether sides split (``auto``: on GPUs)."""
    mode = run_shared(comm, "reading DISTGRAIL_MASK_SIDES",
                      (lambda: settings.get("DISTGRAIL_MASK_SIDES")) if comm.Get_rank() == root else None)
    mode = comm.bcast(mode, root=root)
    return mode == "split" or (mode == "auto" and bool(getattr(be, "is_gpu", False)))


def start_distributed(comm, run, entry, dag, K, everywhere, root=0, tp=None, keep=None):
    """Collective: root chooses the K supports (broadcast); each rank starts ``entry``
    (:func:`distgrail.stages.phases.masks`) on its block of mask words (module doc). The DAG's
    device arrays must stay until ``result()``. ``keep`` (a dict; the split index layout, the
    index assembled on root only): the masks meet on the last rank holding words instead of root
    (when it holds every word, they stay there), put in ``keep`` for that rank to write into its
    part, and root's are :class:`~distgrail.indexfile.split.Rows` of no row: root, which also
    computes phases 1–2 and writes the DAG, neither receives nor writes them."""
    me, size = comm.Get_rank(), comm.Get_size()
    be = run.be
    ids = run_shared(comm, "choosing the support vertices", choose_supports if me == root else None, dag, K,
                     run.config.seed)
    ids = bcast_array(comm, ids, root)
    W = words(int(ids.shape[0]))
    wcs = side_split(W, size, _mask_sides(comm, be, root))  # (out, in) words per rank
    spans = [(int(offsets(wc)[me]), int(offsets(wc)[me + 1])) for wc in wcs]
    sides = tuple(side for side, (w0, w1) in zip(SIDES, spans) if w1 > w0)
    w0, w1 = spans[SIDES.index(sides[0])] if sides else (0, 0)  # (both sides: the same words)
    what = (f"support masks{'' if len(sides) == 2 else ', ' + sides[0] + ' side'}, words {w0}..{w1 - 1}" if sides
            else "support masks (no word on this rank)")
    block = (64 * w0, min(64 * w1, int(ids.shape[0])))
    started = run_shared(comm, what, _start_block if sides else None, run, entry, dag, ids, block, sides)
    # the masks' (C, words) host pages, touched meanwhile where they land (NCCL path): gathered
    # as (words, C) blocks and transposed on the device, or kept where they were swept (the split
    # layout, every word on one rank), as made
    held = np.flatnonzero(wcs[0] + wcs[1])
    to = int(held[-1]) if keep is not None and held.size else root
    wanted = tp is not None and (everywhere or me == to)
    shape = (int(dag.C), W)
    landing = run_shared(comm, "allocating host memory for the support masks",
                         lambda: [devicepath.landing(be, shape, np.uint64, wanted) for _ in range(2)])
    out = _Distributed(comm, be, ids, wcs, started, what, everywhere, root, tp, int(dag.C), landing)
    out.keep, out.to = keep, to
    return out


def _start_block(run, entry, dag, ids, block, sides=SIDES):
    """This rank's words (its ``sides`` of them) started by ``entry``. A host DAG (the MPI
    transport) goes up once, as the CSR the labeling keeps (``device_csr``), not once more for the
    sweep beside phases 1–4."""
    be = run.be
    if be.is_gpu and isinstance(dag.indptr, np.ndarray):
        from types import SimpleNamespace

        from ..stages.labeling import device_csr

        with be.on_device():
            ip, ix = device_csr(be, dag)
        dag = SimpleNamespace(C=int(dag.C), indptr=ip, indices=ix, level_ptr=dag.level_ptr)
    return entry(run, dag, int(ids.shape[0]), ids=ids, block=block, sides=sides)


class _Distributed:
    """Phase 5 under way on every rank; :meth:`result` (collective) waits and gathers. ``wcs``:
    :func:`side_split`'s (out words, in words) per rank."""

    def __init__(self, comm, be, ids, wcs, started, what, everywhere, root, tp, C, landing=(None, None)):
        self.comm, self.be, self.ids, self.wcs, self.started = comm, be, ids, wcs, started
        self.what, self.everywhere, self.root, self.tp, self.C = what, everywhere, root, tp, C
        self.landing = landing
        self.W = int(wcs[0].sum())
        self.held = np.flatnonzero(wcs[0] + wcs[1])  # the ranks sweeping some side of some word

    def _block(self):
        """This rank's (words, C) blocks: on the device with NCCL, else on the host (a side it
        does not sweep: (0, C))."""
        be, m, tp = self.be, self.started, self.tp
        if m is None:  # no mask word on this rank
            none = np.zeros((0, self.C), np.uint64)
            return (be.asarray(none), be.asarray(none)) if tp is not None else (none, none)
        with be.on_device():
            _, out, inn = m.result()  # the sweep's stream is done
            if tp is not None:  # (words, C) blocks stay on the device
                return be.xp.ascontiguousarray(out.T), be.xp.ascontiguousarray(inn.T)
            return np.ascontiguousarray(be.to_host(out).T), np.ascontiguousarray(be.to_host(inn).T)

    def settle(self):
        """On a failure elsewhere: wait for this rank's sweep (:meth:`PendingMasks.settle`)."""
        m, self.started = self.started, None
        if hasattr(m, "settle"):
            m.settle()

    def _kept(self):
        """The split layout: the one rank with every word keeps its masks (``keep``); root gets
        Rows of no row standing for them (module doc of :mod:`distgrail.mpi.splitwrite`)."""
        from ..arrays import to_host

        comm, m = self.comm, self.started

        def host():  # into the pages touched since phase 5 started (NCCL path), else fresh ones
            be = self.be
            with be.on_device():
                _, out, inn = m.result()
                return tuple(np.ascontiguousarray(be.land(be.xp.ascontiguousarray(a), landing) if landing
                                                  else to_host(a)) for a, landing in zip((out, inn), self.landing))

        got = run_shared(comm, self.what, host if comm.Get_rank() in self.held else None)
        self.started = None
        return self._met(self.ids, list(got) if got is not None else [None, None], got is not None)

    def result(self):
        comm, ids, root, tp = self.comm, self.ids, self.root, self.tp
        if self.keep is not None and self.held.size == 1:
            return self._kept()
        if self.keep is not None:  # the split layout: the masks meet on the last rank with words
            root = self.to
        here = comm.Get_rank() == root
        mine = run_shared(comm, self.what, self._block)
        self.started = None
        masks = []
        if tp is not None:
            for part, landing in zip(mine, self.landing):  # (C, W) on the host, transposed on the device
                masks.append(devicepath.gather_blocks(tp, part, self.everywhere, "masks", root, landing=landing,
                                                      transposed=True))
            return self._met(ids, masks, here)
        W, C = self.W, self.C
        for part, wc in zip(mine, self.wcs):  # (words, C) blocks stacked in rank order, then back to (C, W)
            full = run_shared(comm, "allocating the support masks",
                              (lambda: np.empty((W, C), np.uint64)) if here else None)
            full = gather_rows(comm, part, wc, full, root)
            if self.everywhere:
                full = bcast_array(comm, full, root)
            masks.append(np.ascontiguousarray(full.T) if full is not None else None)
        return self._met(ids, masks, here)

    def _met(self, ids, masks, here):
        """``(ids, out, in)`` where the index is assembled; with ``keep`` the masks are put there
        on the rank they met on, and root gets Rows of no row."""
        if self.keep is None:
            return (ids, masks[0], masks[1]) if self.everywhere or here else None
        from ..indexfile.split import Rows

        if here:
            self.keep.update({"supports/out": (0, masks[0]), "supports/in": (0, masks[1])})
        if self.comm.Get_rank() != self.root:
            return None
        W = self.W
        none = np.zeros((0, W), np.uint64)
        return ids, Rows((self.C, W), np.uint64, 0, none), Rows((self.C, W), np.uint64, 0, none)
