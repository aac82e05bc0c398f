"""Edge tables: Parquet (``.parquet``) and Arrow IPC / Feather v2 (``.arrow``, ``.feather``) files,
read with pyarrow (``pip install 'distgrail[parquet]'``), record batch by record batch. (How they
are told apart from other files: :mod:`distgrail.io.formats`.)

Columns: the first pair of columns whose names are edge-column names (``src``/``dst``,
``source``/``target``, ``from``/``to``, ... see :data:`distgrail.io.dialect.HEADER_NAMES`), else the
first two columns. Integer columns are vertex ids (>= 0; the graph has largest id + 1 vertices, or
``num_vertices``); string columns are node names (a labelled graph, as for text edge lists with
names). Errors name the file, the 1-based row and the value.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import GraphFormatError
from .dialect import HEADER_NAMES
from .graph import EdgeGraph, from_arrays

__all__ = ["read_table_graph"]


def _pyarrow(path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise GraphFormatError("reading Parquet/Arrow edge tables needs pyarrow: pip install 'distgrail[parquet]'",
                               path=path) from None
    import pyarrow

    return pyarrow


def _batches(path: str, fmt: str):
    """(column names, iterator of record batches of the two edge columns)."""
    pa = _pyarrow(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            f = pq.ParquetFile(path)
            names = f.schema_arrow.names
            cols = _columns(path, names)
            return [names[c] for c in cols], f.iter_batches(batch_size=1 << 20, columns=[names[c] for c in cols])
        import pyarrow.ipc as ipc

        src = pa.memory_map(path, "r")
        try:
            r = ipc.open_file(src)
            batches = (r.get_batch(i) for i in range(r.num_record_batches))
        except pa.ArrowInvalid:
            r = ipc.open_stream(src)
            batches = iter(r)
        names = r.schema.names
        cols = _columns(path, names)
        return [names[c] for c in cols], (b.select(cols) for b in batches)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, GraphFormatError):
            raise
        raise GraphFormatError(f"not a readable {fmt} file ({e})", path=path) from None


def _columns(path: str, names: list) -> list:
    if len(names) < 2:
        raise GraphFormatError(f"an edge table needs two columns (source, target), got {names}", path=path)
    low = [str(n).lower() for n in names]
    for i in range(len(low) - 1):
        if low[i] in HEADER_NAMES and low[i + 1] in HEADER_NAMES:
            return [i, i + 1]
    return [0, 1]


def _bad_row(path, col: str, row: int, what: str, value) -> GraphFormatError:
    return GraphFormatError(f"row {row}: column {col!r}: {what}, got {value!r}", path=path)


def read_table_graph(path, fmt: str, num_vertices: int | None = None) -> EdgeGraph:
    """The graph of the edge table at ``path`` (``fmt``: "parquet" or "arrow")."""
    path = os.fspath(path)
    pa = _pyarrow(path)
    names, batches = _batches(path, fmt)
    ids: dict = {}
    ends, row0, kind = [], 1, None
    try:
        for b in batches:
            cols = [b.column(0), b.column(1)]
            for name, c in zip(names, cols):
                if c.null_count:
                    r = int(np.flatnonzero(np.asarray(c.is_null()))[0])
                    raise _bad_row(path, name, row0 + r, "empty value", None)
            types = [c.type for c in cols]
            if any(pa.types.is_dictionary(t) for t in types):
                cols = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in cols]
                types = [c.type for c in cols]
            text = any(pa.types.is_string(t) or pa.types.is_large_string(t) for t in types)
            this = "str" if text else "int"
            if not text and not all(pa.types.is_integer(t) for t in types):
                t = next(t for t in types if not pa.types.is_integer(t))
                raise GraphFormatError(f"edge columns {names} must hold integers or strings, got {t}", path=path)
            if kind is not None and kind != this:
                raise GraphFormatError(f"row {row0}: edge columns change from {kind} to {this} values", path=path)
            kind = this
            if text:
                get = ids.setdefault
                pair = [c.cast(pa.string()).to_pylist() for c in cols]
                flat = [x for uv in zip(*pair) for x in uv]
                ends.append(np.fromiter((get(x, len(ids)) for x in flat), dtype=np.int64, count=len(flat)))
            else:
                pair = [np.asarray(c) for c in cols]
                for name, a in zip(names, pair):
                    if a.size and a.dtype == np.uint64 and int(a.max()) >= 2**62:
                        r = int(np.flatnonzero(a >= 2**62)[0])
                        raise _bad_row(path, name, row0 + r, "vertex id too large", int(a[r]))
                    if a.size and int(a.min()) < 0:
                        r = int(np.flatnonzero(a < 0)[0])
                        raise _bad_row(path, name, row0 + r, "vertex id must be >= 0", int(a[r]))
                e = np.empty(2 * b.num_rows, np.int64)
                e[0::2], e[1::2] = pair
                ends.append(e)
            row0 += b.num_rows
    except pa.ArrowException as e:
        raise GraphFormatError(f"not a readable {fmt} file ({e})", path=path) from None
    e = np.concatenate(ends) if ends else np.zeros(0, np.int64)
    name = os.path.basename(path)
    if kind == "str":
        from ..nodelabels import NodeLabels

        if num_vertices is not None:
            raise GraphFormatError("--num-vertices applies to integer ids, not to node names", path=path)
        g = from_arrays(e[0::2], e[1::2], len(ids), name)
        g.meta["node_labels"] = NodeLabels(np.array(list(ids), dtype=str))
    else:
        if e.size == 0 and num_vertices is None:
            raise GraphFormatError("empty edge table (for a graph of isolated vertices give --num-vertices)",
                                   path=path)
        g = from_arrays(e[0::2], e[1::2], num_vertices, name)
    return g
