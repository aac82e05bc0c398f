"""Stale MPICH segments in /dev/shm (issue 40, item 8): removed only when nobody holds them.

CPU only. The fake segments live in a temporary directory standing in for /dev/shm, with
unique names; the real test kills a rank of a 2-rank ``mpiexec`` job (PyPI's MPICH) and touches
only the segment of that job.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

import pytest

from distgrail.mpi import shmclean

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")

#: holds its arguments: ``rw:PATH`` open read-write, ``ro:PATH`` open read-only, ``map:PATH``
#: mapped (MAP_SHARED) with its descriptor closed; says "ready", then waits for stdin to close
HOLDER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
keep = []
for arg in sys.argv[1:]:
    how, path = arg.split(":", 1)
    fd = os.open(path, os.O_RDONLY if how == "ro" else os.O_RDWR)
    if how == "map":
        addr = libc.mmap(None, 4096, 3, 1, fd, 0)  # PROT_READ|PROT_WRITE, MAP_SHARED
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        os.close(fd)
    else:
        keep.append(fd)
print("ready", flush=True)
sys.stdin.read()
"""


def _segment(d, tag="shm", size=4096):
    name = f"mpich_{tag}_{secrets.token_hex(4)}_0"
    path = d / name
    with open(path, "wb") as f:
        f.truncate(size)
    os.chmod(path, 0o600)
    return name


@pytest.fixture
def holder():
    """Start a process holding the given files; it ends when the test does."""
    procs = []

    def start(*specs):
        p = subprocess.Popen([sys.executable, "-c", HOLDER, *specs], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout.readline().strip() == "ready"
        return p

    yield start
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


def test_segment_names():
    assert shmclean.is_segment_name("mpich_shm_159c42ef_0")
    assert shmclean.is_segment_name("mpich_vci_d5d041_3")
    for name in ("mpich_shar_tmpKuERso", "ucx_shm_posix_5b59511d", "mpich_shm_159c42ef_0.bak",
                 "mpich_shm_xyz_0", "my_mpich_shm_1_0"):
        assert not shmclean.is_segment_name(name), name


def test_stale_removed_held_and_foreign_kept(tmp_path, holder):
    stale, stale_vci = _segment(tmp_path), _segment(tmp_path, "vci")
    rw, ro, mapped = _segment(tmp_path), _segment(tmp_path), _segment(tmp_path)
    other = f"other_shm_{secrets.token_hex(4)}_0"
    (tmp_path / other).write_bytes(b"x")
    (tmp_path / f"mpich_shar_tmp{secrets.token_hex(3)}").write_bytes(b"x")  # a window's file: never ours
    holder(f"rw:{tmp_path / rw}", f"ro:{tmp_path / ro}", f"map:{tmp_path / mapped}")
    before = set(os.listdir(tmp_path))

    # another uid's segments are never touched
    assert shmclean.remove_stale(str(tmp_path), uid=os.getuid() + 4242) == []
    assert shmclean.stale_segments(str(tmp_path)) == sorted([(stale, 4096), (stale_vci, 4096)])
    assert set(os.listdir(tmp_path)) == before  # a dry run removes nothing

    removed = shmclean.remove_stale(str(tmp_path))
    assert sorted(n for n, _ in removed) == sorted([stale, stale_vci])
    assert set(os.listdir(tmp_path)) == before - {stale, stale_vci}  # held ones and other names kept


def test_held_kept_by_kernel_or_proc_alone(tmp_path, holder, monkeypatch):
    """Each check alone keeps a held segment: the kernel's lease when /proc shows nothing (a process
    in another PID namespace), /proc when leases are unavailable."""
    stale, rw, mapped = _segment(tmp_path), _segment(tmp_path), _segment(tmp_path)
    holder(f"rw:{tmp_path / rw}", f"map:{tmp_path / mapped}")

    fd = os.open(tmp_path / stale, os.O_RDONLY)
    try:
        leases = shmclean._lease_free(fd)
    finally:
        os.close(fd)
    if leases:
        with monkeypatch.context() as m:
            m.setattr(shmclean, "_holders", lambda cands, proc, uid: (set(), False))
            assert shmclean.stale_segments(str(tmp_path)) == [(stale, 4096)]

    monkeypatch.setattr(shmclean, "_lease_free", lambda fd: None)
    found = [n for n, _ in shmclean.stale_segments(str(tmp_path))]
    assert rw not in found and mapped not in found
    assert set(found) <= {stale}  # kept too where some process of ours cannot be read


def test_at_job_start(tmp_path, capsys):
    stale = _segment(tmp_path)
    for env in ({}, {"MPI_LOCALRANKID": "1"}, {"MPI_LOCALRANKID": "0", "DISTGRAIL_SHM_CLEANUP": "0"}):
        assert shmclean.at_job_start(env, shm_dir=str(tmp_path)) == [], env  # not rank 0 of a node, or off
    assert (tmp_path / stale).exists()
    assert shmclean.at_job_start({"MPI_LOCALRANKID": "0"}, shm_dir=str(tmp_path / "missing")) == []  # never raises
    assert capsys.readouterr().err == ""

    assert shmclean.at_job_start({"SLURM_LOCALID": "0"}, shm_dir=str(tmp_path)) == [(stale, 4096)]
    assert not (tmp_path / stale).exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "removed 1 stale MPICH segment(s)" in err and stale in err
    assert shmclean.at_job_start({"SLURM_LOCALID": "0"}, shm_dir=str(tmp_path)) == []
    assert capsys.readouterr().err == ""  # nothing removed: nothing said


#: each rank writes its pid to pid<rank>; rank 0 says "ready" when all have
JOB = r"""
import os, sys, time
from mpi4py import MPI
w = MPI.COMM_WORLD
with open(os.path.join(sys.argv[1], f"pid{w.Get_rank()}"), "w") as f:
    f.write(str(os.getpid()))
w.Barrier()
if w.Get_rank() == 0:
    print("ready", flush=True)
time.sleep(120)
"""


def _alive(pid) -> bool:
    """A process that still maps anything (a zombie maps nothing)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return bool(f.read(1))
    except OSError:
        return False


def _mpich() -> bool:
    """``mpiexec`` is MPICH's (Hydra); asked without initialising MPI in this process."""
    try:
        r = subprocess.run([MPIEXEC, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "HYDRA" in r.stdout


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_killed_rank_leaves_a_segment_that_is_removed(tmp_path):
    if not _mpich():
        pytest.skip(f"{MPIEXEC} is not MPICH's Hydra (other MPIs name their files otherwise)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["MPIEXEC_TIMEOUT"] = "150"
    (tmp_path / "job.py").write_text(JOB)
    job = subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, str(tmp_path / "job.py"), str(tmp_path)], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    path = fd = None
    try:
        assert job.stdout.readline().strip() == "ready"
        pids = {r: int((tmp_path / f"pid{r}").read_text()) for r in range(2)}
        with open(f"/proc/{pids[0]}/maps") as f:
            names = {os.path.basename(ln.split()[-1]) for ln in f if "/dev/shm/mpich_" in ln}
        names = [n for n in names if shmclean.is_segment_name(n)]
        assert len(names) == 1, names
        path = os.path.join("/dev/shm", names[0])
        assert os.stat(path).st_uid == os.getuid()
        assert shmclean.stale_segments(only=names) == []  # the live job's segment is kept

        fd = os.open(path, os.O_RDONLY)  # ours: no other job's clean-up removes it before we look
        os.kill(pids[1], 9)
        job.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids.values()):
            assert time.monotonic() < deadline, "the ranks did not end"
            time.sleep(0.1)
        assert os.path.exists(path), "MPICH removed its segment after all (then item 8 is moot)"
        assert shmclean.stale_segments(only=names) == []  # held by this test: kept
        size = os.fstat(fd).st_size
        os.close(fd)
        fd = None
        removed = shmclean.remove_stale(only=names)
        assert removed in ([(names[0], size)], [])  # []: another job's clean-up came first
        assert not os.path.exists(path)
    finally:
        if fd is not None:
            os.close(fd)
        if job.poll() is None:
            job.kill()
            job.wait(timeout=30)
        if path:
            shmclean.remove_stale(only=[os.path.basename(path)])  # a failed test leaves nothing behind
