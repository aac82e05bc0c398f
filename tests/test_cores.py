"""Thread pools follow the CPU affinity (``distgrail.cores``), not the machine's core count: a
Slurm job given 1 of a node's cores runs one host-copy piece, one phase-3 thread, one CRC thread."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                                reason="needs Linux CPU affinity and two cores or more")

_CHILD = r"""
import os
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
from distgrail import arrays, cores
from distgrail.stages import ranks
from distgrail.indexfile import layout
assert cores.usable() == 1, cores.usable()
assert arrays._pieces(1 << 30, 8) == [(0, 1 << 30)], arrays._pieces(1 << 30, 8)
assert ranks._threads(1000, 5) == 1, ranks._threads(1000, 5)
assert layout.crc_pool()._max_workers == 1
print("ok")
"""


def test_pools_sized_by_the_affinity_mask_not_the_machine():
    r = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_usable_is_the_affinity_mask():
    from distgrail import cores

    assert cores.usable() == len(os.sched_getaffinity(0))
