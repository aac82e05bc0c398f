"""The index file's schema, shared by its writer and its reader: the format's constants, the
stored type of every dataset and their order, the CRC-32 blocks and the seal over them, and which
datasets go through the thread pool in parallel blocks (:mod:`distgrail.indexfile` describes the
layout; :mod:`~distgrail.indexfile.write` and :mod:`~distgrail.indexfile.read` use these).
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..dtypes import smallest_int, smallest_uint

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CHUNK_BYTES", "CRC_BLOCK", "LIBVER", "ATTRS", "SEAL",
           "PARALLEL_MIN_BYTES", "block_size", "block_crcs", "crc_pool", "entry", "datasets_seal", "stored_types",
           "dataset_order", "can_read_in_blocks", "can_write_in_blocks", "REQUIRED"]

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
#: root attribute: BLAKE3 over every dataset's name, type, shape and checksums (:func:`datasets_seal`)
SEAL = "crc32_of_datasets"
#: datasets at least this large are written and read in parallel blocks (smaller ones by HDF5)
PARALLEL_MIN_BYTES = 16 << 20
#: the eight core datasets every index holds, in the order they are created
REQUIRED = ("vertex/component", "dag/indptr", "dag/indices", "dag/level", "forest/parent",
            "forest/subtree_size", "labels/dt_post0", "labels/intervals")


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


def stored_types(meta: dict) -> dict:
    """The stored type of every dataset with a fixed one (the others keep their own)."""
    C = int(meta["n_components"])
    uC = smallest_uint(max(C - 1, 0))
    return {
        "vertex/component": uC,
        "dag/indptr": np.int64,
        "dag/indices": uC,
        "dag/level": smallest_uint(max(int(meta["n_levels"]) - 1, 0)),
        "forest/parent": smallest_int(C),
        "forest/subtree_size": smallest_uint(C),
        "labels/dt_post0": uC,
        "labels/intervals": uC,
        "vertex/label": np.int64,
        "vertex/label_utf8": np.uint8,
        "vertex/label_offsets": np.int64,
        "supports/ids": uC,
        "supports/out": np.uint64,
        "supports/in": np.uint64,
    }


def dataset_order(names) -> list:
    """The order the datasets ``names`` are created in: the eight core ones (:data:`REQUIRED`), then
    the rest by name."""
    return list(REQUIRED) + sorted(k for k in names if k not in REQUIRED)


def can_write_in_blocks(data: np.ndarray, t) -> bool:
    """Whether ``data``, stored as type ``t``, is large enough to be written in parallel blocks
    and its stored bytes are its little-endian integer values (what the reader reads in blocks)."""
    t = np.dtype(t)
    if t.kind not in "iu" or t.byteorder == ">" or (t.byteorder == "=" and not np.little_endian):
        return False
    if data.dtype.kind not in "biuf":
        return False
    return int(data.size) * t.itemsize >= PARALLEL_MIN_BYTES


def can_read_in_blocks(ds, block) -> bool:
    """Whether dataset ``ds`` (with CRC block size ``block`` from its attributes) is one plain run
    of little-endian integer bytes in the file that is worth reading in parallel."""
    dt = ds.dtype
    if dt.kind not in "iu" or dt.byteorder == ">" or (dt.byteorder == "=" and np.little_endian is False):
        return False
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        return False
    if ds.chunks is not None or ds.compression is not None or ds.fletcher32 or ds.shuffle or ds.scaleoffset:
        return False
    if ds.external:
        return False
    return int(ds.size) * dt.itemsize >= PARALLEL_MIN_BYTES and ds.id.get_offset() is not None
