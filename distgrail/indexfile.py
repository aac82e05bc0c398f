"""The HDF5 index file (schema version 2; version 1 is still read), readable with plain h5py.

Layout::

    /                attrs: format="distgrail-index", format_version, distgrail_version, seed,
                     dims, parent_rule, source_name, source_sha256, n_vertices, n_components,
                     n_dag_edges, n_levels; optional supports (K, 0 or absent: none)
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
checksums (HDF5's fletcher32 filter on every non-empty dataset, chunks of at most 256 KiB since
labels are read at random) and by the optional datasets above. Integer arrays use the smallest
type that holds their values. The file is written to a temporary name beside the target and
renamed when complete, so a failed run leaves nothing. :func:`read_index_file` checks the
checksums, shapes, dtypes and value ranges (:mod:`distgrail.indexcheck`): a damaged or incomplete
index raises :class:`IndexFormatError` naming the dataset, it never gives answers.
"""

from __future__ import annotations

import os

import numpy as np

from .dtypes import smallest_int, smallest_uint
from .errors import IndexFormatError
from .io.atomic import atomic_path

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CHUNK_BYTES", "write_index_file", "read_index_file"]

FORMAT = "distgrail-index"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: upper bound of a dataset chunk (labels are read at random: small chunks)
CHUNK_BYTES = 256 << 10
_ATTRS = ("seed", "dims", "parent_rule", "source_name", "source_sha256", "n_vertices", "n_components",
          "n_dag_edges", "n_levels", "distgrail_version")


def _chunks(shape, itemsize):
    """Chunk shape of at most CHUNK_BYTES, split along the longest axis only."""
    if not shape or 0 in shape:
        return None
    ax = int(np.argmax(shape))
    rest = int(np.prod(shape)) // shape[ax] * itemsize
    ch = list(shape)
    ch[ax] = max(1, min(shape[ax], CHUNK_BYTES // max(rest, 1)))
    return tuple(ch)


def write_index_file(path, meta: dict, arrays: dict) -> None:
    """Write an index atomically. ``arrays`` holds the datasets named in the module docstring."""
    import h5py

    C = int(meta["n_components"])
    uC = smallest_uint(max(C - 1, 0))
    types = {
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
    names = list(types)[:8] + sorted(k for k in arrays if k not in list(types)[:8])
    size = sum(int(np.asarray(a).size) * np.dtype(types.get(k, np.asarray(a).dtype)).itemsize
               for k, a in arrays.items()) + (64 << 10)
    with atomic_path(path, size) as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=False) as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            for k in _ATTRS + (("supports",) if "supports" in meta else ()):
                v = meta[k]
                if k == "distgrail_version":
                    v = str(v)
                f.attrs[k] = v if not isinstance(v, (np.integer,)) else int(v)
            for name in names:
                data = np.ascontiguousarray(arrays[name])
                if name in types:
                    data = data.astype(types[name], copy=False)
                ch = _chunks(data.shape, data.dtype.itemsize)
                f.create_dataset(name, data=data, track_times=False, chunks=ch, fletcher32=ch is not None)


def _attr(f, path, key):
    if key not in f.attrs:
        raise IndexFormatError(f"{path}: incomplete index: attribute {key!r} is missing")
    v = f.attrs[key]
    return v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)


def read_index_file(path) -> tuple[dict, dict]:
    """Read and check an index. Raises :class:`IndexFormatError` for anything that is not a
    complete, undamaged index of a version this distgrail reads."""
    import h5py

    from .indexcheck import check_index

    path = os.fspath(path)
    if not os.path.exists(path):
        raise IndexFormatError(f"{path}: no such index file")
    if os.path.isdir(path):
        raise IndexFormatError(f"{path}: is a directory, not an index file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise IndexFormatError(f"{path}: not an HDF5 file, so not a distgrail index ({e})") from None
    with f:
        fmt = f.attrs.get("format")
        if isinstance(fmt, bytes):
            fmt = fmt.decode()
        if fmt != FORMAT:
            raise IndexFormatError(f"{path}: not a distgrail index (attribute format={fmt!r}, expected {FORMAT!r})")
        raw = _attr(f, path, "format_version")
        if isinstance(raw, (bool, np.bool_)) or not isinstance(raw, (int, np.integer)):
            raise IndexFormatError(f"{path}: damaged index: attribute 'format_version' must be an integer, "
                                   f"got {raw!r}")
        ver = int(raw)
        if ver not in READ_VERSIONS:
            raise IndexFormatError(f"{path}: index schema version {ver}, this distgrail reads versions "
                                   f"{', '.join(map(str, READ_VERSIONS))}; rebuild the index with this version")
        meta = {"format": FORMAT, "format_version": ver}
        for k in _ATTRS + (("supports",) if "supports" in f.attrs else ()):
            meta[k] = _attr(f, path, k)
        arrays = {}
        problems = []

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                try:
                    arrays[name] = obj[()]
                except (OSError, ValueError, TypeError) as e:
                    problems.append(f"{path}: damaged index: dataset /{name} cannot be read (checksum or "
                                    f"storage error: {e})")

        try:
            f.visititems(visit)
        except (OSError, RuntimeError) as e:
            raise IndexFormatError(f"{path}: damaged index: {e}") from None
        if problems:
            raise IndexFormatError(problems[0])
    check_index(path, meta, arrays)
    return meta, arrays
