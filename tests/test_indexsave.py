"""The index file written while the build runs (distgrail/indexfile/write.py EarlyIndexFile): opened
with every dataset's shape and a placeholder digest, the arrays put in any order, finished with
the assembled index: byte for byte the file write_index_file writes; anything else leaves no file."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
import distgrail.indexfile.write as ixwrite
from distgrail.errors import DistGrailError
from distgrail.indexfile import PENDING_DIGEST, EarlyIndexFile, layout
from test_indexwrite import _synthetic


def _index(graph=None, **kw):
    return distgrail.build_index(distgrail.bundled_graph() if graph is None else graph, backend="cpu", **kw)


def _open(path, meta, arrays, pending=True):
    m = dict(meta)
    if pending and len(m["source_digest"]) == len(PENDING_DIGEST):  # an in-memory graph's digest is ""
        m["source_digest"] = PENDING_DIGEST
    return EarlyIndexFile(path, m, {k: np.shape(a) for k, a in arrays.items()})


def _leftovers(d):
    return sorted(x for x in os.listdir(d) if x.startswith("."))


@pytest.mark.parametrize("order", ["file", "reversed", "shuffled"])
@pytest.mark.parametrize("in_blocks", [True, False])
def test_early_file_is_the_file_written_at_once(tmp_path, monkeypatch, order, in_blocks):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10 if in_blocks else 1 << 50)
    monkeypatch.setattr(layout, "CRC_BLOCK", 997)  # many checksum blocks, edges inside elements
    idx = _index(dims=3, supports=130)
    idx.save(tmp_path / "once.h5")
    early = _open(tmp_path / "early.h5", idx.meta, idx.arrays)
    assert not (tmp_path / "early.h5").exists()  # in place only once finished
    names = list(idx.arrays)
    if order == "reversed":
        names.reverse()
    elif order == "shuffled":
        names = list(np.random.default_rng(3).permutation(names))
    for name in names:
        early.put(name, idx.arrays[name])
    assert early.finish(idx.meta, idx.arrays) == ""
    assert (tmp_path / "early.h5").read_bytes() == (tmp_path / "once.h5").read_bytes()
    assert _leftovers(tmp_path) == []
    back = distgrail.open_index(tmp_path / "early.h5")
    assert back.meta["source_digest"] == idx.meta["source_digest"] and back.meta["supports"] == 130


def test_synthetic_casts_and_a_known_digest(tmp_path, monkeypatch):
    """Narrowing casts, views and three-axis datasets through the pool; a digest known at the
    start is written at once."""
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 20)
    meta, arrays = _synthetic()
    ixwrite.write_index_file(tmp_path / "once.h5", meta, arrays)
    early = _open(tmp_path / "early.h5", meta, arrays, pending=False)
    for name in reversed(list(arrays)):
        early.put(name, arrays[name])
    assert early.finish(meta, arrays) == ""
    assert (tmp_path / "early.h5").read_bytes() == (tmp_path / "once.h5").read_bytes()


def test_empty_datasets_and_node_labels(tmp_path):
    g = distgrail.as_graph((np.zeros(0, np.int64), np.zeros(0, np.int64)), num_vertices=5)
    for graph, kw in ((g, dict(supports=0)), (str(tmp_path / "named.txt"), dict(supports=64))):
        if kw["supports"]:
            (tmp_path / "named.txt").write_text("source target\na b\nb c\nc a\nc d\n")  # (names: declared)
        idx = _index(graph, dims=2, **kw)
        idx.save(tmp_path / "once.h5")
        early = _open(tmp_path / "early.h5", idx.meta, idx.arrays)
        for name in idx.arrays:
            early.put(name, idx.arrays[name])
        assert early.finish(idx.meta, idx.arrays) == ""
        assert (tmp_path / "early.h5").read_bytes() == (tmp_path / "once.h5").read_bytes(), graph


@pytest.mark.parametrize("change", ["array", "attribute", "digest length", "missing", "extra"])
def test_another_index_leaves_no_file(tmp_path, change):
    idx = _index(dims=2)
    early = _open(tmp_path / "x.h5", idx.meta, idx.arrays)
    for name in idx.arrays:
        if change != "missing" or name != "forest/parent":
            early.put(name, idx.arrays[name])
    meta, arrays = dict(idx.meta), dict(idx.arrays)
    if change == "array":
        arrays["labels/dt_post0"] = arrays["labels/dt_post0"][::-1].copy()
    elif change == "attribute":
        meta["seed"] = 5
    elif change == "digest length":
        meta["source_digest"] = "ab" * 40
    elif change == "extra":
        arrays["vertex/label"] = np.arange(idx.meta["n_vertices"])
    why = early.finish(meta, arrays)
    want = {"array": "labels/dt_post0 is not the array put", "attribute": "attribute seed",
            "digest length": "a digest of 80", "missing": "forest/parent never put", "extra": "datasets"}[change]
    assert want in why
    assert not (tmp_path / "x.h5").exists() and _leftovers(tmp_path) == []


def test_put_checks_and_abort(tmp_path):
    idx = _index(dims=2)
    early = _open(tmp_path / "x.h5", idx.meta, idx.arrays)
    with pytest.raises(DistGrailError, match="has shape"):
        early.put("dag/level", idx.arrays["dag/level"][:-1])
    early.put("dag/level", idx.arrays["dag/level"])
    with pytest.raises(DistGrailError, match="unknown or put twice"):
        early.put("dag/level", idx.arrays["dag/level"])
    with pytest.raises(DistGrailError, match="unknown or put twice"):
        early.put("no/such", idx.arrays["dag/level"])
    early.abort()
    assert not (tmp_path / "x.h5").exists() and _leftovers(tmp_path) == []


def test_a_build_writes_its_index_while_it_runs(tmp_path, monkeypatch):
    """build_index(output=...) in one process: the file laid out after phases 1-2 is the one in
    place (write_index_file never runs), byte for byte the index saved afterwards."""
    from distgrail import index as index_mod

    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10)  # blocks through the pool
    monkeypatch.setattr(index_mod, "write_index_file", lambda *a: pytest.fail("written after the build"))
    idx = _index(dims=3, supports=70, output=tmp_path / "a.h5")
    assert "write_open" in idx.timings and idx.index_write == "early"
    monkeypatch.undo()
    idx.save(tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    assert _leftovers(tmp_path) == []


def test_a_build_falls_back_to_writing_after_it(tmp_path, monkeypatch):
    """An early file that is not the assembled index is dropped, the index written after the build."""
    from distgrail import index as index_mod

    real, calls = index_mod.write_index_file, []
    monkeypatch.setattr(index_mod, "write_index_file", lambda *a: (calls.append(a[0]), real(*a))[1])
    monkeypatch.setattr(EarlyIndexFile, "matches", lambda self, meta, arrays: "another index")
    idx = _index(dims=2, output=tmp_path / "a.h5")
    assert calls == [tmp_path / "a.h5"] and "write_open" in idx.timings
    assert idx.index_write == "after the build (another index)"
    idx.save(tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()
    assert _leftovers(tmp_path) == []


def test_a_build_failing_after_the_file_opened_leaves_nothing(tmp_path, monkeypatch):
    from distgrail import placement

    def broken(*a, **k):
        raise RuntimeError("assembly failed")

    monkeypatch.setattr(placement, "assemble", broken)
    with pytest.raises(RuntimeError, match="assembly failed"):
        _index(dims=2, output=tmp_path / "a.h5")
    assert os.listdir(tmp_path) == []


def test_large_datasets_must_be_the_arrays_put(tmp_path, monkeypatch):
    monkeypatch.setattr(ixwrite, "SAME_BY_VALUE", 0)
    idx = _index(dims=2)
    early = _open(tmp_path / "x.h5", idx.meta, idx.arrays)
    for name in idx.arrays:
        early.put(name, idx.arrays[name])
    arrays = {**idx.arrays, "dag/level": idx.arrays["dag/level"].copy()}  # same values, another array
    assert "dag/level is not the array put" in early.finish(idx.meta, arrays)
    assert _leftovers(tmp_path) == []


def test_the_early_file_does_not_wait_for_the_input_hash(tmp_path, monkeypatch):
    """The file opens while the background hash of the input still runs: the digest is a
    placeholder then, the hash joined only at the end (as without the early file)."""
    import threading

    from distgrail.io import digest as digest_mod

    (tmp_path / "g.txt").write_text("".join(f"{i} {i + 1}\n" for i in range(2000)))
    gate, joined_before_open = threading.Event(), []
    plain = digest_mod.FileDigest.result
    plain_open = EarlyIndexFile.__init__

    def result(self, *a, **k):
        gate.wait(30)  # the hash "runs" until the early file has opened
        return plain(self, *a, **k)

    def opened(self, path, meta, shapes, *types):
        joined_before_open.append(meta["source_digest"])
        plain_open(self, path, meta, shapes, *types)
        gate.set()

    monkeypatch.setattr(digest_mod.FileDigest, "result", result)
    monkeypatch.setattr(EarlyIndexFile, "__init__", opened)
    idx = _index(str(tmp_path / "g.txt"), dims=2, output=tmp_path / "a.h5")
    assert joined_before_open == [PENDING_DIGEST] and len(idx.meta["source_digest"]) == 64
    assert distgrail.open_index(tmp_path / "a.h5").meta["source_digest"] == idx.meta["source_digest"]


def test_the_labels_go_before_the_wait_for_phase_5(tmp_path, monkeypatch):
    from distgrail.stages import supports

    seen = []
    plain_put, plain_result = EarlyIndexFile.put, supports._Started.result
    monkeypatch.setattr(EarlyIndexFile, "put", lambda self, name, a: (seen.append(name), plain_put(self, name, a))[1])
    monkeypatch.setattr(supports._Started, "result", lambda self: (seen.append("phase 5 wait"), plain_result(self))[1])
    _index(dims=2, supports=64, output=tmp_path / "a.h5")
    assert seen.index("labels/intervals") < seen.index("phase 5 wait") < seen.index("supports/out")
    assert seen.index("dag/indptr") < seen.index("labels/dt_post0")


def test_an_early_file_that_fails_to_open_leaves_the_write_after_the_build(tmp_path, monkeypatch):
    def cannot(self, *a, **k):
        raise OSError(37, "No locks available")  # e.g. HDF5's file lock on a network file system

    monkeypatch.setattr(EarlyIndexFile, "__init__", cannot)
    idx = _index(dims=2, output=tmp_path / "a.h5")
    assert idx.index_write == "after the build (OSError: [Errno 37] No locks available)"
    assert distgrail.open_index(tmp_path / "a.h5").meta["n_components"] == idx.meta["n_components"]
    assert _leftovers(tmp_path) == []


def test_the_early_file_opens_beside_phases_3_4(tmp_path, monkeypatch):
    """The file is laid out on a thread of its own: its opening can wait for phases 3-4 to start
    (on the build's thread it would hold them, and this build would never end)."""
    import threading

    from distgrail import placement

    started, waited = threading.Event(), []
    plain_open, plain_label = EarlyIndexFile.__init__, placement.OneProcess.split_dims

    def opened(self, *a, **k):
        waited.append(started.wait(30))
        plain_open(self, *a, **k)

    def label(self, *a, **k):
        started.set()
        return plain_label(self, *a, **k)

    monkeypatch.setattr(EarlyIndexFile, "__init__", opened)
    monkeypatch.setattr(placement.OneProcess, "split_dims", label)
    idx = _index(dims=2, supports=64, output=tmp_path / "a.h5")
    assert waited == [True] and idx.index_write == "early" and idx.timings["write_open"] > 0
    assert distgrail.open_index(tmp_path / "a.h5").C == idx.C


def test_an_interrupt_while_waiting_for_the_open_leaves_the_abort_waiting_for_it(monkeypatch):
    """Ctrl-C while the build waits for the open's thread: the wait raises at once, and the abort
    that follows still waits for the thread to end (the file must not close under it) and then
    raises the interrupt it got meanwhile."""
    import signal
    import threading
    import time

    from distgrail.io import atomic

    # Python's own SIGINT handler, and no output of an earlier test being put in place: io.atomic's
    # handler, once an earlier test's write installed it, holds a signal back while an output is put
    # in place and passes it to the handler it found when installed (which an earlier test may have
    # set to ignore SIGINT), so that the interrupt reaches the wait under test as a user's Ctrl-C
    # reaches a build
    deadline = time.monotonic() + 30
    while atomic._DEFERRED["depth"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not atomic._DEFERRED["depth"]
    monkeypatch.setitem(atomic._DEFERRED, "signals", [])
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_while_waiting(signal, threading, time)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_while_waiting(signal, threading, time):

    from distgrail.build import EarlyWrite

    def sigint():
        os.kill(os.getpid(), signal.SIGINT)  # a real signal: it wakes the main thread's wait

    gate, events = threading.Event(), []

    def opening():
        gate.wait(30)
        events.append("open ended")
        early._opened_event.set()

    def later(seconds, f):
        time.sleep(seconds)
        f()

    early = EarlyWrite.__new__(EarlyWrite)
    early.file, early._opened_event = None, threading.Event()
    early._opening = threading.Thread(target=opening, daemon=True)
    early._opening.start()
    threading.Thread(target=later, args=(0.1, sigint), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        early._opened()
    assert early._opening is not None and early._opening.is_alive()  # still running: not marked ended
    threading.Thread(target=later, args=(0.1, sigint), daemon=True).start()
    threading.Thread(target=later, args=(0.4, gate.set), daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        early.abort(quiet=True)
    assert events == ["open ended"] and early._opening is None
