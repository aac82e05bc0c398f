"""A small reference reader of the documented edge-list grammar (README "Input and output formats",
distgrail/io/dialect.py), written line by line in plain Python, for the fuzz test of the fast
readers (tests/test_misreads.py). ASCII text only; ``auto`` format of a ``.txt`` file.

1. A ``\\r`` is allowed only right before ``\\n`` or as the file's last byte; lines end at ``\\n``
   (a ``\\r`` before it belongs to the line end).
2. A line's content ends at its first ``#`` or ``%``; an edge line has at least one field. After
   the header, that mark must start its line or follow a blank (a space, a tab; a comma in a
   comma-separated file (4.)), unless it follows the line's third field or a later one (split at
   blanks, and commas when comma-separated; names (5.) at their separator): ``0,5%20``, ``1 2#x``,
   ``alice bob%20`` are refused (the mark would cut the source or the target).
3. The first edge line is a header only when none of its tokens (split at blanks and commas, one
   pair of double quotes around each cut) is a number (sign, decimals, exponent) and it has two
   column names or more, and either its first two are column names (a source or target name:
   SOURCE_NAMES, TARGET_NAMES, or of words with a blank between them, some of SOURCE_WORDS or of
   TARGET_WORDS but not both: ``Source Node``; or ``head``/``tail``: AMBIGUOUS_NAMES), or it
   holds both ``head`` and ``tail``, or a source and a target name of the lists, or, comma-separated,
   its first name is empty and the next two are column names, or the next edge line's first two
   tokens are integers (a sign ``-`` allowed there). Its column names: split at commas (outside
   double quotes) when it has a comma, else at tabs when it has a tab, else at blanks; the blanks
   around each and one pair of double quotes cut; in lower case. A header whose first two names
   are not a source then a target name is an error when it holds ``head`` or ``tail`` (opposite
   meanings in graph theory and knowledge graphs), or when it names a column as the source past
   the first column, or as the target past the second (the lists; the first two also by their
   words: ``Target Node,Source Node``); so is a header of a graph of node names whose first two
   tokens are node names too (``u v`` then ``v w``), and a comma-separated header whose first
   column has no name (``,src,dst``: pandas' index; ``"","from","to"``: R's row names).
4. Commas separate fields when the first edge line (after a header: the one after it) has one.
5. After the header, the first edge line's fields: comma-separated (4.), split at its commas
   (outside double quotes), the blanks around each cut; else with a tab in it, split at tabs (a
   run of them one cut), the blanks around each cut, blank ones dropped; else at blanks (fewer
   than two fields so: its tokens). Whose first two each hold a token other than a number, the
   line's first token (split at blanks and commas) none either, makes the file a graph of node
   names when the header's first two names are a source then a target name of the lists (it
   declares names), else the file is an error. Every edge line is split so and must have as many
   fields as that one (comma-separated: commas + 1, outside double quotes); the first two name
   the edge's ends: none empty, none with a double quote or a control character (a tab inside a
   comma-separated name), none an integer (``-?[0-9]+``: names and ids mixed are ambiguous);
   vertices are numbered by first appearance. Split at blanks (the first edge line holds no tab and no
   comma), a later edge line holding a tab in its content is refused (one separator a file).
6. Otherwise every edge line has at least two fields, the first two non-negative integers
   (``[0-9]+``) below ``cap``; further fields are ignored; when every field of the first edge line
   after the header is such an integer, every later edge line whose fields are all such integers
   has as many fields as it (counted before the comment: blank-separated tokens; comma-separated
   (4.), commas + 1, outside double quotes, a field's blanks around it not part of it, an empty
   field no integer); n = largest id + 1; no edge line is an error.
7. Comma-separated (4.), no line after the header has an empty first or second field outside
   its comment (``,1``, ``2,,4``, ``2,``); later fields may be empty.
8. Not comma-separated, with a tab in the first edge line's content after the header: the file is
   tab-separated, each tab ends a field. Integer ids: no edge line after the header has a tab
   among the blanks before its first token (``\\t2\\t4``) or two tabs or more among the blanks
   between its first two tokens (``2\\t\\t4``: an empty field; read as blanks, the edge 2 -> 4);
   ``0 1\\t\\t5`` (blanks separate ids too) reads. Node names (5.): no edge line's first or
   second field, split at every tab, is blank.
9. Comma-separated (4.), integer ids (6.): the source and the target are the line's first two
   comma fields; no edge line after the header has, before its comment, a blank between two
   tokens in its first or second comma field (``12 13,3``: read as blanks the edge 12 -> 13, the
   target 3 lost) or no comma at all (``1 2``); blanks around a field (``0, 1``) are allowed. Not
   when the first edge line after the header has no comma (``src,dst`` then ``0 1``), nor when its
   first comma field holds three tokens or more (ids separated by
   blanks, a comma in a later column only: NetworkX's dicts, ``0 1 {'a': 1, 'b': 2}``).

The result: None (the file must be refused) or ``(n, edges, names)``: ``edges`` the (u, v) pairs
in file order, as names (str) when ``names`` else ints.
"""

from __future__ import annotations

import re

from distgrail.io.dialect import (  # the documented names (data, not logic)
    AMBIGUOUS_NAMES, SOURCE_NAMES, SOURCE_WORDS, TARGET_NAMES, TARGET_WORDS)

NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\Z")
SIGNED_INT = re.compile(r"-?\d+\Z")
ID = re.compile(r"\d+\Z")


def _content(line: str) -> str:
    return re.split(r"[#%]", line, maxsplit=1)[0]


def reference(data: bytes, cap: int):
    for i, c in enumerate(data):  # 1.
        if c == 13 and i != len(data) - 1 and data[i + 1] != 10:
            return None
    text = data.decode("ascii")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    sniffed = [(k, _content(ln).replace(",", " ").split()) for k, ln in enumerate(lines)]
    edge_lines = [(k, f) for k, f in sniffed if f][:2]  # 2.
    body, comma, fields, names, header_fields = 0, False, 0, False, []
    if edge_lines:
        k0, f0 = edge_lines[0]
        comma = "," in _content(lines[k0])
        low = [_unquote(f).lower() for f in _fields(lines[k0], _sep(lines[k0], comma))]
        roles = [_role(f) for f in low]
        lists = {_role(f, words=False) for f in low}
        edge_name = [bool(r) or f in AMBIGUOUS_NAMES for f, r in zip(low, roles)]
        named = len(low) >= 2 and (all(edge_name[:2]) or AMBIGUOUS_NAMES <= set(low) or {"source", "target"} <= lists
                                   or (comma and low[0] == "" and len(low) >= 3 and all(edge_name[1:3])))
        declared = len(low) >= 2 and low[0] in SOURCE_NAMES and low[1] in TARGET_NAMES
        ints1 = len(edge_lines) > 1 and all(SIGNED_INT.match(f) for f in edge_lines[1][1][:2])
        if not any(NUMBER.match(_unquote(f)) for f in f0) and len(low) >= 2 and (named or ints1):  # 3.
            if roles[:2] != ["source", "target"] and (AMBIGUOUS_NAMES & set(low) or any(
                    (r == "source" and i != 0) or (r == "target" and i != 1)
                    for i, r in enumerate(roles[:2] + [_role(f, words=False) for f in low[2:]]))):
                return None
            if comma and low[0] == "":  # a first column without a name (pandas' index, R's row names)
                return None
            body = k0 + 1
            header_fields = f0
            edge_lines = edge_lines[1:]
            if edge_lines and not comma:
                comma = "," in _content(lines[edge_lines[0][0]])  # 4.
        if edge_lines:
            k1 = edge_lines[0][0]
            sep = _sep(lines[k1], comma)
            f1 = _fields(lines[k1], sep)
            f1 = f1 if len(f1) >= 2 else edge_lines[0][1]
            names = len(f1) >= 2 and not NUMBER.match(edge_lines[0][1][0]) and not any(  # 5.
                all(NUMBER.match(t) for t in f.split()) for f in f1[:2])
            if names and not (body and declared):  # names no header declares
                return None
            fields = _width(lines[k1], True) if comma else len(f1)
    width = _width(lines[edge_lines[0][0]], comma) if edge_lines and _integers(lines[edge_lines[0][0]], comma) \
        else 0  # 6.: only a first edge line of integers sets a width
    by_comma = bool(edge_lines) and "," in _content(lines[edge_lines[0][0]]) and len(re.findall(r"[^ \t\r]+", _content(lines[edge_lines[0][0]]).split(",")[0])) < 3
    tabbed = bool(edge_lines) and not comma and "\t" in _content(lines[edge_lines[0][0]])  # 8.
    edges = []
    for ln in lines[body:]:
        if comma and _empty_field(ln):  # 7.
            return None
        c = _content(ln)
        toks = (c.replace(",", " ") if comma else c).split()
        if not toks:
            continue
        if tabbed and _empty_tab_field(c, names):  # 8.
            return None
        if comma and not names and by_comma and _blank_field(c):  # 9.
            return None
        if _glued(ln, comma, sep if names else None):  # 2.
            return None
        if names:  # 5.
            if sep == " " and "\t" in c:  # (one separator a file: 'c d<tab>e' may be tab-separated)
                return None
            toks = _fields(ln, sep)
            if (_width(ln, True) if comma else len(toks)) != fields or len(toks) < 2:
                return None
            if any(not t or SIGNED_INT.match(t) or '"' in t or min(map(ord, t)) < 32 for t in toks[:2]):
                return None  # (an empty name, a quote, a control character, an integer among the names)
        if len(toks) < 2:
            return None
        if not names:
            if not (ID.match(toks[0]) and ID.match(toks[1])) or max(int(toks[0]), int(toks[1])) >= cap:  # 6.
                return None
            if width and _width(ln, comma) != width and _integers(ln, comma):  # 6.: a line of integers
                return None
            toks = [int(toks[0]), int(toks[1])]
        edges.append((toks[0], toks[1]))
    if not edges:
        return None
    if names:
        nodes = {x for e in edges for x in e}
        if body and any(f in nodes for f in header_fields[:2]):  # 3.: a header whose names are nodes too
            return None
        return len(nodes), edges, True
    return max(max(e) for e in edges) + 1, edges, False


def _sep(line: str, comma: bool) -> str:
    """3., 5.: what ``line``'s fields are split at: ``,`` in a comma-separated file, else a tab
    when its content holds one, else blanks."""
    return "," if comma else "\t" if "\t" in _content(line) else " "


def _fields(line: str, sep: str) -> list:
    """3., 5.: the fields of ``line`` split at ``sep``: ``,`` at the commas before the first ``#``/``%``
    outside a double-quoted field (one that starts with ``"``, to the next lone ``"``), every field
    kept; a tab: at tabs, blank fields dropped; the blanks (spaces, tabs) around a field cut;
    blanks: its tokens."""
    if sep == " ":
        return _content(line).split()
    if sep == "\t":
        return [f.strip(" ") for f in _content(line).split("\t") if f.strip(" ")]
    out, field, quoted, i = [], "", False, 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == '"' and line[i + 1:i + 2] == '"':
                field, i = field + c, i + 1
            elif c == '"':
                quoted = False
        elif c in "#%":
            break
        elif c == ",":
            out, field, i = out + [field], "", i + 1
            continue
        elif c == '"' and field == "":
            quoted = True
        field += c
        i += 1
    return [f.strip(" \t") for f in out + [field]]


def _unquote(name: str) -> str:
    """3.: a column name without one pair of double quotes around it (``""`` inside is a quote)."""
    return name[1:-1].replace('""', '"').strip(" \t") if len(name) >= 2 and name[0] == name[-1] == '"' else name


def _role(name: str, words: bool = True) -> str:
    """3.: "source", "target" or "" for a column name (lower case)."""
    if name in SOURCE_NAMES or name in TARGET_NAMES:
        return "source" if name in SOURCE_NAMES else "target"
    w = set(name.split()) if words else set()
    if len(w) < 2 or bool(w & SOURCE_WORDS) == bool(w & TARGET_WORDS):
        return ""
    return "source" if w & SOURCE_WORDS else "target"


def _blank_field(content: str) -> bool:
    """9.: an edge line's ``content`` (before its comment) has no comma, or a blank between two
    tokens in its first or second comma field."""
    if "," not in content:
        return True
    return any(len(re.findall(r"[^ \t\r]+", f)) > 1 for f in content.split(",")[:2])


def _empty_field(line: str) -> bool:
    """7.: ``line`` (its ``\\r`` line end taken off) has an empty first or second field before any
    comment."""
    c = re.split(r"[#%]", line, maxsplit=1)[0]
    if "," not in c:
        return False
    first, rest = c.split(",", 1)
    return not first.strip(" \t") or rest == "" or rest.startswith((",", "\r"))


def _glued(line: str, comma: bool, sep) -> bool:
    """2.: the first ``#``/``%`` of ``line`` follows a byte of its first or second field: ids (``sep``
    None) split at blanks, and commas when ``comma``; names at ``sep`` ("," or a tab; " ": blanks)."""
    m = re.search(r"[#%]", line)
    if not m or m.start() == 0 or line[m.start() - 1] in " \t" + ("," if comma else ""):
        return False
    before = line[:m.start()]
    if sep in (",", "\t"):
        return before.count(sep) < 2
    return len((before.replace(",", " ") if comma else before).split()) <= 2


def _empty_tab_field(content: str, names: bool) -> bool:
    """8.: a tab-separated edge line's ``content`` (before its comment) has an empty first or second
    field: of names, split at every tab; of ids, a tab before the first token or two among the
    blanks after it."""
    if names:
        raw = [f.strip(" ") for f in content.split("\t")]
        return not raw[0] or (len(raw) > 1 and not raw[1])
    lead, _, gap = re.match(r"([ \t]*)([^ \t]+)([ \t]*)", content).groups()
    return "\t" in lead or gap.count("\t") >= 2


def _integers(line: str, comma: bool) -> bool:
    """6.: every field of ``line`` before the comment is a non-negative integer (comma-separated:
    the pieces between its commas, spaces and tabs around them taken off)."""
    c = _content(line)
    fields = [f.strip(" \t") for f in c.split(",")] if comma else c.split()
    return bool(fields) and all(ID.match(f) for f in fields)


def _width(line: str, comma: bool) -> int:
    """6.: the fields of an edge line: its tokens before the comment, or, comma-separated, its
    commas + 1 before the first ``#``/``%`` outside a double-quoted field, those inside one not
    counted (a field that starts with ``"`` ends at the next lone ``"``; ``""`` is a quote)."""
    if not comma:
        return len(_content(line).split())
    n, quoted, start, i = 1, False, True, 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == '"' and line[i + 1:i + 2] == '"':
                i += 1
            elif c == '"':
                quoted = False
        elif c in "#%":
            break
        elif c == ",":
            n, start, i = n + 1, True, i + 1
            continue
        elif c == '"' and start:
            quoted = True
        start = False
        i += 1
    return n
