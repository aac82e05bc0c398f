"""Build hook (hatchling): compile the CUDA kernels into fatbins when the wheel or the editable
install is built, so that a fresh machine's first run loads them instead of compiling with NVRTC.

They land in distgrail/gpu/kernels/fatbin/ (git-ignored; the wheel ships them as build artifacts,
an editable install uses them in place); only modules whose fatbin is stale are rebuilt. Without
nvcc (PATH, CUDA_HOME, /usr/local/cuda) the build still succeeds, without fatbins, and says so;
a kernel nvcc cannot compile is left out with a warning (NVRTC compiles it at run time, and
``python -m distgrail.gpu.kernels --check`` fails on it). docs/kernels.md.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FATBINS = "distgrail/gpu/kernels/fatbin"


def _fatbin_tools(root: str):
    """distgrail.gpu.kernels.fatbins, imported under a bare ``distgrail`` package (its
    ``__init__`` imports NumPy, which the isolated build environment lacks)."""
    stub = types.ModuleType("distgrail")
    stub.__path__ = [os.path.join(root, "distgrail")]
    sys.modules["distgrail"] = stub
    return importlib.import_module("distgrail.gpu.kernels.fatbins")


class KernelFatbins(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        saved = {k: v for k, v in sys.modules.items() if k == "distgrail" or k.startswith("distgrail.")}
        try:
            fb = _fatbin_tools(self.root)
            folder = os.path.join(self.root, *FATBINS.split("/"))
            rep = fb.build(folder)
        finally:
            for k in [k for k in sys.modules if k == "distgrail" or k.startswith("distgrail.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        if rep["nvcc"] is None:
            self.app.display_warning("distgrail: nvcc not found (PATH, CUDA_HOME, /usr/local/cuda): no compiled "
                                     "kernels shipped; NVRTC compiles them on first use")
            return
        for name, msg in rep["failed"].items():
            self.app.display_warning(f"distgrail: nvcc failed on kernels/{name}.cu (left to NVRTC): {msg[-2000:]}")
        self.app.display_info(f"distgrail: fatbins {len(rep['built'])} built, {len(rep['kept'])} up to date "
                              f"({rep['seconds']:.1f} s) in {FATBINS}")
        if version != "editable":
            build_data.setdefault("artifacts", []).extend([f"/{FATBINS}/*.fatbin", f"/{FATBINS}/manifest.json"])
