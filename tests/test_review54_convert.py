"""Review 54 of ``distgrail convert`` / ``info`` and the split layout: defects found and fixed.

1. A split index of more parts than the hard limit of open files lets this process open: the
   error advised "raise the limit (ulimit -n), or merge them with 'distgrail convert NAME
   --layout single -o ONE.h5'", and said so to that very convert, which reads every part and
   failed in the same way; the command named the file by its base name only (wrong from another
   directory, unquoted with a blank). It now says how many parts there are, the limits, a
   ``ulimit -n`` value that holds them, and that the merge reads every part too, naming the path
   as given, quoted for the shell.
2. A dataset whose ``crc32_block`` attribute is an array (empty, or of several values) in a
   one-file index: ``info``, ``query`` and ``convert`` ended in a traceback, exit 1 (``ValueError:
   can only convert an array of size 1``) where a damaged index is exit 2 naming the dataset.
3. ``convert INDEX --layout split --parts 100`` of an index whose largest dataset has 7 rows
   wrote 7 part files, and its line said only "in the split layout": the parts asked for were
   silently not the parts written. The line now says how many part files, and why fewer.
4. ``info`` (``query``, ``convert --layout``) of a split index's part file, or of a binary graph
   file, said only "not a distgrail index (attribute format='distgrail-index-part', ...)". It now
   says which it is and what to give instead: the part's main file (by the name it was written
   under), or ``distgrail index`` for the graph.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import h5py
import numpy as np
import pytest

from distgrail.cli import main
from distgrail.indexfile.layout import index_parts

#: run in a child: set the limits of open files (soft = hard), run the command line, print the
#: exit status as JSON on the last line
CHILD = r"""
import json, resource, sys
n = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
from distgrail.cli import main
print(json.dumps({"rc": main(sys.argv[2:])}))
"""


def _child(limit, *argv):
    r = subprocess.run([sys.executable, "-c", CHILD, str(limit), *map(str, argv)], capture_output=True, text=True,
                       timeout=300, check=False)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, (r.returncode, r.stdout, r.stderr)
    return json.loads(lines[-1])["rc"], r.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX limits of open files")
def test_too_many_parts_for_the_limit_says_the_merge_needs_it_too(tmp_path):
    parts, limit = 60, 40
    chain = tmp_path / "chain.txt"
    chain.write_text("".join(f"{i} {i + 1}\n" for i in range(parts + 10)))
    d = tmp_path / "a dir"
    d.mkdir()
    one, split = d / "one.h5", d / "s p.h5"
    assert main(["index", str(chain), "-o", str(one), "--backend", "cpu", "--dims", "2", "--quiet"]) == 0
    assert main(["convert", str(one), "--layout", "split", "--parts", str(parts), "-o", str(split), "--quiet"]) == 0
    assert len(index_parts(split)) == parts
    out = tmp_path / "merged.h5"
    rc, err = _child(limit, "convert", split, "--layout", "single", "-o", out)
    assert rc == 2, err
    assert "Traceback" not in err and "Too many open files" not in err, err
    assert f"{parts} part files" in err, err
    assert "or merge them" not in err and "the merge reads every part too" in err, err
    assert f"'distgrail convert {shlex.quote(str(split))} --layout single" in err, err
    assert f"ulimit -n {parts}" not in err  # (a value that holds the parts and the reader's own)
    need = int(err.split("ulimit -n ")[1].split(";")[0])
    assert need > parts, err
    assert not out.exists() and not any(n.startswith(".merged.h5") for n in os.listdir(tmp_path))
    rc, err = _child(need, "convert", split, "--layout", "single", "-o", out, "--quiet")
    assert rc == 0, err  # (the limit it names is enough)
    assert out.read_bytes() == one.read_bytes()


@pytest.mark.parametrize("value", [np.array([], dtype=np.uint32), np.array([4, 5], dtype=np.uint32)])
@pytest.mark.parametrize("layout", ["single", "split"])
def test_a_crc32_block_attribute_that_is_an_array_is_a_damaged_index(tmp_path, capsys, value, layout):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n2 3\n")
    path = tmp_path / "i.h5"
    assert main(["index", str(g), "-o", str(path), "--backend", "cpu", "--layout", layout, "--quiet"]) == 0
    with h5py.File(path, "r+") as f:
        f["dag/level"].attrs["crc32_block"] = value
    capsys.readouterr()
    out = tmp_path / "c.h5"
    for argv in (["info", str(path)], ["convert", str(path), "--layout", "single", "-o", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{path}: damaged index: dataset /dag/level" in err and "crc32_block is " + repr(value.tolist()) in err
    assert not out.exists()


def test_convert_says_how_many_parts_and_why_fewer_than_asked(tmp_path, capsys):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n2 3\n3 4\n5 6\n")  # 7 vertices, 5 components
    one = tmp_path / "one.h5"
    assert main(["index", str(g), "-o", str(one), "--backend", "cpu", "--quiet"]) == 0
    capsys.readouterr()
    out = tmp_path / "s.h5"
    assert main(["convert", str(one), "--layout", "split", "--parts", "100", "-o", str(out)]) == 0
    line = capsys.readouterr().out
    assert len(index_parts(out)) == 7
    assert "7 part files (not the 100 asked" in line and "7 rows" in line, line
    assert main(["convert", str(one), "--layout", "split", "--parts", "3", "-o", str(out)]) == 0
    line = capsys.readouterr().out
    assert "split layout, 3 part files (read" in line and "asked" not in line, line


def test_info_of_a_part_file_or_a_graph_file_says_what_to_give_instead(tmp_path, capsys):
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n2 3\n3 4\n5 6\n")
    one, split, graph = tmp_path / "one.h5", tmp_path / "big.h5", tmp_path / "graph.h5"
    assert main(["index", str(g), "-o", str(one), "--backend", "cpu", "--quiet"]) == 0
    assert main(["convert", str(one), "--layout", "split", "--parts", "2", "-o", str(split), "--quiet"]) == 0
    assert main(["convert", str(g), "-o", str(graph), "--backend", "cpu", "--quiet"]) == 0
    part = index_parts(split)[1]
    capsys.readouterr()
    assert main(["info", str(part)]) == 2
    err = capsys.readouterr().err
    assert f"{part}: not a distgrail index" in err and "part 1 of 2 of a split index" in err, err
    assert "open its main file (written as big.h5" in err, err
    assert main(["info", str(graph)]) == 2
    err = capsys.readouterr().err
    assert f"{graph}: not a distgrail index" in err and "binary graph file" in err and "'distgrail index'" in err, err
