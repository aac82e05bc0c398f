"""Benchmarks: each prints ours next to a baseline in one run (python -m distgrail.benchmarks.<name>)."""

import os
import sys

from distgrail import settings


def default_data_dir() -> str:
    """The GRAIL benchmark graphs: $DISTGRAIL_DATA, else the copy shipped in the repository's
    ``tests/data`` (the 11 graphs with their query pairs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    return settings.get("DISTGRAIL_DATA") or os.path.join(repo, "tests", "data")


def batch_sizes(ap, text: str) -> list:
    """``--batches`` as a list of pair counts ("1000000,1e7"), or ``ap.error`` (exit 2) naming it."""
    try:
        batches = [int(float(b)) for b in text.split(",")]
    except ValueError:
        ap.error(f"--batches: whole numbers separated by commas, got {text!r}")
    if any(b < 1 for b in batches):
        ap.error(f"--batches: every batch at least 1 pair, got {text!r}")
    return batches


def run_main(main, name: str):
    """``main()`` of the benchmark module ``name`` run as a command (``python -m
    distgrail.benchmarks.NAME``): its return value is the exit status; an error the user can fix,
    a :class:`~distgrail.errors.DistGrailError` (a graph or index that cannot be read, a backend
    that is not one) or a missing file or folder, is one line on stderr, ``python -m
    distgrail.benchmarks.NAME: error: ...``, and exit status 2, as argparse's own errors (not a
    traceback). Under ``python -m mpi4py`` a rank that ends with status 2 aborts the others.
    """
    from distgrail.errors import DistGrailError

    try:
        return main()
    except (DistGrailError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as e:
        print(f"python -m distgrail.benchmarks.{name}: error: {e}", file=sys.stderr, flush=True)
        return 2
