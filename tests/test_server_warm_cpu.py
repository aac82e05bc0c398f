"""A CPU server's warm-up sends a batch down the compiled path: numba's import and the packed
records are made before the first request, not inside the request that brings the process's
first 4 M pairs (the "auto" rule); an update's index gets its records before it is served."""

from __future__ import annotations

import io

import numpy as np
import pytest

import distgrail
from distgrail.io.generate import generate
from distgrail.gpu.backend import get_backend
from distgrail.query import answer
from distgrail.server import app
from distgrail.server.run import warm_up


def test_a_cpu_server_warms_the_compiled_path_and_an_update_packs_its_records(monkeypatch):
    pytest.importorskip("numba")
    from distgrail import jit

    monkeypatch.setattr(jit, "_FAILED", {})  # (numba's import failing in an earlier test: once per process)
    g = generate("paper", 3000, 4, seed=2)
    idx = distgrail.build_index(g, dims=2, backend="cpu")
    s = app.Service(idx, get_backend("cpu"), max_pairs=1 << 20, timeout=30, workers=1)
    try:
        said = []
        out = warm_up(s, said.append)
        assert out["pairs"] > 0 and said
        L = idx._state(get_backend("cpu"))[0]
        assert answer._prefilter_loaded() and L.packed.built
        rng = np.random.default_rng(1)
        a, b = rng.integers(0, g.n, 50), rng.integers(0, g.n, 50)
        buf = io.BytesIO()
        np.save(buf, np.stack([a, b], axis=1).astype(np.int64))
        s._update(buf.getvalue(), "application/x-npy", columns=False)
        assert s.index is not idx and s.index._state(get_backend("cpu"))[0].packed.built
    finally:
        s.pool.shutdown(wait=True)
