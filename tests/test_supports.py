"""Phase 5 (distgrail/stages/supports.py): the support choice and the NumPy twin of the mask
sweeps against a brute-force reachability closure."""

import types

import numpy as np
import pytest

import distgrail
from distgrail.errors import BackendError, DistGrailError
from distgrail.hashing import hash3
from distgrail.io.generate import generate
from distgrail.stages.condense import condense
from distgrail.constants import SWEEP_HUB_EDGES
from distgrail.stages.support_schedule import (DESC_FIELDS, FIELDS, IN, IN_HUB, OUT, OUT_HUB, RUN, expand_schedule,
                                              group_size, hub_capacity, hub_rows_numpy, hubs_from_buffer,
                                              schedule_descriptors, step_groups, support_schedule)
from distgrail.stages.supports import (STREAM_SUPPORT, build_supports, choose_supports, choose_supports_numpy,
                                       pick_per_slice, support_masks, support_masks_numpy, words)
from distgrail.gpu.backend import get_backend
from conftest import closure


def bits(mask, K):
    """(C, K) bool matrix of a (C, W) uint64 mask."""
    j = np.arange(K)
    return ((mask[:, j // 64] >> (j % 64).astype(np.uint64)) & np.uint64(1)).astype(bool)


def dag_closure(dag):
    src = np.repeat(np.arange(dag.C), np.diff(dag.indptr))
    return closure(dag.C, src, dag.indices)


def graphs():
    rng = np.random.default_rng(5)
    n = 300
    cyc = distgrail.as_graph((np.concatenate([rng.integers(0, n, 700), [3, 7]]),
                              np.concatenate([rng.integers(0, n, 700), [3, 7]])), num_vertices=n + 5)
    chain = distgrail.as_graph((np.arange(199), np.arange(1, 200)))
    return {
        "paper-dense": generate("paper", 400, 40, seed=3),
        "scale-free": generate("scale-free", 500, 4, seed=1),
        "layered": generate("layered", 400, 3, seed=2, levels=30),
        "cycles-loops-isolated": cyc,
        "deep-chain": chain,
        "one-scc": distgrail.as_graph((np.arange(50), (np.arange(50) + 1) % 50)),
    }


GRAPHS = graphs()


def hub_graph(k: int = SWEEP_HUB_EDGES + 104):
    """A DAG with hub rows on both CSRs: vertex 0 has k + 1 children (1..k and k + 3), vertex
    k + 1 has k parents (1..k), then a short chain k + 1 -> k + 2 -> k + 3, and a few more edges;
    k + 4 and k + 5 are sources with children too, so the row units of the hub's level cover it
    (and must skip it)."""
    rng = np.random.default_rng(11)
    mid = np.arange(1, k + 1)
    src = np.concatenate([np.zeros(k + 1, np.int64), mid, [k + 1, k + 2, k + 4, k + 4, k + 5],
                          rng.integers(1, k // 2, 300)])
    dst = np.concatenate([mid, [k + 3], np.full(k, k + 1), [k + 2, k + 3, 5, 9, 7], rng.integers(k // 2, k + 1, 300)])
    return distgrail.as_graph((src, dst), num_vertices=k + 6)


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_masks_equal_brute_force(name, K):
    dag = condense(GRAPHS[name])
    ids = choose_supports(dag, K, seed=4)
    assert ids.size == min(K, dag.C) and np.unique(ids).size == ids.size
    out, inn = support_masks_numpy(dag, ids)
    k = ids.size
    assert out.dtype == inn.dtype == np.uint64 and out.shape == inn.shape == (dag.C, words(k))
    reach = dag_closure(dag)  # reach[a, b]: a ->* b (a included)
    np.testing.assert_array_equal(bits(out, k), reach[:, ids])
    np.testing.assert_array_equal(bits(inn, k), reach[ids, :].T)
    if out.shape[1]:  # no stray bits above K
        tail = k % 64
        if tail:
            assert not (out[:, -1] >> np.uint64(tail)).any() and not (inn[:, -1] >> np.uint64(tail)).any()


@pytest.mark.parametrize("name", ["paper-dense", "layered", "scale-free"])
def test_blocks_side_by_side_equal_whole(name):
    dag = condense(GRAPHS[name])
    ids = choose_supports(dag, 200, seed=0)
    whole = support_masks_numpy(dag, ids)
    K = ids.size
    assert K > 128
    for cuts in ([0, 64, K], [0, 128, K], [0, 64, 128, K], [0, K]):
        parts = [support_masks_numpy(dag, ids, block=(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]
        for i in (0, 1):
            np.testing.assert_array_equal(np.concatenate([p[i] for p in parts], axis=1), whole[i])


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_one_side_alone_is_that_side_of_both(name):
    """``sides=("out",)`` / ``("in",)``: the twin and the CPU backend's sweep give that side's masks,
    the other side none ((C, 0)), for a block too; anything else is refused."""
    from distgrail.stages.supports import SIDES, support_masks_cpu

    dag = condense(GRAPHS[name])
    ids = choose_supports(dag, 130, seed=5)
    for block in (None, (64, ids.size)) if ids.size > 64 else (None,):
        whole = support_masks_numpy(dag, ids, block=block)
        for k, side in enumerate(SIDES):
            for fn in (support_masks_numpy, support_masks_cpu):
                got = fn(dag, ids, block=block, sides=(side,))
                np.testing.assert_array_equal(got[k], whole[k])
                assert got[1 - k].shape == (dag.C, 0) and got[1 - k].dtype == np.uint64
    for bad in ((), ("in", "out"), ("up",), "out"):
        with pytest.raises(DistGrailError, match="support mask sides"):
            support_masks_numpy(dag, ids, sides=bad)


def test_without_reverse_csr_same_masks():
    """MPI ranks get the DAG without its reverse CSR; the twin rebuilds it."""
    import dataclasses

    dag = condense(GRAPHS["paper-dense"])
    ids = choose_supports(dag, 100)
    bare = dataclasses.replace(dag, rindptr=None, rindices=None)
    for a, b in zip(support_masks_numpy(dag, ids), support_masks_numpy(bare, ids)):
        np.testing.assert_array_equal(a, b)


def test_choice_rule_and_determinism():
    dag = condense(GRAPHS["scale-free"])
    K = 37
    ids = choose_supports(dag, K, seed=9)
    np.testing.assert_array_equal(ids, choose_supports(dag, K, seed=9))
    assert not np.array_equal(ids, choose_supports(dag, K, seed=10)) or dag.C < 2 * K
    C = dag.C
    score = (np.bincount(dag.indices, minlength=C) + 1) * (np.diff(dag.indptr) + 1)
    tie = hash3(9, STREAM_SUPPORT, np.arange(C))
    for j, s in enumerate(ids.tolist()):  # support j: best of slice j, by score, hash, id
        a, b = j * C // K, (j + 1) * C // K
        assert a <= s < b
        best = max(range(a, b), key=lambda x: (int(score[x]), -int(tie[x]), -x))
        assert s == best
    assert choose_supports(dag, 10**9).size == C  # capped at C
    assert choose_supports(dag, 0).size == 0


def test_bad_arguments():
    dag = condense(GRAPHS["layered"])
    for K in (-1, 2.5, True, "64"):
        with pytest.raises(DistGrailError, match="supports must be an integer >= 0"):
            choose_supports(dag, K)
    ids = choose_supports(dag, 130)
    for block in ((1, 64), (64, 200), (-64, 10), (70, 80)):
        with pytest.raises(DistGrailError, match="support block"):
            support_masks_numpy(dag, ids, block=block)


def test_build_supports_host_arrays():
    dag = condense(GRAPHS["paper-dense"])
    ids, out, inn = build_supports(dag, 64, 1, get_backend("cpu"))
    o2, i2 = support_masks(get_backend("cpu"), dag, ids)
    np.testing.assert_array_equal(out, o2)
    np.testing.assert_array_equal(inn, i2)
    assert isinstance(out, np.ndarray) and ids.dtype == np.int32


# -- the O(C) choice against the former lexsort rule -------------------------------------------

def lexsort_rule(dag, K, seed):
    """The rule as first written (a 4-key lexsort over all components): the reference."""
    C = dag.C
    K = min(K, C)
    outdeg = np.diff(dag.indptr).astype(np.uint64)
    indeg = np.bincount(dag.indices, minlength=C).astype(np.uint64)
    score = (indeg + np.uint64(1)) * (outdeg + np.uint64(1))
    tie = hash3(seed, STREAM_SUPPORT, np.arange(C, dtype=np.uint64))
    b = (np.arange(K + 1, dtype=np.int64) * C) // K
    sl = np.repeat(np.arange(K), np.diff(b))
    order = np.lexsort((np.arange(C), tie, ~score, sl))
    return order[b[:-1]]


def more_graphs():
    out = dict(GRAPHS)
    for seed in range(4):
        out[f"paper-{seed}"] = generate("paper", 300 + 200 * seed, 3 + 7 * seed, seed=seed)
        out[f"scale-free-{seed}"] = generate("scale-free", 800, 2 + seed, seed=seed)
    out["layered-deep"] = generate("layered", 2000, 2, seed=5, levels=400)
    out["one-vertex"] = distgrail.as_graph((np.zeros(0, np.int64), np.zeros(0, np.int64)), num_vertices=1)
    return out


@pytest.mark.parametrize("name", sorted(more_graphs()))
def test_linear_choice_equals_lexsort_rule(name):
    dag = condense(more_graphs()[name])
    for K in (1, 2, 7, 64, 200, dag.C, dag.C + 5):
        for seed in (0, 3):
            want = lexsort_rule(dag, K, seed) if dag.C else np.zeros(0, np.int64)
            got = choose_supports(dag, K, seed)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(choose_supports_numpy(dag, min(K, dag.C), seed), want) if dag.C else None


def test_choice_without_reverse_csr_counts_in_degrees():
    import dataclasses

    dag = condense(GRAPHS["scale-free"])
    bare = dataclasses.replace(dag, rindptr=None, rindices=None)
    np.testing.assert_array_equal(choose_supports(bare, 50, 1), lexsort_rule(dag, 50, 1))


def test_pick_per_slice_ties_by_hash_then_id():
    """With many equal scores and equal hashes (not produced by hash3, but the rule says what to
    do), the smallest hash and then the smallest index win, per slice."""
    rng = np.random.default_rng(3)
    for C, K in ((1, 1), (10, 3), (1000, 7), (1000, 1000), (5000, 64)):
        for _ in range(5):
            score = rng.integers(0, 3, C).astype(np.uint64)
            tie = rng.integers(0, 3, C).astype(np.uint64)
            tie[rng.random(C) < 0.1] = np.iinfo(np.uint64).max
            got = pick_per_slice(score, tie, K)
            b = (np.arange(K + 1) * C) // K
            for j in range(K):
                r = range(b[j], b[j + 1])
                assert got[j] == min(r, key=lambda x: (-int(score[x]), int(tie[x]), x))


# -- the GPU sweep's schedule, run by a NumPy model of dg_support_sweep ----------------------

def run_model(dag, ids, sched, push, order=None, hub_edges=SWEEP_HUB_EDGES):
    """Execute ``sched`` as dg_support_sweep does (units in ``order``, default ticket order; rows
    of more than ``hub_edges`` edges only through their chunk units), checking each unit's
    dependencies; returns (out, in)."""
    C, L = dag.C, dag.n_levels
    W = words(ids.size)
    out = np.zeros((C, W), np.uint64)
    inn = np.zeros((C, W), np.uint64)
    j = np.arange(ids.size)
    for m in (out, inn):
        m[ids, j >> 6] |= np.left_shift(np.uint64(1), (j & 63).astype(np.uint64))
    ip, ix, rip, rix = dag.indptr, dag.indices, dag.rindptr, dag.rindices
    lp = dag.level_ptr

    def pull(mask, ptr, ind, a, b, chunk=None):
        for u in range(a, b):
            e0, e1 = ptr[u], ptr[u + 1]
            if chunk is not None:
                e0, e1 = e0 + chunk * hub_edges, min(e0 + (chunk + 1) * hub_edges, e1)
            elif e1 - e0 > hub_edges:
                continue  # a hub row: its chunk units
            for c in ind[e0:e1]:
                mask[u] |= mask[c]

    def push_rows(mask, a, b, chunk=None):
        for u in range(a, b):
            e0, e1 = ip[u], ip[u + 1]
            if chunk is not None:
                e0, e1 = e0 + chunk * hub_edges, min(e0 + (chunk + 1) * hub_edges, e1)
            elif e1 - e0 > hub_edges:
                continue
            for c in ix[e0:e1]:
                mask[c] |= mask[u]

    def side(sd, a, b, chunk=None):
        if sd == OUT:
            pull(out, ip, ix, a, b, chunk)
        elif push:
            push_rows(inn, a, b, chunk)
        else:
            pull(inn, rip, rix, a, b, chunk)

    U = sched.shape[0]
    done, first_missing = np.zeros(U, bool), 0
    gcount = np.bincount(sched[:, 7], minlength=1) if U else np.zeros(1, np.int64)
    gdone = np.zeros_like(gcount)
    shift = 0 if push else 1
    for u in (range(U) if order is None else order):
        s0, s1, sd, r0, r1, g, need, grp = sched[u].tolist()
        # the kernel waits for the units of the group before only; they waited for theirs
        assert grp == 0 or gdone[grp - 1] == gcount[grp - 1], f"unit {u} started early"
        while first_missing < U and done[first_missing]:
            first_missing += 1
        assert need <= first_missing, f"unit {u} started before the units it needs"
        if sd == RUN:
            for s in range(s0, s1):
                side(OUT, lp[L - 2 - s], lp[L - 1 - s])
                side(IN, lp[s + shift], lp[s + shift + 1])
        elif sd in (OUT_HUB, IN_HUB):
            assert r1 == r0 + 1 and s1 == s0 + 1
            side(OUT if sd == OUT_HUB else IN, g, g + 1, chunk=r0)  # chunk r0 of hub row g
        else:
            side(sd, r0, r1)
        done[u] = True
        gdone[grp] += 1
    return out, inn


@pytest.mark.parametrize("name", sorted(GRAPHS) + ["wide", "hubs"])
@pytest.mark.parametrize("push", [False, True])
def test_schedule_model_equals_twin(name, push):
    dag = condense(GRAPHS[name] if name not in ("wide", "hubs") else
                   generate("paper", 1500, 30, seed=7) if name == "wide" else hub_graph(40))
    ids = choose_supports(dag, 70, seed=1)
    want = support_masks_numpy(dag, ids)
    in_ptr = dag.indptr if push else dag.rindptr
    lp = dag.level_ptr
    # hub_edges 1 or 2: most rows with edges are hubs (several chunks each); 10**9: none
    for small, hub_edges in ((4096, 10**9), (0, 10**9), (50, 10**9), (4096, 1), (0, 2), (50, 1)):
        hubs = dict(out_hubs=hub_rows_numpy(dag.indptr, hub_edges), in_hubs=hub_rows_numpy(in_ptr, hub_edges),
                    hub_edges=hub_edges)
        sched = support_schedule(lp, dag.indptr[lp], in_ptr[lp], push, small=small, **hubs)
        assert sched.dtype == np.int32 and sched.shape[1] == len(FIELDS)
        n_hubs = hubs["out_hubs"][0].size + hubs["in_hubs"][0].size
        assert (n_hubs > 0) == np.isin(sched[:, 2], (OUT_HUB, IN_HUB)).any()
        assert n_hubs > 0 or hub_edges > 2 or name in ("deep-chain", "one-scc")
        got = run_model(dag, ids, sched, push, hub_edges=hub_edges)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(g, w)
        # any order that respects `need` gives the same masks (here: units of a step reversed)
        rev = [u for u0, n in step_groups(sched) for u in range(u0 + n - 1, u0 - 1, -1)]
        for w, g in zip(want, run_model(dag, ids, sched, push, rev, hub_edges=hub_edges)):
            np.testing.assert_array_equal(g, w)


def test_hub_rows_and_their_units():
    dag = condense(hub_graph())
    hr, hd = hub_rows_numpy(dag.indptr)
    rr, rd = hub_rows_numpy(dag.rindptr)
    assert hr.size == 1 and hd[0] == SWEEP_HUB_EDGES + 105 and rr.size == 1 and rd[0] == SWEEP_HUB_EDGES + 104
    lp = dag.level_ptr
    for push in (True, False):
        in_ptr = dag.indptr if push else dag.rindptr
        sched = support_schedule(lp, dag.indptr[lp], in_ptr[lp], push, out_hubs=(hr, hd),
                                 in_hubs=hub_rows_numpy(in_ptr))
        for code, rows, degs in ((OUT_HUB, hr, hd), (IN_HUB,) + hub_rows_numpy(in_ptr)):
            mine = sched[sched[:, 2] == code]
            # each hub row: ceil(edges / SWEEP_HUB_EDGES) chunks 0, 1, ... in one step
            assert sorted(mine[:, 5].tolist()) == sorted(np.repeat(rows, -(-degs // SWEEP_HUB_EDGES)).tolist())
            assert sorted(mine[:, 3].tolist()) == sorted(np.concatenate([np.arange(-(-d // SWEEP_HUB_EDGES))
                                                                         for d in degs]).tolist())
            assert (mine[:, 4] == mine[:, 3] + 1).all() and (mine[:, 1] == mine[:, 0] + 1).all()
        # the forward hub's level has other rows with edges: a row unit covers the hub (and skips it)
        rows_out = sched[sched[:, 2] == OUT]  # the out side reads the forward CSR
        assert ((rows_out[:, 3] <= hr[0]) & (hr[0] < rows_out[:, 4])).any()
        # a step with a hub is never small: no run of small steps covers it
        runs = sched[sched[:, 2] == RUN]
        for hs in sched[np.isin(sched[:, 2], (OUT_HUB, IN_HUB)), 0]:
            assert not ((runs[:, 0] <= hs) & (hs < runs[:, 1])).any()
        ids = choose_supports(dag, 64, seed=2)
        for w, g in zip(support_masks_numpy(dag, ids), run_model(dag, ids, sched, push)):
            np.testing.assert_array_equal(g, w)
    # without the hub lists the same rows are skipped by the row units: the masks would be wrong
    sched = support_schedule(lp, dag.indptr[lp], dag.indptr[lp], True)
    ids = choose_supports(dag, 64, seed=2)
    assert not all(np.array_equal(g, w) for w, g in zip(support_masks_numpy(dag, ids),
                                                        run_model(dag, ids, sched, True)))


def test_hubs_from_buffer():
    cap = hub_capacity(10 * SWEEP_HUB_EDGES + 10, 10**6)
    assert cap == 10 and hub_capacity(SWEEP_HUB_EDGES - 1, 5) == 1 and hub_capacity(10**9, 3) == 3
    buf = np.zeros(1 + 2 * cap, np.int64)
    buf[0], buf[1:4], buf[1 + cap:4 + cap] = 3, [9, 2, 5], [5000, 6000, 7000]  # appended in any order
    rows, degs = hubs_from_buffer(buf, cap)
    assert rows.tolist() == [2, 5, 9] and degs.tolist() == [6000, 7000, 5000]
    buf[0] = cap + 1
    with pytest.raises(BackendError, match="room for 10"):
        hubs_from_buffer(buf, cap)


def test_schedule_shape():
    dag = condense(generate("paper", 3000, 40, seed=2))
    lp = dag.level_ptr
    L = dag.n_levels
    sched = support_schedule(lp, dag.indptr[lp], dag.rindptr[lp], False, threads=1024, small=1000)
    s0, s1, sd, r0, r1, g, need = (sched[:, i] for i in range(7))
    assert (np.diff(s0) >= 0).all() and (s1 > s0).all() and s1.max() <= L - 1
    # need = index of the first unit of the same first step; earlier units end before it
    for u in range(sched.shape[0]):
        assert need[u] == np.flatnonzero(s0 == s0[u])[0]
        assert (s1[:need[u]] <= s0[u]).all()
    # group: 0, 1, 2, ... in unit order, one per first step (the kernel's done counters)
    grp = sched[:, 7]
    assert grp[0] == 0 and set(np.diff(grp).tolist()) <= {0, 1}
    assert ((np.diff(grp) == 1) == (np.diff(s0) > 0)).all()
    one = sd != RUN
    assert one.any() and (sd == RUN).any()
    assert set(np.unique(g[one]).tolist()) <= {1, 2, 4, 8, 16, 32}
    assert ((r1 - r0)[one] <= 1024 // g[one]).all() and ((r1 - r0)[one] > 0).all()
    # every step with edges on a side is covered exactly once on that side
    steps = np.arange(L - 1)
    for side_code, lev, ptr in ((OUT, L - 2 - steps, dag.indptr), (IN, steps + 1, dag.rindptr)):
        has = np.diff(ptr[lp])[lev] > 0
        cover = np.zeros(L - 1, np.int64)
        for u in np.flatnonzero(sd == RUN):
            cover[s0[u]:s1[u]] += dag.C  # a run covers both sides of its steps whole
        for u in np.flatnonzero(sd == side_code):
            cover[s0[u]] += r1[u] - r0[u]
        rows = np.diff(lp)[lev]
        assert (cover[has] >= rows[has]).all()
        assert (cover[has & (cover < dag.C)] == rows[has & (cover < dag.C)]).all()
    assert len(step_groups(sched)) == np.unique(s0).size < 2 * (L - 1)


def test_schedule_trivial_dags():
    assert support_schedule(np.array([0, 5]), np.array([0, 0]), np.array([0, 0]), False).shape == (0, 8)
    assert support_schedule(np.array([0]), np.array([0]), np.array([0]), True).shape == (0, 8)
    # two levels without edges on either side: no unit
    assert support_schedule(np.array([0, 3, 6]), np.array([0, 0, 0]), np.array([0, 0, 0]), False).shape[0] == 0


def test_group_size():
    assert group_size(np.array([0, 1, 2, 3, 5, 100, 10**6]), np.array([1, 1, 1, 1, 1, 1, 1])).tolist() == \
        [1, 1, 2, 4, 8, 32, 32]
    assert group_size(0, 0) == 1


# -- the CUDA launchers' plumbing on a fake CuPy whose kernels are NumPy models ----------------

class FakeArray(np.ndarray):
    def get(self):
        return np.asarray(self).copy()

    @property
    def device(self):  # the device an array lives on, a context manager in CuPy
        import contextlib

        return contextlib.nullcontext()


#: what the launchers read of a GPU backend
FAKE_GPU = types.SimpleNamespace(name="gpu", is_gpu=True, device=0)


def fake_cupy():
    import contextlib

    def wrap(f):
        return lambda *a, **k: np.asarray(f(*[np.asarray(x) if isinstance(x, FakeArray) else x for x in a], **k)).view(FakeArray)

    cp = types.SimpleNamespace(ndarray=FakeArray, int32=np.int32, int64=np.int64, uint64=np.uint64, uint32=np.uint32)
    for name in ("zeros", "empty", "asarray", "stack", "diff", "bincount", "concatenate"):
        setattr(cp, name, wrap(getattr(np, name)))
    cp.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(OutOfMemoryError=MemoryError),
                                    Device=lambda dev=None: contextlib.nullcontext())
    return cp


def _mix(z):
    from distgrail.constants import MIX1, MIX2

    m = (1 << 64) - 1
    z ^= z >> 30
    z = (z * MIX1) & m
    z ^= z >> 27
    z = (z * MIX2) & m
    return z ^ (z >> 31)


def fake_kernel(launches):
    """NumPy models of kernels/supports.cu, called with the launch's exact argument tuple."""
    from distgrail.constants import GOLDEN

    from distgrail.constants import PUSH_IN, PUSH_OUT, SKIP_IN, SKIP_OUT

    def seed(grid, block, args):
        ids, nb, out, inn, W, skip = args
        for j in range(int(nb)):
            for m, bit in ((out, SKIP_OUT), (inn, SKIP_IN)):
                if not int(skip) & bit:
                    m.reshape(-1)[int(ids[j]) * int(W) + (j >> 6)] |= np.uint64(1 << (j & 63))

    def choose(grid, block, args):
        ip, indeg, C, K, base, ids = args
        C, K, base = int(C), int(K), int(base)
        assert grid == (K,)
        for j in range(K):
            a, b = j * C // K, (j + 1) * C // K
            key = [(-(int(indeg[c]) + 1) * (int(ip[c + 1] - ip[c]) + 1),
                    _mix((((c + 1) * GOLDEN) & ((1 << 64) - 1)) ^ base), c) for c in range(a, b)]
            ids[j] = min(key)[2]

    def sweep(grid, block, args):
        (sched, U, u_base, tickets, ctr, done, gcount, lp, L, shift, push, W, optr, oind, omask, iptr, iind,
         imask) = args
        assert block == (512,) and sched.dtype == np.int32 and lp.dtype == np.int64
        assert ctr.shape == (32,) and done.dtype == np.uint32 and gcount.dtype == np.int32
        assert done.size == 8 * gcount.size and gcount.sum() == int(U) and (np.diff(sched[:, 7]) >= 0).all()
        units = range(int(U)) if int(tickets) else range(int(u_base), int(u_base) + grid[0])

        def rows(ptr, ind, mask, a, b, pushing, chunk=None):
            for u in range(int(a), int(b)):
                e0, e1 = int(ptr[u]), int(ptr[u + 1])
                if chunk is not None:  # chunk of a hub row
                    e0, e1 = e0 + chunk * SWEEP_HUB_EDGES, min(e0 + (chunk + 1) * SWEEP_HUB_EDGES, e1)
                elif e1 - e0 > SWEEP_HUB_EDGES:
                    continue  # a hub row: the row units skip it
                for c in ind[e0:e1]:
                    if pushing:
                        mask[c] |= mask[u]
                    else:
                        mask[u] |= mask[c]

        pin, pout = bool(int(push) & PUSH_IN), bool(int(push) & PUSH_OUT)  # (out pushed: along the reverse CSR)
        for u in units:
            s0, s1, sd, r0, r1 = (int(x) for x in sched[u, :5])
            if sd == RUN:
                for s in range(s0, s1):
                    lo, li = int(L) - 2 - s + int(pout), s + int(shift)
                    if not int(push) & SKIP_OUT:
                        rows(optr, oind, omask, lp[lo], lp[lo + 1], pout)
                    if not int(push) & SKIP_IN:
                        rows(iptr, iind, imask, lp[li], lp[li + 1], pin)
            elif sd == OUT:
                rows(optr, oind, omask, r0, r1, pout)
            elif sd == IN:
                rows(iptr, iind, imask, r0, r1, pin)
            else:
                g = int(sched[u, 5])
                if sd == OUT_HUB:
                    rows(optr, oind, omask, g, g + 1, pout, chunk=r0)
                else:
                    rows(iptr, iind, imask, g, g + 1, pin, chunk=r0)

    def hubs(grid, block, args):
        ptr, C, buf, cap = args
        rows, degs = hub_rows_numpy(np.asarray(ptr)[:int(C) + 1])
        buf[0] = rows.size
        k = min(rows.size, int(cap))
        buf[1:1 + k], buf[1 + int(cap):1 + int(cap) + k] = rows[::-1][:k], degs[::-1][:k]  # any order

    def expand(grid, block, args):  # the kernel's loop: each unit finds its descriptor by bisection
        desc, dstart, D, U, sched = args
        assert desc.dtype == np.int64 and desc.shape == (int(D), len(DESC_FIELDS)) and sched.dtype == np.int32
        for u in range(int(U)):
            lo = int(np.searchsorted(dstart, u, side="right")) - 1
            d = desc[lo]
            r0 = d[3] + (u - dstart[lo]) * d[5]
            sched[u] = (d[0], d[1], d[2], r0, min(r0 + d[5], d[4]), d[6], d[7], d[8])

    fns = {"dg_support_seed": seed, "dg_support_choose": choose, "dg_support_sweep": sweep,
           "dg_support_expand": expand, "dg_support_hubs": hubs}

    def kernel(stage, name):
        assert stage == "supports"

        def call(grid, block, args):
            launches.append(name)
            fns[name](grid, block, args)
        return call
    return kernel


@pytest.fixture
def fake_gpu(monkeypatch):
    import sys

    from distgrail.stages import supports as sup

    launches = []
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy())
    monkeypatch.setattr(sup, "kernel", fake_kernel(launches))
    monkeypatch.setattr(sup, "sm_count", lambda: 4)
    return sup, launches


@pytest.mark.parametrize("name", ["paper-dense", "layered", "cycles-loops-isolated", "one-scc", "hubs"])
def test_launchers_on_a_fake_gpu(fake_gpu, name):
    """support_masks_cuda / choose_supports_cuda hand the kernels the right arguments: with the
    kernels replaced by NumPy models, they give the twin's masks and ids in every mode."""
    import dataclasses

    sup, launches = fake_gpu
    cp = fake_cupy()
    dag = condense(GRAPHS[name] if name != "hubs" else hub_graph())
    dd = dataclasses.replace(dag, **{k: getattr(dag, k).view(FakeArray) for k in
                                     ("indptr", "indices", "rindptr", "rindices")})
    for K in (1, 70):
        ids = choose_supports(dag, K, seed=6)
        np.testing.assert_array_equal(sup.choose_supports_cuda(dd, ids.size, 6), ids)
        np.testing.assert_array_equal(sup.choose_supports(dd, K, 6), ids)
        bare = dataclasses.replace(dd, rindptr=None, rindices=None)
        np.testing.assert_array_equal(sup.choose_supports_cuda(bare, ids.size, 6), ids)
        want = support_masks_numpy(dag, ids)
        for d, mode, pull in ((dag, "auto", False), (dd, "auto", True), (dag, "pull", True), (dd, "push", False)):
            for schedule in ("tickets", "levels"):
                launches.clear()
                pending = sup.support_masks_cuda(FAKE_GPU, d, ids, mode=mode, schedule=schedule, wait=False)
                got = pending.result()
                assert all(isinstance(g, cp.ndarray) for g in got)
                for w, g in zip(want, got):
                    np.testing.assert_array_equal(np.asarray(g), w)
                run = pending.run
                assert run["pull"] == (pull and dag.n_levels > 1)
                assert run["launches"] == len(launches)
                if dag.n_levels > 1:
                    hubs = ["dg_support_hubs"] * (2 if run["pull"] else 1)  # one CSR read by both sides: once
                    assert launches[:1 + len(hubs)] == ["dg_support_seed"] + hubs
                    if schedule == "tickets":
                        assert launches == ["dg_support_seed"] + hubs + ["dg_support_expand", "dg_support_sweep"]
                        assert run["syncs"] == 2
                    else:
                        in_ptr = dag.rindptr if run["pull"] else dag.indptr
                        assert launches[1 + len(hubs)] == "dg_support_expand"
                        assert len(launches) == 2 + len(hubs) + len(step_groups(support_schedule(
                            dag.level_ptr, dag.indptr[dag.level_ptr], in_ptr[dag.level_ptr], not run["pull"],
                            threads=512, out_hubs=hub_rows_numpy(dag.indptr), in_hubs=hub_rows_numpy(in_ptr))))
        pending = sup.support_masks_cuda(FAKE_GPU, dd, ids, wait=False)  # launched, not waited for
        assert isinstance(pending, sup.PendingMasks)
        if dag.n_levels > 1:
            assert pending.run["syncs"] == 1  # the level edge ranges and hub rows only: the error flag is read later
        for w, g in zip(want, pending.result()):
            np.testing.assert_array_equal(np.asarray(g), w)
        assert pending.run["syncs"] == (2 if dag.n_levels > 1 else 0)
        got = sup.support_masks_cuda(FAKE_GPU, dd, ids)  # waited for: the masks themselves
        for w, g in zip(want, got):
            np.testing.assert_array_equal(np.asarray(g), w)
        if K == 70 and dag.C > 64:  # a block of whole words
            got = sup.support_masks_cuda(FAKE_GPU, dd, ids, block=(64, ids.size))
            for w, g in zip(want, got):
                np.testing.assert_array_equal(np.asarray(g), w[:, 1:])
        for mode, out_mode in (("push", "push"), ("pull", "push")):  # out pushed along the reverse CSR
            for sides in (sup.SIDES, ("out",), ("in",)):
                pending = sup.support_masks_cuda(FAKE_GPU, dd, ids, mode=mode, out_mode=out_mode, sides=sides,
                                                 wait=False)
                got = pending.result()
                assert pending.run["push_out"] == ("out" in sides and dag.n_levels > 1), pending.run
                for k, side in enumerate(sup.SIDES):
                    if side in sides:
                        np.testing.assert_array_equal(np.asarray(got[k]), want[k], err_msg=f"{mode} {out_mode} {sides}")
        for k, side in enumerate(sup.SIDES):  # one side swept alone: its masks, the other none
            for d, mode in ((dag, "push"), (dd, "pull"), (dag, "pull")):
                launches.clear()
                pending = sup.support_masks_cuda(FAKE_GPU, d, ids, mode=mode, sides=(side,), wait=False)
                got = pending.result()
                np.testing.assert_array_equal(np.asarray(got[k]), want[k])
                assert got[1 - k].shape == (dag.C, 0), got[1 - k].shape
                # the side not swept reads nothing of its own: no reverse CSR, one hub launch
                pulled = side == "in" and mode == "pull" and dag.n_levels > 1
                assert pending.run["pull"] == pulled, (side, mode, pending.run)
                assert launches.count("dg_support_hubs") == (0 if dag.n_levels < 2 else 2 if pulled else 1)
    with pytest.raises(DistGrailError, match="bad mode"):
        sup.support_masks_cuda(FAKE_GPU, dag, ids, mode="sideways")


def test_block_sizes_are_derived_like_the_kernels():
    import os
    import re

    from conftest import ROOT
    from distgrail import constants
    from distgrail.stages import supports as sup

    from distgrail.gpu.kernels import defines_header

    src = open(os.path.join(ROOT, "kernels", "supports.cu")).read()
    head = defines_header("supports")  # the block sizes come from constants.py, generated
    assert re.search(rf"#define SWEEP_THREADS \({constants.BATCH_THREADS // 2}\)\n", head)
    assert re.search(rf"#define CHOOSE_THREADS \({constants.GRID_THREADS}\)\n", head)
    assert "__launch_bounds__(SWEEP_THREADS)" in src and "__launch_bounds__(CHOOSE_THREADS)" in src
    assert sup.SWEEP_THREADS == constants.BATCH_THREADS // 2 and sup.CHOOSE_THREADS == constants.GRID_THREADS
    assert sup.SWEEP_THREADS % 32 == 0 and sup.CHOOSE_THREADS & (sup.CHOOSE_THREADS - 1) == 0


def test_a_failure_after_phase_5_started_waits_for_its_sweep(monkeypatch):
    """A step that fails while phase 5 runs beside it: the pipeline settles the started masks
    (waits for the sweep, which reads the DAG's device arrays) before the error goes on."""
    import distgrail
    from distgrail.placement import OneProcess

    settled = []

    class Started:
        def settle(self):
            settled.append(True)

        def result(self):
            raise AssertionError("phase 5's result is not asked for after a failure")

    def fail(self, *a):
        raise RuntimeError("labeling failed")

    monkeypatch.setattr(OneProcess, "start_masks", lambda self, entry, dag, K: Started())
    monkeypatch.setattr(OneProcess, "split_dims", fail)
    with pytest.raises(RuntimeError, match="labeling failed"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", supports=64)
    assert settled == [True]
