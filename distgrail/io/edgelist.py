"""Whitespace and comma-separated edge lists of integer ids (SNAP style: extra columns, weights or
timestamps, ignored; when the first edge line is of integers only, every later line of integers only
has as many fields, :class:`Width`) and Matrix Market coordinate files (every entry line exactly
the fields its header's field says, :data:`MTX_FIELDS`, its values integers or numbers as that
field says, :data:`MTX_VALUES`, :class:`Fields`)."""

from __future__ import annotations

import numpy as np

from ..constants import VALUES_INTEGER, VALUES_NONE, VALUES_NUMBER
from ..errors import GraphFormatError
from .graph import EdgeGraph, id_dtype
from ..dtypes import max_vertices, size_problem
from .guards import EMPTY_TAB_FIELD, GLUED_MARK, blank_field, comma_ids, comma_width, empty_tab_field, first_edge_tab, \
    first_edge_width, glued_mark, width_message
from .text import Chunk, chunks_ahead, large_text, MAX_FAST_COMMENTS, digits_value, NUMERIC_TEXT, PAIRS_TABLE, Sink, Text, WS, \
    EXTRA_TABLE, fast_numbers, is_digits, shown, token_starts


class Width:
    """The field count of an integer edge list's lines of integers only: its first edge line's,
    when that line is of integers only (:func:`~distgrail.io.guards.line_fields`: tokens before a
    comment; in a comma-separated file commas + 1; :func:`~distgrail.io.guards.line_integer`). Set
    from the first edge line read, held across chunks: ``fields`` 0 until then, -1 when that line
    holds another field than an integer (a float weight, a word, NetworkX's ``{}``: nothing is
    checked). An adjacency list (``0 1 2 3`` then ``1 2``) read as edges would lose all but each
    line's first successor: it is refused at its first line of integers of another length; a line
    with any other field (``1 2 {'weight': 1.0}``, ``1,2,Directed,1,foo,1.0``, ``1,2,``) is not
    held to the count. ``tab``: whether the first edge line of a file that is not comma-separated
    holds a tab (None until it is met): each line is then held to the tab-separated file's
    fields too (:meth:`tabs`)."""

    def __init__(self, comma: bool = False):
        self.comma, self.fields, self.line = comma, 0, 0
        self.tab = False if comma else None
        self.ids = None  # (comma-separated: whether the first edge line's ids are its first two comma fields)

    def tabs(self, text: Text, offset: int, data: bytes, clean: bool = False) -> None:
        """A chunk of a file that is not comma-separated: once its first edge line holds a tab (a
        tab-separated file), a line whose first or second field is empty (``2\\t\\t4``, read as
        blanks the edge from 2 to 4) is refused (:func:`~distgrail.io.guards.empty_tab_field`);
        ``clean``: the fast path found one separator byte before every token, so none is."""
        if self.tab is None:
            self.tab = first_edge_tab(data)
        if self.tab and not clean:
            bad = empty_tab_field(data)
            if bad >= 0:
                text.fail(offset + bad, EMPTY_TAB_FIELD + text.excerpt(offset + bad))

    def first(self, text: Text, pos: int, fields: int) -> None:
        """The first edge line, at byte ``pos``: ``fields`` its field count, -1 when not of integers only."""
        self.fields = int(fields)
        if self.fields > 0:
            self.line = text.line_at(pos)[0]

    def fail(self, text: Text, pos: int):
        text.fail(pos, width_message(self.fields, self.line, self.comma) + text.excerpt(pos))

    def commas(self, text: Text, offset: int, size: int) -> None:
        """A comma-separated chunk: its edge lines' commas, counted in the file's bytes; a blank
        between two tokens of a line's first or second field, or a line without a comma, refused
        (:func:`~distgrail.io.guards.blank_field`: ``12 13,3`` is no edge from 12 to 13), unless the
        first edge line's ids are separated by blanks (``ids``, :func:`~distgrail.io.guards.comma_ids`)."""
        raw = text.raw_chunk(offset, size)
        if self.ids is None:
            self.ids = comma_ids(raw)
        bad, why = blank_field(raw) if self.ids else (-1, "")
        if bad >= 0:
            text.fail(offset + bad, why + text.excerpt(offset + bad))
        if self.fields < 0:
            return
        bad, fields, first = comma_width(raw, self.fields)
        if not self.fields and first >= 0:
            self.first(text, offset + first, fields)
        if bad >= 0:
            self.fail(text, offset + bad)

    def tokens(self, text: Text, offset: int, data: bytes, fields: int) -> bool:
        """Whether a chunk whose edge lines are all ``fields`` integers keeps the width."""
        if not self.fields:
            first, width = first_edge_width(data, False)
            self.first(text, offset + first, width)
        return self.fields < 0 or self.fields == fields

    def check(self, text: Text, ch: Chunk, short: np.ndarray) -> None:
        """A whitespace-separated chunk (its comments blanked): its first line of integers only
        whose token count differs, unless a line of one field comes first (reported as such)."""
        tpl = ch.tokens_per_line
        live = np.flatnonzero(tpl > 0)
        if live.size and not self.fields:
            k = int(live[0])
            integer = NUMERIC_TEXT[ch.arr[ch.line_start[k]:ch.line_end[k]]].all()
            self.first(text, ch.abs(ch.line_start[k]), tpl[k] if integer else -1)
        if self.fields <= 0:
            return
        other = live[(tpl[live] != self.fields) & (tpl[live] >= 2)]
        if other.size:  # (only lines of digits and blanks: the cost falls on lines of other counts)
            cum = np.concatenate(([0], np.cumsum(~NUMERIC_TEXT[ch.arr], dtype=np.int64)))
            other = other[cum[ch.line_end[other]] == cum[ch.line_start[other]]]
        if other.size and not short[:other[0]].any():
            self.fail(text, ch.abs(ch.line_start[other[0]]))


#: a Matrix Market header's field -> the fields of every entry line, and their names for messages
MTX_FIELDS = {"pattern": (2, "'row col'"), "integer": (3, "'row col value'"), "real": (3, "'row col value'"),
              "double": (3, "'row col value'"), "complex": (4, "'row col real imag'")}

#: what a Matrix Market entry's value fields (those after ``row col``) must be, as the lines kernel
#: takes it (``values`` of dg_parse_lines): none (``pattern``), integers (an optional sign and
#: ASCII digits), numbers (C and Fortran decimal floats: an optional sign, digits with an optional
#: ``.`` among or after them or ``.`` then digits, then an optional exponent, ``e``, ``E``, ``d`` or
#: ``D``, an optional sign and digits; or ``inf``, ``infinity``, ``nan`` in any case after an
#: optional sign, as SciPy's ``mmwrite`` writes them: ``Infinity``, ``-Infinity``, ``NaN``); the
#: codes VALUES_* are distgrail.constants', shared with kernels/parse.cu.
#: a Matrix Market header's field -> its entries' values (VALUES_*)
MTX_VALUES = {"pattern": VALUES_NONE, "integer": VALUES_INTEGER, "real": VALUES_NUMBER, "double": VALUES_NUMBER,
              "complex": VALUES_NUMBER}

# a value's bytes by class (0: a blank, a line end or a comment mark, which end it), read by a small
# automaton a window of bytes at a time
_V_CLASSES = {b" \t\r\n%": 0, b"0123456789": 1, b"+-": 2, b".": 3, b"eEdD": 4, b"iI": 5, b"nN": 6, b"fF": 7,
              b"aA": 8, b"tT": 9, b"yY": 10}
_V_CLASS = np.full(256, 11, np.uint8)  # (11: any other byte)
for _chars, _c in _V_CLASSES.items():
    _V_CLASS[list(_chars)] = _c
_V_OK, _V_BAD = 20, 21  # (a value read to its end and allowed; refused)


def _automaton(values: int) -> np.ndarray:
    """The automaton of the values of kind ``values``: state * 12 + class -> next state. States: 0
    start, 1 sign, 2 digits, 3 digits '.', 4 '.', 5 digits after the '.', 6 exponent mark, 7 its
    sign, 8 its digits, 9..16 ``infinity`` (11: ``inf``), 17..19 ``nan``, 20 allowed, 21 refused;
    at its end (class 0) a value is allowed when in an accepting state, else refused. Each state
    is given as state * 12, the start of its row."""
    t = np.full((_V_BAD + 1, 12), _V_BAD, np.uint8)
    moves = [(0, 2, 1), (0, 1, 2), (1, 1, 2), (2, 1, 2)]
    accept = [2]
    if values == VALUES_NUMBER:
        moves += [(2, 3, 3), (3, 1, 5), (0, 3, 4), (1, 3, 4), (4, 1, 5), (5, 1, 5), (2, 4, 6), (3, 4, 6), (5, 4, 6),
                  (6, 2, 7), (6, 1, 8), (7, 1, 8), (8, 1, 8),
                  (0, 5, 9), (1, 5, 9), (9, 6, 10), (10, 7, 11), (11, 5, 12), (12, 6, 13), (13, 5, 14), (14, 9, 15),
                  (15, 10, 16), (0, 6, 17), (1, 6, 17), (17, 8, 18), (18, 6, 19)]
        accept = [2, 3, 5, 8, 11, 16, 19]
    for a, c, b in moves:
        t[a, c] = b
    t[accept, 0] = _V_OK
    t[_V_OK, :] = _V_OK
    return (t.astype(np.int16) * 12).ravel()  # (the next state's row, as an index)


_AUTOMATA = {VALUES_INTEGER: _automaton(VALUES_INTEGER), VALUES_NUMBER: _automaton(VALUES_NUMBER)}
_V_WINDOW = 8  # (bytes of every value read at a time: most values' and their end)


def bad_values(arr: np.ndarray, starts: np.ndarray, values: int) -> np.ndarray:
    """Whether the token at each of ``starts`` in ``arr`` (up to a blank, a line end, a ``%`` or
    the end of ``arr``) is not a value of kind ``values`` (:data:`VALUES_INTEGER` or
    :data:`VALUES_NUMBER`, as :data:`MTX_VALUES` says)."""
    table = _AUTOMATA[values]
    state = np.zeros(len(starts), np.int16)
    padded = np.concatenate((np.asarray(arr, np.uint8), np.full(_V_WINDOW, 32, np.uint8)))
    todo, at = np.arange(len(starts)), np.asarray(starts, np.int64)
    while todo.size:
        cls = _V_CLASS.take(padded[at[None, :] + np.arange(_V_WINDOW)[:, None]])  # (a row per byte of the window)
        st = state[todo]
        for j in range(_V_WINDOW):
            st = table.take(st + cls[j])
        state[todo] = st
        more = st < _V_OK * 12  # (a value longer than the window: on with its next bytes)
        todo, at = todo[more], at[more] + _V_WINDOW
    return state != _V_OK * 12


class Fields:
    """Every entry line (a line with a field before its comment) holds exactly ``count`` fields,
    whatever they are: a Matrix Market file's, as its header's field says (:data:`MTX_FIELDS`:
    ``1 2 7`` in a ``pattern`` file, ``1 2`` or ``1 2 3 4`` in an ``integer`` one are refused: the
    file is not what its header says). Fields are the tokens (runs of bytes other than blanks,
    tabs and ``\\r``) before the comment, as the GPU parser counts them (kernels/parse.cu,
    ``dg_parse_lines``: F_WIDTH on any Matrix Market line of another count). ``what`` starts the
    message: ``g.mtx:7: Matrix Market 'pattern' entries are 'row col', got 3 fields: '1 2 7'``.
    ``values`` (:data:`MTX_VALUES`): what the fields after the first two must be (``1 2 abc`` in a
    ``real`` file, ``1 2 1.5`` in an ``integer`` one are refused: ``g.mtx:7: Matrix Market 'real'
    entry value is not a number: 'abc'``; the lines kernel flags F_VALUE on them, ``values``)."""

    def __init__(self, count: int, what: str, values: int = VALUES_NONE, field: str = ""):
        self.count, self.what, self.values, self.field = int(count), what, int(values), field

    @classmethod
    def mtx(cls, field: str) -> "Fields":
        count, shape = MTX_FIELDS[field]
        return cls(count, f"Matrix Market {field!r} entries are {shape}", MTX_VALUES[field], field)

    def fail(self, text: Text, pos: int, got: int):
        text.fail(pos, f"{self.what}, got {got} field{'' if got == 1 else 's'}: {text.excerpt(pos)}")

    def value_starts(self, ch: Chunk, lines: np.ndarray) -> np.ndarray:
        """The first byte of every value field (those after the first two) of ``lines`` (each of
        ``count`` fields): a row per line."""
        first = ch.cum[ch.line_start[lines]]  # (the index of each line's first token)
        return np.flatnonzero(ch.starts)[first[:, None] + np.arange(2, self.count)]

    def bad_value(self, ch: Chunk, lines: np.ndarray, starts: np.ndarray) -> tuple[int, int, int] | None:
        """The first value field of ``lines`` (``starts``: :meth:`value_starts`) that is not a
        value of the kind ``values``: (its line in the chunk, its first byte, its end), or None."""
        if self.values == VALUES_NONE or not starts.size:
            return None
        bad = np.flatnonzero(bad_values(ch.arr, starts.ravel(), self.values))
        if not bad.size:
            return None
        k = int(bad[0])
        start = int(starts.ravel()[k])
        end = start + int(np.argmax(np.append(WS[ch.arr[start:]], True)))
        return int(lines[k // starts.shape[1]]), start, end

    def fail_value(self, text: Text, ch: Chunk, start: int, end: int):
        kind = "an integer" if self.values == VALUES_INTEGER else "a number"
        text.fail(ch.abs(start), f"Matrix Market {self.field!r} entry value is not {kind}: "
                                 f"{shown(ch.arr[start:end].tobytes())}")


def _pairs_chunk_fast(data: bytes, comments: bytes, base: int, n: int | None, cap: int, note: dict | None = None,
                      compiled: bool = False, extra: bool = False, fields: Fields | None = None):
    """Fast path for a chunk of 'u v' lines; returns the 2k values or None (general path);
    ``compiled``: the numbers read by one compiled pass (:func:`~distgrail.io.text.fast_numbers`).
    ``note["clean"]`` (when given): whether every token follows one separator byte, or a line end,
    or starts the chunk (``0\\t1``: no run of blanks where a field could be empty, :meth:`Width.tabs`).
    ``extra``: lines may hold F > 2 columns, every line as many as the chunk's first (weights,
    times, words after the two ids: ``0 1 0.5``), the values those of their first two columns;
    ``note["fields"]``: F (2 without ``extra``). ``fields`` (a Matrix Market file's
    :class:`Fields`): F must be its count, and every value token (a line's after its first two)
    a value of its kind, as the general path's automaton reads it (:func:`bad_values`), else
    None; ``note["values"]``: the kind checked (VALUES_NONE without ``fields``). Anything else
    goes to the general path, whose ``keep_columns`` costs several times the read of two columns,
    and which names the first bad line."""
    bl = data.translate(EXTRA_TABLE if extra else PAIRS_TABLE)
    if comments and bl.find(b"\x01") >= 0:
        hits = []
        for c in comments:
            p = data.find(bytes([c]))
            while p >= 0 and len(hits) <= MAX_FAST_COMMENTS:
                e = data.find(b"\n", p)
                e = len(data) if e < 0 else e
                hits.append((p, e))
                p = data.find(bytes([c]), e)
        if len(hits) > MAX_FAST_COMMENTS:
            return None
        bl = bytearray(bl)
        for p, e in hits:
            bl[p:e] = b" " * (e - p)
    if bl.find(b"\x01") >= 0:
        return None
    b = np.frombuffer(bl, dtype=np.uint8)
    ts = token_starts(b)
    F = 2
    if extra and ts.size:  # (the tokens of the chunk's first line with any)
        end = bl.find(b"\n", int(ts[0]))
        F = int(np.searchsorted(ts, len(bl) if end < 0 else end))
        if F < 2:
            return None
    if fields is not None and ts.size and F != fields.count:
        return None
    if ts.size % F:
        return None
    clean = not ts.size or ts[0] == 0
    if ts.size >= 2:
        # between the tokens of a line no newline, between lines at least one
        nxt = ts[1:]
        single = b[nxt - 2] > 47  # one separator byte between the tokens
        has_nl = b[nxt - 1] == 10
        clean = clean and bool(single.all())
        if not single.all():
            nl = np.flatnonzero(b == 10)
            odd = np.flatnonzero(~single)
            has_nl[odd] = np.searchsorted(nl, nxt[odd]) > np.searchsorted(nl, ts[odd])
        if F == 2:
            if has_nl[0::2].any() or not has_nl[1::2].all():
                return None
        else:
            ends = has_nl[F - 1::F]  # (the gaps after each line's last token)
            if not ends.all() or np.count_nonzero(has_nl) != ends.size:
                return None
    if extra:
        word = np.flatnonzero(b == 97)  # (bytes of tokens that are no digits: none in a line's first two)
        if word.size and ((np.searchsorted(ts, word, side="right") - 1) % F < 2).any():
            return None
    if fields is not None and fields.values != VALUES_NONE and ts.size:
        # (each value token read by the automaton from its first byte in the file's bytes: it ends
        # at a blank, a line end or '%', as in the general path's chunk; any other comment mark
        # after a value refuses it here, and the general path judges the line)
        if bad_values(np.frombuffer(data, np.uint8), ts.reshape(-1, F)[:, 2:].ravel(), fields.values).any():
            return None
    if F > 2:
        ids = np.empty(2 * (ts.size // F), np.int64)
        ids[0::2], ids[1::2] = ts[0::F], ts[1::F]
        if not compiled:  # (fromstring reads every token: the later columns blanked to the next line's first)
            delta = np.zeros(b.size + 1, np.int8)
            delta[ts[2::F]] = 1
            delta[ts[F::F]] -= 1
            delta[b.size] -= 1
            b = np.where(np.cumsum(delta[:-1], dtype=np.int8) > 0, np.uint8(32), b)
            bl = b.tobytes()
        ts = ids
    vals = fast_numbers(bl, ts.size, ts) if compiled else fast_numbers(bytes(bl), ts.size)
    if vals is None or vals.size == 0:
        return vals
    lo, hi = int(vals.min()), int(vals.max())
    if lo < base or (hi >= base + n if n is not None else hi >= cap):
        return None
    if note is not None:
        note["clean"], note["fields"] = clean, F
        note["values"] = fields.values if fields is not None else VALUES_NONE
    return vals


def _blank_to_line_end(ch: Chunk, lines: np.ndarray, first: np.ndarray) -> None:
    """Blank each of ``lines`` of ``ch`` from its byte ``first`` to its end."""
    delta = np.zeros(ch.arr.size + 1, np.int8)
    delta[first] = 1
    delta[ch.line_end[lines]] -= 1
    ch.arr = np.where(np.cumsum(delta[:-1], dtype=np.int8) > 0, np.uint8(32), ch.arr)
    ch.refresh()


def _pairs_chunk_general(text: Text, offset: int, data: bytes, comments: bytes, base: int, n: int | None,
                         what: str, cap: int, exact: bool, width: Width | None = None, fields: Fields | None = None):
    ch = Chunk(text, offset, data)
    if comments:
        ch.blank_comments(comments)
    tpl = ch.tokens_per_line
    if fields is not None:  # (the first bad line of any kind is reported: the lines before it are read first)
        other = np.flatnonzero((tpl > 0) & (tpl != fields.count))
        k = int(other[0]) if other.size else tpl.size
        lines = np.flatnonzero(tpl[:k] > 0)  # (the lines before it: each of fields.count fields)
        starts = fields.value_starts(ch, lines)
        value = fields.bad_value(ch, lines, starts)  # (a bad value on a line before it)
        if value is not None or other.size:
            cut = int(ch.line_start[value[0] if value is not None else k])
            if cut:
                _pairs_chunk_general(text, offset, data[:cut], comments, base, n, what, cap, exact, width, fields)
            if value is not None:
                fields.fail_value(text, ch, value[1], value[2])
            fields.fail(text, ch.abs(cut), int(tpl[k]))
        if starts.size:  # (every line's values run from its first one to its end: keep_columns(2) at less cost)
            _blank_to_line_end(ch, lines, starts[:, 0])
    short = (tpl > 0) & (tpl < 2)
    if width is not None and not width.comma:  # (the first line of either kind is reported)
        width.check(text, ch, short)
    if short.any():
        li = int(np.flatnonzero(short)[0])
        pos = ch.abs(ch.line_start[li])
        text.fail(pos, f"expected 'u v' ({what}), got {text.excerpt(pos)}")
    long = tpl > 2
    if exact and long.any():
        pos = ch.abs(ch.line_start[int(np.flatnonzero(long)[0])])
        text.fail(pos, f"expected two columns 'u v' ({what}), got {text.excerpt(pos)}")
    ch.keep_columns(2)
    ch.check_numeric()
    vals = ch.numbers()
    if n is not None:
        ch.check_range(vals, n, base=base)
    elif base and vals.size and vals.min() < base:
        k = int(np.flatnonzero(vals < base)[0])
        text.fail(ch.token_pos(k), f"vertex id must be >= {base}, got {text.token_at(ch.token_pos(k))!r}")
    elif vals.size and vals.max() >= cap:
        k = int(np.flatnonzero(vals >= cap)[0])
        why = size_problem(int(vals[k]) + 1) if cap < 2**40 else None
        text.fail(ch.token_pos(k), f"vertex id too large ({why or f'>= {cap}'}), got "
                                   f"{shown(text.token_at(ch.token_pos(k)).encode())}")
    return vals


def read_columns(text: Text, start: int, columns: int, comments: bytes, base: int, n: int | None,
                what: str = "edge", exact: bool = False, cap: int | None = None, width: Width | None = None,
                fields: Fields | None = None):
    """Read lines of >= 2 integer columns (extra columns ignored; ``exact``: refused; ``width``:
    lines of integers only must have as many as the first, when it is one, :class:`Width`;
    ``fields``: every line with a field must have exactly so many, and values of its kind after
    the first two, :class:`Fields`); return
    (u, v, lines) minus base, as int32 when every id fits, else int64. Without ``n``, ids must be
    below ``cap`` (default: the most vertices this machine can index). A comment (a byte of
    ``comments``) starts at a line's start or after a blank: one glued to the first two columns
    (``0 5%20``) is refused (:func:`~distgrail.io.guards.glued_mark`)."""
    cap = max_vertices() if cap is None else cap
    room = (len(text) - start + 1) // 4  # a pair takes at least 'u v\n'
    us, vs = Sink(room, np.int32), Sink(room, np.int32)
    compiled = large_text(text, start)
    # (extra columns ignored, or a Matrix Market file's values checked: the fast path reads them too)
    extra = not exact and (fields is None or fields.count > 2)

    def fast(data):  # (no error raised here: the checks below raise them in file order)
        note: dict = {}
        glued = glued_mark(data, marks=comments) if comments else -1
        return glued, note, (_pairs_chunk_fast(data, comments, base, n, cap, note, compiled, extra, fields)
                             if glued < 0 else None)

    # a large file's chunks go through the fast path on threads, ahead of the checks; not a CSV's
    # (its commas are checked on the chunk last read) nor a stream's (its older chunks are gone)
    ahead = compiled and text.translate is None and text.whole
    def checked(offset, data, glued, note, vals):
        """The chunk's values once every check passed; each check raises at its first bad line."""
        if width is not None and width.comma:
            width.commas(text, offset, len(data))
        if glued >= 0:  # ('0 5%20' is no edge from 0 to 5)
            text.fail(offset + glued, GLUED_MARK + text.excerpt(offset + glued))
        if width is not None and not width.comma:  # (a chunk of one separator byte between tokens: no empty field)
            width.tabs(text, offset, data, note.get("clean", False))
        if vals is not None and vals.size and width is not None and not width.comma and \
                not width.tokens(text, offset, data, note.get("fields", 2)):
            vals = None  # (the fast path read lines of two fields: the general one says which line differs)
        if vals is not None and vals.size and fields is not None and \
                (note.get("fields", 2) != fields.count or note.get("values", VALUES_NONE) != fields.values):
            vals = None  # (likewise: lines of another count than the header's, or their values unchecked)
        if vals is None:
            vals = _pairs_chunk_general(text, offset, data, comments, base, n, what, cap, exact, width, fields)
        return vals

    def in_file_order(offset, data, *got):
        """:func:`checked`, but of two bad lines in one chunk the first is named whichever check
        finds it (the checks run one after the other over the whole chunk): on an error the lines
        before its line are checked again, by the general path, and an error there wins."""
        try:
            return checked(offset, data, *got)
        except GraphFormatError as e:
            first = text.line_at(offset)[0]
            if e.line is None or e.path != text.path or e.line <= first:
                raise
            cut = 0
            for _ in range(e.line - first):  # (the start of the error's line in the chunk)
                cut = data.find(b"\n", cut) + 1
                if cut <= 0:
                    raise
            note: dict = {}
            head = data[:cut]
            in_file_order(offset, head, glued_mark(head, marks=comments) if comments else -1, note, None)
            raise

    for offset, data, done in chunks_ahead(text.chunks(start), fast, ahead):
        vals = in_file_order(offset, data, *done())
        if base:
            vals -= base
        if vals.size and int(vals.max()) >= 2**31 - 2:  # ids beyond int32: keep int64
            us.widen()
            vs.widen()
        us.append(vals[0::2])
        vs.append(vals[1::2])
        del vals
        text.check_room(us.size)
    return us.result(), vs.result(), us.size


def read_edgelist(text: Text, num_vertices: int | None, start: int = 0, comma: bool | None = None) -> EdgeGraph:
    """Integer edge list from byte ``start`` (after a CSV header line); when its first edge line
    is of integers only, every later edge line of integers only has as many fields
    (:class:`Width`; ``comma``: counted by commas, default: when the text reads commas as blanks)."""
    if num_vertices is not None and size_problem(num_vertices):
        raise GraphFormatError(f"--num-vertices {num_vertices}: {size_problem(num_vertices)}", path=text.path)
    comma = text.translate is not None if comma is None else comma
    u, v, _ = read_columns(text, start, 2, b"#%", 0, num_vertices, width=Width(comma))
    if num_vertices is None and u.size == 0:
        raise GraphFormatError("empty edge list: no 'u v' line found (for a graph of isolated vertices "
                               "give --num-vertices)", path=text.path)
    n = num_vertices if num_vertices is not None else int(max(u.max(initial=-1), v.max(initial=-1))) + 1
    dt = id_dtype(n)
    return EdgeGraph(n=n, src=u.astype(dt, copy=False), dst=v.astype(dt, copy=False))


def read_mtx(text: Text) -> EdgeGraph:
    """A Matrix Market coordinate file: the header, comments, the size line ``rows cols entries``
    (square), then exactly ``entries`` entry lines (1-based ``row col``), each with exactly the
    fields the header's field says (:data:`MTX_FIELDS`: ``pattern`` 2, ``integer``, ``real`` and
    ``double`` 3, ``complex`` 4), its values integers or numbers as the field says
    (:data:`MTX_VALUES`; checked, not kept); a ``symmetric``, ``skew-symmetric`` or ``hermitian``
    file's entries off the diagonal are mirrored."""
    header = None
    pos = 0
    size_line = None
    for line, content, end in text.header_lines(1 << 20):
        if header is None:
            header = (line, content)
            parts = content.lower().split()
            if len(parts) < 5 or parts[0] != "%%matrixmarket":
                raise GraphFormatError(f"expected '%%MatrixMarket matrix coordinate <field> <symmetry>', got {content!r}",
                                       path=text.path, line=line)
            if parts[1] != "matrix" or parts[2] != "coordinate":
                raise GraphFormatError(f"only 'matrix coordinate' Matrix Market files hold graphs, got {content!r}",
                                       path=text.path, line=line)
            field, symmetry = parts[3], parts[4]
            if field not in MTX_FIELDS:
                raise GraphFormatError(f"unknown Matrix Market field {field!r}", path=text.path, line=line)
            if symmetry not in ("general", "symmetric", "skew-symmetric", "hermitian"):
                raise GraphFormatError(f"unknown Matrix Market symmetry {symmetry!r}", path=text.path, line=line)
            pos = end
            continue
        pos = end
        if not content or content.startswith("%"):
            continue
        size_line = (line, content)
        break
    if size_line is None:
        raise GraphFormatError("truncated file: size line 'rows cols entries' missing", path=text.path,
                               line=(header[0] + 1) if header else 1)
    sl, sc = size_line
    parts = sc.split()
    if len(parts) != 3 or not all(is_digits(p) for p in parts):
        raise GraphFormatError(f"expected size line 'rows cols entries', got {sc!r}", path=text.path, line=sl)
    rows, cols, nnz = (digits_value(p) for p in parts)
    if rows != cols:
        raise GraphFormatError(f"adjacency matrix must be square, got {rows} x {cols}", path=text.path, line=sl)
    if size_problem(rows):
        raise GraphFormatError(f"{size_problem(rows)}, got {sc!r}", path=text.path, line=sl)
    u, v, count = read_columns(text, pos, 2, b"%", 1, rows, what=f"entry {MTX_FIELDS[field][1]}",
                               fields=Fields.mtx(field))
    if count != nnz:
        where = max(len(text) - 1, 0)
        kind = "truncated file? " if count < nnz else ""
        text.fail(where, f"{kind}size line says {nnz} entries but the file has {count}")
    if symmetry != "general":
        off = u != v
        u, v = np.concatenate((u, v[off])), np.concatenate((v, u[off]))
    dt = id_dtype(rows)
    return EdgeGraph(n=rows, src=u.astype(dt, copy=False), dst=v.astype(dt, copy=False))
