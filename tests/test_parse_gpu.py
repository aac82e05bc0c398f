"""GPU text parsing (kernels/parse.cu) against its NumPy twin stage by stage, bit for bit, and
against the CPU reader end to end (same graph, same SHA-256, same error text). Skipped without a
usable GPU (conftest says why).
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from distgrail.errors import BackendError, GraphFormatError
from distgrail.io.parse import CudaDevice, parse_chunk_cuda, parse_chunk_numpy, read_graph_cuda, read_text_graph
from distgrail.io.read import read_graph
from conftest import DATA_DIR
from test_parse import bad_cases, edgelist_text, gra_text, mtx_text, valid_cases, write

pytestmark = pytest.mark.gpu


def _same(name, a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} (gpu) != {b.dtype} (cpu)"
    assert a.shape == b.shape, f"{name}: shape {a.shape} (gpu) != {b.shape} (cpu)"
    if not np.array_equal(a, b):
        bad = np.flatnonzero((a != b).ravel())
        raise AssertionError(f"{name}: {bad.size} of {a.size} entries differ, first at flat index {bad[0]}: "
                             f"gpu {a.ravel()[bad[0]]} cpu {b.ravel()[bad[0]]}")


def _chunks():
    rng = np.random.default_rng(7)
    out = [("gra", gra_text(rng, 2000, 12, header=False).split("\n", 1)[1], 1999),
           ("gra", "0: 1 2 #\r\n\r\n1:\t0#\n2: 2 2 #", 2),
           ("edgelist", edgelist_text(rng, 5000, 20000), None),
           ("edgelist", "0 1\n1 2", None),
           ("csv", "0,1\n1 , 2,7\n# a,b\n3,,4\r\n5,6 % c", None),
           ("mtx", mtx_text(rng, 300, 3000, field="real").split("\n", 4)[4], 300)]
    # bad chunks: the arrays must still agree, flags included
    out += [("gra", "0: 1 #\n1: 7 #\n2 #\n3: 1.5 #\n", 3), ("edgelist", "0 1\n2\n3 x\n-1 2\n", None),
            ("mtx", "0 1\n1 9\n", 5), ("csv", "0,1\n1;2\n3,x\n", None)]
    return out


@pytest.mark.parametrize("k", range(len(_chunks())))
def test_stages_bit_for_bit(k):
    fmt, text, hi = _chunks()[k]
    lo = 1 if fmt == "mtx" else 0
    want = parse_chunk_numpy(text.encode(), fmt, lo, hi)
    got = parse_chunk_cuda(text.encode(), fmt, lo, hi)
    order = ("counts", "incl", "flags", "tok_pos", "tok_line", "line_tok", "line_a", "line_b", "a_pos", "a_tok",
             "b_pos", "b_tok", "line_edges", "line_u", "line_v", "seen", "eincl", "src", "dst")
    assert set(order) == set(want) == set(got)
    for key in order:
        _same(f"{fmt} chunk {k}: {key}", got[key], want[key])


def _check_graph(got, want):
    import cupy

    assert isinstance(got.src, cupy.ndarray) and got.src.dtype == cupy.int32 and got.dst.dtype == cupy.int32
    assert got.n == want.n and got.digest == want.digest and got.meta["format"] == want.meta["format"]
    _same("src", got.src.get(), want.src)
    _same("dst", got.dst.get(), want.dst)


@pytest.mark.parametrize("chunk", [1024, 4096, None])
def test_files_equal_cpu_reader(tmp_path, chunk):
    rng = np.random.default_rng(3)
    for name, text, nv in valid_cases(rng):
        p = write(tmp_path, name, text)
        got = read_graph_cuda(p, num_vertices=nv, chunk_bytes=chunk)
        _check_graph(got, read_graph(p, num_vertices=nv))
        if chunk is None or max(len(x) for x in text.split("\n")) < chunk:
            assert got.meta["parser"] == "gpu", name


def test_generated_graphs(tmp_path):
    from distgrail.io.generate import generate
    from distgrail.io.writers import write_graph

    for kind in ("paper", "scale-free"):
        g = generate(kind, 20000, 8, seed=4)
        for ext in ("gra", "txt"):
            p = str(tmp_path / f"{kind}.{ext}")
            write_graph(g, p)
            for chunk in (1 << 16, None):
                got = read_graph_cuda(p, chunk_bytes=chunk)
                assert got.meta["parser"] == "gpu"
                _check_graph(got, read_graph(p))


def test_benchmark_graphs(data_dir):
    files = sorted(glob.glob(os.path.join(DATA_DIR, "*.gra")))
    assert files
    for p in files:
        got = read_graph_cuda(p, chunk_bytes=1 << 20)
        assert got.meta["parser"] == "gpu", p
        _check_graph(got, read_graph(p))


@pytest.mark.parametrize("name,text,nv", bad_cases(), ids=[c[0] for c in bad_cases()])
def test_bad_input_same_error(tmp_path, name, text, nv):
    p = write(tmp_path, name, text)
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(p, num_vertices=nv)
    with pytest.raises(GraphFormatError) as gpu:
        read_graph_cuda(p, num_vertices=nv)
    assert str(gpu.value) == str(cpu.value)


def test_too_big_falls_back_with_one_line(tmp_path):
    class Small(CudaDevice):
        def fits(self, nbytes, what):
            raise BackendError(f"{what} needs about {nbytes} bytes")

    p = write(tmp_path, "a.gra", "1\n0: #\n")
    notes = []
    assert read_text_graph(p, dev=Small(), notify=notes.append) is None
    assert len(notes) == 1 and "reading on the CPU" in notes[0]


@pytest.mark.parametrize("chunk", [256, None])
def test_csv_and_compressed_files_parse_on_the_gpu(tmp_path, chunk):
    """CSV with a header and gzip/bzip2 edge lists (decompressed by a host thread while the kernels
    parse): the CPU reader's graph and digest, parsed by the kernels (parser "gpu")."""
    from test_inputs import _inputs, graph

    src, dst = graph()
    for name in _inputs(tmp_path, src, dst):
        got = read_graph_cuda(tmp_path / name, chunk_bytes=chunk)
        assert got.meta["parser"] == "gpu", name
        _check_graph(got, read_graph(tmp_path / name))


# -- lines of integers as many fields as the first (F_WIDTH; tests/test_field_count.py on the CPU) ---------

def _width_chunks():
    """(text, width): the lines kernel against its twin with the width check on, equal and unequal
    widths, comment tails, tokens that start at the comment, tabs, CRLF; lines of other counts
    whose tokens are not all digit runs (float weights, NetworkX's dicts, words) are not flagged."""
    rng = np.random.default_rng(17)
    lines = [f"{a} {b} {w}" for a, b, w in rng.integers(0, 1000, (3000, 3))]
    wide = "\n".join(lines) + "\n"
    mixed = list(lines)
    for k in rng.integers(0, len(mixed), 40):
        mixed[k] = mixed[k] + rng.choice([" 7", " #x", "#x y", " % 1 2", "\t8 9"])
    alphabet = np.frombuffer(b"01 \t\t#%x\n\n", np.uint8)
    noise = alphabet[rng.integers(0, alphabet.size, 5000)].tobytes().decode()
    digits = np.frombuffer(b"0011 \t  #%x.{\n\n", np.uint8)
    noise2 = digits[rng.integers(0, digits.size, 5000)].tobytes().decode()
    tails = [" 0.5", " {}", " {'weight': 1.0}", " x y", " 7x", " 7#x", " 7%", " 8 9", " -3", ""]
    weights = "\n".join(f"{a} {b}{tails[k]}" for a, b, k in rng.integers(0, 10, (3000, 3))) + "\n"
    nx = "0 1 {}\n1 2 {'weight': 1.0}\n2 3 {'label': 'x y', 'w': 2}\n"
    return [(wide, 3), (wide, 2), ("\n".join(mixed) + "\n", 3), ("0 1\n2 3 4\n", 2), ("0 1 # x y\n2 3#z\n4 5 %\n", 2),
            ("0 1 #x\n0\t\t1\r\n3\n", 3), ("0 1 9\n1 2", 3), (noise, 1), (noise, 2), (noise, 3),
            (weights, 2), (weights, 3), (nx, 3), (nx, 2), ("0 1 0.5\n0 1 7x\n0 1 -3\n0 1 {}\n", 2),
            ("0 1 7#x\n", 2), ("0 99999999999 2\n", 2), (noise2, 2), (noise2, 3)]


@pytest.mark.parametrize("k", range(len(_width_chunks())))
def test_width_stages_bit_for_bit(k):
    text, width = _width_chunks()[k]
    want = parse_chunk_numpy(text.encode(), "edgelist", 0, None, width)
    got = parse_chunk_cuda(text.encode(), "edgelist", 0, None, width)
    assert set(want) == set(got)
    for key in sorted(want):
        _same(f"width chunk {k}: {key}", got[key], want[key])


def _width_files():
    """(name, bytes, refused): files of equal and unequal field counts."""
    late = [b"%d %d 1" % (i, i + 1) for i in range(3000)]
    late[2500] += b" 7"
    late_csv = [b"%d,%d,%d" % (i, i + 1, i) for i in range(3000)]
    late_csv[2000] += b",7"
    late_words = [b"%d,%d,,x" % (i, i + 1) for i in range(3000)]
    late_words[2000] += b",y"
    return [
        ("adj.txt", b"0 1 2 3\n1 2\n", True),
        ("metis.txt", b"% METIS\n4 5\n2 3\n1 3 4\n1 2\n2\n", True),
        ("extra.txt", b"0 1\n0 1 5\n", True),
        ("late.txt", b"# c\n" + b"\n".join(late) + b"\n", True),
        ("w.csv", b"src,dst,w\n0,1,2\n0,1,2,3\n", True),
        ("late.csv", b"src,dst,a\n" + b"\n".join(late_csv) + b"\n", True),
        ("late_words.csv", b"src,dst,a,b\n" + b"\n".join(late_words) + b"\n", False),
        ("weights.txt", b"0 1 0.5\n1 2 0.25\n", False),
        ("snap.txt", b"# FromNodeId\tToNodeId\n0\t1\n1\t2 \t# tail\n", False),
        ("gephi.csv", b"Source,Target,Type,Id,Label,timeset,Weight\n0,1,Directed,0,,,1.0\n0,2,Directed,1,e1,lbl,1.0\n"
                      b'1,2,Directed,2,"a, b",,1.0\n', False),
        ("optional.txt", b"0 1 5\n1 2\n", True),
        ("optional.csv", b"0,1,5\n1,2\n", True),
        ("nx.txt", b"0 1 {}\n1 2 {'weight': 1.0}\n2 3 {'label': 'x y', 'w': 2}\n", False),
        ("nx.csv", b"0,1,{}\n1,2,{'weight': 1.0}\n2,3,{'label': 'x y', 'w': 2}\n", False),
        ("nx_int.txt", b"0 1 7\n1 2 {'weight': 1.0}\n2 3 {}\n", False),
        ("gephi_hash.csv", b"Source,Target,Type,Id,Label,Weight\n0,1,Directed,0,#python,1.0\n1,2,Directed,1,foo,1.0\n",
         False),
        ("url.csv", b"Source,Target,Label,Weight\n0,1,New%20York,1.0\n1,2,Paris,2.0\n", False),
        ("trailing.csv", b"0,1\n1,2,\n", False),
        ("konect.txt", b"% asym\n0 1 1 1700000000\n1 2 1 1700000001\n", False),
        ("floats.txt", b"0 1 0.5\n1 2\n2 3 1 2 3\n", False),
        ("late_float.txt", b"\n".join(b"%d %d 0.5" % (i, i + 1) for i in range(3000)) + b"\n2 3 4 5\n", False),
        ("late_dict.txt", b"\n".join(b"%d %d 1" % (i, i + 1) for i in range(3000)) + b"\n2 3 {'w': 1}\n", False),
    ]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("chunk", [1024, None])
def test_width_same_outcome_as_the_cpu_reader(tmp_path, chunk, gz):
    """The GPU reader refuses a file of unequal field counts with the CPU reader's message (its
    kernels or host scan flag it, the CPU reader words it), chunk after chunk, gzip'd too; files of
    equal counts are parsed by the kernels."""
    import gzip

    for name, data, bad in _width_files():
        p = tmp_path / (name + (".gz" if gz else ""))
        p.write_bytes(gzip.compress(data) if gz else data)
        if bad:
            with pytest.raises(GraphFormatError) as cpu:
                read_graph(p)
            assert "integer fields, as on the first edge line" in str(cpu.value)
            with pytest.raises(GraphFormatError) as gpu:
                read_graph_cuda(p, chunk_bytes=chunk)
            assert str(gpu.value) == str(cpu.value), name
        else:
            got = read_graph_cuda(p, chunk_bytes=chunk)
            assert got.meta["parser"] == "gpu", name
            _check_graph(got, read_graph(p))


def test_width_of_a_rank_range_on_the_gpu(tmp_path):
    """A range of a file parsed by the kernels takes the file's first edge line's width."""
    from distgrail.io.chunks import plan_read
    from distgrail.io.parse import read_text_range

    data = b"src dst w\n0 1 5\n1 2 5\n2 3\n3 4\n"
    p = tmp_path / "r.txt"
    p.write_bytes(data)
    plan = plan_read(str(p))
    cut = data.index(b"2 3\n")
    assert read_text_range(str(p), plan, plan.body, cut, CudaDevice()).anomaly is None
    assert "did not accept" in read_text_range(str(p), plan, cut, plan.size, CudaDevice()).anomaly
    data = b"src dst w\n0 1 0.5\n1 2 0.5\n2 3\n3 4 5 6\n"  # (a float on the first edge line: no count held)
    p.write_bytes(data)
    plan = plan_read(str(p))
    cut = data.index(b"2 3\n")
    got = read_text_range(str(p), plan, cut, plan.size, CudaDevice())
    assert got.anomaly is None and got.src.get().tolist() == [2, 3] and got.dst.get().tolist() == [3, 4]
