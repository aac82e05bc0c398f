"""Phase 1 (top-down): one parent per DAG vertex, turning the DAG into a spanning forest DT.

Rules (docs/design.md "Phase 1: which parent?"):

``max-level`` (default)
    the in-neighbour with the largest level (always level(v) - 1); ties by the counter hash
    of (seed, parent stream, p * C + v), then by the smaller id. One segmented argmax.
``dfs``
    the paper's ζ-SSSP rule: ζ(v) = number of paths leaving v (saturating), each out-edge
    u→c_i weighs 1 + Σ_{j<i} ζ(c_j), roots start at Σ_{earlier roots} ζ(r); the parent is the
    in-neighbour minimising dist(p) + w(p→v), ties by larger level, then hash. This is the
    DFS discovery order of the path tree (exact until counts saturate).

Levels come with the condensed DAG (see :mod:`distgrail.stages.condense`): components are numbered
by level, so every sweep here walks contiguous level slices.
"""

from __future__ import annotations

import numpy as np

from .. import satmath
from ..errors import DistGrailError
from ..hashing import STREAM_PARENT, hash3, hash_base
from ..constants import GRID_THREADS, HUB, HUB_THREADS
from ..segments import row_ids, seg_first_true, seg_max, seg_min
from ..gpu.memory import check_ids, ensure_fits, launcher
from ..gpu.sweep import U64_MAX, cupy, kernel, level_work, rows_if_needed, sm_count, sweep, warp_grid
from ..jit import restarts
from .deep import compiled_sweeps, n_levels

__all__ = ["PARENT_RULES", "parents", "parents_max_level", "parents_dfs", "parents_dfs_cpu", "path_counts",
           "parents_max_level_cuda", "parents_dfs_cuda", "parents_bytes"]

PARENT_RULES = ("max-level", "dfs")


def _best(cand, keys, seg_of_elem, nseg):
    """Among candidate entries of each segment keep the lexicographically largest keys."""
    for key in keys:
        idx = np.flatnonzero(cand)
        if idx.size == 0:
            break
        segs = seg_of_elem[idx]
        k = key[idx]
        starts = np.flatnonzero(np.concatenate((np.ones(1, bool), segs[1:] != segs[:-1])))
        best = seg_max(k, starts)
        full = np.zeros(nseg, dtype=k.dtype)
        full[segs[starts]] = best
        cand = cand & (key == full[seg_of_elem])
    return seg_first_true(cand, seg_of_elem, nseg)


def _tie_hash(p, child, C, seed):
    return hash3(seed, STREAM_PARENT, p.astype(np.uint64) * np.uint64(C) + child.astype(np.uint64))


def parents_max_level(dag, seed):
    """Parent of every vertex under the ``max-level`` rule (-1 for sources)."""
    C = dag.rindptr.size - 1
    child = row_ids(dag.rindptr)
    p = dag.rindices.astype(np.int64)
    cand = dag.level[p] == dag.level[child] - 1
    h = _tie_hash(p, child, C, seed)
    edge = _best(cand, [h], child, C)
    parent = np.full(C, -1, dtype=np.int64)
    has = edge >= 0
    parent[has] = p[edge[has]]
    return parent


def path_counts(dag):
    """ζ(v): number of paths leaving v (v alone counts 1), saturating at satmath.CAP."""
    C = dag.indptr.size - 1
    zeta = np.ones(C, dtype=np.uint64)
    lp = [int(x) for x in dag.level_ptr]
    ip = dag.indptr
    for lev in range(len(lp) - 2, -1, -1):
        a, b = lp[lev], lp[lev + 1]
        e0, e1 = int(ip[a]), int(ip[b])
        if e0 == e1:
            continue
        deg = ip[a + 1 : b + 1] - ip[a:b]
        nz = np.flatnonzero(deg > 0)
        starts = (ip[a:b] - e0)[nz]
        sums = satmath.seg_sum(zeta[dag.indices[e0:e1]], starts)
        zeta[a + nz] = satmath.sat_add(sums, np.uint64(1))
    return zeta


def _dfs_start(dag, zeta):
    """The ``dfs`` rule's in-edge weights (reverse-CSR order) and the distances before the sweep
    (the roots' set, the rest 0), from the path counts ``zeta``."""
    C = dag.indptr.size - 1
    src = row_ids(dag.indptr)
    rowfirst = dag.indptr[:-1][src]
    w_out = satmath.sat_add(satmath.seg_exclusive_prefix(zeta[dag.indices], rowfirst), np.uint64(1))
    perm = np.argsort(dag.indices, kind="stable")  # out-edge order -> reverse-CSR order
    w_in = w_out[perm]
    lp = [int(x) for x in dag.level_ptr]
    dist = np.zeros(C, dtype=np.uint64)
    roots = np.arange(lp[1] if len(lp) > 1 else 0)
    if roots.size:
        z = np.zeros(roots.size, dtype=np.int64)
        dist[roots] = satmath.seg_exclusive_prefix(zeta[roots], z)
    return w_in, dist


def parents_dfs(dag, seed):
    """Parent of every vertex under the paper's ζ-SSSP (``dfs``) rule."""
    C = dag.indptr.size - 1
    w_in, dist = _dfs_start(dag, path_counts(dag))
    lp = [int(x) for x in dag.level_ptr]
    parent = np.full(C, -1, dtype=np.int64)
    rip = dag.rindptr
    maxu = U64_MAX
    for lev in range(1, len(lp) - 1):
        a, b = lp[lev], lp[lev + 1]
        e0, e1 = int(rip[a]), int(rip[b])
        p = dag.rindices[e0:e1].astype(np.int64)
        child = a + row_ids(rip[a : b + 1] - e0)
        cand_dist = satmath.sat_add(dist[p], w_in[e0:e1])
        starts = rip[a:b] - e0  # every vertex above level 0 has a parent
        best = seg_min(cand_dist, starts)
        dist[a:b] = best
        seg = child - a
        keys = [maxu - cand_dist, dag.level[p].astype(np.int64), _tie_hash(p, child, C, seed)]
        edge = _best(np.ones(e1 - e0, dtype=bool), keys, seg, b - a)
        parent[a:b] = p[edge]
    return parent


@restarts
def parents_dfs_cpu(dag, seed):
    """The CPU backend's ``dfs`` rule: :func:`parents_dfs`, or on a deep DAG
    (:mod:`distgrail.stages.deep`) ζ and the distances in one compiled pass each, with the same
    parents (a pass that fails to compile: :func:`parents_dfs` instead, :func:`~distgrail.jit.restarts`)."""
    jit = compiled_sweeps(n_levels(dag.level_ptr))
    if jit is None:
        return parents_dfs(dag, seed)
    C = dag.indptr.size - 1
    lp = np.asarray(dag.level_ptr)
    zeta = np.ones(C, dtype=np.uint64)
    jit.path_counts(dag.indptr, dag.indices, zeta, int(lp[-2]), np.uint64(satmath.CAP))
    w_in, dist = _dfs_start(dag, zeta)
    del zeta
    rip = dag.rindptr
    p = dag.rindices.astype(np.int64)
    tie = _tie_hash(p, row_ids(rip), C, seed)
    parent = np.full(C, -1, dtype=np.int64)
    jit.dfs_parents(rip, p, w_in, dag.level, tie, dist, parent, int(lp[1]), np.uint64(satmath.CAP))
    return parent


def parents(be, dag, seed: int, rule: str = "max-level"):
    """Phase 1 on backend ``be``: the spanning forest DT as a parent array (sources get -1).
    ``dag`` holds host arrays on the CPU, device arrays on the GPU (``stages.labeling.DeviceDAG``)."""
    if rule not in PARENT_RULES:
        raise DistGrailError(f"parent rule must be one of {', '.join(PARENT_RULES)}, got {rule!r}")
    if rule == "max-level":
        return be.pick(parents_max_level, parents_max_level_cuda)(dag, seed)
    return be.pick(parents_dfs_cpu, parents_dfs_cuda)(dag, seed)


# -- CUDA launchers (kernels/forest.cu) ----------------------------------------------------------

def parents_bytes(C: int, m: int, rule: str = "max-level") -> int:
    """Estimated GPU bytes that a phase-1 launcher allocates besides the uploaded DAG: the parent
    array and the per-vertex scratch (best hash, hub scan); for ``dfs`` also ζ, dist, the
    per-edge ζ prefix and the COO rows of the ζ sweep."""
    est = 8 * C + 17 * C
    if rule == "dfs":
        est += 8 * C * 2 + 8 * m + 4 * m
    return int(est)


def _fits(C, m, rule):
    ensure_fits(parents_bytes(C, m, rule), f"phase 1 ({rule}) of a DAG with {C:,} components and {m:,} edges")


def _select_parents_dfs(dag, base, zex, dist):
    """dfs rule: the in-neighbour with the smallest dist[p] + w(p -> v) (then highest level,
    then hash), a warp per vertex and a block per hub (in-degree > ``HUB``)."""
    cp = cupy()
    C = dag.rindptr.size - 1
    parent = cp.empty(C, dtype=cp.int64)
    if C == 0:
        return parent
    common = (dag.rindptr, dag.rindices, dag.level, dag.indptr, dag.indices, zex, dist, parent,
              np.int64(C), np.uint64(base))
    kernel("forest", "dg_parent_warp")((warp_grid(C, sm_count()),), (GRID_THREADS,), common)
    hubs = cp.flatnonzero(cp.diff(dag.rindptr) > HUB)
    if hubs.size:
        nb = max(1, min(int(hubs.size), sm_count() * 8))
        kernel("forest", "dg_parent_hubs")((nb,), (HUB_THREADS,), (*common, hubs, np.int64(hubs.size)))
    return parent


@launcher
def parents_max_level_cuda(be, dag, seed):
    """GPU twin of :func:`parents_max_level`, from the forward CSR (``dg_parent_best_hash``,
    ``dg_parent_pick``, a warp a row; rows of more than ``HUB`` edges by their ``*_hubs`` launches,
    teams of the grid's warps on them): the reverse CSR never has to reach the GPU for this rule."""
    cp = cupy()
    check_ids(dag.indices, "the CSR")
    C = dag.indptr.size - 1
    if C == 0:
        return cp.empty(0, dtype=cp.int64)
    _fits(C, dag.indices.size, "max-level")
    level = dag.level if dag.level.dtype == cp.int32 else dag.level.astype(cp.int32)
    base = np.uint64(hash_base(seed, STREAM_PARENT))
    blocks = warp_grid(C, sm_count())
    best = cp.zeros(C, dtype=cp.uint64)
    csr = (dag.indptr, dag.indices, level)
    hubs = cp.flatnonzero(cp.diff(dag.indptr) > HUB)  # rows the warp kernels skip: teams of warps sweep them
    hub_grid = ((sm_count() * 8,), (GRID_THREADS,))
    kernel("forest", "dg_parent_best_hash")((blocks,), (GRID_THREADS,), csr + (best, np.int64(C), base))
    if hubs.size:
        kernel("forest", "dg_parent_best_hash_hubs")(*hub_grid, csr + (best, np.int64(C), base, hubs,
                                                                       np.int64(hubs.size)))
    parent = cp.full(C, C, dtype=cp.uint64)  # C: no candidate (a source)
    kernel("forest", "dg_parent_pick")((blocks,), (GRID_THREADS,), csr + (best, parent, np.int64(C), base))
    if hubs.size:
        kernel("forest", "dg_parent_pick_hubs")(*hub_grid, csr + (best, parent, np.int64(C), base, hubs,
                                                                  np.int64(hubs.size)))
    del best
    out = parent.view(cp.int64)
    out[out == C] = -1
    return out


@launcher
def parents_dfs_cuda(be, dag, seed):
    """GPU twin of :func:`parents_dfs` (ζ-SSSP rule)."""
    cp = cupy()
    check_ids(dag.indices, "the CSR")
    C = dag.indptr.size - 1
    if C == 0:
        return cp.empty(0, dtype=cp.int64)
    m = dag.indices.size
    _fits(C, m, "dfs")
    lp = np.asarray(dag.level_ptr, dtype=np.int64)
    L = lp.size - 1
    lp_dev = cp.asarray(lp)
    # ζ: paths leaving each vertex, bottom-up
    zeta = cp.ones(C, dtype=cp.uint64)
    work = level_work(dag.indptr, lp_dev, lp)
    rows = rows_if_needed("forest", dag.indptr, lp, work, 0, L - 1)
    sweep(kernel("forest", "dg_sweep_zeta"), kernel("forest", "dg_small_zeta"), lp_dev, work, 0, L - 1, True,
          (dag.indptr, dag.indices, zeta), (dag.indptr, dag.indices, rows, zeta))
    del rows
    # exclusive ζ prefix along every CSR row: the edge weights minus one
    zex = cp.empty(max(m, 1), dtype=cp.uint64)
    kernel("forest", "dg_zeta_exclusive")((warp_grid(C, sm_count()),), (GRID_THREADS,),
                                          (dag.indptr, dag.indices, zeta, zex, np.int64(C)))
    # dist: roots get the exclusive prefix of ζ over the roots, the rest a top-down min
    dist = cp.full(C, U64_MAX, dtype=cp.uint64)
    nroots = int(lp[1]) if L >= 1 else 0
    if nroots:
        dist[:nroots] = satmath.seg_exclusive_prefix(zeta[:nroots], cp.zeros(nroots, dtype=cp.int64), cp)
    del zeta
    rwork = level_work(dag.rindptr, lp_dev, lp)
    args = (dag.rindptr, dag.rindices, dag.indptr, dag.indices, zex, dist)
    sweep(kernel("forest", "dg_sweep_dist"), kernel("forest", "dg_small_dist"), lp_dev, rwork, 1, L - 1, False,
          args, args)
    return _select_parents_dfs(dag, hash_base(seed, STREAM_PARENT), zex, dist)
