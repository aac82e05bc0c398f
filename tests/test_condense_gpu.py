"""GPU condensation (kernels/condense.cu via distgrail.stages.scc.CudaSteps) against its NumPy twins,
step by step, and ``condense_cuda`` against the CPU ``condense`` (every array byte-identical).
Skipped without a usable GPU (conftest says why)."""

import numpy as np
import pytest

from distgrail.errors import BackendError
from distgrail.stages import condense as condense_mod
from distgrail.stages import scc
from distgrail.stages.condense import condense, condense_cuda, dag_to_host
from distgrail.stages.scc import CudaSteps, NumpySteps, scc_reps
from test_condense import GRAPHS, assert_same_dag

pytestmark = pytest.mark.gpu


def _same(name, gpu, cpu):
    g = gpu.get() if hasattr(gpu, "get") else np.asarray(gpu)
    assert g.dtype == cpu.dtype, f"{name}: dtype {g.dtype} (gpu) != {cpu.dtype} (cpu)"
    assert np.array_equal(g, cpu), f"{name}: {g.tolist()[:20]} (gpu) != {cpu.tolist()[:20]} (cpu)"


def _sorted_rows(ptr, idx):
    ptr, idx = (a.get() if hasattr(a, "get") else a for a in (ptr, idx))
    return ptr, np.concatenate([np.sort(idx[ptr[i]:ptr[i + 1]]) for i in range(ptr.size - 1)] + [idx[:0]])


def _up(g):
    import cupy as cp

    return cp.asarray(g.src, dtype=cp.int32), cp.asarray(g.dst, dtype=cp.int32)


@pytest.fixture(params=[None, 0, 2], ids=["hub-default", "hub-0", "hub-2"])
def hub_edges(request, monkeypatch):
    """CudaSteps.hub_edges as shipped, or small: rows of more entries are hub rows (row kernels
    skip and list them, the *_hubs launches sweep them, a team of warps a row)."""
    if request.param is not None:
        monkeypatch.setattr(CudaSteps, "hub_edges", request.param)
    return request.param


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_condense_cuda_equals_cpu(name, hub_edges):
    g = GRAPHS[name]
    d = condense_cuda(*_up(g), g.n)
    assert_same_dag(dag_to_host(d), condense(g))
    if g.n:
        assert set(d.timings) == {"csr", "trim", "scc", "levels", "renumber"}


@pytest.mark.parametrize("small_work", [0, 1 << 40])
@pytest.mark.parametrize("name", ["deep-chain", "giant-ring", "many-small-sccs", "scale-free-back-edges", "paper-dag"])
def test_grid_and_single_block_sweeps_agree(monkeypatch, name, small_work, hub_edges):
    """SMALL_WORK 0: every round a grid launch; huge: every round inside one block."""
    monkeypatch.setattr(scc, "SMALL_WORK", small_work)
    g = GRAPHS[name]
    assert_same_dag(dag_to_host(condense_cuda(*_up(g), g.n)), condense(g))


@pytest.mark.parametrize("name", ["self-loops-and-duplicates", "many-small-sccs", "giant-scc-with-tails", "dense-random",
                                  "scale-free-back-edges", "paper-dag", "giant-ring", "no-edges"])
def test_steps_match_numpy_twins(name, hub_edges):
    import cupy as cp

    g = GRAPHS[name]
    gs, ns = CudaSteps(), NumpySteps()
    src, dst = _up(g)
    n = g.n
    # CSR: sorted input takes the fast path, shuffled input the key sort
    ptr, idx = ns.edge_csr(g.src, g.dst, n)
    gptr, gidx = gs.edge_csr(src, dst, n)
    _same("csr ptr", gptr, ptr)
    _same("csr idx", gidx, idx)
    perm = cp.asarray(np.random.default_rng(0).permutation(g.m))
    gptr2, gidx2 = gs.edge_csr(src[perm], dst[perm], n)
    _same("csr ptr (shuffled)", gptr2, ptr)
    _same("csr idx (shuffled)", gidx2, idx)
    # counts and forward trimming (levels, rounds)
    rep = np.full(n, -1, dtype=np.int32)
    grep = cp.asarray(rep)
    cnt = ns.count(ptr, idx, rep)
    gcnt = gs.count(gptr, gidx, grep)
    _same("in-degree", gcnt, cnt)
    lev, glev = np.full(n, -1, np.int32), cp.full(n, -1, cp.int32)
    assert gs.peel(gptr, gidx, grep, gcnt, glev) == ns.peel(ptr, idx, rep, cnt, lev), "trim rounds"
    _same("trim rep", grep, rep)
    _same("trim levels", glev, lev)
    # reverse CSR (rows unordered on the GPU) and backward trimming
    rptr, ridx = ns.transpose(ptr, idx, n)
    grptr, gridx = gs.transpose(gptr, gidx, n)
    gp, gi = _sorted_rows(grptr, gridx)
    _same("transpose ptr", cp.asarray(gp), rptr)
    _same("transpose idx", cp.asarray(gi), ridx)
    assert gs.peel(grptr, gridx, grep, gs.count(grptr, gridx, grep)) == ns.peel(rptr, ridx, rep, ns.count(rptr, ridx, rep))
    _same("backward trim rep", grep, rep)
    rem = np.flatnonzero(rep < 0).astype(np.int32)
    if rem.size:
        pivot = ns.pivot(ptr, rptr, rem)
        assert gs.pivot(gptr, grptr, cp.asarray(rem)) == pivot
        mark, gmark = np.zeros(n, np.int32), cp.zeros(n, cp.int32)
        for bit, (p, i, gp_, gi_) in ((1, (ptr, idx, gptr, gidx)), (2, (rptr, ridx, grptr, gridx))):
            assert gs.reach(gp_, gi_, grep, gmark, pivot, bit) == ns.reach(p, i, rep, mark, pivot, bit), "reach rounds"
        _same("forward-backward marks", gmark, mark)
        color, gcolor = np.arange(n, dtype=np.int32), cp.arange(n, dtype=cp.int32)
        ns.color(ptr, idx, rep, color, mark)
        gs.color(gptr, gidx, grep, gcolor, gmark)
        _same("colours", gcolor, color)
        roots = rem[color[rem] == rem]
        assert gs.color_back(grptr, gridx, grep, gcolor, cp.asarray(roots)) == ns.color_back(rptr, ridx, rep, color, roots)
        _same("colour components", grep, rep)
    # whole SCC flow, min members, condensed CSR, renumbering
    r, lv, info = scc_reps(ns, ptr, idx, n)
    gr, glv, ginfo = scc_reps(gs, gptr, gidx, n)
    assert (r is None) == (gr is None) and info["trim_rounds"] == ginfo["trim_rounds"]
    _same("levels", glv, lv)
    if r is not None:
        _same("rep (smallest member)", gr, r)
        lab = np.unique(r, return_inverse=True)[1].astype(np.int32)
        C = int(lab.max()) + 1
        hp, hi = ns.mapped_csr(ptr, idx, lab, C)
        ghp, ghi = gs.mapped_csr(gptr, gidx, cp.asarray(lab), C)
        _same("condensed ptr", ghp, hp)
        _same("condensed idx", ghi, hi)
    else:
        C, hp, hi, ghp, ghi = n, ptr, idx, gptr, gidx
    f = np.random.default_rng(1).permutation(C).astype(np.int32)
    want = ns.renumber([hp, hi], f, C)
    got = gs.renumber([ghp, ghi], cp.asarray(f), C)
    for what, a, b in zip(("indptr", "indices", "rindptr", "rindices"), got, want):
        _same(f"renumbered {what}", a, b)


def test_too_big_for_the_gpu_raises_backend_error(monkeypatch):
    g = GRAPHS["two-cycle"]
    monkeypatch.setattr(condense_mod, "condense_bytes", lambda *a, **k: 1 << 60)
    with pytest.raises(BackendError, match="condensation needs about"):
        condense_cuda(*_up(g), g.n)


@pytest.mark.parametrize("order", ["sorted", "unsorted"])
def test_an_unsorted_input_is_checked_for_its_key_sort(monkeypatch, order):
    """condense_cuda checks a sorted input's memory first; the input's key sort, larger, only where
    the edges turn out unsorted (CudaSteps.sort_check, before the keys are made); the condensed
    edges' key sorts, fewer keys, either way once their count is known."""
    import cupy as cp

    g = GRAPHS["scale-free-back-edges"]
    keys = np.unique((np.asarray(g.src, np.int64) << 32) | np.asarray(g.dst, np.int64))
    src, dst = (keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)
    M = int(src.size)
    if order == "unsorted":
        src, dst = src[::-1].copy(), dst[::-1].copy()
    asked = []

    def need(n, m, limit=0, sorted_input=False):  # (only the sort of all M input keys does not fit)
        asked.append((sorted_input, int(m)))
        return 0 if sorted_input or m < M else 1 << 60

    monkeypatch.setattr(condense_mod, "condense_bytes", need)
    if order == "unsorted":
        with pytest.raises(BackendError, match="condensation needs about"):
            condense_cuda(cp.asarray(src), cp.asarray(dst), g.n)
        assert asked == [(True, M), (False, M)]
    else:
        assert_same_dag(dag_to_host(condense_cuda(cp.asarray(src), cp.asarray(dst), g.n)), condense(g))
        assert asked[0] == (True, M) and len(asked) > 1 and all(not s and m < M for s, m in asked[1:]), asked


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_wide_path_with_a_forced_limit_equals_cpu(name):
    """limit below the edge count: the path past 2^31 - 1 edges (row-bucket sorts, int64 scans in
    pieces, the *64 kernels, dg_cond_src_ptr, the in-degree count), byte-identical DAG."""
    from test_condense import _wide_limit

    g = GRAPHS[name]
    for perm in (np.arange(g.m), np.random.default_rng(0).permutation(g.m)):  # sorted input too
        import cupy as cp

        src, dst = (cp.asarray(np.asarray(a, dtype=np.int32)[perm]) for a in (g.src, g.dst))
        assert_same_dag(dag_to_host(condense_cuda(src, dst, g.n, limit=_wide_limit(g))), condense(g))


def test_wide_steps_match_the_numpy_twin_step_by_step():
    import cupy as cp

    g = GRAPHS["giant-scc-with-tails"]
    limit = max(8, g.m // 5)
    assert limit < g.m
    gs, ns = CudaSteps(limit), NumpySteps(limit)
    src, dst = _up(g)
    gp, gi = gs.edge_csr(src, dst, g.n)
    hp, hi = ns.edge_csr(np.asarray(g.src, np.int32), np.asarray(g.dst, np.int32), g.n)
    _same("indptr", gp, hp)
    _same("indices", gi, hi)
    rp, ri = gs.transpose(gp, gi, g.n)
    want_p, want_i = ns.transpose(hp, hi, g.n)
    _same("rindptr", rp, want_p)
    _same("rindices (rows sorted)", _sorted_rows(rp, ri)[1], want_i)


def test_dag_to_host_returns_numpy_arrays():
    g = GRAPHS["giant-scc-with-tails"]
    h = dag_to_host(condense_cuda(*_up(g), g.n))
    assert all(isinstance(getattr(h, k), np.ndarray) for k in ("comp", "indptr", "indices", "rindptr", "rindices",
                                                                "level", "level_ptr"))


def test_index_fields_come_home_into_the_landing_pages():
    """host_landing: host arrays for the device fields an index keeps (not the reverse CSR),
    pre-faulted; index_dag_to_host copies into exactly those arrays and leaves the reverse CSR out.
    On the CPU there is nothing to land: the DAG's own arrays are returned."""
    from distgrail.gpu.backend import get_backend
    from distgrail.placement import INDEX_FIELDS, host_landing, index_dag_to_host

    g = GRAPHS["many-small-sccs"]
    cpu = get_backend("cpu")
    host = condense(g)
    assert host_landing(host, cpu) == {}
    out = index_dag_to_host(host, cpu)
    assert out.comp is host.comp and out.rindptr is None and out.rindices is None
    be = get_backend("gpu")
    with be.on_device():
        dev = condense_cuda(*_up(g), g.n)
        landing = host_landing(dev, be)
        assert set(landing) == {k for k in INDEX_FIELDS if getattr(dev, k) is not None
                                and not isinstance(getattr(dev, k), np.ndarray)} != set()
        got = index_dag_to_host(dev, be, landing)
    for k in landing:
        assert getattr(got, k) is landing[k][0]
        np.testing.assert_array_equal(getattr(got, k), getattr(host, k))
    assert got.rindptr is None and got.rindices is None
    np.testing.assert_array_equal(got.level_ptr, host.level_ptr)


def test_a_hub_row_is_swept_by_the_grid(monkeypatch):
    """One row of 300,000 entries (a hub past the shipped 4096) plus a chain: the hub kernels run
    (the row kernels alone would also be right, only slow): count, peel levels, transpose and the
    condensed keys equal the twins'."""
    import cupy as cp

    from distgrail.io.read import as_graph

    n = 300_002
    src = np.concatenate([np.zeros(n - 2, np.int64), np.arange(1, n - 1)])
    dst = np.concatenate([np.arange(1, n - 1), np.arange(2, n)])  # 0 -> everyone, and a chain 1 -> 2 -> ...
    g = as_graph((src, dst))
    launched = []
    plain = CudaSteps._k

    def k(self, name):
        launched.append(name)
        return plain(self, name)

    monkeypatch.setattr(CudaSteps, "_k", k)
    assert_same_dag(dag_to_host(condense_cuda(*_up(g), g.n)), condense(g))
    assert {"dg_cond_count_hubs", "dg_cond_sweep_hubs", "dg_cond_csr_keys_hubs"} <= set(launched)
    gs, ns = CudaSteps(), NumpySteps()
    ptr, idx = ns.edge_csr(g.src, g.dst, n)
    gptr, gidx = gs.edge_csr(*_up(g), n)
    _same("in-degree", gs.count(gptr, gidx, cp.full(n, -1, cp.int32)), ns.count(ptr, idx, np.full(n, -1, np.int32)))
    rptr, ridx = ns.transpose(ptr, idx, n)
    gp, gi = _sorted_rows(*gs.transpose(gptr, gidx, n))
    _same("transpose ptr", cp.asarray(gp), rptr)
    _same("transpose idx", cp.asarray(gi), ridx)


@pytest.mark.parametrize("hubs, lo, hi, hub_edges", [(3, 4097, 60_000, None), (2000, 17, 400, 16)],
                         ids=["few-hubs-split-the-grid", "many-hubs-round-robin"])
def test_hub_rows_by_teams_of_warps(monkeypatch, hubs, lo, hi, hub_edges):
    """Hub rows of varied lengths, fewer than the grid's teams of warps (each row gets a share of
    the grid) or many more (rows round-robin over the teams): every entry swept once, so the
    condensation equals the CPU's, with cycles through the hubs (reach, colour sweeps)."""
    import cupy as cp

    from distgrail.io.read import as_graph

    if hub_edges is not None:
        monkeypatch.setattr(CudaSteps, "hub_edges", hub_edges)
    rng = np.random.default_rng(hubs)
    n = 50_000
    deg = rng.integers(lo, hi, hubs)
    src = np.repeat(rng.choice(n, hubs, replace=False), deg)
    dst = rng.integers(0, n, src.size)
    back = rng.integers(0, n, 20_000)  # cycles back into the hubs' rows
    g = as_graph((np.concatenate([src, back]), np.concatenate([dst, rng.choice(np.unique(src), back.size)])), n)
    assert_same_dag(dag_to_host(condense_cuda(*_up(g), g.n)), condense(g))
    gs, ns = CudaSteps(), NumpySteps()
    ptr, idx = ns.edge_csr(g.src, g.dst, n)
    gptr, gidx = gs.edge_csr(*_up(g), n)
    assert int((np.diff(ptr) > gs.hub_edges).sum()) >= hubs  # the rows are hubs
    _same("in-degree", gs.count(gptr, gidx, cp.full(n, -1, cp.int32)),
          ns.count(ptr, idx, np.full(n, -1, np.int32)))


@pytest.mark.parametrize("key_piece", [None, 5])
@pytest.mark.parametrize("limit", ["whole", "row"])
@pytest.mark.parametrize("name", ["giant-ring", "many-small-sccs", "scale-free-back-edges"])
def test_condensed_csr_sorts_only_the_edges_between_components(monkeypatch, name, limit, key_piece):
    """CudaSteps.mapped_csr makes the keys a piece of rows at a time (``key_piece`` entries: the
    shipped sixteenth, or 5) and drops the edges inside one component (the sentinel keys) before
    its sort, in pieces of ``limit`` keys (the shipped one, or the largest condensed row: the
    least the row-bucket sort takes): the condensed CSR is the NumPy twin's, and only the edges
    between components are sorted."""
    import cupy as cp

    from distgrail.gpu import memory

    g = GRAPHS[name]
    ns = NumpySteps()
    ptr, idx = ns.edge_csr(np.asarray(g.src, np.int32), np.asarray(g.dst, np.int32), g.n)
    r, _, _ = scc_reps(ns, ptr, idx, g.n)
    if r is None:
        pytest.skip(f"{name} is acyclic: no condensed CSR to map")
    lab = np.unique(r, return_inverse=True)[1].astype(np.int32)
    C = int(lab.max()) + 1
    rows = np.repeat(np.arange(g.n), np.diff(ptr))
    inside = int(np.count_nonzero(lab[rows] == lab[idx]))
    row = max(2, int(np.bincount(lab[rows], minlength=C).max()))
    gs = CudaSteps(2**31 - 1 if limit == "whole" else row)
    monkeypatch.setattr(CudaSteps, "key_piece", key_piece)
    step = key_piece or memory.working_piece(idx.size, gs.limit)
    assert (len(gs.row_pieces(cp.asarray(ptr), int(idx.size))) > 1) == (idx.size > step)
    sorted_sizes = []
    real_sort = CudaSteps._sort
    monkeypatch.setattr(CudaSteps, "_sort", lambda self, keys, n: (sorted_sizes.append(int(keys.size)),
                                                                    real_sort(self, keys, n))[1])
    spy = []
    real_drop = memory.drop_in_pieces
    monkeypatch.setattr(memory, "drop_in_pieces", lambda *a, **k: (spy.append(1), real_drop(*a, **k))[1])
    got = gs.mapped_csr(cp.asarray(ptr), cp.asarray(idx), cp.asarray(lab), C)
    want = ns.mapped_csr(ptr, idx, lab, C)
    _same("condensed ptr", got[0], want[0])
    _same("condensed idx", got[1], want[1])
    sorts = idx.size - inside
    assert spy and sorted_sizes == ([sorts] if sorts else []), (sorted_sizes, inside)  # (no keys left: no sort)


@pytest.mark.parametrize("limit", [2**31 - 1, 7])
def test_a_sorted_edge_list_with_self_loops_is_its_csr_without_a_sort(monkeypatch, limit):
    """A sorted, distinct edge list with self-loops (a .h5 graph; R-MAT's keep theirs) becomes the
    CSR by dropping the self-loops (CudaSteps._without_self_loops), no key sort: the twin's CSR,
    and the whole condensation equals the CPU's."""
    import cupy as cp

    from distgrail.io.graph import EdgeGraph

    rng = np.random.default_rng(7)
    n = 300
    keys = np.unique(rng.integers(0, n, 400) * n + rng.integers(0, n, 400))  # (225 components)
    keys = np.union1d(keys, np.arange(0, n, 7) * (n + 1))  # a self-loop every 7th vertex
    src, dst = (keys // n).astype(np.int32), (keys % n).astype(np.int32)
    sorts = []
    real_sort = CudaSteps._sort
    monkeypatch.setattr(CudaSteps, "_sort", lambda self, k, c: (sorts.append(int(k.size)), real_sort(self, k, c))[1])
    gs, ns = CudaSteps(limit), NumpySteps()
    got = gs.edge_csr(cp.asarray(src), cp.asarray(dst), n)
    want = ns.edge_csr(src, dst, n)
    _same("ptr", got[0], want[0])
    _same("idx", got[1], want[1])
    assert not sorts and int(want[1].size) == keys.size - int(np.count_nonzero(src == dst)) < keys.size - 42
    g = EdgeGraph(src=src, dst=dst, n=n)  # (the condensation's sorts take at least its largest row: 64)
    d = condense_cuda(cp.asarray(src), cp.asarray(dst), n, limit=max(limit, 64))
    assert_same_dag(dag_to_host(d), condense(g))
    assert d.C > 100


def test_a_sorted_input_stays_within_its_estimate():
    """condense_cuda of a sorted, distinct edge list with self-loops and a giant component (an
    R-MAT ``.h5`` graph's CSR, scale 20): CuPy's pool holds at most
    ``condense_bytes(sorted_input=True)`` beyond the input edges (8 bytes an edge and 64 a vertex,
    less the sort scratch's 64 MiB), the number condense_cuda checks first; a key for every edge
    at once, as before, held 12 bytes an edge. The DAG is the CPU path's."""
    import cupy as cp

    from distgrail.gpu.memory import PoolPeak
    from distgrail.io.graph import EdgeGraph
    from distgrail.io.rmat import RMAT, rmat_keys

    p = RMAT(scale=20, edge_factor=16, seed=7)
    keys = np.unique(rmat_keys(p, threads=2))
    src, dst = (keys >> np.uint64(32)).astype(np.int32), (keys & np.uint64(0xFFFFFFFF)).astype(np.int32)
    n, m = p.n, int(src.size)
    assert (src == dst).any()
    gsrc, gdst = cp.asarray(src), cp.asarray(dst)
    cp.cuda.Device().synchronize()
    base = cp.get_default_memory_pool().used_bytes()
    with PoolPeak() as peak:
        d = condense_cuda(gsrc, gdst, n)
    beyond = peak.used - base
    want = condense_mod.condense_bytes(n, m, sorted_input=True) - (64 << 20)
    assert beyond <= want, (beyond / m, want / m)
    assert_same_dag(dag_to_host(d), condense(EdgeGraph(n=n, src=src, dst=dst)))


def test_a_sorted_acyclic_input_stays_within_its_checks():
    """condense_cuda of a sorted, distinct, acyclic edge list (a ``.h5`` DAG): nothing is sorted
    before renumber, whose two key sorts of every edge pass the sorted input's up-front estimate;
    CuPy's pool holds at most the largest need checked (renumber's: condense_bytes of the DAG)
    beyond the input edges. The DAG is the CPU path's."""
    import cupy as cp

    from distgrail.gpu.memory import PoolPeak
    from distgrail.io.graph import EdgeGraph

    rng = np.random.default_rng(11)
    n = 1 << 16
    a, b = rng.integers(0, n, 1 << 20), rng.integers(0, n, 1 << 20)
    keys = np.unique((np.minimum(a, b) << 32) | np.maximum(a, b))
    src, dst = (keys >> 32).astype(np.int32), (keys & 0xFFFFFFFF).astype(np.int32)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    m = int(src.size)
    asked = []
    real = condense_mod.condense_bytes
    gsrc, gdst = cp.asarray(src), cp.asarray(dst)
    cp.cuda.Device().synchronize()
    base = cp.get_default_memory_pool().used_bytes()
    with PoolPeak() as peak, pytest.MonkeyPatch.context() as mp:
        mp.setattr(condense_mod, "condense_bytes", lambda *a, **k: (asked.append(real(*a, **k)), asked[-1])[1])
        d = condense_cuda(gsrc, gdst, n)
    assert d.C == n and d.m == m
    assert asked[0] == real(n, m, sorted_input=True) and asked[1:] == [real(n, m)], asked
    assert peak.used - base <= max(asked), ((peak.used - base) / m, [x / m for x in asked])
    assert_same_dag(dag_to_host(d), condense(EdgeGraph(n=n, src=src, dst=dst)))
