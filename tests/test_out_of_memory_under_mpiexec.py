"""One rank out of memory, or failing with any exception outside a shared step, ends the whole MPI
job with its error (session 48). On one H200, R-MAT 28
built by 2 ranks sharing the GPU (``--partition on --share-gpus``): one rank's CuPy allocation
failed outside any shared step, the command line printed "out of memory" and returned on that
rank, and the other waited in its next collective until the launcher's timeout. Now the rank
ends the job (``MPI_Abort``) with its line, naming the rank. And ranks sharing a GPU each count
their share of its free memory in the partitioned build's fit checks, so such a build is refused
up front instead."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import nullcontext

import pytest

from conftest import ROOT

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPIEXEC_TIMEOUT="60")

# rank 1 fails outside a shared step (rank 0 goes on into the assembly's collective)
SCRIPT = """
import sys
from mpi4py import MPI
import distgrail.mpi.placement as pl
from distgrail.errors import BackendError
if MPI.COMM_WORLD.Get_rank() in {ranks}:
    def boom(*a, **k):
        raise {error}
    pl.AcrossRanks.assemble = boom
from distgrail.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
@pytest.mark.parametrize("error, ranks, status, said", [
    ("MemoryError()", (1,), 2, "distgrail: rank 1, error: out of memory"),
    ("RuntimeError('boom')", (1,), 1, "distgrail: rank 1, internal error: RuntimeError: boom (traceback above)"),
    ("BackendError('no room')", (1,), 2, "distgrail: rank 1, error: no room"),
    ("BackendError('no room')", (0, 1), 2, "distgrail: error: no room")])
def test_one_ranks_failure_outside_a_shared_step_ends_the_job_with_its_error(tmp_path, error, ranks, status, said):
    """Out of memory: status 2 and the line; any other exception (a bug): its traceback, status 1;
    distgrail's own error on one rank: the others are waited for (mpi.errors.ERROR_WAIT), then the
    job ends with it; on every rank alike: each ends cleanly, no MPI_Abort."""
    script = tmp_path / "fail.py"
    script.write_text(SCRIPT.format(error=error, ranks=set(ranks)))
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script), "index", "bundled", "-o", "i.h5",
                        "--backend", "cpu", "--quiet"], capture_output=True, text=True, env=ENV, cwd=tmp_path,
                       timeout=120)
    assert "TIMED OUT" not in r.stderr, r.stderr
    assert r.returncode == status, (r.returncode, r.stderr)
    assert said in r.stderr and (status == 2 or "Traceback" in r.stderr), r.stderr
    assert ("Abort" in r.stderr) == (len(ranks) == 1), r.stderr
    assert not [p for p in os.listdir(tmp_path) if "i.h5" in p]  # (its temporary too: .i.h5.tmp-PID)


class _Be:
    def on_device(self):
        return nullcontext()


@pytest.mark.parametrize("sharing", [1, 2, 4])
def test_ranks_sharing_a_gpu_check_their_share_of_its_free_memory(monkeypatch, sharing):
    from distgrail.gpu import memory
    from distgrail.gpu.memory import GpuMemoryError
    from distgrail.mpi import binding, partition
    from distgrail.mpi.partition_dag import check_rank_fits

    monkeypatch.setattr(memory, "available_gpu_bytes", lambda share=1: ((100 << 30) // share, 141 << 30, 0))
    monkeypatch.setattr(binding, "_SHARING", sharing)
    assert binding.ranks_on_this_gpu() == sharing and partition._free_bytes(_Be()) == (100 << 30) // sharing
    check_rank_fits(_Be(), (100 << 30) // sharing, "the sweeps")  # its share fits
    with pytest.raises(GpuMemoryError) as e:
        check_rank_fits(_Be(), (100 << 30) // sharing + 1, "the sweeps")
    said = str(e.value)
    assert (f"a GPU {sharing} ranks share" in said and "more of them do not help" in said) == (sharing > 1), said
    assert ("use more MPI ranks" in said) == (sharing == 1), said
