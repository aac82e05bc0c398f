#!/usr/bin/env bash
# Create .venv with distgrail and everything its tests need (idempotent; minutes on a fresh machine where nvcc compiles the kernels, seconds after).
#
#   bash launch/setup.sh                 MPI from PyPI wheels (mpich + mpi4py): no system MPI needed
#   MPI=site bash launch/setup.sh        clusters: mpi4py built from source against the site MPI
#                                        (the mpicc on PATH, e.g. after `module load openmpi`), no mpich wheel
#   GPU=cuda12|cuda13|none               CuPy extra; default: by the driver's CUDA version (nvidia-smi)
#   PYTHON=python3.12                    the Python that creates .venv
#   SETUP_DRY_RUN=1                      print the extras it would install, install nothing
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# (a .venv set up with MPI=site stays so when the quickstart or launch/test.sh runs the set-up again)
MPI=${MPI:-$(sed -n 's/.* mpi=\(.*\)/\1/p' .venv/.distgrail-installed 2>/dev/null || true)}
MPI=${MPI:-pypi}
case "$MPI" in
    pypi | site) ;;
    *) echo "launch/setup.sh: MPI must be pypi or site, got '$MPI'" >&2; exit 2 ;;
esac

gpu=${GPU:-auto}
if [ "$gpu" = auto ]; then
    gpu=none
    if command -v nvidia-smi >/dev/null 2>&1 && smi=$(nvidia-smi 2>/dev/null); then
        cuda=$(sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' <<<"$smi" | head -1)
        if [ -n "$cuda" ] && [ "$cuda" -ge 13 ]; then gpu=cuda13
        elif [ -n "$cuda" ] && [ "$cuda" -ge 12 ]; then gpu=cuda12
        else echo "launch/setup.sh: the driver's CUDA version is '${cuda:-unknown}' (CuPy wheels need 12 or 13): no GPU extra" >&2
        fi
    fi
fi
case "$gpu" in
    none | cuda12 | cuda13) ;;
    *) echo "launch/setup.sh: GPU must be cuda12, cuda13 or none, got '$gpu'" >&2; exit 2 ;;
esac

extras=test
[ "$MPI" = pypi ] && extras="$extras,mpi"
[ "$gpu" != none ] && extras="$extras,gpu-$gpu"
want="extras=$extras mpi=$MPI"
if [ -n "${SETUP_DRY_RUN:-}" ]; then echo "$want"; exit 0; fi  # tests: what would be installed

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
    "$PY" -m venv --clear .venv  # (also a .venv left without pip: python3-venv was missing the first time)
fi
stamp=.venv/.distgrail-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    if [ "$MPI" = site ]; then
        if ! command -v mpicc >/dev/null 2>&1; then
            echo "launch/setup.sh: MPI=site needs the site MPI's mpicc on PATH (e.g. module load openmpi)" >&2
            exit 2
        fi
        # mpi4py's advice for a site MPI: build it from source against that MPI's mpicc
        .venv/bin/python -m pip uninstall -q -y mpich >/dev/null 2>&1 || true
        .venv/bin/python -m pip install -q --no-cache-dir --no-binary=mpi4py --force-reinstall "mpi4py>=3.1"
    fi
    echo "launch/setup.sh: installing distgrail[$extras] into .venv (MPI: $MPI; with nvcc, the CUDA kernels are compiled too)" >&2
    if ! .venv/bin/python -m pip install -q -e ".[$extras]" hatchling; then
        echo "launch/setup.sh: pip could not install distgrail[$extras] (no package index reachable? set" \
             "PIP_INDEX_URL, or PIP_FIND_LINKS=a folder of wheels)" >&2
        exit 1
    fi
    echo "$want" >"$stamp"
    # the install's build hook (hatch_build.py) compiled the kernels into fatbins if nvcc was found
    if .venv/bin/python -m distgrail.gpu.kernels --status >/dev/null 2>&1; then
        echo "launch/setup.sh: CUDA kernels compiled (distgrail/gpu/kernels/fatbin): no compile on a GPU's first run" >&2
    else
        echo "launch/setup.sh: no compiled CUDA kernels (no nvcc?): CuPy compiles them on a GPU's first run" >&2
    fi
fi
# CuPy's own kernels compiled now, not on the first run (docs/kernels.md): once per kernel cache
# folder (CUPY_CACHE_DIR, else CuPy's default), on a machine with the GPU extra and a GPU
warmed=.venv/.distgrail-warmed
if [ "$gpu" != none ] && [ "$(cat "$warmed" 2>/dev/null)" != "${CUPY_CACHE_DIR:-default}" ]; then
    limit=""
    command -v timeout >/dev/null 2>&1 && limit="timeout 900"
    if out=$($limit .venv/bin/python -m distgrail.gpu.warm 2>&1); then
        printf '%s\n' "$out" >&2
        case "$out" in *"kernels added"*) echo "${CUPY_CACHE_DIR:-default}" >"$warmed" ;; esac  # (no GPU: next time)
    else
        printf '%s\n' "$out" >&2
        echo "launch/setup.sh: warming CuPy's kernel cache failed or timed out: the first GPU run compiles its kernels" >&2
    fi
fi
# the CPU backend's numba loops compiled now, not inside a first large CPU run (distgrail/jit_warm.py):
# again when a compiled module, distgrail/jit*.py, NUMBA_CACHE_DIR, numba or Python changed
jwarmed=.venv/.distgrail-jit-warmed
jsum=$( (cat distgrail/jit.py distgrail/jit_warm.py distgrail/*_jit.py distgrail/*/*_jit.py 2>/dev/null
         echo "${NUMBA_CACHE_DIR:-}"
         .venv/bin/python -c 'import sys, numba; print(sys.version, numba.__version__)' 2>/dev/null) | cksum || true)
if [ "$(cat "$jwarmed" 2>/dev/null)" != "$jsum" ]; then
    limit=""
    command -v timeout >/dev/null 2>&1 && limit="timeout 900"
    if out=$($limit .venv/bin/python -m distgrail.jit_warm 2>&1); then
        printf '%s\n' "$out" >&2
        echo "$jsum" >"$jwarmed"
    else
        printf '%s\n' "$out" >&2
        echo "launch/setup.sh: compiling the CPU loops failed: the first large CPU run compiles them" >&2
    fi
fi
