"""Graph I/O benchmark: generate, write and read text, convert to the binary file, condense.

    python -m distgrail.benchmarks.io [--sizes dag01,dag11,kinds] [--repeat 3] [--dir /tmp/distgrail-io] [--keep]

For the paper's DAGs dag01 (250,000 vertices, average degree 50, 12.5 M edges) and dag11
(1,500,000 vertices, average degree 100, 150 M edges): time to generate, to write and read
``.gra`` and an edge list (reads: best of ``--repeat``), to convert to the binary ``.h5`` graph file (read + condense + write)
and read it back, and to condense the DAG and the DAG plus random back edges (cycles). Each
step runs in a fresh process, so "peak RSS" is that step's own high-water mark; for text reads
it is also given over the final CSR's size (indptr int64 + indices int32). Text parsing runs
on one core; SHA-256 of the file runs on a second thread beside it (the "1 core" row pins the
whole process, hash included, to one core). Then every generator at ~150 M edges. Big files go
to ``--dir`` and are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

SIZES = {"dag01": (250_000, 50), "dag11": (1_500_000, 100)}
#: the generators at ~150 M edges: (kind, n, average degree, levels)
KINDS = [("paper", 1_500_000, 100, None), ("scale-free", 1_500_000, 100, None),
         ("layered", 1_500_000, 100, 2_000), ("layered", 6_000_000, 26, 100_000)]


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _csr_bytes(g):
    return 8 * (g.n + 1) + 4 * g.m


def step(name: str, a: dict) -> dict:
    """One measurement, run inside a child process."""
    import numpy as np

    from distgrail.io.binary import read_binary_graph, read_condensation, write_binary_graph
    from distgrail.stages.condense import condense
    from distgrail.io.generate import generate_csr
    from distgrail.io.read import read_graph
    from distgrail.io.writers import write_graph

    base = _rss_mb()
    out = {}
    t = time.perf_counter()
    if name == "generate":
        g = generate_csr("paper", a["n"], a["d"], seed=1)
        out["generate_s"] = time.perf_counter() - t
        out["m"] = g.m
        for key, path in (("gra", a["gra"]), ("edgelist", a["txt"])):
            t = time.perf_counter()
            write_graph(g, path)
            out[f"write_{key}_s"] = time.perf_counter() - t
            out[f"{key}_bytes"] = os.path.getsize(path)
    elif name == "generate_kind":
        g = generate_csr(a["kind"], a["n"], a["d"], seed=0, levels=a["levels"])
        out["generate_s"] = time.perf_counter() - t
        out["m"] = g.m
        for key, path in (("h5", a["h5"]), ("gra", a["gra"])):
            t = time.perf_counter()
            write_graph(g, path)
            out[f"write_{key}_s"] = time.perf_counter() - t
            os.remove(path)
    elif name in ("read_gra", "read_edgelist", "read_gra_1core"):
        if name == "read_gra_1core":
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        path = a["txt"] if name == "read_edgelist" else a["gra"]
        g = read_graph(path)
        out["s"] = time.perf_counter() - t
        out["mb_s"] = os.path.getsize(path) / 1e6 / out["s"]
        out["csr_mb"] = _csr_bytes(g) / 1e6
    elif name == "convert":
        g = read_graph(a["gra"])
        out["read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        dag = condense(g)
        out["condense_s"] = time.perf_counter() - t
        out["C"], out["levels"] = dag.C, dag.n_levels
        t = time.perf_counter()
        write_binary_graph(g, a["h5"], dag=dag)
        out["write_s"] = time.perf_counter() - t
        out["h5_bytes"] = os.path.getsize(a["h5"])
    elif name == "read_h5":
        g = read_binary_graph(a["h5"])
        out["graph_s"] = time.perf_counter() - t
        t = time.perf_counter()
        dag = read_condensation(a["h5"])
        out["condensation_s"] = time.perf_counter() - t
        out["C"] = dag.C
    elif name == "condense_cyclic":
        from distgrail.io.graph import EdgeGraph

        g = read_binary_graph(a["h5"])
        rng = np.random.default_rng(0)
        k = a["back"]
        u, v = rng.integers(0, g.n, k), rng.integers(0, g.n, k)
        src = np.concatenate((g.src, np.maximum(u, v).astype(g.src.dtype)))
        dst = np.concatenate((g.dst, np.minimum(u, v).astype(g.dst.dtype)))
        h = EdgeGraph(n=g.n, src=src, dst=dst)
        del g, src, dst
        t = time.perf_counter()
        dag = condense(h)
        out["s"] = time.perf_counter() - t
        out["m"], out["C"], out["dag_m"], out["levels"] = h.m, dag.C, dag.m, dag.n_levels
    else:
        raise SystemExit(f"unknown step {name}")
    out["peak_rss_mb"] = _rss_mb()
    out["base_rss_mb"] = base
    return out


def run_step(name: str, args: dict) -> dict:
    cmd = [sys.executable, "-m", "distgrail.benchmarks.io", "--step", name, "--args", json.dumps(args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"step {name} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_kinds(folder: str) -> list[tuple[str, str, str]]:
    os.makedirs(folder, exist_ok=True)
    rows = []
    for kind, n, d, levels in KINDS:
        a = {"kind": kind, "n": n, "d": d, "levels": levels, "h5": os.path.join(folder, "kind.h5"),
             "gra": os.path.join(folder, "kind.gra")}
        r = run_step("generate_kind", a)
        shape = f"{n:,} vertices, degree {d}" + (f", {levels:,} levels" if levels else "")
        rows.append((f"{kind}: {shape}", f"{r['generate_s']:.1f} s",
                     f"{r['m']:,} edges; write .h5 {r['write_h5_s']:.1f} s, .gra {r['write_gra_s']:.1f} s; "
                     f"peak RSS {r['peak_rss_mb']:,.0f} MB"))
    return rows


def bench(label: str, n: int, d: int, folder: str, keep: bool, repeat: int = 3) -> list[tuple[str, str, str]]:
    os.makedirs(folder, exist_ok=True)
    a = {"n": n, "d": d, "gra": os.path.join(folder, f"{label}.gra"), "txt": os.path.join(folder, f"{label}.txt"),
         "h5": os.path.join(folder, f"{label}.h5"), "back": 1000}
    rows = []
    try:
        gen = run_step("generate", a)
        m = gen["m"]
        rows.append(("generate (paper DAG, in memory CSR)", f"{gen['generate_s']:.1f} s", f"{m:,} edges"))
        rows.append(("write .gra", f"{gen['write_gra_s']:.1f} s", f"{gen['gra_bytes'] / 1e6:,.0f} MB"))
        rows.append(("write edge list", f"{gen['write_edgelist_s']:.1f} s", f"{gen['edgelist_bytes'] / 1e6:,.0f} MB"))
        for step_name, what in (("read_gra", "read .gra"), ("read_gra_1core", "read .gra, process pinned to 1 core"),
                                ("read_edgelist", "read edge list")):
            runs = [run_step(step_name, a) for _ in range(repeat)]
            r = min(runs, key=lambda x: x["s"])
            extra = r["peak_rss_mb"] - r["base_rss_mb"]
            rows.append((what, f"{r['s']:.1f} s", f"{r['mb_s']:.0f} MB/s; peak RSS +{extra:,.0f} MB = "
                                                   f"{extra / r['csr_mb']:.1f}x final CSR ({r['csr_mb']:,.0f} MB)"))
        c = run_step("convert", a)
        rows.append(("convert .gra -> .h5: read", f"{c['read_s']:.1f} s", ""))
        rows.append(("convert: condense (DAG)", f"{c['condense_s']:.1f} s",
                     f"{c['C']:,} components, {c['levels']:,} levels"))
        rows.append(("convert: write .h5 (CSR + condensation)", f"{c['write_s']:.1f} s",
                     f"{c['h5_bytes'] / 1e6:,.0f} MB; peak RSS {c['peak_rss_mb']:,.0f} MB"))
        h = run_step("read_h5", a)
        rows.append(("read .h5 graph (CSR -> edge arrays)", f"{h['graph_s']:.1f} s", ""))
        rows.append(("read .h5 stored condensation", f"{h['condensation_s']:.1f} s", f"{h['C']:,} components"))
        cy = run_step("condense_cyclic", a)
        rows.append((f"condense DAG + {a['back']:,} random back edges", f"{cy['s']:.1f} s",
                     f"{cy['C']:,} components, {cy['dag_m']:,} DAG edges; peak RSS {cy['peak_rss_mb']:,.0f} MB"))
    finally:
        if not keep:
            for k in ("gra", "txt", "h5"):
                if os.path.exists(a[k]):
                    os.remove(a[k])
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.io", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="dag01,dag11,kinds",
                   help="comma-separated: " + ", ".join(SIZES) + ", kinds (the generators at 150 M edges)")
    p.add_argument("--repeat", type=int, default=3, help="text reads: best of this many runs (default 3)")
    p.add_argument("--dir", default="/tmp/distgrail-io", help="folder for the generated files")
    p.add_argument("--keep", action="store_true", help="keep the generated files")
    p.add_argument("--step", help=argparse.SUPPRESS)
    p.add_argument("--args", help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.repeat < 1:
        p.error(f"--repeat must be 1 or more, got {o.repeat}")
    unknown = [x for x in o.sizes.split(",") if x not in SIZES and x != "kinds"]
    if unknown:
        p.error(f"--sizes: {', '.join(map(repr, unknown))} is none of {', '.join(SIZES)}, kinds")
    if o.step:
        print(json.dumps(step(o.step, json.loads(o.args))))
        return 0
    for label in o.sizes.split(","):
        if label == "kinds":
            print("\ngenerators at ~150 M edges (generate = CSR in memory; then write each file)", flush=True)
            rows = bench_kinds(o.dir)
        else:
            n, d = SIZES[label]
            print(f"\n{label}: paper DAG, {n:,} vertices, average degree {d}", flush=True)
            rows = bench(label, n, d, o.dir, o.keep, o.repeat)
        w = max(len(r[0]) for r in rows)
        print(f"| {'step':<{w}} | time | notes |\n|{'-' * (w + 2)}|-----:|-------|")
        for r in rows:
            print(f"| {r[0]:<{w}} | {r[1]} | {r[2]} |", flush=True)
    if not o.keep and os.path.isdir(o.dir) and not os.listdir(o.dir):
        shutil.rmtree(o.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "io"))
