"""Large host<->device transfers of the GPU backend (distgrail/backend.py): direct DMA from/to
page-locked host arrays, the pinned-staging fallback, and ``to_host(out=...)``."""

import numpy as np
import pytest

from distgrail.gpu import dma as B
from distgrail.gpu.backend import get_backend
from distgrail.errors import BackendError

pytestmark = pytest.mark.gpu

BIG = B.STAGE_MIN_BYTES // 4 + 12_345  # int32 elements: above the threshold, not a multiple of a page


@pytest.fixture
def gpu():
    return get_backend("gpu")


def _data(n, dtype=np.int32, seed=0):
    return np.random.default_rng(seed).integers(0, 2**31 - 1, n).astype(dtype)


@pytest.mark.parametrize("offset", [0, 1, 1000])
def test_large_round_trip_any_alignment(gpu, offset):
    base = _data(BIG + offset)
    a = base[offset:]  # a view that starts mid-page
    d = gpu.asarray(a)
    assert int(d[-1]) == int(a[-1]) and int(d[0]) == int(a[0])
    np.testing.assert_array_equal(gpu.to_host(d), a)


def test_large_upload_with_dtype_and_2d(gpu):
    a = _data(BIG, np.int64).reshape(-1, 1)
    d = gpu.asarray(a, dtype=np.int32)
    assert d.dtype == np.int32 and d.shape == a.shape
    np.testing.assert_array_equal(gpu.to_host(d), a.astype(np.int32))


def test_to_host_into_out_slice(gpu):
    a = _data(BIG)
    d = gpu.asarray(a)
    out = np.zeros((2, BIG), np.int32)
    got = gpu.to_host(d, out=out[1])
    assert got.base is out or got is out[1] or np.shares_memory(got, out)
    np.testing.assert_array_equal(out[1], a)
    assert not out[0].any()
    small = gpu.asarray(a[:10])
    o = np.empty(10, np.int32)
    np.testing.assert_array_equal(gpu.to_host(small, out=o), a[:10])


def test_to_host_out_mismatch_is_a_clear_error(gpu):
    d = gpu.asarray(_data(100))
    with pytest.raises(BackendError, match="out must be a C-contiguous int32 array of shape"):
        gpu.to_host(d, out=np.empty(100, np.int64))


def test_read_only_and_already_locked_fall_back_to_staging(gpu, monkeypatch):
    """When the pages cannot be locked, the pinned-staging path gives the same bytes."""
    a = _data(BIG, seed=3)
    ro = a.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(gpu.to_host(gpu.asarray(ro)), a)

    def refuse(*args):
        raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")

    monkeypatch.setattr(B._Locked, "__enter__", refuse)
    d = gpu.asarray(a)
    np.testing.assert_array_equal(gpu.to_host(d), a)
    out = np.empty_like(a)
    np.testing.assert_array_equal(gpu.to_host(d, out=out), a)


def test_prefault_then_download_into_the_landing_array(gpu):
    a = _data(BIG, seed=7)
    d = gpu.asarray(a)
    out = np.empty_like(a)
    t = gpu.prefault(out)
    assert t.name == "distgrail-prefault"
    t.join()
    assert not t.is_alive()
    np.testing.assert_array_equal(gpu.to_host(d, out=out), a)


def test_side_stream_copies_after_the_work_queued_before_it(gpu):
    """A copy on another thread's side stream sees every value the calling thread's stream wrote
    before the stream was made (here a kernel that spins ~0.2 s before writing: a copy that did not
    wait for it would see zeros), and runs on a stream other than that one."""
    import threading

    cp = gpu.xp
    spin_fill = cp.RawKernel(r"""
    extern "C" __global__ void spin_fill(unsigned int* a, long long n, long long cycles, unsigned int v) {
        const long long t0 = clock64();
        while (clock64() - t0 < cycles) {}
        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
            a[i] = v;
    }""", "spin_fill")
    n = 48 << 20  # 192 MB: a DMA copy
    with gpu.on_device():
        a = cp.zeros(n, dtype=cp.uint32)
        spin_fill((256,), (256,), (a, np.int64(n), np.int64(400_000_000), np.uint32(36)))  # queued, not waited for
        side = gpu.side_stream()
    got, streams = {}, []

    def copy():
        with side:
            streams.append(cp.cuda.get_current_stream().ptr)
            got["a"] = gpu.to_host(a)

    t = threading.Thread(target=copy)
    t.start()
    t.join()
    with gpu.on_device():
        main = cp.cuda.get_current_stream().ptr
    assert streams and streams[0] != main
    assert got["a"].shape == (n,) and int(got["a"].min()) == int(got["a"].max()) == 36
