"""What a review of ``serve``'s updates found (session 30): ``Client.add_edges`` on a kept-alive
connection the server had closed (its idle timeout) failed with a broken pipe and was never
applied; a corrupt ``Content-Encoding`` body was a 500 with tracebacks; an id past int64 was named
wrapped by ``add_edges``; the ``/edges`` answer lost its wall time; under MPI every rank kept the
first index alive after updates (checked in tests/test_server_updates.py's MPI test)."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import distgrail
from distgrail.errors import QueryError
from distgrail.server.client import _closed_by_peer
from test_server import MPIEXEC, ROOT, TOKEN, Server, _env, needs_mpiexec
from test_server_updates import graph  # noqa: F401 - the module's fixture


class _Closing(BaseHTTPRequestHandler):
    """Answers each request keep-alive in its headers, then closes the connection (what a server
    does once its idle timeout passes); counts the /edges requests it received."""

    protocol_version = "HTTP/1.1"
    edges = 0

    def _answer(self, doc):
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True  # (the client was not told: it keeps the connection)

    def do_GET(self):
        self._answer({"status": "ok", "n": 10, "max_pairs": 1000})

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).edges += 1
        self._answer({"update": type(self).edges})

    def log_message(self, *a):
        pass


class _ClosingServer(ThreadingHTTPServer):
    """Sets ``closed`` once it has closed a connection (after its answer)."""

    closed = threading.Event()

    def shutdown_request(self, request):
        super().shutdown_request(request)
        self.closed.set()


def test_add_edges_after_the_server_closed_the_kept_connection_opens_a_new_one():
    srv = _ClosingServer(("127.0.0.1", 0), _Closing)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        c = distgrail.connect(f"http://127.0.0.1:{srv.server_address[1]}", token=TOKEN)  # (GET /health, kept)
        for k in (1, 2):  # each time on a connection the server has closed since
            assert srv.closed.wait(10)
            srv.closed.clear()
            assert c.add_edges([1], [2]) == {"update": k}
        assert _Closing.edges == 2
    finally:
        srv.shutdown()
        srv.server_close()


def test_closed_by_peer_tells_a_closed_connection_from_a_quiet_one():
    a, b = socket.socketpair()
    conn = http.client.HTTPConnection("localhost")
    conn.sock = a
    assert not _closed_by_peer(conn)  # open and quiet: kept
    b.close()
    assert _closed_by_peer(conn)  # EOF waiting: the server closed it
    a.close()
    conn.sock = None
    assert _closed_by_peer(conn)


def test_closed_by_peer_past_descriptor_1023():
    """A process holding many files (a split index's parts) has sockets past 1023, which
    ``select.select`` refuses: a quiet connection there is still kept."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1600:
        pytest.skip(f"this process may open {soft} files (hard limit {hard}): no descriptor past 1500")
    if soft < 1600:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1600, hard))
    a, b = socket.socketpair()
    high = os.dup2(a.fileno(), 1500)
    try:
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(fileno=high)
        assert not _closed_by_peer(conn)
        b.close()
        assert _closed_by_peer(conn)
        conn.sock.close()
    finally:
        a.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_corrupt_encoded_body_is_a_400_without_a_traceback(graph, tmp_path):  # noqa: F811
    path = graph[0]
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    srv = Server(path, "--token-file", str(tok))
    try:
        url = srv.url.split("//")[1]
        host, port = url.split(":")[0], int(url.split(":")[1].split("/")[0])
        for where in ("/query", "/edges"):
            for enc, body in (("gzip", b"0123456789"), ("deflate", b"not deflate"),
                              ("gzip", gzip.compress(b"x" * 100)[:-12] + b"\x00" * 12)):
                c = http.client.HTTPConnection(host, port, timeout=30)
                c.request("POST", where, body=body, headers={"Authorization": f"Bearer {TOKEN}",
                                                               "Content-Type": "application/json",
                                                               "Content-Encoding": enc})
                r = c.getresponse()
                doc = json.loads(r.read())
                c.close()
                assert r.status == 400 and doc["error"].startswith("request body: "), (where, enc, doc)
        client = distgrail.connect(srv.url, token=TOKEN)
        rep = client.add_edges([0], [1])
        assert isinstance(rep["wall_seconds"], float) and rep["wall_seconds"] > 0 and isinstance(rep["seconds"], dict)
        with pytest.raises(QueryError, match="9223372036854775809"):  # named as given, not wrapped
            client.add_edges(np.array([2**63 + 1], np.uint64), np.array([1], np.int64))
        assert client.health()["updates"] == 1
    finally:
        assert srv.stop() == 0, srv.lines
    assert not any("Traceback" in line for line in srv.lines), "".join(srv.lines)


#: imported by every rank's Python at start (PYTHONPATH): every Index made is noted (a weak
#: reference), and a thread prints how many the process holds, every 0.3 s. Not by walking
#: ``gc.get_objects()`` from that thread: it took references to tuples the main thread was still
#: building (``tuple(generator)`` in attrs, imported by aiohttp), whose resize then raised
#: SystemError ('bad argument to internal function') and ended the server before it was ready
#: (the local CI, session 55)
_COUNTER = """
import gc, os, sys, threading, time, weakref
if os.environ.get("COUNT_INDEXES"):
    from distgrail.index import Index
    _made = weakref.WeakSet()
    _init = Index.__init__
    def _noted(self, *args, **kwargs):
        _init(self, *args, **kwargs)
        _made.add(self)
    Index.__init__ = _noted
    def _count():
        while True:
            time.sleep(0.3)
            gc.collect()
            print(f"INDEXES pid {os.getpid()}: {len(_made)}", file=sys.stderr, flush=True)
    threading.Thread(target=_count, daemon=True).start()
"""


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
def test_under_mpiexec_a_replaced_index_is_freed_on_every_rank(graph, tmp_path, ranks):  # noqa: F811
    """After updates every rank holds one index, the served version (each rank kept the first
    one as well: twice the memory, and on a GPU its query state too)."""
    path, add, pairs, before, after = graph
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    (tmp_path / "sitecustomize.py").write_text(_COUNTER)
    env = _env(MPIEXEC_TIMEOUT="300", COUNT_INDEXES="1")
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    srv = Server(path, "--token-file", str(tok), "--shard-min-pairs", "1000", launcher=(MPIEXEC, "-n", str(ranks)),
                 env=env, wait=120)
    try:
        c = distgrail.connect(srv.url, token=TOKEN)
        for k in range(3):
            c.add_edges(add[k::3, 0], add[k::3, 1])
        got, st = c.query(pairs[:, 0], pairs[:, 1])
        assert st.ranks == ranks and np.array_equal(got, after)
        mark = len(srv.lines)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a count from every rank taken after the updates
            counts = {}
            for line in srv.lines[mark:]:
                m = re.search(r"INDEXES pid (\d+): (\d+)", line)
                if m:
                    counts[m.group(1)] = int(m.group(2))
            if len(counts) == ranks:
                break
            time.sleep(0.2)
        assert len(counts) == ranks and set(counts.values()) == {1}, counts
    finally:
        srv.stop()
