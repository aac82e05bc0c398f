"""CPU benchmark: distgrail's CPU backend next to plain per-query BFS, in one run.

    python -m distgrail.benchmarks.cpu [--data DIR] [--sample 2000] [--repeat 3] [--dims 5]
        [--supports auto] [--paper-n 100000] [--paper-deg 10] [--paper-pairs 100000]

For every GRAIL benchmark graph: index build time (d=5), time to answer its 100,000 pairs, and
the time plain BFS needs for the same pairs over the same CSR — one BFS per pair with early
exit, in Python (``bfs``) and SciPy's C ``breadth_first_order`` per pair (``bfs-C``, no early
exit). Both baselines run on the first ``--sample`` pairs and are scaled to 100,000 (stated in
the table). Then a generated paper DAG (100,000 vertices, average degree 10): index + 100,000
random queries, end to end. Times are the best of ``--repeat`` runs.

Every graph is answered twice: without support masks (K = 0, plain GRAIL) and with the default
K = ``--supports`` (phase 5, :mod:`distgrail.stages.supports`); the second table puts the two side
by side: the pairs each step decided, the searched pairs, time and queries per second.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

import distgrail
from distgrail.benchmarks import default_data_dir
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.index import Index
from distgrail.io.pairs import read_pairs
from distgrail.query.stats import STEPS
from distgrail.stages.condense import condense
from distgrail.stages.supports import DEFAULT_SUPPORTS, supports_arg, build_supports, resolve_supports

SHORT = {"same_component": "same", "level_filter": "level", "support_positive": "sup+", "support_negative": "sup-",
         "interval_filter": "intv", "tree_cut": "tree", "search_positive": "srch+", "search_negative": "srch-"}


def with_supports(idx, g, K, backend="cpu"):
    """``idx`` with phase 5's masks for K supports added (returns (index, seconds of phase 5))."""
    dag = condense(g)
    K = resolve_supports(K, dag)
    if K == 0:
        return idx, 0.0
    t0 = time.perf_counter()
    ids, out, inn = build_supports(dag, K, int(idx.meta["seed"]), distgrail.get_backend(backend))
    dt = time.perf_counter() - t0
    arrays = {**idx.arrays, "supports/ids": ids, "supports/out": out, "supports/in": inn}
    return Index({**idx.meta, "supports": int(ids.size)}, arrays), dt


def steps_header():
    return " ".join(f"{SHORT[s]:>7}" for s in STEPS) + f"{'searched':>9}"


def steps_row(st):
    return " ".join(f"{st.steps[s]:>7}" for s in STEPS) + f"{st.searched:>9}"


def best(fn, repeat):
    out, t = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return out, t


def scipy_bfs(ip, ix, s, t):
    n = len(ip) - 1
    a = sp.csr_matrix((np.ones(len(ix), dtype=np.bool_), ix, ip), shape=(n, n))
    out = np.zeros(len(s), dtype=bool)
    for k, (u, v) in enumerate(zip(s.tolist(), t.tolist())):
        out[k] = u == v or bool(np.any(breadth_first_order(a, u, directed=True, return_predecessors=False) == v))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=default_data_dir())
    p.add_argument("--sample", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dims", type=int, default=5)
    p.add_argument("--supports", type=supports_arg, default=DEFAULT_SUPPORTS, help="K beside K = 0 (default auto: by density)")
    p.add_argument("--paper-n", type=int, default=100_000, help="vertices of the generated paper DAG")
    p.add_argument("--paper-deg", type=float, default=10, help="its average degree")
    p.add_argument("--paper-pairs", type=int, default=100_000, help="its random pairs")
    args = p.parse_args(argv)
    for flag in ("sample", "repeat", "dims", "paper_n", "paper_pairs"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be 1 or more, got {getattr(args, flag)}")
    side = []  # (graph, K, phase-5 s, QueryStats, query s)
    files = sorted(glob.glob(os.path.join(args.data, "*.gra")))
    if not files:
        p.error(f"--data {args.data}: no GRAIL benchmark graph (*.gra, with its *.gra.q100k.pairs.gz) in it "
                "(DISTGRAIL_DATA or --data names the folder)")
    print(f"distgrail {distgrail.__version__}, CPU backend, d={args.dims}; baselines on {args.sample} pairs x "
          f"{100000 // args.sample} (scaled); best of {args.repeat}")
    hdr = (f"{'graph':<18}{'n':>7}{'index ms':>10}{'query ms':>10}{'bfs ms':>10}{'bfs-C ms':>10}"
           f"{'vs bfs':>9}{'vs bfs-C':>9}{'reach':>7}")
    print(hdr)
    print("-" * len(hdr))
    for f in files:
        name = os.path.basename(f)[:-4]
        g = distgrail.read_graph(f)
        s, t = read_pairs(f + ".q100k.pairs.gz")
        idx, tb = best(lambda: distgrail.build_index(g, dims=args.dims, backend="cpu", supports=0), args.repeat)
        (ans, st0), tq = best(lambda: idx.query(s, t, backend="cpu"), args.repeat)
        side.append((name, 0, 0.0, st0, tq))
        idx_k, t5 = with_supports(idx, g, args.supports)
        (ans_k, st_k), tk = best(lambda: idx_k.query(s, t, backend="cpu"), args.repeat)
        if not np.array_equal(ans_k, ans):
            raise SystemExit(f"{name}: answers with K={args.supports} differ from K=0")
        side.append((name, args.supports, t5, st_k, tk))
        ip, ix = csr_of(g)
        k = min(args.sample, s.size)
        scale = s.size / k
        truth, tbfs = best(lambda: bfs_reachable(ip, ix, s[:k], t[:k]), 1)
        truth_c, tc = best(lambda: scipy_bfs(ip, ix, s[:k], t[:k]), 1)
        if not (np.array_equal(truth, ans[:k]) and np.array_equal(truth_c, ans[:k])):
            raise SystemExit(f"{name}: answers differ from BFS")
        tbfs *= scale
        tc *= scale
        print(f"{name:<18}{g.n:>7}{tb * 1e3:>10.1f}{tq * 1e3:>10.1f}{tbfs * 1e3:>10.0f}{tc * 1e3:>10.0f}"
              f"{tbfs / tq:>8.0f}x{tc / tq:>8.0f}x{int(ans.sum()):>7}")
    from distgrail.io.generate import generate

    t0 = time.perf_counter()
    g = generate("paper", args.paper_n, args.paper_deg, seed=1)
    t1 = time.perf_counter()
    idx = distgrail.build_index(g, dims=args.dims, backend="cpu", supports=0)  # K = 0; with_supports adds K
    t2 = time.perf_counter()
    rng = np.random.default_rng(0)
    s, t = rng.integers(0, g.n, args.paper_pairs), rng.integers(0, g.n, args.paper_pairs)
    k = min(args.sample // 4, s.size)
    ip, ix = csr_of(g)
    truth, tbfs = best(lambda: bfs_reachable(ip, ix, s[:k], t[:k]), 1)
    name = f"paper-{args.paper_n // 1000}k-d{args.paper_deg:g}"
    print(f"\n{name} ({g.m:,} edges): generate {t1 - t0:.2f} s, index (phases 1-4) {t2 - t1:.2f} s; "
          f"plain BFS, {k} pairs scaled: {tbfs * s.size / k:.1f} s for {s.size:,} pairs")
    for K in (0, args.supports):
        idx_k, t5 = with_supports(idx, g, K)
        t3 = time.perf_counter()
        ans, stats = idx_k.query(s, t, backend="cpu")
        tq = time.perf_counter() - t3
        if not np.array_equal(truth, ans[:k]):
            raise SystemExit(f"{name} K={K}: answers differ from BFS")
        side.append((name, K, t5, stats, tq))
    print(f"\nK = 0 (plain GRAIL) beside K = {args.supports} (phase 5 = mask build time; q/s of the queries alone)")
    hdr = f"{'graph':<20}{'K':>5}{'phase5 s':>9}{'pairs':>9}{'query s':>9}{'q/s':>11}  " + steps_header()
    print(hdr)
    print("-" * len(hdr))
    for name, K, t5, st, tq in side:
        print(f"{name:<20}{K:>5}{t5:>9.2f}{st.queries:>9,}{tq:>9.2f}{st.queries / tq:>11,.0f}  " + steps_row(st))


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "cpu"))
