"""An HDF5 write that fails after the free-space check (review 33): h5py raises RuntimeError
('Can't decrement id ref count (... errno = 27 ...)') when the file it closes could not be
extended; that is the machine's error, exit 2 naming the output, no temporary file left."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.mark.parametrize("command", ["convert", "index"])
def test_a_file_size_limit_hit_by_the_hdf5_write_is_exit_2_naming_the_output(tmp_path, command):
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 200_000, 300_000), rng.integers(0, 200_000, 300_000)
    graph = tmp_path / "g.txt"
    graph.write_text("".join(f"{a} {b}\n" for a, b in zip(src, dst)))
    out = tmp_path / "out" / "o.h5"
    out.parent.mkdir()
    limit = 256 << 10  # (ulimit -f: a write past it fails with EFBIG; Python ignores SIGXFSZ)
    r = subprocess.run([sys.executable, "-m", "distgrail", command, str(graph), "-o", str(out), "--backend", "cpu",
                        "--quiet"], env=ENV, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"distgrail: error: {out}: cannot write the output: File too large\n", r.stderr
    assert os.listdir(out.parent) == []


def test_a_short_write_on_a_full_disk_says_no_space_left(tmp_path, monkeypatch):
    """NumPy's ``tofile`` (``np.save`` of an .npy answers or pairs file) reports a full disk as
    'N requested and M written', no errno: the output's error said only 'write failed'."""
    from distgrail.errors import OutputError
    from distgrail.io import atomic
    from distgrail.io.atomic import atomic_path

    full = os.statvfs_result((4096, 4096, 100, 0, 0, 100, 0, 0, 0, 255))
    monkeypatch.setattr(atomic.os, "statvfs", lambda p: full)
    out = tmp_path / "a.npy"
    with pytest.raises(OutputError) as e:
        with atomic_path(out) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"x")
                raise OSError("1000000 requested and 65408 written")
    assert str(e.value) == f"{out}: cannot write the output: No space left on device"
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    with pytest.raises(OutputError) as e:  # space left: a short write of another cause stays 'write failed'
        with atomic_path(out) as tmp:
            raise OSError("1000000 requested and 65408 written")
    assert str(e.value) == f"{out}: cannot write the output: write failed"


def _limited(args, limit, cwd=None):
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args), "--quiet"], env=ENV, capture_output=True,
                          text=True, timeout=120, cwd=cwd,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    """A graph, its index in one file and split in 3 parts (each some 150 KB)."""
    from distgrail.cli import main

    d = tmp_path_factory.mktemp("limits")
    assert main(["generate", "rmat", "--scale", "12", "--seed", "3", "-o", str(d / "g.txt"), "--quiet"]) == 0
    assert main(["index", str(d / "g.txt"), "-o", str(d / "i.h5"), "--backend", "cpu", "--quiet"]) == 0
    assert main(["convert", str(d / "i.h5"), "--layout", "split", "--parts", "3", "-o", str(d / "s.h5"), "--quiet"]) == 0
    (d / "e.txt").write_text("".join(f"{k} {3 * k + 1}\n" for k in range(40)))
    return d


@pytest.mark.parametrize("what", ["index", "convert single over an index", "convert graph", "update -o"])
def test_every_file_size_limit_is_exit_2_and_the_old_output_kept_or_a_whole_file(small_index, tmp_path, what):
    """HDF5 held a small dataset's bytes in its sieve buffer and wrote them when h5py freed the
    dataset, where the failure was only printed ('Exception ignored'): a write that ran out of room
    there (a full disk, a quota) put a damaged index in place with exit 0, over the old one
    (``convert --layout single``), or crashed the process (SIGSEGV) leaving its temporary file
    (review 41). Every limit across the file's size: exit 2 with the one line, no traceback, the old
    output as it was and nothing else left; or, past the file, a whole index."""
    import filecmp
    import shutil

    import distgrail

    d = small_index
    out = tmp_path / "o.h5"
    shutil.copy(d / "i.h5", out)  # an existing good output, to be kept on failure
    args = {"index": ["index", d / "g.txt", "-o", out, "--backend", "cpu", "--dims", "3"],
            "convert single over an index": ["convert", d / "s.h5", "--layout", "single", "-o", out],
            "convert graph": ["convert", d / "g.txt", "-o", out, "--backend", "cpu"],
            "update -o": ["update", d / "i.h5", "--add", d / "e.txt", "-o", out, "--backend", "cpu"]}[what]
    size = os.path.getsize(d / "i.h5")
    limits = sorted({int(size * f) for f in np.linspace(0.05, 1.0, 9)} | set(range(size - 24_000, size + 1, 2_000)))
    for limit in limits:
        r = _limited(args, limit)
        assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, (limit, r.stderr)
        assert sorted(os.listdir(tmp_path)) == ["o.h5"], (limit, os.listdir(tmp_path))
        if r.returncode == 0:  # (the whole file fitted)
            if what != "convert graph":
                distgrail.open_index(out).query(np.arange(50), np.arange(50)[::-1])
            shutil.copy(d / "i.h5", out)
            continue
        assert r.returncode == 2 and r.stderr == f"distgrail: error: {out}: cannot write the output: File too large\n", \
            (limit, r.returncode, r.stderr)
        assert filecmp.cmp(out, d / "i.h5", shallow=False), limit


@pytest.mark.parametrize("what", ["pairs", "query"])
def test_a_npy_cut_short_by_the_file_size_limit_says_file_too_large(small_index, tmp_path, what):
    """NumPy's short write past ``ulimit -f`` said only 'write failed' (no errno in its message):
    the temporary reached the limit, so it is the limit's EFBIG (a reviewer, session 41)."""
    d = small_index
    out = tmp_path / "o.npy"
    args = {"pairs": ["pairs", d / "i.h5", "-n", "200000", "-o", out],
            "query": ["query", d / "i.h5", tmp_path / "p.npy", "-o", out, "--backend", "cpu"]}[what]
    if what == "query":
        from distgrail.cli import main

        assert main(["pairs", str(d / "i.h5"), "-n", "400000", "-o", str(tmp_path / "p.npy"), "--quiet"]) == 0
    r = _limited(args, 100_000 if what == "pairs" else 300_000)
    assert r.returncode == 2 and r.stderr == f"distgrail: error: {out}: cannot write the output: File too large\n", \
        r.stderr
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_an_in_place_update_names_the_part_it_could_not_write_as_the_index_was_named(small_index, tmp_path):
    """An update in place named the index by its absolute path (the link-resolving ``realpath``
    of ``INDEX``) in a write's error, where ``convert`` names the path given: ``s.h5.<id>.part0``
    given as ``s.h5`` from its directory was ``/abs/dir/s.h5.<id>.part0``."""
    from distgrail.cli import main

    assert main(["convert", str(small_index / "s.h5"), "--layout", "split", "--parts", "3", "-o",
                 str(tmp_path / "s.h5"), "--quiet"]) == 0
    before = sorted(os.listdir(tmp_path))
    r = _limited(["update", "s.h5", "--add", small_index / "e.txt", "--backend", "cpu"], 30_000, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("distgrail: error: s.h5.") and r.stderr.endswith(": cannot write the output: "
                                                                                 "File too large\n"), r.stderr
    assert str(tmp_path) not in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == before
