"""Kernels shipped compiled: one fatbin per ``kernels/<name>.cu`` in ``fatbin/`` beside this file,
built by nvcc from the text CuPy would hand NVRTC (:func:`~distgrail.gpu.kernels.sources.wrapper_source`),
with ``manifest.json`` recording the :func:`~distgrail.gpu.kernels.sources.source_key` each was built
from, the file's SHA-256 and the mangled symbol of every template instantiation (docs/kernels.md).

:func:`build` makes them (the wheel's build hook, ``python -m distgrail.gpu.kernels --check``);
:func:`choose` says at load time whether kernel ``name`` may come from its fatbin on a device, or
why not (then NVRTC compiles it, as before). Standard library only (the build hook loads it).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ... import cores
from .sources import TEMPLATES, _mangled, compile_options, module_names, source_key, wrapper_source

__all__ = ["SASS", "PTX", "FATBIN_DIR", "MANIFEST", "PrebuiltModule", "find_nvcc", "nvcc_version", "read_manifest",
           "build", "choose", "status"]

#: machine code in every fatbin: Turing (T4; CUDA 13's nvcc has dropped Volta's sm_70), Ampere
#: (A100; sm_86/sm_89 parts such as A10, L4, L40S run sm_80 code), Hopper (H100, H200), Blackwell (B200, B300)
SASS = ("sm_75", "sm_80", "sm_90", "sm_100")
#: PTX of the newest, which the driver compiles for a newer GPU (once; its own cache keeps it)
PTX = "compute_100"
FATBIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fatbin")
MANIFEST = "manifest.json"
_FORMAT = 1


class PrebuiltModule:
    """A CuPy ``RawModule`` loaded from a fatbin, fetched by the names the NVRTC module takes:
    ``get_function("dg_sweep_iv<3>")`` looks up the instantiation's mangled symbol."""

    def __init__(self, raw, symbols: dict, path: str):
        self.raw, self.symbols, self.path = raw, dict(symbols), path

    def compile(self):
        self.raw.compile()

    def get_function(self, name: str):
        return self.raw.get_function(self.symbols.get(name, name))

    def get_global(self, name: str):
        return self.raw.get_global(name)


def find_nvcc() -> str | None:
    """nvcc on PATH, else in CUDA_HOME / CUDA_PATH / /usr/local/cuda; None if there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base and os.access(os.path.join(base, "bin", "nvcc"), os.X_OK):
            return os.path.join(base, "bin", "nvcc")
    return None


def nvcc_version(nvcc: str) -> str:
    """``13.0.88`` from ``nvcc --version`` (``release 13.0, V13.0.88``)."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise RuntimeError(f"cannot read the version of {nvcc}: {out.strip()[-200:]}")
    return m.group(1)


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_manifest(folder: str | None = None) -> dict | None:
    """The manifest of the fatbins in ``folder`` (default :data:`FATBIN_DIR`), or None."""
    path = os.path.join(folder or FATBIN_DIR, MANIFEST)
    try:
        with open(path) as f:
            man = json.load(f)
    except (OSError, ValueError):
        return None
    return man if isinstance(man, dict) and man.get("format") == _FORMAT else None


def _gencode(sass=SASS, ptx=PTX) -> list:
    out = []
    for s in sass:
        n = s[len("sm_"):]
        codes = [s] + ([ptx] if ptx == f"compute_{n}" else [])
        out.append(f"-gencode=arch=compute_{n},code=[{','.join(codes)}]")
    if ptx and not any(ptx == f"compute_{s[len('sm_'):]}" for s in sass):
        out.append(f"-gencode=arch={ptx},code={ptx}")
    return out


def _symbols(keep: str, exprs) -> tuple:
    """(every kernel's symbol, {instantiation: mangled symbol}) read from the cubins nvcc kept."""
    found = set()
    for path in glob.glob(os.path.join(keep, "*.cubin")):
        with open(path, "rb") as f:
            found |= {s.decode() for s in re.findall(rb"\.text\.([A-Za-z_][A-Za-z0-9_]*)", f.read())}
    names, missing = {}, []
    for e in exprs:
        hits = sorted(s for s in found if s.startswith("_Z" + _mangled(e)))
        if len(hits) == 1:
            names[e] = hits[0]
        else:
            missing.append(f"{e} ({len(hits)} symbols)")
    if missing:
        raise RuntimeError(f"template instantiations missing from the cubins: {', '.join(missing)}")
    return sorted(found), names


def _build_one(name: str, nvcc: str, folder: str, sass, ptx) -> dict:
    """Compile ``kernels/<name>.cu`` into ``folder/<name>.fatbin``; its manifest entry."""
    exprs = TEMPLATES.get(name, ())
    key = source_key(name)
    with tempfile.TemporaryDirectory(prefix=f"distgrail-fatbin-{name}-") as tmp:
        src, out, keep = (os.path.join(tmp, f"{name}_generated.cu"), os.path.join(tmp, f"{name}.fatbin"),
                          os.path.join(tmp, "keep"))
        os.mkdir(keep)
        with open(src, "w") as f:
            f.write(wrapper_source(name, exprs))
        cmd = [nvcc, "-fatbin", *_gencode(sass, ptx), *compile_options(), "--keep", "--keep-dir", keep, "-o", out, src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError((r.stdout + r.stderr).strip() or f"nvcc exited {r.returncode}")
        kernels, names = _symbols(keep, exprs)
        dest = os.path.join(folder, f"{name}.fatbin")
        shutil.copyfile(out, dest + ".tmp")
        os.replace(dest + ".tmp", dest)
    return {"file": f"{name}.fatbin", "source_sha256": key, "fatbin_sha256": _sha256_file(dest),
            "kernels": kernels, "names": names}


def _fresh(entry, name: str, folder: str) -> bool:
    path = os.path.join(folder, entry.get("file", ""))
    return (entry.get("source_sha256") == source_key(name) and os.path.isfile(path)
            and entry.get("fatbin_sha256") == _sha256_file(path))


def build(folder: str | None = None, force: bool = False, jobs: int | None = None, nvcc: str | None = None) -> dict:
    """Build (or keep, when up to date for this nvcc and these architectures) the fatbin of every
    kernel module into ``folder`` and write its manifest. Returns ``{"nvcc": path or None,
    "built": [...], "kept": [...], "failed": {name: nvcc's message}, "seconds": s}``; without nvcc
    nothing is touched."""
    folder = folder or FATBIN_DIR
    nvcc = nvcc or find_nvcc()
    report = {"nvcc": nvcc, "built": [], "kept": [], "failed": {}, "seconds": 0.0}
    if nvcc is None:
        return report
    t = time.perf_counter()
    version = nvcc_version(nvcc)
    os.makedirs(folder, exist_ok=True)
    old = read_manifest(folder) or {}
    same_tools = (not force and old.get("nvcc") == version and old.get("sass") == list(SASS)
                  and old.get("ptx") == PTX)
    entries, todo = {}, []
    for name in module_names():
        entry = old.get("modules", {}).get(name) if same_tools else None
        if entry and _fresh(entry, name, folder):
            entries[name] = entry
            report["kept"].append(name)
        else:
            todo.append(name)
    with ThreadPoolExecutor(max_workers=max(1, min(len(todo) or 1, jobs or cores.usable()))) as pool:
        futures = {name: pool.submit(_build_one, name, nvcc, folder, SASS, PTX) for name in todo}
        for name, fut in futures.items():
            try:
                entries[name] = fut.result()
                report["built"].append(name)
            except Exception as e:  # noqa: BLE001 - nvcc's message goes to the report
                report["failed"][name] = str(e)
    for path in glob.glob(os.path.join(folder, "*.fatbin")):  # failed, or no longer a kernel module
        if os.path.basename(path)[:-len(".fatbin")] not in entries:
            os.remove(path)
    man = {"format": _FORMAT, "nvcc": version, "sass": list(SASS), "ptx": PTX,
           "modules": {k: entries[k] for k in sorted(entries)}}
    with open(os.path.join(folder, MANIFEST + ".tmp"), "w") as f:
        json.dump(man, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(os.path.join(folder, MANIFEST + ".tmp"), os.path.join(folder, MANIFEST))
    report["seconds"] = time.perf_counter() - t
    return report


def _arch(s: str) -> int:
    return int(s.split("_", 1)[1])


def choose(name: str, names=(), cc: int | None = None, driver: int | None = None, folder: str | None = None):
    """``(path, symbols)`` of kernel ``name``'s fatbin when it may be loaded on a device of compute
    capability ``cc`` (e.g. 90) under a driver of CUDA version ``driver`` (e.g. 13000), else a
    sentence saying why not: no fatbin; built from other sources, constants or options (a test
    that compiles with ``DG_HUB = 4``); a template instantiation it lacks; no machine code for
    this GPU's architecture and no PTX it can compile; a driver older than the nvcc that built it.
    ``cc``/``driver`` None: not checked."""
    folder = folder or FATBIN_DIR
    man = read_manifest(folder)
    if man is None:
        return f"no fatbins shipped ({os.path.join(folder, MANIFEST)} missing)"
    entry = man.get("modules", {}).get(name)
    if entry is None:
        return f"no fatbin of {name}.cu in {folder}"
    if entry.get("source_sha256") != source_key(name):
        return f"{name}.fatbin was built from other sources, constants or options"
    lacking = [n for n in names if n not in entry.get("names", {})]
    if lacking:
        return f"{name}.fatbin lacks {', '.join(lacking)}"
    major, minor = (int(x) for x in man["nvcc"].split(".")[:2])
    if driver is not None and driver < major * 1000:
        return f"the driver (CUDA {driver // 1000}.{driver % 1000 // 10}) is older than nvcc {man['nvcc']}"
    if cc is not None and not any(_arch(s) // 10 == cc // 10 and _arch(s) <= cc for s in man["sass"]):
        ptx = man.get("ptx")
        if not ptx or _arch(ptx) > cc:
            return f"no machine code for sm_{cc} in {name}.fatbin ({' '.join(man['sass'])}, PTX {ptx})"
        if driver is not None and driver < major * 1000 + minor * 10:
            return f"the driver cannot compile nvcc {man['nvcc']}'s PTX for sm_{cc}"
    path = os.path.join(folder, entry["file"])
    if not os.path.isfile(path) or _sha256_file(path) != entry.get("fatbin_sha256"):
        return f"{path} is missing or is not the file its manifest lists"
    return path, dict(entry.get("names", {}))


def status(folder: str | None = None) -> list:
    """One line per kernel module: whether its fatbin is shipped and built from today's sources."""
    folder = folder or FATBIN_DIR
    man = read_manifest(folder)
    if man is None:
        return [f"no fatbins in {folder}: every kernel compiles with NVRTC on first use"]
    lines = [f"fatbins in {folder}: nvcc {man['nvcc']}, {' '.join(man['sass'])} + PTX {man['ptx']}"]
    for name in module_names():
        got = choose(name, TEMPLATES.get(name, ()), folder=folder)
        lines.append(f"  {name}: {'up to date' if isinstance(got, tuple) else got}")
    return lines
