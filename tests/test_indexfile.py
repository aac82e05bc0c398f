"""The HDF5 index: schema, round trip, and clear errors for files that are not v1/v2 indexes."""

import h5py
import numpy as np
import pytest

import distgrail
import distgrail.io.pairs
from distgrail import IndexFormatError


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    p = tmp_path_factory.mktemp("idx") / "k.h5"
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=4, seed=3, backend="cpu", output=p)
    return p, idx


def test_schema_readable_with_plain_h5py(built):
    p, idx = built
    with h5py.File(p, "r") as f:
        # strings are fixed-length UTF-8 (no global heap to damage): plain h5py reads them as bytes
        assert f.attrs["format"] == b"distgrail-index" and f.attrs["format_version"] == 2
        assert f.attrs["dims"] == 4 and f.attrs["seed"] == 3 and f.attrs["parent_rule"] == b"max-level"
        assert len(f.attrs["source_digest"]) == 64 and f.attrs["source_digest_algorithm"] == b"blake3"
        assert f["labels/intervals"].shape == (4, idx.C, 2)
        assert f["labels/intervals"].dtype == np.uint16  # 3,617 components fit 16 bits
        assert f["vertex/component"].shape == (idx.n,)


def test_roundtrip_answers(built):
    p, idx = built
    back = distgrail.open_index(p)
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    np.testing.assert_array_equal(back.reachable(s, t, backend="cpu"), idx.reachable(s, t, backend="cpu"))


def test_other_version_and_foreign_files(built, tmp_path):
    p, _ = built
    import shutil

    q = tmp_path / "v3.h5"
    shutil.copy(p, q)
    with h5py.File(q, "a") as f:
        f.attrs["format_version"] = 3
    with pytest.raises(IndexFormatError, match="schema version 3, this distgrail reads versions 1, 2"):
        distgrail.open_index(q)
    r = tmp_path / "other.h5"
    with h5py.File(r, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(IndexFormatError, match="not a distgrail index"):
        distgrail.open_index(r)
    t = tmp_path / "text.h5"
    t.write_text("hello")
    with pytest.raises(IndexFormatError, match="not an HDF5 file"):
        distgrail.open_index(t)
    with pytest.raises(IndexFormatError, match="no such index file"):
        distgrail.open_index(tmp_path / "missing.h5")


def test_query_api_errors(built):
    _, idx = built
    with pytest.raises(distgrail.QueryError, match="equal length"):
        idx.reachable([1, 2], [3])
    with pytest.raises(distgrail.QueryError, match=r"sources\[0\] out of range 0..3616, got -1"):
        idx.reachable([-1], [3])
    assert idx.reachable(2, 3) is True
