"""Phase 5 (support vertices and their reach masks) split over MPI ranks.

Rank 0 chooses the K supports; the ceil(K / 64) mask words are split over the ranks in
contiguous blocks, the later ranks taking the larger ones (:func:`word_split`: with K = 64 the one
word is the last rank's). Each rank starts its words when phase 5 starts (:func:`start_distributed`,
before phases 1–2 in a build across ranks): on a GPU on a non-blocking stream of its own, beside
rank 0's phases 1–2 and every rank's phases 3–4 (as one process runs it beside its phases 3–4,
:func:`distgrail.stages.supports.start_supports`); on the CPU at once. ``result()`` waits for the
rank's sweep, then the blocks meet on rank 0: through host memory (``Gatherv``) with the MPI
transport, device to device with an NCCL transport (:mod:`distgrail.mpi.devicepath`), copied to
host arrays whose pages a thread touches from the start on (fresh pages cost as much as the
copy: docs/benchmarks.md). The words
are byte-identical to one process's: a mask word depends only on the supports it holds.

With the word on the last rank, started before phases 1–2, its sweep overlaps rank 0's phases
1–4 instead of following them on rank 0 (figures: docs/benchmarks.md).
"""

from __future__ import annotations

import numpy as np

from ..stages.supports import choose_supports, words
from . import devicepath
from .collectives import bcast_array, gather_rows, offsets, split_counts
from .errors import run_shared

__all__ = ["start_distributed", "word_split"]


def word_split(W: int, ranks: int) -> np.ndarray:
    """Mask words per rank, in rank order: contiguous blocks, the later ranks the larger (rank 0
    also computes phases 1–2 and writes the index).

    >>> word_split(1, 2).tolist(), word_split(3, 2).tolist(), word_split(16, 3).tolist()
    ([0, 1], [1, 2], [5, 5, 6])
    """
    return split_counts(W, ranks)[::-1].copy()


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
    wc = word_split(words(int(ids.shape[0])), size)
    w0, w1 = int(offsets(wc)[me]), int(offsets(wc)[me + 1])
    what = f"support masks, words {w0}..{w1 - 1}" if w1 > w0 else "support masks (no word on this rank)"
    block = (64 * w0, min(64 * w1, int(ids.shape[0])))
    started = run_shared(comm, what, _start_block if w1 > w0 else None, run, entry, dag, ids, block)
    # the gathered (words, C) blocks' host pages, touched meanwhile where they land (NCCL path);
    # kept where they were swept (the split layout, every word on one rank): (C, words), as made
    to = int(np.flatnonzero(wc)[-1]) if keep is not None and int(wc.sum()) else root
    kept = keep is not None and int(np.count_nonzero(wc)) == 1
    wanted = tp is not None and (everywhere or me == to)
    shape = (int(dag.C), int(wc.sum())) if kept else (int(wc.sum()), int(dag.C))
    landing = run_shared(comm, "allocating host memory for the support masks",
                         lambda: [devicepath.landing(be, shape, np.uint64, wanted) for _ in range(2)])
    out = _Distributed(comm, be, ids, wc, started, what, everywhere, root, tp, int(dag.C), landing)
    out.keep, out.to = keep, to
    return out


def _start_block(run, entry, dag, ids, block):
    """This rank's words started by ``entry``. A host DAG (the MPI transport) goes up once, as the
    CSR the labeling keeps (``device_csr``), not once more for the sweep beside phases 1–4."""
    be = run.be
    if be.is_gpu and isinstance(dag.indptr, np.ndarray):
        from types import SimpleNamespace

        from ..stages.labeling import device_csr

        with be.on_device():
            ip, ix = device_csr(be, dag)
        dag = SimpleNamespace(C=int(dag.C), indptr=ip, indices=ix, level_ptr=dag.level_ptr)
    return entry(run, dag, int(ids.shape[0]), ids=ids, block=block)


class _Distributed:
    """Phase 5 under way on every rank; :meth:`result` (collective) waits and gathers."""

    def __init__(self, comm, be, ids, wc, started, what, everywhere, root, tp, C, landing=(None, None)):
        self.comm, self.be, self.ids, self.wc, self.started = comm, be, ids, wc, started
        self.what, self.everywhere, self.root, self.tp, self.C = what, everywhere, root, tp, C
        self.landing = landing

    def _block(self):
        """This rank's (words, C) blocks: on the device with NCCL, else on the host."""
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

        comm, wc, m = self.comm, self.wc, self.started

        def host():  # into the pages touched since phase 5 started (NCCL path), else fresh ones
            be = self.be
            with be.on_device():
                _, out, inn = m.result()
                return tuple(np.ascontiguousarray(be.land(be.xp.ascontiguousarray(a), landing) if landing
                                                  else to_host(a)) for a, landing in zip((out, inn), self.landing))

        got = run_shared(comm, self.what, host if wc[comm.Get_rank()] else None)
        self.started = None
        return self._met(self.ids, list(got) if got is not None else [None, None], got is not None)

    def result(self):
        comm, ids, wc, root, tp = self.comm, self.ids, self.wc, self.root, self.tp
        if self.keep is not None and int(np.count_nonzero(wc)) == 1:
            return self._kept()
        if self.keep is not None:  # the split layout: the masks meet on the last rank with words
            root = self.to
        here = comm.Get_rank() == root
        mine = run_shared(comm, self.what, self._block)
        self.started = None
        masks = []
        if tp is not None:
            for part, landing in zip(mine, self.landing):
                full = devicepath.gather_blocks(tp, part, self.everywhere, "masks", root, landing=landing)
                masks.append(np.ascontiguousarray(full.T) if full is not None else None)
            return self._met(ids, masks, here)
        W, C = int(wc.sum()), self.C
        for part in mine:  # (words, C) blocks stacked in rank order, then back to (C, W)
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
        W = int(self.wc.sum())
        none = np.zeros((0, W), np.uint64)
        return ids, Rows((self.C, W), np.uint64, 0, none), Rows((self.C, W), np.uint64, 0, none)
