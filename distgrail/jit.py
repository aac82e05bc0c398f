"""numba's ``njit`` for the package's compiled CPU loops (:mod:`distgrail.query.bidir_jit`,
:mod:`distgrail.query.prefilter_jit`, :mod:`distgrail.stages.deep_jit`), cached where numba can
cache.

``@njit(cache=True)`` raises ``RuntimeError`` ("cannot cache function ...: no locator available")
when neither the package's ``__pycache__`` nor numba's user cache directory is writable (a
read-only container or install with a read-only home): :func:`njit` then compiles the function
uncached, once per process, instead of failing the import. Loaders of these modules also fall
back to their NumPy code on any import-time error (:func:`load`).

numba compiles a loop at its first call for some argument types, after the module imported: a
failure there (a numba release that types a loop differently, an unsupported dtype) is one warning
and the NumPy code, the same numbers, never a failed build. The query loops catch it where they
call (:func:`failed_to_compile`); the build stages call their module through :func:`guard`, whose
functions raise :class:`CompileFailed` on it, and run under :func:`restarts`, which runs the stage
again from its inputs: the module is then recorded as failed, so the stage takes its NumPy code
(buffers the stage's earlier compiled calls wrote are not reused).
"""

from __future__ import annotations

import functools
import importlib
import warnings

__all__ = ["njit", "load", "failed_to_compile", "CompileFailed", "guard", "restarts"]


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


def load(module: str, what: str, stacklevel: int = 3, warn: bool = True):
    """The compiled module ``module`` (dotted), or None with one warning per process when numba is
    missing, broken, or turned off (``NUMBA_DISABLE_JIT``: the loops would run as Python, slower
    than the NumPy code they replace). ``warn=False``: a probe (whether it would load), which
    neither warns nor records the failure (the loader that then runs its NumPy code warns)."""
    if module in _FAILED:
        return None
    try:
        from numba import config

        if getattr(config, "DISABLE_JIT", False):
            raise ImportError("NUMBA_DISABLE_JIT is set")
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any failure to load means: the NumPy code, same numbers
        if not warn:
            return None
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
    said = f"{type(error).__name__}: {first_line}"
    if _FAILED.setdefault(module, said) is said:  # (threads failing at once: the first one warns)
        warnings.warn(f"compiled CPU {what} failed to compile ({said}); using the NumPy {what}",
                      RuntimeWarning, stacklevel=stacklevel)
    return True


class CompileFailed(Exception):
    """numba failed to compile a function of the compiled module :attr:`module` at its call
    through :func:`guard` (recorded and warned by :func:`failed_to_compile`; the numba error is
    its ``__cause__``). :func:`restarts` catches it and runs the stage again on its NumPy code."""

    def __init__(self, module: str):
        super().__init__(f"compiled module {module} failed to compile")
        self.module = module


class _Guarded:
    """A compiled module seen through :func:`guard`: its other attributes as they are, each
    function wrapped so that a compile failure raises :class:`CompileFailed`. Attributes are
    looked up at each access (a function patched on the module is the one called)."""

    __slots__ = ("_module", "_what")

    def __init__(self, module, what: str):
        self._module, self._what = module, what

    def __getattr__(self, attr):
        value = getattr(self._module, attr)
        if not callable(value):
            return value
        name, what = self._module.__name__, self._what

        @functools.wraps(value)
        def call(*args, **kwargs):
            try:
                return value(*args, **kwargs)
            except Exception as e:
                if failed_to_compile(name, what, e):  # (warns at the stage's line: this frame, then its caller)
                    raise CompileFailed(name) from e
                raise  # any other error as it was
        return call


def guard(module, what: str):
    """The compiled module ``module`` (from :func:`load`; None gives None) with its functions
    raising :class:`CompileFailed` where numba fails to compile them at a call, after recording
    the module as failed with one warning naming ``what``: the caller, run under
    :func:`restarts`, then computes the same numbers with its NumPy code. Any other error a
    function raises comes out as it was."""
    return None if module is None else _Guarded(module, what)


def restarts(fn):
    """Decorator of a build stage that calls compiled modules through :func:`guard`: where one
    of those calls fails to compile (:class:`CompileFailed`), the stage is run again from its
    arguments. The module is then recorded as failed, so :func:`load` gives None and the stage
    takes its NumPy code, the same numbers; nothing an earlier compiled call of the first run
    wrote is reused (the stage must not write into its arguments before its compiled calls end).
    A second failure of the same module (a stage that kept it) is raised."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        failed = set()
        while True:
            try:
                return fn(*args, **kwargs)
            except CompileFailed as e:
                if e.module in failed:
                    raise
                failed.add(e.module)
    return run
