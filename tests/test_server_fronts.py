"""``distgrail serve --front ranks`` under ``mpiexec``: every rank listens on the one port
(SO_REUSEPORT) and answers its own clients; real HTTP clients on fresh connections reach every
rank, each answering as BFS over the graph; updates sent to a rank > 0 go through rank 0 and
move every rank (checked against BFS over the graph plus the edges, on every rank); a bad request
to a rank > 0 is a 400 that it survives; SIGTERM ends every rank with 0 and rank 0 names every
rank's batches."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from test_server import MPIEXEC, TOKEN, Server, _env, _npy, needs_mpiexec
from test_server_updates import _send, graph, mpi_token_server  # noqa: F401 - the module fixture

pytest.importorskip("aiohttp", reason="distgrail serve needs the serve extra (launch/setup.sh installs it)")

#: fresh connections tried until one reaches a wanted rank (each a kernel's hash pick among the
#: ranks: the chance that 200 miss one of 3 ranks is 3 (2/3)^200)
TRIES = 200


def _client_on(url: str, rank: int):
    """A client whose kept-alive connection reached ``rank`` (fresh connections until one does)."""
    for _ in range(TRIES):
        c = distgrail.connect(url, token=TOKEN)
        if c.health()["rank"] == rank:
            return c
        c.close()
    raise AssertionError(f"no connection of {TRIES} reached rank {rank}")


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
def test_every_rank_answers_its_clients_and_updates_from_any_rank_move_all(graph, tmp_path, ranks):  # noqa: F811
    path, add, pairs, before, after = graph
    srv = mpi_token_server(path, tmp_path, ranks, "--front", "ranks")
    try:
        line = next(x for x in srv.lines if x.startswith("distgrail: serving"))
        assert f"on {ranks} ranks" in line and "every rank listening" in line, line
        for r in range(ranks):  # each rank answers a whole batch alone, as BFS
            c = _client_on(srv.url, r)
            got, st = c.query(pairs[:, 0], pairs[:, 1])
            h = c.health()
            assert h["rank"] == r and h["front"] == "ranks" and h["ranks"] == ranks and st.ranks == 1
            assert np.array_equal(got, before), r
            status, body = _send(srv.url, "/edges", _npy(np.array([[0, 10 ** 9]])))  # (a fresh connection)
            assert status == 400 and b"not a vertex of the index" in body
            c.close()
        # the edges in ranks - 1 updates, each sent to a rank > 0 (forwarded to rank 0), and one to rank 0
        parts = np.array_split(add, ranks)
        for r, part in zip([*range(1, ranks), 0], parts):
            c = _client_on(srv.url, r)
            doc = c.add_edges(part[:, 0], part[:, 1])
            assert doc["given"] == len(part) and c.health()["rank"] == r
            c.close()
        for r in range(ranks):  # every rank serves the graph plus every edge
            c = _client_on(srv.url, r)
            got, _ = c.query(pairs[:, 0], pairs[:, 1])
            h = c.health()
            assert np.array_equal(got, after), r
            assert h["updates"] == ranks and h["edges_inserted"] == len(add), h
            c.close()
    finally:
        status = srv.stop()
    assert status == 0, srv.lines
    said = "".join(srv.lines)
    assert f"batches on {ranks} ranks" in said and "(SIGTERM)" in said, said[-2000:]


@needs_mpiexec
def test_a_rank_whose_port_is_taken_fails_the_start_on_every_rank_with_2(tmp_path):
    """Rank 1 cannot share rank 0's port (planted: its bind fails as for a port held by a process
    without SO_REUSEPORT): one error, every rank ends with 2."""
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu").save(tmp_path / "g.h5")
    script = tmp_path / "taken.py"
    script.write_text(f"""
import sys
from mpi4py import MPI
import distgrail.server.run as run
from distgrail.errors import DistGrailError
bind = run.bind
def planted(host, port, share=False):
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise DistGrailError(f"cannot listen on {{host}}:{{port}} (planted: Address already in use)")
    return bind(host, port, share)
run.bind = planted
sys.argv = ["distgrail", "serve", {str(tmp_path / "g.h5")!r}, "--port", "0", "--backend", "cpu", "--front", "ranks"]
from distgrail.__main__ import main
sys.exit(main())
""")
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(script)], capture_output=True,
                       text=True, timeout=150, env=_env(MPIEXEC_TIMEOUT="100"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.count("beside the other ranks (--front ranks)") == 1 and "planted" in r.stderr, r.stderr[-2000:]


def test_front_is_checked_and_auto_picks_ranks_on_one_node_only():
    from distgrail.errors import DistGrailError
    from distgrail.server.run import check_options, choose_front

    check_options(1, 1.0, None, front="ranks")
    with pytest.raises(DistGrailError, match="--front must be one of auto, root, ranks, got 'all'"):
        check_options(1, 1.0, None, front="all")
    with pytest.raises(DistGrailError, match="--front must be one of auto, root, ranks, got 'all'"):
        choose_front("all", None, ["a"])
    with pytest.raises(DistGrailError, match="--shard-min-pairs is for --front root"):
        choose_front("ranks", 1000, ["a", "a"])
    assert choose_front("auto", None, ["a", "a", "a"]) == "ranks"
    assert choose_front("auto", None, ["a", "b"]) == "root"  # clients reach one node's ranks only
    assert choose_front("auto", 1000, ["a", "a"]) == "root"  # sharding asked for
    assert choose_front("ranks", None, ["a", "b"]) == "ranks" and choose_front("root", None, ["a"]) == "root"
    r = subprocess.run([sys.executable, "-m", "distgrail", "serve", "x.h5", "--front", "all"], capture_output=True,
                       text=True, env=_env())
    assert r.returncode == 2 and "--front" in r.stderr and "'all'" in r.stderr, r.stderr


def test_health_json_names_the_front(graph):  # noqa: F811
    """One process: no ``front`` key (nothing to choose), and ``--front ranks`` is accepted."""
    srv = Server(graph[0], "--front", "ranks")
    try:
        h = distgrail.connect(srv.url).health()
        assert "front" not in h and h["ranks"] == 1
        assert json.dumps(h)
    finally:
        assert srv.stop(signal.SIGINT) == 0, srv.lines


@pytest.mark.gpu
@needs_mpiexec
def test_gpu_both_ranks_answer_as_bfs_and_an_update_sent_to_rank_1_moves_both(graph, tmp_path):  # noqa: F811
    """On a GPU machine (one GPU shared, or two): ``--front ranks --backend gpu`` on 2 ranks; each
    rank's answers as BFS, before and after an update sent to rank 1 (forwarded to rank 0)."""
    path, add, pairs, before, after = graph
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    srv = Server(path, "--token-file", str(tok), "--backend", "gpu", "--share-gpus", "--front", "ranks",
                 launcher=(MPIEXEC, "-n", "2"), env=_env(MPIEXEC_TIMEOUT="300"), wait=300)
    try:
        assert srv.backend == "gpu", srv.lines
        for r in (0, 1):
            c = _client_on(srv.url, r)
            got, st = c.query(pairs[:, 0], pairs[:, 1])
            assert np.array_equal(got, before) and st.backend == "gpu" and st.ranks == 1, r
            c.close()
        c = _client_on(srv.url, 1)
        assert c.add_edges(add[:, 0], add[:, 1])["given"] == len(add)
        c.close()
        for r in (0, 1):
            c = _client_on(srv.url, r)
            assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], after), r
            c.close()
    finally:
        code = srv.stop(signal.SIGTERM, timeout=60, rank0=True)  # (0 under MPICH's mpiexec and Open MPI's mpirun)
    assert code == 0, srv.lines


@needs_mpiexec
def test_a_client_sends_a_big_batch_as_pieces_to_every_rank_at_once(graph, tmp_path, monkeypatch):  # noqa: F811
    """``connect`` of a ``--front ranks`` server of 2 ranks: 2 connections, one placed on each rank;
    a batch cut in pieces (PIECE_MIN_PAIRS lowered here) is answered in order, as BFS, each rank
    taking a piece; a bad pair in the second piece is named by its place in the whole batch."""
    from distgrail.errors import QueryError
    from distgrail.server import client as cl

    monkeypatch.setattr(cl, "PIECE_MIN_PAIRS", 500)
    path, add, pairs, before, after = graph
    srv = Server(path, "--front", "ranks", launcher=(MPIEXEC, "-n", "2"), env=_env(MPIEXEC_TIMEOUT="300"), wait=120)
    try:
        had = {r: _client_on(srv.url, r).health()["batches"] for r in (0, 1)}
        with distgrail.connect(srv.url) as c:
            assert c.connections == 2
            got, st = c.query(pairs[:, 0], pairs[:, 1])  # 4,000 pairs: 2 pieces of 2,000
            assert np.array_equal(got, before) and st.queries == len(pairs) and st.ranks == 2  # (the pieces' stats)
            now = {r: _client_on(srv.url, r).health()["batches"] for r in (0, 1)}
            assert all(now[r] - had[r] >= 1 for r in (0, 1)), (had, now)  # each rank answered a piece
            bad = pairs.copy()
            bad[3100, 0] = 10 ** 9
            with pytest.raises(QueryError, match=r"sources\[3100\]"):
                c.query(bad[:, 0], bad[:, 1])
    finally:
        assert srv.stop() == 0, srv.lines


def test_close_in_one_thread_leaves_another_threads_requests_alone(graph, monkeypatch):  # noqa: F811
    """One client shared by threads: ``close()`` called again and again in one thread while another
    sends batches (some in pieces) gives that thread no error and every answer right."""
    import threading
    import time

    from distgrail.server import client as cl

    monkeypatch.setattr(cl, "PIECE_MIN_PAIRS", 1000)
    path, add, pairs, before, after = graph
    srv = Server(path)
    try:
        c = distgrail.connect(srv.url, connections=2)
        errors, done, rounds = [], threading.Event(), [0]

        def user():
            try:
                for k in range(40):
                    n = 4000 if k % 2 else 500  # pieces, then one request
                    got, _ = c.query(pairs[:n, 0], pairs[:n, 1])
                    if not np.array_equal(got, before[:n]):
                        errors.append(f"round {k}: answers differ")
                    rounds[0] += 1
            except Exception as e:  # noqa: BLE001 - the test's finding
                errors.append(repr(e))
            finally:
                done.set()

        th = threading.Thread(target=user)
        th.start()
        while not done.is_set():
            c.close()
            time.sleep(0.005)
        th.join(60)
        assert not errors and rounds[0] == 40, errors[:3]
        c.close()
    finally:
        assert srv.stop() == 0, srv.lines


def test_one_process_server_pieces_on_several_connections(graph, monkeypatch):  # noqa: F811
    """``connections=3`` against one process: the pieces go at once, answered in order as BFS;
    ``close`` closes every connection the pieces opened; ``connections=0`` is refused."""
    from distgrail.server import client as cl
    from distgrail.server.client import ServerError

    monkeypatch.setattr(cl, "PIECE_MIN_PAIRS", 1000)
    path, add, pairs, before, after = graph
    srv = Server(path)
    try:
        c = distgrail.connect(srv.url, connections=3)
        got, _ = c.query(pairs[:, 0], pairs[:, 1])  # 4,000 pairs: pieces of 1,334
        assert np.array_equal(got, before) and len(c._opened) == 3  # (one connection per piece thread)
        opened = list(c._opened)
        c.close()
        assert all(conn.sock is None for conn in opened) and c._pool is None
        assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], before)  # usable again
        c.close()
        with pytest.raises(ServerError, match="connections must be at least 1"):
            distgrail.connect(srv.url, connections=0)
    finally:
        assert srv.stop() == 0, srv.lines


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _planted(tmp_path, body: str, *args) -> subprocess.Popen:
    """``mpiexec -n 2`` of a script that plants ``body`` (run at import, ``rank`` and ``run`` known),
    then runs ``distgrail serve INDEX --front ranks ARGS`` on every rank."""
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu").save(tmp_path / "g.h5")
    script = tmp_path / "planted.py"
    script.write_text(f"""
import asyncio, sys, time
from mpi4py import MPI
import distgrail.server.run as run
rank = MPI.COMM_WORLD.Get_rank()
{body}
sys.argv = ["distgrail", "serve", {str(tmp_path / "g.h5")!r}, "--backend", "cpu", "--front", "ranks", *{list(args)!r}]
from distgrail.__main__ import main
sys.exit(main())
""")
    return subprocess.Popen([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(MPIEXEC_TIMEOUT="100"))


@needs_mpiexec
def test_one_rank_whose_http_side_fails_while_serving_ends_every_rank_with_its_error(tmp_path):
    """Rank 1's HTTP side fails a second after the start (planted, a bug's RuntimeError): rank 0
    stops every rank, and every rank ends with rank 1's error, an internal error (status 1), printed
    once (not a hang, not a signal named, not exit 0)."""
    p = _planted(tmp_path, """
real = run._run
async def planted(*a, **k):
    task = asyncio.ensure_future(real(*a, **k))
    if rank != 1:
        return await task
    await asyncio.sleep(1.5)
    raise RuntimeError("planted: rank 1's HTTP side fails")
run._run = planted""", "--port", "0")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 1, err[-3000:]
    assert err.count("internal error: rank 1, serving HTTP: RuntimeError: planted: rank 1's HTTP side fails") == 1, \
        err[-3000:]
    assert "stopping (" not in err, err[-3000:]


@needs_mpiexec
def test_a_failed_start_refuses_an_update_already_sent_to_another_rank(tmp_path):
    """Rank 0's HTTP side cannot start (planted, after 4 s: a bug's RuntimeError) while rank 1
    listens and a client has sent it an update: the update is refused (503), every rank ends with
    the error (an internal error, status 1), none hangs."""
    port = _free_port()
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    p = _planted(tmp_path, """
real = run._run
async def planted(*a, **k):
    if rank == 0:
        await asyncio.sleep(4)
        raise RuntimeError("planted: rank 0's HTTP side cannot start")
    return await real(*a, **k)
run._run = planted""", "--port", str(port), "--token-file", str(tok))
    url = f"http://127.0.0.1:{port}"
    status = None
    for _ in range(300):  # until rank 1 listens
        try:
            status, body = _send(url, "/edges", _npy(np.array([[0, 1]])))
            break
        except OSError:
            import time

            time.sleep(0.05)
    out, err = p.communicate(timeout=120)
    assert status == 503 and b"the update was not applied" in body, (status, err[-3000:])
    assert p.returncode == 1 and "internal error: rank 0, listening on every rank" in err, err[-3000:]


@needs_mpiexec
def test_a_second_server_on_the_port_of_one_with_every_rank_listening_is_refused(graph):  # noqa: F811
    """SO_REUSEPORT would let a second ``--front ranks`` server share the port (the kernel then
    splitting clients between two servers): its rank 0 binds the port alone first, and fails."""
    first = Server(graph[0], "--front", "ranks", launcher=(MPIEXEC, "-n", "2"), env=_env(MPIEXEC_TIMEOUT="300"),
                   wait=120)
    try:
        port = first.url.rsplit(":", 1)[1]
        r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "distgrail", "serve", graph[0],
                            "--port", port, "--backend", "cpu", "--front", "ranks"], capture_output=True, text=True,
                           timeout=120, env=_env(MPIEXEC_TIMEOUT="100"))
        assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr[-2000:]
    finally:
        assert first.stop() == 0, first.lines


def test_a_rank_that_cannot_be_reached_is_given_up_once_not_at_every_piece(graph, monkeypatch):  # noqa: F811
    """A client told of two listening ranks on one node (planted) whose connections never reach the
    wanted rank (a one-process server): each piece thread tries PLACE_TRIES per rank once, then
    keeps its connection; a second batch asks /health no more. Only the ranks on the node reached
    count as listening."""
    from distgrail.server import client as cl

    monkeypatch.setattr(cl, "PIECE_MIN_PAIRS", 1000)
    path, add, pairs, before, after = graph
    srv = Server(path)
    try:
        c = distgrail.connect(srv.url, connections=2)
        c.info = dict(c.info, front="ranks", rank=0, rank_processes=[
            {"rank": 0, "host": "a"}, {"rank": 1, "host": "a"}, {"rank": 2, "host": "b"}])
        assert c._listening() == 2 and c._reachable() == [0, 1]
        calls = []
        real = c.health
        c.health = lambda: calls.append(1) or real()
        assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], before)
        first = len(calls)
        assert 0 < first <= 2 * cl.PLACE_TRIES * 2
        assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], before)
        assert len(calls) == first  # given up once: no more tries
        c.close()
    finally:
        assert srv.stop() == 0, srv.lines
