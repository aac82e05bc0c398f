"""The partitioned build's read step: every rank keeps the edges it read, about 1/N of them, and
no rank gathers them (:func:`read_parts`, collective).

- **Text graphs** (``.gra``, edge lists also comma-separated, Matrix Market, uncompressed): rank 0 plans the read
  and splits the body into N byte ranges at line starts (:func:`distgrail.mpi.parse._plan`);
  each rank parses its range (:func:`distgrail.io.parse.read_text_range`: the CUDA kernels on a
  GPU backend, their NumPy twin on the CPU) and keeps the edges. The counts one parse checks
  over the whole file are combined: ``.gra`` vertex lines summed and the per-vertex line counts
  summed (allreduce, every vertex exactly once), Matrix Market entries summed (each rank mirrors
  its own symmetric entries), an edge list's n = the largest id + 1 over all ranks (allreduce
  MAX; ``--num-vertices`` or a header otherwise), as :func:`distgrail.io.parse.finish_edges`
  does for one rank; an edge list whose first line states its edge count (distgrail's writer,
  ``# distgrail edge list: N vertices, M edges``) must hold M edge lines over all ranks, else
  rank 0's one-rank reader words the error at line 1 (a file cut short), on every rank. Rank 0
  hashes the whole file in the background once the ranks have parsed it
  (:class:`~distgrail.io.digest.FileDigest`, joined when the index is assembled) and checks it
  did not change under the parse.
- **Binary ``.h5`` graphs**: each rank reads its block of CSR rows (balanced by edges, found by
  bisection over the file's row pointers: :func:`_row_block`), the row pointers of those rows
  only and their edges, in CRC blocks by a thread pool where the file allows
  (:func:`distgrail.io.binary._read_checked`); every rank checks the pointers' ends, each its own
  rows' order (together the whole array); on a GPU its ids go up and are checked there
  and its sources are made there from its row pointers, as one process reads a graph file onto
  its GPU (the host made them by ``repeat`` and uploaded both); a stored condensation is
  read by rank 0 (the condense step then reads it, as a one-rank build does).
- **Anything else** (compressed files: a stream has no byte ranges; node names, in-memory graphs), and a text file
  some rank's kernels flagged: rank 0 reads it with the one-rank reader (which reports bad input
  with file, line and value) and SCATTERS contiguous edge blocks; rank 0 holds every edge while
  it reads (its ``edges read`` says so in the per-rank report).

The result on every rank: an :class:`~distgrail.io.graph.EdgeGraph` of the whole graph's ``n``
and this rank's edges (device arrays on a GPU backend), with ``meta["m_total"]`` and
``meta["edges_read"]``; rank 0's also carries the name, digest and meta a one-rank read gives.
Errors are every rank's (:func:`~distgrail.mpi.errors.run_shared`).
"""

from __future__ import annotations

import os

import numpy as np

from ..arrays import to_host as _host
from .errors import mpi, run_shared

__all__ = ["read_parts"]


def _scatter(comm, be, g):
    """Rank 0's graph ``g`` (None elsewhere) split into contiguous edge blocks, one per rank."""
    from ..io.graph import EdgeGraph
    from .collectives import scatter_rows, split_counts

    me = comm.Get_rank()
    head = (int(g.n), int(g.m), np.dtype(g.src.dtype).str if isinstance(g.src, np.ndarray) else "<i4") \
        if me == 0 else None
    n, m, dt = comm.bcast(head, root=0)
    counts = split_counts(m, comm.Get_size())
    src = _host(g.src) if me == 0 else None
    dst = _host(g.dst) if me == 0 else None
    s = scatter_rows(comm, src, counts, (), dt)
    d = scatter_rows(comm, dst, counts, (), dt)
    del src, dst
    out = g if me == 0 else EdgeGraph(n=n, src=s, dst=d, name="", digest="")
    out.src, out.dst = be.asarray(s), be.asarray(d)
    out.meta["m_total"] = m
    out.meta["edges_read"] = m if me == 0 else int(counts[me])
    return out


def _rank0_reads(comm, be, graph, num_vertices, fmt, plan=None, why=None):
    from .parse import _one_rank
    from ..stages.phases import read_on

    name = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else type(graph).__name__
    if plan is not None:
        g = run_shared(comm, f"reading {name}", _one_rank if comm.Get_rank() == 0 else None, be, graph, fmt,
                       num_vertices, plan, why)
    else:
        g = run_shared(comm, f"reading the graph {name}", read_on if comm.Get_rank() == 0 else None, be, graph,
                       num_vertices, fmt)
    return _scatter(comm, be, g)


def _binary_file(path, fmt) -> bool:
    from ..errors import GraphFormatError
    from ..io.read import detect_format

    try:
        return fmt == "h5" or (fmt == "auto" and detect_format(path) == "h5")
    except (OSError, GraphFormatError):
        return False  # rank 0 reads alone and reports it


#: why a rank that cannot open the graph file had to (its error says)
EVERY_RANK_READS = "with --partition on every rank reads the graph"


def _h5_block(path, me, size, be=None):
    """This rank's block of CSR rows of a binary graph file: (n, m, src, dst, name, digest, stored).
    ``be`` a GPU backend and 32-bit ids: the edges checked and expanded on the device (the row
    pointers' block and the ids go up, the sources are made there: :func:`_rows_on_device`), as
    one process reads a graph file onto its GPU; else on the host."""
    from ..io.h5attrs import attr_text
    from ..errors import GraphFormatError
    from ..io.binary import _TIE, _damaged, _integer, _open, _read_checked, _source_digest, check_edge_count, \
        check_ids, dataset_of, vertex_count
    from ..io.graph import id_dtype
    from ..io.parse import open_body
    from .parse import on_this_rank

    on_this_rank(lambda: os.close(open_body(path)), me, EVERY_RANK_READS)()  # (missing here: said so, not "not HDF5")
    try:  # (HDF5's own failures, a damaged chunk or attribute, told as one process tells them)
        with _open(path) as f:
            n = vertex_count(f, path)
            ptr_set = dataset_of(f, "csr/indptr", path)
            stored = _integer(f.attrs[_TIE], _TIE, path) if _TIE in f.attrs else None
            m = int(dataset_of(f, "csr/indices", path).shape[0])
            check_edge_count(f, m, path)
            lo, hi = _row_block(ptr_set, n, m, me, size, path)
            # this rank's rows' offsets only (every rank read all n + 1 before: 8 bytes a vertex on
            # every rank), their piece of the CSR's CRC-32 the bytes lo..hi-1 (the last rank's to n)
            last = me + 1 == size
            (ptr,), ptr_piece = _read_checked(f, ("csr/indptr",), path, {"csr/indptr": (lo, hi + 1 if last else hi)})
            ptr_bytes = ((hi + 1 if last else hi) - lo) * ptr_set.dtype.itemsize
            end = () if last else (int(ptr_set[hi]),)  # (the next block's first offset)
            # in 0..m before the cast: an unsigned 64-bit offset past int64 must not wrap into order
            # (bisection lands on such a value: it is past every block's first edge)
            if any(not 0 <= x <= m for x in end) or (ptr.size and not 0 <= int(ptr.min()) <= int(ptr.max()) <= m):
                raise GraphFormatError("corrupt graph file: CSR arrays disagree with n and m", path=path)
            ptr = np.append(ptr.astype(np.int64), np.array(end, np.int64))
            if ptr.shape[0] > 1 and bool((ptr[1:] < ptr[:-1]).any()):  # (the rows' ends: _row_block)
                raise GraphFormatError("corrupt graph file: CSR arrays disagree with n and m", path=path)
            e0, e1 = int(ptr[0]), int(ptr[-1])
            # in CRC blocks by threads where the file allows (HDF5's slice read is one thread's), with
            # this rank's piece of the CSR's CRC-32 (rank 0 joins them: _check_csr)
            (dst,), piece = _read_checked(f, ("csr/indices",), path, {"csr/indices": (e0, e1)})
            name = attr_text(f.attrs.get("source_name", os.path.basename(path)))
            digest, has_dag = _source_digest(f), "condensation" in f
    except GraphFormatError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        raise _damaged(path, e) from None
    crc = {}
    if stored is not None:
        crc.update(ptr_piece=(ptr_piece, ptr_bytes), piece=(piece, int(dst.nbytes)), stored=stored)
    dt = id_dtype(n)
    if be is not None and be.is_gpu and dt == np.int32 and dst.size:
        src, dst = _rows_on_device(be, ptr - e0, dst, lo, n, path)
    else:
        check_ids(np, dst, n, path)  # (before the cast: a 64-bit id past n must not wrap into range)
        dst = dst.astype(dt, copy=False)
        src = np.repeat(np.arange(lo, hi, dtype=dt), np.diff(ptr))
    return n, m, src, dst, name, digest, has_dag, crc


def _row_block(ptr_set, n: int, m: int, me: int, size: int, path) -> tuple[int, int]:
    """Rows ``lo..hi-1`` of rank ``me`` of ``size``: about m / size edges each (the first row whose
    offset reaches the block's first edge, found by bisection over the file's offsets: a few
    dozen values read, not all n + 1), after the checks every rank makes of the offsets as a
    whole (n + 1 of them, from 0 to m); each rank checks its own rows' order (:func:`_h5_block`),
    and the blocks meet, so together they check the whole array. Bisection finds the same
    boundary for the two ranks that share it, and boundaries in rank order even where the
    offsets are out of order (that rank's check then refuses them)."""
    from ..errors import GraphFormatError

    if ptr_set.shape != (n + 1,) or int(ptr_set[0]) != 0 or int(ptr_set[n]) != m:
        raise GraphFormatError("corrupt graph file: CSR arrays disagree with n and m", path=path)

    def first_row(edge: int) -> int:  # bisect_left over the offsets
        a, b = 0, n
        while a < b:
            mid = (a + b) // 2
            if int(ptr_set[mid]) < edge:
                a = mid + 1
            else:
                b = mid
        return a

    lo = first_row(m * me // size) if me else 0
    hi = first_row(m * (me + 1) // size) if me + 1 < size else n
    return lo, hi


def _rows_on_device(be, ptr, ids, lo: int, n: int, path):
    """``(src, dst)`` as int32 device arrays of the rows ``lo..`` whose offsets from their first
    edge are ``ptr`` (host int64) and whose successor ids are ``ids`` (host, as stored): the ids
    checked in 0..n-1 before their cast, the sources made by
    :func:`~distgrail.io.binary.entry_rows` (no host ``repeat``, no upload of the sources)."""
    from ..io.binary import check_ids, entry_rows

    xp = be.xp
    with be.on_device():
        dst = be.asarray(ids)
        check_ids(xp, dst, n, path)
        dst = dst.astype(np.int32, copy=False)
        src = entry_rows(xp, be.asarray(ptr), np.int32)
        src += np.int32(lo)
    return src, dst


def _check_csr(path, crc, pieces) -> None:
    """Rank 0: the CSR's CRC-32 joined from the row pointers' and every rank's piece of the edges
    (contiguous, in rank order), against the file's ``csr_crc32`` (:func:`distgrail.io.binary.check_csr_crc`)."""
    from ..indexfile.layout import crc32_combine
    from ..io.binary import check_csr_crc

    if "stored" not in crc:  # (a file of an earlier release: no CRC to check)
        return
    got = 0
    for c, nbytes in [p[0] for p in pieces] + [p[1] for p in pieces]:  # the offsets', then the edges'
        got = crc32_combine(got, c, nbytes)
    check_csr_crc(crc["stored"], got, path)


def _read_h5(comm, be, path):
    from ..io.binary import read_condensation
    from ..io.graph import EdgeGraph

    me = comm.Get_rank()
    n, m, src, dst, name, digest, stored, crc = run_shared(comm, f"reading {path}", _h5_block, path, me,
                                                          comm.Get_size(), be)
    pieces = comm.gather((crc.get("ptr_piece"), crc.get("piece")), root=0)
    run_shared(comm, f"checking {path}", _check_csr if me == 0 else None, path, crc, pieces)
    edges_read = int(src.size)
    # (on the host where the ids are 64-bit: their upload's failure, out of memory, is every rank's)
    src, dst = run_shared(comm, f"uploading this rank's edges of {path}", lambda: (be.asarray(src), be.asarray(dst)))
    g = EdgeGraph(n=n, src=src, dst=dst, name=name if me == 0 else "", digest=digest if me == 0 else "")
    g.meta.update(m_total=m, edges_read=edges_read)
    if me == 0:
        g.meta.update(format="h5", path=os.path.abspath(path))
        if stored:
            g.meta["condensation"] = lambda: read_condensation(path)
    return g


def _combine(comm, plan, xp, part):
    """(n, src, dst) of this rank's part, with the whole-file checks of one parse; raises
    :class:`~distgrail.io.parse._Anomaly` on every rank alike when the one-rank reader must judge."""
    from ..dtypes import size_problem
    from ..io.parse import _Anomaly, _stated_edges

    MPI = mpi()
    src, dst = part.src, part.dst
    n = plan.n
    m = comm.allreduce(int(src.shape[0]), op=MPI.SUM)
    stated = _stated_edges(plan)  # (m is every rank's: all raise alike)
    if stated is not None and m != stated:
        raise _Anomaly(f"its first line states {stated} edges, {m} read")
    if plan.fmt == "gra":
        lines = comm.allreduce(int(part.vertex_lines), op=MPI.SUM)
        seen = np.ascontiguousarray(_host(part.seen), dtype=np.int32) if n else np.zeros(0, np.int32)
        total = np.empty_like(seen)
        comm.Allreduce([seen, MPI.INT32_T], [total, MPI.INT32_T], op=MPI.SUM)
        if lines != n or np.count_nonzero(total != 1):
            raise _Anomaly("vertex lines")
    elif plan.fmt == "mtx":
        if m != plan.nnz:
            raise _Anomaly("entries")
        if plan.symmetric:
            off = src != dst
            src, dst = xp.concatenate((src, dst[off])), xp.concatenate((dst, src[off]))
    elif n is None:
        top = max(int(src.max()), int(dst.max())) if src.shape[0] else -1
        n = comm.allreduce(top, op=MPI.MAX) + 1
        if m == 0:
            raise _Anomaly("no edge: the CPU reader says what an empty edge list needs")
    # every rank's own check (DISTGRAIL_MEMORY, or the machine, may differ between ranks), agreed:
    # one rank alone raising here went to the one-rank reader while the others went on (a hang)
    why = next((w for w in comm.allgather(run_shared(comm, "checking the graph's size", size_problem, int(n))) if w),
               None)
    if why:
        raise _Anomaly(f"{int(n):,} vertices: {why}")
    return int(n), src, dst, comm.allreduce(int(src.shape[0]), op=MPI.SUM)  # mirrored entries counted


def read_parts(comm, be, graph, num_vertices, fmt):
    """Collective: this rank's part of ``graph`` (module doc)."""
    from ..io.digest import FileDigest
    from ..io.graph import EdgeGraph
    from ..io.parse import _Anomaly, read_text_range
    from .parse import _device, _plan, on_this_rank
    from .placement import _text_file

    me, size = comm.Get_rank(), comm.Get_size()
    path = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else None
    # rank 0's file, read by every rank (the others may pass None, or another name of it)
    path = comm.bcast(os.path.abspath(path) if me == 0 and path is not None else None, root=0)
    kind = None
    if me == 0 and path is not None and os.path.isfile(path):
        kind = "text" if _text_file(path, fmt) else "h5" if _binary_file(path, fmt) else None
    kind = comm.bcast(kind, root=0)
    if kind == "h5" and num_vertices is None:
        return _read_h5(comm, be, path)
    if kind != "text":  # (an .h5 with --num-vertices too: rank 0's read refuses it, as one process does)
        return _rank0_reads(comm, be, graph, num_vertices, fmt)
    name = os.path.basename(path)
    plan, bounds = comm.bcast(run_shared(comm, f"planning the read of {name}", _plan if me == 0 else None,
                                         path, fmt, num_vertices, size), root=0)
    if bounds is None:  # not split: rank 0 reads
        return _rank0_reads(comm, be, graph, num_vertices, fmt)
    # paused until the parse is done: the two readers of one file slowed each other (io/digest.py)
    digest = run_shared(comm, f"hashing {name}", FileDigest if me == 0 else None, path, paused=True)
    try:
        dev = run_shared(comm, "setting up the parser", _device, be)
        part = run_shared(comm, f"parsing bytes {bounds[me]}:{bounds[me + 1]} of {name}",
                          on_this_rank(read_text_range, me, EVERY_RANK_READS), path, plan, bounds[me], bounds[me + 1],
                          dev)
        why = [w for w in comm.allgather(part.anomaly) if w]
        if not why:
            try:
                n, src, dst, m = _combine(comm, plan, dev.xp, part)
            except _Anomaly as e:
                why = [f"the GPU parser did not accept it ({e})"]
        if why:  # the one-rank reader judges the whole file (its error, or the rare file the kernels refuse)
            del part
            if digest is not None:
                digest.cancel()
            return _rank0_reads(comm, be, path, num_vertices, fmt, plan, why[0])
        run_shared(comm, f"reading {name}", digest.check if me == 0 else None)
        if digest is not None:
            digest.resume()
    except BaseException:
        if digest is not None:
            digest.cancel()
        raise
    g = EdgeGraph(n=n, src=src, dst=dst, name=name if me == 0 else "", digest=digest if me == 0 else "")
    g.meta.update(m_total=m, edges_read=int(src.shape[0]))
    if me == 0:
        g.meta.update(path=os.path.abspath(path), format=plan.fmt, parser=dev.name)
    return g
