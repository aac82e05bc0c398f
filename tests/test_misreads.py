"""Nothing misread (issue 40, items 1-5): a file is read whole or refused with file, line and value.

Each test here failed on 8de6ce4, where the file was indexed with exit 0 as something it is not:
a truncated Zstandard file (1,001 of 2,001 vertices), ``+0 +1`` on the first line (dropped as a
header), old-Mac ``\\r`` line ends (one edge), a Python script (a labelled graph), a gzip bomb
(grew until the kernel killed it). The fuzz test compares the readers with a reference reader of
the documented grammar (tests/grammar_reference.py).
"""

import bz2
import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.io.chunks import plan_read
from distgrail.io.decompress import Blocks, StreamError
from distgrail.io.dialect import sniff
from distgrail.io.parse import NumpyDevice, _Anomaly, _parse_file, read_graph_numpy
from distgrail.io.read import read_graph
from conftest import ROOT

zstandard = pytest.importorskip("zstandard")  # (a dependency of the test extra: never skips on CI)


def run(*args, env=None):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


def chain(m: int) -> bytes:
    return b"".join(b"%d %d\n" % (i, i + 1) for i in range(m))


def refused(p, *more):
    """``distgrail index p`` exits 2 with one line naming the file, and leaves no output."""
    out = p.parent / (p.name + ".h5")
    r = run("index", str(p), "-o", str(out), *more)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("distgrail: error: ") and p.name in lines[0], r.stderr
    assert not out.exists() and sorted(os.listdir(p.parent)) == sorted(set(os.listdir(p.parent)) - {out.name})
    return lines[0]


def stream_fails(p, codec):
    """The GPU path's decompressing thread (:class:`Blocks`) fails on ``p`` before its end."""
    blocks = Blocks(str(p), codec)
    try:
        with pytest.raises(StreamError):
            buf = np.empty(1 << 20, np.uint8)
            while blocks.readinto(buf) == buf.size:
                pass
    finally:
        blocks.close()


# -- 1. a compressed stream must end where its format says it ends ----------------------------------

def zst(data: bytes, **kw) -> bytes:
    return zstandard.ZstdCompressor(**kw).compress(data)


@pytest.mark.parametrize("where", ["after the first block", "at half", "inside a block", "one byte short"])
def test_truncated_zstd_is_refused_by_every_reader(tmp_path, where):
    data = chain(200_000)  # several 128 KB blocks
    c = zst(data)
    cut = {"at half": len(c) // 2, "inside a block": 1000, "one byte short": len(c) - 1}.get(where)
    if cut is None:  # cut where a block ends (the 1,001 vertices of 2,001)
        cobj = zstandard.ZstdCompressor().compressobj()
        first = cobj.compress(data[:70_000]) + cobj.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        c, cut = first + cobj.compress(data[70_000:]) + cobj.flush(), len(first)
        assert zstandard.ZstdDecompressor().decompressobj().decompress(c[:cut]) == data[:70_000]
    p = tmp_path / "chain.txt.zst"
    p.write_bytes(c[:cut])
    with pytest.raises(GraphFormatError, match="truncated or damaged .the data ends inside a frame"):
        read_graph(p)
    stream_fails(p, "zst")
    with pytest.raises(GraphFormatError, match="ends inside a frame"):
        read_graph_numpy(p)  # the twin's path: the stream fails, the CPU reader says why


def test_whole_zstd_files_still_read_whole(tmp_path):
    """Several frames, a skippable frame between them, a frame without its content size."""
    a, b = chain(3000), b"".join(b"%d %d\n" % (i + 1, i) for i in range(3000))
    skippable = b"\x50\x2a\x4d\x18" + (5).to_bytes(4, "little") + b"hello"
    p = tmp_path / "g.txt.zst"
    p.write_bytes(zst(a) + skippable + zst(b, write_content_size=False, write_checksum=True))
    g = read_graph(p)
    assert g.m == 6000 and g.n == 3001
    assert read_graph_numpy(p).m == 6000


def test_truncated_zstd_exits_2(tmp_path):
    p = tmp_path / "cut.txt.zst"
    c = zst(chain(100_000))
    p.write_bytes(c[: len(c) // 2])
    assert "ends inside a frame" in refused(p)


def test_data_after_the_last_frame_is_refused(tmp_path):
    p = tmp_path / "tail.txt.zst"
    p.write_bytes(zst(chain(100)) + b"garbage after the frame")
    with pytest.raises(GraphFormatError, match="Zstandard"):
        read_graph(p)


# -- 2. a header is the first edge line and has no numeric field ------------------------------------

@pytest.mark.parametrize("text,header", [
    (b"+0 +1\n1 2\n", False), (b"-1 x\n1 2\n", False), (b"1.5 2\n1 2\n", False), (b"src 1e3\n1 2\n", False),
    (b"src dst\n0 1\n", True), (b"# c\nfrom,to\n0,1\n", True), (b"a b\n0 1\n", True), (b"u v w\n0 1 5\n", True),
])
def test_header_only_without_a_number(text, header):
    assert bool(sniff(text, complete=True).body) == header


def test_signed_first_line_is_an_edge_line_and_refused(tmp_path):
    p = tmp_path / "g.txt"
    p.write_bytes(b"+0 +1\n1 2\n")
    with pytest.raises(GraphFormatError, match=r"g.txt:1: vertex id must be a non-negative integer, got '\+0'"):
        read_graph(p)
    assert "g.txt:1:" in refused(p)


def test_is_number():
    from distgrail.io.dialect import is_number

    assert all(is_number(t) for t in (b"0", b"+0", b"-12", b"3.", b".5", b"1e9", b"-2.5E-3"))
    assert not any(is_number(t) for t in (b"", b"+", b"e5", b"1e", b"0x1", b"v1", b"1,2", b"--1"))


# -- 3. lines end with \n or \r\n --------------------------------------------------------------------

def test_stray_cr():
    from distgrail.io.guards import stray_cr

    assert stray_cr(b"0 1\n", False) == -1 and stray_cr(b"0 1\r\n1 2\r\n", False) == -1
    assert stray_cr(b"0 1\r", True) == -1 and stray_cr(b"0 1\r", False) == 3
    assert stray_cr(b"0 1\r\n1 2\r2 3\n", False) == 8 and stray_cr(b"\r", True) == -1 and stray_cr(b"\r\r", True) == 0


@pytest.mark.parametrize("codec", [None, "gz", "zst"])
def test_old_mac_line_ends_are_refused(tmp_path, codec):
    raw = b"0 1\r1 2\r2 3\r"
    data = {None: raw, "gz": gzip.compress(raw), "zst": zst(raw)}[codec]
    p = tmp_path / ("mac.txt" + (f".{codec}" if codec else ""))
    p.write_bytes(data)
    with pytest.raises(GraphFormatError, match=r"mac.txt[.a-z]*:1: carriage return inside a line"):
        read_graph(p)
    plan = plan_read(p)
    if plan.kind == "text":  # the kernels flag it themselves (their NumPy twin here)
        with pytest.raises(_Anomaly):
            _parse_file(plan, NumpyDevice(), 1024)
    with pytest.raises(GraphFormatError, match="carriage return inside a line"):
        read_graph_numpy(p, chunk_bytes=256)
    assert ":1: carriage return" in refused(p)


def test_windows_line_ends_read_as_lines(tmp_path):
    p = tmp_path / "win.txt"
    p.write_bytes(b"src,dst\r\n0,1\r\n1,2\r\n2,3\r")  # (a last '\r' ends the file's last line)
    g = read_graph(p)
    assert g.n == 4 and g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 3]
    got = read_graph_numpy(p, chunk_bytes=256)
    assert got.src.tolist() == [0, 1, 2] and got.dst.tolist() == [1, 2, 3]


def test_a_header_with_a_lone_cr_is_no_header(tmp_path):
    p = tmp_path / "h.txt"
    p.write_bytes(b"src\rdst\n0 1\n")
    with pytest.raises(GraphFormatError, match="h.txt:1: carriage return inside a line"):
        read_graph(p)


# -- 4. node names only when a header declares them, and the whole file has the shape of an edge list

def test_a_python_script_is_not_a_labelled_graph(tmp_path):
    p = tmp_path / "script.py"
    p.write_text('import os\nimport sys\n\n\ndef main(argv):\n    return os.path.join(argv[0], "x")\n')
    with pytest.raises(GraphFormatError, match=r"script.py:1: node names, not integer ids: 'import os' \(pass "
                                               r"--format labelled"):
        read_graph(p)
    assert "script.py:1:" in refused(p)
    g = read_graph(p, fmt="labelled")  # asked for: the first two fields of every line
    assert g.m == 4
    p.write_text('source target\nimport os\nimport sys\n\nx = 1\n')  # declared: then shaped so
    with pytest.raises(GraphFormatError, match=r"script.py:5: not an edge list of node names: its first edge "
                                               r"line has 2 fields, this one 3"):
        read_graph(p)


def test_labelled_graphs_keep_reading(tmp_path):
    p = tmp_path / "names.tsv"
    p.write_bytes(b"# people\nsrc\tdst\tweight\nalice\tbob\t1\nbob\tcarol\t2\n\ncarol\talice\t0.5\n")
    g = read_graph(p)
    assert g.m == 3 and g.meta["node_labels"].values.tolist() == ["alice", "bob", "carol"]


# -- 5. a decompression bomb is refused before memory runs out -------------------------------------

@pytest.mark.parametrize("codec", ["gz", "bz2", "zst"])
def test_bomb_refused_with_need_against_have(tmp_path, codec):
    raw = b"0 1\n" * (8 << 20)  # 32 MB of text, 8 M edges: 128 MB at 16 bytes an edge
    data = {"gz": lambda: gzip.compress(raw, 9), "bz2": lambda: bz2.compress(raw, 9),
            "zst": lambda: zst(raw, level=3)}[codec]()
    p = tmp_path / f"bomb.txt.{codec}"
    p.write_bytes(data)
    env = {"DISTGRAIL_MEMORY": str(64 << 20)}  # (host memory: the CPU path's, where the edges land)
    out = tmp_path / "bomb.h5"
    r = run("index", str(p), "-o", str(out), "--backend", "cpu", env=env)
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and "bomb.txt" in line and "inflate to at least" in line
    assert "need at least" in line and "this machine has 0.1 GiB" in line
    assert not out.exists()


def test_plain_text_beyond_memory_is_refused_with_need_against_have(tmp_path, monkeypatch):
    p = tmp_path / "big.txt"
    p.write_bytes(b"0 1\n" * (1 << 20))
    monkeypatch.setenv("DISTGRAIL_MEMORY", str(4 << 20))
    with pytest.raises(GraphFormatError, match=r"big.txt: the file holds at least [\d,]+ edges, which need at least"):
        read_graph(p)


# -- the fuzz test: the readers against the reference reader of the grammar -----------------------

TOKENS = ["0", "1", "2", "3", "7", "10", "42", "007", "+1", "-1", "1.5", ".5", "1e3", "src", "dst", "from", "to",
          "a", "b", "x1", "node", "w", "head", "tail", "source", "target"]
SEPS = [" ", "\t", ",", "  ", ", "]
ENDS = ["\n"] * 8 + ["\r\n"] * 3 + ["\r"]
ALPHABET = b"0123456789 \t\r\n#%,+-.aex"


def fuzz_text(rng) -> bytes:
    """A file of edge-list-like lines: mostly well formed (integer ids, names, a header, comments,
    blank lines, extra columns, one kind of line end), then a few byte edits and maybe truncated."""
    kind = rng.integers(0, 4)  # 0, 1 integer ids; 2 names; 3 anything
    end = ENDS[rng.integers(0, len(ENDS))] if rng.random() < 0.5 else "\n"
    sep = SEPS[rng.integers(0, len(SEPS))]
    width = int(rng.choice([2, 2, 2, 3]))
    out = []
    if rng.random() < 0.3:
        out.append(sep.join(TOKENS[rng.integers(12, len(TOKENS))] for _ in range(width)))
    for _ in range(int(rng.integers(0, 12))):
        r = rng.random()
        if r < 0.08:
            out.append("" if rng.random() < 0.5 else ["# c 1", "%x", "#"][rng.integers(0, 3)])
            continue
        if kind < 2:
            toks = [str(rng.integers(0, 12)) for _ in range(width)]
        elif kind == 2:
            toks = ["abcdefg"[rng.integers(0, 7)] + "xyz"[rng.integers(0, 3)] for _ in range(width)]
        else:
            toks = [TOKENS[rng.integers(0, len(TOKENS))] for _ in range(int(rng.integers(1, 4)))]
        line = sep.join(toks)
        if rng.random() < 0.03:  # (a tab-separated file's empty field, or tabs as blanks: rule 4)
            line = "\t" + line if rng.random() < 0.5 else line.replace(sep, "\t\t", 1)
        if rng.random() < 0.1:  # (glued to the last field: a comment after a third, else an error: rule 2)
            line += (" # " if rng.random() < 0.8 else "#") + TOKENS[rng.integers(0, len(TOKENS))]
        out.append(line)
    b = bytearray(end.join(out).encode() + (end.encode() if out and rng.random() < 0.8 else b""))
    for _ in range(int(rng.integers(0, 3))):
        k = int(rng.integers(0, len(b) + 1))
        op = rng.integers(0, 3)
        if op == 0 and k < len(b):
            del b[k]
        elif op == 1:
            b.insert(k, int(rng.choice(list(ALPHABET))))
        elif k < len(b):
            b[k] = int(rng.choice(list(ALPHABET)))
    if rng.random() < 0.1:
        b = b[: int(rng.integers(0, len(b) + 1))]
    return bytes(b)


def _as_names(g):
    labels = g.meta.get("node_labels")
    vals = None if labels is None else [str(x) for x in labels.values.tolist()]
    name = (lambda i: vals[i]) if vals is not None else str
    return [(name(int(u)), name(int(v))) for u, v in zip(g.src.tolist(), g.dst.tolist())]


def test_fuzz_readers_against_the_reference_grammar(tmp_path):
    """600 generated files: each is refused by the CPU reader with one line naming the file (and
    then by the GPU parser's NumPy twin with the same line), exactly when the reference refuses
    it; otherwise both give the reference's n and edges, in file order."""
    from grammar_reference import reference
    from distgrail.dtypes import max_vertices

    rng = np.random.default_rng(40)
    cap, counts = max_vertices(), {"ok": 0, "refused": 0}
    for i in range(600):
        data = fuzz_text(rng)
        p = tmp_path / f"f{i}.txt"
        p.write_bytes(data)
        want = reference(data, cap)
        try:
            g = read_graph(p)
        except GraphFormatError as e:
            assert want is None, (data, str(e), want)
            msg = str(e)
            assert "\n" not in msg and msg.startswith(str(p)), msg
            with pytest.raises(GraphFormatError) as twin:
                read_graph_numpy(p, chunk_bytes=64)
            assert str(twin.value) == msg
            counts["refused"] += 1
            continue
        assert want is not None, (data, "read as", g.n, _as_names(g))
        n, edges, names = want
        assert g.n == n and _as_names(g) == [(str(u), str(v)) for u, v in edges], data
        if not names:
            t = read_graph_numpy(p, chunk_bytes=64)
            assert t.n == n and t.src.tolist() == [u for u, _ in edges] and t.dst.tolist() == [v for _, v in edges]
        counts["ok"] += 1
    assert counts["ok"] > 90 and counts["refused"] > 100, counts  # (96 ok since rule 9: '6\t\t1, 11' in a CSV)


@pytest.mark.parametrize("codec", ["gz", "bz2", "zst"])
def test_compressed_files_cut_anywhere_are_refused(tmp_path, codec):
    """Every compressed format cut at 40 random offsets (and one byte short): never fewer edges,
    always a one-line error naming the file; the GPU path's stream fails too."""
    raw = b"".join(b"%d %d\n" % (i, (i * 7) % 5000) for i in range(40_000))
    data = {"gz": lambda: gzip.compress(raw), "bz2": lambda: bz2.compress(raw), "zst": lambda: zst(raw)}[codec]()
    rng = np.random.default_rng({"gz": 1, "bz2": 2, "zst": 3}[codec])
    cuts = sorted({int(c) for c in rng.integers(1, len(data), 40)} | {len(data) - 1})
    for cut in cuts:
        p = tmp_path / f"g{cut}.txt.{codec}"
        p.write_bytes(data[:cut])
        with pytest.raises(GraphFormatError) as e:
            read_graph(p)
        assert "\n" not in str(e.value) and str(e.value).startswith(str(p)), str(e.value)
        if cut >= 4:  # (the codec's magic bytes whole: the GPU path's stream takes it)
            stream_fails(p, codec)
        os.remove(p)
    p = tmp_path / f"whole.txt.{codec}"
    p.write_bytes(data)
    assert read_graph(p).m == 40_000


@pytest.mark.mpi(min_size=2)
def test_truncated_zstd_in_a_partitioned_read_ends_every_rank():
    """``--partition on`` reads a compressed stream on rank 0 and scatters it: a cut file is every
    rank's error (on 8de6ce4 the ranks indexed the first half, exit 0)."""
    import shutil
    import tempfile

    from mpi4py import MPI

    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.partition_read import read_parts

    comm = MPI.COMM_WORLD
    d = comm.bcast(tempfile.mkdtemp(prefix="distgrail-misreads-") if comm.rank == 0 else None, root=0)
    try:
        p = os.path.join(d, "cut.txt.zst")
        if comm.rank == 0:
            c = zst(chain(100_000))
            with open(p, "wb") as f:
                f.write(c[: len(c) // 2])
        comm.Barrier()
        with pytest.raises(RankError, match="ends inside a frame"):
            read_parts(comm, get_backend("cpu"), p, None, "auto")
    finally:
        comm.Barrier()
        if comm.rank == 0:
            shutil.rmtree(d, ignore_errors=True)


def test_header_decided_past_the_first_64_kib(tmp_path):
    """The header rule looks at the line after the first edge line, wherever it is: behind 64 KiB
    of comments, ``caller callee`` is still a header (it was read as two node names: a labelled
    graph of 5 vertices, found by review)."""
    p = tmp_path / "late.txt"
    p.write_bytes(b"caller callee\n" + b"#c\n" * 30_000 + b"0 1\n1 2\n")
    g = read_graph(p)
    assert g.n == 3 and g.src.tolist() == [0, 1] and "node_labels" not in g.meta
    t = read_graph_numpy(p, chunk_bytes=4096)
    assert t.n == 3 and t.src.tolist() == [0, 1]


def test_two_minus_signs_are_no_integer(tmp_path):
    """``a b`` then ``--1 c``: no integer follows, so ``a b`` is no header and the file is a graph
    of names (the reference reader's rule; ``--1`` passed for an integer and the file was refused):
    ``auto`` refuses it at line 1 (names no header declares), ``--format labelled`` reads both edges.
    With ``src dst`` above and ``--1 2`` the names would hold an integer: ambiguous, refused."""
    p = tmp_path / "names.txt"
    p.write_bytes(b"a b\n--1 c\n")
    with pytest.raises(GraphFormatError, match=r"names.txt:1: node names, not integer ids: 'a b'"):
        read_graph(p)
    g = read_graph(p, fmt="labelled")
    assert g.m == 2 and g.meta["node_labels"].values.tolist() == ["a", "b", "--1", "c"]
    p.write_bytes(b"src dst\na b\n--1 2\n")
    with pytest.raises(GraphFormatError, match=r"names.txt:3: node names and integer ids mixed \('2'\)"):
        read_graph(p)


LONG_ZEROS = "0" * 5000  # (Python's int() reads at most 4,300 digits)
LONG_ZEROS_CASES = {
    "g.txt": "0 1\n1 " + LONG_ZEROS + "2\n",
    "g.gra": "graph_for_greach\n" + LONG_ZEROS + "3\n0: 1 #\n1: 2 #\n2: #\n",
    "g.mtx": "%%MatrixMarket matrix coordinate pattern general\n3 3 " + LONG_ZEROS + "2\n1 2\n2 3\n",
    "h.txt": "# distgrail edge list: " + LONG_ZEROS + "3 vertices, 2 edges\n0 1\n1 2\n",
}


@pytest.mark.parametrize("name", sorted(LONG_ZEROS_CASES))
def test_thousands_of_leading_zeros_read_as_the_number(tmp_path, name):
    """An id or count written with 5,000 leading zeros is the number (007 is 7): the file is
    read as the same file without them (the pre-read's size check, a .gra or .mtx count line,
    distgrail's own first line all called int() on the text, which refuses 4,301 digits and more:
    a traceback and exit 1)."""
    p = tmp_path / name
    p.write_text(LONG_ZEROS_CASES[name])
    q = tmp_path / ("plain" + p.suffix)
    q.write_text(LONG_ZEROS_CASES[name].replace(LONG_ZEROS, ""))
    a, b = read_graph(p), read_graph(q)
    assert (a.n, a.src.tolist(), a.dst.tolist()) == (b.n, b.src.tolist(), b.dst.tolist())
    r = run("index", str(p), "-o", str(tmp_path / "i.h5"), "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("text", ["0 1\n1 " + "9" * 4400 + "\n",
                                  "%%MatrixMarket matrix coordinate pattern general\n" + "9" * 5000 + " "
                                  + "9" * 5000 + " 2\n1 2\n2 3\n"])
def test_a_number_past_what_int_reads_is_refused_by_the_file(tmp_path, text):
    """An id or count of 4,400 and more significant digits: refused with status 2 naming the
    file (an OverflowError in the size check before, a ValueError from int() before that)."""
    p = tmp_path / ("g.mtx" if text.startswith("%%") else "g.txt")
    p.write_text(text)
    r = run("index", str(p), "-o", str(tmp_path / "i.h5"), "--backend", "cpu")
    assert r.returncode == 2 and str(p) in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == [p.name]


def test_labelled_names_that_write_one_integer_two_ways_are_two_nodes(tmp_path):
    """``--format labelled`` makes integer labels only of names written as the integers are
    (no leading zero, no -0, at most 19 digits): ``002`` and ``2`` are two nodes (they collided
    as the integer 2: "node label 2 appears twice", no file, no line); a name of 5,000 digits
    stays a name (int() refused it: a traceback)."""
    p = tmp_path / "n.txt"
    p.write_text("002 0\n2 1\n-0 3\n")
    g = read_graph(p, fmt="labelled")
    names = [str(x) for x in g.meta["node_labels"].values]
    assert sorted(names) == ["-0", "0", "002", "1", "2", "3"]
    pairs = {(names[u], names[v]) for u, v in zip(g.src.tolist(), g.dst.tolist())}
    assert pairs == {("002", "0"), ("2", "1"), ("-0", "3")}
    big = tmp_path / "big.txt"
    big.write_text("1 2\n2 " + "7" * 5000 + "\n")
    g = read_graph(big, fmt="labelled")
    assert g.n == 3 and sorted(map(str, g.meta["node_labels"].values)) == ["1", "2", "7" * 5000]
    q = tmp_path / "ints.txt"  # (canonical integer names still become integer labels)
    q.write_text("5 7\n7 9\n")
    labels = read_graph(q, fmt="labelled").meta["node_labels"]
    assert labels.kind == "int" and sorted(labels.values.tolist()) == [5, 7, 9]
