"""A reply whose headers came but whose body did not within the client's timeout, on a response
that closes its connection (``Connection: close``: http.client hands the socket to the response,
so the connection's own socket is None by then): the server was reached and answered, so the
client says it got no answer in time (an update: it may still be applied), not that the server
cannot be reached."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from distgrail.server.client import Client, ServerError


class _HeadersThenStall(BaseHTTPRequestHandler):
    """Answers /health at once; a POST gets its headers (Connection: close) and one byte of its
    body, the rest held until ``release`` is set."""

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
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "100")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"{")
        self.wfile.flush()
        self.release.wait(10)
        self.close_connection = True

    def log_message(self, *a):
        pass


@pytest.fixture
def stalling_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _HeadersThenStall)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    _HeadersThenStall.release.set()
    srv.shutdown()
    srv.server_close()
    _HeadersThenStall.release.clear()


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
