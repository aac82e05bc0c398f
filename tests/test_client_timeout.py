"""A request the server takes longer to answer than the client's timeout: the client says it got
no answer in time (not that the server cannot be reached), and for an update that the update may
still be applied and how to tell; a server that does not answer the connection at all is still
"cannot reach". A reply whose headers came but whose body stalls, on a response that closes its
connection (``Connection: close``: http.client hands the socket to the response, so the
connection's own socket is None by then), is no answer in time too (found by review)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from distgrail.server.client import Client, ServerError


class _Slow(BaseHTTPRequestHandler):
    """Answers /health at once; holds every POST until ``release`` is set."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()

    def do_GET(self):
        body = json.dumps({"status": "ok", "n": 10, "max_pairs": 1000, "token": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.release.wait(10)
        self.close_connection = True

    def log_message(self, *a):
        pass


class _HeadersThenStall(_Slow):
    """A POST gets its headers (Connection: close) and one byte of its body, the rest held until
    ``release`` is set."""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"{")
        self.wfile.flush()
        self.release.wait(10)
        self.close_connection = True


def _serving(handler):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    handler.release.set()
    srv.shutdown()
    srv.server_close()
    handler.release.clear()


@pytest.fixture
def slow_server():
    yield from _serving(_Slow)


@pytest.fixture
def stalling_server():
    yield from _serving(_HeadersThenStall)


def test_an_update_past_the_clients_timeout_says_it_may_still_be_applied(slow_server):
    with Client(slow_server, timeout=0.5) as c:
        with pytest.raises(ServerError) as e:
            c.add_edges(np.array([1, 2]), np.array([3, 4]))
    msg = str(e.value)
    assert e.value.timed_out and "cannot reach" not in msg
    assert "no answer to POST /edges within the client's timeout of 0.5 s" in msg
    assert "may still be applied" in msg and "'updates'" in msg and "again is safe" in msg


def test_a_query_past_the_clients_timeout_says_no_answer_in_time(slow_server):
    with Client(slow_server, timeout=0.5) as c:
        with pytest.raises(ServerError) as e:
            c.query(np.array([1, 2]), np.array([3, 4]))
    assert e.value.timed_out and "no answer to POST /query within" in str(e.value)
    assert "may still be applied" not in str(e.value)


def test_a_listener_that_never_accepts_is_cannot_reach_not_a_timeout():
    with socket.socket() as s:  # bound, not listening: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(ServerError) as e:
            Client(f"http://127.0.0.1:{port}", timeout=0.5)
    assert "cannot reach" in str(e.value) and not e.value.timed_out


def test_an_update_whose_reply_stalls_after_its_headers_is_no_answer_in_time(stalling_server):
    with Client(stalling_server, timeout=0.5) as c:
        with pytest.raises(ServerError) as e:
            c.add_edges(np.array([1, 2]), np.array([3, 4]))
    msg = str(e.value)
    assert e.value.timed_out and "cannot reach" not in msg, msg
    assert "may still be applied" in msg


def test_a_query_whose_reply_stalls_after_its_headers_is_no_answer_in_time(stalling_server):
    with Client(stalling_server, timeout=0.5) as c:
        with pytest.raises(ServerError) as e:
            c.query(np.array([1, 2]), np.array([3, 4]))
    assert e.value.timed_out and "cannot reach" not in str(e.value), str(e.value)
