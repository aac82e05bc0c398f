"""The cores this process may run on: the count every thread pool of the package starts from.

``os.cpu_count()`` is the machine's cores, not this process's: under Slurm (``--cpus-per-task``,
a cgroup cpuset), ``taskset``, ``numactl`` or ``mpirun --bind-to core`` a job sees a subset, and
pools sized by the machine put many threads on a few cores (16 host-copy threads on 2 cores of a
128-core node). :func:`usable` is the size of the CPU affinity mask where the system has one
(Linux), else ``os.cpu_count()``."""

from __future__ import annotations

import os

__all__ = ["usable"]


def usable() -> int:
    """Cores this process may run on (its CPU affinity), at least 1.

    >>> usable() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
