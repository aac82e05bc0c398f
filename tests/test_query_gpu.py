"""GPU queries (distgrail/query/answer.py, kernels/query.cu) against the CPU backend and plain BFS.

Indexes are built on the CPU; only the queries run on the GPU. Every test checks that the GPU
answers, per-step counts, reachable count and search rounds equal the CPU backend's with the
forward search (``SearchOptions(cpu_search="forward")``, the twin of the one-warp search; the
round count is compared when no pair was handed to the grid-wide search). The grid-wide
bidirectional search (dg_grid_* in kernels/search.cu) is forced with
``SearchOptions(visit_budget=-1)``: its answers, round count and per-round frontier sizes are
compared with its twin, the bidirectional CPU search.
"""

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.query import answer as gpu_query
from distgrail.query import staging as gpu_staging
from distgrail.query.stats import SearchOptions
from distgrail.bfs import bfs_reachable, csr_of, positive_pairs
from distgrail.io.generate import generate
from conftest import EXPECTED, graph_path, load_pairs

pytestmark = pytest.mark.gpu


#: the CPU backend's forward search, the twin of the one-warp search
FORWARD = SearchOptions(cpu_search="forward")


def same_as_cpu(idx, s, t, search=None):
    a_gpu, st_gpu = idx.query(s, t, backend="gpu", search=search)
    a_cpu, st_cpu = idx.query(s, t, backend="cpu", search=FORWARD)
    assert a_gpu.dtype == np.bool_ and a_gpu.shape == s.shape
    np.testing.assert_array_equal(a_gpu, a_cpu)
    assert st_gpu.steps == st_cpu.steps
    assert st_gpu.reachable == st_cpu.reachable == int(a_cpu.sum())
    if st_gpu.grid_searched == 0:  # else the handed-on pairs count bidirectional rounds
        assert st_gpu.search_rounds == st_cpu.search_rounds
    assert 0 <= st_gpu.grid_searched <= st_gpu.searched
    assert st_gpu.queries == s.size and st_gpu.backend == "gpu"
    return a_gpu, st_gpu


def random_pairs(n, k, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, k), rng.integers(0, n, k)


def reachable_pairs(g, n_sources, per_source, seed):
    """The positive-heavy set: n_sources * per_source pairs, every one reachable."""
    return positive_pairs(g, n_sources * per_source, n_sources, seed)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_graph_pairs(name, data_dir):
    s, t = load_pairs(name)
    g = distgrail.read_graph(graph_path(name))
    idx = distgrail.build_index(g, dims=5, backend="cpu")
    a, st = same_as_cpu(idx, s, t)
    assert int(a.sum()) == EXPECTED[name]
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(a[:300], bfs_reachable(ip, ix, s[:300], t[:300]))


@pytest.mark.parametrize("rule,dims", [("max-level", 1), ("dfs", 2), ("max-level", 9)])
def test_dims_and_rules(rule, dims, data_dir):
    for name in ("kegg_dag_uniq", "ba10k2d", "xmark_dag_uniq"):
        s, t = load_pairs(name)
        idx = distgrail.build_index(graph_path(name), dims=dims, parent_rule=rule, backend="cpu")
        a, _ = same_as_cpu(idx, s, t)
        assert int(a.sum()) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_graph_all_reachable(name, data_dir):
    g = distgrail.read_graph(graph_path(name))
    s, t = reachable_pairs(g, 200, 20, seed=3)
    idx = distgrail.build_index(g, dims=5, backend="cpu")
    a, st = same_as_cpu(idx, s, t)
    assert a.all()
    assert st.steps["search_negative"] == 0 and st.steps["level_filter"] == 0


@pytest.mark.parametrize("kind,n,deg,levels", [
    ("paper", 3000, 8, None), ("paper", 2000, 40, None), ("scale-free", 6000, 4, None),
    ("scale-free", 3000, 12, None), ("layered", 5000, 3, 400), ("layered", 3000, 6, 30),
])
def test_generated(kind, n, deg, levels):
    g = generate(kind, n, deg, seed=7, levels=levels)
    idx = distgrail.build_index(g, dims=3, backend="cpu")
    s, t = random_pairs(g.n, 30000, seed=11)
    a, _ = same_as_cpu(idx, s, t)
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(a[:200], bfs_reachable(ip, ix, s[:200], t[:200]))
    sp, tp = reachable_pairs(g, 100, 30, seed=5)
    ap, _ = same_as_cpu(idx, sp, tp)
    assert ap.all()


@pytest.mark.parametrize("seed", [0, 1])
def test_cycles_self_loops_duplicates(seed):
    rng = np.random.default_rng(seed)
    n = 1500
    src = rng.integers(0, n, 3000)
    dst = rng.integers(0, n, 3000)
    loops = rng.integers(0, n, 50)
    src = np.concatenate([src, loops, src[:200]])
    dst = np.concatenate([dst, loops, dst[:200]])
    g = distgrail.as_graph((src, dst), num_vertices=n + 20)  # 20 isolated vertices
    idx = distgrail.build_index(g, dims=2, backend="cpu")
    s, t = random_pairs(g.n, 20000, seed=seed + 100)
    s = np.concatenate([s, loops, np.arange(n, n + 20)])
    t = np.concatenate([t, loops, np.arange(n, n + 20)])
    a, st = same_as_cpu(idx, s, t)
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(a[:500], bfs_reachable(ip, ix, s[:500], t[:500]))
    assert a[-70:].all()  # u reaches u


def test_streaming_keeps_input_order(monkeypatch, data_dir):
    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    whole, st_whole = idx.query(s, t, backend="gpu")
    monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)  # 15 chunks, last one short
    a, st = same_as_cpu(idx, s, t)
    np.testing.assert_array_equal(a, whole)
    assert st.steps == st_whole.steps
    rev, _ = idx.query(s[::-1], t[::-1], backend="gpu")
    np.testing.assert_array_equal(rev, whole[::-1])


@pytest.mark.parametrize("piece,slots", [(1000, 2), (2500, 4), (1 << 20, 4)])
def test_staging_ring_strided_and_pinned(monkeypatch, data_dir, piece, slots):
    """Columns of a (k, 2) array (copied up as rows, split on the GPU) and two arrays of their
    own (copied column by column) through a ring of small slots, pieces not dividing the chunk;
    pinned contiguous pairs uploaded in place, pinned rows staged: the answers of every way equal
    the whole batch's."""
    import cupyx

    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    whole, st_whole = idx.query(s, t, backend="gpu")
    monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)
    monkeypatch.setattr(gpu_staging, "STAGE_PAIRS", piece)
    monkeypatch.setattr(gpu_staging, "STAGE_SLOTS", slots)
    monkeypatch.setattr(gpu_staging, "STAGE_COPY_BYTES", 1024)  # several host threads fill each slot
    pairs = np.stack([s, t], axis=1)
    a, st = idx.query(pairs[:, 0], pairs[:, 1], backend="gpu")
    np.testing.assert_array_equal(a, whole)
    assert st.steps == st_whole.steps
    np.testing.assert_array_equal(idx.query(s.copy(), t[::-1].copy()[::-1], backend="gpu")[0], whole)
    pinned = cupyx.empty_pinned(pairs.shape, np.int64)
    pinned[...] = pairs
    np.testing.assert_array_equal(idx.query(pinned[:, 0], pinned[:, 1], backend="gpu")[0], whole)
    ps, pt = cupyx.empty_pinned(s.size, np.int64), cupyx.empty_pinned(t.size, np.int64)
    ps[...], pt[...] = s, t
    np.testing.assert_array_equal(idx.query(ps, pt, backend="gpu")[0], whole)
    p32 = pairs.astype(np.int32)  # int32 ids (a server's narrowed body): staged as they are
    np.testing.assert_array_equal(idx.query(p32[:, 0], p32[:, 1], backend="gpu")[0], whole)
    np.testing.assert_array_equal(idx.query(p32[:50, 0].copy(), p32[:50, 1].copy(), backend="gpu")[0], whole[:50])
    q32 = cupyx.empty_pinned(s.size, np.int32)  # page-locked int32: staged too, not uploaded in place
    q32[...] = s
    np.testing.assert_array_equal(idx.query(q32, t.astype(np.int32), backend="gpu")[0], whole)


def test_answers_straight_into_a_page_locked_array(monkeypatch, data_dir):
    """A batch answered into a page-locked array (``staging.pinned_answers``, what the ``query``
    command makes beside the read) has its answers copied down into it directly: the same
    answers and counts as into a new array, from int64 rows, int32 rows and pinned columns, over
    many chunks, with no pinned answer slot asked for."""
    import cupyx

    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    be = get_backend("gpu")
    whole, st_whole = idx.query(s, t, backend="gpu")
    monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)
    monkeypatch.setattr(gpu_staging, "DIRECT_PAIRS", 1000)
    pairs = np.stack([s, t], axis=1)
    p32 = pairs.astype(np.int32)
    ps, pt = cupyx.empty_pinned(s.size, np.int64), cupyx.empty_pinned(t.size, np.int64)
    ps[...], pt[...] = s, t
    asked = []
    real = cupyx.empty_pinned
    monkeypatch.setattr(cupyx, "empty_pinned", lambda shape, dtype=np.float64: asked.append(np.dtype(dtype)) or real(shape, dtype))
    for src, dst in ((pairs[:, 0], pairs[:, 1]), (p32[:, 0], p32[:, 1]), (ps, pt)):
        out, release = gpu_staging.pinned_answers(s.size)
        assert gpu_staging._page_locked(out)
        asked.clear()
        try:
            ans, st = idx._query_local(src, dst, be, out=out)
        finally:
            release()
        assert not gpu_staging._page_locked(out)
        assert ans is out and np.uint8 not in asked  # no answer slots
        np.testing.assert_array_equal(ans, whole)
        assert st.steps == st_whole.steps and st.reachable == st_whole.reachable
    with pytest.raises(Exception, match="out must be"):
        idx._query_local(s, t, be, out=np.empty(s.size - 1, bool))


def test_a_scratch_made_ahead_is_the_one_the_batch_borrows(monkeypatch, data_dir):
    """``answer.ready_scratch`` leaves one scratch in the pool with room for the batch's chunks
    and its streams made; the batch then borrows that one (no second is made) and answers as
    a fresh index does."""
    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    be = get_backend("gpu")
    monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)
    monkeypatch.setattr(gpu_staging, "DIRECT_PAIRS", 1000)
    _, pool = idx._state(be)
    gpu_query.ready_scratch(pool, 7001)
    (made,) = pool.idle()
    assert made.size >= 7001 and made.streams is not None
    ans, _ = idx._query_local(s, t, be)
    assert pool.idle() == [made]
    np.testing.assert_array_equal(ans, idx.query(s, t, backend="cpu", search=FORWARD)[0])


def test_query_command_answers_a_large_npy_into_page_locked_answers(monkeypatch, tmp_path, data_dir):
    """``distgrail query`` of a large ``.npy`` (int64 and int32 rows) on a GPU: the answers come
    down into the page-locked array made beside the read, and equal the CPU backend's."""
    from distgrail.cli import main

    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    idx.save(tmp_path / "i.h5")
    want = idx.query(s, t, backend="cpu")[0]
    monkeypatch.setattr(gpu_staging, "DIRECT_PAIRS", 1000)  # "large" from 16,000 bytes of pairs
    monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)
    made = []
    real = gpu_staging.pinned_answers
    monkeypatch.setattr(gpu_staging, "pinned_answers", lambda n: made.append(real(n)) or made[-1])
    for dt in (np.int64, np.int32):
        np.save(tmp_path / "p.npy", np.stack([s, t], axis=1).astype(dt))
        made.clear()
        assert main(["query", str(tmp_path / "i.h5"), str(tmp_path / "p.npy"), "-o", str(tmp_path / "a.npy"),
                     "--backend", "gpu", "--quiet"]) == 0
        assert len(made) == 1 and made[0][0].size == s.size
        assert not gpu_staging._page_locked(made[0][0])  # unlocked once written
        np.testing.assert_array_equal(made[0][0], want)  # the array the answers came down into
        np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), want)


@pytest.mark.parametrize("way", ["small", "columns", "rows", "int32", "pinned"])
@pytest.mark.parametrize("bad", [-1, "n", 2**32 + 5])
def test_bad_ids_refused_on_every_path(monkeypatch, data_dir, way, bad):
    """Ids out of range reach no kernel on any GPU path (small batches, staged columns and rows,
    int32, page-locked pairs uploaded as they are; staged ids are narrowed to int32, where
    2^32 + 5 would pass as 5): the same QueryError as the CPU backend's, naming the first bad id,
    and the index answers right afterwards."""
    import cupyx

    s, t = load_pairs("kegg_dag_uniq")
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    whole, _ = idx.query(s, t, backend="gpu")
    if way != "small":
        monkeypatch.setattr(gpu_staging, "DIRECT_PAIRS", 1000)
        monkeypatch.setattr(gpu_staging, "CHUNK_PAIRS", 7001)
        monkeypatch.setattr(gpu_staging, "STAGE_PAIRS", 2500)
    pairs = np.stack([s, t], axis=1)
    value = idx.n if bad == "n" else bad
    if way == "int32" and not -2**31 <= value < 2**31:
        pytest.skip("not an int32 value")
    pairs[40_001, 1] = value
    pairs[50_000, 0] = value
    if way == "small":
        qs, qt = pairs[39_000:41_000, 0].copy(), pairs[39_000:41_000, 1].copy()
        first = "targets[1001]"
    elif way == "rows":
        qs, qt = pairs[:, 0], pairs[:, 1]
        first = "sources[50000]"  # (one pass over the rows: sources are named first)
    elif way == "pinned":
        qs, qt = cupyx.empty_pinned(s.size, np.int64), cupyx.empty_pinned(t.size, np.int64)
        qs[...], qt[...] = pairs[:, 0], pairs[:, 1]
        first = "sources[50000]"
    else:
        dt = np.int32 if way == "int32" else np.int64
        qs, qt = pairs[:, 0].astype(dt), pairs[:, 1].astype(dt)
        first = "sources[50000]"
    with pytest.raises(distgrail.QueryError) as cpu_err:
        idx.query(qs, qt, backend="cpu")
    with pytest.raises(distgrail.QueryError) as gpu_err:
        idx.query(qs, qt, backend="gpu")
    assert str(gpu_err.value) == str(cpu_err.value) and first in str(gpu_err.value)
    np.testing.assert_array_equal(idx.query(s, t, backend="gpu")[0], whole)


def test_queue_overflow_grid_search(monkeypatch, data_dir):
    monkeypatch.setattr(gpu_query, "QUEUE_CAP", 3)  # most searches overflow into the grid-wide search
    for name in ("kegg_dag_uniq", "nasa_dag_uniq"):
        s, t = load_pairs(name)
        idx = distgrail.build_index(graph_path(name), dims=2, backend="cpu")
        a, _ = same_as_cpu(idx, s, t)
        assert int(a.sum()) == EXPECTED[name]
    g = generate("paper", 2000, 30, seed=2)
    idx = distgrail.build_index(g, dims=2, backend="cpu")
    same_as_cpu(idx, *random_pairs(g.n, 20000, seed=4))


def grid_graphs():
    from test_query_grid import deep_graph
    from test_query_steps import GRAPHS

    return {"paper-dense": GRAPHS["paper-dense"], "cycles": GRAPHS["cycles"], "deep": deep_graph(),
            "paper-20k-d40": generate("paper", 20_000, 40, seed=3)}


GRID_GRAPHS = grid_graphs()


@pytest.mark.parametrize("name", sorted(GRID_GRAPHS))
@pytest.mark.parametrize("K", [0, 64])
@pytest.mark.parametrize("budget", ["tiny", "small", "default"])
def test_grid_search_forced(name, K, budget, monkeypatch):
    """Every searched pair goes to the grid-wide search; groups of one query (tiny), groups that
    overflow their lists of 2 C entries and are split (small), one big group (default). Answers,
    step counts, rounds and the frontier size after every round equal the NumPy twin's
    (bidirectional_search_numpy)."""
    import cupy as cp
    from distgrail.query import grid
    from distgrail.query.prefilter import prefilter
    from distgrail.query.bidir import bidirectional_search_numpy
    from distgrail.query.stats import UNDECIDED
    from test_query_steps import indexed

    g = GRID_GRAPHS[name]
    idx = indexed(g, K, dims=3)
    C = idx.C
    hand_on_all = SearchOptions(visit_budget=-1)
    nbytes = {"tiny": 1, "small": 32 * C + 40 * (8 * grid.bitmap_words(C) + 65), "default": grid.GRID_BYTES}[budget]
    monkeypatch.setattr(grid, "GRID_BYTES", nbytes)
    monkeypatch.setattr(grid, "GRID_MAX_BYTES", nbytes)  # no growth into free memory: the budget is forced
    s, t = random_pairs(g.n, 6000, seed=K + 1)
    ps, pt = reachable_pairs(g, 60, 20, seed=2)
    s, t = np.concatenate([s, ps]), np.concatenate([t, pt])
    a, st = same_as_cpu(idx, s, t, hand_on_all)
    ip, ix = csr_of(g)
    np.testing.assert_array_equal(a[:300], bfs_reachable(ip, ix, s[:300], t[:300]))
    assert a[-ps.size:].all() and st.searched > 0 and st.grid_searched == st.searched
    bidir = SearchOptions(cpu_search="bidirectional")
    assert idx.query(s, t, backend="cpu", search=bidir)[1].search_rounds == st.search_rounds
    # the frontiers round by round, against the twin
    be = get_backend("gpu")
    Lg, Lc = idx.labels(be), idx.labels("cpu")
    with be.on_device():
        ctx = gpu_query.QueryScratch(be, Lg)
        assert ctx.hands_on(-1)
        ctx.buffers(s.size)
        ctx.counters.fill(0)
        stream = cp.cuda.get_current_stream()
        dans = cp.zeros(s.size, dtype=cp.uint8)
        trace = []
        assert ctx.launch(cp.asarray(s), cp.asarray(t), dans, s.size, stream, -1, trace=trace) == st.searched
    cu, cv = Lc.comp[s], Lc.comp[t]
    ans, code = prefilter(Lc, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    sizes = []
    found, rounds = bidirectional_search_numpy(Lc, cu[und], cv[und], sizes)
    ans[und] = found
    np.testing.assert_array_equal(dans.get().astype(bool), ans)
    assert trace == sizes and len(trace) == rounds == st.search_rounds
    if budget == "tiny":
        assert ctx.grid.group == 1 and ctx.grid.cap == 2 * C
    if budget == "small":
        assert ctx.grid.cap == 2 * C


@pytest.mark.parametrize("K", [64, 200])
def test_real_graphs_with_supports(K, data_dir):
    """The support steps (prefilter and inside the search) on the GPU: same counts as the CPU."""
    from test_query_steps import indexed

    for name in ("kegg_dag_uniq", "xmark_dag_uniq", "amaze_dag_uniq"):
        s, t = load_pairs(name)
        idx = indexed(distgrail.read_graph(graph_path(name)), K, dims=5)
        a, st = same_as_cpu(idx, s, t)
        assert int(a.sum()) == EXPECTED[name] and st.steps["support_positive"] > 0
    g = generate("paper", 20_000, 40, seed=3)
    idx = indexed(g, K, dims=5)
    a, st = same_as_cpu(idx, *random_pairs(g.n, 50_000, seed=6))
    assert st.steps["support_positive"] > 0 and st.steps["support_negative"] > 0
    ap, _ = same_as_cpu(idx, *reachable_pairs(g, 100, 30, seed=5))
    assert ap.all()


def test_small_batches_and_repeats(data_dir):
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    a, st = idx.query(np.array([], dtype=np.int64), np.array([], dtype=np.int64), backend="gpu")
    assert a.shape == (0,) and st.queries == 0
    s, t = load_pairs("kegg_dag_uniq")
    for k in (1, 31, 33, 1000):
        same_as_cpu(idx, s[:k], t[:k])
    first, _ = idx.query(s, t, backend="gpu")
    again, _ = idx.query(s, t, backend="gpu")  # scratch left clean by the first batch
    np.testing.assert_array_equal(first, again)
    assert idx.reachable(int(s[0]), int(t[0]), backend="gpu") == bool(first[0])


def test_minimal_scratch(monkeypatch, data_dir):
    """One block of search warps and grid-wide groups of one query still answer everything."""
    from distgrail.query import grid

    monkeypatch.setattr(gpu_query, "QUEUE_CAP", 5)
    monkeypatch.setattr(gpu_query, "SCRATCH_BYTES", 1)
    monkeypatch.setattr(grid, "GRID_BYTES", 1)
    monkeypatch.setattr(grid, "GRID_MAX_BYTES", 1)
    s, t = load_pairs("xmark_dag_uniq")
    idx = distgrail.build_index(graph_path("xmark_dag_uniq"), dims=2, backend="cpu")
    a, _ = same_as_cpu(idx, s, t)
    assert int(a.sum()) == EXPECTED["xmark_dag_uniq"]
    (ctx,) = idx._state(get_backend("gpu"))[1].idle()  # the one scratch the batches borrowed in turn
    assert ctx.warps == 8 and ctx.grid.group == 1 and ctx.grid.cap == 2 * idx.C
