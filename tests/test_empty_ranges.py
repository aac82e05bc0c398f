"""Value ranges that are empty (an index with no components or vertices) are named as such in
errors, never as ``0..-1``: a damaged index's record of updates or support ids, and a Python
list of ids asked of an index with no vertices."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.errors import IndexFormatError, QueryError
from distgrail.index import Index


@pytest.fixture
def empty_index():
    idx = distgrail.build_index((np.zeros(0, np.int64), np.zeros(0, np.int64)), num_vertices=0, dims=2, backend="cpu")
    assert idx.n == 0
    return idx


def _resaved(idx, path, **replace):
    arrays = dict(idx.arrays)
    arrays.update(replace)
    Index(idx.meta, arrays).save(str(path))  # checksums made anew: only the values are wrong
    return str(path)


def test_a_damaged_record_of_updates_in_an_empty_index_says_it_has_no_vertices(empty_index, tmp_path):
    path = _resaved(empty_index, tmp_path / "e.h5", **{"updates/edges": np.array([[3, 0]], np.int64)})
    with pytest.raises(IndexFormatError) as e:
        distgrail.open_index(path)
    msg = str(e.value)
    assert "updates/edges" in msg and "holds 3 at flat position 0" in msg, msg
    assert "where the index has no vertices" in msg and "0..-1" not in msg, msg


def test_object_ids_asked_of_an_empty_index_say_it_has_no_vertices(empty_index):
    with pytest.raises(QueryError) as e:
        empty_index.query(np.array([2], dtype=object), np.array([0], dtype=object))
    msg = str(e.value)
    assert "out of range: the index has no vertices, got 2" in msg and "0..-1" not in msg, msg


def test_the_ranges_of_a_non_empty_index_read_as_before(tmp_path):
    idx = distgrail.build_index((np.array([0, 1]), np.array([1, 2])), num_vertices=3, dims=2, backend="cpu")
    path = _resaved(idx, tmp_path / "g.h5", **{"updates/edges": np.array([[0, 7]], np.int64)})
    with pytest.raises(IndexFormatError, match=r"updates/edges.*holds 7 at flat position 1, outside 0\.\.2$"):
        distgrail.open_index(path)
    with pytest.raises(QueryError, match=r"out of range 0\.\.2, got 5"):
        idx.query(np.array([5], dtype=object), np.array([0], dtype=object))
