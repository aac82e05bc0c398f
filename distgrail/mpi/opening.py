"""Opening one index on every MPI rank (``query`` and ``serve`` under MPI): each rank reads it and
verifies every checksum; rank 0 alone makes the value checks and, for a split index, the probe of
its main file in another process (:func:`open_on_ranks`)."""

from __future__ import annotations

from ..index import open_index
from ..indexfile.probe import check_main_file, file_version, vouch
from .errors import run_shared

__all__ = ["open_on_ranks"]


def open_on_ranks(comm, path):
    """Collective: every rank's :class:`~distgrail.index.Index` of ``path``, its values checked
    once. Each rank reads the file and verifies every checksum; rank 0 alone makes the value
    checks, and a rank whose checksum seal and root attributes equal rank 0's holds the bytes
    rank 0 checked, so it skips them (a file without a seal, or another file, is checked on
    that rank too). The
    ranks of one node then do not all run the same value checks at once over the same bytes. Nor
    does each start an interpreter to probe a split index's main file: rank 0 probes it, and a rank
    seeing the same version of the file takes rank 0's verdict (:func:`~distgrail.indexfile.probe.vouch`;
    a damaged file is every rank's error)."""
    me = comm.Get_rank()
    # a split index's main file probed once, by rank 0, for the ranks that see the same file
    seen = run_shared(comm, f"opening the index {path}", _probed_version if me == 0 else None, path)
    seen = comm.bcast(seen, root=0)
    if me != 0:
        vouch(path, seen)
    idx = run_shared(comm, f"opening the index {path}", open_index, path, me == 0)
    mine = (idx.seal, _attributes(idx))  # (the seal covers the datasets; some checks read attributes too)
    first = comm.bcast(mine if me == 0 else None, root=0)
    trusted = me == 0 or (first[0] is not None and mine == first)
    run_shared(comm, f"checking the index {path}", None if trusted else idx.check_values)
    return idx


def _probed_version(path):
    """Rank 0: ``path`` probed (:func:`~distgrail.indexfile.probe.check_main_file`), and the
    version of the file it probed."""
    check_main_file(path)
    return file_version(path)


def _attributes(idx) -> tuple:
    """The index's root attributes as read (its meta, less what opening it added)."""
    return tuple(sorted((k, repr(v)) for k, v in idx.meta.items() if k != "path"))
