"""``distgrail generate rmat`` (distgrail/io/rmat.py): Graph500 R-MAT graphs, seeded and the same
for any thread count, with the quadrant distribution, skewed degrees, a bijective id scrambling,
the counts asked for; text and .h5 read back by distgrail's readers and indexed (answers vs BFS).
Also issue 28 item 4: an unknown output extension is refused."""

from __future__ import annotations

import os

import numpy as np
import pytest

import distgrail
from distgrail import cli
from distgrail.errors import DistGrailError
from distgrail.io.read import read_graph
from distgrail.io.rmat import CHUNK_EDGES, RMAT, csr_of_keys, edge_lines, rmat_chunk, rmat_edges, rmat_keys, scramble, \
    write_rmat


def test_counts_and_id_range():
    p = RMAT(10, 8, seed=3)
    s, d = rmat_edges(p, threads=2)
    assert p.n == 1024 and p.m == 8 * 1024 == s.size == d.size
    assert int(max(s.max(), d.max())) < p.n
    assert RMAT(27, 16).m == 2**31  # a Python int: no 32-bit wrap


def test_same_seed_same_bytes_for_any_thread_count(tmp_path):
    p = RMAT(13, 16, seed=7)  # 131,072 edges: two chunks
    assert p.n_chunks == 16 * 8192 // CHUNK_EDGES == 2
    files = []
    for t in (1, 2, 3):
        f = tmp_path / f"t{t}.txt"
        write_rmat(p, f, "edgelist", threads=t)
        files.append(f.read_bytes())
    assert files[0] == files[1] == files[2]
    other = tmp_path / "s8.txt"
    write_rmat(RMAT(13, 16, seed=8), other, "edgelist", threads=2)
    assert other.read_bytes() != files[0]


@pytest.mark.parametrize("k", [0, 3])
def test_compiled_kernels_match_the_numpy_twin(k):
    for p in (RMAT(12, 16, seed=1), RMAT(5, 16, seed=2, a=0.25, b=0.25, c=0.25), RMAT(9, 4, a=1.0, b=0.0, c=0.0)):
        kk = min(k, p.n_chunks - 1)
        a, b = rmat_chunk(p, kk), rmat_chunk(p, kk, jit=False)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        assert edge_lines(*a).tobytes() == edge_lines(*a, jit=False).tobytes()


def test_text_lines_are_the_ids():
    u = np.array([0, 9, 10, 4294967295, 123456789], dtype=np.uint64)
    v = np.array([1, 99, 100, 0, 7], dtype=np.uint64)
    want = b"".join(b"%d %d\n" % (x, y) for x, y in zip(u.tolist(), v.tolist()))
    assert edge_lines(u, v).tobytes() == edge_lines(u, v, jit=False).tobytes() == want


def test_quadrant_fractions_are_a_b_c_d():
    p = RMAT(16, 16, seed=5, scramble_ids=False)
    s, d = rmat_edges(p, threads=2)
    top = p.scale - 1
    su, dv = (s >> top) & 1, (d >> top) & 1
    got = [np.mean((su == i) & (dv == j)) for i, j in ((0, 0), (0, 1), (1, 0), (1, 1))]
    assert np.allclose(got, [0.57, 0.19, 0.19, 0.05], atol=0.003), got
    lvl2 = ((s >> (top - 1)) & 1, (d >> (top - 1)) & 1)  # every level draws the same way
    assert abs(np.mean((lvl2[0] == 0) & (lvl2[1] == 0)) - 0.57) < 0.003
    q = RMAT(14, 16, seed=5, a=0.25, b=0.25, c=0.25, scramble_ids=False)
    s, d = rmat_edges(q)
    assert abs(np.mean(s >> (q.scale - 1)) - 0.5) < 0.01 and abs(np.mean(d >> (q.scale - 1)) - 0.5) < 0.01


def test_degrees_are_skewed_and_scrambled():
    p = RMAT(14, 16, seed=1)
    s, d = rmat_edges(p)
    deg = np.bincount(s.astype(np.int64), minlength=p.n)
    assert deg.max() > 50 * deg.mean()  # a heavy tail (uniform graphs: max ~ 2x mean)
    assert (deg == 0).mean() > 0.2  # and many vertices without out-edges
    assert deg.argmax() != 0  # scrambled: the hub is not vertex 0, as it is unscrambled
    s0, _ = rmat_edges(RMAT(14, 16, seed=1, scramble_ids=False))
    assert np.bincount(s0.astype(np.int64)).argmax() == 0
    assert np.array_equal(np.sort(deg), np.sort(np.bincount(s0.astype(np.int64), minlength=p.n)))


@pytest.mark.parametrize("scale", [1, 2, 7, 16])
def test_scrambling_is_a_bijection(scale):
    p = RMAT(scale, 1, seed=11)
    x = np.arange(p.n, dtype=np.uint64)
    y = scramble(x, scale, p.keys)
    assert np.array_equal(np.sort(y), x)
    if scale >= 7:
        assert not np.array_equal(y, x)


def test_self_loops_and_duplicates_are_kept(tmp_path):
    p = RMAT(6, 16, seed=2)
    s, d = rmat_edges(p)
    assert (s == d).any()
    keys = s.astype(np.int64) * p.n + d
    assert np.unique(keys).size < keys.size
    f = tmp_path / "r.txt"
    write_rmat(p, f, "edgelist")
    lines = f.read_bytes().splitlines()
    assert lines[0] == b"# distgrail edge list: %d vertices, %d edges" % (p.n, p.m) and len(lines) == p.m + 1


@pytest.mark.parametrize("ext", ["txt", "h5"])
def test_written_graph_reads_back_and_indexes_exactly(tmp_path, ext):
    from distgrail.bfs import bfs_reachable, csr_of

    p = RMAT(9, 8, seed=4)
    f = tmp_path / f"r.{ext}"
    assert cli.main(["generate", "rmat", "--scale", "9", "--edge-factor", "8", "--seed", "4", "-o", str(f),
                     "--threads", "2", "--quiet"]) == 0
    g = read_graph(f)
    s, d = rmat_edges(p)
    if ext == "txt":
        assert g.m == p.m and np.array_equal(g.src, s) and np.array_equal(g.dst, d)
    else:  # the CSR merges repeats
        keys = np.unique(s.astype(np.int64) * p.n + d)
        assert g.m == keys.size and np.array_equal(np.sort(g.src.astype(np.int64) * p.n + g.dst), keys)
    idx = distgrail.build_index(str(f), dims=3, backend="cpu")
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, g.n, 300), rng.integers(0, g.n, 300)
    want = bfs_reachable(*csr_of(g), src, dst)
    assert np.array_equal(idx.reachable(src, dst), want) and want.any() and not want.all()


def test_bad_parameters_are_refused(tmp_path, capsys):
    for args, msg in ((["--scale", "0"], "scale must be an integer in 1..32"),
                      (["--scale", "5", "-a", "0.9", "-b", "0.2"], "a \\+ b \\+ c must be at most 1"),
                      (["--scale", "5", "-c", "-0.1"], "-c must be in 0..1"),
                      ([], "give the scale")):
        out = tmp_path / "r.txt"
        assert cli.main(["generate", "rmat", *args, "-o", str(out)]) == 2
        import re

        assert re.search(msg, capsys.readouterr().err)
        assert not out.exists()
    assert cli.main(["generate", "rmat", "--scale", "5", "-o", str(tmp_path / "r.gra")]) == 2
    assert "edge list" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["x.xyz", "x", "graph.txt.bak"])
def test_generate_refuses_an_unknown_extension(tmp_path, capsys, name):
    out = tmp_path / name
    assert cli.main(["generate", "paper", "-n", "10", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distgrail: error: ") and str(out) in err
    assert ".gra" in err and ".txt" in err and "--format" in err
    assert ("'.xyz'" in err) if name == "x.xyz" else True
    assert not os.listdir(tmp_path)
    assert cli.main(["generate", "paper", "-n", "10", "-o", str(out), "--format", "edgelist", "--quiet"]) == 0
    assert read_graph(out, "edgelist").n <= 10


@pytest.mark.parametrize("name,fmt", [("g.h5", "edgelist"), ("g.mtx", "gra"), ("g.txt", "h5"), ("G.HDF5", "mtx")])
def test_generate_refuses_a_format_its_output_name_contradicts(tmp_path, capsys, name, fmt):
    out = tmp_path / name
    assert cli.main(["generate", "paper", "-n", "10", "-o", str(out), "--format", fmt]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distgrail: error: ") and str(out) in err and f"--format says {fmt}" in err
    assert not os.listdir(tmp_path)
    same = tmp_path / ("g" + {"edgelist": ".txt", "gra": ".gra", "h5": ".h5", "mtx": ".mtx"}[fmt])
    assert cli.main(["generate", "paper", "-n", "10", "-o", str(same), "--format", fmt, "--quiet"]) == 0
    assert read_graph(same).n <= 10


def test_generate_paper_still_needs_n(capsys, tmp_path):
    assert cli.main(["generate", "paper", "-o", str(tmp_path / "p.gra")]) == 2
    assert "-n N" in capsys.readouterr().err


def test_rmat_object_refuses_bad_values():
    with pytest.raises(DistGrailError, match="edge factor"):
        RMAT(5, 0)
    with pytest.raises(DistGrailError, match="-a must be a probability"):
        RMAT(5, 1, a="x")


@pytest.mark.parametrize("n", [1, 2, 5, 4099, 1 << 16])
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_bucket_sorted_csr_is_the_whole_sorts(n, threads):
    """The .h5 graph's CSR from the bucket sort on threads (distinct successors sorted, self-loops
    kept, repeats merged) is the one-sort twin's, array for array and type for type, for one
    vertex, fewer sources than buckets, sources past a power of two, no edges and repeats."""
    rng = np.random.default_rng(n * 10 + threads)
    for m in (0, 1, 9, 50_000):
        s, d = rng.integers(0, n, m).astype(np.uint64), rng.integers(0, n, m).astype(np.uint64)
        if m > 5:
            s[:5], d[:5] = s[5], d[5]  # a repeated edge
            d[6] = s[6]  # a self-loop
        keys = (s << np.uint64(32)) | d
        got = csr_of_keys(n, keys.copy(), threads)
        want = csr_of_keys(n, keys.copy(), threads, jit=False)
        assert got[1].dtype == want[1].dtype == np.int32 and got[0].dtype == np.int64
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        assert int(got[0][-1]) == np.unique(keys).size and (m < 6 or int(got[0][-1]) < m)


def test_keys_are_the_edges():
    p = RMAT(8, 4, seed=3)
    s, d = rmat_edges(p, threads=2)
    assert np.array_equal(rmat_keys(p, threads=3), (s.astype(np.uint64) << np.uint64(32)) | d)
