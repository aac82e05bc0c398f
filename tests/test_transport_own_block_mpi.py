"""Rank 0 copies its own label block to the host early (distgrail.mpi.devicepath.OwnBlockCopy)
and receives only the other ranks' blocks (``gatherv(..., keep_own=False)``); run under mpiexec
-n 2 and -n 3 (launch/test.sh) with the fake NCCL of tests/test_transport.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.mpi import placement as distributed
from distgrail.mpi import devicepath, transport
from test_distributed_mpi import cyclic_graph, everywhere, same_index
from test_transport import fake_nccl
from test_transport_mpi import nccl_build
from test_transport_setup_mpi import held_init

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

CPU = get_backend("cpu")


@pytest.mark.parametrize("which", ["nccl", "mpi", "nccl-not-ready"])
def test_gatherv_without_the_roots_own_block(comm, wire, monkeypatch, which):
    """keep_own=False: root gets the other ranks' rows in rank order, its own left out."""
    gate = None
    if which == "mpi":
        tp = transport.MpiTransport(comm, CPU)
    else:
        nccl = fake_nccl(wire)
        if which == "nccl-not-ready":  # a transfer before the set-up is over goes by the host path
            monkeypatch.delenv("DISTGRAIL_NCCL_EARLY", raising=False)
            gate, _ = held_init(nccl)
        tp, why = transport.nccl_transport(comm, CPU, nccl, background=which == "nccl-not-ready")
        assert tp is not None, why
    me, size = comm.Get_rank(), comm.Get_size()
    rows = [(r * 5 + 2) % 4 for r in range(size)]  # 2, 3, 0
    block = (np.arange(rows[me] * 3, dtype=np.uint16).reshape(rows[me], 3) + 100 * me)
    for root in (0, size - 1):
        got = tp.gatherv(block, root, keep_own=False)
        if me == root:
            want = np.concatenate([np.arange(rows[r] * 3, dtype=np.uint16).reshape(rows[r], 3) + 100 * r
                                   for r in range(size) if r != root])
            ok = got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
            detail = f"{got.shape} vs {want.shape}"
        else:
            ok, detail = got is None, repr(got)
        everywhere(comm, ok, f"root {root}: {detail}")
    if gate is not None:
        gate.set()
        tp.ready()
        everywhere(comm, tp.take_timings().get("nccl_before_ready") == 2.0, "not by the host path")


@pytest.mark.parametrize("share", [0.0, 0.8, 2.0])
def test_rank_0_copies_its_own_block_early(comm, wire, tmp_path, monkeypatch, share):
    """full_index_on="root" on the NCCL path: rank 0's block goes to the host on its own
    thread, rank 0 receives by NCCL only the others' label bytes, and the index is the
    one-process index byte for byte; the timings show the early copy and the wait for it."""
    nccl = nccl_build(monkeypatch, wire)
    threads = []
    plain = devicepath.OwnBlockCopy._run

    def run(self, *a):
        import threading

        threads.append(threading.current_thread().name)
        return plain(self, *a)

    monkeypatch.setattr(devicepath.OwnBlockCopy, "_run", run)
    g = cyclic_graph(500, 2000, seed=1)
    dims = 6
    ref = distgrail.build_index(g, dims=dims, seed=8, backend="cpu", supports=0)
    out = comm.bcast(str(tmp_path / "x.h5"))
    mark = len(nccl.log)
    idx = distgrail.build_index(g, dims=dims, seed=8, backend="cpu", comm=comm, supports=0,
                                              output=out, full_index_on="root", root_share=share)
    me = comm.Get_rank()
    # the set-up's warm-up gathers 4 bytes from every rank and receives 4 from the ring's previous rank
    warm_up = 4 * (comm.Get_size() - 1) + 4
    received = sum(e[1] for e in nccl.log[mark:] if e[0] == "recv") - warm_up
    if me == 0:
        iv = idx.arrays["labels/intervals"]
        mine = idx.meta["dims_split"][0]
        others = iv.nbytes - mine * iv.nbytes // dims
        t = idx.timings
        why = (same_index(ref, idx) or (received != others and f"received {received} bytes, want {others}")
               or (not {"labels_own_to_host", "labels_own_wait", "labels_to_host"} <= set(t) and sorted(t))
               or (threads != ["distgrail-own-labels"] and threads))
        if not why:
            ref.save(tmp_path / "ref.h5")
            with open(out, "rb") as f:
                why = "" if (tmp_path / "ref.h5").read_bytes() == f.read() else "file bytes differ"
    else:
        why = (idx is not None and "an index on rank > 0") or (threads and f"copied early on rank {me}")
    everywhere(comm, not why, why)


def test_no_early_copy_where_every_rank_assembles(comm, wire, monkeypatch):
    """full_index_on="all": the labels are broadcast whole, nothing is copied early."""
    nccl_build(monkeypatch, wire)
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=4, seed=2, backend="cpu", supports=0)
    idx = distgrail.build_index(g, dims=4, seed=2, backend="cpu", comm=comm, supports=0)
    everywhere(comm, not same_index(ref, idx) and "labels_own_wait" not in idx.timings,
               same_index(ref, idx) or sorted(idx.timings))


def test_support_masks_land_in_arrays_allocated_when_phase_5_started(comm, wire, monkeypatch):
    """NCCL path: the gathered mask words land on root in host arrays allocated (pages touched)
    when phase 5 started, not in fresh ones, as (C, words): transposed on the device, not on the
    host; the index is the one-process index."""
    from distgrail.mpi import phase5

    nccl_build(monkeypatch, wire)
    made, used = [], []
    plain_landing, plain_gather = devicepath.landing, devicepath.gather_blocks

    def landing(be, shape, dtype, wanted):
        got = plain_landing(be, shape, dtype, wanted)
        made.append((np.dtype(dtype), wanted, got))
        return got

    def gather(tp, block, everywhere, what, root=0, timings=None, landing=None, own=None, transposed=False):
        full = plain_gather(tp, block, everywhere, what, root, timings, landing, own, transposed)
        if what == "masks":
            used.append((landing, full, transposed))
        return full

    monkeypatch.setattr(phase5.devicepath, "landing", landing)
    monkeypatch.setattr(phase5.devicepath, "gather_blocks", gather)
    g = distgrail.bundled_graph()  # 3,617 components: 130 supports in 3 mask words, split over the ranks
    ref = distgrail.build_index(g, dims=2, seed=3, backend="cpu", supports=130)
    idx = distgrail.build_index(g, dims=2, seed=3, backend="cpu", comm=comm, supports=130, full_index_on="root")
    me = comm.Get_rank()
    masks = [(wanted, got) for dt, wanted, got in made if dt == np.uint64]  # the labels' are uint16 here
    if me == 0:
        C, W = ref.meta["n_components"], (min(130, ref.meta["n_components"]) + 63) // 64
        why = (same_index(ref, idx) or (len(used) != 2 and f"{len(used)} mask gathers")
               or next((f"landing {lnd and lnd[0].shape}" for lnd, full, tr in used
                        if lnd is None or lnd[0].shape != (C, W) or full is not lnd[0] or not tr), ""))
    else:
        why = (idx is not None and "an index on rank > 0") or (
            (len(masks) != 2 or any(w or g is not None for w, g in masks)) and f"landing off root: {masks}")
    everywhere(comm, not why, why)
