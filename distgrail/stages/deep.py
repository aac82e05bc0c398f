"""Which level sweep the CPU backend runs: the per-level NumPy twin, or on a deep DAG a compiled
loop over the components (:mod:`distgrail.stages.deep_jit`), with the same numbers.

The twins sweep a level per Python iteration (as the CUDA kernels are launched), which costs the
same on a level of one component as on a level of many: past :data:`DEEP_LEVELS` levels the CPU
backend's condensation, phases 2-5 switch to the compiled loops, whose cost does not depend on
the number of levels. Below it the twins run (no numba import for shallow DAGs). Where numba
does not import, the twins run with a warning (same numbers, the per-level cost again); where
one of its loops fails to compile at its first call, the stage that called it runs again on its
twin (:func:`distgrail.jit.restarts`), with a warning.
"""

from __future__ import annotations

__all__ = ["DEEP_LEVELS", "compiled_sweeps", "n_levels"]

#: levels above which the CPU backend's sweeps run compiled: about where the per-level overhead of
#: the twins over all stages passes numba's import and cache load (docs/benchmarks.md)
DEEP_LEVELS = 4096


def n_levels(level_ptr) -> int:
    """Levels of a DAG given its ``level_ptr`` (host array or list)."""
    return max(len(level_ptr) - 1, 0)


def compiled_sweeps(levels: int):
    """The module of compiled sweeps when ``levels`` > :data:`DEEP_LEVELS` and numba imports,
    else None (the caller runs its NumPy twin). Seen through :func:`distgrail.jit.guard`: a loop
    that fails to compile raises :class:`~distgrail.jit.CompileFailed`, so the caller runs under
    :func:`distgrail.jit.restarts` (again, on its twin)."""
    if levels <= DEEP_LEVELS:
        return None
    from ..jit import guard, load

    return guard(load(f"{__package__}.deep_jit", "level sweeps", stacklevel=5), "level sweeps")  # None: the twins
