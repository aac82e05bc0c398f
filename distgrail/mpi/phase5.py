"""Phase 5 (support vertices and their reach masks) split over MPI ranks.

Rank 0 chooses the K supports; the ceil(K / 64) mask words are split over the ranks in
contiguous blocks, like the dimensions of phases 3–4; each rank sweeps its words, and the blocks
meet on rank 0: through host memory (``Gatherv``) with the MPI transport, device to device with
an NCCL transport (:mod:`distgrail.mpi.devicepath`).
"""

from __future__ import annotations

import numpy as np

from ..stages.supports import choose_supports, support_masks, words
from . import devicepath
from .collectives import bcast_array, gather_rows, offsets, split_counts
from .errors import run_shared

__all__ = ["supports_distributed"]


def supports_distributed(comm, dag, K, seed, be, everywhere, root=0, tp=None):
    """Collective phase 5: root chooses the K supports; the mask words are split over the ranks in
    contiguous blocks (like the dimensions), each rank sweeps its block, and the blocks are
    gathered to root (and broadcast when every rank assembles): through host memory, or device
    to device with an NCCL transport ``tp``. Byte-identical to one process: a mask word depends
    only on the supports it holds."""
    me, size = comm.Get_rank(), comm.Get_size()
    here = me == root
    ids = run_shared(comm, "choosing the support vertices", choose_supports if here else None, dag, K, seed)
    ids = bcast_array(comm, ids, root)
    K, C = int(ids.shape[0]), int(dag.C)
    wc = split_counts(words(K), size)
    w0, w1 = int(offsets(wc)[me]), int(offsets(wc)[me + 1])

    def block():
        if w1 == w0:  # no mask word on this rank
            none = np.zeros((0, C), np.uint64)
            return (be.asarray(none), be.asarray(none)) if tp is not None else (none, none)
        out, inn = support_masks(be, dag, ids, (64 * w0, min(64 * w1, K)))
        if tp is not None:  # (words, C) blocks stay on the device
            with be.on_device():
                return be.xp.ascontiguousarray(out.T), be.xp.ascontiguousarray(inn.T)
        return np.ascontiguousarray(be.to_host(out).T), np.ascontiguousarray(be.to_host(inn).T)

    what = f"support masks, words {w0}..{w1 - 1}" if w1 > w0 else "support masks (no word on this rank)"
    mine = run_shared(comm, what, block)
    masks = []
    if tp is not None:
        for part in mine:
            full = devicepath.gather_blocks(tp, part, everywhere, "masks", root)
            masks.append(np.ascontiguousarray(full.T) if full is not None else None)
        return (ids, masks[0], masks[1]) if everywhere or here else None
    for part in mine:  # (words, C) blocks stacked in rank order, then back to (C, W)
        full = run_shared(comm, "allocating the support masks",
                          (lambda: np.empty((words(K), C), np.uint64)) if here else None)
        full = gather_rows(comm, part, wc, full, root)
        if everywhere:
            full = bcast_array(comm, full, root)
        masks.append(np.ascontiguousarray(full.T) if full is not None else None)
    return (ids, masks[0], masks[1]) if everywhere or here else None
