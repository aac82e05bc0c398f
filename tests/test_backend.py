"""The backend seam on the CPU: choosing a backend and ``to_host(out=...)``."""

import numpy as np
import pytest

from distgrail.gpu.backend import get_backend
from distgrail.errors import BackendError


def test_cpu_to_host_into_out():
    be = get_backend("cpu")
    out = np.zeros((2, 3), np.int64)
    got = be.to_host(np.arange(3), out=out[1])
    assert np.shares_memory(got, out) and out[1].tolist() == [0, 1, 2] and not out[0].any()
    with pytest.raises(BackendError, match=r"out must be a C-contiguous int64 array of shape \(3,\)"):
        be.to_host(np.arange(3), out=np.zeros(4, np.int64))


def test_land_into_a_landing_array_only_when_it_fits():
    be = get_backend("cpu")
    joined = []

    class Touch:
        def join(self):
            joined.append(1)

    host = np.zeros((3, 2), np.uint64)
    a = np.arange(6, dtype=np.uint64).reshape(3, 2)
    got = be.land(a, (host, Touch()))
    assert got is host and host.tolist() == a.tolist() and joined == [1]  # waited for the pages first
    for other in (np.zeros((2, 3), np.uint64), np.zeros((3, 2), np.int64)):  # shape or type differ
        got = be.land(a, (other, Touch()))
        assert got is not other and not other.any() and got.tolist() == a.tolist() and joined == [1]
    assert be.land(a).tolist() == a.tolist()


def test_unknown_backend_names_the_choices(monkeypatch):
    with pytest.raises(BackendError, match="backend must be one of auto, cpu, gpu, got 'tpu'"):
        get_backend("tpu")
    monkeypatch.setenv("DISTGRAIL_BACKEND", "fpga")
    with pytest.raises(BackendError, match="DISTGRAIL_BACKEND must be one of auto, cpu, gpu, got 'fpga'"):
        get_backend("auto")


def test_prefault_does_nothing_on_the_cpu():
    a = np.full(1 << 24, 7, np.uint8)
    get_backend("cpu").prefault(a).join()
    assert (a == 7).all()  # untouched: the CPU backend starts no thread


def test_copies_run_on_the_backends_device():
    # a fake CuPy that records which device is current at each copy
    from distgrail.gpu.backend import Backend
    from test_launch_planning import fake_cupy

    cp = fake_cupy()
    seen = []
    asarray, asnumpy = cp.asarray, cp.asnumpy
    cp.asarray = lambda a, dtype=None: seen.append(("up", cp.cuda.Device().id)) or asarray(a, dtype=dtype)
    cp.asnumpy = lambda a: seen.append(("down", cp.cuda.Device().id)) or asnumpy(a)
    be = Backend("gpu", cp, device=2)
    d = be.asarray(np.arange(5))
    assert be.to_host(d).tolist() == [0, 1, 2, 3, 4]
    be.synchronize()
    assert seen == [("up", 2), ("down", 2)] and cp.state.current == 0
    with get_backend("cpu").on_device():  # nothing to switch on the CPU
        pass


def test_side_stream_on_the_cpu_is_nothing():
    be = get_backend("cpu")
    with be.side_stream():
        assert be.to_host(np.arange(3)).tolist() == [0, 1, 2]
