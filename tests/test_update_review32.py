"""Review 32 of ``distgrail update`` (distgrail/cli_update.py) and ``POST /edges``
(distgrail/server/app.py): an id past the index in a ``.mtx``, ``.gra`` or ``.h5`` graph is named
with the file, the line (the dataset and row) and the value as written; a file without edges is
refused, the index untouched; every repeated ``--add`` is read; ``/health`` keeps naming the
served index after an update."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.update import UPDATES
from test_server import MPIEXEC, TOKEN, Server, _env, needs_mpiexec

N = 200


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """An index of a 200-vertex paper graph, and the graph."""
    g = generate("paper", N, 3, seed=4)
    path = tmp_path_factory.mktemp("r32") / "g.h5"
    distgrail.build_index((g.src, g.dst), num_vertices=g.n, dims=2, backend="cpu").save(path)
    return str(path), g


def _update(capsys, *args):
    rc = main(["update", *map(str, args), "--backend", "cpu"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_an_id_past_the_index_in_mtx_gra_and_h5_is_named_with_file_line_and_value(base, tmp_path, capsys):
    path, _ = base
    out = tmp_path / "y.h5"
    mtx = tmp_path / "m2.mtx"  # 1-based: the value as written, not 249
    mtx.write_text("%%MatrixMarket matrix coordinate pattern general\n300 300 2\n1 2\n250 2\n")
    gra = tmp_path / "b.gra"  # the target of vertex 3
    gra.write_text("graph_for_greach\n300\n" + "".join(f"{v}: {'250 ' if v == 3 else ''}#\n" for v in range(300)))
    gz = tmp_path / "b.gra.gz"
    gz.write_bytes(gzip.compress(gra.read_bytes()))
    sym = tmp_path / "s.mtx"  # comments, a blank line, a leading zero
    sym.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n% c\n\n300 300 2\n1 2 % x\n3 0250\n")
    for f, want in ((mtx, f"{mtx}:4: vertex id out of range 1..200, got '250'"),
                    (gra, f"{gra}:6: vertex id out of range 0..199, got '250'"),
                    (gz, f"{gz}:6: vertex id out of range 0..199, got '250'"),
                    (sym, f"{sym}:6: vertex id out of range 1..200, got '0250'")):
        rc, _, err = _update(capsys, path, "--add", f, "-o", out)
        assert rc == 2 and want in err, err
        assert not out.exists()
    src = tmp_path / "src.gra"  # a source line past the index
    src.write_text("300\n" + "".join(f"{v}: {'1 ' if v == 250 else ''}#\n" for v in range(300)))
    rc, _, err = _update(capsys, path, "--add", src, "-o", out)
    assert rc == 2 and f"{src}:252: vertex id out of range 0..199, got '250'" in err, err
    h5 = tmp_path / "p.h5"  # a .h5 graph: the dataset and row
    assert main(["generate", "paper", "-n", "300", "-o", str(h5)]) == 0
    capsys.readouterr()
    rc, _, err = _update(capsys, path, "--add", h5, "-o", out)
    assert rc == 2 and f"{h5}: csr/" in err and "vertex id out of range 0..199, got '2" in err, err
    assert not out.exists()
    ok = tmp_path / "ok.mtx"  # a larger header whose entries are all vertices of the index: read
    ok.write_text("%%MatrixMarket matrix coordinate pattern general\n300 300 1\n200 1\n")
    rc, text, err = _update(capsys, path, "--add", ok, "-o", out, "--json")
    assert rc == 0 and json.loads(text)["given"] == 1, err


@pytest.mark.parametrize("name,data", [("empty.txt", b""), ("comments.txt", b"# a\n% b\n"), ("blank.txt", b"\n \n\n"),
                                       ("x.txt.gz", b""), ("z.txt.gz", gzip.compress(b"# none\n")),
                                       ("e.mtx", b"%%MatrixMarket matrix coordinate pattern general\n5 5 0\n")])
def test_a_file_without_edges_is_refused_and_the_index_untouched(base, tmp_path, capsys, name, data):
    path, _ = base
    idx = tmp_path / "g.h5"
    idx.write_bytes(open(path, "rb").read())
    before = (idx.read_bytes(), os.stat(idx).st_mtime_ns)
    f = tmp_path / name
    f.write_bytes(data)
    rc, _, err = _update(capsys, idx, "--add", f)
    said = "truncated or damaged" if data == b"" and name.endswith(".gz") else "no edges to add"  # (0868e36)
    assert rc == 2 and f"{f}: " in err and said in err, err
    assert (idx.read_bytes(), os.stat(idx).st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == sorted(["g.h5", name])


def test_every_repeated_add_is_read_in_order(base, tmp_path, capsys):
    path, g = base
    rng = np.random.default_rng(3)
    a = np.stack([rng.integers(0, N, 20), rng.integers(0, N, 20)], 1)
    b = np.stack([rng.integers(0, N, 15), rng.integers(0, N, 15)], 1)
    fa, fb = tmp_path / "e2.txt", tmp_path / "e.csv"
    fa.write_text("".join(f"{s} {t}\n" for s, t in a))
    fb.write_text("".join(f"{s},{t}\n" for s, t in b))
    out = tmp_path / "y.h5"
    rc, text, err = _update(capsys, path, "--add", fa, "--add", fb, "-o", out, "--json")
    assert rc == 0, err
    doc = json.loads(text)
    assert doc["given"] == 35 == doc["edges_recorded"], doc
    both = np.concatenate([a, b])
    new = distgrail.open_index(out)
    assert np.array_equal(np.asarray(new.arrays[UPDATES]).reshape(-1, 2), both)  # in the order given
    full = EdgeGraph(g.n, np.r_[g.src, both[:, 0]].astype(np.int64), np.r_[g.dst, both[:, 1]].astype(np.int64))
    qs, qt = np.repeat(np.arange(N), N), np.tile(np.arange(N), N)
    got, _ = new.query(qs, qt, backend="cpu")
    assert np.array_equal(got, bfs_reachable(*csr_of(full), qs, qt))
    # every file checked: a bad id in the second is named with that file; nothing written
    bad = tmp_path / "bad.txt"
    bad.write_text("0 1\n1 250\n")
    out2 = tmp_path / "z.h5"
    rc, _, err = _update(capsys, path, "--add", fa, "--add", bad, "-o", out2)
    assert rc == 2 and f"{bad}:2: vertex id out of range 0..199, got '250'" in err, err
    rc, _, err = _update(capsys, path, "--add", fa, "--add", tmp_path / "nope.txt", "-o", out2)
    assert rc == 2 and "nope.txt: no such edges file" in err, err
    assert not out2.exists()


def _health(srv):
    import urllib.request

    req = urllib.request.Request(srv.url + "/health", headers={"Authorization": f"Bearer {TOKEN}"})
    return json.loads(urllib.request.urlopen(req, timeout=30).read())


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=needs_mpiexec), pytest.param(3, marks=needs_mpiexec)])
def test_health_names_the_served_index_after_an_update(base, tmp_path, ranks):
    """``GET /health``'s ``index`` after ``POST /edges`` that sweeps the labels, then after one that
    merges components and relabels: the served file, as before the updates (it was null)."""
    path, g = base
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    mpi = {} if ranks == 1 else {"launcher": (MPIEXEC, "-n", str(ranks)), "env": _env(MPIEXEC_TIMEOUT="300"),
                                 "wait": 120}
    srv = Server(path, "--token-file", str(tok), **mpi)
    try:
        c = distgrail.connect(srv.url, token=TOKEN)
        first = _health(srv)["index"]
        assert first == os.path.abspath(path), first
        rng = np.random.default_rng(5)
        doc = c.add_edges(rng.integers(0, N, 10), rng.integers(0, N, 10))
        assert doc["update"] == 1
        h = _health(srv)
        assert h["index"] == first and h["updates"] == 1, h
        order = np.arange(N)  # a cycle through every vertex: one component, labelled again
        doc = c.add_edges(order, np.roll(order, -1))
        assert doc["update"] == 2 and doc["C"] == 1, doc
        h = _health(srv)
        assert h["index"] == first and h["updates"] == 2 and h["C"] == 1, h
    finally:
        assert srv.stop() == 0 or ranks > 1, srv.lines


@pytest.mark.parametrize("name", ["z.txt.gz", "z.TXT.BZ2", "z.zst"])
def test_index_refuses_an_empty_file_named_compressed(tmp_path, capsys, name):
    """A 0-byte ``x.txt.gz`` is a cut copy (no codec's stream is empty), not an empty graph: it
    was indexed as --num-vertices isolated vertices, exit 0."""
    src = tmp_path / name
    src.write_bytes(b"")
    out = tmp_path / "z.h5"
    assert main(["index", str(src), "--num-vertices", "10", "-o", str(out), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert name in err and "truncated or damaged" in err, err
    assert sorted(os.listdir(tmp_path)) == [name]
    plain = tmp_path / "z.txt"  # an empty plain file with --num-vertices stays 10 isolated vertices
    plain.write_bytes(b"")
    assert main(["index", str(plain), "--num-vertices", "10", "-o", str(out), "--backend", "cpu", "--quiet"]) == 0
