"""What kind of edge list a text file is: separator, header line, integer ids or node names; and
the reader of edge lists whose nodes are names (a labelled graph).

Rules (decided from the first two edge lines, i.e. lines that are neither blank nor ``#``/``%``
comments; :func:`sniff`):

* **Separator**: a comma in the first edge line makes commas separators (CSV); tabs and spaces
  always are.
* **Header**: the first edge line is a header, and skipped, when its first two fields are both
  column names people use (``src,dst``, ``source target``, ``from to``, ``node1 node2``, ...), or
  when they are not both integers while the next edge line's are.
* **Node names**: when the first two fields of the first edge line (after a header) are both not
  integers, the file is read as a labelled graph: every field is a node name (no blanks or commas inside),
  vertices are numbered in order of first appearance, and the names are stored in the index
  (:mod:`distgrail.nodelabels`), so queries take names. ``--format labelled`` reads any edge list
  so (names that are integers but not ids 0..n-1, e.g. 64-bit hashes, or a first edge line such as
  ``1 a``). Any other file is an integer edge list: a field that is not a non-negative integer is
  an error naming file, line and value (``0 x`` on line 1 included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtypes import size_problem
from ..errors import GraphFormatError
from .graph import EdgeGraph
from .text import Chunk

__all__ = ["HEADER_NAMES", "Dialect", "sniff", "read_labelled", "COMMA_TABLE", "SNIFF_BYTES"]

#: column names that make a first line a header (case-insensitive)
HEADER_NAMES = frozenset(
    "src dst source target from to tail head node1 node2 source_id target_id src_id dst_id from_id to_id "
    "fromnodeid tonodeid source_node target_node from_node to_node u v start end".split())
#: ``bytes.translate`` table turning commas into spaces (CSV)
COMMA_TABLE = bytes.maketrans(b",", b" ")
#: bytes of the file's start that :func:`sniff` looks at
SNIFF_BYTES = 1 << 16


@dataclass
class Dialect:
    comma: bool = False  # commas separate fields
    body: int = 0  # offset of the first line after the header (0: no header)
    header: str = ""  # the header line, if any
    labelled: bool = False  # the first edge line names nodes


def _is_int(tok: bytes) -> bool:
    return tok.lstrip(b"-").isdigit()


def _edge_lines(head: bytes, complete: bool):
    """(offset, line end, fields) of the first two edge lines of ``head``."""
    out, pos = [], 0
    while len(out) < 2 and pos < len(head):
        end = head.find(b"\n", pos)
        if end < 0:
            if not complete:
                break
            end = len(head)
        line = head[pos:end]
        body = line.split(b"#")[0].split(b"%")[0]
        fields = body.replace(b",", b" ").split()
        if fields:
            out.append((pos, end, fields, b"," in body))
        pos = end + 1
    return out


def sniff(head: bytes, complete: bool = False) -> Dialect:
    """The :class:`Dialect` of an edge list starting with ``head`` (``complete``: the whole file)."""
    lines = _edge_lines(head, complete)
    if not lines:
        return Dialect()
    d = Dialect(comma=lines[0][3])
    first = lines[0][2][:2]
    named = len(first) == 2 and all(f.lower().decode("utf-8", "replace") in HEADER_NAMES for f in first)
    ints = [all(_is_int(f) for f in ln[2][:2]) for ln in lines]
    names = [len(ln[2]) >= 2 and not any(_is_int(f) for f in ln[2][:2]) for ln in lines]
    if named or (names[0] and len(lines) > 1 and ints[1]):
        d.body = min(lines[0][1] + 1, len(head))
        d.header = head[lines[0][0]:lines[0][1]].decode("utf-8", "replace").strip()
        lines, names = lines[1:], names[1:]
        if len(lines) > 0 and not d.comma:
            d.comma = lines[0][3]
    d.labelled = bool(lines) and names[0]
    return d


def read_labelled(text, start: int = 0, num_vertices: int | None = None) -> EdgeGraph:
    """A labelled graph from the edge list ``text`` (a :class:`~distgrail.io.text.Text`) from byte
    ``start``: two node names per line (extra columns ignored), ``#``/``%`` comments."""
    from ..nodelabels import NodeLabels

    if num_vertices is not None:
        raise GraphFormatError("--num-vertices applies to edge lists of integer ids, not to node names",
                               path=text.path)
    ids: dict = {}
    get = ids.setdefault
    parts = []
    for offset, data in text.chunks(start):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            text.fail(offset + e.start, f"node names must be UTF-8 text, got {text.excerpt(offset + e.start)}")
        ch = Chunk(text, offset, data)
        ch.blank_comments(b"#%")
        short = (ch.tokens_per_line > 0) & (ch.tokens_per_line < 2)
        if short.any():
            pos = ch.abs(ch.line_start[int(np.flatnonzero(short)[0])])
            text.fail(pos, f"expected two node names 'u v' (edge), got {text.excerpt(pos)}")
        ch.keep_columns(2)
        toks = ch.arr.tobytes().split()
        if len(toks) != int(ch.cum[-1]):  # bytes.split() also splits at \v and \f
            pos = ch.abs(int(np.flatnonzero((ch.arr == 11) | (ch.arr == 12))[0]))
            text.fail(pos, f"control character in a node name, got {text.excerpt(pos)}")
        parts.append(np.fromiter((get(t, len(ids)) for t in toks), dtype=np.int64, count=len(toks)))
        del toks, ch
    if not ids:
        raise GraphFormatError("empty edge list: no 'u v' line found", path=text.path)
    n = len(ids)
    if size_problem(n):
        raise GraphFormatError(f"{n:,} node names: {size_problem(n)}", path=text.path)
    ends = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    names = [k.decode("utf-8") for k in ids]
    del ids
    labels = NodeLabels(np.array(names, dtype=str))
    if all(_is_int(k.encode()) for k in names):  # integer names (--format labelled): integer labels
        try:
            vals = np.array([int(k) for k in names], dtype=np.int64)
            labels = None if np.array_equal(vals, np.arange(n)) else NodeLabels(vals)
        except OverflowError:  # beyond 64 bits: they stay names
            pass
    g = EdgeGraph(n=n, src=ends[0::2].astype(np.int32), dst=ends[1::2].astype(np.int32))
    if labels is not None:
        g.meta["node_labels"] = labels
    return g
