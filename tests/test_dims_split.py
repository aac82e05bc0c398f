"""Rank 0's smaller block of label dimensions (distgrail.mpi.collectives.dims_split).

The split function is tested on its own (no MPI); the builds run under mpiexec -n 2 and -n 3
(launch/test.sh) with uneven splits on every way the labels travel (node-shared array,
Gatherv, NCCL with the fake of tests/test_transport.py), each compared byte for byte with the
one-process index.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import distgrail
from distgrail.errors import DistGrailError
from distgrail.mpi import placement as distributed
from distgrail.mpi.collectives import ROOT_SHARE, dims_split, root_share, split_counts


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("share", [0.0, 0.1, 0.5, 0.8, 0.875, 1.0, 1.5, 3.0, 100.0])
def test_dims_split_follows_its_rule(ranks, share):
    for d in list(range(0, 20)) + [31, 64, 100]:
        c = dims_split(d, ranks, share)
        assert c.dtype == np.int64 and c.shape == (ranks,) and int(c.sum()) == d and (c >= 0).all(), (d, c)
        if ranks == 1:
            assert c.tolist() == [d]
            continue
        if d == 0:
            assert not c.any()
            continue
        want0 = min(d, max(1, math.floor(d * share / ranks + 1e-9)))
        assert c[0] == want0, (d, ranks, share, c)
        rest = c[1:]
        assert rest.tolist() == split_counts(d - want0, ranks - 1).tolist()
        assert rest.max() - rest.min() <= 1 and (np.diff(rest) <= 0).all()  # even, earlier ranks the extra


def test_dims_split_examples():
    assert ROOT_SHARE == 1.0 and dims_split(16, 2).tolist() == [8, 8]  # the default: even (measured best)
    assert dims_split(16, 2, 0.8).tolist() == [6, 10]  # rank 0 does 6 of 16
    assert dims_split(16, 2, 1.0).tolist() == [8, 8]
    assert dims_split(16, 2, 0.875).tolist() == [7, 9]  # exact: no float rounding down to 6
    assert dims_split(10, 3, 0.9).tolist() == [3, 4, 3]  # 10 * 0.9 / 3 = 3 despite binary floats
    assert dims_split(1, 4).tolist() == [1, 0, 0, 0]  # d < ranks: rank 0 keeps dimension 0
    assert dims_split(3, 4, 0.0).tolist() == [1, 1, 1, 0]
    assert dims_split(4, 2, 10.0).tolist() == [4, 0]  # a share above 1 gives rank 0 more, at most d
    assert dims_split(0, 3).tolist() == [0, 0, 0]


@pytest.mark.parametrize("bad", [(-1, 2, 0.8), (4, 0, 0.8), (4, 2, -0.5), (4, 2, float("nan")), (4, 2, float("inf"))])
def test_dims_split_refuses_bad_arguments(bad):
    with pytest.raises(DistGrailError, match="dims_split"):
        dims_split(*bad)


def test_root_share_from_the_environment(monkeypatch):
    monkeypatch.delenv("DISTGRAIL_ROOT_SHARE", raising=False)
    assert root_share() == ROOT_SHARE
    monkeypatch.setenv("DISTGRAIL_ROOT_SHARE", " 0.6 ")
    assert root_share() == 0.6
    monkeypatch.setenv("DISTGRAIL_ROOT_SHARE", "")
    assert root_share() == ROOT_SHARE
    for bad in ("abc", "-1", "nan", "inf", "0.5x"):
        monkeypatch.setenv("DISTGRAIL_ROOT_SHARE", bad)
        with pytest.raises(DistGrailError, match=f"DISTGRAIL_ROOT_SHARE must be a number >= 0.*{bad}"):
            root_share()


# -- under MPI ------------------------------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("way", ["shm", "gatherv", "nccl"])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0, 2.5])
@pytest.mark.parametrize("full_index_on", ["all", "root"])
def test_uneven_splits_give_the_one_process_index(comm, wire, tmp_path, monkeypatch, way, share, full_index_on):
    from test_distributed_mpi import cyclic_graph, everywhere, same_index

    if way == "nccl":
        from test_transport_mpi import nccl_build

        nccl_build(monkeypatch, wire)
    monkeypatch.setenv("DISTGRAIL_SHM", "0" if way == "gatherv" else "1")
    g = cyclic_graph(400, 1500, seed=9)
    dims = 7
    ref = distgrail.build_index(g, dims=dims, seed=4, backend="cpu", supports=70)
    out = comm.bcast(str(tmp_path / "x.h5"))
    idx = distgrail.build_index(g, dims=dims, seed=4, backend="cpu", comm=comm, supports=70,
                                              output=out, full_index_on=full_index_on, root_share=share)
    me, size = comm.Get_rank(), comm.Get_size()
    want = dims_split(dims, size, share).tolist()
    if idx is None:
        ok, why = me != 0 and full_index_on == "root", "no index"
    else:
        why = same_index(ref, idx) or (idx.meta["dims_split"] != want and f"split {idx.meta['dims_split']} != {want}")
        ok = not why
        if ok and me == 0:
            ref.save(tmp_path / "ref.h5")
            with open(out, "rb") as f:
                ok, why = (tmp_path / "ref.h5").read_bytes() == f.read(), "file bytes differ"
    everywhere(comm, ok, why)


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_the_split_follows_rank_0s_environment(comm, monkeypatch):
    """DISTGRAIL_ROOT_SHARE is read on rank 0 (the others' value does not matter); a bad value
    there fails every rank naming it."""
    from test_distributed_mpi import everywhere

    from distgrail.mpi.errors import RankError

    me, size = comm.Get_rank(), comm.Get_size()
    monkeypatch.setenv("DISTGRAIL_ROOT_SHARE", "3.0" if me == 0 else "junk")
    g = distgrail.bundled_graph()
    idx = distgrail.build_index(g, dims=8, backend="cpu", comm=comm)
    everywhere(comm, idx.meta["dims_split"] == dims_split(8, size, 3.0).tolist(), idx.meta["dims_split"])
    monkeypatch.setenv("DISTGRAIL_ROOT_SHARE", "junk" if me == 0 else "0.5")
    with pytest.raises(RankError, match="rank 0, reading DISTGRAIL_ROOT_SHARE: DISTGRAIL_ROOT_SHARE must be"):
        distgrail.build_index(g, dims=8, backend="cpu", comm=comm)
    monkeypatch.delenv("DISTGRAIL_ROOT_SHARE")
    idx = distgrail.build_index(g, dims=16, backend="cpu", comm=comm)
    everywhere(comm, idx.meta["dims_split"] == dims_split(16, size, ROOT_SHARE).tolist(), idx.meta["dims_split"])
