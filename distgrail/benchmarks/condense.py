"""Condensation benchmark: the CPU ``condense`` next to the GPU ``condense_cuda`` on the same edges.

    python -m distgrail.benchmarks.condense [--n 1500000] [--degree 100] [--sf-n 1500000]
        [--sf-degree 100] [--back 200000] [--small 200000] [--layered-levels 0] [--repeat 3] [--no-cpu]

Graphs: the paper's DAG (``generate paper -n N --degree D``), and a copy-model scale-free DAG with
``--back`` random back edges within its older half (one giant SCC) plus ``--small`` reversed
copies of random edges within its newer half (2-cycles: many small SCCs), shuffled so the GPU path sorts; optionally a layered DAG
with ``--layered-levels`` levels. For each: CPU seconds (one run), GPU seconds (median of
``--repeat`` after a warm-up run; edges already on the device, the DAG left there), the ratio,
the GPU sub-stage seconds, the GPU peak memory (CuPy allocations beyond the input edges) and
its ratio to the final CSR + reverse CSR. Asserts that every DAG array is identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from distgrail.errors import DistGrailError
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.stages.condense import condense, condense_cuda, dag_to_host

ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")


def cyclic_scale_free(n, degree, back, small, seed=0):
    g = generate("scale-free", n, degree, seed)  # edges newer -> older
    rng = np.random.default_rng(seed)
    u, v = rng.integers(0, n // 2, back), rng.integers(0, n // 2, back)  # the older half: giant SCC
    newer = np.flatnonzero(g.dst >= n // 2)  # 2-cycles in the newer half stay out of it
    e = newer[rng.integers(0, newer.size, small)] if newer.size else newer
    src = np.concatenate((g.src, np.minimum(u, v).astype(np.int32), g.dst[e]))
    dst = np.concatenate((g.dst, np.maximum(u, v).astype(np.int32), g.src[e]))
    p = rng.permutation(src.size)
    return EdgeGraph(n=n, src=src[p], dst=dst[p], name=f"scale-free+{back}+{small}")


def gpu_run(src, dst, n):
    import cupy as cp

    from distgrail.benchmarks.labeling import peak_hook

    hook = peak_hook()
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    with hook:
        dag = condense_cuda(src, dst, n)
        cp.cuda.Device().synchronize()
    return time.perf_counter() - t, dag, hook.peak


def bench(name, g, repeat, cpu):
    import cupy as cp

    src, dst = cp.asarray(g.src, dtype=cp.int32), cp.asarray(g.dst, dtype=cp.int32)
    gpu_run(src, dst, g.n)  # warm-up: kernel compile, memory pool
    runs = [gpu_run(src, dst, g.n) for _ in range(repeat)]
    gs = statistics.median(r[0] for r in runs)
    _, dag, peak = runs[-1]
    final = sum(getattr(dag, k).nbytes for k in ("indptr", "indices", "rindptr", "rindices"))
    row = {"graph": name, "n": g.n, "m": g.m, "C": dag.C, "dag_m": dag.m, "levels": dag.n_levels, "gpu_s": gs,
           "timings": dag.timings, "peak_gib": peak / 2**30, "peak_ratio": peak / max(final, 1), "cpu_s": None}
    host = dag_to_host(dag)
    del dag, runs, src, dst
    if cpu:
        t = time.perf_counter()
        ref = condense(g)
        row["cpu_s"] = time.perf_counter() - t
        for k in ARRAYS:
            a, b = getattr(host, k), getattr(ref, k)
            if not (a.dtype == b.dtype and np.array_equal(a, b)):
                raise DistGrailError(f"{name}: {k} differs between GPU and CPU")
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.condense", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_500_000)
    ap.add_argument("--degree", type=float, default=100)
    ap.add_argument("--sf-n", type=int, default=1_500_000)
    ap.add_argument("--sf-degree", type=float, default=100)
    ap.add_argument("--back", type=int, default=200_000)
    ap.add_argument("--small", type=int, default=200_000)
    ap.add_argument("--layered-levels", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU run (and the identity check)")
    a = ap.parse_args(argv)
    from distgrail.gpu.backend import gpu_available

    if not gpu_available():
        sys.exit("benchmarks.condense: needs a usable CUDA GPU")
    makers = [(f"paper-{a.n}-d{a.degree:g}", lambda: generate("paper", a.n, a.degree, 0)),
              (f"scale-free-{a.sf_n}-d{a.sf_degree:g}+cycles", lambda: cyclic_scale_free(a.sf_n, a.sf_degree, a.back,
                                                                                          a.small))]
    if a.layered_levels:
        makers.append((f"layered-{a.n}-{a.layered_levels}L", lambda: generate("layered", a.n, a.degree / 10, 0,
                                                                             levels=a.layered_levels)))
    hdr = f"{'graph':34} {'m':>12} {'C':>10} {'levels':>7} {'CPU s':>8} {'GPU s':>8} {'ratio':>7} {'peak GiB':>8} {'x CSR':>6}  GPU stages (s)"
    print(hdr)
    for name, make in makers:
        g = make()
        r = bench(name, g, a.repeat, not a.no_cpu)
        del g
        cpu = "-" if r["cpu_s"] is None else f"{r['cpu_s']:.2f}"
        ratio = "-" if r["cpu_s"] is None else f"{r['cpu_s'] / r['gpu_s']:.0f}x"
        st = " ".join(f"{k} {v:.3f}" for k, v in r["timings"].items())
        print(f"{name:34} {r['m']:>12,} {r['C']:>10,} {r['levels']:>7,} {cpu:>8} {r['gpu_s']:>8.3f} {ratio:>7} "
              f"{r['peak_gib']:>8.2f} {r['peak_ratio']:>6.2f}  {st}", flush=True)
    if not a.no_cpu:
        print("GPU and CPU DAGs identical on every graph")


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "condense"))
