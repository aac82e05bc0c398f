"""The patched layout (distgrail/indexfile/patch.py): an index whose main file holds the rows an
update changed over a hard link to its base. Read back it is the index a whole write holds (the
same arrays, types and seals); in place, over a patched index, through ``open_index``'s queries,
``convert`` and ``info``; a base missing, moved, replaced or patched is named; a link that cannot
be made is PatchNotPossible with nothing left behind; a write that fails or is killed leaves no
temporary."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.errors import DistGrailError, IndexFormatError
from distgrail.indexfile import (PatchNotPossible, patch_base, read_index_file, write_index_file,
                                 write_patched_index)
from distgrail.io.generate import generate
from distgrail.update import insert_edges

SEALS = ("crc32_of_datasets", "blake3_of_attributes")


def _graph():
    return generate("scale-free", 600, 2, seed=3)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(base index, its file, the index after a kept-ids update, after a second one)."""
    d = tmp_path_factory.mktemp("patched")
    g = _graph()
    idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, backend="cpu", dims=2, supports="auto")
    base = str(d / "base.h5")
    idx.save(base)
    b = distgrail.open_index(base)
    rng = np.random.default_rng(1)
    one, _ = insert_edges(b, rng.integers(0, g.n, 12), rng.integers(0, g.n, 12), backend="cpu", keep_ids=True)
    two, _ = insert_edges(one, rng.integers(0, g.n, 12), rng.integers(0, g.n, 12), backend="cpu", keep_ids=True)
    return b, base, one, two


def diff(old: dict, new: dict) -> dict:
    """``write_patched_index``'s keywords taking ``old``'s arrays to ``new``'s: the rows that
    differ, the DAG rows that differ, the datasets ``old`` lacks (and the support ids) whole."""
    rows = {}
    for k, a1 in new.items():
        if k in ("dag/indptr", "dag/indices", "supports/ids") or k not in old:
            continue
        a0 = np.asarray(old[k])
        a1 = np.asarray(a1)
        ne = a0 != a1
        r = np.flatnonzero(ne.any(axis=(0, 2)) if k == "labels/intervals" else ne.reshape(ne.shape[0], -1).any(1))
        if r.size:
            rows[k] = (r, a1[:, r] if k == "labels/intervals" else a1[r])
    ip0, ix0, ip1, ix1 = (np.asarray(x).astype(np.int64) for x in (old["dag/indptr"], old["dag/indices"],
                                                                     new["dag/indptr"], new["dag/indices"]))
    dr = np.array([c for c in range(ip0.size - 1)
                   if not np.array_equal(ix0[ip0[c]:ip0[c + 1]], ix1[ip1[c]:ip1[c + 1]])], np.int64)
    off = np.concatenate([[0], np.cumsum(ip1[dr + 1] - ip1[dr])]).astype(np.int64)
    vals = np.concatenate([ix1[ip1[c]:ip1[c + 1]] for c in dr] + [np.zeros(0, np.int64)])
    whole = {k: new[k] for k in new if k not in old or k == "supports/ids"}
    return {"rows": rows, "dag": (dr, off, vals), "whole": whole}


def same_arrays(got: dict, want: dict):
    assert sorted(got) == sorted(want)
    for k in want:
        w = np.asarray(want[k])
        assert got[k].dtype == w.dtype or np.dtype(got[k].dtype).itemsize == w.dtype.itemsize, k
        assert np.array_equal(np.asarray(got[k]), w), k


def seals(path):
    with h5py.File(path, "r") as f:
        return tuple(f.attrs[k] for k in SEALS)


def whole_file(tmp_path, index, name="whole.h5"):
    p = str(tmp_path / name)
    write_index_file(p, index.meta, index.arrays)
    return p


def test_read_back_is_the_whole_write(built, tmp_path):
    b, base, one, _ = built
    p = str(tmp_path / "p.h5")
    kw = diff(b.arrays, one.arrays)
    assert kw["rows"] and kw["dag"][0].size, "the update changed nothing to patch"
    write_patched_index(p, base, one.meta, **kw)
    link = patch_base(p)
    assert link is not None and os.path.samestat(os.stat(link), os.stat(base))  # a hard link: the same inode
    assert os.path.basename(link).startswith("p.h5.") and link.endswith(".base")
    assert sorted(os.listdir(tmp_path)) == ["p.h5", os.path.basename(link)]
    meta, arrays = read_index_file(p)
    w = whole_file(tmp_path, one)
    wm, wa = read_index_file(w)
    same_arrays(arrays, wa)
    assert all(arrays[k].dtype == wa[k].dtype for k in wa)
    assert seals(p) == seals(w)  # the patched index's seals are the whole write's
    assert meta["patched"]["base"] == os.path.basename(link)
    assert meta["patched"]["rows"]["labels/intervals"] == kw["rows"]["labels/intervals"][0].size
    assert patch_base(w) is None and patch_base(base) is None
    # its queries through open_index are the whole-written index's
    rng = np.random.default_rng(5)
    s, t = rng.integers(0, b.n, 3000), rng.integers(0, b.n, 3000)
    pi, wi = distgrail.open_index(p), distgrail.open_index(w)
    assert pi.seal == wi.seal
    assert np.array_equal(pi.query(s, t, backend="cpu")[0], wi.query(s, t, backend="cpu")[0])
    # a read that defers the DAG's indices: the patched CSR is read whole, the others as asked
    _, deferred = read_index_file(p, defer=("dag/indices",))
    assert np.array_equal(deferred["dag/indices"], wa["dag/indices"])


def test_in_place_and_over_a_patched_index(built, tmp_path):
    b, base0, one, two = built
    base = str(tmp_path / "i.h5")
    shutil.copy(base0, base)
    before = os.stat(base)
    write_patched_index(base, base, one.meta, **diff(b.arrays, one.arrays))  # in place: link first
    first = patch_base(base)
    assert os.path.samestat(os.stat(first), before) and not os.path.samestat(os.stat(base), before)
    same_arrays(read_index_file(base)[1], one.arrays)
    # a second update: rows relative to the base (every update's since), the old link gone
    write_patched_index(base, patch_base(base), two.meta, **diff(b.arrays, two.arrays))
    second = patch_base(base)
    assert second != first and not os.path.exists(first)
    assert sorted(os.listdir(tmp_path)) == sorted(["i.h5", os.path.basename(second)])
    same_arrays(read_index_file(base)[1], two.arrays)
    assert seals(base) == seals(whole_file(tmp_path, two))
    os.remove(str(tmp_path / "whole.h5"))
    # an index written whole over it: the link goes with it
    write_index_file(base, two.meta, two.arrays)
    assert os.listdir(tmp_path) == ["i.h5"]
    with pytest.raises(DistGrailError, match="itself patched"):  # (its base is what a patch goes over)
        p = str(tmp_path / "q.h5")
        write_patched_index(p, base, two.meta, **diff(b.arrays, two.arrays))
        write_patched_index(str(tmp_path / "r.h5"), p, two.meta, rows={})


def test_a_copy_in_the_directory_keeps_the_link(built, tmp_path):
    b, base, one, _ = built
    p = str(tmp_path / "p.h5")
    write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))
    link = patch_base(p)
    os.rename(p, str(tmp_path / "kept.h5"))  # renamed within its directory: it still names its link
    write_index_file(p, one.meta, one.arrays)  # another index at the old name: the link stays in use
    assert os.path.exists(link)
    same_arrays(read_index_file(str(tmp_path / "kept.h5"))[1], one.arrays)


def test_base_missing_moved_replaced_or_patched_is_named(built, tmp_path):
    b, base, one, two = built
    d = tmp_path / "a"
    d.mkdir()
    p = str(d / "p.h5")
    write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))
    link = patch_base(p)
    name = os.path.basename(link)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(p, moved / "p.h5")  # the main file without its link
    with pytest.raises(IndexFormatError, match=f"{name} of this patched index is missing"):
        read_index_file(str(moved / "p.h5"))
    os.rename(link, link + ".away")
    with pytest.raises(IndexFormatError, match=f"p.h5: the base file {name} of this patched index is missing"):
        distgrail.open_index(p)
    write_index_file(link, two.meta, two.arrays)  # another index under the link's name
    with pytest.raises(IndexFormatError, match=f"base file {name} is not the index this patch was written over"):
        read_index_file(p)
    os.remove(link)
    shutil.copy(p, link)  # a patched main file as the base
    with pytest.raises(IndexFormatError, match=f"base file {name} is itself a patched index"):
        read_index_file(p)


def test_a_damaged_patch_is_named(built, tmp_path):
    b, base, one, _ = built
    p = str(tmp_path / "p.h5")
    write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))
    with h5py.File(p, "r+") as f:  # a patch group's checksums changed: the patch's seal says so
        crc = f["patch/labels/intervals"].attrs["crc32"]
        f["patch/labels/intervals"].attrs["crc32"] = crc ^ np.uint32(1)
    with pytest.raises(IndexFormatError, match="patch_seal"):
        read_index_file(p)


def test_link_failure_is_patch_not_possible_and_leaves_nothing(built, tmp_path, monkeypatch):
    b, base, one, _ = built
    p = str(tmp_path / "p.h5")

    def no_link(*a, **k):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    with pytest.raises(PatchNotPossible, match="cannot link the base"):
        write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))
    assert os.listdir(tmp_path) == []


def test_a_failed_write_leaves_nothing(built, tmp_path, monkeypatch):
    b, base, one, _ = built
    import distgrail.indexfile.patch as patch

    p = str(tmp_path / "p.h5")
    write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))  # an index there: it stays whole
    had = sorted(os.listdir(tmp_path))

    def fails(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(patch, "_put", fails)
    with pytest.raises(DistGrailError, match="No space left"):
        write_patched_index(p, patch_base(p), one.meta, **diff(b.arrays, one.arrays))
    assert sorted(os.listdir(tmp_path)) == had
    same_arrays(read_index_file(p)[1], one.arrays)


_KILLED = """
import sys, numpy as np, pickle
from distgrail.indexfile import write_patched_index
a = pickle.load(open(sys.argv[1], "rb"))
write_patched_index(*a["args"], **a["kw"])
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_write_leaves_no_temporary(built, tmp_path, sig):
    import pickle

    b, base, one, _ = built
    d = tmp_path / "out"
    d.mkdir()
    p = str(d / "p.h5")
    job = tmp_path / "job.pkl"
    pickle.dump({"args": (p, base, one.meta), "kw": diff(b.arrays, one.arrays)}, open(job, "wb"))
    env = dict(os.environ, DISTGRAIL_TEST_WRITE_PAUSE="60")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(job)], env=env)
    try:
        deadline = time.time() + 120
        while not any(".tmp-" in n for n in os.listdir(d)) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        assert any(n.endswith(".base") for n in os.listdir(d)), os.listdir(d)  # linked, main file pending
    finally:
        proc.send_signal(sig)
        proc.wait(60)
    if sig == signal.SIGTERM:
        assert os.listdir(d) == []
    else:  # killed outright: the next index written there takes its leftovers
        assert os.listdir(d)
        write_index_file(p, one.meta, one.arrays)
        assert os.listdir(d) == ["p.h5"]


def test_new_stored_type_written_whole_and_values_that_do_not_fit(built, tmp_path):
    b, base, _, _ = built
    arrays = {k: np.array(v) for k, v in b.arrays.items()}
    level = arrays["dag/level"]
    ip = np.asarray(arrays["dag/indptr"])
    sink = int(np.flatnonzero(np.diff(ip) == 0)[0])  # no edge leaves it: its level may rise to the top
    meta = dict(b.meta, n_levels=300, components_by_level=0)
    new = level.astype(np.uint16)
    new[sink] = 299
    arrays["dag/level"] = new
    p = str(tmp_path / "p.h5")
    write_patched_index(p, base, meta, rows={"dag/level": (np.array([sink]), np.array([299]))})
    with h5py.File(p, "r") as f:
        assert "dag/level" in f and f["dag/level"].dtype == np.uint16 and "patch" not in f
    got = read_index_file(p)[1]
    same_arrays(got, arrays)
    assert seals(p) == seals(whole_file(tmp_path, distgrail.index.Index(meta, arrays)))
    with pytest.raises(DistGrailError, match="holds 70000, which its stored type uint16 cannot hold"):
        write_patched_index(p, base, meta, rows={"dag/level": (np.array([sink]), np.array([70000]))})
    with pytest.raises(PatchNotPossible, match="n_components"):
        write_patched_index(p, base, dict(b.meta, n_components=b.C + 1), rows={})


def test_convert_folds_and_info_says_patched(built, tmp_path, capsys):
    from distgrail.cli import main

    b, base, one, _ = built
    p = str(tmp_path / "p.h5")
    write_patched_index(p, base, one.meta, **diff(b.arrays, one.arrays))
    out = str(tmp_path / "folded.h5")
    assert main(["convert", p, "--layout", "single", "-o", out]) == 0
    assert patch_base(out) is None
    w = whole_file(tmp_path, distgrail.open_index(p))
    with h5py.File(out, "r") as f, h5py.File(w, "r") as g:
        assert dict(f.attrs) .keys() == dict(g.attrs).keys() and seals(out) == seals(w) == seals(p)
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            assert np.array_equal(f[n][()], g[n][()]) and f[n].dtype == g[n].dtype, n
            assert np.array_equal(f[n].attrs.get("crc32", []), g[n].attrs.get("crc32", [])), n
    assert open(out, "rb").read() == open(w, "rb").read()  # the very file a whole write writes
    capsys.readouterr()
    assert main(["info", p, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["patched"]["base"] == os.path.basename(patch_base(p))
    assert info["patched"]["rows"]["dag"] > 0
