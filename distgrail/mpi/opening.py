"""Opening one index on every MPI rank (``query`` and ``serve`` under MPI): each rank reads it and
verifies every checksum; rank 0 alone makes the value checks (:func:`open_on_ranks`)."""

from __future__ import annotations

from ..index import open_index
from .errors import run_shared

__all__ = ["open_on_ranks"]


def open_on_ranks(comm, path):
    """Collective: every rank's :class:`~distgrail.index.Index` of ``path``, its values checked
    once. Each rank reads the file and verifies every checksum; rank 0 alone makes the value
    checks, and a rank whose checksum seal and root attributes equal rank 0's holds the bytes
    rank 0 checked, so it skips them (a file without a seal, or another file, is checked on
    that rank too). The
    ranks of one node then do not all run the same value checks at once over the same bytes."""
    me = comm.Get_rank()
    idx = run_shared(comm, f"opening the index {path}", open_index, path, me == 0)
    mine = (idx.seal, _attributes(idx))  # (the seal covers the datasets; some checks read attributes too)
    first = comm.bcast(mine if me == 0 else None, root=0)
    trusted = me == 0 or (first[0] is not None and mine == first)
    run_shared(comm, f"checking the index {path}", None if trusted else idx.check_values)
    return idx


def _attributes(idx) -> tuple:
    """The index's root attributes as read (its meta, less what opening it added)."""
    return tuple(sorted((k, repr(v)) for k, v in idx.meta.items() if k != "path"))
