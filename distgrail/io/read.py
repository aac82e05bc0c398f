"""Reading a graph in any supported format; ``as_graph`` turns any accepted input into an EdgeGraph."""

from __future__ import annotations

import os

import numpy as np

from ..errors import GraphFormatError
from ..nodelabels import NodeLabels, labelled_graph
from .graph import EdgeGraph, from_arrays
from .edgelist import read_edgelist, read_mtx
from .gra import read_gra
from .compressed import CODECS, StreamText
from .dialect import COMMA_TABLE, Dialect, declared_counts, read_labelled
from .formats import FORMATS, Source
from .tables import read_table_graph
from .regular import check_regular
from .excerpt import bom_problem
from .text import Text, looks_binary, shown


__all__ = ["FORMATS", "detect_format", "read_graph", "as_graph", "start_digest"]


def detect_format(path: str) -> str:
    """Guess a file's format from its name, then from its first line (of the decompressed text
    for a ``.gz``/``.bz2``/``.zst`` file: ``g.gra.gz`` is a ``.gra`` file): the rules of
    :func:`distgrail.io.formats.detect`."""
    check_regular(path, "graphs", GraphFormatError)  # a FIFO is never opened: it could block forever
    return Source(path).fmt


def start_digest(path, fmt: str = "auto"):
    """The digest of the graph file at ``path``, started now by whoever opens the input, to be
    handed to the reader (``digest=``) and owned as a context manager
    (:class:`~distgrail.io.digest.FileDigest`); None for a binary ``.h5`` graph (it stores its
    digest) or a file that is missing, not a regular file or cannot be read (the reader says so)."""
    from .digest import FileDigest

    if not os.path.isfile(path):  # missing, or a FIFO (never opened here)
        return None
    try:
        if (fmt if fmt != "auto" else detect_format(path)) == "h5":
            return None
        return FileDigest(path)
    except (OSError, GraphFormatError):
        return None


def read_graph(path, fmt: str = "auto", num_vertices: int | None = None, *, source: Source | None = None,
               digest=None, device=None) -> EdgeGraph:
    """Read a graph file.

    Parameters
    ----------
    path : str or os.PathLike
    fmt : {"auto", "gra", "edgelist", "mtx", "h5", "labelled", "parquet", "arrow"}
        ``auto`` looks at the file name, then at the first line. Text files may be compressed
        (``.gz``, ``.bz2``, ``.zst``: decompressed as they are parsed). Edge lists may be CSV/TSV
        with a header line, and have node names instead of ids (see :mod:`distgrail.io.dialect`;
        ``labelled`` reads every field as a node name). ``parquet``/``arrow``: edge tables
        (:mod:`distgrail.io.tables`, needs pyarrow).
    num_vertices : int, optional
        Edge lists and tables of integer ids only: the number of vertices (ids must be below it).
        Default: largest id + 1.
    source : distgrail.io.formats.Source, optional
        What is already known of the file at ``path`` (its format, first bytes, dialect:
        :func:`~distgrail.io.chunks.plan_read`'s plan carries one), not looked at again.
    digest : distgrail.io.digest.FileDigest, optional
        The file's digest, started by whoever opened it (:func:`start_digest`): the graph's digest
        if it is of this file, unchanged (:func:`~distgrail.io.digest.adopt`); else one is
        started here. A binary ``.h5`` graph keeps the digest it stores.
    device : distgrail.gpu.backend.Backend, optional
        A GPU backend: a binary ``.h5`` graph's edges are read onto its device
        (:func:`~distgrail.io.binary.read_binary_graph`); other formats ignore it.

    Raises
    ------
    GraphFormatError
        With ``file:line:`` and the offending value.

    Examples
    --------
    >>> from distgrail import bundled_graph
    >>> g = read_graph(bundled_graph())
    >>> g.n
    3617
    """
    path = os.fspath(path)
    if fmt not in FORMATS:
        raise GraphFormatError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}", path=path)
    if not os.path.exists(path):
        raise GraphFormatError("no such file", path=path)
    if os.path.isdir(path):
        raise GraphFormatError("is a directory, not a graph file", path=path)
    check_regular(path, "graphs", GraphFormatError)
    if source is None or source.path != path or source.asked != fmt:
        source = Source(path, fmt)
    try:
        codec = source.codec
    except OSError as e:
        raise GraphFormatError(f"cannot read the file: {e.strerror}", path=path) from None
    spec = source.format
    fmt = spec.name
    if num_vertices is not None and not spec.num_vertices:  # (a binary graph states its own count too)
        raise GraphFormatError(f"--num-vertices applies to edge lists only, not {fmt!r} files (edge lists: "
                               "text, or Parquet/Arrow edge tables)", path=path)
    if spec.storage == "table":
        return _finish(read_table_graph(path, fmt, num_vertices), path, fmt, hash_file=True, digest=digest)
    if spec.storage == "binary":
        if codec is not None:
            raise GraphFormatError(f"a {CODECS[codec][1]}-compressed .h5 file: decompress it first", path=path)
        from .binary import read_binary_graph

        return read_binary_graph(path, be=device)
    head = source.head()
    if looks_binary(head):
        raise GraphFormatError(f"binary data, not a text graph file ({fmt}): it starts with {shown(head)}",
                               path=path)
    bom = bom_problem(head, "a text graph file")  # (.gra, .mtx; an edge list's dialect says so first)
    if bom:
        raise GraphFormatError(bom, path=path, line=1)
    if num_vertices is not None and int(num_vertices) < 0:
        raise GraphFormatError(f"number of vertices must be >= 0, got {num_vertices!r}", path=path)
    dialect = source.dialect if spec.dialect else Dialect()
    table = COMMA_TABLE if dialect.comma else None
    text = StreamText(path, codec, table) if codec else Text(path, translate=table)
    given, digest = digest, None
    try:
        digest = text.digest(given)  # hashed beside the parse; joined when the index is assembled
        if fmt == "gra":
            g = read_gra(text)
        elif fmt == "mtx":
            g = read_mtx(text)
        elif fmt == "labelled" or dialect.labelled:  # names not asked for: the whole file must be shaped so
            g = read_labelled(text, dialect.body, num_vertices, None if fmt == "labelled" else dialect.fields)
            _header_not_a_node(path, dialect, g)
        else:  # (every edge line as wide as the first; the counts distgrail's writer states held to)
            g = read_edgelist(text, declared_counts(dialect, num_vertices, None, path), dialect.body, dialect.comma)
            declared_counts(dialect, num_vertices, g.m, path)
        if digest is not None:
            digest.check()  # the file must not have changed under the parse
        g.digest = text.chunk_digest() if digest is None else digest
    except BaseException:
        if digest is not None:
            digest.cancel()
        raise
    finally:
        text.close()
    return _finish(g, path, fmt)


def _finish(g: EdgeGraph, path: str, fmt: str, hash_file: bool = False, digest=None) -> EdgeGraph:
    if hash_file:  # the digest of the file as stored, in the background
        from .digest import adopt

        g.digest = adopt(digest, path)
    g.name = os.path.basename(path)
    g.meta["path"] = os.path.abspath(path)
    g.meta["format"] = fmt
    return g


def as_graph(graph, num_vertices: int | None = None, fmt: str = "auto", *, digest=None, device=None) -> EdgeGraph:
    """Turn ``graph`` into an :class:`EdgeGraph`.

    Parameters
    ----------
    graph : EdgeGraph, str, os.PathLike, (src, dst) tuple, (m, 2) array, dict, scipy.sparse matrix, networkx.DiGraph
        A path is read with :func:`read_graph`. For integer edge arrays, ids are vertex ids and
        ``num_vertices`` defaults to the largest id + 1.

        Graphs with their own node labels: a ``networkx.DiGraph``, a dict ``{node: [successor,
        ...]}`` (nodes that only appear as successors are nodes too), or an (m, 2) array of
        string labels. Labels are all integers or all strings; integer labels that are exactly
        0..n-1 (in any order) are the vertex ids, any other labels are kept in the graph's
        ``meta["node_labels"]`` (a :class:`~distgrail.nodelabels.NodeLabels`), stored in the
        index, and queries then take labels: ``build_index({"a": ["b"]}).reachable("a", "b")``.
    num_vertices : int, optional
        Number of vertices for edge arrays and edge-list files (isolated vertices at the end).
    fmt : {"auto", "gra", "edgelist", "mtx", "h5", "labelled", "parquet", "arrow"}
        File format, for paths only (see :func:`read_graph`).
    digest : distgrail.io.digest.FileDigest, optional
        For paths only: the file's digest started by whoever opened it (see :func:`read_graph`).
    device : distgrail.gpu.backend.Backend, optional
        For paths only (see :func:`read_graph`).

    Examples
    --------
    >>> g = as_graph((np.array([0, 1]), np.array([1, 2])))
    >>> g.n, g.m
    (3, 2)
    >>> g = as_graph({"x": ["y", "z"], "y": ["z"]})
    >>> g.n, g.m, g.meta["node_labels"].values.tolist()
    (3, 3, ['x', 'y', 'z'])
    """
    if isinstance(graph, EdgeGraph):
        return graph
    if isinstance(graph, (str, os.PathLike)):
        return read_graph(graph, fmt=fmt, num_vertices=num_vertices, digest=digest, device=device)
    try:
        import scipy.sparse as sp

        if sp.issparse(graph):
            if graph.shape[0] != graph.shape[1]:
                raise GraphFormatError(f"adjacency matrix must be square, got shape {graph.shape}")
            coo = graph.tocoo()
            return from_arrays(coo.row, coo.col, graph.shape[0], "<scipy.sparse>")
    except ImportError:  # pragma: no cover - scipy is a dependency
        pass
    if type(graph).__module__.startswith("networkx"):
        if not graph.is_directed():
            raise GraphFormatError("networkx graph must be directed (a DiGraph)")
        return _labelled(list(graph.nodes()), graph.edges(), "<networkx>")
    if isinstance(graph, dict):
        nodes = dict.fromkeys(graph)
        for succ in graph.values():
            nodes.update(dict.fromkeys(succ))
        return _labelled(list(nodes), ((u, v) for u, succ in graph.items() for v in succ), "<dict>")
    if isinstance(graph, tuple) and len(graph) == 2:
        return from_arrays(graph[0], graph[1], num_vertices, "<arrays>")
    arr = np.asarray(graph)
    if arr.ndim == 2 and arr.shape[1] == 2 and (arr.dtype.kind in "US" or (arr.dtype.kind == "O" and all(
            isinstance(x, str) for x in arr.flat))):
        labels, inv = np.unique(arr.astype(str).ravel(), return_inverse=True)
        inv = inv.reshape(-1, 2)
        g = from_arrays(inv[:, 0], inv[:, 1], labels.size, "<array>")
        g.meta["node_labels"] = NodeLabels(labels)
        return g
    if arr.ndim == 2 and arr.shape[1] == 2:
        return from_arrays(arr[:, 0], arr[:, 1], num_vertices, "<array>")
    raise GraphFormatError(
        "graph must be a path, an EdgeGraph, a (src, dst) tuple, an (m, 2) array, a dict of successor "
        f"lists, a scipy.sparse matrix or a networkx.DiGraph, got {type(graph).__name__}"
    )


def _labelled(nodes, edges, name) -> EdgeGraph:
    n, src, dst, labels = labelled_graph(nodes, edges, name)
    g = from_arrays(src, dst, n, name)
    if labels is not None:
        g.meta["node_labels"] = labels
    return g


def _header_not_a_node(path, dialect, g) -> None:
    """A first line skipped as a header (``u v``) whose names are node names of the graph too
    (``v w``, ``w u``): it may be an edge; refused rather than guessed."""
    labels = g.meta.get("node_labels")
    if not dialect.body or labels is None or labels.kind != "str":
        return
    names = dialect.header.replace(",", " ").split()[:2]
    both = [x for x in names if x in set(labels.values.tolist())]
    if both:
        raise GraphFormatError(f"the first line {dialect.header!r} was read as a header, but {both[0]!r} is also a node "
                               f"name: it may be an edge; remove the header line, or rename the node",
                               path=path, line=dialect.header_line)
