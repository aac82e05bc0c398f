"""The index file read and checked: :func:`read_index_file` (the layout is
:mod:`distgrail.indexfile`'s), its large datasets read in parallel blocks, and the checks of
what was read.

**Checksums.** Every dataset's stored block CRC-32s are compared with its contents, the seal
(``crc32_of_datasets``) with every dataset's checksum attributes; a file of an earlier release
has HDF5 verify its fletcher32 chunks instead.

**Large datasets in parallel blocks**, each block's CRC-32 taken as it lands. A dataset the index
writer stored (contiguous, no filter, little-endian integers) is one run of bytes at a known
offset of the file (``Dataset.id.get_offset()``). Read through HDF5 it is one thread's copy, and
its checksum is a second pass over memory; here every ``crc32_block`` bytes of it are one task of
a thread pool: ``os.preadv`` straight into the array, then the CRC-32 of the block while it
is in the cache (both release the GIL). The CRCs are then compared as those of a dataset read by
HDF5, so a block read from a wrong offset (a damaged header) is a checksum error like any other.
Datasets below :data:`~distgrail.indexfile.layout.PARALLEL_MIN_BYTES`, with a filter or chunks
(files of earlier releases), or of any other type are read by HDF5. A large dataset named in
``defer`` is left in the file: a :class:`Deferred` reads and checks its slices later.

**Values.** Every dataset present, of the right shape and integer type, and its values in range
(component ids < C, CSR offsets monotone, DAG edges go down the levels, intervals inside 0..C-1
and nested along DAG edges, ...). A file that fails is damaged or incomplete:
:class:`IndexFormatError` names the file and the dataset, never an answer from it. Ranges cost
O(n + m + d·C) vector passes; on large indexes they run over pieces of ``PIECE`` values in a
thread pool (NumPy's reductions and comparisons release the GIL), as the reading does. The checks
along DAG edges (random gathers: edges go down the levels, O(m); intervals nest, O(d·m)) run while
their count is at most ``EDGE_CHECK_MAX``; for larger indexes the checksums stand in for them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import cores
from ..arrays import array_module, spans
from ..errors import IndexFormatError
from .layout import ATTRS_SEAL, BUILD_ATTR, CRC_BLOCK, FORMAT, READ_VERSIONS, REQUIRED, SEAL, block_crcs, can_read_in_blocks, crc32, \
    crc_pool, attributes_seal, datasets_seal, entry, not_an_index, pieces, read_block, root_keys
from .levels import check_level_order, numbered_by_level
from .optional import check_labels, check_supports
from .patch_read import patch_of
from .probe import check_main_file
from .read_split import PartFiles, deferred_spans, read_virtual

__all__ = ["read_index_file", "check_index", "check_index_path", "EDGE_CHECK_MAX", "REQUIRED", "Deferred",
           "parallel_read", "check_block_reads"]

_OLD_DIGEST = "source_sha256"  # the source digest in indexes of earlier releases (SHA-256)
#: the checks along DAG edges run while the edges (times dims) are at most this many
EDGE_CHECK_MAX = 1 << 22
#: values per piece of a check run in parallel
PIECE = 1 << 22


#: what h5py raises on a damaged file (HDF5's errors arrive as OSError, RuntimeError, KeyError,
#: ValueError or TypeError, depending on the message it hits; a bad string: UnicodeDecodeError)
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, OverflowError)


def _attr(attrs, path, key, where):
    where[0] = f"attribute {key!r}"
    if key not in attrs:
        raise IndexFormatError(f"{path}: incomplete index: attribute {key!r} is missing")
    v = attrs[key]
    return v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)


def read_index_file(path, defer=(), values: bool = True, seal_out: list | None = None,
                    keep_rows: bool = False) -> tuple[dict, dict]:
    """Read and check an index. Raises :class:`IndexFormatError` for anything that is not a
    complete, undamaged index of a version this distgrail reads (any HDF5 error included: it
    names the attribute or dataset being read). ``defer``: datasets left in the file if large: a
    :class:`Deferred` stands for each (values checked as slices are read). ``values=False``:
    every checksum, shape and type checked, the values not (:func:`check_values` then, or
    another process's check of the same bytes: the MPI ranks of one index). ``seal_out``: the
    file's checksum seal (the ``crc32_of_datasets`` it was verified against, None in files of
    earlier releases) appended to it. ``keep_rows``: a patched index's datasets among ``defer``
    stay in its base as well, their patch rows attached (:class:`~distgrail.indexfile.patch_read.PatchedRows`,
    :class:`~distgrail.indexfile.patch_read.PatchedCSR`: :mod:`~distgrail.indexfile.read_device`
    applies them)."""
    import h5py

    path = os.fspath(path)
    check_index_path(path)
    check_main_file(path)  # (a split index's main file that HDF5 would crash in: named)
    where = ["the file"]  # what is being read when HDF5 fails
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        from ..io.binary import _hdf5_signed

        if _hdf5_signed(path):  # (cut short or damaged, not another kind of file)
            raise IndexFormatError(f"{path}: damaged index: HDF5 cannot open the file ({e})") from None
        raise IndexFormatError(f"{path}: not an HDF5 file, so not a distgrail index ({e})") from None
    except _H5_ERRORS as e:
        raise IndexFormatError(f"{path}: damaged index: the file cannot be opened (HDF5: {e})") from None
    fd = _descriptor(f, path)  # large datasets: read in parallel blocks
    parts = PartFiles()  # (a split index's part files)
    pool = crc_pool()
    try:
        try:
            with f:
                meta, arrays, crcs, seal, landed, stats = _read_open_file(h5py, f, path, where, fd, parts, pool, defer)
                patch = patch_of(f, path)  # (a patched index: indexfile.patch_read)
        except IndexFormatError:
            raise
        except _H5_ERRORS as e:
            raise IndexFormatError(f"{path}: damaged index: {where[0]} cannot be read (HDF5: {e})") from None
        try:
            _verify_crcs(path, arrays, crcs, landed, pool)
        except OSError as e:  # a block read failed (EIO, a part gone meanwhile): named, as HDF5's errors are
            raise IndexFormatError(f"{path}: damaged index: a dataset cannot be read (storage error: {e})") from None
    finally:
        pool.shutdown(wait=True)  # no block read may outlive the descriptors
        os.close(fd)
        parts.close()
    if patch is not None:  # its base read, the patches applied: the index as a whole write holds it
        meta, arrays, seal, stats = patch.apply(meta, arrays, seal, stats, read_index_file, defer, keep_rows)
    check_index(path, meta, arrays, values, stats)
    _check_seal(path, seal)
    if seal_out is not None:
        seal_out.append(None if seal[0] is None else (seal[0].decode() if isinstance(seal[0], bytes) else seal[0]))
    return meta, arrays


def _descriptor(f, path) -> int:
    """A descriptor of the file HDF5 has open as ``f`` (``os.dup`` of its driver's handle): the
    blocks read in parallel are those of the file whose header was read, even when ``path`` names
    another file by then (an index replaced meanwhile); ``os.open(path)`` where the driver has no
    such handle. (A dataset behind an external link lives in another file: HDF5 reads it.)"""
    try:
        return os.dup(int(f.id.get_vfd_handle()))
    except Exception:  # noqa: BLE001 - a driver without a POSIX descriptor
        return os.open(path, os.O_RDONLY)


def _read_open_file(h5py, f, path, where, fd, parts, pool, defer=()):
    """(meta, arrays, crcs, seal, landed, stats) of an open index; ``where[0]`` names what is being
    read; ``landed``: {dataset: CRC futures} of the datasets read in parallel blocks from ``fd`` (a
    split index's: from its part files, opened through ``parts``); ``stats``: {dataset: per-block
    statistics} of those of :data:`RANGED` (:func:`parallel_read`), filled as the blocks land."""
    where[0] = "attribute 'format'"
    attrs = f.attrs
    fmt = attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if not isinstance(fmt, str) or fmt != FORMAT:
        raise IndexFormatError(f"{path}: not a distgrail index (attribute format={fmt!r}, expected {FORMAT!r})"
                               f"{not_an_index(attrs, fmt)}")
    raw = _attr(attrs, path, "format_version", where)
    if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)):
        raise IndexFormatError(f"{path}: damaged index: attribute 'format_version' must be an integer, "
                               f"got {raw!r}")
    ver = int(raw)
    if ver not in READ_VERSIONS:
        raise IndexFormatError(f"{path}: index schema version {ver}, this distgrail reads versions "
                               f"{', '.join(map(str, READ_VERSIONS))}; rebuild the index with this version")
    meta = {"format": FORMAT, "format_version": ver}
    if "layout" in attrs:  # a split index (distgrail.indexfile.split)
        where[0] = "attribute 'layout'"
        meta["layout"] = _attr(attrs, path, "layout", where)
        meta["parts"] = _attr(attrs, path, "parts", where)
    where[0] = "the root attributes"
    old = "source_digest" not in attrs and _OLD_DIGEST in attrs
    for k in root_keys(attrs):
        if old and k == "source_digest_algorithm":
            meta[k] = "sha256"
        else:
            meta[k] = _attr(attrs, path, _OLD_DIGEST if old and k == "source_digest" else k, where)
    where[0] = f"attribute {ATTRS_SEAL!r}"
    _check_attributes(path, attrs)
    where[0] = f"attribute {SEAL!r}"
    stored = attrs[SEAL] if SEAL in attrs else None
    arrays, crcs, entries, unchecked, fletcher, landed, stats = {}, {}, {}, [], [], {}, {}

    def walk(group, prefix):  # by link names: an object that HDF5 cannot open is named
        where[0] = f"group /{prefix}" if prefix else "the root group"
        for key in list(group.keys()):
            name = prefix + key
            where[0] = f"object /{name}"
            obj = group[key]
            if isinstance(obj, h5py.Group):
                walk(obj, name + "/")
                continue
            if not isinstance(obj, h5py.Dataset):
                continue
            where[0] = f"dataset /{name}"
            try:
                where[0] = f"the checksum attributes of dataset /{name}"
                entries[name], crc = entry(obj)
                where[0] = f"dataset /{name}"
                if obj.is_virtual:  # a split index: its rows in the part files, each checked
                    bid = attrs.get(BUILD_ATTR)
                    bid = bid.decode() if isinstance(bid, bytes) else bid
                    at = deferred_spans(path, bid, obj, name, crc, parts) if name in defer else None
                    if at is not None:  # left in the parts, read by slices later
                        arrays[name] = Deferred(path, name, obj, crc, at[1])
                        continue
                    arrays[name], landed[name] = read_virtual(path, bid, obj, name, crc, pool, parts)
                    crcs[name] = crc
                    continue
                if crc is not None and can_read_in_blocks(obj, crc[1]) and name in defer \
                        and obj.file.id.fileno == f.id.fileno:  # (not behind an external link: HDF5 reads that)
                    arrays[name] = Deferred(path, name, obj, crc, ident=_identity(fd))
                    continue
                if crc is not None and can_read_in_blocks(obj, crc[1]) and obj.file.id.fileno == f.id.fileno:
                    arrays[name], landed[name] = parallel_read(path, fd, obj, name, int(crc[1]), pool, stats)
                else:
                    arrays[name] = obj[()]
                if crc is not None:
                    crcs[name] = crc
                elif obj.size:
                    (fletcher if obj.fletcher32 else unchecked).append(name)
            except IndexFormatError:
                raise
            except (OSError, ValueError, TypeError) as e:
                raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum or "
                                       f"storage error: {e})") from None

    walk(f, "")
    if unchecked and not _legacy_v1(f, ver, stored, crcs, fletcher, arrays):
        raise IndexFormatError(f"{path}: damaged index: dataset /{unchecked[0]} cannot be read (checksum "
                               f"error: it carries no checksum)")
    return meta, arrays, crcs, (stored, entries), landed, stats


def _legacy_v1(f, ver, stored, crcs, fletcher, arrays) -> bool:
    """True for a file as distgrail's first releases wrote it (version 1): no checksum on any
    dataset, no seal, the source's SHA-256 in ``source_sha256``, only the eight core datasets.
    Such a file is read without checksums (its values are still checked); any other file whose
    non-empty datasets lack a checksum is damaged, whatever its format_version says."""
    return (ver == 1 and stored is None and not crcs and not fletcher and _OLD_DIGEST in f.attrs
            and "source_digest" not in f.attrs and set(arrays) <= set(REQUIRED))


def _check_attributes(path, attrs) -> None:
    """A file that carries ``blake3_of_attributes`` must match it over its other root attributes
    (:func:`~distgrail.indexfile.layout.attributes_seal`; files of earlier releases carry none)."""
    if ATTRS_SEAL not in attrs:
        return
    stored = attrs[ATTRS_SEAL]
    stored = stored.decode(errors="replace") if isinstance(stored, bytes) else stored
    if not isinstance(stored, str) or stored != attributes_seal(attrs):
        raise IndexFormatError(f"{path}: damaged index: its root attributes (the input's name and digest, the seed, the "
                               f"parent rule, the counts ...) differ from the ones it was written with (root attribute "
                               f"{ATTRS_SEAL!r})")


def _check_seal(path, seal) -> None:
    """A file that carries ``crc32_of_datasets`` must match it (files of earlier releases carry none)."""
    stored, entries = seal
    if stored is None:
        return
    stored = stored.decode(errors="replace") if isinstance(stored, bytes) else stored
    if not isinstance(stored, str) or stored != datasets_seal(entries):
        raise IndexFormatError(f"{path}: damaged index: its datasets or their checksums differ from the ones it was "
                               f"written with (root attribute {SEAL!r}): a dataset or its crc32 attributes were "
                               f"removed, added or replaced")


def _verify_crcs(path, arrays, crcs, landed, pool):
    """Compare every dataset's stored block CRC-32s with its contents (blocks in parallel;
    ``landed``: the CRC futures of the datasets read in blocks, taken as they were read)."""
    if not crcs:
        return
    rest = sum(int(arrays[name].nbytes) for name in crcs if name not in landed)
    pool = pool if rest > 4 * CRC_BLOCK else None  # else threads cost more than they save
    got = {}
    for name, (want, block) in crcs.items():
        if name in landed:
            values = [x if isinstance(x, int) else x.result() for x in landed[name]]
            check_block_reads(path, name, values)
            got[name] = values
            continue
        if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
            shown = block.tolist() if hasattr(block, "tolist") else block  # (an array of any size too)
            raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum error: "
                                   f"attribute crc32_block is {shown!r})")
        got[name] = block_crcs(arrays[name], int(block), pool)
    for name, futs in got.items():
        want = np.asarray(crcs[name][0])
        have = np.array([x if isinstance(x, int) else x.result() for x in futs], dtype=np.uint32)
        if want.dtype.kind not in "iu" or want.shape != have.shape or (want.astype(np.int64) != have).any():
            bad = int(np.flatnonzero(want.astype(np.int64) != have)[0]) if want.shape == have.shape and \
                want.dtype.kind in "iu" else -1
            where = f"block {bad} of {have.size}" if bad >= 0 else f"{want.size} stored checksums for {have.size} blocks"
            first = (landed.get(name) or [None])[0]
            joined = getattr(first, "joined", None) if bad >= 0 else None  # (a split index's rows)
            if joined is not None:
                held = [os.path.basename(p) for p in joined.parts_at(bad * joined.block, (bad + 1) * joined.block)]
                where += (f", in the part file {held[0]}" if len(held) == 1 else
                          f", in one of the part files {', '.join(held)} (the block spans them)" if held else "")
            raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum error: "
                                   f"CRC-32 mismatch, {where})")


# -- large datasets in parallel blocks -------------------------------------------------------

#: datasets whose range checks read each block's least and greatest value, taken by the thread
#: that read the block while it is in the cache (no second pass over the array)
RANGED = ("vertex/component", "dag/indices", "dag/level", "forest/parent", "forest/subtree_size",
          "labels/dt_post0", "labels/intervals")
#: datasets of (min, max) pairs along their last axis, whose blocks also say whether a pair has min > max
PAIRED = ("labels/intervals",)


def parallel_read(path, fd, ds, name, block: int, pool, stats: dict | None = None):
    """(array, futures of the CRC-32 of every ``block`` bytes) of dataset ``ds`` read from the
    open file descriptor ``fd`` by ``pool``'s threads; a future's value -1 means the file ended
    before the block (reported by :func:`check_block_reads`). ``stats``: for a dataset of
    :data:`RANGED` whose blocks hold whole values (whole pairs for :data:`PAIRED`),
    ``stats[name]`` is a list filled as the blocks land, one ``(min, max, a pair with min > max)``
    per block (None for an empty or short block), which :func:`check_index` reads instead of
    passing over the array again."""
    out = np.empty(ds.shape, dtype=ds.dtype.newbyteorder("<"))
    raw = memoryview(out.reshape(-1).view(np.uint8))
    start = int(ds.id.get_offset())
    block = int(block)
    paired = name in PAIRED and out.ndim and out.shape[-1] == 2
    starts = range(0, len(raw), block)
    if stats is None or name not in RANGED or block % (out.dtype.itemsize * (2 if paired else 1)):
        return out, [pool.submit(read_block, fd, raw[i:i + block], start + i) for i in starts]
    got = stats[name] = [None] * len(starts)

    def read_and_look(k, i):
        crc = read_block(fd, raw[i:i + block], start + i)
        x = np.frombuffer(raw[i:i + block], out.dtype)
        if crc >= 0 and x.size:
            p = x.reshape(-1, 2) if paired else None
            got[k] = (int(x.min()), int(x.max()), bool((p[:, 0] > p[:, 1]).any()) if paired else False)
        return crc

    return out, [pool.submit(read_and_look, k, i) for k, i in enumerate(starts)]


def _identity(fd) -> tuple | None:
    """``(device, inode)`` of the open file ``fd``, or None."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_block_reads(path, name, values) -> None:
    """Raise when a block of dataset ``name`` could not be read in full (the file is too short)."""
    if any(v < 0 for v in values):
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (the file ends before "
                               f"its data: truncated?)")


class Deferred:
    """A large dataset left in the file when the index was read (``read_index_file(defer=...)``):
    its ``shape`` and ``dtype`` (what the shape and type checks see), where its bytes start, and
    its stored CRC-32s, so that a slice is read later with :meth:`read` and checked block by block
    (the spread queries read only their rows of ``/dag/indices``). ``spans``: a split index's
    dataset, ``[(first byte, bytes, part path, file offset), ...]``
    (:func:`~distgrail.indexfile.read_split.deferred_spans`); else one run of the file at ``path``,
    whose ``(device, inode)`` at the read is ``ident`` (None: not known), so that a later reader
    can tell the file it opens by name is the one read then."""

    def __init__(self, path, name, ds, crc, spans=None, ident=None):
        self.path, self.name, self.ident = path, name, ident
        self.shape, self.dtype = tuple(ds.shape), ds.dtype.newbyteorder("<")
        self.crc, self.block = np.asarray(crc[0]), int(crc[1])
        self.size = int(np.prod(self.shape)) if self.shape else 1
        self.spans = spans or [(0, self.size * self.dtype.itemsize, path, int(ds.id.get_offset()))]

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Elements ``lo .. hi-1`` (of the flat dataset): the CRC blocks that hold them are read and
        checked against the stored checksums, so a damaged block is an IndexFormatError, as when
        the whole index is read."""
        lo, hi = max(0, int(lo)), min(self.size, int(hi))
        isz = self.dtype.itemsize
        nbytes = self.size * isz
        if hi <= lo:
            return np.zeros(0, self.dtype)
        b0, b1 = lo * isz // self.block, -(-hi * isz // self.block)
        if self.crc.dtype.kind not in "iu" or self.crc.shape != (-(-nbytes // self.block),):
            raise IndexFormatError(f"{self.path}: damaged index: dataset /{self.name} cannot be read (checksum "
                                   f"error: {self.crc.size} stored checksums for {-(-nbytes // self.block)} blocks)")
        start, stop = b0 * self.block, min(nbytes, b1 * self.block)
        raw = np.empty(stop - start, np.uint8)
        view = memoryview(raw)
        jobs = []  # (file, offset, view): the bytes start..stop-1 from the spans, cut at block boundaries
        for g0, n, fpath, off in self.spans:
            a, b = max(start, g0), min(stop, g0 + n)
            jobs += [(fpath, off + a - g0 + s0, view[a - start + s0:a - start + s1])
                     for _, s0, s1 in pieces(a, max(0, b - a), self.block)]
        fds = {}
        try:
            for fpath, _, _ in jobs:
                if fpath not in fds:  # (one descriptor a file, not one a block)
                    try:
                        fds[fpath] = os.open(fpath, os.O_RDONLY)
                    except OSError as e:
                        raise IndexFormatError(f"{self.path}: dataset /{self.name} cannot be read: "
                                               f"{os.path.basename(fpath)}: {e.strerror}") from None
            with ThreadPoolExecutor(max_workers=max(1, min(16, cores.usable(), len(jobs)))) as pool:
                got = list(pool.map(lambda j: read_block(fds[j[0]], j[2], j[1]), jobs))
                check_block_reads(self.path, self.name, got)
                if len(jobs) != b1 - b0:  # a block across two parts: its CRC-32 over its bytes
                    got = list(pool.map(lambda i: crc32(view[i * self.block:(i + 1) * self.block]),
                                        range(b1 - b0)))
        finally:
            for fd in fds.values():
                os.close(fd)
        bad = [b0 + i for i, x in enumerate(got) if x != int(self.crc[b0 + i])]
        if bad:
            raise IndexFormatError(f"{self.path}: damaged index: dataset /{self.name} cannot be read (checksum "
                                   f"error: CRC-32 mismatch, block {bad[0]} of {self.crc.size})")
        first = lo * isz - start
        return raw[first:first + (hi - lo) * isz].view(self.dtype)


# -- the checks of the values read ----------------------------------------------------------

class _Pieces:
    """``any(test, size)``: whether ``test(i, j)`` holds for some piece [i, j) of range(size),
    the pieces tested by a thread pool when there are several; ``whole``: one test over the
    whole range (arrays on a GPU, where one kernel covers it)."""

    def __init__(self, whole: bool = False):
        self.pool, self.whole = None, whole

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def any(self, test, size: int) -> bool:
        if size <= PIECE or self.whole:
            return bool(test(0, size)) if size else False
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=max(1, min(16, cores.usable())),
                                           thread_name_prefix="distgrail-check")
        futs = [self.pool.submit(test, i, min(size, i + PIECE)) for i in range(0, size, PIECE)]
        return any(bool(f.result()) for f in futs)


def check_index_path(path: str) -> None:
    """Refuse, as :class:`IndexFormatError` naming ``path``, what is not a file an index could be
    in: no such file, a directory, a FIFO, device or socket (never opened: it could block)."""
    from ..io.regular import check_regular

    if not os.path.exists(path):
        raise IndexFormatError(f"{path}: no such index file")
    if os.path.isdir(path):
        raise IndexFormatError(f"{path}: is a directory, not an index file")
    check_regular(path, "indexes", IndexFormatError)


def _int_attr(path, meta, key, lo=0):
    v = meta[key]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
        raise IndexFormatError(f"{path}: damaged index: attribute {key!r} must be an integer >= {lo}, got {v!r}")
    return int(v)


def check_index(path, meta: dict, arrays: dict, values: bool = True, stats: dict | None = None) -> None:
    """Raise :class:`IndexFormatError` unless ``arrays`` and ``meta`` form a consistent index
    (``values=False``: the attributes, datasets, shapes and types only). ``stats``: per-block
    statistics of datasets as they were read (:func:`parallel_read`), used for their range
    checks in place of a pass over the array; a dataset with a block not covered is passed over."""
    n = _int_attr(path, meta, "n_vertices")
    C = _int_attr(path, meta, "n_components")
    m = _int_attr(path, meta, "n_dag_edges")
    L = _int_attr(path, meta, "n_levels")
    dims = _int_attr(path, meta, "dims", 1)
    _int_attr(path, meta, "seed")
    if C > n or (n > 0) != (C > 0):
        raise IndexFormatError(f"{path}: damaged index: {C} components for {n} vertices")

    def bad(name, what):
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} {what}")

    shapes = {"vertex/component": (n,), "dag/indptr": (C + 1,), "dag/indices": (m,), "dag/level": (C,),
              "forest/parent": (C,), "forest/subtree_size": (C,), "labels/dt_post0": (C,),
              "labels/intervals": (dims, C, 2)}
    for name in REQUIRED:
        if name not in arrays:
            raise IndexFormatError(f"{path}: incomplete index: dataset /{name} is missing")
    for name, a in arrays.items():
        if name in shapes and a.shape != shapes[name]:
            bad(name, f"has shape {a.shape}, expected {shapes[name]}")
        if not np.issubdtype(a.dtype, np.integer):
            bad(name, f"has type {a.dtype}, expected integers")
    numbered_by_level(path, meta)  # (its value: 0 or 1)
    if values:  # (the large datasets on a GPU, read_device: each test over the whole array there)
        with _Pieces(whole=not isinstance(arrays["dag/indptr"], np.ndarray)) as pieces:
            _check_values(path, meta, arrays, n, C, m, L, dims, bad, pieces, _whole(stats or {}, arrays))


def _whole(stats: dict, arrays: dict) -> dict:
    """``{name: (min, max, a pair with min > max)}`` over every block of the datasets whose every
    block has its statistics (an empty dataset has none to give)."""
    out = {}
    for name, got in stats.items():
        if name in arrays and got and all(g is not None for g in got):
            out[name] = (min(g[0] for g in got), max(g[1] for g in got), any(g[2] for g in got))
    return out


def _check_values(path, meta, a, n, C, m, L, dims, bad, pieces, seen):
    """The value checks of :func:`check_index`, piece by piece (``pieces``: a :class:`_Pieces`);
    ``seen``: :func:`_whole`'s statistics of datasets taken as they were read."""

    def within(name, arr, lo, hi, of="components"):
        flat = arr.reshape(-1)
        # (an empty range, ``0..-1`` of an index with no components or vertices, is said as such)
        span = f"outside {lo}..{hi}" if hi >= lo else f"where the index has no {of} for it to name"
        info = np.iinfo(flat.dtype)
        low, high = info.min < lo, info.max > hi  # (a bound the stored type cannot pass is not looked at)

        def outside(i, j):
            return (low and int(flat[i:j].min()) < lo) or (high and int(flat[i:j].max()) > hi)

        if name in seen and arr is a.get(name):  # the whole array's least and greatest value, from its blocks
            found = (low and seen[name][0] < lo) or (high and seen[name][1] > hi)
        else:
            found = flat.size and (low or high) and pieces.any(outside, flat.size)
        if found:
            at = array_module(flat).flatnonzero((flat < lo) | (flat > hi))
            if at.size:
                bad(name, f"holds {int(flat[at[0]])} at flat position {int(at[0])}, {span}")
            if name in seen:
                value = seen[name][0] if seen[name][0] < lo else seen[name][1]
                bad(name, f"held {value} when it was read, {span}")  # (changed in memory since)
            bad(name, f"holds a value {span}")

    def non_decreasing(v) -> bool:
        return not pieces.any(lambda i, j: (v[i + 1:j + 1] < v[i:j]).any(), max(int(v.size) - 1, 0))

    comp = a["vertex/component"]
    within("vertex/component", comp, 0, C - 1)
    ip = a["dag/indptr"]
    if int(ip[0]) != 0 or int(ip[-1]) != m or not non_decreasing(ip):
        bad("dag/indptr", f"is not a CSR offset array 0..{m} (non-decreasing)")
    xp = array_module(ip)  # (NumPy, or CuPy for an index read to a GPU: read_device)
    ix = a["dag/indices"]
    deferred = isinstance(ix, Deferred)  # left in the file: its reader checks the rows it reads
    if not deferred:
        within("dag/indices", ix, 0, C - 1)
    level = check_level_order(path, meta, a["dag/level"], L, C, bad, within, non_decreasing)
    if 0 < m <= EDGE_CHECK_MAX and not deferred:
        counts = xp.diff(ip.astype(np.int64))  # (each edge's row: CuPy's repeat takes its counts through the host)
        src = np.repeat(np.arange(C, dtype=np.int64), counts) if xp is np else spans(xp, ip[:-1].astype(np.int64), counts)[1]
        ix = ix.astype(np.int64)
        level = level.astype(np.int64)
        if (level[src] >= level[ix]).any():
            bad("dag/indices", "holds an edge that does not go down the levels")
    within("forest/parent", a["forest/parent"], -1, C - 1)
    within("forest/subtree_size", a["forest/subtree_size"], 1, C)
    post0 = a["labels/dt_post0"]
    within("labels/dt_post0", post0, 0, C - 1)
    iv = a["labels/intervals"]
    within("labels/intervals", iv, 0, C - 1)
    lo, hi = iv[..., 0], iv[..., 1]
    pairs = iv.reshape(-1, 2)
    unordered = seen["labels/intervals"][2] if "labels/intervals" in seen else \
        pieces.any(lambda i, j: (pairs[i:j, 0] > pairs[i:j, 1]).any(), pairs.shape[0])
    if unordered or (
            C and pieces.any(lambda i, j: ((lo[0, i:j] > post0[i:j]) | (hi[0, i:j] < post0[i:j])).any(), C)):
        bad("labels/intervals", "holds an interval [min, max] with min > max or without its own rank")
    if 0 < dims * m <= EDGE_CHECK_MAX and not deferred:
        for d in range(dims):
            lo_d, hi_d = xp.ascontiguousarray(lo[d]), xp.ascontiguousarray(hi[d])
            if (lo_d[src] > lo_d[ix]).any() or (hi_d[src] < hi_d[ix]).any():
                bad("labels/intervals", f"holds a DAG edge whose target's interval is not inside its source's "
                                        f"(dimension {d})")
    check_labels(path, n, a, bad, within)
    check_supports(path, C, meta, a, bad, within)
    if "updates/edges" in a:  # the edges inserted since the build (distgrail.update): vertex ids
        up = a["updates/edges"]
        if up.ndim != 2 or up.shape[1] != 2 or up.dtype.kind not in "iu":
            bad("updates/edges", f"has shape {up.shape} and type {up.dtype}, expected (k, 2) integer vertex ids")
        else:
            within("updates/edges", up, 0, n - 1, of="vertices")
    if "updates/log" in a:  # one row per update (distgrail.update.LOG_COLUMNS)
        log = a["updates/log"]
        if log.ndim != 2 or log.shape[1] != 9 or log.dtype.kind not in "iu":
            bad("updates/log", f"has shape {log.shape} and type {log.dtype}, expected (updates, 9) integers")
        else:
            within("updates/log", log[:, :7], 0, np.iinfo(np.int64).max)  # counts: none negative
            within("updates/log", log[:, 7:], -1, 1_000_000)  # decided shares, ppm (-1: none taken)
            if log.shape[0] and int(np.asarray(log[:, 6]).max()) > 2:
                bad("updates/log", "holds a method code other than 0, 1, 2 in column 6")
