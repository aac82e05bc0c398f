"""A graph file's stored condensation is used only when it belongs to the CSR beside it.

Before this file's commit a `.h5` graph whose CSR had been changed (h5py, a script that swapped
`csr/indices` and kept `condensation/`) was indexed with exit 0 by its old components: the index
answered for another graph. Now the condensation carries the CRC-32 of the CSR it was computed
from and of its own arrays; either mismatch is refused, and a condensation without them (files of
earlier releases) is not used: the graph is condensed again.
"""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable
from distgrail.errors import GraphFormatError
from distgrail.io import binary
from distgrail.io.binary import read_binary_graph, read_condensation, write_binary_graph
from distgrail.io.graph import edge_graph_csr
from distgrail.io.read import as_graph
from distgrail.stages.condense import condense
from conftest import ROOT


def _graph(seed=3, n=60, m=150):
    rng = np.random.default_rng(seed)
    return as_graph((rng.integers(0, n, m), rng.integers(0, n, m)), num_vertices=n)


def _file(tmp_path, g=None, name="g.h5"):
    g = g if g is not None else _graph()
    p = tmp_path / name
    write_binary_graph(g, p, dag=condense(g))
    return p


def _all_pairs(n):
    s, t = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return s.ravel(), t.ravel()


def _answers_match_bfs(p, n):
    """Index of the file ``p`` (CPU) against a BFS over the file's own CSR, every pair."""
    with h5py.File(p, "r") as f:
        indptr, indices = f["csr/indptr"][...], f["csr/indices"][...]
    idx = distgrail.build_index(str(p), dims=2, backend="cpu")
    s, t = _all_pairs(n)
    return np.array_equal(idx.query(s, t, backend="cpu")[0],
                          bfs_reachable(indptr, indices, s, t).astype(bool))


def _swap_edge(p):
    """Point one CSR edge elsewhere in the file, its condensation left as it was, and the root's
    ``csr_crc32`` dropped (else that refuses the file first: tests/test_graph_file_crc.py), so the
    condensation's own tie to the CSR is what is tested."""
    with h5py.File(p, "r+") as f:
        ix = f["csr/indices"][...]
        ix[-1] = (ix[-1] + 7) % int(f.attrs["n"])
        f["csr/indices"][...] = ix
        del f.attrs["csr_crc32"]


def test_stored_condensation_used_and_exact(tmp_path):
    g = _graph()
    p = _file(tmp_path, g)
    assert condense(read_binary_graph(p)).meta.get("stored") is True
    assert _answers_match_bfs(p, g.n)


def test_condensation_of_another_csr_refused(tmp_path):
    p = _file(tmp_path)
    _swap_edge(p)
    with pytest.raises(GraphFormatError, match="computed from another graph than its CSR") as e:
        condense(read_binary_graph(p))
    assert str(p) in str(e.value)
    with pytest.raises(GraphFormatError, match="another graph"):  # the partitioned read's way: from the file
        read_condensation(p)


def test_cli_refuses_and_leaves_nothing(tmp_path):
    p = _file(tmp_path)
    _swap_edge(p)
    out = tmp_path / "x.h5"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "distgrail", "index", str(p), "-o", str(out), "--backend", "cpu"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "g.h5" in r.stderr and "distgrail convert" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["g.h5"]


def test_changed_condensation_arrays_refused(tmp_path):
    p = _file(tmp_path)
    with h5py.File(p, "r+") as f:
        comp = f["condensation/comp"][...]
        comp[0], comp[1] = comp[1], comp[0]
        if comp[0] == comp[1]:
            comp[0] = (comp[0] + 1) % int(f["condensation"].attrs["n_components"])
        f["condensation/comp"][...] = comp
    with pytest.raises(GraphFormatError, match="arrays changed since they were written"):
        condense(read_binary_graph(p))


def test_untied_condensation_condensed_again(tmp_path):
    """A file of an earlier release (no CRC attributes) whose condensation is stale: not used,
    so the index answers for the CSR the file holds."""
    g = _graph(seed=5)
    p = _file(tmp_path, g)
    _swap_edge(p)
    with h5py.File(p, "r+") as f:
        for k in ("csr_crc32", "crc32"):
            del f["condensation"].attrs[k]
    assert read_condensation(p) is None
    assert condense(read_binary_graph(p)).meta.get("stored") is None
    assert _answers_match_bfs(p, g.n)


def test_file_crc_in_pieces_equals_whole(tmp_path, monkeypatch):
    g = _graph(seed=9, n=500, m=4000)
    p = _file(tmp_path, g)
    indptr, indices = edge_graph_csr(g)
    whole = binary._crc_of((np.asarray(indptr, np.int64), np.asarray(indices, np.int32)))
    monkeypatch.setattr(binary, "_CRC_READ", 1000)  # many pieces, not multiples of 8 bytes apart
    with h5py.File(p, "r") as f:
        assert binary._file_csr_crc(f, str(p)) == whole
        assert int(f["condensation"].attrs["csr_crc32"]) == whole
