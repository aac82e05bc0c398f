"""Vertex ids of other widths through Index.query: int32 ids answer as int64 ones, stay int32
through the checks when asked (what the GPU staging widens on its way up), and a bad one is
named with its value."""

from __future__ import annotations

import numpy as np
import pytest


def test_int32_ids_answer_as_int64_ones_and_stay_int32_when_checked():
    """int32 ids (what a server's clients send for an index of fewer than 2^31 vertices) answer
    as int64 ones; ``check_pairs(narrow=True)`` keeps them as they are (views, strided columns
    too), the default widens them; a bad int32 id is named with its value."""
    import distgrail
    from distgrail.errors import QueryError

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    rng = np.random.default_rng(3)
    pairs = rng.integers(0, idx.n, (20000, 2))
    want = idx.query(pairs[:, 0], pairs[:, 1], backend="cpu")[0]
    p32 = pairs.astype(np.int32)
    assert np.array_equal(idx.query(p32[:, 0], p32[:, 1], backend="cpu")[0], want)
    s, t = idx.check_pairs(p32[:, 0], p32[:, 1], narrow=True)
    assert s.dtype == np.int32 and np.shares_memory(s, p32) and np.shares_memory(t, p32)
    assert idx.check_pairs(p32[:, 0], p32[:, 1])[0].dtype == np.int64
    for bad in (-3, idx.n):
        b = p32[:, 0].copy()
        b[77] = bad
        with pytest.raises(QueryError, match=rf"sources\[77\] out of range 0..{idx.n - 1}, got {bad}"):
            idx.query(b, p32[:, 1], backend="cpu")


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_a_bad_id_in_the_rows_of_one_array_is_named(dtype):
    """The two columns of one (k, 2) array, int64 or int32 rows (one pass over the rows checks
    both when every id is good): with ``narrow``, good rows come back as the array's own columns
    in their type, and a negative or too large id in either column is named with its row."""
    import distgrail
    from distgrail.errors import QueryError

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    pairs = np.random.default_rng(5).integers(0, idx.n, (5000, 2)).astype(dtype)
    s, t = idx.check_pairs(pairs[:, 0], pairs[:, 1], narrow=True)
    assert s.dtype == dtype and np.shares_memory(s, pairs)
    for col, what in ((0, "sources"), (1, "targets")):
        for bad in (-1, idx.n, 2**31 - 1):
            b = pairs.copy()
            b[4321, col] = bad
            with pytest.raises(QueryError, match=rf"{what}\[4321\] out of range 0..{idx.n - 1}, got {bad}"):
                idx.check_pairs(b[:, 0], b[:, 1], narrow=True)
