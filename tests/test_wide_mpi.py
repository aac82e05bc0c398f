"""MPI transfers in chunks (issue 23: no message passes 2^31 - 1 elements), with a forced small
``chunk_bytes`` under ``mpiexec -n 2``: every piece within the limit, the result equal to the whole."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.mpi.collectives import bcast_array, byte_spans, gather_rows, scatter_rows, split_counts

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


@pytest.fixture
def comm():
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


class Counting:
    """The communicator, recording the byte count of every buffer-based call."""

    def __init__(self, comm):
        self.comm, self.sizes = comm, []

    def __getattr__(self, name):
        f = getattr(self.comm, name)
        if name not in ("Bcast", "Gatherv", "Scatterv"):
            return f

        def call(*args, **kw):
            mine = args[1] if name == "Scatterv" else args[0]
            self.sizes.append(int(mine[0].nbytes))
            return f(*args, **kw)
        return call


def test_bcast_in_three_chunks_equals_the_whole(comm):
    a = np.arange(1000, dtype=np.int64) * 7 if comm.Get_rank() == 0 else None
    c = Counting(comm)
    got = bcast_array(c, a, 0, chunk_bytes=2700)  # 8000 bytes: 2700 + 2700 + 2600
    assert np.array_equal(got, np.arange(1000, dtype=np.int64) * 7) and got.dtype == np.int64
    assert c.sizes == [2700, 2700, 2600]
    assert [hi - lo for lo, hi in byte_spans(8000, 2700)] == c.sizes


def test_gather_and_scatter_in_rounds_equal_the_whole(comm):
    me, size = comm.Get_rank(), comm.Get_size()
    counts = split_counts(301, size)
    rows = np.arange(301 * 3, dtype=np.int32).reshape(301, 3)
    lo = int(counts[:me].sum())
    block = rows[lo:lo + int(counts[me])]
    c = Counting(comm)
    out = np.empty_like(rows) if me == 0 else None
    gather_rows(c, block, counts, out, root=0, chunk_bytes=500)
    if me == 0:
        assert np.array_equal(out, rows)
    assert len(c.sizes) > 1 and max(c.sizes) <= 500 // size
    c.sizes.clear()
    got = scatter_rows(c, rows if me == 0 else None, counts, (3,), np.int32, root=0, chunk_bytes=500)
    assert np.array_equal(got, block)
    assert len(c.sizes) > 1 and max(c.sizes) <= 500 // size
