#!/usr/bin/env bash
# Scaling run: the same graph indexed and queried with 1, 2, ... MPI ranks (one GPU each),
# then one table with the speedups side by side and a byte-for-byte check of every index
# against the 1-rank index.
#   usage: launch/scaling.sh GRAPH DIMS QUERIES "1 2 4 8" [OUTDIR]
#   REPEAT=N (default 3): index builds per rank count; the median labeling time is reported
set -euo pipefail
graph=$1; dims=${2:-8}; queries=${3:-10000000}; ranks=${4:-"1 2"}; out=${5:-scaling-out}
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
[ -x "$here/.venv/bin/python" ] && PY="$here/.venv/bin/python"
if [ -x "$here/.venv/bin/mpiexec" ]; then MPIEXEC="$here/.venv/bin/mpiexec"; else MPIEXEC=${MPIEXEC:-mpirun}; fi
extra=()
if "$MPIEXEC" --version 2>&1 | grep -qi "open mpi"; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=^ofi
    extra=(--oversubscribe --bind-to none)
fi
mkdir -p "$out"
for n in $ranks; do
    echo "== $n rank(s)" >&2
    "$MPIEXEC" "${extra[@]}" -n "$n" "$PY" -m mpi4py -m distgrail.benchmarks.scaling "$graph" --dims "$dims" \
        --queries "$queries" --repeat "${REPEAT:-3}" --output "$out/index-$n.h5" --json "$out/scaling-$n.json" > "$out/log-$n.txt"
done
"$PY" - "$out" $ranks <<'PYEOF'
import json, sys, filecmp
out, ranks = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(f"{out}/scaling-{n}.json")) for n in ranks}
base = runs[ranks[0]]
print(f"graph: {base['n']:,} vertices, {base['C']:,} components, {base['dag_edges']:,} DAG edges; "
      f"d={base['dims']}; {base['queries']:,} random queries; backend {base['backend']}")
print(f"{'ranks':>5} {'labeling s':>11} {'speedup':>8} {'index wall s':>13} {'query s':>9} {'Mq/s':>8} {'speedup':>8}  identical")
for n in ranks:
    r = runs[n]
    same = filecmp.cmp(f"{out}/index-{ranks[0]}.h5", f"{out}/index-{n}.h5", shallow=False)
    print(f"{n:>5} {r['labeling_seconds']:>11.3f} {base['labeling_seconds'] / r['labeling_seconds']:>7.2f}x "
          f"{r['index_wall_seconds']:>13.3f} {r['query_seconds']:>9.3f} {r['queries_per_second'] / 1e6:>8.1f} "
          f"{base['query_seconds'] / r['query_seconds']:>7.2f}x  {'yes' if same else 'NO'}")
    print("      " + ", ".join(f"{k} {v:.3f}" for k, v in r["timings"].items()))
    print("      labeling samples: " + ", ".join(f"{v:.3f}" for v in r.get("labeling_samples", [])))
PYEOF
