"""bzip2 files of several streams (as pbzip2 and lbzip2 write them) are read whole or refused.

``bz2.open`` / ``bz2.BZ2File`` take any error after the first stream for trailing garbage and end
quietly: two streams of 1,000 edges each, one byte flipped in the second, read as 1,000 of the 2,000
edges with exit 0; so did plain text or a gzip member after a stream, in .txt.bz2, .gra.bz2 and
.mtx.bz2. Both readers now decompress stream by stream (:func:`distgrail.io.compressed.bz2_pieces`):
the CPU readers (``open_codec``) and the GPU path's decompressing thread
(:class:`distgrail.io.decompress.Blocks`, whose failure sends the file to the CPU reader).
"""

from __future__ import annotations

import bz2
import gzip
import io
import os

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.errors import GraphFormatError
from distgrail.io.decompress import Blocks
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph


def chain(lo: int, hi: int) -> bytes:
    return b"".join(b"%d %d\n" % (i, i + 1) for i in range(lo, hi))


def two_streams(text: bytes, cut: int) -> bytes:
    """``text`` as two bzip2 streams, the first of ``text[:cut]`` (as a parallel bzip2 writes)."""
    return bz2.compress(text[:cut]) + bz2.compress(text[cut:])


def gra(n: int) -> bytes:
    """A .gra chain 0 -> 1 -> ... -> n-1."""
    return b"graph_for_greach\n%d\n" % n + b"".join(
        (b"%d: %d #\n" % (i, i + 1)) if i + 1 < n else (b"%d: #\n" % i) for i in range(n))


def mtx(n: int) -> bytes:
    """A Matrix Market chain of n - 1 entries (1-based)."""
    return (b"%%%%MatrixMarket matrix coordinate pattern general\n%d %d %d\n" % (n, n, n - 1)
            + b"".join(b"%d %d\n" % (i + 1, i + 2) for i in range(n - 1)))


def blocks_text(p, block=None) -> bytes:
    """All the text the GPU path's decompressing thread gives for ``p``."""
    b = Blocks(str(p), "bz2", block=block)
    try:
        parts, buf = [], np.empty(1 << 16, np.uint8)
        while True:
            got = b.readinto(buf)
            parts.append(buf[:got].tobytes())
            if got < buf.size:
                return b"".join(parts)
    finally:
        b.close()


def blocks_fail(p):
    """The GPU path's decompressing thread fails on ``p`` before its end."""
    from test_misreads import stream_fails

    stream_fails(p, "bz2")


def refused(p, match):
    """Every reader refuses ``p`` with an error naming it: the CPU reader, the GPU path's stream
    (the numpy twin then hands the file to the CPU reader, which says why)."""
    with pytest.raises(GraphFormatError, match=match) as e:
        read_graph(p, "auto")
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value), str(e.value)
    blocks_fail(p)
    with pytest.raises(GraphFormatError, match=match) as e:
        read_graph_numpy(p)
    assert str(e.value).startswith(str(p)), str(e.value)


# -- read whole ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["txt", "gra", "mtx"])
@pytest.mark.parametrize("where", ["at a line end", "inside a line"])
def test_two_streams_are_read_whole(tmp_path, kind, where):
    text = {"txt": chain(0, 2000), "gra": gra(2001), "mtx": mtx(2001)}[kind]
    cut = len(text) // 2
    cut = text.index(b"\n", cut) + 1 if where == "at a line end" else cut
    p = tmp_path / f"g.{kind}.bz2"
    p.write_bytes(two_streams(text, cut))
    for g in (read_graph(p, "auto"), read_graph_numpy(p)):
        assert g.n == 2001 and g.m == 2000
        assert np.asarray(g.src).tolist() == list(range(2000))
        assert np.asarray(g.dst).tolist() == list(range(1, 2001))
    assert blocks_text(p) == text


def test_many_streams_and_blocks_in_small_pieces(tmp_path):
    """Several streams of several bzip2 blocks each, handed over in pieces far smaller than a
    bzip2 block (the output cap of each decompress call): every byte, in order."""
    text = chain(0, 300_000)  # about 3.6 MB
    cuts = [0, 1_000_000, 1_000_001, 2_500_000, len(text)]
    p = tmp_path / "g.txt.bz2"
    p.write_bytes(b"".join(bz2.compress(text[a:b], 1) for a, b in zip(cuts, cuts[1:])))
    assert blocks_text(p, block=1 << 14) == text
    g = read_graph(p)
    assert g.m == 300_000 and g.n == 300_001


class Dribble(io.RawIOBase):
    """A file whose reads return at most ``k`` bytes (a stream's magic split between reads)."""

    def __init__(self, data: bytes, k: int):
        self._b, self._k = io.BytesIO(data), k

    def read(self, n=-1):
        return self._b.read(min(self._k, n) if n >= 0 else self._k)


@pytest.mark.parametrize("k", [1, 2, 5, 1 << 20])
def test_bz2_pieces_short_reads_and_output_cap(k):
    from distgrail.io.compressed import Bz2Trailing, bz2_pieces

    text = chain(0, 5000)
    data = two_streams(text, 12_345) + bz2.compress(b"") + bz2.compress(text)
    pieces = list(bz2_pieces(Dribble(data, k), 1000))
    assert b"".join(pieces) == text + text and max(map(len, pieces)) <= 1000
    with pytest.raises(Bz2Trailing):
        list(bz2_pieces(Dribble(data + b"BZ", k), 1000))  # (a magic cut short is no stream)


def test_an_empty_stream_is_an_empty_file(tmp_path):
    """``bz2.compress(b"")`` (a valid stream of no bytes) reads as the empty file it holds."""
    plain, p = tmp_path / "e.txt", tmp_path / "e.txt.bz2"
    plain.write_bytes(b"")
    p.write_bytes(bz2.compress(b""))
    for f in (read_graph, read_graph_numpy):
        with pytest.raises(GraphFormatError) as want:
            f(plain)
        with pytest.raises(GraphFormatError) as got:
            f(p)
        assert str(got.value) == str(want.value).replace(str(plain), str(p))
        g = f(p, num_vertices=3)
        assert g.n == 3 and g.m == 0
    assert blocks_text(p) == b""
    q = tmp_path / "e2.txt.bz2"  # empty streams around a graph
    q.write_bytes(bz2.compress(b"") + bz2.compress(chain(0, 10)) + bz2.compress(b""))
    assert read_graph(q).m == 10 and read_graph_numpy(q).m == 10


# -- refused ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["txt", "gra", "mtx"])
def test_a_damaged_second_stream_is_refused(tmp_path, kind):
    text = {"txt": chain(0, 2000), "gra": gra(2001), "mtx": mtx(2001)}[kind]
    cut = text.index(b"\n", len(text) // 2) + 1
    first, second = bz2.compress(text[:cut]), bytearray(bz2.compress(text[cut:]))
    second[len(second) // 2] ^= 0xFF
    p = tmp_path / f"damaged.{kind}.bz2"
    p.write_bytes(first + bytes(second))
    refused(p, "not a readable bzip2 file, truncated or damaged")


@pytest.mark.parametrize("kind", ["txt", "gra", "mtx"])
def test_text_after_a_stream_is_refused(tmp_path, kind):
    text = {"txt": chain(0, 2000), "gra": gra(2001), "mtx": mtx(2001)}[kind]
    cut = text.index(b"\n", len(text) // 2) + 1
    p = tmp_path / f"tail.{kind}.bz2"
    p.write_bytes(bz2.compress(text[:cut]) + text[cut:])  # cat g.bz2 rest.txt > x.bz2
    refused(p, r"bzip2 file, truncated or damaged \(data after the end of a stream that is not another stream\)")


@pytest.mark.parametrize("kind", ["gra", "mtx"])
def test_data_after_a_whole_gra_or_mtx_is_refused(tmp_path, kind):
    """A .gra or .mtx checks its counts, so a damaged second half was refused (as a file with too
    few lines); data after a whole one read as the graph without it (exit 0)."""
    text, tail = {"gra": (gra(3), b"junk"), "mtx": (mtx(3), b"3 1\n")}[kind]
    p = tmp_path / f"tail.{kind}.bz2"
    p.write_bytes(bz2.compress(text) + tail)
    refused(p, "data after the end of a stream that is not another stream")
    p.write_bytes(bz2.compress(text))
    assert read_graph(p).m == 2 and read_graph_numpy(p).m == 2


@pytest.mark.parametrize("tail", ["gzip", "zeros then text"])
def test_other_data_after_a_stream_is_refused(tmp_path, tail):
    rest = chain(1000, 2000)
    p = tmp_path / "tail.txt.bz2"
    p.write_bytes(bz2.compress(chain(0, 1000)) + {"gzip": gzip.compress(rest), "zeros then text": b"\0" * 16 + rest}[tail])
    refused(p, "data after the end of a stream that is not another stream")


@pytest.mark.parametrize("zeros", [1, 512, (1 << 20) + 5])
def test_zero_padding_after_the_last_stream_is_taken(tmp_path, zeros):
    """A blocked writer's zero padding, as bzip2 (with a warning) and gzip take it: no edges, the
    file read whole (a review found 512 zeros refused)."""
    p = tmp_path / "pad.txt.bz2"
    p.write_bytes(bz2.compress(chain(0, 1000)) + b"\0" * zeros)
    assert read_graph(p).m == 1000 and read_graph_numpy(p).m == 1000


@pytest.mark.parametrize("which", ["first", "second", "magic only", "half a magic"])
def test_a_stream_cut_short_is_refused(tmp_path, which):
    """(Refused before the fix too, as ``BZ2File`` raises EOFError at a stream cut short: kept so
    that the stream-by-stream reading keeps refusing it.)"""
    first, second = bz2.compress(chain(0, 1000)), bz2.compress(chain(1000, 2000))
    data = {"first": first[: len(first) // 2], "second": first + second[: len(second) // 2],
            "magic only": first + b"BZh", "half a magic": first + b"BZ"}[which]
    p = tmp_path / "cut.txt.bz2"
    p.write_bytes(data)
    refused(p, "not a readable bzip2 file, truncated or damaged")


@pytest.mark.parametrize("case", ["damaged", "text after", "gzip after", "cut"])
def test_the_cli_exits_2_naming_the_file(tmp_path, capsys, case):
    first = bz2.compress(chain(0, 1000))
    second = bytearray(bz2.compress(chain(1000, 2000)))
    if case == "damaged":
        second[len(second) // 2] ^= 0xFF
    data = {"damaged": first + bytes(second), "text after": first + chain(1000, 2000),
            "gzip after": first + gzip.compress(chain(1000, 2000)),
            "cut": first + bytes(second[: len(second) // 2])}[case]
    p, out = tmp_path / "g.txt.bz2", tmp_path / "g.h5"
    p.write_bytes(data)
    before = sorted(os.listdir(tmp_path))
    assert main(["convert", str(p), "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"distgrail: error: {p}: not a readable bzip2 file") and "\n" not in err, err
    assert not out.exists() and sorted(os.listdir(tmp_path)) == before
    # the whole file still converts
    p.write_bytes(first + bz2.compress(chain(1000, 2000)))
    assert main(["convert", str(p), "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
    assert read_graph(out).m == 2000
