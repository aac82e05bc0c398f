"""Under MPI the split layout has every rank write its part beside the index, so every rank checks
the directory it will write into before the build starts: one rank that cannot (a node-local path
missing there, a directory it may not write) is every rank's error at "checking the output path",
naming the index and the directory, instead of the same error after the whole build. Run under
``mpiexec -n 2`` and ``-n 3``; the last test starts its own ``mpiexec`` from the serial suite.

A rank's directory differs from rank 0's here through its working directory: the output is a
relative path, and the last rank runs in a directory without ``out/`` (as a node whose local
path does not exist). Tests run as root, whom permission bits do not stop, so "not writable" is
``os.access`` answering no on that rank.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import distgrail
from distgrail.errors import DistGrailError


def _dirs(comm, tmp_path):
    """``(d, elsewhere)``: a directory every rank shares, with ``out/`` in it, and one without."""
    d = comm.bcast(str(tmp_path) if comm.Get_rank() == 0 else None, root=0)
    if comm.Get_rank() == 0:
        os.mkdir(os.path.join(d, "out"))
        os.mkdir(os.path.join(d, "elsewhere"))
    comm.Barrier()
    return d, os.path.join(d, "elsewhere")


def _refused(comm, d, output, started):
    with pytest.raises(DistGrailError) as e:
        distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", comm=comm, output=output,
                              layout="split", partition="off", full_index_on="root")
    comm.Barrier()
    left = sorted(os.listdir(os.path.join(d, "out"))) if comm.Get_rank() == 0 else None
    assert comm.bcast(left, root=0) == []
    assert not started  # refused before the graph was read
    return e.value


@pytest.mark.mpi(min_size=2)
def test_a_rank_whose_directory_is_missing_stops_every_rank_before_the_build(comm, tmp_path, monkeypatch):
    from distgrail.mpi.placement import AcrossRanks

    d, elsewhere = _dirs(comm, tmp_path)
    last = comm.Get_size() - 1
    monkeypatch.chdir(elsewhere if comm.Get_rank() == last else d)
    started = []
    monkeypatch.setattr(AcrossRanks, "read", lambda self, *a, **k: started.append(1))
    e = _refused(comm, d, os.path.join("out", "idx.h5"), started)
    assert e.rank == last and e.step == "checking the output path", str(e)
    assert f"out/idx.h5: cannot write part {last} of the index on rank {last}: directory " \
           f"{os.path.join(elsewhere, 'out')} does not exist" in str(e)


@pytest.mark.mpi(min_size=2)
def test_a_rank_that_may_not_write_the_directory_stops_every_rank_before_the_build(comm, tmp_path, monkeypatch):
    from distgrail.mpi.placement import AcrossRanks

    d, _ = _dirs(comm, tmp_path)
    out = os.path.join(d, "out")
    if comm.Get_rank() == 1:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **k: False if os.path.abspath(p) == out and mode & os.W_OK
                            else real(p, mode, **k))
    started, read = [], AcrossRanks.read
    monkeypatch.setattr(AcrossRanks, "read", lambda self, *a, **k: started.append(1))
    e = _refused(comm, d, os.path.join(out, "idx.h5"), started)
    assert e.rank == 1 and e.step == "checking the output path", str(e)
    assert f"{out}/idx.h5: cannot write part 1 of the index on rank 1: directory {out} is not writable" in str(e)
    # the single layout: rank 0 alone writes, the other ranks' directories are not theirs to check
    monkeypatch.setattr(AcrossRanks, "read", read)
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", comm=comm,
                                output=os.path.join(out, "one.h5"), layout="single", partition="off")
    ok = comm.Get_rank() != 0 or distgrail.open_index(os.path.join(out, "one.h5")).C == idx.C
    assert all(comm.allgather(ok))


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

SCRIPT = """
import os, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
os.chdir(sys.argv[2] if comm.Get_rank() == comm.Get_size() - 1 else sys.argv[1])
from distgrail.cli import main
sys.exit(main(["index", "bundled", "-o", "out/idx.h5", "--backend", "cpu", "--layout", "split", "--quiet"]))
"""


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
@pytest.mark.parametrize("n", [2, 3])
def test_the_command_line_exits_2_on_every_rank_with_one_message(tmp_path, n):
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env.update(MPIEXEC_TIMEOUT="120", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", str(script), str(tmp_path),
                        str(tmp_path / "elsewhere")], env=env, capture_output=True, text=True, timeout=200)
    want = (f"distgrail: error: rank {n - 1}, checking the output path: out/idx.h5: cannot write part {n - 1} of the "
            f"index on rank {n - 1}: directory {tmp_path / 'elsewhere' / 'out'} does not exist")
    assert r.returncode == 2 and r.stderr.count("distgrail: error:") == 1 and want in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and "MPI_Abort" not in r.stderr + r.stdout
    assert os.listdir(tmp_path / "out") == [] and os.listdir(tmp_path / "elsewhere") == []

