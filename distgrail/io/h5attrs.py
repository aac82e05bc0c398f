"""HDF5 string attributes of distgrail's files (index and graph files alike): written fixed-length,
read back as text.

h5py's default for a str attribute is a variable-length string, which HDF5 keeps in a global heap
whose damage can crash or hang the reader; a fixed-length UTF-8 string lives in the attribute's own
header message. It reads back as bytes (:func:`attr_text` gives the text; attributes of earlier
releases, variable-length, read as str).
"""

from __future__ import annotations

import numpy as np

__all__ = ["put_attr", "attr_text"]


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
