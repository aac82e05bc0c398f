"""The command line's entry (``python -m distgrail``): :func:`command_line`."""

from __future__ import annotations

__all__ = ["command_line"]


def command_line() -> int:
    """``python -m distgrail``: :func:`main` on this process's arguments. Under a launcher of several
    ranks a command line that does not parse ends the whole job: MPI is started and the job ended
    with status 2 (:func:`~distgrail.mpi.errors.end_job`: rank 0 says why at once; another rank
    says so itself, ``rank r``, when rank 0 has not ended the job first). Without this, a rank
    whose own command line is wrong (``mpiexec ... : -n 1 python -m distgrail index --bogus``)
    ended alone and silently, before MPI, while the others waited for it in MPI's set-up."""
    from .cli import main
    from .cli_parser import last_error
    from .mpi.launcher import rank_size

    try:
        return main()
    except SystemExit as e:
        if e.code in (0, None) or rank_size()[1] < 2:
            raise
        from mpi4py import MPI

        from .mpi.errors import end_job

        said = rank_size()[0] == 0 and last_error() is not None  # (rank 0 printed the line already)
        end_job(MPI.COMM_WORLD, None if said else last_error() or f"distgrail: error: exit status {e.code}", 2)
        raise  # pragma: no cover - end_job does not return
