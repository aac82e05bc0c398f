"""A failing rank's error of one of distgrail's kinds is, on every rank, a RankError of that kind
too (``except GraphFormatError`` under MPI catches what it catches in one process); any other
error stays a plain RankError (a bug's: ``bug`` set)."""

from __future__ import annotations

import pytest

from distgrail.errors import BackendError, DistGrailError, GraphFormatError, IndexFormatError, OutputError, QueryError

KINDS = [(GraphFormatError("planted", path="x.txt", line=3), GraphFormatError, "x.txt:3: planted"),
         (IndexFormatError("i.h5: damaged index"), IndexFormatError, "i.h5: damaged index"),
         (BackendError("no GPU"), BackendError, "no GPU"),
         (OutputError("o.h5: cannot write the output: disk full"), OutputError, "o.h5: cannot write the output: disk full"),
         (QueryError("pairs[3]: out of range"), QueryError, "pairs[3]: out of range")]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("error,kind,text", KINDS, ids=[k.__name__ for _, k, _ in KINDS])
def test_every_rank_raises_the_failing_ranks_kind(error, kind, text):
    from mpi4py import MPI

    from distgrail.mpi.errors import RankError, run_shared

    comm = MPI.COMM_WORLD
    last = comm.Get_size() - 1

    def fail():
        if comm.Get_rank() == last:
            raise error

    with pytest.raises(kind) as e:
        run_shared(comm, "reading", fail)
    assert isinstance(e.value, RankError) and e.value.rank == last and not e.value.bug
    assert str(e.value) == f"rank {last}, reading: {text}"
    others = [k for _, k, _ in KINDS if k is not kind]
    assert not isinstance(e.value, tuple(others))


@pytest.mark.mpi(min_size=2)
def test_another_error_stays_a_plain_rank_error_and_a_bug():
    from mpi4py import MPI

    from distgrail.mpi.errors import RankError, run_shared

    comm = MPI.COMM_WORLD

    def fail():
        if comm.Get_rank() == 0:
            raise KeyError("k")

    with pytest.raises(RankError) as e:
        run_shared(comm, "labeling", fail)
    assert type(e.value) is RankError and e.value.bug and isinstance(e.value, DistGrailError)
    assert not isinstance(e.value, (GraphFormatError, IndexFormatError, BackendError, OutputError, QueryError))
