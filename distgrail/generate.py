"""Test-graph generators, vectorised and reproducible from the seed.

``paper``        the home-made random DAGs of Quer & Calabrese (Table 2): vertex i draws k uniformly
                 from 0..maxdeg (maxdeg = 2 × average degree) and picks k distinct successors
                 uniformly among the vertices j > i.
``scale-free``   a copy-model DAG: each new vertex points to earlier vertices, half uniformly, half
                 by copying the target of an earlier edge (preferential attachment); heavy-tailed
                 in-degrees.
``layered``      a deep DAG of ``levels`` layers; every vertex has an edge into the next layer
                 (so the DAG has exactly ``levels`` levels) and more edges 1..4 layers down.
"""

from __future__ import annotations

import numpy as np

from .errors import DistGrailError
from .graph import EdgeGraph, id_dtype
from .segments import sorted_unique

__all__ = ["KINDS", "generate", "paper_dag", "scale_free_dag", "layered_dag"]

KINDS = ("paper", "scale-free", "layered")
ROWS_PER_BLOCK = 1 << 18


def _rng(seed, block=0):
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(block)]))


def _distinct_successors(rows, k, avail, base, rng):
    """For each row r, k[r] distinct values in base[r] .. base[r]+avail[r]-1 (k <= avail)."""
    total = int(k.sum())
    rid = np.repeat(np.arange(rows.size), k)
    out_rows = []
    out_vals = []
    need = k.copy()
    ridx = rid
    while ridx.size:
        draw = base[ridx] + (rng.random(ridx.size) * avail[ridx]).astype(np.int64)
        out_rows.append(ridx)
        out_vals.append(draw)
        r_all = np.concatenate(out_rows)
        v_all = np.concatenate(out_vals)
        key = r_all * np.int64(1 << 40) + v_all
        key = sorted_unique(key)
        r_all = key >> 40
        v_all = key & ((1 << 40) - 1)
        out_rows, out_vals = [r_all], [v_all]
        have = np.bincount(r_all, minlength=rows.size)
        missing = k - have
        ridx = np.repeat(np.arange(rows.size), missing)
    del total, need
    return rows[out_rows[0]], out_vals[0]


def paper_dag(n: int, avg_degree: float, seed: int = 0) -> EdgeGraph:
    """The paper's random DAG with ``n`` vertices and average out-degree ``avg_degree``."""
    maxdeg = int(round(2 * avg_degree))
    srcs, dsts = [], []
    for b, r0 in enumerate(range(0, n, ROWS_PER_BLOCK)):
        r1 = min(n, r0 + ROWS_PER_BLOCK)
        rng = _rng(seed, b)
        rows = np.arange(r0, r1, dtype=np.int64)
        avail = n - 1 - rows
        k = np.minimum(rng.integers(0, maxdeg + 1, rows.size), avail)
        dense = k * 2 > avail  # only near the end: pick by permutation
        s, d = _distinct_successors(rows[~dense], k[~dense], avail[~dense], rows[~dense] + 1, rng)
        srcs.append(s)
        dsts.append(d)
        for r, kk in zip(rows[dense].tolist(), k[dense].tolist()):
            srcs.append(np.full(kk, r, dtype=np.int64))
            dsts.append(np.sort(r + 1 + rng.permutation(n - 1 - r)[:kk]))
    dt = id_dtype(n)
    src = np.concatenate(srcs).astype(dt) if srcs else np.zeros(0, dt)
    dst = np.concatenate(dsts).astype(dt) if dsts else np.zeros(0, dt)
    return EdgeGraph(n=n, src=src, dst=dst, name=f"paper-n{n}-d{avg_degree:g}-s{seed}")


def scale_free_dag(n: int, avg_degree: float, seed: int = 0) -> EdgeGraph:
    """Copy-model scale-free DAG: edges point from newer to older vertices."""
    k = max(1, int(round(avg_degree)))
    rng = _rng(seed)
    src = np.repeat(np.arange(1, n, dtype=np.int64), k)
    m = src.size
    first_edge = (src - 1) * k  # first edge index of the source vertex
    uniform = (rng.random(m) * src).astype(np.int64)  # uniform earlier vertex
    copy = (rng.random(m) < 0.5) & (first_edge > 0)
    ref = (rng.random(m) * np.maximum(first_edge, 1)).astype(np.int64)
    ptr = np.where(copy, ref, np.arange(m))
    val = np.where(copy, -1, uniform)
    # resolve copy chains by pointer jumping: O(log m) rounds
    while True:
        open_ = val < 0
        if not open_.any():
            break
        tgt = ptr[open_]
        val[open_] = val[tgt]
        ptr[open_] = ptr[tgt]
    dt = id_dtype(n)
    return EdgeGraph(n=n, src=src.astype(dt), dst=val.astype(dt), name=f"scalefree-n{n}-d{avg_degree:g}-s{seed}")


def layered_dag(n: int, avg_degree: float, levels: int, seed: int = 0) -> EdgeGraph:
    """Deep layered DAG with exactly ``levels`` levels (``n >= levels``)."""
    if levels < 1 or levels > n:
        raise DistGrailError(f"levels must be in 1..n={n}, got {levels!r}")
    rng = _rng(seed)
    layer = (np.arange(n, dtype=np.int64) * levels) // n
    first = np.searchsorted(layer, np.arange(levels + 1))  # first vertex of each layer
    width = np.diff(first)
    body = np.flatnonzero(layer < levels - 1)
    # one edge into the next layer for everyone: fixes the depth
    nxt = layer[body] + 1
    dst0 = first[nxt] + (rng.random(body.size) * width[nxt]).astype(np.int64)
    extra = max(0, int(round(avg_degree)) - 1)
    src1 = np.repeat(body, extra)
    span = np.minimum(4, levels - 1 - layer[src1])
    jump = 1 + (rng.random(src1.size) * span).astype(np.int64)
    tl = layer[src1] + jump
    dst1 = first[tl] + (rng.random(src1.size) * width[tl]).astype(np.int64)
    dt = id_dtype(n)
    src = np.concatenate((body, src1)).astype(dt)
    dst = np.concatenate((dst0, dst1)).astype(dt)
    return EdgeGraph(n=n, src=src, dst=dst, name=f"layered-n{n}-d{avg_degree:g}-L{levels}-s{seed}")


def generate(kind: str, n: int, avg_degree: float, seed: int = 0, levels: int | None = None) -> EdgeGraph:
    """Generate a graph of one of :data:`KINDS`."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise DistGrailError(f"n must be an integer >= 1, got {n!r}")
    if not avg_degree >= 0:
        raise DistGrailError(f"average degree must be >= 0, got {avg_degree!r}")
    if kind == "paper":
        return paper_dag(n, avg_degree, seed)
    if kind == "scale-free":
        return scale_free_dag(n, avg_degree, seed)
    if kind == "layered":
        return layered_dag(n, avg_degree, levels if levels is not None else max(1, n // 10), seed)
    raise DistGrailError(f"graph kind must be one of {', '.join(KINDS)}, got {kind!r}")
