"""Compiling the CPU backend's numba loops at set-up (``python -m distgrail.jit_warm``): every
compiled loop a large CPU run takes lands in numba's cache, the thresholds come back as they
were, and launch/setup.sh runs it once per change of the compiled modules without failing."""

import os
import subprocess
import sys

import pytest

from distgrail.io import guards, text
from distgrail.jit_warm import thresholds_at_zero
from distgrail.stages import condense, ranks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: the functions a large CPU build, read and query runs compiled
EXPECTED = ["scc_jit.strong_components", "scc_jit.rows_of", "scc_jit.closing_levels", "scc_jit.canonical_order", "scc_jit.renumbered_transpose", "ranks_jit.sibling_offsets_into",
            "ranks_jit.parent_buckets", "fields_jit.numbers_at", "fields_jit.comma_width", "fields_jit.first_empty_tab_field", "deep_jit.kahn_rest",
            "deep_jit.intervals_bottom_up", "prefilter_jit._block", "bidir_jit._block", "insertion_jit.gather_row"]


def test_every_compiled_loop_lands_in_the_cache(tmp_path):
    pytest.importorskip("numba", reason="numba is a dependency; it did not import")
    cache = tmp_path / "numba"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-m", "distgrail.jit_warm"], capture_output=True, text=True, timeout=600,
                       env=env, cwd=ROOT)
    assert r.returncode == 0 and "compiled loops are in numba's cache" in r.stdout, r
    names = {f.split("-")[0] for _, _, files in os.walk(cache) for f in files if f.endswith(".nbi")}
    assert not [e for e in EXPECTED if e not in names], sorted(names)
    # the prefilter for contiguous int64 ids and for a mapped .npy's read-only int32 and int64 columns
    kinds = [f for _, _, files in os.walk(cache) for f in files if f.startswith("prefilter_jit._block") and f.endswith(".nbc")]
    assert len(kinds) >= 3, kinds


def test_the_thresholds_come_back():
    from distgrail.stages import insertion

    before = (condense.COMPILED_SCC_EDGES, ranks.COMPILED_RANKS_COMPONENTS, text.COMPILED_NUMBERS_BYTES,
              guards.JIT_MIN_BYTES, insertion.COMPILED_GATHER_COMPONENTS)
    with pytest.raises(RuntimeError):
        with thresholds_at_zero():
            assert condense.COMPILED_SCC_EDGES == ranks.COMPILED_RANKS_COMPONENTS == text.COMPILED_NUMBERS_BYTES == 0
            assert insertion.COMPILED_GATHER_COMPONENTS == 0
            raise RuntimeError
    assert (condense.COMPILED_SCC_EDGES, ranks.COMPILED_RANKS_COMPONENTS, text.COMPILED_NUMBERS_BYTES,
            guards.JIT_MIN_BYTES, insertion.COMPILED_GATHER_COMPONENTS) == before


def test_setup_runs_it_once_per_change_and_survives_a_failure(tmp_path):
    """The set-up's block run by bash with a stand-in .venv/bin/python."""
    with open(os.path.join(ROOT, "launch", "setup.sh")) as f:
        block = f.read()
    block = block[block.index("jwarmed=.venv/.distgrail-jit-warmed"):]
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / "distgrail").mkdir()
    (tmp_path / "distgrail" / "a_jit.py").write_text("x = 1\n")
    py = tmp_path / ".venv" / "bin" / "python"
    log = tmp_path / "calls"
    script = tmp_path / "block.sh"
    script.write_text("set -euo pipefail\n" + block + "echo done\n")

    def setup(status):
        py.write_text(f"#!/bin/sh\ncase \"$*\" in *jit_warm*) echo run >> {log};; *) echo 3.12 0.60; exit 0;; esac\n"
                      f"echo 'the compiled loops'\nexit {status}\n")
        py.chmod(0o755)
        r = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "done", r
        assert ("failed" in r.stderr) == (status != 0), r.stderr
        return log.read_text().count("run") if log.exists() else 0

    assert setup(1) == 1  # failed: not marked
    assert setup(0) == 2  # ran, marked
    assert setup(0) == 2  # nothing changed: not run
    (tmp_path / "distgrail" / "a_jit.py").write_text("x = 2\n")
    assert setup(0) == 3  # a compiled module changed: run again
