"""The GPU query's staging ring (:class:`distgrail.query.answer._Stager`) with host stand-ins for
CuPy's pinned memory, copies and events: every chunk reaches its device buffer whole and in
order, from the two columns of one (k, 2) array (copied up as rows) and from two arrays of their
own, no piece spans two chunks, and no slot is refilled before its
last upload finished. The same ring on a GPU: tests/test_query_gpu.py."""

import numpy as np
import pytest

from distgrail.arrays import interleaved_rows
from distgrail.query import answer


class FakeEvent:
    """An upload that finishes when waited for, or on every other poll."""

    polls = 0

    def __init__(self):
        self.finished = False

    @property
    def done(self):
        FakeEvent.polls += 1
        self.finished = self.finished or FakeEvent.polls % 2 == 0
        return self.finished

    def synchronize(self):
        self.finished = True


def host_split(ds, dt, rows, stream):
    ds[...], dt[...] = rows[:, 0], rows[:, 1]


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("nq,chunk,piece,slots", [(10_000, 3001, 1000, 2), (10_000, 3001, 700, 4), (5, 5, 2, 3),
                                                  (4096, 1024, 256, 4), (1000, 1000, 5000, 2)])
def test_stager_uploads_every_chunk_in_order(monkeypatch, nq, chunk, piece, slots, layout):
    monkeypatch.setattr(answer, "STAGE_PAIRS", piece)
    monkeypatch.setattr(answer, "STAGE_SLOTS", slots)
    rng = np.random.default_rng(nq + chunk)
    pairs = rng.integers(0, 1 << 40, (nq, 2))  # the columns of a (k, 2) file: strided views
    sources, targets = pairs[:, 0], pairs[:, 1]
    if layout == "columns":  # two arrays of their own (one strided, one reversed): staged column by column
        sources, targets = np.ascontiguousarray(pairs[:, 0]), pairs[::-1, 1][::-1]
    uploads = []
    stager = None

    def h2d(dev, host, stream):
        uploads.append(host.size)
        dev[...] = host

    real_copy, real_many = answer.copy_parallel, answer.copy_many_parallel

    def slot_free(dst):
        j = next(j for j, pair in enumerate(stager.slots) if any(x is not None and np.shares_memory(dst, x)
                                                                  for x in pair))
        ev = stager.uploaded[j]
        assert ev is None or ev.finished, f"slot {j} refilled while its upload runs"

    def copy_checked(dst, src, piece_bytes=None):
        slot_free(dst)
        real_copy(dst, src, piece_bytes)

    def many_checked(copies, piece_bytes=None):
        for dst, _ in copies:
            slot_free(dst)
        real_many(copies, piece_bytes)

    monkeypatch.setattr(answer, "copy_parallel", copy_checked)
    monkeypatch.setattr(answer, "copy_many_parallel", many_checked)
    stager = answer._Stager(sources, targets, chunk, stream=None, pinned=np.empty, h2d=h2d,
                            event=lambda stream: FakeEvent(), device=np.empty, split=host_split)
    assert len(stager.slots) == slots and stager.piece == min(piece, -(-chunk // 2))
    assert all(x is None or x.shape[0] == piece for pair in stager.slots for x in pair)  # one size, any batch
    assert (stager.rows is not None) == (layout == "rows")
    for a in range(0, nq, chunk):
        b = min(nq, a + chunk)
        ds, dt = np.full(b - a, -1), np.full(b - a, -1)
        stager.upload(a, b, ds, dt)
        np.testing.assert_array_equal(ds, sources[a:b])
        np.testing.assert_array_equal(dt, targets[a:b])
        assert all(lo >= b for _, lo, _ in stager.staged)  # what is staged ahead belongs to later chunks
        stager.ahead()
        assert len(stager.staged) <= slots
    assert stager.next == nq and not stager.staged
    assert sum(uploads) == 2 * nq and max(uploads) <= 2 * min(piece, -(-chunk // 2))


def test_stager_pieces_follow_the_chunks(monkeypatch):
    monkeypatch.setattr(answer, "STAGE_PAIRS", 120)
    s = np.arange(1000)
    stager = answer._Stager(s, s, 300, None, pinned=np.empty, h2d=lambda d, h, st: None,
                            event=lambda st: FakeEvent(), device=np.empty, split=host_split)
    cuts = []
    while stager._stage(wait=True):
        cuts.append(stager.staged.pop(0)[1:])
    assert cuts == [(0, 120), (120, 240), (240, 300), (300, 420), (420, 540), (540, 600), (600, 720), (720, 840),
                    (840, 900), (900, 1000)]
    monkeypatch.setattr(answer, "STAGE_PAIRS", 1000)  # a batch of one chunk: two pieces, copies beside uploads
    assert answer._Stager(s, s, 1000, None, pinned=np.empty, h2d=None, event=None, device=np.empty,
                          split=host_split).piece == 500


def test_interleaved_only_for_the_two_columns_of_one_array():
    pairs = np.arange(20, dtype=np.int64).reshape(10, 2)
    rows = interleaved_rows(pairs[:, 0], pairs[:, 1])
    assert rows is not None and np.array_equal(rows, pairs) and not rows.flags.writeable
    assert interleaved_rows(pairs[:, 1], pairs[:, 0]) is None  # swapped: not rows of (s, t)
    assert interleaved_rows(pairs[:, 0].copy(), pairs[:, 1].copy()) is None
    assert interleaved_rows(pairs[:5, 0], pairs[:5, 1]) is not None
    assert interleaved_rows(pairs[:, 0].astype(np.int32), pairs[:, 1].astype(np.int32)) is None
    three = np.arange(30, dtype=np.int64).reshape(10, 3)
    assert interleaved_rows(three[:, 0], three[:, 1]) is None  # rows of 3: strides 24


class FakeStream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass


class FakeScratch:
    """The device side of a chunk, on the host: its 'kernels' answer (7 s + t) % 3 == 0."""

    def __init__(self):
        self.size, self.launched = 0, []

    def buffers(self, k):
        if k > self.size:
            self.ds, self.dt, self.answers = np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.uint8)
            self.size = k

    def queue_steps(self, ds, dt, answers, m, stream, budget):
        self.launched.append(m)
        answers[...] = (7 * ds + dt) % 3 == 0

    def finish_steps(self, answers, stream, budget):
        return 1


@pytest.mark.parametrize("layout", ["rows", "columns", "pinned"])
@pytest.mark.parametrize("nq,chunk,piece", [(10_000, 3001, 700), (5000, 5000, 4096), (64, 10, 3)])
def test_stream_chunks_answers_in_input_order(monkeypatch, layout, nq, chunk, piece):
    """The whole pipeline of a batch (:func:`_stream_chunks`) with host stand-ins for CuPy: the
    chunks' answers come back in input order through the two answer slots, from rows, columns of
    their own, or page-locked pairs uploaded in place; every chunk is launched once."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=np.empty))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(empty=np.empty))
    monkeypatch.setattr(answer, "_h2d", lambda dev, host, stream: dev.__setitem__(Ellipsis, host))
    monkeypatch.setattr(answer, "_d2h", lambda host, dev, stream: host.__setitem__(Ellipsis, dev))
    monkeypatch.setattr(answer, "_event", lambda stream: FakeEvent())
    monkeypatch.setattr(answer, "_split_columns", host_split)
    monkeypatch.setattr(answer, "_page_locked", lambda a: layout == "pinned")
    monkeypatch.setattr(answer, "STAGE_PAIRS", piece)
    pairs = np.random.default_rng(nq).integers(0, 1 << 40, (nq, 2))
    if layout == "rows":
        s, t = pairs[:, 0], pairs[:, 1]
    else:
        s, t = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    out = np.zeros(nq, bool)
    scratch = FakeScratch()
    handed = answer._stream_chunks(scratch, s, t, out, chunk, FakeStream(), budget=0)
    np.testing.assert_array_equal(out, (7 * pairs[:, 0] + pairs[:, 1]) % 3 == 0)
    assert scratch.launched == [min(chunk, nq - a) for a in range(0, nq, chunk)] and handed == len(scratch.launched)


@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_pin_staging_pins_the_blocks_the_batch_takes(monkeypatch, layout):
    """``pin_staging`` page-locks exactly the pinned blocks (shapes and types) a large batch then
    asks CuPy's pinned pool for, whatever its size: so the pool gives them back to it."""
    import sys
    import types

    asked = []

    def pinned(shape, dtype):
        asked.append((tuple(np.atleast_1d(shape)), np.dtype(dtype).str))
        return np.empty(shape, dtype)

    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=pinned))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(empty=np.empty))
    monkeypatch.setattr(answer, "_h2d", lambda dev, host, stream: dev.__setitem__(Ellipsis, host))
    monkeypatch.setattr(answer, "_d2h", lambda host, dev, stream: host.__setitem__(Ellipsis, dev))
    monkeypatch.setattr(answer, "_event", lambda stream: FakeEvent())
    monkeypatch.setattr(answer, "_split_columns", host_split)
    monkeypatch.setattr(answer, "_page_locked", lambda a: False)
    monkeypatch.setattr(answer, "STAGE_PAIRS", 100)
    monkeypatch.setattr(answer, "CHUNK_PAIRS", 1000)
    answer.pin_staging(rows=layout == "rows")
    pinned_first = sorted(asked)
    for nq, chunk in ((5000, 1000), (150, 150)):  # a batch of several chunks, and a small one
        asked.clear()
        pairs = np.arange(2 * nq).reshape(nq, 2)
        s, t = (pairs[:, 0], pairs[:, 1]) if layout == "rows" else (pairs[:, 0].copy(), pairs[:, 1].copy())
        answer._stream_chunks(FakeScratch(), s, t, np.zeros(nq, bool), chunk, FakeStream(), 0)
        assert sorted(asked) == pinned_first, nq
