"""Exactness at scale: an index's answers against plain BFS over the input graph, on the GPU.

    python -m distgrail.benchmarks.exact GRAPH INDEX [--sources 100] [--targets 1000] [--seed 0]
        [--backend gpu|cpu] [--range-gb 16]

For a graph too large for the CPU BFS of the test suite (R-MAT scale 27 to 29: 2^31 to 2^33
edges): the graph is read as ``distgrail index`` reads it (on the GPU), except that a plain edge
list is parsed in byte ranges of at most ``--range-gb`` GB (cut at line starts), so a file whose
one-piece parse does not fit the GPU is still read there; the edges stay in those pieces, never
sorted or concatenated. ``--sources`` seeded random sources are searched together, 64 at a time:
each vertex holds a 64-bit mask of the sources that reach it, and every pass over the edges ORs
each edge's source mask into its target's (in blocks of edges) until a pass changes nothing:
a fixpoint that is exactly reachability, whatever the order. ``--targets`` random targets per
source are then answered by ``Index.query`` on the index. Prints the pairs checked, reachable,
wrong answers (must be 0) and the seconds of each part; exit status 1 on any wrong answer.
``--backend cpu`` runs the same on NumPy (small graphs: the test suite checks this script there).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.stages.phases import read_on


#: sources searched together: one bit each in a vertex's uint64 mask
GROUP = 64


def read_edges(be, path, range_bytes: int):
    """``(n, pieces)``: the graph file's vertex count and its edges as ``[(src, dst), ...]`` on
    ``be``'s device. A plain edge list is parsed in byte ranges of at most ``range_bytes``
    (:func:`distgrail.mpi.parse.split_body`: cuts at line starts), one piece each, its vertex count
    the one its first line states (distgrail's writer) or the largest id + 1; any other file is read
    whole by :func:`~distgrail.stages.phases.read_on`, one piece."""
    from distgrail.gpu.memory import max_in_pieces
    from distgrail.io.chunks import plan_read
    from distgrail.io.formats import BY_NAME
    from distgrail.io.parse import CudaDevice, NumpyDevice, read_text_range
    from distgrail.mpi.parse import split_body

    plan = plan_read(path)
    if not (plan.kind == "text" and plan.fmt == "edgelist" and BY_NAME[plan.fmt].split):
        g = read_on(be, path)
        return int(g.n), [(be.asarray(g.src), be.asarray(g.dst))]
    parts = max(1, -(-(plan.size - plan.body) // max(int(range_bytes), 1)))
    bounds = split_body(plan.path, plan.body, plan.size, parts)
    dev = CudaDevice(be.xp) if be.is_gpu else NumpyDevice()
    pieces, n = [], 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi <= lo:
            continue
        got = read_text_range(path, plan, lo, hi, dev)
        if got.anomaly:
            raise SystemExit(f"{path}: bytes {lo}:{hi}: {got.anomaly} (distgrail index reports what the file holds)")
        if got.src.shape[0]:
            n = max(n, max_in_pieces(be.xp, got.src) + 1, max_in_pieces(be.xp, got.dst) + 1)
            pieces.append((got.src, got.dst))
    return (n if plan.n is None else int(plan.n)), pieces


def reach_masks(xp, n: int, pieces, sources, block: int = 1 << 27):
    """``(mask, passes)``: uint64 (n,), bit j set where ``sources[j]`` (at most :data:`GROUP`)
    reaches the vertex (itself included), and the passes over the edges it took. A pass ORs
    ``mask[src]`` into ``mask[dst]`` for every edge, in blocks of at most ``block`` edges, the
    masks updated as it goes; where several edges of a block share a target one write wins, but
    a write only ever adds bits, and a later pass adds what was lost: passes end when one adds
    nothing, at the fixpoint, which is reachability."""
    mask = xp.zeros(n, dtype=xp.uint64)
    for j, s in enumerate(sources):
        mask[int(s)] |= xp.uint64(1 << j)
    passes, changed = 0, True
    while changed:
        passes, changed = passes + 1, False
        for src, dst in pieces:
            for lo in range(0, int(src.shape[0]), block):
                s, d = src[lo:lo + block], dst[lo:lo + block]
                new = mask[s] & ~mask[d]
                hit = new != 0
                if bool(hit.any()):
                    d = d[hit]
                    mask[d] = mask[d] | new[hit]
                    changed = True
    return mask, passes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.exact", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("graph")
    ap.add_argument("index")
    ap.add_argument("--sources", type=int, default=100)
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="gpu", choices=("cpu", "gpu"))
    ap.add_argument("--range-gb", type=float, default=16.0,
                    help="an edge list is parsed in byte ranges of at most this many GB (default 16)")
    a = ap.parse_args(argv)
    be = get_backend(a.backend)
    xp = be.xp
    t0 = time.perf_counter()
    idx = distgrail.open_index(a.index)
    t1 = time.perf_counter()
    with be.on_device():
        n, pieces = read_edges(be, a.graph, int(a.range_gb * 1e9))
        m = sum(int(src.shape[0]) for src, _ in pieces)
        if n != idx.n:
            print(f"the graph has {n:,} vertices, the index {idx.n:,}", file=sys.stderr)
            return 1
        t2 = time.perf_counter()
        rng = np.random.default_rng(a.seed)
        sources = rng.integers(0, n, a.sources) if n else np.zeros(0, np.int64)
        targets = rng.integers(0, n, (a.sources, a.targets)) if n else np.zeros((0, a.targets), np.int64)
        want = np.zeros((a.sources, a.targets), dtype=bool)
        most = 0
        for g0 in range(0, a.sources, GROUP):
            group = sources[g0:g0 + GROUP]
            mask, passes = reach_masks(xp, n, pieces, group)
            most = max(most, passes)
            for j in range(group.shape[0]):
                bits = be.to_host(mask[xp.asarray(targets[g0 + j])])
                want[g0 + j] = (bits >> np.uint64(j)) & np.uint64(1) != 0
            del mask
        t3 = time.perf_counter()
    got, stats = idx.query(np.repeat(sources, a.targets), targets.ravel(), backend=a.backend)
    t4 = time.perf_counter()
    wrong = int(np.count_nonzero(got != want.ravel()))
    print(f"{a.graph}: n={n:,}, m={m:,}; {want.size:,} pairs ({a.sources} sources x "
          f"{a.targets} targets), {int(want.sum()):,} reachable by BFS, {int(got.sum()):,} by the index, "
          f"wrong answers: {wrong}")
    print(f"seconds: open_index {t1 - t0:.2f}, read {t2 - t1:.2f} ({len(pieces)} piece(s)), BFS {t3 - t2:.2f} "
          f"({a.sources} sources, {GROUP} at a time, at most {most} passes over the edges), "
          f"Index.query {t4 - t3:.3f}; backend {be.name}")
    return 1 if wrong else 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "exact"))
