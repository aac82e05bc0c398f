"""Review 52 of ``distgrail serve`` (distgrail/server/) against hostile clients, on the CPU backend
and loopback only: a JSON body of many small values (``[],[],...``) took 8 to 30 times its bytes
in Python objects before ``--max-pairs`` was checked (now refused unparsed, 413); a malformed
request whose reason quotes 64 KiB of body made a 64 KiB log line (now clipped). Each test
checks that the server answers good requests afterwards."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from distgrail.errors import QueryError
from distgrail.server.wire import TooManyValues, decode_pairs
from test_server import TOKEN, MAX_PAIRS, Server, kegg  # noqa: F401 - kegg: the fixture
from test_server_holes import _health, _no_server_error, _raw, _serves


@pytest.fixture(scope="module")
def srv(kegg, tmp_path_factory):
    tok = tmp_path_factory.mktemp("token") / "token"
    tok.write_text(TOKEN + "\n")
    s = Server(kegg[0], "--token-file", str(tok), "--max-pairs", str(MAX_PAIRS), "--timeout", "30")
    s.port = int(s.url.rsplit(":", 1)[1])
    s.pid = s.proc.pid
    yield s
    assert s.stop() == 0, s.lines


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


def _json_post(body: bytes) -> bytes:
    return (b"POST /query HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def test_decode_pairs_counts_json_values_against_the_pairs_limit_before_parsing():
    ok = b'{"sources": [' + b",".join(b"1" for _ in range(10)) + b'], "targets": [' + b",".join(b"2" for _ in range(10)) + b"]}"
    s, t, as_json = decode_pairs(ok, "application/json", None, most=10)  # exactly the limit: answered
    assert as_json and s.size == t.size == 10
    spam = b'{"sources": [' + b"[]," * 100 + b'[]], "targets": []}'
    with pytest.raises(TooManyValues, match=r"JSON body of [\d,]+\+ values is over this server's limit of 10 pairs"):
        decode_pairs(spam, "application/json", None, most=10)
    with pytest.raises(TooManyValues):
        decode_pairs(spam, "application/json", "int", most=10)
    # string labels may hold commas and brackets: not counted (Index.query names the bad batch)
    s, t, _ = decode_pairs(b'{"sources": ["a,[{,b"], "targets": ["c,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,d"]}',
                           "application/json", "str", most=1)
    assert s.tolist() == ["a,[{,b"]
    assert issubclass(TooManyValues, QueryError)


def test_a_json_body_of_many_tiny_values_is_413_before_it_takes_memory(srv, kegg):
    """``{"sources": [[],[],...]}`` within the body limit (what --max-pairs pairs of 20-digit ids
    take): 4.7 M empty lists, ~350 MB of Python objects for a 14 MB body, before --max-pairs was
    checked (a 400 then, or a 413 for ``0,0,...``). Now a 413 from counting, the body unparsed."""
    before = len(srv.lines)
    limit = _health(srv)["max_body_bytes"]
    n = (limit - 64) // 3
    body = b'{"sources": [' + b"[]," * n + b'[]], "targets": []}'
    assert len(body) <= limit
    peak = _peak_rss_kib(srv.pid)
    status, _, reply = _raw(srv.port, _json_post(body))
    grew_mib = (_peak_rss_kib(srv.pid) - peak) / 1024
    assert grew_mib < 100, f"the server's peak RSS grew {grew_mib:.0f} MiB for a {len(body) >> 20} MiB body"
    assert status == 413 and b"JSON body of" in reply and b"--max-pairs" in reply, reply[:300]
    # 0,0,... likewise (it was a 413 only after 2 x 8 bytes a value had been made)
    body = b'{"sources": [' + b"0," * n + b'0], "targets": [0]}'
    status, _, reply = _raw(srv.port, _json_post(body[:limit - 20] + b'0], "targets": [0]}'))
    assert status == 413 and b"JSON body of" in reply, reply[:300]
    # a JSON batch of MAX_PAIRS pairs, the most a request may hold, is still answered
    _, idx, s, t = kegg
    k = min(MAX_PAIRS, s.size)
    ok = ('{"sources": [%s], "targets": [%s]}' % (",".join(map(str, s[:k])), ",".join(map(str, t[:k])))).encode()
    status, _, reply = _raw(srv.port, _json_post(ok))
    assert status == 200, reply[:300]
    _serves(srv, kegg)
    _no_server_error(srv, before)


def test_a_malformed_request_quoting_its_body_is_one_short_log_line(srv, kegg):
    """An HTTP/1.0 POST without a Content-Length, then 60 KB of body: aiohttp refuses it (data
    after ``Connection: close``) with a reason that quotes the data; the log line held all of it
    (64 KiB a request, from any client). Now clipped."""
    before = len(srv.lines)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
        s.sendall(b"POST /query HTTP/1.0\r\nContent-Type: application/x-npy\r\n\r\n" + b"A" * 60_000)
        s.shutdown(socket.SHUT_WR)
        got = b""
        try:
            while chunk := s.recv(1 << 16):
                got += chunk
        except ConnectionResetError:
            pass
    assert got == b"" or got.startswith(b"HTTP/1.0 400"), got[:200]  # (a reset may come before the 400)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("malformed HTTP request" in x for x in srv.lines[before:]):
        time.sleep(0.05)
    said = [x for x in srv.lines[before:] if "malformed HTTP request" in x]
    assert len(said) == 1 and len(said[0]) < 500, [x[:300] + f"... ({len(x):,} chars)" for x in said]
    _serves(srv, kegg)
    _no_server_error(srv, before)
