"""The command line's argument parser: a bad option is one line ``distgrail: error: ...``, exit 2.

argparse's own ``error`` prints the whole usage and ``distgrail index: error: ...``; the CLI's
contract (every bad input: one line ``distgrail: error: ...``, exit status 2) holds for the
arguments too. Subcommand parsers are made by ``add_parser`` with the parent's class, so every
subcommand follows it; ``--help`` still prints the full usage. Under an MPI launcher the line is
printed by rank 0 alone (every rank has the same arguments, and exits 2).
"""

from __future__ import annotations

import argparse

__all__ = ["ContractParser", "launcher_rank", "last_error"]


#: the last command-line error's line, kept for :func:`distgrail.cli.command_line` (which ends an
#: MPI job with it when one rank's arguments do not parse)
_LAST_ERROR: list = [None]


def last_error() -> str | None:
    """The line of the last command-line error (:class:`ContractParser`), None when there was none."""
    return _LAST_ERROR[0]


class ContractParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors follow the CLI's one-line contract."""

    def error(self, message: str):
        hint = f" (see '{self.prog} --help')" if self.prog else ""
        text = " ".join(str(message).split())  # one line, whatever argparse wrapped
        _LAST_ERROR[0] = f"distgrail: error: {text}{hint}"
        self.exit(2, f"{_LAST_ERROR[0]}\n" if launcher_rank() == 0 else None)


def launcher_rank() -> int:
    """This process's rank as the MPI launcher's variables tell it (0 without a launcher, or when
    it hides the rank), without starting MPI: an error of the command line's arguments, which
    every rank has alike, is printed by rank 0 alone (every rank exits 2)."""
    from .mpi.launcher import rank_size

    return rank_size()[0]
