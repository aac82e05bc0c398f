"""The parse kernels of one chunk, host side (split from :mod:`distgrail.io.parse` for size):
:class:`CudaDevice` (CuPy stream, pinned buffers, raw copies, kernel launches), the growing output
edge arrays and :class:`Stages`, the kernels of one chunk in order. The NumPy twin's device is
:class:`distgrail.io.parse_twin.NumpyDevice`; both run through the same :class:`Stages`.
"""

from __future__ import annotations

import numpy as np

from ..errors import BackendError
from .chunks import FMT_CODES
from .parse_twin import TILE, check_args

__all__ = ["CudaDevice", "Stages", "Edges", "THREADS"]

THREADS = 256


class CudaDevice:
    """CuPy: one non-blocking stream, pinned host buffers, raw async copies, the parse kernels."""

    name = "gpu"

    def __init__(self, cp=None):
        if cp is None:
            import cupy as cp
        from ..gpu.sweep import sm_count

        self.xp = cp
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.max_blocks = sm_count() * 32
        self.oom_errors = (cp.cuda.memory.OutOfMemoryError,)
        self._pinned = []

    def activate(self):
        return self.stream

    def pinned(self, nbytes: int) -> np.ndarray:
        mem = self.xp.cuda.alloc_pinned_memory(nbytes)
        self._pinned.append(mem)
        return np.frombuffer(mem, dtype=np.uint8, count=nbytes)

    def h2d(self, dst, host: np.ndarray, n: int):
        rt = self.xp.cuda.runtime
        rt.memcpyAsync(dst.data.ptr, host.ctypes.data, n, rt.memcpyHostToDevice, self.stream.ptr)

    def d2h(self, host: np.ndarray, src):
        rt = self.xp.cuda.runtime
        if not (src.flags.c_contiguous and src.nbytes == host.nbytes):
            raise BackendError(f"device-to-host copy needs a C-contiguous source of {host.nbytes} bytes, "
                               f"got {src.nbytes} bytes (contiguous: {src.flags.c_contiguous})")
        rt.memcpyAsync(host.ctypes.data, src.data.ptr, host.nbytes, rt.memcpyDeviceToHost, self.stream.ptr)

    def launch(self, name: str, blocks: int, threads: int, args: tuple):
        from ..gpu.sweep import kernel

        check_args(name, args)
        kernel("parse", name)((blocks,), (threads,), args)

    def record(self):
        return self.stream.record()

    def wait(self, event):
        event.synchronize()

    def fits(self, nbytes: int, what: str):
        from ..gpu.memory import ensure_fits

        ensure_fits(nbytes, what)

    def scalar(self, a) -> int:
        return int(a.get()) if hasattr(a, "get") else int(a)


def _blocks(dev, threads_needed: int) -> int:
    return int(max(1, min(dev.max_blocks, -(-threads_needed // THREADS))))


class Edges:
    """Output src/dst on the device, grown by copying when a chunk's upper bound does not fit;
    the capacity follows the density seen so far (so a uniform file is allocated about once)."""

    def __init__(self, xp):
        self.xp, self.cap, self.bound = xp, 0, 0
        self.src = self.dst = xp.empty(0, xp.int32)

    def reserve(self, bound: int, bytes_done: int, bytes_total: int):
        self.bound += bound
        if self.bound > self.cap:
            est = self.bound * bytes_total // max(bytes_done, 1)
            cap = max(self.bound, est + est // 50 + 1024)
            for name in ("src", "dst"):
                new = self.xp.empty(cap, self.xp.int32)
                new[: self.cap] = getattr(self, name)[: self.cap]
                setattr(self, name, new)
            self.cap = cap


class Stages:
    """The kernels of one chunk, in order, on ``dev`` (shared by the pipeline and the stage-by-stage
    helpers): ``count`` then, once the totals are on the host, ``rest``."""

    def __init__(self, dev, fmt: int, lo: int, hi: int, n_seen: int):
        xp = dev.xp
        self.dev, self.fmt, self.lo, self.hi = dev, fmt, lo, hi
        self.flags = xp.zeros(1, xp.int32)
        self.ebase = xp.zeros(1, xp.int64)
        self.seen = xp.zeros(max(n_seen, 1), xp.int32)

    def count(self, d, L: int):
        xp, i64 = self.dev.xp, np.int64
        ntiles = max(1, -(-L // TILE))
        counts = xp.empty((ntiles, 4), xp.int32)
        self.dev.launch("dg_parse_count", _blocks(self.dev, 32 * ntiles), THREADS,
                        (d, i64(L), np.int32(self.fmt), i64(ntiles), counts, self.flags))
        incl = xp.ascontiguousarray(xp.cumsum(counts, axis=0, dtype=xp.int32))
        return ntiles, counts, incl

    def write(self, d, L: int, ntiles: int, counts, incl, totals):
        dev, xp, i32, i64 = self.dev, self.dev.xp, np.int32, np.int64
        T, NL, A, B = (int(x) for x in totals[:4])
        tok = xp.empty((2, max(T, 1)), xp.int32)
        lines = xp.empty((3, NL + 2), xp.int32)
        am = xp.empty((2, max(A, 1)), xp.int32)
        bm = xp.empty((2, max(B, 1)), xp.int32)
        dev.launch("dg_parse_write", _blocks(dev, 32 * ntiles), THREADS,
                   (d, i64(L), i32(self.fmt), i64(ntiles), counts, incl, i32(NL), i32(T), i32(A), i32(B),
                    tok[0], tok[1], lines[0], lines[1], lines[2], am[0], am[1], bm[0], bm[1]))
        return tok, lines, am, bm

    def rest(self, d, L: int, ntiles: int, counts, incl, totals, out: Edges, bytes_done: int, bytes_total: int,
             tables=None):
        dev, xp, i32, i64 = self.dev, self.dev.xp, np.int32, np.int64
        T, NL, A, B = (int(x) for x in totals[:4])
        nlines = NL + 1
        tok, lines, am, bm = tables or self.write(d, L, ntiles, counts, incl, totals)
        per_line = xp.empty((3, nlines), xp.int32)
        dev.launch("dg_parse_lines", _blocks(dev, nlines), THREADS,
                   (d, i64(L), i32(self.fmt), i32(nlines), tok[0], lines[0], lines[1], lines[2], am[0], am[1],
                    bm[0], bm[1], i64(self.lo), i64(self.hi), per_line[0], per_line[1], per_line[2], self.seen,
                    self.flags))
        eincl = xp.cumsum(per_line[0], dtype=xp.int32)
        bound = max(T - A, 0) if self.fmt == FMT_CODES["gra"] else min(nlines, T // 2)
        out.reserve(bound, bytes_done, bytes_total)
        if self.fmt == FMT_CODES["gra"]:
            dev.launch("dg_parse_gra_edges", _blocks(dev, T), THREADS,
                       (d, i64(L), i32(T), tok[0], tok[1], lines[0], per_line[1], per_line[0], eincl,
                        i64(self.hi), self.ebase, i64(out.cap), out.src, out.dst, self.flags))
        else:
            dev.launch("dg_parse_pair_edges", _blocks(dev, nlines), THREADS,
                       (i32(nlines), per_line[0], per_line[1], per_line[2], eincl, self.ebase, i64(out.cap),
                        out.src, out.dst, self.flags))
        dev.launch("dg_parse_advance", 1, 32, (self.ebase, eincl, i32(nlines)))
        return {"line_edges": per_line[0], "line_u": per_line[1], "line_v": per_line[2], "eincl": eincl}
