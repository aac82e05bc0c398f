"""The index file written: at once (:func:`write_index_file`) or while the build runs
(:class:`EarlyIndexFile`), its large datasets in parallel blocks (:class:`BlockWrites`), a
partitioned build's DAG rows as they arrive (:func:`write_streamed`); the layout is
:mod:`distgrail.indexfile`'s, the stored types and checksums :mod:`~distgrail.indexfile.layout`'s.

**Written while the build runs.** Written at the end, the file would wait for every phase,
although most datasets are final long before: the DAG and the component map when the
condensation ends, the forest after phases 1–2, the labels after phases 3–4, only the masks last.
:class:`EarlyIndexFile` opens the
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

**Large datasets in parallel blocks**, each block's CRC-32 taken as it leaves (the mirror of the
block reads of :mod:`~distgrail.indexfile.read`). Through HDF5 a dataset is written by one thread's
copy, after a cast of the whole array to its stored type (a second copy) and with its checksums
a third pass over memory. Here HDF5 creates the dataset exactly as ``create_dataset(data=...)``
does (contiguous, no filter, storage allocated at the first write, no fill value written) and
writes its first bytes, which allocates the storage; :meth:`BlockWrites.write` then hands every
``crc32_block`` bytes of it to a thread pool: cast that block of the source array to the stored
type (a view between integer types of one size), ``os.pwritev`` it at the dataset's offset in the
file (``Dataset.id.get_offset()``) through a descriptor of its own, and the CRC-32 of the cast
bytes (all three release the GIL); the dataset's range is allocated at once first
(:func:`_reserve`). The file is byte for byte the one HDF5 alone writes (tests/test_indexwrite.py):
the same header, the same blocks, the same checksums.

HDF5 never writes these bytes again: its first write is larger than its sieve buffer (so it goes
straight to the file, leaving nothing cached to flush later), and the default fill value is
never written. The pool's writes end before the file is closed (their CRCs are needed for the
attributes); a failed write (``ENOSPC``, ``EIO``) raises its OSError from the CRC's future, which
:class:`distgrail.io.atomic.atomic_path` turns into the usual ``OutputError``, the temporary file
removed, after :meth:`BlockWrites.__exit__` cancelled the blocks not yet started and waited for
the running ones.

Datasets below :data:`distgrail.indexfile.layout.PARALLEL_MIN_BYTES`, and any of a stored type
other than little-endian integers, are written by HDF5.

**Streamed.** A :class:`StreamedArray` (a partitioned build's DAG rows, held by the ranks that
built them) is never whole in this process: :func:`write_streamed` writes its pieces as they
arrive, in order, each through HDF5 at its place, and takes the CRC-32 of every ``crc32_block``
bytes across the pieces' edges (the CRC-32 carried on); the file is the same, byte for byte.

Once an index is in place, what killed split builds of its path left beside it goes
(:func:`remove_orphans`; :mod:`~distgrail.indexfile.split` says which files, and which stay).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys

import numpy as np

from ..errors import DistGrailError
from ..io.atomic import atomic_path
from ..io.h5attrs import create_h5, flushed, put_attr as _put_attr
from .layout import (ATTRS_SEAL, BUILD_ATTR, FORMAT, FORMAT_VERSION, LIBVER, OPTIONAL_ATTRS, PART_FORMAT, SEAL, attributes_seal,
                     block_crcs, block_size, crc32, can_write_in_blocks, crc_pool, dataset_order, datasets_seal, entry,
                     pieces, remove_parts, replaced_split, root_keys, stored_types)

__all__ = ["write_index_file", "EarlyIndexFile", "PENDING_DIGEST", "BlockWrites", "as_type", "StreamedArray",
           "write_streamed", "root_attrs_of", "remove_orphans"]

#: the hex digits of a digest not known yet when the file opens (BLAKE3 and SHA-256: 64)
PENDING_DIGEST = "0" * 64
#: a dataset of at most this many bytes may be another array of the same values (the support ids
#: the index keeps in its own type); a larger one must be the very array put
SAME_BY_VALUE = 64 << 20
#: at least this many first bytes of a dataset are written by HDF5 (and again, the same, by the pool)
PREFIX_BYTES = 1 << 20


def write_index_file(path, meta: dict, arrays: dict, virtual=None, split_attrs=(), settles=(), ready=None) -> None:
    """Write an index atomically. ``arrays`` holds the datasets named in the module docstring
    (``dag/indices`` may be a :class:`StreamedArray`). A split index's main file
    (:mod:`distgrail.indexfile.split`): ``virtual`` maps the datasets its parts hold to their
    :class:`~distgrail.indexfile.split.VirtualSpec`, ``split_attrs`` are its extra root attributes
    (``(key, value)``: layout, build id) and ``settles`` its part files, provisional until it is in
    place (:func:`distgrail.io.atomic.provisional`). ``ready(name)``: returns once the values of
    ``arrays[name]`` are there (arrays still coming down from a device; their shapes and types
    are known before), called before each dataset's values are first read."""
    held = [k for k, a in arrays.items() if type(a).__name__ == "Rows"]  # (distgrail.indexfile.split.Rows)
    if held:
        raise DistGrailError(f"{os.fspath(path)}: this index holds some rows of /{held[0]} only (the other ranks of "
                             f"a split build wrote the rest into their parts): write it where it was built, or read "
                             f"it with open_index and save that")
    types = stored_types(meta)
    virtual = virtual or {}
    names = dataset_order([*arrays, *virtual])
    streamed = [a for a in arrays.values() if isinstance(a, StreamedArray)]
    replaced, mapped = replaced_split(path)  # a split index there: its parts go once this one is in place
    # the replaced index's parts go in the step the new file lands in (a signal replayed after it
    # would otherwise leave them behind for good: no later write knows their build), unless a copy
    # of its main file, or a hard link to it, still uses them (remove_parts)
    landed = (lambda: remove_parts(path, replaced, mapped)) if replaced != dict(split_attrs).get(BUILD_ATTR) else None
    try:
        _write_file(path, meta, arrays, types, names, virtual, split_attrs, settles, landed, ready)
    except BaseException:
        for a in streamed:
            a.close(True)
        raise
    for a in streamed:
        a.close(False)
    remove_orphans(path, [dict(split_attrs).get(BUILD_ATTR)])  # (a killed build's parts)


def _write_file(path, meta, arrays, types, names, virtual=None, split_attrs=(), settles=(), landed=None,
                ready=None) -> None:
    virtual = virtual or {}
    size = sum(int(np.prod(np.shape(a), dtype=np.int64)) * np.dtype(types.get(k, _dtype(a))).itemsize
               for k, a in arrays.items()) + (64 << 10)
    with atomic_path(path, size, settles, landed) as tmp, crc_pool() as pool:
        crcs = {}
        with create_h5(tmp, LIBVER) as f, BlockWrites(tmp, pool) as blocks:  # (left before the file closes)
            root_attrs(f, meta)
            root_attrs_of(f, split_attrs)
            for name in names:  # contiguous, unfiltered: written while the pool checksums
                if name in virtual:  # rows in the part files
                    virtual[name].create(f, name)
                    crcs[name] = (virtual[name].block, virtual[name].crcs)
                    continue
                if isinstance(arrays[name], StreamedArray) and arrays[name].size:  # pieces as they come
                    t = np.dtype(types.get(name, arrays[name].dtype))
                    block = block_size(arrays[name].size * t.itemsize)
                    crcs[name] = (block, write_streamed(f, name, arrays[name], t, block))
                    continue
                if ready is not None:
                    ready(name)
                data = np.ascontiguousarray(_whole(arrays[name]))
                t = np.dtype(types.get(name, data.dtype))
                if data.size and can_write_in_blocks(data, t):  # cast, written, checksummed by the pool
                    block = block_size(data.size * t.itemsize)
                    crcs[name] = (block, blocks.write(f, name, data, t, block))
                    continue
                data = as_type(data, t)  # one cast copy at a time
                if data.size:
                    crcs[name] = (block_size(data.nbytes), block_crcs(data, block_size(data.nbytes), pool))
                f.create_dataset(name, data=data, track_times=False)
                del data
            seal_datasets(f, crcs, names)
            flushed(f)  # (a failed write raises here, not in a destructor: io.h5attrs)


def root_attrs(f, meta: dict) -> None:
    """The root attributes, in their order (before any dataset)."""
    _put_attr(f, "format", FORMAT)
    f.attrs["format_version"] = FORMAT_VERSION
    for k in root_keys(meta):
        v = meta[k]
        if k == "distgrail_version":
            v = str(v)
        _put_attr(f, k, v if not isinstance(v, (np.integer,)) else int(v))


def root_attrs_of(f, pairs) -> None:
    """Root attributes ``(key, value)`` in order (strings as :func:`root_attrs` stores them)."""
    for k, v in pairs:
        _put_attr(f, k, v)


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
    _put_attr(f, ATTRS_SEAL, attributes_seal(f.attrs))  # (last: over every other root attribute)


def _dtype(a):
    return a.dtype if isinstance(a, (np.ndarray, StreamedArray)) else np.asarray(a).dtype


def _whole(a):
    """An array, or a streamed one of no values as an empty array."""
    return np.zeros(0, a.dtype) if isinstance(a, StreamedArray) else a


class EarlyIndexFile:
    """An index file written while the build runs (module docstring). ``meta``: the root
    attributes as :func:`~distgrail.index.assemble` makes them, ``source_digest`` possibly
    :data:`PENDING_DIGEST`; ``shapes``: ``{dataset: shape}`` of every dataset the index will hold;
    ``types``: the dtypes of datasets without a stored type (an extra stage's, its own)."""

    def __init__(self, path, meta: dict, shapes: dict, types: dict | None = None):
        types = {**(types or {}), **stored_types(meta)}
        self.path = os.fspath(path)
        self.replaced = replaced_split(self.path)  # a split index there: its parts go once this one is in place
        self.names = dataset_order(shapes)
        self.meta, self.shapes = dict(meta), {k: tuple(int(x) for x in v) for k, v in shapes.items()}
        missing = [k for k in self.names if k not in types]
        if missing:
            raise DistGrailError(f"early index write: no stored type for {missing}")
        self.types = {k: np.dtype(types[k]) for k in self.names}
        size = sum(int(np.prod(self.shapes[k], dtype=np.int64)) * self.types[k].itemsize for k in self.names)
        self.put_arrays, self.crcs, self.at = {}, {}, {}
        self._stack = contextlib.ExitStack()
        try:
            tmp = self._stack.enter_context(atomic_path(path, size + (64 << 10), landed=lambda: remove_parts(
                self.path, *self.replaced)))  # (the replaced split index's parts go in the rename's step)
            self.pool = self._stack.enter_context(crc_pool())
            self.f = self._stack.enter_context(create_h5(tmp, LIBVER))
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
        data = as_type(data, t)
        self.crcs[name] = (block_size(data.nbytes), block_crcs(data, block_size(data.nbytes), self.pool))
        self.f[name][...] = data

    def matches(self, meta: dict, arrays: dict) -> str:
        """Why the file is not the one ``write_index_file(meta, arrays)`` writes ("" when it is)."""
        if sorted(arrays) != sorted(self.names):
            return f"datasets {sorted(arrays)} against {sorted(self.names)}"
        for k in root_keys(meta):
            want, had = meta.get(k), self.meta.get(k)
            if k == "source_digest" and had == PENDING_DIGEST:
                if len(str(want).encode()) != len(PENDING_DIGEST):
                    return f"a digest of {len(str(want))} characters"
            elif str(want) != str(had):
                return f"attribute {k} {want!r} against {had!r}"
        for k in OPTIONAL_ATTRS:
            if (k in meta) != (k in self.meta):
                return f"attribute {k}"
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
            flushed(self.f)
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        self._stack.close()
        remove_orphans(self.path)  # (a killed split build's parts)
        return ""

    def abort(self) -> None:
        """Drop the file (a failed build, or an index that is not the one opened for)."""
        try:
            raise DistGrailError("the early index write was dropped")
        except DistGrailError:
            with contextlib.suppress(Exception):  # (dropped: closing it may fail as its write did; the
                self._stack.__exit__(*sys.exc_info())  # temporary goes all the same, no new error)


def remove_orphans(path, keep=()) -> list:
    """Remove what killed builds of the index at ``path`` left beside it (:mod:`~distgrail.indexfile.split`:
    part temporaries of processes that no longer run, parts whose build no index file in the
    directory carries); builds ``keep`` and builds whose parts a live process writes are left
    alone. The names removed; never an error (a file that cannot be removed stays).

    Another writer of the same output may be between its parts and its main file: its marker
    (:func:`~distgrail.indexfile.layout.pending_name`) is there from before its first part is
    renamed into place until its main file has landed. So a part seen in a first listing is
    judged by a second one (its writer's marker, made before the part was renamed, is seen, or
    has gone only once the main file landed) and by the index files of a third (that main file)."""
    from ..io.atomic import remove_names
    from .bases import remove_bases
    from .layout import _part_files, builds_carried, root_attrs

    d, base = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        names = os.listdir(d)
    except OSError:
        return []
    temp = re.compile(r"\." + re.escape(base) + r"(?:\.([0-9a-f]{8})(?:\.part\d+)?)?\.(tmp|old|pending)-(\d+)$")
    keep = {str(b) for b in keep if b}
    tags, busy, dead = _in_flight(names, temp)
    tags |= {b[:8] for b in keep}
    # (a live marker's: a rank's temporary on another node)
    gone = remove_names(d, [n for n, tag in dead if tag not in tags])
    gone += remove_bases(path, tags)  # (a patched index's base links no index file names: indexfile.bases)
    parts = {os.path.basename(p): p for _, p in _part_files(path, names)
             if os.path.basename(p)[len(base) + 1:][:8] not in tags}
    if not parts or busy:
        return gone
    try:  # looked at again: a writer between its parts and its main file (docstring)
        again = os.listdir(d)
        now, busy, _ = _in_flight(again, temp)
        parts = {n: p for n, p in parts.items() if n[len(base) + 1:][:8] not in now}
        if busy or not parts:
            return gone
        names = os.listdir(d)
    except OSError:
        return gone
    # the builds of the index files beside it (a file not read: it might carry any)
    carried = builds_carried(d, names, lambda n: n in parts or temp.match(n))
    if carried is None:
        return gone
    for n, p in parts.items():
        try:
            got = root_attrs(p, "format", BUILD_ATTR, "index")
        except OSError:
            continue
        # a part of this index name (distgrail's, its tag its build's) that no index file carries
        if got and got[0] == PART_FORMAT and got[2] == base and got[1] and got[1][:8] == n[len(base) + 1:][:8] \
                and got[1] not in carried | keep:
            with contextlib.suppress(OSError):
                os.remove(p)
                gone.append(n)
    return gone


def _in_flight(names, temp) -> tuple:
    """``(tags, busy, dead)`` of a directory listing ``names``: the build tags of live writers' part
    temporaries and split-write markers (``temp``'s names), whether a live writer's main file is
    being written (which parts are its, unknown), and ``[(name, tag), ...]`` of dead processes'
    temporaries and markers of a build."""
    from ..io.atomic import _alive

    tags, busy, dead = set(), False, []
    for n, (tag, kind, pid) in ((n, m.groups()) for n in names if (m := temp.match(n))):
        if int(pid) == os.getpid() or _alive(int(pid)):  # a build going on: its parts are no leftovers
            tags.add(tag)
            busy |= tag is None and kind == "tmp"
        elif tag is not None:
            dead.append((n, tag))
    tags.discard(None)
    return tags, busy, dead


def _rewrite_attr(f, key, value: str) -> None:
    """A fixed-length string attribute rewritten in place (same length): its header message stays."""
    import h5py

    attr = h5py.h5a.open(f.id, key.encode())
    data = value.encode()
    if attr.get_type().get_size() != len(data):
        raise DistGrailError(f"early index write: attribute {key} holds {attr.get_type().get_size()} bytes, "
                             f"not {len(data)}")
    attr.write(np.array(data, dtype=f"S{len(data)}"), mtype=attr.get_type())


def as_type(data: np.ndarray, t) -> np.ndarray:
    """``data.astype(t)``; between integer types of one size a view (the same bits: astype wraps
    modulo 2^bits too), so the big CSR is not copied."""
    t = np.dtype(t)
    if data.dtype == t:
        return data
    if data.dtype.kind in "iu" and t.kind in "iu" and data.dtype.itemsize == t.itemsize:
        return data.view(t)
    return data.astype(t)


def _prefix(shape, itemsize: int, want: int):
    """(selection, elements): the first whole rows of the innermost axis whose rows together hold
    at least ``want`` bytes (one run of bytes at the dataset's start, at most 2 ``want`` long)."""
    shape = tuple(int(x) for x in shape)
    row = itemsize
    for j in range(len(shape) - 1, -1, -1):
        if shape[j] * row >= want or j == 0:
            k = min(shape[j], -(-want // row))
            sel = (0,) * j + (slice(0, k),)
            return sel, k * (row // itemsize)
        row *= shape[j]
    return (), 1  # a scalar


def _write_block(fd, flat: np.ndarray, t: np.dtype, at: int, start: int, stop: int) -> int:
    """Cast the elements of ``flat`` that hold stored bytes [start, stop) to ``t``, write those
    bytes at ``at + start`` of ``fd``; their CRC-32."""
    s = t.itemsize
    e0 = start // s
    cast = as_type(flat[e0:-(-stop // s)], t)
    view = memoryview(np.ascontiguousarray(cast).view(np.uint8))[start - e0 * s:stop - e0 * s]
    done = 0
    while done < len(view):
        k = os.pwritev(fd, [view[done:]], at + start + done)
        if k <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        done += k
    return crc32(view)


def _reserve(fd, at: int, nbytes: int) -> None:
    """Allocate the dataset's blocks in the file at once (``posix_fallocate``, within the space
    HDF5 allocated): the block writes then neither extend the file nor reserve delayed blocks one
    page at a time, and a full disk is seen before any byte is written. Where the file system
    cannot allocate ahead, nothing is done."""
    if not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, at, nbytes)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise


class BlockWrites:
    """Context manager over an HDF5 file being written at ``tmp``: :meth:`write` creates a dataset
    and queues its blocks on ``pool``. Leaving it waits for every block (cancelling those not
    started when an error is leaving) and closes the descriptor; leave it before the file closes."""

    def __init__(self, tmp, pool):
        self.tmp, self.pool = tmp, pool
        self.fd = None
        self.futures = []

    def __enter__(self):
        return self

    def write(self, f, name, data: np.ndarray, t, block: int) -> list:
        """Create dataset ``name`` of file ``f`` for ``data`` stored as ``t`` and queue its writes;
        the futures of the CRC-32 of every ``block`` stored bytes (their write's error, if any)."""
        at = self.allocate(f, name, data.shape, t, data)
        return self.queue(data, t, at, block)

    def allocate(self, f, name, shape, t, data=None) -> int:
        """Create dataset ``name`` (``shape``, stored as ``t``) and write its first bytes, from
        ``data`` or zeros (:meth:`queue` writes them again), so that HDF5 allocates its storage now;
        its file offset, the range allocated in the file too (:func:`_reserve`)."""
        t = np.dtype(t)
        shape = tuple(int(x) for x in shape)
        ds = f.create_dataset(name, shape=shape, dtype=t, track_times=False)
        sieve = f.id.get_access_plist().get_sieve_buf_size()
        sel, n = _prefix(shape, t.itemsize, max(PREFIX_BYTES, 2 * sieve + 1))
        first = np.zeros(n, t) if data is None else as_type(np.ascontiguousarray(data).reshape(-1)[:n], t)
        ds[sel] = first.reshape(_sel_shape(shape, sel))  # allocates the storage
        at = ds.id.get_offset()
        if at is None:  # pragma: no cover - HDF5 allocates contiguous storage at the first write
            raise OSError(errno.EIO, f"HDF5 gave dataset /{name} no storage")
        if self.fd is None:
            self.fd = os.open(self.tmp, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        _reserve(self.fd, int(at), int(np.prod(shape, dtype=np.int64)) * t.itemsize)
        return int(at)

    def queue(self, data: np.ndarray, t, at: int, block: int, first: int = 0) -> list:
        """Queue the block writes of ``data`` (stored as ``t``) at file offset ``at`` (from
        :meth:`allocate`); the futures of the CRC-32 of every ``block`` stored bytes. ``first``:
        the byte of the whole dataset that ``data`` starts at (a split index's part): the pieces
        are then cut at the whole dataset's block boundaries
        (:func:`distgrail.indexfile.layout.pieces`)."""
        t = np.dtype(t)
        flat = np.ascontiguousarray(data).reshape(-1)
        nbytes = int(flat.size) * t.itemsize
        futs = [self.pool.submit(_write_block, self.fd, flat, t, at, a, b) for _, a, b in pieces(first, nbytes, block)]
        self.futures += futs
        return futs

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                for x in self.futures:
                    x.cancel()
            for x in self.futures:
                if not x.cancelled():
                    x.exception()  # waits; the error itself is raised by whoever takes the CRC
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
        return False


class StreamedArray:
    """A 1-D dataset of ``size`` values of ``dtype`` that arrive as pieces (1-D arrays, in order,
    from ``pieces()``) while it is written: :func:`write_streamed`. ``close(failed)`` is called
    once the write is over, whether it ended well or not (the senders are released)."""

    def __init__(self, size: int, dtype, pieces, close=None):
        self.size = int(size)
        self.shape = (self.size,)
        self.dtype = np.dtype(dtype)
        self._pieces, self._close = pieces, close

    def pieces(self):
        return self._pieces()

    def close(self, failed: bool) -> None:
        if self._close is not None:
            close, self._close = self._close, None
            close(failed)


def write_streamed(f, name, src: StreamedArray, t, block: int) -> list:
    """Create dataset ``name`` (``src.shape``, stored as ``t``) of file ``f`` and write ``src``'s
    pieces into it as they come; the CRC-32 of every ``block`` stored bytes. A source that gives
    more or fewer values than its size is an error (nothing is taken for granted)."""
    t = np.dtype(t)
    ds = f.create_dataset(name, shape=src.shape, dtype=t, track_times=False)
    crcs, crc, filled, at = [], 0, 0, 0
    for piece in src.pieces():
        p = np.ascontiguousarray(as_type(np.asarray(piece).reshape(-1), t))
        if at + p.size > src.size:
            raise ValueError(f"/{name}: more than its {src.size:,} values arrived")
        if not p.size:
            continue
        ds[at:at + p.size] = p
        at += p.size
        mv = memoryview(p.view(np.uint8))
        while len(mv):
            take = min(block - filled, len(mv))
            crc = crc32(mv[:take], crc)
            filled += take
            mv = mv[take:]
            if filled == block:
                crcs.append(crc)
                crc = filled = 0
    if at != src.size:
        raise ValueError(f"/{name}: {at:,} of its {src.size:,} values arrived")
    if filled:
        crcs.append(crc)
    return crcs


def _sel_shape(shape, sel) -> tuple:
    """The shape of ``array[sel]`` for a prefix selection of :func:`_prefix`."""
    j = len(sel) - 1
    return (sel[j].stop,) + tuple(int(x) for x in shape[j + 1:]) if sel else ()
