"""Index and graph files (session 34): a split write asked for more parts than rows writes no part
of nothing; two writers of one output at once (one's orphan removal between the other's parts and
its main file) leave a whole index; the graph file's string attributes are fixed-length (no HDF5
global heap, whose damage could hang the reader); a split index's main file damaged so that HDF5
dies opening it is a named damaged-index error, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.indexfile.layout import index_parts
from distgrail.indexfile.split import write_split_index
from distgrail.io.read import as_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _small():
    """A 5-vertex graph's index (3 components: at most 5 rows in any dataset of its parts)."""
    g = as_graph((np.array([0, 1, 2, 3]), np.array([1, 2, 0, 4])))
    return distgrail.build_index(g, dims=2, backend="cpu")


def _rows(idx) -> int:
    from distgrail.indexfile.split import SPLIT

    return max(np.shape(a)[0] for k, a in idx.arrays.items() if k in SPLIT and np.size(a))


# -- parts above the rows -------------------------------------------------------------------------

@pytest.mark.parametrize("asked", [3, 50])
def test_parts_above_the_rows_are_capped_with_no_part_of_nothing(tmp_path, asked):
    idx = _small()
    rows = _rows(idx)
    assert 3 <= rows < 50
    single, split, back = (str(tmp_path / x) for x in ("single.h5", "split.h5", "back.h5"))
    idx.save(single)
    got = write_split_index(split, idx.meta, idx.arrays, parts=asked)
    assert got == min(asked, rows)  # (the count written, for the caller to report)
    parts = index_parts(split)
    assert len(parts) == got
    assert sorted(os.listdir(tmp_path)) == sorted(["single.h5", "split.h5", *(os.path.basename(p) for p in parts)])
    for p in parts:  # every part holds rows
        with h5py.File(p, "r") as f:
            held = []
            f.visititems(lambda k, o: held.append(k) if isinstance(o, h5py.Dataset) and o.size else None)
        assert held, p
    opened = distgrail.open_index(split)
    assert opened.meta["parts"] == got
    opened.save(back)
    with open(back, "rb") as a, open(single, "rb") as b:  # the single file's content, byte for byte
        assert a.read() == b.read()


def test_cli_convert_and_update_with_parts_above_the_rows(tmp_path):
    idx = _small()
    rows = _rows(idx)
    single = str(tmp_path / "single.h5")
    idx.save(single)
    split = str(tmp_path / "split.h5")
    assert main(["convert", single, "--layout", "split", "--parts", "40", "-o", split, "--quiet"]) == 0
    assert len(index_parts(split)) == rows
    assert len([n for n in os.listdir(tmp_path) if ".part" in n]) == rows
    edges = tmp_path / "add.txt"
    edges.write_text("4 0\n")
    up = str(tmp_path / "up.h5")
    assert main(["update", single, "--add", str(edges), "--layout", "split", "--parts", "40", "-o", up,
                 "--quiet", "--backend", "cpu"]) == 0
    assert len(index_parts(up)) == rows
    assert len([n for n in os.listdir(tmp_path) if n.startswith("up.h5.")]) == rows
    assert distgrail.open_index(up).reachable(np.array([4]), np.array([1])).tolist() == [True]
