"""CUDA sources in ``kernels/`` (shipped in the wheel as ``distgrail/_kernels``), compiled
by CuPy ``RawModule`` once per device and cached (CuPy also caches binaries in CUPY_CACHE_DIR).

Every compile gets :func:`compile_options`: the ``-D`` options generated from
:mod:`distgrail.constants` (the kernels spell no shared constant themselves) and the kernel
folder. Template kernels are instantiated by name (:data:`TEMPLATES`, CuPy ``name_expressions``)
and fetched as ``get_function("dg_sweep_iv<3>")``.

``python -m distgrail.gpu.kernels --check`` compiles every ``kernels/*.cu`` with ``nvcc -cubin``
and the same options CuPy gets, instantiating every template of :data:`TEMPLATES` (through a
small generated wrapper that takes each instantiation's address), so a kernel that does not
compile fails CI on a CPU machine.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile
import time

from .. import constants

__all__ = ["kernel_dir", "kernel_source", "load_module", "define_options", "compile_options", "NVRTC_OPTIONS",
           "TEMPLATES", "compile_times", "check"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the distgrail package
#: options shared by NVRTC (CuPy) and nvcc (CI check) besides the constants; -I<kernel dir> is added at use
NVRTC_OPTIONS = ("-std=c++17", "-DDG_KERNELS=1")
#: template kernels of each module, instantiated by name
TEMPLATES = {
    "intervals": tuple(f"{name}<{k}>" for name in ("dg_sweep_iv", "dg_small_iv")
                       for k in range(1, constants.MAX_DIMS_PER_SWEEP + 1)),
}
_CACHE: dict = {}
#: first-call compile time of each module, seconds (reported by benchmarks)
compile_times: dict = {}


def define_options() -> tuple:
    """``-DNAME=value`` for every constant of :data:`distgrail.constants.CUDA_MACROS`."""
    out = []
    for name, (value, u64) in constants.CUDA_MACROS.items():
        out.append(f"-D{name}=0x{value:X}ULL" if u64 else f"-D{name}={int(value)}")
    return tuple(out)


def compile_options() -> tuple:
    """Everything a kernel compile gets, NVRTC and nvcc alike."""
    return NVRTC_OPTIONS + define_options() + (f"-I{kernel_dir()}",)


def kernel_dir() -> str:
    """Folder of the ``.cu`` sources: the installed copy, else the repository's ``kernels/``."""
    for d in (os.path.join(_HERE, "_kernels"), os.path.join(os.path.dirname(_HERE), "kernels")):
        if os.path.isdir(d) and glob.glob(os.path.join(d, "*.cu")):
            return d
    from ..errors import BackendError

    raise BackendError(f"CUDA kernel sources not found next to {_HERE} (expected _kernels/ or ../kernels/)")


def kernel_source(name: str) -> str:
    with open(os.path.join(kernel_dir(), f"{name}.cu")) as f:
        return f.read()


def load_module(name: str, device: int | None = None, name_expressions=None):
    """Compile (once per device) and return the CuPy RawModule of ``kernels/<name>.cu``.

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
            kw = {"name_expressions": names} if names else {}
            mod = cupy.RawModule(code=kernel_source(name), options=compile_options(), **kw)
            mod.compile()
        compile_times[name] = time.perf_counter() - t
        _CACHE[key] = mod
    return _CACHE[key]


def _mangled(expr: str) -> str:
    """The part of the Itanium-mangled symbol that names ``f<int>`` (e.g. ``11dg_sweep_ivILi3EE``)."""
    m = re.fullmatch(r"(\w+)<(-?\d+)>", expr)
    if not m:
        raise ValueError(f"only templates over one int are checked, got {expr!r}")
    base, k = m.group(1), int(m.group(2))
    return f"{len(base)}{base}ILi{'n' if k < 0 else ''}{abs(k)}EE"


def wrapper_source(name: str, exprs) -> str:
    """A .cu that includes ``<name>.cu`` and takes the address of each instantiation (so that
    nvcc compiles them, as NVRTC does for ``name_expressions``)."""
    lines = [f'#include "{name}.cu"', "static const void* dg_instantiated[] = {"]
    lines += [f"    (const void*)&{e}," for e in exprs]
    lines += ["};", "const void* const* dg_instantiated_ptr = dg_instantiated;", ""]
    return "\n".join(lines)


def check(arch: str = "sm_90") -> int:
    """Compile every kernel with nvcc (templates instantiated); return the number that failed."""
    d = kernel_dir()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="distgrail-nvcc-") as tmp:
        for src in sorted(glob.glob(os.path.join(d, "*.cu"))):
            name = os.path.basename(src)[:-3]
            exprs = TEMPLATES.get(name, ())
            if exprs:
                src = os.path.join(tmp, f"{name}_instances.cu")
                with open(src, "w") as f:
                    f.write(wrapper_source(name, exprs))
            out = os.path.join(tmp, name + ".cubin")
            cmd = ["nvcc", f"-arch={arch}", "-cubin", *compile_options(), "-o", out, src]
            r = subprocess.run(cmd, capture_output=True, text=True)
            problem = r.stdout + r.stderr if r.returncode != 0 else ""
            if not problem and exprs:
                with open(out, "rb") as f:
                    blob = f.read()
                missing = [e for e in exprs if _mangled(e).encode() not in blob]
                if missing:
                    problem = f"template instantiations missing from the cubin: {', '.join(missing)}"
            print(f"nvcc {name}.cu{f' ({len(exprs)} instantiations)' if exprs else ''}: "
                  f"{'FAILED' if problem else 'ok'}")
            if problem:
                failed += 1
                print(problem, file=sys.stderr)
    return failed


if __name__ == "__main__":  # pragma: no cover
    if "--check" in sys.argv:
        sys.exit(1 if check() else 0)
    print(" ".join(compile_options()))
