"""The HTTP side of ``distgrail serve`` (aiohttp): ``POST /query``, ``POST /edges`` and ``GET /health``.

The event loop only reads requests and writes answers; decoding a body, answering it
(:meth:`distgrail.Index.query`) and encoding the answers run in a thread pool, so a long batch
never stalls the other clients. :meth:`Index.query` may be called from several threads at once
(its query state is immutable; each GPU batch borrows its own scratch), so the pool's size is
the number of batches that run at once: the CPU's cores on the CPU backend, two per GPU (one
batch's copies overlap the other's kernels; more only add scratch). Each GPU thread has its own
CUDA stream on the backend's device.

Limits: ``max_pairs`` per request (413; the body may not be larger than that many pairs can
take), ``timeout`` seconds per request (504; a batch still waiting for a thread is dropped, one
already on the GPU runs to its end), ``max_waiting`` requests in flight (503; 16 per worker),
counted only once a request's body is in, so that slow uploads hold no slot the others need; a
body may take ``body_timeout`` seconds to arrive, plus a second for each MiB that has arrived
(408, and the connection closed at once; :class:`~distgrail.server.limits.BodyClock`); one client
address may hold ``max_client_connections`` connections open (429;
:class:`~distgrail.server.limits.Gate`). A client gone mid-body is one line in the log
(``clients_gone`` in ``/health``), not an error. Every refusal is a 4xx/5xx with a one-line JSON
message; a traceback in the log is a bug.

``POST /edges`` (a body of pairs as for ``/query``: the new edges ``u -> v``) inserts edges into
the served index (:func:`distgrail.update.insert_edges`), one update at a time on a thread of its
own, while queries go on: the updated index replaces the served one once it is made, and every
batch is answered by the one it started with (never half of each). It needs a token (without
``--token-file`` it is refused: an update changes every client's answers). Under MPI every rank
inserts them together, between two sharded batches (:func:`distgrail.mpi.serve.apply_update`),
and moves to the new version only when every rank has it. The file on disk is not changed
(``distgrail update`` writes one).

Under MPI (``dispatcher``: a :class:`distgrail.mpi.serve.Dispatcher`) a batch of at least
``shard_min_pairs`` pairs is checked here (a bad one is a 400 before any collective), then
queued to the dispatcher, which shards it over every rank, one batch at a time; smaller
batches are answered by rank 0 alone in the pool, beside the sharded one. With a front end on
every rank (``front`` "ranks"), every rank's service answers its own clients' batches alone, and
``dispatcher`` only takes the updates (rank 0's Dispatcher, another rank's
:class:`~distgrail.mpi.serve.Forwarder`). Under MPI the served version moves in :meth:`adopt`,
called by the rank's MPI thread on every update applied, on every rank.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import hmac
import json
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import cores
from .._version import __version__
from ..errors import DistGrailError, GraphFormatError, QueryError
from .limits import DEFAULT_BODY_TIMEOUT, DEFAULT_CLIENT_CONNECTIONS, BodyClock, Late
from .wire import JSON, NPY, STATS_HEADER, TIMING_HEADER, TooManyValues, decode_pairs, encode_answers, server_timing

__all__ = ["Service", "BodyBuffers", "BODY_FIRST_BYTES", "GPU_BATCHES_AT_ONCE", "LATENCY_WINDOW", "SHARD_MIN_PAIRS"]

#: a request body's buffer starts at this size (or its Content-Length, if smaller) and doubles
#: as bytes arrive
BODY_FIRST_BYTES = 4 << 20
#: batches one GPU answers at once (each with its own stream and scratch)
GPU_BATCHES_AT_ONCE = 2
#: the last requests whose latency the health endpoint's p50/p99 are taken over
LATENCY_WINDOW = 10_000
#: under MPI, batches of fewer pairs are answered by rank 0 alone (a collective costs more than
#: they do); not measured yet: a guess to be set from GPU timings (distgrail serve --shard-min-pairs)
SHARD_MIN_PAIRS = 1 << 16


class _Refused(Exception):
    """A request the server will not answer: HTTP ``status`` and the message."""

    def __init__(self, status: int, message: str, headers: dict | None = None, close: bool = False):
        super().__init__(message)
        self.status, self.headers, self.close = status, headers or {}, close


class _Gone(Exception):
    """The client closed its connection before its request's body was in."""


def body_limit(max_pairs: int, label_chars: int) -> int:
    """Bytes a body of ``max_pairs`` pairs may take: the JSON form of the longest ids or labels
    (an id: 20 digits, a sign and a separator; a string label: its characters, escaped at worst
    as \\uXXXX, and quotes), plus 1 MiB for headers and white space."""
    per_value = 22 if label_chars == 0 else 6 * label_chars + 4
    return int(max_pairs) * 2 * per_value + (1 << 20)


class Service:
    """One opened index answering over HTTP on one backend, with the counters ``/health`` shows."""

    def __init__(self, index, backend, *, max_pairs: int, timeout: float, token: str | None = None,
                 workers: int | None = None, max_waiting: int | None = None, dispatcher=None,
                 shard_min_pairs: int = SHARD_MIN_PAIRS, ranks: list | None = None,
                 body_timeout: float = DEFAULT_BODY_TIMEOUT, max_client_connections: int = DEFAULT_CLIENT_CONNECTIONS,
                 log=None, front: str = "root"):
        self.index, self.be = index, backend
        #: the served index file (an update's index, made in memory, has no path of its own)
        self.path = index.meta.get("path")
        #: under MPI: rank 0's Dispatcher, the batch size from which it is used, every rank's
        #: ``{"rank", "host", "pid", "device"}``
        self.dispatcher, self.shard_min_pairs, self.ranks = dispatcher, int(shard_min_pairs), ranks
        #: under MPI, "root" (rank 0 listens and shards big batches) or "ranks" (every rank listens
        #: and answers its own clients; ``rank``: this one)
        self.front, self.rank = front, 0
        #: the address served, once listening
        self.url = None
        self.max_pairs, self.timeout, self.token = int(max_pairs), float(timeout), token
        self.body_timeout, self.max_client_connections = float(body_timeout), int(max_client_connections)
        #: one line of the log (a client gone); the server's ``say``
        self.log = log or (lambda text: print(f"distgrail: {text}", file=sys.stderr, flush=True))
        #: the :class:`~distgrail.server.limits.Gate` of the listening socket, once listening
        self.gate = None
        labels = index.node_labels
        self.label_kind = None if labels is None else labels.kind
        chars = int(labels.values.dtype.itemsize // 4) if self.label_kind == "str" else 0
        self.max_body = body_limit(self.max_pairs, chars)
        if workers is None:
            workers = GPU_BATCHES_AT_ONCE if backend.is_gpu else cores.usable()
        self.workers = int(workers)
        self.max_waiting = int(max_waiting) if max_waiting is not None else 16 * self.workers
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="distgrail-query")
        self._streams = threading.local()
        self.bodies = BodyBuffers()
        self.device_name = _device_name(backend)
        self.started = time.time()
        self.requests = self.batches = self.pairs = self.in_flight = self.receiving = self.gone = 0
        self.errors: collections.Counter = collections.Counter()
        self.latency = collections.deque(maxlen=LATENCY_WINDOW)
        #: one update at a time (POST /edges); the updates applied and the edges they inserted
        self.updater = ThreadPoolExecutor(1, thread_name_prefix="distgrail-update")
        self.updates = self.edges_inserted = 0
        self._adopting = threading.Lock()
        self._numbers: dict = {}  # id(index adopted) -> (its update's number, edges inserted then), until replied

    # -- the work, in the pool's threads ---------------------------------------------------
    def answer(self, sources, targets, search=None):
        """:meth:`Index.query` on this service's backend, from any thread (a GPU thread works in
        its own stream on the backend's device), on the index served when the batch starts."""
        index = self.index  # (one read: an update replacing it meanwhile does not split the batch)
        if not self.be.is_gpu:
            return index.query(sources, targets, backend=self.be, search=search)
        with self.be.on_device(), self._stream():
            return index.query(sources, targets, backend=self.be, search=search)

    def _update(self, body: bytes, content_type: str, columns: bool) -> dict:
        """Decode the new edges, insert them (on the updater's thread), serve the result."""
        from ..update import insert_edges

        s, t, _ = decode_pairs(body, content_type, self.label_kind, columns, self.max_pairs)
        k = int(np.shape(s)[0]) if np.ndim(s) else 0
        if k == 0:  # (as distgrail update refuses an edges file without edges: no update of nothing counted)
            raise _Refused(400, "no edges: POST /edges takes at least one edge u -> v")
        if k > self.max_pairs:
            raise _Refused(413, f"{k:,} edges is over this server's limit of {self.max_pairs:,} pairs a request "
                                "(distgrail serve --max-pairs): send smaller batches")
        t0 = time.perf_counter()
        if self.dispatcher is not None:  # every rank inserts them, between two batches
            from ..mpi.serve import Stopping
            from ..update import checked_edges

            s, t = checked_edges(self.index, s, t)  # a QueryError: a 400, no collective
            try:  # (served from the moment every rank has it: adopt(), called by the MPI thread)
                new, report = self.dispatcher.update(s, t)
            except Stopping as e:
                raise _Refused(503, str(e)) from None
        else:
            with self.be.on_device():
                new, report = insert_edges(self.index, s, t, backend=self.be)
                L, _ = new._state(self.be)  # its query state made here, not by the next batch
                if not self.be.is_gpu:  # (and the compiled CPU path's records, when it is the path)
                    from ..query.answer import prepare_cpu

                    prepare_cpu(L, self.max_pairs)
            self.adopt(new, k)
        with self._adopting:
            number, inserted = self._numbers.pop(id(new), (self.updates, self.edges_inserted))
        return {"update": number, "edges_inserted": inserted, "n": new.n, "C": new.C,
                **report.as_dict(), "wall_seconds": round(time.perf_counter() - t0, 6)}  # (seconds: the steps')

    def adopt(self, new, edges: int) -> None:
        """Serve ``new`` (the index after an update of ``edges`` edges) from the next batch on; its
        update's numbers kept for its reply (another update may be adopted before the reply)."""
        with self._adopting:
            self.index = new
            self.updates += 1
            self.edges_inserted += int(edges)
            self._numbers.pop(id(new), None)  # (the id of an index let go: this one's now)
            self._numbers[id(new)] = (self.updates, self.edges_inserted)
            while len(self._numbers) > 64:  # (other ranks' updates are replied to there: the oldest let go)
                self._numbers.pop(next(iter(self._numbers)))

    def _stream(self):
        s = getattr(self._streams, "stream", None)
        if s is None:
            s = self._streams.stream = self.be.xp.cuda.Stream(non_blocking=True)
        return s

    def _sharded(self, sources, targets):
        """Over every rank (the dispatcher's collective); the pairs checked here first."""
        from concurrent.futures import TimeoutError as FutureTimeout

        from ..mpi.serve import Stopping

        # QueryError: a 400, no collective; int32 ids stay int32 (widened by the copy into the
        # node-shared arrays, or by the conversion for the MPI messages)
        s, t = self.index.check_pairs(sources, targets, narrow=True)
        try:
            return self.dispatcher.answer(s, t, self.timeout)
        except FutureTimeout:
            raise _Refused(504, self._late()) from None
        except Stopping as e:
            raise _Refused(503, str(e)) from None

    def _late(self) -> str:
        return (f"the batch took longer than this server's limit of {self.timeout:g} s "
                "a request (distgrail serve --timeout): send smaller batches")

    def _work(self, body: bytes, content_type: str, accept: str, columns: bool, timing: dict | None = None):
        """Decode, answer, encode: ``(content type, body, headers, pairs)``; each step's seconds
        into ``timing`` (``decode``, ``answer``, ``encode``) where given."""
        t0 = time.perf_counter()
        s, t, as_json = decode_pairs(body, content_type, self.label_kind, columns, self.max_pairs)
        t1 = time.perf_counter()
        k = int(np.shape(s)[0]) if np.ndim(s) else 0
        if k > self.max_pairs:
            raise _Refused(413, f"{k:,} pairs is over this server's limit of {self.max_pairs:,} pairs a request "
                                "(distgrail serve --max-pairs): send smaller batches")
        if self.dispatcher is not None and self.front == "root" and k >= self.shard_min_pairs:
            answers, stats = self._sharded(s, t)
        else:
            answers, stats = self.answer(s, t)
        t2 = time.perf_counter()
        st = stats.as_dict()
        if not np.isfinite(st["queries_per_second"]):
            st["queries_per_second"] = None
        if as_json or JSON in accept:
            out = JSON, json.dumps({"answers": answers.tolist(), "stats": st}).encode(), {}, k
        else:
            out = NPY, encode_answers(answers), {STATS_HEADER: json.dumps(st)}, k
        if timing is not None:
            timing.update(decode=t1 - t0, answer=t2 - t1, encode=time.perf_counter() - t2)
        return out

    # -- HTTP handlers, on the event loop ----------------------------------------------------
    def _authorize(self, request):
        if self.token is None:
            return
        got = request.headers.get("Authorization", "")
        if not got:
            raise _Refused(401, "this server needs a bearer token: send 'Authorization: Bearer TOKEN' "
                                "(distgrail.connect(url, token=...); distgrail query --server reads "
                                "DISTGRAIL_TOKEN or --token-file)", {"WWW-Authenticate": 'Bearer realm="distgrail"'})
        scheme, _, value = got.partition(" ")
        value = value.strip()
        if not (value.isascii() and value.isprintable()):  # undecodable bytes come as surrogates: not ASCII
            raise _Refused(401, "the bearer token is not printable ASCII (RFC 6750), so it is not this server's",
                           {"WWW-Authenticate": 'Bearer realm="distgrail", error="invalid_token"'})
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.encode(), self.token.encode()):
            raise _Refused(403, "the bearer token is not this server's")

    async def query(self, request):
        from aiohttp import web

        t0 = time.perf_counter()
        self.requests += 1
        try:
            self._authorize(request)
            body, columns = await self._body(request)
            timing = {"read": time.perf_counter() - t0}
            self.in_flight += 1
            try:
                fut = asyncio.get_running_loop().run_in_executor(
                    self.pool, self._work, body, request.headers.get("Content-Type", ""),
                    request.headers.get("Accept", ""), columns, timing)
                try:
                    ctype, out, headers, k = await asyncio.wait_for(fut, self.timeout)
                except asyncio.TimeoutError:
                    raise _Refused(504, self._late()) from None
                self.bodies.give(body.obj)  # (answered: nothing reads the pairs any more)
            finally:
                self.in_flight -= 1
        except Exception as e:
            return await self._failed(request, e)
        self.batches += 1
        self.pairs += k
        took = time.perf_counter() - t0
        self.latency.append(took)
        timing["wait"] = max(0.0, took - sum(timing.values()))
        headers[TIMING_HEADER] = server_timing(timing)
        return web.Response(body=out, content_type=ctype, headers=headers)

    async def edges(self, request):
        """``POST /edges``: the module doc's update, answered with its report (JSON)."""
        from aiohttp import web

        self.requests += 1
        try:
            self._authorize(request)
            if self.token is None:
                raise _Refused(403, "updates need a token: start distgrail serve with --token-file (POST /edges "
                                    "changes the answers of every client)")
            body, columns = await self._body(request)  # (updates queue behind one thread: they count too)
            self.in_flight += 1
            try:  # (no timeout: an update once started is applied, whatever the client does)
                doc = await asyncio.get_running_loop().run_in_executor(
                    self.updater, self._update, body, request.headers.get("Content-Type", ""), columns)
            finally:
                self.in_flight -= 1
        except Exception as e:
            return await self._failed(request, e)
        return web.json_response(doc)

    async def _body(self, request):
        """``(body, columns)`` of a ``/query`` or ``/edges`` request: its size within ``max_body``
        (413), the body read (:meth:`_read`), then a slot free (503: counted once its body is in,
        so slow uploads take no slot) and ``?layout`` pairs or columns (400)."""
        size = request.content_length
        if size is not None and size > self.max_body:
            raise _Refused(413, self._too_big(f"{size:,} bytes"))
        body = await self._read(request, _decoded_size(request, size))
        if self.in_flight >= self.max_waiting:
            raise _Refused(503, f"busy: {self.in_flight} requests in flight (this server's limit); retry later",
                           {"Retry-After": "1"})
        layout = request.query.get("layout", "pairs")
        if layout not in ("pairs", "columns"):
            raise QueryError(f"layout must be 'pairs' (a (k, 2) body) or 'columns' ((2, k)), got {layout!r}")
        return body, layout == "columns"

    async def _failed(self, request, e):
        """The answer to a request (``/query``, ``/edges``) that raised ``e``, in its ``except``."""
        from aiohttp import web

        if isinstance(e, _Gone):  # not an error of this server's: one line, no answer (nobody to read it)
            self.gone += 1
            self.log(f"client {request.remote} gone: {e}")
            return web.Response(status=400)
        if isinstance(e, _Refused):
            if e.close:
                return await self._closing(request, self._error(e.status, str(e), e.headers))
            return self._error(e.status, str(e), e.headers)
        if isinstance(e, TooManyValues):  # a JSON body of more values than --max-pairs pairs: refused unparsed
            return self._error(413, str(e))
        if isinstance(e, (QueryError, GraphFormatError)):  # the pairs or edges: the message Index.query gives
            return self._error(400, str(e))
        if isinstance(e, DistGrailError):  # e.g. the GPU out of memory: the server goes on
            return self._error(500, str(e))
        traceback.print_exc(file=sys.stderr)  # a bug: say so, keep serving
        return self._error(500, f"internal error: {type(e).__name__}: {e}")

    async def _read(self, request, size: int | None):
        """The body, copied once as it arrives (``request.read()`` makes two copies; a bytearray
        grown chunk by chunk copies itself at each growth), its memory what has come, not what
        the Content-Length announced (a slow upload holds no slot, so nothing else bounds how
        many are arriving). With a Content-Length, into a buffer of that size whose pages the
        kernel gives only as bytes land in them (``np.empty``); chunked or compressed (``size``
        None), where the kernel counts untouched pages against a strict commit limit
        (``vm.overcommit_memory`` 2), or past what it can map at once, into a buffer that
        doubles when full, up to ``max_body`` (503 when memory runs out). Within its :class:`BodyClock` (else
        408, the connection to be closed); ``_Gone`` when the client closes the connection
        first. On any failure the buffer is let go at once (the error stored on the request
        keeps this frame until a full garbage collection). A memoryview of the bytes."""
        from aiohttp.web import RequestPayloadError

        at, most = 0, self.max_body if size is None else size
        first = most if size is not None and not _strict_commit() else min(most, BODY_FIRST_BYTES)
        try:
            buf = self.bodies.take(first) if first == most else _buffer(first)
        except MemoryError:  # more than this machine can map at once: grown as bytes come instead
            buf = _buffer(min(most, BODY_FIRST_BYTES))
        clock = BodyClock(request.content, self.body_timeout)
        self.receiving += 1
        try:
            async for chunk in request.content.iter_any():
                start, at = at, at + len(chunk)
                clock.got = at
                if at > most:
                    if size is None:
                        raise _Refused(413, self._too_big(f"{at:,}+ bytes (chunked or decoded)"))
                    raise _Refused(400, f"request body: longer than its Content-Length of {size:,} bytes")
                if at > buf.size:
                    try:
                        buf = _doubled(buf, start, min(most, max(at, 2 * buf.size)))
                    except MemoryError:
                        raise _Refused(503, f"request body: no memory on the server for {at:,} bytes now; retry "
                                            "later or send smaller batches", {"Retry-After": "5"}) from None
                buf[start:at] = np.frombuffer(chunk, dtype=np.uint8)
        except Late:
            buf = None
            of = "" if size is None else f" of {size:,}"
            raise _Refused(408, f"request body: {at:,}{of} bytes arrived in {clock.seconds():.1f} s; this server "
                                f"waits {self.body_timeout:g} s for a body, plus a second for each MiB that arrives "
                                "(distgrail serve --body-timeout): send it faster", close=True) from None
        except RequestPayloadError as e:  # a body aiohttp cannot decode (a corrupt gzip or deflate stream)
            buf = None
            why = " ".join(str(getattr(e.__cause__, "message", None) or e).split())
            raise _Refused(400, f"request body: {why}", close=True) from None  # (the rest is not read)
        except ConnectionError:
            buf = None
            had = f"{at:,} bytes of its chunked body" if size is None else f"{at:,} of its {size:,} bytes"
            raise _Gone(f"closed its connection mid-body, {had} in (not counted as an error)") from None
        except BaseException:
            buf = None
            raise
        finally:
            clock.stop()
            self.receiving -= 1
        if size is not None and at != size:
            buf = None
            raise _Refused(400, f"request body: {at:,} bytes, not the {size:,} its Content-Length announced")
        return memoryview(buf)[:at]

    @staticmethod
    async def _closing(request, response):
        """``response`` sent, then its connection closed at once (the rest of the body not read)."""
        response.force_close()
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:
            pass
        request.protocol.force_close()  # after the answer's bytes: the transport sends them, then closes
        return response

    def _too_big(self, size: str) -> str:
        return (f"request body of {size} is over this server's limit of {self.max_body:,} bytes "
                f"(what {self.max_pairs:,} pairs can take; distgrail serve --max-pairs): send smaller batches")

    def _error(self, status: int, message: str, headers: dict | None = None):
        from aiohttp import web

        self.errors[status] += 1
        return web.json_response({"error": message, "status": status}, status=status, headers=headers)

    async def health(self, request):
        from aiohttp import web

        self.requests += 1
        try:
            self._authorize(request)
        except _Refused as e:
            return self._error(e.status, str(e), e.headers)
        return web.json_response(self.describe())

    def describe(self) -> dict:
        """What ``GET /health`` answers: the index, the device, the counters and the latencies."""
        idx = self.index
        lat = np.array(self.latency, dtype=np.float64) * 1e3
        pct = (lambda q: round(float(np.percentile(lat, q)), 3)) if lat.size else (lambda q: None)
        return {"status": "ok", "version": __version__, "index": self.path,
                "source_name": idx.meta.get("source_name"), "n": idx.n, "C": idx.C, "dims": idx.dims,
                "supports": idx.supports, "node_labels": self.label_kind, "backend": self.be.name,
                "device": self.device_name, "workers": self.workers, "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 3), "requests": self.requests,
                "batches": self.batches, "queries": self.pairs, "in_flight": self.in_flight,
                "errors": {str(k): v for k, v in sorted(self.errors.items())},
                "latency_ms": {"p50": pct(50), "p99": pct(99), "max": pct(100), "over_requests": int(lat.size)},
                "receiving": self.receiving, "clients_gone": self.gone,
                "connections": None if self.gate is None else self.gate.connections,
                "rss_bytes": rss_bytes(), "body_buffers_bytes": self.bodies.held, "max_pairs": self.max_pairs, "max_body_bytes": self.max_body,
                "timeout_seconds": self.timeout, "body_timeout_seconds": self.body_timeout,
                "max_client_connections": self.max_client_connections, "max_waiting": self.max_waiting,
                "token": self.token is not None, "updates": self.updates, "edges_inserted": self.edges_inserted,
                **self._ranks()}

    def refused(self):
        """A connection over the bound on its address's connections (the gate's 429)."""
        self.errors[429] += 1

    def _ranks(self) -> dict:
        """``ranks`` (how many), ``rank_devices`` (each rank's), and under MPI the sharding counters."""
        if self.ranks is None:
            return {"ranks": 1, "rank_devices": [self.device_name]}
        d = self.dispatcher
        return {"ranks": len(self.ranks), "rank_devices": [r["device"] for r in self.ranks],
                "rank_processes": self.ranks, "front": self.front, "rank": self.rank,
                "shard_min_pairs": self.shard_min_pairs,
                "sharded_batches": d.batches, "sharded_pairs": d.pairs, "sharded_failed": d.failed,
                "sharded_running": d.running}

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.updater.shutdown(wait=True, cancel_futures=True)


def _decoded_size(request, size: int | None) -> int | None:
    """The size the body will have as ``_read`` receives it: its Content-Length, unless it is
    compressed (aiohttp hands on the decoded bytes, bounded then by ``max_body`` alone)."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    return size if encoding in ("", "identity") else None


@functools.lru_cache(maxsize=1)
def _strict_commit() -> bool:
    """Whether this Linux counts every allocated page against a commit limit
    (``vm.overcommit_memory`` 2): then a buffer of an announced size would take that much
    from everything else at once."""
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "2"
    except OSError:
        return False


class BodyBuffers:
    """Request bodies' buffers kept for the next requests: a fresh buffer's pages are faulted in
    one at a time as the body lands in it, on every request (docs/benchmarks.md, session 50). A buffer comes back only after its batch was answered (never after a
    timeout or an error, when a thread or a queued collective may still read it); at most
    :attr:`KEEP` are kept, the smallest let go first."""

    KEEP = 2

    def __init__(self):
        self._free: list = []
        self._lock = threading.Lock()

    def take(self, size: int) -> np.ndarray:
        """A buffer of exactly ``size`` bytes: a view of the smallest kept one that holds them,
        else a new one."""
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if b.size >= size]
            if fits:  # (by place, not list.remove: == of two arrays compares their elements)
                return self._free.pop(min(fits, key=lambda i: self._free[i].size))[:size]
        return _buffer(size)

    def give(self, buf) -> None:
        """Keep ``buf`` (a buffer :meth:`take` gave, or a view of one) for a later request."""
        if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1:
            return
        while buf.base is not None and isinstance(buf.base, np.ndarray):  # the whole buffer, not the view
            buf = buf.base
        with self._lock:
            if any(b is buf for b in self._free):
                return
            self._free.append(buf)
            self._free.sort(key=lambda b: b.size)
            del self._free[:-self.KEEP]

    @property
    def held(self) -> int:
        """Bytes of the buffers kept now."""
        with self._lock:
            return sum(b.size for b in self._free)


def _doubled(buf: np.ndarray, used: int, size: int) -> np.ndarray:
    """A buffer of ``size`` bytes holding the first ``used`` bytes of ``buf``."""
    out = _buffer(size)
    out[:used] = buf[:used]
    return out


def _buffer(size: int) -> np.ndarray:
    """``size`` bytes for a request body (pages given by the kernel as they are written)."""
    return np.empty(size, dtype=np.uint8)


def _device_name(be) -> str:
    if not be.is_gpu:
        return f"cpu ({cores.usable()} cores)"
    try:
        props = be.xp.cuda.runtime.getDeviceProperties(be.device)
        name = props["name"]
        return f"{name.decode() if isinstance(name, bytes) else name} (device {be.device})"
    except Exception:  # pragma: no cover - the name is only shown
        return f"GPU {be.device}"


def rss_bytes() -> int | None:
    """This process's resident memory now (Linux /proc), else its peak (getrusage), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource

            return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
        except Exception:  # pragma: no cover
            return None
