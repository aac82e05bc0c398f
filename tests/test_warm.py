"""Warming CuPy's kernel cache at set-up (``python -m distgrail.gpu.warm``, issue 44): the
warm-up's pipeline runs (here on the CPU backend: the same calls), the cache folder is CuPy's
(``CUPY_CACHE_DIR`` or ``~/.cupy/kernel_cache``) and counted, and without a GPU the command says
so and succeeds. On a GPU machine it fills the cache (not run here)."""

from __future__ import annotations

import os
import subprocess
import sys

from distgrail.gpu import warm as warm_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_warm_up_builds_and_queries_on_a_backend():
    lines = []
    done = warm_module.warm("cpu", n=3000, say=lines.append)
    assert set(done) == {"seconds", "cache_dir", "cache_files_added"} and done["seconds"] > 0
    assert [ln.split(":")[0] for ln in lines] == ["a text edge list", "a .h5 graph", "the bundled graph"], lines


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
    block = text[text.index('if [ "$gpu" != none ]; then  # CuPy'):]
    assert "-m distgrail.gpu.warm" in block[:block.index("\n    fi\n")]
