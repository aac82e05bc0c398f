"""The command line's entry (``python -m distgrail``): :func:`command_line`."""

from __future__ import annotations

__all__ = ["command_line"]


def command_line() -> int:
    """``python -m distgrail``: :func:`~distgrail.cli.main` on this process's arguments. Under a
    launcher of several ranks a command line that does not parse is refused on every rank
    together (:func:`~distgrail.mpi.errors.refuse_arguments`: said once, every rank ends with
    status 2). Before, a rank whose own command line was wrong (``mpiexec ... : -n 1 python -m
    distgrail index --bogus``) ended alone and silently, before MPI, while the others waited for
    it in MPI's set-up."""
    from .cli import main
    from .cli_parser import last_error
    from .mpi.errors import ArgumentsRefused
    from .mpi.launcher import rank_size

    try:
        return main()
    except ArgumentsRefused:  # (refused together already: status 2)
        raise
    except SystemExit as e:
        if e.code in (0, None) or rank_size()[1] < 2:
            raise
        from .mpi.errors import refuse_arguments

        line = last_error() or f"distgrail: error: exit status {e.code}"
        refuse_arguments(line, printed=rank_size()[0] == 0 and last_error() is not None)
        raise  # pragma: no cover - refuse_arguments does not return
