"""Build scaling as a user sees it: the whole ``distgrail index`` command timed on 1 and N ranks.

    python -m distgrail.benchmarks.build_scaling g26.txt g27.txt --ranks 1,2,4 \\
        --variants single:off,split:on --dims 5 --repeat 2 --out /tmp/scal --json scal.json --plot scal.png
    (also [--backend auto] [--share-gpus] [--timeout SECONDS] [--mpiexec PATH] [--mpi-args "..."]
    [--python PATH]; --replot A.json ... --plot P.png [--best])

Each graph × rank count × variant (``LAYOUT:PARTITION``: ``--layout``, ``--partition``) runs the
command ``--repeat`` times as a subprocess (under ``mpiexec -n N python -m mpi4py`` for N > 1), so
start-up, imports, MPI and GPU set-up, read and write all count: what a user waits for, which
``distgrail.benchmarks.scaling`` (one warm process) leaves out. The 1-rank run (layout single,
partition off) runs once per graph, the baseline of every variant. The table gives the median
wall seconds and the median ``total_seconds`` the command reports, each with its speedup over 1
rank, the slowest rank's start-up (process start to the build's clock, ``start s``) and the
rest of the wall (``rest s``: the launcher, the exit), and rank 0's GPU memory peak (CuPy pool
used, ``GPU GB``; ``-`` without a GPU); every sample is in ``--json``. Every index built must be the 1-rank one byte for byte (a
split one merged by ``distgrail convert INDEX --layout single`` first): a speedup never hides a
wrong answer. Exit status 1 if a run failed or an index differs. ``--plot`` draws build time
against ranks beside ideal scaling (needs matplotlib). ``--replot A.json B.json --plot P.png`` runs
nothing: it draws the rows of earlier ``--json`` files into one plot (graphs of several runs).
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time

LAYOUTS = ("single", "split", "auto")
PARTITIONS = ("auto", "on", "off")
#: the 1-rank run's (layout, partition), whatever the variant says
BASELINE = ("single", "off")
#: lines of a failed run's stderr shown
TAIL_LINES = 12


def parse_variants(text: str) -> list:
    """``"single:off,split:on"`` -> ``[("single", "off"), ("split", "on")]``."""
    variants = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        layout, _, partition = item.partition(":")
        if layout not in LAYOUTS or partition not in PARTITIONS:
            raise argparse.ArgumentTypeError(f"variant {item!r}: want LAYOUT:PARTITION, layout one of "
                                             f"{'|'.join(LAYOUTS)}, partition one of {'|'.join(PARTITIONS)}")
        variants.append((layout, partition))
    if not variants:
        raise argparse.ArgumentTypeError("no variant")
    return variants


def parse_ranks(text: str) -> list:
    """``"2,4"`` -> ``[1, 2, 4]``: sorted, 1 always in (the baseline)."""
    ranks = {int(s) for s in text.split(",") if s.strip()}
    if any(n < 1 for n in ranks):
        raise argparse.ArgumentTypeError("ranks must be >= 1")
    return sorted(ranks | {1})


def default_mpiexec() -> str:
    """``$MPIEXEC``, else the ``mpiexec`` beside this Python, else ``mpiexec`` on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.environ.get("MPIEXEC"):
        return os.environ["MPIEXEC"]
    return beside if os.access(beside, os.X_OK) else shutil.which("mpiexec") or "mpiexec"


def index_command(args, graph: str, ranks: int, variant, output: str) -> list:
    """The argv of one ``distgrail index`` run, as a user types it."""
    layout, partition = BASELINE if ranks == 1 else variant
    tail = ["index", graph, "-o", output, "--dims", str(args.dims), "--layout", layout, "--partition", partition,
            "--backend", args.backend, "--quiet", "--json"]
    if ranks == 1:
        return [args.python, "-m", "distgrail", *tail]
    return [args.mpiexec, "-n", str(ranks), *shlex.split(args.mpi_args), args.python, "-m", "mpi4py", "-m",
            "distgrail", *tail, *(["--share-gpus"] if args.share_gpus else [])]


def summary_of(stdout: str) -> dict:
    """The JSON object printed: the whole stdout, else its last line that is one, else its last ``{...}``."""
    for text in [stdout, *reversed(stdout.splitlines()), stdout[stdout.rfind("\n{") + 1:]]:
        try:
            found = json.loads(text)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def merged_path(output: str) -> str:
    return os.path.splitext(output)[0] + "-merged.h5"


def remove_index(output: str) -> None:
    """An index left by an earlier run: the file, its ``.part*`` files and its merged form."""
    for path in [output, merged_path(output), *glob.glob(glob.escape(output) + ".*.part*")]:
        if os.path.lexists(path):
            os.remove(path)


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""


def report_failure(argv: list, status, stderr: str) -> None:
    print(f"FAILED (exit {status}): {shlex.join(argv)}", *("    " + line for line in stderr.splitlines()[-TAIL_LINES:]),
          sep="\n", file=sys.stderr)


def run_once(argv: list, timeout) -> dict:
    """One run: wall seconds of the subprocess, the command's own timings, its exit status."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        status, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        status, stdout, stderr = "timeout", _text(e.stdout), _text(e.stderr)
    except OSError as e:
        status, stdout, stderr = "not started", "", str(e)
    wall = time.perf_counter() - start
    if status != 0:
        report_failure(argv, status, stderr)
    got = summary_of(stdout) if status == 0 else {}
    peak = got.get("gpu_pool_peak_bytes") or {}  # rank 0's CuPy pool, used at its peak (None: no GPU)
    up = got.get("startup_seconds") or {}  # process start to the build's clock, the slowest rank's
    return {"wall": wall, "total": got.get("total_seconds"), "seconds": got.get("seconds", {}), "status": status,
            "gpu_used": peak.get("used") if isinstance(peak, dict) else None, "startup": up.get("slowest")}


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def measure(args, graph: str, ranks: int, variant, output: str) -> dict:
    """A row: ``--repeat`` runs of one (graph, ranks, variant), their medians and every sample."""
    argv, name = index_command(args, graph, ranks, variant, output), ":".join(variant)
    samples = []
    for i in range(args.repeat):
        remove_index(output)
        samples.append(run_once(argv, args.timeout))
        print(f"{graph_name(graph)} {name} {ranks} rank(s) run {i + 1}/{args.repeat}: "
              f"{samples[-1]['wall']:.3f} s wall", file=sys.stderr)
    good = [s for s in samples if s["status"] == 0]
    return {"graph": graph_name(graph), "graph_path": graph, "variant": name, "ranks": ranks,
            "command": shlex.join(argv), "argv": argv, "output": output, "samples": samples,
            "wall": _median(s["wall"] for s in good), "total": _median(s["total"] for s in good),
            "startup": _median(s.get("startup") for s in good),
            "gpu_used": max((s["gpu_used"] for s in good if s.get("gpu_used") is not None), default=None),
            "failed": len(good) < len(samples), "baseline": ranks == 1}


def same_index(args, row: dict, baseline: dict):
    """The row's index is the 1-rank one byte for byte (None when either run failed)."""
    if row["failed"] or baseline["failed"]:
        return None
    path = row["output"]
    if glob.glob(glob.escape(path) + ".*.part0"):
        argv = [args.python, "-m", "distgrail", "convert", path, "--layout", "single", "-o", merged_path(path),
                "--quiet"]
        if run_once(argv, args.timeout)["status"] != 0:
            return False
        path = merged_path(path)
    return os.path.exists(path) and filecmp.cmp(path, baseline["output"], shallow=False)


def graph_name(graph: str) -> str:
    return os.path.splitext(os.path.basename(graph))[0]


def output_path(args, graph: str, ranks: int, variant) -> str:
    suffix = "" if ranks == 1 else "-" + "-".join(variant)
    return os.path.join(args.out, f"{graph_name(graph)}-{ranks}{suffix}.h5")


def graph_rows(args, graph: str) -> list:
    """Rows of one graph: per variant, the shared 1-rank baseline first, then each N > 1."""
    baseline = measure(args, graph, 1, BASELINE, output_path(args, graph, 1, BASELINE))
    baseline["same"] = None if baseline["failed"] else True
    rows = []
    for variant in args.variants:
        rows.append(dict(baseline, variant=":".join(variant), baseline=True))
        for n in (n for n in args.ranks if n > 1):
            rows.append(measure(args, graph, n, variant, output_path(args, graph, n, variant)))
    for row in rows:
        if not row["baseline"]:
            row["same"] = same_index(args, row, baseline)
        for key in ("wall", "total"):
            base, value = baseline[key], row[key]
            row["speedup_" + key] = base / value if base is not None and value else None
    return rows


def verdict(row: dict) -> str:
    if row["failed"]:
        return "FAILED"
    return {True: "same", False: "DIFFER", None: "-"}[row["same"]]


def format_table(rows: list) -> str:
    """The rows as aligned columns (numbers right-aligned)."""
    def num(v, fmt):
        return "-" if v is None else format(v, fmt)

    def rest(r):  # wall outside the build and its start-up: the launcher, the exit
        parts = (r.get("wall"), r.get("total"), r.get("startup"))
        return None if None in parts else parts[0] - parts[1] - parts[2]

    head = ("graph", "variant", "ranks", "wall s", "total s", "wall x", "total x", "start s", "rest s", "GPU GB",
            "index")
    body = [(r["graph"], r["variant"], str(r["ranks"]), num(r["wall"], ".3f"), num(r["total"], ".3f"),
             num(r["speedup_wall"], ".2f"), num(r["speedup_total"], ".2f"), num(r.get("startup"), ".2f"),
             num(rest(r), ".2f"), num(None if r.get("gpu_used") is None else r["gpu_used"] / 1e9, ".1f"), verdict(r))
            for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    cells = [[c.ljust(w) if i in (0, 1, 10) else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
             for line in [head, *body]]
    return "\n".join("  ".join(line).rstrip() for line in cells)


def machine() -> dict:
    """Where the run was: host name, CPU count, ``nvidia-smi -L`` (None without it)."""
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        gpus = None
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count(), "nvidia_smi": gpus}


def plot(rows: list, path: str, args) -> bool:
    """Median wall seconds against ranks, a line per (graph, variant), dashed ideal per graph."""
    try:
        import matplotlib
    except ImportError:
        print("build_scaling: no plot: matplotlib is not installed (pip install 'distgrail[plot]')", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for g, graph in enumerate(dict.fromkeys(r["graph"] for r in rows)):
        mine = [r for r in rows if r["graph"] == graph]
        for variant, marker in zip(dict.fromkeys(r["variant"] for r in mine), "osd^v<>"):
            points = [(r["ranks"], r["wall"]) for r in mine if r["variant"] == variant and r["wall"] is not None]
            if points:
                ax.plot(*zip(*points), marker=marker, color=f"C{g}", label=f"{graph} {variant}")
        base = next((r["wall"] for r in mine if r["ranks"] == 1), None)
        if base is not None:
            ax.plot(args.ranks, [base / n for n in args.ranks], "--", color=f"C{g}", lw=1, label=f"{graph} ideal")
    ax.set_xscale("log", base=2)
    ax.set_xticks(args.ranks, [str(n) for n in args.ranks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    which = "best" if str(args.repeat).startswith("best") else "median"
    ax.set(xlabel="GPUs (MPI ranks)", ylabel=f"distgrail index wall seconds ({which})")
    runs = args.repeat if isinstance(args.repeat, str) else f"median of {args.repeat}"
    ax.set_title(f"whole build, d={args.dims}, backend {args.backend}, {runs}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.build_scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("graphs", nargs="*", help="graph files (distinct base names)")
    p.add_argument("--best", action="store_true", help="with --replot: each run's fastest sample, not the median")
    p.add_argument("--replot", nargs="+", metavar="JSON", help="no run: the table and --plot from the rows of "
                   "earlier --json files (several graphs, machines' runs or dims in one plot)")
    p.add_argument("--ranks", type=parse_ranks, default=[1, 2], help="rank counts (default 1,2; 1 always runs)")
    p.add_argument("--variants", type=parse_variants, default=[("auto", "auto")], help="LAYOUT:PARTITION,...")
    p.add_argument("--dims", type=int, default=5)
    p.add_argument("--repeat", type=int, default=1, help="runs of each row; medians reported (default 1)")
    p.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--out", default="build-scaling", help="folder of the index files (default build-scaling)")
    p.add_argument("--json", help="write rows, samples, commands and machine info here")
    p.add_argument("--plot", help="write the PNG here (needs matplotlib)")
    p.add_argument("--mpiexec", default=None, help="default: $MPIEXEC, the mpiexec beside Python, mpiexec on PATH")
    p.add_argument("--mpi-args", default="", help='launcher options, e.g. "--bind-to none"')
    p.add_argument("--python", default=sys.executable, help="Python that runs distgrail (default this one)")
    p.add_argument("--share-gpus", action="store_true", help="pass --share-gpus to N > 1 rank runs")
    p.add_argument("--timeout", type=float, default=None, help="seconds a run may take (default none)")
    return p


def best_of(rows: list) -> list:
    """The rows with each run's fastest successful sample instead of the median (a run whose first
    sample met a cold page cache), ratios taken again against the same graph's 1-rank row."""
    out = []
    for r in rows:
        good = [s for s in r.get("samples", []) if s.get("status") == 0]
        out.append(dict(r, wall=min((s["wall"] for s in good), default=None),
                        total=min((s["total"] for s in good if s.get("total") is not None), default=None)))
    for r in out:
        base = next((b for b in out if b["graph"] == r["graph"] and b["ranks"] == 1), None)
        for key in ("wall", "total"):
            have = base is not None and base[key] is not None and r[key]
            r["speedup_" + key] = base[key] / r[key] if have else None
    return out


def replot(paths: list, out, best: bool = False) -> list:
    """The rows of earlier ``--json`` files, each graph's name given its ``d``; drawn into ``out``
    (a PNG) when given. Every file's rows keep their own baseline and ratios (``best``: the
    fastest sample of each run, :func:`best_of`)."""
    from types import SimpleNamespace

    rows, ranks, runs = [], set(), set()
    for path in paths:
        with open(path) as f:
            saved = json.load(f)
        mine = [dict(r, graph=f"{r['graph']} d={saved['dims']}") for r in saved["rows"]]
        rows += best_of(mine) if best else mine
        ranks.update(r["ranks"] for r in saved["rows"])
        runs.add(str(saved["repeat"]))
    args = SimpleNamespace(ranks=sorted(ranks), dims="as named", backend="as run",
                           repeat=("best of " if best else "median of ") + "/".join(sorted(runs)))
    if out and plot(rows, out, args):
        print(out)
    return rows


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.replot:
        print(format_table(replot(args.replot, args.plot, args.best)))
        return 0
    if not args.graphs:
        p.error("give graph files, or --replot JSON files")
    args.mpiexec = args.mpiexec or default_mpiexec()
    if len({graph_name(g) for g in args.graphs}) < len(args.graphs):
        p.error("graphs need distinct base names (they name the index files)")
    missing = [g for g in args.graphs if g != "bundled" and not os.path.isfile(g)]  # ('bundled': index's own)
    if missing:  # (before any rank starts: a launched run would only report a failed build)
        p.error(f"no such graph file: {missing[0]}")
    os.makedirs(args.out, exist_ok=True)
    rows = [row for graph in args.graphs for row in graph_rows(args, graph)]
    print(format_table(rows))
    print("(ranks 1: one run per graph, layout single, partition off: the baseline of every variant)")
    for command in dict.fromkeys(r["command"] for r in rows):
        print(f"  {command}")
    bad = any(r["failed"] or r["same"] is False for r in rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"dims": args.dims, "backend": args.backend, "repeat": args.repeat, "ranks": args.ranks,
                       "variants": [":".join(v) for v in args.variants], "machine": machine(),
                       "ok": not bad, "rows": rows}, f, indent=2)
    if args.plot and plot(rows, args.plot, args):
        print(args.plot)
    return 1 if bad else 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "build_scaling"))
