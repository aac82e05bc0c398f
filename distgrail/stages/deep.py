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

__all__ = ["DEEP_LEVELS", "compiled_sweeps", "n_levels", "HOST_DEEP_LEVELS", "HOST_LEVEL_WIDTH", "HOST_TRIM_RATIO",
           "host_sweeps_compiled", "labels_on_host"]

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


#: a condensed DAG of more levels than this, and narrow (:data:`HOST_LEVEL_WIDTH`), is condensed
#: and labelled on the host by the compiled loops even where the backend is a GPU: the GPU sweeps
#: and trims level by level, a few launches (or one block's round) a level, and on a long chain or
#: a layered DAG of a million levels the host's compiled loops were several times faster
#: (docs/benchmarks.md, session 46)
HOST_DEEP_LEVELS = 1 << 16
#: components plus DAG edges per level (a trim round's vertices, while condensing) below which a
#: DAG past :data:`HOST_DEEP_LEVELS` levels goes to the host (16 on that layered DAG; the shallow
#: graphs the GPU is for have thousands and more a level)
HOST_LEVEL_WIDTH = 32
#: a narrow GPU trim (:data:`HOST_LEVEL_WIDTH`) hands the condensation to the host once its rounds
#: times this pass the graph's vertices plus edges: one block's round costs about as much as the
#: host's compiled search spends on this many vertices and edges, so the rounds already spent
#: then cost more than the host's whole condensation (asked at :data:`HOST_DEEP_LEVELS` rounds
#: and each doubling after: never more than twice the better of the two; a big graph with a long
#: chain in it stays on the GPU)
HOST_TRIM_RATIO = 10


def host_sweeps_compiled() -> bool:
    """Whether the host's compiled sweeps load (numba; not turned off, not failed to compile):
    what a deep DAG needs on the host (its twins there go a level per Python iteration). A probe:
    no warning where they do not (the GPU then keeps the work, and no NumPy sweep runs)."""
    from ..jit import load

    return load(f"{__package__}.deep_jit", "level sweeps", warn=False) is not None


def labels_on_host(C: int, m: int, levels: int) -> bool:
    """Whether a GPU build labels a DAG of ``C`` components, ``m`` edges and ``levels`` levels on
    the host (:data:`HOST_DEEP_LEVELS`, :data:`HOST_LEVEL_WIDTH`): only where the compiled sweeps
    load (numba; without them the host's per-level twins would be slower still). Same index."""
    if levels <= HOST_DEEP_LEVELS or C + m >= HOST_LEVEL_WIDTH * levels:
        return False
    return host_sweeps_compiled()
