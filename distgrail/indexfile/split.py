"""The split layout: one index in a main file and part files that its ranks write side by side.

One file takes its writes through one inode: on ext4 several writers of one file gain nothing,
while separate files take them in parallel (docs/benchmarks.md). In the split layout
(``distgrail index --layout split``) each rank writes the rows it holds into a part file of its
own, ``<index>.<build>.part<r>`` (:func:`~distgrail.indexfile.layout.part_name`), and rank 0
writes the main file: the root attributes, the small datasets, and every large one as an HDF5
*virtual dataset* whose rows map to the part files.
Users open the main file as before (``open_index``, ``query``, ``serve``, ``info``); plain h5py
reads it too while the parts are beside it.

**Content identical to the single file.** A dataset's values, type and shape are the single
file's, and so are its checksum attributes: the CRC-32 of every ``crc32_block`` bytes of the
whole dataset's little-endian bytes, kept on the virtual dataset in the main file. A part's rows
start anywhere in those bytes, so each rank takes the CRC-32 of *pieces*: its bytes cut at the
whole dataset's block boundaries (:func:`~distgrail.indexfile.layout.pieces`); rank 0 joins the pieces of a block that
crosses parts with :func:`~distgrail.indexfile.layout.crc32_combine` (zlib's, which Python does not expose). The root seal
(``crc32_of_datasets``) is over the same entries, so it is the single file's too;
``distgrail convert --layout single`` writes the very file a single-layout build writes.

**Parts checked, never guessed.** HDF5 reads a virtual dataset whose part file is missing as
zeros. The reader (:func:`distgrail.indexfile.read.read_virtual`) therefore opens each part itself, beside the main file:
missing, moved, of another build (the root attribute ``build_id``, a random id the main file and
every part carry), of another shape or type, or damaged, it is an
:class:`~distgrail.errors.IndexFormatError` naming the part; the rows are read in parallel
blocks, as a plain dataset's, and checked against the main file's checksums.

**Atomic, across ranks.** Each part is written under a temporary name (:class:`PartFile`); the
parts are renamed into place only once every rank has written its own, then rank 0 writes the
main file (atomically, last) and removes the replaced index's parts, unless an index file in the
directory still carries its build (a copy of its main file, or a hard link to it, maps the same
parts: :func:`~distgrail.indexfile.layout.remove_parts`). A failure anywhere removes every
new part, and so does SIGTERM or SIGINT until the main file is in place
(:func:`~distgrail.io.atomic.provisional`); an earlier index at the same path stays whole (its
parts carry its own build's tag).

**A killed build's leftovers go with the next index written there.** A build killed outright
(SIGKILL, a lost node) leaves its parts' temporaries, or its parts renamed into place with no main
file: their build tag is new, so neither the replaced index's removal nor the temporaries' removal
(both by name) ever found them. Once an index (of either layout) is in place at a path,
:func:`~distgrail.indexfile.write.remove_orphans` removes, beside it, the part temporaries of that
path whose process no longer runs, and the part files of that path (by name, and by their root
attributes: a part of this very index name) whose build no index file in the directory carries;
none while a live process writes an index of that name (its parts may be in place before its main
file: a split write's marker, ``.<index>.<build>.pending-PID``, says so from before its first part
is renamed into place until its main file has landed, :class:`pending`), and none when a file
there cannot be read (it might carry them). An index renamed away in
the same directory keeps its parts; one moved to another directory without them was unreadable.
"""

from __future__ import annotations

import contextlib
import os
import sys
import uuid

import numpy as np

from ..errors import DistGrailError, IndexFormatError
from ..io.atomic import atomic_path, provisional
from ..io.h5attrs import create_h5, flushed
from .layout import BUILD_ATTR, LIBVER, PART_FORMAT, block_size, crc32, crc_pool, join_pieces, part_name, pieces, \
    split_build, vds_name

__all__ = ["SPLIT", "MAX_PARTS", "check_parts", "check_part_dir", "new_build_id", "PartFile", "VirtualSpec", "split_rows", "split_attrs", "virtual_specs",
           "write_split_index", "open_limit", "parts_for", "pending", "Rows"]

#: the most part files ``--parts`` asks for (``convert``, ``update``): a reader or writer holds every part
#: open at once, and parts past the rows of the datasets would be files of nothing. An index with
#: more (an MPI build writes one part per rank) is read, and updated in its own layout, as it is.
MAX_PARTS = 1024


def check_parts(parts: int, option: str = "--parts", most: int | None = None) -> int:
    """``parts`` if it is 1..``most`` (default :data:`MAX_PARTS`), else a DistGrailError naming
    ``option`` and the value."""
    most = MAX_PARTS if most is None else most
    if not 1 <= int(parts) <= most:
        raise DistGrailError(f"{option} must be 1..{most} (part files of a split index), got {parts}")
    return int(parts)


def check_part_dir(path, r: int) -> None:
    """Raise :class:`~distgrail.errors.OutputError` now if rank ``r`` cannot write its part of the
    index at ``path`` (rank 0's output, relative paths taken from this rank's working directory:
    where the part goes). Under MPI every rank checks before the build (a node-local directory
    missing on one node, or not writable there, failed only when the parts were written)."""
    from ..errors import OutputError

    d = os.path.dirname(os.path.abspath(os.fspath(path)))
    why = ("does not exist" if not os.path.isdir(d) else
           "is not writable" if not os.access(d, os.W_OK | os.X_OK) else None)
    if why:
        raise OutputError(f"{os.fspath(path)}: cannot write part {r} of the index on rank {r}: directory {d} {why} "
                          f"(every rank writes its part beside the index: a directory every rank shares, "
                          f"or --layout single)")


def new_build_id() -> str:
    return uuid.uuid4().hex


def split_rows(rows: int, parts: int) -> list:
    """``parts + 1`` row bounds splitting ``rows`` into even blocks (the first ones one larger)."""
    q, r = divmod(int(rows), int(parts))
    return [i * q + min(i, r) for i in range(parts + 1)]


# -- writing -------------------------------------------------------------------------------------

class VirtualSpec:
    """A large dataset of the main file: ``shape``, stored type ``dtype``, ``sources`` as
    ``[(part file's base name, first row, end row), ...]`` in row order, its ``block`` and the
    CRC-32 of each (:func:`join_pieces`)."""

    def __init__(self, shape, dtype, sources, block: int, crcs):
        self.shape, self.dtype = tuple(int(x) for x in shape), np.dtype(dtype)
        self.sources, self.block, self.crcs = list(sources), int(block), list(crcs)

    def create(self, f, name) -> None:
        """The virtual dataset ``name`` in the main file ``f``."""
        import h5py

        lay = h5py.VirtualLayout(shape=self.shape, dtype=self.dtype)
        for base, lo, hi in self.sources:
            if hi > lo:
                lay[lo:hi] = h5py.VirtualSource(vds_name(base), name, shape=(hi - lo,) + self.shape[1:],
                                                dtype=self.dtype)
        parent = os.path.dirname(name)
        if parent and parent not in f:
            f.create_group(parent, track_order=False)
        f.create_virtual_dataset(name, lay)


class PartFile:
    """Part ``r`` of ``parts`` of the index at ``path`` (module doc), written under a temporary
    name: :meth:`put` the rows this rank holds (in parallel blocks, the CRC-32 of every piece
    taken as it leaves), :meth:`pieces` once all are put, then :meth:`close` (``ok``: renamed into
    place) and, should the index fail after that, :meth:`remove`."""

    def __init__(self, path, r: int, parts: int, build_id: str, nbytes: int, hold: bool = True, pool=None):
        """``pool``: the CRC-32 threads (:func:`~distgrail.indexfile.layout.crc_pool`) of a
        process writing many parts at once, shared by them (else its own, closed with it)."""
        from .write import BlockWrites, root_attrs_of

        self.path = part_name(path, r, build_id)
        self.hold = hold  # provisional once in place, until its main file is (else the writer of that says)
        self.put_rows = {}
        self._stack = contextlib.ExitStack()
        try:
            tmp = self._stack.enter_context(atomic_path(self.path, int(nbytes) + (64 << 10)))
            self.pool = pool if pool is not None else self._stack.enter_context(crc_pool())
            self.f = self._stack.enter_context(create_h5(tmp, LIBVER))
            self.blocks = self._stack.enter_context(BlockWrites(tmp, self.pool))  # left before the file closes
            root_attrs_of(self.f, (("format", PART_FORMAT), (BUILD_ATTR, build_id), ("part", int(r)),
                                   ("parts", int(parts)), ("index", os.path.basename(os.fspath(path)))))
        except BaseException:
            self._stack.__exit__(*sys.exc_info())
            raise
        self.closed = False

    def put(self, name, shape, t, lo: int, data) -> None:
        """Rows ``lo .. lo+len(data)-1`` of dataset ``name`` (whole ``shape``, stored as ``t``); a
        failed write (no space, an I/O error) is an OutputError naming this part."""
        try:
            self._put(name, shape, t, lo, data)
        except OSError as e:
            raise _named(self.path, e) from None

    def _put(self, name, shape, t, lo: int, data) -> None:
        from .layout import can_write_in_blocks
        from .write import as_type

        t = np.dtype(t)
        data = np.ascontiguousarray(data)
        shape = tuple(int(x) for x in shape)
        row = int(np.prod(shape[1:], dtype=np.int64)) * t.itemsize
        first, total = int(lo) * row, int(np.prod(shape, dtype=np.int64)) * t.itemsize
        block = block_size(total)
        if not data.size:
            return
        if can_write_in_blocks(data, t):
            at = self.blocks.allocate(self.f, name, data.shape, t, data)
            futs = self.blocks.queue(data, t, at, block, first=first)
        else:
            cast = np.ascontiguousarray(as_type(data, t))
            self.f.create_dataset(name, data=cast, track_times=False)
            raw = memoryview(cast.reshape(-1).view(np.uint8))

            futs = [crc32(raw[a:b]) for _, a, b in pieces(first, len(raw), block)]
        self.f[name].attrs["first_row"] = int(lo)
        self.put_rows[name] = (int(lo), int(lo) + int(data.shape[0]), first, block, int(data.size) * t.itemsize, futs)

    def pieces(self) -> dict:
        """``{name: (first row, end row, [(first byte, block index, crc, length), ...])}``: what the
        main file needs of this part (waits for the block writes: their errors are raised here)."""
        out = {}
        try:
            for name, (lo, hi, first, block, nbytes, futs) in self.put_rows.items():
                got = [(first + a, k, x if isinstance(x, int) else x.result(), b - a)
                       for (k, a, b), x in zip(pieces(first, nbytes, block), futs)]
                out[name] = (lo, hi, got)
        except OSError as e:
            raise _named(self.path, e) from None
        return out

    def close(self, ok: bool) -> None:
        """Close the file: renamed into place when ``ok``, else removed."""
        if self.closed:
            return
        self.closed = True
        if ok:
            if self.hold:  # (a signal before the main file is in place removes it; held before the
                provisional(self.path, True)  # rename, so that no signal finds it in place unheld)
            try:
                try:
                    flushed(self.f)  # (a failed write raises here, not in a destructor: io.h5attrs)
                except BaseException:
                    self._stack.__exit__(*sys.exc_info())  # (the part removed; its OutputError raised)
                    raise
                self._stack.close()
            except BaseException as e:
                provisional(self.path, False)
                raise _named(self.path, e) if isinstance(e, OSError) else e
            return
        try:
            raise IndexFormatError("the part was dropped")
        except IndexFormatError:
            with contextlib.suppress(Exception):  # (dropped: closing it may fail as its write did; the
                self._stack.__exit__(*sys.exc_info())  # temporary goes all the same, and no new error
                # replaces the one every rank shares: under MPI it would leave the others waiting)

    def remove(self) -> None:
        """Remove the part put in place (the index it belongs to failed after it)."""
        self.close(False)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        provisional(self.path, False)




class pending:
    """Context manager: the marker of a split write of ``path`` by build ``build``
    (:func:`~distgrail.indexfile.layout.pending_name`), made on entering (before any part is
    renamed into place) and removed on leaving (once the main file has landed, or the write
    failed; provisional until then, so that a signal removes it with the parts: the main file's
    writer ``settles`` it, removed in the step its file lands in): meanwhile another writer's :func:`~distgrail.indexfile.write.remove_orphans` leaves
    this build's parts alone. Left by a process killed outright, it goes with the next index
    written there (its process no longer runs)."""

    def __init__(self, path, build: str):
        from .layout import pending_name

        self.path, self.marker = os.fspath(path), pending_name(path, build)
        self.build = build

    def __enter__(self):
        from ..io.atomic import check_output

        check_output(self.path)
        provisional(self.marker, True)  # (a signal removes it with the parts)
        try:
            fd = os.open(self.marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                os.write(fd, f"{self.build}\n".encode())
            finally:
                os.close(fd)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(self.marker)
            provisional(self.marker, False)
            raise _named(self.path, e) from None
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.marker)
        provisional(self.marker, False)
        return False


def _named(path, e: OSError) -> OSError:
    """``e`` as an OutputError naming the part ``path`` (a DistGrailError as it is)."""
    from ..io.atomic import output_error

    return e if isinstance(e, DistGrailError) else output_error(path, e)


#: the datasets a split index keeps in its parts, when not empty (the others stay in the main file)
SPLIT = ("vertex/component", "dag/indptr", "dag/indices", "dag/level", "forest/parent", "forest/subtree_size",
         "labels/dt_post0", "labels/intervals", "supports/out", "supports/in")


class Rows:
    """Rows ``lo .. lo+len(data)-1`` of a dataset of ``shape`` held here, standing in the index
    of a build across ranks for a dataset whose other rows other ranks hold and write into their
    own parts (the labels, when only rank 0 assembles the index and it is written split)."""

    def __init__(self, shape, dtype, lo: int, data):
        self.shape, self.dtype, self.lo, self.data = tuple(int(x) for x in shape), np.dtype(dtype), int(lo), data
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def __repr__(self):
        return f"<rows {self.lo}..{self.lo + len(self.data) - 1} of a {self.shape} dataset; the rest in other parts>"


def split_attrs(build_id: str, parts: int) -> tuple:
    """The main file's extra root attributes."""
    return (("layout", "split"), (BUILD_ATTR, build_id), ("parts", int(parts)))


def virtual_specs(path, shapes: dict, got, build_id: str) -> dict:
    """``{name: VirtualSpec}`` of the main file from ``shapes`` (``{name: (shape, stored type)}``
    of the datasets in parts) and ``got``: every part's :meth:`PartFile.pieces`, in part order."""
    out = {}
    for name, (shape, t) in shapes.items():
        sources, pcs = [], []
        for r, held in enumerate(got):
            if name in held:
                lo, hi, p = held[name]
                sources.append((os.path.basename(part_name(path, r, build_id)), lo, hi))
                pcs += p
        total = int(np.prod(shape, dtype=np.int64)) * np.dtype(t).itemsize
        block = block_size(total)
        out[name] = VirtualSpec(shape, t, sources, block, join_pieces(total, block, pcs))
    return out


def parts_for(shapes, parts: int) -> int:
    """The part files a split write of datasets of ``shapes`` (their shapes) in ``parts`` writes:
    ``parts``, at most the rows of the largest dataset (each part then holds at least one row
    of it: a part past every dataset's rows would be a file of nothing); at least one."""
    rows = max((int(s[0]) for s in shapes if len(s)), default=0)
    return max(1, min(int(parts), rows))


def write_split_index(path, meta: dict, arrays: dict, parts: int = 1, ready=None) -> int:
    """Write the index ``(meta, arrays)`` in the split layout from one process: ``parts`` part
    files (at most the rows of its largest dataset: :func:`parts_for`), the rows of each large
    dataset split evenly over them, then the main file. The part files written (its ``parts``
    attribute). ``ready``: as :func:`~distgrail.indexfile.write.write_index_file`'s."""
    from .layout import stored_types
    from .write import StreamedArray

    if int(parts) < 1:  # (no upper bound here: an index of many parts keeps them through an update)
        raise DistGrailError(f"{os.fspath(path)}: a split index needs at least one part file, got parts={parts}")
    types = stored_types(meta)
    if any(isinstance(a, Rows) for a in arrays.values()):
        raise IndexFormatError(f"{os.fspath(path)}: this index holds some rows only (the other ranks' parts): it is "
                               f"written by the ranks that built it, or read back with open_index")
    inparts = {k: (tuple(np.shape(a)), np.dtype(types.get(k, a.dtype))) for k, a in arrays.items()
               if k in SPLIT and not isinstance(a, StreamedArray) and np.size(a)}
    parts = parts_for([shape for shape, _ in inparts.values()], parts)
    limit = open_limit(path, parts)  # (before any file: a limit too low is refused here)
    try:
        build = new_build_id()
        with pending(path, build) as mark:  # (another writer's orphan removal: module doc)
            return _write_split(path, meta, arrays, parts, ready, inparts, build, mark.marker)
    finally:
        limit.done()


#: descriptors each part file holds while one process writes a split index (all of them open until
#: every part is written): its HDF5 file and its block writes'
PART_DESCRIPTORS = 2
#: descriptors a split write needs beside its parts' at the least (the main file, HDF5's, the
#: caller's): fewer under the hard limit of open files is refused before the write
WRITE_SPARE = 16


def open_limit(path, parts: int):
    """The :class:`~distgrail.indexfile.read_split.OpenLimit` of one process writing ``parts``
    part files of the index at ``path``: the soft limit of open files raised toward the hard one
    when they would not fit under it (the reader's rule; its ``done()`` restores it), else, when
    the hard limit cannot hold them, an OutputError naming the limit and the ways out, raised
    before any file is written."""
    from ..errors import OutputError
    from .read_split import SPARE_DESCRIPTORS, OpenLimit, open_now

    limit = OpenLimit()
    now = open_now()
    least = now + PART_DESCRIPTORS * int(parts) + WRITE_SPARE
    fits, hard = limit.room(least - WRITE_SPARE + SPARE_DESCRIPTORS, least)
    if not fits:
        limit.done()
        cap = hard if hard is not None else _soft_limit()  # (no hard limit: the system refused the raise)
        most = (cap - now - WRITE_SPARE) // PART_DESCRIPTORS
        fewer = f"about {most} fit" if most > 0 else "not even one fits"
        what = f"hard limit of open files ({hard}, ulimit -Hn)" if hard is not None else \
            f"limit of open files ({cap}; the system refused to raise it)"
        raise OutputError(f"{os.fspath(path)}: cannot write {parts} part files: one process writing a split index "
                          f"holds every part open, about {least} files here, past this process's {what}: give "
                          f"fewer --parts ({fewer}), or raise the limit "
                          f"(ulimit -n {least}; past the hard limit, as an administrator)")
    return limit


def _soft_limit() -> int:
    """This process's soft limit of open files (``ulimit -Sn``)."""
    import resource

    return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _write_split(path, meta, arrays, parts, ready, inparts, build, marker) -> int:
    """The parts, then the main file (:func:`write_split_index`), the CRC-32 threads shared by
    the parts (a pool each: up to 16 threads a part, held while all of them are open)."""
    with crc_pool() as pool:  # (one for every part: each held open until all are written)
        return _write_parts(path, meta, arrays, parts, ready, inparts, build, marker, pool)


def _write_parts(path, meta, arrays, parts, ready, inparts, build, marker, pool) -> int:
    """:func:`_write_split`'s work, ``pool`` its parts' CRC-32 threads."""
    from .write import write_index_file

    files = []
    try:
        for r in range(parts):
            mine = {k: split_rows(shape[0], parts)[r:r + 2] for k, (shape, _) in inparts.items()}
            nbytes = sum((hi - lo) * int(np.prod(inparts[k][0][1:], dtype=np.int64)) * inparts[k][1].itemsize
                         for k, (lo, hi) in mine.items())
            pf = PartFile(path, r, parts, build, nbytes, pool=pool)
            files.append(pf)
            for k, (lo, hi) in mine.items():
                if ready is not None:
                    ready(k)
                pf.put(k, inparts[k][0], inparts[k][1], lo, arrays[k][lo:hi])
        virtual = virtual_specs(path, inparts, [pf.pieces() for pf in files], build)
        for pf in files:
            pf.close(True)
        write_index_file(path, meta, {k: a for k, a in arrays.items() if k not in inparts}, virtual,
                         split_attrs(build, parts), settles=[pf.path for pf in files] + [marker], ready=ready)
        return parts
    except BaseException:
        if split_build(path) != build:  # (once the main file is in place, its parts stay, whatever came after)
            for pf in files:
                pf.remove()
        raise
