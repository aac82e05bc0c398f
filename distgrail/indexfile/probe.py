"""A split index's main file opened first in another process: HDF5 can crash or loop for good
on a damaged one (:func:`check_main_file`), which no error of this process could report.

A flipped bit in the main file's virtual datasets' mappings (HDF5's global heap: the part files'
names and the selections) made HDF5 read past a buffer (SIGSEGV) or loop while opening a dataset:
``info``, ``query`` and ``convert`` died, or never ended. A child process opens the file first,
every dataset and its mappings (what a reader does before it reads any row); one that dies of a
signal, or runs past :data:`PROBE_SECONDS`, makes the open a damaged-index error naming the file.
"""

from __future__ import annotations

import functools
import os
import warnings

__all__ = ["BUILD_ATTR", "PROBE_SECONDS", "check_main_file"]

#: root attribute of a split index's main file and of every part: the build that wrote them
BUILD_ATTR = "build_id"

#: seconds HDF5 may take to open a split index's main file in a probe (:func:`check_main_file`)
PROBE_SECONDS = 30
#: the probe: every dataset of the file opened, a virtual one's mappings read (what a reader of
#: the file does before it reads any row); exit status 0 when HDF5 opened them; when it refused, 1
#: in a forked child, :data:`_REFUSED` in a fresh interpreter
_PROBE = """
def probe(path):
    import h5py

    def look(name, obj):
        if isinstance(obj, h5py.Dataset):
            obj.shape, obj.dtype, list(obj.attrs)
            if obj.is_virtual:
                obj.virtual_sources()

    with h5py.File(path, "r") as f:
        list(f.attrs)
        f.visititems(look)
"""


def check_main_file(path) -> None:
    """Raise :class:`~distgrail.errors.IndexFormatError` (``damaged index``, naming ``path``) when
    ``path`` is a split index's main file that HDF5 dies in, or never finishes, opening: a flipped
    bit in its virtual datasets' mappings (HDF5's global heap) can crash HDF5 or make it loop, which
    no error of this process could report. So another process opens it first: a child forked
    here, and when that one dies or hangs, a fresh interpreter, whose verdict
    stands (a forked child might have inherited a lock another thread held). Probed once per
    version of the file in a process; a one-file index, or no index, is not probed (its open
    reads no such mapping). An error HDF5 reports is left to the real open to name."""
    import stat

    from ..errors import IndexFormatError

    path = os.fspath(path)
    try:
        st = os.stat(path)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode) or not _split(path):
        return
    why = _probed(os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if why.startswith(_UNCHECKED):
        _probed.cache_clear()  # (the next open tries again)
        raise IndexFormatError(f"{path}: the split index's main file {why}, which opening it safely needs (HDF5 can "
                               f"crash or loop on a damaged one); try again (a limit on processes or memory?)")
    if why:
        raise IndexFormatError(f"{path}: damaged index: HDF5 {why} opening the main file's virtual datasets (their "
                               f"mappings to the part files are damaged); write the index again")


@functools.lru_cache(maxsize=64)
def _probed(path, *version) -> str:
    """"" when another process opened the split index's main file ``path`` (of this ``version``:
    device, inode, size, times), else how HDF5 failed there (:func:`check_main_file`). A forked
    child only where forking is safe (:func:`_may_fork`; else, or when the fork fails, a fresh
    interpreter)."""
    if _may_fork():
        try:
            if not _forked_probe(path):
                return ""
        except OSError:  # (no memory or process left for a copy of this one: a fresh interpreter)
            pass
    return _spawned_probe(path)


def _may_fork() -> bool:
    """Whether this process may fork a probe: one Python thread (another could hold a lock the
    fork's own hooks take, or be inside HDF5: a deadlock), no MPI (a fork beside registered RDMA
    memory is unsafe on older kernels) and no CuPy (nor beside page-locked CUDA memory). A fresh
    interpreter costs more but copies nothing of this process."""
    import sys
    import threading

    return hasattr(os, "fork") and threading.active_count() == 1 and "mpi4py.MPI" not in sys.modules \
        and "cupy" not in sys.modules


def _split(path) -> bool:
    """Whether ``path`` is a split index's main file (its root attribute ``build_id``); False when
    HDF5 cannot open it (the real open says why)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            return f.attrs.get(BUILD_ATTR) is not None
    except (OSError, ValueError, KeyError, RuntimeError, TypeError):
        return False


def _forked_probe(path) -> str:
    """:data:`_PROBE` of ``path`` in a forked child: "" when it exited, else how it ended. h5py's
    lock is held across the fork, so no other thread of this process is inside HDF5 then."""
    try:
        from h5py._objects import phil
    except ImportError:  # pragma: no cover - h5py without its lock
        import contextlib

        phil = contextlib.nullcontext()
    ns: dict = {}
    exec(_PROBE, ns)
    with phil, warnings.catch_warnings():  # (Python 3.12 warns of a fork beside threads: none is in HDF5)
        warnings.filterwarnings("ignore", ".*multi-threaded.*fork", DeprecationWarning)
        pid = os.fork()
        if pid == 0:  # (the child: nothing of the parent's runs at its exit)
            code = 1
            try:
                _quiet_child()
                ns["probe"](path)
                code = 0
            finally:
                os._exit(code)
    status = None
    try:
        status = _wait(pid, PROBE_SECONDS)
    finally:
        if status is None:  # (a timeout, or an exception here: the child goes)
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if status is None:
        return f"did not finish in {PROBE_SECONDS} s"
    return _ended(os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)


def _wait(pid: int, seconds: float):
    """The status of child ``pid`` once it ended, None if it runs after ``seconds``: woken as it
    ends through a pidfd where the system has one, else by polling."""
    import select
    import time

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        step, end = 0.0005, time.monotonic() + seconds
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = end - time.monotonic()
            if left <= 0:
                return None
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(step, left))
                step = min(2 * step, 0.05)
    finally:
        if fd is not None:
            os.close(fd)


def _quiet_child() -> None:
    """In a probe's forked child: the default SIGINT/SIGTERM handling, no fault dump, no output."""
    import faulthandler
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    faulthandler.disable()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)


#: the fresh interpreter's exit status when HDF5 refused the file (an error HDF5 raises: the real
#: open names it); any status but this and 0 is a probe that did not run (no h5py there, no
#: memory, another program)
_REFUSED = 3


def _spawned_probe(path) -> str:
    """:data:`_PROBE` of ``path`` in a fresh interpreter: "" when HDF5 opened the file there or
    refused it (:data:`_REFUSED`: the real open names why), else how it ended. A probe that could
    not run (no process or interpreter to start, an interpreter that exits otherwise) fails the
    check: letting the file through would let HDF5 crash or loop in this process
    (:func:`check_main_file`)."""
    import subprocess
    import sys

    code = ("import sys\nimport h5py\n" + _PROBE + "\ntry:\n    probe(sys.argv[1])\n"
            f"except (OSError, RuntimeError, KeyError, ValueError, TypeError):\n    sys.exit({_REFUSED})\n")
    try:
        r = subprocess.run([sys.executable, "-c", code, path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=PROBE_SECONDS, env={**os.environ, "PYTHONFAULTHANDLER": ""})
    except subprocess.TimeoutExpired:
        return f"did not finish in {PROBE_SECONDS} s"
    except OSError as e:
        return f"{_UNCHECKED} (could not start {sys.executable}: {e.strerror})"
    if r.returncode in (0, _REFUSED):
        return ""
    if r.returncode < 0:
        return _ended(-r.returncode)
    return f"{_UNCHECKED} ({sys.executable} exited with status {r.returncode})"


#: how a probe that could not run begins (:func:`check_main_file` says so, not "damaged")
_UNCHECKED = "could not be checked in another process"


def _ended(sig) -> str:
    """"" for a forked child that exited (0: opened; 1: HDF5 refused, the real open says why),
    else how the signal ``sig`` ended it."""
    import signal

    if sig is None:
        return ""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return f"crashed ({name})"
