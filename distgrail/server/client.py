"""The client of ``distgrail serve``: ``distgrail.connect(url).query(sources, targets)``.

Standard library only (``http.client``): one kept-alive connection per thread, so one
:class:`Client` may be shared by several threads. A big batch may go as pieces on several
connections at once (``connections``; by default one per listening rank of a ``--front ranks``
server, each connection placed on a rank of its own, so that the ranks answer it together).

For example (a server started with ``distgrail serve INDEX``)::

    import distgrail
    server = distgrail.connect("http://127.0.0.1:7850")
    answers, stats = server.query([0, 5], [3, 2])   # as Index.query: bool answers, QueryStats
    server.reachable(0, 3)                           # True or False
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import re
import select
import socket
import threading
import urllib.parse

import numpy as np

from .. import settings
from ..errors import DistGrailError, QueryError
from ..nodelabels import as_column, check_label_kind, object_ids
from .wire import (JSON, NPY, STATS_HEADER, TIMING_HEADER, decode_answers, encode_columns, refuse_wrapping_ids,
                   stats_from_dict, timing_of)

__all__ = ["connect", "Client", "ServerError", "TOKEN_ENV"]

#: the environment variable a client reads its bearer token from when none is given
TOKEN_ENV = "DISTGRAIL_TOKEN"
#: a batch is cut for several connections only into pieces of at least this many pairs (a request
#: costs a round trip and a batch's set-up on the server)
PIECE_MIN_PAIRS = 1 << 20
#: the most bytes of narrowed ids a thread keeps between batches (:meth:`Client._scratch`: 16 M
#: pairs' int32 columns); a larger batch's go with it
KEEP_SCRATCH_BYTES = 128 << 20
#: fresh connections tried, per listening rank, to place a connection on a given rank
PLACE_TRIES = 16


class ServerError(DistGrailError):
    """The server cannot be reached, or refused a request for a reason other than its pairs
    (token, size or time limit, busy). ``status``: the HTTP status, or None (no answer)."""

    def __init__(self, message: str, status: int | None = None, timed_out: bool = False):
        super().__init__(message)
        self.status = status
        #: the request was sent and no answer came within the client's timeout (the server may
        #: still be working on it: an update may still be applied)
        self.timed_out = timed_out


def connect(url: str, token: str | None = None, timeout: float | None = 600.0,
            connections: int | None = None) -> "Client":
    """A :class:`Client` of the ``distgrail serve`` at ``url``; asks its ``/health`` once, so a
    wrong address or token fails here (:class:`ServerError`). ``token``: the bearer token (default:
    the ``DISTGRAIL_TOKEN`` environment variable, if set). ``timeout``: seconds a request may take.
    ``connections``: requests one batch may have out at once (default: the listening ranks of a
    ``--front ranks`` server, else 1)."""
    return Client(url, token=token, timeout=timeout, connections=connections)


def _shifted(message: str, start: int) -> str:
    """The server's ``sources[k]: ...`` / ``targets[k] ...`` refusal of a request that held the
    batch's pairs from ``start`` on, naming the pair by its place in the whole batch."""
    m = re.match(r"(sources|targets)\[(\d+)\]", message)
    if m is None or not start:
        return message
    return f"{m.group(1)}[{int(m.group(2)) + start}]{message[m.end():]}"


def _closed_by_peer(conn) -> bool:
    """Whether the kept-alive connection ``conn`` is readable while no request is out: the server
    closed it (after its idle timeout) or sent what no request asked for; either way a request
    sent on it would fail (a POST that is not retried, /edges, most of all)."""
    sock = getattr(conn, "sock", None)
    if sock is None:
        return True
    try:
        fd = sock.fileno()
        if fd < 0:  # (closed)
            return True
        if hasattr(select, "poll"):  # (select.select refuses descriptors past 1023)
            p = select.poll()
            p.register(fd, select.POLLIN)
            return bool(p.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):  # not known to be closed: sent on, as before this check
        return False


class Client:
    """Queries through a running ``distgrail serve``; same answers as :meth:`distgrail.Index.query`."""

    def __init__(self, url: str, token: str | None = None, timeout: float | None = 600.0,
                 connections: int | None = None):
        try:  # (a port past 65535 or not a number, a broken IPv6 address: urllib's ValueError)
            parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
            port = parts.port
        except ValueError as e:
            raise ServerError(f"{url}: not a server address ({e})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"{url}: not an http:// or https:// server address")
        self.url = url.rstrip("/")
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, port
        self._base = parts.path.rstrip("/")
        self.token = token if token is not None else settings.get(TOKEN_ENV)
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()  # the piece threads' lists of connections
        self._pool_lock = threading.Lock()  # the piece threads made or ended
        self._opened: list = []  # the connections of the piece threads (their pool's list; close())
        self._pool, self._slots = None, itertools.count()
        #: the server's ``/health`` when connected (index, n, backend, limits...)
        self.info = self.health()
        if connections is not None and int(connections) < 1:
            raise ServerError(f"connections must be at least 1, got {connections}")
        #: requests one batch may have out at once (module doc)
        self.connections = int(connections) if connections is not None else self._listening()

    def _listening(self) -> int:
        """The ranks this client can reach: those of a ``--front ranks`` server on the node its
        first connection reached (each node's ranks listen there only), else 1."""
        return len(self._reachable()) if self.info.get("front") == "ranks" else 1

    def _reachable(self) -> list:
        """The ranks of a ``--front ranks`` server on the node of the rank ``info`` came from."""
        procs = self.info.get("rank_processes") or []
        me = self.info.get("rank", 0)
        host = next((p.get("host") for p in procs if p.get("rank") == me), None)
        return [p["rank"] for p in procs if p.get("host") == host] or [me]

    # -- what the server holds ------------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.info["n"])

    @property
    def label_kind(self) -> str | None:
        """"int"/"str" when the index takes the graph's own node labels, else None (vertex ids)."""
        return self.info.get("node_labels")

    def health(self) -> dict:
        """The server's ``GET /health``: index, device, counters, p50/p99 latency, memory."""
        status, _, body = self._request("GET", "/health", None, {"Accept": JSON})
        return json.loads(body)

    # -- queries ------------------------------------------------------------------------------
    def query(self, sources, targets):
        """Answer a batch: ``(answers, QueryStats)`` as :meth:`distgrail.Index.query` returns them
        (bool answers in input order). Batches over the server's ``max_pairs`` go as several
        requests, and with :attr:`connections` above 1 a batch of at least twice
        :data:`PIECE_MIN_PAIRS` goes as up to that many pieces at once (and so do the requests a
        batch over ``max_pairs`` is cut into); the stats then add up
        (``seconds``: the sum of the server's answering times; ``ranks``: the ranks the pieces went
        to at once)."""
        s, t = as_column(sources), as_column(targets)  # (a list's bool among ints, number among strings: refused)
        if s.shape != t.shape or s.ndim != 1:
            raise QueryError(f"sources and targets must be 1-D of equal length, got shapes {s.shape} and {t.shape}")
        s, t = self._refuse_wrapping(s, t)  # (on the whole batch: the message names the pair by its place in it)
        step = max(1, int(self.info.get("max_pairs", s.size or 1)))
        c = self.connections
        if c > 1 and s.size >= 2 * PIECE_MIN_PAIRS:
            step = min(step, max(PIECE_MIN_PAIRS, -(-s.size // c)))
        starts = range(0, max(s.size, 1), step)

        def piece(a):
            try:
                self._placed()
                return self._batch(s[a:a + step], t[a:a + step])
            except QueryError as e:  # the server names the pair by its place in the request: here, in the batch
                raise QueryError(_shifted(str(e), a)) from None

        done = map(piece, starts)
        if c > 1 and len(starts) > 1:
            try:
                done = self._pieces().map(piece, starts)
            except RuntimeError:  # its pool shut down by close() meanwhile: a new one
                done = self._pieces().map(piece, starts)
        answers, total, timing = [], None, {}
        for ans, st, took in done:
            answers.append(ans)
            for name, sec in took.items():  # (not "step": the pieces still to be sent read that)
                timing[name] = timing.get(name, 0.0) + sec
            if total is None:
                total = st
            else:
                secs, ranks = total.seconds + st.seconds, max(total.ranks, st.ranks)
                total = total.merge(st)
                total.seconds, total.ranks = secs, ranks
        if c > 1 and len(starts) > 1:  # pieces at once: on as many listening ranks (each piece's stats say 1)
            total.ranks = max(total.ranks, min(len(starts), c, self._listening()))
        self._local.timing = timing  # (this thread's: its pieces went out on other threads)
        return (np.concatenate(answers) if len(answers) > 1 else answers[0]), total

    def reachable(self, u, v):
        """Does ``u`` reach ``v``? Scalars give a bool, arrays a bool array (as :meth:`Index.reachable`)."""
        if np.ndim(u) == 0 and np.ndim(v) == 0:
            ans, _ = self.query(np.array([u]), np.array([v]))
            return bool(ans[0])
        ans, _ = self.query(*(x if np.ndim(x) else np.array([x]) for x in (u, v)))
        return ans

    def add_edges(self, sources, targets) -> dict:
        """Insert the edges ``sources[i] -> targets[i]`` into the served index (``POST /edges``;
        the server needs a token): its report as a dict (``given``, ``added``, ``C``, ...). The
        server's later batches answer for the graph plus these edges."""
        s, t = as_column(sources), as_column(targets)
        if s.shape != t.shape or s.ndim != 1:
            raise QueryError(f"sources and targets must be 1-D of equal length, got shapes {s.shape} and {t.shape}")
        s, t = self._refuse_wrapping(s, t)
        pieces, size = encode_columns(s, t)
        # not sent twice: a connection reset after the server took an update would apply it twice
        try:
            _, _, body = self._request("POST", "/edges?layout=columns", pieces,
                                       {"Content-Type": NPY, "Accept": JSON, "Content-Length": str(size)}, retry=False)
        except ServerError as e:
            if not e.timed_out:
                raise
            raise ServerError(f"{e}: the update may still be applied; the server's /health counts the updates it "
                              f"has made ('updates'), and sending these edges again is safe (an edge it holds "
                              f"changes nothing)", timed_out=True) from None
        return json.loads(body)

    def _batch(self, s, t):
        # sent piece by piece: the columns are not copied (but narrowed to int32 where they fit
        # and the server's vertex ids do: half the bytes to send and to read)
        narrow = self.label_kind is None and int(self.info.get("n", 2**62)) <= 2**31
        pieces, size = encode_columns(s, t, narrow=narrow, scratch=self._scratch)
        status, headers, body = self._request("POST", "/query?layout=columns", pieces,
                                              {"Content-Type": NPY, "Accept": NPY, "Content-Length": str(size)})
        stats = stats_from_dict(json.loads(headers.get(STATS_HEADER, "{}")))
        return decode_answers(body), stats, timing_of(headers.get(TIMING_HEADER))

    def _scratch(self, count: int) -> np.ndarray:
        """This thread's int32 array of at least ``count`` that a batch's ids are narrowed into,
        kept for its next batches (their pages already given by the kernel) up to
        :data:`KEEP_SCRATCH_BYTES`, until :meth:`close`; the body is sent before the thread's next
        batch writes it."""
        have = getattr(self._local, "scratch", None)
        if have is None or have.size < count:
            self._local.scratch = None  # (the old one let go before the new one is made)
            have = np.empty(count, np.int32)
            if have.nbytes <= KEEP_SCRATCH_BYTES:  # (a larger one goes with its batch)
                self._local.scratch = have
        return have[:count]

    @property
    def last_timing(self) -> dict:
        """Where this thread's last :meth:`query` spent its time on the server, from the
        ``Server-Timing`` header of its request: seconds by step (``read``: the body arriving;
        ``decode``, ``answer``, ``encode``; ``wait``: for a thread, and the rest), each summed over
        the requests the batch was cut into (pieces sent at once from other threads included).
        Empty before a query."""
        return dict(getattr(self._local, "timing", None) or {})

    def _refuse_wrapping(self, s, t):
        """``(s, t)`` to send, once a uint64 id or integer label past 2^63 - 1 that the body would
        send wrapped (its other column signed: the two go as int64), or a Python int label past
        64 bits (an object array, sent as text), is refused: the QueryError :meth:`Index.query`
        gives, raised here, naming the value as given (wrapped, it could be another vertex's id or
        label). Object arrays of Python ints that fit go as int64 labels."""
        if self.label_kind is None:
            if s.dtype.kind == "O" or t.dtype.kind == "O":  # (Python ints, one past 64 bits?: as Index.query)
                s, t = (object_ids(a, self.n, w) if a.dtype.kind == "O" else a for a, w in ((s, "sources"), (t, "targets")))
            refuse_wrapping_ids(s, t, self.n)
            return s, t
        for arr, what in ((s, "sources"), (t, "targets")):  # (the body would send them as text: "1", "None")
            check_label_kind(arr, self.label_kind, what)  # what Index.query refuses, refused here, named
        if self.label_kind != "int":
            return s, t
        out = []
        for arr, what in ((s, "sources"), (t, "targets")):
            if arr.dtype.kind == "O" and all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
                                             for x in arr.flat):
                i = next((k for k, x in enumerate(arr.flat) if not -2**63 <= x < 2**63), None)
                if i is not None:
                    raise QueryError(f"{what}[{i}]: node {int(arr[i])!r} is not in the graph")
                arr = arr.astype(np.int64)
            out.append(arr)
        if (out[0].dtype == np.uint64) != (out[1].dtype == np.uint64):
            for arr, what in zip(out, ("sources", "targets")):
                past = np.flatnonzero(arr > np.uint64(2**63 - 1)) if arr.dtype == np.uint64 else ()
                if len(past):
                    i = int(past[0])
                    raise QueryError(f"{what}[{i}]: node {int(arr[i])!r} is not in the graph")
        return out[0], out[1]

    # -- HTTP ---------------------------------------------------------------------------------
    def _pieces(self):
        """The threads that send a batch's pieces (:attr:`connections` of them, made once), each
        with its own connection, placed on rank ``slot mod ranks`` of a ``--front ranks`` server:
        every thread is made and placed before the first piece is handed out."""
        from concurrent.futures import ThreadPoolExecutor

        with self._pool_lock:  # (not _lock: the placement below takes it)
            if self._pool is None:
                pool = ThreadPoolExecutor(self.connections, thread_name_prefix="distgrail-client")
                meet, conns = threading.Barrier(self.connections), []

                def start():  # one per thread: none is free to take another before all have met
                    self._local.opened = conns
                    near = self._reachable()
                    self._local.want = near[next(self._slots) % len(near)]
                    self._placed()
                    with contextlib.suppress(threading.BrokenBarrierError):
                        meet.wait(self.timeout)

                for f in [pool.submit(start) for _ in range(self.connections)]:
                    f.result()
                self._pool, self._opened = pool, conns
            return self._pool

    def _placed(self) -> None:
        """(A piece thread) its kept-alive connection on its rank (``want``) of a ``--front ranks``
        server, again after any new connection (an idle one the server closed, a retry): fresh
        connections until the kernel's pick is that rank (:data:`PLACE_TRIES` per rank; then the
        last one, wherever it is). Never an error: a failure here is met again by the request."""
        want, ranks = getattr(self._local, "want", None), self._listening()
        conn = getattr(self._local, "conn", None)
        if want is None or ranks < 2 or (conn is not None and conn is getattr(self._local, "placed", None)
                                         and not _closed_by_peer(conn)):
            return
        try:
            for _ in range(PLACE_TRIES * ranks):
                if self.health().get("rank") == want:
                    break
                self._connection(fresh=True)
        except (DistGrailError, OSError, ValueError, http.client.HTTPException):
            return
        self._local.placed = self._local.conn  # (placed, or given up on: not tried again for this connection)

    def _connection(self, fresh: bool = False):
        conn = getattr(self._local, "conn", None)
        if conn is None or fresh or _closed_by_peer(conn):
            if conn is not None:
                conn.close()
            kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            conn = self._local.conn = kind(self._host, self._port, timeout=self.timeout)
            conn.connect()
            opened = getattr(self._local, "opened", None)  # a piece thread's: its pool's (close() closes them)
            if opened is not None:
                with self._lock:
                    opened[:] = [c for c in opened if c.sock is not None] + [conn]
            # the headers and the body's pieces go in separate writes: Nagle would hold the later
            # small ones until the server's (delayed) ACK, ~40 ms a request
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _request(self, method, path, body, headers, retry: bool = True):
        headers = dict(headers)
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in (0, 1) if retry else (0,):  # a kept-alive connection the server closed: once more, on a new one
            conn = r = None
            try:  # connecting too: a refused connection is a ServerError, not a bare OSError
                conn = self._connection(fresh=attempt == 1)
                conn.request(method, self._base + path, body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                break
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
                if conn is not None:
                    conn.close()
                if attempt or not retry:
                    raise ServerError(f"{self.url}: the server closed the connection ({e})") from None
            except OSError as e:  # refused, unreachable, timed out
                # (a reply's headers came: a Connection: close response holds the socket, not conn)
                sent = isinstance(e, TimeoutError) and conn is not None and (conn.sock is not None or r is not None)
                if conn is not None:
                    conn.close()
                self._local.conn = None
                if sent:  # (connected, the request on its way or sent: the server may be working on it)
                    raise ServerError(f"{self.url}: no answer to {method} {path.split('?')[0]} within the client's "
                                      f"timeout of {self.timeout} s (the server may still be working on it)",
                                      timed_out=True) from None
                raise ServerError(f"cannot reach the distgrail server at {self.url} ({e})") from None
        if r.status == 200:
            return r.status, r.headers, data
        try:
            message = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            message = data[:200].decode("utf-8", "replace") or r.reason
        if r.status == 400:
            raise QueryError(message)  # the pairs: the very message Index.query gives
        raise ServerError(f"{self.url}: {r.status} {r.reason}: {message}", status=r.status)

    def close(self):
        """Close this thread's connection, and end the threads that send the pieces of a batch
        (once the pieces they are sending are answered) and close theirs. Other threads'
        connections are theirs: a request of theirs in flight goes on."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
            opened, self._opened = self._opened, []
        if pool is not None:
            pool.shutdown(wait=True)  # (the pieces queued or sent are answered first)
            for conn in list(opened):
                conn.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._local.scratch = None  # (the piece threads' went with them)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        i = self.info
        return f"<distgrail.Client {self.url}: {i.get('source_name')!r}, {i.get('n', 0):,} vertices, {i.get('backend')}>"
