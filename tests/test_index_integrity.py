"""Issue 12 item 3: a damaged or incomplete index is an error naming the dataset, never answers.
Version-1 files (written by distgrail before the v2 schema) still open and answer exactly."""

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
import distgrail.io.pairs
from distgrail import IndexFormatError
from distgrail.bfs import bfs_reachable, csr_of
from conftest import ROOT

V1 = os.path.join(ROOT, "tests", "data", "kegg_dag_uniq.v1.h5")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    p = tmp_path_factory.mktemp("integrity") / "k.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", output=p)
    return p


def _copy(src, tmp_path, name="x.h5"):
    q = tmp_path / name
    shutil.copy(src, q)
    return q


def _flip(path, dataset, count=50, seed=1):
    """Flip ``count`` bytes inside the stored chunks of ``dataset`` (in the file, under HDF5)."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        spans = [(c.byte_offset, c.size) for c in (ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks()))] \
            if ds.chunks else [(ds.id.get_offset(), ds.id.get_storage_size())]
    rng = np.random.default_rng(seed)
    with open(path, "r+b") as fh:
        for _ in range(count):
            off, size = spans[int(rng.integers(len(spans)))]
            pos = off + int(rng.integers(size))
            fh.seek(pos)
            b = fh.read(1)
            fh.seek(pos)
            fh.write(bytes([b[0] ^ 0xFF]))


def test_every_dataset_is_checksummed(built):
    """Contiguous datasets (no filter), each with the CRC-32 of every block of its raw bytes."""
    import zlib

    from distgrail.indexfile import CRC_BLOCK

    with h5py.File(built, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(names) >= 8
        for n in names:
            ds = f[n]
            if ds.size:
                assert ds.chunks is None and not ds.fletcher32, n
                block = int(ds.attrs["crc32_block"])
                assert block == CRC_BLOCK
                raw = np.ascontiguousarray(ds[()]).tobytes()
                want = [zlib.crc32(raw[i:i + block]) for i in range(0, len(raw), block)]
                assert ds.attrs["crc32"].dtype == np.uint32 and ds.attrs["crc32"].tolist() == want, n


def _legacy_copy(src, dst):
    """The same index as an earlier release wrote it: fletcher32 on chunks of <= 256 KiB, no crc32."""
    with h5py.File(src, "r") as f, h5py.File(dst, "w", libver=("earliest", "v110")) as g:
        for k, v in f.attrs.items():
            if k not in ("crc32_of_datasets", "blake3_of_attributes"):  # the seals came after the fletcher32 releases
                g.attrs[k] = v

        def copy(name, obj):
            if isinstance(obj, h5py.Dataset):
                a = obj[()]
                ch = None
                if a.size:
                    ax = int(np.argmax(a.shape))
                    rest = a.size // a.shape[ax] * a.dtype.itemsize
                    ch = list(a.shape)
                    ch[ax] = max(1, min(a.shape[ax], (256 << 10) // rest))
                    ch = tuple(ch)
                g.create_dataset(name, data=a, chunks=ch, fletcher32=ch is not None, track_times=False)
        f.visititems(copy)


def test_files_of_earlier_releases_fletcher32_still_open_and_detect_damage(built, tmp_path):
    q = tmp_path / "legacy.h5"
    _legacy_copy(built, q)
    a, b = distgrail.open_index(built), distgrail.open_index(q)
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    np.testing.assert_array_equal(a.query(s, t)[0], b.query(s, t)[0])
    _flip(q, "dag/indices")
    with pytest.raises(IndexFormatError, match="damaged index: dataset /dag/indices cannot be read"):
        distgrail.open_index(q)


@pytest.mark.parametrize("tamper, msg", [
    (lambda ds: ds.attrs.__delitem__("crc32"), "it carries no checksum"),
    (lambda ds: ds.attrs.__setitem__("crc32_block", 0), "attribute crc32_block is 0"),
    (lambda ds: ds.attrs.__setitem__("crc32", ds.attrs["crc32"] ^ np.uint32(1)), "CRC-32 mismatch, block 0 of 1"),
    (lambda ds: ds.attrs.__setitem__("crc32", np.zeros(3, np.uint32)), "3 stored checksums for 1 blocks"),
])
def test_tampered_checksums(built, tmp_path, tamper, msg):
    q = _copy(built, tmp_path)
    with h5py.File(q, "r+") as f:
        tamper(f["labels/intervals"])
    with pytest.raises(IndexFormatError, match=f"damaged index: dataset /labels/intervals cannot be read.*{msg}"):
        distgrail.open_index(q)


def test_multi_block_datasets_detect_a_flip_in_any_block(tmp_path, monkeypatch):
    from distgrail.indexfile import layout

    monkeypatch.setattr(layout, "CRC_BLOCK", 1000)  # many blocks per dataset
    p = tmp_path / "m.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output=p, supports=64)
    with h5py.File(p, "r") as f:
        assert f["dag/indices"].attrs["crc32"].size > 3 and int(f["dag/indices"].attrs["crc32_block"]) == 1000
    distgrail.open_index(p)
    for seed in range(3):
        q = _copy(p, tmp_path, f"m{seed}.h5")
        _flip(q, "dag/indices", count=1, seed=seed)
        with pytest.raises(IndexFormatError, match="dataset /dag/indices cannot be read.*CRC-32 mismatch, block"):
            distgrail.open_index(q)


@pytest.mark.parametrize("dataset", ["labels/intervals", "labels/dt_post0", "dag/indices", "vertex/component"])
def test_flipped_bytes_are_an_error_not_answers(built, tmp_path, dataset):
    q = _copy(built, tmp_path)
    _flip(q, dataset)
    with pytest.raises(IndexFormatError, match=f"damaged index: dataset /{dataset} cannot be read"):
        distgrail.open_index(q)


def test_cli_damaged_index_exit_2(built, tmp_path):
    q = _copy(built, tmp_path)
    _flip(q, "labels/intervals")
    for cmd in (["info", str(q)], ["query", str(q), distgrail.bundled_pairs(), "-o", str(tmp_path / "a.txt")]):
        r = subprocess.run([sys.executable, "-m", "distgrail", *cmd, "--quiet"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert r.returncode == 2, r.stderr
        assert f"{q}: damaged index: dataset /labels/intervals" in r.stderr
        assert "Traceback" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["x.h5"]


@pytest.mark.parametrize("dataset", ["forest/parent", "labels/intervals", "dag/level", "vertex/component"])
def test_missing_dataset(built, tmp_path, dataset):
    q = _copy(built, tmp_path)
    with h5py.File(q, "a") as f:
        del f[dataset]
    with pytest.raises(IndexFormatError, match=f"incomplete index: dataset /{dataset} is missing"):
        distgrail.open_index(q)


@pytest.mark.parametrize("value, msg", [("two", "must be an integer, got 'two'"), (2.0, "must be an integer, got 2.0"),
                                        (None, "attribute 'format_version' is missing")])
def test_bad_format_version_attribute(built, tmp_path, value, msg):
    q = _copy(built, tmp_path)
    with h5py.File(q, "a") as f:
        if value is None:
            del f.attrs["format_version"]
        else:
            f.attrs["format_version"] = value
    with pytest.raises(IndexFormatError, match=msg):
        distgrail.open_index(q)


def test_missing_metadata_attribute(built, tmp_path):
    q = _copy(built, tmp_path)
    with h5py.File(q, "a") as f:
        del f.attrs["n_components"]
    with pytest.raises(IndexFormatError, match="attribute 'n_components' is missing"):
        distgrail.open_index(q)


def _rewrite(path, name, fn):
    """Replace dataset ``name`` by fn(old values) (a consistent, checksummed, but wrong file)."""
    with h5py.File(path, "a") as f:
        data = fn(f[name][()])
        del f[name]
        _put(f, name, data)


def _put(f, name, data):
    """Dataset ``name`` = ``data`` with its checksums, as the writer stores it (the root's seal too)."""
    from distgrail.indexfile import CRC_BLOCK, block_crcs

    ds = f.create_dataset(name, data=data)
    if data.size:
        ds.attrs["crc32_block"] = CRC_BLOCK
        ds.attrs["crc32"] = np.array(block_crcs(np.ascontiguousarray(data), CRC_BLOCK), np.uint32)
    _reseal(f)


def _reseal(f):
    """The root's crc32_of_datasets for the datasets ``f`` holds now, and its blake3_of_attributes,
    as the writer computes them (a tampering that reaches the value checks behind the seals)."""
    from distgrail.indexfile import ATTRS_SEAL, SEAL, datasets_seal, entry
    from distgrail.indexfile.layout import attributes_seal

    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    f.attrs[SEAL] = datasets_seal({n: entry(f[n])[0] for n in names})
    f.attrs[ATTRS_SEAL] = attributes_seal(f.attrs)


@pytest.mark.parametrize("name, fn, msg", [
    ("labels/intervals", lambda a: a[:, :-1], r"/labels/intervals has shape \(3, 3616, 2\), expected \(3, 3617, 2\)"),
    ("labels/intervals", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 7, 60000, a).astype(a.dtype),
     r"/labels/intervals holds 60000 at flat position 7, outside 0..3616"),
    ("labels/intervals", lambda a: a[:, :, ::-1], r"/labels/intervals holds an interval"),
    ("vertex/component", lambda a: (a + 1).astype(a.dtype), r"/vertex/component holds 3617 .* outside 0..3616"),
    ("dag/indices", lambda a: a[::-1], r"/dag/indices holds an edge that does not go down the levels"),
    ("dag/indptr", lambda a: a[::-1], r"/dag/indptr is not a CSR offset array"),
    ("forest/parent", lambda a: a.astype(np.float64), r"/forest/parent has type float64, expected integers"),
    ("labels/dt_post0", lambda a: np.roll(a, 1), r"/labels/(dt_post0|intervals)"),
])
def test_wrong_contents(built, tmp_path, name, fn, msg):
    q = _copy(built, tmp_path)
    _rewrite(q, name, fn)
    with pytest.raises(IndexFormatError, match=msg):
        distgrail.open_index(q)


def test_intervals_nest_along_dag_edges(built, tmp_path):
    q = _copy(built, tmp_path)
    idx = distgrail.open_index(q)
    ip, ix = idx.arrays["dag/indptr"], idx.arrays["dag/indices"]
    u = int(np.flatnonzero(np.diff(ip))[0])  # a component with a DAG successor
    v = int(ix[ip[u]])

    def shrink(a):
        a = a.copy()
        a[1, u, 1] = a[1, v, 1] - 1 if a[1, v, 1] > a[1, u, 0] else a[1, u, 1]
        a[1, u, 0] = a[1, v, 0] + 1 if a[1, v, 0] + 1 <= a[1, u, 1] else a[1, u, 0]
        return a

    _rewrite(q, "labels/intervals", shrink)
    with pytest.raises(IndexFormatError, match="not inside its source's"):
        distgrail.open_index(q)


def test_supports_datasets_optional_and_checked(built, tmp_path):
    q = _copy(built, tmp_path)
    C = distgrail.open_index(built).C
    K = 70
    with h5py.File(q, "a") as f:
        if "supports" in f:  # built with the default K: replace its masks by K = 70
            del f["supports"]
        f.attrs["supports"] = K
        _put(f, "supports/ids", np.arange(K, dtype=np.uint32))
        _put(f, "supports/out", np.zeros((C, 2), np.uint64))
        _put(f, "supports/in", np.zeros((C, 2), np.uint64))
    idx = distgrail.open_index(q)
    assert idx.arrays["supports/out"].shape == (C, 2) and idx.meta["supports"] == K
    with h5py.File(q, "a") as f:
        del f["supports/ids"]
        _put(f, "supports/ids", np.full(K, C, np.uint32))
    with pytest.raises(IndexFormatError, match=r"/supports/ids holds 3617 .* outside 0..3616"):
        distgrail.open_index(q)
    with h5py.File(q, "a") as f:
        del f["supports/ids"], f["supports/in"]
        _put(f, "supports/ids", np.arange(K, dtype=np.uint32))
    with pytest.raises(IndexFormatError, match="dataset /supports/in is missing"):
        distgrail.open_index(q)
    with h5py.File(q, "a") as f:
        _put(f, "supports/in", np.zeros((C, 1), np.uint64))
    with pytest.raises(IndexFormatError, match=r"/supports/in has shape \(3617, 1\) uint64, expected \(3617, 2\)"):
        distgrail.open_index(q)
    with h5py.File(q, "a") as f:  # supports = 0 and no datasets: none
        for k in ("ids", "in", "out"):
            del f[f"supports/{k}"]
        f.attrs["supports"] = 0
        _reseal(f)
    distgrail.open_index(q)


def test_supports_round_trip_through_save(built, tmp_path):
    idx = distgrail.open_index(built)
    K = 3
    idx.meta["supports"] = K
    idx.arrays["supports/ids"] = np.array([0, 5, 9])
    idx.arrays["supports/out"] = np.arange(idx.C, dtype=np.uint64).reshape(-1, 1)
    idx.arrays["supports/in"] = np.ones((idx.C, 1), np.uint64)
    idx.save(tmp_path / "s.h5")
    back = distgrail.open_index(tmp_path / "s.h5")
    np.testing.assert_array_equal(back.arrays["supports/out"], idx.arrays["supports/out"])
    with h5py.File(tmp_path / "s.h5", "r") as f:
        assert f["supports/out"].attrs["crc32"].size == 1 and f.attrs["supports"] == K


def test_version_1_file_still_answers_exactly():
    with h5py.File(V1, "r") as f:
        assert f.attrs["format_version"] == 1 and f["labels/intervals"].chunks is None
    idx = distgrail.open_index(V1)
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    ans = idx.reachable(s, t, backend="cpu")
    assert int(ans.sum()) == distgrail.BUNDLED_REACHABLE
    ip, ix = csr_of(distgrail.read_graph(distgrail.bundled_graph()))
    np.testing.assert_array_equal(ans[:2000], bfs_reachable(ip, ix, s[:2000], t[:2000]))
