"""Binary graph file (HDF5): the CSR of a graph and, once computed, its condensation, so later
runs skip text parsing and condensing.

Layout (``format = "distgrail-graph"``, ``format_version = 2``)::

    attrs    format, format_version, distgrail_version, n, m, source_name, source_digest,
             source_digest_algorithm ("blake3"; files of earlier releases: source_sha256 instead),
             csr_crc32 (the CRC-32 of the CSR's bytes, indptr then indices; files of earlier
             releases have none)
    csr/indptr            (n+1,) int64    successors of v: indices[indptr[v]:indptr[v+1]]
    csr/indices           (m,)   int32 (int64 when n >= 2^31 - 1), sorted per row, distinct
    condensation/         optional; attrs n_components, n_levels, csr_crc32, crc32; the arrays
                          of a :class:`distgrail.stages.condense.DAG`: comp, indptr, indices,
                          rindptr, rindices, level, level_ptr

A stored condensation is used only when it belongs to the CSR beside it: ``csr_crc32`` is the
CRC-32 of the CSR's bytes (indptr, then indices) it was computed from and ``crc32`` that of its own
arrays (in the order above); a reader compares both (a file edited with h5py, or one whose CSR was
replaced, is refused rather than indexed by another graph's components), and a condensation
without them (files of earlier releases) is not used: the graph is condensed again. The root's
``csr_crc32`` is checked by every read of the CSR (a flipped bit in ``csr/indices`` changed an
edge, and the index of the changed graph claimed the source's name and digest).

Its string attributes are fixed-length UTF-8, read back as bytes (those of earlier releases are
variable-length, read as str): no HDF5 global heap, whose damage could hang the reader.

Every dataset is contiguous and stored in the dtype the pipeline uses, so reading is a plain read
at disk speed. Version 1 files (CSR only, indices as the smallest unsigned type) are still read.
"""

from __future__ import annotations

import os

import numpy as np

from .._version import __version__
from ..errors import GraphFormatError, id_range
from ..gpu.memory import max_in_pieces, min_in_pieces, scan_in_place
from .graph import EdgeGraph, id_dtype
from .atomic import atomic_path
from .digest import split_digest
from .h5attrs import attr_text, create_h5, flushed, put_attr

__all__ = ["dataset_of", "vertex_count", "check_edge_count", "write_binary_graph", "write_binary_csr", "read_binary_graph", "read_condensation",
           "GRAPH_FORMAT", "GRAPH_FORMAT_VERSION", "refuse_node_labels"]

GRAPH_FORMAT = "distgrail-graph"
GRAPH_FORMAT_VERSION = 2
_READABLE = (1, 2)
_DAG_ARRAYS = ("comp", "indptr", "indices", "rindptr", "rindices", "level", "level_ptr")
#: condensation attributes: the CRC-32 of the CSR it was computed from, and of its own arrays
_TIE, _OWN = "csr_crc32", "crc32"
_CRC_READ = 64 << 20  # bytes per read when a file's CSR is checksummed from the file


def _crc_of(arrays) -> int:
    """The CRC-32 of the arrays' bytes one after another (C order): 4 MiB blocks on the CRC
    pool, joined (:func:`distgrail.indexfile.layout.crc32_combine`)."""
    from ..indexfile.layout import CRC_BLOCK, block_crcs, crc32_combine, crc_pool

    crc = 0
    with crc_pool() as pool:
        for a in arrays:
            a = np.ascontiguousarray(a)
            futures = block_crcs(a, CRC_BLOCK, pool)
            for k, fu in enumerate(futures):
                crc = crc32_combine(crc, fu.result(), min(CRC_BLOCK, a.nbytes - k * CRC_BLOCK))
    return crc


def _file_csr_crc(f, path) -> int:
    """:func:`_crc_of` the open file's ``csr/indptr`` and ``csr/indices``, read in pieces (a
    reader that holds a part of the CSR, or none of it, checks the stored condensation so). A large
    contiguous dataset: its CRC blocks read from the file by the CRC pool's threads, each into a
    buffer of its own, nothing kept (:func:`_file_blocks_crc`); else through HDF5 in pieces of
    ``_CRC_READ`` bytes."""
    from ..indexfile.layout import CRC_BLOCK, can_read_in_blocks, crc32, crc32_combine

    crc = 0
    for name in ("csr/indptr", "csr/indices"):
        d = dataset_of(f, name, path)
        blocks = _file_blocks_crc(d, name, path, CRC_BLOCK) if can_read_in_blocks(d, CRC_BLOCK) else None
        if blocks is not None:
            for value, nbytes in blocks:
                crc = crc32_combine(crc, value, nbytes)
            continue
        step = max(1, _CRC_READ // d.dtype.itemsize)
        buf = np.empty(min(step, d.shape[0]), dtype=d.dtype)
        for i in range(0, d.shape[0], step):
            k = min(step, d.shape[0] - i)
            d.read_direct(buf, np.s_[i:i + k], np.s_[0:k])
            crc = crc32_combine(crc, crc32(memoryview(buf[:k]).cast("B")), k * d.dtype.itemsize)
    return crc


def _file_blocks_crc(d, name, path, block: int) -> list | None:
    """``[(CRC-32, bytes), ...]`` of the ``block``-byte blocks of contiguous dataset ``d``'s bytes,
    in order, read by the CRC pool's threads from the file HDF5 has open (:func:`_descriptor`;
    ``os.preadv``, one buffer per task); None where HDF5's driver has no descriptor. A file that
    ends first is a GraphFormatError naming dataset ``name``; the first error stops the reads
    still queued."""
    from ..indexfile.layout import crc_pool, read_block

    fd = _descriptor(d)
    if fd is None:
        return None
    at, nbytes = int(d.id.get_offset()), int(d.nbytes)

    def one(start):
        return read_block(fd, memoryview(bytearray(min(block, nbytes - start))), at + start)

    pool = crc_pool()
    try:
        values = [_block_value(fu, name, path) for fu in [pool.submit(one, i) for i in range(0, nbytes, block)]]
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=True)
        os.close(fd)
    if any(v < 0 for v in values):
        raise GraphFormatError(f"damaged graph file: dataset {name!r} ends past the end of the file (truncated?)",
                               path=path)
    return [(v, min(block, nbytes - k * block)) for k, v in enumerate(values)]


def _block_value(future, name, path) -> int:
    """A block read's CRC-32 (-1: the file ended first); a storage error on the way (EIO, a file
    gone from a network mount) a GraphFormatError naming the file and the dataset, not a bare
    OSError from a thread."""
    try:
        return future.result()
    except OSError as e:
        raise GraphFormatError(f"cannot read dataset {name!r} of the graph file (storage error: "
                               f"{e.strerror or e})", path=path) from None


def _descriptor(d) -> int | None:
    """A descriptor of the file that holds dataset ``d``'s bytes, as HDF5 has it open: a copy
    (``os.dup``) of its driver's handle, so that the bytes read are those of the file an external
    link names and of the file HDF5 opened, even when ``path`` has been replaced since; None where
    the driver has no such handle (then HDF5 reads the dataset)."""
    try:
        return os.dup(int(d.file.id.get_vfd_handle()))
    except Exception:  # noqa: BLE001 - a driver without a POSIX descriptor (core, family, ...)
        return None


def write_binary_csr(path, n: int, indptr, indices, name: str = "", digest: str = "", dag=None) -> None:
    """Write a CSR (successors sorted and distinct) and optionally its condensation ``dag``;
    ``digest``: the source file's, ``"algorithm:hex"`` (:mod:`distgrail.io.digest`)."""

    m = int(indices.size)
    if indptr.shape != (n + 1,) or int(indptr[-1]) != m:
        raise GraphFormatError("CSR arrays disagree with n and m", path=os.fspath(path))
    if dag is not None and dag.n != n:
        raise GraphFormatError(f"condensation is of a graph of {dag.n} vertices, not {n}", path=os.fspath(path))
    size = indptr.nbytes + indices.nbytes + (64 << 10)
    if dag is not None:
        size += sum(getattr(v, "nbytes", 0) for v in vars(dag).values())
    with atomic_path(os.fspath(path), size) as tmp:
        with create_h5(tmp) as f:
            algorithm, hexd = split_digest(digest)
            # strings fixed-length, as an index file's (a variable-length one lives in HDF5's global
            # heap, whose damage can hang the reader); files of earlier releases still read
            for k, v in (("format", GRAPH_FORMAT), ("format_version", GRAPH_FORMAT_VERSION),
                         ("distgrail_version", str(__version__)), ("n", int(n)), ("m", m), ("source_name", str(name)),
                         ("source_digest_algorithm", algorithm), ("source_digest", hexd)):
                put_attr(f, k, v)
            indptr = np.asarray(indptr, dtype=np.int64)
            indices = np.asarray(indices, dtype=id_dtype(n))
            f.create_dataset("csr/indptr", data=indptr, track_times=False)
            f.create_dataset("csr/indices", data=indices, track_times=False)
            csr_crc = _crc_of((indptr, indices))
            f.attrs[_TIE] = np.uint32(csr_crc)
            if dag is not None:
                _write_dag(f, dag, csr_crc)
            flushed(f)  # (a failed write raises here, not in a destructor: io.h5attrs)


def _write_dag(f, dag, csr_crc: int) -> None:
    g = f.require_group("condensation")
    g.attrs["n_components"] = int(dag.C)
    g.attrs["n_levels"] = int(dag.n_levels)
    g.attrs[_TIE] = np.uint32(csr_crc)
    g.attrs[_OWN] = np.uint32(_crc_of(getattr(dag, k) for k in _DAG_ARRAYS))
    for k in _DAG_ARRAYS:
        g.create_dataset(k, data=getattr(dag, k), track_times=False)


def write_binary_graph(graph: EdgeGraph, path, dag=None, notify=None) -> None:
    """Write ``graph`` (repeated edges merged) and optionally its condensation ``dag``.

    Edges and DAG arrays on a GPU (CuPy) stay there until written: the CSR is made on the device
    (:func:`~distgrail.io.graph.edge_csr_xp`) and only the arrays the file stores are copied to
    the host. Should the GPU lack the memory for the CSR, it is made on the host (``notify`` gets
    a one-line reason). The file is the same, byte for byte, either way."""
    from .graph import edge_graph_csr

    refuse_node_labels(graph, path)
    if isinstance(graph.src, np.ndarray):
        indptr, indices = edge_graph_csr(graph)
    else:
        indptr, indices = _device_csr(graph, notify)
    if dag is not None and not all(isinstance(getattr(dag, k), np.ndarray) for k in _DAG_ARRAYS):
        import dataclasses

        from ..arrays import to_host

        dag = dataclasses.replace(dag, **{k: to_host(getattr(dag, k)) for k in _DAG_ARRAYS})  # what the file holds
    write_binary_csr(path, graph.n, indptr, indices, name=graph.name, digest=graph.digest, dag=dag)


def refuse_node_labels(graph, path, what: str = "a .h5 graph file") -> None:
    """Refuse to write a graph that has node labels (``meta["node_labels"]``: names, or integers
    other than 0..n-1) into a graph file, which holds vertex ids 0..n-1 only: the names would be
    dropped without a word, and an index of that file would then take ids, not the names. A
    GraphFormatError (exit 2) raised before anything is written."""
    labels = (getattr(graph, "meta", None) or {}).get("node_labels")
    if labels is None:
        return
    first = labels.values[0].item() if len(labels) else None
    raise GraphFormatError(f"the graph has node labels (e.g. {first!r}) and {what} holds integer vertex ids only: "
                           "the names would be lost; index the graph itself instead (distgrail index on its text file, "
                           "or build_index, keeps the names), or number the nodes 0..n-1 first", path=os.fspath(path))


def _device_csr(graph, notify):
    import cupy as cp

    from .graph import edge_csr_xp, edge_graph_csr

    try:
        with cp.cuda.Device(graph.src.device.id):
            indptr, indices = edge_csr_xp(cp, graph.src.astype(cp.int32, copy=False),
                                          graph.dst.astype(cp.int32, copy=False), graph.n)
            out = cp.asnumpy(indptr), cp.asnumpy(indices).astype(id_dtype(graph.n), copy=False)
            del indptr, indices
            return out
    except cp.cuda.memory.OutOfMemoryError as e:
        (notify or (lambda s: None))(f"making the CSR of {graph.name} on the CPU: the GPU ran out of memory ({e})")
    host = EdgeGraph(graph.n, cp.asnumpy(graph.src), cp.asnumpy(graph.dst), graph.name)
    return edge_graph_csr(host)


def _hdf5_signed(path) -> bool:
    """Whether ``path`` starts with HDF5's signature (a file cut short or damaged, not another kind)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def _open(path):
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise GraphFormatError(f"{'damaged graph file: HDF5 cannot open it' if _hdf5_signed(path) else 'not an HDF5 file'}"
                               f" ({e})", path=path) from None
    try:
        fmt = f.attrs.get("format")
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        f.close()
        raise _damaged(path, e) from None
    fmt = attr_text(fmt)
    if fmt != GRAPH_FORMAT:
        f.close()
        raise GraphFormatError(f"not a distgrail graph file (format={fmt!r}, expected {GRAPH_FORMAT!r})", path=path)
    version = f.attrs.get("format_version")
    version = None if version is None else _integer(version, "format_version", path, f)
    if version not in _READABLE:
        f.close()
        raise GraphFormatError(f"graph file format_version {version} is not supported: this distgrail "
                               f"{__version__} reads versions {', '.join(map(str, _READABLE))}", path=path)
    return f


def _integer(value, key: str, path, f=None) -> int:
    """Attribute ``key``'s ``value`` as an int, if it is one (an integer type, not bool; a float
    such as 3.9 or a string is refused, not cast)."""
    v = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        if f is not None:
            f.close()
        shown = v.item() if isinstance(v, np.generic) else v
        raise GraphFormatError(f"corrupt graph file: attribute {key!r} must be an integer, got {shown!r}", path=path)
    return int(v)


def vertex_count(f, path) -> int:
    """The open graph file's ``n`` attribute: present, an integer, not negative."""
    if "n" not in f.attrs:
        raise GraphFormatError("corrupt graph file: attribute 'n' (the vertex count) missing", path=path)
    n = _integer(f.attrs["n"], "n", path)
    if n < 0:
        raise GraphFormatError(f"corrupt graph file: attribute 'n' must be >= 0, got {n}", path=path)
    return n


def dataset_of(f, name, path):
    """Dataset ``name`` of the open graph file ``f``: present, 1-D, of an integer type (bool,
    float or strings are refused, never cast to ids)."""
    if name not in f:
        raise GraphFormatError(f"corrupt graph file: dataset {name!r} missing", path=path)
    d = f[name]
    if len(d.shape) != 1 or d.dtype.kind not in "iu":
        raise GraphFormatError(f"corrupt graph file: dataset {name!r} must be a 1-D array of integers, got "
                               f"{d.dtype} of shape {d.shape}", path=path)
    return d


def _read(f, name, path):
    d = dataset_of(f, name, path)
    out = np.empty(d.shape, dtype=d.dtype)
    if out.size:
        d.read_direct(out)
    return out


def _read_checked(f, names, path, ranges=None) -> tuple[list, int]:
    """The datasets ``names`` of the open file ``f`` (at ``path``), each read whole (or, for a
    1-D dataset named in ``ranges``, its values ``lo .. hi-1`` given there: a rank's block of
    rows), and the CRC-32 of their bytes one after another (what :func:`_crc_of` gives of them). A large contiguous one
    (what the writers store: :func:`~distgrail.indexfile.layout.can_read_in_blocks`) is read in
    CRC blocks by the CRC pool's threads, ``os.preadv`` into the array and the block's CRC-32 while
    it is in the cache, as the index reader does (from the file HDF5 has open: :func:`_descriptor`);
    HDF5 reads a dataset in one thread, and the checksum was a second pass. Smaller ones, or
    another layout, are read by HDF5. A file that ends before a block's bytes is a GraphFormatError
    naming the dataset; the first error stops the reads still queued."""
    from ..indexfile.layout import CRC_BLOCK, block_crcs, can_read_in_blocks, crc32_combine, crc_pool, read_block

    sets = [dataset_of(f, name, path) for name in names]
    arrays, crcs, fds = [], [], []
    pool = crc_pool()
    try:
        for name, d in zip(names, sets):
            lo, hi = (ranges or {}).get(name, (0, None))
            fd = _descriptor(d) if can_read_in_blocks(d, CRC_BLOCK) else None
            if fd is not None:
                fds.append(fd)
                a = np.empty(d.shape if hi is None else (hi - lo,), dtype=d.dtype.newbyteorder("<"))
                raw = memoryview(a.reshape(-1).view(np.uint8))
                at = int(d.id.get_offset()) + lo * d.dtype.itemsize
                futures = [pool.submit(read_block, fd, raw[i:i + CRC_BLOCK], at + i)
                           for i in range(0, len(raw), CRC_BLOCK)]
            else:
                a = _read(f, name, path) if hi is None else d[lo:hi]
                futures = block_crcs(a, CRC_BLOCK, pool)
            arrays.append(a)
            crcs.append(futures)
        crc = 0
        for name, a, futures in zip(names, arrays, crcs):
            for k, fu in enumerate(futures):
                value = _block_value(fu, name, path)
                if value < 0:
                    raise GraphFormatError(f"damaged graph file: dataset {name!r} ends past the end of the file "
                                           "(truncated?)", path=path)
                crc = crc32_combine(crc, value, min(CRC_BLOCK, a.nbytes - k * CRC_BLOCK))
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)  # (the first error: the blocks still queued not read)
        raise
    finally:
        pool.shutdown(wait=True)  # (every block read or cancelled: then the descriptors closed)
        for fd in fds:
            os.close(fd)
    return arrays, crc


def read_condensation(path, csr_crc: int | None = None):
    """The condensation stored in a graph file, as a :class:`distgrail.stages.condense.DAG`, or None
    when it has none or one not tied to its CSR (files of earlier releases: condensed again).
    ``csr_crc``: :func:`_crc_of` the file's CSR when the caller read it whole (else read from the
    file here). A condensation of another CSR, or whose arrays changed, is a GraphFormatError."""
    from ..stages.condense import DAG

    path = os.fspath(path)
    with _open(path) as f:
        if "condensation" not in f:
            return None
        g = f["condensation"]
        if _TIE not in g.attrs or _OWN not in g.attrs:
            return None
        tie, own = (_integer(g.attrs[k], f"condensation/{k}", path) for k in (_TIE, _OWN))
        if csr_crc is None:
            csr_crc = _file_csr_crc(f, path)
        if csr_crc != tie:
            raise GraphFormatError(f"corrupt graph file: its condensation was computed from another graph than its "
                                   f"CSR (condensation/{_TIE} {tie:#010x}, the CSR's CRC-32 {csr_crc:#010x}); "
                                   f"write the file again with 'distgrail convert'", path=path)
        got_arrays, got = _read_checked(g, _DAG_ARRAYS, path)
        arrays = dict(zip(_DAG_ARRAYS, got_arrays))
        n = vertex_count(f, path)
    if got != own:
        raise GraphFormatError(f"corrupt graph file: the condensation's arrays changed since they were written "
                               f"(condensation/{_OWN} {own:#010x}, computed {got:#010x}); write the file again "
                               f"with 'distgrail convert'", path=path)
    arrays = {k: a.astype(a.dtype.newbyteorder("="), copy=False) for k, a in arrays.items()}  # (a big-endian file's)
    C = arrays["indptr"].size - 1
    if arrays["comp"].shape != (n,) or arrays["level"].shape != (C,) or int(arrays["indptr"][-1]) != \
            arrays["indices"].size or arrays["rindptr"].shape != (C + 1,):
        raise GraphFormatError("corrupt graph file: condensation arrays disagree", path=path)
    dag = DAG(n=n, **arrays)
    dag.meta["stored"] = True
    return dag


def _source_digest(f) -> str:
    """``"algorithm:hex"`` of the source file, from this release's attributes or an earlier
    release's ``source_sha256``."""
    def text(key):
        v = f.attrs.get(key, "")
        return attr_text(v)

    if "source_digest" in f.attrs:
        hexd = text("source_digest")
        return f"{text('source_digest_algorithm')}:{hexd}" if hexd else ""
    sha = text("source_sha256")
    return f"sha256:{sha}" if sha else ""


def _damaged(path, e) -> GraphFormatError:
    """A graph file HDF5 fails to read (a damaged attribute or dataset: h5py raises OSError,
    RuntimeError, KeyError or ValueError), as the error it is to the user."""
    return GraphFormatError(f"damaged graph file: HDF5 cannot read it ({type(e).__name__}: {e}); write the file "
                            f"again with 'distgrail convert'", path=path)


def read_binary_graph(path, be=None) -> EdgeGraph:
    """Read a graph file. If it holds a condensation, ``graph.meta["condensation"]`` is a function
    that reads it (``condense`` calls it instead of recomputing). ``be``: a GPU
    :class:`~distgrail.gpu.backend.Backend` makes the edges device arrays, checked and expanded
    there (:func:`entry_rows`) when they fit its memory (a file with a condensation, or one too big,
    is read on the host)."""
    path = os.fspath(path)
    try:
        with _open(path) as f:
            n = vertex_count(f, path)
            (indptr, indices), csr_crc = _read_checked(f, ("csr/indptr", "csr/indices"), path)
            check_edge_count(f, int(indices.size), path)
            name = f.attrs.get("source_name", os.path.basename(path))
            name = attr_text(name)  # (fixed-length: bytes)
            digest = _source_digest(f)
            has_dag = "condensation" in f
            stored = _integer(f.attrs[_TIE], _TIE, path) if _TIE in f.attrs else None
    except GraphFormatError:
        raise
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        raise _damaged(path, e) from None
    tie = csr_crc if has_dag or stored is not None else None  # (the CSR as stored, before any cast)
    check_csr_crc(stored, tie, path)
    dt = id_dtype(n)
    check_offsets(np, indptr, n, indices.size, path, order=False)  # (the order: on the device, where it goes)
    indptr = indptr.astype(np.int64, copy=False)  # (offsets stored unsigned: checked below 2^63, then int64)
    # (64-bit ids stay on the host: the GPU condensation takes 32-bit ones)
    up = (be is not None and be.is_gpu and not has_dag and indices.size and dt == np.int32
          and _fits(be, indptr, indices, dt))
    edges = None
    if up:
        try:
            with be.on_device():
                edges = _edges(be.xp, be.asarray(indptr), be.asarray(indices), n, dt, path)
        except _oom_error(be):
            edges = None  # (the estimate fell short: the host read; the condensation judges what fits)
    src, dst = edges if edges is not None else _edges(np, indptr, indices, n, dt, path)
    g = EdgeGraph(n=n, src=src, dst=dst, name=str(name), digest=digest)
    g.meta["format"] = "h5"
    g.meta["path"] = os.path.abspath(path)
    if has_dag:
        g.meta["condensation"] = lambda: read_condensation(path, tie)
    return g


def check_csr_crc(stored, computed, path) -> None:
    """Refuse a CSR whose bytes are not those written (``stored``: the root's ``csr_crc32``, None
    in files of earlier releases)."""
    if stored is not None and computed != stored:
        raise GraphFormatError(f"corrupt graph file: csr/indptr and csr/indices changed since they were written "
                               f"({_TIE} {stored:#010x}, computed {computed:#010x}); write the file again with "
                               f"'distgrail convert'", path=path)


def check_edge_count(f, m: int, path) -> None:
    """The file's ``m`` attribute, where it has one, against the ``m`` edges csr/indices holds
    (every reader: one process, and each rank of a partitioned read)."""
    if "m" in f.attrs and _integer(f.attrs["m"], "m", path) != m:
        raise GraphFormatError(f"corrupt graph file: attribute 'm' says {_integer(f.attrs['m'], 'm', path):,} "
                               f"edges, csr/indices holds {m:,}", path=path)


def check_offsets(xp, ptr, n: int, m: int, path, order: bool = True) -> None:
    """GraphFormatError unless ``ptr`` (on ``xp``) is a CSR offset array of ``n`` rows and ``m``
    entries: shape (n+1,), from 0 to m, non-decreasing (``order``)."""
    if (ptr.shape != (n + 1,) or int(ptr[0]) != 0 or int(ptr[-1]) != m
            or (order and ptr.shape[0] > 1 and bool((ptr[1:] < ptr[:-1]).any()))):
        raise GraphFormatError("corrupt graph file: CSR arrays disagree with n and m", path=path)


def check_ids(xp, ix, n: int, path) -> None:
    """GraphFormatError unless every id in ``ix`` (on ``xp``) is in 0..n-1."""
    if ix.shape[0] and (min_in_pieces(xp, ix) < 0 or max_in_pieces(xp, ix) >= n):
        raise GraphFormatError(f"corrupt graph file: successor ids {id_range(n, lead='outside')}", path=path)


def _edges(xp, ptr, ix, n: int, dt, path):
    """``(src, dst)`` of the checked CSR ``(ptr, ix)`` on ``xp``'s arrays (NumPy: ``np.repeat``)."""
    check_offsets(xp, ptr, n, int(ix.shape[0]), path)
    check_ids(xp, ix, n, path)
    src = np.repeat(np.arange(n, dtype=dt), np.diff(ptr)) if xp is np else entry_rows(xp, ptr, dt)
    return src, ix.astype(dt, copy=False)


def entry_rows(xp, indptr, dtype, limit: int = 2**31 - 1):
    """The row of every entry of a CSR with offsets ``indptr`` (non-decreasing, from 0): what
    ``repeat(arange(n), diff(indptr))`` gives, as ``dtype``, without CuPy's ``repeat`` (which
    takes its counts through the host) or atomics. At the first entry of each non-empty row, the
    step from the previous non-empty row's id (distinct places: a plain assignment), then an
    inclusive prefix sum in place (a piece at a time, each at most ``limit``:
    :func:`~distgrail.gpu.memory.scan_in_place`; GPU tests pass a small one), so the read holds one
    row id an entry, not two. NumPy runs the same steps (the twin; the host reader uses
    ``np.repeat``)."""
    m = int(indptr[-1]) if indptr.shape[0] else 0
    marks = xp.zeros(m, dtype=dtype)
    if m:
        rows = xp.flatnonzero(indptr[1:] > indptr[:-1])  # the non-empty rows, in order
        step = xp.empty(rows.shape[0], dtype=dtype)
        step[0] = rows[0]
        step[1:] = rows[1:] - rows[:-1]
        marks[indptr[rows]] = step
        del rows, step
    return scan_in_place(xp, marks, limit)


def _oom_error(be):
    """The backend's out-of-memory exception (CuPy's; MemoryError for anything else)."""
    memory = getattr(getattr(be.xp, "cuda", None), "memory", None)
    return getattr(memory, "OutOfMemoryError", MemoryError)


def _fits(be, indptr, indices, dt) -> bool:
    """The file's CSR, the rows and the ids as ``dt`` fit the GPU's free memory now (else the host
    reads it; the condensation then judges what fits)."""
    from ..gpu.memory import GpuMemoryError, ensure_fits

    from ..gpu.memory import working_piece

    n, m, item = int(indptr.shape[0]), int(indices.size), np.dtype(dt).itemsize
    # the CSR as stored, the rows' marks and one piece of their scan, the ids cast where they are
    # not of the rows' type; per vertex the comparisons and the non-empty rows' ids, steps and starts
    cast = m * item if indices.dtype != dt else 0
    need = indptr.nbytes + indices.nbytes + (m + working_piece(m)) * item + cast + 40 * n
    try:
        with be.on_device():
            ensure_fits(need, "reading the graph file onto the GPU")
    except GpuMemoryError:
        return False
    return True
