"""In-memory graph container and conversion of user objects into it.

Every input path (text files, binary files, NumPy arrays, SciPy matrices, NetworkX graphs)
ends in :class:`EdgeGraph` through :func:`distgrail.io.read.as_graph`, which is the one validation point for
in-memory input; file readers validate while parsing (see :mod:`distgrail.io`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..dtypes import size_problem
from ..errors import GraphFormatError, id_range

__all__ = ["EdgeGraph", "edge_graph_csr", "edge_csr_xp", "from_arrays", "id_dtype"]


def id_dtype(n: int):
    """Smallest signed integer dtype that holds vertex ids 0..n-1 and -1."""
    return np.int32 if n < 2**31 - 1 else np.int64


@dataclass
class EdgeGraph:
    """A directed graph as an edge list: ``src[i] -> dst[i]`` for vertices ``0..n-1``.

    Duplicate edges, self-loops and cycles are allowed; condensation removes them.

    ``digest`` is the digest of the file the graph was read from, ``"blake3:<hex>"`` (binary graph
    files of earlier releases: ``"sha256:<hex>"``; "" for in-memory graphs). Readers may set it to
    a running :class:`~distgrail.io.digest.FileDigest`; reading the attribute then waits for the
    hash (so nothing waits until the value is needed), and :attr:`digest_pending` tells whether it
    is still being computed.
    """

    n: int
    src: np.ndarray
    dst: np.ndarray
    name: str = "<memory>"
    digest: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def m(self) -> int:
        if self.src is None:  # (handed over: the count stays)
            return int(self.__dict__.get("_handed_m", 0))
        return int(self.src.shape[0])

    def hand_over_edges(self) -> list:
        """``[src, dst]``, the graph keeping neither (``m`` stays, ``src`` and ``dst`` become
        None): for a step that lets go of each once done with it (the GPU condensation,
        :func:`~distgrail.stages.condense.condense_cuda_of`), so their memory comes back while it
        runs."""
        held = [self.src, self.dst]
        self.__dict__["_handed_m"] = self.m
        self.src = self.dst = None
        return held

    @property
    def digest_source(self):
        """The digest without waiting for it: the hex string, or the running
        :class:`~distgrail.io.digest.FileDigest` (resolve it with :func:`distgrail.io.digest.resolve`)."""
        return self.__dict__.get("_digest", "")

    @property
    def digest_pending(self) -> bool:
        """True while the file's digest is still being computed in the background."""
        d = self.digest_source
        return not isinstance(d, str) and not d.done()

    def cancel_digest(self) -> None:
        """Stop a background digest that is no longer wanted (the value becomes "")."""
        d = self.digest_source
        if not isinstance(d, str):
            d.cancel()
            self.__dict__["_digest"] = ""

    def __getstate__(self):  # pickling waits for the hash (a thread does not travel)
        state = dict(self.__dict__)
        state["_digest"] = self.digest
        return state


def _get_digest(self) -> str:
    d = self.__dict__.get("_digest", "")
    if not isinstance(d, str):
        from .digest import resolve

        digest, d = d, resolve(d)
        self.__dict__["_digest"] = d
        if hasattr(digest, "wait_seconds"):  # what the build waited for the background hash
            self.meta["digest_wait_s"] = digest.wait_seconds
    return d


def _set_digest(self, value) -> None:
    self.__dict__["_digest"] = "" if value is None else value


# a property over the dataclass field: __init__, repr and == go through it (the default stays "")
EdgeGraph.digest = property(_get_digest, _set_digest, doc="'algorithm:hex' digest of the source file (waits for it)")


def _check_ids(arr: np.ndarray, n: int, what: str, name: str) -> None:
    if arr.size == 0:
        return
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        pos = int(np.flatnonzero(arr == bad)[0])
        raise GraphFormatError(
            f"{what}[{pos}] {id_range(n)}, got {bad!r}", path=name
        )


def from_arrays(src, dst, n, name) -> EdgeGraph:
    src = np.asarray(src)
    dst = np.asarray(dst)
    if src.shape != dst.shape or src.ndim != 1:
        raise GraphFormatError(
            f"source and target arrays must be 1-D of equal length, got shapes {src.shape} and {dst.shape}",
            path=name,
        )
    for arr, what in ((src, "sources"), (dst, "targets")):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            if np.issubdtype(arr.dtype, np.floating) and np.all(np.mod(arr, 1) == 0):
                continue
            bad = arr[np.flatnonzero(np.mod(arr, 1) != 0)[0]].item() if np.issubdtype(arr.dtype, np.floating) else arr[0]
            raise GraphFormatError(f"{what} must be integer vertex ids, got {bad!r}", path=name)
    for arr, what in ((src, "sources"), (dst, "targets")):  # (named as given, not as int64 wrapped them)
        if arr.size and arr.dtype.kind in "uf":
            past = (arr >= 2.0**63) | (arr < -2.0**63) if arr.dtype.kind == "f" else arr > np.iinfo(np.int64).max
            if past.any():
                pos = int(np.flatnonzero(past)[0])
                where = id_range(int(n)) if n is not None and int(n) >= 0 else "out of range (ids are 0..2^63 - 1)"
                raise GraphFormatError(f"{what}[{pos}] {where}, got {arr[pos].item()!r}", path=name)
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if n is None:
        n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    n = int(n)
    if n < 0:
        raise GraphFormatError(f"number of vertices must be >= 0, got {n!r}", path=name)
    if size_problem(n, src.size):
        raise GraphFormatError(f"graph too large: {size_problem(n, src.size)}", path=name)
    _check_ids(src, n, "sources", name)
    _check_ids(dst, n, "targets", name)
    dt = id_dtype(n)
    return EdgeGraph(n=n, src=src.astype(dt), dst=dst.astype(dt), name=name)


def edge_graph_csr(graph: EdgeGraph):
    """(indptr int64, indices) of ``graph`` with successors sorted and repeats merged.

    Without a sort when the edges already come sorted by (source, target) and distinct (graphs
    read from ``.gra`` or ``.h5`` files, generated graphs); else through SciPy."""
    n, src, dst = graph.n, graph.src, graph.dst
    dt = id_dtype(n)
    if graph.m == 0:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=dt)
    same = src[1:] == src[:-1]
    if (src[1:] >= src[:-1]).all() and not (same & (dst[1:] <= dst[:-1])).any():
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
        return indptr, dst.astype(dt, copy=False)
    del same
    import scipy.sparse as sp

    a = sp.csr_matrix((np.ones(graph.m, dtype=np.bool_), (src, dst)), shape=(n, n))
    a.sum_duplicates()
    return a.indptr.astype(np.int64), a.indices.astype(dt)


def edge_csr_xp(xp, src, dst, n: int):
    """(indptr int64, indices int32) of the edges ``src[i] -> dst[i]`` (int32 arrays of ``xp``,
    NumPy or CuPy, ids below ``n`` < 2^31 - 1) with successors sorted and repeats merged, self-loops
    kept: the numbers of :func:`edge_graph_csr`, computed where the edges are (one sort of 64-bit
    (source, target) keys, then a search for each row's first key)."""
    n = int(n)
    if int(src.shape[0]) == 0:
        return xp.zeros(n + 1, dtype=xp.int64), xp.zeros(0, dtype=xp.int32)
    shift = xp.uint64(32)
    keys = (src.astype(xp.uint64) << shift) | dst.astype(xp.uint64)
    keys.sort()
    first = xp.ones(keys.shape[0], dtype=xp.bool_)
    xp.not_equal(keys[1:], keys[:-1], out=first[1:])
    keys = keys[first]
    del first
    indptr = xp.searchsorted(keys, xp.arange(n + 1, dtype=xp.uint64) << shift).astype(xp.int64)
    indices = (keys & xp.uint64(0xFFFFFFFF)).astype(xp.int32)
    return indptr, indices
