"""Text parsing on the GPU (kernels/parse.cu) and its NumPy twin, kernel by kernel.

:func:`read_graph_cuda` reads a ``.gra`` file, an edge list (whitespace- or comma-separated, a
header line skipped; also gzip/bzip2/Zstandard-compressed: a host thread decompresses it
(:class:`~distgrail.io.compressed.Blocks`) while the kernels parse) or a Matrix Market
coordinate file into device arrays (int32 src/dst, the same edges in the same order as the CPU
reader, same ``n``). The file is read in chunks that end at line ends into pinned buffers (a ring
of three; the partial last line moves to the next buffer), each chunk is uploaded on a stream and
parsed there while the host reads the next one. The file's digest (BLAKE3) is computed in the background by
a :class:`~distgrail.io.digest.FileDigest` (its own thread and descriptor); nothing waits for it
until the value is read (the graph's ``digest``, when the index is assembled). Per chunk: ``count`` (tokens, newlines, markers per 1024-byte tile),
a scan of the tile counts, ONE sync for the totals (taken a chunk late, after the next chunk has
been read, so it does not wait), ``write`` (token and line tables), ``lines`` (each line checked,
its id or pair converted), a scan of the edges per line, and the edge kernel writing straight into
the output arrays at a running offset that stays on the device.

Errors: the kernels only *detect* anything unusual (a bad byte, a malformed line, an id out of
range, a vertex count that does not match, a line longer than a chunk). The file is then read
again by the CPU reader, so the error message -- file, line number, offending token -- is the CPU
reader's by construction (and the rare valid file the kernels refuse still reads correctly).

The twin: every kernel ``dg_parse_<x>`` has ``<x>_numpy`` with the same arguments in
:mod:`distgrail.io.parse_twin`, run by its :class:`NumpyDevice` through the
same host code as the kernels (:class:`Stages`, :func:`read_text_graph`), so the end-to-end twin
(:func:`read_graph_numpy`) and the GPU path share everything but the kernels.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

import numpy as np

from ..dtypes import size_problem
from ..errors import BackendError, GraphFormatError
from ..gpu.memory import max_in_pieces, select_in_pieces

from .decompress import Blocks, StreamError
from .chunks import FMT_CODES, ChunkReader, LineTooLong, memory_estimate, plan_read
from .digest import adopt
from .graph import EdgeGraph
from ..constants import FMT_CSV, FMT_EDGELIST
from .guards import blank_field, comma_ids, comma_width, empty_field, first_edge_tab, first_edge_width
from .parse_twin import THREADS, TILE, CudaDevice, Edges, NumpyDevice, Stages

__all__ = ["read_graph_cuda", "read_graph_numpy", "read_text_graph", "read_text_range", "RangeParse", "finish_edges", "tokenize_numpy", "parse_chunk_numpy", "file_width", "first_width", "GraphUnreadable", "open_body",
           "file_edge", "first_edge",
           "parse_chunk_cuda", "NumpyDevice", "CudaDevice", "Stages", "CHUNK_BYTES", "THREADS", "chunk_fits"]

#: bytes per chunk (rounded up to whole tiles); three pinned buffers of this size are used
CHUNK_BYTES = 32 << 20
NBUF = 3


def _parse_chunk(dev, chunk: bytes, fmt: str, lo: int, hi: int, n_seen: int, tables_only: bool = False,
                 width: int = 0, tabs: bool = False, values: int = 0) -> dict:
    """Every stage of one chunk on ``dev`` (only count and write if ``tables_only``); every
    intermediate array, on the host. ``width``: the fields of every edge line of integers only (0:
    not checked; Matrix Market: of every entry line); ``tabs``: a tab-separated edge list's (no
    empty first or second field); ``values``: what a Matrix Market entry's fields after the first
    two must be (:data:`~distgrail.io.edgelist.MTX_VALUES`; 0: not checked)."""
    xp = dev.xp
    L = len(chunk)
    host = np.zeros(-(-max(L, 1) // TILE) * TILE, np.uint8)
    host[:L] = np.frombuffer(chunk, np.uint8)
    status = np.zeros(5, np.int32)
    with dev.activate():
        d = xp.zeros(host.size, xp.uint8)
        dev.h2d(d, host, L)
        st = Stages(dev, FMT_CODES[fmt], lo, hi, n_seen, width, tabs, values)
        out = Edges(xp)
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


def parse_chunk_numpy(chunk: bytes, fmt: str = "gra", lo: int = 0, hi: int | None = None, width: int = 0,
                      tabs: bool = False, values: int = 0) -> dict:
    """Every intermediate array of one chunk (token and line tables, per-line results, edges);
    ids must lie in lo..hi (.gra: 0..n-1); edge lines of integers only must have ``width`` fields (0: any;
    Matrix Market: every entry line, whatever its fields);
    ``tabs``: no line may have an empty first or second tab-separated field; ``values`` (Matrix Market,
    :data:`~distgrail.io.edgelist.MTX_VALUES`; 0: not checked): every field after a line's first two
    must be an integer (1) or a number (2)."""
    hi = _hi(fmt, hi)
    return _parse_chunk(NumpyDevice(), chunk, fmt, lo, hi, hi + 1 if fmt == "gra" else 0, width=width, tabs=tabs,
                        values=values)


def parse_chunk_cuda(chunk: bytes, fmt: str = "gra", lo: int = 0, hi: int | None = None, width: int = 0,
                     tabs: bool = False, values: int = 0) -> dict:
    """The same arrays as :func:`parse_chunk_numpy`, computed by the kernels (for parity tests)."""
    hi = _hi(fmt, hi)
    return _parse_chunk(CudaDevice(), chunk, fmt, lo, hi, hi + 1 if fmt == "gra" else 0, width=width, tabs=tabs,
                        values=values)


class _Anomaly(Exception):
    pass


def chunk_fits(chunk_bytes: int, limit: int = 2**31 - 1) -> bool:
    """Whether the kernels can parse chunks of ``chunk_bytes``: positions inside a chunk and the
    per-chunk token, line and edge counts are int32 (the file's edge offsets are int64), so a
    chunk (rounded up to whole tiles) must stay within ``limit`` bytes; a line longer than that
    goes to the CPU reader.

    >>> chunk_fits(32 << 20), chunk_fits(2**31), chunk_fits(5000, limit=4096)
    (True, False, False)
    """
    return -(-int(chunk_bytes) // TILE) * TILE <= int(limit)


def first_edge(read, start: int, stop: int, comma: bool) -> tuple[int, bool | None]:
    """(width, tab) of the first edge line in bytes ``start:stop`` of a text that ``read(pos,
    count)`` reads: its width (:func:`~distgrail.io.guards.first_edge_width`: its fields when they
    are all integers, -1 when not; 0 when there is no edge line) and whether it holds a tab, so
    that the file is tab-separated (:func:`~distgrail.io.guards.first_edge_tab`; never when
    ``comma``; None when there is no edge line)."""
    piece, pos = 1 << 16, start
    while pos < stop:
        data = read(pos, min(piece, stop - pos))
        if not data:
            break
        cut = data.rfind(b"\n") + 1 if pos + len(data) < stop else len(data)
        if not cut:  # (a line longer than the piece)
            piece *= 4
            continue
        first, width = first_edge_width(data[:cut], comma)
        if first >= 0:
            return width, False if comma else bool(first_edge_tab(data[first:cut]))
        pos += cut
    return 0, None


def first_width(read, start: int, stop: int, comma: bool) -> int:
    """The width of the first edge line (:func:`first_edge`) in bytes ``start:stop``; 0 when there is none."""
    return first_edge(read, start, stop, comma)[0]


def file_edge(plan) -> tuple[int, bool | None] | None:
    """(width, tab) of ``plan``'s edge list (:func:`first_edge`): the field count every edge line of
    integers only has, its first edge line's, read from its body (a rank's range starts anywhere in
    it), -1 when that line is not of integers only (nothing checked); and whether that line holds a
    tab (a tab-separated file). None when the parse finds them on the way (a compressed stream,
    read from its start) or the format has no such rule (.gra, Matrix Market)."""
    if plan.code not in (FMT_EDGELIST, FMT_CSV) or plan.kind != "text":
        return None
    fd = open_body(plan.path)
    try:
        return first_edge(lambda pos, count: os.pread(fd, count, pos), plan.body, plan.size, plan.comma)
    finally:
        os.close(fd)


class GraphUnreadable(GraphFormatError):
    """The graph file cannot be opened here for a range parse (missing on this machine, a
    directory, no permission): ``reason`` says which, without the path (an MPI rank adds where)."""

    def __init__(self, path, reason: str):
        self.reason = reason
        super().__init__(reason, os.fspath(path))


def open_body(path) -> int:
    """A read-only descriptor of the regular file ``path`` (never blocking on a FIFO), or
    :class:`GraphUnreadable`."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise GraphUnreadable(path, "no such file") from None
    except OSError as e:
        raise GraphUnreadable(path, f"cannot be read ({e.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise GraphUnreadable(path, "a directory" if stat.S_ISDIR(mode) else "not a regular file")
    return fd


def file_width(plan) -> int | None:
    """The width of ``plan``'s edge list (:func:`file_edge`), or None."""
    edge = file_edge(plan)
    return None if edge is None else edge[0]


def _check_width(st, plan, chunk: np.ndarray, raw: bytes | None, width: list) -> None:
    """The field count of a chunk's edge lines of integers only against ``width[0]``, the file's
    first edge line's (0 until met: this chunk's first edge line sets it; -1: that line is not of
    integers only, nothing is checked): a comma-separated chunk's commas (``raw``: its bytes) here,
    on the host, as the CPU reader counts them; a whitespace one's tokens by the lines kernel
    (``st.width``, which flags a line of another count only when its tokens are digit runs).
    ``width[1]``: whether that line holds a tab (None until met): the lines kernel then flags an
    empty first or second field of a tab-separated line (``st.tabs``). A Matrix Market file: every
    entry line has exactly ``plan.fields`` fields (its header's field says how many,
    :class:`~distgrail.io.edgelist.Fields`): the lines kernel flags a line of another count
    whatever its tokens (``1 2 1.5 7`` in a ``real`` file too), and any line whose fields after the
    first two are not values of the kind ``plan.values`` says (integers, numbers:
    :data:`~distgrail.io.edgelist.MTX_VALUES`), so the kernels accept no file the CPU reader
    refuses for either."""
    if plan.fmt == "mtx":
        if plan.fields < 2:  # (a plan without the header's count: the CPU reader judges the entries)
            raise _Anomaly("a Matrix Market plan without its entries' field count")
        if plan.fields > 2 and not plan.values:  # (nor one without what its values must be)
            raise _Anomaly("a Matrix Market plan without what its entries' values must be")
        st.width, st.values = plan.fields, plan.values
        return
    if plan.code not in (FMT_EDGELIST, FMT_CSV):
        return
    if plan.comma:
        bad, width[0], _ = comma_width(raw, width[0])
        if bad >= 0:  # (the CPU reader names the line)
            raise _Anomaly("a comma-separated edge line of integers of another field count than the first")
        return
    if not width[0] or width[1] is None:
        got = first_edge(lambda pos, count: chunk[pos:pos + count].tobytes(), 0, chunk.size, False)
        width[0] = width[0] or got[0]
        width[1] = got[1] if width[1] is None else width[1]
    st.width = max(width[0], 0)
    st.tabs = bool(width[1])


def _parse_body(plan, dev, chunk_bytes: int, edge: tuple | None = None):
    """The pipeline over bytes ``plan.body:plan.size``; returns (src, dst, vertex_lines, seen)
    or raises _Anomaly (a kernel flagged something) / LineTooLong. ``edge``: the width of the
    file's first edge line and whether it holds a tab (:func:`file_edge`); None: the body's first
    edge line's."""
    xp, fmt = dev.xp, plan.code
    cap = -(-chunk_bytes // TILE) * TILE
    hosts = [dev.pinned(cap) for _ in range(NBUF)]
    status = dev.pinned(NBUF * 8 * 4).view(np.int32).reshape(NBUF, 8)
    dbufs = [xp.empty(cap, xp.uint8) for _ in range(2)]
    st = Stages(dev, fmt, plan.lo, plan.hi, plan.n if plan.fmt == "gra" else 0)
    widths = list(edge) if edge is not None else [0, None]
    ids = [None if edge is None else True]  # (guards.comma_ids; a rank's range: the CPU reader judges what blank_field finds)
    out = Edges(xp)
    body = max(plan.size - plan.body, 1)
    vertex_lines = 0
    stream = fd = None
    if plan.codec:  # decompressed on the host by a thread while the kernels parse
        stream = Blocks(plan.path, plan.codec)
    else:
        fd = open_body(plan.path)
    try:
        if stream is not None and stream.readinto(np.empty(plan.body, np.uint8)) != plan.body:
            raise _Anomaly("the decompressed text ends inside its header")  # (closed below, as any error)

        def finish(c):
            nonlocal vertex_lines
            dev.wait(c["event"])
            totals = status[c["slot"]].copy()
            if totals[4]:
                raise _Anomaly(f"flags {int(totals[4])}")
            vertex_lines += int(totals[2])
            total = stream.total() if stream is not None else body  # (grows the output buffers)
            st.rest(c["d"], c["L"], c["ntiles"], c["counts"], c["incl"], totals, out, c["done"], total)

        pending = None
        reader = ChunkReader(fd, plan.body, plan.size, hosts, stream=stream)
        for k, slot, L in reader:
            raw = hosts[slot][:L].tobytes() if plan.comma else None
            if plan.comma and empty_field(raw) >= 0:  # (the CPU reader names it)
                raise _Anomaly("an empty field in a comma-separated line")
            if plan.comma and ids[0] is None:
                ids[0] = comma_ids(raw)
            if plan.comma and ids[0] and blank_field(raw)[0] >= 0:  # ('12 13,3', '1 2': the CPU reader names it)
                raise _Anomaly("a blank inside a comma-separated line's source or target field")
            _check_width(st, plan, hosts[slot][:L], raw, widths)
            del raw
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
        return out.src[:m], out.dst[:m], vertex_lines, st.seen[: plan.n or 0]
    except StreamError as e:  # damaged or unusual compressed data: the CPU reader reports it
        raise _Anomaly(str(e)) from None
    finally:
        if stream is not None:
            stream.close()
        else:
            os.close(fd)
        dev.wait(dev.record())  # nothing in flight reads the buffers once they are freed


def finish_edges(plan, xp, src, dst, vertex_lines: int, seen_once: bool, limit: int = 2**31 - 1):
    """(n, src, dst) of the whole body's edges, as one parse makes them: a .gra file must have had
    exactly one line per vertex (``vertex_lines`` lines, ``seen_once``: no vertex twice), a Matrix
    Market file its ``nnz`` entries (symmetric ones are mirrored here), an edge list without
    ``num_vertices`` gets the largest id + 1. Raises _Anomaly when the CPU reader must judge.
    Reductions and selections over the edges go in pieces of at most ``limit`` (any edge count)."""
    m = int(src.shape[0])
    n = plan.n
    if plan.fmt == "gra":
        if vertex_lines != n or not seen_once:
            raise _Anomaly("vertex lines")
    elif plan.fmt == "mtx":
        if m != plan.nnz:
            raise _Anomaly("entries")
        if plan.symmetric:  # selections in pieces: CuPy's index with 32 bits
            off = src != dst
            src, dst = (xp.concatenate((src, select_in_pieces(xp, dst, off, limit))),
                        xp.concatenate((dst, select_in_pieces(xp, src, off, limit))))
    elif n is None:
        n = max(max_in_pieces(xp, src, limit), max_in_pieces(xp, dst, limit)) + 1 if m else 0
    if plan.fmt == "edgelist" and plan.n is None and m == 0:
        raise _Anomaly("no edge: the CPU reader says what an empty edge list needs")
    if size_problem(int(n)):
        raise _Anomaly(f"{int(n):,} vertices: {size_problem(int(n))}")
    return n, src, dst


def _parse_file(plan, dev, chunk_bytes: int):
    """The pipeline; returns (n, src, dst) or raises _Anomaly / LineTooLong."""
    src, dst, vertex_lines, seen = _parse_body(plan, dev, chunk_bytes)
    once = plan.fmt != "gra" or not plan.n or not dev.scalar(dev.xp.count_nonzero(seen != 1))
    return finish_edges(plan, dev.xp, src, dst, vertex_lines, once)


@dataclass
class RangeParse:
    """One range of a file's body, parsed (:func:`read_text_range`): its edges in file order (arrays
    of the device), its vertex lines and per-vertex line counts (.gra), or why the kernels did not
    take it (``anomaly``: the CPU reader must then judge the whole file)."""

    src: object = None
    dst: object = None
    vertex_lines: int = 0
    seen: object = None
    anomaly: str | None = None


def read_text_range(path, plan, start: int, stop: int, dev=None, *, chunk_bytes: int | None = None) -> RangeParse:
    """Parse bytes ``start:stop`` of the body of ``path`` (a plan of kind "text" from
    :func:`~distgrail.io.chunks.plan_read`; ``start`` and ``stop`` at line starts, or ``stop`` at
    the end) with the kernels on ``dev``. Concatenating the ranges of a split body in order, then
    :func:`finish_edges`, gives what one parse of the file gives. Never raises for bad input: the
    result's ``anomaly`` says so (a device too small or a backend error too); a file this process
    cannot open (an MPI rank that does not see it) raises :class:`GraphUnreadable`."""
    dev = NumpyDevice() if dev is None else dev
    chunk_bytes = int(chunk_bytes or CHUNK_BYTES)
    sub = replace(plan, path=os.fspath(path), body=int(start), size=int(stop))
    for _ in range(3):  # a line longer than a chunk: again with chunks that hold it
        try:
            dev.fits(memory_estimate(sub, chunk_bytes), f"parsing bytes {start}:{stop} of {sub.path} on the GPU")
            edge = file_edge(replace(plan, path=sub.path))  # (the file's first edge line, not the range's)
            with dev.activate():
                src, dst, lines, seen = _parse_body(sub, dev, chunk_bytes, edge)
            return RangeParse(src, dst, lines, seen)
        except _Anomaly as e:
            return RangeParse(anomaly=f"the GPU parser did not accept it ({e})")
        except LineTooLong as e:
            chunk_bytes = max(2 * e.need, 2 * chunk_bytes)
            if not chunk_fits(chunk_bytes):
                break
        except dev.oom_errors as e:
            return RangeParse(anomaly=f"the GPU ran out of memory while parsing ({e})")
        except BackendError as e:
            return RangeParse(anomaly=str(e))
    return RangeParse(anomaly="a line longer than the largest chunk buffer")


def _cpu_read(path, fmt, num_vertices, source=None, digest=None):
    from .read import read_graph

    return read_graph(path, fmt=fmt, num_vertices=num_vertices, source=source, digest=digest)


def _say(notify, message: str):
    (notify or (lambda s: print(s, file=sys.stderr)))(message)


def read_text_graph(path, fmt: str = "auto", num_vertices: int | None = None, dev=None, *,
                    chunk_bytes: int | None = None, notify=None, digest=None):
    """Read a text graph file with the parse kernels on ``dev`` (a :class:`CudaDevice` or the
    twin's :class:`NumpyDevice`). Returns an :class:`EdgeGraph` whose ``src``/``dst`` are int32
    arrays of ``dev`` (``meta["parser"]`` says which path made them), or None when the file
    should be read by the CPU reader instead: a binary ``.h5`` file (silently), or a file whose
    parse does not fit the device, or ids beyond int32 (``notify`` gets a one-line reason).
    Bad input raises the CPU reader's :class:`~distgrail.errors.GraphFormatError`.
    The graph's ``digest`` is a :class:`~distgrail.io.digest.FileDigest`, joined when read:
    ``digest``, the one the file's opener started, if it is of this file, unchanged
    (:func:`~distgrail.io.digest.adopt`), else one started here (None or True); ``digest=False``
    skips the hash (benchmarks: the parse alone). Returning None, the reader hands ``digest``
    back untaken (for the CPU reader the caller runs next) and cancels one it started."""
    dev = NumpyDevice() if dev is None else dev
    chunk_bytes = int(chunk_bytes or CHUNK_BYTES)
    plan = plan_read(path, fmt, num_vertices)
    given = None if digest is None or isinstance(digest, bool) else digest
    if plan.kind not in ("text", "stream"):
        if plan.kind == "h5":
            return None
        g = _fallback(plan, fmt, num_vertices, dev, notify, plan.reason, given)
        _let_go(given if g is None else None, given)
        return g
    # paused: the hash goes on after the parse, not beside it (io/digest.py)
    d = None if digest is False else adopt(given, plan.path, paused=True)
    try:
        g, why = _parse_with_retries(plan, dev, chunk_bytes, notify)
        if g is not None:
            if d is not None:
                d.check()  # the file must not have changed under the parse
                d.resume()
            g.digest = d or ""
            return g
        if why is not None:  # the CPU reader reads it, hashed by the same digest
            g = _fallback(plan, fmt, num_vertices, dev, notify, why, d)
            if g is not None:
                return g
    except BaseException:
        if d is not None:
            d.cancel()
        raise
    _let_go(d, given)
    return None


def _let_go(d, given) -> None:
    """A digest this reader does not use: the one handed down goes back to its owner (untaken),
    one started here is cancelled."""
    if d is not None and d is given:
        d.taken = False
    elif d is not None:
        d.cancel()


def _parse_with_retries(plan, dev, chunk_bytes: int, notify):
    """(graph, None) when the kernels took the file; (None, None) when it goes back to the caller
    (too big for the device: ``notify`` was told); (None, why) when the CPU reader must read it."""
    name = os.path.basename(plan.path)
    why = None
    attempts = 3  # a line longer than a chunk: again with chunks that hold it
    while attempts:
        attempts -= 1
        try:
            dev.fits(memory_estimate(plan, chunk_bytes), f"parsing {name} on the GPU")
            with dev.activate():
                n, src, dst = _parse_file(plan, dev, chunk_bytes)
            stated = _stated_edges(plan)
            if stated is not None and int(src.shape[0]) != stated:  # (the CPU reader words it)
                raise _Anomaly(f"its first line states {stated} edges, {int(src.shape[0])} read")
            g = EdgeGraph(n=n, src=src, dst=dst, name=name)
            g.meta.update(path=os.path.abspath(plan.path), format=plan.fmt, parser=dev.name)
            return g, None
        except _Anomaly as e:  # the CPU reader reports the error (or reads what the kernels refused)
            return None, f"the GPU parser did not accept it ({e})"
        except LineTooLong as e:
            why = str(e)
            chunk_bytes = max(2 * e.need, 2 * chunk_bytes)
            if not chunk_fits(chunk_bytes):
                break
        except dev.oom_errors as e:
            _say(notify, f"distgrail: {name}: the GPU ran out of memory while parsing ({e}); reading on the CPU")
            return None, None
        except Exception as e:
            if not isinstance(e, BackendError):
                raise
            _say(notify, f"distgrail: {name}: {e}; reading on the CPU")
            return None, None
    return None, why


def _stated_edges(plan):
    """The edge lines an edge list's first line states (distgrail's writer: ``Dialect.edges``), or None."""
    source = plan.source
    if source is None or not source.format.dialect:
        return None
    return source.dialect.edges


def _fallback(plan, fmt, num_vertices, dev, notify, why, digest=None):
    """The CPU reader's graph, its arrays moved to ``dev`` (None if its ids need int64).
    ``digest``: the file's digest, handed to the CPU reader (kept by the caller when None is
    returned; one the CPU reader started instead is cancelled with its graph)."""
    name = os.path.basename(plan.path)
    g = _cpu_read(plan.path, fmt, num_vertices, plan.source, digest)  # raises the CPU reader's error on bad input
    if g.src.dtype != np.int32 or g.dst.dtype != np.int32:
        _say(notify, f"distgrail: {name}: vertex ids beyond int32; the graph stays on the CPU")
        if g.digest_source is not digest:
            g.cancel_digest()
        return None
    if why:  # a valid file the GPU path could not take
        _say(notify, f"distgrail: {name}: {why}; read on the CPU")
    g.src, g.dst = dev.xp.asarray(g.src), dev.xp.asarray(g.dst)
    g.meta["parser"] = "cpu"
    return g


def read_graph_cuda(path, fmt: str = "auto", num_vertices: int | None = None, be=None, *,
                    chunk_bytes: int | None = None, notify=None, digest=None):
    """Read a ``.gra`` file, an edge list or a Matrix Market file on the GPU; see
    :func:`read_text_graph` (``digest``: the file's :class:`~distgrail.io.digest.FileDigest`
    started by whoever opened it). ``be`` (a GPU :class:`~distgrail.gpu.backend.Backend`) picks
    the device; the current one otherwise."""
    import contextlib

    cp = be.xp if be is not None else None
    on = cp.cuda.Device(be.device) if be is not None and be.device is not None else contextlib.nullcontext()
    with on:
        return read_text_graph(path, fmt, num_vertices, CudaDevice(cp), chunk_bytes=chunk_bytes, notify=notify,
                               digest=digest)


def read_graph_numpy(path, fmt: str = "auto", num_vertices: int | None = None, *, chunk_bytes: int | None = None,
                     notify=None, digest=None):
    """The NumPy twin of :func:`read_graph_cuda`, end to end (same chunks, same arrays)."""
    return read_text_graph(path, fmt, num_vertices, NumpyDevice(), chunk_bytes=chunk_bytes, notify=notify,
                           digest=digest)
