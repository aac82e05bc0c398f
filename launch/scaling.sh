#!/usr/bin/env bash
# Scaling run: the same graph indexed and queried with 1, 2, ... MPI ranks (one GPU each), then
# one table with the speedups side by side, the broadcast bandwidth of NCCL beside the host
# path's, and a byte-for-byte check of every index against the 1-rank index.
#   usage: launch/scaling.sh GRAPH DIMS QUERIES "1 2 2:mpi" [OUTDIR]
#   a rank count N runs with the transport distgrail picks (NCCL between GPUs where it works);
#   N:mpi runs N ranks on the host path (DISTGRAIL_NCCL=0) for comparison.
#   REPEAT=N (default 3): index builds per run; the median labeling time is reported
#   BCAST_MB=N (default 600): array size of the broadcast bandwidth test
#   CLI=0 skips the cold whole-command run: `distgrail index GRAPH --dims DIMS --json` once per
#   rank count in fresh processes (CuPy import, NCCL set-up and all), its wall clock beside the
#   1-rank one, with the NCCL set-up overlap (nccl_init / nccl_wait / nccl_before_ready), rank
#   0's early label copy (labels_own_*) and the dimensions per rank (DISTGRAIL_ROOT_SHARE sets
#   rank 0's share; DISTGRAIL_NCCL_EARLY=wait makes the first transfer wait for NCCL)
#   PYTHON, MPIEXEC: the Python and the launcher, as launch/mpirun.sh takes them (when not set:
#   the project's .venv/bin/python and its mpiexec when there, else python3 and mpirun)
set -euo pipefail
[ $# -ge 1 ] || { sed -n 5,7p "$0" >&2; exit 2; }
graph=$1; dims=${2:-8}; queries=${3:-10000000}; ranks=${4:-"1 2"}; out=${5:-scaling-out}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x "$here/.venv/bin/python" ]; then PY="$here/.venv/bin/python"; else PY=python3; fi
if [ -z "${MPIEXEC:-}" ]; then
    if [ "$PY" = "$here/.venv/bin/python" ] && [ -x "$here/.venv/bin/mpiexec" ]; then MPIEXEC="$here/.venv/bin/mpiexec"; else MPIEXEC=mpirun; fi
fi
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}   # NVLink multicast off (README.md, "Running under MPI")
extra=()
if "$MPIEXEC" --version 2>&1 | grep -qi "open mpi"; then
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    export OMPI_MCA_btl=${OMPI_MCA_btl:-^ofi}
    extra=(--oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x DISTGRAIL_NCCL)
    for v in DISTGRAIL_ROOT_SHARE DISTGRAIL_NCCL_EARLY; do [ -n "${!v:-}" ] && extra+=(-x "$v"); done
fi
mkdir -p "$out"
runs=()
for spec in $ranks; do
    n=${spec%%:*}
    if [ "$spec" = "$n:mpi" ]; then export DISTGRAIL_NCCL=0; name="hostpath-$n"; else export DISTGRAIL_NCCL=${NCCL:-1}; name="scaling-$n"; fi
    echo "== $n rank(s), $name" >&2
    "$MPIEXEC" "${extra[@]}" -n "$n" "$PY" -m mpi4py -m distgrail.benchmarks.scaling "$graph" --dims "$dims" \
        --queries "$queries" --repeat "${REPEAT:-3}" --bcast-mb "${BCAST_MB:-600}" --output "$out/index-$name.h5" \
        --json "$out/$name.json" > "$out/log-$name.txt"
    if [ "${CLI:-1}" != 0 ]; then  # the whole command, cold, as a user runs it
        t0=$(date +%s.%N)
        "$MPIEXEC" "${extra[@]}" -n "$n" "$PY" -m mpi4py -m distgrail index "$graph" --dims "$dims" \
            -o "$out/cli-$name.h5" --json > "$out/cli-$name.json"
        echo "$t0 $(date +%s.%N)" > "$out/cli-$name.wall"
        # several ranks write the split layout (a main file and parts): merged to compare byte for byte
        "$PY" -m distgrail convert "$out/cli-$name.h5" --layout single -o "$out/cli-$name.single.h5" --quiet
    fi
    runs+=("$name")
done
"$PY" - "$out" "${runs[@]}" <<'PYEOF'
import json, sys, filecmp
out, names = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names}
base_name = names[0]
base = runs[base_name]
print(f"graph: {base['n']:,} vertices, {base['C']:,} components, {base['dag_edges']:,} DAG edges; "
      f"d={base['dims']}; {base['queries']:,} random queries; backend {base['backend']}; speedups against {base_name}")
print(f"{'run':>12} {'transport':>9} {'labeling s':>11} {'speedup':>8} {'index wall s':>13} {'speedup':>8} "
      f"{'query s':>9} {'Mq/s':>8} {'speedup':>8}  identical")
for n in names:
    r = runs[n]
    same = filecmp.cmp(f"{out}/index-{base_name}.h5", f"{out}/index-{n}.h5", shallow=False)
    print(f"{n:>12} {r.get('transport', '-'):>9} {r['labeling_seconds']:>11.3f} "
          f"{base['labeling_seconds'] / r['labeling_seconds']:>7.2f}x {r['index_wall_seconds']:>13.3f} "
          f"{base['index_wall_seconds'] / r['index_wall_seconds']:>7.2f}x {r['query_seconds']:>9.3f} "
          f"{r['queries_per_second'] / 1e6:>8.1f} {base['query_seconds'] / r['query_seconds']:>7.2f}x  "
          f"{'yes' if same else 'NO'}")
    print("      " + ", ".join(f"{k} {v:.3f}" for k, v in r["timings"].items() if not k.startswith("rank")))
    others = [f"{k} {v:.3f}" for k, v in r["timings"].items() if k.startswith("rank")]
    if others:
        print("      other ranks: " + ", ".join(others))
    print("      labeling samples: " + ", ".join(f"{v:.3f}" for v in r.get("labeling_samples", []))
          + "; index wall samples: " + ", ".join(f"{v:.3f}" for v in r.get("index_wall_samples", []))
          + f"; first transport set-up {r.get('transport_setup_first', 0.0):.3f} s")
    try:
        cli = json.load(open(f"{out}/cli-{n}.json"))
        span = lambda m: (lambda a, b: b - a)(*map(float, open(f"{out}/cli-{m}.wall").read().split()))
        wall, base_wall = span(n), span(base_name)
        sec = cli["seconds"]
        keys = ("transport_setup", "nccl_init", "nccl_warmup", "nccl_wait", "nccl_before_ready", "read",
                "phases 3-4", "labels_own_to_host", "labels_own_wait", "labels_to_host", "write")
        same_cli = filecmp.cmp(f"{out}/cli-{base_name}.single.h5", f"{out}/cli-{n}.single.h5", shallow=False)
        print(f"      distgrail index (cold, whole command): {wall:.3f} s, {base_wall / wall:.2f}x; "
              f"in-process {cli['total_seconds']:.3f} s; identical {'yes' if same_cli else 'NO'}; "
              + ", ".join(f"{k} {sec[k]:.3f}" for k in keys if k in sec)
              + "; rank1: " + ", ".join(f"{k} {sec['rank1 ' + k]:.3f}" for k in keys if "rank1 " + k in sec))
    except (OSError, ValueError, KeyError):
        pass
    bw = r.get("bcast_bandwidth") or {}
    if bw:
        parts = [f"{t} {b['GBps']:.1f} GB/s ({b['bytes'] / 2**20:.0f} MiB in {b['seconds'] * 1e3:.1f} ms)"
                 for t, b in bw.items()]
        ratio = (f"; NCCL / host path {bw['nccl']['GBps'] / bw['mpi']['GBps']:.1f}x"
                 if "nccl" in bw and "mpi" in bw else "")
        print("      broadcast GPU to GPUs: " + ", ".join(parts) + ratio)
PYEOF
