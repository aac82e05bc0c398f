"""``distgrail serve`` against hostile or broken clients (issue 40, items 6 and 7), on the CPU
backend and loopback only, with raw sockets where a well-behaved client cannot misbehave: a
non-ASCII bearer token (401), JSON nested 100,000 deep (400), a .npy header of an impossible
shape (400), a client gone mid-body (one log line, not a 500), 40 slow uploads (they no longer
take the slots of the others; cut with a 408 after ``--body-timeout``) and the bound on a client
address's connections (429). Each test checks that the server answers good requests afterwards."""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import socket
import time

import numpy as np
import pytest

from test_server import TOKEN, Server, _error, _npy, _post, kegg  # noqa: F401 - kegg: the fixture

#: the default of distgrail serve --max-client-connections
CONNECTIONS_PER_ADDRESS = 16


@pytest.fixture(scope="module")
def srv(kegg, tmp_path_factory):
    tok = tmp_path_factory.mktemp("token") / "token"
    tok.write_text(TOKEN + "\n")
    s = Server(kegg[0], "--token-file", str(tok), "--timeout", "30")
    s.port = int(s.url.rsplit(":", 1)[1])
    yield s
    assert s.stop() == 0, s.lines


def _head(length: int, auth: bytes = b"Bearer " + TOKEN.encode(), ctype: bytes = b"application/x-npy") -> bytes:
    return (b"POST /query HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: " + ctype +
            b"\r\nContent-Length: " + str(length).encode() + b"\r\nAuthorization: " + auth + b"\r\n\r\n")


def _raw(port: int, data: bytes, source: str = "127.0.0.1") -> tuple[int, dict, bytes]:
    """Send ``data`` as it is, read the reply to its end: ``(status, headers, body)``."""
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as s:
        s.sendall(data)
        got = b""
        while chunk := s.recv(1 << 16):
            got += chunk
    head, _, body = got.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return int(lines[0].split()[1]), headers, body


def _health(srv) -> dict:
    status, _, body = _raw(srv.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                                     b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\n")
    assert status == 200, body
    return json.loads(body)


def _serves(srv, kegg, token=TOKEN, source: str = "127.0.0.1"):
    """A good batch gets its right answers (from ``source``)."""
    _, idx, s, t = kegg
    body = _npy(np.stack([s[:500], t[:500]], axis=1))
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30, source_address=(source, 0))
    try:
        conn.request("POST", "/query", body, {"Content-Type": "application/x-npy",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
        r = conn.getresponse()
        status, reply = r.status, r.read()
    finally:
        conn.close()
    assert status == 200, reply
    assert np.array_equal(np.load(io.BytesIO(reply)), idx.query(s[:500], t[:500], backend="cpu")[0])


def _one_line(message: str) -> str:
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


def _no_server_error(srv, lines_before: int = 0):
    assert "500" not in _health(srv)["errors"]
    assert not any("Traceback" in x for x in srv.lines[lines_before:]), "".join(srv.lines[lines_before:])


# -- item 6: bodies that gave a 500 and a traceback --------------------------------------------
def test_a_non_ascii_bearer_token_is_401(srv, kegg):
    before = len(srv.lines)
    body = _npy(np.zeros((2, 2), np.int64))
    for auth in ("Bearer s3cr\u00e9t".encode("latin-1"), "Bearer s3cr\u00e9t".encode("utf-8"), b"Bearer \xff\xfe",
                 "Bearer \u00e9".encode("utf-8") + TOKEN.encode()):
        status, headers, reply = _raw(srv.port, _head(len(body), auth) + body)
        assert status == 401, (auth, reply)
        assert headers["www-authenticate"].startswith("Bearer") and "ASCII" in _one_line(_error(reply))
    _serves(srv, kegg)
    _no_server_error(srv, before)


def test_a_request_aiohttp_cannot_parse_is_400_and_one_log_line(srv, kegg):
    """A header holding a control character (``Bearer bad\\x01tok``), a header line without a
    colon: aiohttp's parser answers 400; its log was a traceback (``Error handling request``),
    now one line naming the client and the reason. A request line of garbage (what non-HTTP
    traffic sends first) is a 400 that aiohttp logs only at debug level: no line at all."""
    before = len(srv.lines)
    for data in (_head(0, b"Bearer bad\x01tok"), b"POST /query HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
                 b"G\x00T / HTTP/1.1\r\n\r\n"):
        status, _, reply = _raw(srv.port, data)
        assert status == 400, (data, reply)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sum("malformed HTTP request" in x for x in srv.lines[before:]) < 2:
        time.sleep(0.05)
    said = [x for x in srv.lines[before:] if "malformed HTTP request" in x]
    assert len(said) == 2 and "Invalid header" in said[0] and all(x.count("\n") <= 1 and "127.0.0.1" in x for x in said), srv.lines[before:]
    _serves(srv, kegg)
    _no_server_error(srv, before)


def test_json_nested_100000_deep_is_400(srv, kegg):
    before = len(srv.lines)
    deep = b"[" * 100_000 + b"]" * 100_000
    for body in (deep, b'{"sources": ' + deep + b', "targets": [1]}', b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
                 b'{"sources": ' + b"[" * 900 + b"1" + b"]" * 900 + b', "targets": [1]}'):
        status, _, reply = _raw(srv.port, _head(len(body), ctype=b"application/json") + body)
        assert status == 400 and "request body" in _one_line(_error(reply)), (body[:20], reply)
    status, _, reply = _raw(srv.port, _head(len(deep), ctype=b"application/json") + deep)
    assert "nested too deep" in _error(reply)
    _serves(srv, kegg)
    _no_server_error(srv, before)


def _npy_header(shape: str, version: int = 1, data: bytes = b"") -> bytes:
    head = f"{{'descr': '<i8', 'fortran_order': False, 'shape': {shape}, }}"
    head += " " * (118 - len(head)) + "\n"
    size = len(head).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + head.encode() + data


def test_npy_header_of_an_impossible_shape_is_400(srv, kegg):
    before = len(srv.lines)
    huge = 1180591620717411303424  # 2**70
    for body in (_npy_header(f"({huge}, 2)", data=bytes(32)), _npy_header(f"({huge}, 2)", 2, bytes(32)),
                 _npy_header(f"({huge}, 2)", 3, bytes(32)), _npy_header(f"(0, {huge})"), _npy_header("(-2, 2)"),
                 _npy_header(f"({huge}, {huge})", data=bytes(16))):
        status, _, reply = _raw(srv.port, _head(len(body)) + body)
        assert status in (400, 413) and "request body" in _one_line(_error(reply)), (body[:80], reply)
    _serves(srv, kegg)
    _no_server_error(srv, before)


def _wait_for(check, seconds: float = 10, what: str = ""):
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not in {seconds} s: {what}"
        time.sleep(0.05)


def test_a_client_gone_mid_body_is_one_log_line_not_a_500(srv, kegg):
    before, gone = len(srv.lines), _health(srv).get("clients_gone", 0)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(_head(1000) + b"\x93NUMPY")
        time.sleep(0.3)  # the handler is reading the body
    _wait_for(lambda: any("gone" in x for x in srv.lines[before:]), what="a 'gone' line in the log")
    time.sleep(0.3)  # anything else it would print
    new = srv.lines[before:]
    assert len(new) == 1 and "client 127.0.0.1" in new[0] and "6 of its 1,000 bytes" in new[0], new
    assert _health(srv)["clients_gone"] == gone + 1
    _serves(srv, kegg)
    _no_server_error(srv, before)


# -- item 7: slow uploads ---------------------------------------------------------------------
def test_connections_of_one_address_are_bounded_429(srv, kegg):
    before = len(srv.lines)
    refused = _health(srv)["errors"].get("429", 0)
    idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(CONNECTIONS_PER_ADDRESS)]
    try:
        time.sleep(0.3)  # every one accepted
        status, headers, reply = _post(srv.url, _npy(np.zeros((2, 2), np.int64)))
        assert status == 429 and headers.get("Retry-After") == "1", reply
        assert f"{CONNECTIONS_PER_ADDRESS} connections from 127.0.0.1" in _one_line(_error(reply))
        assert "--max-client-connections" in _error(reply)
        _serves(srv, kegg, source="127.0.0.2")  # another address is not refused
        idle.pop(0).close()
        time.sleep(0.3)
        _serves(srv, kegg)  # a slot freed
    finally:
        for s in idle:
            s.close()
    time.sleep(0.3)
    h = _health(srv)
    assert h["errors"]["429"] == refused + 1 and h["max_client_connections"] == CONNECTIONS_PER_ADDRESS
    _no_server_error(srv, before)


def test_slow_uploads_do_not_take_the_slots_of_other_clients(kegg):
    """40 uploads that announce 16 MB and send a byte: with one worker (16 requests in flight at
    most) a good batch is still answered, since a request counts only once its body is in; and
    the server's memory grows with what arrived, not with what was announced (640 MB)."""
    srv = Server(kegg[0], "--workers", "1")
    slow = []
    try:
        port = srv.port = int(srv.url.rsplit(":", 1)[1])
        rss = _health(srv)["rss_bytes"]
        for k in range(40):  # 40 addresses: the bound on one address's connections is not what is tested
            s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(f"127.0.0.{2 + k}", 0))
            s.sendall(_head(16_000_000, auth=b"none") + b"\x93")
            slow.append(s)
        time.sleep(0.5)
        _serves(srv, kegg, token=None)
        h = _health(srv)
        assert h["in_flight"] == 0 and h["receiving"] == 40, h
        assert h["rss_bytes"] - rss < 100 << 20, (rss, h["rss_bytes"])
        before = len(srv.lines)
        for s in slow:
            s.close()
        _wait_for(lambda: _health(srv)["clients_gone"] == 40, what="40 clients gone")
        # (the counter moves before the server's log lines reach the test's reader: wait for them too)
        _wait_for(lambda: sum("gone" in x for x in srv.lines[before:]) >= 40, what="40 'gone' log lines")
        assert sum("gone" in x for x in srv.lines[before:]) == 40
        _no_server_error(srv)
    finally:
        for s in slow:
            s.close()
        assert srv.stop() == 0, srv.lines


async def _trickle(port: int, every: float = 0.2, limit: float = 20) -> tuple[bytes, float, bool]:
    """An upload announcing 1 MB that sends a byte every ``every`` s until answered: (the reply's
    status line, seconds until it came, whether the server then closed the connection)."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = loop.time()
    writer.write(_head(1_000_000, auth=b"none") + b"\x93")
    status = asyncio.ensure_future(reader.readline())
    while not status.done() and loop.time() - t0 < limit:
        await asyncio.wait([status], timeout=every)
        if not status.done():
            try:
                writer.write(b"\0")
                await writer.drain()
            except ConnectionError:
                break
    line = await asyncio.wait_for(status, 5)
    took = loop.time() - t0
    try:
        await asyncio.wait_for(reader.read(), 5)  # to the end: the server closes
        closed = reader.at_eof()
    except ConnectionError:
        closed = True
    except asyncio.TimeoutError:
        closed = False
    writer.close()
    return line, took, closed


def test_a_body_that_trickles_gets_408_and_its_connection_closed(kegg):
    """40 uploads trickling a byte every 0.2 s, from one address (--max-client-connections 50):
    each gets a 408 after --body-timeout 1 s and its connection closed; the others are served
    meanwhile and after."""
    srv = Server(kegg[0], "--workers", "1", "--body-timeout", "1", "--max-client-connections", "50")
    try:
        srv.port = int(srv.url.rsplit(":", 1)[1])

        async def main():
            slow = [asyncio.ensure_future(_trickle(srv.port)) for _ in range(40)]
            await asyncio.sleep(0.3)
            h = await asyncio.to_thread(_health, srv)
            assert h["receiving"] == 40 and h["in_flight"] == 0, h
            await asyncio.to_thread(_serves, srv, kegg, None)
            return await asyncio.gather(*slow)

        for line, took, closed in asyncio.run(main()):
            assert line.startswith(b"HTTP/1.1 408") and closed and 0.9 < took < 5, (line, took, closed)
        h = _health(srv)
        assert h["errors"] == {"408": 40} and h["receiving"] == h["in_flight"] == 0, h
        assert h["body_timeout_seconds"] == 1 and h["max_client_connections"] == 50
        status, _, reply = _raw(srv.port, _head(1000, auth=b"none") + b"\x93NUMPY")  # one more, to read its message
        assert status == 408 and "6 of 1,000 bytes" in _one_line(_error(reply)), reply
        assert "--body-timeout" in _error(reply)
        _serves(srv, kegg, token=None)
        _no_server_error(srv)
    finally:
        assert srv.stop() == 0, srv.lines
