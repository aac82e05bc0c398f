#!/usr/bin/env bash
# The slurm/ templates under a real one-node Slurm (Debian's slurmctld + slurmd, own config in a
# temp dir, free ports, no munge): index.sbatch with 2 tasks on the bundled graph (CPU backend),
# then query.sbatch on the result; a template with a bad graph path must fail, not hang.
# Checks: the jobs COMPLETED, the index equals the one-process index byte for byte, 20072 of the
# 100,000 pairs are reachable, the job log shows 2 ranks in one world, the failing job ends FAILED
# with the distgrail error in its output. Daemons are stopped by pid at the end, whatever happened.
#
#   bash tests/slurm/run_slurm_test.sh          (VENV=... to use another environment)
# Skips (exit 0, reason printed) unless root with apt-get, or Slurm already installed.
# Exit 1 on a failed check.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${VENV:-$root/.venv}
say() { echo "slurm test: $*"; }
skip() { say "SKIPPED: $*"; exit 0; }
fail() { say "FAILED: $*"; exit 1; }

[ -x "$VENV/bin/python" ] || fail "no Python environment at VENV=$VENV (run launch/setup.sh)"
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null; then
    [ "$(id -u)" = 0 ] || skip "Slurm is not installed and this user is not root (cannot apt-get install it)"
    command -v apt-get >/dev/null || skip "Slurm is not installed and there is no apt-get"
    say "installing slurmctld slurmd slurm-client (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -q slurmctld slurmd slurm-client \
            >/tmp/distgrail-slurm-apt.log 2>&1; then
        (DEBIAN_FRONTEND=noninteractive timeout 120 apt-get update -q && DEBIAN_FRONTEND=noninteractive \
            timeout 300 apt-get install -y -q slurmctld slurmd slurm-client) >>/tmp/distgrail-slurm-apt.log 2>&1 \
            || skip "apt-get install slurmctld slurmd slurm-client failed (no package mirror?): $(tail -1 /tmp/distgrail-slurm-apt.log)"
    fi
fi
[ "$(id -u)" = 0 ] || skip "starting slurmd needs root here (SlurmUser=root, no munge)"

work=$(mktemp -d /tmp/distgrail-slurm.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null
    done
    [ ${#pids[@]} -gt 0 ] && say "daemons stopped (pids ${pids[*]})"
    [ -n "${KEEP_SLURM_DIR:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

read -r ctld_port d_port < <("$VENV/bin/python" -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
mkdir -p "$work/state" "$work/spool" "$work/log"
cat >"$work/slurm.conf" <<CONF
ClusterName=distgrail-ci
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$d_port
SlurmUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=pmi2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ReturnToService=2
MinJobAge=600
NodeName=localhost NodeHostname=localhost CPUs=8 State=UNKNOWN
PartitionName=ci Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -i >"$work/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -N localhost >"$work/log/slurmd.out" 2>&1 &
pids+=($!)

state=""
for _ in $(seq 60); do
    state=$(timeout 5 sinfo -h -o '%T' 2>/dev/null | head -1)
    [ "$state" = idle ] && break
    sleep 0.5
done
say "sinfo: $(timeout 5 sinfo -h -o '%P %a %D %T %c' 2>&1 | head -1)"
[ "$state" = idle ] || { tail -5 "$work/log/slurmctld.log" "$work/log/slurmd.log" 2>/dev/null; fail "the node is not idle (state '$state')"; }

# the templates as a user edits them for this cluster: no GPU request (CPU backend), one core per task
for t in index query; do
    sed -e '/^#SBATCH --gpus-per-task/d' -e 's/^#SBATCH --cpus-per-task=.*/#SBATCH --cpus-per-task=2/' \
        "$root/slurm/$t.sbatch" >"$work/$t.sbatch"
done

wait_job() {  # wait_job ID SECONDS -> prints the final state
    local id=$1 limit=$2 st=""
    for _ in $(seq $((limit * 2))); do
        st=$(timeout 5 scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
        case "$st" in
            COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE) echo "$st"; return ;;
        esac
        sleep 0.5
    done
    timeout 5 scancel "$id" 2>/dev/null
    echo "HUNG($st)"
}

submit() {  # submit NAME TEMPLATE VAR=VALUE... -> job id
    local name=$1 tmpl=$2
    shift 2
    (cd "$work" && env "$@" VENV="$VENV" timeout 30 sbatch --parsable --ntasks-per-node=2 \
        --output="$work/$name-%j.out" "$work/$tmpl.sbatch")
}

idx=$work/kegg.h5
id=$(submit index index GRAPH=bundled INDEX="$idx" DIMS=5 SEED=0 BACKEND=cpu) || fail "sbatch index.sbatch failed"
st=$(wait_job "$id" 180)
log=$(cat "$work/index-$id.out" 2>/dev/null)
say "index job $id: $st"
echo "$log" | sed 's/^/    | /'
[ "$st" = COMPLETED ] || fail "index job $id ended $st"
echo "$log" | grep -q "backend cpu, 2 rank(s)" || fail "the index job's log does not show 2 ranks in one world"
[ "$(echo "$log" | grep -c '^index ')" = 1 ] || fail "the index summary is printed by more than one world"

"$VENV/bin/python" -m distgrail index bundled -o "$work/one.h5" --dims 5 --seed 0 --backend cpu --no-mpi --quiet \
    || fail "the one-process index failed"
[ "$(ls "$idx".*.part[01] 2>/dev/null | wc -l)" = 2 ] || fail "the 2-rank index is not split into two parts (--layout auto)"
"$VENV/bin/python" -m distgrail convert "$idx" --layout single -o "$work/merged.h5" --quiet \
    || fail "merging the 2-rank split index failed"
cmp "$work/one.h5" "$work/merged.h5" || fail "the 2-rank index differs from the one-process index"
say "byte-identity: the 2-rank split index, merged, equals the one-process index ($(stat -c %s "$work/merged.h5") bytes)"

ans=$work/answers.txt
id=$(submit query query INDEX="$idx" PAIRS=bundled ANSWERS="$ans" BACKEND=cpu EXTRA_ARGS=--json) \
    || fail "sbatch query.sbatch failed"
st=$(wait_job "$id" 180)
log=$(cat "$work/query-$id.out" 2>/dev/null)
say "query job $id: $st"
echo "$log" | sed 's/^/    | /'
[ "$st" = COMPLETED ] || fail "query job $id ended $st"
got=$(grep -c '^1$' "$ans" 2>/dev/null)
[ "$got" = 20072 ] || fail "$got reachable pairs, expected 20072"
echo "$log" | grep -q '"ranks": 2' || fail "the query job's log does not show 2 ranks in one world"
say "answers: $got of 100,000 pairs reachable (expected 20072)"

id=$(submit bad index GRAPH="$work/no-such-graph.gra" INDEX="$work/bad.h5" DIMS=2 BACKEND=cpu) \
    || fail "sbatch of the failing job failed"
st=$(wait_job "$id" 120)
log=$(cat "$work/bad-$id.out" 2>/dev/null)
say "failing job $id (bad graph path): $st"
echo "$log" | sed 's/^/    | /'
case "$st" in COMPLETED | HUNG*) fail "the job with a bad graph path ended $st" ;; esac
echo "$log" | grep -q "distgrail: error: rank 0, reading the graph $work/no-such-graph.gra" \
    || fail "the distgrail error is not in the failing job's output"
[ ! -e "$work/bad.h5" ] || fail "the failing job left an index file"
id=$(submit none index GRAPH=bundled INDEX="$work/none.h5" DIMS=2 BACKEND=cpu SRUN_MPI=none) \
    || fail "sbatch of the --mpi=none job failed"
st=$(wait_job "$id" 120)
log=$(cat "$work/none-$id.out" 2>/dev/null)
say "job $id with srun --mpi=none (two worlds of one rank): $st"
echo "$log" | sed 's/^/    | /'
case "$st" in COMPLETED | HUNG*) fail "the --mpi=none job ended $st" ;; esac
echo "$log" | grep -q "but MPI sees a world of 1 rank" || fail "the --mpi=none job does not say why it failed"
[ ! -e "$work/none.h5" ] || fail "the --mpi=none job wrote an index"
say "PASSED"
