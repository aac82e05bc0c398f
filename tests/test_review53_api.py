"""Review 53 of the Python API and the client as a user calls them (``Index.query`` /
``reachable``, ``distgrail.connect``), on the CPU backend and loopback only.

Found: NumPy turns a Python list ``[0, True]`` into the ids 0 and 1 and ``[1, "a"]`` into the
labels ``"1"`` and ``"a"``, so a bool or a number in a list was answered for another vertex (a
bool or a float alone is refused); the client sent an object array's items as their text, so on
a string-labelled server ``None``, ``1``, ``1.5`` or ``True`` were answered as the labels
``"None"``, ``"1"``, ... where ``Index.query`` refuses them; a Python int past 64 bits was
refused as "got dtype object" (the client: "dtype <U22") instead of as the id out of range it
is; ``build_index(output=...)`` into a missing or read-only directory raised a plain
DistGrailError where ``Index.save`` raises the OutputError the README promises; and ``connect``
of a URL whose port is past 65535 or not a number raised urllib's bare ValueError, so
``distgrail query --server`` / ``update --server`` exited 1 with a traceback."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.errors import GraphFormatError, OutputError, QueryError
from distgrail.server.client import ServerError

from conftest import ROOT

pytest.importorskip("aiohttp", reason="distgrail serve needs the serve extra (launch/setup.sh installs it)")

from test_server import Server  # noqa: E402 - after the skip: test_server needs aiohttp too


def _ids_index():
    # 0 -> 1 -> 2 -> 0 (a cycle), 3 -> 4 twice, 4 -> 4, 5 isolated
    return distgrail.build_index((np.array([0, 1, 2, 3, 3, 4]), np.array([1, 2, 0, 4, 4, 4])), dims=2,
                                 num_vertices=6, backend="cpu")


def _tricky_graph():
    """String labels that are the text of other Python values."""
    return {"1": ["x"], "None": ["x"], "1.5": ["x"], "True": ["x"], "y": []}


def test_a_bool_in_a_list_of_ids_is_refused_not_read_as_vertex_1():
    idx = _ids_index()
    assert idx.reachable([0, 1], [2, 2], backend="cpu").tolist() == [True, True]
    with pytest.raises(QueryError, match=r"sources\[1\]: vertex ids must be integers, got bool True"):
        idx.reachable([0, True], [2, 2], backend="cpu")
    with pytest.raises(QueryError, match=r"targets must be integer vertex ids, got dtype bool"):  # (as before)
        idx.query([0], [False], backend="cpu")
    with pytest.raises(QueryError, match=r"sources\[1\]: vertex ids must be integers, got NoneType None"):
        idx.query([0, None], [1, 2], backend="cpu")


def test_a_python_int_past_64_bits_is_named_as_an_id_out_of_range():
    idx = _ids_index()
    for big in (2**64, 2**70, -2**64):
        with pytest.raises(QueryError, match=rf"sources\[1\] out of range 0..5, got {big}$"):
            idx.query([0, big], [1, 2], backend="cpu")
        with pytest.raises(QueryError, match=rf"targets\[0\] out of range 0..5, got {big}$"):
            idx.reachable(0, big, backend="cpu")
    # an object array of Python ints that fit answers as the int64 one does
    got, _ = idx.query(np.array([0, 3, 4], dtype=object), np.array([2, 4, 3], dtype=object), backend="cpu")
    assert got.tolist() == [True, True, False]


def test_a_string_labelled_index_refuses_other_values_in_a_list_instead_of_their_text():
    idx = distgrail.build_index(_tricky_graph(), dims=2, backend="cpu")
    assert idx.reachable(["1", "None"], ["x", "x"], backend="cpu").tolist() == [True, True]
    for given, kind in ((1, "int 1"), (1.5, "float 1.5"), (True, "bool True"), (None, "NoneType None")):
        with pytest.raises(QueryError, match=rf"sources\[1\]: this index takes the graph's string node labels, "
                                             rf"got {kind}"):
            idx.reachable(["y", given], ["x", "x"], backend="cpu")
    with pytest.raises(QueryError, match=r"sources\[0\]: this index takes the graph's string node labels, got "
                                         r"NoneType None"):
        idx.reachable(None, "x", backend="cpu")
    # an integer-labelled one likewise names the item that is no integer, not the first item
    ints = distgrail.build_index({10: [20], 20: [30]}, dims=2, backend="cpu")
    with pytest.raises(QueryError, match=r"sources\[1\]: this index takes the graph's integer node labels, got "
                                         r"bool True"):
        ints.reachable([10, True], [20, 30], backend="cpu")
    with pytest.raises(QueryError, match=r"sources\[1\]: this index takes the graph's integer node labels, got "
                                         r"str '20'"):
        ints.reachable([10, "20"], [20, 30], backend="cpu")


@pytest.fixture(scope="module")
def tricky_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("review53") / "tricky.h5"
    distgrail.build_index(_tricky_graph(), dims=2, backend="cpu", output=str(path))
    srv = Server(path)
    yield srv, distgrail.open_index(path)
    assert srv.stop() == 0, srv.lines


@pytest.fixture(scope="module")
def ids_server(tmp_path_factory):
    path = tmp_path_factory.mktemp("review53") / "ids.h5"
    _ids_index().save(path)
    srv = Server(path)
    yield srv, distgrail.open_index(path)
    assert srv.stop() == 0, srv.lines


def _same_refusal(index, client, *args):
    with pytest.raises(QueryError) as want:
        index.reachable(*args, backend="cpu")
    with pytest.raises(QueryError) as got:
        client.reachable(*args)
    assert str(got.value) == str(want.value)
    return str(got.value)


def test_the_client_refuses_what_index_query_refuses_on_a_string_labelled_server(tricky_server):
    srv, idx = tricky_server
    with distgrail.connect(srv.url) as c:
        assert c.reachable("1", "x") and c.reachable(["None", "y"], ["x", "x"]).tolist() == [True, False]
        # each was answered as the label that is its text ("None", "1", "1.5", "True"): True
        assert "got NoneType None" in _same_refusal(idx, c, None, "x")
        assert "got NoneType None" in _same_refusal(idx, c, [None], ["x"])
        assert "got float 1.5" in _same_refusal(idx, c, np.array([1.5, "1"], dtype=object), np.array(["x", "x"]))
        assert "got bool True" in _same_refusal(idx, c, np.array([True], dtype=object), np.array(["x"], dtype=object))
        assert "sources: this index takes the graph's string node labels, got int64" in _same_refusal(idx, c, 1, "x")
        assert "targets: this index takes the graph's string node labels, got int64" in _same_refusal(idx, c, "1", 1)
        assert "sources[0]: this index takes the graph's string node labels, got int 1" in \
            _same_refusal(idx, c, [1, "None"], ["x", "x"])
        assert c.reachable("1", "x")  # the server answers after


def test_the_client_names_a_python_int_past_64_bits_as_index_query_does(ids_server):
    srv, idx = ids_server
    with distgrail.connect(srv.url) as c:
        assert "sources[0] out of range 0..5, got 18446744073709551616" == _same_refusal(idx, c, 2**64, 0)
        assert "targets[1] out of range 0..5, got 1180591620717411303424" == _same_refusal(idx, c, [0, 1], [2, 2**70])
        assert "sources[1]: vertex ids must be integers, got bool True" == _same_refusal(idx, c, [0, True], [1, 2])
        got, _ = c.query(np.array([0, 3, 4], dtype=object), np.array([2, 4, 3], dtype=object))
        assert got.tolist() == [True, True, False]


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://127.0.0.1:abc", "http://[::1"])
def test_a_malformed_server_address_is_a_server_error_and_exit_2(url, tmp_path):
    with pytest.raises(ServerError, match=rf"^{__import__('re').escape(url)}: not a server address \("):
        distgrail.connect(url)
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 1\n")
    for cmd in (["query", "--server", url, str(pairs)], ["update", "--server", url, "--add", str(pairs)]):
        r = subprocess.run([sys.executable, "-m", "distgrail", *cmd], capture_output=True, text=True, cwd=ROOT,
                           timeout=120)
        assert r.returncode == 2, (cmd, r.stderr)
        assert r.stderr.startswith(f"distgrail: error: {url}: not a server address") and "Traceback" not in r.stderr


def _closure(n, src, dst) -> np.ndarray:
    """reach[u, v] by one plain BFS from every vertex over the raw edges."""
    succ = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        succ[a].append(b)
    reach = np.zeros((n, n), bool)
    for u in range(n):
        reach[u, u], todo = True, [u]
        while todo:
            for w in succ[todo.pop()]:
                if not reach[u, w]:
                    reach[u, w] = True
                    todo.append(w)
    return reach


def test_answers_match_bfs_on_cycles_self_loops_repeats_and_isolated_vertices():
    """Every pair of small random graphs, as int64, int8, uint64, Python lists and strided views,
    checked against a BFS over the raw edges (seen right in this review: the base the refusals
    above stand on)."""
    rng = np.random.default_rng(53)
    for trial in range(30):
        n = int(rng.integers(1, 25))
        m = int(rng.integers(0, 3 * n))
        src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
        dst[: m // 4] = src[: m // 4]  # self-loops
        idx = distgrail.build_index((src, dst), dims=int(rng.integers(1, 4)), num_vertices=n,
                                    supports=[0, 1, "auto"][trial % 3], backend="cpu")
        u, v = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
        want = _closure(n, src, dst)[u, v].tolist()
        both = np.stack([u, v], axis=1)
        for s, t in ((u, v), (u.astype(np.int8), v.astype(np.int8)), (u.astype(np.uint64), v.astype(np.uint64)),
                     (u.tolist(), v.tolist()), (both[:, 0], both[:, 1])):
            got, _ = idx.query(s, t, backend="cpu")
            assert got.tolist() == want, (trial, n, src.tolist(), dst.tolist(), type(s))


def test_build_index_into_a_missing_directory_is_an_output_error(tmp_path):
    g = (np.array([0]), np.array([1]))
    with pytest.raises(OutputError, match=r"x\.h5: cannot write the index: directory .* does not exist"):
        distgrail.build_index(g, backend="cpu", output=str(tmp_path / "missing" / "x.h5"))
    with pytest.raises(OutputError, match=r"cannot write the output: directory .* does not exist"):  # (as save)
        distgrail.build_index(g, backend="cpu").save(tmp_path / "missing" / "x.h5")
    assert list(tmp_path.iterdir()) == []


def _post_json(url, doc) -> tuple:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url + "/query", data=json.dumps(doc).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_json_body_refuses_a_bool_among_ids_and_a_number_among_labels(ids_server, tricky_server):
    # the server read JSON lists with np.array: [0, true] was the ids 0 and 1, [1.5, "x"] the labels
    # "1.5" and "x", both answered (200); now a 400 naming the item, as Index.query's message
    srv, idx = ids_server
    code, body = _post_json(srv.url, {"sources": [0, True], "targets": [1, 2]})
    assert code == 400 and "sources[1]: vertex ids must be integers, got bool True" in body, (code, body)
    code, body = _post_json(srv.url, {"sources": [0, 3], "targets": [2, 4]})
    assert code == 200 and body["answers"] == [True, True], (code, body)
    srv, idx = tricky_server
    code, body = _post_json(srv.url, {"sources": [1.5, "1"], "targets": ["x", "x"]})
    assert code == 400 and "sources[0]" in body and "got float 1.5" in body, (code, body)
    code, body = _post_json(srv.url, {"sources": ["1.5", "y"], "targets": ["x", "x"]})
    assert code == 200 and body["answers"] == [True, False], (code, body)


@pytest.mark.parametrize("num_vertices", [3, None])
def test_ids_past_int64_from_arrays_are_named_as_given_not_wrapped(num_vertices):
    # the arrays were cast to int64 before the range check: 2**63 + 1 was named -9223372036854775807,
    # 1e20 as -9223372036854775808 (with a RuntimeWarning)
    cases = [((np.array([0, 2**63 + 1], np.uint64), np.array([1, 2], np.uint64)), "sources[1]", "9223372036854775809"),
             ((np.array([0.0, 1e20]), np.array([1.0, 2.0])), "sources[1]", "1e+20"),
             ((np.array([0.0, 1.0]), np.array([1.0, -1e30])), "targets[1]", "-1e+30")]
    for edges, what, value in cases:
        with pytest.raises(GraphFormatError) as e:
            distgrail.build_index(edges, num_vertices=num_vertices, backend="cpu")
        assert f"{what} out of range" in str(e.value) and str(e.value).endswith(f"got {value}"), str(e.value)
        assert "-922337203685477580" not in str(e.value)
    ok = distgrail.build_index((np.array([0, 1], np.uint64), np.array([1, 2], np.uint64)), backend="cpu")
    assert ok.reachable(0, 2) and not ok.reachable(2, 0)


def test_an_update_of_no_edges_is_refused_not_counted(tmp_path):
    # POST /edges of no edges was taken as update 1 ("method": "unchanged"), where distgrail update
    # refuses an edges file without edges
    path = tmp_path / "ids.h5"
    _ids_index().save(path)
    tok = tmp_path / "token"
    tok.write_text("s3cret-token-53\n")
    tok.chmod(0o600)
    srv = Server(path, "--token-file", str(tok))
    try:
        with distgrail.connect(srv.url, token="s3cret-token-53") as c:
            with pytest.raises(QueryError, match="no edges: POST /edges takes at least one edge"):
                c.add_edges([], [])
            assert c.add_edges([5], [0])["update"] == 1  # the first update counted is this one
            assert c.reachable(5, 1)
    finally:
        assert srv.stop() == 0, srv.lines
