"""The split layout across MPI ranks (issue 42): every rank writes its part, rank 0 the main
file; the index is the one-process single file once merged (``convert --layout single``), byte
for byte, whether the DAG was shared, gathered from parts or spread over the ranks, and whether
the labels were gathered or stayed on the ranks that made them; a rank that fails writing its part
is every rank's error, and nothing is left. Run under ``mpiexec -n 2`` and ``-n 3``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail.errors import DistGrailError
from distgrail.indexfile.layout import index_parts

pytestmark = pytest.mark.mpi


def _graph(kind="dag"):
    if kind == "one SCC":  # one component, no DAG edge: empty datasets in parts
        return np.arange(300), (np.arange(300) + 1) % 300
    rng = np.random.default_rng(11)
    src, dst = rng.integers(0, 500, 700), rng.integers(0, 500, 700)
    return np.r_[src, np.arange(0, 400, 2)], np.r_[dst, np.arange(1, 401, 2)]  # cycles, a DAG around them


def _shared_dir(comm, tmp_path):
    return comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)


@pytest.mark.parametrize("partition,spread,K", [("off", None, 8), ("off", None, 130), ("on", "root", 8),
                                                 ("on", "ranks", 8)])
@pytest.mark.parametrize("full_index_on", ["root", "all"])
def test_split_across_ranks_is_the_single_file(comm, tmp_path, monkeypatch, partition, spread, K, full_index_on):
    if spread:
        monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", spread)
    here = comm.Get_rank() == 0
    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "split.h5")
    g = _graph()
    C = distgrail.build_index(g, dims=1, backend="cpu", supports=0).C
    assert 50 < C < 500  # cycles and a DAG of many components
    idx = distgrail.build_index(g, dims=5, seed=2, backend="cpu", comm=comm, output=out, layout="split",
                                partition=partition, full_index_on=full_index_on, supports=K)
    comm.Barrier()
    ok = True
    if here:
        single = os.path.join(d, "single.h5")
        ref = distgrail.build_index(g, dims=5, seed=2, backend="cpu", output=single, supports=K)
        merged = distgrail.open_index(out)
        merged.save(os.path.join(d, "merged.h5"))
        with open(single, "rb") as a, open(os.path.join(d, "merged.h5"), "rb") as b:
            ok = a.read() == b.read()
        parts = index_parts(out)
        ok = ok and merged.meta["parts"] == comm.Get_size() and len(parts) >= 2
        ok = ok and not [x for x in os.listdir(d) if x.startswith(".")]  # no temporary file left
        if full_index_on == "root" and spread is None:  # the last rank with mask words writes the masks
            import h5py

            with h5py.File(index_parts(out)[-1], "r") as f:
                ok = ok and "supports/out" in f and "labels/intervals" in f
            with h5py.File(index_parts(out)[0], "r") as f:
                ok = ok and "supports/out" not in f and "vertex/component" in f
            for p in index_parts(out):  # the DAG's edges and rows and the forest: every rank writes a block
                with h5py.File(p, "r") as f:
                    for name, rows in (("dag/indices", None), ("dag/indptr", C + 1), ("forest/parent", C),
                                       ("forest/subtree_size", C)):
                        ok = ok and name in f and f[name].attrs["first_row"] >= 0
                        ok = ok and (rows is None or 0 < f[name].shape[0] < rows)
        if full_index_on == "root" and spread == "ranks":  # every rank labelled every dimension and
            import h5py  # holds every mask: each writes a block of dimensions and of the masks' rows

            for p in index_parts(out):
                with h5py.File(p, "r") as f:
                    for name, rows in (("labels/intervals", 5), ("supports/out", C), ("supports/in", C)):
                        ok = ok and name in f and 0 < f[name].shape[0] < rows
        s, t = np.arange(500), np.arange(499, -1, -1)
        ok = ok and np.array_equal(merged.reachable(s, t), ref.reachable(s, t))
    if full_index_on == "all":  # every rank's Index is whole and queries
        s = np.arange(0, 500, 7)
        ok = ok and np.array_equal(idx.reachable(s, s[::-1]), distgrail.build_index(g, dims=5, seed=2, backend="cpu",
                                                                                    supports=K).reachable(s, s[::-1]))
    elif here:  # rank 0 holds its own block of labels only (spread too): a clear error, not a wrong answer
        try:
            idx.reachable(0, 1)
            ok = False
        except DistGrailError as e:
            ok = ok and "open_index" in str(e)
    assert all(comm.allgather(bool(ok)))


def test_a_rank_failing_its_part_fails_every_rank_and_leaves_nothing(comm, tmp_path, monkeypatch):
    from distgrail.indexfile import split

    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "bad.h5")
    last = comm.Get_size() - 1
    if comm.Get_rank() == last:
        real = split.PartFile.put

        def put(self, *args):
            real(self, *args)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(split.PartFile, "put", put)
    with pytest.raises(DistGrailError) as e:
        distgrail.build_index(_graph(), dims=4, backend="cpu", comm=comm, output=out, layout="split",
                              partition="off", full_index_on="root")
    comm.Barrier()
    assert "part" in str(e.value)
    left = os.listdir(d) if comm.Get_rank() == 0 else []
    assert comm.bcast(left, root=0) == []


@pytest.mark.parametrize("partition,spread", [("off", None), ("on", "ranks")])
def test_split_of_one_giant_scc(comm, tmp_path, monkeypatch, partition, spread):
    if spread:
        monkeypatch.setenv("DISTGRAIL_PARTITION_DAG", spread)
    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "one.h5")
    g = _graph("one SCC")
    distgrail.build_index(g, dims=3, backend="cpu", comm=comm, output=out, layout="split", partition=partition,
                          full_index_on="root")
    ok = True
    if comm.Get_rank() == 0:
        got = distgrail.open_index(out)
        ok = got.C == 1 and bool(got.reachable(np.arange(300), np.arange(299, -1, -1)).all())
    assert all(comm.allgather(ok))


@pytest.mark.gpu
@pytest.mark.parametrize("partition,K", [("off", 32), ("off", 130), ("on", 32)])
@pytest.mark.parametrize("nccl", ["1", "0"])
def test_split_on_gpus_is_the_cpu_single_file(comm, tmp_path, monkeypatch, partition, K, nccl):
    """On GPUs (NCCL or the host path; the labels kept on the ranks, the masks on the last one):
    the split index merged is the CPU one-process file byte for byte."""
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.binding import bind_gpu

    monkeypatch.setenv("DISTGRAIL_NCCL", nccl)
    be = get_backend("gpu", bind_gpu(comm, "gpu", share=True))
    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "gpu.h5")
    g = _graph()
    idx = distgrail.build_index(g, dims=5, seed=4, backend=be, comm=comm, output=out, layout="split",
                                partition=partition, full_index_on="root", supports=K)
    comm.Barrier()
    ok = True
    if comm.Get_rank() == 0:
        single = os.path.join(d, "cpu.h5")
        distgrail.build_index(g, dims=5, seed=4, backend="cpu", output=single, supports=K)
        merged = os.path.join(d, "merged.h5")
        distgrail.open_index(out).save(merged)
        with open(single, "rb") as a, open(merged, "rb") as b:
            ok = a.read() == b.read() and idx.meta["transport"] == ("nccl" if nccl == "1" else "mpi")
    assert all(comm.allgather(ok))


def test_a_part_rank_0_cannot_see_is_every_ranks_error(comm, tmp_path, monkeypatch):
    """A rank whose part lands where rank 0 does not look (node-local storage, another working
    directory): a clear error on every rank, nothing left, not an index that cannot be opened."""
    from distgrail.indexfile import split

    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "far.h5")
    last = comm.Get_size() - 1
    elsewhere = os.path.join(d, "elsewhere")
    if comm.Get_rank() == 0:
        os.mkdir(elsewhere)
    comm.Barrier()
    if comm.Get_rank() == last:
        real = split.part_name
        monkeypatch.setattr(split, "part_name", lambda p, r, b: os.path.join(elsewhere, os.path.basename(real(p, r, b))))
    with pytest.raises(DistGrailError) as e:
        distgrail.build_index(_graph(), dims=4, backend="cpu", comm=comm, output=out, layout="split",
                              partition="off", full_index_on="root")
    comm.Barrier()
    assert "does not see it" in str(e.value)
    left = (os.listdir(d), os.listdir(elsewhere)) if comm.Get_rank() == 0 else None
    assert comm.bcast(left, root=0) == (["elsewhere"], [])


@pytest.mark.parametrize("K", [8, 130])
def test_split_through_nccl_masks_land_where_they_were_swept(comm, wire, tmp_path, monkeypatch, K):
    """The NCCL transport (fake, on the CPU backend), the split layout, the index on rank 0 only:
    with every mask word on the last rank (K = 8; K = 130's words meet there) the masks go to the host
    there into the pages allocated when phase 5 started, shaped (C, words) as swept, and the
    merged index is the one-process file byte for byte."""
    from distgrail.gpu.backend import Backend
    from test_transport_mpi import nccl_build

    nccl_build(monkeypatch, wire)
    monkeypatch.setenv("DISTGRAIL_MASK_SIDES", "whole")  # (split, K = 8's two sides meet by a gather)
    landed, real = [], Backend.land

    def land(self, a, landing=None):
        landed.append(None if landing is None else tuple(landing[0].shape))
        return real(self, a, landing)

    monkeypatch.setattr(Backend, "land", land)
    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "nccl.h5")
    g = _graph()
    idx = distgrail.build_index(g, dims=3, seed=4, backend="cpu", comm=comm, output=out, layout="split",
                                full_index_on="root", supports=K)
    me, size = comm.Get_rank(), comm.Get_size()
    C = distgrail.build_index(g, dims=1, backend="cpu", supports=0).C
    one_rank = K <= 64  # every word on the last rank (130 supports: 3 words over 2 or 3 ranks, gathered)
    if me == size - 1 and one_rank:
        ok = landed.count((C, -(-K // 64))) == 2
    else:
        ok = (C, -(-K // 64)) not in landed
    comm.Barrier()
    if me == 0:
        ref = os.path.join(d, "single.h5")
        distgrail.build_index(g, dims=3, seed=4, backend="cpu", output=ref, supports=K)
        distgrail.open_index(out).save(os.path.join(d, "merged.h5"))
        with open(ref, "rb") as a, open(os.path.join(d, "merged.h5"), "rb") as b:
            ok = ok and a.read() == b.read() and idx.meta["transport"] == "nccl"
    assert comm.allreduce(ok, op=__import__("mpi4py").MPI.LAND), f"rank {me}: landed {landed}"


@pytest.mark.parametrize("partition", ["off", "on"])
def test_the_dag_goes_to_the_host_before_the_wait_for_phase_5(comm, tmp_path, monkeypatch, partition):
    """The split layout, the index assembled on rank 0 (the command line's way): every rank copies
    its share of the DAG to the host before it waits for phase 5's masks (the last ranks' sweep
    runs meanwhile), and hands that copy to the write; the index stays the single file's."""
    from distgrail.mpi import phase5
    from distgrail.mpi.placement import AcrossRanks

    order = []
    real_share, real_result = AcrossRanks._share_edges, phase5._Distributed.result

    def share(self, dag):
        order.append("share")
        return real_share(self, dag)

    def result(self):
        order.append("masks")
        return real_result(self)

    monkeypatch.setattr(AcrossRanks, "_share_edges", share)
    monkeypatch.setattr(phase5._Distributed, "result", result)
    d = _shared_dir(comm, tmp_path)
    out = os.path.join(d, "early.h5")
    g = _graph()
    distgrail.build_index(g, dims=3, seed=1, backend="cpu", comm=comm, output=out, layout="split",
                          partition=partition, full_index_on="root", supports=8)
    assert order == ["share", "masks"], order  # once, and before the wait (it was after, and once)
    comm.Barrier()
    ok = True
    if comm.Get_rank() == 0:  # (one rank's failure is every rank's: no rank left waiting at a barrier)
        ref = os.path.join(d, "one.h5")
        distgrail.build_index(g, dims=3, seed=1, backend="cpu", output=ref, supports=8)
        merged = os.path.join(d, "merged.h5")
        distgrail.open_index(out).save(merged)
        with open(ref, "rb") as a, open(merged, "rb") as b:
            ok = a.read() == b.read()
    from mpi4py import MPI

    assert comm.allreduce(ok, op=MPI.LAND)
