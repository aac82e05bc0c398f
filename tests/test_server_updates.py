"""``POST /edges`` of ``distgrail serve`` (distgrail/server/app.py), with real HTTP clients: edges
inserted while clients query; every batch answered wholly by the index before or wholly by the
one after (checked against BFS over each graph); then every answer is the updated graph's; the
token required; bad edges a 400 that the server survives; /health counts the updates."""

from __future__ import annotations

import io
import json
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import QueryError
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from test_server import MPIEXEC, TOKEN, Server, _env, _npy, needs_mpiexec


def _send(url, path, body, token=TOKEN):
    h = {"Content-Type": "application/x-npy"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=body, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A paper DAG, its index file, the new edges (cycle-closing ones among them), query pairs and
    the BFS answers before and after the edges."""
    g = generate("paper", 400, 3, seed=2)
    path = tmp_path_factory.mktemp("upd") / "g.h5"
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu").save(path)
    rng = np.random.default_rng(9)
    add = np.stack([rng.integers(0, g.n, 30), rng.integers(0, g.n, 30)], 1)
    qs, qt = rng.integers(0, g.n, 4000), rng.integers(0, g.n, 4000)
    before = bfs_reachable(*csr_of(g), qs, qt)
    after = bfs_reachable(*csr_of(EdgeGraph(g.n, np.r_[g.src, add[:, 0]], np.r_[g.dst, add[:, 1]])), qs, qt)
    assert (before != after).any()  # the edges change answers: the test can tell the versions apart
    return str(path), add, np.stack([qs, qt], 1), before, after


def test_updates_while_clients_query(graph, tmp_path):
    path, add, pairs, before, after = graph
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    srv = Server(path, "--token-file", str(tok))
    try:
        seen, stop = [], threading.Event()

        def client():
            while not stop.is_set():
                status, body = _send(srv.url, "/query", _npy(pairs))
                seen.append((status, np.load(io.BytesIO(body)) if status == 200 else body))

        threads = [threading.Thread(target=client) for _ in range(3)]
        for th in threads:
            th.start()
        status, body = _send(srv.url, "/edges", _npy(add))
        doc = json.loads(body)
        assert status == 200 and doc["given"] == 30 == doc["edges_inserted"] and doc["update"] == 1, doc
        stop.set()
        for th in threads:
            th.join(60)
        assert seen and all(s == 200 for s, _ in seen), [b for s, b in seen if s != 200][:2]
        for _, got in seen:  # one version per batch
            assert np.array_equal(got, before) or np.array_equal(got, after)
        status, body = _send(srv.url, "/query", _npy(pairs))
        assert status == 200 and np.array_equal(np.load(io.BytesIO(body)), after)
        health = json.loads(urllib.request.urlopen(urllib.request.Request(
            srv.url + "/health", headers={"Authorization": f"Bearer {TOKEN}"}), timeout=30).read())
        assert health["updates"] == 1 and health["edges_inserted"] == 30 and health["C"] == doc["C"]
        # bad edges: a 400 naming the vertex; the server goes on, its index unchanged
        status, body = _send(srv.url, "/edges", _npy(np.array([[0, 10_000]], np.int64)))
        assert status == 400 and "is not a vertex of the index" in json.loads(body)["error"]
        status, body = _send(srv.url, "/edges", _npy(add), token="wrong")
        assert status == 403
        status, body = _send(srv.url, "/query", _npy(pairs))
        assert status == 200 and np.array_equal(np.load(io.BytesIO(body)), after)
        # the Python client: an edge already implied changes nothing; a new one does
        c = distgrail.connect(srv.url, token=TOKEN)
        rep = c.add_edges(add[:1, 0], add[:1, 1])
        assert rep["given"] == 1 and rep["added"] == 0 and rep["update"] == 2 and rep["edges_inserted"] == 31
        with pytest.raises(QueryError, match="is not a vertex"):  # a 400: the message insert_edges gives
            c.add_edges([0], [10_000])
    finally:
        assert srv.stop() == 0, srv.lines


def test_updates_need_a_token(graph, tmp_path, capsys):
    from distgrail.cli import main

    path, add, *_ = graph
    srv = Server(path)
    try:
        status, body = _send(srv.url, "/edges", _npy(add), token=None)
        assert status == 403 and "updates need a token" in json.loads(body)["error"]
        # update --server says so from the server's /health, before it reads the edges (a bad file here)
        (tmp_path / "bad.txt").write_text("1 2\n3 400\n")
        assert main(["update", "--server", srv.url, "--add", str(tmp_path / "bad.txt")]) == 2
        err = capsys.readouterr().err
        assert "started without a token" in err and "bad.txt" not in err, err
    finally:
        assert srv.stop() == 0, srv.lines


def mpi_token_server(path, tmp_path, ranks, *options):
    """``mpiexec -n RANKS ... serve PATH --token-file`` (the token :data:`TOKEN`) with ``options``."""
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    return Server(path, "--token-file", str(tok), *options, launcher=(MPIEXEC, "-n", str(ranks)),
                  env=_env(MPIEXEC_TIMEOUT="300"), wait=120)


@needs_mpiexec
@pytest.mark.parametrize("ranks", [2, 3])
def test_updates_under_mpiexec_move_every_rank_together(graph, tmp_path, ranks):
    """``mpiexec -n 2|3 ... serve --token-file``: ``POST /edges`` is inserted by every rank, between
    two sharded batches; afterwards the sharded batches (every rank) and the small ones (rank 0
    alone) both answer as BFS over the graph plus the edges; bad edges are a 400 that changes no
    rank's version."""
    path, add, pairs, before, after = graph
    srv = mpi_token_server(path, tmp_path, ranks, "--shard-min-pairs", "1000")
    try:
        c = distgrail.connect(srv.url, token=TOKEN)
        got, st = c.query(pairs[:, 0], pairs[:, 1])
        assert st.ranks == ranks and np.array_equal(got, before)
        status, body = _send(srv.url, "/edges", _npy(np.array([[0, 10 ** 9]])))
        assert status == 400 and b"not a vertex of the index" in body
        doc = c.add_edges(add[:, 0], add[:, 1])
        assert doc["update"] == 1 and doc["given"] == len(add)
        big, st = c.query(pairs[:, 0], pairs[:, 1])
        small, st1 = c.query(pairs[:500, 0], pairs[:500, 1])
        assert st.ranks == ranks and st1.ranks == 1
        assert np.array_equal(big, after) and np.array_equal(small, after[:500])
        assert c.health()["updates"] == 1
    finally:
        srv.stop()


def test_update_command_sends_the_edges_to_a_running_server(graph, tmp_path, capsys, monkeypatch):
    """``distgrail update --server URL --add EDGES``: the edges file read and checked here (a bad id
    named by file and line, nothing sent), inserted by the server in requests of at most its
    ``--max-pairs``; the server then answers for the graph plus the edges (BFS); options that
    would write a file are refused; without the token the server's 401 is the error; a request
    failing after others says how many edges the server took."""
    from distgrail.cli import main

    path, add, pairs, before, after = graph
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    edges = tmp_path / "add.txt"
    edges.write_text("".join(f"{u} {v}\n" for u, v in add.tolist()))
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2\n3 400\n")  # (the graph has 400 vertices: 0..399)
    srv = Server(path, "--token-file", str(tok), "--max-pairs", "10")
    try:
        assert main(["update", "--server", srv.url, "--add", str(bad), "--token-file", str(tok)]) == 2
        assert "bad.txt:2" in capsys.readouterr().err
        assert main(["update", "--server", srv.url, "--add", str(edges)]) == 2  # no token: the server refuses
        assert "401" in capsys.readouterr().err
        for extra in (["-o", str(tmp_path / "new.h5")], ["--backend", "cpu"], ["--rebuild-above", "5"], [path]):
            assert main(["update", "--server", srv.url, "--add", str(edges), "--token-file", str(tok), *extra]) == 2
            assert "--server" in capsys.readouterr().err, extra
        with distgrail.connect(srv.url, token=TOKEN) as c:  # (batches of at most --max-pairs)
            assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], before)  # nothing sent yet
        assert main(["update", "--server", srv.url, "--add", str(edges), "--token-file", str(tok), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["given"] == 30 and doc["requests"] == 3 and doc["edges_inserted"] == 30, doc
        assert doc["same_component"] + doc["already_reachable"] + doc["added"] == 30, doc  # (summed over the 3)
        with distgrail.connect(srv.url, token=TOKEN) as c:
            assert np.array_equal(c.query(pairs[:, 0], pairs[:, 1])[0], after)
            assert c.health()["updates"] == 3
        from distgrail.server import client as client_module

        real, calls = client_module.Client.add_edges, []

        def second_fails(self, s, t):  # (a server that stops taking them after the first request)
            calls.append(len(s))
            if len(calls) == 2:
                raise client_module.ServerError("503 Service Unavailable: stopping (planted)", status=503)
            return real(self, s, t)

        monkeypatch.setattr(client_module.Client, "add_edges", second_fails)
        assert main(["update", "--server", srv.url, "--add", str(edges), "--token-file", str(tok)]) == 2
        assert "the server took the first 10 of the 30 edges, in 1 update(s)" in capsys.readouterr().err
    finally:
        assert srv.stop() == 0
    assert main(["update", "--add", str(edges), "--token-file", str(tok), path]) == 2  # (no --server)
    assert "--token-file" in capsys.readouterr().err
