"""Edge tables: Parquet (``.parquet``) and Arrow IPC / Feather v2 (``.arrow``, ``.feather``) files,
read with pyarrow (``pip install 'distgrail[parquet]'``), record batch by record batch. (How they
are told apart from other files: :mod:`distgrail.io.formats`.)

Columns are chosen by their names: the first source name right before a target name
(``src,dst,start,end``); else by the names' roles, wherever they sit: the one column named as a
source (:data:`SOURCE_NAMES`: ``src``, ``source``, ``from``, ``u``, ...) and the one named as a
target (:data:`TARGET_NAMES`: ``dst``, ``target``, ``to``, ``v``, ...; names compared
case-insensitively; together they are :data:`distgrail.io.dialect.HEADER_NAMES`), so ``dst,src`` is
read target, source and ``src,weight,dst`` skips the weight. A table whose names are all none of
these is read by position: the first two columns are source and target (unless their words
name them the other way round, ``Target Node, Source Node``: refused, as the text readers refuse
such a header, :func:`~distgrail.io.dialect.column_role`). A table with a source name
but no target name (or the other way round), or with two of either, is refused, naming the file and
its columns: the names say something, but not which two columns the edge is. So is a table without
a source name right before a target name that has a column ``head`` or ``tail``
(:data:`~distgrail.io.dialect.AMBIGUOUS_NAMES`: tail -> head in graph theory, head -> tail in
knowledge graphs' ``head,relation,tail``): the edges' direction cannot be told; rename the columns. An Arrow IPC stream
(no footer) must end with its end-of-stream marker: a stream cut at a batch boundary reads as a
shorter stream to pyarrow, so one that stops without the marker, or has bytes after it, is
refused (the IPC file format, with its footer, is checked by pyarrow). Integer columns are vertex ids (>= 0; the graph has largest id + 1 vertices, or
``num_vertices``); string columns are node names (a labelled graph, as for text edge lists with
names; one column of names beside one of integers is refused, as names and ids mixed in a text
edge list are). Errors name the file, the 1-based row and the value.
"""

from __future__ import annotations

import os

import numpy as np

from ..dtypes import size_problem
from ..errors import GraphFormatError, id_range
from .dialect import AMBIGUOUS_NAMES, AMBIGUOUS_WHY, SOURCE_NAMES, TARGET_NAMES, column_role
from .graph import EdgeGraph, from_arrays

__all__ = ["read_table_graph", "SOURCE_NAMES", "TARGET_NAMES"]



def _pyarrow(path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise GraphFormatError("reading Parquet/Arrow edge tables needs pyarrow: pip install 'distgrail[parquet]'",
                               path=path) from None
    import pyarrow

    return pyarrow


def _batches(path: str, fmt: str):
    """(column names, iterator of record batches of the two edge columns, source first)."""
    pa = _pyarrow(path)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            f = pq.ParquetFile(path)
            names = f.schema_arrow.names
            cols = _columns(path, names)
            chosen = [names[c] for c in cols]
            for c in chosen:
                if names.count(c) > 1:
                    raise GraphFormatError(f"edge column name {c!r} is given to {names.count(c)} columns "
                                           f"(columns {names})", path=path)
            # (looked up by name in every batch: the order parquet hands the columns back in is its own)
            return chosen, (pa.RecordBatch.from_arrays([b.column(c) for c in chosen], names=chosen)
                            for b in f.iter_batches(batch_size=1 << 20, columns=chosen))
        import pyarrow.ipc as ipc

        src = pa.memory_map(path, "r")
        try:
            r = ipc.open_file(src)
            batches = (r.get_batch(i) for i in range(r.num_record_batches))
        except pa.ArrowInvalid:
            src.seek(0)
            r = ipc.open_stream(src)
            batches = _stream_batches(path, src, r)
        names = r.schema.names
        cols = _columns(path, names)
        return [names[c] for c in cols], (b.select(cols) for b in batches)
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, GraphFormatError):
            raise
        raise GraphFormatError(f"not a readable {fmt} file ({e})", path=path) from None


#: an Arrow IPC stream's end-of-stream marker: continuation 0xFFFFFFFF, length 0 (before Arrow
#: 0.15: a length 0 alone)
_EOS = (b"\xff\xff\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00")


def _stream_batches(path: str, src, reader):
    """The record batches of the Arrow IPC stream ``reader`` reads from the mapped file ``src``;
    after the last one, the file must hold the end-of-stream marker right there, and nothing after
    it. (pyarrow's stream reader takes the end of the file for the end of the stream: a stream cut
    at a batch boundary would read short.)"""
    last = src.tell()  # where the reader stood after the schema, then after each batch
    for b in reader:
        yield b
        last = src.tell()
    end, size = src.tell(), src.size()
    src.seek(last)
    marker = src.read(end - last) if end - last <= 8 else b""
    if marker not in _EOS:
        raise GraphFormatError(f"Arrow IPC stream ends without its end-of-stream marker (after byte {last:,} "
                               f"of {size:,}: cut short, or damaged); write the IPC file format "
                               f"(pyarrow.feather.write_feather, pyarrow.ipc.new_file), whose footer says where "
                               f"it ends", path=path)
    if end != size:
        raise GraphFormatError(f"{size - end:,} bytes after the Arrow IPC stream's end-of-stream marker "
                               f"(at byte {last:,}): not one stream", path=path)


def _columns(path: str, names: list) -> list:
    """The indices of the (source, target) columns: the first source name right before a target
    name (``src,dst,start,end``); else, when no column is named ``head`` or ``tail`` (refused:
    :data:`~distgrail.io.dialect.AMBIGUOUS_NAMES`), by their names' roles (:data:`SOURCE_NAMES`,
    :data:`TARGET_NAMES`) wherever they sit, one of each; else, when no name is either, the first
    two."""
    if len(names) < 2:
        raise GraphFormatError(f"an edge table needs two columns (source, target), got {names}", path=path)
    low = [str(n).lower() for n in names]
    pair = next((i for i in range(len(low) - 1) if low[i] in SOURCE_NAMES and low[i + 1] in TARGET_NAMES), None)
    if pair is not None:  # a source name right before a target name (src,dst,start,end): that pair
        return [pair, pair + 1]
    ambiguous = [names[i] for i, n in enumerate(low) if n in AMBIGUOUS_NAMES]
    if ambiguous:  # (head,relation,tail: read by roles or position, the edges could be reversed)
        raise GraphFormatError(f"ambiguous edge column names ({', '.join(map(repr, ambiguous))}) among columns "
                               f"{names}: {AMBIGUOUS_WHY}", path=path)
    sources = [i for i, n in enumerate(low) if n in SOURCE_NAMES]
    targets = [i for i, n in enumerate(low) if n in TARGET_NAMES]
    if not sources and not targets:  # no name says anything: the first two columns, source then target,
        roles = [column_role(x.strip()) for x in low[:2]]  # unless their words say otherwise (Target Node)
        if roles[0] == "target" or roles[1] == "source":
            i = 0 if roles[0] == "target" else 1
            raise GraphFormatError(f"column {i + 1} {names[i]!r} is named as the edges' {roles[i]}, but a table whose "
                                   f"columns are named none of src/source/from/u/... and dst/target/to/v/... is read "
                                   f"by position, the first column as the source and the second as the target: put "
                                   f"the columns in that order, or name them (source, target); columns {names}",
                                   path=path)
        return [0, 1]
    if len(sources) == 1 and len(targets) == 1:
        return [sources[0], targets[0]]
    said = "source" if len(sources) != 1 else "target"
    many = sources if said == "source" else targets
    what = (f"{len(many)} columns named as the {said} ({', '.join(repr(names[i]) for i in many)})" if many
            else f"no column named as the {said}")
    raise GraphFormatError(f"cannot tell the edge's source and target columns: {what} among columns {names} "
                           f"(name one source column src/source/from/u/... and one target column "
                           f"dst/target/to/v/...; columns named none of these are read as the first two)",
                           path=path)


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
            types = [c.type for c in cols]
            if any(pa.types.is_dictionary(t) for t in types):
                cols = [c.dictionary_decode() if pa.types.is_dictionary(c.type) else c for c in cols]
                types = [c.type for c in cols]
            for name, c in zip(names, cols):  # (decoded: a null among a dictionary's values too)
                if c.null_count:
                    r = int(np.flatnonzero(np.asarray(c.is_null()))[0])
                    raise _bad_row(path, name, row0 + r, "empty value", None)
            strings = [pa.types.is_string(t) or pa.types.is_large_string(t) for t in types]
            text = any(strings)
            if text and not all(strings):  # (as a text edge list of names and ids mixed: which "1" is node 1?)
                raise GraphFormatError(f"edge columns {names} hold {types[0]} and {types[1]} values: node names in one "
                                       f"and integer ids in the other are ambiguous (is the name '1' vertex 1?); "
                                       f"store both columns as strings (node names) or both as integers", path=path)
            this = "str" if text else "int"
            if not text and not all(pa.types.is_integer(t) for t in types):
                t = next(t for t in types if not pa.types.is_integer(t))
                raise GraphFormatError(f"edge columns {names} must hold integers or strings, got {t}", path=path)
            if kind is not None and kind != this:
                raise GraphFormatError(f"row {row0}: edge columns change from {kind} to {this} values", path=path)
            kind = this
            if text:
                get = ids.setdefault
                cols = [c.cast(pa.string()) for c in cols]
                for name, c in zip(names, cols):
                    _check_names(path, name, row0, c)
                pair = [c.to_pylist() for c in cols]
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
        _check_ids(path, names, e, num_vertices)
        g = from_arrays(e[0::2], e[1::2], num_vertices, name)
    return g


def _check_names(path, col: str, row0: int, c) -> None:
    """A column of node names (Arrow strings; ``row0``: its first row's number) holds no empty
    name and no name with a control character below 32 (a tab, a line end): the text readers
    refuse them, and a pairs or answers file could not spell them."""
    import pyarrow.compute as pc

    bad = pc.or_(pc.equal(pc.utf8_length(c), 0), pc.match_substring_regex(c, "[\\x00-\\x1f]"))
    if pc.any(bad).as_py():
        r = int(np.flatnonzero(np.asarray(bad))[0])
        v = c[r].as_py()
        raise _bad_row(path, col, row0 + r, "empty node name" if v == "" else "a control character in a node name", v)


def _check_ids(path, names: list, e, num_vertices) -> None:
    """The integer ids ``e`` (sources and targets interleaved, row by row) are below
    ``num_vertices`` when it is given, else their largest fits this machine: else the row and
    column of the first id that does not, as the text readers say it."""
    if not e.size:
        return
    big = int(e.max())
    if num_vertices is not None and big >= num_vertices:
        i = int(np.flatnonzero(e >= num_vertices)[0])
        raise _bad_row(path, names[i % 2], i // 2 + 1, f"vertex id {id_range(num_vertices)}", int(e[i]))
    why = size_problem(big + 1, e.size // 2) if num_vertices is None else None
    if why:
        i = int(np.argmax(e))
        raise _bad_row(path, names[i % 2], i // 2 + 1, f"vertex id too large ({why})", big)
