"""CPU queries: the NumPy prefilter against the compiled one, side by side in one run.

    python -m distgrail.benchmarks.cpu_prefilter INDEX [--batches 100000,1000000,10000000]
        [--repeat 3] [--seed 0] [--threads T]

For each batch of uniformly random pairs (``--seed``): the component lookup and the prefilter in
NumPy (:func:`distgrail.query.prefilter.prefilter`, the twin) and compiled
(:func:`distgrail.query.prefilter_jit.compiled_prefilter`), then the whole CPU batch
(``Index.query(..., backend="cpu")``) with the NumPy prefilter and the NumPy search
(``SearchOptions(cpu_search="bidirectional")``) and with the defaults (both compiled: the
compiled prefilter has run in this process by then, so any batch size takes it). Each
figure is the best of ``--repeat`` after a warm-up call (numba's compile is not timed); answers
and codes must be equal, else the benchmark exits 1. Prints ms and M pairs/s per way and the
ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _best(fn, repeat: int):
    out = fn()  # warm-up (and the numba compile, cached)
    times = []
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def run(index_path: str, batches, repeat: int, seed: int, threads: int | None = None) -> list:
    """Rows ``{batch, way, seconds}``; raises SystemExit(1) when the two ways differ."""
    import distgrail
    from distgrail.query.prefilter import prefilter
    from distgrail.query.prefilter_jit import compiled_prefilter
    from distgrail.query.stats import SearchOptions

    idx = distgrail.open_index(index_path)
    L = idx.labels("cpu")
    rows = []
    for k in batches:
        rng = np.random.default_rng(seed)
        s, t = rng.integers(0, idx.n, k), rng.integers(0, idx.n, k)
        tn, (a1, c1) = _best(lambda: prefilter(L, L.comp[s], L.comp[t]), repeat)
        tc, (a2, c2, _, _) = _best(lambda: compiled_prefilter(L, s, t, threads), repeat)
        if not (np.array_equal(a1, a2) and np.array_equal(c1, c2)):
            raise SystemExit(f"cpu_prefilter: the compiled prefilter differs from the NumPy one at {k:,} pairs")
        numpy_way = SearchOptions(cpu_search="bidirectional")
        qn, (b1, _) = _best(lambda: idx.query(s, t, backend="cpu", search=numpy_way), repeat)
        qc, (b2, _) = _best(lambda: idx.query(s, t, backend="cpu"), repeat)
        if not np.array_equal(b1, b2):
            raise SystemExit(f"cpu_prefilter: the answers differ at {k:,} pairs")
        rows += [{"batch": k, "way": w, "seconds": v} for w, v in
                 (("prefilter, NumPy", tn), ("prefilter, compiled", tc), ("Index.query, NumPy", qn),
                  ("Index.query, compiled", qc))]
    return rows


def table(rows) -> str:
    """ms, M pairs/s, and each compiled way's speed-up over the NumPy way above it."""
    lines = [f"{'batch':>12}  {'way':<24}{'ms':>10}{'M pairs/s':>11}{'ratio':>8}"]
    for i, r in enumerate(rows):
        ratio = f"{rows[i - 1]['seconds'] / r['seconds']:7.2f}x" if r["way"].endswith("compiled") else ""
        lines.append(f"{r['batch']:>12,}  {r['way']:<24}{r['seconds'] * 1e3:10.1f}{r['batch'] / r['seconds'] / 1e6:11.1f}"
                     f"{ratio:>8}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.cpu_prefilter", description=__doc__.split("\n")[0])
    ap.add_argument("index")
    ap.add_argument("--batches", default="100000,1000000,10000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="threads of the compiled prefilter (default: the search's)")
    args = ap.parse_args(argv)
    from distgrail.benchmarks import batch_sizes

    print(table(run(args.index, batch_sizes(ap, args.batches), args.repeat, args.seed, args.threads)))
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "cpu_prefilter"))
