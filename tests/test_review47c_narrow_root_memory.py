"""Review 47c: the partitioned sweeps' ``narrow`` rule asks whether rank 0 can take the ``left``
alive edges (``Partitioned._narrow``, :func:`distgrail.mpi.partition._root_can_finish`). That
question is asked mid-sweeps: rank 0's own share (the read's edges, the sweeps' copies) is held
already and out of its free memory, so it must not be taken off the need a second time."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from distgrail.mpi import partition as part


def _narrow(monkeypatch, free: int):
    MPI = pytest.importorskip("mpi4py.MPI")
    monkeypatch.setattr(part, "_free_bytes", lambda be: free)
    place = SimpleNamespace(comm=MPI.COMM_SELF, here=True, be=SimpleNamespace(is_gpu=True))
    return part.Partitioned._narrow(place, 1000)


def test_a_large_share_on_rank_0_does_not_make_room_for_the_gathered_edges(monkeypatch):
    """Rank 0 held 10^9 edges at the read (most of them trimmed since); 10^8 are left alive, whose
    gather alone takes 48 bytes each (4.8 GB): with 1 GiB free the answer is no. Before the fix
    the 8 bytes a held edge came off the need (as where the whole graph is asked for, before the
    sweeps): the need went negative and rank 0 said yes with any free memory, 0 bytes included."""
    left = 10**8
    assert part.root_finish_bytes(1000, left, 1) > 48 * left
    assert not _narrow(monkeypatch, 1 << 30)(left)
    assert not _narrow(monkeypatch, 0)(left)


def test_a_root_with_room_still_takes_them(monkeypatch):
    left = 10**6
    assert _narrow(monkeypatch, part.root_finish_bytes(1000, left, 1))(left)


def test_on_the_cpu_the_hosts_free_memory_decides(monkeypatch):
    """The CPU backend had no check: the rule could gather up to 2^31 edges to rank 0's host
    (before it, the CPU path gathered at most DISTGRAIL_PARTITION_GATHER edges)."""
    MPI = pytest.importorskip("mpi4py.MPI")
    place = SimpleNamespace(comm=MPI.COMM_SELF, here=True, be=SimpleNamespace(is_gpu=False))
    left = 10**6
    monkeypatch.setattr(part, "_host_free_bytes", lambda: 1 << 20)
    assert not part.Partitioned._narrow(place, 1000)(left)
    monkeypatch.setattr(part, "_host_free_bytes", lambda: part.root_finish_bytes(1000, left, 1))
    assert part.Partitioned._narrow(place, 1000)(left)
    monkeypatch.setattr(part, "_host_free_bytes", lambda: None)  # (not said: as before)
    assert part.Partitioned._narrow(place, 1000)(left)
