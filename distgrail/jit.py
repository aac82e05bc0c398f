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

__all__ = ["njit", "load", "failed_to_compile"]


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


def failed_to_compile(module: str, what: str, error: BaseException, stacklevel: int = 3) -> bool:
    """Whether ``error``, raised by a call into the compiled module ``module``, is numba failing to
    compile it (at its first call for some argument types; :func:`load` sees import errors
    only). If so the module is recorded as failed (:func:`load` returns None from now on) with one
    warning, and the caller takes its NumPy code, the same numbers."""
    try:
        from numba.core.errors import NumbaError
    except Exception:  # noqa: BLE001 - no numba: nothing it raised
        return False
    if not isinstance(error, NumbaError):
        return False
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    _FAILED[module] = f"{type(error).__name__}: {first_line}"
    warnings.warn(f"compiled CPU {what} failed to compile ({type(error).__name__}: {first_line}); using the NumPy {what}",
                  RuntimeWarning, stacklevel=stacklevel)
    return True
