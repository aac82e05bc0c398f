"""An edge list's first bad line is the one reported, in file order, whichever check finds it: a
comment mark glued to a field (``4 5#x``), another field count, a line of one field or an empty
tab field later in the same chunk no longer hides a bad id before it (the checks run one after
the other over a whole chunk, and each reported its own first line)."""

from __future__ import annotations

import pytest

from distgrail.errors import GraphFormatError
from distgrail import read_graph


@pytest.mark.parametrize("name, text, line, what", [
    ("b.txt", "0 1\n1 2\n2 3\n3 abc\n4 5%x\n", 4, "got 'abc'"),
    ("e.txt", "0 1\n1 2 3\n4 5#x\n", 2, "expected 2 integer fields"),
    ("f.tsv", "0\t1\n1\t\t2\n4\t5#x\n", 2, "an empty source or target field"),
    ("g.csv", "0,1\n1,x\n4,5#x\n", 2, "got 'x'"),
    ("n.txt", "0 1\n1 -2\n4 5#x\n", 2, "-2"),
    ("a.txt", "0 1\n1 2#x\n2 3\n3 abc\n", 2, "a comment mark inside a field"),  # (the mark first: it is named)
    ("h.txt", "0 1\n7 x8\n36 9 10#c\n", 2, "got 'x8'"),  # (another field count after it)
    ("s.txt", "0 1\n7 x8\n5\n", 2, "got 'x8'"),  # (a line of one field after it)
    ("t.tsv", "0\t1\n7\tx8\n1\t\t2\n", 2, "got 'x8'"),  # (an empty tab field after it)
    ("w.txt", "0 1\n5 6\n1 2 3\n4 5#x\n", 3, "expected 2 integer fields"),
])
def test_the_first_bad_line_is_named(tmp_path, name, text, line, what):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(GraphFormatError) as e:
        read_graph(str(p))
    assert f"{name}:{line}:" in str(e.value) and what in str(e.value), str(e.value)


def test_the_first_bad_line_is_named_in_a_large_file(tmp_path):
    """A file of several 4 MiB chunks, the two errors in a later one."""
    good = "".join(f"{i} {i + 1}\n" for i in range(600_000))
    p = tmp_path / "big.txt"
    p.write_text(good + "7 x8\n" + good[:200].rpartition("\n")[0] + "\n9 10#c\n36 9 10\n")
    with pytest.raises(GraphFormatError) as e:
        read_graph(str(p))
    assert f"big.txt:{600_001}:" in str(e.value) and "'x8'" in str(e.value), str(e.value)


def test_an_id_past_num_vertices_before_a_later_glued_mark(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("0 1\n1 9\n2 3#x\n")
    with pytest.raises(GraphFormatError) as e:
        read_graph(str(p), num_vertices=5)
    assert "r.txt:2:" in str(e.value) and "'9'" in str(e.value), str(e.value)
