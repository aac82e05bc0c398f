"""Phase 5 (distgrail/stages/supports.py): the support choice and the NumPy twin of the mask
sweeps against a brute-force reachability closure."""

import numpy as np
import pytest

import distgrail
from distgrail.errors import DistGrailError
from distgrail.hashing import hash3
from distgrail.io.generate import generate
from distgrail.stages.condense import condense
from distgrail.stages.supports import (STREAM_SUPPORT, build_supports, choose_supports, support_masks,
                                       support_masks_numpy, words)
from distgrail.gpu.backend import get_backend
from conftest import closure


def bits(mask, K):
    """(C, K) bool matrix of a (C, W) uint64 mask."""
    j = np.arange(K)
    return ((mask[:, j // 64] >> (j % 64).astype(np.uint64)) & np.uint64(1)).astype(bool)


def dag_closure(dag):
    src = np.repeat(np.arange(dag.C), np.diff(dag.indptr))
    return closure(dag.C, src, dag.indices)


def graphs():
    rng = np.random.default_rng(5)
    n = 300
    cyc = distgrail.as_graph((np.concatenate([rng.integers(0, n, 700), [3, 7]]),
                              np.concatenate([rng.integers(0, n, 700), [3, 7]])), num_vertices=n + 5)
    chain = distgrail.as_graph((np.arange(199), np.arange(1, 200)))
    return {
        "paper-dense": generate("paper", 400, 40, seed=3),
        "scale-free": generate("scale-free", 500, 4, seed=1),
        "layered": generate("layered", 400, 3, seed=2, levels=30),
        "cycles-loops-isolated": cyc,
        "deep-chain": chain,
        "one-scc": distgrail.as_graph((np.arange(50), (np.arange(50) + 1) % 50)),
    }


GRAPHS = graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("K", [0, 1, 64, 200])
def test_masks_equal_brute_force(name, K):
    dag = condense(GRAPHS[name])
    ids = choose_supports(dag, K, seed=4)
    assert ids.size == min(K, dag.C) and np.unique(ids).size == ids.size
    out, inn = support_masks_numpy(dag, ids)
    k = ids.size
    assert out.dtype == inn.dtype == np.uint64 and out.shape == inn.shape == (dag.C, words(k))
    reach = dag_closure(dag)  # reach[a, b]: a ->* b (a included)
    np.testing.assert_array_equal(bits(out, k), reach[:, ids])
    np.testing.assert_array_equal(bits(inn, k), reach[ids, :].T)
    if out.shape[1]:  # no stray bits above K
        tail = k % 64
        if tail:
            assert not (out[:, -1] >> np.uint64(tail)).any() and not (inn[:, -1] >> np.uint64(tail)).any()


@pytest.mark.parametrize("name", ["paper-dense", "layered", "scale-free"])
def test_blocks_side_by_side_equal_whole(name):
    dag = condense(GRAPHS[name])
    ids = choose_supports(dag, 200, seed=0)
    whole = support_masks_numpy(dag, ids)
    K = ids.size
    assert K > 128
    for cuts in ([0, 64, K], [0, 128, K], [0, 64, 128, K], [0, K]):
        parts = [support_masks_numpy(dag, ids, block=(a, b)) for a, b in zip(cuts[:-1], cuts[1:])]
        for i in (0, 1):
            np.testing.assert_array_equal(np.concatenate([p[i] for p in parts], axis=1), whole[i])


def test_without_reverse_csr_same_masks():
    """MPI ranks get the DAG without its reverse CSR; the twin rebuilds it."""
    import dataclasses

    dag = condense(GRAPHS["paper-dense"])
    ids = choose_supports(dag, 100)
    bare = dataclasses.replace(dag, rindptr=None, rindices=None)
    for a, b in zip(support_masks_numpy(dag, ids), support_masks_numpy(bare, ids)):
        np.testing.assert_array_equal(a, b)


def test_choice_rule_and_determinism():
    dag = condense(GRAPHS["scale-free"])
    K = 37
    ids = choose_supports(dag, K, seed=9)
    np.testing.assert_array_equal(ids, choose_supports(dag, K, seed=9))
    assert not np.array_equal(ids, choose_supports(dag, K, seed=10)) or dag.C < 2 * K
    C = dag.C
    score = (np.bincount(dag.indices, minlength=C) + 1) * (np.diff(dag.indptr) + 1)
    tie = hash3(9, STREAM_SUPPORT, np.arange(C))
    for j, s in enumerate(ids.tolist()):  # support j: best of slice j, by score, hash, id
        a, b = j * C // K, (j + 1) * C // K
        assert a <= s < b
        best = max(range(a, b), key=lambda x: (int(score[x]), -int(tie[x]), -x))
        assert s == best
    assert choose_supports(dag, 10**9).size == C  # capped at C
    assert choose_supports(dag, 0).size == 0


def test_bad_arguments():
    dag = condense(GRAPHS["layered"])
    for K in (-1, 2.5, True, "64"):
        with pytest.raises(DistGrailError, match="supports must be an integer >= 0"):
            choose_supports(dag, K)
    ids = choose_supports(dag, 130)
    for block in ((1, 64), (64, 200), (-64, 10), (70, 80)):
        with pytest.raises(DistGrailError, match="support block"):
            support_masks_numpy(dag, ids, block=block)


def test_build_supports_host_arrays():
    dag = condense(GRAPHS["paper-dense"])
    ids, out, inn = build_supports(dag, 64, seed=1, be="cpu")
    o2, i2 = support_masks(get_backend("cpu"), dag, ids)
    np.testing.assert_array_equal(out, o2)
    np.testing.assert_array_equal(inn, i2)
    assert isinstance(out, np.ndarray) and ids.dtype == np.int32
