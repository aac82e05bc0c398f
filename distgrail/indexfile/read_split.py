"""A split index's virtual datasets read and checked (the layout: :mod:`distgrail.indexfile.split`).

HDF5 reads a virtual dataset whose source file is missing as zeros, so nothing here trusts its
mapping alone: each part is opened beside the main file and checked (a distgrail part, of this
build, the dataset of the shape and type the main file maps), its rows read in parallel blocks
(:func:`read_virtual`) or, for a dataset left in the files (``read_index_file(defer=...)``), its
byte spans listed for :class:`~distgrail.indexfile.read.Deferred` (:func:`deferred_spans`). Any
problem is an :class:`~distgrail.errors.IndexFormatError` naming the part.
"""

from __future__ import annotations

import errno
import os
import shlex
import threading

import numpy as np

try:
    import resource  # (imported here: a read that has run out of descriptors cannot import it)
except ImportError:  # pragma: no cover - not a POSIX system
    resource = None

from ..errors import IndexFormatError
from ..io.regular import special_kind
from .layout import BUILD_ATTR, PART_FORMAT, crc32, from_vds_name, join_pieces, pieces, read_block

__all__ = ["read_virtual", "deferred_spans", "PartFiles", "OpenLimit", "open_now", "SPARE_DESCRIPTORS"]


#: the most part files one read keeps open as HDF5 at once (a split index may have a part per rank)
MAX_OPEN_PARTS = 32


class PartFiles:
    """The part files one read of a split index opens. One descriptor each, taken by name before
    any of a dataset's parts is read (:meth:`take`) and held to the end: a part that an update in
    place replaces meanwhile is still read whole, as a one-file index is (its inode stays). Each
    is opened as HDF5 through that descriptor and checked (a distgrail part of this build) when
    first met, and kept open for the next dataset it holds, at most :data:`MAX_OPEN_PARTS` at a
    time. Hundreds of parts may need more descriptors than the soft limit gives: it is raised
    toward the hard one for the read (:class:`OpenLimit`, restored by :meth:`close`), else the
    error says so.
    :meth:`close` at the end, once the read pool has stopped."""

    def __init__(self):
        self.files = {}  # part path -> (h5py.File, its file object): the first MAX_OPEN_PARTS - 1 parts met
        self.spare = None  # (part path, h5py.File, its file object): the last of the others (each dataset
        # walks the parts in one order: closing the oldest of a full cache would close every part before it
        # came round again)
        self.fds = {}  # part path -> descriptor for its block reads
        self.limit = OpenLimit()  # the soft limit of open files, as this read raised it (restored by close)

    def take(self, path, parts) -> None:
        """A descriptor of each of ``parts`` (paths) not held yet, taken before any is read: from
        then on the read sees these files whatever their names come to hold (an update in place
        that replaces the parts meanwhile). A missing part is an IndexFormatError naming it."""
        for part in parts:
            if part in self.fds:
                continue
            kind = "a directory" if os.path.isdir(part) else special_kind(part)
            if kind is not None:  # (a FIFO would block the open for ever)
                raise IndexFormatError(f"{path}: the part {os.path.basename(part)} of this split index is {kind}, not "
                                       f"a regular file (in {os.path.dirname(part)}): damaged index; write it again")
            if not os.path.exists(part):
                raise IndexFormatError(f"{path}: the part {os.path.basename(part)} of this split index is missing "
                                       f"(looked in {os.path.dirname(part)}): a split index is its main file and its "
                                       f"part files, kept in one directory, and cannot be read without each of them: "
                                       f"restore {os.path.basename(part)} there (from wherever the index was copied or "
                                       f"moved), or build the index again with 'distgrail index'")
            self.fds[part] = _descriptor(path, part, len(self.fds), self,  # (it raises the soft limit if need be)
                                         len(set(self.fds) | set(parts)))

    def file(self, path, part, build_id, h5py):
        """The part file ``part`` of the index at ``path``, open as HDF5 through its descriptor
        (:meth:`take`; unreadable, not a part or of another build: IndexFormatError naming it)."""
        if part in self.files:
            return self.files[part][0]
        if self.spare is not None and self.spare[0] == part:
            return self.spare[1]
        shown = os.path.basename(part)
        self.take(path, [part])
        if len(self.files) >= MAX_OPEN_PARTS - 1 and self.spare is not None:
            self._close_spare()
        fobj = os.fdopen(os.dup(self.fds[part]), "rb")
        try:
            f = h5py.File(fobj, "r")
        except (OSError, ValueError, RuntimeError) as e:
            fobj.close()
            raise IndexFormatError(f"{path}: the part {shown} of this split index cannot be opened (HDF5: {e})") \
                from None
        if len(self.files) < MAX_OPEN_PARTS - 1:
            self.files[part] = (f, fobj)
        else:
            self.spare = (part, f, fobj)
        try:
            fmt, bid = _text(f.attrs.get("format")), _text(f.attrs.get(BUILD_ATTR))
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
            raise IndexFormatError(f"{path}: damaged index: the part {shown} cannot be read (HDF5: {e})") from None
        if fmt != PART_FORMAT:
            raise IndexFormatError(f"{path}: {shown} is not a part of a distgrail index (attribute format={fmt!r})")
        if bid != build_id:
            raise IndexFormatError(f"{path}: the part {shown} belongs to another build (build id {bid}, this "
                                   f"index's is {build_id}): the index and its parts must come from one "
                                   f"'distgrail index --layout split' run")
        return f

    def _close_spare(self) -> None:
        _, f, fobj = self.spare
        self.spare = None
        f.close()
        fobj.close()

    def close(self) -> None:
        for f, fobj in self.files.values():
            f.close()
            fobj.close()
        if self.spare is not None:
            self._close_spare()
        for fd in self.fds.values():
            os.close(fd)
        self.files, self.fds = {}, {}
        self.limit.done()


#: descriptors kept free beside the part files a read or a write holds (HDF5's own, the pool's, the caller's)
SPARE_DESCRIPTORS = 64
#: the soft limit of open files as the reads and writes of many parts raised it: "held" by that
#: many under way that raised it, the "user"'s limit before the first, the value last "set"
#: (restored by the last to end, unless someone else changed it meanwhile)
_LIMIT: dict = {"held": 0, "user": None, "set": None}
_LIMIT_LOCK = threading.Lock()


class OpenLimit:
    """The soft limit of open files (``ulimit -Sn``) for one read or write of a split index's part
    files (:class:`PartFiles`; :func:`~distgrail.indexfile.split.write_split_index`): hundreds of
    parts may need more descriptors than the soft limit gives (1024 on many systems). :meth:`room`
    raises it toward the hard limit for the read or write; :meth:`done` at its end puts the user's
    limit back once no other read or write still needs it raised (children inherit the user's)."""

    def __init__(self):
        self.raised = False  # this read or write raised the soft limit (counted in _LIMIT)

    def room(self, need: int, least: int | None = None) -> tuple:
        """``(fits, hard)``: the soft limit raised toward the hard one (``hard``, None when
        unlimited) when ``need`` descriptors do not fit under it: to ``need``, at least twice the
        soft limit (fewer raises), never past the hard one; ``fits``: whether ``least`` (default
        ``need``) fit under it then. Always fits where there is no such limit (not POSIX)."""
        try:
            import resource
        except ImportError:  # pragma: no cover - not a POSIX system
            return True, None
        least = need if least is None else least
        with _LIMIT_LOCK:  # (read, decided and set at once: another thread's raise is never undone here)
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            unlimited = resource.RLIM_INFINITY
            shown = None if hard == unlimited else int(hard)
            if soft == unlimited or need <= soft:
                user = _LIMIT["user"]
                if user is not None and need > user:  # (fits only under another's raise: held till done)
                    self._hold(soft)
                return True, shown
            want = max(need, 2 * soft) if hard == unlimited else min(hard, max(need, 2 * soft))
            if want > soft:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
                    self._hold(soft)
                    _LIMIT["set"] = want
                    soft = want
                except (OSError, ValueError):
                    pass
        return least <= soft, shown

    def _hold(self, soft: int) -> None:
        """Count this read or write among those that need the raised limit (under _LIMIT_LOCK;
        ``soft`` the limit before a first raise: the user's)."""
        if not self.raised:
            self.raised = True
            _LIMIT["held"] += 1
        if _LIMIT["user"] is None:
            _LIMIT["user"] = soft
        if _LIMIT["set"] is None:
            _LIMIT["set"] = soft

    def done(self) -> None:
        """The read or write has ended: the last of those that raised the soft limit puts the
        user's back (unless someone else has changed it since)."""
        if not self.raised:
            return
        self.raised = False
        import resource

        with _LIMIT_LOCK:
            _LIMIT["held"] -= 1
            if _LIMIT["held"]:
                return
            user, last = _LIMIT["user"], _LIMIT["set"]
            _LIMIT["user"] = _LIMIT["set"] = None
            try:
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                if soft == last:  # (not if someone else has changed it since)
                    resource.setrlimit(resource.RLIMIT_NOFILE, (user, hard))
            except (OSError, ValueError):
                pass


def open_now(held: int = 0) -> int:
    """Descriptors this process has open (Linux: /proc/self/fd), else ``held``."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return held


def _descriptor(path, part, held: int, parts: PartFiles, total: int | None = None) -> int:
    """A read-only descriptor of ``part`` (``held`` parts already open, of ``total`` known): the
    soft limit of open files raised toward the hard one when the parts would come near it
    (:class:`OpenLimit`, restored when they close), else an IndexFormatError saying so: the limit
    is to be raised, as merging the parts (``convert --layout single``) reads every one of them too."""
    parts.limit.room(open_now(held) + MAX_OPEN_PARTS + SPARE_DESCRIPTORS)
    try:
        return os.open(part, os.O_RDONLY)
    except OSError as e:
        if e.errno in (errno.EMFILE, errno.ENFILE):  # (nothing imported here: no descriptor is left)
            total = max(int(total or 0), held + 1)
            raise IndexFormatError(f"{path}: this split index has {total:,} part files, more than this process may "
                                   f"open at once ({_limit_text()}; {held:,} parts open when it ran out): raise the "
                                   f"limit (ulimit -n {total + MAX_OPEN_PARTS + SPARE_DESCRIPTORS}; past the hard "
                                   f"limit, as an administrator), then read it, or merge the parts into one file "
                                   f"once: 'distgrail convert {shlex.quote(os.fspath(path))} --layout single -o "
                                   f"ONE.h5' (the merge reads every part too)") from None
        raise IndexFormatError(f"{path}: the part {os.path.basename(part)} of this split index cannot be opened "
                               f"({e.strerror})") from None


def _limit_text() -> str:
    """This process's limits of open files, as words."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (AttributeError, OSError, ValueError):  # pragma: no cover - not a POSIX system
        return "the limit of open files"
    inf = resource.RLIM_INFINITY
    return (f"the limit of open files {'unlimited' if soft == inf else soft}, ulimit -Sn; "
            f"hard {'unlimited' if hard == inf else hard}, ulimit -Hn")


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else v


def _spans(path, build_id, ds, name) -> list:
    """``[(first row, end row, part file name, dataset), ...]`` of the virtual dataset ``ds``, in
    row order, checked to be whole rows of plain part names that tile the dataset."""
    shape = tuple(ds.shape)
    if build_id is None:
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} is a virtual dataset, but the file carries no "
                               f"{BUILD_ATTR} attribute of a split index")
    spans = []
    for s in ds.virtual_sources():
        (lo, *rest0), (hi, *rest1) = s.vspace.get_select_bounds()
        hi += 1
        if list(rest0) != [0] * len(rest0) or [x + 1 for x in rest1] != list(shape[1:]):
            raise IndexFormatError(f"{path}: damaged index: dataset /{name} maps a part to a selection that is not "
                                   f"whole rows")
        base = from_vds_name(s.file_name)
        if base != os.path.basename(base) or base in ("", ".", ".."):
            raise IndexFormatError(f"{path}: damaged index: dataset /{name} maps rows to {base!r}, which is not a "
                                   f"part file beside the index")
        spans.append((int(lo), int(hi), base, s.dset_name))
    spans.sort()
    at = 0
    for lo, hi, base, _ in spans:
        if lo != at:
            raise IndexFormatError(f"{path}: damaged index: dataset /{name}: its parts do not cover rows {at}.."
                                   f"{lo - 1}" if lo > at else f"{path}: damaged index: dataset /{name}: two parts "
                                   f"hold row {lo}")
        at = hi
    if at != (shape[0] if shape else 0):
        covered = f"rows 0..{at - 1}" if at else "no rows"
        raise IndexFormatError(f"{path}: damaged index: dataset /{name}: its parts cover {covered} of {shape[0]}")
    return spans


def _block_of(path, name, crc) -> int:
    if crc is None:
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum error: it carries "
                               f"no checksum)")
    block = crc[1]
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        shown = block.tolist() if hasattr(block, "tolist") else block  # (as a one-file index says it)
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (checksum error: attribute "
                               f"crc32_block is {shown!r})")
    return int(block)


def read_virtual(path, build_id, ds, name, crc, pool, parts: PartFiles):
    """``(array, [the CRC-32 of every block, each a future])`` of the virtual dataset ``ds``
    (named ``name``) of the split index at ``path`` whose ``build_id`` is the main file's: each
    part opened beside the main file and checked (module doc), the rows of every part queued on
    ``pool`` at once, as a plain dataset's blocks are (reading part after part waited at each).
    The part files are opened through ``parts``, which the caller closes once ``pool`` has
    stopped. A block's ``result()`` joins the parts' pieces (and names a truncated part)."""
    import h5py

    where = os.path.dirname(os.path.realpath(os.fspath(path)))  # (a link's parts lie beside its target)
    shape, dt = tuple(ds.shape), ds.dtype.newbyteorder("<")
    spans = _spans(path, build_id, ds, name)
    block = _block_of(path, name, crc)
    out = np.empty(shape, dt)
    raw = memoryview(out.reshape(-1).view(np.uint8))
    row = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
    queued = []
    parts.take(path, [os.path.join(where, base) for _, _, base, _ in spans])
    for lo, hi, base, dset in spans:
        part = os.path.join(where, base)
        view = raw[lo * row:hi * row]
        off = _check_part(path, parts.file(path, part, build_id, h5py), part, dset, (hi - lo,) + shape[1:], dt,
                          h5py, view)
        queued.append((part, lo * row, *_read_part(parts.fds[part], off, lo * row, view, block, pool)))
    joined = _Joined(path, name, len(raw), block, queued)
    return out, [_Block(joined, k) for k in range(-(-len(raw) // block))]


class _Joined:
    """The block CRC-32s of one virtual dataset, joined from its parts' pieces once they are read."""

    def __init__(self, path, name, total: int, block: int, queued):
        self.path, self.name, self.total, self.block, self.queued = path, name, int(total), int(block), queued
        self.crcs = None

    def result(self) -> list:
        if self.crcs is None:
            got = []
            for part, first, cuts, crcs in self.queued:
                crcs = [c if isinstance(c, int) else c.result() for c in crcs]
                if any(c < 0 for c in crcs):
                    raise IndexFormatError(f"{self.path}: damaged index: the part {os.path.basename(part)} ends "
                                           f"before its data (truncated?)")
                got += [(first + a, k, c, b - a) for (k, a, b), c in zip(cuts, crcs)]
            try:
                self.crcs = join_pieces(self.total, self.block, got)
            except ValueError as e:  # pragma: no cover - the spans were checked to tile the rows
                raise IndexFormatError(f"{self.path}: damaged index: dataset /{self.name}: {e}") from None
        return self.crcs


    def parts_at(self, lo: int, hi: int) -> list:
        """The part files holding some of the dataset's bytes ``lo .. hi - 1``."""
        out = []
        for part, first, cuts, _ in self.queued:
            if any(first + a < hi and first + b > lo for _, a, b in cuts) and part not in out:
                out.append(part)
        return out


class _Block:
    """Block ``k``'s CRC-32 of a virtual dataset, as a future's ``result()``."""

    def __init__(self, joined: _Joined, k: int):
        self.joined, self.k = joined, k

    def result(self) -> int:
        return self.joined.result()[self.k]


def deferred_spans(path, build_id, ds, name, crc, parts: PartFiles):
    """``(block, [(first byte, bytes, part path, file offset), ...])`` of the virtual dataset
    ``ds`` left in its parts (every part checked now), or None where a part's dataset is not one
    plain run of bytes (it is then read whole)."""
    import h5py

    where = os.path.dirname(os.path.realpath(os.fspath(path)))  # (a link's parts lie beside its target)
    shape, dt = tuple(ds.shape), ds.dtype.newbyteorder("<")
    spans = _spans(path, build_id, ds, name)
    block = _block_of(path, name, crc)
    row = int(np.prod(shape[1:], dtype=np.int64)) * dt.itemsize
    out = []
    parts.take(path, [os.path.join(where, base) for _, _, base, _ in spans])
    for lo, hi, base, dset in spans:
        part = os.path.join(where, base)
        off = _check_part(path, parts.file(path, part, build_id, h5py), part, dset, (hi - lo,) + shape[1:], dt,
                          h5py, None)
        if off is None:
            return None
        out.append((lo * row, (hi - lo) * row, part, off))
    return block, out


def _check_part(path, f, part, dset, shape, dt, h5py, view):
    """The file offset of dataset ``dset`` in the part file ``f`` (open, already checked to be a
    part of this build: :meth:`PartFiles.file`), after checking its shape and type; None when it
    is not one plain run of bytes (its values are then copied into ``view`` when given)."""
    shown = os.path.basename(part)
    try:
        if dset not in f or not isinstance(f[dset], h5py.Dataset):
            raise IndexFormatError(f"{path}: damaged index: the part {shown} holds no readable dataset /{dset} "
                                   f"(removed, or the part's HDF5 structure damaged)")
        d = f[dset]
        if tuple(d.shape) != tuple(shape) or d.dtype.newbyteorder("<") != dt:
            raise IndexFormatError(f"{path}: damaged index: the part {shown} holds /{dset} as {d.dtype} "
                                   f"{tuple(d.shape)}, the index maps {dt} {tuple(shape)} to it")
        plain = d.chunks is None and d.compression is None and not d.external and dt.kind in "iu"
        off = d.id.get_offset() if plain else None
        if off is None and view is not None:  # (HDF5 reads it straight into the index's array)
            d.read_direct(np.asarray(view).view(dt).reshape(d.shape))
        return None if off is None else int(off)
    except IndexFormatError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{path}: damaged index: the part {shown} cannot be read (HDF5: {e})") from None


def _read_part(fd, off, first, view, block, pool) -> tuple:
    """``(cuts, CRC-32s or their futures)`` of the rows in ``view`` (the dataset's bytes from
    ``first``), cut at the whole dataset's blocks: queued on ``pool`` to be read from the part's
    descriptor ``fd`` at ``off``, or taken now when HDF5 has read them (``off`` None). A CRC of -1:
    the part ended first."""
    cuts = pieces(first, len(view), block)
    if off is None:
        return cuts, [crc32(view[a:b]) for _, a, b in cuts]
    return cuts, [pool.submit(read_block, fd, view[a:b], off + a) for _, a, b in cuts]
