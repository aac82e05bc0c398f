"""The whole build, CPU path next to GPU path, stage by stage, on the four graphs of issue 13 and a
chain.

    python -m distgrail.benchmarks.build --out DIR [--scale S] [--dims 5] [--repeat 1]
        [--cpu-max-edges M] [--no-gpu] [--json] [--rmat SCALE [--edge-factor 16] [--binary]]

Graphs (generated once into ``DIR``, reused while their parameters stay the same):

* ``dag11.gra``: the paper's DAG, ``distgrail generate paper -n 1500000 --degree 100`` (150 M edges);
* ``dag11.txt``: the same graph as a whitespace edge list;
* ``sf-cycles.gra``: a 1.5 M-vertex, ~150 M-edge copy-model scale-free graph WITH cycles: random
  back edges in its older half (one giant SCC) and reversed copies of edges in its newer half
  (many 2-vertex SCCs), as :mod:`distgrail.benchmarks.condense` makes it;
* ``layered.gra``: a layered DAG of 10^5 levels (2 M vertices, degree 20);
* ``chain.gra``: a chain of 10^7 vertices, 10^7 levels (a dependency or version chain at its
  deepest: where the GPU path hands the condensation and the labels to the host's compiled
  loops, docs/design.md).

``--rmat SCALE`` instead: one Graph500 R-MAT graph, ``rmat-sSCALE-eE.txt`` (``distgrail generate rmat
--scale SCALE --edge-factor E``, E = ``--edge-factor``, default 16; ``--binary``: the ``.h5`` graph),
generated if missing; the table adds read GB/s (file bytes / read stage), the digest's GB/s alone
(BLAKE3 of the file, measured apart, page cache warm) and the peak GPU memory of the index run
(``nvidia-smi`` polled every 50 ms, minus the memory in use before), in bytes per edge too.

``--scale S`` multiplies every vertex, edge and level count (a CPU smoke test: ``--scale 1e-4``).
For each graph and path, ``distgrail index G -o I.h5 --dims D --backend cpu|gpu --json`` runs as a
subprocess (Python start included; the file is read once before, so it comes from the page
cache); the table shows its stage seconds (read/parse, condense, phases 1-4, phase 5, write)
and the whole wall time, CPU path | GPU path | ratio (best wall of ``--repeat`` runs), and whether
the two index files are identical byte for byte. ``--cpu-max-edges M`` skips the CPU path for
graphs of more than M edges (time budget); without a GPU (or with ``--no-gpu``) the GPU column is
skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROWS = ("read/parse", "condense", "phases 1-4", "phase 5", "write", "index wall (subprocess)")
_STAGES = {"read/parse": ("read",), "condense": ("condense",), "phases 1-4": ("phases 1-2", "phases 3-4"),
           "phase 5": ("phase 5",), "write": ("write",)}


def graphs(scale: float):
    """(file name, kind, parameters) of the five graphs at ``scale``."""
    n = max(int(1_500_000 * scale), 50)
    deg = min(100.0, n / 4)
    back = max(int(200_000 * scale), 4)
    ln = max(int(2_000_000 * scale), 60)
    levels = min(max(int(100_000 * scale), 3), ln)
    return [("dag11.gra", "paper", dict(n=n, degree=deg)),
            ("dag11.txt", "paper", dict(n=n, degree=deg)),
            ("sf-cycles.gra", "cyclic", dict(n=n, degree=deg, back=back, small=back)),
            ("layered.gra", "layered", dict(n=ln, degree=min(20.0, ln / 4), levels=levels)),
            ("chain.gra", "chain", dict(n=max(int(10_000_000 * scale), 60)))]


def make_graph(path: str, kind: str, p: dict) -> dict:
    """Write the graph to ``path`` (atomically) unless a sidecar says it is there with ``p``;
    returns the sidecar (parameters, n, m, bytes)."""
    side = path + ".json"
    if os.path.exists(path) and os.path.exists(side):
        with open(side) as f:
            info = json.load(f)
        if info.get("params") == p and info.get("bytes") == os.path.getsize(path):
            return info
    from distgrail.io.generate import generate_csr
    from distgrail.io.graph import edge_graph_csr
    from distgrail.io.writers import write_csr

    if kind == "rmat":
        from distgrail.io.rmat import RMAT, write_rmat

        r = RMAT(p["scale"], p["edge_factor"], seed=p.get("seed", 0))
        t = time.perf_counter()
        write_rmat(r, path, "h5" if path.endswith(".h5") else "edgelist")
        info = {"params": p, "n": r.n, "m": r.m, "bytes": os.path.getsize(path),
                "generate_seconds": time.perf_counter() - t}
        with open(side, "w") as f:
            json.dump(info, f)
        return info
    if kind == "cyclic":
        from distgrail.benchmarks.condense import cyclic_scale_free

        g = cyclic_scale_free(p["n"], p["degree"], p["back"], p["small"])
        indptr, indices = edge_graph_csr(g)
        n = g.n
        del g
    elif kind == "chain":  # (i -> i + 1)
        import numpy as np

        n = int(p["n"])
        indptr, indices = np.minimum(np.arange(n + 1, dtype=np.int64), n - 1), np.arange(1, n, dtype=np.int64)
    else:
        g = generate_csr(kind, p["n"], p["degree"], 0, p.get("levels"))
        n, indptr, indices = g.n, g.indptr, g.indices
    write_csr(n, indptr, indices, path)
    info = {"params": p, "n": int(n), "m": int(indices.size), "bytes": os.path.getsize(path)}
    with open(side, "w") as f:
        json.dump(info, f)
    return info


def _warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


class GpuPeak:
    """Peak GPU memory used (bytes) while the block runs, above what was used before it: nvidia-smi
    polled every 50 ms on a thread (None when there is no nvidia-smi)."""

    def __init__(self, enabled: bool):
        self.enabled, self.peak, self._stop = enabled, None, None

    @staticmethod
    def used():
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                               capture_output=True, text=True, timeout=5)
            return int(r.stdout.split()[0]) << 20 if r.returncode == 0 else None
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return None

    def __enter__(self):
        import threading

        base = self.used() if self.enabled else None
        if base is None:
            return self
        self._stop, top = threading.Event(), [base]

        def poll():
            while not self._stop.wait(0.05):
                u = self.used()
                top[0] = max(top[0], u or 0)

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        self._base, self._top = base, top
        return self

    def __exit__(self, *exc):
        if self._stop is not None:
            self._stop.set()
            self._thread.join()
            self.peak = self._top[0] - self._base


def digest_rate(path: str) -> float:
    """GB/s of the input digest alone (BLAKE3 on every core, as the readers run it)."""
    from distgrail.io.digest import FileDigest

    _warm(path)
    t = time.perf_counter()
    FileDigest(path).result()
    return os.path.getsize(path) / 1e9 / (time.perf_counter() - t)


def run_index(path: str, out: str, backend: str, dims: int, repeat: int) -> dict:
    """Best-wall run of ``distgrail index`` in a subprocess: stage seconds and wall (and on the
    GPU path the peak GPU memory, ``gpu_peak_bytes``)."""
    best = None
    for _ in range(max(repeat, 1)):
        _warm(path)
        cmd = [sys.executable, "-m", "distgrail", "index", path, "-o", out, "--dims", str(dims), "--backend", backend,
               "--json", "--quiet", "--no-mpi"]
        t = time.perf_counter()
        with GpuPeak(backend == "gpu") as peak:
            r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
        sec = json.loads(r.stdout)["seconds"]
        row = {k: sum(sec.get(s, 0.0) for s in stages) for k, stages in _STAGES.items()}
        row[ROWS[-1]] = wall
        row["gpu_peak_bytes"] = peak.peak
        row["notices"] = [x for x in r.stderr.splitlines() if "notice" in x]
        if best is None or wall < best[ROWS[-1]]:
            best = row
    return best


def _same_file(a: str, b: str) -> bool:
    with open(a, "rb") as f, open(b, "rb") as g:
        while True:
            x, y = f.read(1 << 24), g.read(1 << 24)
            if x != y:
                return False
            if not x:
                return True


def table(name: str, info: dict, cpu, gpu, identical) -> str:
    lines = [f"{name}: n={info['n']:,}, m={info['m']:,}, {info['bytes'] / 1e9:.3f} GB"]
    lines.append(f"  {'stage':<26}{'CPU path':>14}{'GPU path':>14}{'ratio':>9}")
    for row in ROWS:
        c = cpu[row] if isinstance(cpu, dict) else None
        g = gpu[row] if isinstance(gpu, dict) else None
        cs = f"{c:.3f} s" if c is not None else "-"
        gs = f"{g:.3f} s" if g is not None else "-"
        ratio = f"{c / g:.1f}x" if c is not None and g else "-"
        lines.append(f"  {row:<26}{cs:>14}{gs:>14}{ratio:>9}")
    for label, v in (("CPU path", cpu), ("GPU path", gpu)):
        if isinstance(v, str):
            lines.append(f"  {label}: {v}")
        elif v and v["notices"]:
            lines.append(f"  {label} notices: " + " | ".join(v["notices"]))
    if identical is not None:
        lines.append(f"  index files identical (CPU vs GPU): {'yes' if identical else 'NO'}")
    gb = info["bytes"] / 1e9
    for label, v in (("CPU path", cpu), ("GPU path", gpu)):
        if isinstance(v, dict) and v["read/parse"]:
            lines.append(f"  {label}: read {gb / v['read/parse']:.2f} GB/s")
        if isinstance(v, dict) and v.get("gpu_peak_bytes") is not None:
            lines.append(f"  {label}: peak GPU memory {v['gpu_peak_bytes'] / 1e9:.2f} GB "
                         f"({v['gpu_peak_bytes'] / max(info['m'], 1):.1f} bytes per edge)")
    if info.get("digest_GBps"):
        lines.append(f"  digest alone (BLAKE3): {info['digest_GBps']:.2f} GB/s")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.build", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory for the graphs and indexes")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies vertex, edge and level counts")
    ap.add_argument("--dims", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="runs per path; the best wall counts")
    ap.add_argument("--cpu-max-edges", type=int, default=None, help="skip the CPU path above this many edges")
    ap.add_argument("--no-gpu", action="store_true", help="CPU path only")
    ap.add_argument("--json", action="store_true", help="also print every row as JSON")
    ap.add_argument("--rmat", type=int, default=None, metavar="SCALE", help="one R-MAT graph of 2^SCALE vertices")
    ap.add_argument("--edge-factor", type=int, default=16, help="--rmat: edges per vertex (default 16)")
    ap.add_argument("--binary", action="store_true", help="--rmat: the binary .h5 graph instead of text")
    a = ap.parse_args(argv)
    if not a.scale > 0:
        ap.error("--scale must be > 0")
    os.makedirs(a.out, exist_ok=True)
    gpu_ok = False
    if not a.no_gpu:
        from distgrail.gpu.backend import gpu_available

        gpu_ok = gpu_available()
    results = []
    todo = graphs(a.scale) if a.rmat is None else [
        (f"rmat-s{a.rmat}-e{a.edge_factor}.{'h5' if a.binary else 'txt'}", "rmat",
         dict(scale=a.rmat, edge_factor=a.edge_factor))]
    for name, kind, p in todo:
        path = os.path.join(a.out, name)
        info = make_graph(path, kind, p)
        if kind == "rmat" and not a.binary:
            info = dict(info, digest_GBps=digest_rate(path))
        out = {b: os.path.join(a.out, f"{name}.{b}.idx.h5") for b in ("cpu", "gpu")}
        if a.cpu_max_edges is not None and info["m"] > a.cpu_max_edges:
            cpu = "skipped (--cpu-max-edges)"
        else:
            cpu = run_index(path, out["cpu"], "cpu", a.dims, a.repeat)
        gpu = run_index(path, out["gpu"], "gpu", a.dims, a.repeat) if gpu_ok else \
            ("skipped (--no-gpu)" if a.no_gpu else "skipped (no usable GPU)")
        same = _same_file(out["cpu"], out["gpu"]) if isinstance(cpu, dict) and isinstance(gpu, dict) else None
        print(table(name, info, cpu, gpu, same), flush=True)
        results.append({"graph": name, **info, "cpu": cpu, "gpu": gpu, "identical": same})
    if a.json:
        print(json.dumps(results, indent=1))
    return 0 if all(r["identical"] is not False for r in results) else 1


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "build"))
