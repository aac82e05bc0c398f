"""The id rule for an index of more than 2^31 vertices: a negative int32 id is refused whether the
ids come as two arrays or as the columns of one (k, 2) array (the one-pass check of the rows
reads them as unsigned 32-bit values, where -2^31 is 2^31 and -1 is 2^32 - 1: both below such an
n). The rule is a function of the ids and ``n`` alone, so no index that large is built."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.errors import QueryError
from distgrail.query.idcheck import checked_ids


@pytest.mark.parametrize("n", [2**31 + 5, 2**32, 2**40])
@pytest.mark.parametrize("bad", [-1, -2**31])
@pytest.mark.parametrize("col", [0, 1])
def test_negative_int32_ids_refused_above_2_31_vertices(n, bad, col):
    """Columns of one (k, 2) int32 array and their copies: the same QueryError, naming the id."""
    rows = np.arange(40, dtype=np.int32).reshape(20, 2)
    rows[13, col] = bad
    what = ("sources", "targets")[col]
    want = f"{what}[13] out of range 0..{n - 1}, got {bad}"
    for s, t in ((rows[:, 0], rows[:, 1]), (rows[:, 0].copy(), rows[:, 1].copy())):
        for narrow in (True, False):
            with pytest.raises(QueryError) as e:
                checked_ids(s, t, n, narrow=narrow)
            assert str(e.value) == want


def test_good_int32_rows_above_2_31_vertices_pass_unchanged():
    """Good int32 columns of one array, n above 2^31: kept as they are when narrow, else widened."""
    rows = np.arange(40, dtype=np.int32).reshape(20, 2)
    rows[7, 0] = 2**31 - 1
    s, t = checked_ids(rows[:, 0], rows[:, 1], 2**31 + 5, narrow=True)
    assert s.dtype == np.int32 and np.shares_memory(s, rows)
    np.testing.assert_array_equal(s, rows[:, 0])
    s, t = checked_ids(rows[:, 0], rows[:, 1], 2**31 + 5)
    assert s.dtype == t.dtype == np.int64
    np.testing.assert_array_equal(t, rows[:, 1])
