"""The HDF5 index file (schema version 2; version 1 is still read), readable with plain h5py.

Layout::

    /                attrs: format="distgrail-index", format_version, distgrail_version, seed,
                     dims, parent_rule, source_name, source_digest, source_digest_algorithm
                     ("blake3"; indexes of earlier releases: source_sha256 instead, read as
                     algorithm "sha256"), n_vertices, n_components, n_dag_edges, n_levels;
                     optional supports (K, 0 or absent: none)
    /vertex/component     (n,)        component of each input vertex
    /dag/indptr           (C+1,)      CSR of the condensed DAG, components sorted by level
    /dag/indices          (m,)
    /dag/level            (C,)        longest-path level
    /forest/parent        (C,)        DT parent, -1 for roots (phase 1)
    /forest/subtree_size  (C,)        DT subtree sizes (phase 2)
    /labels/dt_post0      (C,)        DT post-order rank of dimension 0 (phase 3)
    /labels/intervals     (dims, C, 2)  [min, max] rank over DAG descendants (phase 4)
    optional, v2:
    /vertex/label         (n,) int64  the user's integer node labels (vertex id i has label[i])
    /vertex/label_utf8, /vertex/label_offsets   (bytes,) uint8 and (n+1,) int64: string node
                          labels, label i = utf8[offsets[i]:offsets[i+1]]
    /supports/ids         (K,)        support components; /supports/out, /supports/in (C, W)
                          uint64 reach bit masks, W = ceil(K/64)

Version 2 (this version) differs from 1 by its sibling order (labels differ, answers do not), by
checksums on every non-empty dataset and by the optional datasets above. Integer arrays use the
smallest type that holds their values. Checksums: datasets are stored contiguous (no filter: plain
h5py reads them, at random too) with the CRC-32 of every ``CRC_BLOCK`` bytes of their raw
little-endian contents in the dataset attribute ``crc32`` (uint32 array; ``crc32_block`` = the
block size), computed by a thread pool while the datasets are written and checked the same way
when read; large datasets are cast, written and checksummed in parallel blocks
(:mod:`distgrail.indexwrite`) and read likewise (:mod:`distgrail.indexblocks`). Files of earlier
distgrail releases keep HDF5's fletcher32 filter on chunks of at most 256 KiB instead; they are
read and checked as before (HDF5 verifies each chunk). A non-empty
dataset with neither is damaged, whatever ``format_version`` says; the one exception is a file as
the first releases wrote it (version 1: no checksum on any dataset, ``source_sha256``, the eight
core datasets only), read with its values checked but without checksums.

The root attribute ``crc32_of_datasets`` (since this release) seals the set: ``"blake3:<hex>"``
over every dataset's name, type, shape, ``crc32_block`` and ``crc32`` list, sorted by name
(:func:`datasets_seal`), so a dataset whose checksum attributes were deleted, or a dataset
removed, added or replaced, is seen. A file that carries it must match it; files written before
it carry none and get the per-dataset checks above only.

The file is written (:mod:`distgrail.indexsave`) to a temporary name beside the target and renamed
when complete, so a failed run leaves nothing. :func:`read_index_file` checks the checksums, shapes, dtypes and value ranges
(:mod:`distgrail.indexcheck`): a damaged or incomplete index raises :class:`IndexFormatError`
naming the dataset, it never gives answers. Any error of HDF5 while the file is opened or read
(a damaged header, attribute or object message) is such an error too, naming the attribute or
dataset being read; a FIFO or device is refused before it is opened.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import IndexFormatError
from .indexblocks import Deferred, can_read_in_blocks, check_block_reads, parallel_read

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CHUNK_BYTES", "CRC_BLOCK", "LIBVER", "ATTRS",
           "read_index_file", "block_crcs", "block_size", "datasets_seal", "SEAL", "entry", "crc_pool"]

FORMAT = "distgrail-index"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: upper bound of a dataset chunk in files of earlier releases (fletcher32 on every chunk)
CHUNK_BYTES = 256 << 10
#: bytes per CRC-32 of a dataset (at least: a dataset gets at most _MAX_CRCS of them)
CRC_BLOCK = 4 << 20
_MAX_CRCS = 8192  # keeps the attribute far below HDF5's 64 KiB limit of compact attributes
#: HDF5 file format bounds the index is written with
LIBVER = ("earliest", "v110")
ATTRS = ("seed", "dims", "parent_rule", "source_name", "source_digest", "source_digest_algorithm", "n_vertices",
          "n_components", "n_dag_edges", "n_levels", "distgrail_version")
_OLD_DIGEST = "source_sha256"  # the source digest in indexes of earlier releases (SHA-256)
#: root attribute: BLAKE3 over every dataset's name, type, shape and checksums (:func:`datasets_seal`)
SEAL = "crc32_of_datasets"


def block_size(nbytes: int) -> int:
    """Bytes per CRC-32 of a dataset of ``nbytes`` (at least :data:`CRC_BLOCK`)."""
    return max(CRC_BLOCK, -(-int(nbytes) // _MAX_CRCS))


def _raw(a: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def block_crcs(a: np.ndarray, block: int, pool=None) -> list:
    """Futures (or values without ``pool``) of the CRC-32 of every ``block`` bytes of ``a``
    (C order); zlib releases the GIL on large buffers, so a thread pool runs them in parallel."""
    mv = _raw(a)
    parts = [mv[i:i + block] for i in range(0, len(mv), block)]
    return [pool.submit(zlib.crc32, p) for p in parts] if pool is not None else [zlib.crc32(p) for p in parts]


def crc_pool():
    return ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1)), thread_name_prefix="distgrail-crc")


#: what h5py raises on a damaged file (HDF5's errors arrive as OSError, RuntimeError, KeyError,
#: ValueError or TypeError, depending on the message it hits; a bad string: UnicodeDecodeError)
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, OverflowError)


def _attr(attrs, path, key, where):
    where[0] = f"attribute {key!r}"
    if key not in attrs:
        raise IndexFormatError(f"{path}: incomplete index: attribute {key!r} is missing")
    v = attrs[key]
    return v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)


def read_index_file(path, defer=()) -> tuple[dict, dict]:
    """Read and check an index. Raises :class:`IndexFormatError` for anything that is not a
    complete, undamaged index of a version this distgrail reads (any HDF5 error included: it
    names the attribute or dataset being read). ``defer``: datasets left in the file if large: a
    :class:`~distgrail.indexblocks.Deferred` stands for each (values checked as slices are read)."""
    import h5py

    from .indexcheck import check_index, check_index_path

    path = os.fspath(path)
    check_index_path(path)
    where = ["the file"]  # what is being read when HDF5 fails
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise IndexFormatError(f"{path}: not an HDF5 file, so not a distgrail index ({e})") from None
    except _H5_ERRORS as e:
        raise IndexFormatError(f"{path}: damaged index: the file cannot be opened (HDF5: {e})") from None
    fd = os.open(path, os.O_RDONLY)  # large datasets: read in parallel blocks (distgrail.indexblocks)
    pool = crc_pool()
    try:
        try:
            with f:
                meta, arrays, crcs, seal, landed = _read_open_file(h5py, f, path, where, fd, pool, defer)
        except IndexFormatError:
            raise
        except _H5_ERRORS as e:
            raise IndexFormatError(f"{path}: damaged index: {where[0]} cannot be read (HDF5: {e})") from None
        _verify_crcs(path, arrays, crcs, landed, pool)
    finally:
        pool.shutdown(wait=True)  # no block read may outlive the descriptor
        os.close(fd)
    check_index(path, meta, arrays)
    _check_seal(path, seal)
    return meta, arrays


def _read_open_file(h5py, f, path, where, fd, pool, defer=()):
    """(meta, arrays, crcs, seal, landed) of an open index; ``where[0]`` names what is being read;
    ``landed``: {dataset: CRC futures} of the datasets read in parallel blocks from ``fd``."""
    where[0] = "attribute 'format'"
    attrs = f.attrs
    fmt = attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if not isinstance(fmt, str) or fmt != FORMAT:
        raise IndexFormatError(f"{path}: not a distgrail index (attribute format={fmt!r}, expected {FORMAT!r})")
    raw = _attr(attrs, path, "format_version", where)
    if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)):
        raise IndexFormatError(f"{path}: damaged index: attribute 'format_version' must be an integer, "
                               f"got {raw!r}")
    ver = int(raw)
    if ver not in READ_VERSIONS:
        raise IndexFormatError(f"{path}: index schema version {ver}, this distgrail reads versions "
                               f"{', '.join(map(str, READ_VERSIONS))}; rebuild the index with this version")
    meta = {"format": FORMAT, "format_version": ver}
    where[0] = "the root attributes"
    old = "source_digest" not in attrs and _OLD_DIGEST in attrs
    for k in ATTRS + (("supports",) if "supports" in attrs else ()):
        if old and k == "source_digest_algorithm":
            meta[k] = "sha256"
        else:
            meta[k] = _attr(attrs, path, _OLD_DIGEST if old and k == "source_digest" else k, where)
    where[0] = f"attribute {SEAL!r}"
    stored = attrs[SEAL] if SEAL in attrs else None
    arrays, crcs, entries, unchecked, fletcher, landed = {}, {}, {}, [], [], {}

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
                if crc is not None and can_read_in_blocks(obj, crc[1]) and name in defer:
                    arrays[name] = Deferred(path, name, obj, crc)
                    continue
                if crc is not None and can_read_in_blocks(obj, crc[1]):
                    arrays[name], landed[name] = parallel_read(path, fd, obj, name, int(crc[1]), pool)
                else:
                    arrays[name] = obj[()]
                if crc is not None:
                    crcs[name] = crc
                elif obj.size:
                    (fletcher if obj.fletcher32 else unchecked).append(name)
            except (OSError, ValueError, TypeError) as e:
                raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum or "
                                       f"storage error: {e})") from None

    walk(f, "")
    if unchecked and not _legacy_v1(f, ver, stored, crcs, fletcher, arrays):
        raise IndexFormatError(f"{path}: damaged index: dataset /{unchecked[0]} cannot be read (checksum "
                               f"error: it carries no checksum)")
    return meta, arrays, crcs, (stored, entries), landed


def _legacy_v1(f, ver, stored, crcs, fletcher, arrays) -> bool:
    """True for a file as distgrail's first releases wrote it (version 1): no checksum on any
    dataset, no seal, the source's SHA-256 in ``source_sha256``, only the eight core datasets.
    Such a file is read without checksums (its values are still checked); any other file whose
    non-empty datasets lack a checksum is damaged, whatever its format_version says."""
    from .indexcheck import REQUIRED

    return (ver == 1 and stored is None and not crcs and not fletcher and _OLD_DIGEST in f.attrs
            and "source_digest" not in f.attrs and set(arrays) <= set(REQUIRED))


def entry(ds) -> tuple:
    """``((dtype, shape, crc32_block, crc32), (crc32, crc32_block) or None)`` of dataset ``ds``:
    its part of the seal, and its stored checksums (None: no ``crc32`` attribute)."""
    attrs = ds.attrs
    if "crc32" not in attrs:
        return (ds.dtype.str, ds.shape, None, None), None
    crc = (attrs["crc32"], attrs.get("crc32_block"))
    return (ds.dtype.str, ds.shape, crc[1], crc[0]), crc


def datasets_seal(entries: dict) -> str:
    """``"blake3:<hex>"`` over the sorted ``{name: (dtype, shape, crc32_block, crc32)}`` of every
    dataset (see :func:`entry`): the root attribute ``crc32_of_datasets``."""
    import blake3

    h = blake3.blake3()
    for name in sorted(entries):
        dt, shape, block, crc = entries[name]
        a = np.asarray(crc) if crc is not None else None
        values = "-" if a is None else f"{a.dtype.str}{a.shape}:" + (
            ",".join(map(str, a.reshape(-1).tolist())) if a.dtype.kind in "iu" else repr(a))
        block = block.item() if hasattr(block, "item") else block
        h.update(f"{name}\0{dt}\0{tuple(shape)}\0{block!r}\0{values}\n".encode())
    return "blake3:" + h.hexdigest()


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
            values = [x.result() for x in landed[name]]
            check_block_reads(path, name, values)
            got[name] = values
            continue
        if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
            shown = block.item() if hasattr(block, "item") else block
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
            raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum error: "
                                   f"CRC-32 mismatch, {where})")
