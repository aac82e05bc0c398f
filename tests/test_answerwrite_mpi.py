"""``mpi.answerwrite.write_by_ranks`` (``distgrail query`` of a ``.npy`` under MPI): each rank
writes its own rows of a ``.npy`` or plain text answer file; the bytes are one process's
``write_answers``; a rank that does not see rank 0's temporary sends its answers to rank 0
instead; a failure on any rank leaves no file and no temporary; and which names qualify."""

from __future__ import annotations

import os

import numpy as np
import pytest

from distgrail.io.writers import write_answers
from distgrail.mpi.answerwrite import rank_writable


def test_which_answer_files_the_ranks_write():
    assert rank_writable("a.npy") and rank_writable("A.NPY") and rank_writable("a.txt") and rank_writable("ans")
    for name in ("-", "", None, "a.tsv", "a.csv", "a.parquet", "a.txt.gz", "A.TXT.GZ", "a.tsv.gz"):
        assert not rank_writable(name), name


def _folder(comm, tmp_path_factory) -> str:
    return comm.bcast(str(tmp_path_factory.mktemp("answers")) if comm.Get_rank() == 0 else None, root=0)


def _mine(comm, k, seed):
    from distgrail.mpi.collectives import offsets, split_counts

    every = np.random.default_rng(seed).random(k) < 0.4
    counts = split_counts(k, comm.Get_size())
    at = offsets(counts)
    me = comm.Get_rank()
    return every, counts, every[int(at[me]):int(at[me + 1])]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", ["a.npy", "a.txt", "answers"])
@pytest.mark.parametrize("k", [0, 1, 5, 100_003])
def test_each_rank_writes_its_rows_and_the_bytes_are_one_processs(tmp_path_factory, name, k, monkeypatch):
    from mpi4py import MPI

    import distgrail.mpi.answerwrite as aw

    comm = MPI.COMM_WORLD
    d = _folder(comm, tmp_path_factory)
    every, counts, mine = _mine(comm, k, k)
    monkeypatch.setattr(aw, "WRITE_PIECE_BYTES", 4096)  # several pwrite pieces a rank
    aw.write_by_ranks(comm, os.path.join(d, name), mine, counts)
    seen = None
    if comm.Get_rank() == 0:  # (checked on rank 0, asserted on every rank: no rank left waiting)
        write_answers(every, os.path.join(d, "one_" + name))
        with open(os.path.join(d, name), "rb") as f, open(os.path.join(d, "one_" + name), "rb") as g:
            seen = (f.read() == g.read(), sorted(os.listdir(d)))
    same, listed = comm.bcast(seen, root=0)
    assert same and listed == sorted([name, "one_" + name])  # no temporary left


@pytest.mark.mpi(min_size=2)
def test_a_rank_that_does_not_see_the_file_sends_its_answers_to_rank_0(tmp_path_factory, monkeypatch):
    from mpi4py import MPI

    import distgrail.mpi.answerwrite as aw

    comm = MPI.COMM_WORLD
    d = _folder(comm, tmp_path_factory)
    every, counts, mine = _mine(comm, 5000, 7)
    wrote = []
    if comm.Get_rank() == comm.Get_size() - 1:  # as on another node: rank 0's temporary is not there
        real = os.stat
        monkeypatch.setattr(aw.os, "stat", lambda p, *a, **kw: (_ for _ in ()).throw(FileNotFoundError(p))
                            if ".tmp-" in os.fspath(p) else real(p, *a, **kw))
    real_rows = aw._write_rows
    monkeypatch.setattr(aw, "_write_rows", lambda *a: (wrote.append(len(a[2])), real_rows(*a)))
    aw.write_by_ranks(comm, os.path.join(d, "a.npy"), mine, counts)
    assert comm.allgather(wrote) == [[5000]] + [[]] * (comm.Get_size() - 1)  # rank 0 wrote every answer
    assert comm.bcast(np.array_equal(np.load(os.path.join(d, "a.npy")), every) if comm.Get_rank() == 0 else None)


@pytest.mark.mpi(min_size=2)
def test_a_failed_rank_leaves_no_file_and_no_temporary(tmp_path_factory, monkeypatch):
    from mpi4py import MPI

    import distgrail.mpi.answerwrite as aw
    from distgrail.mpi.errors import RankError

    comm = MPI.COMM_WORLD
    d = _folder(comm, tmp_path_factory)
    _, counts, mine = _mine(comm, 3000, 3)
    if comm.Get_rank() == comm.Get_size() - 1:  # (a full disk: the user's path named, exit status 2, not a bug)
        monkeypatch.setattr(aw, "_pwrite_all", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left on device")))
    out = os.path.join(d, "a.npy")
    with pytest.raises(RankError, match=f"rank {comm.Get_size() - 1}, writing answers .*{out}: cannot write the "
                                        f"output: .*No space left") as e:
        aw.write_by_ranks(comm, out, mine, counts)
    assert not getattr(e.value, "bug", False)
    assert comm.bcast(os.listdir(d) if comm.Get_rank() == 0 else None) == []


@pytest.mark.mpi(min_size=2)
def test_a_failed_creation_on_rank_0_is_the_outputs_error(tmp_path_factory, monkeypatch):
    from mpi4py import MPI

    import distgrail.mpi.answerwrite as aw
    from distgrail.mpi.errors import RankError

    comm = MPI.COMM_WORLD
    d = _folder(comm, tmp_path_factory)
    _, counts, mine = _mine(comm, 300, 4)
    if comm.Get_rank() == 0:
        real = open
        monkeypatch.setattr("builtins.open", lambda p, *a, **kw: (_ for _ in ()).throw(OSError(28, "No space left on "
                            "device")) if ".tmp-" in str(p) else real(p, *a, **kw))
    out = os.path.join(d, "a.txt")
    with pytest.raises(RankError, match=f"rank 0, creating the answers {out}: {out}: cannot write the output") as e:
        aw.write_by_ranks(comm, out, mine, counts)
    assert not e.value.bug
    assert comm.bcast(os.listdir(d) if comm.Get_rank() == 0 else None) == []
