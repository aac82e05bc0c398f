"""Rank-parallel parsing (distgrail/mpi/parse.py): every rank parses about 1/N of the file, the
edges meet on rank 0; the result equals the one-rank read exactly (edges in order, n, SHA-256),
and a bad line anywhere gives the one-rank error on every rank.

The split itself (byte ranges at line starts, ranges parsed apart and put together) is checked
without MPI too; the collective tests run under ``mpiexec -n 2`` and ``-n 3`` (``--only-mpi``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.gpu.backend import get_backend
from distgrail.io.chunks import plan_read
from distgrail.io.parse import _Anomaly, finish_edges, read_graph_numpy, read_text_range
from distgrail.io.read import read_graph
from distgrail.mpi.parse import split_body
from test_parse import edgelist_text, gra_text, mtx_text

CPU = get_backend("cpu")


def cases(rng):
    """(name, text, num_vertices): comments, CRLF, blank lines, tabs, no final newline, tiny files."""
    return [
        ("a.gra", gra_text(rng, 300, 6), None),
        ("crlf.gra", gra_text(rng, 200, 4, crlf=True, final_newline=False), None),
        ("nohead.gra", gra_text(rng, 150, 3, header=False), None),
        ("e.txt", edgelist_text(rng, 400, 1500), None),
        ("ecrlf.txt", edgelist_text(rng, 100, 700, crlf=True, final_newline=False), None),
        ("en.txt", edgelist_text(rng, 50, 200), 80),
        ("m.mtx", mtx_text(rng, 120, 600), None),
        ("ms.mtx", mtx_text(rng, 90, 400, symmetry="symmetric", field="real", crlf=True), None),
        ("one.gra", "graph_for_greach\n1\n0: 0 #\n", None),
        ("zero.gra", "graph_for_greach\n0\n", None),
        ("two.txt", "# c\n0 1\n\n", None),
        ("line.txt", "3 4", None),
        ("iso.txt", "0 1\n", 10),
        ("c.csv", "src,dst\n" + "".join(_csv(ln, ",") + "\n"  # (no empty field)
                                         for ln in edgelist_text(rng, 300, 900, extra=False).splitlines()), None),
        ("c2.csv", "0,1\n" + "".join(_csv(ln, ", ") + "\n"  # (blanks after commas)
                                      for ln in edgelist_text(rng, 100, 400, extra=False).splitlines()), None),
        ("c3.csv", "".join(_csv(ln, ",") + "\n" for ln in edgelist_text(rng, 200, 600).splitlines()), None),
    ]


def _csv(line: str, sep: str) -> str:
    """An edge-list line comma-separated before its comment, a blank between them (a comment mark
    glued to the target is refused: f26c7c4)."""
    body, tail = re.match(r"([^#%]*)(.*)", line).groups()
    return re.sub(r"[ \t]+", sep, body.strip()) + (" " + tail if tail else "")


def bad_cases(rng):
    """Files with one problem at about 60 % of the body (rank 1's range at 2 and 3 ranks), or a
    problem only the whole file shows (a vertex line repeated far apart, too few entries)."""
    def at60(text, bad_line):
        lines = text.split("\n")
        k = int(len(lines) * 0.6)
        return "\n".join(lines[:k] + [bad_line] + lines[k:])

    gra = gra_text(rng, 400, 5, shuffle=False, blanks=False)
    lines = gra.split("\n")
    dup = "\n".join(lines[:-1] + [lines[3]]) + "\n"  # vertex 1's line again at the end
    return [
        ("badtok.gra", at60(gra, "7: 1 x2 #"), None),
        ("badtok.csv", at60("src,dst\n" + "\n".join(f"{i},{i + 1}" for i in range(300)), "7;8"), None),
        ("badtok.txt", at60(edgelist_text(rng, 300, 3000, comments=False, extra=False), "5 -3"), None),
        ("badid.mtx", at60(mtx_text(rng, 100, 900), "7 400"), None),
        ("dup.gra", dup, None),
        ("missing.gra", "\n".join(lines[:-30]) + "\n", None),
        ("few.mtx", "%%MatrixMarket matrix coordinate pattern general\n5 5 4\n1 2\n2 3\n", None),
        ("empty.txt", "# only a comment\n\n", None),
        # issue 40: a lone '\r' in rank 1's range (the kernels' twin flags it), a signed first line
        ("cr.txt", at60(edgelist_text(rng, 300, 3000, comments=False, extra=False), "5 6\r7 8"), None),
        ("plus.txt", "+0 +1\n" + edgelist_text(rng, 300, 3000, comments=False, extra=False), None),
        # an edge line of other fields than the first edge line (an adjacency list's) in rank 1's range
        ("wide.txt", at60("".join(f"{i} {i + 1}\n" for i in range(3000)), "5 6 7 8"), None),
        ("wide.csv", at60("src,dst,w\n" + "".join(f"{i},{i + 1},1\n" for i in range(3000)), "5,6,1,1"), None),
        # a Matrix Market entry line of other fields than its header says (tests/test_mtx_fields.py)
        ("wide.mtx", at60(mtx_text(rng, 100, 900), "7 40 1"), None),
        ("narrow.mtx", at60(mtx_text(rng, 100, 900, field="real"), "7 40"), None),
    ]


# ---------------------------------------------------------------- without MPI: the split

@pytest.mark.parametrize("parts", [1, 2, 3, 7, 50])
def test_split_ranges_put_together_equal_one_parse(tmp_path, parts):
    rng = np.random.default_rng(parts)
    for name, text, nv in cases(rng):
        p = tmp_path / name
        p.write_bytes(text.encode())
        plan = plan_read(str(p), "auto", nv)
        assert plan.kind == "text", name
        b = split_body(str(p), plan.body, plan.size, parts)
        data = p.read_bytes()
        assert len(b) == parts + 1 and b[0] == plan.body and b[-1] == plan.size and b == sorted(b)
        assert all(x in (plan.body, plan.size) or data[x - 1:x] == b"\n" for x in b), (name, b)  # line starts
        got = [read_text_range(str(p), plan, b[i], b[i + 1], chunk_bytes=256) for i in range(parts)]
        assert all(r.anomaly is None for r in got), name
        src = np.concatenate([r.src for r in got])
        dst = np.concatenate([r.dst for r in got])
        seen = sum(r.seen for r in got) if plan.fmt == "gra" else None
        n, s, d = finish_edges(plan, np, src, dst, sum(r.vertex_lines for r in got),
                               seen is None or not np.count_nonzero(seen != 1))
        want = read_graph(str(p), num_vertices=nv)
        assert n == want.n, name
        np.testing.assert_array_equal(s, want.src)
        np.testing.assert_array_equal(d, want.dst)


def test_range_with_a_bad_token_reports_an_anomaly_not_an_error(tmp_path):
    p = tmp_path / "b.txt"
    p.write_text("0 1\n1 2\n2 x\n3 4\n")
    plan = plan_read(str(p))
    assert read_text_range(str(p), plan, 0, 8).anomaly is None
    assert "did not accept" in read_text_range(str(p), plan, 8, plan.size).anomaly
    with pytest.raises(_Anomaly):
        finish_edges(plan_read(str(p), "edgelist"), np, np.zeros(0, np.int32), np.zeros(0, np.int32), 0, True)


# ---------------------------------------------------------------- under MPI

@pytest.fixture
def shared_dir():
    """A directory every rank sees (made by rank 0, removed once every rank is done)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    d = comm.bcast(tempfile.mkdtemp(prefix="distgrail-mpi-parse-") if comm.rank == 0 else None, root=0)
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _write_all(comm, d, items):
    if comm.rank == 0:
        for name, text, _ in items:
            with open(os.path.join(d, name), "wb") as f:
                f.write(text.encode())
    comm.Barrier()


class GatherTransport:
    """A stand-in for the GPU transport: ``gatherv`` through mpi4py's pickled gather, counted."""

    def __init__(self, comm):
        self.comm, self.calls = comm, 0

    def gatherv(self, a, root=0):
        self.calls += 1
        got = self.comm.gather(np.asarray(a), root=root)
        return np.concatenate(got) if self.comm.rank == root else None


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("with_transport", [False, True])
def test_ranks_read_equals_one_rank_read(shared_dir, with_transport):
    from mpi4py import MPI

    from distgrail.mpi.parse import read_graph_ranks

    comm = MPI.COMM_WORLD
    items = cases(np.random.default_rng(11))
    _write_all(comm, shared_dir, items)
    for name, _, nv in items:
        path = os.path.join(shared_dir, name)
        tr = GatherTransport(comm) if with_transport else None
        g = read_graph_ranks(comm, path, "auto", nv, CPU, transport=tr)
        if with_transport:
            assert tr.calls == 2
        if comm.rank != 0:
            assert g is None
            continue
        want = read_graph(path, num_vertices=nv)
        assert g.meta["parser"] == "numpy", name  # parsed in ranges, not handed to the CPU reader
        assert g.n == want.n and g.src.dtype == want.src.dtype == np.int32, name
        np.testing.assert_array_equal(g.src, want.src)
        np.testing.assert_array_equal(g.dst, want.dst)
        assert g.digest == want.digest == read_graph_numpy(path).digest, name
        assert g.name == want.name and g.meta["format"] == want.meta["format"]
        t = g.meta["timings"]  # the build's per-rank steps: parse share (slowest, rank 0's, fastest), exchange
        assert set(t) == {"parse share", "parse share rank0", "parse share fastest", "exchange"}, name
        assert 0 <= t["parse share fastest"] <= t["parse share rank0"] <= t["parse share"] and t["exchange"] >= 0


@pytest.mark.mpi(min_size=2)
def test_bad_input_gives_the_one_rank_error_on_every_rank(shared_dir):
    from mpi4py import MPI

    from distgrail.mpi.errors import RankError
    from distgrail.mpi.parse import read_graph_ranks

    comm = MPI.COMM_WORLD
    items = bad_cases(np.random.default_rng(12))
    _write_all(comm, shared_dir, items)
    for name, text, nv in items:
        path = os.path.join(shared_dir, name)
        want = None
        if comm.rank == 0:
            with pytest.raises(GraphFormatError) as e:
                read_graph(path, num_vertices=nv)
            want = str(e.value)
        want = comm.bcast(want, root=0)
        assert path in want
        with pytest.raises(RankError) as e:
            read_graph_ranks(comm, path, "auto", nv, CPU)
        assert str(e.value).endswith(want), (name, str(e.value), want)
        if comm.rank == 0:
            assert str(e.value.__cause__) == want  # the one-rank error itself, text for text
    if "badtok" in items[0][0]:  # the bad token really was in rank 1's range
        path = os.path.join(shared_dir, items[0][0])
        plan = plan_read(path)
        b = split_body(path, plan.body, plan.size, comm.size)
        data = open(path, "rb").read()
        assert b[1] <= data.index(b"x2") < b[2]


@pytest.mark.mpi(min_size=2)
def test_h5_and_unusual_headers_are_read_by_rank_0(shared_dir):
    from mpi4py import MPI

    from distgrail.io.generate import generate
    from distgrail.io.writers import write_graph
    from distgrail.mpi.parse import read_graph_ranks

    comm = MPI.COMM_WORLD
    h5 = os.path.join(shared_dir, "g.h5")
    if comm.rank == 0:
        write_graph(generate("paper", 60, 3, seed=1), h5)
    comm.Barrier()
    g = read_graph_ranks(comm, h5, "auto", None, CPU)
    if comm.rank == 0:
        want = read_graph(h5)
        assert g.n == want.n and np.array_equal(g.src, want.src) and g.digest == want.digest
    else:
        assert g is None
    with pytest.raises(Exception) as e:
        read_graph_ranks(comm, os.path.join(shared_dir, "nothere.gra"), "auto", None, CPU)
    assert "no such file" in str(e.value)
