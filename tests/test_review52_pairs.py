r"""Review 52 of the query pairs files: misreads found by a fresh reader.

1. A ``.tsv`` or ``.csv`` pairs file of ids whose last line, without its line end, ends in a
   separator (``3,4,``: an empty third field) was read as the pair (3, 4); with a line end it
   was refused. Either way it is refused now, naming the line.
2. An empty file named ``.gz`` (a download or a write cut short at 0 bytes) was read as no
   pairs, exit status 0: no gzip stream is empty (the graph reader refuses it so too).
3. A file whose size says 0 but whose reads give text (a ``/proc`` or ``/sys`` file) was mapped
   by its size and read as no pairs, exit status 0; it is read as its reads give it.
4. ``distgrail pairs`` wrote a file that ``distgrail query`` refuses when its first node label
   starts with U+FEFF (the file then starts with a UTF-8 byte order mark); refused when written.
5. A big-endian uint64 ``.npy`` of integer node labels holding a label past 2^63 - 1 was named
   as a vertex id out of range (``targets[0] out of range (vertex ids ...)``), not as the node
   that is not in the graph, as a native one is.
6. A pairs file of node labels split at blanks (``.txt``) cut every ASCII space character at a
   line's ends: ``a d<form feed>`` read as the pair (a, d), ``<CR>a d`` too, and a line of a form
   feed as a blank line, where ids (``0 3<form feed>``) and any other space character are refused.
   Only blanks and tabs are cut now (and a ``\r`` before the line end).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.errors import DistGrailError, GraphFormatError
from distgrail.io.pairs import read_query_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env,
                          cwd=cwd)


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    d = tmp_path_factory.mktemp("idx")
    (d / "g.txt").write_text("0 1\n1 2\n2 0\n2 3\n4 5\n5 6\n3 6\n")
    p = _cli("index", str(d / "g.txt"), "-o", str(d / "g.h5"), "--backend", "cpu", "--quiet")
    assert p.returncode == 0, p.stderr
    return d / "g.h5"


# -- 1: an empty last field at the end of a .tsv or .csv ---------------------------------------

@pytest.mark.parametrize("name, data, line", [
    ("p.tsv", b"0\t5\n3\t4\t", 2),
    ("p.csv", b"0,5\n3,4,", 2),
    ("p.csv", b"0,5,", 1),
    ("p.tsv", b"3\t4\t", 1),
    ("p.tsv", b"0\t5\t1\n3\t4\t", 2),
])
def test_an_empty_last_field_without_a_line_end_is_refused(tmp_path, name, data, line):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(GraphFormatError, match=rf"{name}:{line}: (an empty field|a line of 3 fields)"):
        read_query_pairs(path, n=7)
    path.write_bytes(data + b"\n")  # (as with its line end)
    with pytest.raises(GraphFormatError, match=rf"{name}:{line}: (an empty field|a line of 3 fields)"):
        read_query_pairs(path, n=7)


@pytest.mark.parametrize("name, data", [("p.tsv", b"0\t5\n3\t4"), ("p.csv", b"0,5\n3, 4"), ("p.csv", b"0,5,1\n3,4,0")])
def test_files_without_a_last_line_end_still_read(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    q = read_query_pairs(path, n=7)
    assert q.sources.tolist() == [0, 3] and q.targets.tolist() == [5, 4]


def test_an_empty_last_field_on_the_command_line(small_index, tmp_path):
    pairs = tmp_path / "p.csv"
    pairs.write_bytes(b"0,3\n4,3,")
    p = _cli("query", str(small_index), str(pairs), "-o", str(tmp_path / "a.txt"), "--backend", "cpu")
    assert p.returncode == 2 and "p.csv:2:" in p.stderr and "Traceback" not in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["p.csv"]


# -- 2: an empty .gz -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["p.txt.gz", "p.TSV.GZ", "p.gz"])
def test_an_empty_gz_file_is_refused(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"")
    with pytest.raises(GraphFormatError, match="not a readable gzip file, truncated or damaged"):
        read_query_pairs(path, n=7)
    with pytest.raises(GraphFormatError, match="not a readable gzip file, truncated or damaged"):
        read_query_pairs(path, "str")  # (node labels)
    path.write_bytes(gzip.compress(b""))  # a gzip stream of no pairs: no pairs
    assert read_query_pairs(path, n=7).sources.size == 0


def test_an_empty_gz_file_on_the_command_line(small_index, tmp_path):
    (tmp_path / "p.txt.gz").write_bytes(b"")
    p = _cli("query", str(small_index), str(tmp_path / "p.txt.gz"), "-o", str(tmp_path / "a.txt"), "--backend", "cpu")
    assert p.returncode == 2 and "p.txt.gz: not a readable gzip file" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["p.txt.gz"]


# -- 3: a file whose size says 0 ----------------------------------------------------------------

@pytest.mark.skipif(not os.path.isfile("/proc/self/status"), reason="needs Linux's /proc")
def test_a_file_whose_size_says_zero_is_read_as_its_reads_give_it():
    assert os.path.getsize("/proc/self/status") == 0
    with pytest.raises(GraphFormatError, match=r"/proc/self/status:\d+: "):  # (its text: no pairs file)
        read_query_pairs("/proc/self/status", n=7)


# -- 4: a first label starting with U+FEFF --------------------------------------------------------

@pytest.mark.parametrize("ext", ["txt", "tsv", "csv", "txt.gz"])
def test_pairs_writer_refuses_a_file_that_would_start_with_a_byte_order_mark(tmp_path, ext):
    from distgrail.io.samplepairs import write_pairs

    out = tmp_path / f"p.{ext}"
    with pytest.raises(DistGrailError, match="U\\+FEFF"):
        write_pairs(np.array(["\ufeffa", "b"]), np.array(["b", "b"]), str(out))
    assert not os.listdir(tmp_path)
    write_pairs(np.array(["b", "\ufeffa"]), np.array(["\ufeffa", "b"]), str(out))  # (not first: reads back)
    q = read_query_pairs(out, "str")
    assert q.sources.tolist() == ["b", "\ufeffa"] and q.targets.tolist() == ["\ufeffa", "b"]


# -- 5: big-endian uint64 node labels ------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["<u8", ">u8"])
def test_a_label_past_int64_is_named_as_a_node_in_either_byte_order(tmp_path, dtype):
    path = tmp_path / "p.npy"
    np.save(path, np.array([[10, 30], [10, 2**64 - 1]], dtype))
    with pytest.raises(GraphFormatError, match=r"p\.npy\[1, 1\]: node 18446744073709551615 is not in the graph"):
        read_query_pairs(path, "int")


# -- 6: space characters at the ends of a line of node labels ------------------------------------

@pytest.mark.parametrize("name", ["p.txt", "p.tsv"])
@pytest.mark.parametrize("data, line", [(b"a d\x0c\n", 1), (b"\x0ba d\n", 1), (b"\ra d\n", 1),
                                        (b"a d\n\x0c\n", 2), (b"a d\nd a\x0b\n", 2)])
def test_a_form_feed_or_a_cr_at_a_labels_line_end_is_refused(tmp_path, name, data, line):
    path = tmp_path / name
    path.write_bytes(data.replace(b" ", b"\t") if name.endswith(".tsv") else data)
    with pytest.raises(GraphFormatError, match=rf"{name}:{line}: a control or space character"):
        read_query_pairs(path, "str")


@pytest.mark.parametrize("data", [b"a d\r\n\r\nd a\r\n", b"a d\n \t \nd a", b"  a\td \t\nd a\r",
                                  b"u v reachable\r\na d 1\nd a 0\n"])
def test_blanks_tabs_and_crlf_around_labels_still_read(tmp_path, data):
    path = tmp_path / "p.txt"
    path.write_bytes(data)
    q = read_query_pairs(path, "str")
    assert q.sources.tolist() == ["a", "d"] and q.targets.tolist() == ["d", "a"]


def test_integer_labels_with_a_form_feed_are_refused(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"10 30\x0c\n")
    with pytest.raises(GraphFormatError, match=r"p\.txt:1: a control or space character"):
        read_query_pairs(path, "int")
