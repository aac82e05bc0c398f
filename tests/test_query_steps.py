"""Every query step exact against BFS, with support masks (K = 0, 1, 64, 200) and without."""

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.gpu.backend import get_backend
from distgrail.index import Index, assemble
from distgrail.io.generate import generate
from distgrail.query.answer import answer_batch_numpy, record_width, records, records_on_device
from distgrail.query.prefilter import prefilter
from distgrail.query.search import guided_search_numpy
from distgrail.query.stats import (LEVEL, POSITIVE, SAME, SEARCH_NEG, SEARCH_POS, STEPS, SUPPORT_NEG,
                                   SUPPORT_POS, UNDECIDED, QueryStats)
from distgrail.stages.condense import condense
from distgrail.stages.labeling import build_forest, label_dimensions
from distgrail.stages.supports import build_supports


CPU = get_backend("cpu")


def indexed(g, K, dims=3, seed=0):
    """A one-process build with phase 5 (the build.py wiring of --supports is the integrator's)."""
    dag = condense(g)
    forest = build_forest(dag, seed, "max-level", CPU)
    post0, iv = label_dimensions(dag, forest, range(dims), seed, CPU)
    sup = None if K is None else build_supports(dag, K, seed, CPU)
    return assemble(g, dag, forest, post0, iv, dims, seed, "max-level", supports=sup)


def graphs():
    rng = np.random.default_rng(11)
    n = 800
    src, dst = rng.integers(0, n, 1200), rng.integers(0, n, 1200)
    loops = rng.integers(0, n, 30)
    cyc = distgrail.as_graph((np.concatenate([src, loops, src[:100]]), np.concatenate([dst, loops, dst[:100]])),
                             num_vertices=n + 10)
    return {
        "paper-dense": generate("paper", 1500, 40, seed=2),
        "paper": generate("paper", 3000, 8, seed=1),
        "scale-free": generate("scale-free", 3000, 4, seed=3),
        "layered": generate("layered", 2000, 3, seed=4, levels=60),
        "cycles": cyc,
        "chain": distgrail.as_graph((np.arange(299), np.arange(1, 300))),
    }


GRAPHS = graphs()


def pairs(g, k, seed):
    from distgrail.bfs import positive_pairs

    rng = np.random.default_rng(seed)
    s, t = rng.integers(0, g.n, k), rng.integers(0, g.n, k)
    ps, pt = positive_pairs(g, k // 2, 100, seed)
    return np.concatenate([s, ps, [0, g.n - 1]]), np.concatenate([t, pt, [0, g.n - 1]])


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_every_step_exact(name, K):
    g = GRAPHS[name]
    idx = indexed(g, K)
    assert idx.meta["supports"] == idx.supports == min(K, idx.C)
    s, t = pairs(g, 1500, seed=K + 1)
    truth = bfs_reachable(*csr_of(g), s, t)
    L = idx.labels("cpu")
    cu, cv = L.comp[s], L.comp[t]
    ans, code = prefilter(L, cu, cv)
    und = np.flatnonzero(code == UNDECIDED)
    found, _ = guided_search_numpy(L, cu[und], cv[und])
    ans[und] = found
    code[und] = np.where(found, SEARCH_POS, SEARCH_NEG)
    np.testing.assert_array_equal(ans, truth)
    for c in range(1, len(STEPS) + 1):  # every step says only what is true
        sel = code == c
        assert (truth[sel] == (c in POSITIVE)).all(), STEPS[c - 1]
    a, st = idx.query(s, t, backend="cpu")
    np.testing.assert_array_equal(a, truth)
    assert sum(st.steps.values()) == s.size and st.reachable == int(truth.sum())
    assert st.steps["same_component"] == int((code == SAME).sum()) and st.steps["level_filter"] == int((code == LEVEL).sum())
    if K == 0:
        assert st.steps["support_positive"] == st.steps["support_negative"] == 0
    elif name in ("paper-dense", "layered") and K >= 64:  # the masks do decide pairs there
        assert st.steps["support_positive"] > 0 and st.steps["support_negative"] + st.steps["support_positive"] > 50
    assert (code == SUPPORT_POS).sum() == st.steps["support_positive"]
    assert (code == SUPPORT_NEG).sum() == st.steps["support_negative"]


@pytest.mark.parametrize("name", ["paper-dense", "cycles", "layered"])
def test_index_without_supports_answers_the_same(name, tmp_path):
    g = GRAPHS[name]
    with_k = indexed(g, 64)
    plain = indexed(g, None)
    assert plain.supports == 0 and "supports/out" not in plain.arrays
    old = Index(with_k.meta, {k: v for k, v in with_k.arrays.items() if not k.startswith("supports/")})
    s, t = pairs(g, 2000, seed=3)
    a, st = with_k.query(s, t, backend="cpu")
    for other in (plain, old):
        b, st2 = other.query(s, t, backend="cpu")
        np.testing.assert_array_equal(a, b)
        assert st2.steps["support_positive"] == st2.steps["support_negative"] == 0
        assert st2.reachable == st.reachable
    # an index file of the current schema (no support datasets) opens and answers exactly
    plain.save(tmp_path / "plain.h5")
    c, _ = distgrail.open_index(tmp_path / "plain.h5").query(s, t, backend="cpu")
    np.testing.assert_array_equal(a, c)


def test_supports_shrink_the_search():
    g = GRAPHS["paper-dense"]
    s, t = pairs(g, 3000, seed=9)
    _, st0 = indexed(g, 0).query(s, t, backend="cpu")
    _, st64 = indexed(g, 64).query(s, t, backend="cpu")
    assert st64.searched < st0.searched / 2, (st0.steps, st64.steps)


def test_assemble_checks_mask_shapes():
    g = GRAPHS["chain"]
    dag = condense(g)
    forest = build_forest(dag, 0, "max-level", CPU)
    post0, iv = label_dimensions(dag, forest, range(1), 0, CPU)
    ids, out, inn = build_supports(dag, 70, 0, CPU)
    with pytest.raises(distgrail.errors.DistGrailError, match="supports: in masks must be uint64 of shape"):
        assemble(g, dag, forest, post0, iv, 1, 0, "max-level", supports=(ids, out, inn[:, :1]))
    with pytest.raises(distgrail.errors.DistGrailError, match="supports: out masks must be uint64"):
        assemble(g, dag, forest, post0, iv, 1, 0, "max-level", supports=(ids, out.astype(np.int64), inn))
    idx = indexed(g, 70)
    assert idx.arrays["supports/ids"].dtype == np.int32 and idx.arrays["supports/out"].shape == (300, 2)


def test_step_order_and_defines():
    assert STEPS == ("same_component", "level_filter", "support_positive", "support_negative", "interval_filter",
                     "tree_cut", "search_positive", "search_negative")
    from distgrail.gpu.kernels import defines_header

    head = defines_header("search")
    assert "#define DG_STEP_SUPPORT_POSITIVE (3)" in head and "#define DG_MAX_ROUNDS (9)" in head

    st = QueryStats()
    st.add_codes(np.array([1, 3, 3, 8], dtype=np.int8))
    assert st.steps["support_positive"] == 2 and st.searched == 1


def test_gpu_records_layout():
    """The packed records the query kernels read (kernels/query.cuh), checked on the CPU."""
    g = GRAPHS["paper"]
    idx = indexed(g, 130, dims=5)
    L = idx.labels("cpu")
    rec = records(L.level, L.start0, L.post0, L.lo, L.hi, L.out.T, L.inn.T)
    W = 3
    assert rec.dtype == np.int32 and rec.shape == (idx.C, record_width(5, W)) and rec.shape[1] % 4 == 0
    np.testing.assert_array_equal(rec[:, 0], L.level)
    np.testing.assert_array_equal(rec[:, 1], L.start0)
    np.testing.assert_array_equal(rec[:, 2], L.post0)
    words = np.ascontiguousarray(rec[:, 4:4 + 4 * W]).view(np.uint64)
    np.testing.assert_array_equal(words[:, :W], idx.arrays["supports/out"])
    np.testing.assert_array_equal(words[:, W:], idx.arrays["supports/in"])
    B = 4 + 4 * W
    np.testing.assert_array_equal(rec[:, B:B + 10:2], L.lo.T)
    np.testing.assert_array_equal(rec[:, B + 1:B + 10:2], L.hi.T)
    assert record_width(5, 0) == 16 and record_width(5, 1) == 20


class _HostBackend:
    """The parts of a Backend that records_on_device uses, on NumPy: the packing code is
    array-module generic, so its CPU run checks the block arithmetic."""

    xp = np

    @staticmethod
    def asarray(a):
        return np.asarray(a)

    @staticmethod
    def on_device():
        import contextlib

        return contextlib.nullcontext()


def _records_inputs(idx):
    a = idx.arrays
    K = idx.supports
    out = a["supports/out"] if K else np.zeros((idx.C, 0), np.uint64)
    inn = a["supports/in"] if K else np.zeros((idx.C, 0), np.uint64)
    return a["dag/level"], a["labels/dt_post0"], a["forest/subtree_size"], a["labels/intervals"], out, inn


@pytest.mark.parametrize("K", [0, 130])
@pytest.mark.parametrize("block", [1, 7, 1 << 23])
def test_records_packed_by_blocks_are_the_host_records(K, block):
    """records_on_device (blocks of components, start0 derived from the subtree sizes) gives the
    bytes of records(), its NumPy twin, for blocks that divide C, do not, and exceed it."""
    idx = indexed(GRAPHS["paper"], K, dims=5)
    L = idx.labels("cpu")
    want = records(L.level, L.start0, L.post0, L.lo, L.hi, L.out.T, L.inn.T)
    got = records_on_device(_HostBackend, *_records_inputs(idx), block=block)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("block", [5, 1 << 23])
def test_gpu_records_packed_on_the_device_bit_for_bit(block):
    be = get_backend("gpu")
    idx = indexed(GRAPHS["paper"], 130, dims=5)
    L = idx.labels("cpu")
    want = records(L.level, L.start0, L.post0, L.lo, L.hi, L.out.T, L.inn.T)
    got = be.to_host(records_on_device(be, *_records_inputs(idx), block=block))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(be.to_host(idx.labels("gpu").rec), want)


def test_answer_batch_stats():
    g = GRAPHS["scale-free"]
    idx = indexed(g, 64)
    s, t = pairs(g, 500, seed=1)
    st = QueryStats()
    a = answer_batch_numpy(idx.labels("cpu"), s, t, st)
    assert st.queries == s.size and st.reachable == int(a.sum()) and st.search_rounds >= 1


def test_the_first_query_times_the_index_upload_apart():
    """One process: the first batch on an index makes its query state (``prepare_seconds`` > 0,
    left out of ``seconds``), the next finds it made (0); the JSON and the summary say so."""
    import distgrail

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=5, backend="cpu")
    _, first = idx.query([0, 1], [1, 0], backend="cpu")
    _, again = idx.query([0, 1], [1, 0], backend="cpu")
    assert first.prepare_seconds > 0 and again.prepare_seconds == 0 and again.seconds > 0
    assert first.as_dict()["prepare_seconds"] == first.prepare_seconds and "prepare" in first.summary()
    assert "prepare" not in again.summary()
