"""Counter-based hash: the only source of randomness in distgrail.

Every random choice (sibling order of a dimension, tie breaks) is a pure function of
(seed, stream, key), so results do not depend on thread timing, backend or rank count.
The CUDA twin is ``dg_hash`` in ``kernels/common.cuh``; both must stay bit-identical.

The mix is SplitMix64's finaliser applied to a combination of the three words.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hash3", "hash_base", "STREAM_PARENT", "STREAM_DIM0"]

#: stream used by phase 1 tie breaks (shared by all dimensions)
STREAM_PARENT = 0xFFFFFFFF
#: dimension i uses stream STREAM_DIM0 + i
STREAM_DIM0 = 0

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S2 = np.uint64(0xD1B54A32D192ED03)


def _mix(z, xp):
    z = z ^ (z >> xp.uint64(30))
    z = z * _M1
    z = z ^ (z >> xp.uint64(27))
    z = z * _M2
    return z ^ (z >> xp.uint64(31))


def hash3(seed: int, stream: int, keys, xp=np):
    """Hash ``keys`` (an integer array) under ``(seed, stream)`` to uint64.

    Examples
    --------
    >>> import numpy as np
    >>> h = hash3(0, 1, np.arange(3))
    >>> h.dtype, len(set(h.tolist()))
    (dtype('uint64'), 3)
    """
    keys = xp.asarray(keys).astype(xp.uint64, copy=False)
    base = np.uint64((int(seed) * 0x9E3779B97F4A7C15 + int(stream) * 0xD1B54A32D192ED03) % (1 << 64))
    with np.errstate(over="ignore"):
        base = _mix(xp.asarray(base, dtype=xp.uint64), xp)
        z = (keys + xp.uint64(1)) * _GOLDEN
        z = z ^ base
        return _mix(z, xp)


def hash_base(seed: int, stream: int) -> int:
    """The per-(seed, stream) word that ``dg_hash`` in kernels/common.cuh takes as ``base``."""
    with np.errstate(over="ignore"):
        b = (int(seed) * 0x9E3779B97F4A7C15 + int(stream) * 0xD1B54A32D192ED03) % (1 << 64)
        return int(_mix(np.asarray([b], dtype=np.uint64), np)[0])
