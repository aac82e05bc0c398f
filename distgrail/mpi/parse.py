"""Rank-parallel parsing: each of N ranks parses about 1/N of a text graph file on its own
backend, and the edge arrays meet on the root.

:func:`read_graph_ranks` (collective):

1. The root plans the read (:func:`distgrail.io.chunks.plan_read`: format, header, id range;
   the header is parsed once) and splits the body into N byte ranges that start at line starts;
   plan and ranges are broadcast. The root starts the file's digest in the background
   (:class:`~distgrail.io.digest.FileDigest`) over the whole file, paused until the edges are read.
2. Every rank parses its range with the chunk parser of :mod:`distgrail.io.parse`
   (:func:`~distgrail.io.parse.read_text_range`: the CUDA kernels on a GPU backend, their NumPy
   twin on the CPU backend).
3. The counts that one parse checks over the whole file are combined exactly: the number of
   ``.gra`` vertex lines is summed and the per-vertex line counts are summed on the root (every
   vertex exactly once), Matrix Market entries are summed (symmetric entries are mirrored on the
   root, after the concatenation, as one parse does), an edge list's vertex count is the largest
   id + 1 over every rank's edges, and its edge count must be the one its first line states, if
   it states one (distgrail's writer: ``# distgrail edge list: N vertices, M edges``).
4. The edges go to the root in rank order (= file order): through ``transport.gatherv`` when a
   transport is given (e.g. GPU to GPU), else through host MPI (:mod:`distgrail.mpi.collectives`).

The result equals the one-rank read (:func:`distgrail.stages.phases.read_on`) exactly: same edges in the
same order, same ``n``, same digest. Errors: when any rank's kernels flag anything (a bad token,
a malformed line, an id out of range, a vertex line missing or repeated across ranks), the root
reads the file with the one-rank reader, which reports the error text for text as a one-rank run
does (file, line number, offending token) -- or reads the rare valid file the kernels refuse. Any
error is raised on every rank (:func:`~distgrail.mpi.errors.run_shared`: a
:class:`~distgrail.mpi.errors.RankError` carrying the original message); no rank waits forever.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..arrays import to_host as _host
from ..errors import DistGrailError
from .errors import mpi, run_shared

__all__ = ["read_graph_ranks", "split_body"]


def split_body(path, body: int, size: int, parts: int) -> list[int]:
    """``parts + 1`` offsets ``body = b0 <= b1 <= ... <= b_parts = size``; each inner one is the
    first line start at or after ``body + i * (size - body) / parts`` (empty ranges when the body
    has fewer lines than parts)."""
    from ..io.chunks import _line_end

    bounds = [int(body)]
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        for i in range(1, parts):
            target = body + (size - body) * i // parts
            b = body if target <= body else _line_end(fd, target - 1, size)
            bounds.append(max(b, bounds[-1]))
    finally:
        os.close(fd)
    bounds.append(int(size))
    return bounds


def _device(be):
    if be.is_gpu:
        from ..io.parse import CudaDevice

        return CudaDevice(be.xp)
    from ..io.parse import NumpyDevice

    return NumpyDevice()


def _plan(path, fmt, num_vertices, parts):
    from ..io.chunks import plan_read
    from ..io.formats import BY_NAME

    plan = plan_read(path, fmt, num_vertices)
    split = plan.kind == "text" and BY_NAME[plan.fmt].split  # (plain text only: a stream is never split)
    bounds = split_body(plan.path, plan.body, plan.size, parts) if split else None
    return plan, bounds


def _one_rank(be, path, fmt, num_vertices, plan=None, why=None):
    """The one-rank reader on the root: what :func:`distgrail.stages.phases.read_on` gives (its errors too).
    With a plan the kernels refused (``why``), the CPU reader reads it, as after a one-rank parse."""
    from ..stages.phases import notice as _notice, read_on
    from ..io.read import read_graph

    if plan is None or plan.kind != "text":
        return read_on(be, path, num_vertices, fmt)
    if not be.is_gpu:  # the CPU backend's one-rank reader
        return read_graph(path, fmt=fmt, num_vertices=num_vertices, source=plan.source)
    from ..io.parse import _fallback

    g = _fallback(plan, fmt, num_vertices, _device(be), _notice, why)
    return g if g is not None else read_graph(path, fmt=fmt, num_vertices=num_vertices)


def _gather(comm, a, transport, be):
    """Every rank's int32 ``a`` concatenated in rank order on root 0 (None elsewhere)."""
    from .collectives import gather_rows

    if transport is not None:
        return transport.gatherv(a, root=0)
    counts = comm.allgather(int(a.shape[0]))
    me = comm.Get_rank()
    out = np.empty(sum(counts), np.int32) if me == 0 else None
    gather_rows(comm, np.ascontiguousarray(_host(a), dtype=np.int32), counts, out, root=0)
    return be.asarray(out) if me == 0 else None


def on_this_rank(fn, me: int, why: str):
    """``fn``, whose :class:`~distgrail.io.parse.GraphUnreadable` (the file missing on this rank's
    machine, a directory there) names this rank and why it reads the file (``why``)."""
    from ..io.parse import GraphUnreadable

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GraphUnreadable as e:
            raise DistGrailError(f"{e.path}: {e.reason} on rank {me} ({why})") from None

    return run


def read_graph_ranks(comm, path, fmt: str, num_vertices: int | None, be, transport=None):
    """Collective: the graph file ``path`` parsed by every rank of ``comm`` (about 1/N of its
    body each, on ``be``'s device); returns the :class:`~distgrail.io.graph.EdgeGraph` on rank 0
    (src/dst device arrays on a GPU backend, NumPy on the CPU backend) and None elsewhere.

    ``transport``: an object with ``gatherv(a, root=0)`` (the concatenation in rank order on
    root, None elsewhere) to move the edge arrays, e.g. GPU to GPU; host MPI otherwise. Binary
    ``.h5`` files and files whose header the CPU reader must judge are read by rank 0 alone.
    ``be``: this rank's :class:`~distgrail.gpu.backend.Backend`.
    """
    from ..io.digest import FileDigest
    from ..io.graph import EdgeGraph
    from ..io.parse import _Anomaly, _stated_edges, finish_edges, read_text_range

    path = os.fspath(path)
    me, size = comm.Get_rank(), comm.Get_size()
    name = os.path.basename(path)
    plan, bounds = comm.bcast(run_shared(comm, f"planning the read of {name}", _plan if me == 0 else None,
                                         path, fmt, num_vertices, size), root=0)
    if bounds is None:  # not split: rank 0 reads
        g = run_shared(comm, f"reading {name}", _one_rank if me == 0 else None, be, path, fmt, num_vertices)
        return g if me == 0 else None
    # started paused: the hash reads the file after the parse, not beside it (io/digest.py)
    digest = run_shared(comm, f"hashing {name}", FileDigest if me == 0 else None, path, paused=True)
    try:
        dev = run_shared(comm, "setting up the parser", _device, be)
        t0 = time.perf_counter()
        part = run_shared(comm, f"parsing bytes {bounds[me]}:{bounds[me + 1]} of {name}",
                          on_this_rank(read_text_range, me, "under MPI every rank parses its part of a text graph"),
                          path, plan, bounds[me], bounds[me + 1], dev)
        why = [w for w in comm.allgather(part.anomaly) if w]
        if why:  # some rank's kernels flagged something: the one-rank reader judges the whole file
            del part
            if digest is not None:
                digest.cancel()  # the one-rank reader hashes the file itself
            g = run_shared(comm, f"reading {name}", _one_rank if me == 0 else None, be, path, fmt, num_vertices,
                           plan, why[0])
            return g if me == 0 else None
        xp = dev.xp
        lines = comm.allreduce(int(part.vertex_lines))
        seen = None
        if plan.fmt == "gra" and plan.n:
            MPI = mpi()
            mine = run_shared(comm, "copying the vertex-line counts to the host",
                              lambda seen: np.ascontiguousarray(_host(seen), dtype=np.int32), part.seen)
            seen = np.empty_like(mine) if me == 0 else None
            comm.Reduce([mine, MPI.INT32_T], [seen, MPI.INT32_T] if me == 0 else None, op=MPI.SUM, root=0)
        t1 = time.perf_counter()
        src = _gather(comm, part.src, transport, be)
        dst = _gather(comm, part.dst, transport, be)
        del part
        t2 = time.perf_counter()
        # per-rank steps for the build's timings: the slowest rank's parse share, rank 0's, the exchange
        shares = comm.gather(t1 - t0, root=0)

        def finish():
            try:
                once = seen is None or not np.count_nonzero(seen != 1)
                n, s, d = finish_edges(plan, xp, src, dst, lines, once)
                stated = _stated_edges(plan)
                if stated is not None and int(s.shape[0]) != stated:  # (the one-rank reader words it)
                    raise _Anomaly(f"its first line states {stated} edges, {int(s.shape[0])} read")
            except _Anomaly as e:
                return _one_rank(be, path, fmt, num_vertices, plan, f"the GPU parser did not accept it ({e})")
            digest.check()  # the file must not have changed under the parse
            digest.resume()  # (paused since it started: io/digest.py)
            g = EdgeGraph(n=n, src=s, dst=d, name=name, digest=digest)
            g.meta.update(path=os.path.abspath(path), format=plan.fmt, parser=dev.name)
            g.meta["timings"] = {"parse share": max(shares), "parse share rank0": shares[0],
                                 "parse share fastest": min(shares), "exchange": t2 - t1}
            return g

        g = run_shared(comm, f"reading {name}", finish if me == 0 else None)
    except BaseException:
        if digest is not None:
            digest.cancel()
        raise
    if me == 0 and g.__dict__.get("_digest") is not digest:
        digest.cancel()  # the one-rank reader hashed the file itself
    return g if me == 0 else None
