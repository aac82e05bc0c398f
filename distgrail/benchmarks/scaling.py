"""Multi-GPU scaling: labeling and query time for one rank count (run under mpirun).

    mpirun -n N python -m mpi4py -m distgrail.benchmarks.scaling GRAPH --dims 8 --queries 10000000 \\
        --output idx-N.h5 --json scaling-N.json

One run per rank count; ``launch/scaling.sh`` runs 1, 2, ... ranks, prints the table with the
speedups side by side and checks that every index file is byte-identical to the 1-rank one.
Kernel compilation is excluded (a warm-up build on the bundled graph runs first). The index is
built ``--repeat`` times (each a full build: read, condense, phases, write); the reported
labeling time is the median, with the timings of that build and every sample beside it.
``labeling`` = phases 1–4 (the CSR upload to the GPU included) plus the broadcast of phases
1–2, the allocation of the node-shared label array and the gather of the labels: the time
from the condensed DAG being in every rank's host memory to all labels being in the writer
rank's.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import distgrail

#: the timings that make up "labeling" (see the module docstring)
LABELING = ("phases 1-2", "bcast_forest", "alloc_labels", "phases 3-4", "gather_labels")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("graph")
    p.add_argument("--dims", type=int, default=8)
    p.add_argument("--queries", type=int, default=10_000_000)
    p.add_argument("--backend", default="auto")
    p.add_argument("--output", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--repeat", type=int, default=3, help="index builds; the median is reported (default 3)")
    args = p.parse_args(argv)

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    comm = world.Clone() if world.Get_size() > 1 else None
    rank = world.Get_rank()
    if comm is not None:
        from distgrail.mpi.binding import bind_gpu

        bind_gpu(comm, args.backend)
    be = distgrail.get_backend(args.backend)
    distgrail.build_index(distgrail.bundled_graph(), dims=args.dims, backend=be, comm=comm)  # warm-up
    runs = []
    for _ in range(max(1, args.repeat)):
        world.Barrier()
        t0 = time.perf_counter()
        idx = distgrail.build_index(args.graph, dims=args.dims, backend=be, output=args.output, comm=comm)
        world.Barrier()
        wall = time.perf_counter() - t0
        runs.append((sum(idx.timings.get(k, 0.0) for k in LABELING), wall, idx.timings))
    label, wall, timings = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
    rng = np.random.default_rng(12345)
    s = t = None
    if rank == 0:
        s = rng.integers(0, idx.n, args.queries)
        t = rng.integers(0, idx.n, args.queries)
    idx.query(s[:100_000] if rank == 0 else None, t[:100_000] if rank == 0 else None, backend=be, comm=comm)
    world.Barrier()
    tq = time.perf_counter()
    ans, stats = idx.query(s, t, backend=be, comm=comm)
    world.Barrier()
    tq = time.perf_counter() - tq
    if rank == 0:
        out = {"ranks": world.Get_size(), "backend": be.name, "dims": args.dims, "n": idx.n, "C": idx.C,
               "dag_edges": int(idx.meta["n_dag_edges"]), "timings": timings, "labeling_seconds": label,
               "labeling_samples": [r[0] for r in runs], "index_wall_seconds": wall, "queries": args.queries, "query_seconds": tq,
               "queries_per_second": args.queries / tq, "reachable": int(np.count_nonzero(ans)),
               "steps": stats.steps}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
