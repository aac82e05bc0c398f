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

            _free_h5_objects()
            ctypes.CDLL(None).exit(status & 0xFF)
    os._exit(status)


def _free_h5_objects() -> None:
    """Free the h5py objects that only reference cycles still hold (an error's traceback: a split
    index's virtual dataset and its creation property list) before the C library's ``exit``, here,
    where h5py releases them in order. Left to HDF5's own exit handler, the property list's virtual
    layout was freed after what it refers to, which crashed every rank (SIGSEGV in ``H5P_close``,
    exit 11 instead of 2: a split index refused under ``mpiexec -n 2``, session 41)."""
    if "h5py" in sys.modules:
        import gc

        gc.collect()
