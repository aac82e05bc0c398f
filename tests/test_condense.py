"""GPU condensation's NumPy twins (distgrail.stages.scc, condense_numpy) on the CPU: the same DAG as
``condense`` (every array, every dtype), each sweep against plain BFS, the kernel signatures the
launchers rely on, and the memory estimate."""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from distgrail.bfs import reachable_set
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.gpu.kernels import kernel_source
from distgrail.stages import scc
from distgrail.stages.condense import DAG, _kahn_levels, condense, condense_bytes, condense_numpy, dag_to_host
from distgrail.stages.scc import NumpySteps, keys_csr_numpy, scc_reps

ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


def eg(n, src, dst):
    return EdgeGraph(n=n, src=np.asarray(src, dtype=np.int32), dst=np.asarray(dst, dtype=np.int32))


def assert_same_dag(a: DAG, b: DAG):
    assert a.n == b.n
    for k in ARRAYS:
        x, y = getattr(a, k), getattr(b, k)
        assert x.dtype == y.dtype, f"{k}: {x.dtype} != {y.dtype}"
        assert x.shape == y.shape, f"{k}: {x.shape} != {y.shape}"
        assert np.array_equal(x, y), f"{k}: {x.tolist()[:20]} != {y.tolist()[:20]}"


def ring(n, k=0):
    return list(range(n)), [(i + 1) % n for i in range(n)]


def graphs():
    rng = np.random.default_rng(7)
    out = {
        "empty-n0": eg(0, [], []),
        "no-edges": eg(6, [], []),
        "one-vertex": eg(1, [], []),
        "one-self-loop": eg(1, [0], [0]),
        "self-loops-and-duplicates": eg(5, [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4], [0, 1, 1, 1, 2, 2, 3, 4, 4, 4, 1, 1]),
        "two-cycle": eg(2, [0, 1], [1, 0]),
        "isolated-around-cycle": eg(8, [2, 3, 4, 4], [3, 4, 2, 2]),
        "deep-chain": eg(3000, np.arange(2999), np.arange(1, 3000)),
        "reverse-chain": eg(500, np.arange(1, 500), np.arange(499)),
        "giant-ring": eg(2000, *ring(2000)),
    }
    # one giant SCC: a ring with random chords, plus a DAG tail on both sides
    s, d = ring(1000)
    s += rng.integers(0, 1000, 3000).tolist()
    d += rng.integers(0, 1000, 3000).tolist()
    s += list(range(1000, 1200)) + list(range(0, 200))
    d += list(range(0, 200)) + list(range(1200, 1400))
    out["giant-scc-with-tails"] = eg(1400, s, d)
    # many small SCCs (3-cycles) chained by DAG edges between them, shuffled ids
    k = 300
    perm = rng.permutation(3 * k)
    s = [3 * i + j for i in range(k) for j in range(3)]
    d = [3 * i + (j + 1) % 3 for i in range(k) for j in range(3)]
    a = rng.integers(0, k, 600)
    b = rng.integers(0, k, 600)
    s += (3 * np.minimum(a, b) + rng.integers(0, 3, 600)).tolist()
    d += (3 * np.maximum(a, b) + rng.integers(0, 3, 600)).tolist()
    out["many-small-sccs"] = eg(3 * k, perm[s], perm[d])
    g = generate("paper", 3000, 6, 3)
    out["paper-dag"] = g
    g = generate("scale-free", 3000, 4, 5)
    u, v = rng.integers(0, g.n, 400), rng.integers(0, g.n, 400)
    out["scale-free-back-edges"] = eg(g.n, np.concatenate((g.src, np.minimum(u, v))),
                                      np.concatenate((g.dst, np.maximum(u, v))))
    out["dense-random"] = eg(60, rng.integers(0, 60, 900), rng.integers(0, 60, 900))
    return out


GRAPHS = graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_numpy_twin_equals_condense(name):
    g = GRAPHS[name]
    d = condense_numpy(g)
    assert_same_dag(d, condense(g))
    if g.n:
        assert set(d.timings) == {"csr", "trim", "scc", "levels", "renumber"}
        assert all(t >= 0 for t in d.timings.values())


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=4 * n))))
def test_numpy_twin_equals_condense_random(case):
    n, edges = case
    src = [e[0] for e in edges]
    dst = [e[1] for e in edges]
    assert_same_dag(condense_numpy(eg(n, src, dst)), condense(eg(n, src, dst)))


def _csr(g):
    return keys_csr_numpy(g.src, g.dst, g.n)


def _closure(ptr, idx, n):
    a = csr_matrix((np.ones(idx.size, dtype=bool), idx, ptr), shape=(n, n))
    return np.array([reachable_set(a.indptr, a.indices, s) for s in range(n)]).reshape(n, n)


@pytest.mark.parametrize("name", ["self-loops-and-duplicates", "many-small-sccs", "giant-scc-with-tails", "dense-random",
                                  "isolated-around-cycle", "scale-free-back-edges"])
def test_scc_partition_matches_mutual_reachability(name):
    g = GRAPHS[name]
    ptr, idx = _csr(g)
    rep, level, info = scc_reps(NumpySteps(), ptr, idx, g.n)
    assert rep is not None and info["scc_iterations"] >= 1
    if g.n <= 1500:
        r = _closure(ptr, idx, g.n)
        mutual = r & r.T
        np.fill_diagonal(mutual, True)
        assert np.array_equal(rep[:, None] == rep[None, :], mutual)
    ncomp, labels = connected_components(csr_matrix((np.ones(idx.size), idx, ptr), shape=(g.n, g.n)),
                                         directed=True, connection="strong")
    assert np.unique(rep).size == ncomp
    assert np.array_equal(labels[:, None] == labels[None, :], rep[:, None] == rep[None, :]) if g.n <= 1500 else True
    # rep is the smallest member
    assert (rep <= np.arange(g.n)).all() and (rep[rep] == rep).all()


def test_builds_csr_sorted_unique_without_self_loops():
    ptr, idx = keys_csr_numpy(np.array([3, 0, 0, 2, 0, 1, 1]), np.array([1, 2, 1, 2, 2, 1, 0]), 4)
    assert ptr.tolist() == [0, 2, 3, 3, 4] and idx.tolist() == [1, 2, 0, 1]
    assert ptr.dtype == np.int64 and idx.dtype == np.int32


@pytest.mark.parametrize("name", ["paper-dag", "deep-chain", "reverse-chain"])
def test_trim_gives_kahn_levels_on_a_dag(name):
    g = GRAPHS[name]
    ptr, idx = _csr(g)
    s = NumpySteps()
    rep, level, info = scc_reps(s, ptr, idx, g.n)
    assert rep is None and info["scc_iterations"] == 0
    want = _kahn_levels(ptr, idx, g.n)
    assert np.array_equal(level, want)
    assert info["trim_rounds"] == int(want.max()) + 1  # one round per non-empty frontier


def test_peel_backward_removes_exactly_vertices_without_a_cycle_below():
    # 0 -> 1 <-> 2 -> 3 -> 4, 5 -> 0: backward peel removes 3, 4 only
    g = eg(6, [0, 1, 2, 2, 3, 5], [1, 2, 1, 3, 4, 0])
    ptr, idx = _csr(g)
    s = NumpySteps()
    rptr, ridx = s.transpose(ptr, idx, g.n)
    rep = np.full(6, -1, dtype=np.int32)
    rounds = s.peel(rptr, ridx, rep, s.count(rptr, ridx, rep))
    assert rep.tolist() == [-1, -1, -1, 3, 4, -1] and rounds == 2  # frontiers {4}, {3}
    rounds = s.peel(ptr, idx, rep, s.count(ptr, idx, rep))
    assert rep.tolist() == [0, -1, -1, 3, 4, 5] and rounds == 2  # frontiers {5}, {0}


@pytest.mark.parametrize("name,pivot", [("dense-random", 1), ("many-small-sccs", 0), ("scale-free-back-edges", 2900)])
def test_reach_equals_bfs_through_undecided_vertices(name, pivot):
    g = GRAPHS[name]
    ptr, idx = _csr(g)
    s = NumpySteps()
    rep = np.full(g.n, -1, dtype=np.int32)
    blocked = np.arange(0, g.n, 7)
    rep[blocked] = blocked
    mark = np.zeros(g.n, dtype=np.int32)
    pivot = pivot + 1 if pivot % 7 == 0 else pivot
    s.reach(ptr, idx, rep, mark, pivot, 4)
    rows = np.repeat(np.arange(g.n), np.diff(ptr))
    live = (rep[rows] < 0) & (rep[idx] < 0)
    sp, si = keys_csr_numpy(rows[live], idx[live], g.n)
    want = reachable_set(sp, si, pivot)
    assert want.sum() > 1
    assert np.array_equal(mark == 4, want)


def test_color_is_largest_reaching_id_and_color_back_finds_components():
    g = GRAPHS["many-small-sccs"]
    ptr, idx = _csr(g)
    s = NumpySteps()
    rep = np.full(g.n, -1, dtype=np.int32)
    color = np.arange(g.n, dtype=np.int32)
    mark = np.zeros(g.n, dtype=np.int32)
    s.color(ptr, idx, rep, color, mark)
    r = _closure(ptr, idx, g.n)
    np.fill_diagonal(r, True)
    want = np.array([np.flatnonzero(r[:, v]).max() for v in range(g.n)])
    assert np.array_equal(color, want)
    roots = np.flatnonzero(color == np.arange(g.n)).astype(np.int32)
    rounds = s.color_back(*s.transpose(ptr, idx, g.n), rep, color, roots)
    assert rounds >= 1
    claimed = rep >= 0
    mutual = r & r.T
    for v in np.flatnonzero(claimed):
        assert mutual[v, rep[v]] and color[v] == rep[v]
    for root in roots:  # each root's whole component is claimed
        assert (rep[np.flatnonzero(mutual[root])] == root).all()


def test_renumber_and_mapped_csr_drop_inner_edges():
    s = NumpySteps()
    ptr, idx = keys_csr_numpy(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 0]), 3)
    hp, hi = s.mapped_csr(ptr, idx, np.array([0, 0, 1], dtype=np.int32), 2)
    assert hp.tolist() == [0, 1, 2] and hi.tolist() == [1, 0]
    f = np.array([2, 0, 1], dtype=np.int32)
    fp, fi, rp, ri = s.renumber([ptr, idx], f, 3)
    # new edges 2->0, 0->2, 0->1, 1->2
    assert fp.tolist() == [0, 2, 3, 4] and fi.tolist() == [1, 2, 2, 0]
    assert rp.tolist() == [0, 1, 2, 4] and ri.tolist() == [2, 0, 0, 1]


def test_condense_bytes_is_about_20_bytes_per_edge():
    assert condense_bytes(0, 0) == 64 + (64 << 20)
    assert condense_bytes(1_500_000, 150_000_000) - condense_bytes(1_500_000, 0) == 20 * 150_000_000
    assert condense_bytes(10, 5) < condense_bytes(11, 5) < condense_bytes(11, 6)
    # past the int32 limit the keep-flag scan is int64: 24 bytes per edge and one row bucket's sort
    # scratch, 2 GiB (a forced limit: the same)
    m = 2**31 + 5
    assert condense_bytes(0, m) - condense_bytes(0, 0) == 24 * m + (2 << 30)
    assert condense_bytes(0, 100, limit=99) - condense_bytes(0, 0) == 24 * 100 + (2 << 30)
    assert condense_bytes(0, 99, limit=99) - condense_bytes(0, 0) == 20 * 99


def test_dag_to_host_keeps_host_arrays_and_timings():
    d = condense_numpy(GRAPHS["two-cycle"])
    h = dag_to_host(d)
    assert_same_dag(h, d)
    assert h.timings == d.timings and h.timings is not d.timings


_SIG = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)', re.S)


def kernel_signatures():
    return {name: [a.split()[-2] if a.split()[-1].startswith("*") else " ".join(a.replace("__restrict__", "").split()[:-1])
                   for a in args.split(",")] for name, args in _SIG.findall(kernel_source("condense"))}


def test_every_launched_kernel_exists_with_the_argument_count_used():
    sigs = kernel_signatures()
    src = open(scc.__file__).read()
    used = set(re.findall(r'"(dg_cond_\w+)"', src))  # every kernel named (launched by _k or _over_rows)
    assert used and used <= set(sigs), used - set(sigs)
    # argument counts of the launches (the sweeps pass a shared 10-argument head)
    assert len(sigs["dg_cond_sweep"]) == 10 + 7 and len(sigs["dg_cond_sweep_small"]) == 10 + 4
    assert len(sigs["dg_cond_sweep_hubs"]) == 10 + 4
    assert len(sigs["dg_cond_compact"]) == 5 and len(sigs["dg_cond_row_ptr"]) == 6
    assert len(sigs["dg_cond_csr_keys"]) == 10 and len(sigs["dg_cond_count"]) == 7
    assert len(sigs["dg_cond_csr_keys_hubs"]) == 8 and len(sigs["dg_cond_count_hubs"]) == 5
    assert scc.SMALL_WORK >= 1024


def test_benchmark_cyclic_graph_has_a_giant_and_many_small_sccs():
    from distgrail.benchmarks.condense import cyclic_scale_free

    g = cyclic_scale_free(4000, 6, 600, 600)
    d = condense_numpy(g)
    assert_same_dag(d, condense(g))
    sizes = np.bincount(d.comp)
    assert sizes.max() > g.n // 10 and (sizes == 2).sum() > 20
    assert d.meta["condense"]["scc_iterations"] >= 2  # colouring ran after forward-backward


# --- the CUDA launchers' host code on the CPU: a NumPy-backed fake CuPy and kernels emulated in
# Python (one sequential interleaving of each kernel), with every argument's dtype checked
# against the kernel's signature in kernels/condense.cu -----------------------------------------

class _Arr(np.ndarray):
    def get(self):
        return np.array(self)

    def set(self, a):
        self[...] = a


class _FakeCupy:
    class cuda:
        @staticmethod
        def get_current_stream():
            return type("S", (), {"synchronize": staticmethod(lambda: None)})()

    def __getattr__(self, name):
        f = getattr(np, name)
        if not callable(f) or isinstance(f, type):
            return f

        def wrapped(*a, **k):
            r = f(*a, **k)
            return r.view(_Arr) if isinstance(r, np.ndarray) else r
        return wrapped


_CTYPE = {"int": np.int32, "i64": np.int64, "long long": np.int64, "u64": np.uint64, "unsigned long long": np.uint64,
          "unsigned char": np.uint8}


def _emulate(name, sig):
    def run(grid, block, args):
        assert len(args) == len(sig), f"{name}: {len(args)} arguments for {len(sig)}"
        for i, (a, t) in enumerate(zip(args, sig)):
            base = t.replace("const ", "").rstrip("*").strip()
            if t.endswith("*"):
                assert isinstance(a, np.ndarray) and a.dtype == _CTYPE[base], f"{name} arg {i}: {t} got {a.dtype}"
            else:
                assert type(a) is _CTYPE[base], f"{name} arg {i}: {t} got {type(a)}"
        _KERNELS[name](*args)
    return run


def _sweep_round(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, fin, nin, fout, rnd, out=0, work=0):
    for u in fin[:nin]:
        for v in idx[ptr[u]:ptr[u + 1]]:
            push = False
            if mode == scc.PEEL and rep[v] < 0:
                cnt[v] -= 1
                if cnt[v] == 0:
                    rep[v] = v
                    if want:
                        level[v] = rnd + 1
                    push = True
            elif mode == scc.REACH and rep[v] < 0 and not mark[v] & bit:
                mark[v] |= bit
                push = True
            elif mode == scc.COLOR and rep[v] < 0 and color[v] < color[u]:
                color[v] = color[u]
                push = mark[v] != rnd + 1
                mark[v] = rnd + 1
            elif mode == scc.COLOR_BACK and rep[v] < 0 and color[v] == color[u]:
                rep[v] = color[u]
                push = True
            if push:
                fout[out] = v
                out += 1
                work += int(ptr[v + 1] - ptr[v])
    return out, work


def _listed(hubs):
    return hubs[1:1 + int(hubs[0])].astype(np.int64)


def _not_hubs(ptr, rows, hub, hubs):
    """The row kernels' part of a hub row: ``rows`` of more than ``hub`` entries appended to the
    hub list (its count first; overflow is an error, as past the GPU's bound), the others returned."""
    rows = np.asarray(rows, dtype=np.int64)
    deg = ptr[rows + 1] - ptr[rows]
    big, k = rows[deg > hub], int(hubs[0])
    assert k + big.size <= hubs.size - 1, f"hub list of {hubs.size - 1} overflows"
    hubs[1 + k:1 + k + big.size] = big
    hubs[0] = k + big.size
    return rows[deg <= hub]


def _entries(ptr, rows):
    """The CSR positions of ``rows``' entries."""
    return np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in rows] + [np.zeros(0, np.int64)]).astype(np.int64)


def _k_sweep(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, fin, nin, fout, status, rnd, hub, hubs):
    rows = _not_hubs(ptr, fin[:int(nin)], hub, hubs)
    status[:] = _sweep_round(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, rows, rows.size, fout, int(rnd))


def _k_sweep_hubs(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, hubs, fout, status, rnd):
    rows = _listed(hubs)
    status[:] = _sweep_round(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, rows, rows.size, fout, int(rnd),
                             int(status[0]), int(status[1]))


def _k_sweep_small(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, fa, fb, state, small):
    nin, rnd, work, cur, _ = (int(x) for x in state)
    done = 0
    while nin > 0 and nin + work <= small:
        fin, fout = (fb, fa) if cur else (fa, fb)
        nin, work = _sweep_round(mode, ptr, idx, rep, cnt, color, mark, level, want, bit, fin, nin, fout, rnd)
        rnd, cur, done = rnd + 1, cur ^ 1, done + 1
    state[:] = (nin, rnd, work, cur, done)


def _key(a, b):
    return np.where(a == b, np.uint64(2**64 - 1), (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64))


def _rows(ptr):
    return np.repeat(np.arange(ptr.size - 1), np.diff(ptr))


def _k_transpose(ptr, idx, cursor, ridx, n, hub, hubs):
    rows = _not_hubs(ptr, np.arange(int(n)), hub, hubs)
    _transpose_rows(ptr, idx, cursor, ridx, rows)


def _transpose_rows(ptr, idx, cursor, ridx, rows):
    for u in rows:
        for v in idx[ptr[u]:ptr[u + 1]]:
            ridx[cursor[v]] = u
            cursor[v] += 1


def _k_compact(keys, pos, has, m, out):
    if has:
        keep = np.diff(np.concatenate(([0], pos))) != 0
        out[pos[keep] - 1] = (keys[keep] & np.uint64(0xFFFFFFFF)).astype(np.int32)
    else:
        out[:] = (keys & np.uint64(0xFFFFFFFF)).astype(np.int32)


def _k_row_ptr(keys, pos, has, m, n, ptr):
    lo = np.searchsorted(keys, np.arange(n + 1, dtype=np.uint64) << np.uint64(32))
    ptr[:] = lo if not has else np.where(lo > 0, pos[np.maximum(lo - 1, 0)], 0)


def _k_key_rows(keys, m, n, cnt):
    rows = np.where(keys == np.uint64(2**64 - 1), n, keys >> np.uint64(32)).astype(np.int64)
    np.add.at(cnt, rows + 1, np.uint64(1))


def _k_bucket(keys, m, n, bounds, nb, cursor, out):
    rows = np.where(keys == np.uint64(2**64 - 1), n, keys >> np.uint64(32)).astype(np.int64)
    for k, r in zip(keys, rows):  # one interleaving: input order
        j = int(np.searchsorted(bounds[:nb], r, side="right")) - 1
        out[cursor[j]] = k
        cursor[j] += 1


def _k_count(ptr, idx, rep, cnt, n, hub, hubs):
    _count_rows(ptr, idx, rep, cnt, _not_hubs(ptr, np.flatnonzero(rep < 0), hub, hubs))


def _count_rows(ptr, idx, rep, cnt, rows):
    v = idx[_entries(ptr, rows)]
    np.add.at(cnt, v[rep[v] < 0], 1)


def _k_csr_keys(p, i, f, k, n, sw, row0, base, hub, hubs):
    _csr_keys_rows(p, i, f, k, sw, row0, base, _not_hubs(p, np.arange(int(n)), hub, hubs))


def _csr_keys_rows(p, i, f, k, sw, row0, base, rows):
    e = _entries(p, rows)
    u = f[int(row0) + np.repeat(rows, p[rows + 1] - p[rows])]
    k[e - int(base)] = _key(f[i[e]], u) if sw else _key(u, f[i[e]])


_KERNELS = {
    "dg_cond_check": lambda s, d, m, f: f.__setitem__(0, (2 if (s == d).any() else 0) | (
        1 if m > 1 and not (((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (d[1:] > d[:-1]))).all()) else 0)),
    "dg_cond_pack": lambda s, d, k, m: k.__setitem__(slice(None), _key(s, d)),
    "dg_cond_csr_keys": _k_csr_keys,
    "dg_cond_csr_keys_hubs": lambda p, i, f, k, sw, r0, b, hubs: _csr_keys_rows(p, i, f, k, sw, r0, b, _listed(hubs)),
    "dg_cond_count_hubs": lambda p, i, rep, cnt, hubs: _count_rows(p, i, rep, cnt, _listed(hubs)),
    "dg_cond_transpose_hubs": lambda p, i, cur, ridx, hubs: _transpose_rows(p, i, cur, ridx, _listed(hubs)),
    "dg_cond_sweep_hubs": _k_sweep_hubs,
    "dg_cond_swap": lambda k, m: k.__setitem__(slice(None), (k << np.uint64(32)) | (k >> np.uint64(32))),
    "dg_cond_keep": lambda k, m, keep: keep.__setitem__(slice(None), (k != np.uint64(2**64 - 1)) & np.concatenate(
        ([True], k[1:] != k[:-1]))),
    "dg_cond_compact": _k_compact, "dg_cond_row_ptr": _k_row_ptr, "dg_cond_count": _k_count,
    "dg_cond_compact64": _k_compact, "dg_cond_row_ptr64": _k_row_ptr, "dg_cond_key_rows": _k_key_rows,
    "dg_cond_bucket": _k_bucket,
    "dg_cond_src_ptr": lambda src, m, n, ptr: ptr.__setitem__(slice(None), np.searchsorted(src, np.arange(n + 1))),
    "dg_cond_transpose": _k_transpose,
    "dg_cond_min_member": lambda rep, minm, n: np.minimum.at(minm, rep, np.arange(n, dtype=np.int32)),
    "dg_cond_sweep": _k_sweep, "dg_cond_sweep_small": _k_sweep_small,
}


@pytest.fixture
def fake_gpu(monkeypatch):
    import distgrail.gpu.sweep as gsweep

    sigs = kernel_signatures()
    assert set(_KERNELS) == set(sigs), "every kernel has an emulation"
    fake = _FakeCupy()
    monkeypatch.setattr(gsweep, "cupy", lambda: fake)
    monkeypatch.setattr(gsweep, "kernel", lambda mod, name: _emulate(name, sigs[name]))
    monkeypatch.setattr(gsweep, "sm_count", lambda: 2)
    return fake


def _wide_limit(g):
    """A limit below the edge count (the wide path) that no single row of any step passes."""
    return max(8, g.m // 3 + 1)


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_numpy_twin_wide_path_equals_condense(name):
    """The twin with a limit below the edge count: keys sorted in row buckets, int64 positions
    from a scan in pieces (the steps of the GPU's path past 2^31 - 1 edges), the same DAG."""
    g = GRAPHS[name]
    assert_same_dag(condense_numpy(g, limit=_wide_limit(g)), condense(g))


def test_keys_csr_wide_path_equals_the_narrow_one():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 50, 3000), rng.integers(0, 50, 3000)
    want = keys_csr_numpy(a, b, 50)
    for limit in (200, 777, 2999):
        got = keys_csr_numpy(a, b, 50, limit)
        assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(got, want)), limit


def test_a_row_past_the_limit_is_refused_not_missorted():
    from distgrail.errors import BackendError

    a = np.zeros(20, np.int64)  # one row of 20 keys (repeats included), limit 8
    with pytest.raises(BackendError, match="more than 8 edges"):
        keys_csr_numpy(a, np.arange(1, 21) % 5 + 1, 10, limit=8)


@pytest.mark.parametrize("name", ["self-loops-and-duplicates", "many-small-sccs", "giant-scc-with-tails", "deep-chain",
                                  "paper-dag", "scale-free-back-edges", "dense-random", "giant-ring"])
def test_cuda_launchers_wide_path_with_emulated_kernels(fake_gpu, name):
    """CudaSteps with a forced small limit: bucketed key sorts, int64 scans in pieces, the *64
    kernels, the src_ptr search and the in-degree count instead of a bincount."""
    from distgrail.stages.condense import _condense_steps
    from distgrail.stages.scc import CudaSteps

    g = GRAPHS[name]
    for perm in (np.arange(g.m), np.random.default_rng(0).permutation(g.m)):  # fast path, key sort
        src = np.asarray(g.src, dtype=np.int32)[perm].view(_Arr)
        dst = np.asarray(g.dst, dtype=np.int32)[perm].view(_Arr)
        steps, checked = CudaSteps(limit=_wide_limit(g)), []
        steps.sort_check = lambda n, m, held=0: checked.append((n, m))  # (condense_cuda's: a key sort's memory)
        d = _condense_steps(steps, src, dst, g.n)
        assert_same_dag(dag_to_host(DAG(n=d.n, **{k: np.asarray(getattr(d, k)) for k in ARRAYS})), condense(g))
        # the input's key sort is checked where the edges turn out unsorted (covering every later
        # sort); else the condensed edges' sorts, into C rows (tests/test_review49_condense_memory.py)
        unsorted = bool(g.m) and not np.all(np.diff(src.astype(np.int64) * g.n + dst) > 0)
        assert checked == [(g.n, g.m)] if unsorted else all(n == d.C for n, _ in checked), name


@pytest.mark.parametrize("small_work", [0, 64, 1 << 40])
@pytest.mark.parametrize("name", ["empty-n0", "no-edges", "one-self-loop", "self-loops-and-duplicates", "many-small-sccs",
                                  "giant-scc-with-tails", "deep-chain", "paper-dag", "scale-free-back-edges"])
@pytest.mark.parametrize("hub", [None, 0, 2])
def test_cuda_launchers_with_emulated_kernels(fake_gpu, monkeypatch, name, small_work, hub):
    """hub: rows of more entries are hub rows (listed by the row kernels, swept by the *_hubs
    launches: None, the shipped 4096, leaves none in these graphs)."""
    from distgrail.stages.condense import _condense_steps
    from distgrail.stages.scc import CudaSteps

    monkeypatch.setattr(scc, "SMALL_WORK", small_work)
    if hub is not None:
        monkeypatch.setattr(CudaSteps, "hub_edges", hub)
    g = GRAPHS[name]
    for perm in (np.arange(g.m), np.random.default_rng(0).permutation(g.m)):  # fast path, key sort
        src = np.asarray(g.src, dtype=np.int32)[perm].view(_Arr)
        dst = np.asarray(g.dst, dtype=np.int32)[perm].view(_Arr)
        d = _condense_steps(CudaSteps(), src, dst, g.n)
        assert_same_dag(dag_to_host(DAG(n=d.n, **{k: np.asarray(getattr(d, k)) for k in ARRAYS})), condense(g))


@pytest.mark.parametrize("key_piece", [1, 3, 17])
@pytest.mark.parametrize("name", ["self-loops-and-duplicates", "many-small-sccs", "giant-scc-with-tails",
                                  "scale-free-back-edges", "giant-ring", "dense-random"])
@pytest.mark.parametrize("hub", [None, 0, 2])
def test_condensed_csr_keys_made_a_piece_of_rows_at_a_time(fake_gpu, monkeypatch, name, key_piece, hub):
    """CudaSteps.mapped_csr makes the keys of a few rows at a time (``key_piece`` entries, a row of
    more alone; hub rows within a piece) and keeps those between components: the pieces cover
    every row once, in order, and the condensed DAG is the same."""
    from distgrail.stages.condense import _condense_steps
    from distgrail.stages.scc import CudaSteps

    monkeypatch.setattr(CudaSteps, "key_piece", key_piece)
    if hub is not None:
        monkeypatch.setattr(CudaSteps, "hub_edges", hub)
    g = GRAPHS[name]
    steps = CudaSteps()
    ptr, idx = steps.edge_csr(np.asarray(g.src, np.int32).view(_Arr), np.asarray(g.dst, np.int32).view(_Arr), g.n)
    spans = steps.row_pieces(ptr, int(idx.size))
    assert spans[0][0] == 0 and spans[-1][1] == g.n and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert len(spans) > 1 or idx.size <= key_piece
    deg = np.diff(np.asarray(ptr))
    for r0, r1 in spans:  # a piece passes key_piece entries only by its last row
        assert r1 - r0 == 1 or int(deg[r0:r1 - 1].sum()) <= key_piece
    f = (np.arange(g.n, dtype=np.int32) // 2).view(_Arr)  # pairs of vertices as components: both kinds of edge
    got = steps.mapped_csr(ptr, idx, f, (g.n + 1) // 2)
    want = NumpySteps().mapped_csr(np.asarray(ptr), np.asarray(idx), np.asarray(f), (g.n + 1) // 2)
    assert all(np.array_equal(np.asarray(a), b) for a, b in zip(got, want))
    d = _condense_steps(CudaSteps(), np.asarray(g.src, np.int32).view(_Arr), np.asarray(g.dst, np.int32).view(_Arr), g.n)
    assert_same_dag(dag_to_host(DAG(n=d.n, **{k: np.asarray(getattr(d, k)) for k in ARRAYS})), condense(g))


def test_the_index_fields_of_a_host_dag_stay_as_they_are():
    """index_dag_to_host (what the build brings home for the index): host fields are the DAG's
    own arrays, the reverse CSR (phases 1 and 5 only) is left out; on the CPU nothing lands."""
    from distgrail.gpu.backend import get_backend
    from distgrail.placement import host_landing, index_dag_to_host

    dag = condense(GRAPHS["many-small-sccs"])
    cpu = get_backend("cpu")
    assert host_landing(dag, cpu) == {}
    out = index_dag_to_host(dag, cpu)
    for k in ("comp", "indptr", "indices", "level"):
        assert getattr(out, k) is getattr(dag, k)
    assert out.rindptr is None and out.rindices is None and dag.rindptr is not None
    np.testing.assert_array_equal(out.level_ptr, dag.level_ptr)


@pytest.mark.parametrize("hub", [0, 1, 7, 4096])
def test_hub_capacity_holds_every_hub_row(hub):
    """The GPU row kernels list rows of more than ``hub`` entries in hub_capacity(m, n, hub) - 1
    slots (a count first): the bound holds for skewed and flat degree sequences."""
    from distgrail.stages.scc import hub_capacity

    rng = np.random.default_rng(hub)
    for deg in (rng.zipf(1.5, 5000) % 20000, np.full(3000, hub + 1), np.zeros(10, np.int64), rng.integers(0, 9, 4000)):
        deg = deg.astype(np.int64)
        assert int((deg > hub).sum()) <= hub_capacity(int(deg.sum()), deg.size, hub) - 1
    assert hub_capacity(0, 5, hub) == 1
