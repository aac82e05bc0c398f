"""Edge insertions (distgrail/update.py, ``distgrail update``): the updated index answers as
BFS over the original graph plus the inserted edges, for random, cycle-closing and
chain-extending insertions, self-loops, repeated and already-implied edges; edges that add no
reachability leave the labels as they are; bad input is refused; the command writes an index
that opens and records what was added."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.errors import DistGrailError
from distgrail.io.generate import generate
from distgrail.io.graph import EdgeGraph
from distgrail.update import UPDATES, insert_edges


def _build(src, dst, n, **kw):
    kw.setdefault("dims", 3)
    return distgrail.build_index((np.asarray(src), np.asarray(dst)), num_vertices=n, backend="cpu", **kw)


def _check(idx, src, dst, n, add_s, add_t, pairs=None):
    """Every pair (or ``pairs``) against BFS over the graph plus the added edges."""
    g = EdgeGraph(n, np.concatenate([src, add_s]).astype(np.int64), np.concatenate([dst, add_t]).astype(np.int64))
    ip, ix = csr_of(g)
    if pairs is None:
        qs, qt = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    else:
        qs, qt = pairs
    want = bfs_reachable(ip, ix, qs, qt)
    got, _ = idx.query(qs, qt, backend="cpu")
    assert np.array_equal(got, want), f"{int((got != want).sum())} wrong of {qs.size}"
    return want


@pytest.mark.parametrize("kind,n,deg,k", [("scale-free", 120, 2, 30), ("paper", 150, 3, 60), ("layered", 200, 3, 10),
                                          ("scale-free", 80, 1, 200)])
@pytest.mark.parametrize("supports", [0, "auto"])
def test_random_insertions_match_bfs(kind, n, deg, k, supports):
    g = generate(kind, n, deg, seed=3)
    idx = _build(g.src, g.dst, g.n, supports=supports)
    rng = np.random.default_rng(k)
    s, t = rng.integers(0, g.n, k), rng.integers(0, g.n, k)
    new, rep = insert_edges(idx, s, t, backend="cpu")
    assert rep.given == k == rep.same_component + rep.already_reachable + rep.added
    _check(new, g.src, g.dst, g.n, s, t)
    assert new.arrays[UPDATES].tolist() == np.stack([s, t], 1).tolist()
    assert new.n == idx.n and new.C == rep.components_after <= idx.C


def test_cycle_closing_edges_merge_components():
    """A chain 0 -> 1 -> ... -> 49 and the edge 49 -> 0: one component of 50 vertices."""
    src, dst = np.arange(49), np.arange(1, 50)
    idx = _build(src, dst, 60)
    new, rep = insert_edges(idx, [49], [0], backend="cpu")
    assert rep.added == 1 and rep.method == "swept" and idx.C == 60 and new.C == 11  # the cycle, and 10 isolated
    comp = new.arrays["vertex/component"]
    assert len(set(comp[:50].tolist())) == 1 and len(set(comp[50:].tolist())) == 10
    _check(new, src, dst, 60, [49], [0])


def test_chain_extending_edges_and_a_second_update():
    src, dst = np.arange(29), np.arange(1, 30)  # 0 -> ... -> 29; 30 .. 59 a second chain
    src, dst = np.r_[src, np.arange(30, 59)], np.r_[dst, np.arange(31, 60)]
    idx = _build(src, dst, 60)
    once, r1 = insert_edges(idx, [29], [30], backend="cpu")  # the first chain runs into the second
    assert r1.added == 1 and once.reachable(0, 59) and not idx.reachable(0, 59)
    _check(once, src, dst, 60, [29], [30])
    twice, r2 = insert_edges(once, [59, 5], [0, 40], backend="cpu")  # closes one long cycle; 5 -> 40 implied
    _check(twice, src, dst, 60, [29, 59, 5], [30, 0, 40])
    assert twice.C == 1 and r2.components_before == 60 and r2.components_after == 1
    assert twice.arrays[UPDATES].tolist() == [[29, 30], [59, 0], [5, 40]]


def test_edges_that_add_no_reachability_keep_the_labels():
    """Self-loops, edges inside one component, repeats and edges the index already implies:
    the arrays are the index's own, only the record grows."""
    src, dst = np.array([0, 1, 2, 3, 4]), np.array([1, 2, 0, 4, 5])  # cycle 0-1-2, chain 3-4-5
    idx = _build(src, dst, 7)
    new, rep = insert_edges(idx, [3, 1, 0, 3, 3], [3, 0, 2, 5, 5], backend="cpu")
    assert (rep.same_component, rep.already_reachable, rep.added, rep.method) == (3, 2, 0, "unchanged")
    assert all(new.arrays[k] is a for k, a in idx.arrays.items())
    assert new.arrays[UPDATES].shape == (5, 2) and UPDATES not in idx.arrays
    _check(new, src, dst, 7, [3], [3])


def test_one_vertex_and_no_edges():
    idx = _build(np.zeros(0, np.int64), np.zeros(0, np.int64), 1)
    new, rep = insert_edges(idx, [0], [0], backend="cpu")
    assert rep.same_component == 1 and new.reachable(0, 0)
    new, rep = insert_edges(idx, np.zeros(0, np.int64), np.zeros(0, np.int64), backend="cpu")
    assert rep.given == 0 and new.arrays[UPDATES].shape == (0, 2)


@pytest.mark.parametrize("s,t,msg", [([0, 9], [1, 2], r"targets\[1\] = 2|sources\[1\] = 9 is not a vertex"),
                                     ([-1], [2], r"sources\[0\] = -1 is not a vertex of the index \(0\.\.5\)"),
                                     ([0, 1], [2], "1-D of equal length"), ([0.5], [1], "integer vertex ids")])
def test_bad_edges_are_refused(s, t, msg):
    idx = _build([0, 1], [1, 2], 6)
    with pytest.raises(DistGrailError, match=msg):
        insert_edges(idx, np.array(s), np.array(t), backend="cpu")


def test_an_index_of_node_labels_is_refused():
    idx = distgrail.build_index({"a": ["b"], "b": []}, dims=1, backend="cpu")
    with pytest.raises(DistGrailError, match="built from node labels"):
        insert_edges(idx, [0], [1], backend="cpu")


def test_the_command_writes_an_updated_index(tmp_path, capsys):
    g = generate("scale-free", 200, 2, seed=5)
    base = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n).save(base)
    edges = tmp_path / "new.txt"
    rng = np.random.default_rng(1)
    s, t = rng.integers(0, g.n, 25), rng.integers(0, g.n, 25)
    edges.write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    out = str(tmp_path / "new.h5")
    assert main(["update", base, "--add", str(edges), "-o", out, "--json", "--backend", "cpu"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["given"] == 25 == got["edges_recorded"] and got["added"] + got["already_reachable"] + \
        got["same_component"] == 25
    new = distgrail.open_index(out)
    rng2 = np.random.default_rng(2)
    _check(new, g.src, g.dst, g.n, s, t, (rng2.integers(0, g.n, 5000), rng2.integers(0, g.n, 5000)))
    # refusals: exit 2, a message naming the cause, no file written
    bad = tmp_path / "bad.txt"  # named with its line and value: read against the index's vertex count
    for text, line, value in ((f"# new edges\n0 1\n0 {g.n + 3}\n", 3, g.n + 3), ("7 99999999999999999999999\n", 1,
                                                                                 "99999999999999999999999")):
        bad.write_text(text)
        assert main(["update", base, "--add", str(bad), "-o", str(tmp_path / "x.h5"), "--backend", "cpu"]) == 2
        assert f"bad.txt:{line}: vertex id out of range 0..{g.n - 1}, got '{value}'" in capsys.readouterr().err
    np.save(tmp_path / "bad.npy", np.c_[s, t])  # an array of pairs is not a graph file
    assert main(["update", base, "--add", str(tmp_path / "bad.npy"), "-o", str(tmp_path / "x.h5")]) == 2
    assert "a .npy array is not a graph file" in capsys.readouterr().err
    os.remove(tmp_path / "bad.npy")
    (tmp_path / "names.txt").write_text("source target\nalice bob\nbob carol\n")  # names, declared or asked for
    for fmt in ("auto", "labelled"):
        assert main(["update", base, "--add", str(tmp_path / "names.txt"), "--format", fmt, "-o",
                     str(tmp_path / "x.h5")]) == 2
        assert "edges by node name" in capsys.readouterr().err
    (tmp_path / "names.txt").write_text("alice bob\nbob carol\n")  # names no header declares: refused as names
    assert main(["update", base, "--add", str(tmp_path / "names.txt"), "-o", str(tmp_path / "x.h5")]) == 2
    assert "names.txt:1: edges by node name, not integer ids: 'alice bob'; 'update' takes" in capsys.readouterr().err
    os.remove(tmp_path / "names.txt")
    assert main(["update", base, "--add", str(edges), "--remove", str(edges), "-o", str(tmp_path / "x.h5")]) == 2
    assert "deletions are not supported" in capsys.readouterr().err
    assert main(["update", base, "--add", str(edges), "-o", base]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert main(["update", base, "--add", str(edges), "-o", os.path.join(str(tmp_path), ".", "base.h5")]) == 2
    assert "to update the index in place, leave out -o" in capsys.readouterr().err
    assert main(["update", base, "--add", str(tmp_path / "none.txt"), "-o", str(tmp_path / "x.h5")]) == 2
    assert "no such" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.h5") and sorted(os.listdir(tmp_path)) == [
        "bad.txt", "base.h5", "new.h5", "new.txt"]


def test_without_an_output_the_index_is_updated_in_place(tmp_path, capsys):
    """``update INDEX --add EDGES`` (no ``-o``): the index itself answers for the graph plus the
    edges afterwards; a refused update leaves its bytes as they were and no file beside it; a
    second update in place adds to the record of the first."""
    g = generate("scale-free", 150, 2, seed=9)
    base = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n).save(base)
    before = open(base, "rb").read()
    bad = tmp_path / "bad.txt"
    bad.write_text(f"0 {g.n}\n")
    assert main(["update", base, "--add", str(bad), "--backend", "cpu"]) == 2
    assert f"bad.txt:1: vertex id out of range 0..{g.n - 1}, got '{g.n}'" in capsys.readouterr().err
    assert open(base, "rb").read() == before and sorted(os.listdir(tmp_path)) == ["bad.txt", "base.h5"]
    assert main(["update", base, "--add", base, "--backend", "cpu"]) == 2
    assert "the edges file is the index itself" in capsys.readouterr().err
    rng = np.random.default_rng(4)
    s, t = rng.integers(0, g.n, 20), rng.integers(0, g.n, 20)
    (tmp_path / "e1.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(s[:10], t[:10])))
    (tmp_path / "e2.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(s[10:], t[10:])))
    assert main(["update", base, "--add", str(tmp_path / "e1.txt"), "--backend", "cpu"]) == 0
    assert "(updated in place; one file)" in capsys.readouterr().out
    assert main(["update", base, "--add", str(tmp_path / "e2.txt"), "--backend", "cpu", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["index"] == got["base"] == os.path.abspath(base) and got["edges_recorded"] == 20
    _check(distgrail.open_index(base), g.src, g.dst, g.n, s, t,
           (rng.integers(0, g.n, 4000), rng.integers(0, g.n, 4000)))
    assert sorted(os.listdir(tmp_path)) == ["bad.txt", "base.h5", "e1.txt", "e2.txt"]


def test_in_place_through_a_link_updates_the_target_and_keeps_its_mode(tmp_path, capsys, monkeypatch):
    """An index reached through a symbolic link is updated where it lies (the link stays a link);
    the replaced file keeps the index's permission bits; an index the user may not write is
    refused, naming -o."""
    g = generate("paper", 120, 2, seed=3)
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "idx.h5"
    _build(g.src, g.dst, g.n).save(str(real))
    os.chmod(real, 0o640)
    link = tmp_path / "link.h5"
    link.symlink_to(real)
    (tmp_path / "e.txt").write_text("5 0\n7 1\n")
    assert main(["update", str(link), "--add", str(tmp_path / "e.txt"), "--backend", "cpu", "--quiet"]) == 0
    assert link.is_symlink() and os.stat(real).st_mode & 0o777 == 0o640
    assert int(distgrail.open_index(str(real)).arrays[UPDATES].shape[0]) == 2
    _check(distgrail.open_index(str(link)), g.src, g.dst, g.n, [5, 7], [0, 1])
    access = os.access  # an index this user may not write (root may write any file: asked as another user)
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if os.fspath(p) == str(real) else access(p, m, **kw))
    before = real.read_bytes()
    assert main(["update", str(link), "--add", str(tmp_path / "e.txt"), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "not writable, so it is not updated in place; write the update to another file with -o" in err
    assert f"{link} (a link to {real}): " in err  # the name given, and where it leads
    assert real.read_bytes() == before
    # the target's directory not writable (the file itself is): named through the link as well
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if os.fspath(p) == str(real.parent)
                        else access(p, m, **kw))
    assert main(["update", str(link), "--add", str(tmp_path / "e.txt"), "--backend", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{link} (a link to {real}): the index is not updated in place: " in err
    assert f"directory {real.parent} is not writable" in err and "with -o NEW.h5" in err
    assert real.read_bytes() == before and sorted(os.listdir(real.parent)) == ["idx.h5"]


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
@pytest.mark.parametrize("ranks,layout", [(2, "keep"), (3, "keep"), (2, "patch"), (3, "patch")])
def test_the_command_under_mpi(tmp_path, ranks, layout):
    """``mpiexec -n 2|3 ... update [--layout patch]``: rank 0 updates, every rank exits with its
    status; the index (a patch over the base, with ``patch``) answers as BFS over the graph plus
    the edges; a bad edge: status 2, one message, no file."""
    from distgrail.indexfile import patch_base

    from conftest import ROOT

    g = generate("paper", 300, 3, seed=7)
    base, edges, out = str(tmp_path / "base.h5"), tmp_path / "new.txt", str(tmp_path / "new.h5")
    _build(g.src, g.dst, g.n, dims=2).save(base)
    rng = np.random.default_rng(ranks)
    s, t = rng.integers(0, g.n, 40), rng.integers(0, g.n, 40)
    edges.write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env.update(PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPIEXEC_TIMEOUT="90")
    run = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distgrail", "update", base, "--add"]
    r = subprocess.run(run + [str(edges), "-o", out, "--backend", "cpu", "--quiet", "--layout", layout],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (patch_base(out) is not None) == (layout == "patch")
    _check(distgrail.open_index(out), g.src, g.dst, g.n, s, t,
           (rng.integers(0, g.n, 3000), rng.integers(0, g.n, 3000)))
    (tmp_path / "bad.txt").write_text(f"1 {g.n}\n")
    r = subprocess.run(run + [str(tmp_path / "bad.txt"), "-o", str(tmp_path / "x.h5"), "--backend", "cpu"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count(f"bad.txt:1: vertex id out of range 0..{g.n - 1}") == 1, r.stderr
    assert not os.path.exists(tmp_path / "x.h5")


def test_an_updated_index_drops_its_files_meta_and_keeps_the_query_state(tmp_path):
    """An updated index is not the file it came from (no path, layout, parts; this version);
    an update that changes nothing shares the base's query state (no new upload)."""
    g = generate("paper", 100, 2, seed=1)
    path = str(tmp_path / "b.h5")
    _build(g.src, g.dst, g.n).save(path)
    base = distgrail.open_index(path)
    base.labels("cpu")
    same, rep = insert_edges(base, [0], [0], backend="cpu")
    assert rep.method == "unchanged" and same._query_state is base._query_state and "total" in rep.seconds
    new, rep = insert_edges(base, [99], [0], backend="cpu")
    assert rep.method == "swept" and "path" not in new.meta and new.meta["distgrail_version"] == distgrail.__version__
    new.save(str(tmp_path / "n.h5"))
    again, _ = insert_edges(distgrail.open_index(str(tmp_path / "n.h5")), [50], [1], backend="cpu")
    _check(again, g.src, g.dst, g.n, [99, 50], [0, 1])


@pytest.mark.parametrize("bad,msg", [(np.array([[0, 1], [2, 99]]), r"updates/edges.*holds 99 .*outside 0\.\.59"),
                                     (np.zeros((3, 3), np.int64), r"updates/edges.*expected \(k, 2\)")])
def test_a_damaged_record_of_updates_is_refused(tmp_path, bad, msg):
    from distgrail.errors import IndexFormatError

    src, dst = np.arange(29), np.arange(1, 30)
    new, _ = insert_edges(_build(src, dst, 60), [29], [30], backend="cpu")
    path = str(tmp_path / "u.h5")
    new.save(path)
    arrays = dict(distgrail.open_index(path).arrays)
    arrays[UPDATES] = bad
    distgrail.index.Index(new.meta, arrays).save(path)  # checksums made anew: only the values are wrong
    with pytest.raises(IndexFormatError, match=msg):
        distgrail.open_index(path)


def test_the_command_sweeps_or_relabels_as_rebuild_above_says(tmp_path, capsys):
    g = generate("paper", 300, 3, seed=4)
    base = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n).save(base)
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, g.n, 30), rng.integers(0, g.n, 30)
    (tmp_path / "e.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    got = {}
    for above in ("0", "1000"):
        out = str(tmp_path / f"n{above}.h5")
        assert main(["update", base, "--add", str(tmp_path / "e.txt"), "-o", out, "--json", "--backend", "cpu",
                     "--rebuild-above", above]) == 0
        got[above] = json.loads(capsys.readouterr().out)
        _check(distgrail.open_index(out), g.src, g.dst, g.n, s, t)
    assert got["0"]["method"] == "relabelled" and got["1000"]["method"] == "swept"
    assert got["0"]["components_after"] == got["1000"]["components_after"]
    assert main(["update", base, "--add", str(tmp_path / "e.txt"), "-o", str(tmp_path / "x.h5"),
                 "--rebuild-above", "-1"]) == 2
    assert "--rebuild-above must be 0 or more, got -1" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.h5")


def test_info_shows_what_the_updates_cost(tmp_path, capsys):
    """``updates/log``: one row per update; ``info`` sums them (edges given and added, components
    merged, how each update was made); a damaged log is refused when the index is opened."""
    from distgrail.errors import IndexFormatError
    from distgrail.update import LOG

    src, dst = np.arange(29), np.arange(1, 30)
    idx = _build(src, dst, 60)
    one, _ = insert_edges(idx, [29, 3], [0, 3], backend="cpu", rebuild_above=10)  # a cycle; a self-loop
    two, _ = insert_edges(one, [40], [41], backend="cpu", rebuild_above=0)  # relabelled
    three, _ = insert_edges(two, [5], [6], backend="cpu")  # unchanged
    log = three.arrays[LOG]
    assert log[:, :7].tolist() == [[2, 1, 0, 1, 60, 31, 1], [1, 0, 0, 1, 31, 31, 2], [1, 1, 0, 0, 31, 31, 0]]
    assert log[0, 7:].tolist() == [1_000_000, 1_000_000] and log[1:, 7:].tolist() == [[-1, -1], [-1, -1]]
    path = str(tmp_path / "u.h5")
    three.save(path)
    assert main(["info", path, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["updates"]
    assert got == {"updates": 3, "edges_given": 4, "edges_added": 2, "components_merged": 29,
                   "methods": {"unchanged": 1, "swept": 1, "relabelled": 1}, "decided_share_before": 1.0,
                   "decided_share_after": 1.0}
    assert main(["info", path]) == 0  # as text: key value pairs, not a Python dict
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("updates "))
    assert line.split(None, 1)[1] == ("updates 3, edges_given 4, edges_added 2, components_merged 29, methods "
                                      "(unchanged 1, swept 1, relabelled 1), decided_share_before 1.0, "
                                      "decided_share_after 1.0")
    arrays = dict(distgrail.open_index(path).arrays)
    arrays[LOG] = np.array([[1, 0, 0, 1, 60, 59, 7, -1, -1]])
    distgrail.index.Index(three.meta, arrays).save(path)
    with pytest.raises(IndexFormatError, match=r"updates/log.*method code"):
        distgrail.open_index(path)


def test_progress_names_the_update_steps(monkeypatch, capsys):
    """``progress=True`` (``distgrail update`` without --quiet): one line per step on stderr
    when it is not a terminal (here with no delay)."""
    from distgrail.progress import Steps

    monkeypatch.setattr(Steps, "DELAY", 0.0)
    idx = _build(np.arange(9), np.arange(1, 10), 12)
    insert_edges(idx, [9, 10], [0, 11], backend="cpu", progress=True, rebuild_above=10)
    err = capsys.readouterr().err
    assert "distgrail update: step 1/2 checking the edges" in err and "step 2/2 sweeping the labels" in err


def test_a_split_index_stays_split_and_the_layout_can_be_chosen(tmp_path, capsys):
    """``update`` keeps a split index split (as many parts, the replaced build's parts removed, the
    mode kept on every file), writes one file from a split index with ``--layout single`` and a
    split one from a single with ``--layout split --parts N``; each answers as BFS over the graph
    plus the edges; ``--parts`` with ``--layout single`` or below 1 is refused and writes nothing."""
    from distgrail.indexfile.layout import index_parts

    g = generate("scale-free", 160, 2, seed=12)
    base = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n).save(base, layout="split", parts=3)
    first = index_parts(base)
    assert len(first) == 3
    for p in [base, *first]:
        os.chmod(p, 0o640)
    rng = np.random.default_rng(6)
    s, t = rng.integers(0, g.n, 30), rng.integers(0, g.n, 30)
    (tmp_path / "e.txt").write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    assert main(["update", base, "--add", str(tmp_path / "e.txt"), "--backend", "cpu", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["layout"] == "split" and got["parts"] == 3 and set(got["step_seconds"]) == {
        "read_edges", "open", "update", "write"}
    now = index_parts(base)
    assert len(now) == 3 and not set(now) & set(first) and not any(os.path.exists(p) for p in first)
    assert all(os.stat(p).st_mode & 0o777 == 0o640 for p in [base, *now])
    pairs = (rng.integers(0, g.n, 4000), rng.integers(0, g.n, 4000))
    _check(distgrail.open_index(base), g.src, g.dst, g.n, s, t, pairs)
    one = str(tmp_path / "one.h5")
    assert main(["update", base, "--add", str(tmp_path / "e.txt"), "-o", one, "--layout", "single", "--backend", "cpu",
                 "--quiet"]) == 0
    assert index_parts(one) == [] and distgrail.open_index(one).meta.get("layout") is None
    _check(distgrail.open_index(one), g.src, g.dst, g.n, s, t, pairs)
    two = str(tmp_path / "two.h5")
    assert main(["update", one, "--add", str(tmp_path / "e.txt"), "-o", two, "--layout", "split", "--parts", "2",
                 "--backend", "cpu"]) == 0
    assert "split, 2 parts" in capsys.readouterr().out and len(index_parts(two)) == 2
    _check(distgrail.open_index(two), g.src, g.dst, g.n, s, t, pairs)
    listed = sorted(os.listdir(tmp_path))
    for bad, msg in ((["--layout", "single", "--parts", "2"], "--parts is for --layout split"),
                     (["--layout", "split", "--parts", "0"], "--parts must be 1..1024 (part files of a split index), got 0"),
                     (["--layout", "split", "--parts", "5000"], "--parts must be 1..1024 (part files of a split index), "
                                                                "got 5000"),
                     (["--parts", "2"], "is one file and --layout keep keeps it so")):
        assert main(["update", one, "--add", str(tmp_path / "e.txt"), "-o", str(tmp_path / "x.h5"), *bad]) == 2
        assert msg in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == listed


def test_the_default_rebuild_above_is_a_fifth_of_the_dag_edges():
    """Relabelling costs less than the sweep from about a fifth of the DAG's edges on (R-MAT 27,
    session 26); small DAGs keep the floor of 1,000,000."""
    from types import SimpleNamespace

    from distgrail.update import default_rebuild_above

    assert default_rebuild_above(SimpleNamespace(meta={"n_dag_edges": 22_400_000})) == 4_480_000
    assert default_rebuild_above(SimpleNamespace(meta={"n_dag_edges": 394_966})) == 1_000_000


def test_in_place_the_new_files_are_never_more_open_than_the_index(tmp_path, monkeypatch, capsys):
    """A private (0600) split index updated in place: its new parts, renamed into place before the
    main file is written, are already 0600 then (they were created under the process's umask,
    0644, and only chmodded at the end); the main file's temporary too; the umask is restored."""
    from distgrail.indexfile import write as ixwrite
    from distgrail.indexfile.layout import index_parts

    g = generate("paper", 150, 2, seed=21)
    base = str(tmp_path / "private.h5")
    _build(g.src, g.dst, g.n).save(base, layout="split", parts=2)
    old_parts = set(index_parts(base))
    for p in [base, *old_parts]:
        os.chmod(p, 0o600)
    (tmp_path / "e.txt").write_text("3 0\n9 4\n")
    seen = {}
    real = ixwrite.write_index_file

    def watched(path, *a, **k):
        for n in os.listdir(tmp_path):
            p = str(tmp_path / n)
            if ".part" in n and p not in old_parts:
                seen[n] = os.stat(p).st_mode & 0o777
        return real(path, *a, **k)

    monkeypatch.setattr(ixwrite, "write_index_file", watched)
    prev = os.umask(0o022)
    try:
        assert main(["update", base, "--add", str(tmp_path / "e.txt"), "--backend", "cpu", "--quiet"]) == 0
        assert os.umask(0o022) == 0o022  # (restored by the command)
    finally:
        os.umask(prev)
    assert len(seen) == 2 and set(seen.values()) == {0o600}, seen
    assert all(os.stat(p).st_mode & 0o777 == 0o600 for p in [base, *index_parts(base)])
    _check(distgrail.open_index(base), g.src, g.dst, g.n, [3, 9], [0, 4])


def test_update_names_the_line_of_a_script_and_the_index_of_node_labels(tmp_path, capsys):
    """A Python script given as the edges said only 'edges by node name', where ``index`` names
    the line and its text; an index built from node labels was refused as 'insert_edges: ...',
    not by its file's name (a reviewer, session 55)."""
    (tmp_path / "g.txt").write_text("0 1\n1 2\n")
    assert main(["index", str(tmp_path / "g.txt"), "-o", str(tmp_path / "g.h5"), "--backend", "cpu", "--quiet"]) == 0
    script = tmp_path / "s.py"
    script.write_text("# a comment\nimport os\nprint(os.getcwd())\n")
    capsys.readouterr()
    assert main(["update", str(tmp_path / "g.h5"), "--add", str(script), "-o", str(tmp_path / "u.h5")]) == 2
    assert capsys.readouterr().err == (f"distgrail: error: {script}:2: edges by node name, not integer ids: "
                                       "'import os'; 'update' takes the index's vertex ids\n")
    (tmp_path / "n.txt").write_text("a b\nb c\n")
    assert main(["index", str(tmp_path / "n.txt"), "--format", "labelled", "-o", str(tmp_path / "n.h5"),
                 "--backend", "cpu", "--quiet"]) == 0
    (tmp_path / "e.txt").write_text("0 1\n")
    capsys.readouterr()
    assert main(["update", str(tmp_path / "n.h5"), "--add", str(tmp_path / "e.txt"), "-o", str(tmp_path / "u.h5")]) == 2
    assert capsys.readouterr().err == (f"distgrail: error: {tmp_path / 'n.h5'}: this index was built from node "
                                       "labels; 'update' takes vertex ids only (rebuild with distgrail index)\n")
    assert not (tmp_path / "u.h5").exists()


def test_an_edge_given_twice_in_one_batch_is_added_once():
    """``--add e --add e`` reported every copy as added to the DAG (4 for 2 new edges): a repeat
    of an edge given before it in the batch is implied by its first copy, so it is counted as
    already reachable; both copies are recorded and the answers are BFS's (a reviewer, session 55)."""
    n = 40
    src, dst = np.arange(n - 1), np.arange(1, n)  # a chain: 0 -> 1 -> ... -> 39
    idx = _build(src, dst, n)
    s, t = np.array([39, 5, 39, 5, 20, 3]), np.array([0, 2, 0, 2, 10, 4])  # three new edges, two given twice
    new, rep = insert_edges(idx, s, t, backend="cpu")  # (3 -> 4: the chain's own, already reachable)
    assert (rep.given, rep.added, rep.already_reachable, rep.same_component) == (6, 3, 3, 0)
    assert new.arrays[UPDATES].tolist() == np.stack([s, t], 1).tolist()
    _check(new, src, dst, n, s, t)
    s2, t2 = np.array([3, 3, 7]), np.array([1, 1, 1])
    new2, rep2 = insert_edges(idx, np.r_[s2, 30, 30], np.r_[t2, 29, 29], backend="cpu")
    assert rep2.given == 5 == rep2.same_component + rep2.already_reachable + rep2.added and rep2.added == 3
