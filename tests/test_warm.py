"""Warming CuPy's kernel cache at set-up (``python -m distgrail.gpu.warm``, issue 44): the
warm-up's pipeline runs (here on the CPU backend: the same calls), the cache folder is CuPy's
(``CUPY_CACHE_DIR`` or ``~/.cupy/kernel_cache``) and counted, and without a GPU the command says
so and succeeds. On a GPU machine it fills the cache (not run here)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from distgrail.gpu import warm as warm_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_warm_up_builds_and_queries_on_a_backend():
    lines = []
    done = warm_module.warm("cpu", n=3000, say=lines.append, wide=70000)
    assert set(done) == {"seconds", "cache_dir", "cache_files_added"} and done["seconds"] > 0
    assert [ln.split(":")[0] for ln in lines] == ["a text edge list", "a .h5 graph", "the bundled graph",
                                                  "a layered DAG"], lines
    assert all("queried and updated" in ln for ln in lines), lines  # every graph's index took edges too


def test_the_wide_graph_takes_the_wider_stored_types():
    """More than 2^16 components and 2^8 levels: the index stores 32-bit ids and 16-bit levels,
    as a real graph's does (the small graphs' are 16- and 8-bit)."""
    import distgrail
    from distgrail.indexfile.layout import stored_types
    from distgrail.io.generate import generate

    idx = distgrail.build_index(generate("layered", 70000, 3, seed=5, levels=300), dims=2, backend="cpu")
    types = stored_types(idx.meta)
    assert idx.C > 1 << 16 and idx.meta["n_levels"] > 1 << 8
    assert np.dtype(types["vertex/component"]).itemsize == 4 and np.dtype(types["dag/level"]).itemsize == 2, types


def test_the_cache_folder_is_cupys_and_counted(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "c"))
    assert warm_module.cache_dir() == str(tmp_path / "c") and warm_module.cache_files() == 0
    (tmp_path / "c" / "x").mkdir(parents=True)
    for name in ("a.cubin", "x/b.cubin"):
        (tmp_path / "c" / name).write_bytes(b"k")
    assert warm_module.cache_files() == 2
    monkeypatch.delenv("CUPY_CACHE_DIR")
    assert warm_module.cache_dir() == os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")


def test_the_command_without_a_gpu_says_so(tmp_path):
    env = dict(os.environ, CUPY_CACHE_DIR=str(tmp_path / "c"), CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-m", "distgrail.gpu.warm"], capture_output=True, text=True,
                       timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0 and "no usable CUDA GPU" in r.stdout and str(tmp_path / "c") in r.stdout, r


def test_setup_warms_the_cache_when_it_installs_the_gpu_extra():
    with open(os.path.join(ROOT, "launch", "setup.sh")) as f:
        text = f.read()
    block = text[text.index("warmed=.venv/.distgrail-warmed"):]
    block = block[:block.index("\nfi\n")]
    assert 'if [ "$gpu" != none ]' in block and "if out=$($limit .venv/bin/python -m distgrail.gpu.warm 2>&1)" in block
    assert 'limit="timeout 900"' in block and '*"kernels added"*) echo' in block  # marked only once warmed


def test_setup_warms_through_a_stand_in_python(tmp_path):
    """The set-up's warm-up block run by bash with a stand-in .venv/bin/python: a warm-up that
    added kernels marks the cache folder (not run again), one without a GPU does not, a failing
    one does not fail the set-up."""
    with open(os.path.join(ROOT, "launch", "setup.sh")) as f:
        text = f.read()
    block = text[text.index("warmed=.venv/.distgrail-warmed"):]
    block = block[:block.index("\nfi\n") + 4]
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    py = tmp_path / ".venv" / "bin" / "python"
    script = tmp_path / "block.sh"
    script.write_text("set -euo pipefail\ngpu=cuda13\n" + block + "echo done\n")
    for says, status, marked in (("no usable CUDA GPU here", 0, False), ("boom", 1, False),
                                 ("the kernel cache /c: 12 kernels added in 3.0 s", 0, True)):
        (tmp_path / ".venv" / ".distgrail-warmed").unlink(missing_ok=True)
        py.write_text(f"#!/bin/sh\necho '{says}'\nexit {status}\n")
        py.chmod(0o755)
        r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, CUPY_CACHE_DIR="/c"))
        assert r.returncode == 0 and r.stdout.strip() == "done" and says in r.stderr, (says, r)
        assert (tmp_path / ".venv" / ".distgrail-warmed").exists() == marked, says
        assert ("failed" in r.stderr) == (status != 0), r.stderr
