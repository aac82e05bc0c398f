"""Query pairs files: text ``u v`` per line (``.gz`` allowed) or a ``.npy`` (k, 2) array."""

from __future__ import annotations

import os

import numpy as np

from ..errors import GraphFormatError
from .edgelist import read_columns
from .regular import check_regular
from .text import Text, shown


def read_pairs(path, labels: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Read query pairs: text ``u v`` per line (``#``/``%`` comments, ``.gz`` allowed) or a ``.npy``
    array of shape (k, 2). Ids are checked against the index later, by :meth:`Index.query`.

    ``labels`` ("int" or "str"): the index maps node labels (see :mod:`distgrail.nodelabels`); the
    two tokens of a line are then labels (integers, negative ones too, or strings without blanks)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GraphFormatError("no such pairs file", path=path)
    if os.path.isdir(path):
        raise GraphFormatError("is a directory, not a pairs file", path=path)
    check_regular(path, "query pairs", GraphFormatError)  # a FIFO is never opened: it could block forever
    if path.endswith(".npy"):
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise GraphFormatError(f"not a readable .npy array ({e})", path=path) from None
        if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
            raise GraphFormatError(f"expected an integer array of shape (k, 2), got {arr.dtype} {arr.shape}",
                                   path=path)
        _check_fits_int64(path, arr)
        return arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64)
    data = None
    if path.endswith(".gz"):
        import gzip
        import zlib

        try:
            with gzip.open(path, "rb") as f:
                data = f.read()
        except (OSError, EOFError, zlib.error) as e:
            raise GraphFormatError(f"not a readable gzip file, truncated or damaged ({e})", path=path) from None
    if labels is not None:
        return _label_pairs(path, data, labels)
    text = Text(path, data)
    try:
        u, v, _ = read_columns(text, 0, 2, b"#%", 0, None, what="query pair", exact=True, cap=2**40)
    finally:
        text.close()
    return u.astype(np.int64), v.astype(np.int64)


def _check_fits_int64(path, arr) -> None:
    """Unsigned ids above 2^63 - 1 would wrap to negative ones: refuse them with the value as given."""
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size:
        big = np.flatnonzero(arr.reshape(-1) > np.uint64(2**63 - 1))
        if big.size:
            row, col = divmod(int(big[0]), 2)
            raise GraphFormatError(f"{('sources', 'targets')[col]}[{row}] out of range (vertex ids are below "
                                   f"2^63), got {int(arr[row, col])}", path=path)


def _label_pairs(path, data, kind):
    """Pairs of node labels, one pair per line (a Python loop: label maps are for in-memory graphs)."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    us, vs = [], []
    for no, raw in enumerate(data.split(b"\n"), 1):
        line = raw.split(b"#")[0].split(b"%")[0].strip()
        if not line:
            continue
        try:
            tok = line.decode("utf-8").split()
        except UnicodeDecodeError:
            raise GraphFormatError(f"expected two node labels, got {shown(raw)}", path=path, line=no) from None
        if len(tok) != 2:
            raise GraphFormatError(f"expected two node labels 'u v', got {shown(raw)}", path=path, line=no)
        if kind == "int":
            try:
                tok = [int(x) for x in tok]
            except ValueError:
                raise GraphFormatError(f"this index takes integer node labels, got {shown(raw)}",
                                       path=path, line=no) from None
        us.append(tok[0])
        vs.append(tok[1])
    if kind == "int":
        return np.array(us, dtype=np.int64), np.array(vs, dtype=np.int64)
    return np.array(us, dtype=str), np.array(vs, dtype=str)
