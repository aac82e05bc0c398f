"""GRAIL ``.gra`` reader: ``graph_for_greach`` (optional), n, then ``i: succ ... #`` per vertex."""

from __future__ import annotations

import numpy as np

from ..dtypes import size_problem
from ..errors import GraphFormatError
from .graph import EdgeGraph, id_dtype
from .text import Chunk, GRA_TABLE, Sink, Text, TokenCounter, concat, fast_numbers, parse_n


def _gra_chunk_fast(data: bytes, n: int, dt):
    """Fast path for a chunk of ``.gra`` vertex lines: only byte-wide NumPy passes over the text
    and ``fromstring``. Returns (ids, degrees, successors, offset of the last vertex line) or None
    when anything is unusual; the general path then parses the chunk or reports the error."""
    bl = data.translate(GRA_TABLE)
    if bl.find(b"\x01") >= 0:
        return None
    a = np.frombuffer(data, dtype=np.uint8)
    tc = TokenCounter(np.frombuffer(bl, dtype=np.uint8))
    mk = np.flatnonzero((a == 58) | (a == 35) | (a == 10))
    typ = a[mk]
    nl, col, hs = mk[typ == 10], mk[typ == 58], mk[typ == 35]
    if col.size != hs.size:
        return None
    if col.size == 0:
        return None if tc.total else (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, dt), None)
    line = np.searchsorted(nl, col)
    if not (np.array_equal(line, np.searchsorted(nl, hs)) and (line[1:] > line[:-1]).all() and (hs > col).all()):
        return None
    ls = np.concatenate(([-1], nl))[line] + 1
    le = np.concatenate((nl, [a.size]))[line]
    t_ls, t_col, t_hs, t_le = (tc(x) for x in (ls, col, hs, le))
    # one token before ':', none after '#', no tokens outside vertex lines
    if (t_col - t_ls != 1).any() or (t_le != t_hs).any() or int((t_le - t_ls).sum()) != tc.total:
        return None
    vals = fast_numbers(bl, tc.total)
    if vals is None or int(vals.max()) >= n:
        return None
    keep = np.ones(vals.size, dtype=bool)
    keep[t_ls] = False
    return vals[t_ls], t_hs - t_col, vals[keep].astype(dt), int(ls[-1])


def _gra_chunk_general(text: Text, offset: int, data: bytes, n: int, dt):
    """Byte-exact checks of every line; raises GraphFormatError with file:line on bad input."""
    ch = Chunk(text, offset, data, blank_markers=b":#")
    ch.check_numeric()
    ncol = ch.count_per_line(ch.markers[58])
    nhash = ch.count_per_line(ch.markers[35])
    vertex_line = (ch.tokens_per_line > 0) | (ncol > 0) | (nhash > 0)
    bad = vertex_line & ((ncol != 1) | (nhash != 1))
    if bad.any():
        li = int(np.flatnonzero(bad)[0])
        pos = ch.abs(ch.line_start[li])
        if nhash[li] == 0:
            text.fail(pos, "vertex line does not end with '#' (truncated file?), got "
                           f"{text.excerpt(pos)}")
        if ncol[li] == 0:
            text.fail(pos, f"expected '<id>: <successors> #', got {text.excerpt(pos)}")
        text.fail(pos, f"expected one ':' and one '#' per vertex line, got {text.excerpt(pos)}")
    lines_v = np.flatnonzero(vertex_line)
    cpos = np.empty(ch.line_start.size, dtype=np.int64)
    hpos = np.empty(ch.line_start.size, dtype=np.int64)
    cpos[ch.line_of(ch.markers[58])] = ch.markers[58]
    hpos[ch.line_of(ch.markers[35])] = ch.markers[35]
    cpos, hpos = cpos[lines_v], hpos[lines_v]
    ls, le = ch.line_start[lines_v], ch.line_end[lines_v]
    before = ch.cum[cpos] - ch.cum[ls]
    after = ch.cum[le] - ch.cum[hpos]
    wrong = (before != 1) | (after != 0) | (hpos < cpos)
    if wrong.any():
        li = int(np.flatnonzero(wrong)[0])
        pos = ch.abs(ls[li])
        text.fail(pos, f"expected '<id>: <successors> #', got {text.excerpt(pos)}")
    vals = ch.numbers()
    first = ch.cum[ls]
    ids = vals[first]
    ch.check_range(vals, n, whose="the graph")
    is_succ = np.ones(vals.size, dtype=bool)
    is_succ[first] = False
    last = int(ls[-1]) if lines_v.size else None
    return ids, ch.tokens_per_line[lines_v] - 1, vals[is_succ].astype(dt), last


def read_gra(text: Text) -> EdgeGraph:
    lines = list(text.header_lines(2))
    if not lines:
        raise GraphFormatError("empty file: expected 'graph_for_greach' and the vertex count", path=text.path, line=1)
    body = 0
    if lines[0][1].strip() == "graph_for_greach":
        if len(lines) < 2:
            raise GraphFormatError("truncated file: vertex count line missing", path=text.path, line=2)
        nline, nval, body = lines[1]
    else:
        nline, nval, body = lines[0]
    n = parse_n(text, nline, nval, "vertex count")
    if size_problem(n):
        raise GraphFormatError(f"vertex count {n}: {size_problem(n)}", path=text.path, line=nline)
    dt = id_dtype(n)
    ids_parts, deg_parts = [], []
    succ = Sink((len(text) - body + 1) // 2, dt)
    last_line_pos = None
    for offset, data in text.chunks(body):
        got = _gra_chunk_fast(data, n, dt)
        if got is None:
            got = _gra_chunk_general(text, offset, data, n, dt)
        ids, deg, chunk_succ, last = got
        ids_parts.append(ids.astype(dt))
        deg_parts.append(deg.astype(np.int32))
        succ.append(chunk_succ)
        del got, chunk_succ
        text.check_room(succ.size)
        if last is not None:
            last_line_pos = offset + last
    ids = concat(ids_parts, dt)
    deg = concat(deg_parts, np.int32)
    if ids.size != n:
        where = last_line_pos if last_line_pos is not None else max(len(text) - 1, 0)
        kind = "truncated file? " if ids.size < n else ""
        text.fail(where, f"{kind}vertex count says {n} but the file lists {ids.size} vertex lines")
    if not (ids.size and ids[0] == 0 and (np.diff(ids) == 1).all()):  # lines not in id order
        seen = np.bincount(ids, minlength=n)
        if (seen != 1).any():
            v = int(np.flatnonzero(seen != 1)[0])
            raise GraphFormatError(f"vertex {v} is listed {int(seen[v])} times (each of 0..{n - 1} must appear once)",
                                   path=text.path)
    dst = succ.result()
    src = np.repeat(ids, deg)
    return EdgeGraph(n=n, src=src, dst=dst)
