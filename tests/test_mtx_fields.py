"""Matrix Market entry lines hold exactly the fields the header's field says (docs/inputs.md,
"Matrix Market"): ``pattern`` 2 (``row col``), ``integer``, ``real`` and ``double`` 3 (``row col
value``), ``complex`` 4 (``row col real imag``); a comment after ``%`` as before. A ``pattern``
file whose entries are ``1 2 7``, or an ``integer`` one whose entries are ``1 2`` or ``1 2 3 4``,
was indexed with exit 0 (the reader kept the first two columns of any line of two or more): it is
refused at its first line of another count, with file, line and value, exit 2. The same verdicts
from the CPU reader (plain, gzip, chunk after chunk), the GPU parser's twin (its plan carries the
header's count, ``Plan.fields``; its lines kernel flags F_WIDTH on any Matrix Market line of
another count, whatever its tokens: ``1 2 1.5 7`` in a ``real`` file too) and a rank's range.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.constants import F_LINE, F_VALUE, F_WIDTH
from distgrail.errors import GraphFormatError
from distgrail.io import compressed, text as texts
from distgrail.io.chunks import plan_read
from distgrail.io.edgelist import MTX_FIELDS
from distgrail.io.parse import _Anomaly, _parse_file, NumpyDevice, parse_chunk_numpy, read_graph_numpy, \
    read_text_range
from distgrail.io.read import read_graph

HEAD = "%%MatrixMarket matrix coordinate {field} {symmetry}\n"
SHAPES = {"pattern": "'row col'", "integer": "'row col value'", "real": "'row col value'",
          "double": "'row col value'", "complex": "'row col real imag'"}


def mtx(field: str, entries, n: int = 5, symmetry: str = "general", nnz: int | None = None, comment=True) -> bytes:
    head = HEAD.format(field=field, symmetry=symmetry) + ("% made by a test\n" if comment else "")
    body = "".join(e + "\n" for e in entries)
    count = sum(1 for e in entries if e.split("%")[0].split()) if nnz is None else nnz
    return (head + f"{n} {n} {count}\n" + body).encode()


def write(tmp_path, name, data: bytes, gz: bool = False) -> str:
    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


def edges(g):
    def host(a):  # (a GPU reader's arrays are CuPy's)
        return a.get() if hasattr(a, "get") else np.asarray(a)

    return list(zip(host(g.src).tolist(), host(g.dst).tolist()))


def refused_alike(p, line: int, field: str, got: int, value: str) -> str:
    """The CPU reader and the GPU parser's twin refuse ``p`` with the same one line naming the
    file, the line, the header's field and the count it asks, the count found and the line;
    the twin's kernels flagged it themselves (a plain file: no other path said no)."""
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(p)
    msg = str(cpu.value)
    want = (f"{p}:{line}: Matrix Market {field!r} entries are {SHAPES[field]}, got {got} "
            f"field{'' if got == 1 else 's'}: {value}")
    assert msg == want, msg
    for chunk in (64, None):
        with pytest.raises(GraphFormatError) as twin:
            read_graph_numpy(p, chunk_bytes=chunk)
        assert str(twin.value) == msg
    plan = plan_read(p)
    if plan.kind == "text":
        assert plan.fields == MTX_FIELDS[field][0]
        with pytest.raises(_Anomaly, match="flags"):
            _parse_file(plan, NumpyDevice(), 1024)
    return msg


def reads_alike(p, want):
    """Both readers give the edges ``want`` (0-based), the twin by its own kernels."""
    g = read_graph(p)
    assert edges(g) == want
    twin = read_graph_numpy(p, chunk_bytes=64)
    assert edges(twin) == want and twin.n == g.n
    if plan_read(p).kind == "text":
        assert twin.meta["parser"] == "numpy"
    return g


# -- refused: entry lines of another field count ---------------------------------------------------------

@pytest.mark.parametrize("gz", [False, True])
def test_pattern_entries_with_a_value_are_refused(tmp_path, gz):
    p = write(tmp_path, "g.mtx", mtx("pattern", ["1 2 7", "2 3 7"]), gz)
    refused_alike(p, 4, "pattern", 3, "'1 2 7'")
    p = write(tmp_path, "late.mtx", mtx("pattern", ["1 2", "2 3", "3 4", "4 5 1.0"]), gz)
    refused_alike(p, 7, "pattern", 3, "'4 5 1.0'")


@pytest.mark.parametrize("gz", [False, True])
def test_integer_entries_of_two_or_four_fields_are_refused(tmp_path, gz):
    p = write(tmp_path, "two.mtx", mtx("integer", ["1 2", "2 3"]), gz)
    refused_alike(p, 4, "integer", 2, "'1 2'")
    p = write(tmp_path, "mixed.mtx", mtx("integer", ["1 2 5", "2 3"]), gz)
    refused_alike(p, 5, "integer", 2, "'2 3'")
    p = write(tmp_path, "four.mtx", mtx("integer", ["1 2 5", "2 3 4 4"]), gz)
    refused_alike(p, 5, "integer", 4, "'2 3 4 4'")


def test_real_and_double_entries_of_other_counts_are_refused(tmp_path):
    """Lines with tokens other than integers are counted too (the GPU parser flags them all)."""
    refused_alike(write(tmp_path, "r4.mtx", mtx("real", ["1 2 1.5", "2 3 1.5 2.5"])), 5, "real", 4, "'2 3 1.5 2.5'")
    refused_alike(write(tmp_path, "r4e.mtx", mtx("real", ["1 2 1.5e3 -2e-1"])), 4, "real", 4, "'1 2 1.5e3 -2e-1'")
    refused_alike(write(tmp_path, "r2.mtx", mtx("real", ["1 2 -7.5", "2 3"])), 5, "real", 2, "'2 3'")
    refused_alike(write(tmp_path, "d2.mtx", mtx("double", ["1 2"])), 4, "double", 2, "'1 2'")
    refused_alike(write(tmp_path, "rw.mtx", mtx("real", ["1 2 0.5 x"])), 4, "real", 4, "'1 2 0.5 x'")


def test_complex_entries_of_other_counts_are_refused(tmp_path):
    refused_alike(write(tmp_path, "c3.mtx", mtx("complex", ["1 2 1.0 0.5", "2 3 1.0"])), 5, "complex", 3,
                  "'2 3 1.0'")
    refused_alike(write(tmp_path, "c5.mtx", mtx("complex", ["1 2 1 0 9"])), 4, "complex", 5, "'1 2 1 0 9'")
    refused_alike(write(tmp_path, "c2.mtx", mtx("complex", ["1 2"])), 4, "complex", 2, "'1 2'")


def test_a_line_of_one_field_is_named_so(tmp_path):
    refused_alike(write(tmp_path, "one.mtx", mtx("pattern", ["1 2", "3"])), 5, "pattern", 1, "'3'")
    refused_alike(write(tmp_path, "one3.mtx", mtx("integer", ["1 2 3", "3"])), 5, "integer", 1, "'3'")


@pytest.mark.parametrize("symmetry", ["symmetric", "skew-symmetric", "hermitian"])
def test_symmetric_files_are_held_to_the_count_too(tmp_path, symmetry):
    p = write(tmp_path, "s.mtx", mtx("pattern", ["2 1", "3 3 1"], symmetry=symmetry))
    refused_alike(p, 5, "pattern", 3, "'3 3 1'")
    p = write(tmp_path, "si.mtx", mtx("integer", ["2 1 4", "3 1"], symmetry=symmetry))
    refused_alike(p, 5, "integer", 2, "'3 1'")


@pytest.mark.parametrize("gz", [False, True])
def test_a_bad_line_after_many_good_ones_is_the_line_named(tmp_path, monkeypatch, gz):
    """Chunks of 64 bytes (CPU) and of 64 and 4 MiB (twin): the line named is the bad one."""
    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    n = 3000
    lines = [f"{i + 1} {i % 97 + 1} {i}" for i in range(n)]
    lines[2718] = "2719 5"
    p = write(tmp_path, "late.mtx", mtx("integer", lines, n=n), gz)
    refused_alike(p, 2718 + 4, "integer", 2, "'2719 5'")
    lines = [f"{i + 1} {i % 97 + 1}" for i in range(n)]
    lines[2999] = "3000 1 1"
    p = write(tmp_path, "last.mtx", mtx("pattern", lines, n=n), gz)
    refused_alike(p, 2999 + 4, "pattern", 3, "'3000 1 1'")


def test_the_first_bad_line_is_named_whatever_its_error(tmp_path):
    """In one chunk, an earlier line's other error comes first, and a count error before a later
    one (a bad id, a comment mark glued to an id)."""
    p = write(tmp_path, "id.mtx", mtx("pattern", ["1 x", "2 3 7"]))
    with pytest.raises(GraphFormatError, match=r"id.mtx:4: vertex id must be a non-negative integer, got 'x'"):
        read_graph(p)
    with pytest.raises(GraphFormatError, match=r"id.mtx:4: vertex id must be"):
        read_graph_numpy(p)
    p = write(tmp_path, "later.mtx", mtx("pattern", ["1 2", "2 3 7", "1 x", "2%3"]))
    refused_alike(p, 5, "pattern", 3, "'2 3 7'")
    p = write(tmp_path, "range.mtx", mtx("pattern", ["1 9", "2 3 7"]))
    with pytest.raises(GraphFormatError, match=r"range.mtx:4: vertex id out of range 1..5, got '9'"):
        read_graph(p)
    p = write(tmp_path, "glued.mtx", mtx("pattern", ["1 2%x", "2 3 7"]))
    with pytest.raises(GraphFormatError, match=r"glued.mtx:4: a comment mark inside a field"):
        read_graph(p)


def test_the_cli_exits_2_and_leaves_no_output(tmp_path, capsys):
    p = write(tmp_path, "graph.mtx", mtx("pattern", ["1 2", "2 3", "3 4 7"]))
    out = tmp_path / "i.h5"
    assert main(["index", p, "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"distgrail: error: {p}:6: Matrix Market 'pattern' entries are 'row col', got 3 fields: "
                   f"'3 4 7'"), err
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["graph.mtx"]


def test_the_entries_count_is_checked_after_the_fields(tmp_path):
    """A file of good lines but fewer entries than its size line says is still the count's error."""
    p = write(tmp_path, "few.mtx", mtx("integer", ["1 2 3"], nnz=2))
    with pytest.raises(GraphFormatError, match=r"few.mtx:4: truncated file\? size line says 2 entries"):
        read_graph(p)


# -- read as before ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("field,values", [("pattern", ["", ""]), ("integer", [" 7", "\t-3"]),
                                          ("real", [" 1.5e3", " -.25"]), ("double", [" 1", " 2.0"]),
                                          ("complex", [" 1.0 -2.0", "\t0 1e-3"])])
@pytest.mark.parametrize("symmetry", ["general", "symmetric"])
def test_good_files_of_every_field_read_the_same_edges(tmp_path, field, values, symmetry):
    entries = ["1 2" + values[0], "% a comment line", "", "2 3" + values[1] + " % a comment", "3 3" + values[0],
               "4\t1" + values[1] + "\r", "  5 4" + values[0] + "  "]
    p = write(tmp_path, f"{field}.mtx", mtx(field, entries, symmetry=symmetry))
    want = [(0, 1), (1, 2), (2, 2), (3, 0), (4, 3)]
    if symmetry != "general":
        want += [(1, 0), (2, 1), (0, 3), (3, 4)]
    g = reads_alike(p, want)
    assert g.n == 5
    assert plan_read(p).fields == MTX_FIELDS[field][0]
    gz = write(tmp_path, f"{field}.mtx", mtx(field, entries, symmetry=symmetry), gz=True)
    assert edges(read_graph(gz)) == want


def test_comments_after_entries_still_read(tmp_path):
    """A comment starts at ``%`` after a blank, or glued to a value (a later field), as before."""
    reads_alike(write(tmp_path, "p.mtx", mtx("pattern", ["1 2 %", "2 3 % 7", "3 4 %x y z"])), [(0, 1), (1, 2), (2, 3)])
    reads_alike(write(tmp_path, "i.mtx", mtx("integer", ["1 2 5 % w", "2 3 -1%x", "3 4 0 %% 1 2"])),
                [(0, 1), (1, 2), (2, 3)])
    reads_alike(write(tmp_path, "r.mtx", mtx("real", ["1 2 1.5%c d", "2 3 2e3"])), [(0, 1), (1, 2)])
    reads_alike(write(tmp_path, "c.mtx", mtx("complex", ["1 2 1 2 %", "2 3 0.5 -1%"])), [(0, 1), (1, 2)])
    # a comment mark glued to the row or the column is no comment (as before)
    with pytest.raises(GraphFormatError, match=r"g.mtx:4: a comment mark inside a field"):
        read_graph(write(tmp_path, "g.mtx", mtx("pattern", ["1 2%7"])))


def test_an_empty_body_and_comment_only_chunks_read(tmp_path):
    reads_alike(write(tmp_path, "e.mtx", mtx("integer", ["% nothing"], nnz=0)), [])
    lines = ["% " + "c" * 80] * 30 + ["1 2 3"] + ["% x"] * 30 + ["2 1 4"]
    reads_alike(write(tmp_path, "c.mtx", mtx("integer", lines)), [(0, 1), (1, 0)])


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
def test_generated_mtx_files_round_trip(tmp_path, kind):
    """``distgrail generate ... -o x.mtx`` writes 'pattern general' entries of two fields: they read
    back (CPU reader and twin) as the graph generated, and ``convert`` takes them."""
    from distgrail.io.generate import generate

    out = tmp_path / "x.mtx"
    assert main(["generate", kind, "-n", "300", "--degree", "3", "--seed", "5", "-o", str(out), "--quiet"]) == 0
    assert open(out).readline().strip() == "%%MatrixMarket matrix coordinate pattern general"
    ref = generate(kind, 300, 3, seed=5)
    back = read_graph(str(out))
    assert back.n == 300 and set(edges(back)) == set(zip(ref.src.tolist(), ref.dst.tolist()))
    twin = read_graph_numpy(str(out), chunk_bytes=4096)
    assert twin.meta["parser"] == "numpy" and edges(twin) == edges(back)
    again = tmp_path / "y.h5"
    assert main(["convert", str(out), "-o", str(again), "--quiet"]) == 0
    assert set(edges(read_graph(str(again)))) == set(edges(back))


def test_written_edge_graphs_round_trip_through_mtx(tmp_path):
    from distgrail.io.graph import EdgeGraph
    from distgrail.io.writers import write_graph

    src, dst = np.array([0, 3, 3, 1, 0], np.int32), np.array([1, 3, 2, 0, 1], np.int32)
    p = str(tmp_path / "w.mtx")
    write_graph(EdgeGraph(n=6, src=src, dst=dst), p)
    reads_alike(p, list(zip(src.tolist(), dst.tolist())))
    assert read_graph(p).n == 6


# -- the twin's kernels and a rank's range -------------------------------------------------------------------

def _flags(data: bytes, width: int) -> int:
    return int(parse_chunk_numpy(data, "mtx", 1, 9, width=width)["flags"][0])


def test_the_twin_flags_mtx_lines_of_another_count_whatever_their_tokens():
    assert _flags(b"1 2\n2 3 7\n", 2) == F_WIDTH
    assert _flags(b"1 2\n2 3 7\n", 0) == 0  # (0: not checked)
    assert _flags(b"1 2 1.5\n2 3 -7 % c\n3 3 x\n", 3) == 0
    assert [_flags(x, 3) for x in (b"1 2\n", b"1 2 1.5 7\n", b"1 2 {} 1\n", b"1 2 -1 -1\n", b"1 2 0.5e3 #\n")] == \
        [F_WIDTH] * 5
    assert _flags(b"1 2 3 %c d\n% 1 2 3 4\n\n  \n2 3 4%\n", 3) == 0  # comment tails and lines are no fields
    assert _flags(b"1 2 3 4\n", 4) == 0 and _flags(b"1 2 3\n", 4) == F_WIDTH
    assert _flags(b"1\n", 2) == F_LINE | F_WIDTH and _flags(b"1 x 3\n", 3) == F_VALUE
    # edge lists keep their own rule: only lines of digit runs are held to the width
    assert int(parse_chunk_numpy(b"0 1 1.5 7\n", "edgelist", width=3)["flags"][0]) == 0


def test_the_twin_counts_fields_as_the_cpu_reader():
    """Random lines of blanks, digits, '%' and other bytes: the twin flags F_WIDTH exactly when a
    line's tokens before its '%' (as the CPU reader counts them) are neither none nor ``width``."""
    rng = np.random.default_rng(11)
    alphabet = np.frombuffer(b"0123 \t\t  %%x.-e#\r\n\n\n", np.uint8)
    for _ in range(800):
        data = alphabet[rng.integers(0, alphabet.size, int(rng.integers(1, 70)))].tobytes()
        data = data.replace(b"\r", b"\r\n")  # (a lone '\r' is another error)
        counts = {len(ln.split(b"%")[0].split()) for ln in data.split(b"\n")} - {0}
        for width in (2, 3, 4):
            got = bool(_flags(data, width) & F_WIDTH)
            assert got == bool(counts - {width}), (data, width, counts)


def test_a_rank_range_is_held_to_the_headers_count(tmp_path):
    data = mtx("real", ["1 2 0.5", "2 3 0.5", "3 4", "4 5 1"])
    p = write(tmp_path, "r.mtx", data)
    plan = plan_read(p)
    assert plan.kind == "text" and plan.fields == 3
    cut = data.index(b"3 4\n")
    one = read_text_range(p, plan, plan.body, cut)
    assert one.anomaly is None and edges(one) == [(0, 1), (1, 2)]
    assert "did not accept" in read_text_range(p, plan, cut, plan.size).anomaly
    with pytest.raises(GraphFormatError, match=r"r.mtx:6: Matrix Market 'real' entries are 'row col value', got 2"):
        read_graph(p)
    # a plan without the count (made by hand) is never taken by the kernels
    from dataclasses import replace

    assert "field count" in read_text_range(p, replace(plan, fields=0), plan.body, cut).anomaly


def test_fuzzed_mtx_files_of_every_field_agree(tmp_path):
    """Random byte edits of valid files of every field: both readers give the same graph (the
    twin by its own kernels), or the same one-line error (the twin's kernels flagged it)."""
    rng = np.random.default_rng(23)
    alphabet = list(b"0123456789 \t\n%.-ex")
    values = {"pattern": [""], "integer": [" 7", " -2"], "real": [" 1.5", " -2e-3"], "double": [" 0.5"],
              "complex": [" 1 0", " -0.5 2e1"]}
    ok = bad = 0
    for i in range(200):
        field = list(values)[i % 5]
        n = int(rng.integers(1, 9))
        entries = [f"{rng.integers(1, n + 1)} {rng.integers(1, n + 1)}{rng.choice(values[field])}"
                   for _ in range(int(rng.integers(1, 8)))]
        b = bytearray(mtx(field, entries, n=n, symmetry=["general", "symmetric"][i % 2]))
        for _ in range(int(rng.integers(1, 3))):
            k = int(rng.integers(0, len(b)))
            op = rng.integers(0, 3)
            if op == 0:
                del b[k]
            elif op == 1:
                b.insert(k, int(rng.choice(alphabet)))
            else:
                b[k] = int(rng.choice(alphabet))
        p = write(tmp_path, f"f{i}.mtx", bytes(b))
        try:
            want = read_graph(p)
        except GraphFormatError as e:
            with pytest.raises(GraphFormatError) as twin:
                read_graph_numpy(p, chunk_bytes=128)
            assert str(twin.value) == str(e)
            plan = plan_read(p)
            if plan.kind == "text":
                with pytest.raises(_Anomaly):
                    _parse_file(plan, NumpyDevice(), 1024)
            bad += 1
            continue
        got = read_graph_numpy(p, chunk_bytes=128)
        assert edges(got) == edges(want) and got.n == want.n and got.meta["parser"] == "numpy"
        ok += 1
    assert ok > 20 and bad > 20, (ok, bad)


# -- on a GPU: the kernels flag what the twin flags ----------------------------------------------------------

@pytest.mark.gpu
def test_the_kernels_flag_mtx_counts_as_the_twin():
    from distgrail.io.parse import parse_chunk_cuda

    chunks = [b"1 2\n2 3 7\n", b"1 2 1.5\n2 3 -7 % c\n3 3 x\n", b"1 2 1.5 7\n", b"1 2 3 %c d\n% 1 2 3 4\n\n2 3 4%\n",
              b"1\n", b"1 2 0.5e3 #\n2 1 1\n"]
    for data in chunks:
        for width in (0, 2, 3, 4):
            want = parse_chunk_numpy(data, "mtx", 1, 9, width=width)
            got = parse_chunk_cuda(data, "mtx", 1, 9, width=width)
            for key in ("flags", "line_edges", "line_u", "line_v", "src", "dst"):
                assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), (data, width, key)


@pytest.mark.gpu
def test_the_gpu_reader_refuses_and_reads_as_the_cpu_reader(tmp_path):
    from distgrail.io.parse import read_graph_cuda

    for name, data in (("p3.mtx", mtx("pattern", ["1 2", "2 3 7"])), ("i2.mtx", mtx("integer", ["1 2 3", "2 3"])),
                       ("r4.mtx", mtx("real", ["1 2 1.5 2"])), ("c3.mtx", mtx("complex", ["1 2 1"]))):
        p = write(tmp_path, name, data)
        with pytest.raises(GraphFormatError) as cpu:
            read_graph(p)
        with pytest.raises(GraphFormatError) as gpu:
            read_graph_cuda(p, chunk_bytes=64)
        assert str(gpu.value) == str(cpu.value)
    p = write(tmp_path, "ok.mtx", mtx("complex", ["1 2 1 0", "2 3 0.5 -1 % c"], symmetry="symmetric"))
    g = read_graph_cuda(p)
    assert g.meta["parser"] == "gpu" and sorted(edges(g)) == sorted(edges(read_graph(p)))
