"""Counter-based hash: the only source of randomness in distgrail.

Every random choice (sibling order of a dimension, tie breaks) is a pure function of
(seed, stream, key), so results do not depend on thread timing, backend or rank count.
The CUDA twin is ``dg_hash`` in ``kernels/common.cuh``; both take their constants from
:mod:`distgrail.constants` and must stay bit-identical (tests/test_constants.py pins values).

The mix is SplitMix64's finaliser applied to a combination of the three words. For a fixed
(seed, stream) the hash is a bijection of the 64-bit key (an odd multiplier, an xor and the
finaliser are each invertible), so distinct keys never tie.
"""

from __future__ import annotations

import numpy as np

from .constants import GOLDEN, MIX1, MIX2, S2

__all__ = ["hash3", "hash3_xp", "hash_base", "STREAM_PARENT", "STREAM_DIM0"]

#: stream used by phase 1 tie breaks (shared by all dimensions)
STREAM_PARENT = 0xFFFFFFFF
#: dimension i uses stream STREAM_DIM0 + i
STREAM_DIM0 = 0

_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(GOLDEN)
_M1 = np.uint64(MIX1)
_M2 = np.uint64(MIX2)


def _mix(z):
    with np.errstate(over="ignore"):
        z = z ^ (z >> np.uint64(30))
        z = z * _M1
        z = z ^ (z >> np.uint64(27))
        z = z * _M2
        return z ^ (z >> np.uint64(31))


def hash_base(seed: int, stream: int) -> int:
    """The per-(seed, stream) word that ``dg_hash`` in kernels/common.cuh takes as ``base``."""
    b = (int(seed) * GOLDEN + int(stream) * S2) & _M64
    return int(_mix(np.asarray([b], dtype=np.uint64))[0])


def hash3(seed: int, stream: int, keys) -> np.ndarray:
    """Hash ``keys`` (an integer array) under ``(seed, stream)`` to uint64.

    Examples
    --------
    >>> import numpy as np
    >>> h = hash3(0, 1, np.arange(3))
    >>> h.dtype, len(set(h.tolist()))
    (dtype('uint64'), 3)
    """
    keys = np.asarray(keys).astype(np.uint64, copy=False)
    base = np.uint64(hash_base(seed, stream))
    with np.errstate(over="ignore"):
        z = (keys + np.uint64(1)) * _GOLDEN
    return _mix(z ^ base)


def hash3_xp(xp, seed: int, stream: int, keys):
    """:func:`hash3` on the device of ``keys`` (``xp``: NumPy or CuPy): the same words."""
    if xp is np:
        return hash3(seed, stream, keys)
    base = np.uint64(hash_base(seed, stream))
    z = (keys.astype(xp.uint64) + np.uint64(1)) * _GOLDEN
    return _mix(z ^ base)
