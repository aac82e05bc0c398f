"""Multi-GPU scaling: labeling, whole-index and query time for one rank count (run under mpirun).

    mpirun -n N python -m mpi4py -m distgrail.benchmarks.scaling GRAPH --dims 16 --queries 10000000 \\
        --output idx-N.h5 --json scaling-N.json [--backend auto] [--repeat 3] [--bcast-mb 600]

One run per rank count; ``launch/scaling.sh`` runs 1, 2, ... ranks (and, as ``N:mpi``, N ranks
with ``DISTGRAIL_NCCL=0``: the host path), prints the table with the speedups side by side and
checks that every index file is byte-identical to the 1-rank one. Kernel compilation and the
NCCL set-up are excluded (a warm-up build on the bundled graph runs first on the same
communicator; its ``transport_setup`` is reported as ``transport_setup_first``). The index is
built ``--repeat`` times like ``distgrail index`` does (each a full build: read, condense, phases,
write; with several ranks the complete Index on rank 0 only); the reported labeling time is the
median, with the timings of that build and every sample beside it. The queries run on the
written index file, opened by every rank (as ``distgrail query`` does).

``labeling`` = the labeling window, from the condensed DAG on rank 0 (on its GPU on a GPU
backend) to all labels in the writer's host memory: the DAG broadcast, phases 1–4, the forest
broadcast, the labels' way to rank 0 (node-shared array or Gatherv on the host path, NCCL
gather and one download on the NCCL path). With one rank: phases 1–4 (the download included).

With several ranks on a GPU backend the run also measures the broadcast bandwidth of a
``--bcast-mb`` array from rank 0's GPU to every GPU, through the chosen transport (NCCL) and
through the host path (download, MPI ``Bcast``, upload), median of 5 after one warm-up each.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import distgrail

#: the timings that make up "labeling" (see the module docstring); absent ones count 0
LABELING = ("bcast_dag", "phases 1-2", "bcast_forest", "alloc_labels", "phases 3-4", "gather_labels",
            "labels_to_host")


def labeling_seconds(timings: dict) -> float:
    return sum(timings.get(k, 0.0) for k in LABELING)


def bcast_bandwidth(comm, tp, be, nbytes: int, repeat: int = 5) -> dict:
    """Collective: seconds and GB/s of broadcasting ``nbytes`` from rank 0's device with ``tp``
    (median of ``repeat`` after one warm-up)."""
    here = comm.Get_rank() == 0
    with be.on_device():
        a = be.xp.ones(nbytes, dtype=np.uint8) if here else None
    tp.bcast(a)  # warm-up for this size
    samples = []
    for _ in range(repeat):
        comm.Barrier()
        t = time.perf_counter()
        got = tp.bcast(a)
        be.synchronize()
        comm.Barrier()
        samples.append(time.perf_counter() - t)
        del got
    s = float(np.median(samples))
    return {"transport": tp.name, "bytes": nbytes, "seconds": s, "GBps": nbytes / s / 1e9, "samples": samples}


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("graph")
    p.add_argument("--dims", type=int, default=8)
    p.add_argument("--queries", type=int, default=10_000_000)
    p.add_argument("--backend", default="auto")
    p.add_argument("--output", required=True)
    p.add_argument("--json", required=True)
    p.add_argument("--repeat", type=int, default=3, help="index builds; the median is reported (default 3)")
    p.add_argument("--bcast-mb", type=int, default=600, help="array size of the bandwidth test (default 600 MB)")
    args = p.parse_args(argv)
    from distgrail.cli_common import resolve_bundled

    args.graph = resolve_bundled(args.graph, "graph")  # ('bundled', as every distgrail command takes it)

    from mpi4py import MPI

    world = MPI.COMM_WORLD
    comm = world.Clone() if world.Get_size() > 1 else None
    rank = world.Get_rank()
    if comm is not None:
        from distgrail.mpi.binding import bind_gpu

        bind_gpu(comm, args.backend)
    be = distgrail.get_backend(args.backend)

    def build(graph, output=None):
        return distgrail.build_index(graph, dims=args.dims, backend=be, output=output, comm=comm,
                                     full_index_on="root")

    warm = build(distgrail.bundled_graph())  # kernels compiled, NCCL set up on this communicator
    first_setup = warm.timings.get("transport_setup", 0.0) if warm is not None else 0.0
    runs = []
    for _ in range(max(1, args.repeat)):
        world.Barrier()
        t0 = time.perf_counter()
        idx = build(args.graph, args.output)
        world.Barrier()
        wall = time.perf_counter() - t0
        if rank == 0:
            runs.append((labeling_seconds(idx.timings), wall, idx.timings, dict(idx.meta)))
    bandwidth = {}
    if comm is not None and be.is_gpu:
        from distgrail.mpi.transport import MpiTransport, transport_for

        tp = transport_for(comm, be)
        bandwidth[tp.name] = bcast_bandwidth(comm, tp, be, args.bcast_mb << 20)
        if tp.name != "mpi":
            bandwidth["mpi"] = bcast_bandwidth(comm, MpiTransport(comm, be), be, args.bcast_mb << 20)
    idx = distgrail.open_index(args.output)  # every rank, as distgrail query does
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
        label, wall, timings, meta = sorted(runs, key=lambda r: r[0])[len(runs) // 2]
        out = {"ranks": world.Get_size(), "backend": be.name, "transport": meta.get("transport", "none"),
               "dims": args.dims, "n": idx.n, "C": idx.C, "dag_edges": int(idx.meta["n_dag_edges"]),
               "timings": timings, "labeling_seconds": label, "labeling_samples": [r[0] for r in runs],
               "index_wall_seconds": wall, "index_wall_samples": [r[1] for r in runs],
               "transport_setup_first": first_setup, "bcast_bandwidth": bandwidth,
               "queries": args.queries, "query_seconds": tq, "queries_per_second": args.queries / tq,
               "reachable": int(np.count_nonzero(ans)), "steps": stats.steps}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(json.dumps(out, indent=2))
    if comm is not None:
        comm.Free()


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "scaling"))
