"""What kind of edge list a text file is: separator, header line, integer ids or node names; and
the reader of edge lists whose nodes are names (a labelled graph).

Rules (decided from the first two edge lines, i.e. lines that are neither blank nor ``#``/``%``
comments; :func:`sniff`):

* **Separator**: a comma in the first edge line makes commas separators (CSV); tabs and spaces
  always are between integer ids. Node names (:func:`split_fields`): a CSV's are split at its
  commas only (outside double quotes) and a file whose first edge line after the header holds a
  tab at tabs only, the blanks around each name cut, so names may hold blanks (``John
  Smith,Jane Doe``, ``alice, bob``); any other file's at blanks, a later edge line holding a tab
  refused (one separator a file: ``c d<tab>e`` may be tab-separated). A tab-separated file's (a tab in
  its first edge line, no comma) each tab ends a field: an empty first or second field (``c\\t\\td``,
  ``\\tc\\td``) is refused, of names or of ids (:func:`~distgrail.io.guards.empty_tab_field`).
* **Header**: only the first edge line may be a header, and only when none of its tokens (split
  at blanks and commas, double quotes cut) is a number (``+0``, ``-1``, ``2.5``, ``1e3``,
  ``"1"``): it is skipped when its first two column names (split as names are: commas, else
  tabs, else blanks; one pair of double quotes around each cut, R's ``"src","dst"``) are names
  people use (``src,dst``, ``source target``, ``from to``, ``node1 node2``, ...; or words of
  one role with a blank between them, ``Source Node``: :func:`column_role`), or when it holds a
  source and a target name (``source metaedge target``), or when the next edge line's first two
  fields are integers. ``+0 +1`` is an edge line (and an error: ids are non-negative integers
  without a sign), never a header. Columns are read by position (source, target): a header
  naming them otherwise (``dst,src``, ``"to","from"``, ``Target Node,Source Node``,
  ``source,metaedge,target``) is an error, and so is a CSV header whose first column has no name
  (``,src,dst``, ``"","from","to"``: pandas' index, R's row names).
* **head, tail**: ambiguous column names (:data:`AMBIGUOUS_NAMES`): an arc runs tail -> head in
  graph theory, head -> tail in knowledge-graph triples (``head,relation,tail``). A first line of
  no number whose first two fields are column names or ``head``/``tail``, or that holds both, is
  a header, and an error unless its first two fields are a source then a target name
  (``src,dst,head`` reads columns 1 and 2): rename the columns (``source,target``).
* **Node names**: ``auto`` reads node names only where the file says it is an edge list of names:
  its first edge line is a header whose first two fields name the source and the target (``source
  target``, ``src,dst``, ...), and the first edge line after it holds two fields or more, its first
  two each holding a token other than a number, its first token none (``2 7<tab>1.5`` is a line of
  ids, ``Route 66,Main St`` one of names). Then every edge line must have as many fields as that one (a CSV's: commas + 1
  outside double quotes, an empty field counted, :func:`~distgrail.io.guards.line_fields`; a line
  of another shape is refused, with file and line), and no name of the first two fields may be an
  integer (names and ids mixed are ambiguous), empty, or hold a double quote or a control
  character. A first edge line of names without such a header (``alice bob``; ``import os``, a
  Python script; a word list) is refused at that line (:attr:`Dialect.undeclared`, raised by
  :attr:`distgrail.io.formats.Source.dialect`): ``--format labelled`` reads it. Vertices are
  numbered in order of first appearance, and the names are stored in the index
  (:mod:`distgrail.nodelabels`), so queries take names. ``--format labelled`` reads any edge list
  so, header or not, lines of any length (the first two fields are the edge; names that are
  integers but not ids 0..n-1, e.g. 64-bit hashes, or a first edge line such as ``1 a``). Any other
  file is an integer edge list: a field that is not a non-negative integer is an error naming file,
  line and value (``0 x`` on line 1 included).
* **Line ends**: ``\\n`` or ``\\r\\n``; a ``\\r`` anywhere else is an error
  (:func:`distgrail.io.text.stray_cr`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..dtypes import size_problem
from ..errors import GraphFormatError
from .excerpt import shown
from .graph import EdgeGraph
from .guards import GLUED_MARK, glued_mark, line_fields, stray_cr
from .text import WS, Chunk, digits_value

__all__ = ["HEADER_NAMES", "SOURCE_NAMES", "TARGET_NAMES", "AMBIGUOUS_NAMES", "SOURCE_WORDS", "TARGET_WORDS", "Dialect",
           "sniff", "undecided", "split_fields", "column_role", "read_labelled", "COMMA_TABLE", "SNIFF_BYTES",
           "SNIFF_MAX"]

#: column names that name an edge's source column (case-insensitive)
SOURCE_NAMES = frozenset(
    "src source from node1 source_id src_id from_id fromnodeid source_node src_node from_node u start".split())
#: column names that name an edge's target column (case-insensitive)
TARGET_NAMES = frozenset(
    "dst target to node2 target_id dst_id to_id tonodeid target_node dst_node to_node v end tgt dest destination".split())
#: column names that make a first line a header (case-insensitive)
HEADER_NAMES = SOURCE_NAMES | TARGET_NAMES
#: column names of opposite meanings, refused as a header's or table's edge columns: an arc runs
#: tail -> head in graph theory, head -> tail in knowledge graphs (``head,relation,tail``)
AMBIGUOUS_NAMES = frozenset(("head", "tail"))
#: why :data:`AMBIGUOUS_NAMES` are refused, and what to do
AMBIGUOUS_WHY = ("'head' and 'tail' mean opposite ends in graph theory (an arc runs tail -> head) and in "
                 "knowledge graphs (head,relation,tail: head -> tail), so the edges' direction cannot be told; "
                 "rename the edge columns, e.g. to source,target")
#: ``bytes.translate`` table turning commas into spaces (CSV)
COMMA_TABLE = bytes.maketrans(b",", b" ")
#: bytes of the file's start that :func:`sniff` looks at first; more (x8 at a time, up to
#: :data:`SNIFF_MAX`) while the first two edge lines are not in them (:func:`undecided`)
SNIFF_BYTES = 1 << 16
SNIFF_MAX = 1 << 28


@dataclass
class Dialect:
    comma: bool = False  # commas separate fields
    body: int = 0  # offset of the first line after the header (0: no header)
    header: str = ""  # the header line, if any
    labelled: bool = False  # the first edge line names nodes
    fields: int = 0  # fields of the first edge line after the header (a labelled file's every line has as many)
    misnamed: str = ""  # why the header's names contradict the columns read as (source, target), if they do
    header_line: int = 0  # the header's line number (1-based), if any
    # node names on the first edge line without a header naming the source and target columns:
    # refused unless --format labelled (why, what to do); undeclared_line: that line (1-based),
    # undeclared_shown: the line as messages show it
    undeclared: str = ""
    undeclared_line: int = 0
    undeclared_shown: str = ""
    # the counts distgrail's own edge-list writer states on the first line (:data:`DECLARED`)
    vertices: int | None = None
    edges: int | None = None


#: the first line distgrail writes into an edge list (``generate``, ``convert``): the vertex count
#: (trailing isolated vertices included, which no edge line can show) and the edge lines that follow
DECLARED = re.compile(rb"# distgrail edge list: (\d+) vertices, (\d+) edges\r?(?:\n|$)")


def declared_counts(dialect: Dialect, num_vertices, edges_read: int | None, path) -> int | None:
    """The vertex count to read an edge list with: ``num_vertices`` when given, else the count
    its first line states (:data:`DECLARED`). ``edges_read`` (after the read): a file whose first
    line states another number of edge lines is refused (cut short, or edited below its line)."""
    if edges_read is not None and dialect.edges is not None and edges_read != dialect.edges:
        kind = "truncated file? " if edges_read < dialect.edges else ""
        raise GraphFormatError(f"{kind}its first line, written by distgrail, says {dialect.edges:,} edges but the file "
                               f"holds {edges_read:,} (if you edited the file, correct or remove that line)",
                               path=path, line=1)
    if num_vertices is None and dialect.vertices is not None and size_problem(dialect.vertices):
        raise GraphFormatError(f"its first line, written by distgrail, states a graph too large: "
                               f"{size_problem(dialect.vertices)}", path=path, line=1)
    return num_vertices if num_vertices is not None else dialect.vertices


_INT = re.compile(rb"-?\d+")


def _is_int(tok: bytes) -> bool:
    """An integer, one minus sign allowed (``--1`` is no integer: a header look-ahead must not
    take it for one)."""
    return _INT.fullmatch(tok) is not None


#: an integer name written as Python writes the integer (no leading zero, no "-0", at most 19
#: digits): only a file of such names becomes integer labels; ``002`` beside ``2``, or a name of
#: thousands of digits, stays a name (two names are two nodes)
_CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]{0,18}")

_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def is_number(tok: bytes) -> bool:
    """Whether ``tok`` is written as a number (sign, decimals and exponent allowed): such a field
    makes a line an edge line, never a header, and is never taken for a node name by ``auto``.

    >>> [is_number(t) for t in (b"+0", b"-1", b"2.5", b"1e3", b".5", b"src", b"v1", b"1a")]
    [True, True, True, True, True, False, False, False]
    """
    return _NUMBER.fullmatch(tok) is not None


def _cut(line: bytes) -> bytes:
    """A line's content: up to its first ``#`` or ``%``."""
    return line.split(b"#")[0].split(b"%")[0]


def _edge_lines(head: bytes, complete: bool):
    """(offset, line end, tokens, comma) of the first two edge lines of ``head``: tokens split at
    blanks and commas (as the integer reader splits), comma: the line's content holds one."""
    out, pos = [], 0
    while len(out) < 2 and pos < len(head):
        end = head.find(b"\n", pos)
        if end < 0:
            if not complete:
                break
            end = len(head)
        body = _cut(head[pos:end])
        fields = body.replace(b",", b" ").split()
        if fields:
            out.append((pos, end, fields, b"," in body))
        pos = end + 1
    return out


#: the blanks cut around a field of a comma- or tab-separated line
BLANKS = b" \t\r"


def split_fields(line: bytes, sep: bytes) -> list:
    """The fields of an edge ``line`` (without its ``\\n``) as :func:`read_labelled` splits them:
    ``sep`` b"," at the commas outside double-quoted fields up to the first ``#``/``%`` outside
    them (:func:`~distgrail.io.guards.line_fields` counts the same), every field kept, empty ones
    too; b"\\t" at tabs (a run of them is one cut), blank fields dropped (:func:`read_labelled`
    refuses a blank first or second one); b" " at blanks. Blanks
    around a comma- or tab-separated field are cut: it may hold blanks inside (``John Smith``).

    >>> split_fields(b'John Smith, Jane Doe,,"a, b" # c', b","), split_fields(b"a b\\t\\tc \\t# d", b"\\t")
    ([b'John Smith', b'Jane Doe', b'', b'"a, b"'], [b'a b', b'c'])
    """
    if sep == b" ":
        return _cut(line).split()
    if sep == b"\t":
        return [f for f in (x.strip(BLANKS) for x in _cut(line).split(b"\t")) if f]
    if b'"' not in line:
        return [f.strip(BLANKS) for f in _cut(line).split(b",")]
    out, i, k, start, quoted = [], 0, len(line), 0, False  # (walked as guards.line_fields walks)
    while i < k:
        c = line[i]
        if quoted:
            if c == 34:
                if i + 1 < k and line[i + 1] == 34:
                    i += 1
                else:
                    quoted = False
        elif c in b"#%":
            break
        elif c == 44:
            out.append(line[start:i])
            start = i + 1
        elif c == 34 and i == start:
            quoted = True
        i += 1
    out.append(line[start:i])
    return [f.strip(BLANKS) for f in out]


def _unquoted(field: bytes) -> bytes:
    """A header field without one pair of double quotes around it (R's ``write.csv`` quotes every
    column name: ``"src","dst"``)."""
    if len(field) >= 2 and field[:1] == field[-1:] == b'"':
        return field[1:-1].replace(b'""', b'"').strip(BLANKS)
    return field


#: words of a column name holding a blank that give it a role (``Source Node``, ``To Node``,
#: ``src ip``), when its words hold those of one role only
SOURCE_WORDS = frozenset(("source", "src", "from"))
TARGET_WORDS = frozenset(("target", "dst", "to", "tgt", "dest", "destination"))


def column_role(name: str, words: bool = True) -> str:
    """"source", "target" or "" for a column ``name`` (lower case): a name of :data:`SOURCE_NAMES`
    or :data:`TARGET_NAMES`, or (``words``) a name of blank-separated words among which are words of
    one role only (:data:`SOURCE_WORDS`, :data:`TARGET_WORDS`).

    >>> [column_role(x) for x in ("src", "target node", "from node", "node", "from a to b")]
    ['source', 'target', 'source', '', '']
    """
    if name in SOURCE_NAMES:
        return "source"
    if name in TARGET_NAMES:
        return "target"
    parts = set(name.split()) if words else set()
    if len(parts) < 2 or bool(parts & SOURCE_WORDS) == bool(parts & TARGET_WORDS):
        return ""
    return "source" if parts & SOURCE_WORDS else "target"


def _named(low: list, comma: bool) -> bool:
    """Whether a first line of no number whose fields are ``low`` (lower case, quotes cut) is a
    header by its names: its first two are column names (:func:`column_role`) or ``head``/``tail``;
    or it holds ``head`` and ``tail`` (``head,relation,tail``), or a source and a target name
    (``source metaedge target``); or, comma-separated, its first field is empty and the next two are
    column names (an index column: ``,src,dst``)."""
    def edge_name(f):
        return bool(column_role(f)) or f in AMBIGUOUS_NAMES

    if len(low) < 2:
        return False
    exact = {column_role(f, words=False) for f in low}
    return (all(edge_name(f) for f in low[:2]) or AMBIGUOUS_NAMES <= set(low) or {"source", "target"} <= exact
            or (comma and low[0] == "" and len(low) >= 3 and all(edge_name(f) for f in low[1:3])))


def undecided(head: bytes, complete: bool) -> bool:
    """Whether :func:`sniff` needs more of the text than ``head``: fewer than two edge lines in it
    and more text after it (the header rule looks at the line after the first edge line)."""
    return not complete and len(_edge_lines(head, complete)) < 2


def sniff(head: bytes, complete: bool = False) -> Dialect:
    """The :class:`Dialect` of an edge list starting with ``head`` (``complete``: the whole file)."""
    stated = DECLARED.match(head)
    counts = {"vertices": digits_value(stated[1]), "edges": digits_value(stated[2])} if stated else {}
    lines = _edge_lines(head, complete)
    if not lines:
        return Dialect(**counts)
    d = Dialect(comma=lines[0][3], **counts)
    line = head[lines[0][0]:lines[0][1]]
    sep = b"," if d.comma else b"\t" if b"\t" in _cut(line) else b" "
    low = [_unquoted(f).lower().decode("utf-8", "replace") for f in split_fields(line, sep)]
    numbers = any(is_number(_unquoted(f)) for f in lines[0][2])  # ("1","2" is an edge line: not skipped)
    declared = len(low) >= 2 and low[0] in SOURCE_NAMES and low[1] in TARGET_NAMES
    ints = [all(_is_int(f) for f in ln[2][:2]) for ln in lines]
    header = not numbers and len(low) >= 2 and (_named(low, d.comma) or (len(lines) > 1 and ints[1]))
    if header and stray_cr(head[:lines[0][1] + 1], complete and lines[0][1] >= len(head) - 1) >= 0:
        header = False  # (read as an edge line then, the reader reports the '\r' with its line)
    if header:
        d.body = min(lines[0][1] + 1, len(head))
        d.header = line.decode("utf-8", "replace").strip()
        d.header_line = head.count(b"\n", 0, lines[0][0]) + 1
        d.misnamed = _misnamed(low)
        if d.comma and low[0] == "":
            d.misnamed = ("the header's first column has no name (an index column, as pandas' to_csv writes one, or "
                          "R's row names): it would be read as the edges' source; write the file without it "
                          "(pandas: index=False; R: row.names=FALSE)")
        lines = lines[1:]
        if lines and not d.comma:
            d.comma = lines[0][3]
    if lines:  # the first edge line after the header: split as read_labelled splits it
        a, b = lines[0][0], lines[0][1]
        line = head[a:b]
        fields = split_fields(line, b"," if d.comma else b"\t" if b"\t" in _cut(line) else b" ")
        if len(fields) < 2:  # (a comma-separated header over 'a b': shown as names, refused by the reader)
            fields = lines[0][2]
        # names: the first two fields hold a token other than a number, and the line's first token is none
        # (so '2 7<tab>1.5', '0 1 {'w': 1, 'c': 2}' stay integer lines, 'Route 66,Main St' is one of names)
        names = (len(fields) >= 2 and not is_number(lines[0][2][0])
                 and not any(all(is_number(t) for t in f.split()) for f in fields[:2]))
        d.labelled = names and header and declared
        d.fields = line_fields(line, True) if d.comma else len(fields)
        if names and not d.labelled and stray_cr(head[a:b + 1], complete and b >= len(head) - 1) < 0:
            # names the file does not declare (words, code): refused by auto (a lone '\r': the reader says so)
            d.undeclared_line = head.count(b"\n", 0, a) + 1
            d.undeclared_shown = shown(line.rstrip(b"\r"))
            d.undeclared = _undeclared(line.rstrip(b"\r"), a == 0, d.header)
    return d


def _undeclared(line: bytes, first: bool, header: str = "") -> str:
    """Why ``auto`` refuses the first edge line ``line`` of names no header declares (``first``: it
    starts the file; ``header``: the header line before it, if any): a byte order mark or CSV quotes
    that hide a header are said as such."""
    if first and line.startswith(b"\xef\xbb\xbf"):
        return f"the file starts with a UTF-8 byte order mark; save it without one, got {shown(line)}"
    if b'"' in line:
        return (f"a quoted field: CSV quoting is not read (node names have no quotes), got {shown(line)}")
    if header:
        return (f"node names, not integer ids: {shown(line)}, after a header ({shown(header.encode())}) whose first "
                f"two columns are not named as the source and the target (pass --format labelled to read a graph "
                f"of node names, or name those columns e.g. 'source,target', 'src,dst' or 'from,to')")
    return (f"node names, not integer ids: {shown(line)} (pass --format labelled to read a graph of node names, "
            f"or give the file a header line such as 'source target')")


def _misnamed(names) -> str:
    """Why a header's column ``names`` (lower case, quotes cut) contradict reading its first column
    as the edges' sources and its second as their targets ("" when they do not): a source name past
    the first column or a target name past the second (``dst,src``: the edges would be read
    reversed; ``src,weight,dst``: the weights taken for targets; ``Target Node,Source Node``: the
    first two columns' words, :func:`column_role`, said too)."""
    if len(names) >= 2 and column_role(names[0]) == "source" and column_role(names[1]) == "target":
        return ""  # (source then target: later columns may carry any names, src,dst,start,end)
    if AMBIGUOUS_NAMES & set(names):
        return f"ambiguous edge column names ({', '.join(sorted(AMBIGUOUS_NAMES & set(names)))}): {AMBIGUOUS_WHY}"
    for i, name in enumerate(names):
        role = column_role(name, words=i < 2)
        if (role == "source" and i != 0) or (role == "target" and i != 1):
            return (f"the header names column {i + 1} '{name}' as the edges' {role}, but distgrail reads the "
                    f"first column as the source and the second as the target: put the columns in that order "
                    f"(the source and target columns first)")
    return ""


def read_labelled(text, start: int = 0, num_vertices: int | None = None, fields: int | None = None) -> EdgeGraph:
    """A labelled graph from the edge list ``text`` (a :class:`~distgrail.io.text.Text`) from byte
    ``start``: two node names per line (extra columns ignored), ``#``/``%`` comments (one glued to
    either name, ``alice bob%20``, is refused: :func:`~distgrail.io.guards.glued_mark`). ``fields``
    (names recognised by ``auto``, not asked for): every edge line must have that many fields,
    the shape of an edge list, else the file is refused at its first line of another shape.

    The fields (:func:`split_fields`): a comma-separated file's (``text`` translates its commas) at
    its commas only, commas + 1 counted; a tab-separated one's (a tab in its first edge line) at
    tabs only, an empty first or second field refused (``c\\t\\td`` is no edge c -> d), a run of
    tabs after them one cut; the blanks around a name cut, so names may hold blanks (``John
    Smith``); any other file's at blanks, an edge line with a tab refused (one separator a file)."""
    from ..nodelabels import NodeLabels

    if num_vertices is not None:
        raise GraphFormatError("--num-vertices applies to edge lists of integer ids, not to node names",
                               path=text.path)
    ids: dict = {}
    get = ids.setdefault
    parts = []
    sep = b"," if text.translate is not None else None  # (None: told by the first edge line)
    for offset, data in text.chunks(start):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            text.fail(offset + e.start, f"node names must be UTF-8 text, got {text.excerpt(offset + e.start)}")
        if offset == start == 0 and data.startswith(b"\xef\xbb\xbf"):  # (it would begin the first name)
            text.fail(0, "the file starts with a UTF-8 byte order mark; save it without one (node names are "
                         f"plain UTF-8), got {text.excerpt(0)}")
        sep = sep or _first_separator(data)
        if sep is None:  # (comments and blank lines only, so far)
            continue
        raw = text.raw_chunk(offset, len(data)) if sep == b"," else data  # (a CSV's commas come as blanks)
        glued = glued_mark(raw, sep)
        if glued >= 0:  # ('alice bob%20' is no edge to bob)
            text.fail(offset + glued, GLUED_MARK + text.excerpt(offset + glued))
        if sep == b" ":
            toks, where = _blank_names(text, offset, data, fields)
        else:
            toks, where = _separated_names(text, offset, raw, sep, fields)
        if fields:  # names recognised, not asked for: an integer among them makes the file ambiguous
            k = next((i for i, t in enumerate(toks) if _is_int(t)), None)
            if k is not None:
                pos = where(k)
                text.fail(pos, f"node names and integer ids mixed ({toks[k].decode()!r}): the first edge line names "
                               f"nodes, so the file would be read as a graph of names; give --format labelled if "
                               f"it is one, got {text.excerpt(pos)}")
        parts.append(np.fromiter((get(t, len(ids)) for t in toks), dtype=np.int64, count=len(toks)))
        del toks, where
        text.check_room(sum(p.size for p in parts) // 2)
    if not ids:
        raise GraphFormatError("empty edge list: no 'u v' line found", path=text.path)
    n = len(ids)
    if size_problem(n):
        raise GraphFormatError(f"{n:,} node names: {size_problem(n)}", path=text.path)
    ends = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    names = [k.decode("utf-8") for k in ids]
    del ids
    labels = NodeLabels(np.array(names, dtype=str))
    if all(_CANONICAL_INT.fullmatch(k) for k in names):  # integer names (--format labelled): integer labels
        try:
            vals = np.array([int(k) for k in names], dtype=np.int64)
            labels = None if np.array_equal(vals, np.arange(n)) else NodeLabels(vals)
        except OverflowError:  # beyond 64 bits: they stay names
            pass
    g = EdgeGraph(n=n, src=ends[0::2].astype(np.int32), dst=ends[1::2].astype(np.int32))
    if labels is not None:
        g.meta["node_labels"] = labels
    return g


#: what a line of another shape is told, by separator
_SPLIT = {b",": " (the file is comma-separated: its fields are split at commas only, so names may hold blanks)",
          b"\t": " (its first edge line holds a tab: fields are split at tabs only, so names may hold spaces)",
          b" ": ""}


def _first_separator(data: bytes):
    """b"\t" when the first edge line of ``data`` (whole lines) holds a tab in its content, b" " when it
    holds none, None when ``data`` has no edge line (as :func:`sniff` tells the first edge line)."""
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        body = _cut(data[pos:end])
        if body.split():
            return b"\t" if b"\t" in body else b" "
        pos = end + 1
    return None


def _short(text, pos: int, sep: bytes):
    text.fail(pos, f"expected two node names 'u v' (edge){_SPLIT[sep]}, got {text.excerpt(pos)}")


def _other_width(text, pos: int, fields: int, got: int, sep: bytes):
    text.fail(pos, f"not an edge list of node names: its first edge line has {fields} fields, this one {got}"
                   f"{_SPLIT[sep]} (--format labelled reads the first two fields of every line as names), "
                   f"got {text.excerpt(pos)}")


def _quoted(text, pos: int):
    text.fail(pos, f"a quoted field: CSV quoting is not read (node names have no quotes), got {text.excerpt(pos)}")


def _blank_names(text, offset: int, data: bytes, fields):
    """The first two blank-separated fields of every edge line of ``data`` (whole lines from
    ``offset``, of a file whose first edge line holds no tab) and where the k-th starts
    (``where(k)``); the file refused at the first of these: a line of fewer than two fields, or
    of another count than ``fields``; a tab in an edge line (one separator a file: ``c d<tab>e``
    would be the edge c -> d here, ``c d`` -> ``e`` in a tab-separated file)."""
    ch = Chunk(text, offset, data)
    ch.blank_comments(b"#%")
    live = ch.tokens_per_line > 0
    found = []  # (line, order, what)
    tabs = np.flatnonzero(ch.arr == 9)
    if tabs.size:
        tabbed = ch.line_of(tabs)
        tabbed = tabbed[live[tabbed]]
        if tabbed.size:
            found.append((int(tabbed[0]), 0, "tab"))
    short = np.flatnonzero(live & (ch.tokens_per_line < 2))
    if short.size:
        found.append((int(short[0]), 1, "short"))
    other = np.flatnonzero(live & (ch.tokens_per_line != (fields or 0))) if fields else short[:0]
    if other.size:
        found.append((int(other[0]), 2, "width"))
    if found:
        k, _, what = min(found)
        at = ch.abs(ch.line_start[k])
        if what == "tab":
            text.fail(at, "a tab in a file of node names whose first edge line holds none: its names are split at "
                          "blanks, but this line may be tab-separated, its names holding spaces ('c d<tab>e'); use one "
                          f"separator in the whole file, got {text.excerpt(at)}")
        if what == "short":
            _short(text, at, b" ")
        _other_width(text, at, fields, int(ch.tokens_per_line[k]), b" ")
    ch.keep_columns(2)
    quotes = np.flatnonzero(ch.arr == 34)
    if quotes.size:  # CSV quoting is not read: a quoted name with a blank would be split
        _quoted(text, ch.abs(int(quotes[0])))
    odd = np.flatnonzero((ch.arr < 32) & ~WS[ch.arr])  # (a name's control character: \v, \f, \x01, \x1f ...)
    if odd.size:
        pos = ch.abs(int(odd[0]))
        text.fail(pos, f"control character in a node name, got {text.excerpt(pos)}")
    toks = ch.arr.tobytes().split()
    return toks, ch.token_pos


def _separated_names(text, offset: int, raw: bytes, sep: bytes, fields):
    """The first two fields of every edge line of ``raw`` (whole lines from ``offset``, as stored),
    split at ``sep`` only (b"," or b"\t": :func:`split_fields`), and where the k-th starts
    (``where(k)``); the file refused at the first of these in ``raw``: a line of fewer than two
    fields, or of another count than ``fields``; an empty name (tab-separated: a blank first or
    second field, every tab a cut); a control character or a double
    quote in a name. No Python loop per line: every byte's segment (the bytes between two cuts,
    a cut being ``sep`` or a line end) and field at once."""
    comma = sep == b","
    ch = Chunk(text, offset, raw)
    ch.blank_comments(b"#%")  # (a comment's commas and tabs too)
    a = ch.arr
    nlm = a == 10
    bound = nlm | (a == sep[0])
    cuts = np.flatnonzero(bound)
    seg = np.cumsum(bound) - bound  # the segment of each byte (a cut ends its segment)
    nseg = cuts.size + 1
    nlines = int(np.count_nonzero(nlm)) + 1
    line_of = np.concatenate(([0], np.cumsum(nlm[cuts])))  # the line of each segment
    line_seg = np.concatenate(([0], np.flatnonzero(nlm[cuts]) + 1))  # the first segment of each line
    edge = np.zeros(nlines, bool)
    edge[:ch.tokens_per_line.size] = ch.tokens_per_line > 0  # (lines of a field; comment and blank ones: none)
    found = []  # (offset in raw, order, what): the first refused
    solid = ~(bound | (a == 32) | (a == 13) | (a == 9))  # (a tab is a blank of a CSV)
    p = np.flatnonzero(solid)
    ps = seg[p]
    new = np.flatnonzero(np.diff(ps, prepend=-1) != 0)  # each segment's first solid byte, in p
    has = np.zeros(nseg, bool)
    has[ps[new]] = True
    first = np.zeros(nseg, np.int64)
    last = np.zeros(nseg, np.int64)
    first[ps[new]] = p[new]
    last[ps[new]] = p[np.append(new[1:], p.size)[:new.size] - 1]  # (a chunk of comments and blank lines: none)
    if comma:  # every segment of an edge line is a field, empty ones too; commas + 1 counted, those in quotes not
        count = np.bincount(line_of, minlength=nlines)
        nl = np.flatnonzero(nlm)
        for k in sorted(set(np.searchsorted(nl, np.flatnonzero(np.frombuffer(raw, np.uint8) == 34)).tolist())):
            count[k] = line_fields(raw[nl[k - 1] + 1 if k else 0:nl[k] if k < nl.size else len(raw)], True)
        rank = np.arange(nseg) - line_seg[line_of]
        field = edge[line_of]
    else:  # a run of tabs is one cut (the segments with a solid byte are the fields), after the second field
        count = np.bincount(line_of[has], minlength=nlines)
        before = np.cumsum(has) - has
        rank = before - before[line_seg][line_of]
        field = edge[line_of] & has
        blank = np.flatnonzero(edge[line_of] & (np.arange(nseg) - line_seg[line_of] < 2) & ~has)
        if blank.size:  # (an empty first or second field: '\ta\tb', 'a\t\tb' is no edge a -> b)
            found.append((int(np.concatenate(([0], cuts + 1))[blank[0]]), 2, "empty"))
    kept = np.flatnonzero(field & (rank < 2))
    starts = np.concatenate(([0], cuts + 1))  # each segment's first byte
    short = np.flatnonzero(edge & (count < 2))
    if short.size:
        found.append((int(starts[line_seg[short[0]]]), 0, "short"))
    wide = np.flatnonzero(edge & (count != fields)) if fields else short[:0]
    if wide.size:
        found.append((int(starts[line_seg[wide[0]]]), 1, "width"))
    empty = kept[~has[kept]]
    if empty.size:  # (a CSV's ' , ': an empty first or second field is refused before, by the text)
        found.append((int(starts[empty[0]]), 2, "empty"))
    kept = kept[has[kept]]
    f, e = first[kept], last[kept] + 1
    inside = np.cumsum(np.bincount(f, minlength=a.size + 1) - np.bincount(e, minlength=a.size + 1))[:a.size] > 0
    odd = np.flatnonzero(inside & ((a < 32) | (a == 34)))
    if odd.size:
        found.append((int(odd[0]), 3, "quote" if a[odd[0]] == 34 else "control"))
    if found:
        pos, _, what = min(found)
        at = offset + pos
        if what == "short":
            _short(text, at, sep)
        if what == "width":
            _other_width(text, at, fields, int(count[wide[0]]), sep)
        if what == "empty":
            text.fail(at, f"an empty node name{_SPLIT[sep]}, got {text.excerpt(at)}")
        if what == "quote":
            _quoted(text, at)
        text.fail(at, f"control character in a node name{_SPLIT[sep]}, got {text.excerpt(at)}")
    keep = inside.copy()  # the names, each followed by one NUL (none is in a name): split at once
    out = a.copy()
    stop = e[e < a.size]
    keep[stop] = True
    out[stop] = 0
    joined = out[keep].tobytes() + (b"\0" if e.size and e[-1] == a.size else b"")
    toks = joined.split(b"\0")[:-1]
    return toks, lambda k: offset + int(f[k])
