"""Edge insertions against a rebuild, in one run: ``python -m distgrail.benchmarks.update``.

    python -m distgrail.benchmarks.update [--graph paper:200000:10 | GRAPH_FILE] [--adds 10,1000,100000]
        [--kind random|chain] [--pairs 1000000] [--check 20000] [--backend auto] [--dims 5] [--seed 0]
        [--rebuild-above N] [--json OUT]

The base index is built once from the graph (``paper:N:DEG``, ``scale-free:N:DEG`` and
``layered:N:DEG`` are generated; anything else is read as a graph file). For every count of
``--adds``, that many new edges (``random``: uniform vertex pairs; ``chain``: ``i -> i + 1`` over
random vertices, long paths that extend each other) are inserted with
:func:`distgrail.update.insert_edges` (``update``: swept or relabelled, as it chooses; ``relabel``:
the components labelled again) and, beside them, the index of the graph plus those edges is built
from scratch; the row gives the three times, the rebuild's over the update's, how many edges
changed nothing,
the components before and after, the throughput of ``--pairs`` random queries on the base and on
the updated index (and their ratio), the share of them the filters left to the search on each
(what the updates cost the filters), and ``--check`` random pairs compared with the rebuilt
index's answers (``wrong`` must be 0). On a GPU the last column is the bytes in live arrays of
CuPy's pool before the update (the base index's query state) and at the update's peak. Each row
is printed when it is done, and each of its steps on stderr as it ends.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import numpy as np


def load_graph(spec: str):
    """An :class:`~distgrail.io.graph.EdgeGraph` from ``kind:N:DEG`` (generated) or a file."""
    from distgrail.io.generate import KINDS, generate
    from distgrail.io.read import read_graph

    parts = spec.split(":")
    if parts[0] in KINDS and len(parts) == 3:
        return generate(parts[0], int(parts[1]), float(parts[2]), seed=0)
    return read_graph(spec)


def new_edges(n: int, k: int, kind: str, rng):
    """``k`` new edges: uniform random pairs, or ``v_i -> v_{i+1}`` along a random vertex order."""
    if kind == "random":
        return rng.integers(0, n, k, dtype=np.int64), rng.integers(0, n, k, dtype=np.int64)
    if k >= n:
        raise SystemExit(f"benchmarks.update: --kind chain takes at most n - 1 = {n - 1:,} edges, got {k:,}")
    order = rng.permutation(n)[:k + 1].astype(np.int64)
    return order[:-1], order[1:]


def run(args) -> list:
    import distgrail
    from distgrail.gpu.memory import PoolPeak
    from distgrail.update import insert_edges

    g = load_graph(args.graph)
    opts = dict(dims=args.dims, seed=args.seed, backend=args.backend, num_vertices=g.n)
    t = time.perf_counter()
    base = distgrail.build_index((g.src, g.dst), **opts)
    build0 = time.perf_counter() - t
    rng = np.random.default_rng(args.seed)
    qs, qt = rng.integers(0, g.n, args.pairs), rng.integers(0, g.n, args.pairs)
    base.query(qs, qt, backend=args.backend)  # warm: query state on the device, the search compiled
    t = time.perf_counter()
    st0 = base.query(qs, qt, backend=args.backend)[1]
    q0 = time.perf_counter() - t
    print(f"graph {args.graph}: n={g.n:,} m={g.m:,}; base index {build0:.3f} s, C={base.C:,}; "
          f"{args.pairs:,} random pairs {q0 * 1e3:.1f} ms; backend {args.backend}")
    print(f"{'adds':>9} {'kind':<7}{'update s':>10} {'method':<11}{'relabel s':>10}{'rebuild s':>11}{'x':>7}"
          f"{'unchanged':>11}{'C after':>12}"
          f"{'query base/upd ms':>20}{'q ratio':>9}{'searched % base/upd':>21}{'wrong':>7}{'GPU GB before/peak':>20}",
          flush=True)
    rows = []
    for k in args.adds:
        s, d = new_edges(g.n, k, args.kind, rng)
        before = _pool_used() if args.backend != "cpu" else None
        with PoolPeak(before is not None) as peak:
            t = time.perf_counter()
            upd, rep = insert_edges(base, s, d, backend=args.backend, rebuild_above=args.rebuild_above)
            tu = time.perf_counter() - t
        gpu = peak.report()
        _step(k, f"update {tu:.3f} s ({rep.method})")
        t = time.perf_counter()
        relabelled, _ = insert_edges(base, s, d, backend=args.backend, rebuild_above=0)
        tr = time.perf_counter() - t
        _step(k, f"relabel {tr:.3f} s")
        del relabelled
        t = time.perf_counter()
        full = distgrail.build_index((np.r_[g.src, s], np.r_[g.dst, d]), **opts)
        tb = time.perf_counter() - t
        _step(k, f"rebuild {tb:.3f} s")
        upd.query(qs, qt, backend=args.backend)  # warm, as the base (its own query state)
        t = time.perf_counter()
        st1 = upd.query(qs, qt, backend=args.backend)[1]
        q1 = time.perf_counter() - t
        cs, ct = qs[:args.check], qt[:args.check]
        wrong = int(np.count_nonzero(upd.query(cs, ct, backend=args.backend)[0]
                                     != full.query(cs, ct, backend=args.backend)[0]))
        rows.append({"adds": k, "kind": args.kind, "update_s": tu, "method": rep.method, "relabel_s": tr,
                     "sweep": rep.sweep, "rebuild_s": tb, "unchanged": rep.given - rep.added,
                     "C_before": rep.components_before, "C_after": rep.components_after, "query_base_s": q0,
                     "query_updated_s": q1, "searched_base": st0.searched / max(st0.queries, 1),
                     "searched_updated": st1.searched / max(st1.queries, 1), "checked": int(cs.size), "wrong": wrong,
                     "gpu_used_before": before, "gpu_used_peak": gpu and max(before, gpu["used"])})
        print(_row_line(rows[-1]), flush=True)  # each row as it is done: a long curve shows its first points
        if getattr(args, "json", None):  # (and is written: a run cut short keeps them)
            with open(args.json, "w") as f:
                json.dump({"graph": args.graph, "backend": args.backend, "rows": rows}, f, indent=1)
        del upd, full, st1
        gc.collect()  # the updated and rebuilt indexes' device state leave before the next update
    return rows


def _step(k: int, what: str) -> None:
    """A point's step as it ends, on stderr (a long point cut short still says how far it got)."""
    print(f"  {k:,} edges: {what}", file=sys.stderr, flush=True)


def _row_line(r: dict) -> str:
    gpu = (f"{r['gpu_used_before'] / 1e9:>10.2f}/{r['gpu_used_peak'] / 1e9:<9.2f}" if r["gpu_used_peak"] is not None
           else f"{'-':>20}")
    return (f"{r['adds']:>9,} {r['kind']:<7}{r['update_s']:>10.3f} {r['method']:<11}{r['relabel_s']:>10.3f}"
            f"{r['rebuild_s']:>11.3f}{r['rebuild_s'] / r['update_s']:>7.2f}{r['unchanged']:>11,}{r['C_after']:>12,}"
            f"{r['query_base_s'] * 1e3:>10.1f}/{r['query_updated_s'] * 1e3:<9.1f}"
            f"{r['query_base_s'] / r['query_updated_s']:>9.2f}"
            f"{100 * r['searched_base']:>11.3f}/{100 * r['searched_updated']:<9.3f}{r['wrong']:>7}" + gpu)


def _pool_used():
    """Bytes in live arrays of CuPy's default pool now; None without a GPU stack."""
    try:
        import cupy as cp
        if not cp.cuda.is_available():
            return None
    except ImportError:
        return None
    return int(cp.get_default_memory_pool().used_bytes())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.update", description=__doc__.split("\n")[0])
    ap.add_argument("--graph", default="paper:200000:10")
    ap.add_argument("--adds", default="10,1000,100000")
    ap.add_argument("--kind", choices=("random", "chain"), default="random")
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--check", type=int, default=20_000)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--dims", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rebuild-above", type=int, default=None,
                    help="insert_edges' rebuild_above for the 'update' column (default its own)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    try:
        args.adds = [int(float(a)) for a in args.adds.split(",")]
    except ValueError:
        ap.error(f"--adds: whole numbers separated by commas, got {args.adds!r}")
    if any(a < 1 for a in args.adds) or args.pairs < 1 or args.check < 0:
        ap.error("--adds and --pairs need at least 1, --check at least 0")
    rows = run(args)
    return 1 if any(r["wrong"] for r in rows) else 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "update"))
