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
