"""Phase 3's sibling order: by parent, then the uint64 hash compared as an integer (never as a
float64, where distinct hashes can tie)."""

import numpy as np

from distgrail.hashing import STREAM_DIM0, hash3
from distgrail.stages.ranks import offsets_in_key_order, post_order_ranks_numpy, sibling_keys, sibling_offsets


def _reference(parent, size, key):
    """Offsets by a plain Python sort of (parent, int(key))."""
    off = np.zeros(parent.size, np.int64)
    groups = {}
    for v in range(parent.size):
        groups.setdefault(int(parent[v]), []).append(v)
    for kids in groups.values():
        acc = 0
        for v in sorted(kids, key=lambda v: int(key[v])):
            off[v] = acc
            acc += int(size[v])
    return off


def test_keys_equal_as_float64_are_ordered_as_integers():
    parent = np.array([-1, 0, 0, 0, -1], np.int64)
    size = np.array([4, 1, 1, 1, 1], np.int64)
    key = np.array([9, 2**63 + 1, 2**63, 5, 2**63 + 3], np.uint64)
    assert float(key[1]) == float(key[2]) == float(key[4])  # a float64 sort could not tell them apart
    off = offsets_in_key_order(parent, size, key)
    # children of 0 in key order: 3 (5), 2 (2^63), 1 (2^63 + 1); roots: 0 (9), 4 (2^63 + 3)
    assert off.tolist() == [0, 2, 1, 0, 4]
    assert off.tolist() == _reference(parent, size, key).tolist()


def test_random_forests_with_clustered_keys_match_a_plain_sort():
    rng = np.random.default_rng(3)
    for C in (1, 2, 50, 2000):
        parent = np.where(rng.random(C) < 0.1, -1, rng.integers(0, max(C, 1), C)).astype(np.int64)
        size = rng.integers(1, 100, C).astype(np.int64)
        # many keys within a few units of each other near 2^64: equal as float64, distinct as integers
        key = (np.uint64(2**64 - 2**20) + rng.permutation(C).astype(np.uint64) * np.uint64(3))
        np.testing.assert_array_equal(offsets_in_key_order(parent, size, key), _reference(parent, size, key))


def test_sibling_offsets_use_the_dimension_hash():
    rng = np.random.default_rng(1)
    C = 500
    parent = np.concatenate(([-1, -1], rng.integers(0, 2, C - 2))).astype(np.int64)
    size = np.ones(C, np.int64)
    key = hash3(7, STREAM_DIM0 + 4, np.arange(C))
    np.testing.assert_array_equal(sibling_keys(C, 7, 4), key)
    np.testing.assert_array_equal(sibling_offsets(parent, size, 7, 4), _reference(parent, size, key))
    assert not np.array_equal(sibling_offsets(parent, size, 7, 4), sibling_offsets(parent, size, 7, 5))


def test_post_order_ranks_are_post_orders():
    # a random forest numbered by level: roots on level 0, every other vertex's parent on the level
    # above (as phase 1 makes it); sizes from the parent array
    rng = np.random.default_rng(5)
    widths = [3, 7, 20, 40, 11]
    level_ptr = np.concatenate(([0], np.cumsum(widths))).astype(np.int64)
    C = int(level_ptr[-1])
    parent = np.full(C, -1, np.int64)
    for lev in range(1, len(widths)):
        a, b = level_ptr[lev], level_ptr[lev + 1]
        pa, pb = level_ptr[lev - 1], level_ptr[lev]
        parent[a:b] = rng.integers(pa, pb, b - a)
    size = np.ones(C, np.int64)
    for v in range(C - 1, -1, -1):
        if parent[v] >= 0:
            size[parent[v]] += size[v]
    post = post_order_ranks_numpy(parent, size, level_ptr, 2, [0, 1])
    for k in range(2):
        p = post[k]
        assert sorted(p.tolist()) == list(range(C))  # a permutation
        kids = parent >= 0
        assert (p[parent[kids]] > p[kids]).all()  # a parent after its children
        lo = p - size + 1  # the subtree occupies [lo, post]
        assert (lo[kids] >= lo[parent[kids]]).all() and (p[kids] < p[parent[kids]]).all()
    assert not np.array_equal(post[0], post[1])
