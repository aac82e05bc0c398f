"""The patched layout: an index whose main file holds only the rows an update changed, as
patches over an un-patched index file (its *base*) kept beside it by a hard link.

An update that keeps the component ids changes rows, not whole datasets; writing the whole index
again costs the page cache's write of every byte, while the rows it changed are a fraction of
them (docs/design.md, "A change-only file"). :func:`write_patched_index` writes only those::

    <index>                 main file: the new index's root attributes and seals, the patch
    <index>.<tag>.base      a hard link to the base index (same inode: nothing copied)

The main file holds, beside the index's root attributes (the very ones a whole write stores):

- ``patch_base`` (the link's name), ``patch_build`` (the patch's random id; ``<tag>`` is its first
  8 hex digits, :func:`~distgrail.indexfile.bases.base_name`), ``patch_base_seal`` and
  ``patch_base_attributes`` (the base's two seals: a base replaced since is seen), ``patch_seal``
  (BLAKE3 over these, the main file's own datasets and the patch groups' attributes,
  :func:`~distgrail.indexfile.bases.patch_seal`);
- datasets written whole at their own names (small ones an update writes anew: ``updates/edges``,
  ``updates/log``, ``supports/ids``; and any dataset whose stored type the new counts change, e.g.
  ``dag/level`` once the levels outgrow its type), each with its checksums as a whole write gives
  them;
- ``/patch/<dataset>`` groups: ``rows`` (sorted, distinct, along the rows axis: axis 1 of
  ``labels/intervals``, else axis 0) and ``values`` (the new rows, in the dataset's stored type);
  ``/patch/dag/indices`` holds DAG rows written again (``rows``, ``offsets``, ``values``: the
  entries of row ``rows[i]`` are ``values[offsets[i]:offsets[i+1]]``) and ``/patch/dag/indptr``
  none (the CSR is rebuilt around them). Each group's attributes ``kind``, ``dtype``, ``shape``,
  ``crc32_block`` and ``crc32`` are the result dataset's: what a whole write of it stores.

**Seals.** ``crc32_of_datasets`` and ``blake3_of_attributes`` are the patched index's as read:
equal to those :func:`~distgrail.indexfile.write.write_index_file` writes for the same arrays and
attributes written whole. The datasets' seal is over the base's entries of the datasets the patch
leaves alone, the main file's whole datasets and the groups' entries (whose block CRC-32s the
writer computed over the patched bytes: the blocks a patched row touches, the others the base's);
the attributes' seal leaves out the ``patch_`` attributes, which ``patch_seal`` covers.

**Reading** (:mod:`~distgrail.indexfile.patch_read`, from :func:`~distgrail.indexfile.read.read_index_file`
and so every reader): the base is read and checked against its own checksums, the main file's
datasets against the main file's, the patches scattered in (a vectorised scatter, the CSR rebuilt
around the DAG rows), then the usual checks of an index run on the result. A base missing, moved,
replaced (its seals differ) or itself patched is an IndexFormatError naming the file.
``distgrail convert --layout single`` writes the result whole: one plain file.

**Keep them together.** The main file and its base link are one index, as a split index's main
file and parts: kept in one directory (a copy or ``mv`` within it keeps the link's name in the
main file, which still finds it; a main file moved elsewhere without its link cannot be read).
Removing the index is removing both. A link goes by itself once no index file in its directory
names it (:func:`~distgrail.indexfile.bases.remove_bases`, after every index written there): a
later patch over the same base writes a new main file and a new link, and the old link goes.

**Written atomically.** The link is made first (held provisional: a signal removes it), then the
main file is written under a temporary name and renamed into place, the link settled in the same
step; a failure removes both, and an index that was at the path stays whole (its own link, if
patched, is untouched). When the path is the base itself (an update in place of an index written
whole), the link keeps the old inode while the new main file takes its name. A write killed
outright leaves its link and marker (``.<index>.<tag>.pending-PID``), removed with the next index
written there. When the link cannot be made (another file system, no permission)
:class:`~distgrail.indexfile.bases.PatchNotPossible` says so before anything is written: the
caller writes the index whole instead. A split base is refused the same way (patches are over a
one-file index).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import DistGrailError
from ..io.atomic import atomic_path, provisional
from ..io.h5attrs import create_h5, flushed, put_attr
from .bases import (PATCH_BASE, PATCH_BASE_ATTRS, PATCH_BASE_SEAL, PATCH_BUILD, PATCH_GROUP, PATCH_SEAL,
                    PatchNotPossible, base_name, base_path, patch_base, patch_seal)
from .layout import (ATTRS_SEAL, FORMAT, FORMAT_VERSION, LIBVER, SEAL, attributes_seal, block_crcs, block_size,
                     can_write_in_blocks, crc32, crc_pool, dataset_order, datasets_seal, entry, read_block,
                     stored_types)
from .patch_read import AXIS1, csr_rows_checked, csr_rows_replaced, replace_rows

__all__ = ["write_patched_index", "patch_base", "PatchNotPossible"]


def write_patched_index(path, base, attrs: dict, rows: dict, dag=None, whole: dict | None = None,
                        progress=None, prior: dict | None = None, crcs: dict | None = None) -> None:
    """Write the index at ``path`` as patches over the un-patched one-file index ``base``
    (module doc). ``attrs``: the new index's root attributes (all of them, as
    :func:`~distgrail.indexfile.write.write_index_file` takes ``meta``); ``rows``: ``{dataset:
    (rows, values)}``, rows sorted distinct int64 along the rows axis, values the new rows (cast
    to the dataset's stored type; a value that does not fit it is a DistGrailError); ``dag``:
    None or ``(rows, indptr, indices)``, those DAG rows' new entries (``indptr``: ``len(rows) + 1``
    offsets from 0); ``whole``: datasets written whole in the main file. Rows are relative to the
    base (every update's since it, for a base already patched: pass ``patch_base(path)``).
    ``progress(text)``: told each step. ``prior``: ``{dataset: (array, crc32_block, crc32)}``, the
    whole dataset as it was before this update (the index the update read, in memory) and the
    block CRC-32s of those bytes: the patched blocks' CRC-32s are then made from the changed bytes
    alone (:mod:`~distgrail.indexfile.crc_delta_jit`), without reading the base's blocks (a
    ``prior`` of another shape, type or block size is not used). ``crcs``: ``{dataset: (crc32_block,
    crc32s, dtype, shape)}`` of the result's datasets computed where they are (an update's swept
    arrays on the GPU: :func:`~distgrail.stages.checksums.block_crcs_cuda`), taken as they are for
    those patched by rows and, both given, for the DAG's CSR, which is then not rebuilt here (an
    entry of another type, shape, block size or count than the dataset written is not used). :class:`PatchNotPossible` (before anything is written):
    no hard link of ``base`` can be made beside ``path``, or ``base`` cannot be patched (split, of
    an earlier release, other vertex or component counts or dims): write the index whole."""
    path, base = os.fspath(path), os.fspath(base)
    say = progress or (lambda text: None)
    whole = dict(whole or {})
    rows = {k: rv for k, rv in rows.items() if np.asarray(rv[0]).size}  # (no row changed: the base's as it is)
    if dag is not None and not np.asarray(dag[0]).size:
        dag = None
    src = _Base(path, base)
    try:
        _write(path, base, attrs, rows, dag, whole, say, src, prior or {}, crcs or {})
    finally:
        src.close()


def _write(path, base, attrs, rows, dag, whole, say, src, prior, known) -> None:
    """:func:`write_patched_index`'s work over the open base ``src``."""
    types = stored_types(attrs)
    for k in ("n_vertices", "n_components", "dims"):
        if int(attrs[k]) != int(src.attrs[k]):
            raise PatchNotPossible(f"{path}: a patch keeps {k} ({src.attrs[k]} in the base {base}), got {attrs[k]}")
    unknown = [k for k in rows if k not in src.names or k in ("dag/indptr", "dag/indices")] + \
        [k for k in whole if k in rows]
    if unknown:
        raise DistGrailError(f"{path}: cannot patch /{unknown[0]} by rows (not in the base {base}, the DAG's CSR "
                             f"(give dag=), or also given whole)")
    groups, data = {}, {}  # patch groups' attributes; the main file's datasets by name
    with crc_pool() as pool:
        say("patched rows")
        for name in src.names:
            if name in whole or name in ("dag/indptr", "dag/indices") and dag is not None:
                continue
            t = np.dtype(types.get(name, src.dtype(name)))
            if t == src.dtype(name) and name not in rows:
                continue  # (the base's, as it is)
            if t == src.dtype(name):  # rows patched in the base's type
                r, v = _rows(path, name, rows[name], t, src)
                data[f"{PATCH_GROUP}/{name}/rows"], data[f"{PATCH_GROUP}/{name}/values"] = r, v
                got = _known(known, name, src.shape(name), t)
                groups[name] = _group("rows", src, name, src.shape(name),
                                      got or _patched_crcs(src.array(name), name, r, v, pool, src.entries[name],
                                                           src.fd, src.at[name][2], prior.get(name)))
                continue
            full = _cast(path, name, src.array(name), t)  # a new stored type: written whole
            if name in rows:
                replace_rows(full, name, *_rows(path, name, rows[name], t, src))
            whole[name] = full
        if dag is not None:
            say("DAG rows")
            _dag(path, attrs, dag, src, types, data, groups, pool, known)
        say("main file")
        _write_main(path, base, attrs, types, src, whole, data, groups, pool)


class _Base:
    """The base file's root attributes, and each dataset's type, shape, entry and bytes."""

    def __init__(self, path, base):
        import h5py

        if not os.path.isfile(base):
            raise DistGrailError(f"{path}: the base index {base} is no file")
        with h5py.File(base, "r") as f:
            a = f.attrs
            fmt = a.get("format")
            fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
            if fmt != FORMAT:
                raise DistGrailError(f"{path}: the base {base} is not a distgrail index")
            if PATCH_BASE in a:
                raise DistGrailError(f"{path}: the base {base} is itself patched: patch its base, "
                                     f"patch_base({base!r}), with every row changed since it")
            if "layout" in a:
                raise PatchNotPossible(f"{path}: the base {base} is a split index: patches are written over a "
                                       f"one-file index only")
            if SEAL not in a or ATTRS_SEAL not in a or int(a.get("format_version", 0)) != FORMAT_VERSION:
                raise PatchNotPossible(f"{path}: the base {base} is of an earlier release (no seals): write whole")
            self.attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
            self.entries, self.at = {}, {}

            def look(name, obj):
                if isinstance(obj, h5py.Dataset):
                    self.entries[name] = entry(obj)[0]
                    off = obj.id.get_offset() if obj.size and obj.chunks is None and obj.compression is None else None
                    self.at[name] = (obj.dtype, obj.shape, off)

            f.visititems(look)
        self.path, self.names = base, dataset_order(self.entries)
        self.fd = os.open(base, os.O_RDONLY)  # (closed with the process's write: close())

    def close(self):
        os.close(self.fd)

    def dtype(self, name):
        return np.dtype(self.at[name][0])

    def shape(self, name):
        return tuple(int(x) for x in self.at[name][1])

    def array(self, name):
        """The dataset's values: a read-only map of the file's bytes (else read)."""
        import h5py

        dt, shape, off = self.at[name]
        if off is not None and dt.byteorder != ">":
            return np.memmap(self.path, dtype=dt, mode="r", offset=int(off), shape=shape)
        with h5py.File(self.path, "r") as f:
            return f[name][()]


def _cast(path, name, values, t) -> np.ndarray:
    """``values`` as type ``t``, a DistGrailError when one does not fit it."""
    v = np.asarray(values)
    t = np.dtype(t)
    if v.dtype.kind not in "iub":
        raise DistGrailError(f"{path}: the values of /{name} must be integers, got {v.dtype}")
    if v.size and v.dtype != t and not np.can_cast(v.dtype, t):
        lo, hi, info = int(v.min()), int(v.max()), np.iinfo(t)
        if lo < info.min or hi > info.max:
            raise DistGrailError(f"{path}: /{name} holds {lo if lo < info.min else hi}, which its stored type {t} "
                                 f"cannot hold: write the index whole, or give the counts (attributes) that "
                                 f"make its type larger")
    return np.asarray(v, dtype=t)  # (no copy where the type is the stored one: the values are only written)


def _rows(path, name, given, t, src) -> tuple:
    """``(rows, values)`` of dataset ``name`` checked against the base's shape, values cast to ``t``."""
    from .patch_read import _check_rows

    r, v = given
    shape = src.shape(name)
    ax = 1 if name in AXIS1 else 0
    try:
        r = _check_rows(r, shape[ax])
    except ValueError as e:
        raise DistGrailError(f"{path}: /{name}: {e}") from None
    want = shape[:ax] + (r.size,) + shape[ax + 1:]
    if np.shape(v) != want:
        raise DistGrailError(f"{path}: /{name}: values of shape {np.shape(v)}, expected {want}")
    return r, _cast(path, name, v, t)


def _group(kind, src, name, shape, crcs) -> dict:
    """A patch group's attributes: the result dataset's entry (``crcs``: (block, list) or None)."""
    g = {"kind": kind, "dtype": src.entries[name][0], "shape": np.asarray(shape, dtype=np.int64)}
    if crcs is not None:
        g["crc32_block"], g["crc32"] = int(crcs[0]), np.asarray(crcs[1], dtype=np.uint32)
    return g


def _flat(a, name):
    """Dataset ``a`` as a 2-D array of rows as its bytes run (``labels/intervals``: one row per
    dimension and component)."""
    return a.reshape(-1, 2) if name in AXIS1 else a.reshape(a.shape[0], -1)


def _patched_crcs(base, name, rows, values, pool, had, fd=None, at=None, prior=None):
    """``(block, CRC-32 of every block)`` of dataset ``base`` with ``rows`` set to ``values``: the
    blocks a patched row touches computed over the patched bytes, the others the base's own
    (``had``: its entry), or from its bytes where it has none. Every block is one task of ``pool``
    (find its rows, copy, scatter, CRC-32): no pass over all the rows on one thread.
    ``fd``, ``at``: the base file open and the dataset's offset in it (blocks read, not mapped).
    ``prior``: ``(array, block, crc32s)`` of the dataset before the update: every block's CRC-32
    from the changed bytes alone (:func:`_crcs_from_changes`) where it fits."""
    nbytes = int(base.nbytes)
    if not nbytes:
        return None
    block = block_size(nbytes)
    flat = _flat(base, name)
    # rows of (dims, C, 2) along axis 1: row r of dimension d is flat row d*C + r; else one "dimension"
    dims, C = (base.shape[0], base.shape[1]) if name in AXIS1 else (1, flat.shape[0])
    vals = values.reshape(dims, rows.size, -1)
    rb = flat.shape[1] * flat.dtype.itemsize
    n_blocks = -(-nbytes // block)
    got = _crcs_from_changes(base, rows, vals, prior, block, n_blocks, dims, C, rb) if prior is not None else None
    if got is not None:
        return block, got
    raw = memoryview(np.asarray(base).reshape(-1).view(np.uint8))
    old = np.asarray(had[3]) if had[3] is not None and had[2] is not None and int(had[2]) == block else None
    old = old if old is not None and old.shape == (n_blocks,) else None

    def one(k):
        b0, b1 = k * block, min(nbytes, (k + 1) * block)
        r0, r1 = b0 // rb, -(-b1 // rb)  # the flat rows the block's bytes fall in
        hits = []
        for d in range(r0 // C, min(dims, (r1 - 1) // C + 1)):
            i0, i1 = np.searchsorted(rows, [max(r0, d * C) - d * C, min(r1, (d + 1) * C) - d * C])
            if i1 > i0:
                hits.append((d, int(i0), int(i1)))
        if not hits:
            return int(old[k]) if old is not None else crc32(raw[b0:b1])
        chunk = np.empty((r1 - r0,) + flat.shape[1:], flat.dtype)
        if at is None or read_block(fd, memoryview(chunk.reshape(-1).view(np.uint8)), at + r0 * rb) < 0:
            chunk[...] = flat[r0:r1]  # (read, not mapped: no page faults; a map where no offset is known)
        for d, i0, i1 in hits:
            chunk[rows[i0:i1] + (d * C - r0)] = vals[d, i0:i1]
        return crc32(memoryview(chunk.reshape(-1).view(np.uint8))[b0 - r0 * rb:b1 - r0 * rb])

    return block, list(pool.map(one, range(n_blocks)))


#: bytes of a block read, patched and checksummed that cost about as much as one changed row's
#: CRC-32 from its bytes alone (:func:`_crcs_from_changes`; docs/benchmarks.md, session 57): the
#: changes' path is taken when its rows cost less than the blocks they touch
ROW_BYTES = 600


def _crcs_from_changes(base, rows, vals, prior, block, n_blocks, dims, C, rb):
    """The CRC-32 of every block of ``base`` with ``rows`` set to ``vals`` (``(dims, len(rows),
    ...)``), from ``prior`` (the array before, its block size and CRC-32s) and the changed bytes
    alone, over the host threads; None when ``prior`` does not fit (shape, type, block size, not
    contiguous), when the rows would cost more than reading the blocks they touch (at most one
    a row; :data:`ROW_BYTES`) or numba is not there (the caller reads the blocks instead): a few
    rows in a large dataset take this path, an update that touches every block does not."""
    from ..arrays import HOST_THREADS, _run_pieces
    from ..jit import load

    flat_rows = rows.size * dims
    if flat_rows * ROW_BYTES > min(flat_rows, n_blocks) * block:
        return None
    ref, pblock, crcs = prior
    ref, crcs = np.asarray(ref), np.asarray(crcs) if crcs is not None else None
    if (ref.shape != base.shape or ref.dtype != base.dtype or not ref.flags.c_contiguous or pblock is None
            or int(pblock) != block or crcs is None or crcs.shape != (n_blocks,)):
        return None
    jit = load("distgrail.indexfile.crc_delta_jit", "patch checksums", warn=False)
    if jit is None:
        return None
    tab = jit.table()
    shifts = jit.zero_shifts(block, tab)
    new = np.ascontiguousarray(vals).view(np.uint8).reshape(dims, rows.size, rb)
    out = np.empty(n_blocks, np.int64)
    T = max(1, min(4 * HOST_THREADS, n_blocks))
    cuts = [k * n_blocks // T for k in range(T + 1)]
    args = (crcs.astype(np.int64), np.asarray(rows, np.int64), dims, C, rb, new, ref.reshape(-1).view(np.uint8),
            block, int(base.nbytes), tab, shifts, out)  # (made once, shared by every piece)
    _run_pieces(jit.block_crcs, [(cuts[k], cuts[k + 1], *args) for k in range(T)])
    return [int(x) for x in out]


def _known(known, name, shape, t):
    """``(block, CRC-32s)`` of dataset ``name`` of ``shape`` and type ``t`` given in ``known``
    (:func:`write_patched_index`'s ``crcs``), or None when not given, or given for another type,
    shape, block size or block count (the caller computes them)."""
    got = known.get(name)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(t).itemsize
    if got is None or not nbytes or len(got) != 4:
        return None
    block, values, dtype, of = int(got[0]), [int(x) for x in got[1]], np.dtype(got[2]), tuple(int(x) for x in got[3])
    if dtype != np.dtype(t) or of != tuple(int(x) for x in shape):
        return None
    return (block, values) if block == block_size(nbytes) and len(values) == -(-nbytes // block) else None


def _dag(path, attrs, dag, src, types, data, groups, pool, known) -> None:
    """The DAG rows written again (``/patch/dag/indices``) and the result CSR's checksums (from
    ``known`` when it has both for the result's types and shapes: the CSR is then not rebuilt,
    only its edges counted)."""
    r, off, v = dag
    t = np.dtype(types["dag/indices"])
    if t != src.dtype("dag/indices") or np.dtype(types["dag/indptr"]) != src.dtype("dag/indptr"):
        raise PatchNotPossible(f"{path}: the DAG's stored types change: write the index whole")
    v = _cast(path, "dag/indices", v, t)
    base_ip = src.array("dag/indptr")
    try:
        r, off, v = csr_rows_checked(base_ip, r, off, v)
        edges = int(src.shape("dag/indices")[0]) - int((base_ip[r + 1].astype(np.int64) - base_ip[r]).sum()) + v.size
        given = [_known(known, n, shape, src.dtype(n)) for n, shape in
                 (("dag/indptr", src.shape("dag/indptr")), ("dag/indices", (edges,)))]
        ip = ix = None
        if None in given:
            ip, ix = csr_rows_replaced(base_ip, src.array("dag/indices"), r, off, v)
            given = [None, None]
    except ValueError as e:
        raise DistGrailError(f"{path}: the DAG rows: {e}") from None
    if edges != int(attrs["n_dag_edges"]):
        raise DistGrailError(f"{path}: the DAG rows leave {edges} edges, the attributes say "
                             f"n_dag_edges={attrs['n_dag_edges']}")
    g = f"{PATCH_GROUP}/dag/indices"
    data[f"{g}/rows"], data[f"{g}/offsets"], data[f"{g}/values"] = \
        np.asarray(r, np.int64), np.asarray(off, np.int64), v
    for name, a, shape, crcs in (("dag/indptr", ip, src.shape("dag/indptr"), given[0]),
                                 ("dag/indices", ix, (edges,), given[1])):
        if crcs is None and a.size:
            a = np.ascontiguousarray(a.astype(src.dtype(name), copy=False))
            b = block_size(a.nbytes)
            crcs = (b, [x.result() for x in block_crcs(a, b, pool)])
        groups[name] = _group("csr" if name == "dag/indices" else "derived", src, name, shape, crcs)


def _write_main(path, base, attrs, types, src, whole, data, groups, pool) -> None:
    """The base linked beside ``path``, then the main file written atomically (module doc)."""
    from .split import new_build_id, pending
    from .write import BlockWrites, as_type, remove_orphans, root_attrs

    build = new_build_id()
    link = base_name(path, build)
    rows_t = {n: _rows_type(n, a) for n, a in data.items()}
    size = sum(int(np.asarray(a).nbytes) for a in (*whole.values(), *data.values())) + (64 << 10)
    with pending(path, build) as mark:  # (another writer's clean-up leaves this tag's link alone)
        provisional(link, True)
        try:
            os.link(src.path, link)
        except OSError as e:
            provisional(link, False)
            raise PatchNotPossible(f"{path}: cannot link the base {base} beside it as {os.path.basename(link)} "
                                   f"({e.strerror}): write the index whole") from None
        try:
            with atomic_path(path, size, settles=[link, mark.marker]) as tmp:
                with create_h5(tmp, LIBVER) as f:
                    with BlockWrites(tmp, pool) as blocks:
                        root_attrs(f, attrs)
                        for k, v in ((PATCH_BASE, os.path.basename(link)), (PATCH_BUILD, build),
                                     (PATCH_BASE_SEAL, src.attrs[SEAL]), (PATCH_BASE_ATTRS, src.attrs[ATTRS_SEAL])):
                            put_attr(f, k, str(v))
                        crcs = {}
                        for name in (n for n in dataset_order(whole) if n in whole):
                            a = np.ascontiguousarray(whole[name])
                            t = np.dtype(types.get(name, a.dtype))
                            crcs[name] = _put(f, blocks, name, a if a.dtype == t else as_type(a, t), t, pool)
                        for name in sorted(data):
                            a = np.ascontiguousarray(as_type(np.asarray(data[name]), rows_t[name]))
                            crcs[name] = _put(f, blocks, name, a, a.dtype, pool)
                    for name, (block, futs) in ((n, c) for n, c in crcs.items() if c is not None):
                        f[name].attrs["crc32_block"] = block
                        f[name].attrs["crc32"] = np.array([x if isinstance(x, int) else x.result() for x in futs],
                                                          dtype=np.uint32)
                    for name, g in groups.items():
                        grp = f.require_group(f"{PATCH_GROUP}/{name}")
                        for k, v in g.items():
                            put_attr(grp, k, v)
                    mine = {n: entry(f[n])[0] for n in crcs}
                    result = {n: e for n, e in src.entries.items() if n not in groups}
                    result.update({n: mine[n] for n in whole})
                    result.update({n: (g["dtype"], tuple(int(x) for x in g["shape"]), g.get("crc32_block"),
                                       g.get("crc32")) for n, g in groups.items()})
                    pattrs = {k: f.attrs[k] for k in (PATCH_BASE, PATCH_BUILD, PATCH_BASE_SEAL, PATCH_BASE_ATTRS)}
                    put_attr(f, PATCH_SEAL, patch_seal(pattrs, {n: e for n, e in mine.items()},
                                                       {n: dict(f[f"{PATCH_GROUP}/{n}"].attrs) for n in groups}))
                    put_attr(f, SEAL, datasets_seal(result))
                    put_attr(f, ATTRS_SEAL, attributes_seal(f.attrs))  # (last; the patch_ attributes left out)
                    flushed(f)
        except BaseException:
            if not _names(path, link):  # (else the main file landed: the link is its)
                try:
                    os.remove(link)
                except OSError:
                    pass
            provisional(link, False)
            raise
    remove_orphans(path)  # (the base link of the index this one replaced, once no index file names it)


def _names(path, link) -> bool:
    """Whether the index at ``path`` is a patched one whose base is ``link``."""
    try:
        return os.path.exists(path) and patch_base(path) == base_path(path, os.path.basename(link))
    except Exception:  # noqa: BLE001 - unreadable: not this write's main file
        return False


def _rows_type(name, a) -> np.dtype:
    """The type a patch dataset is stored in: row numbers in the smallest unsigned type that holds
    them, values and offsets as they are (the values already in the dataset's stored type)."""
    from ..dtypes import smallest_uint

    a = np.asarray(a)
    if name.endswith("/rows"):  # (sorted: the last is the largest)
        return np.dtype(smallest_uint(int(a[-1]) if a.size else 0))
    return np.dtype(a.dtype)


def _put(f, blocks, name, a, t, pool):
    """Dataset ``name`` written (in parallel blocks when large) and its ``(block, CRC futures)``
    (None when empty), as :func:`~distgrail.indexfile.write.write_index_file` writes one."""
    t = np.dtype(t)
    if not a.size:
        f.create_dataset(name, data=a.astype(t), track_times=False)
        return None
    b = block_size(a.size * t.itemsize)
    if can_write_in_blocks(a, t):
        return b, blocks.write(f, name, a, t, b)
    f.create_dataset(name, data=a, track_times=False)
    return b, block_crcs(a, b, pool)
