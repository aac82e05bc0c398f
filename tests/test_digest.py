"""The file's SHA-256 off the critical path (distgrail/io/digest.py): computed on its own thread
while the parse goes on, joined only when the value is read; same strings as the CPU reader;
changes to the file during the read are errors; no thread or descriptor outlives a failed read."""

from __future__ import annotations

import hashlib
import os
import pickle
import threading

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io import parse as gparse
from distgrail.io.digest import THREAD_NAME, FileDigest, resolve
from distgrail.io.parse import read_graph_numpy, read_text_graph
from distgrail.io.read import hash_early, read_graph


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def hashing_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def open_fds():
    return set(os.listdir("/proc/self/fd"))


def gra(tmp_path, n=400, deg=5, name="g.gra", tail=""):
    rng = np.random.default_rng(n)
    lines = ["graph_for_greach", str(n)]
    for v in range(n):
        lines.append(f"{v}: " + " ".join(map(str, rng.integers(0, n, deg))) + " #")
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n" + tail)
    return str(p)


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a hashing thread running or a descriptor open."""
    threads, fds = len(hashing_threads()), open_fds()
    yield
    for t in hashing_threads():
        t.join(5)
    assert len(hashing_threads()) == threads
    assert open_fds() - fds == set()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 100_000])
def test_file_digest_equals_hashlib(tmp_path, size, no_leaks):
    p = tmp_path / "f.bin"
    p.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    d = FileDigest(p, block_bytes=4096)
    assert d.hexdigest() == sha(p) == str(d) == resolve(d)
    assert d.hexdigest() == sha(p)  # again, from the finished thread
    assert d.done() and d.size == size


def test_resolve_takes_strings_and_none():
    assert resolve("ab") == "ab" and resolve(None) == "" and resolve("") == ""


def test_gpu_path_graph_hash_is_the_cpu_readers(tmp_path, no_leaks):
    p = gra(tmp_path)
    g = read_graph_numpy(p, chunk_bytes=4096)
    assert g.meta["parser"] == "numpy"
    assert isinstance(g.__dict__["_sha256"], FileDigest)  # still a background digest: nothing waited
    assert g.sha256 == read_graph(p).sha256 == sha(p)
    assert isinstance(g.__dict__["_sha256"], str) and not g.sha256_pending
    assert g.meta["sha256_wait_s"] >= 0.0  # the build can report what it waited for the hash


def test_sha256_false_starts_no_thread(tmp_path, no_leaks, monkeypatch):
    started = []
    monkeypatch.setattr(gparse, "take", lambda *a, **k: started.append(a))
    g = read_text_graph(gra(tmp_path), sha256=False)
    assert g.sha256 == "" and started == []


def test_pickled_graph_carries_the_value(tmp_path, no_leaks):
    p = gra(tmp_path)
    g = pickle.loads(pickle.dumps(read_graph_numpy(p)))
    assert g.sha256 == sha(p) and g.n == 400


def test_cancel_stops_the_thread(tmp_path, no_leaks):
    p = tmp_path / "big.bin"
    p.write_bytes(b"x" * (8 << 20))
    d = FileDigest(p, block_bytes=4096)
    d.cancel()
    assert d.done()
    if d._hex is None:  # cancelled before the end: the value is not made up
        with pytest.raises(GraphFormatError, match="cancelled"):
            d.hexdigest()
    else:
        assert d.hexdigest() == sha(p)


def test_file_changed_after_the_digest_started(tmp_path, no_leaks):
    p = gra(tmp_path)
    d = FileDigest(p)
    d.hexdigest()
    st = os.stat(p)
    with open(p, "a") as f:
        f.write("0: 1 #\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(GraphFormatError, match=r"g\.gra.*changed while it was read \(size, modification time\)"):
        d.check()
    assert d.hexdigest() == hashlib.sha256(open(p, "rb").read()[: st.st_size]).hexdigest()  # hashed before


def test_file_changed_during_the_parse_is_an_error(tmp_path, no_leaks, monkeypatch):
    p = gra(tmp_path)
    real = gparse._parse_file

    def parse_then_touch(plan, dev, chunk_bytes):
        out = real(plan, dev, chunk_bytes)
        st = os.stat(p)
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        return out

    monkeypatch.setattr(gparse, "_parse_file", parse_then_touch)
    with pytest.raises(GraphFormatError, match=r"changed while it was read \(modification time\)") as e:
        read_graph_numpy(p)
    assert str(p) in str(e.value)


def test_file_replaced_during_the_parse_is_an_error(tmp_path, no_leaks, monkeypatch):
    p = gra(tmp_path)
    real = gparse._parse_file

    def parse_then_replace(plan, dev, chunk_bytes):
        out = real(plan, dev, chunk_bytes)
        q = gra(tmp_path, name="other.gra")
        os.replace(q, p)
        return out

    monkeypatch.setattr(gparse, "_parse_file", parse_then_replace)
    with pytest.raises(GraphFormatError, match="changed while it was read"):
        read_graph_numpy(p)


def test_errors_in_the_parse_cancel_the_hash(tmp_path, no_leaks, monkeypatch):
    p = gra(tmp_path, n=3000)
    seen = []
    real = gparse.take

    def spy(*a, **k):
        seen.append(real(*a, **k))
        return seen[-1]

    def boom(plan, dev, chunk_bytes):
        raise RuntimeError("boom")

    monkeypatch.setattr(gparse, "take", spy)
    monkeypatch.setattr(gparse, "_parse_file", boom)
    with pytest.raises(RuntimeError, match="boom"):
        read_graph_numpy(p)
    assert len(seen) == 1 and seen[0].done()


def test_bad_input_leaves_no_thread_or_descriptor(tmp_path, no_leaks):
    p = gra(tmp_path, tail="7: x #\n")
    with pytest.raises(GraphFormatError) as gpu_err:
        read_graph_numpy(p, chunk_bytes=4096)
    with pytest.raises(GraphFormatError) as cpu_err:
        read_graph(p)
    assert str(gpu_err.value) == str(cpu_err.value)
    assert "line 403" in str(cpu_err.value) or ":403:" in str(cpu_err.value)


def test_fallback_to_the_cpu_reader_keeps_its_hash(tmp_path, no_leaks):
    p = tmp_path / "e.txt"
    p.write_text("")  # an empty edge list: the CPU reader says what it needs
    with pytest.raises(GraphFormatError):
        read_graph_numpy(str(p))
    q = tmp_path / "long.txt"
    q.write_text("0 1\n" + " ".join(["1 2"] + ["3"] * 2000) + "\n5 6\n")
    g = read_graph_numpy(str(q), chunk_bytes=1024)  # a line longer than a chunk: retried, same digest
    assert g.sha256 == sha(q) == read_graph(str(q)).sha256


def test_wait_is_measured(tmp_path, no_leaks):
    p = tmp_path / "f.bin"
    p.write_bytes(b"y" * (4 << 20))
    d = FileDigest(p, block_bytes=4096)
    d.hexdigest()
    assert d.wait_seconds >= 0.0 and d.done()
    before = d.wait_seconds
    d.hexdigest()
    assert d.wait_seconds - before < 0.05  # a finished thread: nothing to wait for


def test_early_digest_is_taken_by_the_reader(tmp_path, no_leaks):
    """cli starts the hash before CuPy's import; the GPU-path reader takes that same digest."""
    from distgrail.io import digest as dg

    p = gra(tmp_path)
    dg.start_early(p)
    early = dg._EARLY[os.path.realpath(p)]
    g = read_graph_numpy(p, chunk_bytes=4096)
    assert g.__dict__["_sha256"] is early and not dg._EARLY
    assert g.sha256 == sha(p)


def test_early_digest_of_a_changed_file_is_dropped(tmp_path, no_leaks):
    from distgrail.io import digest as dg

    p = gra(tmp_path)
    dg.start_early(p)
    early = dg._EARLY[os.path.realpath(p)]
    early._thread.join()
    gra(tmp_path, n=300)  # rewritten: other size and bytes
    g = read_graph_numpy(p, chunk_bytes=4096)
    assert g.__dict__["_sha256"] is not early
    assert g.sha256 == sha(p)


def test_discard_early_stops_what_nobody_took(tmp_path, no_leaks):
    from distgrail.io import digest as dg

    p = gra(tmp_path)
    dg.start_early(p)
    dg.start_early(str(tmp_path / "missing.gra"))  # cannot open: nothing started, no error
    assert len(dg._EARLY) == 1
    dg.discard_early()
    assert not dg._EARLY


def test_cli_index_cpu_backend_leaves_no_early_hash(tmp_path, no_leaks):
    from distgrail import cli
    from distgrail.io import digest as dg

    p = gra(tmp_path)
    assert cli.main(["index", p, "-o", str(tmp_path / "i.h5"), "--backend", "cpu", "--quiet"]) == 0
    assert not dg._EARLY


def test_no_early_digest_for_binary_graphs(tmp_path, no_leaks):
    from distgrail.io import digest as dg

    p = tmp_path / "g.h5"
    p.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    hash_early(str(p))
    hash_early(gra(tmp_path), fmt="h5")
    hash_early(str(tmp_path / "missing.gra"))
    assert not dg._EARLY


def test_a_failure_in_the_hashing_thread_is_an_error_not_an_empty_hash(tmp_path, no_leaks, monkeypatch):
    """Any exception in the thread (here: no memory for the buffer) makes hexdigest raise."""
    from distgrail.io import digest as dg

    p = gra(tmp_path)

    def no_memory(*a):
        raise MemoryError("injected")

    monkeypatch.setattr(dg, "bytearray", no_memory, raising=False)
    d = FileDigest(p)
    with pytest.raises(GraphFormatError, match="cannot compute the file's SHA-256: hashing it failed: MemoryError"):
        d.hexdigest()
