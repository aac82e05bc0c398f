"""Checks of an index read from a file: every dataset present, of the right shape and integer
type, and its values in range (component ids < C, CSR offsets monotone, DAG edges go down the
levels, intervals inside 0..C-1 and nested along DAG edges, ...). A file that fails is damaged or
incomplete: :class:`IndexFormatError` names the file and the dataset, never an answer from it.

Ranges cost O(n + m + d·C) vector passes (about 0.1 s per 10^7 values on one core); on large
indexes they run over pieces of ``PIECE`` values in a thread pool (NumPy's reductions and
comparisons release the GIL), as the reading does. The checks along DAG
edges (random gathers: edges go down the levels, O(m); intervals nest, O(d·m)) run while their
count is at most ``EDGE_CHECK_MAX``; for larger indexes HDF5's checksums stand in for them.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .errors import IndexFormatError

__all__ = ["check_index", "check_index_path", "EDGE_CHECK_MAX", "REQUIRED"]

EDGE_CHECK_MAX = 1 << 22
#: values per piece of a check run in parallel
PIECE = 1 << 22


class _Pieces:
    """``any(test, size)``: whether ``test(i, j)`` holds for some piece [i, j) of range(size),
    the pieces tested by a thread pool when there are several."""

    def __init__(self):
        self.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def any(self, test, size: int) -> bool:
        if size <= PIECE:
            return bool(test(0, size))
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1)),
                                           thread_name_prefix="distgrail-check")
        futs = [self.pool.submit(test, i, min(size, i + PIECE)) for i in range(0, size, PIECE)]
        return any(bool(f.result()) for f in futs)

REQUIRED = ("vertex/component", "dag/indptr", "dag/indices", "dag/level", "forest/parent",
             "forest/subtree_size", "labels/dt_post0", "labels/intervals")



def check_index_path(path: str) -> None:
    """Refuse, as :class:`IndexFormatError` naming ``path``, what is not a file an index could be
    in: no such file, a directory, a FIFO, device or socket (never opened: it could block)."""
    from .io.regular import check_regular

    if not os.path.exists(path):
        raise IndexFormatError(f"{path}: no such index file")
    if os.path.isdir(path):
        raise IndexFormatError(f"{path}: is a directory, not an index file")
    check_regular(path, "indexes", IndexFormatError)

def _int_attr(path, meta, key, lo=0):
    v = meta[key]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
        raise IndexFormatError(f"{path}: damaged index: attribute {key!r} must be an integer >= {lo}, got {v!r}")
    return int(v)


def check_index(path, meta: dict, arrays: dict) -> None:
    """Raise :class:`IndexFormatError` unless ``arrays`` and ``meta`` form a consistent index."""
    n = _int_attr(path, meta, "n_vertices")
    C = _int_attr(path, meta, "n_components")
    m = _int_attr(path, meta, "n_dag_edges")
    L = _int_attr(path, meta, "n_levels")
    dims = _int_attr(path, meta, "dims", 1)
    _int_attr(path, meta, "seed")
    if C > n or (n > 0) != (C > 0):
        raise IndexFormatError(f"{path}: damaged index: {C} components for {n} vertices")

    def bad(name, what):
        raise IndexFormatError(f"{path}: damaged index: dataset /{name} {what}")

    shapes = {"vertex/component": (n,), "dag/indptr": (C + 1,), "dag/indices": (m,), "dag/level": (C,),
              "forest/parent": (C,), "forest/subtree_size": (C,), "labels/dt_post0": (C,),
              "labels/intervals": (dims, C, 2)}
    for name in REQUIRED:
        if name not in arrays:
            raise IndexFormatError(f"{path}: incomplete index: dataset /{name} is missing")
    for name, a in arrays.items():
        if name in shapes and a.shape != shapes[name]:
            bad(name, f"has shape {a.shape}, expected {shapes[name]}")
        if not np.issubdtype(a.dtype, np.integer):
            bad(name, f"has type {a.dtype}, expected integers")

    with _Pieces() as pieces:
        _check_values(path, meta, arrays, n, C, m, L, dims, bad, pieces)


def _check_values(path, meta, a, n, C, m, L, dims, bad, pieces):
    """The value checks of :func:`check_index`, piece by piece (``pieces``: a :class:`_Pieces`)."""

    def within(name, arr, lo, hi):
        flat = arr.reshape(-1)
        if flat.size and pieces.any(lambda i, j: int(flat[i:j].min()) < lo or int(flat[i:j].max()) > hi, flat.size):
            k = int(np.flatnonzero((flat < lo) | (flat > hi))[0])
            bad(name, f"holds {int(flat[k])} at flat position {k}, outside {lo}..{hi}")

    def non_decreasing(v) -> bool:
        return not pieces.any(lambda i, j: (v[i + 1:j + 1] < v[i:j]).any(), max(int(v.size) - 1, 0))

    comp = a["vertex/component"]
    within("vertex/component", comp, 0, C - 1)
    ip = a["dag/indptr"]
    if int(ip[0]) != 0 or int(ip[-1]) != m or not non_decreasing(ip):
        bad("dag/indptr", f"is not a CSR offset array 0..{m} (non-decreasing)")
    ix = a["dag/indices"]
    deferred = not isinstance(ix, np.ndarray)  # left in the file: its reader checks the rows it reads
    if not deferred:
        within("dag/indices", ix, 0, C - 1)
    level = a["dag/level"]
    within("dag/level", level, 0, max(L - 1, 0))
    if C and (not non_decreasing(level) or int(level[-1]) != L - 1):
        bad("dag/level", f"is not sorted up to n_levels - 1 = {L - 1}")
    if 0 < m <= EDGE_CHECK_MAX and not deferred:
        src = np.repeat(np.arange(C, dtype=np.int64), np.diff(ip.astype(np.int64)))
        ix = ix.astype(np.int64)
        level = level.astype(np.int64)
        if (level[src] >= level[ix]).any():
            bad("dag/indices", "holds an edge that does not go down the levels")
    within("forest/parent", a["forest/parent"], -1, C - 1)
    within("forest/subtree_size", a["forest/subtree_size"], 1, C)
    post0 = a["labels/dt_post0"]
    within("labels/dt_post0", post0, 0, C - 1)
    iv = a["labels/intervals"]
    within("labels/intervals", iv, 0, C - 1)
    lo, hi = iv[..., 0], iv[..., 1]
    pairs = iv.reshape(-1, 2)
    if pieces.any(lambda i, j: (pairs[i:j, 0] > pairs[i:j, 1]).any(), pairs.shape[0]) or (
            C and pieces.any(lambda i, j: ((lo[0, i:j] > post0[i:j]) | (hi[0, i:j] < post0[i:j])).any(), C)):
        bad("labels/intervals", "holds an interval [min, max] with min > max or without its own rank")
    if 0 < dims * m <= EDGE_CHECK_MAX and not deferred:
        for d in range(dims):
            lo_d, hi_d = np.ascontiguousarray(lo[d]), np.ascontiguousarray(hi[d])
            if (lo_d[src] > lo_d[ix]).any() or (hi_d[src] < hi_d[ix]).any():
                bad("labels/intervals", f"holds a DAG edge whose target's interval is not inside its source's "
                                        f"(dimension {d})")
    _check_labels(path, n, a, bad, within)
    _check_supports(path, C, meta, a, bad, within)


def _check_labels(path, n, arrays, bad, within):
    if "vertex/label" in arrays and arrays["vertex/label"].shape != (n,):
        bad("vertex/label", f"has shape {arrays['vertex/label'].shape}, expected ({n},)")
    has_utf8 = ("vertex/label_utf8" in arrays, "vertex/label_offsets" in arrays)
    if any(has_utf8) and not all(has_utf8):
        raise IndexFormatError(f"{path}: incomplete index: /vertex/label_utf8 and /vertex/label_offsets come together")
    if all(has_utf8):
        off = arrays["vertex/label_offsets"].astype(np.int64)
        size = arrays["vertex/label_utf8"].size
        if off.shape != (n + 1,) or int(off[0]) != 0 or int(off[-1]) != size or (off[1:] < off[:-1]).any():
            bad("vertex/label_offsets", f"is not an offset array of {n} labels into {size} bytes")


def _check_supports(path, C, meta, arrays, bad, within):
    names = ("supports/ids", "supports/out", "supports/in")
    present = [k in arrays for k in names]
    K = meta.get("supports")
    K = (int(arrays["supports/ids"].shape[0]) if present[0] else 0) if K is None else _int_attr(path, meta, "supports")
    if K == 0 and not any(present):
        return
    if not all(present):
        missing = [k for k, p in zip(names, present) if not p]
        raise IndexFormatError(f"{path}: incomplete index: dataset /{missing[0]} is missing (supports = {K})")
    W = -(-K // 64)
    if arrays["supports/ids"].shape != (K,):
        bad("supports/ids", f"has shape {arrays['supports/ids'].shape}, expected ({K},)")
    within("supports/ids", arrays["supports/ids"], 0, C - 1)
    for k in names[1:]:
        if arrays[k].shape != (C, W) or arrays[k].dtype != np.uint64:
            bad(k, f"has shape {arrays[k].shape} {arrays[k].dtype}, expected ({C}, {W}) uint64")
