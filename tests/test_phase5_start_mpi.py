"""When each rank's phase-5 words start in a build across ranks (distgrail.mpi.phase5), under
``mpiexec -n 2`` and ``-n 3``: the other ranks' before phases 1–2 (they wait for root's forest
meanwhile), root's once the forest is shared (beside root's phase 1 a many-level sweep held it
up); a failure in root's late start is every rank's error, and the index is the one-process index."""

from __future__ import annotations

import pytest

import distgrail
from distgrail.errors import DistGrailError
from distgrail.mpi import phase5
from distgrail.mpi.placement import AcrossRanks
from test_distributed_mpi import everywhere, same_index

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def _log(monkeypatch, fail_root=False):
    """This rank's events, in order: 'start' (its words started), 'forest' (the forest shared)."""
    events, start, share = [], phase5._start_block, AcrossRanks.share_forest

    def started(run, entry, dag, ids, block, sides=phase5.SIDES):
        events.append("start")
        if fail_root and run.be is not None and _rank() == 0:
            raise DistGrailError("no room for the masks (injected)")
        return start(run, entry, dag, ids, block, sides)

    def shared(self, forest):
        out = share(self, forest)
        events.append("forest")
        return out

    monkeypatch.setattr(phase5, "_start_block", started)
    monkeypatch.setattr(AcrossRanks, "share_forest", shared)
    return events


def _rank():
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


@pytest.mark.parametrize("full_index_on", ["root", "all"])
def test_root_starts_its_words_once_the_forest_is_shared(comm, monkeypatch, full_index_on):
    events = _log(monkeypatch)
    g = distgrail.bundled_graph()  # 3,617 components: K = 130 is three words, root holds one at -n 2 and -n 3
    ref = distgrail.build_index(g, dims=2, seed=3, backend="cpu", supports=130)
    idx = distgrail.build_index(g, dims=2, seed=3, backend="cpu", comm=comm, supports=130,
                                full_index_on=full_index_on)
    me = comm.Get_rank()
    want = ["forest", "start"] if me == 0 else ["start", "forest"]
    why = "" if events == want else f"rank {me}: {events}"
    if not why and (me == 0 or full_index_on == "all"):
        why = same_index(ref, idx)
    everywhere(comm, not why, why)


def test_a_failing_late_start_on_root_fails_every_rank(comm, monkeypatch):
    _log(monkeypatch, fail_root=True)
    with pytest.raises(DistGrailError, match=r"rank 0, support masks, words 0\.\.0: no room for the masks"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=3, backend="cpu", comm=comm, supports=130)
