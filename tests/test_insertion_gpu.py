"""The insertion sweep on a GPU (CuPy arrays, ``ufunc.at`` scatters) against its NumPy twin: every
array of the updated index byte-identical, through several updates in a row, and the GPU's answers
equal to BFS over the graph plus the edges. Skipped without a usable GPU (conftest says why)."""

import numpy as np
import pytest

import distgrail
from distgrail.io.generate import generate
from distgrail.update import insert_edges
from test_insertion import _bfs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind,n,deg", [("paper", 3000, 4), ("scale-free", 3000, 3), ("layered", 2000, 3)])
@pytest.mark.parametrize("supports", [0, "auto"])
def test_the_gpu_sweep_gives_the_cpu_sweeps_arrays(kind, n, deg, supports):
    g = generate(kind, n, deg, seed=2)
    base = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=3, supports=supports, backend="cpu")
    rng = np.random.default_rng(n)
    cpu = gpu = base
    S, T = g.src, g.dst
    for k in (5, 200, 2000):
        a, b = rng.integers(0, g.n, k), rng.integers(0, g.n, k)
        cpu, rc = insert_edges(cpu, a, b, backend="cpu", rebuild_above=10 ** 9)
        gpu, rg = insert_edges(gpu, a, b, backend="gpu", rebuild_above=10 ** 9)
        assert rc.method == rg.method and rc.sweep == rg.sweep
        assert sorted(cpu.arrays) == sorted(gpu.arrays)
        for name, want in cpu.arrays.items():
            got = gpu.arrays[name]
            assert got.dtype == want.dtype and np.array_equal(got, want), (k, name)
        S, T = np.r_[S, a], np.r_[T, b]
        qs, qt = rng.integers(0, g.n, 20000), rng.integers(0, g.n, 20000)
        want = _bfs(g.n, S, T, qs, qt)
        # both indexes now have a query state, so the next update checks its edges the same way
        # on both (the index's exact answers; without one, the prefilter on the uploaded arrays)
        assert np.array_equal(gpu.query(qs, qt, backend="gpu")[0], want)
        assert np.array_equal(cpu.query(qs, qt, backend="cpu")[0], want)


@pytest.mark.parametrize("supports", [0, "auto"])
def test_a_served_index_sweeps_from_its_query_state(supports, monkeypatch):
    """An index with a query state on the GPU (as ``serve`` holds it): the sweep's arrays are
    unpacked from the state's records (equal to those uploaded from the host copies), the update
    gives the arrays an index without a state gives, and the new index's state, packed from the
    swept arrays on the device, equals one made from its host arrays; answers equal BFS."""
    from distgrail.gpu.backend import get_backend
    from distgrail.index import Index
    from distgrail.update import _Device

    be = get_backend("gpu")
    g = generate("scale-free", 4000, 3, seed=5)
    base = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=4, supports=supports, backend="cpu")
    served = Index(base.meta, dict(base.arrays))
    rng = np.random.default_rng(9)
    qs, qt = rng.integers(0, g.n, 20000), rng.integers(0, g.n, 20000)
    served.query(qs, qt, backend="gpu")  # its query state is made
    L = served._state(be)[0]
    up, st = _Device(served, be).arr, _Device.from_state(served, be, L).arr
    assert sorted(up) == sorted(st)
    for k in up:
        assert up[k].dtype == st[k].dtype and up[k].shape == st[k].shape and bool((up[k] == st[k]).all()), k
    a, b = rng.integers(0, g.n, 300), rng.integers(0, g.n, 300)
    new, rep = insert_edges(served, a, b, backend="gpu", rebuild_above=10 ** 9)
    # served from its state packed on the device while its host arrays still come down
    assert new._pending is not None and new._query_state[(be.name, be.device)].built
    bfs = _bfs(g.n, np.r_[g.src, a], np.r_[g.dst, b], qs, qt)
    assert np.array_equal(new.query(qs, qt, backend="gpu")[0], bfs)
    uploaded = Index(base.meta, dict(base.arrays))
    uploaded.query(qs, qt, backend="gpu")  # a state too (the edges checked by exact answers alike) ...
    import distgrail.update as upd

    with monkeypatch.context() as m:
        m.setattr(upd, "_served", lambda *a: None)  # ... but its sweep's arrays uploaded from the host
        plain, rp = insert_edges(uploaded, a, b, backend="gpu", rebuild_above=10 ** 9)
    assert rep.method == rp.method == "swept" and "state" in rep.seconds and "state" not in rp.seconds
    assert rep.sweep == rp.sweep and rep.added == rp.added
    for name, want in plain.arrays.items():
        assert new.arrays[name].dtype == want.dtype and np.array_equal(new.arrays[name], want), name
    adopted = new._query_state[(be.name, be.device)]
    assert adopted.built
    La = adopted.get(None)[0]
    Lf = Index(new.meta, dict(new.arrays))._state(be)[0]
    for f in ("rec", "comp", "indptr", "indices"):
        x, y = getattr(La, f), getattr(Lf, f)
        assert x.dtype == y.dtype and x.shape == y.shape and bool((x == y).all()), f
    assert new._pending is None and all(isinstance(v, np.ndarray) for v in new.arrays.values())
    assert np.array_equal(new.query(qs, qt, backend="gpu")[0], bfs)
    again, _ = insert_edges(new, b, a, backend="gpu", rebuild_above=10 ** 9)  # reads the landed host arrays
    bfs = _bfs(g.n, np.r_[g.src, a, b], np.r_[g.dst, b, a], qs, qt)
    assert np.array_equal(again.query(qs, qt, backend="gpu")[0], bfs)


@pytest.mark.parametrize("supports", [0, "auto"])
def test_the_gpu_rows_update_gives_the_cpu_array_sweeps_rows(supports):
    """``insert_rows`` on the GPU (the sweep on the device, only the changed rows down) against
    its NumPy twin (``sweep="arrays"`` on the CPU backend): every row set, value and count equal,
    through updates in a row with the earlier rows joined, and the patched arrays answering as BFS."""
    from distgrail.index import Index
    from distgrail.update_rows import apply_rows, insert_rows

    g = generate("scale-free", 3000, 3, seed=4)
    base = distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=3, supports=supports, backend="cpu")
    rng = np.random.default_rng(7)
    arrays, meta, prev = {k: np.array(v) for k, v in base.arrays.items()}, base.meta, None
    S, T = g.src, g.dst
    for k in (5, 300, 3000):
        a, b = rng.integers(0, g.n, k), rng.integers(0, g.n, k)
        uc, rc = insert_rows(Index(meta, dict(arrays)), a, b, backend="cpu", sweep="arrays", rebuild_above=10 ** 9,
                             previous=prev)
        ug, rg = insert_rows(Index(meta, dict(arrays)), a, b, backend="gpu", rebuild_above=10 ** 9, previous=prev)
        assert rc.method == rg.method and rc.sweep == rg.sweep and rc.added == rg.added
        assert sorted(uc.rows) == sorted(ug.rows) and uc.meta == ug.meta
        for name, (r, v) in uc.rows.items():
            gr, gv = ug.rows[name]
            assert np.array_equal(r, gr) and gv.dtype == v.dtype and np.array_equal(gv, v), (k, name)
        assert (uc.dag is None) == (ug.dag is None)
        for x, y in zip(uc.dag or (), ug.dag or ()):
            assert np.array_equal(x, y), k
        for name, v in uc.whole.items():
            assert np.array_equal(ug.whole[name], v), (k, name)
        arrays, meta = apply_rows({kk: np.array(vv) for kk, vv in base.arrays.items()}, ug), ug.meta
        prev = {name: r for name, (r, _) in ug.rows.items()}
        if ug.dag is not None:
            prev["dag"] = ug.dag[0]
        S, T = np.r_[S, a], np.r_[T, b]
        qs, qt = rng.integers(0, g.n, 20000), rng.integers(0, g.n, 20000)
        assert np.array_equal(Index(meta, arrays).query(qs, qt, backend="gpu")[0], _bfs(g.n, S, T, qs, qt))
