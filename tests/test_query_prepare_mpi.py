"""``distgrail query --backend cpu`` under MPI: every rank prepares the compiled CPU path for its
share of the batch (numba's import, the packed records: :func:`distgrail.query.answer.prepare_cpu`)
on a thread started before rank 0 reads the pairs, for a text pairs file (rank 0 reads it) and for
a ``.npy`` (each rank its own rows); the answers are one process's, and the seconds it took are
reported as ``prepare_seconds``, outside the answer's."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import distgrail

from test_parse_mpi import shared_dir  # noqa: F401 - the fixture: a directory every rank sees

pytest.importorskip("numba")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kind", ["txt", "npy", "npy3", "npy-tsv"])
def test_every_rank_prepares_the_compiled_path_beside_the_read(shared_dir, kind, monkeypatch, capsys):
    from mpi4py import MPI

    from distgrail.cli import main
    from distgrail.query import answer

    comm = MPI.COMM_WORLD
    index = os.path.join(shared_dir, "k.h5")
    pairs = os.path.join(shared_dir, "p.txt" if kind == "txt" else "p.npy")
    k = 6000
    if comm.rank == 0:
        distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", output=index)
        n = distgrail.open_index(index).n
        p = np.random.default_rng(45).integers(0, n, (k, 2))
        if kind == "npy3":  # (k, 3): the expected answers too, read by rank 0
            want = distgrail.open_index(index).query(p[:, 0], p[:, 1], backend="cpu")[0]
            np.save(pairs, np.concatenate([p, want[:, None].astype(np.int64)], axis=1))
        elif kind.startswith("npy"):
            np.save(pairs, p)
        else:
            with open(pairs, "w") as f:
                f.writelines(f"{a} {b}\n" for a, b in p.tolist())
    comm.Barrier()
    calls = []
    real = answer.prepare_cpu

    def recorded(L, pairs_share, search=None, ids=None):
        calls.append((pairs_share, threading.current_thread().name, None if ids is None else (ids.dtype, ids.flags.writeable)))
        return real(L, pairs_share, search, ids)

    monkeypatch.setattr(answer, "prepare_cpu", recorded)
    got = os.path.join(shared_dir, "a.tsv" if kind == "npy-tsv" else f"a.{kind}.npy")
    capsys.readouterr()
    assert main(["query", index, pairs, "-o", got, "--backend", "cpu", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out) if comm.rank == 0 else None
    size = os.path.getsize(pairs)
    share = (size // 16 if kind == "txt" else k) // comm.size
    seen = comm.gather(calls, root=0)
    failed = None
    if comm.rank == 0:  # checked on rank 0; raised after the barrier, so no rank waits
        try:
            # (a .npy's ids as its mapped read gives them, read-only, the file's int64, where each rank
            # reads its own rows: not for a (k, 3) file or a table of answers, which rank 0 reads)
            like = (np.dtype(np.int64), False) if kind == "npy" else None
            assert all(c == [(share, "distgrail-prepare", like)] for c in seen), seen
            assert summary["ranks"] == comm.size and summary["queries"] == k
            assert summary["prepare_seconds"] > 0
            one = os.path.join(shared_dir, "one.tsv" if kind == "npy-tsv" else "one.npy")
            assert main(["query", index, pairs, "-o", one, "--backend", "cpu", "--no-mpi", "--quiet"]) == 0
            if kind == "npy-tsv":
                assert open(got).read() == open(one).read()
            else:
                np.testing.assert_array_equal(np.load(got), np.load(one))
        except Exception as e:  # noqa: BLE001 - raised after the barrier
            failed = e
    comm.Barrier()
    if failed is not None:
        raise failed


@pytest.mark.mpi(min_size=2)
def test_a_failed_read_waits_for_the_preparation_before_the_error(shared_dir, monkeypatch):
    """Rank 0's read refusing an id (the error raised on every rank, the file and line named) ends
    with every rank's preparation thread joined: none left running in numba while the process
    exits (a crash in its exit, seen as a segmentation fault, otherwise)."""
    from mpi4py import MPI

    from distgrail import cli_pairs
    from distgrail.cli import build_parser

    comm = MPI.COMM_WORLD
    index = os.path.join(shared_dir, "k.h5")
    pairs = os.path.join(shared_dir, "bad.txt")
    if comm.rank == 0:
        distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", output=index)
        with open(pairs, "w") as f:
            f.write("1 2\n3 99999999\n" + "4 5\n" * 2000)
    comm.Barrier()
    waits = []
    real = cli_pairs.prepare_beside

    def recorded(*a, **kw):
        wait = real(*a, **kw)
        return lambda: waits.append(True) or wait()

    monkeypatch.setattr(cli_pairs, "prepare_beside", recorded)
    args = build_parser().parse_args(["query", index, pairs, "-o", os.path.join(shared_dir, "a.npy"),
                                      "--backend", "cpu"])
    with pytest.raises(Exception) as e:
        cli_pairs.query_under_mpi(args, comm, pairs)
    seen = comm.gather((bool(waits), "bad.txt:2" in str(e.value) or comm.rank != 0), root=0)
    failed = None
    if comm.rank == 0:
        try:
            assert seen == [(True, True)] * comm.size, (seen, str(e.value))
        except Exception as x:  # noqa: BLE001 - raised after the barrier
            failed = x
    comm.Barrier()
    if failed is not None:
        raise failed
