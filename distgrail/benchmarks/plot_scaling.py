"""Plot of a scaling run: speedup against GPUs for labeling, the whole build and queries, beside
ideal scaling (one PNG), from the ``scaling-N.json`` files that ``launch/scaling.sh`` leaves.

    python -m distgrail.benchmarks.plot_scaling scaling-out -o scaling.png

Speedups are against the smallest rank count in the folder (normally 1 GPU). Needs matplotlib: ``pip install distgrail[plot]`` (the ``test`` extra includes it).
"""

from __future__ import annotations

import argparse
import glob
import json
import os

SERIES = (("labeling", "labeling_seconds"), ("whole build", "index_wall_seconds"), ("queries", "query_seconds"))


def load_runs(folder: str) -> dict:
    """{ranks: run} from every ``scaling-N.json`` in ``folder``."""
    runs = {}
    for path in glob.glob(os.path.join(folder, "scaling-*.json")):
        with open(path) as f:
            run = json.load(f)
        runs[int(run["ranks"])] = run
    if not runs:
        raise SystemExit(f"plot_scaling: no scaling-*.json in {folder}")
    return dict(sorted(runs.items()))


def speedups(runs: dict) -> dict:
    """{series name: [(ranks, speedup), ...]} against the smallest rank count."""
    base = runs[min(runs)]
    return {name: [(n, base[key] / r[key]) for n, r in runs.items()] for name, key in SERIES}


def figure(runs: dict):
    """The matplotlib figure of :func:`speedups` beside ideal scaling (needs the ``plot`` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sp = speedups(runs)
    base = min(runs)
    ranks = list(runs)
    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=120)
    ax.plot(ranks, [n / base for n in ranks], "k--", lw=1, label="ideal")
    for (name, pts), marker in zip(sp.items(), "osd"):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=name)
    r0 = runs[base]
    ax.set_title(f"{r0['C']:,} components, {r0['dag_edges']:,} DAG edges, d={r0['dims']}, "
                 f"{r0['queries']:,} queries", fontsize=9)
    ax.set_xlabel("GPUs (MPI ranks)")
    ax.set_ylabel(f"speedup over {base} GPU{'s' if base > 1 else ''}")
    ax.set_xticks(ranks)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def plot(runs: dict, out: str) -> str:
    """Write :func:`figure` to ``out`` (PNG); return ``out``."""
    import matplotlib.pyplot as plt

    fig = figure(runs)
    fig.savefig(out)
    plt.close(fig)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.plot_scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("folder", help="the OUTDIR of launch/scaling.sh")
    p.add_argument("-o", "--output", default="scaling.png")
    args = p.parse_args(argv)
    runs = load_runs(args.folder)
    for name, pts in speedups(runs).items():
        print(f"{name:<12}" + "  ".join(f"{n} GPU: {s:.2f}x" for n, s in pts))
    print(plot(runs, args.output))


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "plot_scaling"))
