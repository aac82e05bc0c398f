"""The bytes between ``distgrail serve`` and its clients (``distgrail/server/wire.py``), without a
server: a .npy body is read in place (its header alone goes through a file object; the pairs are
views of the body, whatever buffer holds it), a body cut in or after its header is a QueryError
naming the request body, and the answers' bytes are what ``np.save`` writes."""

from __future__ import annotations

import io

import numpy as np
import pytest

from distgrail.errors import QueryError
from distgrail.server.wire import decode_answers, decode_pairs, encode_answers, encode_columns, npy_array


def _npy(arr, version=None) -> bytes:
    buf = io.BytesIO()
    if version is None:
        np.save(buf, arr)
    else:
        np.lib.format.write_array(buf, arr, version=version)
    return buf.getvalue()


def _columns_body(s, t) -> bytes:
    pieces, size = encode_columns(s, t)
    body = b"".join(bytes(p) for p in pieces)
    assert len(body) == size
    return body


@pytest.mark.parametrize("holder", ["bytes", "bytearray", "memoryview", "ndarray"])
def test_pairs_are_views_of_the_body_in_any_buffer(holder, monkeypatch):
    import distgrail.server.wire as wire

    seen = []  # what went through a file object: the header alone, not the body's 16 kB of pairs

    class Recording(io.BytesIO):
        def __init__(self, initial=b""):
            seen.append(len(initial))
            super().__init__(initial)

    monkeypatch.setattr(wire.io, "BytesIO", Recording)
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, 1 << 40, 1000), rng.integers(0, 1 << 40, 1000)
    raw = _columns_body(s, t)
    buf = np.frombuffer(raw, np.uint8).copy()  # one writable buffer: views of it share its memory
    body = {"bytes": raw, "bytearray": bytearray(raw), "memoryview": memoryview(buf), "ndarray": buf}[holder]
    gs, gt, as_json = decode_pairs(body, "application/x-npy", None, columns=True)
    assert not as_json and np.array_equal(gs, s) and np.array_equal(gt, t)
    assert seen and max(seen) <= 256, seen
    if holder in ("memoryview", "ndarray"):
        assert np.shares_memory(gs, buf) and np.shares_memory(gt, buf)  # not copied


def test_rows_layout_and_versions_2_and_3_read_the_same():
    pairs = np.arange(40, dtype=np.int64).reshape(20, 2)
    for version in (None, (2, 0), (3, 0)):
        s, t, _ = decode_pairs(memoryview(_npy(pairs, version)), "application/x-npy", None)
        assert np.array_equal(s, pairs[:, 0]) and np.array_equal(t, pairs[:, 1]), version


def test_a_body_cut_in_or_after_its_header_is_refused_naming_the_body():
    whole = _npy(np.arange(20, dtype=np.int64).reshape(10, 2))
    header = whole.index(b"\n") + 1
    for cut in (7, 9, 11, header - 5, header, len(whole) - 1):
        with pytest.raises(QueryError, match="request body: not a readable .npy array"):
            npy_array(memoryview(whole[:cut]))
    # a header length field past the end of the body
    lying = whole[:8] + (60000).to_bytes(2, "little") + whole[10:]
    with pytest.raises(QueryError, match="request body: not a readable .npy array"):
        npy_array(lying)
    with pytest.raises(QueryError, match="request body: not a readable .npy array"):
        npy_array(whole + b"\0" * 8)  # more data than the header promises


def test_answers_are_the_bytes_np_save_writes_and_read_back():
    for ans in (np.zeros(0, bool), np.array([True, False, True]), np.random.default_rng(1).random(100_001) < 0.3):
        body = encode_answers(ans)
        assert body == _npy(ans)
        assert np.array_equal(decode_answers(body), ans)


def _sent(pieces) -> tuple[np.ndarray, np.ndarray]:
    arr = npy_array(b"".join(bytes(p) for p in pieces))
    return arr[0], arr[1]


def test_ids_that_fit_go_as_int32_with_narrow(monkeypatch):
    """``encode_columns(narrow=True)``: ids all in 0..2^31-1 go as int32 (int32 columns as they
    are, not copied; wider ones narrowed by the host threads, in several pieces here); a batch
    with a negative id or one past 2^31 - 1 goes as int64, so the server names it as given;
    without ``narrow``, and for labels, nothing changes."""
    from distgrail import arrays

    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 64)  # the narrowing copy in several pieces
    rng = np.random.default_rng(7)
    s, t = rng.integers(0, 2**31, 5000), rng.integers(0, 2**31, 5000)
    for dtype in (np.int64, np.uint64, np.uint32, np.int16):
        a, b = (s % 30000).astype(dtype), (t % 30000).astype(dtype)
        gs, gt = _sent(encode_columns(a, b, narrow=True)[0])
        assert gs.dtype == gt.dtype == np.int32 and np.array_equal(gs, a) and np.array_equal(gt, b), dtype
    gs, gt = _sent(encode_columns(s, t, narrow=True)[0])
    assert gs.dtype == np.int32 and np.array_equal(gs, s) and np.array_equal(gt, t)
    s32, t32 = s.astype(np.int32), t.astype(np.int32)
    pieces, size = encode_columns(s32, t32, narrow=True)
    assert size == len(pieces[0]) + 2 * 4 * 5000 and np.shares_memory(np.frombuffer(pieces[1], np.int32), s32)
    for bad in (-1, 2**31, 2**40):
        s2 = s.copy()
        s2[4321] = bad
        gs, gt = _sent(encode_columns(s2, t, narrow=True)[0])
        assert gs.dtype == np.int64 and gs[4321] == bad and np.array_equal(gt, t), bad
    neg32 = s32.copy()
    neg32[9] = -5
    assert _sent(encode_columns(neg32, t32, narrow=True)[0])[0][9] == -5  # wider, not wrapped
    assert _sent(encode_columns(s32, t32)[0])[0].dtype == np.int64  # no narrow: int64 as before
    labels = np.array(["a", "bb"])
    assert _sent(encode_columns(labels, labels[::-1], narrow=True)[0])[0].dtype.kind == "U"


def test_as_unsigned_catches_both_ends_at_any_bound():
    """``arrays.as_unsigned``: a maximum below ``below`` exactly when every id is in range, for
    int32 views (bounds up to 2^31) and widened int32 (bounds past it, where the most negative
    int32 viewed as uint32 would pass)."""
    from distgrail.arrays import as_unsigned

    ids = np.array([0, 5, 2**31 - 1], np.int32)
    assert np.shares_memory(as_unsigned(ids, 2**31), ids) and int(as_unsigned(ids, 2**31).max()) < 2**31
    low = np.array([0, -2**31], np.int32)
    assert int(as_unsigned(low, 2**31).max()) >= 2**31
    assert int(as_unsigned(low, 3 * 2**30).max()) >= 3 * 2**30  # widened: -2^31 is not 2^31
    for dtype in (np.int8, np.int16, np.int64):
        assert int(as_unsigned(np.array([3, -1], dtype), 100).max()) >= 100, dtype
    assert int(as_unsigned(np.array([3, 99], np.uint16), 100).max()) < 100


def test_a_header_length_field_that_cuts_the_header_short_is_refused(tmp_path):
    """A length field shorter than the header's text (NumPy's tokenizer then fails mid-token) is
    the body's QueryError, and a pairs file's GraphFormatError naming it, not a traceback; one
    claiming far more than the body holds is refused without the body going through a file."""
    from distgrail.errors import GraphFormatError
    from distgrail.io.pairs import mapped_as_rows, read_query_pairs

    whole = _npy(np.arange(20, dtype=np.int64).reshape(10, 2))
    for short in (20, 40, 60):
        lying = whole[:8] + short.to_bytes(2, "little") + whole[10:]
        with pytest.raises(QueryError, match="request body: not a readable .npy array"):
            npy_array(memoryview(lying))
        (tmp_path / "p.npy").write_bytes(lying)
        with pytest.raises(GraphFormatError, match=r"p.npy"):  # (unreadable, or its bytes not ids)
            read_query_pairs(tmp_path / "p.npy", n=50)
        assert mapped_as_rows(tmp_path / "p.npy") in (True, False)  # an answer, not a traceback
    v2 = _npy(np.arange(20, dtype=np.int64).reshape(10, 2), (2, 0))
    huge = v2[:8] + (2**32 - 1).to_bytes(4, "little") + v2[12:] + bytes(1 << 20)
    with pytest.raises(QueryError, match="request body: not a readable .npy array"):
        npy_array(huge)


def test_json_from_a_buffer_and_a_strided_buffer_read_as_bytes():
    s, t, as_json = decode_pairs(memoryview(b'{"sources": [1, 2], "targets": [3, 4]}'), "application/json", None)
    assert as_json and s.tolist() == [1, 2] and t.tolist() == [3, 4]
    with pytest.raises(QueryError, match="request body: not valid JSON"):
        decode_pairs(memoryview(b'{"sources": [1, \xff]}'), "application/json", None)
    body = np.frombuffer(_npy(np.arange(8, dtype=np.int64).reshape(4, 2)) * 2, np.uint8)
    strided = memoryview(np.repeat(body[: body.size // 2], 2)[::2])  # a non-contiguous buffer of those bytes
    s, t, _ = decode_pairs(strided, "application/x-npy", None)
    assert s.tolist() == [0, 2, 4, 6] and t.tolist() == [1, 3, 5, 7]


def test_unsigned_ids_past_2_63_go_as_they_are():
    """uint64 ids the int64 cast would wrap go as uint64, so the server names them as given."""
    big = np.array([5, 2**63 + 5], np.uint64)
    for narrow in (False, True):
        gs, gt = _sent(encode_columns(big, big[::-1].copy(), narrow=narrow)[0])
        assert gs.dtype == np.uint64 and int(gs[1]) == 2**63 + 5, narrow
    gs, _ = _sent(encode_columns(np.array([5, 6], np.uint64), np.array([7, 8], np.uint64))[0])
    assert gs.dtype == np.uint64 and gs.tolist() == [5, 6]


def _mutations():
    from hypothesis import strategies as st

    bodies = [_npy(np.arange(12, dtype=np.int64).reshape(6, 2)), _npy(np.arange(12, dtype=np.int32).reshape(2, 6)),
              _npy(np.arange(6, dtype=np.int64).reshape(3, 2), (2, 0)), _npy(np.array([["a", "b"]])),
              _npy(np.arange(6, dtype=np.int64).reshape(3, 2), (3, 0))]
    edit = st.tuples(st.integers(0, 200), st.integers(0, 255))
    return st.tuples(st.sampled_from(bodies), st.lists(edit, max_size=6), st.integers(0, 260), st.booleans())


def test_mutated_npy_bodies_are_pairs_or_a_query_error():
    """Any byte edits and cuts of a valid .npy body: decode_pairs gives two equal-length 1-D
    arrays or raises QueryError naming the request body; nothing else escapes (an escaping error
    would be a 500 from the server)."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_mutations())
    def run(case):
        body, edits, cut, columns = case
        b = bytearray(body)
        for at, value in edits:
            if at < len(b):
                b[at] = value
        b = b[:cut] if cut < len(b) else b
        try:
            s, t, as_json = decode_pairs(memoryview(b), "application/x-npy", None, columns)
        except QueryError as e:
            assert str(e).startswith("request body"), str(e)
            return
        assert not as_json and s.ndim == t.ndim == 1 and s.shape == t.shape

    run()


def test_json_in_any_encoding_json_allows_and_header_reads_stay_small(monkeypatch):
    """JSON bodies with a UTF-8 BOM, in UTF-16 or UTF-32 read as bytes do (json's detection), from
    any buffer; a .npy header's read goes through at most 64 KiB whatever its length field says."""
    import distgrail.server.wire as wire

    text = '{"sources": [1, 2], "targets": [3, 4]}'
    for raw in (text.encode(), b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"), text.encode("utf-32-le")):
        for body in (raw, memoryview(raw), memoryview(np.repeat(np.frombuffer(raw, np.uint8), 2)[::2])):
            s, t, as_json = decode_pairs(body, "application/json", None)
            assert as_json and s.tolist() == [1, 2] and t.tolist() == [3, 4], raw[:6]
    seen = []

    class Recording(io.BytesIO):
        def __init__(self, initial=b""):
            seen.append(len(initial))
            super().__init__(initial)

    monkeypatch.setattr(wire.io, "BytesIO", Recording)
    v2 = _npy(np.arange(20, dtype=np.int64).reshape(10, 2), (2, 0))
    lying = v2[:8] + (2**32 - 1).to_bytes(4, "little") + v2[12:] + bytes(1 << 20)
    with pytest.raises(QueryError):
        npy_array(lying)
    assert seen and max(seen) <= (1 << 16) + 12, seen


def test_ids_no_one_type_holds_are_refused_by_the_client_as_the_server_would():
    from distgrail.server.wire import refuse_wrapping_ids

    refuse_wrapping_ids(np.array([2**63 + 1], np.uint64), np.array([2**63 + 2], np.uint64), 10)  # uint64 both: sent
    refuse_wrapping_ids(np.array([5], np.uint64), np.array([3]), 10)  # fits int64: sent
    with pytest.raises(QueryError, match=r"sources\[1\] out of range 0..9, got 9223372036854775813"):
        refuse_wrapping_ids(np.array([1, 2**63 + 5], np.uint64), np.array([3, 4]), 10)
    with pytest.raises(QueryError, match=r"sources\[0\] out of range 0..9, got -1"):
        refuse_wrapping_ids(np.array([-1, 3]), np.array([2**63 + 5, 1], np.uint64), 10)  # sources named first


@pytest.mark.parametrize("where", [0, 63, 64, 65, 4999])
def test_narrow_parallel_checks_every_block_it_copies(monkeypatch, where):
    """``arrays.narrow_parallel``: ids copied into int32 in blocks over the host threads (blocks of
    64 and pieces of 512 bytes here), True with every id copied when all lie in 0..below-1; False
    when one does not, wherever it is (the first, a block's last or first, the last)."""
    from distgrail import arrays

    monkeypatch.setattr(arrays, "NARROW_BLOCK", 64)
    monkeypatch.setattr(arrays, "HOST_PIECE_BYTES", 512)
    rng = np.random.default_rng(where)
    src = rng.integers(0, 2**31, 5000)
    dst = np.zeros(5000, np.int32)
    assert arrays.narrow_parallel([(dst, src), (dst[:0], src[:0])], 2**31) and np.array_equal(dst, src)
    for bad, dtype in ((-1, np.int64), (2**31, np.int64), (2**63 + 5, np.uint64), (-3, np.int16)):
        s2 = src.astype(dtype) if dtype != np.int16 else (src % 30000).astype(np.int16)
        s2[where] = bad
        assert not arrays.narrow_parallel([(np.zeros(5000, np.int32), s2)], 2**31), (bad, dtype)
    small = (src % 1000).astype(np.uint16)
    out = np.zeros(5000, np.int32)
    assert arrays.narrow_parallel([(out, small)], 1000) and np.array_equal(out, small)
    assert small.max() == 999 and not arrays.narrow_parallel([(out, small)], 999)


def test_narrowed_ids_go_from_the_callers_scratch(monkeypatch):
    """``encode_columns(scratch=)``: int64 ids that fit are narrowed into the scratch array the
    caller keeps (the body's two columns are views of it, the same memory batch after batch);
    a batch with a bad id goes as int64, whatever the scratch then holds."""
    asked = []
    held = np.full(20_000, -7, np.int32)

    def scratch(count):
        asked.append(count)
        return held[:count]

    rng = np.random.default_rng(3)
    s, t = rng.integers(0, 2**31, 6000), rng.integers(0, 2**31, 6000)
    for _ in range(2):
        pieces, size = encode_columns(s, t, narrow=True, scratch=scratch)
        gs, gt = _sent(pieces)
        assert gs.dtype == np.int32 and np.array_equal(gs, s) and np.array_equal(gt, t)
        assert all(np.shares_memory(np.frombuffer(p, np.int32), held) for p in pieces[1:])
        assert size == len(pieces[0]) + 8 * 6000
    assert asked == [12_000, 12_000]
    s[5999] = 2**31
    gs, gt = _sent(encode_columns(s, t, narrow=True, scratch=scratch)[0])
    assert gs.dtype == np.int64 and gs[5999] == 2**31 and np.array_equal(gt, t)


def test_server_timing_header_round_trip():
    """The ``Server-Timing`` value the server writes is read back as seconds by step; entries
    without a readable ``dur`` (or with other parameters first) are read as the header allows."""
    from distgrail.server.wire import server_timing, timing_of

    steps = {"read": 0.0123456, "decode": 0.0, "answer": 1.5, "encode": 2e-6, "wait": 0.25}
    value = server_timing(steps)
    assert value.startswith("read;dur=12.346, decode;dur=0.000, answer;dur=1500.000")
    back = timing_of(value)
    assert list(back) == list(steps) and all(abs(back[k] - steps[k]) < 1e-6 for k in steps)
    assert timing_of('cache;desc="Cache Read";dur=23.2, db, app;dur=x, total;DUR=1') == {"cache": 0.0232, "total": 0.001}
    assert timing_of(None) == {} and timing_of("") == {}
