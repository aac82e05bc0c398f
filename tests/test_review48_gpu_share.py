"""Ranks sharing a GPU: the share of its free memory a rank's fit checks count (review of session
48's ``ranks_on_this_gpu``). The share is of the device's free memory only: the blocks this
rank's own CuPy pool holds unused are its own (the others' pools are not in the device's free
memory either), and ``DISTGRAIL_GPU_MEMORY_LIMIT`` is already one process's cap (the documented
way to share a GPU: docs/settings.md; docs/benchmarks.md ran 4 ranks on one H100 at 12e9 each),
so it must not be divided again. On the CPU, with a stand-in for CuPy."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest

GiB = 1 << 30


class _Be:
    def on_device(self):
        return nullcontext()


def _fake_cupy(free, total, pool_free=0, pool_used=0):
    dev = SimpleNamespace(mem_info=(free, total), id=0)
    pool = SimpleNamespace(free_bytes=lambda: pool_free, used_bytes=lambda: pool_used)
    cp = SimpleNamespace(cuda=SimpleNamespace(Device=lambda *a: dev), get_default_memory_pool=lambda: pool)
    return lambda: cp


@pytest.fixture
def gpu(monkeypatch):
    from distgrail.gpu import memory
    from distgrail.mpi import binding

    def set_(sharing, free, total=141 * GiB, pool_free=0, pool_used=0, cap=None):
        monkeypatch.setattr(memory, "cupy", _fake_cupy(free, total, pool_free, pool_used))
        monkeypatch.setattr(binding, "_SHARING", sharing)
        if cap is None:
            monkeypatch.delenv("DISTGRAIL_GPU_MEMORY_LIMIT", raising=False)
        else:
            monkeypatch.setenv("DISTGRAIL_GPU_MEMORY_LIMIT", str(cap))
    return set_


@pytest.mark.parametrize("sharing", [1, 2, 4])
def test_the_share_is_of_the_devices_free_memory(gpu, sharing):
    from distgrail.mpi import partition

    gpu(sharing, free=100 * GiB)
    assert partition._free_bytes(_Be()) == 100 * GiB // sharing


def test_a_ranks_own_unused_pool_blocks_are_all_its_own(gpu):
    """2 ranks, each holding 70 GiB unused in its pool after the read, 10 GiB free on the device:
    each can take 70 + 5, not (10 + 70) / 2 = 40."""
    from distgrail.mpi import partition
    from distgrail.mpi.partition_dag import check_rank_fits

    gpu(2, free=10 * GiB, pool_free=70 * GiB, pool_used=20 * GiB)
    assert partition._free_bytes(_Be()) == 75 * GiB
    check_rank_fits(_Be(), 74 * GiB, "the sweeps")


def test_the_per_process_limit_is_not_divided_again(gpu):
    """4 ranks sharing a GPU with DISTGRAIL_GPU_MEMORY_LIMIT=12e9 each (docs/benchmarks.md, issue
    24's run): each rank has its 12e9, not 3e9."""
    from distgrail.gpu.memory import GpuMemoryError
    from distgrail.mpi import partition
    from distgrail.mpi.partition_dag import check_rank_fits

    gpu(4, free=80 * 10**9, total=80 * 10**9, cap="12e9")
    assert partition._free_bytes(_Be()) == 12 * 10**9
    check_rank_fits(_Be(), 6 * 10**9, "the sweeps")  # the 5.46 GB pool peak of that run fits
    with pytest.raises(GpuMemoryError):
        check_rank_fits(_Be(), 12 * 10**9 + 1, "the sweeps")


def test_the_limit_still_caps_a_share_larger_than_it(gpu):
    from distgrail.mpi import partition

    gpu(2, free=100 * GiB, cap=str(30 * GiB), pool_used=10 * GiB)
    assert partition._free_bytes(_Be()) == 20 * GiB  # min(50 GiB share, 30 GiB cap - 10 GiB used)
