"""In-memory graph container and conversion of user objects into it.

Every input path (text files, binary files, NumPy arrays, SciPy matrices, NetworkX graphs)
ends in :class:`EdgeGraph` through :func:`as_graph`, which is the one validation point for
in-memory input; file readers validate while parsing (see :mod:`distgrail.readers`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .errors import GraphFormatError

__all__ = ["EdgeGraph", "as_graph", "id_dtype"]


def id_dtype(n: int):
    """Smallest signed integer dtype that holds vertex ids 0..n-1 and -1."""
    return np.int32 if n < 2**31 - 1 else np.int64


@dataclass
class EdgeGraph:
    """A directed graph as an edge list: ``src[i] -> dst[i]`` for vertices ``0..n-1``.

    Duplicate edges, self-loops and cycles are allowed; condensation removes them.
    """

    n: int
    src: np.ndarray
    dst: np.ndarray
    name: str = "<memory>"
    sha256: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def m(self) -> int:
        return int(self.src.shape[0])


def _check_ids(arr: np.ndarray, n: int, what: str, name: str) -> None:
    if arr.size == 0:
        return
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= n:
        bad = lo if lo < 0 else hi
        pos = int(np.flatnonzero(arr == bad)[0])
        raise GraphFormatError(
            f"{what}[{pos}] out of range 0..{n - 1}, got {bad!r}", path=name
        )


def _from_arrays(src, dst, n, name) -> EdgeGraph:
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
    src = src.astype(np.int64, copy=False)
    dst = dst.astype(np.int64, copy=False)
    if n is None:
        n = int(max(src.max(initial=-1), dst.max(initial=-1))) + 1
    n = int(n)
    if n < 0:
        raise GraphFormatError(f"number of vertices must be >= 0, got {n!r}", path=name)
    _check_ids(src, n, "sources", name)
    _check_ids(dst, n, "targets", name)
    dt = id_dtype(n)
    return EdgeGraph(n=n, src=src.astype(dt), dst=dst.astype(dt), name=name)


def as_graph(graph, num_vertices: int | None = None, fmt: str = "auto") -> EdgeGraph:
    """Turn ``graph`` into an :class:`EdgeGraph`.

    Parameters
    ----------
    graph : EdgeGraph, str, os.PathLike, (src, dst) tuple, (m, 2) array, scipy.sparse matrix, networkx.DiGraph
        A path is read with :func:`distgrail.readers.read_graph`. For edge arrays,
        ``num_vertices`` defaults to the largest id + 1.
    num_vertices : int, optional
        Number of vertices for edge arrays and edge-list files (isolated vertices at the end).
    fmt : {"auto", "gra", "edgelist", "mtx", "h5"}
        File format, for paths only.

    Examples
    --------
    >>> g = as_graph((np.array([0, 1]), np.array([1, 2])))
    >>> g.n, g.m
    (3, 2)
    """
    if isinstance(graph, EdgeGraph):
        return graph
    if isinstance(graph, (str, os.PathLike)):
        from .readers import read_graph

        return read_graph(graph, fmt=fmt, num_vertices=num_vertices)
    try:
        import scipy.sparse as sp

        if sp.issparse(graph):
            if graph.shape[0] != graph.shape[1]:
                raise GraphFormatError(f"adjacency matrix must be square, got shape {graph.shape}")
            coo = graph.tocoo()
            return _from_arrays(coo.row, coo.col, graph.shape[0], "<scipy.sparse>")
    except ImportError:  # pragma: no cover - scipy is a dependency
        pass
    if type(graph).__module__.startswith("networkx"):
        if not graph.is_directed():
            raise GraphFormatError("networkx graph must be directed (a DiGraph)")
        nodes = list(graph.nodes())
        pos = {v: i for i, v in enumerate(nodes)}
        edges = np.array([(pos[a], pos[b]) for a, b in graph.edges()], dtype=np.int64).reshape(-1, 2)
        g = _from_arrays(edges[:, 0], edges[:, 1], len(nodes), "<networkx>")
        g.meta["node_labels"] = nodes
        return g
    if isinstance(graph, tuple) and len(graph) == 2:
        return _from_arrays(graph[0], graph[1], num_vertices, "<arrays>")
    arr = np.asarray(graph)
    if arr.ndim == 2 and arr.shape[1] == 2:
        return _from_arrays(arr[:, 0], arr[:, 1], num_vertices, "<array>")
    raise GraphFormatError(
        "graph must be a path, an EdgeGraph, a (src, dst) tuple, an (m, 2) array, "
        f"a scipy.sparse matrix or a networkx.DiGraph, got {type(graph).__name__}"
    )
