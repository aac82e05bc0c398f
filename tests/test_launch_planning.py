"""GPU launch planning on the CPU: the level-sweep scheduler, the COO-rows decision, memory checks,
and the stage launchers run against a fake CuPy (NumPy arrays) with fake kernels that record
their launch configurations and do what the CUDA kernel does, level by level. The launchers'
results must equal the NumPy twins, and every launch must happen on the backend's device."""

import dataclasses
import sys
import types

import numpy as np
import pytest

from distgrail import constants
from distgrail.errors import BackendError
from distgrail.gpu import memory, sweep as gs
from distgrail.gpu.backend import Backend, get_backend
from distgrail.hashing import _mix, hash_base
from distgrail.io.generate import generate
from distgrail.stages import forest, intervals, labeling, ranks, subtree
from distgrail.stages.condense import condense
from distgrail.stages.forest import parents_max_level
from distgrail.stages.intervals import descendant_intervals_numpy
from distgrail.stages.ranks import post_order_ranks_numpy
from distgrail.stages.subtree import subtree_sizes_numpy

SMALL, GRID, BATCH = constants.SMALL_LEVEL, constants.GRID_THREADS, constants.BATCH_THREADS


# -- the scheduler -----------------------------------------------------------------------------

def test_plan_groups_runs_of_small_levels_and_sizes_grids():
    big1 = GRID * constants.ITEMS_PER_THREAD * 3 + 1  # needs 4 blocks
    work = np.array([5, 10, SMALL, SMALL + 1, big1, 7, 0, 10**9, 3])
    plan = gs.plan_sweep(work, 0, 8, bottom_up=False, sms=4)
    assert plan == [("small", 0, 1, 3, 1),      # levels 0..2: one block walks them
                    ("big", 3, 1, 1, 3),        # SMALL + 1 = 4097 items, 2048 per block
                    ("big", 4, 1, 1, 4),
                    ("small", 5, 1, 2, 1),      # levels 5, 6
                    ("big", 7, 1, 1, 4 * 16),   # capped at 16 blocks per SM
                    ("small", 8, 1, 1, 1)]


def test_plan_bottom_up_walks_deepest_first_within_bounds():
    work = np.array([1, 2, 10**6, 4, 5, 6])
    plan = gs.plan_sweep(work, 1, 4, bottom_up=True, sms=100)
    assert plan == [("small", 4, -1, 2, 1), ("big", 2, 1, 1, 489), ("small", 1, -1, 1, 1)]
    covered = [lvl for kind, l0, step, n, _ in plan for lvl in range(l0, l0 + step * n, step)]
    assert covered == [4, 3, 2, 1]  # every level once, deepest first; 0 and 5 left out
    assert gs.plan_sweep(work, 3, 2, True, 4) == []


def test_sweep_launches_fake_kernels_with_the_plan():
    calls = []

    def rec(kind):
        return lambda grid, block, args: calls.append((kind, grid, block, args))

    work = np.array([3, SMALL * 50, 2, 2])
    gs.sweep(rec("big"), rec("small"), "LP", work, 0, 3, False, ("B",), ("S", "rows"), sms=2)
    assert [(k, g, b) for k, g, b, _ in calls] == [("small", (1,), (BATCH,)), ("big", (min(32, 100),), (GRID,)),
                                                  ("small", (1,), (BATCH,))]
    kinds = [(a[0], int(a[1]), int(a[2]), int(a[3]), a[4:]) for _, _, _, a in calls]
    assert kinds == [("LP", 0, 1, 1, ("S", "rows")), ("LP", 1, 1, 1, ("B",)), ("LP", 2, 1, 2, ("S", "rows"))]
    assert all(isinstance(a[i], np.int32) for _, _, _, a in calls for i in (1, 2, 3))


def _hub_team_visits(deg, n_warps, team_warps):
    """How often the hub kernels' loop (DG_HUB_ENTRIES, for_hub_candidate_edges) visits each
    entry of hub rows of ``deg`` entries on a grid of ``n_warps`` warps, as dg_hub_team splits it."""
    seen = [np.zeros(d, np.int64) for d in deg]
    rows_of_warp = []
    for w in range(n_warps):
        teams, size, team, place = gs.hub_team(len(deg), w, n_warps, team_warps)
        assert teams * size <= n_warps and 0 <= place < size
        rows = range(team if team < teams else len(deg), len(deg), teams)
        rows_of_warp.append(len(rows))
        for h in rows:
            for b in range(place * 32, deg[h], size * 32):
                seen[h][b:b + 32] += 1
    return seen, rows_of_warp


@pytest.mark.parametrize("n_hubs, n_warps, team_warps", [
    (0, 64, 32), (1, 64, 32), (1, 7, 32), (3, 100, 32), (10, 100, 32), (5, 100, 4), (200, 64, 4), (31, 97, 8),
])
def test_hub_teams_visit_every_entry_once_and_share_the_rows(n_hubs, n_warps, team_warps):
    rng = np.random.default_rng(n_hubs * 1000 + n_warps)
    deg = [int(x) for x in rng.integers(1, 3000, n_hubs)]
    seen, rows_of_warp = _hub_team_visits(deg, n_warps, team_warps)
    assert all((s == 1).all() for s in seen)  # no entry missed, none twice
    most = max(1, n_warps // team_warps)
    # each warp walks at most its share of the list, not the whole list (the old loop: n_hubs each)
    assert max(rows_of_warp, default=0) <= -(-n_hubs // min(max(n_hubs, 1), most))
    if n_hubs and n_hubs <= most:  # fewer rows than teams: the grid split over the rows
        assert gs.hub_team(n_hubs, 0, n_warps, team_warps)[1] == n_warps // n_hubs


def test_hub_team_is_the_kernels_formula():
    import os

    from distgrail.gpu.kernels import kernel_dir

    with open(os.path.join(kernel_dir(), "common.cuh")) as f:
        src = f.read()
    # the twin's three lines, as the kernel writes them
    assert "most = nwarps / DG_HUB_TEAM > 1 ? nwarps / DG_HUB_TEAM : 1" in src
    assert "teams = nhubs < 1 ? 1 : (nhubs < most ? nhubs : most)" in src
    assert "size = nwarps / teams" in src and "team = wid / size" in src
    # the rows a team takes, one loop for both kernels' files, and their strides over a row
    assert "for (i64 h = tm.team < tm.teams ? tm.team : (nhubs); h < (nhubs); h += tm.teams)" in src
    for name, stride in (("condense", "b = ptr[u] + tm.warp * 32, end = ptr[u + 1]; b < end; b += tm.size * 32"),
                         ("forest", "e = indptr[u] + tm.warp * 32 + lane; e < e1; e += tm.size * 32")):
        with open(os.path.join(kernel_dir(), f"{name}.cu")) as f:
            cu = f.read()
        assert "DG_TEAM_HUB_ROWS(" in cu and stride in cu and "dg_hub_team(" not in cu
    assert gs.hub_team(60000, 5, 4224 * 8) == (1056, 32, 0, 5)


def test_rows_needed_only_for_small_levels_with_edges():
    lp = np.array([0, 2, 4, 6])
    # work = rows + edges: level 0 has 5 edges, level 1 none, level 2 is big
    work = np.array([7, 2, SMALL + 10])
    assert gs.needs_rows(work, lp, 0, 2)
    assert not gs.needs_rows(work, lp, 1, 2)  # the small level has no edges, the big one needs no rows
    assert not gs.needs_rows(work, lp, 2, 1)  # empty range
    assert gs.warp_grid(1, 4) == 1 and gs.warp_grid(10**9, 4) == 128 and gs.warp_grid(17, 4) == 3


# -- a fake CuPy: NumPy arrays with .get(), a current device, memory numbers ----------------------

class Dev(np.ndarray):
    def get(self, out=None):
        if out is None:
            return np.asarray(self).copy()
        np.copyto(out, self)
        return out

    def __getitem__(self, i):
        r = super().__getitem__(i)
        return r if isinstance(r, np.ndarray) else np.asarray(r).view(Dev)


def _dev(fn):
    def wrapped(*a, **k):
        r = fn(*[np.asarray(x) if isinstance(x, Dev) else x for x in a], **k)
        return r.view(Dev) if isinstance(r, np.ndarray) else r
    return wrapped


def fake_cupy(free=1 << 40, pool_free=0, total=1 << 41):
    cp = types.ModuleType("cupy")
    for name in ("int32", "int64", "uint64", "uint8", "bool_"):
        setattr(cp, name, getattr(np, name))
    for name in ("asarray", "empty", "zeros", "ones", "full", "arange", "argsort", "cumsum", "flatnonzero", "diff",
                 "empty_like", "stack", "ascontiguousarray"):
        setattr(cp, name, _dev(getattr(np, name)))
    cp.asnumpy = lambda a: np.asarray(a).copy()
    state = types.SimpleNamespace(current=0, entered=[])

    class Device:
        def __init__(self, d=None):
            self.id = state.current if d is None else d
            self.mem_info = (free, total)

        def __enter__(self):
            self._prev = state.current
            state.current = self.id
            state.entered.append(self.id)
            return self

        def __exit__(self, *exc):
            state.current = self._prev

    class OutOfMemoryError(Exception):
        pass

    cp.cuda = types.SimpleNamespace(
        Device=Device, memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
        runtime=types.SimpleNamespace(getDeviceProperties=lambda d: {"multiProcessorCount": 2}),
        get_current_stream=lambda: types.SimpleNamespace(synchronize=lambda: None))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_bytes=lambda: pool_free)
    cp.state = state
    return cp


@pytest.fixture
def cp(monkeypatch):
    cp = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setattr(gs, "_SM_COUNT", {})
    return cp


def test_ensure_fits_counts_free_plus_pool(monkeypatch):
    cp = fake_cupy(free=3 << 30, pool_free=1 << 30, total=80 << 30)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    memory.ensure_fits(4 << 30, "exactly what is free")  # free + pool: fits
    with pytest.raises(BackendError, match=r"the test step needs about 4\.00 GiB of GPU memory, but only "
                                           r"4\.00 GiB of 80\.00 GiB are free on GPU 2"):
        with cp.cuda.Device(2):
            memory.ensure_fits((4 << 30) + 1, "the test step")


def test_launcher_runs_on_the_backends_device_and_names_oom(cp):
    seen = []

    @memory.launcher
    def step(be, x):
        seen.append(cp.cuda.Device().id)
        if x == "oom":
            raise cp.cuda.memory.OutOfMemoryError("out of memory allocating 1 GiB")
        return x

    be = Backend("gpu", cp, device=5)
    assert step(be, 7) == 7 and seen == [5] and cp.state.current == 0
    with pytest.raises(BackendError, match=r"step: GPU out of memory \(out of memory allocating 1 GiB\)"):
        step(be, "oom")
    assert cp.state.current == 0  # left as it was


# -- fake kernels: what each CUDA kernel does, level by level ------------------------------------

class Kernels:
    """Fake ``kernel(stage, name)``: records (stage, name, grid, block, device) and runs a NumPy
    rendering of the kernel."""

    def __init__(self, cp, device):
        self.cp, self.device, self.log = cp, device, []

    def __call__(self, stage, name):
        def launch(grid, block, args):
            assert self.cp.cuda.Device().id == self.device, f"{name} launched on the wrong device"
            self.log.append((stage, name, grid, block))
            base = name.split("<")[0]
            getattr(self, base)(name, grid, block, *[np.asarray(a) if isinstance(a, np.ndarray) else a for a in args])
        return launch

    @staticmethod
    def _levels(lp, l0, step, nlev, grid, block):
        if grid == (1,):
            assert block == (BATCH,)
        else:
            assert nlev == 1 and block == (GRID,)
        return [int(l0) + k * int(step) for k in range(int(nlev))]

    # the warp kernels skip rows of more than HUB edges (forest.HUB: a test may lower it), the
    # *_hubs kernels take exactly the rows listed
    def dg_parent_best_hash(self, name, grid, block, indptr, indices, level, best, C, base, rows=None):
        u, v, h = self._candidates(indptr, indices, level, C, base, rows)
        np.maximum.at(best, v, h)

    def dg_parent_pick(self, name, grid, block, indptr, indices, level, best, parent, C, base, rows=None):
        u, v, h = self._candidates(indptr, indices, level, C, base, rows)
        hit = h == best[v]
        np.minimum.at(parent, v[hit], u[hit].astype(np.uint64))

    def dg_parent_best_hash_hubs(self, name, grid, block, indptr, indices, level, best, C, base, hubs, nhubs):
        self.dg_parent_best_hash(name, grid, block, indptr, indices, level, best, C, base, hubs[:int(nhubs)])

    def dg_parent_pick_hubs(self, name, grid, block, indptr, indices, level, best, parent, C, base, hubs, nhubs):
        self.dg_parent_pick(name, grid, block, indptr, indices, level, best, parent, C, base, hubs[:int(nhubs)])

    @staticmethod
    def _candidates(indptr, indices, level, C, base, rows=None):
        u = np.repeat(np.arange(int(C), dtype=np.int64), np.diff(indptr))
        v = indices.astype(np.int64)
        mine = np.diff(indptr) <= forest.HUB if rows is None else np.isin(np.arange(int(C)), np.asarray(rows))
        keep = (level[v] == level[u] + 1) & mine[u]
        u, v = u[keep], v[keep]
        key = u.astype(np.uint64) * np.uint64(C) + v.astype(np.uint64)
        return u, v, _mix(((key + np.uint64(1)) * np.uint64(constants.GOLDEN)) ^ base)

    def dg_csr_rows(self, name, grid, block, ptr, rows, C):
        rows[: ptr[-1]] = np.repeat(np.arange(int(C)), np.diff(ptr))

    def dg_size_levels(self, name, grid, block, lp, l0, step, nlev, parent, size):
        for lv in self._levels(lp, l0, step, nlev, grid, block):
            a, b = lp[lv], lp[lv + 1]
            np.add.at(size, parent[a:b], size[a:b])

    def dg_sibling_key(self, name, grid, block, key, n, base):
        key[:] = _mix(((np.arange(int(n), dtype=np.uint64) + np.uint64(1)) * np.uint64(constants.GOLDEN)) ^ base)

    def dg_jump(self, name, grid, block, s_in, s_out, anc_in, anc_out, C, k):
        has = anc_in >= 0
        s_out[:] = s_in
        s_out[:, has] += s_in[:, anc_in[has]]
        anc_out[:] = -1
        anc_out[has] = anc_in[anc_in[has]]

    def _iv(self, name, grid, block, lp, l0, step, nlev, indptr, indices, lh, rows=None):
        K = int(name[name.index("<") + 1:-1])
        assert lh.shape[1] == K, f"{name} got {lh.shape[1]} dimensions"
        for lv in self._levels(lp, l0, step, nlev, grid, block):
            for r in range(lp[lv], lp[lv + 1]):
                ch = indices[indptr[r]:indptr[r + 1]]
                if ch.size:
                    if rows is not None:  # the single-block kernel reads the COO rows
                        assert (rows[indptr[r]:indptr[r + 1]] == r).all()
                    lh[r, :, 0] = np.minimum(lh[r, :, 0], lh[ch, :, 0].min(axis=0))
                    lh[r, :, 1] = np.maximum(lh[r, :, 1], lh[ch, :, 1].max(axis=0))

    dg_sweep_iv = _iv

    def dg_small_iv(self, name, grid, block, lp, l0, step, nlev, indptr, indices, lh, rows):
        self._iv(name, grid, block, lp, l0, step, nlev, indptr, indices, lh, rows)


def _dag(kind="paper", n=3000, deg=4, levels=None):
    return condense(generate(kind, n, deg, seed=7, levels=levels))


@pytest.mark.parametrize("kind,n,deg,levels", [("paper", 3000, 4, None), ("layered", 30000, 2, 6),
                                               ("layered", 2000, 3, 400)])
def test_launchers_equal_the_twins(cp, monkeypatch, kind, n, deg, levels):
    dag = _dag(kind, n, deg, levels)
    fake = Kernels(cp, device=3)
    for mod in (gs, subtree, ranks, intervals):
        monkeypatch.setattr(mod, "kernel", fake)
    be = Backend("gpu", cp, device=3)
    lp = dag.level_ptr
    parent = parents_max_level(dag, 1)
    size = subtree.subtree_sizes_cuda(be, parent.view(Dev), lp)
    np.testing.assert_array_equal(size, subtree_sizes_numpy(parent, lp))
    dims = list(range(11))  # two groups: 8 + 3 dimensions
    post = ranks.post_order_ranks_cuda(be, parent.view(Dev), size, lp, 5, dims)
    want = post_order_ranks_numpy(parent, np.asarray(size), lp, 5, dims)
    np.testing.assert_array_equal(post, want)
    ip, ix = dag.indptr.view(Dev), dag.indices.view(Dev)
    lo, hi = intervals.descendant_intervals_cuda(be, ip, ix, lp, post)
    wlo, whi = descendant_intervals_numpy(dag.indptr, dag.indices, lp, want)
    np.testing.assert_array_equal(lo, wlo)
    np.testing.assert_array_equal(hi, whi)
    names = [name for _, name, _, _ in fake.log]
    assert "dg_size_levels" in names and "dg_jump" in names
    assert names.count("dg_sibling_key") == len(dims)
    iv = {name for name in names if "_iv<" in name}
    assert iv <= {"dg_sweep_iv<8>", "dg_small_iv<8>", "dg_sweep_iv<3>", "dg_small_iv<3>"} and iv
    assert cp.state.current == 0 and set(cp.state.entered) >= {3}


def test_launcher_checks_its_own_memory(monkeypatch):
    cp = fake_cupy(free=1000)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    be = Backend("gpu", cp, device=0)
    parent = np.full(200, -1, np.int64).view(Dev)
    with pytest.raises(BackendError, match=r"phase 2 of a forest of 200 components needs about"):
        subtree.subtree_sizes_cuda(be, parent, np.array([0, 200]))
    with pytest.raises(BackendError, match=r"phase 3 of 2 dimension\(s\) of a forest of 200 components"):
        ranks.post_order_ranks_cuda(be, parent, parent, np.array([0, 200]), 0, [0, 1])


def test_sibling_key_kernel_rendering_matches_hash3():
    # the fake dg_sibling_key above is the kernel's formula; it must agree with the twin's hash3
    from distgrail.hashing import STREAM_DIM0, hash3

    key = np.empty(1000, np.uint64)
    Kernels.dg_sibling_key(None, "dg_sibling_key", (1,), (GRID,), key, 1000, np.uint64(hash_base(9, STREAM_DIM0 + 2)))
    np.testing.assert_array_equal(key, hash3(9, STREAM_DIM0 + 2, np.arange(1000)))


@pytest.mark.parametrize("hub", [None, 3])
def test_one_process_pipeline_keeps_the_forest_on_the_device(cp, monkeypatch, hub):
    """hub 3: rows of more than 3 edges are hub rows (phase 1's *_hubs launches)."""
    if hub is not None:
        monkeypatch.setattr(forest, "HUB", hub)
    dag = _dag("paper", 4000, 5)
    fake = Kernels(cp, device=1)
    for mod in (gs, forest, subtree, ranks, intervals):
        monkeypatch.setattr(mod, "kernel", fake)
    be = Backend("gpu", cp, device=1)
    uploads = []
    real_asarray = Backend.asarray  # a Backend is immutable: spy on the class
    monkeypatch.setattr(Backend, "asarray", lambda self, a, dtype=None: (self.is_gpu and uploads.append(
        np.asarray(a).nbytes)) or real_asarray(self, a, dtype))
    f = labeling.build_forest(dag, 3, "max-level", be)
    cpu = labeling.build_forest(dag, 3, "max-level", get_backend("cpu"))
    assert f.on_gpu and not cpu.on_gpu
    dev_parent, dev_size = f.arrays(be)
    assert f.arrays(be)[0] is dev_parent  # the kept device arrays, not a new upload
    n_up = len(uploads)
    post0, iv = labeling.label_dimensions(dag, f, range(10), 3, be)
    want0, want = labeling.label_dimensions(dag, cpu, range(10), 3, get_backend("cpu"))
    np.testing.assert_array_equal(post0, want0)
    np.testing.assert_array_equal(iv, want)
    assert type(iv) is np.ndarray and iv.dtype == want.dtype
    # phases 3-4 upload nothing: the forest stayed on the device, the CSR is phase 1's upload
    assert uploads[:n_up] and uploads[n_up:] == []
    # host copies on demand, once, equal to the CPU forest
    assert type(f.parent) is np.ndarray and f.parent is f.parent
    np.testing.assert_array_equal(f.parent, cpu.parent)
    np.testing.assert_array_equal(f.size, cpu.size)
    # what mpi.collectives.bcast_dataclass sees on the root and builds on the other ranks
    names = [x.name for x in dataclasses.fields(labeling.Forest)]
    assert [k for k in names if isinstance(getattr(f, k), np.ndarray)] == ["parent", "size"]
    other = labeling.Forest(parent=f.parent.copy(), size=f.size.copy(), timings=dict(f.timings))
    assert not other.on_gpu and other.arrays(be)[0].shape == f.parent.shape
    f.release_device()
    assert not f.on_gpu and f.arrays(be)[0] is not dev_parent
    np.testing.assert_array_equal(f.parent, cpu.parent)
    assert {name for _, name, _, _ in fake.log} >= {"dg_parent_best_hash", "dg_parent_pick", "dg_size_levels"}
    hub_launches = {"dg_parent_best_hash_hubs", "dg_parent_pick_hubs"} & {name for _, name, _, _ in fake.log}
    assert hub_launches == (set() if hub is None else {"dg_parent_best_hash_hubs", "dg_parent_pick_hubs"})
