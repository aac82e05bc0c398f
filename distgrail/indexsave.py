"""The index file written: at once (:func:`write_index_file`), or while the build runs
(:class:`EarlyIndexFile`); the layout and checks are :mod:`distgrail.indexfile`'s.

**Written while the build runs.** The write of an index took 3.1–5.4 s of a 13.5 s R-MAT 27 build
on one H200 (7.6 GB; 3.3–3.6 s of 10.8 s on two), after every phase, although most datasets are
final long before: the DAG and the component map when the condensation ends, the forest after
phases 1–2, the labels after phases 3–4, only the masks last. :class:`EarlyIndexFile` opens the
file once the layout is known (every dataset's shape, every root attribute but the input's digest,
which the background hash gives last: a placeholder of its length, rewritten in place at the end)
and creates every dataset in the order :func:`write_index_file` does, each with a first write of
zeros, so HDF5 allocates the storage in the same order (the header and every offset are the
same); :meth:`~EarlyIndexFile.put` queues a dataset's blocks as soon as its array is final (the
pool casts, writes and checksums them while the build goes on); :meth:`~EarlyIndexFile.finish`
takes the index the build assembled and, only when every dataset put is the very array it holds
and every attribute is the one written, sets the digest, the checksums and the seal and renames
the file into place: byte for byte the file :func:`write_index_file` writes of that index
(tests/test_indexsave.py). Otherwise it drops the file and says so (the caller writes the index
the usual way). A build that fails removes it (:meth:`~EarlyIndexFile.abort`).
"""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from .dtypes import smallest_int, smallest_uint
from .errors import DistGrailError
from .indexfile import (ATTRS, FORMAT, FORMAT_VERSION, LIBVER, SEAL, block_crcs, block_size, crc_pool,
                        datasets_seal, entry)
from .indexwrite import BlockWrites, StreamedArray, can_write_in_blocks, write_streamed
from .indexwrite import as_type as _as_type
from .io.atomic import atomic_path

__all__ = ["write_index_file", "stored_types", "dataset_order", "EarlyIndexFile", "PENDING_DIGEST"]

#: the hex digits of a digest not known yet when the file opens (BLAKE3 and SHA-256: 64)
PENDING_DIGEST = "0" * 64
#: a dataset of at most this many bytes may be another array of the same values (the support ids
#: the index keeps in its own type); a larger one must be the very array put
SAME_BY_VALUE = 64 << 20


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


def dataset_order(types: dict, names) -> list:
    """The order the datasets ``names`` are created in: the eight core ones, then the rest by name."""
    core = list(types)[:8]
    return core + sorted(k for k in names if k not in core)


def write_index_file(path, meta: dict, arrays: dict) -> None:
    """Write an index atomically. ``arrays`` holds the datasets named in the module docstring
    (``dag/indices`` may be a :class:`~distgrail.indexwrite.StreamedArray`)."""
    types = stored_types(meta)
    names = dataset_order(types, arrays)
    streamed = [a for a in arrays.values() if isinstance(a, StreamedArray)]
    try:
        _write_file(path, meta, arrays, types, names)
    except BaseException:
        for a in streamed:
            a.close(True)
        raise
    for a in streamed:
        a.close(False)


def _write_file(path, meta, arrays, types, names) -> None:
    import h5py

    size = sum(int(np.prod(np.shape(a), dtype=np.int64)) * np.dtype(types.get(k, _dtype(a))).itemsize
               for k, a in arrays.items()) + (64 << 10)
    with atomic_path(path, size) as tmp, crc_pool() as pool:
        crcs = {}
        with h5py.File(tmp, "w", libver=LIBVER, track_order=False) as f, \
                BlockWrites(tmp, pool) as blocks:  # left before the file closes: every block has landed
            root_attrs(f, meta)
            for name in names:  # contiguous, unfiltered: written while the pool checksums
                if isinstance(arrays[name], StreamedArray) and arrays[name].size:  # pieces as they come
                    t = np.dtype(types.get(name, arrays[name].dtype))
                    block = block_size(arrays[name].size * t.itemsize)
                    crcs[name] = (block, write_streamed(f, name, arrays[name], t, block))
                    continue
                data = np.ascontiguousarray(_whole(arrays[name]))
                t = np.dtype(types.get(name, data.dtype))
                if data.size and can_write_in_blocks(data, t):  # cast, written, checksummed by the pool
                    block = block_size(data.size * t.itemsize)
                    crcs[name] = (block, blocks.write(f, name, data, t, block))
                    continue
                data = _as_type(data, t)  # one cast copy at a time
                if data.size:
                    crcs[name] = (block_size(data.nbytes), block_crcs(data, block_size(data.nbytes), pool))
                f.create_dataset(name, data=data, track_times=False)
                del data
            seal_datasets(f, crcs, names)


def root_attrs(f, meta: dict) -> None:
    """The root attributes, in their order (before any dataset)."""
    _put_attr(f, "format", FORMAT)
    f.attrs["format_version"] = FORMAT_VERSION
    for k in ATTRS + (("supports",) if "supports" in meta else ()):
        v = meta[k]
        if k == "distgrail_version":
            v = str(v)
        _put_attr(f, k, v if not isinstance(v, (np.integer,)) else int(v))


def seal_datasets(f, crcs: dict, names) -> None:
    """Each dataset's ``crc32_block`` and ``crc32`` (``crcs``: name -> (block, CRCs or their
    futures)), in the order of ``names`` (their header space is allocated in that order, so the
    file's bytes depend on it), then the root seal over them all."""
    for name in (n for n in names if n in crcs):
        block, futs = crcs[name]
        ds = f[name]
        ds.attrs["crc32_block"] = block
        ds.attrs["crc32"] = np.array([x if isinstance(x, int) else x.result() for x in futs], dtype=np.uint32)
    _put_attr(f, SEAL, datasets_seal({name: entry(f[name])[0] for name in names}))


def _put_attr(f, key, value) -> None:
    """A root attribute; strings as fixed-length UTF-8 (read back as bytes): h5py's default,
    variable-length strings, live in a global heap whose damage crashes or hangs HDF5's reader."""
    import h5py

    if isinstance(value, str):
        data = value.encode()
        f.attrs.create(key, np.array(data, dtype=f"S{max(1, len(data))}"),
                       dtype=h5py.string_dtype("utf-8", max(1, len(data))))
    else:
        f.attrs[key] = value


def _dtype(a):
    return a.dtype if isinstance(a, (np.ndarray, StreamedArray)) else np.asarray(a).dtype


def _whole(a):
    """An array, or a streamed one of no values as an empty array."""
    return np.zeros(0, a.dtype) if isinstance(a, StreamedArray) else a


class EarlyIndexFile:
    """An index file written while the build runs (module docstring). ``meta``: the root
    attributes as :func:`~distgrail.index.assemble` makes them, ``source_digest`` possibly
    :data:`PENDING_DIGEST`; ``shapes``: ``{dataset: shape}`` of every dataset the index will hold."""

    def __init__(self, path, meta: dict, shapes: dict):
        import h5py

        types = stored_types(meta)
        self.names = dataset_order(types, shapes)
        self.meta, self.shapes = dict(meta), {k: tuple(int(x) for x in v) for k, v in shapes.items()}
        missing = [k for k in self.names if k not in types]
        if missing:
            raise DistGrailError(f"early index write: no stored type for {missing}")
        self.types = {k: np.dtype(types[k]) for k in self.names}
        size = sum(int(np.prod(self.shapes[k], dtype=np.int64)) * self.types[k].itemsize for k in self.names)
        self.put_arrays, self.crcs, self.at = {}, {}, {}
        self._stack = contextlib.ExitStack()
        try:
            tmp = self._stack.enter_context(atomic_path(path, size + (64 << 10)))
            self.pool = self._stack.enter_context(crc_pool())
            self.f = self._stack.enter_context(h5py.File(tmp, "w", libver=LIBVER, track_order=False))
            self.blocks = self._stack.enter_context(BlockWrites(tmp, self.pool))  # left before the file closes
            root_attrs(self.f, meta)
            for name in self.names:  # every dataset's storage allocated now, in write_index_file's order
                shape, t = self.shapes[name], self.types[name]
                if not int(np.prod(shape, dtype=np.int64)):
                    self.f.create_dataset(name, shape=shape, dtype=t, track_times=False)
                else:
                    self.at[name] = self.blocks.allocate(self.f, name, shape, t)
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise

    def put(self, name, data) -> None:
        """Dataset ``name``'s final array: its blocks queued (cast, written and checksummed by the
        pool; ``data`` must not change until :meth:`finish`), or written now through HDF5 (a small
        or non-integer one)."""
        if name not in self.shapes or name in self.put_arrays:
            raise DistGrailError(f"early index write: dataset {name!r} unknown or put twice")
        if tuple(np.shape(data)) != self.shapes[name]:
            raise DistGrailError(f"early index write: {name} has shape {np.shape(data)}, the file {self.shapes[name]}")
        self.put_arrays[name] = data
        t = self.types[name]
        data = np.ascontiguousarray(data)
        if not data.size:
            return
        if can_write_in_blocks(data, t):
            block = block_size(data.size * t.itemsize)
            self.crcs[name] = (block, self.blocks.queue(data, t, self.at[name], block))
            return
        data = _as_type(data, t)
        self.crcs[name] = (block_size(data.nbytes), block_crcs(data, block_size(data.nbytes), self.pool))
        self.f[name][...] = data

    def matches(self, meta: dict, arrays: dict) -> str:
        """Why the file is not the one ``write_index_file(meta, arrays)`` writes ("" when it is)."""
        if sorted(arrays) != sorted(self.names):
            return f"datasets {sorted(arrays)} against {sorted(self.names)}"
        for k in ATTRS + (("supports",) if "supports" in meta else ()):
            want, had = meta.get(k), self.meta.get(k)
            if k == "source_digest" and had == PENDING_DIGEST:
                if len(str(want).encode()) != len(PENDING_DIGEST):
                    return f"a digest of {len(str(want))} characters"
            elif str(want) != str(had):
                return f"attribute {k} {want!r} against {had!r}"
        if ("supports" in meta) != ("supports" in self.meta):
            return "attribute supports"
        for k in self.names:
            a, b = arrays[k], self.put_arrays.get(k)
            if b is None:
                return f"dataset {k} never put"
            if a is not b and not (np.shape(a) == np.shape(b) and np.asarray(b).nbytes <= SAME_BY_VALUE
                                   and np.array_equal(a, b)):
                return f"dataset {k} is not the array put"
        return ""

    def finish(self, meta: dict, arrays: dict) -> str:
        """Finish the file for the index ``(meta, arrays)`` and put it in place; "" when done, else
        why not (the file is then removed, nothing is in place)."""
        try:
            why = self.matches(meta, arrays)
            if why:
                self.abort()
                return why
            if self.meta.get("source_digest") == PENDING_DIGEST:
                _rewrite_attr(self.f, "source_digest", str(meta["source_digest"]))
            seal_datasets(self.f, self.crcs, self.names)
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        self._stack.close()
        return ""

    def abort(self) -> None:
        """Drop the file (a failed build, or an index that is not the one opened for)."""
        try:
            raise DistGrailError("the early index write was dropped")
        except DistGrailError:
            self._stack.__exit__(*sys.exc_info())


def _rewrite_attr(f, key, value: str) -> None:
    """A fixed-length string attribute rewritten in place (same length): its header message stays."""
    import h5py

    attr = h5py.h5a.open(f.id, key.encode())
    data = value.encode()
    if attr.get_type().get_size() != len(data):
        raise DistGrailError(f"early index write: attribute {key} holds {attr.get_type().get_size()} bytes, "
                             f"not {len(data)}")
    attr.write(np.array(data, dtype=f"S{len(data)}"), mtype=attr.get_type())
