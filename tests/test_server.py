"""``distgrail serve`` and its client end to end, on the CPU backend and loopback only: the real
server as a subprocess (``python -m distgrail serve ... --port 0``), answers through the client,
raw HTTP and ``distgrail query --server`` compared with :meth:`Index.query` and BFS, bad
requests (4xx with Index.query's message, the server serving after), the token, the limits, 8
concurrent clients, and a clean stop on SIGTERM."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.server.client import ServerError
from conftest import EXPECTED, ROOT, graph_path

pytest.importorskip("aiohttp", reason="distgrail serve needs the serve extra (launch/setup.sh installs it)")

TOKEN = "s3cret-token"
READY = re.compile(r"distgrail: serving (.+) on (http://\S+) \(backend (\w+)")
MAX_PAIRS = 300_000



def _in_threads(fn, count: int, timeout: float) -> list:
    """``fn(k)`` for k in 0..count-1, each in its own thread, all at once; waits up to ``timeout`` s
    each; the threads (a test may check that none is still alive)."""
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout)
    return threads

def _env(**kw):
    """This environment for a server subprocess, without an MPI job's variables (a test run under
    mpiexec must not hand its own rank to the server's); Open MPI's configuration (``OMPI_MCA_*``,
    e.g. a container's ``plm_rsh_agent``) kept when this process is no MPI job's rank."""
    inside = any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))
           or (not inside and k.startswith("OMPI_MCA_"))}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.pop("DISTGRAIL_TOKEN", None)
    env.update(kw)
    return env


class Server:
    """A ``distgrail serve`` subprocess; its stderr read by a thread, the ready line awaited."""

    def __init__(self, index, *args, wait=60, launcher=(), env=None):
        run = (*launcher, sys.executable, "-m", *(("mpi4py", "-m") if launcher else ()), "distgrail")
        self.proc = subprocess.Popen([*run, "serve", str(index), "--port", "0", "--backend", "cpu", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or _env())
        self.lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + wait
        while True:
            try:
                line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise AssertionError(f"no ready line in {wait} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"the server ended before it was ready: {self.lines}")
            m = READY.search(line)
            if m:
                self.index, self.url, self.backend = m.groups()
                return

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            self._q.put(line)
        self._q.put(None)

    def stop(self, sig=signal.SIGTERM, timeout=20, rank0: bool = False) -> int:
        """Signal the server (``rank0``: its rank 0's process, as the README says to stop a server
        under Open MPI, whose ``mpirun`` signalled itself exits 1), then its exit status."""
        if self.proc.poll() is None:
            pid = None
            if rank0:
                try:
                    with distgrail.connect(self.url, token=TOKEN) as c:
                        pid = c.health()["rank_processes"][0]["pid"]
                except Exception:  # noqa: BLE001 - the launcher then, as without rank0
                    pid = None
            if pid is not None:
                os.kill(pid, sig)
            else:
                self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def _post(url, body, ctype="application/x-npy", headers=None, token=TOKEN):
    h = {"Content-Type": ctype, **(headers or {})}
    if token:
        h["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + "/query", data=body, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def _error(body) -> str:
    return json.loads(body)["error"]


@pytest.fixture(scope="module")
def kegg(tmp_path_factory):
    """(index path, Index, sources, targets) of kegg with its 100,000 pairs."""
    from distgrail.io.pairs import read_pairs

    path = tmp_path_factory.mktemp("serve") / "kegg.h5"
    idx = distgrail.build_index(graph_path("kegg_dag_uniq"), dims=3, backend="cpu")
    idx.save(path)
    s, t = read_pairs(graph_path("kegg_dag_uniq") + ".q100k.pairs.gz")
    return str(path), distgrail.open_index(path), s, t


@pytest.fixture(scope="module")
def server(kegg, tmp_path_factory):
    tok = tmp_path_factory.mktemp("token") / "token"
    tok.write_text(TOKEN + "\n")
    srv = Server(kegg[0], "--token-file", str(tok), "--max-pairs", str(MAX_PAIRS), "--timeout", "30")
    yield srv
    assert srv.stop() == 0, srv.lines


def test_ready_line_names_a_localhost_port(server, kegg):
    assert server.url.startswith("http://127.0.0.1:") and int(server.url.rsplit(":", 1)[1]) > 0
    assert server.index == kegg[0] and server.backend == "cpu"
    assert any("warm-up:" in line for line in server.lines)


def test_client_answers_as_index_query_and_bfs(server, kegg):
    path, idx, s, t = kegg
    c = distgrail.connect(server.url, token=TOKEN)
    assert c.n == idx.n == 3617 and c.info["index"] == path and c.info["backend"] == "cpu"
    answers, stats = c.query(s, t)
    local, local_stats = idx.query(s, t, backend="cpu")
    assert answers.dtype == bool and np.array_equal(answers, local)
    assert int(answers.sum()) == EXPECTED["kegg_dag_uniq"] == stats.reachable
    assert stats.steps == local_stats.steps and stats.queries == 100_000 and stats.backend == "cpu"
    indptr, indices = csr_of(distgrail.read_graph(graph_path("kegg_dag_uniq")))  # plain BFS on the input graph
    assert np.array_equal(answers[:5000], bfs_reachable(indptr, indices, s[:5000], t[:5000]))
    u, v = int(s[np.flatnonzero(answers)[0]]), int(t[np.flatnonzero(answers)[0]])
    assert c.reachable(u, v) is True and c.reachable(v, u) is idx.reachable(v, u, backend="cpu")
    assert np.array_equal(c.reachable(s[:50], t[:50]), local[:50])
    e, st = c.query(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert e.shape == (0,) and st.queries == 0


def test_client_sends_int32_ids_that_fit_and_int64_ones_that_do_not(server, kegg, monkeypatch):
    """The client narrows ids to int32 for an index of fewer than 2^31 vertices (half the bytes);
    the answers are those of Index.query; a batch with a bad id goes as int64 and gets the
    message Index.query gives for it, naming the value as given."""
    import distgrail.server.client as client_mod
    from distgrail.errors import QueryError

    _, idx, s, t = kegg
    sent = []
    encode = client_mod.encode_columns

    def watched(a, b, narrow=False, scratch=None):
        pieces, size = encode(a, b, narrow, scratch)
        sent.append(size)
        return pieces, size

    monkeypatch.setattr(client_mod, "encode_columns", watched)
    c = distgrail.connect(server.url, token=TOKEN)
    answers, _ = c.query(s, t)
    assert np.array_equal(answers, idx.query(s, t, backend="cpu")[0])
    assert sent[-1] < 2 * 4 * s.size + 200  # 4 bytes an id
    bad = s.copy()
    bad[12] = 2**40
    with pytest.raises(QueryError, match=rf"sources\[12\] out of range 0..{idx.n - 1}, got {2**40}"):
        c.query(bad, t)
    assert sent[-1] >= 2 * 8 * s.size


def test_each_answer_says_where_its_time_went_and_bodies_reuse_one_buffer(server, kegg):
    """Every /query answer carries a Server-Timing header (read, decode, answer, encode, wait;
    milliseconds), which the client reads back (``last_timing``, seconds); the server keeps an
    answered body's buffer for the next (``/health``'s ``body_buffers_bytes``), and batches that
    land in a kept buffer, of other sizes and ids, are answered as Index.query answers them."""
    from distgrail.server.wire import timing_of

    _, idx, s, t = kegg
    c = distgrail.connect(server.url, token=TOKEN)
    assert c.last_timing == {}
    rng = np.random.default_rng(11)
    for k in (60_000, 20_000, 60_000, 59_999):
        a = rng.integers(0, idx.n, k)
        b = rng.integers(0, idx.n, k)
        answers, _ = c.query(a, b)
        assert np.array_equal(answers, idx.query(a, b, backend="cpu")[0]), k
        took = c.last_timing
        assert list(took) == ["read", "decode", "answer", "encode", "wait"], took
        assert all(v >= 0 for v in took.values()) and took["answer"] > 0
        assert c.health()["body_buffers_bytes"] >= 8 * 60_000  # (two int32 columns of 60,000)
    status, headers, _ = _post(server.url, _npy(np.stack([s[:1000], t[:1000]], 1)))
    assert status == 200 and set(timing_of(headers["Server-Timing"])) == {"read", "decode", "answer", "encode", "wait"}


def test_last_timing_of_a_batch_sent_in_pieces_sums_its_requests(server, kegg, monkeypatch):
    """A batch cut into pieces sent at once from the client's other threads: the caller's
    ``last_timing`` is the sum of its requests' Server-Timing, not an earlier query's."""
    import distgrail.server.client as cl

    _, idx, s, t = kegg
    monkeypatch.setattr(cl, "PIECE_MIN_PAIRS", 1000)
    seen = []
    read = cl.timing_of
    monkeypatch.setattr(cl, "timing_of", lambda h: seen.append(read(h)) or seen[-1])
    c = distgrail.connect(server.url, token=TOKEN, connections=2)
    c.query(s[:10], t[:10])  # (one request, on this thread)
    assert len(seen) == 1 and c.last_timing == seen[0]
    seen.clear()
    answers, _ = c.query(s[:5000], t[:5000])
    assert np.array_equal(answers, idx.query(s[:5000], t[:5000], backend="cpu")[0])
    assert len(seen) == 2  # two pieces, each on a thread of the client's
    got = c.last_timing
    assert set(got) == {"read", "decode", "answer", "encode", "wait"}
    assert got == {k: seen[0][k] + seen[1][k] for k in got}
    c.close()


def test_client_keeps_a_small_scratch_for_narrowed_ids_and_lets_a_large_one_go(server, kegg, monkeypatch):
    """The ids a batch narrows to int32 go through a buffer its thread keeps for the next batch,
    up to KEEP_SCRATCH_BYTES; a larger batch's buffer goes with it; close() lets go of it."""
    import distgrail.server.client as cl

    _, idx, s, t = kegg
    monkeypatch.setattr(cl, "KEEP_SCRATCH_BYTES", 8 * 1000)  # (two int32 columns of 1,000 pairs)
    c = distgrail.connect(server.url, token=TOKEN)
    for k, kept in ((1000, 2000), (600, 2000), (3000, None), (10, 20)):
        answers, _ = c.query(s[:k].astype(np.int64), t[:k].astype(np.int64))
        assert np.array_equal(answers, idx.query(s[:k], t[:k], backend="cpu")[0])
        have = getattr(c._local, "scratch", None)
        assert (None if have is None else have.size) == kept, k
    c.close()
    assert c._local.scratch is None


def test_client_splits_a_batch_over_the_server_limit(server, kegg):
    _, idx, s, t = kegg
    s4, t4 = np.tile(s, 4), np.tile(t, 4)  # 400,000 pairs, the limit is 300,000 a request
    c = distgrail.connect(server.url, token=TOKEN)
    before = c.health()["batches"]
    answers, stats = c.query(s4, t4)
    assert np.array_equal(answers, np.tile(idx.query(s, t, backend="cpu")[0], 4))
    assert stats.queries == 400_000 and c.health()["batches"] - before == 2


def test_raw_http_npy_and_json(server, kegg):
    _, idx, s, t = kegg
    local = idx.query(s, t, backend="cpu")[0]
    status, headers, body = _post(server.url, _npy(np.stack([s, t], axis=1)))
    assert status == 200 and headers["Content-Type"] == "application/x-npy"
    assert np.array_equal(np.load(io.BytesIO(body)), local)
    assert json.loads(headers["X-Distgrail-Stats"])["reachable"] == int(local.sum())
    doc = json.dumps({"sources": s[:100].tolist(), "targets": t[:100].tolist()}).encode()
    status, headers, body = _post(server.url, doc, ctype="application/json")
    assert status == 200 and json.loads(body)["answers"] == local[:100].tolist()
    status, _, body = _post(server.url, _npy(np.stack([s[:9], t[:9]], axis=1).astype(np.int32)),
                            headers={"Accept": "application/json"})  # any integer type; JSON asked for
    assert status == 200 and json.loads(body)["answers"] == local[:9].tolist()


def _still_serving(server, kegg):
    _, idx, s, t = kegg
    status, _, body = _post(server.url, _npy(np.stack([s[:500], t[:500]], axis=1)))
    assert status == 200 and np.array_equal(np.load(io.BytesIO(body)), idx.query(s[:500], t[:500], backend="cpu")[0])


def _message_of_index_query(idx, s, t) -> str:
    with pytest.raises(distgrail.QueryError) as e:
        idx.query(s, t, backend="cpu")
    return str(e.value)


def test_bad_requests_get_4xx_with_index_query_message_and_the_server_goes_on(server, kegg):
    _, idx, s, t = kegg
    bad_t = t[:10].copy()
    bad_t[7] = 5000
    status, _, body = _post(server.url, _npy(np.stack([s[:10], bad_t], axis=1)))
    assert status == 400 and _error(body) == _message_of_index_query(idx, s[:10], bad_t)
    assert _error(body) == "targets[7] out of range 0..3616, got 5000"
    neg = s[:4].copy()
    neg[2] = -1
    status, _, body = _post(server.url, json.dumps({"sources": neg.tolist(), "targets": [1, 2, 3, 4]}).encode(),
                            ctype="application/json")
    assert status == 400 and _error(body) == _message_of_index_query(idx, neg, t[:4])
    floats = np.stack([s[:5], t[:5]], axis=1).astype(np.float64)  # a body of the wrong dtype
    status, _, body = _post(server.url, _npy(floats))
    assert status == 400 and _error(body) == _message_of_index_query(idx, floats[:, 0], floats[:, 1])
    assert "must be integer vertex ids, got dtype float64" in _error(body)
    req = urllib.request.Request(server.url + "/query?layout=rows", data=_npy(np.zeros((3, 2), np.int64)),
                                 headers={"Authorization": f"Bearer {TOKEN}"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400 and "layout must be 'pairs'" in _error(e.value.read())
    req = urllib.request.Request(server.url + "/query?layout=columns", data=_npy(np.zeros((3, 2), np.int64)),
                                 headers={"Authorization": f"Bearer {TOKEN}"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400 and "expected an integer array of shape (2, k)" in _error(e.value.read())
    with pytest.raises(distgrail.QueryError, match=r"^sources\[0\] out of range 0..3616, got 9999$"):
        distgrail.connect(server.url, token=TOKEN).query([9999], [0])
    _still_serving(server, kegg)
    for body_sent, ctype, expect in [
            (b"hello there", "application/octet-stream", "neither a .npy array of shape (k, 2) nor a JSON object"),
            (b"{not json", "application/json", "request body: not valid JSON"),
            (b'{"sources": [1]}', "application/json", 'expected a JSON object {"sources": [...], "targets": [...]}'),
            (_npy(np.stack([s[:10], t[:10]], axis=1))[:-8], "application/x-npy", "not a readable .npy array"),
            (_npy(s[:10]), "application/x-npy", "expected an integer array of shape (k, 2), got int64 (10,)")]:
        status, _, body = _post(server.url, body_sent, ctype=ctype)
        assert status == 400 and expect in _error(body), (body_sent[:20], body)
        _still_serving(server, kegg)


def test_limits_413_with_the_limit_in_the_message(server, kegg):
    _, idx, s, t = kegg
    k = MAX_PAIRS + 1
    status, _, body = _post(server.url, _npy(np.zeros((k, 2), np.int64)))
    assert status == 413 and f"{k:,} pairs is over this server's limit of {MAX_PAIRS:,} pairs" in _error(body)
    limit = distgrail.connect(server.url, token=TOKEN).info["max_body_bytes"]
    req = urllib.request.Request(server.url + "/query", data=b"x" * 16, method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Length": str(limit + 1)})
    with pytest.raises(urllib.error.HTTPError) as e:  # refused from the header, before the body is read
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 413 and f"limit of {limit:,} bytes" in _error(e.value.read())
    _still_serving(server, kegg)


def test_token_missing_401_wrong_403(server, kegg):
    _, _, s, t = kegg
    body = _npy(np.stack([s[:3], t[:3]], axis=1))
    status, headers, reply = _post(server.url, body, token=None)
    assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer") and "bearer token" in \
        _error(reply)
    status, _, reply = _post(server.url, body, token="wrong")
    assert status == 403 and "not this server's" in _error(reply)
    with pytest.raises(ServerError) as e:
        distgrail.connect(server.url, token="wrong")
    assert e.value.status == 403
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/health", timeout=30)
    assert e.value.code == 401
    _still_serving(server, kegg)


def test_eight_concurrent_clients_get_right_answers(server, kegg):
    _, idx, s, t = kegg
    c = distgrail.connect(server.url, token=TOKEN)  # one client shared by the threads: a connection each
    before = c.health()
    local = idx.query(s, t, backend="cpu")[0]
    wrong, done, errors = [], [], []
    stop_at = time.monotonic() + 8

    def client(k):
        rng = np.random.default_rng(k)
        for _ in range(12):  # bounded: 12 batches or 8 s, whichever ends first
            if time.monotonic() > stop_at:
                break
            pick = rng.integers(0, s.size, int(rng.integers(1, 5000)))
            try:
                ans, _ = c.query(s[pick], t[pick])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                return
            done.append(pick.size)
            if not np.array_equal(ans, local[pick]):
                wrong.append(k)

    threads = _in_threads(client, 8, 30)
    assert not any(th.is_alive() for th in threads)
    assert not errors and not wrong and len(done) >= 8
    after = c.health()
    assert after["batches"] - before["batches"] == len(done) + 0 and after["queries"] - before["queries"] == sum(done)
    assert after["latency_ms"]["p50"] > 0 and after["latency_ms"]["p99"] >= after["latency_ms"]["p50"]
    assert after["in_flight"] == 0 and after["rss_bytes"] > 0


def test_cli_query_server_writes_what_the_local_query_writes(server, kegg, tmp_path):
    path = kegg[0]
    pairs = graph_path("kegg_dag_uniq") + ".q100k.pairs.gz"
    r = subprocess.run([sys.executable, "-m", "distgrail", "query", "--server", server.url, pairs, "-o",
                        str(tmp_path / "a.txt"), "--json"], capture_output=True, text=True,
                       env=_env(DISTGRAIL_TOKEN=TOKEN), timeout=60)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["reachable"] == EXPECTED["kegg_dag_uniq"] and summary["server"] == server.url
    r2 = subprocess.run([sys.executable, "-m", "distgrail", "query", path, pairs, "-o", str(tmp_path / "b.txt"),
                         "--backend", "cpu", "--quiet"], capture_output=True, text=True, env=_env(), timeout=60)
    assert r2.returncode == 0, r2.stderr
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n2 5000\n")
    out = [subprocess.run([sys.executable, "-m", "distgrail", "query", *where, str(bad), "-o", str(tmp_path / o), *local],
                          capture_output=True, text=True, env=_env(DISTGRAIL_TOKEN=TOKEN), timeout=60)
           for where, o, local in ((("--server", server.url), "c.txt", ()), ((path,), "d.txt", ("--backend", "cpu")))]
    assert [o.returncode for o in out] == [2, 2]  # the file and line named, as the local query does (issue 44)
    assert out[0].stderr == out[1].stderr == f"distgrail: error: {bad}:2: vertex id out of range 0..3616, got '5000'\n"
    assert not (tmp_path / "c.txt").exists()
    three = tmp_path / "expected.txt"  # a third column of expected answers, one of them wrong: exit status 3
    answers = np.array((tmp_path / "b.txt").read_text().split()[:50]) == "1"
    s, t = kegg[2][:50], kegg[3][:50]
    three.write_text("".join(f"{u} {v} {int(a) ^ (k == 7)}\n" for k, (u, v, a) in enumerate(zip(s, t, answers))))
    out = [subprocess.run([sys.executable, "-m", "distgrail", "query", *where, str(three), "--json"],
                          capture_output=True, text=True, env=_env(DISTGRAIL_TOKEN=TOKEN), timeout=60)
           for where in (("--server", server.url), (path,))]
    assert [o.returncode for o in out] == [3, 3], [o.stderr for o in out]
    for o in out:
        assert json.loads(o.stdout)["expected"]["first"] == [{"where": f"{three}:8", "u": int(s[7]), "v": int(t[7]),
                                                              "answer": bool(answers[7]), "expected": not answers[7]}]
    r = subprocess.run([sys.executable, "-m", "distgrail", "query", "--server", server.url, pairs],
                       capture_output=True, text=True, env=_env(), timeout=60)  # no token
    assert r.returncode == 2 and "401" in r.stderr and "bearer token" in r.stderr


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    rng = np.random.default_rng(3)
    names = [f"gene-{i}" for i in range(300)]
    succ = {names[i]: [names[j] for j in rng.integers(i + 1, 300, 3) if j < 300] for i in range(299)}
    idx = distgrail.build_index(succ, dims=2, backend="cpu")
    path = tmp_path_factory.mktemp("labels") / "genes.h5"
    idx.save(path)
    return str(path), distgrail.open_index(path)


def test_node_labels_through_the_server_then_sigterm_ends_it_cleanly(labelled, tmp_path):
    path, idx = labelled
    assert idx.node_labels is not None and idx.node_labels.kind == "str"
    files = sorted(os.listdir(os.path.dirname(path)))
    srv = Server(path, "--timeout", "30")
    try:
        c = distgrail.connect(srv.url)
        assert c.label_kind == "str"
        rng = np.random.default_rng(0)
        names = idx.node_labels.values
        s, t = names[rng.integers(0, names.size, 2000)], names[rng.integers(0, names.size, 2000)]
        answers, stats = c.query(s, t)
        assert np.array_equal(answers, idx.query(s, t, backend="cpu")[0]) and stats.queries == 2000
        assert c.reachable("gene-0", "gene-0") is True
        assert c.reachable(list(s[:5]), list(t[:5])).tolist() == idx.reachable(s[:5], t[:5], backend="cpu").tolist()
        with pytest.raises(distgrail.QueryError) as e:
            c.query(["gene-1", "nope"], ["gene-2", "gene-3"])
        assert str(e.value) == _message_of_index_query(idx, np.array(["gene-1", "nope"]), np.array(["gene-2", "x"]))
        with pytest.raises(distgrail.QueryError, match="takes the graph's string node labels"):
            c.query([1], [2])
        pairs = tmp_path / "p.txt"
        pairs.write_text("gene-0 gene-5\ngene-7 gene-2\n")
        r = subprocess.run([sys.executable, "-m", "distgrail", "query", "--server", srv.url, str(pairs), "-o",
                            str(tmp_path / "a.tsv"), "--quiet"], capture_output=True, text=True, env=_env(), timeout=60)
        assert r.returncode == 0, r.stderr
        rows = (tmp_path / "a.tsv").read_text().splitlines()
        want = idx.query(np.array(["gene-0", "gene-7"]), np.array(["gene-5", "gene-2"]), backend="cpu")[0]
        assert rows[1:] == [f"gene-0\tgene-5\t{int(want[0])}", f"gene-7\tgene-2\t{int(want[1])}"]
        # a label the server's graph lacks: refused with the pairs file's line, as without --server
        bad = tmp_path / "bad.txt"
        bad.write_text("# pairs\ngene-0 gene-5\n\ngene-7 no-such-gene\n")
        r = subprocess.run([sys.executable, "-m", "distgrail", "query", "--server", srv.url, str(bad), "-o",
                            str(tmp_path / "b.tsv")], capture_output=True, text=True, env=_env(), timeout=60)
        assert r.returncode == 2 and f"{bad}:4:" in r.stderr and "'no-such-gene' is not in the graph" in r.stderr, \
            r.stderr
        assert not (tmp_path / "b.tsv").exists()
        host, port = srv.url[len("http://"):].rsplit(":", 1)
    finally:
        t0 = time.monotonic()
        code = srv.stop(signal.SIGTERM)
    assert code == 0 and time.monotonic() - t0 < 10, srv.lines
    assert any("stopping (SIGTERM)" in line for line in srv.lines)
    with pytest.raises(OSError):  # the socket is closed
        socket.create_connection((host, int(port)), timeout=5).close()
    assert sorted(os.listdir(os.path.dirname(path))) == files  # nothing left beside the index


def test_request_time_limit_504_then_sigint_ends_it(kegg):
    path, _, s, t = kegg
    srv = Server(path, "--timeout", "0.001", "--workers", "1")
    try:
        big = np.stack([np.tile(s, 10), np.tile(t, 10)], axis=1)  # 1 M pairs: far over a millisecond
        status, _, body = _post(srv.url, _npy(big), token=None)
        assert status == 504 and "limit of 0.001 s a request (distgrail serve --timeout)" in _error(body)
        h = json.loads(urllib.request.urlopen(srv.url + "/health", timeout=30).read())
        assert h["errors"] == {"504": 1} and h["token"] is False
    finally:
        code = srv.stop(signal.SIGINT)
    assert code == 0, srv.lines


def test_port_in_use_is_a_clear_error(kegg):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "distgrail", "serve", kegg[0], "--port", str(port)],
                           capture_output=True, text=True, env=_env(), timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(f"distgrail: error: cannot listen on 127.0.0.1:{port} (")
    assert "opening" not in r.stderr  # refused before the index is read


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpiexec = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
#: the --shard-min-pairs of the server under mpiexec: batches from here on go over both ranks
SHARD = 5000


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def ranks_server(kegg):
    """``mpiexec -n 2 python -m mpi4py -m distgrail serve`` (one subprocess of this one test process)."""
    srv = Server(kegg[0], "--shard-min-pairs", str(SHARD), "--timeout", "30", launcher=(MPIEXEC, "-n", "2"),
                 env=_env(MPIEXEC_TIMEOUT="300"), wait=120)
    yield srv
    if srv.proc.poll() is None:
        srv.stop()


@needs_mpiexec
def test_under_mpiexec_every_rank_serves_and_health_names_them(ranks_server, kegg):
    line = next(x for x in ranks_server.lines if x.startswith("distgrail: serving"))
    assert "backend cpu on 2 ranks" in line and f"batches of {SHARD:,}+ pairs sharded" in line
    h = distgrail.connect(ranks_server.url).health()
    assert h["ranks"] == 2 and len(h["rank_devices"]) == 2 and h["shard_min_pairs"] == SHARD
    assert [r["rank"] for r in h["rank_processes"]] == [0, 1] and h["rank_processes"][0]["pid"] == h["pid"]
    assert len({r["pid"] for r in h["rank_processes"]}) == 2 and all(_alive(r["pid"]) for r in h["rank_processes"])


@needs_mpiexec
def test_under_mpiexec_batches_above_and_below_the_threshold_answer_as_index_query(ranks_server, kegg):
    _, idx, s, t = kegg
    c = distgrail.connect(ranks_server.url)
    local = idx.query(s, t, backend="cpu")[0]
    before = c.health()["sharded_batches"]
    for k, ranks in ((1, 1), (SHARD - 1, 1), (SHARD, 2), (s.size, 2)):
        answers, stats = c.query(s[:k], t[:k])
        assert np.array_equal(answers, local[:k]) and stats.queries == k and stats.ranks == ranks, k
    assert int(answers.sum()) == EXPECTED["kegg_dag_uniq"] == stats.reachable
    indptr, indices = csr_of(distgrail.read_graph(graph_path("kegg_dag_uniq")))  # plain BFS on the input graph
    assert np.array_equal(answers[-3000:], bfs_reachable(indptr, indices, s[-3000:], t[-3000:]))
    assert c.health()["sharded_batches"] - before == 2
    rng = np.random.default_rng(5)  # past SHARED_MIN_PAIRS: through the node-shared arrays kept by the server
    for k in (150_000, 70_000, 150_000):
        bs, bt = rng.integers(0, idx.n, k), rng.integers(0, idx.n, k)
        answers, stats = c.query(bs, bt)
        assert np.array_equal(answers, idx.query(bs, bt, backend="cpu")[0]) and stats.ranks == 2, k


@needs_mpiexec
def test_under_mpiexec_four_concurrent_clients_and_bad_requests(ranks_server, kegg):
    _, idx, s, t = kegg
    c = distgrail.connect(ranks_server.url)
    local = idx.query(s, t, backend="cpu")[0]
    before = c.health()
    results, errors = {}, []

    def client(k):
        rng = np.random.default_rng(k)
        for j in range(4):  # two sharded batches and two small ones each
            pick = rng.integers(0, s.size, int(rng.integers(SHARD, 3 * SHARD) if j % 2 == 0 else rng.integers(1, SHARD)))
            try:
                results[(k, j)] = np.array_equal(c.query(s[pick], t[pick])[0], local[pick])
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

    _in_threads(client, 4, 60)
    assert not errors and len(results) == 16 and all(results.values()), (errors, results)
    after = c.health()
    assert after["sharded_batches"] - before["sharded_batches"] == 8 and after["batches"] - before["batches"] == 16
    for n in (SHARD - 1, SHARD + 10):  # a bad id below and above the threshold: 400 before any collective
        bad = t[:n].copy()
        bad[n - 3] = 5000
        status, _, body = _post(ranks_server.url, _npy(np.stack([s[:n], bad], axis=1)), token=None)
        assert status == 400 and _error(body) == f"targets[{n - 3}] out of range 0..3616, got 5000"
    floats = np.stack([s[:SHARD], t[:SHARD]], axis=1).astype(np.float64)
    status, _, body = _post(ranks_server.url, _npy(floats), token=None)
    assert status == 400 and _error(body) == _message_of_index_query(idx, floats[:, 0], floats[:, 1])
    answers, stats = c.query(s[:SHARD], t[:SHARD])  # still serving, over both ranks
    assert np.array_equal(answers, local[:SHARD]) and stats.ranks == 2
    assert c.health()["sharded_failed"] == 0 and c.health()["errors"] == {"400": 3}


@needs_mpiexec
def test_under_mpiexec_sigterm_to_mpiexec_answers_the_batch_in_hand_then_ends_every_rank(ranks_server, kegg):
    """(A signal to a rank > 0 alone stops every rank too: tests/test_rank_failures.py.)"""
    _, idx, s, t = kegg
    c = distgrail.connect(ranks_server.url)
    pids = [r["pid"] for r in c.health()["rank_processes"]]
    big_s, big_t, got = np.tile(s, 40), np.tile(t, 40), {}  # 4 M pairs: a second or more over both ranks
    th = threading.Thread(target=lambda: got.update(a=c.query(big_s, big_t)))
    th.start()
    deadline = time.monotonic() + 30
    while not c.health()["sharded_running"] and th.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)  # (the body of 4 M pairs takes a while to arrive: under load 0.2 s was not enough)
    assert th.is_alive(), "the batch ended before the stop: make it larger"
    assert c.health()["sharded_running"], "the batch never reached the collective"  # the stop waits for its end
    t0 = time.monotonic()
    code = ranks_server.stop(signal.SIGTERM, timeout=30)
    th.join(30)
    assert code == 0 and time.monotonic() - t0 < 15, ranks_server.lines
    answers, stats = got["a"]
    assert stats.ranks == 2 and np.array_equal(answers, np.tile(idx.query(s, t, backend="cpu")[0], 40))
    assert sum("stopping (SIGTERM)" in x for x in ranks_server.lines) == 1, ranks_server.lines
    assert not any("error" in x.lower() for x in ranks_server.lines), ranks_server.lines
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a rank outlived mpiexec"
    with pytest.raises(ServerError):
        distgrail.connect(ranks_server.url, timeout=5)


@needs_mpiexec
@pytest.mark.parametrize("target, sig", [("launcher", signal.SIGINT), ("rank 0", signal.SIGTERM),
                                         ("rank 0", signal.SIGINT)])
def test_under_mpiexec_a_signal_to_the_launcher_or_rank_0_ends_all_with_0_as_the_readme_says(kegg, target, sig):
    """What the README says each launcher returns (issue 44, item 9), for PyPI's MPICH ``mpiexec``:
    SIGTERM/SIGINT to it or to rank 0 (pid from /health's ``rank_processes``) end every rank with 0,
    and ``mpiexec`` returns 0 too (SIGTERM to the launcher: the test above). CI has no Open MPI."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## A resident server"):text.index("## Running under MPI")]
    said = " ".join(section.split())
    assert "to the launcher or any rank (`/health`'s `rank_processes`)" in said and "every rank ends with status 0" in said
    assert "PyPI's MPICH `mpiexec` exits 0 too (tested)" in said and "Open MPI's `mpirun` exits 1" in said
    srv = Server(kegg[0], launcher=(MPIEXEC, "-n", "2"), env=_env(MPIEXEC_TIMEOUT="120"), wait=120)
    try:
        pids = [r["pid"] for r in distgrail.connect(srv.url).health()["rank_processes"]]
        assert len(pids) == 2 and srv.proc.pid not in pids
        if target == "rank 0":
            os.kill(pids[0], sig)
            code = srv.proc.wait(30)
        else:
            code = srv.stop(sig, timeout=30)
    finally:
        if srv.proc.poll() is None:
            srv.stop(signal.SIGKILL)
    assert code == 0, srv.lines
    assert sum(f"stopping ({signal.Signals(sig).name})" in x for x in srv.lines) == 1, srv.lines
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), "a rank outlived mpiexec"


@needs_mpiexec
def test_under_mpiexec_rank_0_failing_alone_after_the_start_ends_the_job_not_hangs(tmp_path):
    """Rank 0 failing on its own after the ranks share node memory (its HTTP side cannot start,
    planted): the job ends through MPI_Abort with the error, and no rank waits in the collective
    that frees the shared arrays (that wait hung the job)."""
    script = tmp_path / "boom.py"
    script.write_text(f"""
from mpi4py import MPI
import distgrail
import distgrail.server.run as run
comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output={str(tmp_path / "g.h5")!r})
comm.Barrier()
def boom(*a, **k):
    raise RuntimeError("planted: rank 0 fails before its dispatcher runs")
run._serve_root = boom
run.serve_ranks(comm, {str(tmp_path / "g.h5")!r}, host="127.0.0.1", port=0, backend="cpu", share_gpus=False,
                token=None, max_pairs=1 << 20, timeout=10, workers=1, shard_min_pairs=None, quiet=True, as_json=False,
                front="root")
""")
    t = time.monotonic()
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", str(script)], capture_output=True,
                       text=True, timeout=150, env=_env(MPIEXEC_TIMEOUT="100"))
    assert r.returncode != 0 and "planted: rank 0 fails before its dispatcher runs" in r.stderr, r.stderr[-2000:]
    assert time.monotonic() - t < 60, r.stderr[-2000:]  # ended by the abort, not by MPIEXEC_TIMEOUT


@needs_mpiexec
def test_under_mpiexec_a_start_error_is_printed_once_and_every_rank_ends_with_2(tmp_path):
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "distgrail", "serve",
                        str(tmp_path / "none.h5"), "--port", "0", "--backend", "cpu"], capture_output=True, text=True,
                       env=_env(MPIEXEC_TIMEOUT="60"), timeout=90)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("distgrail: error: rank 0 (and on rank 1), opening the index") == 1, r.stderr


@pytest.mark.gpu
def test_gpu_server_answers_as_the_cpu_with_concurrent_clients(kegg):
    """On a GPU: the server's batches (2 at once, each in its own stream) give Index.query's CPU answers."""
    path, idx, s, t = kegg
    proc = subprocess.Popen([sys.executable, "-m", "distgrail", "serve", path, "--port", "0", "--backend", "gpu"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        deadline, url = time.monotonic() + 120, None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "the GPU server ended before it was ready"
            m = READY.search(line)
            url = m.group(2) if m else None
        assert url is not None and m.group(3) == "gpu"
        threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
        c = distgrail.connect(url)
        assert c.info["backend"] == "gpu" and c.info["workers"] == 2
        local = idx.query(s, t, backend="cpu")[0]
        answers, stats = c.query(s, t)
        assert np.array_equal(answers, local) and stats.backend == "gpu"
        big_s, big_t = np.tile(s, 30), np.tile(t, 30)  # 3 M pairs
        results, errors = {}, []

        def run(k):
            try:
                results[k] = c.query(big_s if k % 2 else s, big_t if k % 2 else t)[0]
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        _in_threads(run, 8, 120)
        assert not errors and len(results) == 8
        for k, ans in results.items():
            assert np.array_equal(ans, np.tile(local, 30) if k % 2 else local), k
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


@pytest.mark.gpu
@needs_mpiexec
def test_gpu_server_under_mpiexec_shards_over_two_ranks_as_the_cpu_answers(kegg):
    """On a GPU machine (one GPU shared, or two): 2 ranks, each on its GPU, answer as Index.query on the CPU."""
    _, idx, s, t = kegg
    srv = Server(kegg[0], "--backend", "gpu", "--share-gpus", "--shard-min-pairs", str(SHARD),
                 launcher=(MPIEXEC, "-n", "2"), env=_env(MPIEXEC_TIMEOUT="300"), wait=300)
    try:
        c = distgrail.connect(srv.url)
        h = c.health()
        assert srv.backend == "gpu" and h["ranks"] == 2 and all("device" in d for d in h["rank_devices"]), h
        local = idx.query(s, t, backend="cpu")[0]
        for k, ranks in ((SHARD - 1, 1), (s.size, 2)):
            answers, stats = c.query(s[:k], t[:k])
            assert np.array_equal(answers, local[:k]) and stats.ranks == ranks and stats.backend == "gpu"
        answers, stats = c.query(np.tile(s, 30), np.tile(t, 30))  # 3 M pairs over both GPUs
        assert np.array_equal(answers, np.tile(local, 30)) and stats.ranks == 2
    finally:
        code = srv.stop(signal.SIGTERM, timeout=60, rank0=True)  # (0 under MPICH's mpiexec and Open MPI's mpirun)
    assert code == 0, srv.lines
