"""Constants shared by the Python code and the CUDA kernels: the one place they are written.

The kernels never spell these numbers: :func:`distgrail.gpu.kernels.define_options` turns
:data:`CUDA_MACROS` into ``-D`` options for every compile (CuPy's NVRTC and the ``nvcc --check``
alike), and ``kernels/common.cuh`` / ``kernels/sweep.cuh`` stop with ``#error`` when one is
missing.
"""

from __future__ import annotations

__all__ = ["GOLDEN", "MIX1", "MIX2", "S2", "CAP", "STEPS", "UNDECIDED", "SAME", "LEVEL", "SUPPORT_POS",
           "SUPPORT_NEG", "INTERVAL", "TREE", "SEARCH_POS", "SEARCH_NEG", "MAX_ROUNDS", "SMALL_LEVEL", "HUB", "BATCH_THREADS", "GRID_THREADS", "HUB_THREADS",
           "ITEMS_PER_THREAD", "MAX_DIMS_PER_SWEEP", "CUDA_MACROS"]

# -- the counter hash (distgrail.hashing, dg_hash in kernels/common.cuh): SplitMix64's finaliser
GOLDEN = 0x9E3779B97F4A7C15  # key multiplier (and seed multiplier of the base word)
MIX1 = 0xBF58476D1CE4E5B9  # first multiplier of the finaliser
MIX2 = 0x94D049BB133111EB  # second multiplier of the finaliser
S2 = 0xD1B54A32D192ED03  # stream multiplier of the base word

# -- saturating path counts (distgrail.satmath, sat_add in kernels/sweep.cuh)
CAP = 1 << 62

# -- query steps, in the order a query meets them (DESIGN.md "Queries"); code = index + 1, 0: not yet
STEPS = ("same_component", "level_filter", "support_positive", "support_negative", "interval_filter", "tree_cut",
         "search_positive", "search_negative")
UNDECIDED = 0
SAME, LEVEL, SUPPORT_POS, SUPPORT_NEG, INTERVAL, TREE, SEARCH_POS, SEARCH_NEG = range(1, len(STEPS) + 1)
#: slot of the GPU query counter array that holds the largest number of search rounds
MAX_ROUNDS = len(STEPS) + 1

# -- GPU launch shapes (distgrail.gpu.sweep and the stage launchers)
#: levels with at most this many rows + edges are batched into single-block launches
SMALL_LEVEL = 4096
#: vertices with a larger in-degree get a block of their own in parent selection (dfs rule)
HUB = 4096
#: threads of the single block that walks a run of small levels (the sweeps' launch bound)
BATCH_THREADS = 1024
#: threads per block of grid launches
GRID_THREADS = 256
#: threads per block of the hub parent selection
HUB_THREADS = 256
#: rows + edges per thread that size a grid launch of one level
ITEMS_PER_THREAD = 8
#: dimensions that one phase-4 sweep carries (template instantiations dg_*_iv<1..this>)
MAX_DIMS_PER_SWEEP = 8

#: macro name in kernels/ -> (value, is 64-bit unsigned)
CUDA_MACROS = {
    "DG_GOLDEN": (GOLDEN, True),
    "DG_MIX1": (MIX1, True),
    "DG_MIX2": (MIX2, True),
    "DG_S2": (S2, True),
    "DG_CAP": (CAP, True),
    "DG_UNDECIDED": (UNDECIDED, False),
    **{f"DG_STEP_{s.upper()}": (i + 1, False) for i, s in enumerate(STEPS)},
    "DG_MAX_ROUNDS": (MAX_ROUNDS, False),
    "DG_HUB": (HUB, False),
    "DG_BATCH_THREADS": (BATCH_THREADS, False),
    "DG_GRID_THREADS": (GRID_THREADS, False),
    "DG_HUB_THREADS": (HUB_THREADS, False),
    "DG_MAX_DIMS_PER_SWEEP": (MAX_DIMS_PER_SWEEP, False),
}
