"""What travels between ``distgrail serve`` and its clients (HTTP bodies; no server library here).

``POST /query`` takes the pairs as

* a NumPy ``.npy`` array of shape (k, 2) (``Content-Type: application/x-npy``; a pairs ``.npy``
  file as ``distgrail query`` reads it can be sent as it is): vertex ids, or the graph's node
  labels (int64, or a unicode string array) where the index has them; with ``?layout=columns``
  an array of shape (2, k), sources then targets (what the client sends: each column goes out
  as it lies in memory and is read as it came, without interleaving); or
* a JSON object ``{"sources": [...], "targets": [...]}`` (``Content-Type: application/json``).

and answers with a ``.npy`` bool array of shape (k,) and the batch's :class:`QueryStats` as JSON
in the ``X-Distgrail-Stats`` header, or with JSON ``{"answers": [...], "stats": {...}}`` when the
request was JSON or asks for it (``Accept: application/json``). Errors are JSON
``{"error": MESSAGE}`` with a 4xx/5xx status; a bad batch gets the message
:meth:`distgrail.Index.query` gives for it.
"""

from __future__ import annotations

import io
import json
import math
import tokenize

import numpy as np

from ..errors import QueryError, id_range
from ..nodelabels import as_column

__all__ = ["NPY", "JSON", "STATS_HEADER", "TIMING_HEADER", "server_timing", "timing_of", "BODY_NAME", "decode_pairs",
           "TooManyValues",
           "encode_columns", "encode_answers",
           "decode_answers", "stats_from_dict", "npy_array", "refuse_wrapping_ids"]

NPY = "application/x-npy"
JSON = "application/json"
STATS_HEADER = "X-Distgrail-Stats"
#: the W3C Server-Timing header: where a batch's time went on the server (milliseconds), ``read``
#: (its body arriving), ``decode``, ``answer``, ``encode`` and ``wait`` (for a thread, and the rest)
TIMING_HEADER = "Server-Timing"
#: how messages about a request's body name it (where ``distgrail query`` names the pairs file)
BODY_NAME = "request body"
_MAGIC = b"\x93NUMPY"
#: a .npy header longer than this is refused as unreadable (NumPy's own limit is 10,000 bytes):
#: a length field that lies does not make the whole body go through a file object
_HEADER_MOST = 1 << 16


def npy_array(body, what: str = BODY_NAME) -> np.ndarray:
    """The array in a ``.npy`` body (bytes, bytearray or any buffer of bytes), without copying its
    data (read-only) where the header is of version 1 or 2; QueryError naming ``what`` when it is
    not a whole .npy array. Only the header is read through a file object: wrapping the whole
    body in one (``io.BytesIO``) would copy it."""
    mv = _byte_view(body)
    f = io.BytesIO(bytes(mv[:_header_end(mv)]))
    try:
        version = np.lib.format.read_magic(f)
        if version not in ((1, 0), (2, 0)):  # 3.0: utf-8 field names; np.load copes (with a copy)
            return np.load(io.BytesIO(bytes(mv)), allow_pickle=False)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
        if dtype.hasobject:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
        if any(d < 0 for d in shape):
            raise ValueError(f"the header's shape {shape} has a negative length")
        count = math.prod(shape)  # Python ints: a shape past 64 bits is only a wrong size
        have = mv.nbytes - f.tell()
        if have != count * dtype.itemsize:
            raise ValueError(f"the header promises {count * dtype.itemsize:,} bytes of data, the body holds {have:,}")
        arr = np.frombuffer(mv, dtype=dtype, count=count, offset=f.tell())
        return arr.reshape(shape[::-1]).T if fortran else arr.reshape(shape)
    except (ValueError, OSError, EOFError, SyntaxError, OverflowError, MemoryError, tokenize.TokenError) as e:
        # np.load (version 3.0): OverflowError for a shape past 64 bits, MemoryError for one past memory;
        # TokenError: a header length field shorter than the header (its text cut mid-token)
        raise QueryError(f"{what}: not a readable .npy array ({_clip(e)})") from None


def _header_end(mv: memoryview) -> int:
    """Where a .npy header ends by its length field (versions 1-3), else the whole body (whose
    reading then fails with numpy's message)."""
    if mv.nbytes < 12 or bytes(mv[:6]) != _MAGIC:
        return min(mv.nbytes, 8 + 4 + _HEADER_MOST)
    width = 2 if mv[6] == 1 else 4  # version 1: a 2-byte length; 2 and 3: 4 bytes
    return min(mv.nbytes, 8 + width + min(_HEADER_MOST, int.from_bytes(bytes(mv[8:8 + width]), "little")))


class TooManyValues(QueryError):
    """A JSON body holding more values than ``most`` pairs can (the server answers 413)."""


def decode_pairs(body, content_type: str, labels: str | None, columns: bool = False, most: int | None = None):
    """``(sources, targets, as_json)`` of a query request; QueryError with the reason otherwise.

    ``body``: bytes or any buffer of bytes (the server's body buffer). ``labels``: the index's
    node-label kind ("int"/"str") or None (vertex ids). ``columns``: a .npy body is (2, k), not
    (k, 2). The values are not checked here: :meth:`distgrail.Index.query` checks them, with its
    own messages. ``most``: the pairs a request may hold; a JSON body (of ids or integer labels)
    with more values than that many pairs can take is refused (:class:`TooManyValues`) before
    it is parsed: Python's objects for a body of ``[],[],...`` or ``0,0,...`` take 8 to 30 times
    its bytes, where the pairs' arrays take 16 bytes a pair."""
    ctype = (content_type or "").split(";")[0].strip().lower()
    head = bytes(body[:64]).lstrip()
    if ctype == JSON or (ctype != NPY and head[:1] == b"{"):
        return (*_json_pairs(body, None if labels == "str" else most), True)
    if ctype == NPY or bytes(body[:6]) == _MAGIC:
        arr = npy_array(body)
        if arr.ndim != 2 or arr.shape[1 - columns] != 2:
            kind = "integer" if labels != "str" else "node-label"
            want = "(2, k) (?layout=columns)" if columns else "(k, 2)"
            raise QueryError(f"{BODY_NAME}: expected an {kind} array of shape {want}, got {arr.dtype} {arr.shape}")
        return (arr[0], arr[1], False) if columns else (arr[:, 0], arr[:, 1], False)
    raise QueryError(f"{BODY_NAME}: neither a .npy array of shape (k, 2) nor a JSON object "
                     f'{{"sources": [...], "targets": [...]}} (Content-Type {ctype or "none"!r}, '
                     f"starts with {bytes(body[:16])!r})")


def _json_pairs(body, most: int | None = None):
    try:
        text = _json_text(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise QueryError(f"{BODY_NAME}: not valid JSON ({e})") from None
    if most is not None:  # every value past a container's first follows a comma; a container opens
        # with a bracket: their count bounds the objects json.loads would make (string labels may
        # hold commas and brackets: not counted for them)
        values = text.count(",") + text.count("[") + text.count("{")
        if values > 2 * most + 64:
            raise TooManyValues(f"{BODY_NAME}: a JSON body of {values:,}+ values is over this server's limit of "
                                f"{most:,} pairs a request (distgrail serve --max-pairs): send smaller batches")
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise QueryError(f"{BODY_NAME}: not valid JSON ({e})") from None
    except RecursionError:  # [[[[... past Python's recursion limit
        raise QueryError(f"{BODY_NAME}: JSON nested too deep (expected a JSON object "
                         '{"sources": [...], "targets": [...]} of flat lists)') from None
    if not isinstance(doc, dict) or "sources" not in doc or "targets" not in doc:
        raise QueryError(f'{BODY_NAME}: expected a JSON object {{"sources": [...], "targets": [...]}}, got '
                         f"{_short(doc)}")
    out = []
    for what in ("sources", "targets"):
        v = doc[what]
        if not isinstance(v, list):
            raise QueryError(f"{BODY_NAME}: {what} must be a JSON list, got {_short(v)}")
        try:
            out.append(as_column(v) if v else np.zeros(0, dtype=np.int64))  # ([0, true]: not ids 0, 1)
        except (ValueError, OverflowError, RecursionError) as e:  # ragged or deep nesting, ints past 64 bits
            raise QueryError(f"{BODY_NAME}: {what} is not a flat list of ids or labels ({_clip(e)})") from None
    return out[0], out[1]


def _json_text(body) -> str:
    """A JSON body's text, its encoding detected as ``json.loads`` detects it for bytes (UTF-8, a
    BOM, UTF-16, UTF-32)."""
    mv = _byte_view(body)
    return str(mv, json.detect_encoding(bytes(mv[:4])), "strict")


def _byte_view(body) -> memoryview:
    """Any buffer of bytes as one flat memoryview of them (copied only when it is strided: an
    API caller's)."""
    mv = memoryview(body)
    return mv.cast("B") if mv.c_contiguous else memoryview(bytes(mv))


def _short(value) -> str:
    try:
        text = json.dumps(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deep"
    return text if len(text) <= 60 else text[:57] + "..."


def _clip(error: Exception) -> str:
    """An exception's message on one line, of 200 characters at most (an error answer is one line)."""
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."


def encode_columns(sources, targets, narrow: bool = False, scratch=None) -> tuple[list, int]:
    """The ``?layout=columns`` body of a batch, a .npy (2, k) array, as ``(pieces, bytes)``: the
    header, then the sources and the targets as they lie in memory (no copy when they are
    contiguous of one dtype). int64 ids (uint64 when both columns are unsigned of 64 bits) or
    labels, unicode labels; other dtypes go as they are (the server answers with
    :meth:`Index.query`'s message about them). ``narrow`` (vertex ids,
    an index of fewer than 2^31 vertices): ids that all fit int32 go as int32, half the bytes
    (int32 ones as they are; wider ones checked and narrowed in one pass by the host threads,
    :func:`~distgrail.arrays.narrow_parallel`); a batch with any id outside 0..2^31-1 goes as int64, so the server names
    the bad id as it was given. ``scratch(count)``: an int32 array of at least ``count`` to
    narrow into (a client thread's, kept between its batches: fresh pages cost the kernel's
    faults on every batch), valid until the body is sent."""
    s, t = np.asarray(sources), np.asarray(targets)
    if s.shape != t.shape or s.ndim != 1:
        raise QueryError(f"sources and targets must be 1-D of equal length, got shapes {s.shape} and {t.shape}")
    if s.dtype.kind == "O" or t.dtype.kind == "O":  # e.g. Python strings in an object array
        s, t = s.astype(str), t.astype(str)
    if s.dtype.kind in "iub" and t.dtype.kind in "iub" and "b" not in s.dtype.kind + t.dtype.kind:
        fits = None
        if narrow and (s.dtype != np.int32 or t.dtype != np.int32):
            both = _narrowed(s, t, scratch)
            if both is not None:
                return _npy_columns(*both)
            fits = False
        dtype = np.dtype(np.int32 if narrow and (fits is None and _fit_int32(s, t)) else np.int64)
        if dtype == np.int64 and s.dtype.kind == t.dtype.kind == "u" and max(s.itemsize, t.itemsize) == 8:
            dtype = np.dtype(np.uint64)  # (ids past 2^63 - 1 would wrap in int64: the server names them as given)
    else:
        dtype = np.result_type(s.dtype, t.dtype)
    return _npy_columns(*(_contiguous(a, dtype.newbyteorder("=")) for a in (s, t)))


def _narrowed(s: np.ndarray, t: np.ndarray, scratch=None):
    """Integer ids ``s``, ``t`` as two int32 columns (of ``scratch(2k)`` where given), checked and
    copied in one pass by the host threads; None when any lies outside 0..2^31-1."""
    from ..arrays import narrow_parallel

    k = s.size
    out = scratch(2 * k) if scratch is not None else np.empty(2 * k, np.int32)
    cols = out[:k], out[k:2 * k]
    return cols if narrow_parallel(list(zip(cols, (s, t))), 2**31) else None


def _npy_columns(s: np.ndarray, t: np.ndarray) -> tuple[list, int]:
    """The pieces of a (2, k) .npy body whose rows are the contiguous columns ``s``, ``t``."""
    buf = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(s)
    header["shape"] = (2, s.size)
    np.lib.format.write_array_header_1_0(buf, header)
    head = buf.getvalue()
    return [head, memoryview(s.view(np.uint8)), memoryview(t.view(np.uint8))], len(head) + s.nbytes + t.nbytes


def refuse_wrapping_ids(sources, targets, n: int) -> None:
    """Ids that no one integer type of a .npy body holds as given (a uint64 id past 2^63 - 1 beside
    a signed column): the QueryError :meth:`Index.query` would give, raised here (the int64 body
    would name the id wrapped)."""
    s, t = np.asarray(sources), np.asarray(targets)
    kinds = {(a.dtype.kind, a.dtype.itemsize) for a in (s, t)}
    if ("u", 8) not in kinds or all(k == "u" for k, _ in kinds):
        return
    if not any(a.dtype == np.uint64 and a.size and int(a.max()) > 2**63 - 1 for a in (s, t)):
        return
    for arr, what in ((s, "sources"), (t, "targets")):
        bad = np.flatnonzero((arr < 0) | (arr >= n)) if arr.dtype.kind == "i" else np.flatnonzero(arr >= n)
        if bad.size:
            i = int(bad[0])
            raise QueryError(f"{what}[{i}] {id_range(n, whose='the index')}, got {int(arr[i])!r}")


def _fit_int32(s: np.ndarray, t: np.ndarray) -> bool:
    """Whether every id of both is in 0..2^31-1 (a negative one would be a valid int32, but the
    server is to name it as given)."""
    from ..arrays import as_unsigned, max_parallel

    return all(a.size == 0 or int(max_parallel(as_unsigned(a, 2**31))) < 2**31 for a in (s, t))


def _contiguous(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` as a contiguous array of ``dtype``: itself when it is one, else a copy made by the
    host threads (a 10 M-pair column narrowed in pieces, not by one thread)."""
    if a.dtype == dtype and a.flags.c_contiguous:
        return a
    from ..arrays import copy_parallel

    out = np.empty(a.shape, dtype)
    copy_parallel(out, a)
    return out


def encode_answers(answers: np.ndarray) -> bytes:
    """The .npy bytes of a bool answer array: its header, then its bytes (one copy)."""
    arr = np.ascontiguousarray(answers, dtype=bool)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, np.lib.format.header_data_from_array_1_0(arr))
    return b"".join((buf.getvalue(), memoryview(arr.view(np.uint8))))


def server_timing(seconds: dict) -> str:
    """A ``Server-Timing`` header's value: each step's milliseconds (``read;dur=12.345, ...``)."""
    return ", ".join(f"{name};dur={1e3 * s:.3f}" for name, s in seconds.items())


def timing_of(value: str | None) -> dict:
    """Seconds by step from a ``Server-Timing`` header's value (what :func:`server_timing` wrote;
    entries without a ``dur`` are left out)."""
    out = {}
    for entry in (value or "").split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for p in params:
            key, _, val = p.partition("=")
            if name and key.strip().lower() == "dur":
                try:
                    out[name] = float(val) / 1e3
                except ValueError:
                    pass
    return out


def decode_answers(body: bytes) -> np.ndarray:
    arr = npy_array(body, "the server's answer")
    if arr.dtype != np.bool_ or arr.ndim != 1:
        raise QueryError(f"the server's answer: expected a bool array (k,), got {arr.dtype} {arr.shape}")
    return arr


def stats_from_dict(d: dict):
    """The :class:`~distgrail.query.stats.QueryStats` that :meth:`QueryStats.as_dict` described."""
    from ..query.stats import QueryStats

    st = QueryStats(backend=d.get("backend", "cpu"), ranks=int(d.get("ranks", 1)))
    st.queries, st.reachable = int(d.get("queries", 0)), int(d.get("reachable", 0))
    st.steps.update({k: int(v) for k, v in d.get("steps", {}).items() if k in st.steps})
    st.search_rounds, st.grid_searched = int(d.get("search_rounds", 0)), int(d.get("grid_searched", 0))
    st.seconds = float(d.get("seconds", 0.0))
    st.prepare_seconds = float(d.get("prepare_seconds", 0.0))
    return st
