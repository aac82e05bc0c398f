"""Three silent misreads of session 31's reviews (docs/inputs.md rules 2, 4, 5), each now refused
with file, line and value, exit status 2, no output: by the CPU reader, the GPU parser's NumPy twin
(the kernels' flags, then the CPU reader's words) and a range of a file as a rank parses it.

1. A tab-separated edge list (its first edge line holds a tab) with an empty first or second field:
   ``0\\t1`` then ``2\\t\\t4`` was the edge 2 -> 4 (tabs read as blanks), where a TSV has 2, an empty
   target, then 4; as a CSV's ``2,,4`` (``guards.empty_field``) it is refused
   (``guards.empty_tab_field``; the lines kernel's ``tabs``). Names alike: ``c\\t\\td`` was c -> d.
2. A comment mark glued to an id or a name: ``0,5%20`` was the edge 0 -> 5 (``%`` starts a comment,
   as in METIS and Matrix Market files). A ``#``/``%`` starts a comment at a line's start or after
   a blank or a separator; right after a byte of the first two fields it is refused
   (``guards.glued_mark``; the kernels' ``dg_value``: an id ends at a blank or a line end).
3. One separator for a file of names: ``--format labelled`` on ``a b`` then ``c d<tab>e`` read
   c -> d (tabs as blanks), where the symmetric file (``a<tab>b`` then ``c d``) was refused: the
   separator is told by the first edge line, and a line of a file split at blanks that holds a tab
   (perhaps tab-separated, ``c d`` -> ``e``) is refused naming the line.
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.constants import F_LINE, F_VALUE
from distgrail.errors import GraphFormatError
from distgrail.io import guards
from distgrail.io.chunks import plan_read
from distgrail.io.parse import file_edge, parse_chunk_numpy, read_graph_numpy, read_text_range
from distgrail.io.read import read_graph
from conftest import ROOT


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


def write(tmp_path, name, data: bytes, gz: bool = False) -> str:
    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


def refused_alike(p, line: int, what: str, fmt: str = "auto") -> str:
    """The CPU reader refuses ``p`` at ``line`` with one line holding ``what``; the GPU parser's twin
    (whole chunks, and chunks of 64 bytes) says the same."""
    with pytest.raises(GraphFormatError) as cpu:
        read_graph(p, fmt=fmt)
    msg = str(cpu.value)
    assert msg.startswith(f"{p}:{line}: ") and what in msg and "\n" not in msg, msg
    if fmt == "auto":
        for chunk in (64, None):
            with pytest.raises(GraphFormatError) as twin:
                read_graph_numpy(p, chunk_bytes=chunk)
            assert str(twin.value) == msg
    return msg


def edges(g):
    labels = g.meta.get("node_labels")
    name = (lambda i: str(labels.values[i])) if labels is not None else int
    return [(name(int(u)), name(int(v))) for u, v in zip(g.src.tolist(), g.dst.tolist())]


# -- 1. an empty field of a tab-separated file ------------------------------------------------------

EMPTY_TAB = "an empty source or target field (the first edge line holds a tab, so the file is tab-separated"


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("data, line, got", [
    (b"0\t1\n2\t\t4\n", 2, "'2\\t\\t4'"),  # (read as the edge 2 -> 4 before)
    (b"0\t1\t7\n2\t\t4\t7\n", 2, "'2\\t\\t4\\t7'"),  # (as many tokens as the first edge line)
    (b"# FromNodeId\tToNodeId\n0\t1\n\t2\t4\n", 3, "'\\t2\\t4'"),  # an empty first field
    (b"0\t1\n2\t \t4\n", 2, "'2\\t \\t4'"),
    (b"src\tdst\n0\t1\n2 \t\t 4\n", 3, "'2 \\t\\t 4'"),  # (after a header: the first edge line after it)
    (b"0\t\t1\n", 1, "'0\\t\\t1'"),  # (the first edge line itself)
])
def test_an_empty_tab_separated_field_is_refused(tmp_path, data, line, got, gz):
    msg = refused_alike(write(tmp_path, "g.tsv", data, gz), line, EMPTY_TAB)
    assert msg.endswith(f", got {got}"), msg


def test_the_cli_exits_2_and_writes_nothing(tmp_path):
    p = tmp_path / "g.txt"
    p.write_bytes(b"0\t1\n1\t2\n2\t\t4\n")
    out = tmp_path / "g.h5"
    r = run("index", str(p), "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2, r
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distgrail: error: {p}:3: {EMPTY_TAB}") and "'2\\t\\t4'" in err[0]
    assert sorted(os.listdir(tmp_path)) == ["g.txt"]


@pytest.mark.parametrize("data, want", [
    (b"0 1\n2\t\t4\n", [(0, 1), (2, 4)]),  # a first edge line without a tab: tabs are blanks
    (b"0\t1\t\t5\n1\t2\t\t6\n", [(0, 1), (1, 2)]),  # an empty third field: ids are separated by blanks too
    (b"0\t1\n1 2\n2 \t3\n", [(0, 1), (1, 2), (2, 3)]),  # (blanks and one tab between the ids)
    (b"# a\t\tb\n0\t1 # x\t\ty\n\t\n\t# c\n1\t2\t\n", [(0, 1), (1, 2)]),  # tabs in comments, blank lines
    (b"0,1\n1\t,\t2\n", [(0, 1), (1, 2)]),  # (a CSV: tabs are blanks around its fields)
])
def test_tab_separated_files_that_hold_no_empty_field_read(tmp_path, data, want):
    p = write(tmp_path, "g.txt", data)
    assert edges(read_graph(p)) == want
    for chunk in (64, None):
        got = read_graph_numpy(p, chunk_bytes=chunk)
        assert edges(got) == want and got.meta["parser"] == "numpy"


@pytest.mark.parametrize("data, line", [
    (b"source\ttarget\na\tb\nc\t\td\n", 3),  # (read as the edge c -> d before)
    (b"source\ttarget\na\tb\n\tc\td\n", 3),
])
@pytest.mark.parametrize("fmt", ["auto", "labelled"])
def test_an_empty_tab_separated_name_is_refused(tmp_path, data, line, fmt):
    refused_alike(write(tmp_path, "n.tsv", data), line, "an empty node name", fmt)


def test_later_empty_tab_separated_fields_of_names_read(tmp_path):
    p = write(tmp_path, "n.tsv", b"source\ttarget\tw\na b\tc\t\t1\nc\ta b\t\t2\n")
    assert edges(read_graph(p)) == [("a b", "c"), ("c", "a b")]


def test_the_twin_flags_an_empty_field_only_in_a_tab_separated_chunk():
    for data, bad in [(b"0\t1\n2\t\t4\n", True), (b"\t0\t1\n", True), (b"0\t \t1 # c\n", True),
                      (b"0\t1\t\t5\n", False), (b"0 1\n\t# c\n\t\n", False), (b"0\t1#x\t\ty\n", False),
                      (b"0\t1 % \t\t\n", False), (b"0 \t1\n", False)]:
        flags = int(parse_chunk_numpy(data, "edgelist", tabs=True)["flags"][0])
        assert bool(flags & F_LINE) == bad, data
        assert guards.empty_tab_field(data) >= 0 if bad else guards.empty_tab_field(data) == -1, data
        assert not parse_chunk_numpy(data, "edgelist")["flags"][0] & F_LINE or data.startswith(b"0\t1#"), data


def test_empty_tab_field_agrees_with_a_line_by_line_reading():
    """:func:`guards.empty_tab_field` (every line at once) against the rule read line by line, on
    random lines of digits, blanks, tabs and comment marks."""
    import re

    def slow(data: bytes) -> int:
        pos = 0
        for line in data.split(b"\n"):
            content = re.split(rb"[#%]", line, maxsplit=1)[0]
            m = re.match(rb"([ \t\r]*)([^ \t\r]+)([ \t\r]*)", content)
            if m:
                lead, _, gap = m.groups()
                if b"\t" in lead:
                    return pos + lead.index(b"\t")
                if gap.count(b"\t") >= 2:
                    return pos + m.start(3) + [i for i, c in enumerate(gap) if c == 9][1]
            pos += len(line) + 1
        return -1

    from distgrail.io.fields_jit import first_empty_tab_field

    rng = np.random.default_rng(32)
    for _ in range(3000):
        data = bytes(rng.choice(list(b"01  \t\t\t\n#%"), size=int(rng.integers(0, 40))).tolist())
        want = slow(data)
        assert guards.empty_tab_field(data) == want, data
        assert first_empty_tab_field(np.frombuffer(data, np.uint8)) == want, data  # (the compiled pass)
    many = b"0\t1\t\t5\n" * 5000  # (more tabs to look at than a walk takes: the compiled pass)
    assert guards.empty_tab_field(many) == -1 and guards.empty_tab_field(many + b"7\t\t8\n") == len(many) + 2


def test_a_rank_range_is_held_to_the_file_s_first_edge_line(tmp_path):
    """A rank whose range has no tab before ``2\\t\\t4`` (its own first line: ``1 2``) still knows
    the file is tab-separated (its first edge line, ``0\\t1``)."""
    data = b"0\t1\n1 2\n2\t\t4\n"
    p = write(tmp_path, "g.txt", data)
    plan = plan_read(p)
    assert file_edge(plan) == (2, True)
    assert "did not accept" in read_text_range(p, plan, data.index(b"1 2"), plan.size).anomaly
    ok = write(tmp_path, "ok.txt", b"0 1\n1\t2\n2\t\t4\n")
    plan = plan_read(ok)
    assert file_edge(plan) == (2, False)
    assert read_text_range(ok, plan, 4, plan.size).anomaly is None


# -- 2. a comment mark glued to an id or a name ----------------------------------------------------

GLUED = "a comment mark inside a field: '#' and '%' start a comment at a line's start or after a blank"


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("name, data, line, got", [
    ("g.csv", b"0,5%20\n1,2\n", 1, "'0,5%20'"),  # (read as the edge 0 -> 5 before)
    ("g.csv", b"src,dst\n0,1\n0, 5%20\n", 3, "'0, 5%20'"),
    ("g.txt", b"0 1\n0 5%20\n", 2, "'0 5%20'"),
    ("g.txt", b"0 1\n1 2#x\n", 2, "'1 2#x'"),
    ("g.txt", b"0 1 7\n1 2#3 4\n", 2, "'1 2#3 4'"),  # (as many tokens as the first line, before)
    ("g.txt", b"0\t1\n0#5\t1\n", 2, "'0#5\\t1'"),
    ("g.txt", b"0 1%\n", 1, "'0 1%'"),
])
def test_a_comment_mark_glued_to_an_id_is_refused(tmp_path, name, data, line, got, gz):
    msg = refused_alike(write(tmp_path, name, data, gz), line, GLUED)
    assert msg.endswith(f", got {got}"), msg


@pytest.mark.parametrize("data, line, fmt", [
    (b"src,dst\nalice,bob%20\n", 2, "auto"),  # (read as alice -> bob before)
    (b"source\ttarget\nNew York\tBoston#2\n", 2, "auto"),
    (b"a b\nc d#x\n", 2, "labelled"),
    (b"a,b\nc%x,d\n", 2, "labelled"),
    (b"1 2\n3 4%5\n", 2, "labelled"),
])
def test_a_comment_mark_glued_to_a_name_is_refused(tmp_path, data, line, fmt):
    refused_alike(write(tmp_path, "n.txt", data), line, GLUED, fmt)


def test_a_comment_mark_glued_to_a_matrix_market_entry_is_refused(tmp_path):
    head = b"%%MatrixMarket matrix coordinate pattern general\n% c\n3 3 2\n"
    p = write(tmp_path, "m.mtx", head + b"1 2\n2 3%x\n")
    refused_alike(p, 5, GLUED)
    g = read_graph(write(tmp_path, "ok.mtx", head + b"1 2 % c\n2 3\n"))
    assert edges(g) == [(0, 1), (1, 2)]


@pytest.mark.parametrize("data, want", [
    (b"0 1 # c\n1 2 %c\n2 3\t#c\n", [(0, 1), (1, 2), (2, 3)]),  # after a blank: comments
    (b"0 1 7#x\n1 2 7%\n", [(0, 1), (1, 2)]),  # glued to a later field: a comment (a column no reader keeps)
    (b"Source,Target,Type,Id,Label,Weight\n0,1,Directed,0,#python,1.0\n1,2,Directed,1,foo,1.0\n", [(0, 1), (1, 2)]),
    (b"Source,Target,Label,Weight\n0,1,New%20York,1.0\n1,2,Paris,2.0\n", [(0, 1), (1, 2)]),
    (b"0,1,#x\n1,2 ,%y\n", [(0, 1), (1, 2)]),
    (b"# a#b\n%c%d\n0 1\n", [(0, 1)]),
])
def test_comments_after_a_blank_or_a_later_field_read(tmp_path, data, want):
    p = write(tmp_path, "g.txt", data)
    assert edges(read_graph(p)) == want
    for chunk in (64, None):
        got = read_graph_numpy(p, chunk_bytes=chunk)
        assert edges(got) == want and got.meta["parser"] == "numpy"


def test_names_with_a_comment_after_a_blank_read(tmp_path):
    p = write(tmp_path, "n.csv", b"src,dst,label\nalice,bob ,1 #x\nbob,carol,x%20y\n")
    assert edges(read_graph(p)) == [("alice", "bob"), ("bob", "carol")]


def test_the_twin_flags_a_glued_mark_as_a_bad_value():
    for fmt, data in (("edgelist", b"0 5%20\n"), ("edgelist", b"1 2#x\n"), ("csv", b"0,5%20\n"), ("mtx", b"1 2%x\n")):
        assert parse_chunk_numpy(data, fmt, 1 if fmt == "mtx" else 0, 10)["flags"][0] & F_VALUE, (fmt, data)
    for fmt, data in (("edgelist", b"0 5 %20\n"), ("edgelist", b"1 2 7#x\n"), ("csv", b"0,5,%20\n")):
        assert parse_chunk_numpy(data, fmt, 0, 10)["flags"][0] == 0, (fmt, data)


def test_glued_mark_agrees_with_a_line_by_line_reading():
    """:func:`guards.glued_mark` (every line at once) against the rule read line by line."""
    import re

    def slow(data: bytes, sep: bytes) -> int:
        pos = 0
        for line in data.split(b"\n"):
            m = re.search(rb"[#%]", line)
            if m and m.start() and line[m.start() - 1] not in b" \t\r" + sep:
                before = line[:m.start()]
                if (before.count(sep) < 2) if sep != b" " else len(before.split()) <= 2:
                    return pos + m.start()
            pos += len(line) + 1
        return -1

    rng = np.random.default_rng(33)
    for _ in range(3000):
        data = bytes(rng.choice(list(b"01a   \t\t,#%\n"), size=int(rng.integers(0, 40))).tolist())
        for sep in (b" ", b",", b"\t"):
            assert guards.glued_mark(data, sep) == slow(data, sep), (data, sep)


def test_a_rank_range_with_a_glued_mark_is_an_anomaly(tmp_path):
    data = b"0 1\n1 2\n2 3%x\n"
    p = write(tmp_path, "g.txt", data)
    plan = plan_read(p)
    assert "did not accept" in read_text_range(p, plan, data.index(b"1 2"), plan.size).anomaly


# -- 3. one separator for a file of names ----------------------------------------------------------

MIXED = "a tab in a file of node names whose first edge line holds none"


@pytest.mark.parametrize("data, line, fmt", [
    (b"a b\nc d\te\n", 2, "labelled"),  # (read as c -> d before)
    (b"a b\nc\td\n", 2, "labelled"),
    (b"# c\ta\n\na b c\nd e f\ng h\ti\n", 5, "labelled"),  # (tabs in comments are none)
    (b"1 2\n3\t4\n", 2, "labelled"),
    (b"a b\n\tc d\n", 2, "labelled"),
    (b"source target\nalice bob\ncarol\tdave\n", 3, "auto"),  # (a header: the first edge line after it)
    (b"source\ttarget\nalice bob\ncarol\tdave\n", 3, "auto"),
])
def test_a_tab_in_a_file_of_names_split_at_blanks_is_refused(tmp_path, data, line, fmt):
    refused_alike(write(tmp_path, "n.txt", data), line, MIXED, fmt)


def test_the_cli_names_the_line_of_another_separator(tmp_path):
    p = tmp_path / "n.txt"
    p.write_bytes(b"a b\nb c\nc d\te\n")
    out = tmp_path / "n.h5"
    r = run("index", str(p), "--format", "labelled", "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2, r
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"distgrail: error: {p}:3: {MIXED}") and "'c d\\te'" in err[0], err
    assert sorted(os.listdir(tmp_path)) == ["n.txt"]
    tsv = tmp_path / "t.txt"  # (the other way round, as before)
    tsv.write_bytes(b"a\tb\nc d\n")
    r = run("index", str(tsv), "--format", "labelled", "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2 and f"{tsv}:2: expected two node names" in r.stderr and not out.exists()


def test_a_tab_past_the_first_chunk_is_refused(tmp_path, monkeypatch):
    from distgrail.io import text as texts

    monkeypatch.setattr(texts, "CHUNK_BYTES", 64)
    lines = [b"n%d m%d" % (i, i) for i in range(40)]
    lines[30] = b"x y\tz"
    refused_alike(write(tmp_path, "n.txt", b"\n".join(lines) + b"\n"), 31, MIXED, "labelled")


@pytest.mark.parametrize("data, want", [
    (b"a b\nc d e\n", [("a", "b"), ("c", "d")]),
    (b"a\tb\nc d\te\n", [("a", "b"), ("c d", "e")]),  # tab-separated: names hold spaces
    (b"a b # x\ty\n\t\n \t # c\nc d\n", [("a", "b"), ("c", "d")]),  # tabs in comments and blank lines
    (b"a,b\nc d, e\n", [("a", "b"), ("c d", "e")]),
])
def test_files_of_one_separator_read(tmp_path, data, want):
    assert edges(read_graph(write(tmp_path, "n.txt", data), fmt="labelled")) == want


# -- the kernels (GPU only; their twin above) -------------------------------------------------------

def _same_arrays(got: dict, want: dict, what: str):
    assert set(got) == set(want), what
    for key in sorted(want):
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=f"{what}: {key}")


@pytest.mark.gpu
def test_the_lines_kernel_flags_what_its_twin_flags():
    """Random chunks of digits, blanks, tabs and comment marks (glued ones too): every array of the
    kernels equals the twin's, with and without ``tabs``."""
    from distgrail.io.parse import parse_chunk_cuda

    rng = np.random.default_rng(32)
    alphabet = np.frombuffer(b"0011 \t\t\t#%x\n\n", np.uint8)
    chunks = [b"0\t1\n2\t\t4\n\t5\t6\n7\t \t8 # c\n9 1#x\t\t2\n3\t4%\t\t\n", b"0 1%20\n2 3#x\n4 5 6%\n"]
    chunks += [alphabet[rng.integers(0, alphabet.size, 4000)].tobytes() for _ in range(6)]
    for k, data in enumerate(chunks):
        for tabs in (False, True):
            for width in (0, 2, 3):
                want = parse_chunk_numpy(data, "edgelist", 0, None, width, tabs)
                got = parse_chunk_cuda(data, "edgelist", 0, None, width, tabs)
                _same_arrays(got, want, f"chunk {k}, tabs {tabs}, width {width}")
        for fmt in ("csv", "mtx"):
            _same_arrays(parse_chunk_cuda(data, fmt, 1 if fmt == "mtx" else 0, 10**6),
                         parse_chunk_numpy(data, fmt, 1 if fmt == "mtx" else 0, 10**6), f"chunk {k}, {fmt}")


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [64, None])
def test_the_gpu_reader_refuses_what_the_cpu_reader_refuses(tmp_path, chunk):
    from distgrail.io.parse import read_graph_cuda

    bad = [b"0\t1\n2\t\t4\n", b"0\t1\n\t2\t4\n", b"src\tdst\n0\t1\n2 \t\t 4\n"]
    good = [(b"0 1\n2\t\t4\n", [(0, 1), (2, 4)]), (b"0\t1\t\t5\n1\t2\t\t6\n", [(0, 1), (1, 2)])]
    for k, data in enumerate(bad):
        p = write(tmp_path, f"bad{k}.txt", data)
        with pytest.raises(GraphFormatError) as cpu:
            read_graph(p)
        with pytest.raises(GraphFormatError) as gpu:
            read_graph_cuda(p, chunk_bytes=chunk)
        assert str(gpu.value) == str(cpu.value)
    for k, (data, want) in enumerate(good):
        got = read_graph_cuda(write(tmp_path, f"good{k}.txt", data), chunk_bytes=chunk)
        assert got.meta["parser"] == "gpu" and edges(got) == want
