"""Query throughput against batch size, beside the floor: the same index, the same pairs, one run.

    python -m distgrail.benchmarks.query_floor INDEX [--batches 1000000,10000000,100000000]
        [--repeat 3] [--backend auto] [--seed 0] [--json OUT] [--plot PNG]
    mpirun -n N python -m distgrail.benchmarks.query_floor INDEX ...      # the sharded batch
    python -m distgrail.benchmarks.query_floor --replot ONE.json N.json --plot PNG

For every batch size, uniformly random pairs (``--seed``) are answered by the steps below; each
figure is the best of ``--repeat`` runs after a warm-up call (the index's query state is put on
the device first and not timed). One process:

* ``floor`` (GPU): the prefilter and the one-warp search on int32 pairs already on the device
  (:meth:`~distgrail.query.answer.QueryScratch.launch`): the kernels alone, the most a GPU
  answers from this index; ``upload`` (GPU): both int32 id arrays from pinned host memory to the
  device, the bus time a batch from the host pays (beside the kernels, when streamed);
* ``pinned`` (GPU): :func:`~distgrail.query.answer.answer_batch_cuda` from int32 pairs in pinned
  memory (uploaded as they are);
* ``host arrays``: :meth:`Index.query <distgrail.Index.query>` from ordinary NumPy arrays, the
  ids checked first (what a user's call does; on the CPU backend the only step).

Under MPI with N > 1 ranks: ``sharded``, ``Index.query(..., comm=)`` with the pairs on rank 0
(:func:`distgrail.mpi.query.query_sharded`), and its ``mpi_seconds``. Every step's answers are
compared with the ``host arrays`` (one process) or a one-process call on rank 0 (sharded): they
must be equal. Prints ms, M queries/s and the ratio to the floor per step; ``--json`` keeps the
rows, and ``--replot`` draws the rows of several runs (1 and N ranks) in one plot of queries/s
against batch size, the floor dashed (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

STEPS = ("floor", "upload", "pinned", "host arrays", "sharded")


def _best(fn, repeat: int, sync) -> float:
    fn()  # warm-up
    sync()
    times = []
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times)


def draw_pairs(n: int, k: int, seed: int):
    """``k`` uniformly random pairs of vertex ids below ``n`` (int64 sources, targets)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, k, dtype=np.int64), rng.integers(0, n, k, dtype=np.int64)


def gpu_steps(idx, be, s, t, repeat: int, want) -> dict:
    """``{step: seconds}`` of ``floor``, ``upload`` and ``pinned`` on ``be``'s GPU (module doc);
    each step's answers checked against ``want``."""
    import cupy as cp
    import cupyx

    from ..arrays import copy_parallel
    from ..query.answer import answer_batch_cuda
    from ..query.stats import SearchOptions

    def sync():
        cp.cuda.Device().synchronize()

    k = int(s.size)
    L, pool = idx._state(be, [])
    ps, pt = cupyx.empty_pinned(k, np.int32), cupyx.empty_pinned(k, np.int32)  # (ids below n < 2^31)
    copy_parallel(ps, s)
    copy_parallel(pt, t)
    ds, dt = cp.empty(k, cp.int32), cp.empty(k, cp.int32)
    out = {"upload": _best(lambda: (ds.set(ps), dt.set(pt)), repeat, sync)}
    budget = SearchOptions().visit_budget
    with pool.lend() as sc:
        sc.buffers(k)
        ans, stream = sc.answers[:k], cp.cuda.get_current_stream()
        out["floor"] = _best(lambda: sc.launch(ds, dt, ans, k, stream, budget), repeat, sync)
        _same(ans.get().astype(bool), want, "floor")
    holder = []
    out["pinned"] = _best(lambda: holder.append(answer_batch_cuda(be, L, ps, pt, pool=pool)), repeat, sync)
    _same(holder[-1], want, "pinned")
    return out


def _same(got, want, step) -> None:
    if not np.array_equal(np.asarray(got, dtype=bool), want):
        raise SystemExit(f"query_floor: the {step} answers differ from Index.query's")


def run(index_path: str, batches, repeat: int, backend: str, seed: int, comm=None) -> list:
    """Rows ``{ranks, batch, step, seconds, [mpi_seconds]}`` (rank 0's; other ranks return [])."""
    import distgrail
    from distgrail.gpu.backend import get_backend

    size = comm.Get_size() if comm is not None else 1
    here = comm is None or comm.Get_rank() == 0
    idx = distgrail.open_index(index_path)
    rows = []
    for k in batches:
        s, t = draw_pairs(idx.n, k, seed) if here else (None, None)
        if size == 1:
            be = get_backend(backend)
            sync = (lambda: __import__("cupy").cuda.Device().synchronize()) if be.is_gpu else (lambda: None)
            want = idx.query(s, t, backend=be.name)[0]
            steps = {"host arrays": _best(lambda: idx.query(s, t, backend=be.name), repeat, sync)}
            if be.is_gpu:
                steps.update(gpu_steps(idx, be, s, t, repeat, want))
            rows += [{"ranks": 1, "batch": k, "step": n, "seconds": v} for n, v in steps.items()]
            continue
        want = idx.query(s, t, backend=backend)[0] if here else None
        best, stats = None, None
        for i in range(max(1, repeat) + 1):  # the first call warms up
            comm.Barrier()
            t0 = time.perf_counter()
            got, st = idx.query(s, t, backend=backend, comm=comm)
            w = time.perf_counter() - t0
            if i and (best is None or w < best):
                best, stats = w, st
        if here:
            _same(got, want, "sharded")
            rows.append({"ranks": size, "batch": k, "step": "sharded", "seconds": best,
                         "mpi_seconds": {a: round(b, 6) for a, b in stats.mpi_seconds.items()}})
    return rows if here else []


def table(rows) -> str:
    """The rows as text: ms, M q/s and the ratio to the floor of the same batch (one process's)."""
    floor = {r["batch"]: r["seconds"] for r in rows if r["step"] == "floor"}
    lines = [f"{'ranks':>5}  {'batch':>12}  {'step':<12}{'ms':>10}{'M q/s':>10}{'x floor':>9}"]
    for r in sorted(rows, key=lambda r: (r["batch"], r["ranks"], STEPS.index(r["step"]))):
        f = floor.get(r["batch"])
        x = f"{r['seconds'] / f:9.1f}" if f else f"{'-':>9}"
        extra = f"  {r['mpi_seconds']}" if r.get("mpi_seconds") else ""
        lines.append(f"{r['ranks']:>5}  {r['batch']:>12,}  {r['step']:<12}{r['seconds'] * 1e3:10.2f}"
                     f"{r['batch'] / r['seconds'] / 1e6:10.1f}{x}{extra}")
    return "\n".join(lines)


def figure(rows):
    """Queries/s against batch size (log-log): one line per (ranks, step), the floor dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = sorted({(r["ranks"], r["step"]) for r in rows}, key=lambda x: (STEPS.index(x[1]), x[0]))
    for ranks, step in series:
        pts = sorted((r["batch"], r["batch"] / r["seconds"]) for r in rows if (r["ranks"], r["step"]) == (ranks, step))
        style = dict(color="black", linestyle="--") if step == "floor" else dict(marker="o")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{step}, {ranks} rank(s)"
                if step == "sharded" else step, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pairs per batch")
    ax.set_ylabel("queries per second")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.query_floor", description=__doc__.split("\n")[0])
    ap.add_argument("index", nargs="?")
    ap.add_argument("--batches", default="1000000,10000000,100000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--replot", nargs="+", metavar="JSON")
    args = ap.parse_args(argv)
    if args.replot:
        rows = [r for p in args.replot for r in json.load(open(p))["rows"]]
    else:
        if args.index is None:
            ap.error("INDEX is needed (or --replot)")
        from distgrail.benchmarks import batch_sizes

        batches = batch_sizes(ap, args.batches)
        from distgrail.mpi.launcher import under_launcher

        comm = None
        if under_launcher():
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
        rows = run(args.index, batches, args.repeat, args.backend, args.seed, comm)
        if comm is not None and comm.Get_rank() != 0:
            return 0
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"index": args.index, "backend": args.backend, "rows": rows}, f, indent=1)
    print(table(rows))
    if args.plot:
        figure(rows).savefig(args.plot, dpi=120)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "query_floor"))
