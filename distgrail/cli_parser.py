"""The command line's argument parser: a bad option is one line ``distgrail: error: ...``, exit 2.

argparse's own ``error`` prints the whole usage and ``distgrail index: error: ...``; the CLI's
contract (every bad input: one line ``distgrail: error: ...``, exit status 2) holds for the
arguments too. Subcommand parsers are made by ``add_parser`` with the parent's class, so every
subcommand follows it; ``--help`` still prints the full usage.
"""

from __future__ import annotations

import argparse

__all__ = ["ContractParser"]


class ContractParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors follow the CLI's one-line contract."""

    def error(self, message: str):
        hint = f" (see '{self.prog} --help')" if self.prog else ""
        text = " ".join(str(message).split())  # one line, whatever argparse wrapped
        self.exit(2, f"distgrail: error: {text}{hint}\n")
