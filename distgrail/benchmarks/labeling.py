"""Labeling benchmark: GPU phases 1–4 next to the CPU backend, in one run.

    python -m distgrail.benchmarks.labeling [--data DIR] [--sets real,paper,shapes,big]
        [--budget SECONDS] [--cpu-max-edges M] [--no-cpu layered] [--rule max-level] [--repeat 3]
    python -m distgrail.benchmarks.labeling --phase5 [--sets paper] [--names 1.5M] [--repeat 5]

For every graph and d = 1 and d = 5: GPU time per phase (ms), total labeling time (phases 1–4
with the host <-> device copies of ``build_forest`` + ``label_dimensions``; median of
``--repeat`` runs after a warm-up run), peak GPU memory (bytes held by live CuPy arrays, measured
with a CuPy memory hook) and its ratio to CSR + reverse CSR + labels, then the CPU backend's
labeling time in the same run and the speed-up. The first-call kernel compile time is printed
separately. Graphs are built (read / generated / condensed) before timing; nothing is written.

``--phase5``: phase 5 (support masks) beside phases 1–4 (d = 5) on DAGs condensed on the GPU
(as ``distgrail index`` does), for K = 0 / 64 / 256 / 1024: the choice, the mask sweeps (the fused
one-launch schedule with ``in`` pushed, the one-launch-per-step schedule, and ``in`` pulled) with
the masks' copy to the host, and the ratio phase 5 / phases 1–4 (target: <= 0.20 at K = 64).

Sets: ``real`` the 11 GRAIL graphs in ``--data``; ``shapes`` a scale-free DAG and a deep layered
DAG with 100,000 levels (~10 M edges each); ``paper`` the paper's DAGs 250k x 50 and
1.5M x 100; ``big`` the remaining paper sizes (500k/1M/1.5M x 50, 250k/500k/1M x 100).
Graphs are skipped once ``--budget`` seconds have passed; CPU runs are skipped ("-") for graphs
above ``--cpu-max-edges`` or whose name starts with one of the ``--no-cpu`` prefixes (default
``layered``: the deep layered DAG). ``--rule``: the phase-1 parent rule (``max-level`` or ``dfs``).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import time

import numpy as np

import distgrail
from distgrail.benchmarks import default_data_dir
from distgrail.stages.condense import condense
from distgrail.io.generate import generate
from distgrail.gpu.backend import get_backend
from distgrail.stages.labeling import build_forest, label_dimensions

PHASES = ("phase1_forest", "phase2_subtree_sizes", "phase3_ranks", "phase4_intervals")
_STAGES = ("forest", "subtree", "ranks", "intervals")  # kernels/<stage>.cu


def peak_hook():
    """A CuPy memory hook that tracks the peak bytes of live allocations (mallocs minus frees)."""
    from cupy.cuda import memory_hook

    class PeakHook(memory_hook.MemoryHook):
        name = "DistgrailPeak"

        def __init__(self):
            self.cur = 0
            self.peak = 0

        def malloc_postprocess(self, **kw):
            self.cur += kw["mem_size"]
            self.peak = max(self.peak, self.cur)

        def free_postprocess(self, **kw):
            self.cur -= kw["mem_size"]

    return PeakHook()


def label(dag, dims, backend, rule="max-level", seed=0):
    t = time.perf_counter()
    forest = build_forest(dag, seed, rule, backend)
    timings = dict(forest.timings)
    post, iv = label_dimensions(dag, forest, range(dims), seed, backend, timings)
    return time.perf_counter() - t, timings, iv


def graphs(sets, data):
    if "real" in sets:
        for f in sorted(glob.glob(os.path.join(data, "*.gra"))):
            yield os.path.basename(f)[:-4], lambda f=f: distgrail.read_graph(f)
    if "paper" in sets:
        yield "paper-250k-d50", lambda: generate("paper", 250_000, 50, 0)
    if "shapes" in sets:
        yield "scalefree-1M-d10", lambda: generate("scale-free", 1_000_000, 10, 0)
        yield "layered-1M-100kL", lambda: generate("layered", 1_000_000, 11, 0, levels=100_000)
    if "paper" in sets:
        yield "paper-1.5M-d100", lambda: generate("paper", 1_500_000, 100, 0)
    if "big" in sets:
        for n, d in ((250_000, 100), (500_000, 50), (500_000, 100), (1_000_000, 50), (1_000_000, 100),
                     (1_500_000, 50)):
            yield f"paper-{n // 1000}k-d{d}", lambda n=n, d=d: generate("paper", n, d, 0)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.labeling", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=default_data_dir())
    p.add_argument("--sets", default="real,paper,shapes,big")
    p.add_argument("--budget", type=float, default=float("inf"), help="stop starting new graphs after this")
    p.add_argument("--cpu-max-edges", type=int, default=200_000_000)
    p.add_argument("--no-cpu", default="layered", help="comma list of name prefixes to run without CPU")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rule", default="max-level")
    p.add_argument("--names", default="", help="comma list: only graphs whose name contains one of these")
    p.add_argument("--phase5", action="store_true", help="phase 5 (support masks) beside phases 1-4")
    args = p.parse_args(argv)
    from distgrail.gpu.backend import gpu_available

    if not gpu_available():
        sys.exit("benchmarks.labeling: needs a usable CUDA GPU (the CPU side alone: python -m distgrail.benchmarks.cpu)")
    if args.phase5:
        from distgrail.benchmarks.phase5 import run_phase5

        return run_phase5(args, graphs, label)
    import cupy

    from distgrail.gpu import kernels

    t_start = time.perf_counter()
    sets = set(args.sets.split(","))
    no_cpu = [s for s in args.no_cpu.split(",") if s]
    dev = cupy.cuda.Device()
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    print(f"distgrail {distgrail.__version__}; GPU {props['name'].decode()} ; rule {args.rule}; "
          f"GPU median of {args.repeat} after a warm-up, CPU one run", flush=True)
    # first call: compiles the stage kernels (kernels/forest.cu ... intervals.cu) and CuPy's own, timed apart
    t = time.perf_counter()
    label(condense(generate("paper", 2000, 5, 1)), 2, "gpu", args.rule)
    print(f"first call (compile + CuPy kernel cache) {time.perf_counter() - t:.2f} s; "
          f"stage kernels compile {sum(kernels.compile_times.get(k, 0.0) for k in _STAGES):.2f} s", flush=True)
    hdr = (f"{'graph':<22}{'C':>9}{'m':>11}{'levels':>7}{'d':>2}{'p1 ms':>8}{'p2 ms':>8}{'p3 ms':>8}"
           f"{'p4 ms':>8}{'GPU ms':>9}{'peak MiB':>9}{'/need':>6}{'CPU s':>8}{'CPU/GPU':>8}")
    rows = []
    print(hdr, flush=True)
    only = [s for s in args.names.split(",") if s]
    for name, make in graphs(sets, args.data):
        if only and not any(s in name for s in only):
            continue
        if time.perf_counter() - t_start > args.budget:
            print(f"{name:<22} skipped: --budget {args.budget:g} s used up", flush=True)
            continue
        t = time.perf_counter()
        dag = condense(make())
        prep = time.perf_counter() - t
        C, m, L = dag.C, dag.m, dag.n_levels
        csr_bytes = 2 * (8 * (C + 1) + dag.indices.dtype.itemsize * m)
        cpu_ok = m <= args.cpu_max_edges and not any(name.startswith(s) for s in no_cpu)
        cpu_forest = None
        for dims in (1, 5):
            # warm-up run under the memory hook (peak bytes), then the timed runs
            hook = peak_hook()
            cupy.get_default_memory_pool().free_all_blocks()
            with hook:
                _, _, iv_gpu = label(dag, dims, get_backend("gpu"), args.rule)
            peak = hook.peak
            runs = [label(dag, dims, get_backend("gpu"), args.rule)[:2] for _ in range(args.repeat)]
            med = statistics.median(r[0] for r in runs)
            ph = {k: statistics.median(r[1].get(k, 0.0) for r in runs) for k in PHASES}
            cpu_s = "-"
            ratio = "-"
            if cpu_ok:
                # phases 1-2 once, shared by d = 1 and d = 5 (as on the GPU they are recomputed)
                if cpu_forest is None:
                    t = time.perf_counter()
                    cpu_forest = build_forest(dag, 0, args.rule, get_backend("cpu"))
                    cpu_forest_s = time.perf_counter() - t
                t = time.perf_counter()
                _, iv_cpu = label_dimensions(dag, cpu_forest, range(dims), 0, get_backend("cpu"))
                cpu_t = cpu_forest_s + time.perf_counter() - t
                if not np.array_equal(iv_cpu, iv_gpu):
                    print(f"MISMATCH: {name} d={dims} GPU labels differ from CPU labels", flush=True)
                cpu_s = f"{cpu_t:.2f}"
                ratio = f"{cpu_t / med:.1f}x"
            need = csr_bytes + 16 * dims * C
            row = (f"{name:<22}{C:>9}{m:>11}{L:>7}{dims:>2}" + "".join(f"{ph[k] * 1e3:>8.1f}" for k in PHASES)
                   + f"{med * 1e3:>9.1f}{peak / 2**20:>9.1f}{peak / need:>6.2f}{cpu_s:>8}{ratio:>8}")
            rows.append(row)
            print(row + f"   (graph prep {prep:.1f} s)" * (dims == 1), flush=True)
        del dag
    print("\nsummary\n" + hdr)
    print("\n".join(rows))
    print(f"total benchmark time {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "labeling"))
