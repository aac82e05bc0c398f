"""distgrail.mpi.devicepath's host side, without MPI: the gathered (rows, cols) blocks that reach
the host as (cols, rows), transposed on the device in slabs (the phase-5 masks), on the CPU backend
and, with the ``gpu`` marker, on a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.gpu.backend import get_backend
from distgrail.mpi import devicepath


class Landing:
    """What :func:`devicepath.landing` hands over: a host array and a thread that touched it."""

    def __init__(self, shape, dtype):
        self.array, self.joined = np.full(shape, 7, dtype), 0

    def join(self):
        self.joined += 1

    def pair(self):
        return self.array, self


def _check(be, slab, monkeypatch):
    monkeypatch.setattr(devicepath, "TRANSPOSE_SLAB_BYTES", slab)
    rng = np.random.default_rng(1)
    for rows, cols in ((3, 1000), (1, 17), (16, 5), (4, 0)):
        host = rng.integers(0, 2**63, (rows, cols), dtype=np.uint64)
        a = be.asarray(host)
        land = Landing((cols, rows), np.uint64)
        got = devicepath.land_transposed(be, a, land.pair())
        assert got is land.array and land.joined == 1  # into the landing array, once its pages are touched
        np.testing.assert_array_equal(got, host.T)
        assert got.flags.c_contiguous
        other = Landing((rows, cols), np.uint64)  # the wrong shape: a fresh array, the landing untouched
        fresh = devicepath.land_transposed(be, a, other.pair())
        assert fresh is not other.array and (other.array == 7).all()
        np.testing.assert_array_equal(fresh, host.T)
        np.testing.assert_array_equal(devicepath.land_transposed(be, a), host.T)


@pytest.mark.parametrize("slab", [8, 24, 1 << 28])  # one column a slab, a few, everything at once
def test_transposed_landing_on_the_cpu(slab, monkeypatch):
    _check(get_backend("cpu"), slab, monkeypatch)


@pytest.mark.gpu
def test_transposed_landing_on_a_gpu(monkeypatch):
    for slab in (8, 24, 1 << 28):
        _check(get_backend("gpu"), slab, monkeypatch)


def test_slabs_hold_at_most_the_slab_bytes(monkeypatch):
    """One copy down per slab of whole columns, each of at most TRANSPOSE_SLAB_BYTES (at least
    one column), in column order."""
    cpu, seen = get_backend("cpu"), []

    class Counting:  # the CPU backend, counting its copies down
        xp, on_device = cpu.xp, cpu.on_device

        @staticmethod
        def to_host(a, out=None):
            seen.append(a.nbytes)
            return cpu.to_host(a, out=out)

    be = Counting()
    monkeypatch.setattr(devicepath, "TRANSPOSE_SLAB_BYTES", 3 * 16 * 8)  # three columns of 16 words
    host = np.arange(16 * 10, dtype=np.uint64).reshape(16, 10)
    np.testing.assert_array_equal(devicepath.land_transposed(be, host), host.T)
    assert seen == [384, 384, 384, 128]
    seen.clear()
    monkeypatch.setattr(devicepath, "TRANSPOSE_SLAB_BYTES", 1)  # less than a column: one column a slab
    devicepath.land_transposed(be, host)
    assert seen == [128] * 10
