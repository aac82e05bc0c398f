#!/usr/bin/env bash
# Run any distgrail command under MPI, one rank per GPU:
#
#   bash launch/mpirun.sh index big.gra -o big.h5 --dims 16
#   bash launch/mpirun.sh query big.h5 pairs.txt -o answers.npy
#   bash launch/mpirun.sh -n 4 index bundled -o kegg.h5 --backend cpu     # ranks given (no GPU needed)
#
# Ranks: -n N if given, else NP, else the number of GPUs `nvidia-smi -L` lists (only those in
# CUDA_VISIBLE_DEVICES when it is set). Each rank binds GPU (node-local rank % GPUs) itself.
# Launcher: MPIEXEC if set; else .venv/bin/mpiexec (PyPI's MPICH) when the Python is the
# project's .venv; else mpirun from PATH. Python: PYTHON if set, else .venv/bin/python, else
# python3. Extra launcher options: MPIRUN_ARGS. It runs `python -m mpi4py -m distgrail ...`,
# so an uncaught error on one rank aborts the whole job instead of leaving the others waiting.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)

np_=${NP:-}
if [ "${1:-}" = "-n" ] || [ "${1:-}" = "-np" ]; then
    np_=${2:-}
    case "$np_" in
        '' | 0 | *[!0-9]*) echo "launch/mpirun.sh: -n needs a positive number, got '$np_'" >&2; exit 2 ;;
    esac
    shift 2
fi
[ "${1:-}" = "--" ] && shift
if [ -n "$np_" ]; then  # NP from the environment (-n was checked above)
    case "$np_" in
        0 | *[!0-9]*) echo "launch/mpirun.sh: NP needs a positive number, got '$np_'" >&2; exit 2 ;;
    esac
fi
if [ $# -eq 0 ]; then
    echo "usage: launch/mpirun.sh [-n RANKS] COMMAND [ARGS...]   (COMMAND: index, query, info, ...)" >&2
    exit 2
fi

if [ -z "$np_" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU '); then
        if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
            visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
            [ "$visible" -lt "$gpus" ] && gpus=$visible
        fi
        np_=$gpus
    fi
fi
case "$np_" in
    '' | 0 | *[!0-9]*)
        echo "launch/mpirun.sh: no GPU found (nvidia-smi -L) and no rank count given; pass -n RANKS" >&2
        exit 2 ;;
esac

if [ -n "${PYTHON:-}" ]; then
    py=$PYTHON
elif [ -x "$here/.venv/bin/python" ]; then
    py=$here/.venv/bin/python
else
    py=$(command -v python3)
fi
# an absolute path: Open MPI started by its absolute path acts as if given --prefix and puts
# its own bin/ first on the ranks' PATH, so a bare "python3" could become another Python there
case "$py" in
    */*) ;;
    *) py=$(command -v "$py" || echo "$py") ;;
esac
if [ -n "${MPIEXEC:-}" ]; then
    launcher=$MPIEXEC
elif [ "$py" = "$here/.venv/bin/python" ] && [ -x "$here/.venv/bin/mpiexec" ]; then
    launcher=$here/.venv/bin/mpiexec
elif command -v mpirun >/dev/null 2>&1; then
    launcher=$(command -v mpirun)
else
    launcher=mpiexec
fi

extra=()
if "$launcher" --version 2>&1 | grep -qiE 'open mpi|open-mpi|openrte'; then
    # Open MPI: allowed as root only with both variables; the ofi btl only slows start-up here
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    export OMPI_MCA_btl=${OMPI_MCA_btl:-^ofi}
    cores=$(nproc 2>/dev/null || echo 1)
    [ "$np_" -gt "$cores" ] && extra+=(--oversubscribe)
    # Open MPI binds each rank to one core when there are 2 ranks or fewer (to a socket above):
    # a rank's read threads, its BLAKE3 digest threads and CUDA's would share that core (R-MAT 27
    # on 2 H200s, --partition on: the read took 11.9 s, 4.5 s in one unbound process). Unbound
    # unless MPIRUN_ARGS or the MCA environment binds or maps the ranks itself
    case " ${MPIRUN_ARGS:-} " in
        *bind-to* | *map-by* | *cpu-set* | *cpus-per-* | *rankfile*) ;;
        *) [ -n "${OMPI_MCA_hwloc_base_binding_policy:-}${OMPI_MCA_rmaps_base_mapping_policy:-}" ] ||
               extra+=(--bind-to none) ;;
    esac
fi

# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of words on purpose
user_args=(${MPIRUN_ARGS:-})
echo "+ $launcher -n $np_ ${extra[*]} ${user_args[*]} $py -m mpi4py -m distgrail $*" >&2
exec "$launcher" -n "$np_" "${extra[@]}" "${user_args[@]}" "$py" -m mpi4py -m distgrail "$@"
