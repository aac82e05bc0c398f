"""The parse kernels of kernels/parse.cu, host side: their signatures, which every launch is
checked against (CuPy passes a Python int or a wrong-width scalar without complaint, and the
kernel then reads garbage); their NumPy twins, one function per kernel with the kernel's own
arguments (``dg_parse_count`` -> :func:`count_numpy`, ...), filling the same output arrays with
the same numbers; the two devices that run them, :class:`NumpyDevice` (host arrays, the twins)
and :class:`CudaDevice` (a CuPy stream, pinned buffers, raw copies, the kernels); and, on either
device, :class:`Stages`, the kernels of one chunk in order, writing into the growing output edge
arrays (:class:`Edges`). :mod:`distgrail.io.parse` reads the file and runs these chunk by chunk.
"""

from __future__ import annotations

import numpy as np

from ..constants import (C_A, C_B, C_BAD, C_NL, C_TOK, F_BAD_BYTE, F_CAPACITY, F_LINE, F_VALUE,  # noqa: F401
                         F_WIDTH, FMT_CSV, FMT_EDGELIST, FMT_GRA, FMT_MTX, NO_COMMENT, TILE)
from ..errors import BackendError
from .chunks import FMT_CODES
from .edgelist import bad_values

__all__ = ["SIGNATURES", "KERNELS_NUMPY", "NumpyDevice", "CudaDevice", "Stages", "Edges", "THREADS", "check_args",
           "classes", "values_numpy", "digit_runs_numpy", "TILE"]

#: threads per block of the parse kernels' launches
THREADS = 256

_P, _I, _L, _PL, _B = "int*", "int", "i64", "i64*", "u8*"
#: argument types of every kernel, in order (tests/test_parse.py checks them against the .cu source)
SIGNATURES = {
    "dg_parse_count": (_B, _L, _I, _L, _P, _P),
    "dg_parse_write": (_B, _L, _I, _L, _P, _P, _I, _I, _I, _I) + (_P,) * 9,
    "dg_parse_lines": (_B, _L, _I, _I) + (_P,) * 8 + (_L, _L, _I, _I, _I) + (_P,) * 5,
    "dg_parse_gra_edges": (_B, _L, _I) + (_P,) * 6 + (_L, _PL, _L, _P, _P, _P),
    "dg_parse_pair_edges": (_I, _P, _P, _P, _P, _PL, _L, _P, _P, _P),
    "dg_parse_advance": (_PL, _P, _I),
}
_SCALARS = {_I: np.int32, _L: np.int64}
_POINTERS = {_P: np.int32, _PL: np.int64, _B: np.uint8}


def check_args(name: str, args: tuple) -> None:
    """Raise TypeError unless ``args`` match the kernel's signature exactly: NumPy scalars of the
    right width for values, C-contiguous arrays of the right dtype for pointers."""
    sig = SIGNATURES[name]
    if len(args) != len(sig):
        raise TypeError(f"{name}: {len(args)} arguments, the kernel takes {len(sig)}")
    for k, (a, t) in enumerate(zip(args, sig)):
        if t in _SCALARS:
            if type(a) is not _SCALARS[t]:
                raise TypeError(f"{name} argument {k}: {t} needs {_SCALARS[t].__name__}, got {type(a).__name__}")
        elif not (hasattr(a, "dtype") and a.dtype == _POINTERS[t] and a.flags.c_contiguous):
            raise TypeError(f"{name} argument {k}: {t} needs a C-contiguous {np.dtype(_POINTERS[t])} array, "
                            f"got {getattr(a, 'dtype', type(a).__name__)}")


def _table(fmt: int) -> np.ndarray:
    t = np.full(256, C_BAD if fmt == FMT_GRA else C_TOK, np.uint8)
    if fmt == FMT_GRA:
        t[48:58] = C_TOK
        t[ord(":")] = C_A
        t[ord("#")] = C_B
    else:
        t[ord("%")] = C_TOK | C_A
        if fmt in (FMT_EDGELIST, FMT_CSV):
            t[ord("#")] = C_TOK | C_A
    t[[9, 13, 32]] = 0
    if fmt == FMT_CSV:  # commas separate fields: blanks, as the CPU reader's translation makes them
        t[ord(",")] = 0
    t[10] = C_NL
    return t


_TABLES = [_table(f) for f in range(max(FMT_GRA, FMT_EDGELIST, FMT_MTX, FMT_CSV) + 1)]


def classes(data: np.ndarray, fmt: int) -> np.ndarray:
    """Class bits of every byte (dg_class)."""
    return _TABLES[fmt][data]


def _scan(data, L, fmt):
    a = np.asarray(data[:L])
    cls = classes(a, fmt)
    tok = (cls & C_TOK) != 0
    start = tok.copy()
    start[1:] &= ~tok[:-1]
    return a, cls, start


def count_numpy(data, L, fmt, ntiles, counts, flags):
    a, cls, start = _scan(data, int(L), int(fmt))
    cr = np.flatnonzero(a == 13)
    cr = cr[cr + 1 < a.size]  # (dg_stray_cr: a '\r' as the text's last byte ends its last line)
    c = counts.reshape(int(ntiles), 4)
    for k, mask in enumerate((start, cls & C_NL, cls & C_A, cls & C_B)):
        c[:, k] = np.bincount(np.flatnonzero(mask) // TILE, minlength=int(ntiles))
    if (cls & C_BAD).any() or (a[cr + 1] != 10).any():
        flags[0] |= F_BAD_BYTE


def write_numpy(data, L, fmt, ntiles, counts, incl, NL, T, A, B, tok_pos, tok_line, line_tok, line_a, line_b,
                a_pos, a_tok, b_pos, b_tok):
    _, cls, start = _scan(data, int(L), int(fmt))
    cum = np.cumsum(start, dtype=np.int64)  # token starts at offsets <= p
    ts = np.flatnonzero(start)
    nl = np.flatnonzero(cls & C_NL)
    am = np.flatnonzero(cls & C_A)
    bm = np.flatnonzero(cls & C_B)
    T, NL, A, B = int(T), int(NL), int(A), int(B)
    if (ts.size, nl.size, am.size, bm.size) != (T, NL, A, B):
        raise BackendError(f"parse twin: totals {(T, NL, A, B)} disagree with the text's "
                           f"{(ts.size, nl.size, am.size, bm.size)} (tokens, newlines, markers)")
    tok_pos[:T] = ts
    tok_line[:T] = np.searchsorted(nl, ts)
    a_pos[:A] = am
    a_tok[:A] = cum[am]
    b_pos[:B] = bm
    b_tok[:B] = cum[bm]
    for out, before, total in ((line_tok, cum[nl], T), (line_a, np.searchsorted(am, nl), A),
                               (line_b, np.searchsorted(bm, nl), B)):
        out[0] = 0
        out[1 : NL + 1] = before
        out[NL + 1] = total


def values_numpy(data, L, pos, fmt, lo, hi):
    """dg_value for every offset in ``pos``: (values, -1 where bad; ok mask). In an edge list or a
    Matrix Market file an id ends at a blank or a line end: a comment mark glued to it (``5%20``)
    makes it bad (:func:`distgrail.io.guards.glued_mark`)."""
    a = np.asarray(data[: int(L)])
    pos = np.asarray(pos, dtype=np.int64)
    L = a.size
    nondigit = np.flatnonzero((a < 48) | (a > 57))
    nonzero = np.flatnonzero(a != 48)

    def next_of(idx, p):  # first index in idx at or after p, else L
        return np.append(idx, L)[np.searchsorted(idx, p)]

    end = next_of(nondigit, pos)  # first non-digit at or after p
    first = np.minimum(next_of(nonzero, pos), end)  # first significant digit
    sig = end - first
    big = sig > 10  # >= 10^10 > hi
    v = np.zeros(pos.size, np.int64)
    for j in range(10):
        m = (j < sig) & ~big
        v[m] = v[m] * 10 + (a[first[m] + j].astype(np.int64) - 48)
    ok = (end > pos) & ~big & (v <= hi) & (v >= lo)
    if fmt != FMT_GRA:  # (a comment mark glued to the id too: '5%20')
        inside = end < L
        c = classes(a[end[inside]], fmt)
        ok[inside] &= (c & C_TOK) == 0
    return np.where(ok, v, -1), ok


def _take(arr, idx, mask, fill=0):
    out = np.full(idx.shape, fill, dtype=np.int64)
    out[mask] = np.asarray(arr)[idx[mask]]
    return out


def digit_runs_numpy(data, L, pos, fmt):
    """dg_digits for every offset in ``pos``: whether the token there is a run of digits that ends
    at a blank, a line end, a comment character or the end of the text."""
    a = np.asarray(data[: int(L)])
    pos = np.asarray(pos, dtype=np.int64)
    nondigit = np.append(np.flatnonzero((a < 48) | (a > 57)), a.size)
    end = nondigit[np.searchsorted(nondigit, pos)]  # first non-digit at or after p
    ok = end > pos
    inside = ok & (end < a.size)
    c = classes(a[end[inside]], fmt)
    ok[inside] = ((c & C_TOK) == 0) | ((c & C_A) != 0)
    return ok


def _integer_line_of_other_width(data, L, fmt, tok_pos, t0, live, width) -> bool:
    """Whether a line with tokens before its comment (``live`` of them from token ``t0``) has
    another count than ``width`` and only digit runs among them (dg_parse_lines' F_WIDTH); in a
    Matrix Market file whatever its tokens (every entry line has its header's count)."""
    cand = np.flatnonzero((live > 0) & (live != width))
    if not cand.size:
        return False
    if int(fmt) == FMT_MTX:
        return True
    cnt = live[cand]
    line = np.repeat(np.arange(cand.size), cnt)
    tix = t0[cand][line] + np.arange(line.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    ok = digit_runs_numpy(data, L, np.asarray(tok_pos)[tix], fmt)
    return bool((np.bincount(line[~ok], minlength=cand.size) == 0).any())


def _empty_tab_field(data, L, fmt, tok_pos, t0, lines) -> bool:
    """Whether one of ``lines`` (each with a token before its comment, the first at token ``t0``)
    of a tab-separated edge list has an empty first or second field (dg_parse_lines' ``tabs``): a
    tab in the blanks before its first token, or two among the blanks after it (unless a comment
    mark ends that token), :func:`distgrail.io.guards.empty_tab_field`."""
    if not lines.size:
        return False
    a = np.asarray(data[: int(L)])
    blank = (a == 32) | (a == 9) | (a == 13)
    ct = np.concatenate(([0], np.cumsum(a == 9)))
    nl = np.flatnonzero(a == 10)
    start = np.concatenate(([0], nl + 1))[lines]  # (line l ends at the l-th '\n')
    p0 = np.asarray(tok_pos)[t0[lines]].astype(np.int64)
    lead = ct[p0] - ct[start]  # (only blanks lie between a line's start and its first token)
    cls = classes(a, fmt)
    field = ((cls & C_TOK) != 0) & ((cls & C_A) == 0)
    stop = np.append(np.flatnonzero(~field), a.size)
    e0 = stop[np.searchsorted(stop, p0)]  # the first token's end: a blank, a line end or a comment mark
    solid = np.append(np.flatnonzero(~blank), a.size)
    q = solid[np.searchsorted(solid, e0)]  # the first byte after the blanks that follow it
    glued = (e0 < a.size) & ((classes(a[np.minimum(e0, a.size - 1)], fmt) & C_A) != 0)
    run = np.where(glued, 0, ct[q] - ct[e0])
    return bool(((lead > 0) | (run >= 2)).any())


def _values_not_allowed(data, L, tok_pos, t0, live, values) -> bool:
    """Whether a token after the first two before its line's comment (``live`` of them from token
    ``t0``) is not a Matrix Market value of kind ``values`` (dg_parse_lines' F_VALUE, dg_mtx_value:
    :func:`distgrail.io.edgelist.bad_values`, the CPU reader's own test, on the chunk's bytes; a
    value ends at a blank, a line end, a ``%`` or the end of the text)."""
    more = np.flatnonzero(live > 2)
    if not more.size:
        return False
    cnt = live[more] - 2
    line = np.repeat(np.arange(more.size), cnt)
    tix = t0[more][line] + 2 + np.arange(line.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return bool(bad_values(np.asarray(data[: int(L)]), np.asarray(tok_pos)[tix], int(values)).any())


def lines_numpy(data, L, fmt, nlines, tok_pos, line_tok, line_a, line_b, a_pos, a_tok, b_pos, b_tok, lo, hi, width,
                tabs, values, line_edges, line_u, line_v, seen, flags):
    n = int(nlines)
    t0, t1 = line_tok[:n].astype(np.int64), line_tok[1 : n + 1].astype(np.int64)
    a0, a1 = line_a[:n].astype(np.int64), line_a[1 : n + 1].astype(np.int64)
    u = np.full(n, -1, np.int64)
    v = np.full(n, -1, np.int64)
    ne = np.zeros(n, np.int64)
    bad = 0
    if fmt == FMT_GRA:
        b0, b1 = line_b[:n].astype(np.int64), line_b[1 : n + 1].astype(np.int64)
        vertex = (t1 > t0) | (a1 > a0) | (b1 > b0)
        good = vertex & (a1 - a0 == 1) & (b1 - b0 == 1)
        good &= (_take(a_tok, a0, good) - t0 == 1) & (t1 == _take(b_tok, b0, good))
        good &= _take(b_pos, b0, good) > _take(a_pos, a0, good)
        if (vertex & ~good).any():
            bad |= F_LINE
        g = np.flatnonzero(good)
        ids, ok = values_numpy(data, L, tok_pos[t0[g]], fmt, lo, hi)
        if not ok.all():
            bad |= F_VALUE
        u[g[ok]] = ids[ok]
        ne[g[ok]] = (t1 - t0 - 1)[g[ok]]
        np.add.at(seen, ids[ok], 1)
    else:
        cmt = np.where(a1 > a0, _take(a_pos, a0, a1 > a0), NO_COMMENT)
        live0 = (t1 > t0) & (_take(tok_pos, t0, t1 > t0) < cmt)
        live1 = (t1 > t0 + 1) & (_take(tok_pos, t0 + 1, t1 > t0 + 1) < cmt)
        if (live0 & ~live1).any():
            bad |= F_LINE
        if int(tabs) and _empty_tab_field(data, L, fmt, tok_pos, t0, np.flatnonzero(live0)):
            bad |= F_LINE
        g = np.flatnonzero(live1)
        x, okx = values_numpy(data, L, tok_pos[t0[g]], fmt, lo, hi)
        y, oky = values_numpy(data, L, tok_pos[t0[g] + 1], fmt, lo, hi)
        ok = okx & oky
        if not ok.all():
            bad |= F_VALUE
        u[g[ok]], v[g[ok]], ne[g[ok]] = x[ok] - lo, y[ok] - lo, 1
        has = a1 > a0  # tokens before the comment: a_tok counts those starting at or before it
        k = _take(a_tok, a0, has)
        at = has & (k > t0)
        at &= _take(tok_pos, k - 1, at, -1) == cmt
        live = np.where(has, k - t0 - at, t1 - t0)
        if int(width) > 0 and _integer_line_of_other_width(data, L, fmt, tok_pos, t0, live, int(width)):
            bad |= F_WIDTH
        if int(values) > 0 and _values_not_allowed(data, L, tok_pos, t0, live, values):
            bad |= F_VALUE
    line_edges[:n], line_u[:n], line_v[:n] = ne, u, v
    flags[0] |= bad


def gra_edges_numpy(data, L, T, tok_pos, tok_line, line_tok, line_u, line_edges, eincl, hi, ebase, cap, src, dst,
                    flags):
    t = np.arange(int(T), dtype=np.int64)
    line = tok_line[: t.size].astype(np.int64)
    t0 = line_tok[line].astype(np.int64)
    ids = line_u[line]
    m = (t != t0) & (ids >= 0)
    vals, ok = values_numpy(data, L, tok_pos[t[m]], FMT_GRA, 0, hi)
    if not ok.all():
        flags[0] |= F_VALUE
    lm = line[m]
    e = int(ebase[0]) + (eincl[lm].astype(np.int64) - line_edges[lm]) + (t[m] - t0[m] - 1)
    _put(e, ids[m], vals, cap, src, dst, flags)


def _put(e, s, d, cap, src, dst, flags):
    fits = e < int(cap)
    src[e[fits]] = s[fits]
    dst[e[fits]] = d[fits]
    if not fits.all():
        flags[0] |= F_CAPACITY


def pair_edges_numpy(nlines, line_edges, line_u, line_v, eincl, ebase, cap, src, dst, flags):
    g = np.flatnonzero(line_edges[: int(nlines)])
    e = int(ebase[0]) + eincl[g].astype(np.int64) - 1
    _put(e, line_u[g], line_v[g], cap, src, dst, flags)


def advance_numpy(ebase, eincl, nlines):
    ebase[0] += int(eincl[int(nlines) - 1])


KERNELS_NUMPY = {
    "dg_parse_count": count_numpy,
    "dg_parse_write": write_numpy,
    "dg_parse_lines": lines_numpy,
    "dg_parse_gra_edges": gra_edges_numpy,
    "dg_parse_pair_edges": pair_edges_numpy,
    "dg_parse_advance": advance_numpy,
}


class NumpyDevice:
    """The twin's "device": host arrays, kernels run by their NumPy twins (arguments checked
    against the kernel signatures exactly as on the GPU)."""

    name = "numpy"
    xp = np
    max_blocks = 1 << 16
    oom_errors: tuple = (MemoryError,)

    def activate(self):
        import contextlib

        return contextlib.nullcontext()

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.empty(nbytes, np.uint8)

    def h2d(self, dst, host: np.ndarray, n: int):
        dst[:n] = host[:n]

    def d2h(self, host: np.ndarray, src):
        host[...] = src

    def launch(self, name: str, blocks: int, threads: int, args: tuple):
        check_args(name, args)
        if not (1 <= blocks <= self.max_blocks and threads % 32 == 0):
            raise AssertionError(f"{name}: bad launch ({blocks}, {threads})")
        KERNELS_NUMPY[name](*args)

    def record(self):
        return None

    def wait(self, event):
        pass

    def fits(self, nbytes: int, what: str):
        pass

    def scalar(self, a) -> int:
        return int(a)


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

    def __init__(self, dev, fmt: int, lo: int, hi: int, n_seen: int, width: int = 0, tabs: bool = False,
                 values: int = 0):
        xp = dev.xp
        self.dev, self.fmt, self.lo, self.hi = dev, fmt, lo, hi
        # fields of every edge line of integers only (the first edge line's; 0: not checked; Matrix Market: of every entry line)
        self.width = width
        self.tabs = tabs  # a tab-separated edge list (a tab in its first edge line): no empty first or second field
        self.values = values  # Matrix Market: what its values must be (edgelist.MTX_VALUES; 0: not checked)
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
                    bm[0], bm[1], i64(self.lo), i64(self.hi), i32(self.width), i32(bool(self.tabs)), i32(self.values),
                    per_line[0], per_line[1], per_line[2], self.seen, self.flags))
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
