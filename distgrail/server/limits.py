"""What bounds slow and greedy clients of ``distgrail serve``: the time a request's body may take
(``--body-timeout``, :class:`BodyClock`) and the connections one client address holds open
(``--max-client-connections``, :class:`Gate`, in front of aiohttp).

A body may take ``body_timeout`` seconds to arrive, plus a second for each :data:`BODY_RATE`
bytes that have arrived: a client sending 1 MiB/s or more is never cut, one that trickles is
cut after about ``body_timeout`` seconds whatever its Content-Length announced (the server
answers 408 and closes the connection; :mod:`distgrail.server.app`).

:class:`Gate` is the protocol factory of the listening socket. Each connection it accepts is
counted under its peer's address and handed to aiohttp's own protocol; one from an address that
already holds ``limit`` open connections (idle kept-alive ones included) is answered at once,
before aiohttp sees it: ``429 Too Many Requests`` with a one-line JSON message, ``Retry-After: 1``
and ``Connection: close``. What that client sends is then read and dropped until it closes, for
:data:`LINGER` seconds at most (closing at once, with its request unread, would reset the
connection, and the client might lose the answer).

Standard library only; the aiohttp protocol arrives as ``factory``, the body's stream as ``stream``.
"""

from __future__ import annotations

import asyncio
import collections
import json

__all__ = ["Gate", "BodyClock", "Late", "LINGER", "BODY_RATE", "DEFAULT_BODY_TIMEOUT", "DEFAULT_CLIENT_CONNECTIONS"]

#: seconds a request's body may take to arrive, beyond a second per BODY_RATE bytes (--body-timeout)
DEFAULT_BODY_TIMEOUT = 30.0
#: bytes a second: past its body_timeout, a body must have come at least this fast on average
BODY_RATE = 1 << 20
#: connections one client address may hold open (--max-client-connections); the client keeps one
#: per thread, and every local client of a server on 127.0.0.1 has the same address
DEFAULT_CLIENT_CONNECTIONS = 16
#: seconds a refused connection is read (and dropped) until its client closes it
LINGER = 1.0


class Late(Exception):
    """Set on a body's stream when its time is up (the reader then raises it)."""


class BodyClock:
    """A body's deadline: ``budget`` seconds from now, plus a second per BODY_RATE bytes ``got``
    (the reader adds to it). One timer, moved on only when it fires; at the deadline
    :class:`Late` is set on ``stream`` (an aiohttp StreamReader), whose reader then raises it."""

    def __init__(self, stream, budget: float):
        self.loop = asyncio.get_running_loop()
        self.stream, self.budget, self.got = stream, float(budget), 0
        self.start = self.loop.time()
        self.timer = self.loop.call_at(self.start + self.budget, self._check)

    def _check(self):
        due = self.start + self.budget + self.got / BODY_RATE
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._check)
        else:
            self.stream.set_exception(Late())

    def seconds(self) -> float:
        return self.loop.time() - self.start

    def stop(self):
        self.timer.cancel()


class Gate:
    """Protocol factory: ``factory()``'s protocol for each accepted connection, unless its address
    already holds ``limit``; ``on_refused()`` is called for each connection refused."""

    def __init__(self, factory, limit: int, on_refused=None):
        self.factory, self.limit, self.on_refused = factory, int(limit), on_refused
        #: open connections by client address (those refused not counted)
        self.open: collections.Counter = collections.Counter()
        self._refusing: set = set()

    def __call__(self) -> asyncio.Protocol:
        return _Connection(self)

    @property
    def connections(self) -> int:
        return sum(self.open.values())

    def message(self, host: str) -> str:
        return (f"too many connections: {self.limit} connections from {host} are open, this server's limit "
                "for one client address (distgrail serve --max-client-connections); close idle ones or retry later")

    def close(self) -> None:
        """Close the refused connections still lingering (the server stops)."""
        for transport in list(self._refusing):
            transport.close()


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol (``inner``) behind a count, or a refusal."""

    def __init__(self, gate: Gate):
        self.gate, self.inner, self.host, self.transport, self.timer = gate, None, None, None, None

    def connection_made(self, transport):
        gate = self.gate
        peer = transport.get_extra_info("peername")
        self.host = peer[0] if isinstance(peer, (tuple, list)) else str(peer)
        self.transport = transport
        if gate.open[self.host] >= gate.limit:
            self._refuse(transport)
            return
        gate.open[self.host] += 1
        self.inner = gate.factory()
        self.inner.connection_made(transport)

    def _refuse(self, transport):
        gate = self.gate
        body = json.dumps({"error": gate.message(self.host), "status": 429}).encode()
        transport.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\n"
                        b"Content-Length: %d\r\nRetry-After: 1\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        if transport.can_write_eof():
            transport.write_eof()
        gate._refusing.add(transport)
        self.timer = asyncio.get_running_loop().call_later(LINGER, transport.close)
        if gate.on_refused is not None:
            gate.on_refused()

    def data_received(self, data):
        if self.inner is not None:
            self.inner.data_received(data)  # else: a refused connection's request, dropped

    def eof_received(self):
        if self.inner is not None:
            return self.inner.eof_received()
        return False  # refused: the client has finished; the transport closes

    def pause_writing(self):
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self):
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc):
        gate = self.gate
        if self.inner is None:
            if self.timer is not None:
                self.timer.cancel()
            gate._refusing.discard(self.transport)
            return
        gate.open[self.host] -= 1
        if gate.open[self.host] <= 0:
            del gate.open[self.host]
        self.inner.connection_lost(exc)
