"""kernels/ ships inside the wheel and the loader finds it."""

import os
import subprocess
import sys
import zipfile

import pytest

from distgrail.gpu.kernels import kernel_dir, kernel_source
from conftest import ROOT


def test_loader_finds_sources():
    d = kernel_dir()
    names = sorted(f for f in os.listdir(d) if f.endswith(".cu"))
    assert names, d
    assert "__global__" in kernel_source(names[0][:-3])


def test_wheel_contains_kernels(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), ROOT], capture_output=True, text=True)
    if r.returncode != 0 and "hatchling" in (r.stderr + r.stdout):
        pytest.fail("building the wheel needs hatchling (installed by launch/setup.sh): " + r.stderr[-500:])
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next(p for p in tmp_path.iterdir() if p.suffix == ".whl")
    names = zipfile.ZipFile(wheel).namelist()
    cu = [n for n in names if n.startswith("distgrail/_kernels/") and n.endswith(".cu")]
    repo = sorted(f for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".cu"))
    assert sorted(os.path.basename(n) for n in cu) == repo
    assert "distgrail/_kernels/common.cuh" in names
    # the installed layout resolves: unpack and load from it
    z = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(z)
    code = ("import distgrail.gpu.kernels as k; d = k.kernel_dir(); "
            "assert d.endswith('_kernels'), d; print(d)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=z,
                       env=dict(os.environ, PYTHONPATH=str(z)))
    assert r.returncode == 0, r.stderr
