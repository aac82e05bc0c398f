"""The compiled CPU loops (numba) never fail a build or a query that the NumPy code can do: where
numba cannot cache (a read-only install and home) the loops compile uncached; where numba is
missing, broken or turned off (``NUMBA_DISABLE_JIT``) the NumPy code runs, with one warning per
process, and gives the same index and answers."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from distgrail import build_index, jit
from distgrail.stages import deep

numba = pytest.importorskip("numba")


def _chain(n):
    return np.arange(n - 1), np.arange(1, n)


def test_njit_compiles_uncached_where_numba_cannot_cache(monkeypatch):
    real = numba.njit
    seen = []

    def fake(*args, **options):
        if args or "cache" not in options:  # numba's own uses while it imports
            return real(*args, **options)
        seen.append(options["cache"])
        if options["cache"]:
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x.py'")
        return real(**options)

    monkeypatch.setattr(numba, "njit", fake)

    @jit.njit(nogil=True)
    def f(a):
        return a.sum()

    assert seen == [True, False]
    assert f(np.arange(5)) == 10


def test_a_module_that_fails_to_load_gives_none_and_warns_once(monkeypatch):
    name = "distgrail._no_such_compiled_module_for_the_test"
    monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    monkeypatch.setattr(jit, "_FAILED", {})
    with pytest.warns(RuntimeWarning, match="compiled CPU loops unavailable"):
        assert jit.load(name, "loops") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jit.load(name, "loops") is None  # remembered: no second warning


def test_a_runtime_error_at_import_falls_back_too(monkeypatch):
    """numba's "no locator available" is a RuntimeError raised while the module is imported."""
    import importlib

    real = importlib.import_module

    def broken(module, *a, **k):
        if module.endswith("deep_jit"):
            raise RuntimeError("cannot cache function 'kahn_rest': no locator available")
        return real(module, *a, **k)

    monkeypatch.setattr(importlib, "import_module", broken)
    monkeypatch.setattr(jit, "_FAILED", {})
    with pytest.warns(RuntimeWarning, match="no locator available"):
        assert deep.compiled_sweeps(deep.DEEP_LEVELS + 1) is None


def test_a_deep_build_without_the_compiled_loops_is_the_same_index(monkeypatch, tmp_path):
    """NUMBA_DISABLE_JIT (or any failure to load): the twins build the deep chain, byte for byte
    the compiled loops' index, with one warning for the whole build."""
    import h5py

    n = deep.DEEP_LEVELS + 50
    a = str(tmp_path / "compiled.h5")
    build_index(_chain(n), backend="cpu", dims=2, seed=1, supports=64, output=a)
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    monkeypatch.setattr(jit, "_FAILED", {})
    b = str(tmp_path / "twins.h5")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        build_index(_chain(n), backend="cpu", dims=2, seed=1, supports=64, output=b)
    assert sum("level sweeps unavailable" in str(w.message) for w in got) == 1, [str(w.message) for w in got]
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = []
        fa.visit(lambda k: names.append(k) if isinstance(fa[k], h5py.Dataset) else None)
        assert names
        for k in names:
            np.testing.assert_array_equal(fa[k][...], fb[k][...], err_msg=k)


def test_a_big_endian_stored_condensation_is_read_as_native_numbers(monkeypatch, tmp_path):
    """A graph file whose stored condensation is big-endian (another host's or tool's, CRCs
    valid): read as native arrays, so the compiled sweeps take it as the twins do."""
    import h5py

    from distgrail.io import binary
    from distgrail.io.graph import EdgeGraph
    from distgrail.stages.condense import condense

    n = 300
    s = np.arange(n - 1)
    g = EdgeGraph(n=n, src=s, dst=s + 1)
    dag = condense(g)
    for k in binary._DAG_ARRAYS:
        a = getattr(dag, k)
        setattr(dag, k, a.astype(a.dtype.newbyteorder(">")))
    p = str(tmp_path / "big.h5")
    binary.write_binary_graph(g, p, dag=dag)
    with h5py.File(p, "r") as f:
        assert all(f["condensation"][k].dtype.byteorder == ">" for k in binary._DAG_ARRAYS)
    got = binary.read_condensation(p)
    assert all(getattr(got, k).dtype.isnative for k in binary._DAG_ARRAYS)
    monkeypatch.setattr(deep, "DEEP_LEVELS", 10)  # the compiled sweeps, which refuse a big-endian array
    idx = build_index(p, backend="cpu", dims=2, seed=1, supports=64)
    u, v = np.array([0, 5, n - 1]), np.array([n - 1, 1, 0])
    np.testing.assert_array_equal(idx.query(u, v, backend="cpu")[0], u <= v)
