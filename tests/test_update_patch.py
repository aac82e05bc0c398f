"""``distgrail update --layout patch`` (distgrail/cli_update_patch.py): the update written as the
rows it changed over the index it read, kept beside it as a hard link. The patched index holds the
very arrays of ``insert_edges(keep_ids=True)`` and answers as BFS over the graph plus every edge;
updated again (``--layout keep`` of a patched index) it stays patched over the same base, its
patch the rows of both updates; in place the index's name takes the main file and its old inode
stays as the base; where no patch can be written (a split index, a relabelling update) the index
is written whole and the command says why; wrong options are refused."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.indexfile import patch_base
from distgrail.indexfile.patch_read import patch_rows
from distgrail.io.generate import generate
from distgrail.update import insert_edges

from test_update import _build, _check

pytest.importorskip("numba")


@pytest.fixture
def graph(tmp_path):
    """(generated graph, its whole index file, three edge files and their edges)."""
    g = generate("scale-free", 400, 2, seed=8)
    base = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n, supports="auto").save(base)
    rng = np.random.default_rng(4)
    edges = []
    for i in range(3):
        s, t = rng.integers(0, g.n, 40), rng.integers(0, g.n, 40)
        p = tmp_path / f"e{i}.txt"
        p.write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
        edges.append((str(p), s, t))
    return g, base, edges


def _pairs(g, seed=3):
    r = np.random.default_rng(seed)
    return r.integers(0, g.n, 6000), r.integers(0, g.n, 6000)


def _same_inode(a, b):
    return os.path.samestat(os.stat(a), os.stat(b))


def test_a_patched_update_holds_the_kept_ids_arrays_and_answers_as_bfs(graph, tmp_path, capsys):
    g, base, edges = graph
    e0, s0, t0 = edges[0]
    one = str(tmp_path / "one.h5")
    assert main(["update", base, "--add", e0, "-o", one, "--layout", "patch", "--json", "--backend", "cpu"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["layout"] == "patch" and got["method"] == "swept" and got["edges_recorded"] == 40
    link = patch_base(one)
    assert link is not None and _same_inode(link, base)  # nothing copied: the base is a hard link
    want, _ = insert_edges(distgrail.open_index(base), s0, t0, backend="cpu", keep_ids=True)
    idx = distgrail.open_index(one)
    assert sorted(idx.arrays) == sorted(want.arrays)
    for k, v in want.arrays.items():
        assert np.array_equal(np.asarray(idx.arrays[k]), np.asarray(v)), k
    for k in ("n_components", "n_dag_edges", "n_levels", "components_by_level"):
        assert idx.meta[k] == want.meta[k], k
    assert os.path.getsize(one) < os.path.getsize(base)  # only the rows it changed
    _check(idx, g.src, g.dst, g.n, s0, t0, _pairs(g))
    # updated again (keep: a patched index stays patched): over the same base, both updates' rows
    e1, s1, t1 = edges[1]
    two = str(tmp_path / "two.h5")
    assert main(["update", one, "--add", e1, "-o", two, "--backend", "cpu"]) == 0
    assert "patched over two.h5." in capsys.readouterr().out
    assert _same_inode(patch_base(two), base)
    r1, r2 = patch_rows(one), patch_rows(two)
    assert set(r1) <= set(r2) and all(np.isin(r1[k], r2[k]).all() for k in r1)
    idx2 = distgrail.open_index(two)
    assert idx2.arrays["updates/edges"].shape == (80, 2)
    _check(idx2, g.src, g.dst, g.n, np.r_[s0, s1], np.r_[t0, t1], _pairs(g, 4))
    _check(distgrail.open_index(one), g.src, g.dst, g.n, s0, t0, _pairs(g, 5))  # the first still reads
    # info sums both updates (the log travels whole in each patch)
    assert main(["info", two, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["updates"]["updates"] == 2 and info["updates"]["edges_given"] == 80


def test_in_place_the_index_takes_the_main_file_and_its_inode_stays_the_base(graph, tmp_path, capsys):
    g, base, edges = graph
    os.chmod(base, 0o640)
    ino = os.stat(base).st_ino
    (e0, s0, t0), (e1, s1, t1) = edges[:2]
    assert main(["update", base, "--add", e0, "--layout", "patch", "--quiet", "--backend", "cpu"]) == 0
    link = patch_base(base)
    assert link is not None and os.stat(link).st_ino == ino and os.stat(base).st_ino != ino
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o640
    assert main(["update", base, "--add", e1, "--quiet", "--backend", "cpu"]) == 0  # in place again: stays patched
    link2 = patch_base(base)
    assert os.stat(link2).st_ino == ino and stat.S_IMODE(os.stat(base).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == sorted(["base.h5", os.path.basename(link2), "e0.txt", "e1.txt", "e2.txt"])
    _check(distgrail.open_index(base), g.src, g.dst, g.n, np.r_[s0, s1], np.r_[t0, t1], _pairs(g))


def test_an_update_that_adds_no_dag_edge_patches_only_the_record(graph, tmp_path, capsys):
    g, base, _ = graph
    idx = distgrail.open_index(base)
    s = (int(g.src[0]), int(g.dst[0]))  # an edge the graph has: reachable already
    (tmp_path / "in.txt").write_text(f"{s[0]} {s[1]}\n")
    out = str(tmp_path / "same.h5")
    assert main(["update", base, "--add", str(tmp_path / "in.txt"), "-o", out, "--layout", "patch", "--json",
                 "--backend", "cpu"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["method"] == "unchanged" and got["same_component"] + got["already_reachable"] == 1
    assert patch_rows(out) == {}
    new = distgrail.open_index(out)
    for k, v in idx.arrays.items():
        assert np.array_equal(np.asarray(new.arrays[k]), np.asarray(v)), k
    assert new.arrays["updates/edges"].tolist() == [list(s)]


def test_where_no_patch_can_be_written_the_index_is_written_whole_and_says_why(graph, tmp_path, capsys):
    g, base, edges = graph
    e0, s0, t0 = edges[0]
    split = str(tmp_path / "split.h5")
    distgrail.open_index(base).save(split, layout="split", parts=2)
    out = str(tmp_path / "from_split.h5")
    assert main(["update", split, "--add", e0, "-o", out, "--layout", "patch", "--backend", "cpu"]) == 0
    assert "is split into parts, and a patch is written over a one-file index" in capsys.readouterr().err
    assert patch_base(out) is None
    _check(distgrail.open_index(out), g.src, g.dst, g.n, s0, t0, _pairs(g))
    out2 = str(tmp_path / "relabelled.h5")
    assert main(["update", base, "--add", e0, "-o", out2, "--layout", "patch", "--rebuild-above", "0", "--json",
                 "--backend", "cpu"]) == 0
    cap = capsys.readouterr()
    assert "labels the components again" in cap.err and json.loads(cap.out)["method"] == "relabelled"
    assert patch_base(out2) is None
    _check(distgrail.open_index(out2), g.src, g.dst, g.n, s0, t0, _pairs(g))


def test_parts_with_a_patch_are_refused_and_write_nothing(graph, tmp_path, capsys):
    _, base, edges = graph
    before = sorted(os.listdir(tmp_path))
    assert main(["update", base, "--add", edges[0][0], "-o", str(tmp_path / "x.h5"), "--layout", "patch",
                 "--parts", "2"]) == 2
    assert "--parts is for --layout split" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.gpu
def test_a_patched_update_on_the_gpu_equals_the_cpus(graph, tmp_path, capsys):
    """The GPU's rows (the sweep on the device, only the changed rows down) give the file the
    CPU's walks give: the same arrays, both answering as BFS."""
    g, base, edges = graph
    e0, s0, t0 = edges[0]
    outs = {}
    for be in ("cpu", "gpu"):
        outs[be] = str(tmp_path / f"{be}.h5")
        assert main(["update", base, "--add", e0, "-o", outs[be], "--layout", "patch", "--quiet", "--backend", be]) == 0
    a, b = distgrail.open_index(outs["cpu"]), distgrail.open_index(outs["gpu"])
    for k, v in a.arrays.items():
        assert np.array_equal(np.asarray(b.arrays[k]), np.asarray(v)), k
    _check(b, g.src, g.dst, g.n, s0, t0, _pairs(g))


@pytest.mark.parametrize("piece", [1, 3, 1 << 20])
def test_rows_and_csr_rows_replaced_in_pieces_equal_one_row_at_a_time(piece, monkeypatch):
    """The patch's scatters over the host threads (pieces of ``CSR_PIECE_ROWS`` rows, the CSR's
    offsets carried from piece to piece) give what replacing one row at a time gives, for stored
    offset types of every width."""
    from distgrail.indexfile import patch_read

    monkeypatch.setattr(patch_read, "CSR_PIECE_ROWS", piece)
    rng = np.random.default_rng(piece)
    for t in range(30):
        C = int(rng.integers(1, 70))
        ip = np.zeros(C + 1, (np.uint32, np.uint64, np.int64)[t % 3])
        ip[1:] = np.cumsum(rng.integers(0, 4, C))
        ix = rng.integers(0, C, int(ip[-1])).astype(np.uint32)
        r = np.sort(rng.choice(C, int(rng.integers(0, C + 1)), replace=False)).astype(np.int64)
        off = np.zeros(r.size + 1, np.int64)
        off[1:] = np.cumsum(rng.integers(0, 5, r.size))
        v = rng.integers(0, C, int(off[-1]))
        rows = [ix[int(ip[c]):int(ip[c + 1])] for c in range(C)]
        for i, c in enumerate(r):
            rows[c] = v[off[i]:off[i + 1]].astype(ix.dtype)
        nip, nix = patch_read.csr_rows_replaced(ip, ix, r, off, v)
        assert nip.tolist() == [0, *np.cumsum([len(x) for x in rows]).tolist()]
        assert nix.dtype == ix.dtype and np.array_equal(nix, np.concatenate(rows + [ix[:0]]))
        iv = rng.integers(0, 99, (3, C, 2)).astype(np.int32)
        want = iv.copy()
        vals = rng.integers(0, 99, (3, r.size, 2)).astype(np.int32)
        for i, c in enumerate(r):
            want[:, c] = vals[:, i]
        patch_read.replace_rows(iv, "labels/intervals", r, vals)
        assert np.array_equal(iv, want)


def test_serve_answers_from_a_patched_index_and_takes_edges_on_it(graph, tmp_path, capsys):
    """``distgrail serve`` of a patched index (real HTTP clients): its answers are BFS's over the
    graph plus the patch's edges; ``POST /edges`` then adds more, answered from the next batch."""
    import io
    import json as _json

    from distgrail.bfs import bfs_reachable, csr_of
    from distgrail.io.graph import EdgeGraph
    from test_server import TOKEN, Server, _npy
    from test_server_updates import _send

    g, base, edges = graph
    (e0, s0, t0), (_, s1, t1) = edges[:2]
    out = str(tmp_path / "served.h5")
    assert main(["update", base, "--add", e0, "-o", out, "--layout", "patch", "--quiet", "--backend", "cpu"]) == 0
    assert patch_base(out) is not None
    qs, qt = _pairs(g, 11)
    pairs = np.stack([qs, qt], 1)

    def bfs(S, T):
        return bfs_reachable(*csr_of(EdgeGraph(g.n, np.r_[g.src, S].astype(np.int64), np.r_[g.dst, T].astype(np.int64))),
                             qs, qt)

    assert (bfs(s0, t0) != bfs(np.r_[s0, s1], np.r_[t0, t1])).any()  # (the versions can be told apart)
    assert (bfs(s0, t0) != bfs(s0[:0], t0[:0])).any()
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    srv = Server(out, "--token-file", str(tok))
    try:
        status, body = _send(srv.url, "/query", _npy(pairs))
        assert status == 200 and np.array_equal(np.load(io.BytesIO(body)), bfs(s0, t0))
        status, body = _send(srv.url, "/edges", _npy(np.stack([s1, t1], 1)))
        assert status == 200 and _json.loads(body)["given"] == 40
        status, body = _send(srv.url, "/query", _npy(pairs))
        assert status == 200 and np.array_equal(np.load(io.BytesIO(body)), bfs(np.r_[s0, s1], np.r_[t0, t1]))
    finally:
        assert srv.stop() == 0, srv.lines


def test_a_base_that_cannot_be_linked_is_written_whole_and_said(graph, tmp_path, capsys, monkeypatch):
    """The base's hard link refused (another file system, no permission): the update is written
    whole instead, the reason on stderr, the index exact; no link or temporary is left."""
    import errno

    g, base, edges = graph
    e0, s0, t0 = edges[0]

    def refuse(src, dst, *a, **k):
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), src)

    monkeypatch.setattr(os, "link", refuse)
    out = str(tmp_path / "whole.h5")
    assert main(["update", base, "--add", e0, "-o", out, "--layout", "patch", "--backend", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "cannot link the base" in err and "the index is written whole" in err
    assert patch_base(out) is None
    assert sorted(os.listdir(tmp_path)) == ["base.h5", "e0.txt", "e1.txt", "e2.txt", "whole.h5"]
    _check(distgrail.open_index(out), g.src, g.dst, g.n, s0, t0, _pairs(g))


@pytest.mark.parametrize("shape,dtype,axis1", [((5000, 3), np.uint64, False), ((3, 4000, 2), np.int32, True),
                                               ((7001,), np.uint8, False), ((2, 1, 2), np.int32, True)])
def test_block_checksums_from_the_changes_equal_checksumming_the_blocks(shape, dtype, axis1, monkeypatch):
    """``_crcs_from_changes`` (CRC-32 linear in the data: the old block CRC-32 and the changed
    bytes alone) gives zlib's CRC-32 of every block of the patched array, for rows that straddle
    blocks (24-byte rows, 4 KiB blocks), rows along axis 1 over several dimensions, one-byte
    rows, unchanged rows among the changed and blocks with no row."""
    import zlib

    from distgrail.indexfile import patch as patch_mod
    from distgrail.indexfile.patch import _crcs_from_changes, _flat

    monkeypatch.setattr(patch_mod, "ROW_BYTES", 0)  # (always the changes' path; its choice: below)
    rng = np.random.default_rng(len(shape))
    name = "labels/intervals" if axis1 else "x"
    old = rng.integers(0, 200, shape).astype(dtype)
    C = shape[1] if axis1 else shape[0]
    dims = shape[0] if axis1 else 1
    rows = np.sort(rng.choice(C, max(1, C // 9), replace=False)).astype(np.int64)
    new = old.copy()
    vals = rng.integers(0, 200, (shape[0], rows.size, *shape[2:]) if axis1 else (rows.size, *shape[1:])).astype(dtype)
    vals.reshape(-1)[::3] = (old[:, rows] if axis1 else old[rows]).reshape(-1)[::3]  # (some bytes unchanged)
    if axis1:
        new[:, rows] = vals
    else:
        new[rows] = vals
    block = 4096
    nbytes = old.nbytes
    n_blocks = -(-nbytes // block)

    def crcs(a):
        raw = a.reshape(-1).view(np.uint8).tobytes()
        return [zlib.crc32(raw[k * block:(k + 1) * block]) for k in range(n_blocks)]

    rb = _flat(old, name).shape[1] * old.dtype.itemsize
    got = _crcs_from_changes(old, rows, vals.reshape(dims, rows.size, -1), (old, block, np.array(crcs(old), np.uint32)),
                             block, n_blocks, dims, C, rb)
    assert got == crcs(new)
    # a prior that does not fit is not used: the caller reads the blocks
    assert _crcs_from_changes(old, rows, vals, (old, block * 2, crcs(old)), block, n_blocks, dims, C, rb) is None
    assert _crcs_from_changes(old, rows, vals, (old.astype(np.int64), block, crcs(old)), block, n_blocks, dims, C,
                              rb) is None


def test_a_patch_written_from_the_changes_equals_one_written_from_the_blocks(graph, tmp_path, monkeypatch):
    """``write_patched_index(prior=...)`` (the array sweep's rows; the blocks' checksums from the
    index in memory and its stored CRC-32s) and ``crcs=...`` (the result's checksums made where the
    swept arrays are; the DAG's CSR then not rebuilt) write the same checksums and seals as neither,
    over a whole index and again over the patched one."""
    import h5py

    from distgrail.index import Index
    from distgrail.indexfile import write_patched_index
    from distgrail.indexfile.patch_read import dataset_crcs
    from distgrail.indexfile import patch as patch_mod
    from distgrail.update_rows import insert_rows

    monkeypatch.setattr(patch_mod, "ROW_BYTES", 0)  # (a small index: the changes' path by force)
    used = []
    real = patch_mod._crcs_from_changes
    monkeypatch.setattr(patch_mod, "_crcs_from_changes", lambda *a: used.append(real(*a)) or used[-1])
    g, base, edges = graph
    src, prev = base, None
    for step, (_, s, t) in enumerate(edges[:2]):
        idx = distgrail.open_index(src)
        keep = {k: np.array(v) for k, v in idx.arrays.items()}
        up, _ = insert_rows(Index(idx.meta, keep), s, t, sweep="arrays", rebuild_above=10 ** 9, previous=prev)
        assert up.intact and up.rows
        assert {n for n, (r, _) in up.rows.items() if r.size} <= set(up.crcs) and up.dag is not None and {"dag/indptr", "dag/indices"} <= set(up.crcs)
        crcs = dataset_crcs(src)
        prior = {name: (keep[name], *crcs[name]) for name in up.rows}
        outs = []
        for variant in ("blocks", "prior", "crcs"):
            out = str(tmp_path / f"s{step}-{variant}.h5")
            if variant == "crcs":  # (neither a block read nor the CSR rebuilt)
                monkeypatch.setattr(patch_mod, "_patched_crcs", None)
                monkeypatch.setattr(patch_mod, "csr_rows_replaced", None)
            write_patched_index(out, patch_base(src) or src, up.meta, up.rows, dag=up.dag, whole=up.whole,
                                prior=prior if variant == "prior" else None, crcs=up.crcs if variant == "crcs" else None)
            outs.append(out)
        monkeypatch.undo()
        monkeypatch.setattr(patch_mod, "ROW_BYTES", 0)
        monkeypatch.setattr(patch_mod, "_crcs_from_changes", lambda *a: used.append(real(*a)) or used[-1])
        with h5py.File(outs[0], "r") as a, h5py.File(outs[1], "r") as b, h5py.File(outs[2], "r") as c:
            named = [n for n in up.rows if f"patch/{n}" in a]  # (rows of no change are not written)
            assert "labels/intervals" in named and named == [n for n in up.rows if f"patch/{n}" in b]
            for name in named + ["dag/indptr", "dag/indices"] * (up.dag is not None):
                ga, gb, gc = a[f"patch/{name}"].attrs, b[f"patch/{name}"].attrs, c[f"patch/{name}"].attrs
                assert np.array_equal(ga["crc32"], gb["crc32"]) and ga["crc32_block"] == gb["crc32_block"], name
                assert np.array_equal(ga["crc32"], gc["crc32"]) and ga["crc32_block"] == gc["crc32_block"], name
            assert a.attrs["crc32_of_datasets"] == b.attrs["crc32_of_datasets"] == c.attrs["crc32_of_datasets"]
        for out in outs[1:]:
            _check(distgrail.open_index(out), g.src, g.dst, g.n, np.concatenate([e[1] for e in edges[:step + 1]]),
                   np.concatenate([e[2] for e in edges[:step + 1]]), _pairs(g))
        assert used and all(u is not None for u in used)  # (the changes' path, not the blocks read)
        used.clear()
        src, prev = outs[1], patch_rows(outs[1])


def test_given_checksums_are_used_only_for_the_dataset_written_and_over_many_blocks(graph, tmp_path, monkeypatch):
    """``crcs=`` over datasets of many blocks (the block size made small) gives the checksums of
    the blocks read; an entry of another type or shape than the dataset written is not used (the
    writer computes that dataset's: the same file as without it), the DAG's CSR then rebuilt."""
    import h5py

    from distgrail.index import Index
    from distgrail.indexfile import layout, write_patched_index
    from distgrail.indexfile import patch as patch_mod
    from distgrail.update_rows import insert_rows

    g, base, edges = graph
    idx = distgrail.open_index(base)
    monkeypatch.setattr(layout, "CRC_BLOCK", 64)  # (every dataset of several blocks)
    up, _ = insert_rows(Index(idx.meta, {k: np.array(v) for k, v in idx.arrays.items()}), edges[0][1], edges[0][2],
                        sweep="arrays", rebuild_above=10 ** 9)
    assert all(len(up.crcs[n][1]) > 1 for n in ("labels/intervals", "dag/indices"))
    wrong = dict(up.crcs)
    block, crcs, dtype, shape = wrong["labels/intervals"]
    wrong["labels/intervals"] = (block, crcs, "<u8" if np.dtype(dtype).itemsize != 8 else "<u4", shape)
    wrong["dag/indices"] = (*wrong["dag/indices"][:3], (wrong["dag/indices"][3][0] + 1,))
    rebuilt = []
    real = patch_mod.csr_rows_replaced
    monkeypatch.setattr(patch_mod, "csr_rows_replaced", lambda *a: rebuilt.append(1) or real(*a))
    outs = []
    for name, given in (("blocks", None), ("given", up.crcs), ("wrong", wrong)):
        outs.append(str(tmp_path / f"{name}.h5"))
        write_patched_index(outs[-1], base, up.meta, up.rows, dag=up.dag, whole=up.whole, crcs=given)
    assert len(rebuilt) == 2  # (the blocks' write and the one whose DAG entry has another shape)
    with h5py.File(outs[0], "r") as a, h5py.File(outs[1], "r") as b, h5py.File(outs[2], "r") as c:
        for name in [n for n in up.rows if f"patch/{n}" in a] + ["dag/indptr", "dag/indices"]:
            want = a[f"patch/{name}"].attrs["crc32"]
            assert want.size > 1 and a[f"patch/{name}"].attrs["crc32_block"] == 64, name
            assert np.array_equal(want, b[f"patch/{name}"].attrs["crc32"]), name
            assert np.array_equal(want, c[f"patch/{name}"].attrs["crc32"]), name
        assert a.attrs["crc32_of_datasets"] == b.attrs["crc32_of_datasets"] == c.attrs["crc32_of_datasets"]
    monkeypatch.undo()
    for out in outs[1:]:
        _check(distgrail.open_index(out), g.src, g.dst, g.n, edges[0][1], edges[0][2], _pairs(g))


def test_the_changes_path_is_taken_for_few_rows_in_a_large_dataset_only(monkeypatch):
    """A few changed rows in many blocks: their CRC-32s from the changes (each row far cheaper than
    a block read); a row in every few bytes of every block: the blocks read (None)."""
    from distgrail.indexfile.patch import ROW_BYTES, _crcs_from_changes

    block, n_blocks = 1 << 22, 1000
    base = np.zeros((n_blocks * block // 8,), np.uint64)  # (pages never touched: zeros)
    few = np.arange(0, base.size, base.size // 50, dtype=np.int64)[:50]
    got = _crcs_from_changes(base, few, np.ones((1, few.size, 1), np.uint64), (base, block, np.zeros(n_blocks, np.uint32)),
                             block, n_blocks, 1, base.size, 8)
    assert got is not None and len(got) == n_blocks
    n_blocks = 4
    base = base[:n_blocks * block // 8]
    dense = np.arange(0, base.size, block // 8 // (2 * (block // ROW_BYTES)), dtype=np.int64)  # (2x the break-even)
    assert _crcs_from_changes(base, dense, np.ones((1, dense.size, 1), np.uint64),
                              (base, block, np.zeros(n_blocks, np.uint32)), block, n_blocks, 1, base.size, 8) is None
