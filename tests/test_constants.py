"""One source of truth for the constants shared by Python and CUDA (distgrail/constants.py): the
generated #define block every kernel compile gets, a planted change reaching the compiled source,
the host code using the same values, no kernel file defining or spelling them itself."""

import glob
import os
import re
import shutil
import subprocess

import pytest

from distgrail import constants, satmath
from distgrail.gpu import kernels
from conftest import ROOT

KDIR = os.path.join(ROOT, "kernels")

_DEFINE = re.compile(r"#define (\w+) (?:0x([0-9A-F]+)ULL|\((-?\d+)\))$")


def _header_values(text):
    """``{macro: value}`` of a generated #define block (every line of it but the comment/mark)."""
    out = {}
    for line in text.splitlines()[2:]:
        m = _DEFINE.fullmatch(line)
        assert m, f"unexpected line {line!r}"
        out[m.group(1)] = int(m.group(2), 16) if m.group(2) else int(m.group(3))
    return out


def _defines_in(path):
    with open(path) as f:
        return set(re.findall(r"^\s*#\s*define\s+(\w+)", f.read(), re.M))


def test_header_holds_exactly_the_constants():
    got = _header_values(kernels.defines_header())
    want = {
        "DG_GOLDEN": 0x9E3779B97F4A7C15, "DG_MIX1": 0xBF58476D1CE4E5B9, "DG_MIX2": 0x94D049BB133111EB,
        "DG_S2": 0xD1B54A32D192ED03, "DG_CAP": 2**62, "DG_UNDECIDED": 0,
        **{f"DG_STEP_{s.upper()}": i + 1 for i, s in enumerate(constants.STEPS)},
        "DG_MAX_ROUNDS": 9, "DG_HUB": constants.HUB, "DG_BATCH_THREADS": 1024, "DG_GRID_THREADS": 256,
        "DG_HUB_THREADS": 256, "DG_MAX_DIMS_PER_SWEEP": constants.MAX_DIMS_PER_SWEEP,
        "DG_HUB_TEAM": constants.HUB_TEAM_WARPS,
    }
    assert got == want  # literal values the kernels relied on before they moved to constants.py
    assert got["DG_CAP"] == satmath.CAP and got["DG_GOLDEN"] == constants.GOLDEN
    assert [got[f"DG_STEP_{s.upper()}"] for s in constants.STEPS] == list(range(1, 9))
    assert kernels.defines_header().count("\n#define ") == len(want) + 1  # + the mark, no stray define


@pytest.mark.parametrize("module", sorted(constants.KERNEL_MACROS))
def test_module_header_adds_its_own_group(module):
    got = _header_values(kernels.defines_header(module))
    own = {m: getattr(constants, m) for m in constants.KERNEL_MACROS[module]}
    assert got == {**_header_values(kernels.defines_header()), **own}
    src = kernels.module_source(module)
    assert src.startswith(kernels.defines_header(module)) and src.endswith(kernels.kernel_source(module))
    assert f'#line 1 "{module}.cu"' in src
    # every group constant is used by its kernel's code (else it does not belong in the group),
    # but for the last code of a set whose other codes are tested against it
    body = re.sub(r"//[^\n]*", "", kernels.kernel_source(module))
    unused = {name for name in own if not re.search(rf"\b{name}\b", body)}
    assert unused == {"parse": set(), "supports": {"SIDE_IN_HUB"}, "partitioned_sweeps": set(),
                      "checksums": set()}[module]


def test_a_changed_constant_reaches_the_compiled_source(monkeypatch):
    before = kernels.module_source("supports")
    monkeypatch.setattr(constants, "HUB", 4097)
    monkeypatch.setattr(constants, "CTR_ERR", 17)
    after = kernels.module_source("supports")
    assert "#define DG_HUB (4097)" in after and "#define CTR_ERR (17)" in after
    assert "#define DG_HUB (4096)" in before and before != after
    wrapped = kernels.wrapper_source("supports")
    assert wrapped == after + "\n"  # nvcc (fatbins) compiles the very text NVRTC gets


def test_python_side_uses_the_values_the_kernels_get():
    """The host code that talks to a kernel uses the generated values, not copies of them."""
    from distgrail.io import chunks, parse_twin
    from distgrail.query import stats
    from distgrail.stages import support_schedule, supports

    parse = constants.macro_values("parse")
    assert {k: parse[f"FMT_{k.upper()}"][0] for k in chunks.FMT_CODES} == chunks.FMT_CODES
    for name in constants.KERNEL_MACROS["parse"]:
        if hasattr(parse_twin, name):
            assert getattr(parse_twin, name) == parse[name][0], name
    assert parse_twin.TILE == parse["TILE"][0] and parse_twin.F_CAPACITY == parse["F_CAPACITY"][0]
    sup = constants.macro_values("supports")
    assert (support_schedule.RUN, support_schedule.OUT, support_schedule.IN) == \
        (sup["SIDE_RUN"][0], sup["SIDE_OUT"][0], sup["SIDE_IN"][0])
    assert len(support_schedule.FIELDS) == sup["SCHED_FIELDS"][0]
    assert len(support_schedule.DESC_FIELDS) == sup["DESC_FIELDS"][0]
    for name in ("CTR_WORDS", "CTR_ERR", "DONE_STRIDE", "PUSH_IN", "PUSH_OUT", "SKIP_OUT", "SKIP_IN", "SWEEP_THREADS", "CHOOSE_THREADS"):
        assert getattr(supports, name) == sup[name][0], name
    assert sup["CTR_ERR"][0] < sup["CTR_WORDS"][0] and (sup["CTR_ERR"][0] - sup["CTR_TICKET"][0]) * 8 >= 128
    # the query statistics decode the codes the kernels count with
    every = constants.macro_values()
    for attr, macro in (("SAME", "DG_STEP_SAME_COMPONENT"), ("LEVEL", "DG_STEP_LEVEL_FILTER"),
                        ("INTERVAL", "DG_STEP_INTERVAL_FILTER"), ("TREE", "DG_STEP_TREE_CUT"),
                        ("SEARCH_POS", "DG_STEP_SEARCH_POSITIVE"), ("SEARCH_NEG", "DG_STEP_SEARCH_NEGATIVE"),
                        ("UNDECIDED", "DG_UNDECIDED")):
        assert getattr(stats, attr) == every[macro][0], attr
    assert stats.STEPS[every["DG_STEP_TREE_CUT"][0] - 1] == "tree_cut"


def test_no_kernel_file_defines_a_generated_name():
    owned = set(constants.macro_values())
    for group in constants.KERNEL_MACROS.values():
        owned |= set(group)
    owned.add(kernels.HEADER_MARK)
    files = glob.glob(os.path.join(KDIR, "*.cu")) + glob.glob(os.path.join(KDIR, "*.cuh"))
    assert len(files) >= 10
    for path in files:
        clash = _defines_in(path) & owned
        assert not clash, f"{os.path.basename(path)} defines {sorted(clash)}: constants.py owns them"


def test_common_header_stops_without_the_generated_block():
    with open(os.path.join(KDIR, "common.cuh")) as f:
        src = f.read()
    guard = src[src.index("#if !defined"):src.index("#error")]
    assert f"defined({kernels.HEADER_MARK})" in guard
    assert f"#define {kernels.HEADER_MARK} 1" in kernels.defines_header()


def test_kernels_spell_no_shared_constant():
    # the numbers live in constants.py only; a literal copy in a kernel could drift
    literals = [f"{constants.GOLDEN:X}", f"{constants.MIX1:X}", f"{constants.MIX2:X}", f"{constants.S2:X}",
                "1ULL << 62", "__launch_bounds__(1024)", "__launch_bounds__(256)", "__launch_bounds__(512)"]
    for path in glob.glob(os.path.join(KDIR, "*.cu*")):
        with open(path) as f:
            src = f.read().upper()
        for lit in literals:
            assert lit.upper() not in src, f"{os.path.basename(path)} spells {lit}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed: the preprocessor check needs it")
def test_nvcc_sees_the_generated_values(tmp_path, monkeypatch):
    """A planted change of a constant is what nvcc's preprocessor hands the kernel."""
    monkeypatch.setattr(constants, "DONE_STRIDE", 9)
    src = tmp_path / "probe.cu"
    src.write_text(kernels.wrapper_source("supports") + "int dg_probe_value = DONE_STRIDE * 1000 + SWEEP_THREADS;\n")
    r = subprocess.run(["nvcc", "-E", *kernels.compile_options(), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"dg_probe_value = (9) * 1000 + ({constants.BATCH_THREADS // 2});" in r.stdout
    # and without the block, common.cuh stops the compile
    bare = tmp_path / "bare.cu"
    bare.write_text('#include "supports.cu"\n')
    r = subprocess.run(["nvcc", "-E", *kernels.compile_options(), str(bare)], capture_output=True, text=True)
    assert r.returncode != 0 and "DG_* constants missing" in r.stderr


def test_templates_cover_every_group_size():
    ex = kernels.TEMPLATES["intervals"]
    K = constants.MAX_DIMS_PER_SWEEP
    assert sorted(ex) == sorted([f"dg_sweep_iv<{k}>" for k in range(1, K + 1)] + [f"dg_small_iv<{k}>" for k in range(1, K + 1)])
    src = kernels.wrapper_source("intervals", ex)
    assert src.startswith(kernels.module_source("intervals"))
    for e in ex:
        assert f"&{e}," in src
    assert kernels._mangled("dg_sweep_iv<3>") == "11dg_sweep_ivILi3EE"
    with pytest.raises(ValueError):
        kernels._mangled("dg_jump")
