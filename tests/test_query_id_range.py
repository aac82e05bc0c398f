"""The range check of a one-process CPU query's ids, made by the compiled prefilter's first pass
(which reads every id anyway) instead of a pass of its own: the same answers as ids checked
first, and a bad id refused with ``Index.check_pairs``' own QueryError, before any answer, on
the compiled and on the NumPy prefilter alike."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import BackendError, QueryError
from distgrail.io.graph import EdgeGraph
from distgrail.query import answer, idcheck
from distgrail.query.prefilter_jit import BLOCK_PAIRS, compiled_prefilter_left
from distgrail.query.stats import SearchOptions

COMPILED = SearchOptions(cpu_search="compiled", compiled_min_pairs=1)
NUMPY = SearchOptions(cpu_search="bidirectional")  # (the NumPy prefilter)


def _graph(n=3000, m=9000, seed=4):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = np.where(rng.random(m) < 0.85, np.minimum(src + rng.integers(1, 30, m), n - 1), rng.integers(0, n, m))
    return src, dst  # mostly forward edges, some back ones (cycles)


@pytest.fixture(scope="module")
def built():
    src, dst = _graph()
    idx = distgrail.build_index((src, dst), dims=3, backend="cpu")
    ip, ix = csr_of(EdgeGraph(n=idx.n, src=src, dst=dst))
    return idx, ip, ix


def _old_way(idx, s, t, search, ids=False):
    """The answers of ids checked first (what Index.query did): check_pairs, then the answer."""
    from distgrail.gpu.backend import get_backend

    cs, ct = idx.check_pairs(s, t, narrow=True, ids=ids)
    return idx._query_local(cs, ct, get_backend("cpu"), search)[0]


@pytest.mark.parametrize("search", [COMPILED, NUMPY], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_answers_equal_bfs_and_the_ids_checked_first(built, search, dtype):
    """Random pairs over two blocks and a part (every block's first pass checks its own ids),
    plain and as the columns of one (k, 2) array: Index.query's answers are BFS's and those of
    the ids checked first, and its counts those of the old way."""
    idx, ip, ix = built
    rng = np.random.default_rng(11)
    k = 2 * BLOCK_PAIRS + 777
    pairs = rng.integers(0, idx.n, (k, 2)).astype(dtype)
    for s, t in ((pairs[:, 0].copy(), pairs[:, 1].copy()), (pairs[:, 0], pairs[:, 1])):
        got, stats = idx.query(s, t, backend="cpu", search=search)
        assert got.dtype == bool and got.shape == (k,)
        np.testing.assert_array_equal(got, _old_way(idx, s, t, search))
        some = rng.choice(k, 2000, replace=False)
        want = bfs_reachable(ip, ix, s[some].astype(np.int64), t[some].astype(np.int64))
        assert want.any() and not want.all()
        np.testing.assert_array_equal(got[some], want)
        assert stats.queries == k and stats.reachable == int(got.sum())


def test_node_labelled_index_answers_as_its_ids():
    """An index of node labels: labels mapped to ids, then answered as those ids are."""
    src, dst = _graph(n=500, m=1500, seed=9)
    idx = distgrail.build_index({f"v{i}": [f"v{j}" for j in dst[src == i]] for i in range(500)}, dims=2,
                                backend="cpu")
    assert idx.node_labels is not None
    rng = np.random.default_rng(2)
    s, t = rng.integers(0, 500, 5000), rng.integers(0, 500, 5000)
    ls, lt = np.array([f"v{i}" for i in s]), np.array([f"v{i}" for i in t])
    ids_s, ids_t = idx.check_pairs(ls, lt)
    to_ids = idx.node_labels.to_ids
    ip, ix = csr_of(EdgeGraph(n=idx.n, src=to_ids(np.array([f"v{i}" for i in src]), "sources"),
                              dst=to_ids(np.array([f"v{i}" for i in dst]), "targets")))
    want = bfs_reachable(ip, ix, ids_s, ids_t)
    assert want.any() and not want.all()
    for search in (COMPILED, NUMPY):
        got = idx.query(ls, lt, backend="cpu", search=search)[0]
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, _old_way(idx, ids_s, ids_t, search, ids=True))
    with pytest.raises(QueryError, match="v500"):
        idx.query(np.array(["v1", "v500"]), np.array(["v2", "v3"]), backend="cpu")


def _error(fn):
    with pytest.raises(QueryError) as e:
        fn()
    return str(e.value)


@pytest.mark.parametrize("search", [COMPILED, NUMPY], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_a_bad_id_is_refused_with_check_pairs_error(built, search, dtype):
    """A negative, n, or huge id in either column, in the first or a later block, one bad id or
    several (the first named, sources before targets): Index.query on the CPU raises exactly
    check_pairs' QueryError."""
    idx, _, _ = built
    rng = np.random.default_rng(5)
    k = BLOCK_PAIRS + 5000
    good = rng.integers(0, idx.n, (k, 2)).astype(dtype)
    huge = [2**31 - 1, -2**31] + ([2**62, -2**63] if dtype == np.int64 else [])
    for bad in [-1, idx.n] + huge:
        for col, what in ((0, "sources"), (1, "targets")):
            for at in (0, 321, BLOCK_PAIRS + 17, k - 1):
                p = good.copy()
                p[at, col] = bad
                s, t = p[:, 0].copy(), p[:, 1].copy()
                said = _error(lambda: idx.query(s, t, backend="cpu", search=search))
                assert said == f"{what}[{at}] out of range 0..{idx.n - 1}, got {bad}"
                assert said == _error(lambda: idx.check_pairs(s, t, narrow=True))
    p = good.copy()
    p[BLOCK_PAIRS + 3, 0] = -7  # a later block's bad source, an earlier bad target: the source is named
    p[40, 1] = idx.n
    p[60, 0] = idx.n + 5
    s, t = p[:, 0].copy(), p[:, 1].copy()
    assert _error(lambda: idx.query(s, t, backend="cpu", search=search)) == \
        f"sources[60] out of range 0..{idx.n - 1}, got {idx.n + 5}"


def test_bad_types_and_shapes_are_refused_as_before(built):
    """Float ids, ids of a float column beside a bad integer one (the bad source named first, as
    check_pairs does), unequal or 2-D shapes: the same QueryError through Index.query, and other
    integer types still answered (checked and widened first)."""
    idx, _, _ = built
    s = np.arange(100) % idx.n
    t = s[::-1].copy()
    for a, b in ((s.astype(float), t), (s, t.astype(np.float32)), (s[:50], t), (s.reshape(10, 10), t.reshape(10, 10))):
        want = _error(lambda: idx.check_pairs(a, b, narrow=True))
        for search in (COMPILED, NUMPY):
            assert _error(lambda: idx.query(a, b, backend="cpu", search=search)) == want
    bad = s.copy()
    bad[3] = -1
    assert _error(lambda: idx.query(bad, t.astype(float), backend="cpu")) == \
        f"sources[3] out of range 0..{idx.n - 1}, got -1"
    want = idx.query(s, t, backend="cpu", search=COMPILED)[0]
    for dt in (np.uint16, np.int16, np.uint64, np.dtype(">i8")):
        np.testing.assert_array_equal(idx.query(s.astype(dt), t.astype(dt), backend="cpu", search=COMPILED)[0], want)
        b = s.astype(dt)
        b[9] = idx.n if dt != np.uint16 or idx.n < 2**16 else 0
        assert _error(lambda: idx.query(b, t.astype(dt), backend="cpu")) == \
            f"sources[9] out of range 0..{idx.n - 1}, got {idx.n}"


def test_the_prefilter_checks_what_query_no_longer_does(built, monkeypatch):
    """Index.query on the CPU makes no range pass of its own over good native ids (check_pairs'
    maximum is never taken), so the compiled prefilter, and the NumPy path's check, are what
    refuse a bad id: the answer functions called directly with unchecked ids raise too."""
    idx, _, _ = built
    rng = np.random.default_rng(8)
    s, t = rng.integers(0, idx.n, 70000), rng.integers(0, idx.n, 70000)
    want = idx.query(s, t, backend="cpu", search=COMPILED)[0]

    def no_pass(*a, **k):
        raise AssertionError("a range pass of its own over the ids")

    monkeypatch.setattr(idcheck, "max_parallel", no_pass)
    np.testing.assert_array_equal(idx.query(s, t, backend="cpu", search=COMPILED)[0], want)
    with pytest.raises(AssertionError, match="range pass"):
        idx.check_pairs(s, t)  # (the patch is the one check_pairs' rule takes)
    monkeypatch.undo()
    L = idx.labels("cpu")
    b = s.copy()
    b[66000] = -2
    with pytest.raises(QueryError, match=r"sources\[66000\] out of range"):
        compiled_prefilter_left(L, b, t)
    for search in (COMPILED, NUMPY):
        with pytest.raises(QueryError, match=r"sources\[66000\] out of range"):
            answer.answer_batch_numpy(L, b, t, search=search, checked=False)
    # (ids checked by the caller: the NumPy path trusts them, as it always has)
    assert answer.answer_batch_numpy(L, s, t, search=NUMPY).tolist() == want.tolist()


def test_a_bad_id_comes_before_a_bad_backend_and_a_gpu_is_given_checked_ids(built):
    """A bad id is the error of a batch whatever its backend (before the backend's own error);
    unchecked ids handed to a GPU backend are checked before any work there."""
    idx, _, _ = built
    s, t = np.array([0, -1]), np.array([1, 2])
    assert _error(lambda: idx.query(s, t, backend="nonsense")) == f"sources[1] out of range 0..{idx.n - 1}, got -1"
    with pytest.raises(BackendError):
        idx.query(np.array([0, 1]), t, backend="nonsense")

    class Gpu:  # (refused before its state is asked for: no method of it is called)
        is_gpu = True
        name = "cuda"

    assert _error(lambda: idx._query_local(s, t, Gpu(), checked=False)) == \
        f"sources[1] out of range 0..{idx.n - 1}, got -1"
