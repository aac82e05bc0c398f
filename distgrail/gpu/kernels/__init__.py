"""CUDA sources in ``kernels/`` (shipped in the wheel as ``distgrail/_kernels``), loaded as CuPy
``RawModule`` once per device: from the fatbin shipped beside this file when it was built from the
very text NVRTC would get (:mod:`.fatbins`), else compiled by NVRTC (CuPy caches those binaries in
CUPY_CACHE_DIR). docs/kernels.md tells the whole story.

Every compile gets :func:`module_source`: the ``#define`` block :func:`defines_header` generates
from :mod:`distgrail.constants` (the kernels spell no shared constant themselves), then the
``.cu`` file; and :func:`compile_options` (the C++ standard, the kernel folder). Template kernels are
instantiated by name (:data:`TEMPLATES`, CuPy ``name_expressions``) and fetched as
``get_function("dg_sweep_iv<3>")``, whichever way the module was loaded.

``python -m distgrail.gpu.kernels --check`` builds the fatbins with nvcc (those not up to date:
every kernel for every architecture of :data:`.fatbins.SASS`, templates instantiated), so a kernel
that does not compile fails CI on a CPU machine; ``--status`` says which fatbins match today's
sources. (This is a package with a ``__main__`` module so that ``-m`` runs it without runpy's
warning about a module the package import already loaded.)

>>> compile_options()[:2]
('-std=c++17', '-DDG_KERNELS=1')
"""

from __future__ import annotations

import sys
import time

from . import fatbins
from .sources import (HEADER_MARK, NVRTC_OPTIONS, TEMPLATES, _mangled, compile_options, defines_header, kernel_dir,
                      kernel_source, module_names, module_source, source_key, wrapper_source)

__all__ = ["kernel_dir", "kernel_source", "module_source", "module_names", "load_module", "defines_header",
           "compile_options", "source_key", "wrapper_source", "origin", "NVRTC_OPTIONS", "TEMPLATES", "HEADER_MARK",
           "compile_times", "check", "main"]

_CACHE: dict = {}
#: first-call load time of each module, seconds: a fatbin's load, or NVRTC's compile (reported by benchmarks)
compile_times: dict = {}


def _fatbins_allowed() -> bool:
    """False when DISTGRAIL_FATBINS is 0 (no, off, false): every module compiles with NVRTC (timings,
    a suspected fatbin)."""
    from ... import settings  # (here, not at the top: the build hook imports this module bare)

    return bool(settings.get("DISTGRAIL_FATBINS"))


def _prebuilt(cupy, name: str, dev: int, names: tuple):
    """Module ``name`` loaded from its shipped fatbin, or None when :func:`.fatbins.choose` refuses
    it or the driver cannot load it (then NVRTC compiles the source)."""
    if not _fatbins_allowed():
        return None
    cc = int(cupy.cuda.Device(dev).compute_capability)
    got = fatbins.choose(name, names, cc, cupy.cuda.runtime.driverGetVersion())
    if isinstance(got, str):
        return None
    path, symbols = got
    mod = fatbins.PrebuiltModule(cupy.RawModule(path=path), symbols, path)
    try:
        mod.compile()  # cuModuleLoad: picks this GPU's machine code, or JIT-compiles the PTX
    except cupy.cuda.driver.CUDADriverError:
        return None
    return mod


def load_module(name: str, device: int | None = None, name_expressions=None):
    """Load (once per device) and return the module of ``kernels/<name>.cu``: its shipped fatbin
    when that was built from today's source text and this GPU can run it, else CuPy's NVRTC build.

    ``name_expressions`` are the template instantiations to compile (default: the module's
    :data:`TEMPLATES`); fetch them with ``get_function`` by the same string.
    """
    import cupy

    dev = cupy.cuda.Device().id if device is None else device
    names = tuple(TEMPLATES.get(name, ()) if name_expressions is None else name_expressions)
    key = (name, dev, names)
    if key not in _CACHE:
        t = time.perf_counter()
        with cupy.cuda.Device(dev):
            mod = _prebuilt(cupy, name, dev, names)
            if mod is None:
                kw = {"name_expressions": names} if names else {}
                mod = cupy.RawModule(code=module_source(name), options=compile_options(), **kw)
                mod.compile()
        compile_times[name] = time.perf_counter() - t
        _CACHE[key] = mod
    return _CACHE[key]


def origin(module) -> str:
    """``"fatbin"`` for a module :func:`load_module` took from a shipped fatbin, else ``"nvrtc"``."""
    return "fatbin" if isinstance(module, fatbins.PrebuiltModule) else "nvrtc"


def check(force: bool = False) -> int:
    """Build the fatbins with nvcc (those not up to date, or all with ``force``), printing one line
    per kernel module; return the number that failed to compile."""
    rep = fatbins.build(force=force)
    if rep["nvcc"] is None:
        print("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda): no fatbins built", file=sys.stderr)
        return 1
    for name in module_names():
        exprs = TEMPLATES.get(name, ())
        state = ("FAILED" if name in rep["failed"] else "ok (built)" if name in rep["built"]
                 else "ok (up to date)")
        print(f"nvcc {name}.cu{f' ({len(exprs)} instantiations)' if exprs else ''}: {state}")
        if name in rep["failed"]:
            print(rep["failed"][name], file=sys.stderr)
    print(f"fatbins ({' '.join(fatbins.SASS)} + PTX {fatbins.PTX}) in {fatbins.FATBIN_DIR}: "
          f"{len(rep['built'])} built, {len(rep['kept'])} up to date, {len(rep['failed'])} failed, "
          f"{rep['seconds']:.1f} s")
    return len(rep["failed"])


def main(argv=None) -> int:
    """``python -m distgrail.gpu.kernels [--check [--force] | --status]``: build the fatbins (exit
    1 if a kernel fails to compile), say which are up to date (exit 1 if one is not), or print the
    options a kernel compile gets."""
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        return 1 if check(force="--force" in argv) else 0
    if "--status" in argv:
        lines = fatbins.status()
        print("\n".join(lines))
        return 0 if all(ln.endswith("up to date") for ln in lines[1:]) and len(lines) > 1 else 1
    print(" ".join(compile_options()))
    return 0
