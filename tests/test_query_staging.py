"""The GPU query's staging ring (:class:`distgrail.query.staging.Stager`) with host stand-ins for
CuPy's pinned memory, copies and events: every chunk reaches its device buffer whole and in
order, from the two columns of one (k, 2) array (copied up as rows) and from two arrays of their
own, no piece spans two chunks, and no slot is refilled before its
last upload finished. The same ring on a GPU: tests/test_query_gpu.py."""

import numpy as np
import pytest

from distgrail.arrays import interleaved_rows
from distgrail.query import staging as answer


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
    pairs = rng.integers(0, 2**31 - 1, (nq, 2))  # the columns of a (k, 2) file: strided views
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
    stager = answer.Stager(sources, targets, chunk, stream=None, pinned=np.empty, h2d=h2d,
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
    stager = answer.Stager(s, s, 300, None, pinned=np.empty, h2d=lambda d, h, st: None,
                            event=lambda st: FakeEvent(), device=np.empty, split=host_split)
    cuts = []
    while stager._stage(wait=True):
        cuts.append(stager.staged.pop(0)[1:])
    assert cuts == [(0, 120), (120, 240), (240, 300), (300, 420), (420, 540), (540, 600), (600, 720), (720, 840),
                    (840, 900), (900, 1000)]
    monkeypatch.setattr(answer, "STAGE_PAIRS", 1000)  # a batch of one chunk: two pieces, copies beside uploads
    assert answer.Stager(s, s, 1000, None, pinned=np.empty, h2d=None, event=None, device=np.empty,
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
    narrow = pairs.astype(np.int32)  # rows of int32 ids: copied up as they are
    rows = interleaved_rows(narrow[:, 0], narrow[:, 1])
    assert rows is not None and rows.dtype == np.int32 and np.array_equal(rows, pairs)
    assert interleaved_rows(narrow[:, 0], pairs[:, 1]) is None  # two types
    assert interleaved_rows(pairs[:, 0].view(np.uint64), pairs[:, 1].view(np.uint64)) is None


class Device:
    """Streams of a simulated GPU: each queues its work (copies, kernels, events, waits) and runs
    nothing until the host waits or polls; then queued work runs one step at a time, the stream
    picked at random among those whose next step may run (a wait runs once its event fired).
    Copies read their source when they run, not when queued: a pinned slot refilled, a device
    buffer rewritten or an answer slot reused before the work that reads it ran gives wrong
    answers here, as on a GPU."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.streams = []

    def stream(self):
        st = SimStream(self)
        self.streams.append(st)
        return st

    def step(self) -> bool:
        ready = [st for st in self.streams if st.ops and (st.ops[0][0] != "wait" or st.ops[0][1].fired)]
        if not ready:
            assert not any(st.ops for st in self.streams), "streams wait on events never recorded: a deadlock"
            return False
        kind, arg = ready[int(self.rng.integers(len(ready)))].ops.pop(0)
        if kind == "run":
            arg()
        elif kind == "record":
            arg.fired = True
        return True

    def run_until(self, cond):
        while not cond():
            assert self.step(), "waiting for work that can never run"

    def some(self):
        for _ in range(int(self.rng.integers(0, 4))):
            self.step()


class SimStream:
    def __init__(self, dev):
        self.dev, self.ops = dev, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def queue(self, fn):
        self.ops.append(("run", fn))

    def wait_event(self, ev):
        self.ops.append(("wait", ev))

    def synchronize(self):
        self.dev.run_until(lambda: not self.ops)


class SimEvent:
    def __init__(self, stream):
        self.dev, self.fired = stream.dev, False
        stream.ops.append(("record", self))

    @property
    def done(self):
        self.dev.some()
        return self.fired

    def synchronize(self):
        self.dev.run_until(lambda: self.fired)


class SimScratch:
    """The device side of a chunk on the simulated GPU: its 'kernels' answer (7 s + t) % 3 == 0
    from the ids in the device buffers when they run; ``finish_steps`` waits for them (as the
    real one does when queries can be handed on) when ``waits``."""

    def __init__(self, dev, waits=True):
        self.dev, self.waits, self.size, self.launched, self.id_types = dev, waits, 0, [], set()

    def buffers(self, k):
        if k > self.size:
            self.sets = [(np.full(k, -1, np.int64), np.full(k, -1, np.int64), np.zeros(k, np.uint8)) for _ in range(2)]
            self.size = k
        return self.sets

    def side_streams(self):
        if not hasattr(self, "streams"):
            self.streams = (self.dev.stream(), self.dev.stream())
        return self.streams

    def queue_steps(self, ds, dt, answers, m, stream, budget):
        self.launched.append(m)
        self.id_types.add(ds.dtype.str)

        def kernels():
            answers[...] = (7 * ds.astype(np.int64) + dt) % 3 == 0
        stream.queue(kernels)

    def finish_steps(self, answers, stream, budget):
        if self.waits:
            stream.synchronize()
        return 1


def simulate(monkeypatch, seed, layout):
    """CuPy's copies, events and pinned memory replaced by the simulated GPU's; the GPU."""
    import sys
    import types

    dev = Device(seed)
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=np.empty))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(empty=np.empty))

    def up(dst, host, stream):
        stream.queue(lambda: dst.__setitem__(Ellipsis, host))

    def down(host, src, stream):
        stream.queue(lambda: host.__setitem__(Ellipsis, src))

    def split(ds, dt, rows, stream):
        stream.queue(lambda: host_split(ds, dt, rows, stream))

    monkeypatch.setattr(answer, "copy_up", up)
    monkeypatch.setattr(answer, "copy_down", down)
    monkeypatch.setattr(answer, "_event", SimEvent)
    monkeypatch.setattr(answer, "_split_columns", split)
    monkeypatch.setattr(answer, "_page_locked", lambda a: layout.startswith("pinned"))
    return dev


@pytest.mark.parametrize("layout", ["rows", "rows32", "columns", "pinned", "pinned32", "columns32"])
@pytest.mark.parametrize("nq,chunk,piece", [(10_000, 3001, 700), (5000, 5000, 4096), (64, 10, 3), (4000, 500, 250)])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("answers_pinned", [False, True])
def test_stream_chunks_answers_in_input_order(monkeypatch, layout, nq, chunk, piece, seed, answers_pinned):
    """The whole pipeline of a batch (:func:`stream_chunks`) on a simulated GPU whose streams run
    in a random order that only the events constrain: the chunks' answers come back in input
    order through the two buffer sets and answer slots (or, into a page-locked answer array,
    straight into it), from rows, columns of their own, or page-locked pairs uploaded in place;
    staged ids reach the kernels as int32, page-locked ones in their own type; every chunk is
    launched once and every stream is drained at the end."""
    import sys
    import types

    dev = simulate(monkeypatch, seed, layout)
    slots = []  # the pinned blocks the batch asked for
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(
        empty_pinned=lambda shape, dtype: slots.append(np.dtype(dtype)) or np.empty(shape, dtype)))
    monkeypatch.setattr(answer, "_page_locked",
                        lambda a: answers_pinned if a.dtype == bool else layout.startswith("pinned"))
    monkeypatch.setattr(answer, "STAGE_PAIRS", piece)
    pairs = np.random.default_rng(nq).integers(0, 2**31 - 1, (nq, 2))
    if layout == "rows32":
        rows32 = pairs.astype(np.int32)
        s, t = rows32[:, 0], rows32[:, 1]
        assert interleaved_rows(s, t) is not None
    elif layout == "rows":
        s, t = pairs[:, 0], pairs[:, 1]
    else:
        s, t = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
        if layout.endswith("32"):
            s, t = s.astype(np.int32), t.astype(np.int32)
    out = np.zeros(nq, bool)
    kernels = dev.stream()
    for waits in (True, False):
        scratch = SimScratch(dev, waits)
        out[:] = False
        handed = answer.stream_chunks(scratch, s, t, out, chunk, kernels, budget=0)
        np.testing.assert_array_equal(out, (7 * pairs[:, 0] + pairs[:, 1]) % 3 == 0)
        assert scratch.launched == [min(chunk, nq - a) for a in range(0, nq, chunk)] and handed == len(scratch.launched)
        assert scratch.id_types == {np.dtype(s.dtype if layout.startswith("pinned") else np.int32).str}
        assert not any(st.ops for st in dev.streams)
    # answer slots only where the answers do not come down straight into the caller's array
    assert slots.count(np.dtype(np.uint8)) == (0 if answers_pinned else 4)


@pytest.mark.parametrize("seed", range(40))
def test_answers_straight_down_wait_for_their_download_before_the_buffer_is_reused(monkeypatch, seed):
    """Answers copied straight into a page-locked array: no host wait stands between a chunk's
    download and the kernels of the chunk two later, which reuse its device answer buffer; only
    the kernels' wait for that download's event keeps them apart. Many small chunks in random
    stream orders: every answer lands in order, and the host never waited for a download."""
    dev = simulate(monkeypatch, seed, "pinned")
    waited = []
    real = SimEvent.synchronize
    monkeypatch.setattr(SimEvent, "synchronize", lambda ev: waited.append(ev) or real(ev))
    monkeypatch.setattr(answer, "_page_locked", lambda a: True)
    nq, chunk = 96, 4
    pairs = np.random.default_rng(seed).integers(0, 2**31 - 1, (nq, 2))
    s, t = np.ascontiguousarray(pairs[:, 0]), np.ascontiguousarray(pairs[:, 1])
    out = np.zeros(nq, bool)
    scratch = SimScratch(dev, False)
    answer.stream_chunks(scratch, s, t, out, chunk, dev.stream(), budget=0)
    np.testing.assert_array_equal(out, (7 * pairs[:, 0] + pairs[:, 1]) % 3 == 0)
    assert not waited  # (the streams are synchronised at the end, not the events)


@pytest.mark.parametrize("layout", ["rows", "columns"])
@pytest.mark.parametrize("answers_pinned", [False, True])
def test_pin_staging_pins_the_blocks_the_batch_takes(monkeypatch, layout, answers_pinned):
    """``pin_staging`` page-locks exactly the pinned blocks (shapes and types) a large batch then
    asks CuPy's pinned pool for, whatever its size: so the pool gives them back to it (no answer
    slots when the batch's answers come down into a page-locked array)."""
    import sys
    import types

    asked = []

    def pinned(shape, dtype):
        asked.append((tuple(np.atleast_1d(shape)), np.dtype(dtype).str))
        return np.empty(shape, dtype)

    dev = simulate(monkeypatch, 0, layout)
    monkeypatch.setitem(sys.modules, "cupyx", types.SimpleNamespace(empty_pinned=pinned))
    monkeypatch.setattr(answer, "STAGE_PAIRS", 100)
    monkeypatch.setattr(answer, "CHUNK_PAIRS", 1000)
    answer.pin_staging(rows=layout == "rows", answer_slots=not answers_pinned)
    monkeypatch.setattr(answer, "_page_locked", lambda a: answers_pinned if a.dtype == bool else False)
    pinned_first = sorted(asked)
    for nq, chunk in ((5000, 1000), (150, 150)):  # a batch of several chunks, and a small one
        asked.clear()
        pairs = np.arange(2 * nq).reshape(nq, 2)
        s, t = (pairs[:, 0], pairs[:, 1]) if layout == "rows" else (pairs[:, 0].copy(), pairs[:, 1].copy())
        answer.stream_chunks(SimScratch(dev), s, t, np.zeros(nq, bool), chunk, dev.stream(), 0)
        assert sorted(asked) == pinned_first, nq


@pytest.mark.parametrize("seed", range(8))
def test_side_streams_start_after_the_callers_work(monkeypatch, seed):
    """Work the caller queued on its stream before the batch (here: what fills the pairs, as an
    asynchronous download into page-locked memory would) is done before any upload reads them:
    the side streams wait for the caller's stream first."""
    dev = simulate(monkeypatch, seed, "pinned")  # (uploaded as they are: read by the copy engine)
    nq, chunk = 4000, 500
    pairs = np.random.default_rng(seed).integers(0, 2**31 - 1, (nq, 2))
    s, t = np.zeros(nq, np.int64), np.zeros(nq, np.int64)  # not filled yet
    kernels = dev.stream()

    def fill():
        s[:], t[:] = pairs[:, 0], pairs[:, 1]
    kernels.queue(fill)
    out = np.zeros(nq, bool)
    answer.stream_chunks(SimScratch(dev, waits=False), s, t, out, chunk, kernels, budget=0)
    np.testing.assert_array_equal(out, (7 * pairs[:, 0] + pairs[:, 1]) % 3 == 0)
