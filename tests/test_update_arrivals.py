"""An update's index written while its swept arrays come down (``insert_edges(write=...)``,
:class:`distgrail.gpu.dma.Arrivals`): the writer waits for each dataset's values, in the order of
the file; the file is the one written after the whole download; a failed download leaves no file
and raises its error; a failed write stops the downloads before returning."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import distgrail
from distgrail.errors import BackendError
from distgrail.gpu.backend import Backend
from distgrail.gpu.dma import Arrivals
from distgrail.indexfile import layout
from distgrail.io.generate import generate
from distgrail.update import UPDATES, insert_edges


def _copy(dev, out):
    np.copyto(out, dev)
    return out


def test_arrivals_land_in_order_and_wait_blocks_until_each_has():
    gate = {k: threading.Event() for k in "abc"}
    seen = []

    def slow(dev, out):
        gate[str(dev[0])].wait(5)
        seen.append(str(dev[0]))
        return _copy(dev, out)

    items = [(k, np.array([k]), np.array([""], dtype="<U1")) for k in "abc"]
    arr = Arrivals(slow, items)
    done = []
    waiter = threading.Thread(target=lambda: (arr.wait("b"), done.append(True)))
    waiter.start()
    gate["a"].set()
    time.sleep(0.05)
    assert not done  # "b" has not landed
    arr.wait("a")
    assert items[0][2][0] == "a"
    gate["b"].set()
    waiter.join(5)
    assert done and items[1][2][0] == "b"
    arr.wait("not one of them")  # (at once)
    gate["c"].set()
    arr.join()
    assert seen == ["a", "b", "c"] and items[2][2][0] == "c" and arr.seconds > 0


def test_arrivals_copy_inside_the_context_given_entered_on_their_thread():
    seen = []

    class Ctx:
        def __enter__(self):
            seen.append(("in", threading.current_thread().name))

        def __exit__(self, *exc):
            seen.append(("out", threading.current_thread().name))

    items = [(k, np.array([1]), np.zeros(1, int)) for k in "ab"]
    arr = Arrivals(lambda dev, out: (seen.append(("copy", threading.current_thread().name)), _copy(dev, out)),
                   items, context=Ctx())
    arr.join()
    assert seen == [("in", "distgrail-arrivals"), ("copy", "distgrail-arrivals"), ("copy", "distgrail-arrivals"),
                    ("out", "distgrail-arrivals")]


def test_a_failed_download_is_raised_to_whoever_waits_for_it_or_later():
    def fails_on_b(dev, out):
        if dev[0] == 2:
            raise BackendError("device lost")
        return _copy(dev, out)

    items = [(k, np.array([i + 1]), np.zeros(1, int)) for i, k in enumerate("abc")]
    arr = Arrivals(fails_on_b, items)
    arr.wait("a")  # landed before the failure
    for k in "bc":
        with pytest.raises(BackendError, match="device lost"):
            arr.wait(k)
    with pytest.raises(BackendError, match="device lost"):
        arr.join()
    assert items[0][2][0] == 1 and items[2][2][0] == 0


def test_a_cancelled_join_copies_nothing_after_the_current_array():
    started, release = threading.Event(), threading.Event()

    def held(dev, out):
        started.set()
        release.wait(5)
        return _copy(dev, out)

    items = [(k, np.array([7]), np.zeros(1, int)) for k in "abc"]
    arr = Arrivals(held, items)
    started.wait(5)
    threading.Timer(0.05, release.set).start()
    arr.join(cancel=True)
    assert [int(h[0]) for _, _, h in items] == [7, 0, 0]
    with pytest.raises(BackendError, match="cancelled"):
        arr.wait("b")


def _base(tmp_path, name):
    g = generate("scale-free", 400, 3, seed=5)
    p = str(tmp_path / name)
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=3, backend="cpu").save(p)
    rng = np.random.default_rng(8)
    return g, p, rng.integers(0, g.n, 40), rng.integers(0, g.n, 40)


@pytest.mark.parametrize("layout", ["single", "split"])
def test_written_beside_slow_downloads_is_the_file_written_after_them(tmp_path, monkeypatch, layout):
    """The downloads slowed (each array lands 20 ms late into the memory of the index read, which
    holds the old values until then): the index written beside them holds the new arrays, as
    the one written after a whole download, and answers the same."""
    g, p, s, t = _base(tmp_path, "base.h5")
    after, _ = insert_edges(distgrail.open_index(p), s, t, backend="cpu", consume=True)
    want = str(tmp_path / "after.h5")
    after.save(want, layout=layout, parts=3)
    real = Backend.to_host
    order = []

    def late(self, a, out=None):
        if out is not None and threading.current_thread().name == "distgrail-arrivals":
            time.sleep(0.02)
            order.append(out.shape)
        return real(self, a, out=out)

    monkeypatch.setattr(Backend, "to_host", late)
    got = str(tmp_path / "beside.h5")
    new, rep = insert_edges(distgrail.open_index(p), s, t, backend="cpu", consume=True,
                            write=lambda idx, ready: idx.save(got, layout=layout, parts=3, ready=ready))
    monkeypatch.setattr(Backend, "to_host", real)
    assert rep.method == "swept" and len(order) >= 8 and rep.seconds["write"] > 0
    a, b = distgrail.open_index(want), distgrail.open_index(got)
    assert sorted(a.arrays) == sorted(b.arrays)
    for k in a.arrays:
        assert np.array_equal(a.arrays[k], b.arrays[k]), k
    assert b.arrays[UPDATES].shape == (40, 2)
    rng = np.random.default_rng(1)
    qs, qt = rng.integers(0, g.n, 5000), rng.integers(0, g.n, 5000)
    assert np.array_equal(a.query(qs, qt, backend="cpu")[0], b.query(qs, qt, backend="cpu")[0])


def test_a_download_failing_mid_write_leaves_no_file(tmp_path, monkeypatch):
    _, p, s, t = _base(tmp_path, "base.h5")
    real, calls = Backend.to_host, []

    def third_fails(self, a, out=None):
        if threading.current_thread().name != "distgrail-arrivals":
            return real(self, a, out=out)
        calls.append(1)
        if len(calls) == 3:
            raise BackendError("an uncorrectable ECC error")
        return real(self, a, out=out)

    monkeypatch.setattr(Backend, "to_host", third_fails)
    out = str(tmp_path / "new.h5")
    with pytest.raises(BackendError, match="uncorrectable"):
        insert_edges(distgrail.open_index(p), s, t, backend="cpu", consume=True,
                     write=lambda idx, ready: idx.save(out, ready=ready))
    assert sorted(os.listdir(tmp_path)) == ["base.h5"]


def test_a_write_failing_stops_the_downloads_before_it_returns(tmp_path, monkeypatch):
    _, p, s, t = _base(tmp_path, "base.h5")
    real, copied = Backend.to_host, []

    def counted(self, a, out=None):
        if threading.current_thread().name != "distgrail-arrivals":
            return real(self, a, out=out)
        time.sleep(0.01)
        copied.append(1)
        return real(self, a, out=out)

    monkeypatch.setattr(Backend, "to_host", counted)

    def write(idx, ready):
        ready("vertex/component")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        insert_edges(distgrail.open_index(p), s, t, backend="cpu", consume=True, write=write)
    n = len(copied)
    time.sleep(0.1)
    assert len(copied) == n < 8  # nothing copied after the error was raised; not all were


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["single", "split"])
def test_gpu_update_written_beside_its_download_equals_the_cpu_sweep(tmp_path, layout):
    """On a GPU the swept arrays come down on the thread while the file is written: every
    dataset equals the CPU sweep's, written after it."""
    g, p, s, t = _base(tmp_path, "base.h5")
    want, _ = insert_edges(distgrail.open_index(p), s, t, backend="cpu")
    got_path = str(tmp_path / "gpu.h5")
    _, rep = insert_edges(distgrail.open_index(p), s, t, backend="gpu", consume=True,
                          write=lambda idx, ready: idx.save(got_path, layout=layout, parts=2, ready=ready))
    assert rep.method == "swept" and rep.seconds["sweep_download"] > 0
    got = distgrail.open_index(got_path)
    for k in want.arrays:
        assert np.array_equal(np.asarray(want.arrays[k]), got.arrays[k]), k


def test_an_update_keeps_a_split_index_of_more_parts_than_parts_may_ask_for(tmp_path, monkeypatch, capsys):
    """The bound is on what ``--parts`` asks for: an index of more parts (an MPI build's, one per
    rank) is updated in its own layout; ``--parts`` past the bound is refused before the read."""
    from distgrail.cli import main
    from distgrail.indexfile import split
    from distgrail.indexfile.layout import index_parts

    g, p, s, t = _base(tmp_path, "base.h5")
    distgrail.open_index(p).save(p, layout="split", parts=3)
    monkeypatch.setattr(split, "MAX_PARTS", 2)
    (tmp_path / "e.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    assert main(["update", p, "--add", str(tmp_path / "e.txt"), "--backend", "cpu", "--quiet"]) == 0
    assert len(index_parts(p)) == 3 and distgrail.open_index(p).arrays[UPDATES].shape == (40, 2)
    assert main(["update", p, "--add", str(tmp_path / "e.txt"), "--parts", "3", "-o", str(tmp_path / "x.h5")]) == 2
    assert "--parts must be 1..2 (part files of a split index), got 3" in capsys.readouterr().err


def test_a_part_that_cannot_be_written_is_an_output_error_naming_it(tmp_path, monkeypatch, capsys):
    """No space while a part's blocks are written: exit 2, the part named, nothing left behind."""
    from distgrail.cli import main
    from distgrail.indexfile import write as ixwrite

    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10)  # the parts written by the pool's blocks
    g, p, s, t = _base(tmp_path, "base.h5")

    def full(fd, bufs, at):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ixwrite.os, "pwritev", full)
    out = tmp_path / "out.h5"
    assert main(["convert", p, "--layout", "split", "--parts", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out}." in err and ".part" in err and "cannot write the output: No space left" in err, err
    assert "Traceback" not in err and sorted(os.listdir(tmp_path)) == ["base.h5"]


def test_an_update_that_changes_nothing_is_written_after_its_steps_close(monkeypatch):
    """Edges inside one component change nothing: the steps end (and, on a GPU, the uploaded
    arrays go) before the index is written, as after a sweep."""
    import distgrail.update as upd

    g = generate("paper", 300, 3, seed=1)
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu")
    order = []

    class Watched(upd.Steps):
        def __exit__(self, *exc):
            order.append("steps closed")
            return super().__exit__(*exc)

    monkeypatch.setattr(upd, "Steps", Watched)
    new, rep = insert_edges(idx, [5, 7], [5, 7], backend="cpu", progress=True,
                            write=lambda new, ready: order.append("written"))
    assert rep.added == 0 and rep.same_component == 2 and "write" in rep.seconds
    assert order == ["steps closed", "written"], order
