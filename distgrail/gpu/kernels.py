"""CUDA sources in ``kernels/`` (shipped in the wheel as ``distgrail/_kernels``), compiled
by CuPy ``RawModule`` once per device and cached (CuPy also caches binaries in CUPY_CACHE_DIR).

``python -m distgrail.gpu.kernels --check`` compiles every ``kernels/*.cu`` with ``nvcc -cubin``
and the same options CuPy gets, so a kernel that does not compile fails CI on a CPU machine.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

__all__ = ["kernel_dir", "kernel_source", "load_module", "NVRTC_OPTIONS", "compile_times"]

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the distgrail package
from ..query.stats import STEP_DEFINES

#: options shared by NVRTC (CuPy) and nvcc (CI check); -I<kernel dir> is added at use. The query
#: step codes travel as -D options (single source: distgrail.query.stats)
NVRTC_OPTIONS = ("-std=c++17", "-DDG_KERNELS=1", *STEP_DEFINES)
_CACHE: dict = {}
#: first-call compile time of each module, seconds (reported by benchmarks)
compile_times: dict = {}


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


def load_module(name: str, device: int | None = None):
    """Compile (once per device) and return the CuPy RawModule of ``kernels/<name>.cu``."""
    import cupy

    dev = cupy.cuda.Device().id if device is None else device
    key = (name, dev)
    if key not in _CACHE:
        t = time.perf_counter()
        with cupy.cuda.Device(dev):
            mod = cupy.RawModule(code=kernel_source(name), options=NVRTC_OPTIONS + (f"-I{kernel_dir()}",))
            mod.compile()
        compile_times[name] = time.perf_counter() - t
        _CACHE[key] = mod
    return _CACHE[key]


def check(arch: str = "sm_90") -> int:
    """Compile every kernel with nvcc; return the number that failed."""
    d = kernel_dir()
    failed = 0
    out_dir = os.environ.get("TMPDIR", "/tmp")
    for src in sorted(glob.glob(os.path.join(d, "*.cu"))):
        out = os.path.join(out_dir, os.path.basename(src) + ".cubin")
        cmd = ["nvcc", f"-arch={arch}", "-cubin", *NVRTC_OPTIONS, f"-I{d}", "-o", out, src]
        r = subprocess.run(cmd, capture_output=True, text=True)
        status = "ok" if r.returncode == 0 else "FAILED"
        print(f"nvcc {os.path.basename(src)}: {status}")
        if r.returncode != 0:
            failed += 1
            print(r.stdout + r.stderr, file=sys.stderr)
    return failed


if __name__ == "__main__":  # pragma: no cover
    if "--check" in sys.argv:
        sys.exit(1 if check() else 0)
    print(" ".join(NVRTC_OPTIONS))
