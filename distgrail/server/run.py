"""``distgrail serve``: open the index once, warm up, listen, answer until SIGTERM/SIGINT.

The port is bound first (a port in use fails at once, not after the index is read) but listened
on only when the server is ready: until the ready line, a client is refused, not kept waiting.
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import socket
import sys
import time

import numpy as np

from ..errors import DistGrailError

__all__ = ["serve", "bind", "warm_up", "url_of", "DEFAULT_PORT", "DEFAULT_MAX_PAIRS", "DEFAULT_TIMEOUT"]

DEFAULT_PORT = 7850
#: pairs a request may hold: 512 MiB of int64 pairs
DEFAULT_MAX_PAIRS = 1 << 25
DEFAULT_TIMEOUT = 60.0
#: pairs of the warm-up batches (random, seeded); the GPU also answers one batch of 1 M
WARM_PAIRS = 1 << 16
#: a GPU's batches of up to this size then find their scratch made
WARM_GPU_PAIRS = 1 << 20
#: seconds the server waits for the requests in flight when told to stop
SHUTDOWN_GRACE = 5.0


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); DistGrailError naming both."""
    if not 0 <= port <= 65535:
        raise DistGrailError(f"--port must be 0..65535, got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise DistGrailError(f"--host {host!r}: not an address of this machine ({e.strerror})") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise DistGrailError(f"cannot listen on {host}:{port} ({e.strerror})") from None
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def warm_up(service, say) -> dict:
    """Answer seeded random pairs through every path once: the prefilter, the search (CPU: the
    compiled search, numba's compile; GPU: the one-warp and the grid-wide search), and on a GPU one
    batch per pool thread at once, of up to 1 M pairs, so that each thread's stream and scratch
    exist. Returns what it did (``pairs``, ``searched``, ``seconds``)."""
    from ..query.stats import SearchOptions

    t = time.perf_counter()
    idx, be = service.index, service.be
    rng = np.random.default_rng(0)
    n = idx.n
    names = None if idx.node_labels is None else idx.node_labels.values  # the queries take labels

    def pairs(k):
        s, d = rng.integers(0, n, k), rng.integers(0, n, k)
        return (s, d) if names is None else (names[s], names[d])

    done = searched = 0
    if n == 0:
        return {"pairs": 0, "searched": 0, "seconds": 0.0}
    to_all = SearchOptions(visit_budget=-1, compiled_min_pairs=0)  # every searched pair down every search
    for _ in range(4):  # until some pair went to the search
        s, d = pairs(WARM_PAIRS)
        _, st = service.answer(s, d)
        done += s.size
        if st.searched:
            service.answer(s, d, search=to_all)
            done += s.size
            searched += st.searched
            break
    if be.is_gpu:
        k = min(WARM_GPU_PAIRS, service.max_pairs)
        s, d = pairs(k)
        for f in [service.pool.submit(service.answer, s, d) for _ in range(service.workers)]:
            f.result()
        done += k * service.workers
    else:
        service.pool.submit(service.answer, s[:1], d[:1]).result()
    out = {"pairs": done, "searched": searched, "seconds": time.perf_counter() - t}
    say(f"warm-up: {done:,} pairs in {out['seconds']:.2f} s, {searched:,} of them searched"
        + ("" if searched else " (no random pair needed the search: the search warms up on its first use)"))
    return out


def serve(index_path: str, *, host: str, port: int, backend: str, token: str | None, max_pairs: int,
          timeout: float, workers: int | None, quiet: bool, as_json: bool) -> int:
    """Run the server until SIGTERM or SIGINT; returns 0 (the exit status)."""
    try:
        from aiohttp import web
    except ImportError:
        raise DistGrailError("distgrail serve needs aiohttp: pip install 'distgrail[serve]'") from None
    import distgrail
    from ..gpu.backend import get_backend
    from .app import Service

    def say(text):
        if not quiet:
            print(f"distgrail: {text}", file=sys.stderr, flush=True)

    if max_pairs < 1:
        raise DistGrailError(f"--max-pairs must be at least 1, got {max_pairs}")
    if not timeout > 0:
        raise DistGrailError(f"--timeout must be a positive number of seconds, got {timeout}")
    if workers is not None and workers < 1:
        raise DistGrailError(f"--workers must be at least 1, got {workers}")
    t0 = time.perf_counter()
    sock = bind(host, port)
    try:
        if not is_loopback(host) and token is None:
            say(f"warning: serving on {host} without --token/--token-file: anyone who reaches this port can query")
        say(f"opening {index_path}")
        idx = distgrail.open_index(index_path)
        be = get_backend(backend)
        say(f"{idx.n:,} vertices, {idx.C:,} components, d={idx.dims}, K={idx.supports} "
            f"(opened in {time.perf_counter() - t0:.2f} s); loading the labels on {be.name}")
        idx.labels(be)
        service = Service(idx, be, max_pairs=max_pairs, timeout=timeout, token=token, workers=workers)
        try:
            warm = warm_up(service, say)
            asyncio.run(_run(web, service, sock, t0, warm, index_path, say, as_json))
        finally:
            service.close()
    finally:
        sock.close()
    return 0


async def _run(web, service, sock, t0, warm, index_path, say, as_json):
    import json

    app = web.Application(client_max_size=service.max_body)
    app.router.add_post("/query", service.query)
    app.router.add_get("/health", service.health)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.SockSite(runner, sock, shutdown_timeout=SHUTDOWN_GRACE)
    stop = asyncio.Event()
    caught = []
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda s=sig: (caught.append(s), stop.set()))
    try:
        await site.start()
        url = url_of(sock)
        ready = time.perf_counter() - t0
        be = service.be
        if as_json:
            print(json.dumps({"url": url, "index": index_path, "backend": be.name, "device": service.device_name,
                              "n": service.index.n, "ready_seconds": round(ready, 3), "warm_up": warm}), flush=True)
        print(f"distgrail: serving {index_path} on {url} (backend {be.name}, {service.device_name}, "
              f"n={service.index.n:,}, ready in {ready:.2f} s)", file=sys.stderr, flush=True)
        await stop.wait()
        say(f"stopping ({signal.Signals(caught[0]).name}): {service.batches:,} batches, {service.pairs:,} pairs "
            f"answered, {sum(service.errors.values()):,} refused")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runner.cleanup()
