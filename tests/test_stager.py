"""distgrail.gpu.dma.Stager: many host arrays sent at once through each thread's two page-locked
buffers, checked on the CPU with a stand-in for CuPy whose "device" memory is host memory and
whose copies are memmoves (the cutting into pieces, the offsets, the buffers' reuse and the
streams' wait for the caller's stream), and on a GPU bit for bit."""

import ctypes
import threading
import types

import numpy as np
import pytest

from distgrail.gpu.dma import Stager
from distgrail.query.answer import records, records_on_device


class _DeviceArray(np.ndarray):
    """A host array standing for a device array: ``.data.ptr`` is its address."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data if self.size else 0)


class _Event:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def synchronize(self):
        self.log.append(("sync", self.name))


class _Stream:
    made = 0

    def __init__(self, log, non_blocking=False):
        _Stream.made += 1
        self.log, self.ptr, self.waited = log, _Stream.made, []

    def wait_event(self, ev):
        self.waited.append(ev)

    def record(self):
        return _Event(self.log, f"stream {self.ptr}")

    def synchronize(self):
        pass


def _fake_cupy():
    log, lock, pinned = [], threading.Lock(), []
    caller = _Stream(log)

    def memcpy_async(dst, src, n, kind, stream):
        assert kind == 1 and n > 0
        with lock:
            log.append(("copy", n))
        ctypes.memmove(dst, src, n)

    def alloc_pinned_memory(n):
        with lock:
            pinned.append(n)
        return bytearray(n)

    runtime = types.SimpleNamespace(memcpyAsync=memcpy_async, memcpyHostToDevice=1)
    cuda = types.SimpleNamespace(Device=lambda dev: _Device(dev, log), runtime=runtime, get_current_stream=lambda: caller,
                                 Stream=lambda non_blocking=False: _Stream(log, non_blocking),
                                 alloc_pinned_memory=alloc_pinned_memory)
    cp = types.SimpleNamespace(cuda=cuda, empty=lambda shape, dtype: np.empty(shape, dtype).view(_DeviceArray),
                               asarray=lambda a: a, log=log, pinned=pinned)
    return cp


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Device(_nothing):
    """CuPy's Device, recording which thread made which device current how: ``use()`` for good,
    or a ``with`` block (whose exit, on a fresh thread, would make device 0 current)."""

    def __init__(self, dev, log):
        self.dev, self.log = dev, log

    def use(self):
        self.log.append(("use", self.dev, threading.current_thread().name))

    def __enter__(self):
        self.log.append(("with", self.dev, threading.current_thread().name))
        return self


def test_stager_sends_every_byte_of_every_array_in_pieces_over_its_threads():
    cp = _fake_cupy()
    rng = np.random.default_rng(3)
    arrays = [rng.integers(0, 2**63, 1000, dtype=np.uint64),  # 8000 bytes: 8 pieces of 1000 + none left
              rng.integers(0, 255, 2501, dtype=np.uint8),  # 3 pieces, the last of 501 bytes
              np.zeros(0, np.int32),  # nothing to send
              rng.integers(-9, 9, (40, 7), dtype=np.int32)[:, ::2],  # not contiguous: copied first
              rng.random((3, 5)),
              np.array(-5, dtype=">i4"),  # 0-d and big-endian: its value sent, in the native order
              np.arange(300, dtype=">u2")]
    with Stager(cp, 0, threads=3, piece=1000) as st:
        got = st.upload(arrays)
        assert len(got) == len(arrays)
        for a, g in zip(arrays, got):
            assert g.shape == a.shape and g.dtype == a.dtype.newbyteorder("=")
            np.testing.assert_array_equal(np.asarray(g), a)
        copies = [x[1] for x in cp.log if x[0] == "copy"]
        want = sum(-(-a.nbytes // 1000) for a in arrays)
        assert len(copies) == want and sum(copies) == sum(a.nbytes for a in arrays)
        assert cp.pinned == [1000] * 6  # two buffers on each of the three threads
        assert np.asarray(got[5]).item() == -5 and got[6].dtype.isnative
        lanes = [lane for lane in st._lanes if lane is not None]
        assert len(lanes) == 3 and all(len(lane[2].waited) == 1 for lane in lanes)  # after the caller's stream
        again = st.upload([arrays[0][::-1]])  # a second call reuses the buffers
        np.testing.assert_array_equal(np.asarray(again[0]), arrays[0][::-1])
        assert cp.pinned == [1000] * 6
    stage = {(what, dev) for what, dev, *who in (x for x in cp.log if x[0] in ("use", "with"))
             if who and who[0].startswith("distgrail-stage")}
    assert stage == {("use", 0)}  # the threads' device current for good, never left by a with block
    passed = np.arange(4)
    with Stager(cp, 0, threads=2) as st:
        assert st.upload([types.SimpleNamespace(on="device")])[0].on == "device"  # (not a host array: as it is)
        assert st.upload([passed])[0] is not passed


@pytest.mark.parametrize("block", [1, 5, 1 << 23])
def test_records_through_a_stager_are_the_host_records(block):
    from test_query_steps import GRAPHS, _HostBackend, _records_inputs, indexed

    idx = indexed(GRAPHS["paper"], 130, dims=5)
    L = idx.labels("cpu")
    want = records(L.level, L.start0, L.post0, L.lo, L.hi, L.out.T, L.inn.T)
    with Stager(_fake_cupy(), 0, threads=4, piece=333) as st:
        got = records_on_device(_HostBackend, *_records_inputs(idx), block=block, upload=st.upload)
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
def test_gpu_stager_uploads_bit_for_bit_after_the_callers_work():
    import cupy

    rng = np.random.default_rng(5)
    arrays = [rng.integers(0, 2**32, (3_000_001,), dtype=np.uint32), rng.integers(0, 255, 77, dtype=np.uint8),
              rng.integers(-2**40, 2**40, (1000, 3), dtype=np.int64)]
    with Stager(cupy, cupy.cuda.Device().id, threads=3, piece=1 << 20) as st:
        for _ in range(3):  # (each time into memory the caller's stream may still be writing)
            scratch = cupy.ones(4_000_000, cupy.uint32)
            scratch *= 7
            del scratch
            got = st.upload(arrays)
            for a, g in zip(arrays, got):
                np.testing.assert_array_equal(cupy.asnumpy(g), a)


def test_ready_beside_makes_the_context_and_pools_the_stagers_buffers_on_a_thread():
    from distgrail.gpu.backend import Backend, get_backend, ready_beside

    ready_beside(get_backend("cpu")).join()  # (nothing to do on the CPU)
    cp = _fake_cupy()
    freed, seen = [], []
    cp.cuda.runtime.free = lambda ptr: (freed.append(ptr), seen.append(threading.current_thread().name))
    t = ready_beside(Backend("gpu", cp, device=0))
    t.join()
    assert freed == [0] and seen == ["distgrail-gpu-ready"]
    from distgrail import cores
    from distgrail.gpu.dma import STAGER_PIECE, STAGER_THREADS

    assert cp.pinned == [STAGER_PIECE] * (2 * min(STAGER_THREADS, cores.usable()))

    def broken(ptr):
        raise RuntimeError("no device")

    cp.cuda.runtime.free = broken
    ready_beside(Backend("gpu", cp, device=0)).join()  # (left to the upload to report)


def test_a_failed_thread_leaves_no_copy_running_after_upload_raises():
    """One thread's buffers cannot be had: upload raises only once every other thread has
    finished its copies (none lands after), and the Stager's threads end."""
    import time

    cp = _fake_cupy()
    copy = cp.cuda.runtime.memcpyAsync

    def slow(*a):
        time.sleep(0.002)
        copy(*a)

    cp.cuda.runtime.memcpyAsync = slow
    alloc = cp.cuda.alloc_pinned_memory

    def first_fails(n, calls=[]):
        calls.append(n)
        if len(calls) == 1:
            raise MemoryError("no page-locked memory")
        return alloc(n)

    cp.cuda.alloc_pinned_memory = first_fails
    st = Stager(cp, 0, threads=3, piece=100)
    with pytest.raises(MemoryError, match="page-locked"):
        st.upload([np.arange(3000, dtype=np.int64)])  # 240 pieces over three threads
    landed = sum(1 for x in cp.log if x[0] == "copy")
    assert landed > 0
    time.sleep(0.1)
    assert sum(1 for x in cp.log if x[0] == "copy") == landed  # nothing still copying
    st.close()
