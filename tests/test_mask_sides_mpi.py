"""Phase 5's out and in sides of one mask word swept on two ranks (distgrail.mpi.phase5
``side_split``, ``DISTGRAIL_MASK_SIDES``), under ``mpiexec -n 2`` and ``-n 3``: the ranks sweep
the sides they were given and no other, and the index is the one-process index byte for byte,
through host memory or the (fake) NCCL transport, the masks gathered on rank 0 or on every rank,
in one file or split over the ranks' parts."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail.mpi import phase5
from test_distributed_mpi import cyclic_graph, everywhere, same_index
from test_transport_mpi import nccl_build

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def _record_sides(monkeypatch):
    """The sides this rank's phase 5 swept, one tuple a sweep."""
    seen, real = [], phase5._start_block

    def start(run, entry, dag, ids, block, sides=phase5.SIDES):
        seen.append(tuple(sides))
        return real(run, entry, dag, ids, block, sides)

    monkeypatch.setattr(phase5, "_start_block", start)
    return seen


def _want_sides(size, mode):
    """Per rank: the sides it sweeps for K = 64 (one word)."""
    if mode == "whole":
        return [[] for _ in range(size - 1)] + [[("out", "in")]]
    return [[] for _ in range(size - 2)] + [[("in",)], [("out",)]]


@pytest.mark.parametrize("mode", ["split", "whole"])
@pytest.mark.parametrize("transport", ["mpi", "nccl"])
@pytest.mark.parametrize("full_index_on", ["all", "root"])
def test_one_word_swept_on_two_ranks_is_the_one_process_index(comm, wire, tmp_path, monkeypatch, mode, transport,
                                                               full_index_on):
    monkeypatch.setenv("DISTGRAIL_MASK_SIDES", mode)
    if transport == "nccl":
        nccl_build(monkeypatch, wire)
    seen = _record_sides(monkeypatch)
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=3, seed=4, backend="cpu", supports=64)
    idx = distgrail.build_index(g, dims=3, seed=4, backend="cpu", comm=comm, supports=64,
                                full_index_on=full_index_on, output=tmp_path / "x.h5")
    me, size = comm.Get_rank(), comm.Get_size()
    everywhere(comm, seen == _want_sides(size, mode)[me], f"rank {me} swept {seen}")
    why = "" if idx is None and (me != 0 and full_index_on == "root") else (
        "no index" if idx is None else same_index(ref, idx))
    if not why and me == 0:
        ref.save(tmp_path / "ref.h5")
        why = "" if (tmp_path / "ref.h5").read_bytes() == (tmp_path / "x.h5").read_bytes() else "file bytes differ"
    everywhere(comm, not why, why)


def test_auto_splits_on_gpus_only(comm, monkeypatch):
    """``auto`` (the default): the sides split where the backend is a GPU's, not on the CPU (there
    the sweep runs before phases 1–2, where rank 0's share would hold them up); rank 0's value
    decides."""
    import types

    monkeypatch.setenv("DISTGRAIL_MASK_SIDES", "auto" if comm.Get_rank() == 0 else "whole")
    got = [phase5._mask_sides(comm, types.SimpleNamespace(is_gpu=gpu), 0) for gpu in (True, False)]
    everywhere(comm, got == [True, False], got)


@pytest.mark.parametrize("K", [64, 130])
def test_split_layout_with_sides_on_two_ranks_is_the_single_file(comm, tmp_path, monkeypatch, K):
    """The split layout, the index assembled on rank 0: the masks of both sides meet on the last
    rank that swept one, which writes them into its part; merged, the single file. K = 130 (three
    words) sweeps both sides of its words on each rank at -n 2 and -n 3."""
    monkeypatch.setenv("DISTGRAIL_MASK_SIDES", "split")
    seen = _record_sides(monkeypatch)
    d = comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)
    out = os.path.join(d, "split.h5")
    g = distgrail.bundled_graph()  # 3,617 components: K = 130 takes three words
    distgrail.build_index(g, dims=2, seed=1, backend="cpu", comm=comm, output=out, layout="split",
                          full_index_on="root", supports=K)
    comm.Barrier()
    me, size = comm.Get_rank(), comm.Get_size()
    ok, why = True, ""
    if K == 64:
        ok, why = seen == _want_sides(size, "split")[me], f"rank {me} swept {seen}"
    else:
        ok, why = all(s == ("out", "in") for s in seen), f"rank {me} swept {seen}"
    if ok and me == 0:
        import h5py

        from distgrail.indexfile.layout import index_parts

        single, merged = os.path.join(d, "single.h5"), os.path.join(d, "merged.h5")
        distgrail.build_index(g, dims=2, seed=1, backend="cpu", output=single, supports=K)
        distgrail.open_index(out).save(merged)
        with open(single, "rb") as a, open(merged, "rb") as b:
            ok, why = a.read() == b.read(), "merged file differs from the single file"
        with h5py.File(index_parts(out)[-1], "r") as f:  # the last rank's part holds both sides
            ok, why = (ok and "supports/out" in f and "supports/in" in f), why or "masks not in the last part"
        ok = ok and np.array_equal(distgrail.open_index(merged).reachable(np.arange(900), np.arange(899, -1, -1)),
                                   distgrail.open_index(single).reachable(np.arange(900), np.arange(899, -1, -1)))
    everywhere(comm, ok, why)
