"""An index's large datasets read from its file straight into a GPU's memory, checked there.

``distgrail update --layout patch`` sweeps the labels on the device and writes only the rows that
changed: the whole arrays are never needed on the host. Reading them into host arrays and then
uploading them cost a pass over fresh host pages plus the upload; here each dataset left in the
file by :func:`~distgrail.indexfile.read.read_index_file` (``defer``: a
:class:`~distgrail.indexfile.read.Deferred`, its bytes one run of the file) is read piece by piece
into a :class:`~distgrail.gpu.dma.Stager`'s page-locked buffers by its threads and sent from there
(:meth:`~distgrail.gpu.dma.Stager.fill`). The checks are those of a read into host memory, made
where the bytes are: each block's CRC-32 by :func:`~distgrail.stages.checksums.block_crcs_cuda`
against the stored ones (the same error naming the dataset and block), then
:func:`~distgrail.indexfile.read.check_index`'s value checks over the device arrays (the range,
order and interval tests, each one pass over a whole array on the GPU). A file that ends before a
dataset's bytes is the same error as on the host. A patched index's datasets come from its base
the same way, the patch's rows put over them on the device (the DAG's CSR rebuilt there around
the rows written again: :func:`csr_rows_replaced_on`), so an index updated day after day keeps
this path. On the CPU backend the same reads land in host arrays (:class:`_Host`), checked the
same way (what the tests without a GPU run).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import IndexFormatError
from .bases import PATCH_BASE
from .layout import FORMAT, read_into
from .patch_read import AXIS1

__all__ = ["DEVICE_DATASETS", "device_layout", "upload_datasets", "csr_rows_replaced_on"]

#: the large datasets an update's sweep reads on the device (:class:`distgrail.update._Device`),
#: left in the file when an index is opened for it (the support ids, a few words, are read)
DEVICE_DATASETS = ("labels/intervals", "vertex/component", "dag/indptr", "dag/indices", "dag/level",
                   "labels/dt_post0", "forest/subtree_size", "forest/parent", "supports/out", "supports/in")


def device_layout(path) -> str | None:
    """``"single"`` when ``path`` holds an index of one file, ``"patched"`` for one patched over
    a one-file base (root attributes alone): its datasets are then runs of a file's bytes that
    :func:`upload_datasets` reads. None for anything else (a split index, a damaged file: its
    own read names the problem)."""
    try:
        import h5py

        with h5py.File(path, "r") as f:
            kind = f.attrs.get("format")
            kind = kind.decode() if isinstance(kind, bytes) else kind
            if kind != FORMAT or "layout" in f.attrs:
                return None
            return "patched" if PATCH_BASE in f.attrs else "single"
    except Exception:  # noqa: BLE001 - not an index this can read so: open_index says why
        return None


def upload_datasets(be, path, meta: dict, arrays: dict, names) -> dict:
    """``{name: device array}`` of the datasets ``names`` of the index at ``path`` on backend
    ``be`` (in their stored types; a name ``arrays`` lacks is left out): those ``arrays`` holds as
    :class:`~distgrail.indexfile.read.Deferred` read from their file straight to the device (on
    the CPU backend, straight into host arrays), a patched index's
    (:class:`~distgrail.indexfile.patch_read.PatchedRows`,
    :class:`~distgrail.indexfile.patch_read.PatchedCSR`) from its base with the patch's rows put
    over them there, the others (host arrays) uploaded. The block CRC-32s of the bytes read are
    checked where they landed, then every value check of
    :func:`~distgrail.indexfile.read.check_index` over ``arrays`` with these in place (``meta``:
    the index's root attributes). :class:`~distgrail.errors.IndexFormatError` naming the file and
    dataset for a damaged one."""
    from .patch_read import PatchedCSR, PatchedRows
    from .read import Deferred, _verify_crcs, check_index

    names = [n for n in names if n in arrays]
    sources = {}  # what each dataset starts from: a Deferred (bytes in a file) or a host array
    for n in names:
        a = arrays[n]
        if isinstance(a, PatchedRows):
            sources[n] = a.base
        elif isinstance(a, PatchedCSR):
            sources.setdefault("dag/indptr", a.ip)
            sources.setdefault("dag/indices", a.ix)
        else:
            sources[n] = a
    reads = {n: d for n, d in sources.items() if isinstance(d, Deferred)}
    direct = [n for n, d in reads.items() if _one_run(d)]
    host = {n: (d.read(0, d.size).reshape(d.shape) if isinstance(d, Deferred) else d)  # (a Deferred in several
            for n, d in sources.items() if n not in direct}  # runs read, then sent)
    csr = next((arrays[n] for n in ("dag/indptr", "dag/indices") if isinstance(arrays.get(n), PatchedCSR)), None)
    patches = {(n, k): getattr(arrays[n], k) for n in names if isinstance(arrays[n], PatchedRows)
               for k in ("rows", "values")}  # (sent with the rest, through the page-locked buffers)
    if csr is not None:
        patches.update({("dag", k): getattr(csr, k) for k in ("rows", "offsets", "values")})
    fds = {}
    try:
        for n in direct:
            f = reads[n].spans[0][2]
            if f not in fds:
                fds[f] = _opened(reads[n])
        with be.on_device(), _mover(be) as mover:
            targets = [(reads[n].shape, reads[n].dtype, _pieces(reads[n].path, n, reads[n], fds[reads[n].spans[0][2]],
                                                              mover.piece)) for n in direct]
            got = dict(zip(direct, mover.fill(targets)))
            sent = mover.upload([*host.values(), *patches.values()])
            got.update(zip(host, sent))
            patches = dict(zip(patches, sent[len(host):]))
            found = {n: _block_crcs(be, got[n], reads[n].block) for n in direct}
    finally:
        for f in fds.values():
            os.close(f)
    for n in direct:  # (a patched index's base named as its reader names it)
        _verify_crcs(reads[n].path, {}, {n: (reads[n].crc, reads[n].block)}, {n: found[n]}, None)
    with be.on_device():
        xp = be.xp
        for n in names:
            if isinstance(arrays[n], PatchedRows):  # the patch's rows over the base's, where they landed
                at, values = patches[(n, "rows")], patches[(n, "values")]
                if n in AXIS1:
                    got[n][:, at] = values
                else:
                    got[n][at] = values
        if csr is not None:
            got["dag/indptr"], got["dag/indices"] = csr_rows_replaced_on(
                xp, got["dag/indptr"], got["dag/indices"], *(patches[("dag", k)] for k in ("rows", "offsets", "values")),
                where=getattr(csr.ip, "path", path))
        check_index(path, meta, {**arrays, **got}, values=True)
    return {n: got[n] for n in names}


#: entries a piece of :func:`csr_rows_replaced_on` gathers at once (its positions: 32 bytes each)
CSR_PIECE_ENTRIES = 1 << 26


def csr_rows_replaced_on(xp, ip, ix, rows, offsets, values, where: str = "the index") -> tuple:
    """``(indptr int64, indices)``: the CSR ``(ip, ix)`` on ``xp``'s device with rows ``rows``
    (sorted, distinct, checked; int64) replaced by ``values[offsets[i]:offsets[i+1]]``, every
    other row kept: what :func:`~distgrail.indexfile.patch_read.csr_rows_replaced` makes on the
    host threads, here by gathers of at most :data:`CSR_PIECE_ENTRIES` entries at a time. The
    offsets ``ip`` (a base read without its value checks) must run from 0 to ``len(ix)`` without
    decreasing: else IndexFormatError naming ``where`` (a gather past them would wrap on a GPU)."""
    from ..arrays import spans

    ip = ip.astype(xp.int64, copy=False)
    count = ip[1:] - ip[:-1]
    if ip.size == 0 or int(ip[0]) != 0 or int(ip[-1]) != ix.size or bool((count < 0).any()):
        raise IndexFormatError(f"{where}: damaged index: dataset /dag/indptr is not a CSR offset array 0..{ix.size} "
                               f"(non-decreasing)")
    r = xp.asarray(rows, dtype=xp.int64)
    off = xp.asarray(offsets, dtype=xp.int64)
    new = count.copy()
    new[r] = off[1:] - off[:-1]
    nip = xp.zeros(ip.size, dtype=xp.int64)
    xp.cumsum(new, out=nip[1:])
    nix = xp.empty(int(nip[-1]), dtype=ix.dtype)
    keep = xp.ones(count.size, dtype=bool)
    keep[r] = False
    kept = xp.flatnonzero(keep)
    del keep
    for part in _row_pieces(xp, count[kept]):  # (the kept rows' entries, moved)
        k = kept[part]
        src, _ = spans(xp, ip[k], count[k])
        dst, _ = spans(xp, nip[k], count[k])
        nix[dst] = ix[src]
        del src, dst
    v = xp.asarray(values).astype(ix.dtype, copy=False)
    for part in _row_pieces(xp, new[r]):  # (the rows written again, from the patch's values)
        k = r[part]
        dst, at = spans(xp, nip[k], new[k])
        nix[dst] = v[off[part.start + at] + (dst - nip[k][at])]
        del dst, at
    return nip, nix


def _row_pieces(xp, count) -> list:
    """Slices of consecutive rows (``count``: each row's entries, a device array) holding at most
    :data:`CSR_PIECE_ENTRIES` entries a slice (a row that alone holds more: a slice of its own)."""
    if not count.size:
        return []
    cs = xp.cumsum(count)
    marks = xp.arange(CSR_PIECE_ENTRIES, int(cs[-1]), CSR_PIECE_ENTRIES, dtype=cs.dtype)
    cuts = sorted({0, int(count.size), *(int(c) for c in xp.searchsorted(cs, marks, side="right").tolist())})
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _mover(be):
    """What moves the bytes: a :class:`~distgrail.gpu.dma.Stager` on a GPU, else :class:`_Host`."""
    if not be.is_gpu:
        return _Host()
    from ..gpu.dma import Stager

    return Stager(be.xp, be.device)


def _block_crcs(be, a, block: int) -> list:
    """The CRC-32 of every ``block`` bytes of ``a``, where it is."""
    if be.is_gpu:
        from ..stages.checksums import block_crcs_cuda

        return block_crcs_cuda(be, a, block).tolist()
    from .layout import block_crcs

    return block_crcs(a, block)


class _Host:
    """The CPU backend's :class:`~distgrail.gpu.dma.Stager`: each piece written straight into
    its host array, in turn; arrays already there passed through."""

    from ..gpu.dma import STAGER_PIECE as piece  # (the Stager's piece: the same reads on either backend)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def fill(self, targets) -> list:
        out = []
        for shape, dtype, parts in targets:
            a = np.empty(shape, dtype=dtype)
            raw = a.reshape(-1).view(np.uint8)
            for lo, hi, write in parts:
                write(raw[lo:hi])
            out.append(a)
        return out

    def upload(self, arrays) -> list:
        return [np.asarray(a) for a in arrays]


def _opened(d) -> int:
    """A descriptor of Deferred ``d``'s file, which must be the file the index was read from
    (IndexFormatError naming it where it is gone or was replaced since)."""
    f = d.spans[0][2]
    try:
        fd = os.open(f, os.O_RDONLY)
    except OSError as e:
        raise IndexFormatError(f"{d.path}: dataset /{d.name} cannot be read: {os.path.basename(f)}: {e.strerror}") from None
    st = os.fstat(fd)
    if d.ident is not None and (st.st_dev, st.st_ino) != tuple(d.ident):
        os.close(fd)
        raise IndexFormatError(f"{d.path}: the index file was replaced after it was opened (dataset /{d.name}): "
                               f"open it again")
    return fd


def _one_run(d) -> bool:
    """Whether Deferred ``d`` is one run of bytes of one file."""
    return len(d.spans) == 1 and d.spans[0][0] == 0


def _pieces(path, name, d, fd, piece: int) -> list:
    """``[(lo, hi, write), ...]`` of Deferred ``d``'s bytes in pieces of ``piece`` bytes, each
    ``write(view)`` reading its bytes from ``fd`` (IndexFormatError where the file ends first)."""
    nbytes = d.size * np.dtype(d.dtype).itemsize
    at = int(d.spans[0][3])

    def reader(lo):
        def write(view):
            try:
                whole = read_into(fd, view, at + lo)
            except OSError as e:  # (EIO, a part gone: named, as the host read names them)
                raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (storage error: "
                                       f"{e})") from None
            if not whole:
                raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (the file ends "
                                       f"before its data: truncated?)")
        return write

    return [(lo, min(nbytes, lo + piece), reader(lo)) for lo in range(0, nbytes, piece)]
