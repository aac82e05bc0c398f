"""The 11 GRAIL benchmark graphs: exact reachable counts for every dims and parent rule."""

import numpy as np
import pytest

import distgrail
import distgrail.io.pairs
import distgrail.settings
from distgrail.bfs import bfs_reachable, csr_of
from conftest import EXPECTED, graph_path, load_pairs


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_counts_all_dims_and_rules(name, data_dir):
    s, t = load_pairs(name)
    g = distgrail.read_graph(graph_path(name))
    ip, ix = csr_of(g)
    truth = bfs_reachable(ip, ix, s[:400], t[:400])
    for rule in ("max-level", "dfs"):
        for dims in (1, 2, 5):
            idx = distgrail.build_index(g, dims=dims, parent_rule=rule, backend="cpu")
            ans, stats = idx.query(s, t, backend="cpu")
            assert int(ans.sum()) == EXPECTED[name], (rule, dims)
            assert stats.reachable == EXPECTED[name]
            assert sum(stats.steps.values()) == s.size
            np.testing.assert_array_equal(ans[:400], truth)


def test_bundled_graph_matches_shared_copy(data_dir):
    with open(distgrail.bundled_graph(), "rb") as a, open(graph_path("kegg_dag_uniq"), "rb") as b:
        assert a.read() == b.read()
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    assert int(idx.reachable(s, t).sum()) == distgrail.BUNDLED_REACHABLE


def test_benchmark_graphs_ship_with_the_tests():
    """A fresh clone has the graphs its tests need (tests/data), with the README's checksums."""
    import hashlib
    import os
    import re

    from conftest import ROOT

    here = os.path.join(ROOT, "tests", "data")
    readme = open(os.path.join(here, "README.md")).read()
    sums = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", readme, re.M))
    for name, count in EXPECTED.items():
        assert f"| {count:,} |" in readme, name
        for f in (f"{name}.gra", f"{name}.gra.q100k.pairs.gz"):
            with open(os.path.join(here, f), "rb") as fh:
                assert hashlib.sha256(fh.read()).hexdigest() == sums[f], f
    if not distgrail.settings.get("DISTGRAIL_DATA"):
        assert os.path.samefile(graph_path("kegg_dag_uniq"), os.path.join(here, "kegg_dag_uniq.gra"))
