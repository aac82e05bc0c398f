"""A split index written by one process holds every part open until all are written: their CRC-32
threads are one pool, not a pool a part (up to 16 threads each: 1,024 parts would hold thousands
of threads), and the file is the same."""

from __future__ import annotations

import threading

import numpy as np

import distgrail
from distgrail.indexfile import layout, split


def test_the_parts_share_one_pool_of_crc_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1)  # (every block's CRC on the pool's threads)
    monkeypatch.setattr(layout, "crc_pool", lambda: layout.ThreadPoolExecutor(max_workers=2))
    monkeypatch.setattr(split, "crc_pool", layout.crc_pool)
    seen = []
    put = split.PartFile.put

    def counted(self, *a, **k):
        put(self, *a, **k)
        seen.append(threading.active_count())

    monkeypatch.setattr(split.PartFile, "put", counted)
    idx = distgrail.build_index((np.arange(200_000), np.arange(1, 200_001)), dims=2, backend="cpu")
    before = threading.active_count()
    idx.save(str(tmp_path / "s.h5"), layout="split", parts=40)
    assert seen and max(seen) <= before + 2  # (a pool a part: about 2 x 40 threads by the last part)
    got = distgrail.open_index(str(tmp_path / "s.h5"))
    for name, want in idx.arrays.items():
        assert np.array_equal(got.arrays[name], want), name
