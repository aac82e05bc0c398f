"""numba's ``njit`` for the package's compiled CPU loops (:mod:`distgrail.query.bidir_jit`,
:mod:`distgrail.query.prefilter_jit`, :mod:`distgrail.stages.deep_jit`), cached where numba can
cache.

``@njit(cache=True)`` raises ``RuntimeError`` ("cannot cache function ...: no locator available")
when neither the package's ``__pycache__`` nor numba's user cache directory is writable (a
read-only container or install with a read-only home): :func:`njit` then compiles the function
uncached, once per process, instead of failing the import. Loaders of these modules also fall
back to their NumPy code on any import-time error (:func:`load`).
"""

from __future__ import annotations

import importlib
import warnings

__all__ = ["njit", "load"]


def njit(**options):
    """``numba.njit(cache=True, **options)``, or uncached where numba cannot cache (module doc)."""
    from numba import njit as _njit

    def wrap(fn):
        try:
            return _njit(cache=True, **options)(fn)
        except RuntimeError:  # no writable cache location
            return _njit(cache=False, **options)(fn)
    return wrap


_FAILED: dict = {}


def load(module: str, what: str, stacklevel: int = 3):
    """The compiled module ``module`` (dotted), or None with one warning per process when numba is
    missing, broken, or turned off (``NUMBA_DISABLE_JIT``: the loops would run as Python, slower
    than the NumPy code they replace)."""
    if module in _FAILED:
        return None
    try:
        from numba import config

        if getattr(config, "DISABLE_JIT", False):
            raise ImportError("NUMBA_DISABLE_JIT is set")
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure to load means: the NumPy code, same numbers
        _FAILED[module] = f"{type(e).__name__}: {e}"
        warnings.warn(f"compiled CPU {what} unavailable ({e}); using the NumPy {what}", RuntimeWarning,
                      stacklevel=stacklevel)
        return None
