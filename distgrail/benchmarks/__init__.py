"""Benchmarks: each prints ours next to a baseline in one run (python -m distgrail.benchmarks.<name>)."""

import os

from distgrail import settings


def default_data_dir() -> str:
    """The GRAIL benchmark graphs: $DISTGRAIL_DATA, else the copy shipped in the repository's
    ``tests/data`` (the 11 graphs with their query pairs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    return settings.get("DISTGRAIL_DATA") or os.path.join(repo, "tests", "data")
