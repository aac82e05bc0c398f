#!/usr/bin/env bash
# Create .venv with distgrail and everything its tests need (idempotent; ~20 s on a fresh machine).
# MPI comes from PyPI wheels (mpich + mpi4py): no system MPI needed. CuPy is added when a GPU is seen.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.distgrail-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    extras="test,mpi"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        extras="$extras,gpu"
    fi
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[$extras]" hatchling
    touch "$stamp"
fi
