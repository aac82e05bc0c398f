"""The file's digest off the critical path (distgrail/io/digest.py): BLAKE3 computed on its own
threads while the parse goes on, joined only when the value is read; same strings as the CPU
reader; changes to the file during the read are errors; no thread or descriptor outlives a failed
read. The index records the algorithm; indexes and graph files with a SHA-256 still open."""

from __future__ import annotations

import os
import pickle
import threading

import blake3
import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io import parse as gparse
from distgrail.io.digest import THREAD_NAME, FileDigest, resolve
from distgrail.io.parse import read_graph_numpy, read_text_graph
from distgrail.io.read import as_graph, read_graph, start_digest



def digests_made(monkeypatch) -> list:
    """Every :class:`~distgrail.io.digest.FileDigest` made from now on, in order."""
    from distgrail.io import digest as dg

    made = []
    real_init = dg.FileDigest.__init__

    def init(self, *a, **k):
        real_init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(dg.FileDigest, "__init__", init)
    return made

def sha(path):
    """The digest distgrail must record: BLAKE3 of the file's bytes, as "blake3:<hex>"."""
    with open(path, "rb") as f:
        return "blake3:" + blake3.blake3(f.read()).hexdigest()


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
def test_file_digest_equals_blake3_of_the_bytes(tmp_path, size, no_leaks):
    p = tmp_path / "f.bin"
    p.write_bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes())
    d = FileDigest(p, block_bytes=4096)
    assert d.result() == sha(p) == str(d) == resolve(d) == "blake3:" + d.hexdigest()
    assert d.result() == sha(p)  # again, from the finished thread
    assert d.done() and d.size == size


def test_resolve_takes_strings_and_none():
    assert resolve("ab") == "ab" and resolve(None) == "" and resolve("") == ""


def test_gpu_path_graph_hash_is_the_cpu_readers(tmp_path, no_leaks):
    p = gra(tmp_path)
    g = read_graph_numpy(p, chunk_bytes=4096)
    assert g.meta["parser"] == "numpy"
    assert isinstance(g.__dict__["_digest"], FileDigest)  # still a background digest: nothing waited
    assert g.digest == read_graph(p).digest == sha(p)
    assert isinstance(g.__dict__["_digest"], str) and not g.digest_pending
    assert g.meta["digest_wait_s"] >= 0.0  # the build can report what it waited for the hash


def test_digest_false_starts_no_thread(tmp_path, no_leaks, monkeypatch):
    started = []
    monkeypatch.setattr(gparse, "adopt", lambda *a, **k: started.append(a))
    g = read_text_graph(gra(tmp_path), digest=False)
    assert g.digest == "" and started == []


def test_pickled_graph_carries_the_value(tmp_path, no_leaks):
    p = gra(tmp_path)
    g = pickle.loads(pickle.dumps(read_graph_numpy(p)))
    assert g.digest == sha(p) and g.n == 400


def test_cancel_stops_the_thread(tmp_path, no_leaks):
    p = tmp_path / "big.bin"
    p.write_bytes(b"x" * (8 << 20))
    d = FileDigest(p, block_bytes=4096)
    d.cancel()
    assert d.done()
    if d._hex is None:  # cancelled before the end: the value is not made up
        with pytest.raises(GraphFormatError, match="cancelled"):
            d.result()
    else:
        assert d.result() == sha(p)


def test_a_paused_digest_reads_nothing_until_resumed(tmp_path, no_leaks, monkeypatch):
    """Started paused (or paused), the thread reads no byte; resume() lets it finish with the
    file's hash; result() of a paused digest resumes it; cancel() of a paused one returns."""
    from distgrail.io import digest as dg

    p = tmp_path / "big.bin"
    p.write_bytes(bytes(range(256)) * 4096)
    reads = []
    real = dg.FileDigest._fill
    monkeypatch.setattr(dg.FileDigest, "_fill", lambda self, view, pos: reads.append(pos) or real(self, view, pos))
    d = FileDigest(p, block_bytes=4096, paused=True)
    d._thread.join(0.3)
    assert not d.done() and reads == []
    d.resume()
    assert d.result() == sha(p) and len(reads) >= 256
    reads.clear()
    d = FileDigest(p, block_bytes=4096, paused=True)
    assert d.result() == sha(p)  # asking for the value never waits on a pause
    d = FileDigest(p, block_bytes=4096, paused=True)
    d.cancel()
    assert d.done()
    with pytest.raises(GraphFormatError, match="cancelled"):
        d.result()


def test_the_gpu_path_reader_pauses_the_hash_during_the_parse(tmp_path, no_leaks, monkeypatch):
    """read_text_graph holds the digest while the kernels (here their NumPy twin) parse, and
    resumes it after: the value is the file's, and the parse ran with the hash paused."""

    path = gra(tmp_path)
    states = []
    real = gparse._parse_with_retries

    def parse(plan, *a, **k):
        states.append([d._go.is_set() for d in made])
        return real(plan, *a, **k)

    monkeypatch.setattr(gparse, "_parse_with_retries", parse)
    made = digests_made(monkeypatch)
    g = read_text_graph(path)
    assert states == [[False]]  # paused while the kernels parsed
    assert len(made) == 1 and made[0]._go.is_set()  # resumed after the parse
    assert str(g.digest) == sha(path)


def test_file_changed_after_the_digest_started(tmp_path, no_leaks):
    p = gra(tmp_path)
    d = FileDigest(p)
    d.result()
    st = os.stat(p)
    with open(p, "a") as f:
        f.write("0: 1 #\n")
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(GraphFormatError, match=r"g\.gra.*changed while it was read \(size, modification time\)"):
        d.check()
    assert d.result() == "blake3:" + blake3.blake3(open(p, "rb").read()[: st.st_size]).hexdigest()  # hashed before


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
    real = gparse.adopt

    def spy(*a, **k):
        seen.append(real(*a, **k))
        return seen[-1]

    def boom(plan, dev, chunk_bytes):
        raise RuntimeError("boom")

    monkeypatch.setattr(gparse, "adopt", spy)
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
    q.write_text("0 1 7\n1 2" + " " * 3000 + "3\n5 6 7\n")  # (3 fields a line)
    g = read_graph_numpy(str(q), chunk_bytes=1024)  # a line longer than a chunk: retried, same digest
    assert g.digest == sha(q) == read_graph(str(q)).digest


def test_wait_is_measured(tmp_path, no_leaks):
    p = tmp_path / "f.bin"
    p.write_bytes(b"y" * (4 << 20))
    d = FileDigest(p, block_bytes=4096)
    d.result()
    assert d.wait_seconds >= 0.0 and d.done()
    before = d.wait_seconds
    d.result()
    assert d.wait_seconds - before < 0.05  # a finished thread: nothing to wait for


# -- the digest handed down by whoever opens the input (issue 41: explicit handles) ------------

def test_the_openers_digest_is_the_one_the_readers_use(tmp_path, no_leaks, monkeypatch):
    """``distgrail index`` starts the hash where it opens the input; the GPU path's reader (its
    NumPy twin), the CPU reader (on one core too, where it would hash its own chunks) and
    ``as_graph`` take that same object, and the value is the file's."""
    p = gra(tmp_path)
    for read in (lambda d: read_graph_numpy(p, chunk_bytes=4096, digest=d), lambda d: read_graph(p, digest=d),
                 lambda d: as_graph(p, digest=d)):
        with start_digest(p) as d:
            g = read(d)
            assert g.__dict__["_digest"] is d and d.taken
        assert g.digest == sha(p)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with start_digest(p) as d:
        assert read_graph(p, digest=d).__dict__["_digest"] is d
    assert read_graph(p).__dict__["_digest"] == sha(p)  # one core, no handle: its own chunks hashed


def test_compressed_and_table_readers_take_the_handle_too(tmp_path, no_leaks):
    import gzip

    p = gra(tmp_path)
    z = tmp_path / "g.gra.gz"
    z.write_bytes(gzip.compress(open(p, "rb").read()))
    with start_digest(str(z)) as d:
        g = read_graph(str(z), digest=d)
        assert g.__dict__["_digest"] is d
    assert g.digest == sha(z)  # the file as stored
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    t = tmp_path / "e.parquet"
    pq.write_table(pa.table({"src": [0, 1], "dst": [1, 2]}), t)
    with start_digest(str(t)) as d:
        g = read_graph(str(t), digest=d)
        assert g.__dict__["_digest"] is d
    assert g.digest == sha(t)


def test_a_handle_refused_by_the_gpu_parser_reaches_the_cpu_reader(tmp_path, no_leaks, monkeypatch):
    """A file the kernels do not take (node names: left to the host; a line they refuse) is read
    by the CPU reader, which hashes with the same handle: no second hash, running after the parse."""
    names = tmp_path / "n.txt"
    names.write_bytes(b"src dst\na b\nb c\n")
    with start_digest(str(names)) as d:
        g = read_graph_numpy(str(names), digest=d, notify=lambda s: None)
        assert g.meta["parser"] == "cpu" and g.__dict__["_digest"] is d
    assert g.digest == sha(names)
    p = gra(tmp_path)
    monkeypatch.setattr(gparse, "_parse_with_retries", lambda *a, **k: (None, "a line it refused"))
    with start_digest(p) as d:
        g = read_graph_numpy(p, digest=d, notify=lambda s: None)
        assert g.meta["parser"] == "cpu" and g.__dict__["_digest"] is d and d._go.is_set()
    assert g.digest == sha(p)
    made = []
    real = gparse.adopt
    monkeypatch.setattr(gparse, "adopt", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    g = read_graph_numpy(p, notify=lambda s: None)  # no handle: the one the GPU reader started goes on
    assert g.__dict__["_digest"] is made[0] and g.digest == sha(p)


def test_a_handle_handed_back_by_the_gpu_reader_goes_to_the_next_reader(tmp_path, no_leaks, monkeypatch):
    """The GPU reader returns None (the file does not fit the device): the handle goes back to its
    owner untaken, and the CPU reader its caller runs next takes it."""
    p = gra(tmp_path)
    monkeypatch.setattr(gparse, "_parse_with_retries", lambda *a, **k: (None, None))
    with start_digest(p) as d:
        assert read_graph_numpy(p, digest=d) is None and not d.taken
        g = as_graph(p, digest=d)
        assert g.__dict__["_digest"] is d and d.taken
    assert g.digest == sha(p)
    with start_digest(p) as d:
        assert read_graph_numpy(p, digest=d) is None
    assert d.done()  # nobody took it: cancelled at the end of the block
    made = []
    monkeypatch.setattr(gparse, "adopt", lambda *a, **k: made.append(FileDigest(a[1], paused=True)) or made[-1])
    assert read_graph_numpy(p) is None and made[0].done()  # one the reader started: cancelled


def test_a_handle_of_a_changed_or_other_file_is_not_used(tmp_path, no_leaks):
    p = gra(tmp_path)
    with start_digest(p) as d:
        d._thread.join()
        gra(tmp_path, n=300)  # rewritten: other size and bytes
        g = read_graph_numpy(p, chunk_bytes=4096, digest=d)
        assert g.__dict__["_digest"] is not d and not d.taken
    assert g.digest == sha(p)
    other = gra(tmp_path, name="other.gra")
    with start_digest(other) as d:
        g = read_graph(p, digest=d)
        assert g.__dict__["_digest"] is not d and not d.taken
    assert d.done() and g.digest == sha(p)


def test_an_unused_handle_is_cancelled_by_its_owner(tmp_path, no_leaks, monkeypatch):
    """No thread is left running: a handle nobody took ends with its ``with`` block (the hash held
    back so that it would still run); one taken ends there too when the block fails."""
    p = tmp_path / "big.bin"
    p.write_bytes(b"x" * (8 << 20))
    with FileDigest(p, block_bytes=4096, paused=True) as d:
        assert not d.done()
    assert d.done()
    with pytest.raises(GraphFormatError, match="cancelled"):
        d.result()
    q = gra(tmp_path)
    with pytest.raises(RuntimeError, match="later"):
        with start_digest(q) as d:
            g = read_graph_numpy(q, digest=d)
            d.pause()
            raise RuntimeError("a later step failed")
    assert d.done() and g.digest_source is d


def test_no_module_level_digest_registry():
    """Digests travel as arguments: no module keeps them (the registry of started digests and its
    functions are gone, and nothing at the top level of digest.py is a container)."""
    import ast

    from distgrail.io import digest as dg
    from distgrail.io import read as rd

    for name in ("_EARLY", "start_early", "take", "discard_early"):
        assert not hasattr(dg, name), name
    assert not hasattr(rd, "hash_early")
    tree = ast.parse(open(dg.__file__).read())
    containers = [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                  and isinstance(n.value, (ast.Dict, ast.List, ast.Set, ast.Call))
                  and getattr(n.targets[0] if isinstance(n, ast.Assign) else n.target, "id", "") != "__all__"]
    assert containers == []


def test_start_digest_skips_binary_missing_and_special_files(tmp_path, no_leaks):
    p = tmp_path / "g.h5"
    p.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    fifo = tmp_path / "pipe.gra"
    os.mkfifo(fifo)
    assert start_digest(str(p)) is None and start_digest(gra(tmp_path), fmt="h5") is None
    assert start_digest(str(tmp_path / "missing.gra")) is None and start_digest(str(fifo)) is None
    with start_digest(gra(tmp_path)) as d:
        assert isinstance(d, FileDigest)


def test_cli_index_hands_its_digest_to_the_build(tmp_path, no_leaks, monkeypatch):
    """``distgrail index`` makes the handle where it opens the input and passes it down as
    ``digest=`` (one process, a backend other than cpu); with ``--backend cpu`` it passes None."""
    import distgrail
    from distgrail import cli

    p = gra(tmp_path)
    seen = []

    def build(graph, *a, digest=None, **k):
        g = as_graph(graph, digest=digest)
        seen.append((digest, g.__dict__["_digest"], g.digest))

    monkeypatch.setattr(distgrail, "build_index", build)
    for backend in ("auto", "cpu"):
        assert cli.main(["index", p, "-o", str(tmp_path / "i.h5"), "--backend", backend, "--quiet"]) == 0
    (given, used, value), (none, _, cpu_value) = seen
    assert isinstance(given, FileDigest) and used is given and given.taken and value == sha(p)
    assert none is None and cpu_value == sha(p)


def test_cli_index_leaves_no_hashing_thread(tmp_path, no_leaks, monkeypatch):
    """The whole command, backend auto on this machine (the CPU reader then takes the CLI's
    handle: one digest in all) and cpu."""
    from distgrail import cli

    p = gra(tmp_path)
    made = digests_made(monkeypatch)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    for backend in ("auto", "cpu"):
        made.clear()
        assert cli.main(["index", p, "-o", str(tmp_path / "i.h5"), "--backend", backend, "--quiet"]) == 0
        assert len(made) == 1 and made[0].done() and made[0].taken == (backend == "auto")  # auto: the CLI's
    assert distgrail_index_digest(tmp_path / "i.h5") == sha(p).split(":")[1]
    made.clear()  # refused by the preflight, after the hash started: cancelled
    assert cli.main(["index", p, "-o", str(tmp_path / "j.h5"), "--dims", "0", "--quiet"]) == 2
    assert len(made) == 1 and made[0].done() and not made[0].taken


def distgrail_index_digest(path):
    import distgrail

    return distgrail.open_index(path).meta["source_digest"]


def test_a_failure_in_the_hashing_thread_is_an_error_not_an_empty_hash(tmp_path, no_leaks, monkeypatch):
    """Any exception in the thread (here: no memory for the buffer) makes result() raise."""
    from distgrail.io import digest as dg

    p = gra(tmp_path)

    def no_memory(*a):
        raise MemoryError("injected")

    monkeypatch.setattr(dg, "bytearray", no_memory, raising=False)
    d = FileDigest(p)
    with pytest.raises(GraphFormatError, match="cannot compute the file's BLAKE3 digest: hashing it failed: MemoryError"):
        d.result()


# -- BLAKE3 on threads, the algorithm in the index, files with a SHA-256 ------------------------

KEGG = os.path.join(os.path.dirname(__file__), "data", "kegg_dag_uniq.gra")
KEGG_V1 = os.path.join(os.path.dirname(__file__), "data", "kegg_dag_uniq.v1.h5")


@pytest.mark.parametrize("block, readers", [(64 << 10, 1), (256 << 10, 4), (300_000, 3), (1 << 20, 2)])
def test_pipelined_reads_hash_every_byte_once_in_order(tmp_path, block, readers, no_leaks):
    """Blocks read in pieces by several readers while the previous block is hashed: the value is
    BLAKE3 of the bytes in order, whatever the block size, piece count and a short last block."""
    p = tmp_path / "f.bin"
    data = np.random.default_rng(block).integers(0, 256, 3 * block + 12_345, dtype=np.uint8).tobytes()
    p.write_bytes(data)
    d = FileDigest(p, block_bytes=block, readers=readers)
    assert d.result() == "blake3:" + blake3.blake3(data).hexdigest()
    assert d.hash_seconds is not None and d.hash_seconds >= 0.0


def test_digest_of_a_file_truncated_while_hashed_is_an_error(tmp_path, no_leaks, monkeypatch):
    from distgrail.io import digest as dg

    p = tmp_path / "f.bin"
    p.write_bytes(b"z" * (1 << 20))
    real = dg.FileDigest._fill
    cut = []

    def fill_then_truncate(self, view, pos):
        if not cut:
            cut.append(pos)
            os.truncate(p, 100_000)
        return real(self, view, pos)

    monkeypatch.setattr(dg.FileDigest, "_fill", fill_then_truncate)
    d = FileDigest(p, block_bytes=64 << 10, readers=1)
    with pytest.raises(GraphFormatError, match=r"f\.bin.*changed while it was read: it ended at byte 100,000"):
        d.result()


def test_index_records_the_algorithm_and_blake3_of_the_file(tmp_path):
    import distgrail
    import h5py

    out = tmp_path / "i.h5"
    idx = distgrail.build_index(KEGG, dims=2, backend="cpu", output=out)
    want = blake3.blake3(open(KEGG, "rb").read()).hexdigest()
    assert idx.meta["source_digest_algorithm"] == "blake3" and idx.meta["source_digest"] == want
    with h5py.File(out) as f:  # plain h5py sees the two attributes, and no SHA-256 any more
        assert f.attrs["source_digest_algorithm"] == b"blake3" and f.attrs["source_digest"] == want.encode()
        assert "source_sha256" not in f.attrs
    back = distgrail.open_index(out)
    assert (back.meta["source_digest_algorithm"], back.meta["source_digest"]) == ("blake3", want)


def test_an_in_memory_graph_has_no_digest(tmp_path):
    import distgrail

    idx = distgrail.build_index((np.array([0, 1]), np.array([1, 2])), dims=1, backend="cpu",
                                output=tmp_path / "m.h5")
    back = distgrail.open_index(tmp_path / "m.h5")
    assert idx.meta["source_digest"] == back.meta["source_digest"] == ""
    assert back.meta["source_digest_algorithm"] == ""


def test_version_1_index_with_a_sha256_opens_and_reports_it(capsys):
    import distgrail
    from distgrail import cli

    with open(KEGG, "rb") as f:
        want = hashlib_sha256(f.read())
    idx = distgrail.open_index(KEGG_V1)
    assert (idx.meta["source_digest_algorithm"], idx.meta["source_digest"]) == ("sha256", want)
    assert idx.reachable(0, 0)
    assert cli.main(["info", KEGG_V1]) == 0
    out = capsys.readouterr().out
    assert f"\nsource_digest            {want}\n" in out  # the key column as wide as its longest key
    assert "\nsource_digest_algorithm  sha256\n" in out


def hashlib_sha256(data):
    import hashlib

    return hashlib.sha256(data).hexdigest()


def test_version_2_index_of_an_earlier_release_opens(tmp_path):
    """A v2 index written before this change: source_sha256, no source_digest*."""
    import distgrail
    import h5py

    out = tmp_path / "old.h5"
    new = distgrail.build_index(KEGG, dims=2, backend="cpu", output=out)
    with h5py.File(out, "r+") as f:  # (nor the attributes' seal, which came later)
        del f.attrs["source_digest"], f.attrs["source_digest_algorithm"], f.attrs["blake3_of_attributes"]
        f.attrs["source_sha256"] = "ab" * 32
    old = distgrail.open_index(out)
    assert (old.meta["source_digest_algorithm"], old.meta["source_digest"]) == ("sha256", "ab" * 32)
    s, t = np.arange(old.n) % 50, np.arange(old.n)[::-1] % 70
    assert np.array_equal(old.reachable(s, t), new.reachable(s, t))
    with h5py.File(out, "r+") as f:  # neither attribute: an incomplete index, named
        del f.attrs["source_sha256"]
    from distgrail.errors import IndexFormatError

    with pytest.raises(IndexFormatError, match="attribute 'source_digest' is missing"):
        distgrail.open_index(out)


def test_binary_graph_files_carry_the_digest_old_ones_their_sha256(tmp_path):
    import distgrail
    import h5py
    from distgrail.io.binary import read_binary_graph
    from distgrail.io.writers import write_graph

    g = read_graph(KEGG)
    h5 = tmp_path / "k.h5"
    write_graph(g, h5)
    assert read_binary_graph(h5).digest == sha(KEGG)
    idx = distgrail.build_index(str(h5), dims=2, backend="cpu")
    assert idx.meta["source_digest"] == sha(KEGG).split(":")[1]  # the text file's, not the .h5's
    with h5py.File(h5, "r+") as f:  # as written by an earlier release
        del f.attrs["source_digest"], f.attrs["source_digest_algorithm"]
        f.attrs["source_sha256"] = "cd" * 32
    assert read_binary_graph(h5).digest == "sha256:" + "cd" * 32
    idx = distgrail.build_index(str(h5), dims=2, backend="cpu")
    assert (idx.meta["source_digest_algorithm"], idx.meta["source_digest"]) == ("sha256", "cd" * 32)


@pytest.mark.parametrize("reader", ["cpu", "numpy-twin"])
def test_the_build_does_not_wait_for_the_hash_before_assembly(tmp_path, monkeypatch, reader):
    """A hash held back until assembly: read, condense and phases 1-4 all finish while it is still
    pending (the hash is off the critical path); the index then holds its value."""
    import distgrail
    import distgrail.placement as b
    from distgrail.io import digest as dg

    gate = threading.Event()
    real_hasher = dg.new_hasher

    class Held:
        def __init__(self, *a, **k):
            self.h = real_hasher(*a, **k)

        def update(self, data):
            gate.wait(60)
            self.h.update(data)

        def hexdigest(self):
            return self.h.hexdigest()

    monkeypatch.setattr(dg, "new_hasher", Held)
    seen = {}
    real_assemble = b.assemble

    def assemble(g, *a, **k):
        seen["pending"] = not isinstance(g.digest, str)  # still a running FileDigest
        gate.set()
        return real_assemble(g, *a, **k)

    monkeypatch.setattr(b, "assemble", assemble)
    if reader == "numpy-twin":  # the GPU path's reader, with its NumPy twin device
        import distgrail.stages.phases as ph
        from distgrail.io.parse import read_graph_numpy

        monkeypatch.setattr(ph, "read_on", lambda be, graph, nv, fmt, digest=None: read_graph_numpy(graph))
    else:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    idx = distgrail.build_index(KEGG, dims=2, backend="cpu")
    assert seen["pending"] is True
    assert idx.meta["source_digest"] == sha(KEGG).split(":")[1]
    assert idx.meta["source_digest_algorithm"] == "blake3"
