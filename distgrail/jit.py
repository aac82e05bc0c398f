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

import functools
import importlib
import warnings

__all__ = ["njit", "load", "prefetch_intrinsic"]


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


@functools.cache
def prefetch_intrinsic():
    """A numba intrinsic ``prefetch(rows, i)``: asks the CPU to fetch the cache line of row ``i``
    of the C-ordered 2-D array ``rows`` (LLVM's ``llvm.prefetch``: a read, kept in every cache
    level), and returns nothing. A loop over pairs that each read two random rows and then branch
    on their values loses the reads in flight behind each mispredicted branch; issued for the
    pairs a few ahead, the reads overlap again. Built on the first call (numba imported then);
    for the compiled modules only."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def prefetch(typingctx, rows, i):
        def codegen(context, builder, sig, args):
            array = context.make_array(sig.args[0])(context, builder, args[0])
            stride = builder.extract_value(array.strides, 0)
            row = args[1]
            row = builder.sext(row, stride.type) if row.type.width < stride.type.width else row
            byte = ir.IntType(8).as_pointer()
            addr = builder.gep(builder.bitcast(array.data, byte), [builder.mul(row, stride)])
            # the intrinsic's name carries its pointer type: "ptr" (LLVM's opaque pointers) or i8*
            name = "llvm.prefetch.p0" if str(addr.type) == "ptr" else "llvm.prefetch.p0i8"
            i32 = ir.IntType(32)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [addr.type, i32, i32, i32]),
                                                name)
            builder.call(fn, [addr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return types.void(rows, i), codegen

    return prefetch


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
