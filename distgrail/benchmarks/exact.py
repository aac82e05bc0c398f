"""Exactness at scale: an index's answers against plain BFS over the input graph, on the GPU.

    python -m distgrail.benchmarks.exact GRAPH INDEX [--sources 100] [--targets 1000] [--seed 0]
        [--backend gpu|cpu]

For a graph too large for the CPU BFS of the test suite (R-MAT scale 27: 2^31 edges): the graph
is read as ``distgrail index`` reads it (on the GPU), its edges sorted there into a CSR (one
``src << 32 | dst`` key per edge); ``--sources`` seeded random sources each get a
level-synchronous BFS (each level's out-edges gathered in pieces), and ``--targets`` random targets per source are answered by ``Index.query`` on the
index. Prints the pairs checked, reachable, wrong answers (must be 0) and the seconds of each
part; exit status 1 on any wrong answer. ``--backend cpu`` runs the same on NumPy (small graphs:
the test suite checks this script there).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import distgrail
from distgrail.arrays import sorted_distinct
from distgrail.gpu.backend import get_backend
from distgrail.stages.phases import read_on


def graph_csr(be, g):
    """(indptr int64 (n+1,), dst int32) of ``g`` on ``be``'s device, edges sorted by source: one
    uint64 ``src << 32 | dst`` key per edge, sorted (the graph's src/dst freed first)."""
    xp = be.xp
    src, dst = be.asarray(g.src), be.asarray(g.dst)
    g.src = g.dst = None
    keys = src.astype(xp.uint64) << xp.uint64(32)
    del src
    keys |= dst.astype(xp.uint64)
    del dst
    keys = xp.sort(keys)
    firsts = xp.arange(g.n + 1, dtype=xp.uint64) << xp.uint64(32)
    indptr = xp.searchsorted(keys, firsts).astype(xp.int64)
    del firsts
    return indptr, (keys & xp.uint64(0xFFFFFFFF)).astype(xp.int32)


def bfs_reached(xp, indptr, dst, source: int, block: int = 1 << 27):
    """Boolean (n,) of the vertices ``source`` reaches (itself included): level-synchronous BFS,
    each level's out-edges gathered in pieces of at most ``block`` edges; also the levels."""
    n = int(indptr.shape[0]) - 1
    reached = xp.zeros(n, dtype=bool)
    reached[source] = True
    frontier = xp.asarray([source], dtype=xp.int64)
    levels = 0
    while frontier.size:
        levels += 1
        starts = indptr[frontier]
        counts = indptr[frontier + 1] - starts
        ends = xp.cumsum(counts)
        total = int(ends[-1])
        cuts = [0] + [int(c) for c in xp.searchsorted(ends, xp.arange(block, total, block), side="right")]
        cuts.append(int(frontier.size))
        found = []
        for i0, i1 in zip(cuts[:-1], cuts[1:]):
            if i1 <= i0:
                continue
            c = counts[i0:i1]
            first = ends[i0:i1] - c  # where each vertex's edges start in this piece's list
            first -= first[0]
            E = int(first[-1] + c[-1])
            if E == 0:
                continue
            # edge e of the piece belongs to the vertex whose edge range [first, first + c) holds it
            seg = xp.searchsorted(first + c, xp.arange(E, dtype=xp.int64), side="right")
            pos = starts[i0:i1][seg] + (xp.arange(E, dtype=xp.int64) - first[seg])
            nbr = dst[pos]
            new = nbr[~reached[nbr]]
            reached[new] = True
            found.append(new)
        frontier = sorted_distinct(xp, xp.concatenate(found)).astype(xp.int64) if found else xp.zeros(0, xp.int64)
    return reached, levels


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph")
    ap.add_argument("index")
    ap.add_argument("--sources", type=int, default=100)
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="gpu", choices=("cpu", "gpu"))
    a = ap.parse_args(argv)
    be = get_backend(a.backend)
    xp = be.xp
    t0 = time.perf_counter()
    idx = distgrail.open_index(a.index)
    t1 = time.perf_counter()
    g = read_on(be, a.graph)
    n = int(g.n)
    if n != idx.n:
        print(f"the graph has {n:,} vertices, the index {idx.n:,}", file=sys.stderr)
        return 1
    with be.on_device():
        indptr, dst = graph_csr(be, g)
        t2 = time.perf_counter()
        rng = np.random.default_rng(a.seed)
        sources = rng.integers(0, n, a.sources) if n else np.zeros(0, np.int64)
        targets = rng.integers(0, n, (a.sources, a.targets)) if n else np.zeros((0, a.targets), np.int64)
        want = np.zeros((a.sources, a.targets), dtype=bool)
        most = 0
        for i, s in enumerate(sources):
            reached, sweeps = bfs_reached(xp, indptr, dst, int(s))
            most = max(most, sweeps)
            want[i] = be.to_host(reached[xp.asarray(targets[i])])
            del reached
        t3 = time.perf_counter()
    got, stats = idx.query(np.repeat(sources, a.targets), targets.ravel(), backend=a.backend)
    t4 = time.perf_counter()
    wrong = int(np.count_nonzero(got != want.ravel()))
    print(f"{a.graph}: n={n:,}, m={int(dst.shape[0]):,}; {want.size:,} pairs ({a.sources} sources x "
          f"{a.targets} targets), {int(want.sum()):,} reachable by BFS, {int(got.sum()):,} by the index, "
          f"wrong answers: {wrong}")
    print(f"seconds: open_index {t1 - t0:.2f}, read + keys {t2 - t1:.2f}, BFS {t3 - t2:.2f} "
          f"({a.sources} BFS, at most {most} levels), Index.query {t4 - t3:.3f}; backend {be.name}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
