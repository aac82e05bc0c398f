"""The index file's schema, shared by its writer and its reader: the format's constants, the
stored type of every dataset and their order, the CRC-32 blocks and the seal over them, and which
datasets go through the thread pool in parallel blocks (:mod:`distgrail.indexfile` describes the
layout; :mod:`~distgrail.indexfile.write` and :mod:`~distgrail.indexfile.read` use these).
"""

from __future__ import annotations

import os
import re
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import cores
from ..dtypes import smallest_int, smallest_uint
from .probe import BUILD_ATTR, check_main_file


def _crc32_function():
    """zlib's CRC-32 (the one every index file stores), from ISA-L (python-isal, a dependency)
    where it imports and gives zlib's values on a probe, else from zlib. ISA-L's runs on the
    processor's carry-less multiply; both release the GIL, so the block pools run either in
    parallel (docs/benchmarks.md, session 28: the read of a large index is bound by it)."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib.crc32
    probe = bytes(range(256)) * 33
    if isal_zlib.crc32(probe) != zlib.crc32(probe) or isal_zlib.crc32(probe, 0x1234567) != zlib.crc32(probe, 0x1234567):
        return zlib.crc32
    return isal_zlib.crc32


#: ``crc32(data, value=0)``, zlib's checksum (see :func:`_crc32_function`)
crc32 = _crc32_function()

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CHUNK_BYTES", "CRC_BLOCK", "LIBVER", "ATTRS", "SEAL", "ATTRS_SEAL",
           "PARALLEL_MIN_BYTES", "block_size", "block_crcs", "crc32", "crc_pool", "entry", "datasets_seal", "attributes_seal", "stored_types",
           "dataset_order", "can_read_in_blocks", "can_write_in_blocks", "REQUIRED", "PART_FORMAT", "BUILD_ATTR", "part_name",
           "crc32_combine", "pieces", "join_pieces", "read_block", "read_into", "index_parts", "remove_parts", "split_build", "vds_name",
           "from_vds_name", "not_an_index", "replaced_split", "root_attrs", "attr_carried", "builds_carried", "TEMPORARY", "pending_name",
           "BY_LEVEL", "OPTIONAL_ATTRS", "root_keys"]

FORMAT = "distgrail-index"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
#: the dataset of an updated index recording its inserted edges, (k, 2) int64 original vertex ids
#: (``distgrail update``; its writer is :mod:`distgrail.update`)
UPDATES = "updates/edges"
#: upper bound of a dataset chunk in files of earlier releases (fletcher32 on every chunk)
CHUNK_BYTES = 256 << 10
#: bytes per CRC-32 of a dataset (at least: a dataset gets at most _MAX_CRCS of them)
CRC_BLOCK = 4 << 20
_MAX_CRCS = 8192  # keeps the attribute far below HDF5's 64 KiB limit of compact attributes
#: HDF5 file format bounds the index is written with
LIBVER = ("earliest", "v110")
ATTRS = ("seed", "dims", "parent_rule", "source_name", "source_digest", "source_digest_algorithm", "n_vertices",
          "n_components", "n_dag_edges", "n_levels", "distgrail_version")
#: optional root attribute, integer 0 or 1 (absent: 1, as in every index a build writes): whether the
#: components are numbered by level (``dag/level`` non-decreasing). 0: an update kept the component
#: ids and raised levels in place, so the query code reads each component's level instead of
#: comparing ids (:mod:`distgrail.indexfile.levels`)
BY_LEVEL = "components_by_level"
#: root attributes written and read only where the index's ``meta`` (or the file) holds them
OPTIONAL_ATTRS = ("supports", BY_LEVEL)
#: root attribute: BLAKE3 over every dataset's name, type, shape and checksums (:func:`datasets_seal`)
SEAL = "crc32_of_datasets"
#: root attribute: BLAKE3 over every root attribute but the seals (:func:`attributes_seal`; files of
#: earlier releases carry none)
ATTRS_SEAL = "blake3_of_attributes"
#: datasets at least this large are written and read in parallel blocks (smaller ones by HDF5)
PARALLEL_MIN_BYTES = 16 << 20
#: the eight core datasets every index holds, in the order they are created
REQUIRED = ("vertex/component", "dag/indptr", "dag/indices", "dag/level", "forest/parent",
            "forest/subtree_size", "labels/dt_post0", "labels/intervals")


def root_keys(meta) -> tuple:
    """The root attributes of an index with ``meta`` (or a file's attributes), in their order:
    :data:`ATTRS`, then the :data:`OPTIONAL_ATTRS` it holds."""
    return ATTRS + tuple(k for k in OPTIONAL_ATTRS if k in meta)


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
    return [pool.submit(crc32, p) for p in parts] if pool is not None else [crc32(p) for p in parts]


def crc_pool():
    return ThreadPoolExecutor(max_workers=max(1, min(16, cores.usable())), thread_name_prefix="distgrail-crc")


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


def attributes_seal(attrs) -> str:
    """``"blake3:<hex>"`` over every root attribute of ``attrs`` (an h5py ``AttributeManager``)
    but the two seals (:data:`SEAL` checks itself against the datasets; whether it is there is
    sealed): name, type, shape and bytes as HDF5 gives them back, in name order: the
    root attribute ``blake3_of_attributes``. The datasets' seal covers the arrays; this one the
    provenance (the input's digest and name, the seed, the parent rule, the counts), which a
    flipped byte otherwise changed unnoticed (a fuzzing reviewer, session 41). A patched index's
    ``patch_`` attributes are left out (its own seal covers them: :mod:`~distgrail.indexfile.patch`),
    so its seal is the one a whole write of the same index carries."""
    import blake3

    h = blake3.blake3()
    h.update(f"{SEAL}: {SEAL in attrs}\n".encode())  # (whether it is there: one byte could drop it)
    for name in sorted(k for k in attrs if k not in (SEAL, ATTRS_SEAL) and not k.startswith("patch_")):
        a = np.asarray(attrs[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.tobytes() if a.dtype.kind != "O" else repr(a.tolist()).encode())
        h.update(b"\n")
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


# -- a split index (distgrail.indexfile.split): its parts, and the CRC-32 of pieces ----------------

#: root attribute ``format`` of a split index's part file
PART_FORMAT = "distgrail-index-part"


def not_an_index(attrs, fmt) -> str:
    """What a distgrail file whose root attribute ``format`` is ``fmt`` (not an index) is, and
    what to give instead, as the tail of the error (else ''): a split index's part file (its main
    file), a binary graph file (``distgrail index`` builds an index of it)."""
    if fmt == PART_FORMAT:
        index = attrs.get("index")
        index = index.decode(errors="replace") if isinstance(index, bytes) else index
        r, parts = attrs.get("part"), attrs.get("parts")
        ints = all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in (r, parts))
        main = f"its main file (written as {index}, beside its parts)" if isinstance(index, str) and index else \
            "its main file"
        return f": it is {f'part {r} of {parts} ' if ints else 'a part '}of a split index; open {main}"
    if fmt == "distgrail-graph":
        return ": it is a binary graph file (distgrail convert's); build an index of it with 'distgrail index'"
    return ""


def part_name(path, r: int, build_id: str) -> str:
    """The path of part ``r`` of the index at ``path`` written by build ``build_id``: beside it,
    ``<path>.<first 8 hex digits of the build id>.part<r>``. The build's tag keeps an earlier
    index's parts in place until the new main file replaces it (atomically): a build that fails
    leaves the earlier index whole."""
    return f"{os.fspath(path)}.{build_id[:8]}.part{int(r)}"


def pending_name(path, build_id: str, pid: int | None = None) -> str:
    """The marker of a split write of ``path`` by build ``build_id`` in process ``pid`` (this one):
    ``.<name>.<tag>.pending-<pid>`` beside it, there from before its parts are renamed into place
    until its main file has landed (:func:`distgrail.indexfile.write.remove_orphans` leaves the
    parts of that tag alone while the process runs)."""
    d, base = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(d, f".{base}.{build_id[:8]}.pending-{os.getpid() if pid is None else int(pid)}")


def _part_files(path, names=None) -> list:
    """``[(r, path), ...]`` of the files beside ``path`` named as parts of an index there (any
    build); among ``names`` (a listing of its directory) when given."""
    d, base = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        names = os.listdir(d) if names is None else names
    except OSError:
        return []
    out = []
    for n in names:
        if not n.startswith(base + "."):
            continue
        tag, sep, r = n[len(base) + 1:].rpartition(".part")
        if sep and len(tag) == 8 and all(c in "0123456789abcdef" for c in tag) and r.isascii() and r.isdigit():
            out.append((int(r), os.path.join(d, n)))
    return sorted(out)


def index_parts(path) -> list:
    """The part files the split index at ``path`` maps, beside it, in part order ([] for a one-file
    index): the sources of its virtual datasets, as the reader opens them. Read from the main file,
    never made from its name: a main file renamed or copied (``mv s.h5 keep.h5``) still maps the
    parts named after the name it was written under."""
    import h5py

    where = os.path.dirname(os.path.realpath(os.fspath(path)))  # (a link's parts lie beside its target)
    names = set()
    check_main_file(path)  # (HDF5 could crash reading the mappings below)

    def visit(_, obj):
        if isinstance(obj, h5py.Dataset) and obj.is_virtual:
            names.update(from_vds_name(s.file_name) for s in obj.virtual_sources())

    with h5py.File(os.fspath(path), "r") as f:
        if f.attrs.get(BUILD_ATTR) is None:
            return []
        f.visititems(visit)
    names = [n for n in names if n == os.path.basename(n) and n not in ("", ".", "..")]  # (what the reader takes)
    return [os.path.join(where, n) for n in sorted(names, key=_part_order)]


def _part_order(name: str) -> tuple:
    """Sort key of a part file's name: its part number (``....part<r>``), then the name."""
    _, sep, r = name.rpartition(".part")
    return (int(r), name) if sep and r.isascii() and r.isdigit() else (-1, name)


def split_build(path) -> str | None:
    """The build id of the split index at ``path`` (None: no such file, no regular file, no HDF5
    file, or not a split index). A file without HDF5's signature is told by its first bytes
    (:func:`root_attrs`): every output written over another (a text graph, answers) asks."""
    path = os.fspath(path)
    if not os.path.isfile(path):  # (a FIFO is never opened: it could block)
        return None
    try:
        got = root_attrs(path, BUILD_ATTR)
    except OSError:
        return None
    return None if got is None else got[0]


def replaced_split(path) -> tuple:
    """``(build id, [the part files it maps])`` of the split index at ``path`` that a write is about
    to replace; ``(None, [])`` when there is none (never an error: a file that cannot be read has
    no parts to remove). What :func:`remove_parts` takes once the new file is in place."""
    build = split_build(path)
    if build is None:
        return None, []
    try:
        return build, index_parts(path)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError):
        return build, []


def root_attrs(p, *keys):
    """The root attributes ``keys`` of the HDF5 file ``p`` (None where absent), as text; None when
    ``p`` is no HDF5 file (its signature at byte 0, or at 512, 1024, ... after a user block) or no
    regular file (a FIFO named like a part would block the open for ever: the writers' clean-up of
    parts looks at every such name); OSError when it cannot be read."""
    import stat

    st = os.stat(p)
    if not stat.S_ISREG(st.st_mode):
        return None
    size, at, hdf5 = st.st_size, 0, False
    with open(p, "rb") as f:
        while at + 8 <= size and not hdf5:
            f.seek(at)
            hdf5, at = f.read(8) == b"\x89HDF\r\n\x1a\n", max(512, 2 * at)
    if not hdf5:
        return None
    import h5py

    try:
        with h5py.File(p, "r") as h:
            got = [h.attrs.get(k) for k in keys]
    except (ValueError, KeyError, RuntimeError) as e:
        raise OSError(f"{p}: {e}") from None
    return tuple(v.decode(errors="replace") if isinstance(v, bytes) else (None if v is None else str(v)) for v in got)


#: a distgrail temporary (:mod:`distgrail.io.atomic`): an output being written (a new build's, if an
#: index), a replaced one on its way out, or a split write's marker (:func:`pending_name`); none
#: keeps a part file in use
TEMPORARY = re.compile(r"^\..+\.(?:tmp|old|pending)-\d+$")


def attr_carried(directory, names, attr: str, skip=lambda n: False):
    """The values of the root attribute ``attr`` that the index files among ``names`` in
    ``directory`` carry: every regular file (links followed) whose format is not a part's and
    whose ``attr`` is set, but those ``skip(name)`` says and distgrail's temporaries
    (:data:`TEMPORARY`). None when a file cannot be read (a copy still being written): it might
    carry any value, so nothing may be taken for unused. One reading for the two kinds of files an
    index file keeps in use: a split index's parts (:func:`builds_carried`) and a patched index's
    base link (:func:`~distgrail.indexfile.bases.remove_bases`, ``attr`` ``patch_base``)."""
    import stat

    carried = set()
    for n in names:
        if skip(n) or TEMPORARY.match(n):
            continue
        p = os.path.join(directory, n)
        try:
            got = root_attrs(p, "format", attr) if stat.S_ISREG(os.stat(p).st_mode) else None
        except OSError:
            if os.path.isfile(p):
                return None
            continue  # (gone meanwhile, or a broken link)
        if got is not None and got[0] != PART_FORMAT and got[1]:
            carried.add(got[1])
    return carried


def builds_carried(directory, names, skip=lambda n: False):
    """The build ids that the index files among ``names`` in ``directory`` carry
    (:func:`attr_carried` of the build attribute). A copy of a split index's main file, or a hard
    link to it, maps the same part files: those parts are in use while any such file carries
    their build. None when a file cannot be read."""
    return attr_carried(directory, names, BUILD_ATTR, skip)


def remove_parts(path, build: str | None, mapped=()) -> list:
    """Remove the part files of build ``build`` of the split index that a new index at ``path``
    replaced, once the new one is in place: those named as its parts beside ``path`` and those
    its main file mapped (``mapped``, from :func:`replaced_split`: a main file renamed to ``path``
    maps parts named after its old name), each a distgrail part of that build by its root
    attributes. None goes while an index file in the directory still carries that build (a copy
    of the replaced main file, or a hard link to it: its inode lives on under that name), or
    while a file there cannot be read (:func:`builds_carried`): the next index written there
    removes them once unused (:func:`distgrail.indexfile.write.remove_orphans`). Parts of other
    builds (another index renamed away from this name) are left alone. The paths removed."""
    if not build:
        return []
    d = os.path.dirname(os.path.abspath(os.fspath(path)))
    ours = {p for _, p in _part_files(path)}
    ours |= {os.path.join(d, os.path.basename(p)) for p in mapped if os.path.dirname(os.path.abspath(p)) == d}
    doomed = []
    for p in sorted(ours):
        try:
            got = root_attrs(p, "format", BUILD_ATTR)
        except OSError:
            continue
        if got and got[0] == PART_FORMAT and got[1] == build:
            doomed.append(p)
    if not doomed:
        return []
    try:
        names = os.listdir(d)
    except OSError:
        return []
    skip = {os.path.basename(p) for p in ours}
    carried = builds_carried(d, names, skip.__contains__)
    if carried is None or build in carried:
        return []
    gone = []
    for p in doomed:
        try:
            os.remove(p)
            gone.append(p)
        except OSError:
            pass
    return gone


def vds_name(base: str) -> str:
    """A part's file name as an HDF5 virtual dataset source stores it (``%`` is its format escape)."""
    return base.replace("%", "%%")


def from_vds_name(name: str) -> str:
    return name.replace("%%", "%")


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of ``A + B`` from ``crc1 = crc32(A)``, ``crc2 = crc32(B)`` and ``len(B)``
    (zlib's ``crc32_combine``: ``crc1`` times ``x^(8 len2)`` modulo the polynomial, from a table
    of ``x^(2^k)``, plus ``crc2``; about 40 products, where squaring the 32 x 32 bit operator for
    each bit of ``len2`` cost some milliseconds a call)."""
    from ..stages.checksums import times_mod_p, x_to_8n

    if len2 <= 0:
        return int(crc1)
    return times_mod_p(x_to_8n(len2), int(crc1)) ^ int(crc2)


def pieces(first: int, nbytes: int, block: int) -> list:
    """``[(block index, start, stop), ...]``: bytes ``first .. first+nbytes-1`` of a dataset cut at
    its CRC block boundaries (multiples of ``block``); start and stop count from ``first``."""
    out, at = [], 0
    while at < nbytes:
        k = (first + at) // block
        stop = min(nbytes, (k + 1) * block - first)
        out.append((k, at, stop))
        at = stop
    return out


def join_pieces(total: int, block: int, got) -> list:
    """The CRC-32 of every ``block`` bytes of a dataset of ``total`` bytes from its pieces
    ``got``: ``(first byte, block index, crc, length)`` from every part. The pieces must tile the
    dataset (no gap, no overlap): ValueError otherwise."""
    want = -(-int(total) // block)
    crcs = [None] * want
    at = 0
    for first, k, crc, n in sorted(got, key=lambda p: p[0]):
        if first != at or not 0 <= k < want or k != first // block:
            raise ValueError(f"pieces do not tile the dataset: byte {first} (block {k}) where byte {at} was due")
        crcs[k] = int(crc) if first % block == 0 else crc32_combine(crcs[k], crc, n)
        at += int(n)
    if at != total:
        raise ValueError(f"pieces cover {at} of {total} bytes")
    return crcs


def read_block(fd, view: memoryview, offset: int) -> int:
    """Read ``len(view)`` bytes at ``offset`` into ``view``; returns the CRC-32 of the block, or
    -1 when the file ends first."""
    return crc32(view) if read_into(fd, view, offset) else -1


def read_into(fd, view, offset: int) -> bool:
    """Read ``len(view)`` bytes at ``offset`` of ``fd`` into ``view``; False when the file ends first."""
    got = 0
    while got < len(view):
        k = os.preadv(fd, [view[got:]], offset + got)
        if k <= 0:
            return False
        got += k
    return True
