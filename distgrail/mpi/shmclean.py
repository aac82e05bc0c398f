"""Stale MPICH shared memory in ``/dev/shm``: what a killed rank leaves, and its removal.

MPICH (PyPI's ``mpich`` wheel, ch4) keeps one POSIX shared-memory file per job and node,
``/dev/shm/mpich_shm_<world id, hex>_<node id>`` (``mpich_vci_...`` with several VCIs), about
1 MB per rank of the node, mode 0600, owned by the user. Every rank of the node keeps it open and
mapped until ``MPI_Finalize`` unlinks it; after a ``kill -9`` of a rank (or an ``MPI_Abort``)
nobody does, and the file stays until reboot. Its name holds no process id, so a segment is
stale only when *nobody* holds it:

* it is a regular file with such a name, owned by this user;
* no process that ``/proc`` lets us read has it open (``/proc/PID/fd``) or mapped
  (``/proc/PID/maps``, which also shows a mapping whose descriptor was closed);
* the kernel agrees: a write lease (``F_SETLEASE``) is granted only when no other open file,
  descriptor or mapping of any process, in any PID namespace, refers to it. Where leases are
  unavailable, ``/proc`` alone decides, and only when every process of this user was readable
  and this is the host's PID namespace; otherwise nothing is removed.

:func:`at_job_start` runs this on node-local rank 0 when the CLI starts an MPI job, before MPI
is initialised (``DISTGRAIL_SHM_CLEANUP=0`` turns it off); it never raises, and prints one line
to stderr only when it removed something. ``python -m distgrail.mpi.shmclean [--dry-run]``
does it by hand; without distgrail (``fuser`` sees only the processes you may inspect)::

    for f in /dev/shm/mpich_shm_* /dev/shm/mpich_vci_*; do
        [ -O "$f" ] && ! fuser -s "$f" 2>/dev/null && rm -f -- "$f"; done
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import signal
import stat
import sys

from .. import settings

__all__ = ["SHM_DIR", "is_segment_name", "stale_segments", "remove_stale", "at_job_start"]

SHM_DIR = "/dev/shm"
#: names MPICH gives its per-node segments (``sprintf("mpich_shm_%x_%d", world_id, node_id)``)
_NAME = re.compile(r"mpich_(?:shm|vci)_[0-9a-f]+_[0-9]+")
#: node-local rank, by launcher (Hydra, Open MPI, MVAPICH2, Slurm srun)
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
#: the host's (initial) PID namespace: its processes are all in /proc
_INIT_PIDNS = "pid:[4026531836]"
_log = logging.getLogger(__name__)


def is_segment_name(name: str) -> bool:
    """True for the names MPICH gives the per-node segment it leaves behind.

    >>> is_segment_name("mpich_shm_159c42ef_0"), is_segment_name("mpich_shar_tmpKuERso")
    (True, False)
    """
    return _NAME.fullmatch(name) is not None


def _candidates(shm_dir, uid, only):
    """{name: lstat result} of the regular files of ``shm_dir`` with MPICH's names, owned by ``uid``."""
    out = {}
    for name in os.listdir(shm_dir):
        if not is_segment_name(name) or (only is not None and name not in only):
            continue
        try:
            st = os.lstat(os.path.join(shm_dir, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid:
            out[name] = st
    return out


def _base(path: str) -> str:
    return os.path.basename(path.rstrip("\n").removesuffix(" (deleted)"))


def _holders(cands, proc, uid):
    """``(names held by a readable process, unsure)``; unsure: a process of ``uid`` was unreadable."""
    keys = {(f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}", str(st.st_ino)): n for n, st in cands.items()}
    held, unsure = set(), False
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        base, owner = os.path.join(proc, pid), None
        try:
            owner = os.stat(base).st_uid
            for fd in os.listdir(os.path.join(base, "fd")):  # descriptors before mappings: open, mmap, close
                try:
                    name = _base(os.readlink(os.path.join(base, "fd", fd)))
                except OSError:
                    continue
                if name in cands:
                    held.add(name)
            with open(os.path.join(base, "maps"), encoding="utf-8", errors="replace") as f:
                for line in f:
                    part = line.split(None, 5)
                    if len(part) == 6 and ((part[3], part[4]) in keys or _base(part[5]) in cands):
                        held.add(keys.get((part[3], part[4]), _base(part[5])))
        except (FileNotFoundError, ProcessLookupError):
            continue  # the process ended
        except OSError:
            if owner == uid:
                unsure = True  # our own process we cannot read (non-dumpable): it might hold one
    return held, unsure


def _lease_free(fd):
    """True: no other open file or mapping refers to ``fd``'s file; False: one does; None: no leases here.

    The lease is taken and dropped at once. An open by someone else meanwhile would signal us:
    SIGURG (ignored by default) instead of SIGIO (whose default ends the process)."""
    setsig = getattr(fcntl, "F_SETSIG", None)
    if setsig is None or signal.getsignal(signal.SIGURG) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return None
    try:
        fcntl.fcntl(fd, setsig, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
    except OSError as e:
        return False if e.errno in (errno.EAGAIN, errno.EBUSY, errno.ETXTBSY) else None
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    return True


def _host_pidns(proc) -> bool:
    try:
        return os.readlink(os.path.join(proc, "self", "ns", "pid")) == _INIT_PIDNS
    except OSError:
        return False


def _scan(shm_dir, uid, proc, only, remove):
    uid = os.getuid() if uid is None else uid
    cands = _candidates(shm_dir, uid, None if only is None else set(only))
    if not cands:
        return []  # the usual case: nothing more to read
    held, unsure = _holders(cands, proc, uid)
    out = []
    for name in sorted(set(cands) - held):
        path, st = os.path.join(shm_dir, name), cands[name]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino, now.st_uid) != (st.st_dev, st.st_ino, uid):
                continue  # replaced since the listing
            free = _lease_free(fd)
            if free is None:
                free = not unsure and _host_pidns(proc)
            if not free:
                continue
            if remove:
                again = os.lstat(path)
                if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                    continue
                os.unlink(path)
            out.append((name, st.st_size))
        except OSError:
            continue
        finally:
            os.close(fd)
    return out


def stale_segments(shm_dir=SHM_DIR, uid=None, proc="/proc", only=None):
    """``[(name, bytes)]`` of the MPICH segments in ``shm_dir`` owned by ``uid`` (default: ours)
    that no live process holds (``only``: consider these names alone). Nothing is removed."""
    return _scan(shm_dir, uid, proc, only, remove=False)


def remove_stale(shm_dir=SHM_DIR, uid=None, proc="/proc", only=None):
    """Remove what :func:`stale_segments` finds; returns ``[(name, bytes)]`` removed."""
    return _scan(shm_dir, uid, proc, only, remove=True)


def _node_rank(env):
    for var in _LOCAL_RANK_VARS:
        value = env.get(var, "").strip()
        if value.isdigit():
            return int(value)
    return None


def _say(removed, shm_dir):
    names = ", ".join(n for n, _ in removed)
    mb = sum(b for _, b in removed) / 1e6
    return f"distgrail: removed {len(removed)} stale MPICH segment(s) ({mb:.1f} MB) from {shm_dir}: {names}"


def at_job_start(env=None, shm_dir=SHM_DIR):
    """On node-local rank 0 of an MPI job: :func:`remove_stale`. Never raises; one stderr line
    when something was removed. ``DISTGRAIL_SHM_CLEANUP=0`` turns it off. The CLI runs it once,
    before it initialises MPI (``cli._comm``); an API user who starts MPI may call it first."""
    try:
        env = os.environ if env is None else env
        if not settings.get("DISTGRAIL_SHM_CLEANUP", env):
            return []
        if _node_rank(env) != 0:
            return []  # another rank of this node does it (or no launcher said which rank this is)
        removed = remove_stale(shm_dir)
        if removed:
            print(_say(removed, shm_dir), file=sys.stderr, flush=True)
        return removed
    except Exception as e:  # noqa: BLE001 - a clean-up must never fail the job
        _log.debug("distgrail: stale MPICH segment clean-up skipped: %s", e)
        return []


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    dry = "--dry-run" in argv
    found = stale_segments() if dry else remove_stale()
    for name, size in found:
        print(f"{'stale' if dry else 'removed'} {os.path.join(SHM_DIR, name)} ({size} bytes)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
