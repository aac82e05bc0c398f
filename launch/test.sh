#!/usr/bin/env bash
# All tests: kernel compile check (nvcc, if installed: every kernel into the fatbin the package ships,
# built by launch/setup.sh's install or here when stale; tests/test_fatbins.py checks that they come
# from today's sources and constants), the serial suite, then the MPI tests
# under mpiexec -n 2 and -n 3 (PyPI's MPICH), then the slurm/ templates under a real one-node
# Slurm (tests/slurm/run_slurm_test.sh: needs root and apt-get, else it says why and skips;
# DISTGRAIL_SLURM_TEST=0 skips it). Tests marked gpu skip, with the reason, without a GPU; pytest runs
# with -rs, so every skip prints its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
PY=.venv/bin/python
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

if command -v nvcc >/dev/null 2>&1; then
    echo "== nvcc: every kernels/*.cu compiled into its fatbin (the text and options CuPy gets; stale ones rebuilt)"
    $PY -m distgrail.gpu.kernels --check
else
    echo "== nvcc not installed: kernel compile check skipped"
fi

echo "== serial tests"
$PY -m pytest -q -rs -p no:cacheprovider --timeout=900 tests "$@"

# Each rank runs pytest; ranks > 0 write their report to $TMPDIR/pytest-rank<N>.log (redirected
# here, before pytest starts: pytest's own fd capture would undo a redirect made in conftest.py).
# conftest.py sums the failures over ranks, so a failure on any rank fails every rank's pytest.
logdir=$(mktemp -d)  # (its own folder: two runs on one machine do not remove each other's logs)
# every rank's pytest has its own basetemp, distgrail-pytest-PID-rN in the temp dir (tests/conftest.py),
# removed when its session ends: check that the MPI runs leave none behind
tmpdir=$($PY -c 'import tempfile; print(tempfile.gettempdir())')
leftovers() { ls -d "$tmpdir"/distgrail-pytest-*-r* 2>/dev/null | sort || true; }
before=$(leftovers)
# The rank comes from distgrail's one list of launcher variables (distgrail/mpi/launcher.py).
only_rank0='r=$("$1" -m distgrail.mpi.launcher --rank); [ "$r" = 0 ] || exec >"$0/pytest-rank$r.log" 2>&1; exec "$@"'
# PyPI's MPICH in .venv, else (MPI=site) the site's mpiexec on PATH; MPIEXEC overrides both
launcher=${MPIEXEC:-$( [ -x .venv/bin/mpiexec ] && echo .venv/bin/mpiexec || command -v mpiexec || echo mpiexec )}
for n in 2 3; do
    echo "== MPI tests, mpiexec -n $n (rank 0's report; other ranks log to $logdir/pytest-rank*.log)"
    rm -f "$logdir"/pytest-rank*.log
    set +e
    MPIEXEC_TIMEOUT=600 "$launcher" -n $n bash -c "$only_rank0" "$logdir" \
        $PY -m pytest -q -rs -p no:cacheprovider --only-mpi --no-header --color=no \
        --timeout=300 --timeout-method=thread tests
    rc=$?
    set -e
    if [ $rc -ne 0 ]; then
        echo "MPI tests with $n ranks failed (exit $rc)" >&2
        for f in "$logdir"/pytest-rank*.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done
        exit $rc
    fi
done
left=$(comm -13 <(echo "$before") <(leftovers))
if [ -n "$left" ]; then
    echo "the MPI test runs left their temp folders behind:" >&2
    echo "$left" >&2
    exit 1
fi
echo "== MPI tests left no distgrail-pytest-* folder in $tmpdir"
slurm_test=${DISTGRAIL_SLURM_TEST:-1}
case "${slurm_test,,}" in 0|no|off|false) slurm_test=0 ;; esac
if [ "$slurm_test" != 0 ]; then
    echo "== slurm/ templates under a real one-node Slurm"
    VENV=$PWD/.venv bash tests/slurm/run_slurm_test.sh
else
    echo "== Slurm test skipped (DISTGRAIL_SLURM_TEST=$DISTGRAIL_SLURM_TEST)"
fi
echo "== all tests passed"
