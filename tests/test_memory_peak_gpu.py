"""The pool high-water marks that `distgrail index --json` reports (distgrail.gpu.memory.PoolPeak):
on a GPU they follow the arrays allocated inside the context, and the allocator is restored."""

import pytest

from distgrail.gpu.memory import PoolPeak


def test_inactive_or_without_cupy_reports_nothing(monkeypatch):
    with PoolPeak(False) as p:
        pass
    assert p.report() is None and p.used == 0
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # no GPU stack: import fails
    with PoolPeak() as p:
        pass
    assert p.report() is None


@pytest.mark.gpu
def test_peak_follows_allocations_and_restores_the_allocator():
    import cupy as cp

    before = cp.cuda.get_allocator()
    base = cp.get_default_memory_pool().used_bytes()
    with PoolPeak() as p:
        a = cp.empty(64 << 20, cp.uint8)
        b = cp.empty(32 << 20, cp.uint8)
        del a, b
        c = cp.empty(16 << 20, cp.uint8)
    assert p.used >= base + (96 << 20) and p.held >= p.used
    assert p.report() == {"used": p.used, "held": p.held}
    assert cp.cuda.get_allocator() is before or cp.cuda.get_allocator() == before
    del c
