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
dataset's bytes is the same error as on the host. On the CPU backend the same reads land in
host arrays (:class:`_Host`), checked the same way (what the tests without a GPU run).
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import IndexFormatError
from .bases import PATCH_BASE
from .layout import FORMAT, read_into

__all__ = ["DEVICE_DATASETS", "device_readable", "upload_datasets"]

#: the large datasets an update's sweep reads on the device (:class:`distgrail.update._Device`),
#: left in the file when an index is opened for it (the support ids, a few words, are read)
DEVICE_DATASETS = ("labels/intervals", "vertex/component", "dag/indptr", "dag/indices", "dag/level",
                   "labels/dt_post0", "forest/subtree_size", "forest/parent", "supports/out", "supports/in")


def device_readable(path) -> bool:
    """Whether ``path`` holds an index of one file, not patched (root attributes alone): its
    datasets are then runs of that file's bytes that :func:`upload_datasets` reads. False for
    anything else (a split or patched index, a damaged file: its own read names the problem)."""
    try:
        import h5py

        with h5py.File(path, "r") as f:
            kind = f.attrs.get("format")
            kind = kind.decode() if isinstance(kind, bytes) else kind
            return kind == FORMAT and "layout" not in f.attrs and PATCH_BASE not in f.attrs
    except Exception:  # noqa: BLE001 - not an index this can read so: open_index says why
        return False


def upload_datasets(be, path, meta: dict, arrays: dict, names) -> dict:
    """``{name: device array}`` of the datasets ``names`` of the index at ``path`` on backend
    ``be`` (in their stored types; a name ``arrays`` lacks is left out): those ``arrays`` holds as
    :class:`~distgrail.indexfile.read.Deferred` read from the file straight to the device (on the
    CPU backend, straight into host arrays), the others (host arrays) uploaded. Their block
    CRC-32s are checked where they landed, then every value check of
    :func:`~distgrail.indexfile.read.check_index` over ``arrays`` with these in place (``meta``:
    the index's root attributes). :class:`~distgrail.errors.IndexFormatError` naming the file and
    dataset for a damaged one."""
    from .read import Deferred, _verify_crcs, check_index

    names = [n for n in names if n in arrays]
    direct = [n for n in names if isinstance(arrays[n], Deferred) and _one_run(arrays[n], path)]
    host = {n: arrays[n].read(0, arrays[n].size).reshape(arrays[n].shape) if isinstance(arrays[n], Deferred)
            else arrays[n] for n in names if n not in direct}  # (a dataset in several runs: read, then sent)
    fd = os.open(path, os.O_RDONLY)
    try:
        with be.on_device(), _mover(be) as mover:
            targets = [(arrays[n].shape, arrays[n].dtype, _pieces(path, n, arrays[n], fd, mover.piece)) for n in direct]
            got = dict(zip(direct, mover.fill(targets)))
            got.update(zip(host, mover.upload(list(host.values()))))
            found = {n: _block_crcs(be, got[n], arrays[n].block) for n in direct}
    finally:
        os.close(fd)
    _verify_crcs(path, {}, {n: (arrays[n].crc, arrays[n].block) for n in direct}, found, None)
    with be.on_device():
        check_index(path, meta, {**arrays, **got}, values=True)
    return {n: got[n] for n in names}


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

    piece = 16 << 20

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


def _one_run(d, path) -> bool:
    """Whether Deferred ``d`` is one run of bytes of the file at ``path``."""
    return len(d.spans) == 1 and d.spans[0][2] == path and d.spans[0][0] == 0


def _pieces(path, name, d, fd, piece: int) -> list:
    """``[(lo, hi, write), ...]`` of Deferred ``d``'s bytes in pieces of ``piece`` bytes, each
    ``write(view)`` reading its bytes from ``fd`` (IndexFormatError where the file ends first)."""
    nbytes = d.size * np.dtype(d.dtype).itemsize
    at = int(d.spans[0][3])

    def reader(lo):
        def write(view):
            if not read_into(fd, view, at + lo):
                raise IndexFormatError(f"{path}: damaged index: dataset /{name} cannot be read (the file ends "
                                       f"before its data: truncated?)")
        return write

    return [(lo, min(nbytes, lo + piece), reader(lo)) for lo in range(0, nbytes, piece)]
