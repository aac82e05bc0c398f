"""The value checks of an index's optional datasets, from :func:`~distgrail.indexfile.read.check_index`:
the node labels (integer ones, or UTF-8 bytes with their offsets) and the support masks (their ids
and the ``out``/``in`` masks of every component).
"""

from __future__ import annotations

import numpy as np

from ..errors import IndexFormatError

__all__ = ["check_labels", "check_supports"]


def check_labels(path, n, arrays, bad, within):
    """The node labels: ``vertex/label`` one per vertex; ``vertex/label_utf8`` and
    ``vertex/label_offsets`` together, the offsets ``0 .. bytes`` non-decreasing (``bad(name,
    what)`` raises; ``within`` is check_index's range check)."""
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


def check_supports(path, C, meta, arrays, bad, within):
    """The support masks: ids, ``out`` and ``in`` all there or none, of the shapes and types the
    attribute ``supports`` (K) gives, ids naming components."""
    names = ("supports/ids", "supports/out", "supports/in")
    present = [k in arrays for k in names]
    K = meta.get("supports")
    K = (int(arrays["supports/ids"].shape[0]) if present[0] else 0) if K is None else _supports(path, meta)
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


def _supports(path, meta) -> int:
    v = meta["supports"]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
        raise IndexFormatError(f"{path}: damaged index: attribute 'supports' must be an integer >= 0, got {v!r}")
    return int(v)
