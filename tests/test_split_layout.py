"""The split index layout (issue 42): a main file and part files tied by HDF5 virtual datasets.

What is checked: the CRC-32 of pieces joins to the whole dataset's (zlib's own for every cut);
a split index holds the single file's arrays and checksums (so its seal), answers as the single
file does (and as BFS), and ``convert --layout single`` gives the single file byte for byte;
plain h5py reads the main file; a part missing, moved, from another build, cut short, damaged or
of another shape is an IndexFormatError naming the part (``query``: exit 2), never zeros;
earlier parts are removed when an index is written again with fewer."""

from __future__ import annotations

import json
import os
import random
import shutil
import zlib

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.errors import IndexFormatError
from distgrail.indexfile import layout
from distgrail.indexfile.layout import block_crcs, crc32_combine, index_parts, join_pieces, pieces, remove_parts
from distgrail.indexfile.split import SPLIT, write_split_index


def test_crc32_combine_is_zlibs():
    rng = random.Random(5)
    for _ in range(200):
        a, b = os.urandom(rng.randrange(0, 300)), os.urandom(rng.randrange(0, 300))
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    for n in (1 << 20, (5 << 20) + 3):  # lengths of real pieces, a block and more
        a, b = os.urandom(rng.randrange(1, 100)), os.urandom(n)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    for _ in range(50):  # past 2^32 bytes (no zlib.crc32 to compare): joining is associative
        c1, c2, c3 = (rng.getrandbits(32) for _ in range(3))
        l2, l3 = rng.randrange(1, 1 << 40), rng.randrange(1, 1 << 40)
        assert crc32_combine(crc32_combine(c1, c2, l2), c3, l3) == crc32_combine(c1, crc32_combine(c2, c3, l3), l2 + l3)


@pytest.mark.parametrize("block", [1, 7, 64, 1000])
def test_pieces_cut_anywhere_join_to_the_block_crcs(block):
    rng = np.random.default_rng(block)
    data = rng.integers(0, 255, 3001, dtype=np.uint8)
    want = block_crcs(data, block)
    for _ in range(20):
        cuts = sorted({0, data.size, *rng.integers(0, data.size, rng.integers(0, 6)).tolist()})
        got = []
        for a, b in zip(cuts, cuts[1:]):
            for k, s, e in pieces(a, b - a, block):
                got.append((a + s, k, zlib.crc32(data[a + s:a + e].tobytes()), e - s))
        assert join_pieces(data.size, block, got) == want
    with pytest.raises(ValueError, match="tile"):
        join_pieces(data.size, block, [p for p in got if p[0] != 0] if len(got) > 1 else [])
    if len(got) > 1:
        with pytest.raises(ValueError):
            join_pieces(data.size, block, got + [got[-1]])


def _graphs():
    """A real graph and generated ones: cycles, self-loops, duplicate edges, isolated vertices,
    one vertex, a deep chain, a dense DAG, one giant SCC."""
    n = 400
    chain = (np.arange(n - 1), np.arange(1, n))
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 300, 3000), rng.integers(0, 300, 3000)
    mixed = (np.r_[src, 5, 5, 7, 7], np.r_[dst, 5, 6, 8, 8])  # self-loop, duplicate edges, cycles
    dense = np.triu_indices(60, 1)
    ring = (np.arange(200), (np.arange(200) + 1) % 200)  # one giant SCC
    return {"bundled": distgrail.bundled_graph(), "chain": chain, "mixed": mixed,
            "dense": (dense[0], dense[1]), "ring": ring, "one": (np.zeros(0, int), np.zeros(0, int), 1)}


def _as_graph(g):
    from distgrail.io.read import as_graph

    if isinstance(g, tuple) and len(g) == 3:
        return as_graph((g[0], g[1]), num_vertices=g[2])
    return as_graph(g)


@pytest.fixture
def small_blocks(monkeypatch):
    """CRC blocks of 64 bytes and block writes from 1 KiB: blocks cross the parts' edges."""
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1024)


def _attrs(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda k, o: out.__setitem__(k, (o.dtype.str, o.shape, o.attrs.get("crc32_block"),
                                                      o.attrs.get("crc32", np.zeros(0)).tolist()))
                     if isinstance(o, h5py.Dataset) else None)
        return out, f.attrs[layout.SEAL]


@pytest.mark.parametrize("name", list(_graphs()))
@pytest.mark.parametrize("parts", [1, 3])
def test_split_index_is_the_single_index(tmp_path, small_blocks, name, parts):
    g = _as_graph(_graphs()[name])
    idx = distgrail.build_index(g, dims=3, seed=1, backend="cpu")
    single, split, back = (str(tmp_path / x) for x in ("single.h5", "split.h5", "back.h5"))
    idx.save(single)
    write_split_index(split, idx.meta, idx.arrays, parts=parts)
    s_sets, s_seal = _attrs(single)
    p_sets, p_seal = _attrs(split)
    assert p_sets == s_sets and p_seal == s_seal  # same arrays' types, shapes and checksums: the same seal
    with h5py.File(split, "r") as f:  # the large datasets are virtual, their rows in the parts
        virtual = {k for k in SPLIT if k in f and f[k].is_virtual}
        assert virtual == {k for k in SPLIT if k in idx.arrays and np.size(idx.arrays[k])}
        for k in virtual:  # plain h5py reads the values
            assert np.array_equal(f[k][()], idx.arrays[k])
    assert sorted(os.listdir(tmp_path)) == sorted(["single.h5", "split.h5"] + [os.path.basename(p) for p in
                                                                               index_parts(split)])
    assert len(index_parts(split)) == parts
    got = distgrail.open_index(split)
    assert got.meta["layout"] == "split" and got.meta["parts"] == parts
    for k, a in idx.arrays.items():
        assert np.array_equal(got.arrays[k], a), k
    got.save(back)
    with open(back, "rb") as a, open(single, "rb") as b:
        assert a.read() == b.read()
    n = got.n
    if n:
        rng = np.random.default_rng(0)
        s, t = rng.integers(0, n, 500), rng.integers(0, n, 500)
        indptr, indices = csr_of(g)
        assert np.array_equal(got.reachable(s, t), bfs_reachable(indptr, indices, s, t))


@pytest.fixture
def split_index(tmp_path, small_blocks):
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    path = str(tmp_path / "idx.h5")
    write_split_index(path, idx.meta, idx.arrays, parts=3)
    return path


def _bundled_split(tmp_path, parts: int = 3):
    """``(path, index)``: the bundled graph's index written split in ``parts`` at tmp_path/idx.h5."""
    path = str(tmp_path / "idx.h5")
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    write_split_index(path, idx.meta, idx.arrays, parts=parts)
    return path, idx


def _python(script, timeout, preexec_fn=None):
    """``python -c script`` with this tree importable: the CompletedProcess (text output)."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False, preexec_fn=preexec_fn)


def _refused(path, *words):
    with pytest.raises(IndexFormatError) as e:
        distgrail.open_index(path)
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


def test_a_missing_part_is_named(split_index):
    p = index_parts(split_index)[1]
    os.remove(p)
    msg = _refused(split_index, os.path.basename(p), "missing", "restore", "distgrail index")
    assert "merges" not in msg  # (convert cannot merge a split index missing a part)


@pytest.mark.parametrize("kind,says", [("fifo", "a FIFO (named pipe)"), ("dir", "a directory")])
def test_a_part_that_is_no_regular_file_is_named_not_waited_on(split_index, kind, says):
    """A FIFO in a part's place blocked every reader's open of it for ever (query, info, convert,
    update, pairs, under MPI too: a fuzzing reviewer, session 41); a directory there was
    '[Errno 21] Is a directory: 9'. Run in a child with a time limit: before, it never ended."""
    p = index_parts(split_index)[1]
    os.remove(p)
    os.mkfifo(p) if kind == "fifo" else os.mkdir(p)
    r = _python(f"import distgrail\ntry:\n    distgrail.open_index({split_index!r})\nexcept Exception as e:\n"
                f"    print(type(e).__name__, e)", timeout=60)
    assert r.stdout.startswith("IndexFormatError ") and os.path.basename(p) in r.stdout, r
    assert f"is {says}, not a regular file" in r.stdout and "damaged index" in r.stdout, r.stdout


def test_a_main_file_moved_without_its_parts_is_refused(split_index, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    moved = str(tmp_path / "elsewhere" / "idx.h5")
    shutil.copy(split_index, moved)
    _refused(moved, "missing", "elsewhere")
    for p in index_parts(split_index):  # moved with its parts: it opens
        shutil.copy(p, os.path.join(tmp_path, "elsewhere", os.path.basename(p)))
    assert distgrail.open_index(moved).meta["parts"] == 3


def test_a_part_of_another_build_is_refused(split_index, tmp_path):
    idx = distgrail.open_index(split_index)
    other = str(tmp_path / "other.h5")
    write_split_index(other, idx.meta, idx.arrays, parts=3)
    mine = index_parts(split_index)[2]
    shutil.copy(index_parts(other)[2], mine)
    _refused(split_index, os.path.basename(mine), "another build")


def test_a_damaged_or_short_part_is_refused(split_index):
    p = index_parts(split_index)[0]
    size = os.path.getsize(p)
    with open(p, "r+b") as f:  # the last bytes are the end of the last dataset's rows
        f.seek(size - 8)
        f.write(b"\xff" * 8)
    _refused(split_index, "CRC-32 mismatch")
    with open(p, "r+b") as f:
        f.truncate(size - 64)
    msg = _refused(split_index, "idx.h5")
    assert os.path.basename(p) in msg or "damaged" in msg


def test_a_part_of_another_shape_is_refused(split_index):
    p = index_parts(split_index)[1]
    with h5py.File(p, "r+") as f:
        a = f["labels/intervals"][()]
        del f["labels/intervals"]
        f.create_dataset("labels/intervals", data=a[:, :-1])
    _refused(split_index, os.path.basename(p), "labels/intervals")


def test_a_part_that_is_not_a_part_is_refused(split_index):
    p = index_parts(split_index)[2]
    with h5py.File(p, "r+") as f:
        f.attrs["format"] = np.bytes_(b"something")
    _refused(split_index, os.path.basename(p), "not a part")


def test_written_again_the_earlier_parts_go_once_the_new_index_is_in_place(split_index, tmp_path):
    idx = distgrail.open_index(split_index)
    old = index_parts(split_index)
    (tmp_path / "idx.h5.part9x").write_text("not a part")  # not a part's name: left alone
    (tmp_path / "idx.h5.0123abcd.part7").write_text("not HDF5")  # a part's name, not a part: left alone
    write_split_index(split_index, idx.meta, idx.arrays, parts=2)
    new = index_parts(split_index)
    assert len(new) == 2 and not set(new) & set(old) and not any(os.path.exists(p) for p in old)
    assert sorted(os.listdir(tmp_path)) == sorted(["idx.h5", "idx.h5.part9x", "idx.h5.0123abcd.part7"]
                                                  + [os.path.basename(p) for p in new])
    renamed = str(tmp_path / "renamed.h5")  # an index renamed away keeps its parts, named after idx.h5
    write_split_index(renamed, idx.meta, idx.arrays, parts=1)
    kept = index_parts(renamed)
    os.rename(renamed, str(tmp_path / "moved.h5"))
    for p in kept:
        os.rename(p, p.replace("renamed.h5", "idx.h5"))
    idx.save(split_index)  # a one-file index over a split one: its parts go too, not another index's
    assert index_parts(split_index) == [] and not any(os.path.exists(p) for p in new)
    assert all(os.path.exists(p.replace("renamed.h5", "idx.h5")) for p in kept)
    assert remove_parts(split_index, None) == []


def test_a_failed_write_leaves_the_earlier_split_index_whole(split_index, tmp_path, monkeypatch):
    from distgrail.indexfile import write as w

    idx = distgrail.open_index(split_index)
    before = sorted(os.listdir(tmp_path))

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w, "_write_file", full)  # the main file's write fails, after the new parts
    with pytest.raises(OSError, match="No space"):
        write_split_index(split_index, idx.meta, idx.arrays, parts=3)
    assert sorted(os.listdir(tmp_path)) == before
    assert distgrail.open_index(split_index).C == idx.C


@pytest.mark.parametrize("name", ["a%b.h5", "a%%s.h5", "ä b.h5"])
def test_odd_file_names(tmp_path, name):
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    path = str(tmp_path / name)
    write_split_index(path, idx.meta, idx.arrays, parts=2)
    assert len(index_parts(path)) == 2
    got = distgrail.open_index(path)
    assert np.array_equal(got.arrays["labels/intervals"], idx.arrays["labels/intervals"])
    with h5py.File(path, "r") as f:  # plain h5py finds the parts too
        assert np.array_equal(f["labels/intervals"][()], idx.arrays["labels/intervals"])


def test_cli_index_split_convert_and_errors(tmp_path, capsys):
    single, split, merged = (str(tmp_path / x) for x in ("s.h5", "p.h5", "m.h5"))
    assert main(["index", "bundled", "-o", single, "--quiet", "--backend", "cpu"]) == 0
    assert main(["index", "bundled", "-o", split, "--quiet", "--backend", "cpu", "--layout", "split"]) == 0
    assert os.path.isfile(index_parts(split)[0])
    assert main(["convert", split, "--layout", "single", "-o", merged, "--quiet"]) == 0
    with open(merged, "rb") as a, open(single, "rb") as b:
        assert a.read() == b.read()
    assert main(["info", split, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["layout"] == "split" and info["part_files"] == [os.path.basename(p) for p in index_parts(split)]
    assert info["size_bytes"] == os.path.getsize(split) + sum(os.path.getsize(p) for p in index_parts(split))
    a1, a2 = str(tmp_path / "a1.txt"), str(tmp_path / "a2.txt")
    assert main(["query", single, "bundled", "-o", a1, "--quiet", "--backend", "cpu"]) == 0
    assert main(["query", split, "bundled", "-o", a2, "--quiet", "--backend", "cpu"]) == 0
    assert open(a1).read() == open(a2).read()
    capsys.readouterr()
    assert main(["convert", single, "-o", str(tmp_path / "x.h5")]) == 2  # an index needs --layout
    assert "--layout" in capsys.readouterr().err
    assert main(["convert", "bundled", "--layout", "single", "-o", str(tmp_path / "y.h5")]) == 2
    assert "not a distgrail index" in capsys.readouterr().err
    for bad in ("0", "1025"):  # a part file each: bounded, and refused before the index is read
        assert main(["convert", single, "--layout", "split", "--parts", bad, "-o", str(tmp_path / "z.h5")]) == 2
        assert f"--parts must be 1..1024 (part files of a split index), got {bad}" in capsys.readouterr().err
    with pytest.raises(distgrail.errors.DistGrailError, match="at least one part file, got parts=0"):
        distgrail.open_index(single).save(str(tmp_path / "z.h5"), layout="split", parts=0)
    assert not [p for p in os.listdir(tmp_path) if p.startswith("z")]
    gone = index_parts(split)[0]
    os.remove(gone)
    assert main(["query", split, "bundled", "--quiet", "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert os.path.basename(gone) in err and "missing" in err
    assert not os.path.exists(tmp_path / "x.h5") and not os.path.exists(tmp_path / "y.h5")


def test_rows_held_by_other_ranks_are_not_an_index_to_write_or_query(tmp_path):
    from distgrail.indexfile.split import Rows

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    iv = idx.arrays["labels/intervals"]
    arrays = {**idx.arrays, "labels/intervals": Rows(iv.shape, iv.dtype, 0, iv[:1])}
    with pytest.raises(IndexFormatError, match="some rows only"):
        write_split_index(str(tmp_path / "x.h5"), idx.meta, arrays)
    part = distgrail.Index(idx.meta, arrays)
    with pytest.raises(distgrail.errors.DistGrailError, match="open_index"):
        part.reachable(0, 1)
    assert os.listdir(tmp_path) == []


@pytest.mark.gpu
def test_split_index_built_on_a_gpu_is_the_single_file(tmp_path):
    g = _as_graph(_graphs()["mixed"])
    single, split = str(tmp_path / "s.h5"), str(tmp_path / "p.h5")
    distgrail.build_index(g, dims=4, backend="cpu", output=single)
    distgrail.build_index(g, dims=4, backend="gpu", output=split, layout="split")
    assert os.path.isfile(index_parts(split)[0])
    distgrail.open_index(split).save(str(tmp_path / "m.h5"))
    with open(single, "rb") as a, open(tmp_path / "m.h5", "rb") as b:
        assert a.read() == b.read()


def test_a_deferred_dataset_of_a_split_index_reads_slices_across_parts(split_index):
    """``read_index_file(defer=...)`` (the spread queries' rows) on a split index: slices across
    the parts' edges and CRC blocks equal the values; a damaged part is found at the slice read."""
    from distgrail.indexfile.read import Deferred, read_index_file

    want = distgrail.open_index(split_index).arrays["dag/indices"]
    meta, arrays = read_index_file(split_index, defer=("dag/indices",))
    d = arrays["dag/indices"]
    assert isinstance(d, Deferred) and len(d.spans) == 3 and d.shape == want.shape
    rng = np.random.default_rng(1)
    for lo, hi in [(0, want.size), (0, 1), (want.size - 1, want.size)] + [
            tuple(sorted(rng.integers(0, want.size, 2))) for _ in range(30)]:
        assert np.array_equal(d.read(lo, hi), want[lo:hi]), (lo, hi)
    first, n, part, off = d.spans[1]
    with open(part, "r+b") as f:  # the middle part's first byte of /dag/indices
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0xFF]))
    lo = first // want.itemsize
    with pytest.raises(IndexFormatError, match="CRC-32 mismatch"):
        d.read(lo, lo + 1)
    os.remove(index_parts(split_index)[2])
    with pytest.raises(IndexFormatError, match="missing"):
        read_index_file(split_index, defer=("dag/indices",))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the open descriptors in /proc/self/fd")
def test_an_index_of_many_parts_opens_within_few_descriptors(tmp_path):
    """An index split in 150 parts (a part per rank of a large job) opens under a soft limit of
    open files below its part count: the reader keeps at most MAX_OPEN_PARTS parts open as HDF5
    and one descriptor per part (it once held one per part and dataset), raising the soft limit
    toward the hard one when it runs out."""
    import resource

    from distgrail.indexfile.read_split import MAX_OPEN_PARTS

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    path = str(tmp_path / "many.h5")
    write_split_index(path, idx.meta, idx.arrays, parts=150)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = len(os.listdir("/proc/self/fd")) + MAX_OPEN_PARTS + 30
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(room, hard), hard))
    try:
        got = distgrail.open_index(path)
        after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert after == min(room, hard)  # (raised for the read only: restored, children inherit the user's)
    assert all(np.array_equal(got.arrays[k], idx.arrays[k]) for k in idx.arrays)


def test_a_failing_block_read_is_a_named_index_error(split_index, monkeypatch):
    """An I/O error while a part's blocks are read (EIO, a disk gone) is an IndexFormatError naming
    the index (``query``: exit 2), not a bare OSError."""
    import errno

    from distgrail.indexfile import read_split

    def fail(fd, view, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(read_split, "read_block", fail)
    _refused(split_index, "idx.h5", "damaged index", "Input/output error")


def test_sigterm_before_the_main_file_leaves_no_new_part(tmp_path):
    """SIGTERM after the parts are renamed into place but before the main file is: the new parts
    are removed with the temporaries (they were left behind, of no index), the index written
    before stays whole and opens."""
    path, idx = _bundled_split(tmp_path)
    before = sorted(os.listdir(tmp_path))
    script = (f"import os, signal, distgrail\nfrom distgrail.indexfile import split, write\n"
              f"def killed(*a, **k):\n    os.kill(os.getpid(), signal.SIGTERM)\n"
              f"write.write_index_file = killed\n"
              f"idx = distgrail.open_index({path!r})\nsplit.write_split_index({path!r}, idx.meta, idx.arrays, parts=4)\n")
    r = _python(script, 120)
    assert r.returncode == -15, r.stderr
    assert sorted(os.listdir(tmp_path)) == before
    assert distgrail.open_index(path).C == idx.C


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_as_the_main_file_lands_keeps_the_new_index_whole(tmp_path, sig):
    """SIGTERM or SIGINT right after the main file is renamed into place (before the writer could
    say its parts are no longer provisional): the signal waits for that step, and the writer's
    error path (SIGINT's KeyboardInterrupt) leaves the parts of a main file in place, so the new
    index stays with every part and opens; the replaced index's parts are gone or going."""
    path, idx = _bundled_split(tmp_path)
    script = (f"import os, signal, distgrail\nfrom distgrail.io import atomic\nfrom distgrail.indexfile import split\n"
              f"real = atomic._exchange\n"
              f"def exchange(tmp, path):\n"
              f"    done = real(tmp, path)\n"
              f"    if not done:\n        os.replace(tmp, path)\n"
              f"    if path.endswith('idx.h5'):\n        os.kill(os.getpid(), signal.{sig})\n"
              f"    return True\n"
              f"atomic._exchange = exchange\n"
              f"idx = distgrail.open_index({path!r})\nsplit.write_split_index({path!r}, idx.meta, idx.arrays, parts=4)\n"
              f"print('not reached')\n")
    r = _python(script, 120)
    assert r.returncode != 0 and "not reached" not in r.stdout, r.stderr
    got = distgrail.open_index(path)
    assert got.meta["parts"] == 4 and len(index_parts(path)) == 4
    assert len(os.listdir(tmp_path)) == 5  # the replaced index's 3 parts went in the same step (none left behind)
    assert all(np.array_equal(got.arrays[k], idx.arrays[k]) for k in idx.arrays)


@pytest.mark.parametrize("parts", [3, 40])
def test_each_part_is_opened_once_and_read_whole_while_replaced(tmp_path, monkeypatch, parts):
    """A read opens each of 3 part files once as HDF5 (not once per dataset it holds); a part that
    an update in place replaces and removes while its blocks are being read is still read whole
    (the descriptor taken when it was checked keeps its inode; past the 31 parts kept open, a part
    met again is opened through that descriptor, not its name), as a one-file index is."""
    from distgrail.indexfile import read_split

    split_index = str(tmp_path / "idx.h5")
    made = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    write_split_index(split_index, made.meta, made.arrays, parts=parts)

    by_name, as_hdf5 = [], []
    real_file, real_open = h5py.File, os.open

    def counted_file(name, *a, **k):
        if not isinstance(name, (str, os.PathLike)):  # (a part, through its descriptor)
            as_hdf5.append(name)
        return real_file(name, *a, **k)

    def counted_open(name, *a, **k):
        if ".part" in os.fspath(name):
            by_name.append(os.fspath(name))
        return real_open(name, *a, **k)

    monkeypatch.setattr(h5py, "File", counted_file)
    monkeypatch.setattr(os, "open", counted_open)
    want = distgrail.open_index(split_index)
    monkeypatch.setattr(h5py, "File", real_file)
    monkeypatch.setattr(os, "open", real_open)
    assert len(by_name) == len(set(by_name)) == parts  # each part's name opened once, its descriptor held
    assert len(as_hdf5) == parts or parts > 31  # each opened as HDF5 once while 31 stay open
    real_read, replaced, calls = read_split.read_block, [], []

    def replacing(fd, view, offset):
        calls.append(1)
        if not replaced and len(calls) == 3:  # a few blocks in: the index is written again, its parts replaced
            replaced.append(True)
            write_split_index(split_index, want.meta, want.arrays, parts=2)
        return real_read(fd, view, offset)

    monkeypatch.setattr(read_split, "read_block", replacing)
    before = set(index_parts(split_index))
    got = distgrail.open_index(split_index)
    assert replaced and not before & set(index_parts(split_index))
    assert all(np.array_equal(got.arrays[k], want.arrays[k]) for k in want.arrays)


def test_sigint_ignored_before_the_main_file_ends_the_write_and_keeps_the_old_index(tmp_path):
    """SIGINT while the parts are in place and the main file not yet, in a process that ignores
    SIGINT (a script's background job): the new parts are removed and the write ends there, with
    a message naming the index (it once went on to put a main file without parts in place, exit
    0); the index written before is whole."""
    import signal

    path, idx = _bundled_split(tmp_path)
    before = sorted(os.listdir(tmp_path))
    script = (f"import os, signal, distgrail\nfrom distgrail.indexfile import split, write\n"
              f"real = write.write_index_file\n"
              f"def interrupted(*a, **k):\n    os.kill(os.getpid(), signal.SIGINT)\n    return real(*a, **k)\n"
              f"write.write_index_file = interrupted\n"
              f"idx = distgrail.open_index({path!r})\nsplit.write_split_index({path!r}, idx.meta, idx.arrays, parts=4)\n"
              f"print('not reached')\n")
    r = _python(script, 120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode != 0 and "not reached" not in r.stdout
    assert "idx.h5: interrupted (SIGINT) while writing the output; nothing was written" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == before
    assert distgrail.open_index(path).meta["parts"] == 3


def test_an_ignored_sigint_stays_ignored_once_a_write_is_done(tmp_path):
    """A process that ignores SIGINT (a script's background job) and has written an output: a
    later SIGINT, with nothing being written, is still ignored (the handler the write installed
    once sent it on to the default action, killing the process)."""
    import signal

    out = str(tmp_path / "x.h5")
    script = (f"import os, signal, time\nfrom distgrail.io.atomic import atomic_path\n"
              f"with atomic_path({out!r}) as tmp:\n    open(tmp, 'w').write('x')\n"
              f"os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.2)\nprint('still here')\n")
    r = _python(script, 60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert r.returncode == 0 and "still here" in r.stdout, r.stderr
    assert os.listdir(tmp_path) == ["x.h5"]


def test_a_signal_deferred_by_another_threads_rename_reaches_the_main_thread(tmp_path):
    """SIGTERM while a worker thread puts its output in place: held over that step, then sent on
    to the main thread (Python runs handlers there only), which dies of it after the output
    landed (it was once replayed on the worker: ValueError there, the SIGTERM lost, exit 0)."""

    out = str(tmp_path / "w.txt")
    script = (f"import os, signal, threading, time\nfrom distgrail.io import atomic\n"
              f"atomic.install_handlers()\nreal = atomic._exchange\n"
              f"def slow(tmp, path):\n    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(0.3)\n"
              f"    return real(tmp, path)\n"
              f"atomic._exchange = slow\n"
              f"def work():\n    with atomic.atomic_path({out!r}) as tmp:\n        open(tmp, 'w').write('x')\n"
              f"t = threading.Thread(target=work)\nt.start()\nt.join()\ntime.sleep(2)\nprint('survived')\n")
    r = _python(script, 60)
    assert r.returncode == -15 and "survived" not in r.stdout, (r.returncode, r.stderr)
    assert os.listdir(tmp_path) == ["w.txt"]


def test_the_early_write_over_a_split_index_removes_its_parts_in_the_rename_step(tmp_path):
    """The index written while the build runs (EarlyIndexFile, one file) over a split index, SIGTERM
    arriving as it is renamed into place: the new file stays and the replaced index's parts are gone
    (they were removed after the rename's step, so the replayed signal left them behind for good)."""
    path, idx = _bundled_split(tmp_path)
    script = (f"import os, signal, distgrail\nfrom distgrail.io import atomic\n"
              f"from distgrail.indexfile import EarlyIndexFile\nreal = atomic._exchange\n"
              f"def exchange(tmp, path):\n    done = real(tmp, path)\n"
              f"    if path.endswith('idx.h5'):\n        os.kill(os.getpid(), signal.SIGTERM)\n    return done\n"
              f"atomic._exchange = exchange\nidx = distgrail.open_index({path!r})\n"
              f"meta = {{k: v for k, v in idx.meta.items() if k not in ('layout', 'parts')}}\n"
              f"e = EarlyIndexFile({path!r}, meta, {{k: a.shape for k, a in idx.arrays.items()}}, "
              f"{{k: a.dtype for k, a in idx.arrays.items()}})\n"
              f"for k, a in idx.arrays.items():\n    e.put(k, a)\n"
              f"e.finish(meta, idx.arrays)\nprint('not reached')\n")
    r = _python(script, 120)
    assert r.returncode == -15 and "not reached" not in r.stdout, r.stderr
    assert os.listdir(tmp_path) == ["idx.h5"]
    assert distgrail.open_index(path).meta.get("layout") is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts the open descriptors in /proc/self/fd")
def test_a_deferred_read_leaves_no_descriptor_open(split_index):
    """Slices of a dataset left in the part files (read_index_file(defer=)) read with one descriptor
    a file, all closed after (one was opened for every block and all but one left open)."""
    from distgrail.indexfile import read_index_file

    want = distgrail.open_index(split_index).arrays["dag/indices"]
    _, arrays = read_index_file(split_index, defer=("dag/indices",))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(3):
        got = arrays["dag/indices"].read(0, want.shape[0])
    assert np.array_equal(got, want) and len(os.listdir("/proc/self/fd")) == before
