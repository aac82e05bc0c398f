"""One source of truth for the constants shared by Python and CUDA (distgrail/constants.py): the
-D options every kernel compile gets, the header guard, no literal copies in kernels/."""

import glob
import os
import re

import pytest

from distgrail import constants, satmath
from distgrail.gpu import kernels
from conftest import ROOT

KDIR = os.path.join(ROOT, "kernels")

def _parse_defines(opts):
    out = {}
    for o in opts:
        m = re.fullmatch(r"-D(DG_\w+)=(0x[0-9A-F]+ULL|-?\d+)", o)
        assert m, f"unexpected define {o!r}"
        v = m.group(2)
        out[m.group(1)] = int(v[:-3], 16) if v.endswith("ULL") else int(v)
    return out


def test_define_options_are_exactly_the_constants():
    opts = [o for o in kernels.define_options()]
    got = _parse_defines(opts)
    want = {
        "DG_GOLDEN": constants.GOLDEN, "DG_MIX1": constants.MIX1, "DG_MIX2": constants.MIX2, "DG_S2": constants.S2,
        "DG_CAP": constants.CAP, "DG_UNDECIDED": constants.UNDECIDED,
        "DG_STEP_SAME_COMPONENT": constants.SAME, "DG_STEP_LEVEL_FILTER": constants.LEVEL,
        "DG_STEP_SUPPORT_POSITIVE": constants.SUPPORT_POS, "DG_STEP_SUPPORT_NEGATIVE": constants.SUPPORT_NEG,
        "DG_STEP_INTERVAL_FILTER": constants.INTERVAL, "DG_STEP_TREE_CUT": constants.TREE,
        "DG_STEP_SEARCH_POSITIVE": constants.SEARCH_POS, "DG_STEP_SEARCH_NEGATIVE": constants.SEARCH_NEG,
        "DG_MAX_ROUNDS": constants.MAX_ROUNDS, "DG_HUB": constants.HUB,
        "DG_BATCH_THREADS": constants.BATCH_THREADS, "DG_GRID_THREADS": constants.GRID_THREADS,
        "DG_HUB_THREADS": constants.HUB_THREADS, "DG_MAX_DIMS_PER_SWEEP": constants.MAX_DIMS_PER_SWEEP,
    }
    assert got == want
    assert len(opts) == len(want)  # no duplicate or stray define
    # the literal values the kernels relied on before they moved here
    assert got["DG_GOLDEN"] == 0x9E3779B97F4A7C15 and got["DG_S2"] == 0xD1B54A32D192ED03
    assert got["DG_MIX1"] == 0xBF58476D1CE4E5B9 and got["DG_MIX2"] == 0x94D049BB133111EB
    assert got["DG_CAP"] == 2**62 == satmath.CAP
    assert [got[f"DG_STEP_{s.upper()}"] for s in constants.STEPS] == list(range(1, 9))
    assert got["DG_MAX_ROUNDS"] == 9
    # every compile gets them, NVRTC and nvcc alike
    assert set(opts) <= set(kernels.compile_options())


def test_query_step_codes_agree():
    from distgrail.query import stats

    for name in ("UNDECIDED", "SAME", "LEVEL", "INTERVAL", "TREE", "SEARCH_POS", "SEARCH_NEG"):
        assert getattr(stats, name) == getattr(constants, name), name


def test_common_header_requires_every_macro():
    with open(os.path.join(KDIR, "common.cuh")) as f:
        src = f.read()
    guard = src[src.index("#if !defined"):src.index("#error")]
    assert set(re.findall(r"defined\((DG_\w+)\)", guard)) == set(constants.CUDA_MACROS)


def test_kernels_spell_no_shared_constant():
    # the numbers live in constants.py only; a literal copy in a kernel could drift
    literals = [f"{constants.GOLDEN:X}", f"{constants.MIX1:X}", f"{constants.MIX2:X}", f"{constants.S2:X}",
                "1ULL << 62", "__launch_bounds__(1024)", "__launch_bounds__(256)", "#define DG_CAP"]
    for path in glob.glob(os.path.join(KDIR, "*.cu*")):
        with open(path) as f:
            src = f.read().upper()
        for lit in literals:
            assert lit.upper() not in src, f"{os.path.basename(path)} spells {lit}"


def test_templates_cover_every_group_size():
    ex = kernels.TEMPLATES["intervals"]
    K = constants.MAX_DIMS_PER_SWEEP
    assert sorted(ex) == sorted([f"dg_sweep_iv<{k}>" for k in range(1, K + 1)] + [f"dg_small_iv<{k}>" for k in range(1, K + 1)])
    src = kernels.wrapper_source("intervals", ex)
    assert src.startswith('#include "intervals.cu"')
    for e in ex:
        assert f"&{e}," in src
    assert kernels._mangled("dg_sweep_iv<3>") == "11dg_sweep_ivILi3EE"
    with pytest.raises(ValueError):
        kernels._mangled("dg_jump")
