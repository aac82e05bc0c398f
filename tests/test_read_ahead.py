"""A large edge list's fast path: numbers read by one compiled pass (distgrail.io.fields_jit
``numbers_at``, what ``np.fromstring`` reads) and chunks worked on threads ahead of the checks
(distgrail.io.text ``chunks_ahead``). With the size threshold at 0 and tiny chunks, the same
arrays as the one-thread read, and the same first error in file order; compressed streams and
CSVs are not read ahead."""

import gzip

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io import text as texts
from distgrail.io.read import read_graph

fields_jit = pytest.importorskip("distgrail.io.fields_jit", reason="numba is a dependency; it did not import")


def read(path, ahead: bool, monkeypatch, chunk=96):
    with monkeypatch.context() as m:
        m.setattr(texts, "CHUNK_BYTES", chunk)
        m.setattr(texts, "COMPILED_NUMBERS_BYTES", 0 if ahead else 1 << 62)
        return read_graph(str(path))


def refusal(path, ahead, monkeypatch):
    with pytest.raises(GraphFormatError) as e:
        read(path, ahead, monkeypatch)
    return str(e.value)


@pytest.fixture
def counted(monkeypatch):
    """How many chunks went through threads ahead of the checks."""
    seen = []
    real = texts.chunks_ahead

    def spy(chunks, work, threaded, threads=None):
        for item in real(chunks, work, threaded, threads):
            seen.append(threaded)
            yield item
    import distgrail.io.edgelist as edgelist
    monkeypatch.setattr(edgelist, "chunks_ahead", spy)
    return seen


def test_numbers_at_equals_fromstring():
    rng = np.random.default_rng(3)
    vals = rng.integers(0, 10**18 - 1, 2000)
    vals[:5] = [0, 7, 10**18 - 1, 10**17, 42]
    vals[1::3] %= 10**15  # these with up to two leading zeros: 17 digits at most
    body = b"".join(b"%s%d%s" % (b"0" * (i % 3 == 1) * (i % 4 % 3), v, b" \n"[i % 2:i % 2 + 1])
                    for i, v in enumerate(vals.tolist()))
    b = np.frombuffer(body, np.uint8)
    dig = b > 47
    starts = np.flatnonzero(np.concatenate(([dig[0]], dig[1:] > dig[:-1])))
    got, ok = fields_jit.numbers_at(b, starts)
    assert ok and np.array_equal(got, vals) and got.dtype == np.int64
    assert np.array_equal(texts.fast_numbers(body, starts.size, starts), vals)


def test_a_value_past_10_to_the_18_goes_to_the_general_path():
    """fromstring saturates it (past every vertex id, so the general path refuses its line); the
    compiled pass gives None for the chunk, which sends it there too. Leading zeros are no digits."""
    body = b"1 9999999999999999999\n"
    starts = np.array([0, 2])
    _, ok = fields_jit.numbers_at(np.frombuffer(body, np.uint8), starts)
    assert not ok and texts.fast_numbers(body, 2, starts) is None
    assert texts.fast_numbers(body, 2)[1] == 2**63 - 1
    zeros = b"0000000000000000000001 7\n"
    assert texts.fast_numbers(zeros, 2, np.array([0, 23])).tolist() == [1, 7] == texts.fast_numbers(zeros, 2).tolist()


@pytest.mark.parametrize("body,want", [
    (b"# a comment\n0000000000000000001 2\n2 0\n", [(1, 2), (2, 0)]),
    (b"0 300\n300 1000\n", [(0, 300), (300, 1000)]),
])
def test_review_cases_read_alike(tmp_path, monkeypatch, body, want):
    """A comment (the chunk's bytes then a bytearray) with a long token; values past one byte."""
    p = tmp_path / "g.txt"
    p.write_bytes(body)
    for ahead in (False, True):
        g = read(p, ahead, monkeypatch)
        assert list(zip(g.src.tolist(), g.dst.tolist())) == want


def test_a_value_too_large_is_refused_alike(tmp_path, monkeypatch):
    p = tmp_path / "g.csv"
    p.write_bytes(b"src,dst\n0,1 # c\n99999999999999999999,2\n")
    assert refusal(p, True, monkeypatch) == refusal(p, False, monkeypatch)
    assert ":3: vertex id too large" in refusal(p, True, monkeypatch)


def test_without_the_jit_the_numbers_are_read_alike(tmp_path):
    """NUMBA_DISABLE_JIT: the compiled pass is not used (it would run as Python, ~100x slower)."""
    import subprocess
    import sys

    p = tmp_path / "g.txt"
    p.write_bytes(b"0 300\n300 1000\n")
    code = ("import warnings; warnings.simplefilter('ignore'); from distgrail.io import text; "
            "text.COMPILED_NUMBERS_BYTES = 0; from distgrail.io.read import read_graph; "
            f"g = read_graph({str(p)!r}); print(g.n, g.src.tolist(), g.dst.tolist())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(__import__("os").environ, NUMBA_DISABLE_JIT="1"))
    assert r.returncode == 0 and r.stdout.split() == ["1001", "[0,", "300]", "[300,", "1000]"], r


@pytest.mark.parametrize("body", [
    b"".join(b"%d %d\n" % (i, (i * 7) % 500) for i in range(2000)),
    b"# header\n" + b"".join(b"%d\t%d\r\n" % (i, i + 1) for i in range(1500)),
    b"".join(b"%d %d 0.5\n" % (i, i + 3) for i in range(1200)),
])
def test_read_ahead_gives_the_same_arrays(tmp_path, monkeypatch, counted, body):
    p = tmp_path / "g.txt"
    p.write_bytes(body)
    a = read(p, False, monkeypatch)
    assert not any(counted)
    b = read(p, True, monkeypatch)
    assert any(counted) and len(counted) > 20
    assert a.n == b.n and np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst) and a.src.dtype == b.src.dtype


@pytest.mark.parametrize("late", [b"7 x\n", b"7 8\r9 10\n", b"7 8%2\n", b"7\n"])
def test_the_first_error_in_file_order_is_the_one_reported(tmp_path, monkeypatch, late):
    """An early error (a chunk's checks) before a late one (some the chunk reader raises while it
    reads ahead): the early one, as without threads."""
    lines = [b"%d %d\n" % (i, i + 1) for i in range(3000)]
    lines[40] = b"40 4x1\n"
    lines[52] = late  # a chunk or two later: inside the chunks read ahead
    p = tmp_path / "g.txt"
    p.write_bytes(b"".join(lines))
    want = refusal(p, False, monkeypatch)
    assert refusal(p, True, monkeypatch) == want
    lines[40] = b"40 41\n"  # now only the late one
    p.write_bytes(b"".join(lines))
    assert refusal(p, True, monkeypatch) == refusal(p, False, monkeypatch)


def test_streams_and_csvs_are_not_read_ahead(tmp_path, monkeypatch, counted):
    body = b"".join(b"%d %d\n" % (i, i + 1) for i in range(2000))
    gz = tmp_path / "g.txt.gz"
    gz.write_bytes(gzip.compress(body))
    csv = tmp_path / "g.csv"
    csv.write_bytes(b"src,dst\n" + body.replace(b" ", b","))
    for p in (gz, csv):
        counted.clear()
        g = read(p, True, monkeypatch)
        assert g.m == 2000 and counted and not any(counted)


def test_without_the_jit_the_field_scans_take_their_numpy_twins(tmp_path):
    """NUMBA_DISABLE_JIT: the CSV and tab scans of a large chunk run their NumPy twins (the
    compiled ones would run as Python), with the same answers."""
    import subprocess
    import sys

    p = tmp_path / "g.csv"
    p.write_bytes(b"src,dst\n" + b"".join(b"%d,%d # c\n" % (i, i + 1) for i in range(3000)) + b"5,,6\n")
    code = ("import warnings; warnings.simplefilter('ignore'); from distgrail.io import guards; guards.JIT_MIN_BYTES = 0; "
            "import distgrail.io.fields_jit as f; f.first_empty_field = f.comma_width = None; "
            "from distgrail.io.read import read_graph\n"
            f"try: read_graph({str(p)!r})\nexcept Exception as e: print(e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(__import__("os").environ, NUMBA_DISABLE_JIT="1"))
    assert r.returncode == 0 and ":3002: " in r.stdout and "empty" in r.stdout, r


def test_an_interrupt_while_reading_ahead_is_raised_at_once():
    """Not held like the file's error: an interrupt in the chunk reader stops the read there."""
    def chunks():
        yield 0, b"a"
        raise KeyboardInterrupt
    seen = []
    with pytest.raises(KeyboardInterrupt):
        for offset, data, done in texts.chunks_ahead(chunks(), lambda d: d, True, threads=2):
            seen.append(done())
    assert seen == []


def test_a_stopped_read_leaves_no_thread_working(tmp_path, monkeypatch):
    """An error early in a large read: the chunks read ahead are dropped, their threads end."""
    import threading

    lines = [b"%d %d\n" % (i, i + 1) for i in range(20000)]
    lines[3] = b"3 x\n"
    p = tmp_path / "g.txt"
    p.write_bytes(b"".join(lines))
    before = threading.active_count()
    refusal(p, True, monkeypatch)
    assert threading.active_count() == before
