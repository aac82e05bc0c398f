"""Constants shared by the Python code and the CUDA kernels: the one place they are written.

The kernels never spell these numbers: :func:`distgrail.gpu.kernels.defines_header` generates a
``#define`` block from :data:`CUDA_MACROS` (every kernel) and :data:`KERNEL_MACROS` (one kernel
module each) and prepends it to every kernel source it compiles (CuPy's NVRTC and the
``nvcc --check`` alike); ``kernels/common.cuh`` stops with ``#error`` when the block is missing.
The macro tables name attributes of this module and are read at generation time, so the values
written here are the values the kernels get.
"""

from __future__ import annotations

__all__ = ["GOLDEN", "MIX1", "MIX2", "S2", "CAP", "STEPS", "UNDECIDED", "SAME", "LEVEL", "SUPPORT_POS",
           "SUPPORT_NEG", "INTERVAL", "TREE", "SEARCH_POS", "SEARCH_NEG", "MAX_ROUNDS", "SMALL_LEVEL", "HUB", "BATCH_THREADS", "GRID_THREADS", "HUB_THREADS",
           "ITEMS_PER_THREAD", "MAX_DIMS_PER_SWEEP", "FMT_GRA", "FMT_EDGELIST", "FMT_MTX", "FMT_CSV", "C_TOK", "C_NL", "C_A",
           "C_B", "C_BAD", "F_BAD_BYTE", "F_LINE", "F_VALUE", "F_CAPACITY", "F_WIDTH", "TILE", "NO_COMMENT",
           "VALUES_NONE", "VALUES_INTEGER", "VALUES_NUMBER", "SIDE_RUN",
           "SIDE_OUT", "SIDE_IN", "SIDE_OUT_HUB", "SIDE_IN_HUB", "SWEEP_HUB_EDGES", "PUSH_IN", "PUSH_OUT", "SKIP_OUT", "SKIP_IN", "SCHED_FIELDS", "DESC_FIELDS", "CTR_TICKET", "CTR_ERR",
           "CTR_WORDS", "DONE_STRIDE", "SWEEP_THREADS", "CHOOSE_THREADS", "CUDA_MACROS", "U64_MACROS", "KERNEL_MACROS",
           "macro_values"]

# -- the counter hash (distgrail.hashing, dg_hash in kernels/common.cuh): SplitMix64's finaliser
GOLDEN = 0x9E3779B97F4A7C15  # key multiplier (and seed multiplier of the base word)
MIX1 = 0xBF58476D1CE4E5B9  # first multiplier of the finaliser
MIX2 = 0x94D049BB133111EB  # second multiplier of the finaliser
S2 = 0xD1B54A32D192ED03  # stream multiplier of the base word

# -- saturating path counts (distgrail.satmath, sat_add in kernels/sweep.cuh)
CAP = 1 << 62

# -- query steps, in the order a query meets them (docs/design.md "Queries"); code = index + 1, 0: not yet
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
#: warps of a team that sweeps one hub row in the condensation's and phase 1's *_hubs kernels
#: (dg_hub_team in kernels/common.cuh; distgrail.gpu.sweep.hub_team)
HUB_TEAM_WARPS = 32
#: rows + edges per thread that size a grid launch of one level
ITEMS_PER_THREAD = 8
#: dimensions that one phase-4 sweep carries (template instantiations dg_*_iv<1..this>)
MAX_DIMS_PER_SWEEP = 8

# -- GPU text parsing (kernels/parse.cu; twin distgrail/io/parse_twin.py; formats in distgrail/io/formats)
#: format codes: .gra, whitespace edge list, Matrix Market, comma-separated edge list (commas are
#: blanks too, as the CPU reader's translation makes them) (the registry's gpu_code/comma_code: formats.FMT_CODES)
FMT_GRA, FMT_EDGELIST, FMT_MTX, FMT_CSV = 0, 1, 2, 3
#: byte class bits: token byte, newline, marker A (':' in .gra, a comment character elsewhere),
#: marker B ('#' in .gra), a byte no format allows
C_TOK, C_NL, C_A, C_B, C_BAD = 1, 2, 4, 8, 16
#: bits of the kernels' flag word: a bad byte, a malformed line, a bad value, output too small, an
#: edge line whose field count differs from the file's first edge line's (``width`` of dg_parse_lines)
F_BAD_BYTE, F_LINE, F_VALUE, F_CAPACITY, F_WIDTH = 1, 2, 4, 8, 16
#: what a Matrix Market entry's fields after ``row col`` must be (``values`` of dg_parse_lines;
#: distgrail.io.edgelist.MTX_VALUES): not checked (``pattern``), integers, decimal numbers
VALUES_NONE, VALUES_INTEGER, VALUES_NUMBER = 0, 1, 2
#: bytes of text one warp counts (the host pads each chunk to a multiple of it)
TILE = 1024
#: "no comment on this line" (larger than any position in a chunk)
NO_COMMENT = 0x7FFFFFFF

# -- phase 5 mask sweep (kernels/supports.cu; host side distgrail/stages/supports.py, support_schedule.py)
#: side codes of a unit (support_schedule.RUN / OUT / IN / OUT_HUB / IN_HUB): a run of small steps,
#: one side's rows of one step, one chunk of a hub row's edges on one side
SIDE_RUN, SIDE_OUT, SIDE_IN, SIDE_OUT_HUB, SIDE_IN_HUB = -1, 0, 1, 2, 3
#: a row of the sweep with more edges than this is a *hub*: the row units skip it and units of this
#: many of its edges each (the whole block, one OR per chunk) sweep it (a component with millions
#: of children, as one row of a unit, held the whole sweep; docs/benchmarks.md)
SWEEP_HUB_EDGES = 4096
#: the sweep's ``push`` bits: the in side pushes along the forward CSR, the out side along the reverse one;
#: ``SKIP_OUT`` / ``SKIP_IN``: that side is not swept (a rank sweeping one side of a word: distgrail.mpi.phase5)
PUSH_IN, PUSH_OUT, SKIP_OUT, SKIP_IN = 1, 2, 4, 8
#: int32 fields of a schedule unit and int64 fields of a descriptor (len(support_schedule.FIELDS)
#: and len(support_schedule.DESC_FIELDS))
SCHED_FIELDS, DESC_FIELDS = 8, 10
#: u64 words of the sweep's counter array: the ticket and the error flag in different 128-byte lines
CTR_TICKET, CTR_ERR, CTR_WORDS = 0, 16, 32
#: u32 stride of the per-group done counters (a 32-byte sector each)
DONE_STRIDE = 8
#: threads per block of dg_support_sweep (128 registers a thread hold the prefetched structure)
#: and of dg_support_choose
SWEEP_THREADS = BATCH_THREADS // 2
CHOOSE_THREADS = GRID_THREADS

#: the partitioned condensation's edge filter (kernels/partitioned_sweeps.cu): threads per block,
#: and rounds per tile (a tile of PSW_THREADS * PSW_ROUNDS edges is counted, then written in order)
PSW_THREADS = 256
PSW_ROUNDS = 16
#: the filter's predicates: no self-loop, both ends alive, both ends of one colour
PSW_NO_LOOP = 0
PSW_ALIVE = 1
PSW_SAME = 2

#: zlib's CRC-32 polynomial, bits reflected (kernels/checksums.cu: the block checksums of an index
#: file's datasets on the GPU), and the bytes of a block each of its threads takes
CRC_POLY = 0xEDB88320
CRC_CHUNK = 4096

#: macro name in every kernel source -> name of the constant here (unsigned 64-bit where
#: :data:`U64_MACROS` says so)
CUDA_MACROS = {
    "DG_GOLDEN": "GOLDEN",
    "DG_MIX1": "MIX1",
    "DG_MIX2": "MIX2",
    "DG_S2": "S2",
    "DG_CAP": "CAP",
    "DG_UNDECIDED": "UNDECIDED",
    "DG_STEP_SAME_COMPONENT": "SAME",
    "DG_STEP_LEVEL_FILTER": "LEVEL",
    "DG_STEP_SUPPORT_POSITIVE": "SUPPORT_POS",
    "DG_STEP_SUPPORT_NEGATIVE": "SUPPORT_NEG",
    "DG_STEP_INTERVAL_FILTER": "INTERVAL",
    "DG_STEP_TREE_CUT": "TREE",
    "DG_STEP_SEARCH_POSITIVE": "SEARCH_POS",
    "DG_STEP_SEARCH_NEGATIVE": "SEARCH_NEG",
    "DG_MAX_ROUNDS": "MAX_ROUNDS",
    "DG_HUB": "HUB",
    "DG_BATCH_THREADS": "BATCH_THREADS",
    "DG_GRID_THREADS": "GRID_THREADS",
    "DG_HUB_THREADS": "HUB_THREADS",
    "DG_HUB_TEAM": "HUB_TEAM_WARPS",
    "DG_MAX_DIMS_PER_SWEEP": "MAX_DIMS_PER_SWEEP",
}
#: macros that are unsigned 64-bit (written 0x...ULL)
U64_MACROS = frozenset({"DG_GOLDEN", "DG_MIX1", "DG_MIX2", "DG_S2", "DG_CAP"})
#: kernel module (kernels/<name>.cu) -> macros only that module gets (macro name = constant name)
KERNEL_MACROS = {
    "parse": ("FMT_GRA", "FMT_EDGELIST", "FMT_MTX", "FMT_CSV", "C_TOK", "C_NL", "C_A", "C_B", "C_BAD", "F_BAD_BYTE",
              "F_LINE", "F_VALUE", "F_CAPACITY", "F_WIDTH", "TILE", "NO_COMMENT", "VALUES_INTEGER"),
    "supports": ("SIDE_RUN", "SIDE_OUT", "SIDE_IN", "SIDE_OUT_HUB", "SIDE_IN_HUB", "SWEEP_HUB_EDGES", "PUSH_IN", "PUSH_OUT", "SKIP_OUT", "SKIP_IN",
                 "SCHED_FIELDS", "DESC_FIELDS",
                 "CTR_TICKET", "CTR_ERR", "CTR_WORDS", "DONE_STRIDE", "SWEEP_THREADS", "CHOOSE_THREADS"),
    "partitioned_sweeps": ("PSW_THREADS", "PSW_ROUNDS", "PSW_NO_LOOP", "PSW_ALIVE", "PSW_SAME"),
    "checksums": ("CRC_POLY",),
}


def macro_values(module: str | None = None) -> dict:
    """``{macro: (value, is unsigned 64-bit)}`` that kernel ``module`` is compiled with (every
    module's :data:`CUDA_MACROS`, then the module's own :data:`KERNEL_MACROS`), read now.

    >>> macro_values("parse")["TILE"], macro_values()["DG_CAP"]
    ((1024, False), (4611686018427387904, True))
    """
    this = globals()
    out = {m: (int(this[attr]), m in U64_MACROS) for m, attr in CUDA_MACROS.items()}
    out.update({m: (int(this[m]), False) for m in KERNEL_MACROS.get(module, ())})
    return out
