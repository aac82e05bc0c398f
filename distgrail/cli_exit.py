"""The end of ``python -m distgrail``: :func:`quick_exit`."""

from __future__ import annotations

import os
import sys

from .errors import DistGrailError

__all__ = ["quick_exit"]


def quick_exit(status) -> None:
    """End the process with ``status`` once a command has run (``python -m distgrail``): stdout and
    stderr flushed, MPI finalized where it is initialized, then ``os._exit``, or under MPI the C
    library's ``exit``, whose handlers are the MPI library's too (MPICH ends its PMI session with
    the launcher in one: a rank ending without it is taken for a crash, and the launcher kills the
    ranks still running). The interpreter's teardown (every module and array freed, CuPy's memory
    pools one allocation at a time) is work the operating system does at once; under MPI it is
    paid by every rank before the launcher returns. Every output is closed by then (each is
    written under a temporary name and renamed when complete). ``DISTGRAIL_FAST_EXIT=off``:
    ``sys.exit``. Does not return."""
    from . import settings

    status = 0 if status is None else status
    try:
        fast = settings.get("DISTGRAIL_FAST_EXIT")
    except DistGrailError:
        fast = True
    if not fast or not isinstance(status, int):
        sys.exit(status)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone or a closed stream: nothing more to say there
            pass
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None:
        try:
            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.Finalize()
            used = MPI.Is_initialized()  # (true after MPI_Finalize too)
        except Exception:  # noqa: BLE001 - an MPI that cannot finalize: Python's own exit then
            sys.exit(status)
        if used:
            import ctypes

            _close_h5_files()
            ctypes.CDLL(None).exit(status & 0xFF)
    os._exit(status)


def _close_h5_files() -> None:
    """Close the HDF5 files still open (an error's traceback can hold a split index's part, opened
    over a Python file object) before the C library's ``exit``: HDF5's own exit handler closes them
    there, calling back into Python without the GIL (ctypes releases it), which crashed every rank
    (SIGSEGV, exit 11 instead of 2: a missing part under ``mpiexec -n 2``, session 41)."""
    h5py = sys.modules.get("h5py")
    if h5py is None:
        return
    import gc

    gc.collect()
    try:
        for fid in h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE):
            h5py.File(fid).close()
    except Exception:  # noqa: BLE001 - closing what is left: nothing to report at the exit
        pass
