"""Spread queries next to whole-index queries, in one MPI run (issue 24).

    mpirun -n N python -m distgrail.benchmarks.spread_query INDEX [--pairs 1000000] [--backend auto]
        [--share-gpus] [--repeat 3] [--seed 0]

Every rank opens INDEX twice: whole (:func:`distgrail.open_index`, every rank holds the DAG, the
batch is sharded: ``query --partition off``) and spread (:func:`~distgrail.mpi.partition_query.
open_spread_index`, each rank holds its block of DAG rows: ``query --partition on``). Rank 0 draws
``--pairs`` uniform random pairs; each way answers them once to warm up (labels to the device,
kernels compiled), then ``--repeat`` times; the median wall time of the whole collective call is
printed side by side with the ratio spread / whole, and the answers are compared (they must be
equal). Per rank: the DAG edges it holds and the device bytes of its query state. When the whole
index cannot be held (e.g. under ``DISTGRAIL_GPU_MEMORY_LIMIT``), its column says so and the
spread one still runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    from mpi4py import MPI

    import distgrail
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.binding import bind_gpu
    from distgrail.mpi.partition_query import open_spread_index, state_bytes

    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.spread_query", description=__doc__.split("\n")[0])
    p.add_argument("index")
    p.add_argument("--pairs", type=int, default=1_000_000)
    p.add_argument("--backend", default="auto")
    p.add_argument("--share-gpus", action="store_true")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.repeat < 1 or a.pairs < 1:
        p.error(f"--repeat and --pairs must be 1 or more, got {a.repeat}, {a.pairs}")
    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    dev = bind_gpu(comm, a.backend, share=a.share_gpus)
    be = get_backend(a.backend, dev)
    out = {}

    def say(text):
        if me == 0:
            print(text, flush=True)

    spread = open_spread_index(a.index, comm)
    n = spread.n
    rng = np.random.default_rng(a.seed)
    s, t = (rng.integers(0, n, a.pairs), rng.integers(0, n, a.pairs)) if me == 0 else (None, None)
    say(f"{a.index}: n={n:,} C={spread.C:,} DAG edges={spread.meta['n_dag_edges']:,} d={spread.dims} "
        f"K={spread.supports}; {a.pairs:,} random pairs, {comm.Get_size()} ranks, backend {be.name}")
    for way in ("whole", "spread"):
        try:
            idx = spread if way == "spread" else distgrail.open_index(a.index)
            times = []
            for i in range(a.repeat + 1):
                comm.Barrier()
                t0 = time.perf_counter()
                ans, st = idx.query(s, t, backend=be, comm=comm)
                times.append(time.perf_counter() - t0)
            if way == "spread":
                L, rows = spread.spread_state(be)
                held, state = int(rows.indices.size), state_bytes((L, rows))
            else:
                L = idx.labels(be)
                held, state = int(idx.meta["n_dag_edges"]), state_bytes((L,))
            out[way] = (statistics.median(times[1:]), times[0], ans, st, comm.gather((held, state), root=0))
        except Exception as e:  # noqa: BLE001 - reported in the table: the other way still runs
            out[way] = f"{type(e).__name__}: {str(e)[:300]}"
            comm.Barrier()
        idx = L = rows = None  # the whole index's device arrays go before the spread one starts
        if be.is_gpu:
            be.xp.get_default_memory_pool().free_all_blocks()
    if me == 0:
        for way, r in out.items():
            if isinstance(r, str):
                print(f"  {way:6s}  failed: {r}")
                continue
            med, first, ans, st, per = r
            print(f"  {way:6s}  {med:8.3f} s median (first call {first:.3f} s), {a.pairs / med:,.0f} pairs/s, "
                  f"searched {st.searched:,}, rounds {st.search_rounds}")
            for j, (held, state) in enumerate(per):
                print(f"          rank {j}: DAG edges held {held:,}, query state {state / 1e9:.3f} GB")
        if all(not isinstance(r, str) for r in out.values()):
            same = np.array_equal(out["whole"][2], out["spread"][2])
            print(f"  spread / whole time: {out['spread'][0] / out['whole'][0]:.2f}x; answers equal: {same}")
            if not same:
                return 1
        else:
            return 1  # a way failed (its line says why): nothing to compare
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "spread_query"))
