"""Server benchmark: a round trip through ``distgrail serve`` beside in-process ``Index.query``
and the cold CLI, in one run, then concurrent clients; with ``--ranks 1,4`` the same against
servers of 1 and 4 MPI ranks, their throughputs side by side (``--fronts root,ranks``: each
server of several ranks once with each ``serve --front``).

    python -m distgrail.benchmarks.serve INDEX [--backend auto] [--sizes 1,1000,1000000,10000000]
        [--repeat 5] [--clients 8] [--seconds 30] [--client-pairs 100000] [--ranks 1]
        [--fronts root] [--share-gpus] [--launcher "mpiexec"] [--seed 0] [--no-cli] [--client-processes]
        [--json OUT] [--plot PNG]
    python -m distgrail.benchmarks.serve --replot RUN.json [RUN.json ...] --plot PNG

1. ``open_index`` seconds (the file in the page cache after the first open).
2. For each batch size (seeded uniform random pairs; node labels where the index has them):
   ``Index.query`` in this process after one warm-up call, the round trip through the server
   (``distgrail.connect(url).query``: encode, HTTP on loopback, decode, answer, back) after one
   warm-up call, both the median of ``--repeat``; and the cold CLI, ``distgrail query INDEX
   PAIRS.npy -o A.npy`` in a new process (wall, one run: start-up, open, upload, answer,
   write). Ratios side by side; every answer checked against the in-process answers; and the
   server's own steps for the last round trip (its ``Server-Timing``: the body's read, decode,
   answer, encode, wait).
3. ``--clients`` threads, each with its own connection, send batches of ``--client-pairs`` pairs
   (random slices of the largest set) for ``--seconds`` s: pairs/s, requests/s, p50/p99 latency
   as the clients see it and as the server reports it, wrong answers (checked against the
   in-process answers, must be 0), the server's RSS before and after. Against ``--front
   ranks`` each client thread opens its own connection, placed on rank ``i mod R`` (fresh
   connections until the kernel's pick lands there): the test measures the ranks, not how
   evenly ``SO_REUSEPORT``'s hash spread a few connections. ``--client-processes``: each client
   a process of its own (spawned; the pairs and answers shared through memory-mapped ``.npy``
   files), so that the clients' own encoding and decoding do not share one interpreter's lock.

The server is started here (``python -m distgrail serve INDEX --port 0``; for ``--ranks`` above
1 under ``--launcher -n R python -m mpi4py -m distgrail serve ...``, the launcher by default
``$MPIEXEC`` with ``$MPIRUN_ARGS``, else the ``mpiexec`` beside this Python) and stopped with
SIGTERM, to rank 0 under MPI (the exit status is checked). With several ``--ranks`` the last
table gives each server's load-test throughput and its ratio to the first's, and ``--plot`` (or
``--replot`` of saved ``--json`` files) draws it: pairs/s against ranks, one line per front and
client count, each from its run's 1-rank server, the ranks-times-one-rank line dotted (needs
matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import distgrail

#: seconds the load test's client processes may take to start (and to report after their run)
START_S = 120.0
READY = re.compile(r"serving .+ on (http://\S+) \(.*ready in ([0-9.]+) s\)")


def start_server(index, backend, max_pairs, timeout=600, launch=(), front="root", share_gpus=False):
    """(Popen, url, ready seconds) of a ``distgrail serve`` on a free loopback port (``launch``:
    the MPI launcher's words before the Python, e.g. ``["mpiexec", "-n", "4"]``; ``front``: its
    ``--front``; ``share_gpus``: ``--share-gpus``, more ranks than GPUs)."""
    t = time.perf_counter()
    mpi = ["-m", "mpi4py"] if launch else []
    proc = subprocess.Popen([*launch, sys.executable, *mpi, "-m", "distgrail", "serve", index, "--port", "0",
                             "--backend", backend, "--max-pairs", str(max_pairs), "--timeout", "600",
                             "--front", front, *(["--share-gpus"] if share_gpus and launch else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines = []
    while time.perf_counter() - t < timeout:
        line = proc.stderr.readline()
        if not line:
            raise SystemExit(f"the server ended before it was ready:\n{''.join(lines)}")
        lines.append(line)
        m = READY.search(line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # drain
            return proc, m.group(1), time.perf_counter() - t
    proc.kill()
    raise SystemExit(f"no ready line in {timeout} s:\n{''.join(lines)}")


def median_time(fn, repeat):
    ts = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), out


def cold_cli(index, s, t, backend, tmp):
    """Wall seconds of ``distgrail query INDEX PAIRS.npy -o A.npy`` in a new process, and its answers."""
    ans = os.path.join(tmp, "answers.npy")
    if s.dtype.kind == "U":  # string node labels: a text pairs file ('u v' lines)
        pairs = os.path.join(tmp, "pairs.txt")
        with open(pairs, "w") as f:
            f.writelines(f"{u} {v}\n" for u, v in zip(s.tolist(), t.tolist()))
    else:
        pairs = os.path.join(tmp, "pairs.npy")
        np.save(pairs, np.stack([s, t], axis=1))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "distgrail", "query", index, pairs, "-o", ans, "--backend", backend,
                        "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"distgrail query failed: {r.stderr}")
    return wall, np.load(ans)


def round_trips(args, idx, server, s_all, t_all, want_all, tmp):
    rows = []
    for k in args.sizes:
        s, t, want = s_all[:k], t_all[:k], want_all[:k]
        idx.query(s, t, backend=args.backend)  # warm (the first call of a size sizes the GPU scratch)
        local, (ans, _) = median_time(lambda: idx.query(s, t, backend=args.backend), args.repeat)
        if not np.array_equal(ans, want):
            raise SystemExit(f"{k} pairs: in-process answers changed between calls")
        server.query(s, t)
        trip, (ans, stats) = median_time(lambda: server.query(s, t), args.repeat)
        if not np.array_equal(ans, want):
            raise SystemExit(f"{k} pairs: the server's answers differ from Index.query's")
        cli, ans = cold_cli(args.index, s, t, args.backend, tmp) if not args.no_cli else (float("nan"), want)
        if not np.array_equal(ans, want):
            raise SystemExit(f"{k} pairs: the CLI's answers differ from Index.query's")
        took = server.last_timing  # (the last timed request's Server-Timing: where the server spent it)
        rows.append({"pairs": k, "in_process_s": local, "server_s": trip, "server_answer_s": stats.seconds,
                     "cold_cli_s": cli, "server_over_in_process": trip / local, "cli_over_server": cli / trip,
                     "searched": stats.searched, "server_timing_s": took})
        print(f"{k:>12,} {local * 1e3:12.2f} {trip * 1e3:12.2f} {stats.seconds * 1e3:10.2f} {cli:10.2f} "
              f"{trip / local:9.2f}x {cli / trip:11.1f}x  "
              + " ".join(f"{name} {v * 1e3:.1f}" for name, v in took.items()), flush=True)
    return rows


def placed(url: str, rank: int, tries: int = 1000):
    """A client whose connection reached ``rank`` of a ``--front ranks`` server."""
    for _ in range(tries):
        c = distgrail.connect(url, connections=1)  # (its batches on that rank alone)
        if c.health().get("rank") == rank:
            return c
        c.close()
    raise SystemExit(f"no connection of {tries} reached rank {rank} of {url}")


def _requests(client, s_all, t_all, want_all, k, seconds, seed, got, lock):
    """One client's batches of ``k`` pairs (random slices) for ``seconds`` s, into ``got``
    (``lat``, ``wrong``, ``errors`` lists and ``pairs``)."""
    rng = np.random.default_rng(seed)
    stop_at = time.perf_counter() + seconds
    while time.perf_counter() < stop_at:
        a = int(rng.integers(0, s_all.size - k + 1))
        t0 = time.perf_counter()
        try:
            ans, _ = client.query(s_all[a:a + k], t_all[a:a + k])
        except distgrail.DistGrailError as e:
            got["errors"].append(str(e))
            return
        dt = time.perf_counter() - t0
        bad = int(np.count_nonzero(ans != want_all[a:a + k]))
        with lock:
            got["lat"].append(dt)
            got["pairs"] += k
            if bad:
                got["wrong"].append(bad)


def _client_process(url, folder, k, seconds, seed, rank, start, out):
    """A ``--client-processes`` client: the arrays mapped from ``folder``, a connection (placed on
    ``rank`` unless it is None), ``start`` waited for, then :func:`_requests`; its figures put on
    the queue ``out``."""
    s_all, t_all, want_all = (np.load(os.path.join(folder, f"{x}.npy"), mmap_mode="r") for x in ("s", "t", "want"))
    client = placed(url, rank) if rank is not None else distgrail.connect(url)
    got = {"lat": [], "wrong": [], "errors": [], "pairs": 0}
    start.wait()
    _requests(client, s_all, t_all, want_all, k, seconds, seed, got, threading.Lock())
    client.close()
    out.put(got)


def load_test(args, client, s_all, t_all, want_all, spread: int = 0):
    """``args.clients`` threads (or processes) for ``args.seconds`` s (``spread``: the ranks of a
    ``--front ranks`` server, client ``i`` on rank ``i mod spread``); returns the figures."""
    before = client.health()
    k = min(args.client_pairs, s_all.size)
    got = {"lat": [], "wrong": [], "errors": [], "pairs": 0}
    if getattr(args, "client_processes", False):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        with tempfile.TemporaryDirectory(prefix="distgrail-serve-load-") as folder:
            for name, a in (("s", s_all), ("t", t_all), ("want", want_all)):
                np.save(os.path.join(folder, f"{name}.npy"), a)
            start, out = ctx.Barrier(args.clients + 1), ctx.Queue()
            procs = [ctx.Process(target=_client_process, args=(client.url, folder, k, args.seconds, i,
                                                                i % spread if spread else None, start, out))
                     for i in range(args.clients)]
            try:
                for pr in procs:
                    pr.start()
                try:
                    start.wait(START_S)
                except threading.BrokenBarrierError:
                    raise SystemExit(f"the client processes did not all start in {START_S:g} s") from None
                t0 = time.perf_counter()
                for _ in procs:
                    try:
                        one = out.get(timeout=args.seconds + START_S)
                    except queue.Empty:
                        raise SystemExit("a client process ended without its figures") from None
                    for key in ("lat", "wrong", "errors"):
                        got[key] += one[key]
                    got["pairs"] += one["pairs"]
                wall = time.perf_counter() - t0
            finally:
                for pr in procs:
                    if pr.is_alive():
                        pr.join(5)
                    if pr.is_alive():
                        pr.terminate()
    else:
        lock, start = threading.Lock(), threading.Barrier(args.clients + 1)

        def run(i):  # placed from the thread that sends: a client's connection is its thread's
            try:
                own = placed(client.url, i % spread) if spread else client
            except (distgrail.DistGrailError, SystemExit) as e:
                got["errors"].append(f"client {i}: {e}")
                start.abort()
                return
            try:
                start.wait(START_S)
            except threading.BrokenBarrierError:
                return
            _requests(own, s_all, t_all, want_all, k, args.seconds, i, got, lock)
            if spread:
                own.close()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(args.clients)]
        for th in threads:
            th.start()
        try:
            start.wait(START_S)
        except threading.BrokenBarrierError:
            for th in threads:
                th.join(START_S)
            raise SystemExit(f"the load test's clients did not all start: {got['errors'][:3]}") from None
        t0 = time.perf_counter()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t0
    after = client.health()
    lat, wrong, errors, pairs = got["lat"], got["wrong"], got["errors"], [got["pairs"]]
    lat_ms = np.array(lat) * 1e3
    out = {"clients": args.clients, "pairs_per_request": k, "seconds": wall, "requests": len(lat),
           "pairs": pairs[0], "pairs_per_second": pairs[0] / wall, "requests_per_second": len(lat) / wall,
           "p50_ms": float(np.percentile(lat_ms, 50)) if lat else None,
           "p99_ms": float(np.percentile(lat_ms, 99)) if lat else None,
           "server_p50_ms": after["latency_ms"]["p50"], "server_p99_ms": after["latency_ms"]["p99"],
           "wrong_answers": int(sum(wrong)), "errors": errors[:3], "rss_before": before["rss_bytes"],
           "rss_after": after["rss_bytes"]}
    print(f"{args.clients} clients x {k:,} pairs for {wall:.1f} s: {out['requests']:,} requests, "
          f"{out['pairs_per_second'] / 1e6:.2f} M pairs/s, {out['requests_per_second']:.1f} req/s, "
          f"p50 {_ms(out['p50_ms'])} ms, p99 {_ms(out['p99_ms'])} ms (server: p50 {out['server_p50_ms']} ms, "
          f"p99 {out['server_p99_ms']} ms), wrong answers {out['wrong_answers']}, errors {len(errors)}, "
          f"server RSS {out['rss_before'] / 2**20:.0f} -> {out['rss_after'] / 2**20:.0f} MiB", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("index", nargs="?")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    p.add_argument("--sizes", default="1,1000,1000000,10000000", help="batch sizes, comma separated")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--client-pairs", type=int, default=100_000, help="pairs per request of the load test")
    p.add_argument("--no-cli", action="store_true", help="skip the cold CLI column")
    p.add_argument("--client-processes", action="store_true",
                   help="each load-test client a process of its own (else a thread of this one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ranks", default="1", help="servers of these many MPI ranks, one after the other (1,4)")
    p.add_argument("--share-gpus", action="store_true", help="servers of several ranks with --share-gpus "
                                                             "(more ranks than GPUs)")
    p.add_argument("--fronts", default="root", help="each server of several ranks once with each of these "
                                                   "serve --front (root,ranks)")
    p.add_argument("--launcher", default=None, help="the MPI launcher for --ranks above 1 (default: $MPIEXEC "
                                                    "$MPIRUN_ARGS, else the mpiexec beside this Python)")
    p.add_argument("--json", help="write the figures as JSON here")
    p.add_argument("--plot", help="draw the servers' throughputs against ranks into this PNG")
    p.add_argument("--replot", nargs="+", metavar="JSON", help="draw --plot from these --json files; run nothing")
    args = p.parse_args(argv)
    if args.replot:
        if not args.plot:
            p.error("--replot needs --plot PNG")
        docs = []
        for path in args.replot:
            with open(path) as f:
                docs.append(json.load(f))
        if not any(d.get("servers") for d in docs):
            p.error("--replot: these files hold no run of several servers (--ranks 1,N) to draw")
        figure(docs).savefig(args.plot, dpi=120)
        return 0
    if args.index is None:
        p.error("INDEX is needed (or --replot)")
    for flag in ("sizes", "ranks"):
        text = getattr(args, flag)
        try:
            got = [int(x) for x in text.split(",") if x]
        except ValueError:
            got = []
        if not got or min(got) < 1:
            p.error(f"--{flag}: whole numbers of at least 1 separated by commas, got {text!r}")
        setattr(args, flag, got)
    for flag in ("repeat", "clients", "client_pairs"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be 1 or more, got {getattr(args, flag)}")
    if not args.seconds > 0:
        p.error(f"--seconds must be more than 0, got {args.seconds}")
    args.fronts = [x for x in args.fronts.split(",") if x]
    if not args.fronts or set(args.fronts) - {"root", "ranks"}:
        p.error(f"--fronts takes root and/or ranks (what auto picks depends on the machine), got {args.fronts}")
    largest = max(args.sizes + [args.client_pairs])
    args.backend = distgrail.get_backend(args.backend).name

    t = time.perf_counter()
    idx = distgrail.open_index(args.index)
    opened = time.perf_counter() - t
    print(f"{args.index}: n={idx.n:,}, C={idx.C:,}, d={idx.dims}, K={idx.supports}; open_index {opened:.2f} s; "
          f"backend {args.backend}", flush=True)
    rng = np.random.default_rng(args.seed)
    s_all, t_all = rng.integers(0, idx.n, largest), rng.integers(0, idx.n, largest)
    if idx.node_labels is not None:
        s_all, t_all = idx.node_labels.values[s_all], idx.node_labels.values[t_all]
    want_all, _ = idx.query(s_all, t_all, backend=args.backend)

    results = {"index": os.path.abspath(args.index), "backend": args.backend, "open_index_s": opened}
    servers = [(r, f) for r in args.ranks for f in (args.fronts if r > 1 else ["root"])]
    every = {(str(r) if f == "root" else f"{r} {f}"): one_server(args, idx, s_all, t_all, want_all, largest, r, f)
             for r, f in servers}
    if len(every) == 1:
        results.update(next(iter(every.values())))
    else:
        results["servers"] = {str(r): v for r, v in every.items()}
        print_ratios(every)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    if args.plot and "servers" in results:
        figure([results]).savefig(args.plot, dpi=120)
    bad = any(v.get("load", {}).get("wrong_answers", 0) or v.get("load", {}).get("errors") or v["server_exit_status"]
              for v in every.values())
    return 1 if bad else 0


def one_server(args, idx, s_all, t_all, want_all, largest, ranks, front="root") -> dict:
    """Round trips and the load test against one server of ``ranks`` ranks and ``--front
    front``; its figures."""
    launch = launcher(args.launcher) + ["-n", str(ranks)] if ranks > 1 else []
    proc, url, ready = start_server(args.index, args.backend, largest, launch=launch, front=front,
                                    share_gpus=args.share_gpus)
    results = {"ranks": ranks, "front": front, "server_ready_s": ready, "url": url}
    rank0 = None
    try:
        client = distgrail.connect(url)
        results["device"] = client.info["device"]
        if ranks > 1:
            results["rank_devices"] = client.info["rank_devices"]
            first = client.info["rank_processes"][0]
            if first.get("host") == socket.gethostname():  # (a pid of this machine's)
                rank0 = int(first["pid"])
        print(f"server of {ranks} rank(s){' (--front ranks)' if front == 'ranks' else ''} {url} ready in "
              f"{ready:.2f} s on {client.info['device']}")
        print(f"{'pairs':>12} {'in-proc ms':>12} {'server ms':>12} {'(answer)':>10} {'cold CLI s':>10} "
              f"{'srv/proc':>10} {'CLI/srv':>12}  the server's steps, ms (Server-Timing of the last request)")
        with tempfile.TemporaryDirectory(prefix="distgrail-serve-bench-") as tmp:
            results["round_trip"] = round_trips(args, idx, client, s_all, t_all, want_all, tmp)
        if args.clients and args.seconds > 0:
            results["load"] = load_test(args, client, s_all, t_all, want_all,
                                        ranks if front == "ranks" and ranks > 1 else 0)
        client.close()
    finally:
        stop_server(proc, rank0)
        code = proc.wait(60)
    results["server_exit_status"] = code
    print(f"server stopped by SIGTERM: exit status {code}")
    return results


def stop_server(proc, rank0: int | None) -> None:
    """SIGTERM to the server: to its rank 0 under MPI (every rank then ends with 0, whatever the
    launcher), else (or when rank 0 is gone already) to the process started."""
    if proc.poll() is not None:
        return
    if rank0 is not None:
        try:
            os.kill(rank0, signal.SIGTERM)
            return
        except ProcessLookupError:
            pass
    proc.send_signal(signal.SIGTERM)


def launcher(given: str | None) -> list:
    """The MPI launcher's words: ``given``, else ``$MPIEXEC $MPIRUN_ARGS``, else the mpiexec beside
    this Python (PyPI's MPICH), else ``mpiexec``."""
    if given:
        return shlex.split(given)
    if os.environ.get("MPIEXEC"):
        return [os.environ["MPIEXEC"], *shlex.split(os.environ.get("MPIRUN_ARGS", ""))]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return [beside if os.access(beside, os.X_OK) else "mpiexec"]


def print_ratios(every: dict) -> None:
    """The load test's throughput of each server and its ratio to the first one's."""
    first = next(iter(every.values())).get("load")
    print(f"{'ranks':>8} {'M pairs/s':>10} {'x first':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for r, v in every.items():
        load = v.get("load")
        if not load:
            continue
        ratio = load["pairs_per_second"] / first["pairs_per_second"] if first else float("nan")
        print(f"{r:>8} {load['pairs_per_second'] / 1e6:10.2f} {ratio:8.2f} {_ms(load['p50_ms']):>8} {_ms(load['p99_ms']):>8}")


def figure(docs):
    """Load-test pairs/s against ranks (``docs``: the JSON of runs with several servers): one line
    per front and client count, each from its run's 1-rank server; dotted, that server's figure
    times the ranks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    most = 1
    for doc in docs:
        servers = [v for v in doc.get("servers", {}).values() if v.get("load")]
        one = next((v for v in servers if v["ranks"] == 1), None)
        for front in sorted({v.get("front", "root") for v in servers if v["ranks"] > 1}, reverse=True):
            pts = sorted((v["ranks"], v["load"]["pairs_per_second"] / 1e6) for v in servers
                         if v["ranks"] == 1 or v.get("front", "root") == front)
            clients = servers[0]["load"]["clients"]
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", linestyle="-" if front == "ranks" else "--",
                    label=f"--front {front}, {clients} clients x {servers[0]['load']['pairs_per_request']:,} pairs")
            most = max(most, *(x for x, _ in pts))
        if one is not None:
            top = max(v["ranks"] for v in servers)
            base = one["load"]["pairs_per_second"] / 1e6
            ax.plot([1, top], [base, base * top], color="grey", linestyle=":", linewidth=1,
                    label="ranks x 1 rank" if doc is docs[0] else None)
    ax.set_xticks(range(1, most + 1))
    ax.set_xlabel("ranks (MPI processes serving)")
    ax.set_ylabel("M pairs per second (load test)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _ms(value) -> str:
    """A latency in ms with two decimals, or "-" when no request got through."""
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "serve"))
