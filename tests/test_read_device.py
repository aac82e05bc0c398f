"""An index's large datasets read from the file straight to where the update sweeps them
(distgrail/indexfile/read_device.py): ``open_index(defer=...)`` leaves them in the file, and
``upload_datasets`` reads them piece by piece into the device's memory (on the CPU backend, into
host arrays), checks every block's CRC-32 there and makes every value check of ``open_index``. The
arrays equal ``open_index``'s; a damaged byte, a file cut short and a value out of range are the
same errors; ``insert_rows`` over such an index gives the rows, values and checksums it gives over
the index read whole. A patched index leaves its base in the file with the patch's rows attached,
put over it where it lands (equal arrays, the same errors, the same update rows, the CSR's rows
replaced as the host replaces them). The GPU tests run the same over a Stager and CuPy arrays, and
check_index's value checks over device arrays against the host's, message for message."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import distgrail
from distgrail.errors import IndexFormatError
from distgrail.gpu.backend import get_backend
from distgrail.index import Index
from distgrail.indexfile import read_device
from distgrail.indexfile.read import Deferred, check_index
from distgrail.indexfile.read_device import DEVICE_DATASETS, device_layout, upload_datasets
from distgrail.io.generate import generate
from distgrail.indexfile import patch_base
from distgrail.indexfile.patch_read import patch_rows
from distgrail.update_rows import insert_rows
from distgrail.cli import main

from test_graph_file_crc import _flip as flip_in_place
from test_update import _build

pytest.importorskip("numba")


@pytest.fixture
def base(tmp_path, small_crc_blocks, monkeypatch):
    """(path of a one-file index whose large datasets take the block reader, its graph)."""
    monkeypatch.setattr(read_device._Host, "piece", 4096)  # (several pieces a dataset)
    g = generate("scale-free", 3000, 3, seed=5)
    path = str(tmp_path / "base.h5")
    _build(g.src, g.dst, g.n, supports="auto").save(path)
    return path, g


def _flip(src, dst, name, at):
    """``dst``: ``src`` with one bit of dataset ``name``'s byte ``at`` flipped."""
    shutil.copy(src, dst)
    flip_in_place(dst, name, at)


def _csr_and_rows(seed, C, k):
    """A random CSR of ``C`` rows (0..8 entries each) and ``k`` of its rows written again
    (``(ip, ix, rows, offsets, values)``, host arrays)."""
    r = np.random.default_rng(seed)
    ip = np.concatenate([[0], np.cumsum(r.integers(0, 9, C))]).astype(np.int64)
    ix = r.integers(0, C, int(ip[-1])).astype(np.uint32)
    rows = np.sort(r.choice(C, k, replace=False)).astype(np.int64)
    off = np.concatenate([[0], np.cumsum(r.integers(0, 9, k))]).astype(np.int64)
    return ip, ix, rows, off, r.integers(0, C, int(off[-1])).astype(np.uint32)


def test_the_deferred_datasets_land_equal_to_the_whole_read(base):
    path, _ = base
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    left = {n for n, a in idx.arrays.items() if isinstance(a, Deferred)}
    assert left == set(DEVICE_DATASETS)  # (every one large enough for the block reader here)
    got = upload_datasets(get_backend("cpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    whole = distgrail.open_index(path)
    assert sorted(got) == sorted(DEVICE_DATASETS)
    for n, a in got.items():
        assert a.dtype == whole.arrays[n].dtype and np.array_equal(a, whole.arrays[n]), n


def test_a_damaged_byte_is_the_error_the_whole_read_gives(base, tmp_path):
    path, _ = base
    bad = str(tmp_path / "bad.h5")
    _flip(path, bad, "labels/intervals", 2500)
    with pytest.raises(IndexFormatError) as whole:
        distgrail.open_index(bad)
    idx = distgrail.open_index(bad, defer=DEVICE_DATASETS)  # (the header and small datasets read: fine)
    with pytest.raises(IndexFormatError) as direct:
        upload_datasets(get_backend("cpu"), bad, idx.meta, idx.arrays, DEVICE_DATASETS)
    assert str(direct.value) == str(whole.value)
    assert "labels/intervals" in str(direct.value) and "CRC-32 mismatch, block 2 of" in str(direct.value)


def test_a_file_that_ends_before_a_dataset_is_named(base, tmp_path):
    path, _ = base
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    d = idx.arrays["dag/indptr"]
    short = str(tmp_path / "short.h5")
    with open(path, "rb") as f, open(short, "wb") as g:
        g.write(f.read(d.spans[0][3] + 100))  # (cut inside the offsets' bytes)
    fd = os.open(short, os.O_RDONLY)
    try:
        pieces = read_device._pieces(short, "dag/indptr", d, fd, 64)
        buf = np.empty(64, np.uint8)
        pieces[0][2](buf)  # (the first piece is there)
        with pytest.raises(IndexFormatError, match=r"short\.h5: damaged index: dataset /dag/indptr cannot be read "
                                                   r"\(the file ends before its data: truncated\?\)"):
            pieces[1][2](buf)
    finally:
        os.close(fd)


def test_a_value_out_of_range_is_refused_as_open_index_refuses_it(base, tmp_path):
    path, _ = base
    whole = distgrail.open_index(path)
    arrays = dict(whole.arrays)
    comp = arrays["vertex/component"].copy()
    comp[7] = whole.C  # (one past the last component; its checksums those of the bytes written)
    arrays["vertex/component"] = comp
    bad = str(tmp_path / "bad.h5")
    Index(whole.meta, arrays).save(bad)
    with pytest.raises(IndexFormatError) as host:
        distgrail.open_index(bad)
    idx = distgrail.open_index(bad, defer=DEVICE_DATASETS)
    with pytest.raises(IndexFormatError) as direct:
        upload_datasets(get_backend("cpu"), bad, idx.meta, idx.arrays, DEVICE_DATASETS)
    assert str(direct.value) == str(host.value)
    assert "vertex/component holds" in str(host.value) and "at flat position 7" in str(host.value)


def test_an_update_over_the_deferred_index_gives_the_rows_of_the_whole_one(base):
    path, g = base
    r = np.random.default_rng(11)
    s, t = r.integers(0, g.n, 200), r.integers(0, g.n, 200)
    up1, rep1 = insert_rows(distgrail.open_index(path, defer=DEVICE_DATASETS), s, t, backend="cpu", sweep="arrays")
    up2, rep2 = insert_rows(distgrail.open_index(path), s, t, backend="cpu", sweep="arrays")
    assert rep1.added == rep2.added > 0 and rep1.same_component == rep2.same_component
    assert sorted(up1.rows) == sorted(up2.rows)
    for n in up1.rows:
        assert np.array_equal(up1.rows[n][0], up2.rows[n][0]) and np.array_equal(up1.rows[n][1], up2.rows[n][1]), n
    assert up1.crcs == up2.crcs and up1.crcs
    assert all(np.array_equal(a, b) for a, b in zip(up1.dag, up2.dag))


def test_the_host_paths_refuse_an_index_left_in_its_file_by_name(base):
    from distgrail.errors import QueryError
    from distgrail.update import insert_edges

    path, _ = base
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    for run in (lambda: insert_edges(idx, [0], [1], backend="cpu"),
                lambda: insert_rows(idx, [0], [1], backend="cpu", sweep="walks")):
        with pytest.raises(QueryError, match=r"opened with /dag/indices and 9 more dataset\(s\) left in its file"):
            run()


@pytest.mark.parametrize("which", ["single", "patched"])
def test_a_damaged_dataset_is_refused_when_small_ones_are_read_and_no_edge_joins_components(base, patched, which,
                                                                                          tmp_path, monkeypatch):
    import distgrail.indexfile.layout as layout

    path = base[0] if which == "single" else patched[0]
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 13_000)  # (the components and levels read; the rest left)
    src = path if which == "single" else patch_base(path)  # (a patched index's: its base, a link)
    bad = str(tmp_path / "bad.h5")
    _flip(src, bad, "dag/indices", 500)
    os.replace(bad, src)  # (same seals: only the bytes differ)
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    assert isinstance(idx.arrays["vertex/component"], np.ndarray)
    assert not isinstance(idx.arrays["dag/indices"], np.ndarray)
    with pytest.raises(IndexFormatError, match=r"dataset /dag/indices cannot be read \(checksum error: CRC-32 mismatch"):
        insert_rows(idx, np.arange(9), np.arange(9), backend="cpu", sweep="arrays",  # (edges inside a component)
                    previous=patch_rows(path) if which == "patched" else None)


def test_a_base_csr_that_is_no_offset_array_is_refused_before_its_rows_are_moved(monkeypatch):
    from distgrail.indexfile.patch_read import csr_rows_replaced
    from distgrail.indexfile.read_device import csr_rows_replaced_on

    ix = np.arange(10, dtype=np.uint32)
    for ip in ([0, 5, 3, 10], [1, 5, 6, 10], [0, 5, 6, 9], [0, 5, 6, 11]):
        with pytest.raises(IndexFormatError, match=r"b\.h5: damaged index: dataset /dag/indptr is not a CSR offset "
                                                   r"array 0\.\.10 \(non-decreasing\)"):
            csr_rows_replaced_on(np, np.array(ip, np.int64), ix, np.array([1]), np.array([0, 2]),
                                 np.zeros(2, np.uint32), where="b.h5")
    monkeypatch.setattr(read_device, "CSR_PIECE_ENTRIES", 3)  # (many pieces, rows larger than a piece)
    ip, ix, rows, off, v = _csr_and_rows(8, 300, 40)
    want, got = csr_rows_replaced(ip, ix, rows, off, v), csr_rows_replaced_on(np, ip, ix, rows, off, v)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_file_replaced_after_the_open_or_a_dataset_behind_a_link_is_not_misread(base, tmp_path):
    import h5py

    path, _ = base
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    with pytest.raises(ValueError, match="left in the index file"):
        idx.check_values()
    shutil.copy(path, str(tmp_path / "copy.h5"))
    os.replace(str(tmp_path / "copy.h5"), path)  # (the same bytes, another file)
    with pytest.raises(IndexFormatError, match=r"base\.h5: the index file was replaced after it was opened"):
        upload_datasets(get_backend("cpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    ext = str(tmp_path / "ext.h5")  # the DAG's indices in another file, behind an external link
    with h5py.File(path, "r+") as f, h5py.File(ext, "w") as e:
        e.create_group("dag")
        f.copy(f["dag/indices"], e["dag"], "indices")
        del f["dag/indices"]
        f["dag/indices"] = h5py.ExternalLink("ext.h5", "dag/indices")
    whole = distgrail.open_index(path)
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    assert isinstance(idx.arrays["dag/indices"], np.ndarray)  # (read as HDF5 reads it, not left)
    got = upload_datasets(get_backend("cpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    assert all(np.array_equal(got[n], whole.arrays[n]) for n in got)


def test_only_a_one_file_or_patched_index_is_read_to_the_device(base, tmp_path):
    from distgrail.cli_update import _left_in_file
    from distgrail.cli import build_parser

    path, _ = base
    assert device_layout(path) == "single"
    assert device_layout(str(tmp_path / "none.h5")) is None
    (tmp_path / "t.txt").write_text("0 1\n")
    assert device_layout(str(tmp_path / "t.txt")) is None
    split = str(tmp_path / "split.h5")
    distgrail.open_index(path).save(split, layout="split", parts=2)
    assert device_layout(split) is None
    args = build_parser().parse_args(["update", path, "--add", str(tmp_path / "t.txt"), "--layout", "patch"])
    assert _left_in_file(args, get_backend("cpu")) == ()  # (the CPU's walks change host arrays in place)


@pytest.fixture
def patched(base, tmp_path):
    """(path of an index patched over ``base``'s, its graph, the patch's rows)."""
    path, g = base
    r = np.random.default_rng(1)
    e = tmp_path / "e.txt"
    e.write_text("".join(f"{a} {b}\n" for a, b in zip(r.integers(0, g.n, 200), r.integers(0, g.n, 200))))
    out = str(tmp_path / "p.h5")
    assert main(["update", path, "--add", str(e), "-o", out, "--layout", "patch", "--backend", "cpu", "--quiet"]) == 0
    return out, g, patch_rows(out)


def test_a_patched_index_leaves_its_base_in_the_file_with_its_rows_and_lands_equal(patched, tmp_path):
    path, _, _ = patched
    assert device_layout(path) == "patched"
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    kinds = {n: type(idx.arrays[n]).__name__ for n in DEVICE_DATASETS}
    assert kinds["labels/intervals"] == "PatchedRows" and kinds["dag/indices"] == kinds["dag/indptr"] == "PatchedCSR"
    assert kinds["forest/parent"] == "Deferred"  # (rows no update changes: the base's as they are)
    got = upload_datasets(get_backend("cpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    whole = distgrail.open_index(path)
    for n, a in got.items():
        assert a.dtype == whole.arrays[n].dtype and np.array_equal(a, whole.arrays[n]), n
    base = patch_base(path)  # a damaged byte of the base: the whole read's error
    _flip(base, str(tmp_path / "copy.h5"), "forest/parent", 1500)
    os.replace(str(tmp_path / "copy.h5"), base)
    with pytest.raises(IndexFormatError) as host:
        distgrail.open_index(path)
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    with pytest.raises(IndexFormatError) as direct:
        upload_datasets(get_backend("cpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    assert str(direct.value) == str(host.value) and "forest/parent" in str(host.value)


@pytest.mark.parametrize("kind", ["swept", "unchanged"])
def test_an_update_over_a_deferred_patched_index_gives_the_rows_of_the_whole_one(patched, kind):
    path, g, prev = patched
    r = np.random.default_rng(12)
    s, t = (r.integers(0, g.n, 150), r.integers(0, g.n, 150)) if kind == "swept" else (np.arange(9),) * 2
    up1, rep1 = insert_rows(distgrail.open_index(path, defer=DEVICE_DATASETS), s, t, backend="cpu", sweep="arrays",
                            previous=prev)
    up2, rep2 = insert_rows(distgrail.open_index(path), s, t, backend="cpu", sweep="arrays", previous=prev)
    assert rep1.added == rep2.added and (rep1.added > 0) == (kind == "swept")
    assert sorted(up1.rows) == sorted(up2.rows) and up1.rows
    for n in up1.rows:  # (the earlier patch's rows among them: joined, their values the new ones)
        assert np.array_equal(up1.rows[n][0], up2.rows[n][0]) and np.array_equal(up1.rows[n][1], up2.rows[n][1]), n
        assert up1.rows[n][1].dtype == up2.rows[n][1].dtype and np.isin(prev[n], up1.rows[n][0]).all(), n
    assert all(np.array_equal(a, b) for a, b in zip(up1.dag, up2.dag))
    assert up1.crcs == up2.crcs


def test_the_csr_rows_replaced_where_the_arrays_are_equal_the_hosts():
    from distgrail.indexfile.patch_read import csr_rows_replaced
    from distgrail.indexfile.read_device import csr_rows_replaced_on

    r = np.random.default_rng(3)
    for C, m, k in ((1, 0, 1), (50, 0, 3), (400, 3000, 1), (400, 3000, 37), (400, 3000, 400)):
        ip = np.zeros(C + 1, np.int64)
        ip[1:] = np.sort(r.integers(0, m + 1, C))
        ip[-1] = m
        ix = r.integers(0, C, m).astype(np.uint32)
        rows = np.sort(r.choice(C, k, replace=False)).astype(np.int64)
        off = np.zeros(k + 1, np.int64)
        off[1:] = np.cumsum(r.integers(0, 6, k))
        v = r.integers(0, C, int(off[-1])).astype(np.uint32)
        want = csr_rows_replaced(ip, ix, rows, off, v)
        got = csr_rows_replaced_on(np, ip, ix, rows, off, v)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[1].dtype == want[1].dtype


@pytest.mark.gpu
def test_gpu_the_deferred_datasets_land_on_the_device_equal_and_checked(base, tmp_path):
    import cupy as cp

    path, _ = base
    be = get_backend("gpu")
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    got = upload_datasets(be, path, idx.meta, idx.arrays, DEVICE_DATASETS)
    whole = distgrail.open_index(path)
    for n, a in got.items():
        assert isinstance(a, cp.ndarray) and a.dtype == whole.arrays[n].dtype
        assert np.array_equal(cp.asnumpy(a), whole.arrays[n]), n
    bad = str(tmp_path / "bad.h5")
    _flip(path, bad, "dag/indptr", 3001)
    with pytest.raises(IndexFormatError) as host:
        distgrail.open_index(bad)
    idx = distgrail.open_index(bad, defer=DEVICE_DATASETS)
    with pytest.raises(IndexFormatError) as dev:
        upload_datasets(be, bad, idx.meta, idx.arrays, DEVICE_DATASETS)
    assert str(dev.value) == str(host.value)


@pytest.mark.gpu
def test_gpu_value_checks_over_device_arrays_say_what_the_host_says(base):
    import cupy as cp

    path, _ = base
    whole = distgrail.open_index(path)
    C = whole.C

    def spoil(name, f):
        a = dict(whole.arrays)
        x = a[name].copy()
        f(x)
        a[name] = x
        return a

    cases = [spoil("vertex/component", lambda x: x.__setitem__(3, C)),
             spoil("dag/indptr", lambda x: x.__setitem__(5, x[6] + 1)),
             spoil("labels/intervals", lambda x: x.__setitem__((1, 9, 0), x[1, 9, 1] + 1)),
             spoil("dag/level", lambda x: x.__setitem__(0, x[-1])),
             spoil("forest/subtree_size", lambda x: x.__setitem__(2, 0)),
             spoil("dag/indices", lambda x: x.__setitem__(0, np.searchsorted(whole.arrays["dag/indptr"], 0, "right") - 1))]
    assert whole.arrays["dag/indices"].size <= (1 << 22)  # (the edge checks run: the CSR's rows gathered on the device)
    check_index(path, whole.meta, {n: (cp.asarray(a) if n in DEVICE_DATASETS else a) for n, a in whole.arrays.items()})
    for arrays in cases:
        with pytest.raises(IndexFormatError) as host:
            check_index(path, whole.meta, arrays)
        dev = {n: (cp.asarray(a) if n in DEVICE_DATASETS else a) for n, a in arrays.items()}
        with pytest.raises(IndexFormatError) as gpu:
            check_index(path, whole.meta, dev)
        assert str(gpu.value) == str(host.value)


@pytest.mark.gpu
def test_gpu_stager_fill_writes_every_piece_and_raises_a_pieces_error():
    import cupy as cp

    from distgrail.gpu.dma import Stager

    data = np.random.default_rng(2).integers(0, 255, 10_000_003, dtype=np.uint8)

    def piece(lo, hi):
        return lo, hi, lambda view: np.copyto(view, data[lo:hi])

    with Stager(cp, 0, threads=3, piece=1 << 20) as st:
        (got,) = st.fill([(data.shape, data.dtype, [piece(lo, min(data.size, lo + (1 << 20)))
                                                     for lo in range(0, data.size, 1 << 20)])])
        assert np.array_equal(cp.asnumpy(got), data)

        def fail(view):
            raise IndexFormatError("piece 2 failed")

        with pytest.raises(IndexFormatError, match="piece 2 failed"):
            st.fill([((100,), np.uint8, [(0, 50, lambda v: None), (50, 100, fail)])])
        with pytest.raises(ValueError, match="is not 0"):
            st.fill([((4 << 20,), np.uint8, [(0, 4 << 20, lambda v: None)])])


@pytest.mark.gpu
def test_gpu_a_patched_index_lands_on_the_device_equal_and_its_csr_rows_as_the_hosts(patched):
    import cupy as cp

    from distgrail.indexfile.patch_read import csr_rows_replaced
    from distgrail.indexfile.read_device import csr_rows_replaced_on

    path, _, _ = patched
    idx = distgrail.open_index(path, defer=DEVICE_DATASETS)
    got = upload_datasets(get_backend("gpu"), path, idx.meta, idx.arrays, DEVICE_DATASETS)
    whole = distgrail.open_index(path)
    for n, a in got.items():
        assert isinstance(a, cp.ndarray) and np.array_equal(cp.asnumpy(a), whole.arrays[n]), n
    ip, ix, rows, off, v = _csr_and_rows(4, 5000, 700)
    want = csr_rows_replaced(ip, ix, rows, off, v)
    got = csr_rows_replaced_on(cp, cp.asarray(ip), cp.asarray(ix), rows, off, v)
    assert np.array_equal(cp.asnumpy(got[0]), want[0]) and np.array_equal(cp.asnumpy(got[1]), want[1])
