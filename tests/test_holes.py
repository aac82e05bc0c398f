"""Issue 28: the last holes an adversarial tester found.

1. a checksum rule that a version number could lift, and a seal over every dataset's checksums;
2. HDF5 errors on a damaged header: a damaged-index error (exit 2), never a traceback or another
   answer (a fuzz over every byte of a small index's first 4 KiB);
3. a FIFO as graph, pairs or index: refused before it is opened, never a silent wait;
4. argparse errors in the one-line ``distgrail: error:`` form; a .npy uint64 id said as given;
   ``generate -o x.xyz`` refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.bfs import bfs_reachable, csr_of
from distgrail.cli import main
from distgrail.errors import DistGrailError, GraphFormatError, IndexFormatError
from distgrail.indexfile import SEAL
from conftest import ROOT

ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


def cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def small_graph(n=300, m=900, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, m), rng.integers(0, n, m), n


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small index (a random graph of 300 vertices with cycles), 400 pairs and their BFS answers."""
    d = tmp_path_factory.mktemp("holes")
    src, dst, n = small_graph()
    p = d / "s.h5"
    distgrail.build_index((src, dst), dims=2, backend="cpu", output=p, num_vertices=n)
    rng = np.random.default_rng(1)
    s, t = rng.integers(0, n, 400), rng.integers(0, n, 400)
    ip, ix = csr_of(distgrail.io.graph.from_arrays(src, dst, n, "<arrays>"))
    want = bfs_reachable(ip, ix, s, t)
    np.testing.assert_array_equal(distgrail.open_index(p).reachable(s, t, backend="cpu"), want)
    pairs = d / "pairs.txt"
    pairs.write_text("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    return p, s, t, want, pairs


def _copy(src, tmp_path, name="x.h5"):
    q = tmp_path / name
    shutil.copy(src, q)
    return q


def _swap_two_components(a):
    """vertex/component with two vertices of different components swapped: every value stays in
    range and every component keeps a vertex, but the answers of those two vertices change."""
    a = a.copy()
    i = 0
    j = int(np.flatnonzero(a != a[i])[0])
    a[i], a[j] = a[j], a[i]
    return a, i, j


# -- 1. checksums: no version number lifts them; the root's seal -------------------------------

def test_version_1_with_a_checksum_deleted_and_data_edited_is_refused(small, tmp_path):
    p, s, t, want, pairs = small
    q = _copy(p, tmp_path)
    with h5py.File(q, "r+") as f:
        f.attrs["format_version"] = 1
        del f.attrs["blake3_of_attributes"]  # (which came after the first releases)
        ds = f["vertex/component"]
        del ds.attrs["crc32"]
        edited, i, j = _swap_two_components(ds[()])
        ds[...] = edited
    idx = distgrail.open_index(p)  # the edit matters: the same index with it answers differently
    tampered = distgrail.index.Index(dict(idx.meta), {**idx.arrays, "vertex/component": edited})
    s2, t2 = np.repeat([i, j], 300), np.tile(np.arange(300), 2)
    assert not np.array_equal(tampered.reachable(s2, t2, backend="cpu"), idx.reachable(s2, t2, backend="cpu"))
    with pytest.raises(IndexFormatError, match="damaged index: dataset /vertex/component cannot be read "
                                               r"\(checksum error: it carries no checksum\)"):
        distgrail.open_index(q)
    r = cli("query", q, pairs, "-o", tmp_path / "a.txt", "--backend", "cpu", "--quiet")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"distgrail: error: {q}: damaged index: dataset /vertex/component" in r.stderr
    assert not (tmp_path / "a.txt").exists()


def test_every_checksum_deleted_under_version_1_is_still_refused(small, tmp_path):
    """Only a file that is a first-release file in every respect is read without checksums."""
    q = _copy(small[0], tmp_path)
    with h5py.File(q, "r+") as f:
        f.attrs["format_version"] = 1
        del f.attrs["blake3_of_attributes"]  # (which came after the first releases)
        f.visititems(lambda n, o: [o.attrs.__delitem__(k) for k in ("crc32", "crc32_block") if k in o.attrs]
                     if isinstance(o, h5py.Dataset) else None)
    with pytest.raises(IndexFormatError, match="it carries no checksum"):
        distgrail.open_index(q)


def test_the_written_seal_covers_every_dataset(small):
    from distgrail.indexfile import datasets_seal, entry

    with h5py.File(small[0], "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(names) >= 8
        stored = f.attrs[SEAL]
        assert stored == datasets_seal({n: entry(f[n])[0] for n in names}).encode()
        assert stored != datasets_seal({n: entry(f[n])[0] for n in names[1:]}).encode()


def test_deleting_one_datasets_checksum_attributes_is_refused(small, tmp_path):
    q = _copy(small[0], tmp_path)
    with h5py.File(q, "r+") as f:
        for k in list(f["labels/dt_post0"].attrs):
            del f["labels/dt_post0"].attrs[k]
    with pytest.raises(IndexFormatError, match="dataset /labels/dt_post0 cannot be read .*no checksum"):
        distgrail.open_index(q)


def test_a_dataset_replaced_by_a_fletcher32_one_breaks_the_seal(small, tmp_path):
    """A fletcher32 dataset passes the per-dataset rule (files of earlier releases have them), so
    only the seal sees that it replaced a checksummed one with other values."""
    p, s, t, want, pairs = small
    q = _copy(p, tmp_path)
    with h5py.File(q, "r+") as f:
        edited, _, _ = _swap_two_components(f["vertex/component"][()])
        del f["vertex/component"]
        f.create_dataset("vertex/component", data=edited, chunks=edited.shape, fletcher32=True)
    with pytest.raises(IndexFormatError, match=f"damaged index: .*root attribute '{SEAL}'.*removed, added or replaced"):
        distgrail.open_index(q)
    with h5py.File(q, "r+") as f:  # the datasets' seal gone alone: the attributes' seal sees it
        del f.attrs[SEAL]
    with pytest.raises(IndexFormatError, match="damaged index: its root attributes"):
        distgrail.open_index(q)
    with h5py.File(q, "r+") as f:  # the same file as a release before the seals wrote it: opens
        del f.attrs["blake3_of_attributes"]
    assert distgrail.open_index(q).n == 300


@pytest.mark.parametrize("attr", ["source_digest", "source_name", "source_digest_algorithm", "parent_rule", "seed",
                                  "distgrail_version"])
def test_a_flipped_byte_in_a_root_attribute_is_refused(small, tmp_path, attr):
    """No dataset checksum covers the root attributes: a flipped byte in the input's digest or
    name, the parent rule or the seed was accepted by info, query, convert and update (which wrote
    it on into a file that then counted as valid; a fuzzing reviewer, session 41). One bit of the
    value flipped, its type kept (what HDF5 reads back from a flipped byte); every command refuses
    it, exit 2."""
    from distgrail.indexfile import ATTRS_SEAL

    _, s, t, want, pairs = small
    src, dst, n = small_graph()  # (indexed from a file: the input's name and digest are there)
    graph = tmp_path / "g.txt"
    graph.write_text("".join(f"{a} {b}\n" for a, b in zip(src.tolist(), dst.tolist())))
    q = tmp_path / "x.h5"
    assert cli("index", graph, "-o", q, "--num-vertices", n, "--backend", "cpu", "--quiet").returncode == 0
    from distgrail.io.h5attrs import put_attr

    with h5py.File(q, "r+") as f:
        value = f.attrs[attr]
        if isinstance(value, bytes):  # (a fixed-length UTF-8 string: one character's bit)
            text = value.decode()
            k = len(text) // 2
            put_attr(f, attr, text[:k] + chr(ord(text[k]) ^ 1) + text[k + 1:])
        else:
            f.attrs.modify(attr, value ^ 1)
        assert f.attrs[attr] != value
    with pytest.raises(IndexFormatError, match=f"damaged index: its root attributes .*'{ATTRS_SEAL}'"):
        distgrail.open_index(q)
    for args in (("info", q), ("query", q, pairs, "--backend", "cpu"), ("update", q, "--add", pairs, "-o",
                                                                        tmp_path / "u.h5", "--backend", "cpu")):
        r = cli(*args, "--quiet")
        assert r.returncode == 2 and "damaged index: its root attributes" in r.stderr, (args[0], r.stderr)
    assert not (tmp_path / "u.h5").exists()
    with h5py.File(q, "r+") as f:  # the same file as a release before this seal wrote it: opens
        del f.attrs[ATTRS_SEAL]
    assert distgrail.open_index(q).n == 300


def test_an_updated_index_carries_its_attributes_seal(small, tmp_path):
    from distgrail.indexfile import ATTRS_SEAL
    from distgrail.indexfile.layout import attributes_seal

    p, s, t, want, pairs = small
    out = tmp_path / "u.h5"
    (tmp_path / "e.txt").write_text("0 5\n7 3\n")
    assert cli("update", p, "--add", tmp_path / "e.txt", "-o", out, "--backend", "cpu", "--quiet").returncode == 0
    with h5py.File(out, "r") as f:
        assert f.attrs[ATTRS_SEAL].decode() == attributes_seal(f.attrs)
    assert distgrail.open_index(out).n == 300


def test_an_optional_dataset_removed_or_the_seal_edited_is_refused(tmp_path):
    p = tmp_path / "lab.h5"
    distgrail.build_index({"a": ["b"], "b": ["c"], "d": ["a"]}, dims=2, backend="cpu", output=p)
    assert distgrail.open_index(p).reachable("d", "c")
    q = _copy(p, tmp_path)
    with h5py.File(q, "r+") as f:
        assert "vertex/label_utf8" in f
        del f["vertex/label_utf8"], f["vertex/label_offsets"]
    with pytest.raises(IndexFormatError, match=f"root attribute '{SEAL}'"):
        distgrail.open_index(q)
    q = _copy(p, tmp_path, "y.h5")
    with h5py.File(q, "r+") as f:
        f.attrs[SEAL] = "blake3:" + "0" * 64
    with pytest.raises(IndexFormatError, match=f"root attribute '{SEAL}'"):
        distgrail.open_index(q)


# -- 2. HDF5 errors: a damaged index, exit 2; the header fuzz ----------------------------------

HEADER_BYTES = 4096


def _flip_at(raw: bytes, off: int) -> bytes:
    b = bytearray(raw)
    b[off] ^= 0xFF
    return bytes(b)


def test_every_byte_of_the_header_flipped_is_refused_or_answers_the_same(small, tmp_path):
    """Each of the first 4 KiB flipped (xor 0xFF) in turn, opened and queried in this process:
    a DistGrailError (the CLI's exit status 2) or exactly the undamaged answers, nothing else."""
    p, s, t, want, pairs = small
    raw = p.read_bytes()
    q = tmp_path / "d.h5"
    outcomes, hdf5_errors = {"refused": 0, "same": 0}, []
    for off in range(min(HEADER_BYTES, len(raw))):
        q.write_bytes(_flip_at(raw, off))
        try:
            got = distgrail.open_index(q).reachable(s, t, backend="cpu")
        except DistGrailError as e:
            assert isinstance(e, IndexFormatError), (off, repr(e))
            assert str(e).startswith(f"{q}: "), (off, str(e))
            outcomes["refused"] += 1
            if "(HDF5: " in str(e):
                hdf5_errors.append(off)
            continue
        except Exception as e:  # noqa: BLE001 - the point: nothing but the damaged-index error
            pytest.fail(f"byte {off} flipped: {type(e).__name__}: {e}")
        assert np.array_equal(got, want), f"byte {off} flipped: different answers"
        outcomes["same"] += 1
    assert outcomes["refused"] > 100 and hdf5_errors, outcomes  # the fuzz did reach HDF5's errors
    test_every_byte_of_the_header_flipped_is_refused_or_answers_the_same.hdf5_offset = hdf5_errors[0]


def _hdf5_error_copy(small, tmp_path):
    """A copy of the small index with one header byte flipped that makes HDF5 itself fail."""
    p = small[0]
    raw = p.read_bytes()
    q = tmp_path / "hdr.h5"
    for off in range(HEADER_BYTES):
        q.write_bytes(_flip_at(raw, off))
        try:
            distgrail.open_index(q)
        except IndexFormatError as e:
            if "(HDF5: " in str(e):
                return q, str(e)
    pytest.fail("no header byte made HDF5 fail")


def test_damaged_header_on_the_command_line_is_exit_2_without_traceback(small, tmp_path):
    q, message = _hdf5_error_copy(small, tmp_path)
    r = cli("query", q, small[4], "-o", tmp_path / "a.txt", "--backend", "cpu", "--quiet")
    assert r.returncode == 2, r.stderr
    assert r.stderr == f"distgrail: error: {message}\n"
    assert "Traceback" not in r.stderr and "RuntimeError" not in r.stderr and "KeyError" not in r.stderr
    assert not (tmp_path / "a.txt").exists()


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
def test_damaged_header_under_mpiexec_is_one_message_without_exception_names(small, tmp_path):
    q, message = _hdf5_error_copy(small, tmp_path)
    env = {k: v for k, v in ENV.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env["MPIEXEC_TIMEOUT"] = "90"
    r = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-m", "distgrail", "query", str(q),
                        str(small[4]), "-o", str(tmp_path / "a.txt"), "--backend", "cpu", "--quiet"],
                       capture_output=True, text=True, env=env, timeout=150)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("distgrail: error:") == 1, r.stderr
    assert f"distgrail: error: rank 0 (and on rank 1), opening the index {q}: {message}" in r.stderr, r.stderr
    for word in ("RuntimeError:", "KeyError:", "OSError:", "Traceback", "MPI_Abort"):
        assert word not in r.stderr + r.stdout, r.stderr
    assert not (tmp_path / "a.txt").exists()


def test_string_attributes_are_fixed_length(small):
    """Variable-length strings live in a global heap whose damage crashes or hangs HDF5's reader
    (found by the fuzz above): the writer stores fixed-length UTF-8 strings."""
    with h5py.File(small[0], "r") as f:
        for k in f.attrs:
            tid = f.attrs.get_id(k).get_type()
            if tid.get_class() == h5py.h5t.STRING:
                assert not tid.is_variable_str(), k
        assert f.attrs["format"] == b"distgrail-index"
    assert b"GCOL" not in small[0].read_bytes()


# -- 3. FIFOs: refused before they are opened --------------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "g.fifo"
    os.mkfifo(path)
    return path


def test_fifo_as_the_graph_is_refused_not_waited_on(fifo, tmp_path):
    r = cli("index", fifo, "-o", tmp_path / "o.h5", "--backend", "cpu", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"distgrail: error: {fifo}: is a FIFO (named pipe), not a regular file; distgrail reads "
                        "graphs from regular files only (save the data to a file first)\n")
    assert sorted(os.listdir(tmp_path)) == ["g.fifo"]


def test_fifo_as_the_pairs_or_the_index_is_refused(fifo, small, tmp_path):
    r = cli("query", small[0], fifo, "-o", tmp_path / "a.txt", "--backend", "cpu", timeout=60)
    assert r.returncode == 2 and f"distgrail: error: {fifo}: is a FIFO (named pipe), not a regular file" in r.stderr
    r = cli("query", fifo, small[4], "-o", tmp_path / "a.txt", "--backend", "cpu", timeout=60)
    assert r.returncode == 2 and f"distgrail: error: {fifo}: is a FIFO (named pipe), not a regular file" in r.stderr
    r = cli("info", fifo, timeout=60)
    assert r.returncode == 2 and f"{fifo}: is a FIFO (named pipe)" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["g.fifo"]


def test_a_character_device_is_refused_by_every_reader():
    from distgrail.io.pairs import read_pairs

    for call in (lambda: distgrail.read_graph("/dev/null"), lambda: read_pairs("/dev/null")):
        with pytest.raises(GraphFormatError, match="/dev/null: is a character device, not a regular file"):
            call()
    with pytest.raises(IndexFormatError, match="/dev/null: is a character device"):
        distgrail.open_index("/dev/null")


# -- 4. the smaller ones -----------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["index", "g.gra", "-o", "o.h5", "--dims", "abc"], "argument --dims: invalid int value: 'abc'"),
    (["index", "g.gra", "-o", "o.h5", "--supports", "many"],
     "argument --supports: expected an integer >= 0 or 'auto', got 'many'"),
    (["query", "i.h5", "p.txt", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
    (["generate", "paper", "-n", "x", "-o", "g.gra"], "argument -n: invalid int value: 'x'"),
    ([], "the following arguments are required: command"),
])
def test_argument_errors_follow_the_one_line_contract(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"distgrail: error: {message}") and err.count("\n") == 1, err
    assert "usage:" not in err


def test_uint64_pair_ids_are_reported_as_given(small, tmp_path):
    from distgrail.io.pairs import read_pairs

    path = tmp_path / "p.npy"
    np.save(path, np.array([[0, 1], [2, 2**64 - 1]], dtype=np.uint64))
    with pytest.raises(GraphFormatError, match=r"targets\[1\] out of range .*got 18446744073709551615$"):
        read_pairs(path)
    r = cli("query", small[0], path, "--backend", "cpu")
    assert r.returncode == 2 and "got 18446744073709551615" in r.stderr and "got -1" not in r.stderr
    np.save(path, np.array([[0, 1], [2, 2**63 - 1]], dtype=np.uint64))  # fits int64: read as it is
    assert read_pairs(path)[1].tolist() == [1, 2**63 - 1]


def test_generate_refuses_an_unknown_extension(tmp_path, capsys):
    out = tmp_path / "x.xyz"
    assert main(["generate", "paper", "-n", "50", "-o", str(out), "--quiet"]) == 2
    assert f"distgrail: error: {out}: unknown extension '.xyz'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
