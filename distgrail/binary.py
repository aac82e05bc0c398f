"""Binary graph file (HDF5): the CSR of a graph, so later runs skip text parsing.

Layout: attrs ``format="distgrail-graph"``, ``format_version=1``, ``n``, ``m``, ``source_name``,
``source_sha256``; datasets ``csr/indptr`` (n+1, int64) and ``csr/indices`` (m).
"""

from __future__ import annotations

import os

import numpy as np

from .errors import GraphFormatError
from .graph import EdgeGraph, id_dtype
from .indexfile import atomic_path, smallest_uint

__all__ = ["write_binary_graph", "read_binary_graph", "GRAPH_FORMAT"]

GRAPH_FORMAT = "distgrail-graph"


def write_binary_graph(graph: EdgeGraph, path) -> None:
    import h5py
    import scipy.sparse as sp

    a = sp.csr_matrix((np.ones(graph.m, dtype=np.bool_), (graph.src, graph.dst)), shape=(graph.n, graph.n))
    a.sort_indices()
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = GRAPH_FORMAT
            f.attrs["format_version"] = 1
            f.attrs["n"] = graph.n
            f.attrs["m"] = graph.m
            f.attrs["source_name"] = graph.name
            f.attrs["source_sha256"] = graph.sha256
            f.create_dataset("csr/indptr", data=a.indptr.astype(np.int64), track_times=False)
            f.create_dataset("csr/indices", data=a.indices.astype(smallest_uint(max(graph.n - 1, 0))),
                             track_times=False)


def read_binary_graph(path) -> EdgeGraph:
    import h5py

    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise GraphFormatError(f"not an HDF5 file ({e})", path=path) from None
    with f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt != GRAPH_FORMAT:
            raise GraphFormatError(f"not a distgrail graph file (format={fmt!r}, expected {GRAPH_FORMAT!r})",
                                   path=path)
        n = int(f.attrs["n"])
        indptr = f["csr/indptr"][()]
        indices = f["csr/indices"][()]
        name = f.attrs.get("source_name", os.path.basename(path))
        sha = f.attrs.get("source_sha256", "")
    if indptr.shape != (n + 1,) or int(indptr[-1]) != indices.size:
        raise GraphFormatError("corrupt graph file: CSR arrays disagree with n and m", path=path)
    dt = id_dtype(n)
    src = np.repeat(np.arange(n, dtype=dt), np.diff(indptr))
    g = EdgeGraph(n=n, src=src, dst=indices.astype(dt), name=str(name), sha256=str(sha))
    g.meta["format"] = "h5"
    return g
