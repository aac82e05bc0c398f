"""Query pairs files: text ``u v`` per line (``.gz`` allowed) or a ``.npy`` (k, 2) array."""

from __future__ import annotations

import os

import numpy as np

from ..errors import GraphFormatError
from .edgelist import read_columns
from .text import Text


def read_pairs(path) -> tuple[np.ndarray, np.ndarray]:
    """Read query pairs: text ``u v`` per line (``#``/``%`` comments, ``.gz`` allowed) or a ``.npy``
    array of shape (k, 2). Ids are checked against the index later, by :meth:`Index.query`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GraphFormatError("no such pairs file", path=path)
    if path.endswith(".npy"):
        arr = np.load(path)
        if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
            raise GraphFormatError(f"expected an integer array of shape (k, 2), got {arr.dtype} {arr.shape}",
                                   path=path)
        return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)
    data = None
    if path.endswith(".gz"):
        import gzip

        try:
            with gzip.open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise GraphFormatError(f"not a readable gzip file ({e})", path=path) from None
    text = Text(path, data)
    try:
        u, v, _ = read_columns(text, 0, 2, b"#%", 0, None, what="query pair")
    finally:
        text.close()
    return u.astype(np.int64), v.astype(np.int64)
