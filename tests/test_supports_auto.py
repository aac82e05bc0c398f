"""``supports="auto"`` (the default K of phase 5): the density rule, the argument checks, the
builds it gives (answers against BFS, byte identity across rank counts)."""

import argparse
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.errors import DistGrailError
from distgrail.io.generate import generate
from distgrail.stages.condense import condense
from distgrail.stages.supports import (AUTO_SUPPORTS, DEFAULT_SUPPORTS, auto_supports, choose_supports,
                                       resolve_supports, supports_arg)


@pytest.mark.parametrize("C,m,K", [(3617, 4395, 64), (1_500_000, 150_000_000, 1024), (250_000, 12_500_000, 512),
                                   (100_000, 1_000_000, 128), (100_000, 640_000, 64), (100_000, 641_000, 128),
                                   (0, 0, 64), (1, 0, 64), (10, 10**9, 1024)])
def test_auto_rule(C, m, K):
    assert auto_supports(C, m) == K
    assert AUTO_SUPPORTS["low"] <= K <= AUTO_SUPPORTS["high"] and K & (K - 1) == 0


def test_resolve_and_checks():
    assert DEFAULT_SUPPORTS == "auto"
    dense = condense(generate("paper", 2000, 30, seed=2))
    want = auto_supports(dense.C, dense.indices.shape[0])
    assert want == 512 and resolve_supports("auto", dense) == want
    assert resolve_supports(0, dense) == 0 and resolve_supports(200, dense) == 200
    assert choose_supports(dense, "auto").size == want
    for bad in (-1, 2.5, True, "64", "AUTO", None):
        with pytest.raises(DistGrailError, match="integer >= 0 or 'auto'"):
            resolve_supports(bad, dense)
    assert supports_arg("auto") == "auto" and supports_arg("0") == 0 and supports_arg("1024") == 1024
    for bad in ("-1", "x", "1.5", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="integer >= 0 or 'auto'"):
            supports_arg(bad)


@pytest.mark.parametrize("make,K", [(lambda: distgrail.read_graph(distgrail.bundled_graph()), 64),
                                    (lambda: generate("paper", 2000, 30, seed=2), 512)])
def test_default_build_is_auto(make, K):
    g = make()
    idx = distgrail.build_index(g, dims=3, backend="cpu")
    assert idx.supports == K and idx.meta["supports"] == K
    rng = np.random.default_rng(3)
    s, t = rng.integers(0, g.n, 3000), rng.integers(0, g.n, 3000)
    a, st = idx.query(s, t, backend="cpu")
    np.testing.assert_array_equal(a, bfs_reachable(*csr_of(g), s, t))
    assert st.steps["support_positive"] > 0


def test_cli_supports_argument(tmp_path):
    out = tmp_path / "i.h5"
    bad = subprocess.run([sys.executable, "-m", "distgrail", "index", "bundled", "-o", str(out), "--supports", "many",
                          "--backend", "cpu", "--quiet"], capture_output=True, text=True)
    assert bad.returncode == 2 and "integer >= 0 or 'auto'" in bad.stderr and not out.exists()
    ok = subprocess.run([sys.executable, "-m", "distgrail", "index", "bundled", "-o", str(out), "--backend", "cpu",
                         "--quiet"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert distgrail.open_index(str(out)).supports == 64


@pytest.mark.mpi(min_size=2)
@pytest.mark.timeout(120)
def test_auto_byte_identical_across_ranks():
    """Every rank resolves "auto" from the shared DAG: the distributed index equals the one-rank one."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        g = generate("paper", 1500, 30, seed=5)
        idx = distgrail.build_index(g, dims=3, backend="cpu", comm=comm)
        ref = distgrail.build_index(g, dims=3, backend="cpu")
        ok = ref.supports == 512 and idx.supports == ref.supports and sorted(idx.arrays) == sorted(ref.arrays) \
            and all(np.asarray(idx.arrays[k]).tobytes() == np.asarray(ref.arrays[k]).tobytes() for k in ref.arrays)
        assert all(comm.allgather(bool(ok)))
    finally:
        comm.Free()
