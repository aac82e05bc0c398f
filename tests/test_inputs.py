"""Inputs people have (issue 26 item 1): compressed text graphs, CSV/TSV with a header, Parquet and
Arrow edge tables, edge lists of node names; each indexed and answered as plain BFS answers, and
bad input refused with file, line and value (exit 2, no output left)."""

import bz2
import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
import distgrail.io.writers
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import GraphFormatError
from distgrail.io import compressed, decompress
from distgrail.io.dialect import sniff
from distgrail.io.graph import EdgeGraph
from distgrail.io.read import read_graph
from conftest import ROOT


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


def graph(n=400, m=1500, seed=3):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = np.where(rng.random(m) < 0.8, np.minimum(src + rng.integers(1, 20, m), n - 1), rng.integers(0, n, m))
    return src, dst  # mostly forward edges with some back edges (cycles)


def edge_text(src, dst, sep=" ", header=None, names=False) -> bytes:
    nm = (lambda i: f"v{i}") if names else str
    lines = ([header] if header else []) + [f"{nm(a)}{sep}{nm(b)}" for a, b in zip(src, dst)]
    return ("\n".join(lines) + "\n").encode()


def zstd(data):
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)


def check_against_bfs(idx, src, dst, n, labels=False, pairs=600):
    rng = np.random.default_rng(7)
    s, t = rng.integers(0, n, pairs), rng.integers(0, n, pairs)
    ip, ix = csr_of(EdgeGraph(n=n, src=np.asarray(src), dst=np.asarray(dst)))
    expected = bfs_reachable(ip, ix, s, t)
    if labels:
        got, _ = idx.query(np.array([f"v{i}" for i in s]), np.array([f"v{i}" for i in t]), backend="cpu")
    else:
        got, _ = idx.query(s, t, backend="cpu")
    assert expected.any() and not expected.all()
    np.testing.assert_array_equal(got, expected)


COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".zst": zstd}


@pytest.mark.parametrize("ext", sorted(COMPRESS))
@pytest.mark.parametrize("inner", ["txt", "gra", "csv"])
def test_compressed_graphs_index_like_bfs(tmp_path, ext, inner):
    src, dst = graph()
    n = 400
    if inner == "gra":
        plain = tmp_path / "plain.gra"
        distgrail.io.writers.write_graph(EdgeGraph(n=n, src=src, dst=dst), plain)
        data = plain.read_bytes()
    else:
        data = edge_text(src, dst, "," if inner == "csv" else " ", "src,dst" if inner == "csv" else None)
    p = tmp_path / f"g.{inner}{ext}"
    p.write_bytes(COMPRESS[ext](data))
    g = read_graph(p)
    assert g.n == n and g.meta["format"] == ("gra" if inner == "gra" else "edgelist")
    idx = distgrail.build_index(str(p), dims=3, backend="cpu")
    check_against_bfs(idx, src, dst, n)
    import blake3

    assert g.digest == "blake3:" + blake3.blake3(p.read_bytes()).hexdigest()  # the stored file's hash


def test_compressed_stream_crosses_blocks_and_chunks(tmp_path, monkeypatch):
    """Tiny decompression blocks and parse chunks: lines cut by both, same edges as the plain file."""
    src, dst = graph(3000, 20000, seed=5)
    data = edge_text(src, dst)
    (tmp_path / "g.txt").write_bytes(data)
    (tmp_path / "g.txt.gz").write_bytes(gzip.compress(data))
    monkeypatch.setattr(compressed, "BLOCK", 777)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 1000)
    a, b = read_graph(tmp_path / "g.txt"), read_graph(tmp_path / "g.txt.gz")
    assert a.n == b.n
    np.testing.assert_array_equal(a.src, b.src)
    np.testing.assert_array_equal(a.dst, b.dst)


@pytest.mark.parametrize("ext", sorted(COMPRESS))
def test_compressed_bad_line_names_file_line_value(tmp_path, monkeypatch, ext):
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    lines = [f"{i} {i + 1}" for i in range(200)]
    lines[150] = "150 1x5"
    p = tmp_path / f"g.txt{ext}"
    p.write_bytes(COMPRESS[ext](("\n".join(lines) + "\n").encode()))
    with pytest.raises(GraphFormatError, match=r"g\.txt.*:151: vertex id must be a non-negative integer, got '1x5'"):
        read_graph(p)


def test_truncated_gzip_is_refused_with_its_name(tmp_path):
    data = gzip.compress(edge_text(*graph(2000, 30000)))
    p = tmp_path / "cut.txt.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFormatError, match=r"cut\.txt\.gz: not a readable gzip file, truncated or damaged"):
        read_graph(p)


@pytest.mark.parametrize("sep,header", [(",", "src,dst"), ("\t", "source\ttarget"), (" ", "from to"),
                                        (",", "a,b"), (",", None)])
def test_csv_tsv_with_header(tmp_path, sep, header):
    src, dst = graph()
    p = tmp_path / "g.csv"
    p.write_bytes(edge_text(src, dst, sep, header))
    idx = distgrail.build_index(str(p), dims=3, backend="cpu")
    assert idx.node_labels is None
    check_against_bfs(idx, src, dst, 400)


def test_sniff_rules():
    assert sniff(b"src,dst\n0,1\n").body == 8 and sniff(b"src,dst\n0,1\n").comma
    assert sniff(b"# c\nsource\ttarget\n0\t1\n").header == "source\ttarget"
    assert not sniff(b"0 1\n1 2\n").labelled and sniff(b"0 1\n").body == 0
    bare = sniff(b"a b\nb c\n")  # names no header declares: not labelled, refused by auto
    assert not bare.labelled and bare.body == 0 and bare.undeclared and bare.undeclared_line == 1
    assert sniff(b"src dst\nx y\n").labelled and sniff(b"src dst\nx y\n").body == 8
    assert not sniff(b"0 x\n").labelled  # one name beside an id: a broken integer line


@pytest.mark.parametrize("ext,header,fmt", [(".txt", None, "labelled"), (".txt", "from to", "auto"),
                                            (".tsv", "source\ttarget", "auto"), (".csv.gz", "src,dst", "auto")])
def test_edge_list_of_names_is_a_labelled_graph(tmp_path, ext, header, fmt):
    src, dst = graph()
    sep = "," if ".csv" in ext else "\t" if ext == ".tsv" else " "
    data = edge_text(src, dst, sep, header, names=True)
    p = tmp_path / f"names{ext}"
    p.write_bytes(gzip.compress(data) if ext.endswith(".gz") else data)
    idx = distgrail.build_index(str(p), dims=3, backend="cpu", fmt=fmt)
    assert idx.node_labels is not None and idx.node_labels.kind == "str"
    check_against_bfs(idx, src, dst, 400, labels=True)


def test_labelled_format_reads_integer_names(tmp_path):
    p = tmp_path / "hashes.txt"
    p.write_text("900000000001 5\n5 77\n")
    g = read_graph(p, fmt="labelled")
    assert g.n == 3 and g.meta["node_labels"].values.tolist() == [900000000001, 5, 77]
    assert distgrail.build_index(g, dims=2, backend="cpu").reachable(900000000001, 77)


@pytest.mark.parametrize("text,line,what", [
    ("src dst\na b\nb\n", 3, "expected two node names 'u v' (edge), got 'b'"),
    ("0 1\n1 x\n", 2, "vertex id must be a non-negative integer, got 'x'"),
    ("0 x\n", 1, "vertex id must be a non-negative integer, got 'x'"),
    ("src,dst\n0,1\n2,-3\n", 3, "negative vertex id, got '-3'"),
])
def test_bad_lines_keep_the_error(tmp_path, text, line, what):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(GraphFormatError) as e:
        read_graph(p)
    assert str(e.value) == f"{p}:{line}: {what}"


def test_cli_bad_compressed_input_exit_2_no_output(tmp_path):
    p = tmp_path / "bad.txt.gz"
    p.write_bytes(gzip.compress(b"0 1\n1 2\n2 zz\n"))
    out = tmp_path / "i.h5"
    r = run("index", str(p), "-o", str(out), "--backend", "cpu", "--quiet")
    assert r.returncode == 2
    assert f"{p}:3: vertex id must be a non-negative integer, got 'zz'" in r.stderr
    assert os.listdir(tmp_path) == ["bad.txt.gz"]


def test_cli_gzip_labelled_index_then_query(tmp_path):
    p = tmp_path / "names.txt.gz"
    p.write_bytes(gzip.compress(b"# SNAP-like\nalice bob\nbob carol\ndave alice\n"))
    out = tmp_path / "i.h5"
    assert run("index", str(p), "-o", str(out), "--backend", "cpu", "--quiet").returncode == 2  # no header: asked
    assert run("index", str(p), "-o", str(out), "--backend", "cpu", "--quiet", "--format", "labelled").returncode == 0
    (tmp_path / "q.txt").write_text("dave carol\ncarol dave\n")
    r = run("query", str(out), str(tmp_path / "q.txt"), "-o", "-", "--backend", "cpu", "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "0"]


# -- Parquet / Arrow --------------------------------------------------------------------------
def tables(tmp_path, src, dst, names=("src", "dst"), labels=False, extra=True):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    cols = {"weight": np.ones(len(src))} if extra else {}
    if labels:
        cols.update({names[0]: [f"v{i}" for i in src], names[1]: [f"v{i}" for i in dst]})
    else:
        cols.update({names[0]: np.asarray(src, np.int64), names[1]: np.asarray(dst, np.int64)})
    t = pa.table(cols)
    pq.write_table(t, tmp_path / "g.parquet", row_group_size=300)
    feather.write_feather(t, tmp_path / "g.feather", chunksize=300)
    return [tmp_path / "g.parquet", tmp_path / "g.feather"]


@pytest.mark.parametrize("labels", [False, True])
def test_parquet_and_arrow_edge_tables(tmp_path, labels):
    src, dst = graph()
    for p in tables(tmp_path, src, dst, ("source", "target"), labels=labels):
        idx = distgrail.build_index(str(p), dims=3, backend="cpu")
        assert (idx.node_labels is not None) == labels
        check_against_bfs(idx, src, dst, 400, labels=labels)


def test_edge_table_errors_name_row_and_value(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"src": [0, 1, 2], "dst": [1, -4, 0]}), tmp_path / "neg.parquet")
    with pytest.raises(GraphFormatError, match=r"neg\.parquet: row 2: column 'dst': vertex id must be >= 0, got -4"):
        read_graph(tmp_path / "neg.parquet")
    pq.write_table(pa.table({"src": [0, None], "dst": [1, 2]}), tmp_path / "null.parquet")
    with pytest.raises(GraphFormatError, match=r"row 2: column 'src': empty value"):
        read_graph(tmp_path / "null.parquet")
    pq.write_table(pa.table({"src": [0.5], "dst": [1.0]}), tmp_path / "float.parquet")
    with pytest.raises(GraphFormatError, match=r"must hold integers or strings, got double"):
        read_graph(tmp_path / "float.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    r = run("index", str(tmp_path / "junk.parquet"), "-o", str(tmp_path / "i.h5"), "--backend", "cpu")
    assert r.returncode == 2 and "junk.parquet: not a readable parquet file" in r.stderr
    assert not (tmp_path / "i.h5").exists()


def test_edge_table_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "g.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(GraphFormatError, match=r"needs pyarrow: pip install 'distgrail\[parquet\]'"):
        read_graph(tmp_path / "g.parquet")


def _inputs(tmp_path, src, dst):
    """Files of one graph in the forms the GPU path parses: plain, header, CSV, compressed."""
    import zlib

    text, csv = edge_text(src, dst, " ", "src dst"), edge_text(src, dst, ",", "src,dst")
    files = {"h.txt": text, "g.csv": csv, "g.txt.gz": gzip.compress(edge_text(src, dst)),
             "g.csv.gz": gzip.compress(csv, 1), "g.txt.bz2": bz2.compress(text),
             # two gzip members and zero padding (as concatenated and block-padded files have)
             "two.txt.gz": gzip.compress(text[:len(text) // 2]) + gzip.compress(text[len(text) // 2:]) + b"\0" * 7,
             "raw.txt.gz": zlib.compress(text, 6, 31)}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return list(files)


@pytest.mark.parametrize("chunk", [256, 4096, None])
def test_gpu_path_parses_csv_and_compressed_text(tmp_path, chunk):
    """The GPU path (its NumPy twin here, the kernels in test_parse_gpu) parses CSV with a header
    and gzip/bzip2 edge lists itself (decompressed by a host thread while the kernels parse): the
    same edges, n and digest as the CPU reader, in chunks far smaller than the file."""
    from distgrail.io.chunks import plan_read
    from distgrail.io.parse import read_graph_numpy

    src, dst = graph()
    names = _inputs(tmp_path, src, dst)
    assert plan_read(tmp_path / "g.csv").kind == "text" and plan_read(tmp_path / "g.csv").comma
    plan = plan_read(tmp_path / "g.csv.gz")
    assert (plan.kind, plan.codec, plan.comma, plan.body) == ("stream", "gz", True, len("src,dst\n"))
    for name in names:
        said = []
        g = read_graph_numpy(tmp_path / name, chunk_bytes=chunk, notify=said.append)
        want = read_graph(tmp_path / name)
        assert g.meta["parser"] == "numpy" and not said, (name, said)
        assert g.n == want.n and g.digest == want.digest, name
        np.testing.assert_array_equal(g.src, src)
        np.testing.assert_array_equal(g.dst, dst)


def test_gpu_path_leaves_names_and_compressed_gra_to_the_host(tmp_path):
    from distgrail.io.chunks import plan_read
    from distgrail.io.parse import read_graph_numpy

    (tmp_path / "n.txt").write_bytes(b"src dst\na b\nb c\n")
    (tmp_path / "g.gra.gz").write_bytes(gzip.compress(b"2\n0: 1 #\n1: #\n"))
    assert "node names" in plan_read(tmp_path / "n.txt").reason
    assert plan_read(tmp_path / "g.gra.gz").reason == "gzip-compressed gra text is decompressed and parsed on the host"
    said = []
    g = read_graph_numpy(tmp_path / "g.gra.gz", notify=said.append)
    assert g.meta["parser"] == "cpu" and g.n == 2 and list(g.src) == [0] and list(g.dst) == [1]
    assert len(said) == 1 and "parsed on the host" in said[0]


def _bad_crc(text: bytes) -> bytes:
    """``text`` gzip'd with a wrong CRC-32 in its trailer (the first 64 KiB read fine)."""
    raw = bytearray(gzip.compress(text))
    raw[-6] ^= 0xFF
    return bytes(raw)


@pytest.mark.parametrize("name,data", [
    ("bad.txt.gz", gzip.compress(b"0 1\n1 2\n2 x\n")),
    ("bad.csv.gz", gzip.compress(b"src,dst\n0,1\n1,-2\n")),
    ("cut.txt.gz", gzip.compress(b"0 1\n" * 5000)[:-20]),
    ("tail.txt.gz", gzip.compress(b"0 1\n") + b"junk"),
    ("bad.csv", b"src,dst\n0,1\n1;2\n"),
    ("crc.csv.gz", _bad_crc(b"src,dst\n" + b"".join(b"%d,%d\n" % (i, i + 1) for i in range(30000)))),
])
def test_gpu_path_bad_input_gets_the_cpu_readers_error(tmp_path, name, data):
    """Anything unusual in CSV or compressed input (a bad token, a truncated or trailing-junk gzip
    stream) sends the file to the CPU reader, whose error names file, line and value."""
    from distgrail.io.parse import read_graph_numpy

    (tmp_path / name).write_bytes(data)
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(tmp_path / name)
    with pytest.raises(GraphFormatError) as twin:
        read_graph_numpy(tmp_path / name, notify=lambda s: None)
    assert str(twin.value) == str(cpu.value)


@pytest.mark.parametrize("lib", ["zlib", "isal"])
def test_gzip_blocks_match_gzip(tmp_path, lib):
    """The gzip reader behind the GPU path (zlib's or ISA-L's inflate) gives gzip's bytes for
    members of any size, padding between members, and output blocks of any size; data after a
    member, a member cut short or a wrong CRC-32 is not its to judge (the CPU reader then is)."""
    import io
    import zlib

    new = zlib.decompressobj if lib == "zlib" else pytest.importorskip(
        "isal.isal_zlib", reason="isal (extra distgrail[gzip]) is not installed").decompressobj

    rng = np.random.default_rng(5)
    for trial in range(12):
        parts = [rng.integers(48, 58, int(rng.integers(0, 300_000)), dtype=np.uint8).tobytes()
                 for _ in range(int(rng.integers(1, 4)))]
        raw = b"".join(gzip.compress(p, int(rng.integers(1, 10))) + b"\0" * int(rng.integers(0, 3)) for p in parts)
        block = int(rng.choice([97, 4096, 1 << 20]))
        out = list(decompress._gzip_blocks(io.BytesIO(raw), block, new))
        assert b"".join(out) == gzip.GzipFile(fileobj=io.BytesIO(raw)).read() == b"".join(parts)
        assert all(0 < len(o) <= block for o in out)
    with pytest.raises(decompress.StreamError, match="data after a gzip member"):
        list(decompress._gzip_blocks(io.BytesIO(gzip.compress(b"1 2\n") + b"xy"), 4096, new))
    with pytest.raises(decompress.StreamError, match="ends inside a member"):
        list(decompress._gzip_blocks(io.BytesIO(gzip.compress(b"1 2\n" * 1000)[:-30]), 4096, new))
    bad = bytearray(gzip.compress(b"1 2\n" * 1000))
    bad[-6] ^= 0xFF  # the member's CRC-32
    with pytest.raises(Exception) as e:
        list(decompress._gzip_blocks(io.BytesIO(bytes(bad)), 4096, new))
    assert "check" in str(e.value) or "checksum" in str(e.value)


def test_chunk_reads_in_parallel_pieces_equal_one_read(tmp_path, monkeypatch):
    """A chunk read by several threads (pieces of READ_PIECE bytes) holds the file's bytes, and the
    parse over such chunks equals the one-thread parse."""
    from distgrail.io import chunks
    from distgrail.io.parse import read_graph_numpy

    src, dst = graph(n=5000, m=60000)
    p = tmp_path / "g.txt"
    p.write_bytes(edge_text(src, dst))
    data = p.read_bytes()
    monkeypatch.setattr(chunks, "READ_PIECE", 1000)
    monkeypatch.setenv("DISTGRAIL_READ_THREADS", "3")
    fd = os.open(p, os.O_RDONLY)
    try:
        for pos, size in ((0, len(data)), (17, 5001), (len(data) - 2500, 4000)):
            out = np.zeros(size, np.uint8)
            got = chunks._read_parallel(fd, out, pos)
            assert got == min(size, len(data) - pos)
            assert out[:got].tobytes() == data[pos:pos + got]
    finally:
        os.close(fd)
    g = read_graph_numpy(p, chunk_bytes=4096)
    np.testing.assert_array_equal(g.src, src)
    np.testing.assert_array_equal(g.dst, dst)


def test_estimates_count_csv_edges_and_bad_thread_counts_fall_back(tmp_path, monkeypatch):
    """The sampled edge count of a CSV file is that of the same graph with blanks (it was 0), the
    densest window's estimate is at least the sparsest's, and a DISTGRAIL_READ_THREADS that is
    not a number reads with the default."""
    from distgrail.io.chunks import estimate_edges, plan_read
    from distgrail.io.parse import read_graph_numpy

    src, dst = graph(n=5000, m=40000)
    (tmp_path / "g.csv").write_bytes(edge_text(src, dst, ",", "src,dst"))
    (tmp_path / "g.txt").write_bytes(edge_text(src, dst, " ", "src dst"))
    csv, txt = plan_read(tmp_path / "g.csv"), plan_read(tmp_path / "g.txt")
    assert estimate_edges(csv) == estimate_edges(txt) and estimate_edges(csv)[0] > 0.8 * 40000
    assert estimate_edges(csv, densest=True)[0] >= estimate_edges(csv)[0]
    monkeypatch.setenv("DISTGRAIL_READ_THREADS", "four")
    g = read_graph_numpy(tmp_path / "g.txt", chunk_bytes=4096)
    np.testing.assert_array_equal(g.src, src)
