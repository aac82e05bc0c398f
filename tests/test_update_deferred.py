"""A served update's index answers from its query state while its host arrays still come down
(:class:`distgrail.gpu.dma.Arrivals` with ``make``/``into``; :attr:`distgrail.index.Index.arrays`
waits for them): reading the arrays waits until every one has landed, one dataset not among them
is read at once, a failed download is raised on every read, and the support count comes from the
update's meta meanwhile. The GPU path itself: tests/test_insertion_gpu.py."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import distgrail
from distgrail.errors import BackendError
from distgrail.gpu.dma import Arrivals
from distgrail.index import Index
from distgrail.indexfile.layout import UPDATES


def _copy(dev, out):
    np.copyto(out, dev)
    return out


def _gated(gates):
    def copy(dev, out):
        gates[int(dev[0])].wait(5)
        return _copy(dev, out)
    return copy


def test_arrivals_make_the_host_arrays_on_their_thread_and_set_them_into_the_dict():
    made = []

    def make(dev):
        made.append(threading.current_thread().name)
        return np.zeros_like(dev)

    into = dict.fromkeys("ab")
    arr = Arrivals(_copy, [("a", np.array([1, 2]), None), ("b", np.array([3]), None)], make=make, into=into)
    arr.join()
    assert made == ["distgrail-arrivals"] * 2
    assert into["a"].tolist() == [1, 2] and into["b"].tolist() == [3]


def _pending_index(copy, supports=0):
    """An Index whose two "swept" arrays come down through ``copy`` (dataset "x" then "y"), with
    the updates dataset there from the start."""
    arrays = dict.fromkeys(["x", "y"])
    arrays[UPDATES] = np.array([[0, 1]], np.int64)
    meta = {"n_vertices": 2, "n_components": 2, "dims": 1, "supports": supports, "source_name": "t",
            "n_dag_edges": 1}
    idx = Index(meta, arrays)
    idx._pending = Arrivals(copy, [("x", np.array([0, 5]), None), ("y", np.array([1, 6]), None)],
                            make=np.zeros_like, into=arrays)
    return idx


def test_reading_the_arrays_waits_until_every_download_has_landed():
    gates = {0: threading.Event(), 1: threading.Event()}
    idx = _pending_index(_gated(gates), supports=3)
    assert idx.supports == 3  # (from the meta: the masks still landing)
    assert idx.dataset(UPDATES).tolist() == [[0, 1]]  # not among the downloads: at once
    got = []
    reader = threading.Thread(target=lambda: got.append(idx.arrays))
    reader.start()
    gates[0].set()
    time.sleep(0.05)
    assert not got  # "y" has not landed: the reader still waits
    assert idx.dataset("x").tolist() == [0, 5]  # one dataset: waits for that one alone
    gates[1].set()
    reader.join(5)
    assert got and got[0]["x"].tolist() == [0, 5] and got[0]["y"].tolist() == [1, 6]
    assert idx._pending is None  # (joined once)


def test_a_failed_download_is_raised_on_every_read_of_the_arrays():
    def fails(dev, out):
        if dev[0] == 1:
            raise BackendError("device lost")
        return _copy(dev, out)

    idx = _pending_index(fails)
    for _ in range(2):
        with pytest.raises(BackendError, match="device lost"):
            idx.arrays  # noqa: B018 - the read is the test
    assert idx.dataset("x").tolist() == [0, 5]  # (landed before the failure)


def test_an_index_without_downloads_reads_its_arrays_as_given():
    g = distgrail.build_index((np.array([0, 1]), np.array([1, 2])), dims=2, backend="cpu")
    assert g._pending is None and g.arrays is g._arrays
    assert g.dataset("vertex/component") is g.arrays["vertex/component"] and g.dataset("no such") is None
    assert g.supports == int(g.meta["supports"])


def test_a_download_that_failed_is_copied_again_by_the_next_read():
    """The download thread failed on "y" (no host memory for a moment): the read copies what had
    not landed again (its device array was kept), and every read retries until one succeeds."""
    state = {"fail": 2}

    def flaky(dev, out):
        if dev[0] == 1 and state["fail"]:
            state["fail"] -= 1
            raise MemoryError("no host memory for a moment")
        return _copy(dev, out)

    idx = _pending_index(flaky)
    with pytest.raises(MemoryError):
        idx.arrays  # noqa: B018 - the thread failed, and so did this read's copy
    got = idx.arrays  # (the third copy of "y" lands)
    assert got["x"].tolist() == [0, 5] and got["y"].tolist() == [1, 6] and idx._pending is None


def _stand_in_served(monkeypatch):
    """insert_edges' served path (an index with a GPU query state) on the CPU backend: the sweep
    keeps its arrays "on the device" (host arrays here) and the new state is not packed."""
    from distgrail import update as U

    monkeypatch.setattr(U, "_served", lambda index, be, state: object())
    monkeypatch.setattr(U._Device, "from_state", classmethod(lambda cls, index, be, L: cls(index, be)))
    monkeypatch.setattr(Index, "_adopt_state", lambda self, be, arrays: None)
    return U


def _chain_index():
    return distgrail.build_index((np.arange(0, 999), np.arange(1, 1000)), dims=2, backend="cpu")


def test_a_served_update_on_the_cpu_stand_in_defers_its_arrays_and_gives_the_plain_updates(monkeypatch):
    from distgrail.update import insert_edges

    plain, _ = insert_edges(_chain_index(), np.array([999, 5]), np.array([0, 700]), backend="cpu")
    U = _stand_in_served(monkeypatch)
    new, rep = U.insert_edges(_chain_index(), np.array([999, 5]), np.array([0, 700]), backend="cpu")
    assert rep.method == "swept" and new._pending is not None
    assert sorted(new.arrays) == sorted(plain.arrays)
    for name, want in plain.arrays.items():
        assert np.array_equal(new.arrays[name], want), name


@pytest.mark.parametrize("layout", ["single", "split"])
def test_a_served_update_given_a_writer_writes_its_arrays_not_placeholders(monkeypatch, tmp_path, layout):
    """With ``write=`` the writer gets arrays of their shapes and types before their values (as a
    file update's), not the deferred path's None entries: both layouts write the plain update's
    index."""
    from distgrail.update import insert_edges

    want = str(tmp_path / "plain.h5")
    plain, _ = insert_edges(_chain_index(), np.array([999]), np.array([0]), backend="cpu")
    plain.save(want, layout=layout)
    U = _stand_in_served(monkeypatch)
    got = str(tmp_path / "served.h5")
    new, rep = U.insert_edges(_chain_index(), np.array([999]), np.array([0]), backend="cpu",
                              write=lambda idx, ready: idx.save(got, layout=layout, ready=ready))
    assert rep.method == "swept" and new._pending is None
    a, b = distgrail.open_index(want), distgrail.open_index(got)
    assert sorted(a.arrays) == sorted(b.arrays)
    for name in a.arrays:
        assert np.array_equal(a.arrays[name], b.arrays[name]), name


def test_two_readers_after_a_failed_download_copy_each_array_once():
    """Two threads read the arrays at once after the download failed: one copies again what had
    not landed, the other finds it landed (no second copy, no placeholder, no error)."""
    copies = []
    first = {"failed": False}
    gate = threading.Event()

    def once_failing(dev, out):
        if dev[0] == 1 and not first["failed"]:
            first["failed"] = True
            raise MemoryError("no host memory for a moment")
        if threading.current_thread().name != "distgrail-arrivals":
            gate.wait(5)  # (both readers are in finish() before the copy)
            copies.append(int(dev[0]))
        return _copy(dev, out)

    idx = _pending_index(once_failing)
    idx._pending._thread.join()
    got, errors = [], []

    def read():
        try:
            got.append(idx.arrays)
        except Exception as e:  # noqa: BLE001 - the test's point
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    time.sleep(0.1)
    gate.set()
    for r in readers:
        r.join(5)
    assert not errors and len(got) == 2
    assert copies == [1]  # "y" copied again once
    for a in got:
        assert a["x"].tolist() == [0, 5] and a["y"].tolist() == [1, 6]
