"""Kernels shipped compiled (distgrail/gpu/kernels/fatbins.py, docs/kernels.md): the fatbins in
the checkout come from today's sources and constants; the loader takes a fatbin only when its
recorded source key is the key of the text NVRTC would get and this GPU can run it, else NVRTC
(CuPy mocked); on a GPU, a fatbin-loaded build and its queries equal the NVRTC ones."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import types

import numpy as np
import pytest

import distgrail
from distgrail import constants
from distgrail.gpu import kernels as gk
from distgrail.gpu.kernels import fatbins
from test_kernels_package import _launched


# -- the fatbins in this checkout come from today's sources (CPU; CI builds them with --check) --------

def test_shipped_fatbins_come_from_todays_sources():
    man = fatbins.read_manifest()
    if man is None:
        if fatbins.find_nvcc():
            pytest.fail(f"nvcc is installed but {fatbins.FATBIN_DIR} holds no manifest: "
                        "run python -m distgrail.gpu.kernels --check")
        pytest.skip("no fatbins built in this checkout (no nvcc): every kernel compiles with NVRTC")
    assert man["sass"] == list(fatbins.SASS) and man["ptx"] == fatbins.PTX
    stale = []
    for name in gk.module_names():
        entry = man["modules"].get(name)
        if entry is None or entry["source_sha256"] != gk.source_key(name):
            stale.append(name)
            continue
        with open(os.path.join(fatbins.FATBIN_DIR, entry["file"]), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == entry["fatbin_sha256"], name
        assert set(entry["names"]) == set(gk.TEMPLATES.get(name, ())), name
        assert set(entry["names"].values()) <= set(entry["kernels"]), name
    assert not stale, (f"fatbins built from other sources or constants: {stale} "
                       "(python -m distgrail.gpu.kernels --check rebuilds them)")
    assert set(man["modules"]) == set(gk.module_names())
    for stage, name, path in _launched():  # every kernel a launcher fetches is in its fatbin
        entry = man["modules"][stage]
        if "<" in name:  # "dg_sweep_iv<{K}>": every instantiation of TEMPLATES is mapped (above)
            assert any(e.startswith(name.split("<")[0] + "<") for e in entry["names"]), (stage, name, path)
        else:
            assert name in entry["kernels"], (stage, name, path)


def test_source_key_follows_the_constants_and_the_headers_not_the_folder(monkeypatch, tmp_path):
    from distgrail.gpu.kernels import sources

    before = gk.source_key("supports")
    monkeypatch.setattr(constants, "HUB", 4)
    assert gk.source_key("supports") != before
    monkeypatch.undo()
    copy = tmp_path / "_kernels"
    shutil.copytree(gk.kernel_dir(), copy)
    monkeypatch.setattr(sources, "kernel_dir", lambda: str(copy))
    assert gk.compile_options()[-1] == f"-I{copy}"
    assert gk.source_key("supports") == before  # the wheel's _kernels/ hashes as the checkout's kernels/
    (copy / "sweep.cuh").write_text((copy / "sweep.cuh").read_text() + "// edited\n")
    assert gk.source_key("supports") != before  # a header is part of the text


def test_without_nvcc_nothing_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(fatbins, "find_nvcc", lambda: None)
    rep = fatbins.build(str(tmp_path))
    assert rep["nvcc"] is None and not rep["built"] and not os.listdir(tmp_path)
    assert "no fatbins" in fatbins.status(str(tmp_path))[0]


def test_build_hook_without_nvcc_warns_and_ships_nothing(monkeypatch):
    from conftest import ROOT

    pytest.importorskip("hatchling", reason="the build hook needs hatchling (launch/setup.sh installs it)")

    sys.path.insert(0, os.path.join(ROOT, "launch"))
    try:
        import hatch_build
    finally:
        sys.path.remove(os.path.join(ROOT, "launch"))
    fake = types.SimpleNamespace(build=lambda folder: {"nvcc": None, "built": [], "kept": [], "failed": {},
                                                       "seconds": 0.0})
    monkeypatch.setattr(hatch_build, "_fatbin_tools", lambda root: fake)
    said = []
    hook = hatch_build.KernelFatbins.__new__(hatch_build.KernelFatbins)
    monkeypatch.setattr(hatch_build.KernelFatbins, "app", types.SimpleNamespace(
        display_warning=said.append, display_info=said.append))
    monkeypatch.setattr(hatch_build.KernelFatbins, "root", ROOT)
    data = {}
    hook.initialize("standard", data)
    assert "artifacts" not in data and len(said) == 1 and "nvcc not found" in said[0]
    assert "distgrail" in sys.modules and sys.modules["distgrail"] is distgrail  # the real package is back


# -- the loader's choice, CuPy mocked ------------------------------------------------------------------

class _DriverError(Exception):
    pass


class _Raw:
    """Stands in for cupy.RawModule: records how it was made and what was fetched."""
    made: list = []
    fail_load = False

    def __init__(self, code=None, path=None, options=(), name_expressions=None):
        self.code, self.path, self.options, self.exprs, self.fetched = code, path, options, name_expressions, []
        _Raw.made.append(self)

    def compile(self):
        if self.path and _Raw.fail_load:
            raise _DriverError("CUDA_ERROR_NO_BINARY_FOR_GPU")

    def get_function(self, name):
        self.fetched.append(name)
        return name


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A mocked cupy (device 0 of compute capability ``gpu.cc``, driver ``gpu.driver``) and a
    fatbin folder whose manifest lists intervals.fatbin built from today's source."""
    state = types.SimpleNamespace(cc="90", driver=13000)

    class Device:
        def __init__(self, dev=None):
            self.id = 0 if dev is None else dev
            self.compute_capability = state.cc

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cuda = types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(driverGetVersion=lambda: state.driver),
                                 driver=types.SimpleNamespace(CUDADriverError=_DriverError))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=_Raw, cuda=cuda))
    monkeypatch.setattr(gk, "_CACHE", {})
    monkeypatch.setattr(_Raw, "made", [])
    monkeypatch.setattr(_Raw, "fail_load", False)
    monkeypatch.delenv("DISTGRAIL_FATBINS", raising=False)
    blob = b"not really a fatbin"
    (tmp_path / "intervals.fatbin").write_bytes(blob)
    exprs = gk.TEMPLATES["intervals"]
    man = {"format": 1, "nvcc": "13.0.88", "sass": list(fatbins.SASS), "ptx": fatbins.PTX,
           "modules": {"intervals": {"file": "intervals.fatbin", "source_sha256": gk.source_key("intervals"),
                                     "fatbin_sha256": hashlib.sha256(blob).hexdigest(),
                                     "kernels": [f"_Z{e}" for e in exprs] + ["dg_csr_rows"],
                                     "names": {e: f"_Z_mangled_{e}" for e in exprs}}}}
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    monkeypatch.setattr(fatbins, "FATBIN_DIR", str(tmp_path))
    state.folder = tmp_path
    return state


def _load():
    mod = gk.load_module("intervals")
    return mod, _Raw.made[-1]


def test_matching_fatbin_is_loaded_and_templates_fetched_by_name(fake_gpu):
    mod, raw = _load()
    assert gk.origin(mod) == "fatbin" and raw.path == str(fake_gpu.folder / "intervals.fatbin") and raw.code is None
    assert mod.get_function("dg_sweep_iv<3>") == "_Z_mangled_dg_sweep_iv<3>"
    assert mod.get_function("dg_csr_rows") == "dg_csr_rows"  # extern "C": its own name
    assert gk.load_module("intervals") is mod and len(_Raw.made) == 1  # once per device


def test_other_constants_compile_with_nvrtc(fake_gpu, monkeypatch):
    monkeypatch.setattr(constants, "HUB", 4)  # as tests/test_labeling_gpu.py compiles the kernels
    mod, raw = _load()
    assert gk.origin(mod) == "nvrtc" and raw.path is None and "#define DG_HUB (4)" in raw.code
    assert raw.exprs == gk.TEMPLATES["intervals"] and raw.options == gk.compile_options()


@pytest.mark.parametrize("cc, driver, want", [
    ("90", 13000, "fatbin"), ("80", 13000, "fatbin"), ("86", 13020, "fatbin"),  # sm_80 code runs on 8.6
    ("100", 13000, "fatbin"), ("103", 13000, "fatbin"),
    ("120", 13000, "fatbin"),  # no sm_120 code: the PTX of compute_100, JIT-compiled by the driver
    ("70", 13000, "nvrtc"),  # Volta: CUDA 13's nvcc makes no sm_70 code
    ("90", 12080, "nvrtc"),  # a CUDA 12 driver: not the nvcc 13 build
])
def test_architecture_and_driver_decide(fake_gpu, cc, driver, want):
    fake_gpu.cc, fake_gpu.driver = cc, driver
    mod, _ = _load()
    assert gk.origin(mod) == want


def test_a_fatbin_the_driver_refuses_falls_back_to_nvrtc(fake_gpu, monkeypatch):
    monkeypatch.setattr(_Raw, "fail_load", True)
    mod, raw = _load()
    assert gk.origin(mod) == "nvrtc" and raw.code is not None and len(_Raw.made) == 2


def test_switch_off_altered_file_and_unknown_instantiation_use_nvrtc(fake_gpu, monkeypatch):
    monkeypatch.setenv("DISTGRAIL_FATBINS", "0")
    assert gk.origin(_load()[0]) == "nvrtc"
    monkeypatch.delenv("DISTGRAIL_FATBINS")
    assert gk.origin(gk.load_module("intervals", name_expressions=("dg_sweep_iv<9>",))) == "nvrtc"
    assert "lacks dg_sweep_iv<9>" in fatbins.choose("intervals", ("dg_sweep_iv<9>",))
    (fake_gpu.folder / "intervals.fatbin").write_bytes(b"truncated")
    monkeypatch.setattr(gk, "_CACHE", {})
    assert gk.origin(_load()[0]) == "nvrtc"
    assert "not the file its manifest lists" in fatbins.choose("intervals")
    assert "no fatbin of ranks.cu" in fatbins.choose("ranks")


# -- on a GPU: the shipped fatbins give what NVRTC's build gives ---------------------------------------

def _needs_shipped():
    if fatbins.read_manifest() is None:
        pytest.skip("no fatbins built (python -m distgrail.gpu.kernels --check)")


def _fresh(monkeypatch, fat: bool):
    monkeypatch.setattr(gk, "_CACHE", {})
    if fat:
        monkeypatch.delenv("DISTGRAIL_FATBINS", raising=False)
    else:
        monkeypatch.setenv("DISTGRAIL_FATBINS", "0")


@pytest.mark.gpu
def test_fatbin_kernels_compute_what_nvrtc_kernels_compute(monkeypatch):
    _needs_shipped()
    import cupy as cp

    rng = np.random.default_rng(5)
    n, m = 5000, 40000
    edges = [(w, rng.integers(0, n, m).astype(dt), rng.integers(0, n, m).astype(dt))
             for w, dt in ((0, np.int32), (1, np.int64))]
    out = {}
    for fat in (True, False):
        _fresh(monkeypatch, fat)
        psw, ranks = gk.load_module("partitioned_sweeps"), gk.load_module("ranks")
        assert {gk.origin(psw), gk.origin(ranks)} == {"fatbin" if fat else "nvrtc"}
        got = []
        for w, s, d in edges:  # a template kernel, both instantiations
            words = cp.zeros((2 * n + 31) // 32, dtype=cp.uint32)
            psw.get_function(f"dg_psw_presence<{w}>")((64,), (256,), (cp.asarray(s), cp.asarray(d), np.int64(m),
                                                                      np.int64(n), words))
            got.append(cp.asnumpy(words))
        key = cp.zeros(n, dtype=cp.uint64)  # an extern "C" kernel that hashes with the constants' multipliers
        ranks.get_function("dg_sibling_key")((64,), (256,), (key, np.int64(n), np.uint64(0x1234_5678_9ABC)))
        got.append(cp.asnumpy(key))
        out[fat] = got
    for a, b in zip(out[True], out[False]):
        np.testing.assert_array_equal(a, b)
    assert out[True][0].any() and out[True][1].any() and len(np.unique(out[True][2])) == n


@pytest.mark.gpu
def test_build_and_queries_from_fatbins_equal_nvrtc(monkeypatch):
    _needs_shipped()
    g = distgrail.bundled_graph()
    from distgrail.io.pairs import read_pairs

    s, t = read_pairs(distgrail.bundled_pairs())
    res = {}
    for fat in (True, False):
        _fresh(monkeypatch, fat)
        idx = distgrail.build_index(g, dims=4, seed=3, backend="gpu")
        ans, _ = idx.query(s, t, backend="gpu")
        origins = {k[0]: gk.origin(mod) for k, mod in gk._CACHE.items()}
        assert origins and set(origins.values()) == {"fatbin" if fat else "nvrtc"}, origins
        assert {"intervals", "search"} <= set(origins), origins  # a build stage and a query step
        res[fat] = idx, np.asarray(ans)
    (a, qa), (b, qb) = res[True], res[False]
    assert sorted(a.arrays) == sorted(b.arrays)
    for key in a.arrays:
        np.testing.assert_array_equal(a.arrays[key], b.arrays[key], err_msg=key)
    np.testing.assert_array_equal(qa, qb)
    assert int(qa.sum()) == distgrail.BUNDLED_REACHABLE
