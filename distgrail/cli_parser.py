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
    """:class:`argparse.ArgumentParser` whose errors follow the CLI's one-line contract, and
    whose optional positionals may come after options (``query INDEX --backend cpu PAIRS``)."""

    def parse_args(self, args=None, namespace=None):
        got, extras = self.parse_known_args(args, namespace)
        if extras:
            extras = _late_positionals(self, got, extras)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return got

    def error(self, message: str):
        hint = f" (see '{self.prog} --help')" if self.prog else ""
        text = " ".join(str(message).split())  # one line, whatever argparse wrapped
        _LAST_ERROR[0] = f"distgrail: error: {text}{hint}"
        self.exit(2, f"{_LAST_ERROR[0]}\n" if launcher_rank() == 0 else None)


def _late_positionals(parser, got, extras: list) -> list:
    """``extras`` left after giving them to the chosen subcommand's optional positionals that
    are still empty, in order. argparse fills a subcommand's positionals from the first run of
    them only, so ``query INDEX --backend cpu PAIRS`` left PAIRS over ("unrecognized
    arguments") while ``query INDEX PAIRS --backend cpu`` was taken. Nothing is placed when an
    extra before ``--`` looks like an option (``-`` alone, stdin, does not): an unknown option
    stays an error with everything after it."""
    head, tail = (extras, []) if "--" not in extras else (extras[:extras.index("--")], extras[extras.index("--") + 1:])
    if any(x.startswith("-") and x != "-" for x in head):
        return extras
    extras = head + tail  # (after "--", anything is a positional)
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        sub = action.choices.get(getattr(got, action.dest, None))
        if sub is None:
            return extras
        extras = list(extras)
        for slot in sub._actions:
            if (extras and not slot.option_strings and slot.nargs == "?" and slot.type is None
                    and slot.choices is None and getattr(got, slot.dest, None) is None):
                setattr(got, slot.dest, extras.pop(0))
        return extras
    return extras


def launcher_rank() -> int:
    """This process's rank as the MPI launcher's variables tell it (0 without a launcher, or when
    it hides the rank), without starting MPI: an error of the command line's arguments, which
    every rank has alike, is printed by rank 0 alone (every rank exits 2)."""
    from .mpi.launcher import rank_size

    return rank_size()[0]
