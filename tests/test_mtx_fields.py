"""Matrix Market entry lines hold exactly the fields the header's field says (docs/inputs.md,
"Matrix Market"): ``pattern`` 2 (``row col``), ``integer``, ``real`` and ``double`` 3 (``row col
value``), ``complex`` 4 (``row col real imag``); a comment after ``%`` as before. A ``pattern``
file whose entries are ``1 2 7``, or an ``integer`` one whose entries are ``1 2`` or ``1 2 3 4``,
was indexed with exit 0 (the reader kept the first two columns of any line of two or more): it is
refused at its first line of another count, with file, line and value, exit 2. The same verdicts
from the CPU reader (plain, gzip, chunk after chunk), the GPU parser's twin (its plan carries the
header's count, ``Plan.fields``; its lines kernel flags F_WIDTH on any Matrix Market line of
another count, whatever its tokens: ``1 2 1.5 7`` in a ``real`` file too) and a rank's range.

The values after ``row col`` too (``1 2 abc`` in a ``real`` file, ``1 2 1.5`` in an ``integer``
one, ``1 2 x y`` in a ``complex`` one were read as the edge 1 -> 2, exit 0): integers in an
``integer`` file, numbers (C and Fortran decimal floats, ``inf``, ``infinity``, ``nan``) in a
``real``, ``double`` or ``complex`` one, else refused naming file, line and value; the CPU reader
and its automaton held to the grammar's regular expressions, the twin (``Plan.values``; its lines
kernel flags F_VALUE) to the CPU reader.
"""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.constants import F_LINE, F_VALUE, F_WIDTH
from distgrail.errors import GraphFormatError
from distgrail.io import compressed, text as texts
from distgrail.io.chunks import plan_read
from distgrail.io.edgelist import MTX_FIELDS, MTX_VALUES, VALUES_INTEGER, VALUES_NUMBER, bad_values
from distgrail.io.parse import _Anomaly, _parse_file, NumpyDevice, parse_chunk_numpy, read_graph_numpy, \
    read_text_range
from distgrail.io.read import read_graph
from test_parse import readers_agree

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
    want = (f"{p}:{line}: Matrix Market {field!r} entries are {SHAPES[field]}, got {got} "
            f"field{'' if got == 1 else 's'}: {value}")
    plan, _ = both_refuse(p, want)
    assert plan is None or plan.fields == MTX_FIELDS[field][0]
    return want


def both_refuse(p, want: str) -> tuple:
    """The CPU reader refuses ``p`` with exactly ``want``, the twin (in chunks of 64 bytes and
    whole) with the same; returns ``(plan, anomaly)``: a text plan and its kernels' flags
    (:class:`_Anomaly`), or ``(None, None)`` when the file is no plain text."""
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(p)
    assert str(cpu.value) == want, str(cpu.value)
    for chunk in (64, None):
        with pytest.raises(GraphFormatError) as twin:
            read_graph_numpy(p, chunk_bytes=chunk)
        assert str(twin.value) == want
    plan = plan_read(p)
    if plan.kind != "text":
        return None, None
    with pytest.raises(_Anomaly, match=r"flags \d+") as e:
        _parse_file(plan, NumpyDevice(), 1024)
    return plan, e.value


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


LATE = {  # (field, line i's text, the bad line's index, its text, the refusal: a count or a value)
    "count": [("integer", "{} {} {i}", 2718, "2719 5", ("integer", 2)), ("pattern", "{} {}", 2999, "3000 1 1", ("pattern", 3))],
    "value": [("real", "{} {} {i}.5e-{k}", 2718, "2719 5 1.5e", ("real",)),
              ("integer", "{} {} -{i}", 2999, "3000 1 3000.0", ("integer",))]}


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("kind", ["count", "value"])
def test_a_bad_line_after_many_good_ones_is_the_line_named(tmp_path, monkeypatch, gz, kind):
    """Chunks of 64 bytes (CPU) and of 64 and 4 MiB (twin): the line named is the bad one, for a
    wrong field count and for a value not of the header's field."""
    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 64)
    n = 3000
    for field, form, at, bad, refusal in LATE[kind]:
        lines = [form.format(i + 1, i % 97 + 1, i=i, k=i % 7) for i in range(n)]
        lines[at] = bad
        p = write(tmp_path, f"late{at}.mtx", mtx(field, lines, n=n), gz)
        if kind == "count":
            refused_alike(p, at + 4, *refusal, repr(bad))
        else:
            value_refused_alike(p, at + 4, *refusal, repr(bad.split()[2]))


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


@pytest.mark.parametrize("field, lines, cut, plan_has, refusal, unplanned, note", [
    ("real", ["1 2 0.5", "2 3 0.5", "3 4", "4 5 1"], "3 4\n", {"fields": 3},
     r"r.mtx:6: Matrix Market 'real' entries are 'row col value', got 2", {"fields": 0}, "field count"),
    ("integer", ["1 2 5", "2 3 -5", "3 4 0.5", "4 5 1"], "3 4 0.5\n", {"fields": 3, "values": VALUES_INTEGER},
     r"r.mtx:6: Matrix Market 'integer' entry value is not an integer", {"values": 0}, "values must be")])
def test_a_rank_range_is_held_to_the_headers_count_and_values(tmp_path, field, lines, cut, plan_has, refusal,
                                                              unplanned, note):
    from dataclasses import replace

    data = mtx(field, lines)
    p = write(tmp_path, "r.mtx", data)
    plan = plan_read(p)
    assert plan.kind == "text" and all(getattr(plan, k) == v for k, v in plan_has.items())
    at = data.index(cut.encode())
    one = read_text_range(p, plan, plan.body, at)
    assert one.anomaly is None and edges(one) == [(0, 1), (1, 2)]
    assert "did not accept" in read_text_range(p, plan, at, plan.size).anomaly
    with pytest.raises(GraphFormatError, match=refusal):
        read_graph(p)
    # a plan without the header's count or value kind (made by hand) is never taken by the kernels
    assert note in read_text_range(p, replace(plan, **unplanned), plan.body, at).anomaly


def test_a_pattern_plan_has_no_values(tmp_path):
    pattern = write(tmp_path, "p.mtx", mtx("pattern", ["1 2", "2 3"]))
    assert plan_read(pattern).values == 0 and edges(read_graph_numpy(pattern)) == [(0, 1), (1, 2)]


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
        want = readers_agree(p, 128)
        if want is None:
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


def gpu_reads_as_cpu(tmp_path, refused, good: bytes, says: str = "") -> None:
    """The GPU reader (chunks of 64 bytes) refuses each file of ``refused`` (name, bytes) with the
    CPU reader's very message, which holds ``says``, and reads ``good`` itself (its parser the
    GPU's) as the CPU reader does."""
    from distgrail.io.parse import read_graph_cuda

    for name, data in refused:
        p = write(tmp_path, name, data)
        with pytest.raises(GraphFormatError) as cpu:
            read_graph(p)
        with pytest.raises(GraphFormatError) as gpu:
            read_graph_cuda(p, chunk_bytes=64)
        assert str(gpu.value) == str(cpu.value) and says in str(cpu.value)
    p = write(tmp_path, "ok.mtx", good)
    g = read_graph_cuda(p)
    assert g.meta["parser"] == "gpu" and sorted(edges(g)) == sorted(edges(read_graph(p)))


@pytest.mark.gpu
def test_the_gpu_reader_refuses_and_reads_as_the_cpu_reader(tmp_path):
    gpu_reads_as_cpu(tmp_path, (("p3.mtx", mtx("pattern", ["1 2", "2 3 7"])),
                                ("i2.mtx", mtx("integer", ["1 2 3", "2 3"])), ("r4.mtx", mtx("real", ["1 2 1.5 2"])),
                                ("c3.mtx", mtx("complex", ["1 2 1"]))),
                     mtx("complex", ["1 2 1 0", "2 3 0.5 -1 % c"], symmetry="symmetric"))


# -- the values: integers in an 'integer' file, numbers in a 'real', 'double' or 'complex' one ---------------

#: the values allowed, as docs/inputs.md words them (the reference the readers are held to)
INTEGER_RE = re.compile(rb"[+-]?[0-9]+")
NUMBER_RE = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eEdD][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
                       re.IGNORECASE)
KIND = {"integer": "an integer", "real": "a number", "double": "a number", "complex": "a number"}


def allowed(token: bytes, field: str) -> bool:
    return (INTEGER_RE if MTX_VALUES[field] == VALUES_INTEGER else NUMBER_RE).fullmatch(token) is not None


def value_refused_alike(p, line: int, field: str, value: str) -> str:
    """The CPU reader and the twin refuse ``p`` with the same one line naming the file, the line,
    the field and the value; the twin's kernels flagged it (F_VALUE) themselves."""
    want = f"{p}:{line}: Matrix Market {field!r} entry value is not {KIND[field]}: {value}"
    plan, anomaly = both_refuse(p, want)
    if plan is not None:
        assert plan.values == MTX_VALUES[field] and int(str(anomaly).split()[-1]) & F_VALUE
    return want


@pytest.mark.parametrize("gz", [False, True])
def test_values_that_are_not_numbers_are_refused(tmp_path, gz):
    """``1 2 abc`` in a real file, ``1 2 1.5`` in an integer one, ``1 2 x y`` in a complex one
    were read as the edge 1 -> 2 with exit 0."""
    value_refused_alike(write(tmp_path, "r.mtx", mtx("real", ["1 2 0.5", "2 3 abc"]), gz), 5, "real", "'abc'")
    value_refused_alike(write(tmp_path, "i.mtx", mtx("integer", ["1 2 1.5"]), gz), 4, "integer", "'1.5'")
    value_refused_alike(write(tmp_path, "c.mtx", mtx("complex", ["1 2 x y"]), gz), 4, "complex", "'x'")
    value_refused_alike(write(tmp_path, "c2.mtx", mtx("complex", ["1 2 1 0", "2 3 1 y"]), gz), 5, "complex", "'y'")
    value_refused_alike(write(tmp_path, "d.mtx", mtx("double", ["1 2 1,5"]), gz), 4, "double", "'1,5'")


@pytest.mark.parametrize("field,value", [
    ("integer", "1e3"), ("integer", "+"), ("integer", "1-"), ("integer", "--1"), ("integer", "0x1F"),
    ("integer", "inf"), ("integer", "NaN"), ("integer", "1."), ("integer", "٣"), ("real", "."), ("real", "-"),
    ("real", "1e"), ("real", "1e+"),
    ("real", "e5"), ("real", ".e5"), ("real", "1.2.3"), ("real", "1..2"), ("real", "1e5.5"), ("real", "1.5f"),
    ("real", "0x1p3"), ("real", "infinit"), ("real", "infs"), ("real", "nan(1)"), ("real", "+-1"), ("real", ".inf"),
    ("real", "1_000"), ("real", "1+3"), ("real", "1.0+003"), ("double", "x"), ("complex", "1j")])
def test_every_malformed_value_is_refused(tmp_path, field, value):
    entries = ["1 2" + " 1" * (MTX_FIELDS[field][0] - 2), f"2 3 {value}" + " 0" * (MTX_FIELDS[field][0] - 3)]
    value_refused_alike(write(tmp_path, "v.mtx", mtx(field, entries)), 5, field, repr(value))


@pytest.mark.parametrize("field,values", [
    ("integer", ["7", "-3", "+12", "0", "-0", "007", "123456789012345678901234567890"]),
    ("real", ["1", "-1.", ".5", "+0.25", "1e5", "1E+05", "2.5e-3", "1d-3", "1.5D3", "-.5d+2", "inf", "-Infinity",
              "NaN", "+nan", "INF", "-iNfInItY", "1" * 60 + "." + "2" * 60 + "e-" + "3" * 30]),
    ("double", ["1E300", "-0.0", "Infinity"]),
    ("complex", ["1 2", "NaN Infinity", "-1.5e-3 +.5", "0 -inf"])])
def test_every_value_of_the_field_reads(tmp_path, field, values):
    """C and Fortran floats; SciPy's ``mmwrite`` writes ``Infinity``, ``-Infinity`` and ``NaN``."""
    entries = [f"{i % 5 + 1} {(i + 1) % 5 + 1} {v}" + ("" if i % 3 else " % c") for i, v in enumerate(values)]
    entries.append(f"1 1 {values[-1]}%glued comment")
    want = [(i % 5, (i + 1) % 5) for i in range(len(values))] + [(0, 0)]
    reads_alike(write(tmp_path, "ok.mtx", mtx(field, entries)), want)
    reads_alike(write(tmp_path, "ok.mtx.gz", mtx(field, entries), gz=True), want)


def test_scipy_written_files_read(tmp_path):
    """SciPy writes ``Infinity``, ``-Infinity``, ``NaN`` and ``1E300`` (real, complex, integer files)."""
    scipy_io = pytest.importorskip("scipy.io")
    import scipy.sparse as sp

    m = sp.coo_matrix(([np.inf, -np.inf, np.nan, 1e300, 5.0], ([0, 1, 2, 0, 1], [1, 2, 0, 0, 0])), shape=(3, 3))
    for k, a in enumerate((m, m.astype(np.complex128) * (1 + 1j), m.astype(bool).astype(np.int64) * -3)):
        p = tmp_path / f"s{k}.mtx"
        scipy_io.mmwrite(str(p), a)
        assert p.read_text().splitlines()[0].split()[3] == ["real", "complex", "integer"][k]
        reads_alike(str(p), sorted(zip(m.row.tolist(), m.col.tolist())))


@pytest.mark.parametrize("symmetry", ["symmetric", "skew-symmetric", "hermitian"])
def test_symmetric_files_are_held_to_their_values_too(tmp_path, symmetry):
    p = write(tmp_path, "s.mtx", mtx("real", ["2 1 0.5", "3 3 one"], symmetry=symmetry))
    value_refused_alike(p, 5, "real", "'one'")


def test_the_first_bad_line_is_named_whatever_its_error_values_too(tmp_path):
    """A bad id, a count or a glued mark on an earlier line comes first; a bad value before a later one."""
    p = write(tmp_path, "id.mtx", mtx("real", ["1 x 1", "2 3 y"]))
    with pytest.raises(GraphFormatError, match=r"id.mtx:4: vertex id must be a non-negative integer, got 'x'"):
        read_graph(p)
    with pytest.raises(GraphFormatError, match=r"id.mtx:4: vertex id must be"):
        read_graph_numpy(p)
    p = write(tmp_path, "range.mtx", mtx("real", ["1 9 1", "2 3 y"]))
    with pytest.raises(GraphFormatError, match=r"range.mtx:4: vertex id out of range 1..5, got '9'"):
        read_graph(p)
    refused_alike(write(tmp_path, "count.mtx", mtx("real", ["1 2", "2 3 y"])), 4, "real", 2, "'1 2'")
    value_refused_alike(write(tmp_path, "later.mtx", mtx("real", ["1 2 y", "2 3", "1 x 1", "2%3 1"])), 4, "real",
                        "'y'")
    with pytest.raises(GraphFormatError, match=r"glued.mtx:4: a comment mark inside a field"):
        read_graph(write(tmp_path, "glued.mtx", mtx("real", ["1 2%x 1", "2 3 y"])))
    value_refused_alike(write(tmp_path, "then.mtx", mtx("real", ["1 2 y", "2%3 1"])), 4, "real", "'y'")


def test_the_cli_exits_2_on_a_bad_value(tmp_path, capsys):
    p = write(tmp_path, "g.mtx", mtx("real", ["1 2 0.5", "2 3 1", "3 4 0.25", "4 5 abc"]))
    out = tmp_path / "i.h5"
    assert main(["index", p, "-o", str(out), "--backend", "cpu", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"distgrail: error: {p}:7: Matrix Market 'real' entry value is not a number: 'abc'", err
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["g.mtx"]


_VALUE_BYTES = b"0123456789+-.eEdDinfatyINFATYxX"


def _random_token(rng) -> bytes:
    if rng.random() < 0.4:  # (near a good one)
        good = [b"1", b"-12", b"+3.", b".5", b"2.5e-3", b"1E+05", b"7d2", b"inf", b"-Infinity", b"NaN", b"+0"]
        t = bytearray(good[int(rng.integers(0, len(good)))])
        for _ in range(int(rng.integers(0, 3))):
            k = int(rng.integers(0, len(t) + 1))
            op = int(rng.integers(0, 3))
            if op == 0 and len(t) > 1 and k < len(t):
                del t[k]
            elif op == 1:
                t.insert(k, _VALUE_BYTES[int(rng.integers(0, len(_VALUE_BYTES)))])
            elif k < len(t):
                t[k] = _VALUE_BYTES[int(rng.integers(0, len(_VALUE_BYTES)))]
        return bytes(t)
    size = int(rng.integers(1, 30 if rng.random() < 0.1 else 6))
    return bytes(_VALUE_BYTES[int(i)] for i in rng.integers(0, len(_VALUE_BYTES), size))


def test_bad_values_is_the_documented_grammar():
    """The CPU reader's (and the twin's) test of a value against the regular expressions of
    docs/inputs.md, on 20,000 random tokens near good ones and far from them, in one text."""
    rng = np.random.default_rng(5)
    tokens = [_random_token(rng) for _ in range(20000)]
    tokens += [b"1" * 40, b"1" * 17 + b"e", b"infinity" * 2, b"-" + b"9" * 15, b"." + b"0" * 15]
    text = b""
    starts = []
    for t in tokens:
        text += [b" ", b"\t"][int(rng.integers(0, 2))]
        starts.append(len(text))
        text += t + [b" ", b"\n", b"%c ", b"\r\n"][int(rng.integers(0, 4))]
    arr = np.frombuffer(text, np.uint8)
    for field, kind in (("integer", VALUES_INTEGER), ("real", VALUES_NUMBER)):
        got = bad_values(arr, np.array(starts), kind)
        want = np.array([not allowed(t, field) for t in tokens])
        assert np.array_equal(got, want), [t for t, g, w in zip(tokens, got, want) if g != w][:10]
        assert 2000 < int(want.sum()) < 18000
    # a value at the end of the text, without a line end
    assert not bad_values(np.frombuffer(b"1 2 -1.5e3", np.uint8), np.array([4]), VALUES_NUMBER)[0]
    assert bad_values(np.frombuffer(b"1 2 -1.5e", np.uint8), np.array([4]), VALUES_NUMBER)[0]


def _vflags(data: bytes, width: int, values: int) -> int:
    return int(parse_chunk_numpy(data, "mtx", 1, 9, width=width, values=values)["flags"][0])


def test_the_twin_flags_values_as_the_cpu_reader():
    assert _vflags(b"1 2 1.5\n2 3 -7 % c\n3 3 x\n", 3, 0) == 0  # (0: not checked)
    assert _vflags(b"1 2 1.5\n2 3 -7 % c\n3 3 x\n", 3, VALUES_NUMBER) == F_VALUE
    assert _vflags(b"1 2 1.5\n2 3 -7 % c\n3 3 NaN%x\n", 3, VALUES_NUMBER) == 0
    assert _vflags(b"1 2 1.5\n", 3, VALUES_INTEGER) == F_VALUE and _vflags(b"1 2 -15\n", 3, VALUES_INTEGER) == 0
    assert _vflags(b"1 2 1 x\n", 4, VALUES_NUMBER) == F_VALUE and _vflags(b"1 2 1 -inf\n", 4, VALUES_NUMBER) == 0
    assert _vflags(b"1 2 x 1\n", 3, VALUES_NUMBER) == F_WIDTH | F_VALUE  # (every token after the first two)
    assert _vflags(b"1 2 1e5", 3, VALUES_NUMBER) == 0 and _vflags(b"1 2 1e", 3, VALUES_NUMBER) == F_VALUE
    rng = np.random.default_rng(13)
    for _ in range(600):
        field = ["integer", "real", "complex"][int(rng.integers(0, 3))]
        count = MTX_FIELDS[field][0]
        lines, good = [], True
        for _ in range(int(rng.integers(1, 6))):
            vals = [_random_token(rng) for _ in range(count - 2)]
            good &= all(allowed(v, field) for v in vals)
            tail = [b"", b" ", b" % c", b"%c", b"\r"][int(rng.integers(0, 5))]
            lines.append(b"1 2 " + b" ".join(vals) + tail)
        data = b"\n".join(lines) + b"\n" * int(rng.integers(0, 2))
        assert _vflags(data, count, MTX_VALUES[field]) == (0 if good else F_VALUE), (data, field)


GOOD = {"integer": ["1", "-12", "+3", "0"], "real": ["1", "-1.5", ".5e-3", "2D+1", "NaN", "-Infinity"]}
GOOD["double"] = GOOD["complex"] = GOOD["real"]


def test_fuzzed_values_agree_with_the_grammar(tmp_path):
    """Random value tokens in files of every field: the CPU reader refuses the file exactly when
    one is not what the grammar allows (naming the first), the twin (by its own kernels) alike."""
    rng = np.random.default_rng(29)
    ok = bad = 0
    for i in range(240):
        field = ["integer", "real", "double", "complex"][i % 4]
        count = MTX_FIELDS[field][0]
        entries, first = [], None
        for j in range(int(rng.integers(1, 7))):
            vals = [_random_token(rng) if rng.random() < 0.15 else
                    rng.choice(GOOD[field]).encode() for _ in range(count - 2)]
            wrong = [v for v in vals if not allowed(v, field)]
            if wrong and first is None:
                first = (j, wrong[0])
            entries.append(f"{j % 4 + 1} {(j + 1) % 4 + 1} " + " ".join(v.decode() for v in vals))
        p = write(tmp_path, f"v{i}.mtx", mtx(field, entries, n=4, symmetry=["general", "symmetric"][i % 2]))
        if first is None:
            g = read_graph(p)
            twin = read_graph_numpy(p, chunk_bytes=64)
            assert edges(twin) == edges(g) and twin.meta["parser"] == "numpy"
            ok += 1
        else:
            value_refused_alike(p, first[0] + 4, field, repr(first[1].decode()))
            bad += 1
    assert ok > 20 and bad > 20, (ok, bad)


# -- on a GPU: the kernels flag values as the twin -----------------------------------------------------------

@pytest.mark.gpu
def test_the_kernels_flag_mtx_values_as_the_twin():
    from distgrail.io.parse import parse_chunk_cuda

    rng = np.random.default_rng(17)
    chunks = [(b"1 2 1.5\n2 3 -7 % c\n3 3 x\n", 3), (b"1 2 NaN%x\n2 1 -Infinity\n", 3), (b"1 2 1 x\n", 4),
              (b"1 2 1e5", 3), (b"1 2 1e", 3), (b"1 2 x 1\n", 3), (b"1 2 " + b"1" * 40 + b"e-" + b"2" * 30 + b"\n", 3)]
    for _ in range(300):
        count = int(rng.integers(3, 5))
        lines = [b"1 2 " + b" ".join(_random_token(rng) for _ in range(count - 2)) +
                 [b"", b" ", b" % c", b"%c", b"\r"][int(rng.integers(0, 5))] for _ in range(int(rng.integers(1, 5)))]
        chunks.append((b"\n".join(lines) + b"\n" * int(rng.integers(0, 2)), count))
    for data, width in chunks:
        for values in (0, VALUES_INTEGER, VALUES_NUMBER):
            want = parse_chunk_numpy(data, "mtx", 1, 9, width=width, values=values)
            got = parse_chunk_cuda(data, "mtx", 1, 9, width=width, values=values)
            for key in ("flags", "line_edges", "line_u", "line_v", "src", "dst"):
                assert np.array_equal(np.asarray(got[key]), np.asarray(want[key])), (data, width, values, key)


@pytest.mark.gpu
def test_the_gpu_reader_refuses_values_and_reads_as_the_cpu_reader(tmp_path):
    gpu_reads_as_cpu(tmp_path, (("r.mtx", mtx("real", ["1 2 0.5", "2 3 abc"])), ("i.mtx", mtx("integer", ["1 2 1.5"])),
                                ("c.mtx", mtx("complex", ["1 2 x y"])), ("e.mtx", mtx("double", ["1 2 1e"]))),
                     mtx("real", ["1 2 -Infinity", "2 3 NaN % c", "3 1 1.5D-3", "1 1 .5%x"], symmetry="symmetric"),
                     says="entry value is not")
