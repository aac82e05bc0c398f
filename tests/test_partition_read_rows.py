"""A partitioned build's read of a ``.h5`` graph (:func:`distgrail.mpi.partition_read._h5_block`):
each rank reads the offsets of its own rows only (every rank read all n + 1 of them before: 8
bytes a vertex on every rank's host, 1 GB at 2^27 vertices), finds its rows by bisection over
the file's offsets, and checks its rows' order; the blocks of all ranks are the file's edges,
each once, for any number of ranks, empty blocks included. Serial (each rank's call made in
turn); tests/test_graph_file_blocks_mpi.py reads under MPI."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io import binary
from distgrail.io.binary import write_binary_graph
from distgrail.io.graph import EdgeGraph
from distgrail.mpi import partition_read
from distgrail.mpi.partition_read import _h5_block


def _file(tmp_path, n=3000, m=40000, seed=2):
    rng = np.random.default_rng(seed)
    path = str(tmp_path / "g.h5")
    write_binary_graph(EdgeGraph(n=n, src=rng.integers(0, n, m).astype(np.int32),
                                 dst=rng.integers(0, n, m).astype(np.int32)), path)
    with h5py.File(path, "r") as f:
        indptr, indices = f["csr/indptr"][()], f["csr/indices"][()]
    return path, np.repeat(np.arange(n), np.diff(indptr)), indices


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8])
def test_the_ranks_blocks_are_the_files_edges_each_once(tmp_path, size):
    path, src, dst = _file(tmp_path)
    got = [_h5_block(path, me, size) for me in range(size)]
    np.testing.assert_array_equal(np.concatenate([g[2] for g in got]), src)
    np.testing.assert_array_equal(np.concatenate([g[3] for g in got]), dst)
    assert all(abs(g[3].size - dst.size / size) <= 3000 for g in got)  # balanced by edges, to a row


def test_more_ranks_than_edges_leaves_some_blocks_empty(tmp_path):
    path, src, dst = _file(tmp_path, n=50, m=3)
    got = [_h5_block(path, me, 7) for me in range(7)]
    assert sum(g[3].size for g in got) == 3 and any(g[3].size == 0 for g in got)
    np.testing.assert_array_equal(np.concatenate([g[3] for g in got]), dst)


def test_a_rank_reads_the_offsets_of_its_rows_only(tmp_path, monkeypatch):
    path, _, _ = _file(tmp_path)
    asked = []
    real = binary._read_checked

    def spy(f, names, p, ranges=None):
        asked.append((names, dict(ranges or {})))
        return real(f, names, p, ranges)

    monkeypatch.setattr(binary, "_read_checked", spy)
    _h5_block(path, 1, 4)
    ptr = [r["csr/indptr"] for names, r in asked if names == ("csr/indptr",)]
    assert len(ptr) == 1 and ptr[0][1] - ptr[0][0] < 1000  # about a quarter of 3,001, not all


def test_offsets_out_of_order_in_one_ranks_block_are_refused_by_that_rank(tmp_path):
    """The order is checked by the rank that reads those rows (under MPI its error is every
    rank's: run_shared); the ends, 0 and m, by every rank."""
    path, _, _ = _file(tmp_path)
    with h5py.File(path, "r+") as f:
        a = f["csr/indptr"][...]
        a[2500] = a[2499] - 1  # in the last of 4 blocks
        f["csr/indptr"][...] = a
        del f.attrs["csr_crc32"]
    with pytest.raises(GraphFormatError, match="CSR arrays disagree with n and m"):
        _h5_block(path, 3, 4)
    _h5_block(path, 0, 4)  # (its rows are in order)


def test_the_ranks_crc_pieces_join_into_the_files(tmp_path):
    """Rank 0 joins every rank's pieces of the offsets, then of the edges (_check_csr): the
    file's ``csr_crc32``, for any number of ranks; a changed offset in the middle is caught."""
    path, _, _ = _file(tmp_path)
    for size in (1, 3, 4):
        got = [_h5_block(path, me, size) for me in range(size)]
        partition_read._check_csr(path, got[0][7], [(g[7]["ptr_piece"], g[7]["piece"]) for g in got])
    with h5py.File(path, "r+") as f:
        a = f["csr/indptr"][...]
        i = 1500 + int(np.flatnonzero(a[1500:-1] < a[1501:])[0])
        a[i] += 1  # a row's first edge moved by one: the order holds, the bytes do not
        f["csr/indptr"][...] = a
    got = [_h5_block(path, me, 3) for me in range(3)]
    with pytest.raises(GraphFormatError, match="changed"):
        partition_read._check_csr(path, got[0][7], [(g[7]["ptr_piece"], g[7]["piece"]) for g in got])
