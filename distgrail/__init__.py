"""distgrail: exact reachability queries on huge directed graphs with a GRAIL index built on
GPUs across MPI ranks (NumPy on the CPU when no GPU is present).

Examples
--------
>>> import distgrail
>>> idx = distgrail.build_index(distgrail.bundled_graph(), dims=2)
>>> idx.reachable(2, 3)
True
"""

from __future__ import annotations

import os

from ._version import __version__
from .errors import BackendError, DistGrailError, GraphFormatError, IndexFormatError, OutputError, QueryError
from .gpu.backend import get_backend, gpu_available
from .build import build_index
from .config import BuildConfig
from .index import Index, open_index
from .io.graph import EdgeGraph
from .io.read import as_graph, read_graph
from .server.client import ServerError, connect

__all__ = [
    "BuildConfig",
    "__version__",
    "build_index",
    "open_index",
    "connect",
    "Index",
    "read_graph",
    "as_graph",
    "EdgeGraph",
    "get_backend",
    "gpu_available",
    "bundled_graph",
    "bundled_pairs",
    "DistGrailError",
    "GraphFormatError",
    "IndexFormatError",
    "BackendError",
    "QueryError",
    "OutputError",
    "ServerError",
]

_DATA = os.path.join(os.path.dirname(__file__), "data")

#: reachable pairs among the bundled 100,000 queries (GRAIL benchmark README)
BUNDLED_REACHABLE = 20072


def bundled_graph() -> str:
    """Path of the bundled real graph: ``kegg_dag_uniq.gra`` (3,617 vertices) from the GRAIL benchmarks."""
    return os.path.join(_DATA, "kegg_dag_uniq.gra")


def bundled_pairs() -> str:
    """Path of its 100,000 query pairs (20,072 reachable)."""
    return os.path.join(_DATA, "kegg_dag_uniq.gra.q100k.pairs.gz")
