"""CPU benchmark: distgrail's CPU backend next to plain per-query BFS, in one run.

    python -m distgrail.benchmarks.cpu [--data DIR] [--sample 2000]

For every GRAIL benchmark graph: index build time (d=5), time to answer its 100,000 pairs, and
the time plain BFS needs for the same pairs over the same CSR — one BFS per pair with early
exit, in Python (``bfs``) and SciPy's C ``breadth_first_order`` per pair (``bfs-C``, no early
exit). Both baselines run on the first ``--sample`` pairs and are scaled to 100,000 (stated in
the table). Then a generated paper DAG (100,000 vertices, average degree 10): index + 100,000
random queries, end to end. Times are the best of ``--repeat`` runs.
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
from distgrail.io.pairs import read_pairs


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=default_data_dir())
    p.add_argument("--sample", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dims", type=int, default=5)
    args = p.parse_args(argv)
    files = sorted(glob.glob(os.path.join(args.data, "*.gra")))
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
        idx, tb = best(lambda: distgrail.build_index(g, dims=args.dims, backend="cpu"), args.repeat)
        (ans, _), tq = best(lambda: idx.query(s, t, backend="cpu"), args.repeat)
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
    g = generate("paper", 100_000, 10, seed=1)
    t1 = time.perf_counter()
    idx = distgrail.build_index(g, dims=args.dims, backend="cpu")
    t2 = time.perf_counter()
    rng = np.random.default_rng(0)
    s, t = rng.integers(0, g.n, 100_000), rng.integers(0, g.n, 100_000)
    ans, stats = idx.query(s, t, backend="cpu")
    t3 = time.perf_counter()
    k = min(args.sample // 4, s.size)
    ip, ix = csr_of(g)
    truth, tbfs = best(lambda: bfs_reachable(ip, ix, s[:k], t[:k]), 1)
    if not np.array_equal(truth, ans[:k]):
        raise SystemExit("generated DAG: answers differ from BFS")
    print(f"\npaper DAG n=100,000 avg degree 10 ({g.m:,} edges): generate {t1 - t0:.2f} s, index {t2 - t1:.2f} s, "
          f"100,000 queries {t3 - t2:.2f} s, index+queries {t3 - t1:.2f} s "
          f"(plain BFS, {k} pairs scaled: {tbfs * s.size / k:.1f} s); {int(ans.sum()):,} reachable")
    print("steps: " + ", ".join(f"{k} {v:,}" for k, v in stats.steps.items()))


if __name__ == "__main__":
    main()
