"""HDF5 files distgrail writes (index and graph files alike): created so that a failed write raises
where it happens (:func:`create_h5`), their string attributes written fixed-length and read back
as text.

**A failed write raises.** HDF5 holds a small dataset's raw bytes in a sieve buffer (64 KiB) and
writes them when the dataset is closed; h5py closes a dataset when its Python object is freed,
where an exception can only be printed ("Exception ignored in ObjectID.__dealloc__"). A disk that
filled up in the middle of writing an index (after the free-space check: a quota, another
writer) so left a damaged file that the command renamed into place with exit 0, over an existing
good index too (a reviewer, session 41). Without the sieve buffer every raw write reaches the file
inside the call that makes it (``create_dataset(data=...)``, ``ds[...] = ...``) and raises there;
the metadata is flushed by an explicit ``flush()`` before the file is closed (:func:`flushed`),
whose failure raises too. The bytes written are the same: the sieve buffer only batches writes.

h5py's default for a str attribute is a variable-length string, which HDF5 keeps in a global heap
whose damage can crash or hang the reader; a fixed-length UTF-8 string lives in the attribute's own
header message. It reads back as bytes (:func:`attr_text` gives the text; attributes of earlier
releases, variable-length, read as str).
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["put_attr", "attr_text", "create_h5", "flushed"]

#: h5py's ``libver`` names of the bounds :func:`create_h5` takes
_LIBVER = {"earliest": "LIBVER_EARLIEST", "v108": "LIBVER_V18", "v110": "LIBVER_V110", "latest": "LIBVER_LATEST"}


def create_h5(path, libver=("earliest", "latest")):
    """``h5py.File(path, "w", libver=libver)`` (truncating, times not tracked, as h5py's own
    defaults otherwise) without HDF5's sieve buffer, so that a raw write that fails raises in the
    call that makes it (module doc). Use it as h5py's File, and call :func:`flushed` before it
    closes."""
    import h5py
    from h5py import h5f, h5p

    fapl = h5p.create(h5p.FILE_ACCESS)
    fapl.set_libver_bounds(*(getattr(h5f, _LIBVER[v]) for v in libver))
    fapl.set_alignment(1, 1)
    fapl.set_sieve_buf_size(0)
    fcpl = h5p.create(h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    return h5py.File(h5f.create(os.fsencode(path), h5f.ACC_TRUNC, fapl=fapl, fcpl=fcpl))


def flushed(f) -> None:
    """``f.flush()``: every byte HDF5 still holds of the file (its metadata) written now, where a
    failure raises, not when the file closes in a destructor (module doc)."""
    f.flush()


def put_attr(f, key, value) -> None:
    """An attribute of ``f`` (a file or an object); strings as fixed-length UTF-8, a file name's
    undecodable bytes (surrogates here) as U+FFFD (valid UTF-8)."""
    import h5py

    if isinstance(value, str):
        data = value.encode(errors="surrogateescape").decode(errors="replace").encode()
        f.attrs.create(key, np.array(data, dtype=f"S{max(1, len(data))}"),
                       dtype=h5py.string_dtype("utf-8", max(1, len(data))))
    else:
        f.attrs[key] = value


def attr_text(value) -> str:
    """An attribute's value as text: bytes (fixed-length strings) decoded, bad bytes as U+FFFD."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
