"""Text parsing on the GPU (kernels/parse.cu) and its NumPy twin, kernel by kernel.

:func:`read_graph_cuda` reads a ``.gra`` file, a whitespace edge list or a Matrix Market
coordinate file into device arrays (int32 src/dst, the same edges in the same order as the CPU
reader, same ``n``). The file is read in chunks that end at line ends into pinned buffers (a ring
of three; the partial last line moves to the next buffer), each chunk is uploaded on a stream and
parsed there while the host reads the next one; the file's SHA-256 is computed on a thread over the
same chunks as they are read. Per chunk: ``count`` (tokens, newlines, markers per 1024-byte tile),
a scan of the tile counts, ONE sync for the totals (taken a chunk late, after the next chunk has
been read, so it does not wait), ``write`` (token and line tables), ``lines`` (each line checked,
its id or pair converted), a scan of the edges per line, and the edge kernel writing straight into
the output arrays at a running offset that stays on the device.

Errors: the kernels only *detect* anything unusual (a bad byte, a malformed line, an id out of
range, a vertex count that does not match, a line longer than a chunk). The file is then read
again by the CPU reader, so the error message -- file, line number, offending token -- is the CPU
reader's by construction (and the rare valid file the kernels refuse still reads correctly).

The twin: every kernel ``dg_parse_<x>`` has ``<x>_numpy`` with the same arguments in
:mod:`distgrail.io.parse_twin` (kept apart for size), run by its :class:`NumpyDevice` through the
same host code as the kernels (:class:`Stages`, :func:`read_text_graph`), so the end-to-end twin
(:func:`read_graph_numpy`) and the GPU path share everything but the kernels.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from ..dtypes import size_problem
from ..errors import BackendError

from .chunks import FMT_CODES, ChunkReader, Hasher, LineTooLong, memory_estimate, plan_read
from .graph import EdgeGraph
from .parse_twin import TILE, NumpyDevice, check_args

__all__ = ["read_graph_cuda", "read_graph_numpy", "read_text_graph", "tokenize_numpy", "parse_chunk_numpy",
           "parse_chunk_cuda", "NumpyDevice", "CudaDevice", "Stages", "CHUNK_BYTES", "THREADS"]

#: bytes per chunk (rounded up to whole tiles); three pinned buffers of this size are used
CHUNK_BYTES = 32 << 20
NBUF = 3
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


class _Edges:
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

    def rest(self, d, L: int, ntiles: int, counts, incl, totals, out: _Edges, bytes_done: int, bytes_total: int,
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


def _parse_chunk(dev, chunk: bytes, fmt: str, lo: int, hi: int, n_seen: int, tables_only: bool = False) -> dict:
    """Every stage of one chunk on ``dev`` (only count and write if ``tables_only``); every
    intermediate array, on the host."""
    xp = dev.xp
    L = len(chunk)
    host = np.zeros(-(-max(L, 1) // TILE) * TILE, np.uint8)
    host[:L] = np.frombuffer(chunk, np.uint8)
    status = np.zeros(5, np.int32)
    with dev.activate():
        d = xp.zeros(host.size, xp.uint8)
        dev.h2d(d, host, L)
        st = Stages(dev, FMT_CODES[fmt], lo, hi, n_seen)
        out = _Edges(xp)
        ntiles, counts, incl = st.count(d, L)
        dev.d2h(status[:4], incl[ntiles - 1])
        dev.wait(dev.record())
        tables = st.write(d, L, ntiles, counts, incl, status)
        tok, lines, am, bm = tables
        T, _, A, B = (int(x) for x in status[:4])
        got = {"counts": counts, "incl": incl, "tok_pos": tok[0, :T], "tok_line": tok[1, :T], "line_tok": lines[0],
               "line_a": lines[1], "line_b": lines[2], "a_pos": am[0, :A], "a_tok": am[1, :A], "b_pos": bm[0, :B],
               "b_tok": bm[1, :B], "flags": st.flags}
        if not tables_only:
            got.update(st.rest(d, L, ntiles, counts, incl, status, out, max(L, 1), max(L, 1), tables))
            m = dev.scalar(st.ebase[0])
            got.update(src=out.src[:m], dst=out.dst[:m], seen=st.seen)
        if xp is np:
            return {k: np.array(v) for k, v in got.items()}
        return {k: xp.asnumpy(v) for k, v in got.items()}


def tokenize_numpy(chunk: bytes, fmt: str = "gra") -> dict:
    """Token and line tables of one chunk as the ``count`` and ``write`` kernels make them."""
    return _parse_chunk(NumpyDevice(), chunk, fmt, 0, -1, 0, tables_only=True)


def _hi(fmt: str, hi):
    if hi is None:
        if fmt == "gra":
            raise ValueError("a .gra chunk needs hi = n - 1 (ids are counted in an array of n)")
        return 2**31 - 3
    return int(hi)


def parse_chunk_numpy(chunk: bytes, fmt: str = "gra", lo: int = 0, hi: int | None = None) -> dict:
    """Every intermediate array of one chunk (token and line tables, per-line results, edges);
    ids must lie in lo..hi (.gra: 0..n-1)."""
    hi = _hi(fmt, hi)
    return _parse_chunk(NumpyDevice(), chunk, fmt, lo, hi, hi + 1 if fmt == "gra" else 0)


def parse_chunk_cuda(chunk: bytes, fmt: str = "gra", lo: int = 0, hi: int | None = None) -> dict:
    """The same arrays as :func:`parse_chunk_numpy`, computed by the kernels (for parity tests)."""
    hi = _hi(fmt, hi)
    return _parse_chunk(CudaDevice(), chunk, fmt, lo, hi, hi + 1 if fmt == "gra" else 0)


class _Anomaly(Exception):
    pass


def _parse_file(plan, dev, chunk_bytes: int, sha256: bool = True):
    """The pipeline; returns (n, src, dst, sha256) or raises _Anomaly / LineTooLong."""
    xp, fmt = dev.xp, FMT_CODES[plan.fmt]
    cap = -(-chunk_bytes // TILE) * TILE
    hosts = [dev.pinned(cap) for _ in range(NBUF)]
    status = dev.pinned(NBUF * 8 * 4).view(np.int32).reshape(NBUF, 8)
    dbufs = [xp.empty(cap, xp.uint8) for _ in range(2)]
    st = Stages(dev, fmt, plan.lo, plan.hi, plan.n if plan.fmt == "gra" else 0)
    out = _Edges(xp)
    body = max(plan.size - plan.body, 1)
    vertex_lines = 0
    hasher = Hasher(NBUF) if sha256 else None
    fd = os.open(plan.path, os.O_RDONLY)
    try:
        def finish(c):
            nonlocal vertex_lines
            dev.wait(c["event"])
            totals = status[c["slot"]].copy()
            if totals[4]:
                raise _Anomaly(f"flags {int(totals[4])}")
            vertex_lines += int(totals[2])
            st.rest(c["d"], c["L"], c["ntiles"], c["counts"], c["incl"], totals, out, c["done"], body)

        pending = None
        reader = ChunkReader(fd, plan.body, plan.size, hosts, hasher)
        for k, slot, L in reader:
            d = dbufs[k % 2]
            dev.h2d(d, hosts[slot], L)
            ntiles, counts, incl = st.count(d, L)
            dev.d2h(status[slot, :4], incl[ntiles - 1])
            dev.d2h(status[slot, 4:5], st.flags)
            cur = dict(d=d, L=L, ntiles=ntiles, counts=counts, incl=incl, slot=slot, event=dev.record(),
                       done=reader.bytes_done)
            if pending is not None:
                finish(pending)  # the GPU finished counting it while this chunk was read
            pending = cur
        if pending is not None:
            finish(pending)
        flags = dev.scalar(st.flags[0])
        if flags:
            raise _Anomaly(f"flags {flags}")
        m = dev.scalar(st.ebase[0])
        src, dst = out.src[:m], out.dst[:m]
        n = plan.n
        if plan.fmt == "gra":
            if vertex_lines != n or (n and dev.scalar(xp.count_nonzero(st.seen[:n] != 1))):
                raise _Anomaly("vertex lines")
        elif plan.fmt == "mtx":
            if m != plan.nnz:
                raise _Anomaly("entries")
            if plan.symmetric:
                off = src != dst
                src, dst = xp.concatenate((src, dst[off])), xp.concatenate((dst, src[off]))
        elif n is None:
            n = dev.scalar(xp.maximum(src.max(), dst.max())) + 1 if m else 0
    finally:
        os.close(fd)
        dev.wait(dev.record())  # nothing in flight reads the buffers once they are freed
        sha = hasher.hexdigest() if hasher else ""  # joins the hashing thread before the buffers go away
    return n, src, dst, sha


def _cpu_read(path, fmt, num_vertices):
    from .read import read_graph

    return read_graph(path, fmt=fmt, num_vertices=num_vertices)


def _say(notify, message: str):
    (notify or (lambda s: print(s, file=sys.stderr)))(message)


def read_text_graph(path, fmt: str = "auto", num_vertices: int | None = None, dev=None, *,
                    chunk_bytes: int | None = None, notify=None, sha256: bool = True):
    """Read a text graph file with the parse kernels on ``dev`` (a :class:`CudaDevice` or the
    twin's :class:`NumpyDevice`). Returns an :class:`EdgeGraph` whose ``src``/``dst`` are int32
    arrays of ``dev`` (``meta["parser"]`` says which path made them), or None when the file
    should be read by the CPU reader instead: a binary ``.h5`` file (silently), or a file whose
    parse does not fit the device, or ids beyond int32 (``notify`` gets a one-line reason).
    Bad input raises the CPU reader's :class:`~distgrail.errors.GraphFormatError`.
    ``sha256=False`` skips the file's hash (benchmarks: the parse alone)."""
    dev = NumpyDevice() if dev is None else dev
    chunk_bytes = int(chunk_bytes or CHUNK_BYTES)
    plan = plan_read(path, fmt, num_vertices)
    if plan.kind == "h5":
        return None
    name = os.path.basename(plan.path)
    why = None
    attempts = 3  # a line longer than a chunk: again with chunks that hold it
    while plan.kind == "text" and attempts:
        attempts -= 1
        try:
            dev.fits(memory_estimate(plan, chunk_bytes), f"parsing {name} on the GPU")
            with dev.activate():
                n, src, dst, sha = _parse_file(plan, dev, chunk_bytes, sha256)
            if plan.fmt == "edgelist" and num_vertices is None and int(src.shape[0]) == 0:
                raise _Anomaly("no edge: the CPU reader says what an empty edge list needs")
            if size_problem(int(n)):
                raise _Anomaly(f"{int(n):,} vertices: {size_problem(int(n))}")
            g = EdgeGraph(n=n, src=src, dst=dst, name=name, sha256=sha)
            g.meta.update(path=os.path.abspath(plan.path), format=plan.fmt, parser=dev.name)
            return g
        except _Anomaly as e:  # the CPU reader reports the error (or reads what the kernels refused)
            why = f"the GPU parser did not accept it ({e})"
            break
        except LineTooLong as e:
            why = str(e)
            chunk_bytes = max(2 * e.need, 2 * chunk_bytes)
        except dev.oom_errors as e:
            _say(notify, f"distgrail: {name}: the GPU ran out of memory while parsing ({e}); reading on the CPU")
            return None
        except Exception as e:
            if not isinstance(e, BackendError):
                raise
            _say(notify, f"distgrail: {name}: {e}; reading on the CPU")
            return None
    if plan.kind != "text":
        why = plan.reason
    g = _cpu_read(plan.path, fmt, num_vertices)  # raises the CPU reader's error on bad input
    if g.src.dtype != np.int32 or g.dst.dtype != np.int32:
        _say(notify, f"distgrail: {name}: vertex ids beyond int32; the graph stays on the CPU")
        return None
    if why:  # a valid file the GPU path could not take
        _say(notify, f"distgrail: {name}: {why}; read on the CPU")
    g.src, g.dst = dev.xp.asarray(g.src), dev.xp.asarray(g.dst)
    g.meta["parser"] = "cpu"
    return g


def read_graph_cuda(path, fmt: str = "auto", num_vertices: int | None = None, be=None, *,
                    chunk_bytes: int | None = None, notify=None):
    """Read a ``.gra`` file, an edge list or a Matrix Market file on the GPU; see
    :func:`read_text_graph`. ``be`` (a GPU :class:`~distgrail.gpu.backend.Backend`) picks the
    device; the current one otherwise."""
    import contextlib

    cp = be.xp if be is not None else None
    on = cp.cuda.Device(be.device) if be is not None and be.device is not None else contextlib.nullcontext()
    with on:
        return read_text_graph(path, fmt, num_vertices, CudaDevice(cp), chunk_bytes=chunk_bytes, notify=notify)


def read_graph_numpy(path, fmt: str = "auto", num_vertices: int | None = None, *, chunk_bytes: int | None = None,
                     notify=None):
    """The NumPy twin of :func:`read_graph_cuda`, end to end (same chunks, same arrays)."""
    return read_text_graph(path, fmt, num_vertices, NumpyDevice(), chunk_bytes=chunk_bytes, notify=notify)
