"""The HDF5 index file (schema version 1), readable with plain h5py.

Layout::

    /                attrs: format="distgrail-index", format_version, distgrail_version, seed,
                     dims, parent_rule, source_name, source_sha256, n_vertices, n_components,
                     n_dag_edges, n_levels
    /vertex/component     (n,)        component of each input vertex
    /dag/indptr           (C+1,)      CSR of the condensed DAG, components sorted by level
    /dag/indices          (m,)
    /dag/level            (C,)        longest-path level
    /forest/parent        (C,)        DT parent, -1 for roots (phase 1)
    /forest/subtree_size  (C,)        DT subtree sizes (phase 2)
    /labels/dt_post0      (C,)        DT post-order rank of dimension 0 (phase 3)
    /labels/intervals     (dims, C, 2)  [min, max] rank over DAG descendants (phase 4)

Integer arrays use the smallest type that holds their values. The file is written to a
temporary name beside the target and renamed when complete, so a failed run leaves nothing.
"""

from __future__ import annotations

import os

import numpy as np

from .dtypes import smallest_int, smallest_uint
from .errors import IndexFormatError
from .io.atomic import atomic_path

__all__ = ["FORMAT", "FORMAT_VERSION", "write_index_file", "read_index_file"]

FORMAT = "distgrail-index"
FORMAT_VERSION = 1
_ATTRS = ("seed", "dims", "parent_rule", "source_name", "source_sha256", "n_vertices", "n_components",
          "n_dag_edges", "n_levels", "distgrail_version")


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
    }
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w", libver=("earliest", "v110"), track_order=False) as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            for k in _ATTRS:
                v = meta[k]
                if k == "distgrail_version":
                    v = str(v)
                f.attrs[k] = v if not isinstance(v, (np.integer,)) else int(v)
            for name, dt in types.items():
                data = np.ascontiguousarray(arrays[name]).astype(dt, copy=False)
                f.create_dataset(name, data=data, track_times=False)


def read_index_file(path) -> tuple[dict, dict]:
    """Read an index. Raises :class:`IndexFormatError` for anything that is not a v1 index."""
    import h5py

    path = os.fspath(path)
    if not os.path.exists(path):
        raise IndexFormatError(f"{path}: no such index file")
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
        ver = int(f.attrs.get("format_version", -1))
        if ver != FORMAT_VERSION:
            raise IndexFormatError(f"{path}: index schema version {ver}, this distgrail reads version "
                                   f"{FORMAT_VERSION}; rebuild the index with this version")
        meta = {"format": FORMAT, "format_version": ver}
        for k in _ATTRS:
            v = f.attrs[k]
            meta[k] = v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)
        arrays = {}

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                arrays[name] = obj[()]

        f.visititems(visit)
    return meta, arrays
