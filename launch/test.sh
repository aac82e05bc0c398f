#!/usr/bin/env bash
# All tests: kernel compile check (nvcc, if installed), the serial suite, then the MPI tests
# under mpiexec -n 2 and -n 3 (PyPI's MPICH). Tests marked gpu skip, with the reason, without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
PY=.venv/bin/python
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

if command -v nvcc >/dev/null 2>&1; then
    echo "== nvcc: compile every kernels/*.cu (sm_90, the options CuPy gets)"
    $PY -m distgrail.kernels --check
else
    echo "== nvcc not installed: kernel compile check skipped"
fi

echo "== serial tests"
$PY -m pytest -q -p no:cacheprovider --timeout=900 tests "$@"

for n in 2 3; do
    echo "== MPI tests, mpiexec -n $n (rank 0's report; other ranks log to \$TMPDIR/pytest-rank*.log)"
    set +e
    MPIEXEC_TIMEOUT=900 .venv/bin/mpiexec -n $n $PY -m pytest -q -p no:cacheprovider --only-mpi \
        --timeout=300 --timeout-method=thread tests
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        echo "MPI tests with $n ranks failed (exit $rc)" >&2
        for f in "${TMPDIR:-/tmp}"/pytest-rank*.log; do [ -f "$f" ] && { echo "--- $f"; tail -30 "$f"; }; done
        exit $rc
    fi
done
echo "== all tests passed"
