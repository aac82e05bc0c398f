"""Which MPI launcher started this process, and its rank and size, from the environment alone.

One list, used by the CLI (run under MPI or not), the test suite's ``conftest.py`` (per-rank
reports) and ``launch/test.sh`` (through ``python -m distgrail.mpi.launcher``). Nothing here
imports mpi4py: asking the environment is free, initialising MPI is not.

Launchers and what they set (rank variable, size variable):

============================  =======================  ========================
MPICH / Hydra, Intel MPI      ``PMI_RANK``             ``PMI_SIZE``
Open MPI (``mpirun``)         ``OMPI_COMM_WORLD_RANK`` ``OMPI_COMM_WORLD_SIZE``
MVAPICH2                      ``MV2_COMM_WORLD_RANK``  ``MV2_COMM_WORLD_SIZE``
PMIx (``prterun``, ``srun --mpi=pmix``)  ``PMIX_RANK``  (``PMIX_SIZE`` when set)
Slurm ``srun``                ``SLURM_PROCID``         ``SLURM_STEP_NUM_TASKS``
============================  =======================  ========================

Slurm's batch script itself (not a step of ``srun``) has ``SLURM_PROCID=0`` but no step of
several tasks, so it counts as no launcher. ``HYDRA_CONTROL_FD`` and ``MPI_LOCALNRANKS`` mark
a Hydra launch whose PMI variables are hidden (PMI-2 over a socket): launched, rank unknown.

Usage: ``python -m distgrail.mpi.launcher`` prints ``RANK SIZE NAME`` (``0 1 none`` when no
launcher is found); ``--rank`` prints the rank only.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

__all__ = ["Launch", "LAUNCHERS", "detect", "rank_size", "under_launcher"]

#: (name, rank variable, size variable or None), most specific first
LAUNCHERS = (
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MVAPICH2", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE"),
    ("MPICH/Hydra PMI", "PMI_RANK", "PMI_SIZE"),
    ("PMIx", "PMIX_RANK", "PMIX_SIZE"),
    ("Slurm srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
)
#: variables that show a launcher without telling the rank
MARKERS = (("MPICH/Hydra", "HYDRA_CONTROL_FD"), ("MPICH/Hydra", "MPI_LOCALNRANKS"))


class Launch(NamedTuple):
    name: str
    rank: int | None  # None: launched, but the environment does not say which rank
    size: int | None


def _int(value):
    value = (value or "").strip()
    return int(value) if value.isdigit() else None


def detect(env=None) -> Launch | None:
    """The launcher that started this process, or None.

    >>> detect({"PMI_RANK": "1", "PMI_SIZE": "3"})
    Launch(name='MPICH/Hydra PMI', rank=1, size=3)
    >>> detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}) is None  # a batch script, not a step
    True
    >>> detect({"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2"}).name
    'Slurm srun'
    """
    env = os.environ if env is None else env
    for name, rank_var, size_var in LAUNCHERS:
        rank = _int(env.get(rank_var))
        if rank is None:
            continue
        size = _int(env.get(size_var)) if size_var else None
        if name == "Slurm srun" and size is None:
            continue  # the batch script's own SLURM_PROCID: no job step
        return Launch(name, rank, size)
    for name, var in MARKERS:
        if var in env:
            return Launch(name, None, None)
    return None


def under_launcher(env=None) -> bool:
    """True when an MPI launcher started this process with more than one rank (or an unknown
    number): then it is worth initialising MPI to ask COMM_WORLD."""
    got = detect(env)
    return got is not None and (got.size is None or got.size > 1)


def rank_size(env=None) -> tuple[int, int]:
    """``(rank, size)`` from the launcher's variables; ``(0, 1)`` without a launcher."""
    got = detect(env)
    if got is None:
        return 0, 1
    return got.rank or 0, got.size or 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    got = detect()
    rank, size = rank_size()
    if "--rank" in argv:
        print(rank)
    else:
        print(rank, size, (got.name if got else "none").replace(" ", "_"))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
