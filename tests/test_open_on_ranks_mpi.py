"""``mpi.query.open_on_ranks`` (every MPI ``query`` and ``serve``): each rank reads the index and
verifies its checksums; rank 0 alone makes the value checks, a rank with rank 0's checksum seal
skips them; a file without a seal is value-checked on every rank; a file whose values are wrong
(its checksums made anew, so only the values say so) is one error on every rank."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import distgrail


def _counted(monkeypatch):
    import distgrail.indexfile.read as read

    calls = []
    checks = read._check_values

    def counting(*a, **kw):
        calls.append(1)
        return checks(*a, **kw)

    monkeypatch.setattr(read, "_check_values", counting)
    return calls


def _index(comm, tmp_path_factory, damage=None, unseal=False) -> str:
    """An index file written by rank 0 (in a folder of its own), its path on every rank."""
    path = None
    if comm.Get_rank() == 0:
        path = str(tmp_path_factory.mktemp("onranks") / "i.h5")
        idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
        arrays = dict(idx.arrays)
        if damage:
            arrays["dag/level"] = np.zeros_like(arrays["dag/level"])  # levels that do not rise along edges
        distgrail.index.Index(idx.meta, arrays).save(path)
        if unseal:
            from distgrail.indexfile import SEAL

            with h5py.File(path, "r+") as f:  # (as a release before the seals wrote it)
                del f.attrs[SEAL], f.attrs["blake3_of_attributes"]
    return comm.bcast(path, root=0)


@pytest.mark.mpi(min_size=2)
def test_values_checked_by_rank_0_alone_unless_a_rank_has_no_seal_to_compare(monkeypatch, tmp_path_factory):
    from mpi4py import MPI

    from distgrail.mpi.opening import open_on_ranks

    comm = MPI.COMM_WORLD
    path = _index(comm, tmp_path_factory)
    calls = _counted(monkeypatch)
    idx = open_on_ranks(comm, path)
    got = comm.allgather(len(calls))
    want = idx.query(np.arange(50), np.arange(50)[::-1], backend="cpu")[0]
    assert got == [1] + [0] * (comm.Get_size() - 1), got
    assert idx.seal is not None and comm.allgather(idx.seal) == [idx.seal] * comm.Get_size()
    assert all(np.array_equal(a, want) for a in comm.allgather(want))
    bare = _index(comm, tmp_path_factory, unseal=True)
    calls.clear()
    assert open_on_ranks(comm, bare).seal is None and comm.allgather(len(calls)) == [1] * comm.Get_size()


@pytest.mark.mpi(min_size=2)
def test_wrong_values_are_one_error_on_every_rank(tmp_path_factory):
    from mpi4py import MPI

    from distgrail.errors import DistGrailError
    from distgrail.mpi.opening import open_on_ranks

    comm = MPI.COMM_WORLD
    path = _index(comm, tmp_path_factory, damage=True)
    with pytest.raises(DistGrailError, match=r"rank 0, opening the index .*i\.h5: .*damaged index: dataset /dag/level"):
        open_on_ranks(comm, path)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("sealed", [True, False])
def test_a_rank_whose_attributes_differ_checks_its_values_itself(tmp_path_factory, sealed):
    """The datasets' seal covers the datasets only: a rank whose file has rank 0's datasets but
    another root attribute (here n_levels, which a value check reads) runs the checks itself, and
    their error is every rank's: the attributes' seal's, or, in a file of an earlier release
    without it (``sealed`` False), the value check's."""
    import shutil

    from mpi4py import MPI

    from distgrail.errors import DistGrailError
    from distgrail.mpi.opening import open_on_ranks

    comm = MPI.COMM_WORLD
    good = _index(comm, tmp_path_factory)
    path = good
    if comm.Get_rank() == 1:
        path = good.replace("i.h5", "edited.h5")
        shutil.copyfile(good, path)
        with h5py.File(path, "r+") as f:
            f.attrs["n_levels"] = int(f.attrs["n_levels"]) + 7
            if not sealed:
                del f.attrs["blake3_of_attributes"]
    why = "its root attributes" if sealed else "n_levels"
    with pytest.raises(DistGrailError, match=rf"rank 1, (checking|opening) the index .*edited\.h5: .*{why}"):
        open_on_ranks(comm, path)
