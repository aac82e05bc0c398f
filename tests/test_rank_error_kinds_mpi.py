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


@pytest.mark.mpi(min_size=2)
def test_a_step_shared_inside_a_step_is_raised_once_as_it_is():
    """A RankError every rank raised in a step inside another (run_shared within run_shared on one
    communicator) comes out of the outer one as it is: the failing rank, its kind, its message
    once; different RankErrors (from steps on different communicators) are wrapped as any error."""
    from mpi4py import MPI

    from distgrail.mpi.errors import RankError, run_shared

    comm = MPI.COMM_WORLD
    last = comm.Get_size() - 1

    def inner():
        if comm.Get_rank() == last:
            raise GraphFormatError("planted", path="x.txt", line=3)

    with pytest.raises(GraphFormatError) as e:
        run_shared(comm, "the outer step", lambda: run_shared(comm, "the inner step", inner))
    assert isinstance(e.value, RankError) and e.value.rank == last and e.value.failed_ranks == [last]
    assert str(e.value) == f"rank {last}, the inner step: x.txt:3: planted"
    own = comm.Split(int(comm.Get_rank() == 0), comm.Get_rank())  # {0} and the others: different errors

    def split_inner():
        run_shared(own, "a sub step", _raise, QueryError("group A") if comm.Get_rank() == 0 else OutputError("group B"))

    with pytest.raises(RankError) as e:
        run_shared(comm, "the outer step", split_inner)
    assert e.value.rank == 0 and e.value.failed_ranks == list(range(comm.Get_size()))
    assert str(e.value).startswith("rank 0 (and on rank") and "group A" in str(e.value)
    own.Free()


def _raise(e):
    raise e


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("holder", ["rank 0", "the last rank"])
def test_bundled_beside_a_file_of_that_name_is_one_decision_for_every_rank(comm, tmp_path_factory, holder,
                                                                           monkeypatch):
    """``bundled`` under MPI with the ranks in different working directories, only one of them
    holding a file named ``bundled``: rank 0's directory decides for every rank (each deciding
    alone left the others waiting in the next collective: a hang). Rank 0 holding it: the error on
    every rank; another rank holding it: the bundled graph on every rank."""
    import distgrail
    from distgrail.cli_common import resolve_bundled
    from distgrail.errors import DistGrailError

    d = tmp_path_factory.mktemp(f"r{comm.rank}")
    holds = comm.rank == (0 if holder == "rank 0" else comm.size - 1)
    if holds:
        (d / "bundled").write_text("0 1\n")
    monkeypatch.chdir(d)
    try:
        got = resolve_bundled("bundled", "graph", comm)
    except DistGrailError as e:
        got = str(e)
    if holder == "rank 0":
        assert "'bundled' names the bundled graph" in got
    else:
        assert got == distgrail.bundled_graph()
    assert len(set(comm.allgather(got))) == 1
