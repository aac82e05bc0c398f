"""Large index datasets written in parallel blocks (distgrail/indexfile/write.py): the file is byte for
byte the one HDF5 alone writes, it reads back and answers like BFS, a failed block write is the
usual OutputError with no file left; and an existing output is replaced by exchanging names
(distgrail/io/atomic.py), never by a rename over it (ext4 writes the new file back inside such a
rename)."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import distgrail
import distgrail.indexfile.write as ixwrite
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import OutputError
from distgrail.indexfile import layout
from distgrail.io import atomic
from distgrail.io.generate import generate

C = 300_000  # components: uint32 labels; the datasets below are 1-7 MB


def _synthetic():
    """meta and arrays whose casts cover a narrowing cast (int64 -> uint32), a same-size view
    (int32 -> uint32), none (uint64), and 1-, 2- and 3-axis datasets."""
    rng = np.random.default_rng(5)
    meta = {"n_components": C, "n_levels": 70_000, "seed": 1, "dims": 3, "parent_rule": "max-level",
            "source_name": "synthetic", "source_digest": "0" * 64, "source_digest_algorithm": "blake3",
            "n_vertices": C + 17, "n_dag_edges": 1_000_003, "distgrail_version": "test"}
    arrays = {
        "vertex/component": rng.integers(0, C, C + 17).astype(np.int32),
        "dag/indptr": np.sort(rng.integers(0, 1_000_003, C + 1)),
        "dag/indices": rng.integers(0, C, 1_000_003),  # int64, stored uint32
        "dag/level": rng.integers(0, 70_000, C),
        "forest/parent": rng.integers(-1, C, C),
        "forest/subtree_size": rng.integers(1, C, C),
        "labels/dt_post0": rng.integers(0, C, C),
        "labels/intervals": rng.integers(0, C, (3, C, 2)),
        "supports/out": rng.integers(0, 2**63, (C, 3), dtype=np.uint64),
    }
    return meta, arrays


def _write(path, meta, arrays, monkeypatch, in_blocks: bool):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 20 if in_blocks else 1 << 50)
    ixwrite.write_index_file(path, meta, arrays)


@pytest.fixture
def blocks_spy(monkeypatch):
    calls = []
    real = ixwrite._write_block
    monkeypatch.setattr(ixwrite, "_write_block", lambda *a: (calls.append(a[4:]), real(*a))[1])
    return calls


def test_written_in_blocks_the_file_is_byte_identical(tmp_path, monkeypatch, blocks_spy):
    monkeypatch.setattr(layout, "CRC_BLOCK", 40_001)  # odd: block edges split elements
    meta, arrays = _synthetic()
    _write(tmp_path / "hdf5.h5", meta, arrays, monkeypatch, in_blocks=False)
    assert not blocks_spy
    _write(tmp_path / "blocks.h5", meta, arrays, monkeypatch, in_blocks=True)
    with h5py.File(tmp_path / "blocks.h5", "r") as f:  # every dataset of >= 1 MiB went in blocks
        big = sum(-(-f[k].nbytes // 40_001) for k in arrays if f[k].nbytes >= 1 << 20)
        assert big > 300 and len(blocks_spy) == big
        assert f["labels/intervals"].dtype == np.uint32 and not f["labels/intervals"].chunks
    assert (tmp_path / "blocks.h5").read_bytes() == (tmp_path / "hdf5.h5").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["blocks.h5", "hdf5.h5"]


def test_the_pool_writes_the_data_not_hdf5(tmp_path, monkeypatch):
    """Blocks that compute their CRC but write nothing leave zeros after HDF5's first MiB: the
    bytes in the file are the pool's, and HDF5 does not write over them afterwards."""
    meta, arrays = _synthetic()
    monkeypatch.setattr(ixwrite.os, "pwritev", lambda fd, bufs, off: sum(len(b) for b in bufs))
    _write(tmp_path / "x.h5", meta, arrays, monkeypatch, in_blocks=True)
    with h5py.File(tmp_path / "x.h5", "r") as f:
        got = f["dag/indices"][()]
    want = arrays["dag/indices"].astype(np.uint32)
    head = ixwrite.PREFIX_BYTES // 4
    assert (got[:head] == want[:head]).all() and not got[2 * head:].any()


def test_partial_writes_are_completed(tmp_path, monkeypatch):
    meta, arrays = _synthetic()
    real = os.pwritev
    monkeypatch.setattr(ixwrite.os, "pwritev", lambda fd, bufs, off: real(fd, [bufs[0][:300_001]], off))
    _write(tmp_path / "a.h5", meta, arrays, monkeypatch, in_blocks=True)
    monkeypatch.setattr(ixwrite.os, "pwritev", real)
    _write(tmp_path / "b.h5", meta, arrays, monkeypatch, in_blocks=False)
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


@pytest.mark.parametrize("code, reason", [(errno.ENOSPC, "No space left on device"), (errno.EIO, "Input/output error")])
def test_a_failed_block_write_is_an_output_error_and_leaves_no_file(tmp_path, monkeypatch, code, reason):
    meta, arrays = _synthetic()
    out = tmp_path / "x.h5"
    out.write_bytes(b"the old output")
    calls = []
    real = os.pwritev

    def failing(fd, bufs, off):
        calls.append(off)
        if len(calls) == 3:
            raise OSError(code, os.strerror(code))
        return real(fd, bufs, off)

    monkeypatch.setattr(ixwrite.os, "pwritev", failing)
    with pytest.raises(OutputError) as e:
        _write(out, meta, arrays, monkeypatch, in_blocks=True)
    assert str(e.value) == f"{out}: cannot write the output: {reason}"
    assert os.listdir(tmp_path) == ["x.h5"] and out.read_bytes() == b"the old output"


def test_an_index_written_in_blocks_reads_back_and_answers_like_bfs(tmp_path, monkeypatch, blocks_spy):
    g = generate("scale-free", 3000, 4, seed=2)
    built = distgrail.build_index((g.src, g.dst), dims=4, backend="cpu")
    monkeypatch.setattr(layout, "CRC_BLOCK", 997)
    monkeypatch.setattr(ixwrite, "PREFIX_BYTES", 1)  # datasets this small: HDF5 writes them whole, the pool again
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)
    built.save(tmp_path / "blocks.h5")
    assert blocks_spy
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 50)
    built.save(tmp_path / "hdf5.h5")
    assert (tmp_path / "blocks.h5").read_bytes() == (tmp_path / "hdf5.h5").read_bytes()
    idx = distgrail.open_index(tmp_path / "blocks.h5")
    rng = np.random.default_rng(3)
    u, v = rng.integers(0, 3000, 2000), rng.integers(0, 3000, 2000)
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(idx.reachable(u, v, backend="cpu"), bfs_reachable(ip, ix, u, v))
    r = subprocess.run([sys.executable, "-m", "distgrail", "info", str(tmp_path / "blocks.h5")],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0 and "3000" in r.stdout.replace(",", ""), r.stdout + r.stderr


def test_prefix_is_one_run_of_whole_rows():
    assert ixwrite._prefix((10,), 8, 20) == ((slice(0, 3),), 3)
    assert ixwrite._prefix((3, 100, 2), 4, 100) == ((0, slice(0, 13)), 26)  # rows of 2 x 4 bytes
    assert ixwrite._prefix((3, 10, 2), 4, 100) == ((slice(0, 2),), 40)  # a plane is 80 bytes
    assert ixwrite._prefix((3, 10, 2), 4, 10_000) == ((slice(0, 3),), 60)  # all of it
    assert ixwrite._sel_shape((3, 100, 2), (0, slice(0, 13))) == (13, 2)


# -- replacing an existing output (distgrail/io/atomic.py) -------------------------------------


def _no_rename_over(monkeypatch):
    def refuse(*a):
        raise AssertionError(f"renamed over or linked an existing output: {a}")
    monkeypatch.setattr(atomic.os, "replace", refuse)
    monkeypatch.setattr(atomic.os, "link", refuse)


def test_a_large_output_is_replaced_by_an_exchange_and_removed_later(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "ASIDE_MIN_BYTES", 10)
    out = tmp_path / "x.h5"
    out.write_bytes(b"the old index, long enough")
    old = open(out, "rb")  # the old file stays readable by whoever has it open
    later = []
    real_later = atomic._remove_later
    monkeypatch.setattr(atomic, "_remove_later", lambda p: (later.append(p), real_later(p)))
    _no_rename_over(monkeypatch)
    with atomic.atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"the new index")
    assert out.read_bytes() == b"the new index"
    assert later == [str(tmp_path / f".x.h5.old-{os.getpid()}")]
    deadline = time.time() + 10
    while len(os.listdir(tmp_path)) > 1 and time.time() < deadline:
        time.sleep(0.05)
    assert os.listdir(tmp_path) == ["x.h5"]
    assert old.read() == b"the old index, long enough" and os.fstat(old.fileno()).st_nlink == 0
    old.close()


def test_a_small_output_is_replaced_by_an_exchange_and_removed_at_once(tmp_path, monkeypatch):
    out = tmp_path / "x.h5"
    out.write_bytes(b"old")
    _no_rename_over(monkeypatch)
    later = []
    monkeypatch.setattr(atomic, "_remove_later", later.append)
    with atomic.atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"new")
    assert out.read_bytes() == b"new" and os.listdir(tmp_path) == ["x.h5"] and not later


def test_a_new_output_is_a_plain_rename_and_no_exchange(tmp_path, monkeypatch):
    out = tmp_path / "x.h5"
    assert not atomic._exchange(tmp_path / "nothing", out)
    (tmp_path / "d").mkdir()
    assert not atomic._exchange(tmp_path / "nothing", tmp_path / "d")  # not a regular file
    with atomic.atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"first")
    assert out.read_bytes() == b"first" and sorted(os.listdir(tmp_path)) == ["d", "x.h5"]


def test_rewriting_an_index_by_the_command_line_exchanges_names(tmp_path, monkeypatch):
    g = generate("scale-free", 2000, 3, seed=4)
    built = distgrail.build_index((g.src, g.dst), dims=2, backend="cpu")
    built.save(tmp_path / "x.h5")
    first = os.stat(tmp_path / "x.h5").st_ino
    swaps = []
    real = atomic._exchange
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: (swaps.append(b), real(a, b))[1])
    built.save(tmp_path / "x.h5")
    assert swaps == [str(tmp_path / "x.h5")] and os.stat(tmp_path / "x.h5").st_ino != first
    assert os.listdir(tmp_path) == ["x.h5"] and distgrail.open_index(tmp_path / "x.h5").n == 2000


def test_the_write_benchmark_compares_both_writers(tmp_path, monkeypatch, capsys, blocks_spy):
    from distgrail.benchmarks import write

    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 20)
    assert write.main(["--mb", "20", "--repeat", "1", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "files byte-identical: yes" in out and "parallel blocks" in out and "rename over the old file" in out
    assert re.search(r"floor, \d+ threads, 1 file +\d+\.\d{3} +\d+\.\d\d\n", out), out
    assert re.search(r"floor, \d+ threads, 8 files +\d+\.\d{3} +\d+\.\d\d\n", out), out
    assert blocks_spy and os.listdir(tmp_path) == []
    assert layout.PARALLEL_MIN_BYTES == 1 << 20 and atomic._exchange.__name__ == "_exchange"  # restored


def _streamed(a, cuts, closed):
    """``a`` as a StreamedArray in pieces cut at ``cuts``; ``closed`` collects close's argument."""
    bounds = [0, *cuts, a.size]
    return ixwrite.StreamedArray(a.size, a.dtype, lambda: (a[x:y] for x, y in zip(bounds, bounds[1:])),
                                    closed.append)


@pytest.mark.parametrize("in_blocks", [True, False])
def test_a_streamed_dataset_is_written_byte_identical(tmp_path, monkeypatch, in_blocks):
    """The DAG rows of a partitioned build arrive in pieces (odd sizes, an empty one, CRC
    blocks split across pieces): the file is the one written from the whole array."""
    monkeypatch.setattr(layout, "CRC_BLOCK", 40_001)
    meta, arrays = _synthetic()
    _write(tmp_path / "whole.h5", meta, arrays, monkeypatch, in_blocks)
    closed = []
    ind = arrays["dag/indices"]
    _write(tmp_path / "pieces.h5", meta, {**arrays, "dag/indices": _streamed(ind, [7, 7, 300_001, 999_999], closed)},
           monkeypatch, in_blocks)
    assert closed == [False]
    assert (tmp_path / "pieces.h5").read_bytes() == (tmp_path / "whole.h5").read_bytes()
    with h5py.File(tmp_path / "pieces.h5", "r") as f:
        np.testing.assert_array_equal(f["dag/indices"][()], ind)


@pytest.mark.parametrize("cuts, size_off, what", [([10], -1, "more than its"), ([10], +1, "of its")])
def test_a_streamed_dataset_of_the_wrong_size_fails_and_leaves_no_file(tmp_path, monkeypatch, cuts, size_off, what):
    meta, arrays = _synthetic()
    ind = arrays["dag/indices"]
    closed = []
    src = _streamed(ind, cuts, closed)
    src.size += size_off
    src.shape = (src.size,)
    with pytest.raises(ValueError, match=what):
        _write(tmp_path / "x.h5", meta, {**arrays, "dag/indices": src}, monkeypatch, True)
    assert closed == [True] and os.listdir(tmp_path) == []
