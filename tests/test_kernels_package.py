"""kernels/ ships inside the wheel, compiled too (fatbins, when nvcc is there), and the loader finds it."""

import os
import re
import subprocess
import sys
import zipfile

import pytest

from distgrail.gpu.kernels import TEMPLATES, kernel_dir, kernel_source
from distgrail.gpu.kernels.fatbins import find_nvcc
from conftest import ROOT


#: one .cu per stage plus shared headers
STAGE_SOURCES = {"parse.cu", "condense.cu", "forest.cu", "subtree.cu", "ranks.cu", "intervals.cu", "supports.cu",
                 "prefilter.cu", "search.cu", "partitioned_sweeps.cu", "insertion.cu", "checksums.cu"}
HEADERS = {"common.cuh", "sweep.cuh", "query.cuh"}
BOUNDS = r"(?:__launch_bounds__\(\w+\)\s+)?"


def test_loader_finds_one_source_per_stage():
    d = kernel_dir()
    assert os.path.realpath(d) == os.path.realpath(os.path.join(ROOT, "kernels"))
    assert {f for f in os.listdir(d) if f.endswith(".cu")} == STAGE_SOURCES
    assert {f for f in os.listdir(d) if f.endswith(".cuh")} == HEADERS
    for name in STAGE_SOURCES:
        assert "__global__" in kernel_source(name[:-3]), name


def _launched():
    """(stage, kernel name, file) for every kernel the package fetches."""
    out = []
    pkg = os.path.join(ROOT, "distgrail")
    for dirpath, _, files in os.walk(pkg):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            with open(path) as fh:
                src = fh.read()
            for stage, name in re.findall(r'kernel\("(\w+)", f?"([^"]+)"\)', src):
                out.append((stage, name, path))
            for stage, name in re.findall(r'load_module\("(\w+)"\)\.get_function\("(\w+)"\)', src):
                out.append((stage, name, path))
            modules = set(re.findall(r'load_module\("(\w+)"', src))
            for name in re.findall(r'(?<!\)\.)get_function\("(\w+)"\)', src):
                assert len(modules) == 1, f"{path}: get_function with modules {modules}"
                out.append((next(iter(modules)), name, path))
    return out


def test_every_launched_kernel_exists_in_its_stage_source():
    launched = _launched()
    stages = {s for s, _, _ in launched}
    assert stages <= {f[:-3] for f in STAGE_SOURCES}, stages
    src = "".join(open(os.path.join(d, f)).read() for d, _, fs in os.walk(os.path.join(ROOT, "distgrail"))
                  for f in fs if f.endswith(".py"))
    for stem in (f[:-3] for f in STAGE_SOURCES):  # every stage's launcher fetches its kernels
        assert f'kernel("{stem}"' in src or f'load_module("{stem}"' in src, stem
    for stage, name, path in launched:
        src = kernel_source(stage)
        if "<" in name:  # a template instantiation: "dg_sweep_iv<{K}>"
            base = name.split("<")[0]
            assert re.search(r"template <int \w+>\s*__global__ void\s+" + BOUNDS + base + r"\(", src), (stage, name, path)
            assert any(e.startswith(base + "<") for e in TEMPLATES[stage]), (stage, name)
        elif name == "dg_csr_rows":  # from the shared sweep header
            assert '#include "sweep.cuh"' in src, (stage, path)
        else:
            assert re.search(r'extern "C" __global__ void\s+' + BOUNDS + name + r"\(", src), (stage, name, path)


def test_removed_kernels_stay_removed():
    assert not os.path.exists(os.path.join(ROOT, "kernels", "labeling.cu"))
    for f in STAGE_SOURCES | HEADERS:
        src = open(os.path.join(ROOT, "kernels", f)).read()
        assert "dg_hash_f64" not in src and "dg_fix_ties" not in src and "DG_DEF_IV" not in src, f


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
    # the compiled kernels (tests/test_fatbins.py): one fatbin per .cu and the manifest, when nvcc is there
    fat = sorted(n for n in names if n.startswith("distgrail/gpu/kernels/fatbin/"))
    if find_nvcc():
        assert fat == sorted([f"distgrail/gpu/kernels/fatbin/{f[:-3]}.fatbin" for f in repo]
                             + ["distgrail/gpu/kernels/fatbin/manifest.json"]), fat
    # the installed layout resolves: unpack and load from it
    z = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(z)
    code = ("import distgrail.gpu.kernels as k; d = k.kernel_dir(); "
            "assert d.endswith('_kernels'), d; print(d); raise SystemExit(k.main(['--status']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=z,
                       env=dict(os.environ, PYTHONPATH=str(z)))
    if fat:  # built from the wheel's own _kernels/ text: every one up to date there
        assert r.returncode == 0 and r.stdout.count(": up to date") == len(repo), r.stdout + r.stderr
    else:
        assert "no fatbins" in r.stdout, r.stdout + r.stderr
