"""``distgrail serve``: open the index once, warm up, listen, answer until SIGTERM/SIGINT.

The port is bound first (a port in use fails at once, not after the index is read) but listened
on only when the server is ready: until the ready line, a client is refused, not kept waiting.

Under MPI (:func:`serve_ranks`) every rank opens the index on its own device and warms up; rank 0
listens, its HTTP event loop in a thread, while its main thread is the one that calls MPI (the
:class:`~distgrail.mpi.serve.Dispatcher`); the other ranks follow rank 0's batches
(:func:`distgrail.mpi.serve.follow`). SIGTERM/SIGINT on rank 0 stop every rank; on another rank
they are sent on to rank 0 (:class:`~distgrail.mpi.serve.SignalRelay`), which stops every rank. With
``front="ranks"`` (``serve --front ranks``) every rank listens on the same port
(``SO_REUSEPORT``; the kernel spreads the connections over the ranks of a node) and answers its
own clients' batches alone on its own GPU; rank 0 announces the server once every rank listens;
updates still go through rank 0's dispatcher (:class:`~distgrail.mpi.serve.Forwarder`).
``front="auto"`` (the default) picks one (:func:`choose_front`).

Against slow and greedy clients (:mod:`distgrail.server.limits`): a request's body may take
``--body-timeout`` seconds (default 30) plus a second per MiB that has arrived (408, connection
closed), and only then counts against the requests in flight (16 per worker, 503); one client
address may hold ``--max-client-connections`` connections open (default 16; 429); a kept-alive
connection idle for :data:`IDLE_TIMEOUT` seconds is closed.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

from ..errors import DistGrailError
from .limits import DEFAULT_BODY_TIMEOUT, DEFAULT_CLIENT_CONNECTIONS

__all__ = ["serve", "serve_ranks", "bind", "warm_up", "url_of", "DEFAULT_PORT", "DEFAULT_MAX_PAIRS", "DEFAULT_TIMEOUT",
           "DEFAULT_BODY_TIMEOUT", "DEFAULT_CLIENT_CONNECTIONS", "FRONTS"]

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
#: seconds a kept-alive connection may stay idle (aiohttp 3.14's own default is an hour; each
#: open connection counts against its address's --max-client-connections)
IDLE_TIMEOUT = 75.0
#: ``serve --front`` under MPI: rank 0 listens and shards big batches over the ranks ("root"),
#: or every rank listens (one port, ``SO_REUSEPORT``) and answers its own clients ("ranks"), or
#: one of them chosen (:func:`choose_front`)
FRONTS = ("auto", "root", "ranks")
#: what a rank > 0 relays to rank 0 (in place of a signal's number) when its HTTP side failed
HTTP_FAILED = 0


def bind(host: str, port: int, share: bool = False) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening); DistGrailError naming both.
    ``share``: ``SO_REUSEPORT``, the port shared with the other ranks' sockets (``--front ranks``;
    every socket of the group sets it, and the kernel spreads new connections over them)."""
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
        if share:
            if not hasattr(socket, "SO_REUSEPORT"):
                raise DistGrailError("--front ranks needs SO_REUSEPORT (Linux, BSD), which this system lacks: "
                                     "use --front root")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise DistGrailError(f"cannot listen on {host}:{port} ({e.strerror})") from None
    sock.setblocking(False)
    return sock


def bind_shared(host: str, port: int) -> socket.socket:
    """Rank 0's socket of ``--front ranks``: the port first bound alone (another server's shared
    port refuses that: it is in use), then bound again, shared (``SO_REUSEPORT``) for the other
    ranks to join. Another server's port is in use only once it listens: one started on the
    same port while the first is still starting (bound, not listening) is not refused."""
    probe = bind(host, port)
    port = probe.getsockname()[1]
    probe.close()
    return bind(host, port, True)


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
    from ..query.answer import have_numba
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
    elif SearchOptions().cpu_method(have_numba()) == "compiled":  # a batch down the compiled CPU path:
        # numba's import and its records now, not in a request ("auto" takes it once a process has
        # answered 4 M pairs, or once it is loaded)
        service.pool.submit(service.answer, s, d, SearchOptions(cpu_search="compiled", compiled_min_pairs=0)).result()
        done += s.size
    else:  # (no numba: the NumPy steps, warmed above; the pool's thread started)
        service.pool.submit(service.answer, s[:1], d[:1]).result()
    out = {"pairs": done, "searched": searched, "seconds": time.perf_counter() - t}
    say(f"warm-up: {done:,} pairs in {out['seconds']:.2f} s, {searched:,} of them searched"
        + ("" if searched else " (no random pair needed the search: the search warms up on its first use)"))
    return out


def choose_front(front: str, shard_min_pairs: int | None, hosts) -> str:
    """The ``--front`` a server of ranks on ``hosts`` runs with. ``auto``: every rank listening
    ("ranks") when they share one node and ``--shard-min-pairs`` was not given, since on one node
    a front end per rank serves many clients faster and a sharded batch does not answer sooner
    (docs/benchmarks.md, session 35); "root" across nodes (a client reaches the ranks of the node
    it addresses only; rank 0 shards its big batches over every node's GPUs) or when
    ``--shard-min-pairs`` asks for sharding."""
    if front not in FRONTS:
        raise DistGrailError(f"--front must be one of {', '.join(FRONTS)}, got {front!r}")
    if front == "ranks" and shard_min_pairs is not None:
        raise DistGrailError("--shard-min-pairs is for --front root: with --front ranks no batch is sharded")
    if front != "auto":
        return front
    return "root" if shard_min_pairs is not None or len(set(hosts)) > 1 else "ranks"


def check_options(max_pairs: int, timeout: float, workers: int | None, shard_min_pairs: int = 1,
                  body_timeout: float = DEFAULT_BODY_TIMEOUT,
                  max_client_connections: int = DEFAULT_CLIENT_CONNECTIONS, front: str = "root") -> None:
    if front not in FRONTS:
        raise DistGrailError(f"--front must be one of {', '.join(FRONTS)}, got {front!r}")
    if max_pairs < 1:
        raise DistGrailError(f"--max-pairs must be at least 1, got {max_pairs}")
    if not timeout > 0:
        raise DistGrailError(f"--timeout must be a positive number of seconds, got {timeout}")
    if workers is not None and workers < 1:
        raise DistGrailError(f"--workers must be at least 1, got {workers}")
    if shard_min_pairs < 1:
        raise DistGrailError(f"--shard-min-pairs must be at least 1, got {shard_min_pairs}")
    if not body_timeout > 0:
        raise DistGrailError(f"--body-timeout must be a positive number of seconds, got {body_timeout}")
    if max_client_connections < 1:
        raise DistGrailError(f"--max-client-connections must be at least 1, got {max_client_connections}")


def serve(index_path: str, *, host: str, port: int, backend: str, token: str | None, max_pairs: int,
          timeout: float, workers: int | None, quiet: bool, as_json: bool,
          body_timeout: float = DEFAULT_BODY_TIMEOUT, max_client_connections: int = DEFAULT_CLIENT_CONNECTIONS) -> int:
    """Run the server until SIGTERM or SIGINT; returns 0 (the exit status)."""
    try:
        from aiohttp import web
    except ImportError:
        raise DistGrailError("distgrail serve needs aiohttp: pip install 'distgrail[serve]'") from None
    import distgrail
    from ..gpu.backend import get_backend, ready_beside
    from .app import Service

    def say(text):
        if not quiet:
            print(f"distgrail: {text}", file=sys.stderr, flush=True)

    check_options(max_pairs, timeout, workers, body_timeout=body_timeout, max_client_connections=max_client_connections)
    t0 = time.perf_counter()
    sock = bind(host, port)
    try:
        if not is_loopback(host) and token is None:
            say(f"warning: serving on {host} without --token/--token-file: anyone who reaches this port can query")
        be = get_backend(backend)
        say(f"opening {index_path}")
        early = ready_beside(be)  # (the CUDA context and the upload's buffers while the index is read)
        idx = distgrail.open_index(index_path)
        early.join()
        say(f"{idx.n:,} vertices, {idx.C:,} components, d={idx.dims}, K={idx.supports} "
            f"(opened in {time.perf_counter() - t0:.2f} s); loading the labels on {be.name}")
        idx.labels(be)
        service = Service(idx, be, max_pairs=max_pairs, timeout=timeout, token=token, workers=workers,
                          body_timeout=body_timeout, max_client_connections=max_client_connections, log=say)
        del idx  # the service holds the index: one replaced by an update (POST /edges) is freed
        try:
            warm = warm_up(service, say)
            asyncio.run(_run(web, service, sock, t0, warm, index_path, say, as_json))
        finally:
            service.close()
    finally:
        sock.close()
    return 0


def serve_ranks(comm, index_path: str, *, host: str, port: int, backend: str, share_gpus: bool,
                token: str | None, max_pairs: int, timeout: float, workers: int | None, shard_min_pairs: int,
                quiet: bool, as_json: bool, body_timeout: float = DEFAULT_BODY_TIMEOUT,
                max_client_connections: int = DEFAULT_CLIENT_CONNECTIONS, front: str = "auto") -> int:
    """Collective: the server over every rank of ``comm`` until SIGTERM/SIGINT on any rank; 0 on
    every rank. Start-up failures on any rank are the same RankError on every rank. ``front``:
    :data:`FRONTS` (module doc); ``shard_min_pairs`` None: not given (the default, with
    ``front`` root)."""
    from ..gpu.backend import get_backend, ready_beside
    from ..mpi.binding import bind_gpu
    from ..mpi.errors import RankError, run_shared
    from ..mpi.opening import open_on_ranks
    from ..mpi.query import SharedBatches, same_index_everywhere
    from ..mpi.serve import POLL, POLL_FORWARDED, Dispatcher, Forwarder, absorb_late_signals, follow, warm_batch
    from .app import SHARD_MIN_PAIRS, Service

    me = comm.Get_rank()
    root = me == 0
    hosts = comm.allgather(socket.gethostname())

    def say(text):
        if root and not quiet:
            print(f"distgrail: {text}", file=sys.stderr, flush=True)

    caught, box = [], {}

    def on_signal(sig, frame):  # main thread, between bytecodes: note it; rank 0 stops its dispatcher (another
        # rank's follow sends it to rank 0)
        caught.append(sig)
        if "dispatcher" in box:
            box["dispatcher"].stop()  # a SimpleQueue put: safe here

    before = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    sock = None
    try:
        web, front = run_shared(comm, "checking the options", _web_and_options, max_pairs, timeout, workers,
                                shard_min_pairs, body_timeout, max_client_connections, front, hosts)
        every = front == "ranks"  # a front end on every rank
        shard_min_pairs = SHARD_MIN_PAIRS if shard_min_pairs is None else shard_min_pairs
        t0 = time.perf_counter()
        sock = run_shared(comm, f"listening on {host}:{port}", (bind_shared if every else bind) if root else None,
                          host, port)
        if every:  # the same port on every rank (rank 0's, when --port 0 let it choose)
            port = comm.bcast(sock.getsockname()[1] if root else None, root=0)
            mine = run_shared(comm, f"listening on {host}:{port} beside the other ranks (--front ranks)",
                              None if root else bind, host, port, True)
            sock = sock if root else mine
        if root and not is_loopback(host) and token is None:
            say(f"warning: serving on {host} without --token/--token-file: anyone who reaches this port can query")
        say(f"opening {index_path} on {comm.Get_size()} ranks")
        dev = bind_gpu(comm, backend, share=share_gpus)
        be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
        early = ready_beside(be)  # (the CUDA context and the upload's buffers while the index is read)
        idx = open_on_ranks(comm, index_path)  # (the values checked once, by rank 0)
        early.join()
        run_shared(comm, "comparing the index of every rank", same_index_everywhere, comm, idx)
        say(f"{idx.n:,} vertices, {idx.C:,} components, d={idx.dims}, K={idx.supports} "
            f"(opened in {time.perf_counter() - t0:.2f} s); loading the labels on {be.name} on every rank")
        run_shared(comm, "loading the labels", idx.labels, be)
        if root and mpi_thread_level() < 1:  # MPI_THREAD_FUNNELED: rank 0 has threads (HTTP, small batches)
            say("warning: this MPI library gives MPI_THREAD_SINGLE; rank 0 calls MPI from its main thread only, "
                "but runs the HTTP server and small batches in other threads")
        service = Service(idx, be, max_pairs=max_pairs, timeout=timeout, token=token, shard_min_pairs=shard_min_pairs,
                          workers=workers if root or every else 1,  # else other ranks answer in their main thread
                          body_timeout=body_timeout, max_client_connections=max_client_connections, log=say,
                          front=front)
        service.rank = me
        shared, in_step = None, False  # close the shared arrays (a collective) only with every rank in step
        try:
            if not every:
                shared = SharedBatches(comm)  # node-shared batch arrays, kept while serving (one node only)
            warm = run_shared(comm, "warming up", warm_up, service, say if root else (lambda text: None))
            if idx.n and not every:  # the sharded path once on every rank
                rng = np.random.default_rng(1)
                pair = (rng.integers(0, idx.n, WARM_PAIRS), rng.integers(0, idx.n, WARM_PAIRS)) if root else ()
                warm_batch(comm, idx, be, *pair, shared=shared)
            ranks = comm.gather({"rank": me, "host": socket.gethostname(), "pid": os.getpid(),
                                 "device": service.device_name})
            # from here the served version is held once (follow's argument, the dispatcher's and the
            # service's): one replaced by an update (POST /edges) is freed, on every rank
            held = [idx]
            del idx
            service.ranks = ranks = comm.bcast(ranks, root=0)
            if every:
                if root:
                    service.dispatcher = box["dispatcher"] = Dispatcher(comm, held.pop(), be, None, service.adopt,
                                                                        POLL_FORWARDED)
                    main = service.dispatcher.run
                else:
                    service.dispatcher = Forwarder(comm)
                    main = functools.partial(follow, comm, held.pop(), be, caught=caught, forward=service.dispatcher,
                                             on_version=service.adopt)
                if caught and root:  # a signal during the start: stop at once
                    service.dispatcher.stop()
                _serve_front(comm, web, service, sock, t0, warm, index_path, say, as_json, caught, main)
                in_step = True
                return 0
            if not root:
                service.index = None  # (the service answers nothing here: rank 0's batches come to follow)
                follow(comm, held.pop(), be, shared=shared, caught=caught)
                in_step = True  # (rank 0's STOP header)
                return 0
            service.dispatcher = box["dispatcher"] = Dispatcher(comm, held.pop(), be, shared, service.adopt, POLL)
            if caught:  # a signal during the start: stop at once
                service.dispatcher.stop()
            _serve_root(web, service, sock, t0, warm, index_path, say, as_json, caught)
            in_step = True
        except RankError:  # every rank has it, at the same step
            in_step = True
            raise
        finally:
            service.close()
            if shared is not None and in_step:
                shared.close()
            # else some rank failed alone: the error ends the job (MPI_Abort), which frees the arrays;
            # a collective here would wait for ranks that never come
    finally:
        if sock is not None:
            sock.close()
        absorb_late_signals(before)  # (a launcher's copy of the stopping signal, arriving late)
    return 0


def mpi_thread_level() -> int:
    """MPI's thread support in this process: 0 SINGLE, 1 FUNNELED, 2 SERIALIZED, 3 MULTIPLE.
    Serving needs FUNNELED: after the start only the main thread of each rank calls MPI."""
    from ..mpi.errors import mpi

    MPI = mpi()
    return [MPI.THREAD_SINGLE, MPI.THREAD_FUNNELED, MPI.THREAD_SERIALIZED, MPI.THREAD_MULTIPLE].index(
        MPI.Query_thread())


def _web_and_options(max_pairs, timeout, workers, shard_min_pairs, body_timeout, max_client_connections, front, hosts):
    """``(aiohttp.web, the front chosen)``; the options checked."""
    front = choose_front(front, shard_min_pairs, hosts)
    check_options(max_pairs, timeout, workers, 1 if shard_min_pairs is None else shard_min_pairs, body_timeout,
                  max_client_connections, front)
    try:
        from aiohttp import web
    except ImportError:
        raise DistGrailError("distgrail serve needs aiohttp: pip install 'distgrail[serve]'") from None
    return web, front


def _serve_root(web, service, sock, t0, warm, index_path, say, as_json, caught):
    """Rank 0: HTTP in a thread, the dispatcher here until stopped; then HTTP ends and every rank
    has been told to stop. A failure of the HTTP thread stops the ranks, then is raised."""
    d = service.dispatcher
    h = _HttpThread((web, service, sock, t0, warm, index_path, say, as_json), d.stop)  # its end: the ranks' too
    try:
        d.run()  # until a signal (or the HTTP thread's end) stops it; then every rank is told
    finally:
        h.end()
    if not caught and d.peer_signal is not None:  # a signal to another rank stopped every rank
        caught.append(d.peer_signal[0])
        where = f" on rank {d.peer_signal[1]}"
    else:
        where = ""
    if caught:
        say(f"stopping ({signal.Signals(caught[0]).name}{where}): {service.batches:,} batches ({d.batches:,} over "
            f"{len(service.ranks)} ranks), {service.pairs:,} pairs answered, {sum(service.errors.values()):,} refused")
    if h.error is not None:
        raise h.error


class _HttpThread:
    """The HTTP server (:func:`_run` of ``args``) on a thread of its own, started here, beside the
    thread that calls MPI: :attr:`started` once it listens (or has ended), :attr:`error` what it
    raised, ``on_end()`` called in the thread when it ends for any reason; :meth:`end` stops it."""

    def __init__(self, args, on_end, announce: bool = True):
        self.started, self.error, self._stop = threading.Event(), None, None

        def on_start(loop, stop):
            self._stop = lambda: _stop_loop(loop, stop)
            self.started.set()

        def http():
            try:
                asyncio.run(_run(*args, on_start, announce=announce))
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                self.error = e
            finally:
                self.started.set()
                on_end()

        self.thread = threading.Thread(target=http, name="distgrail-http", daemon=True)
        self.thread.start()

    def end(self) -> None:
        """Stop the server (nothing when it has ended) and wait for its thread."""
        self.started.wait()
        if self._stop is not None:
            self._stop()
        self.thread.join()


def _serve_front(comm, web, service, sock, t0, warm, index_path, say, as_json, caught, main):
    """A front end on every rank (``--front ranks``): HTTP in a thread, ``main`` here (rank 0: the
    dispatcher's loop; another rank: :func:`~distgrail.mpi.serve.follow`) until every rank is told
    to stop; rank 0 announces the server once every rank listens, and at the end the batches of
    every rank. A rank whose HTTP side ends by itself stops every rank (rank 0: its dispatcher;
    another rank: :data:`HTTP_FAILED` relayed to rank 0 as a signal would be), and its error is
    then every rank's (a RankError: every rank ends with 2). Updates still waiting when serving
    ends before its time (a failed start) are refused here, so that no update thread waits."""
    from ..mpi.errors import run_shared

    root = comm.Get_rank() == 0
    stopping = []

    def on_end():  # (the HTTP thread)
        if root:
            service.dispatcher.stop()  # the HTTP side ended: so do the ranks
        elif not stopping:
            caught.append(HTTP_FAILED)  # relayed to rank 0 (follow), which stops every rank

    def http_ok():
        if h.error is not None:
            raise h.error

    h = _HttpThread((web, service, sock, t0, warm, index_path, say, as_json), on_end, announce=False)
    ended = False
    try:
        h.started.wait()
        run_shared(comm, "listening on every rank", http_ok)
        if root:
            _announce(service, index_path, service.url, time.perf_counter() - t0, warm, as_json)
        main()
        ended = True
    finally:
        if not ended:
            service.dispatcher.abandon()
        stopping.append(True)
        h.end()
    served = comm.gather((service.batches, service.pairs, sum(service.errors.values())), root=0)
    d = service.dispatcher
    signalled = [x for x in caught if x != HTTP_FAILED]
    if root and (signalled or (d.peer_signal is not None and d.peer_signal[0] != HTTP_FAILED)):
        sig, where = (signalled[0], "") if signalled else (d.peer_signal[0], f" on rank {d.peer_signal[1]}")
        b, p, e = (sum(x) for x in zip(*served))
        say(f"stopping ({signal.Signals(sig).name}{where}): {b:,} batches on {len(served)} ranks "
            f"({', '.join(f'{x[0]:,}' for x in served)}), {p:,} pairs answered, {e:,} refused")
    run_shared(comm, "serving HTTP", http_ok)  # a rank's HTTP failure: every rank's error


def _stop_loop(loop, stop) -> None:
    """Set ``stop`` on ``loop`` from another thread; nothing when the loop has ended already."""
    try:
        loop.call_soon_threadsafe(stop.set)
    except RuntimeError:  # closed: its asyncio.run is over
        pass


def _announce(service, index_path: str, url: str, ready: float, warm: dict, as_json: bool) -> None:
    """The ready line on stderr (and with ``as_json`` the JSON line on stdout)."""
    import json

    if as_json:
        ranks = service.describe()["rank_devices"]
        print(json.dumps({"url": url, "index": index_path, "backend": service.be.name, "device": service.device_name,
                          "ranks": len(ranks), "rank_devices": ranks, "n": service.index.n,
                          "ready_seconds": round(ready, 3), "warm_up": warm}), flush=True)
    print(ready_text(service, index_path, url, ready), file=sys.stderr, flush=True)


def ready_text(service, index_path: str, url: str, ready: float) -> str:
    be, idx = service.be, service.index
    if service.ranks is None:
        where = f"backend {be.name}, {service.device_name}"
    else:
        devices = sorted(set(r["device"] for r in service.ranks))
        how = ("every rank listening, each answering its own clients" if service.front == "ranks"
               else f"batches of {service.shard_min_pairs:,}+ pairs sharded")
        where = f"backend {be.name} on {len(service.ranks)} ranks, {'; '.join(devices)}; {how}"
    return f"distgrail: serving {index_path} on {url} ({where}, n={idx.n:,}, ready in {ready:.2f} s)"


#: characters of aiohttp's reason kept in the log line of a malformed request
MALFORMED_MOST = 300


class _MalformedOneLine:
    """A filter on aiohttp's request logger (``aiohttp.server``): a request its HTTP parser
    refused (a 400 already sent: a control character in a header, a line without a colon,
    garbage for a request line) is logged as one line naming the client and the reason, not as
    ``Error handling request`` and a traceback; every other record passes as it is."""

    def filter(self, record) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            who = record.args[0] if isinstance(record.args, tuple) and record.args else "a client"
            why = " ".join(str(getattr(exc, "message", "") or exc).split())
            if len(why) > MALFORMED_MOST:  # (aiohttp's message quotes what it could not parse: up to
                # 64 KiB of a body sent after an HTTP/1.0 request without a Content-Length)
                why = why[:MALFORMED_MOST - 3] + "..."
            record.msg, record.args = "distgrail: a malformed HTTP request from %s refused (400): %s", (who, why)
            record.exc_info = record.exc_text = None
        return True


def _quiet_malformed() -> None:
    """Installs :class:`_MalformedOneLine` on ``aiohttp.server`` once per process."""
    import logging

    log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedOneLine) for f in log.filters):
        log.addFilter(_MalformedOneLine())


async def _run(web, service, sock, t0, warm, index_path, say, as_json, on_start=None, announce=True):
    """The HTTP server until stopped: by SIGTERM/SIGINT (one process), or by the ``stop`` event
    that ``on_start(loop, stop)`` is handed once listening (under MPI, from another thread).
    The socket's connections go through the service's :class:`~distgrail.server.limits.Gate`
    (the bound on one address's connections), then to aiohttp. ``announce``: print the ready
    line once listening (else the caller does, from ``service.url``)."""
    from .limits import Gate

    _quiet_malformed()
    app = web.Application(client_max_size=service.max_body)
    app.router.add_post("/query", service.query)
    app.router.add_post("/edges", service.edges)
    app.router.add_get("/health", service.health)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=IDLE_TIMEOUT,
                           shutdown_timeout=SHUTDOWN_GRACE)
    await runner.setup()
    service.gate = Gate(runner.server, service.max_client_connections, service.refused)
    listening = None
    stop = asyncio.Event()
    caught = []
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if on_start is None else ()
    for sig in signals:
        loop.add_signal_handler(sig, lambda s=sig: (caught.append(s), stop.set()))
    try:
        listening = await loop.create_server(service.gate, sock=sock, backlog=128)
        service.url = url = url_of(sock)
        if announce:
            _announce(service, index_path, url, time.perf_counter() - t0, warm, as_json)
        if on_start is not None:
            on_start(loop, stop)
        await stop.wait()
        if caught:
            say(f"stopping ({signal.Signals(caught[0]).name}): {service.batches:,} batches, {service.pairs:,} "
                f"pairs answered, {sum(service.errors.values()):,} refused")
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        if listening is not None:
            listening.close()  # no new connections; those open end in runner.cleanup (SHUTDOWN_GRACE)
        service.gate.close()
        await runner.cleanup()
