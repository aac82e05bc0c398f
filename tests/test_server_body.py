"""How ``distgrail serve`` receives a request body (``Service._read``), without a server: a body
with a Content-Length lands in one buffer of that size; a chunked one, or any body where the
kernel holds a strict commit limit, in a buffer that starts at BODY_FIRST_BYTES and doubles; a
client gone mid-body lets its buffer go at once, with no garbage collection (a stored error's
traceback would otherwise keep it); a body longer or shorter than announced is refused."""

from __future__ import annotations

import asyncio
import gc
import weakref

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.server import app


class _Content:
    """An aiohttp StreamReader's part that ``_read`` uses: ``iter_any`` and ``set_exception``."""

    def __init__(self, chunks, fail=None):
        self.chunks, self.fail = chunks, fail

    async def iter_any(self):
        for c in self.chunks:
            yield c
        if self.fail is not None:
            raise self.fail

    def set_exception(self, e):  # (the BodyClock's, not reached in these tests)
        self.fail = e


class _Request:
    def __init__(self, chunks, fail=None):
        self.content = _Content(chunks, fail)


@pytest.fixture(scope="module")
def service():
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    s = app.Service(idx, get_backend("cpu"), max_pairs=1 << 20, timeout=30, workers=1)
    yield s
    s.close()


@pytest.fixture
def allocations(monkeypatch):
    """Every buffer ``_read`` allocates: (size, weak reference)."""
    made = []
    buffer = app._buffer

    def watched(size):
        a = buffer(size)
        made.append((size, weakref.ref(a)))
        return a

    monkeypatch.setattr(app, "_buffer", watched)
    return made


def _read(service, chunks, size, fail=None):
    return asyncio.run(service._read(_Request(chunks, fail), size))


def _chunks(data: bytes, step: int):
    return [data[i:i + step] for i in range(0, len(data), step)]


def test_a_body_of_known_length_lands_in_one_buffer_of_that_size(service, allocations, monkeypatch):
    monkeypatch.setattr(app, "_strict_commit", lambda: False)
    data = np.random.default_rng(1).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    got = _read(service, _chunks(data, 7_000), len(data))
    assert bytes(got) == data and [n for n, _ in allocations] == [len(data)]


@pytest.mark.parametrize("strict", [False, True])
def test_chunked_or_strict_commit_bodies_grow_by_doubling(service, allocations, monkeypatch, strict):
    monkeypatch.setattr(app, "_strict_commit", lambda: strict)
    monkeypatch.setattr(app, "BODY_FIRST_BYTES", 4096)
    data = np.random.default_rng(2).integers(0, 256, 50_000, dtype=np.uint8).tobytes()
    got = _read(service, _chunks(data, 3_000), len(data) if strict else None)
    assert bytes(got) == data
    sizes = [n for n, _ in allocations]
    assert sizes[0] == 4096 and sizes == sorted(sizes) and sizes[-1] <= 2 * len(data), sizes
    assert all(b >= 2 * a or b == (len(data) if strict else service.max_body) or b >= len(data)
               for a, b in zip(sizes, sizes[1:])), sizes


def test_a_client_gone_mid_body_lets_its_buffer_go_without_a_collection(service, allocations, monkeypatch):
    monkeypatch.setattr(app, "_strict_commit", lambda: False)
    data = bytes(30_000)
    gc.disable()
    try:
        with pytest.raises(app._Gone, match="closed its connection mid-body, 30,000 of its 1,000,000 bytes"):
            _read(service, _chunks(data, 10_000), 1_000_000, ConnectionResetError("reset"))
        assert allocations and all(ref() is None for _, ref in allocations)
        with pytest.raises(app._Refused, match="longer than its Content-Length of 20,000"):
            _read(service, _chunks(data, 10_000), 20_000)
        assert all(ref() is None for _, ref in allocations)
    finally:
        gc.enable()


def test_a_body_shorter_than_announced_is_refused(service):
    with pytest.raises(app._Refused, match="request body: 5 bytes, not the 9 its Content-Length announced"):
        _read(service, [b"12345"], 9)


def test_a_body_past_what_can_be_mapped_grows_instead_and_running_out_is_a_503(service, monkeypatch):
    """A Content-Length whose buffer cannot be allocated at once (MemoryError: past RAM and swap
    under the default overcommit) is received into a growing buffer instead; running out while
    it grows is a 503 naming the bytes, not a 500."""
    monkeypatch.setattr(app, "_strict_commit", lambda: False)
    monkeypatch.setattr(app, "BODY_FIRST_BYTES", 1024)
    buffer = app._buffer
    limit = {"bytes": 20_000}

    def bounded(size):
        if size > limit["bytes"]:
            raise MemoryError(f"cannot allocate {size}")
        return buffer(size)

    monkeypatch.setattr(app, "_buffer", bounded)
    data = bytes(range(256)) * 60  # 15,360 bytes
    assert bytes(_read(service, _chunks(data, 1000), len(data) + 0)) == data  # within the limit: one buffer
    big = bytes(30_000)
    with pytest.raises(app._Refused, match="no memory on the server for .* bytes now") as e:
        _read(service, _chunks(big, 1000), len(big))
    assert e.value.status == 503


def test_a_compressed_body_is_bounded_by_the_servers_limit_not_its_content_length():
    class Req:
        def __init__(self, enc):
            self.headers = {} if enc is None else {"Content-Encoding": enc}

    assert app._decoded_size(Req(None), 89) == 89 and app._decoded_size(Req("identity"), 89) == 89
    assert app._decoded_size(Req("gzip"), 89) is None and app._decoded_size(Req(" GZip "), 5) is None


def test_body_buffers_are_kept_after_an_answer_and_given_to_the_next_body(service, allocations, monkeypatch):
    """A buffer given back (a batch answered) holds the next body of its size or less, as a view
    of the same memory: no new allocation; at most KEEP are kept, the smallest let go first; a
    view given back keeps its whole buffer, once."""
    monkeypatch.setattr(app, "_strict_commit", lambda: False)
    monkeypatch.setattr(service, "bodies", app.BodyBuffers())
    data = bytes(range(256)) * 40  # 10,240 bytes
    first = _read(service, _chunks(data, 1000), len(data))
    assert len(allocations) == 1 and service.bodies.held == 0
    service.bodies.give(first.obj)
    service.bodies.give(first.obj[:10])  # (a view of the same buffer: not kept twice)
    assert service.bodies.held == len(data)
    second = _read(service, _chunks(data[:5000], 999), 5000)
    assert bytes(second) == data[:5000] and len(allocations) == 1 and np.shares_memory(second.obj, first.obj)
    assert service.bodies.held == 0  # (taken)
    bodies = app.BodyBuffers()
    made = [np.empty(n, np.uint8) for n in (100, 300, 200)]
    for b in made:
        bodies.give(b)
    assert bodies.held == 500 and bodies.KEEP == 2  # the 100-byte one let go
    got = bodies.take(250)  # (the second kept, not the first: found by place, not by ==)
    assert got.size == 250 and np.shares_memory(got, made[1]) and bodies.held == 200
    bodies.give(got)
    got = bodies.take(150)
    assert got.size == 150 and np.shares_memory(got, made[2]) and bodies.held == 300
    assert bodies.take(400).size == 400 and bodies.held == 300  # none fits: a new one
    bodies.give(np.zeros(3, np.int64))  # not a body buffer: ignored
    assert bodies.held == 300


def test_a_body_larger_than_the_kept_buffers_gets_its_own(service, allocations, monkeypatch):
    monkeypatch.setattr(app, "_strict_commit", lambda: False)
    monkeypatch.setattr(service, "bodies", app.BodyBuffers())
    service.bodies.give(np.empty(100, np.uint8))
    data = bytes(500)
    got = _read(service, _chunks(data, 100), len(data))
    assert bytes(got) == data and [n for n, _ in allocations] == [500] and service.bodies.held == 100
