"""Index and graph files (session 34): a split write asked for more parts than rows writes no part
of nothing; two writers of one output at once (one's orphan removal between the other's parts and
its main file) leave a whole index; the graph file's string attributes are fixed-length (no HDF5
global heap, whose damage could hang the reader); a split index's main file damaged so that HDF5
dies opening it is a named damaged-index error, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from distgrail.indexfile.layout import index_parts
from distgrail.indexfile.split import write_split_index
from distgrail.io.read import as_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _small():
    """A 5-vertex graph's index (3 components: at most 5 rows in any dataset of its parts)."""
    g = as_graph((np.array([0, 1, 2, 3]), np.array([1, 2, 0, 4])))
    return distgrail.build_index(g, dims=2, backend="cpu")


def _rows(idx) -> int:
    from distgrail.indexfile.split import SPLIT

    return max(np.shape(a)[0] for k, a in idx.arrays.items() if k in SPLIT and np.size(a))


# -- parts above the rows -------------------------------------------------------------------------

@pytest.mark.parametrize("asked", [3, 50])
def test_parts_above_the_rows_are_capped_with_no_part_of_nothing(tmp_path, asked):
    idx = _small()
    rows = _rows(idx)
    assert 3 <= rows < 50
    single, split, back = (str(tmp_path / x) for x in ("single.h5", "split.h5", "back.h5"))
    idx.save(single)
    got = write_split_index(split, idx.meta, idx.arrays, parts=asked)
    assert got == min(asked, rows)  # (the count written, for the caller to report)
    parts = index_parts(split)
    assert len(parts) == got
    assert sorted(os.listdir(tmp_path)) == sorted(["single.h5", "split.h5", *(os.path.basename(p) for p in parts)])
    for p in parts:  # every part holds rows
        with h5py.File(p, "r") as f:
            held = []
            f.visititems(lambda k, o: held.append(k) if isinstance(o, h5py.Dataset) and o.size else None)
        assert held, p
    opened = distgrail.open_index(split)
    assert opened.meta["parts"] == got
    opened.save(back)
    with open(back, "rb") as a, open(single, "rb") as b:  # the single file's content, byte for byte
        assert a.read() == b.read()


def test_cli_convert_and_update_with_parts_above_the_rows(tmp_path):
    idx = _small()
    rows = _rows(idx)
    single = str(tmp_path / "single.h5")
    idx.save(single)
    split = str(tmp_path / "split.h5")
    assert main(["convert", single, "--layout", "split", "--parts", "40", "-o", split, "--quiet"]) == 0
    assert len(index_parts(split)) == rows
    assert len([n for n in os.listdir(tmp_path) if ".part" in n]) == rows
    edges = tmp_path / "add.txt"
    edges.write_text("4 0\n")
    up = str(tmp_path / "up.h5")
    assert main(["update", single, "--add", str(edges), "--layout", "split", "--parts", "40", "-o", up,
                 "--quiet", "--backend", "cpu"]) == 0
    assert len(index_parts(up)) == rows
    assert len([n for n in os.listdir(tmp_path) if n.startswith("up.h5.")]) == rows
    assert distgrail.open_index(up).reachable(np.array([4]), np.array([1])).tolist() == [True]


# -- two writers of one output --------------------------------------------------------------------

def _answers_match(path, idx) -> bool:
    n = idx.n
    s, t = np.arange(n), np.arange(n)[::-1]
    return bool(np.array_equal(distgrail.open_index(path).reachable(s, t), idx.reachable(s, t)))


def _racing(monkeypatch, other):
    """Split writes whose ``other()`` runs between their parts' rename and their main file."""
    from distgrail.indexfile import write

    real = write.write_index_file

    def hooked(path, *a, **k):
        if k.get("settles"):  # the main file of a split write: every part renamed into place
            assert all(os.path.isfile(p) for p in k["settles"])
            other(path)
        return real(path, *a, **k)

    monkeypatch.setattr(write, "write_index_file", hooked)


def test_orphan_removal_between_a_split_writes_parts_and_main_file_keeps_its_parts(tmp_path, monkeypatch):
    from distgrail.indexfile.write import remove_orphans

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    path = str(tmp_path / "idx.h5")
    removed = []
    _racing(monkeypatch, lambda p: removed.extend(remove_orphans(p)))
    assert write_split_index(path, idx.meta, idx.arrays, parts=3) == 3
    assert removed == []
    parts = index_parts(path)
    assert len(parts) == 3 and all(os.path.isfile(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == sorted(["idx.h5", *(os.path.basename(p) for p in parts)])  # no marker
    assert _answers_match(path, idx)


def test_another_process_writing_the_output_meanwhile_leaves_a_whole_index(tmp_path, monkeypatch):
    """Writer B (another process) writes the same output, one file, while writer A's parts are in
    place and its main file not begun: B's orphan removal once its index landed took A's parts,
    then A's main file replaced B's, both said done, and the index was broken (its parts gone)."""
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    path = str(tmp_path / "idx.h5")

    def other(p):
        r = subprocess.run([sys.executable, "-m", "distgrail", "index", distgrail.bundled_graph(), "-o", p,
                            "--backend", "cpu", "--dims", "2", "--quiet"], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "PYTHONPATH": ROOT})
        assert r.returncode == 0, r.stderr

    _racing(monkeypatch, other)
    write_split_index(path, idx.meta, idx.arrays, parts=3)
    parts = index_parts(path)
    assert len(parts) == 3 and all(os.path.isfile(p) for p in parts)
    assert sorted(os.listdir(tmp_path)) == sorted(["idx.h5", *(os.path.basename(p) for p in parts)])
    assert _answers_match(path, idx)


@pytest.mark.parametrize("writer", ["running", "dead"])
def test_a_marker_keeps_its_builds_parts_while_its_process_runs(tmp_path, writer):
    """Parts in place with no main file, and the marker of their write: kept by the next index
    written there while that process runs; once it no longer runs, they go, and the marker too."""
    from distgrail.indexfile.layout import pending_name, split_build

    idx = _small()
    path = str(tmp_path / "idx.h5")
    write_split_index(path, idx.meta, idx.arrays, parts=2)
    build, parts = split_build(path), index_parts(path)
    os.remove(path)  # (as if its main file were not written yet)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        if writer == "dead":
            proc.kill()
            proc.wait()
        marker = pending_name(path, build, proc.pid)
        open(marker, "w").close()
        idx.save(path)
        left = sorted(os.listdir(tmp_path))
    finally:
        proc.kill()
        proc.wait()
    if writer == "running":
        assert left == sorted(["idx.h5", os.path.basename(marker), *(os.path.basename(p) for p in parts)])
    else:
        assert left == ["idx.h5"]


# -- no variable-length string attribute ----------------------------------------------------------

def _vlen_attrs(path) -> list:
    """``[(object, attribute)]`` of the file's variable-length string attributes (any object)."""
    out = []

    def look(name, obj):
        for a in obj.attrs:
            dt = obj.attrs.get_id(a).dtype
            info = h5py.check_string_dtype(dt)
            if (info is not None and info.length is None) or h5py.check_vlen_dtype(dt) is not None:
                out.append((name, a))

    with h5py.File(path, "r") as f:
        look("/", f)
        f.visititems(look)
    return out


def test_graph_and_index_files_keep_no_variable_length_string(tmp_path):
    graph, plain, split = (str(tmp_path / x) for x in ("g.h5", "i.h5", "s.h5"))
    assert main(["convert", distgrail.bundled_graph(), "-o", graph, "--quiet", "--backend", "cpu"]) == 0
    assert main(["index", graph, "-o", plain, "--quiet", "--backend", "cpu"]) == 0
    idx = distgrail.open_index(plain)
    write_split_index(split, idx.meta, idx.arrays, parts=2)
    with h5py.File(graph, "r") as f:
        assert "condensation" in f and f.attrs["source_name"] == os.path.basename(distgrail.bundled_graph()).encode()
        strings = [a for a in f.attrs if h5py.check_string_dtype(f.attrs.get_id(a).dtype) is not None]
        assert {"format", "distgrail_version", "source_name", "source_digest", "source_digest_algorithm"} <= set(strings)
    for p in (graph, plain, split, *index_parts(split)):
        assert _vlen_attrs(p) == [], p
    g = distgrail.read_graph(graph)  # read back: names and digests as text
    assert g.name == os.path.basename(distgrail.bundled_graph()) and g.digest.startswith("blake3:")
    assert g.digest == distgrail.read_graph(distgrail.bundled_graph()).digest
    assert idx.meta["source_name"] == g.name

    # a graph file as earlier releases wrote it (h5py's default: variable-length strings) still reads
    with h5py.File(graph, "r+") as f:
        for a in ("format", "distgrail_version", "source_name", "source_digest", "source_digest_algorithm"):
            v = f.attrs[a]
            del f.attrs[a]
            f.attrs[a] = v.decode() if isinstance(v, bytes) else v
    assert len(_vlen_attrs(graph)) == 5
    assert (distgrail.read_graph(graph).name, distgrail.read_graph(graph).digest) == (g.name, g.digest)
    assert main(["index", graph, "-o", plain, "--quiet", "--backend", "cpu"]) == 0
    assert distgrail.open_index(plain).meta["source_name"] == g.name


def test_a_source_file_name_of_undecodable_bytes_is_written(tmp_path):
    """A graph named with bytes that are no UTF-8 (Python's surrogates): its index and graph file
    are written (a UnicodeEncodeError traceback before), the name's bad byte as U+FFFD."""
    src = os.path.join(os.fsencode(str(tmp_path)), b"g\xff.txt")
    with open(src, "wb") as f:
        f.write(b"0 1\n1 2\n")
    name = os.fsdecode(src)
    index, graph = str(tmp_path / "i.h5"), str(tmp_path / "g.h5")
    assert main(["index", name, "-o", index, "--quiet", "--backend", "cpu"]) == 0
    assert main(["convert", name, "-o", graph, "--quiet"]) == 0
    assert distgrail.open_index(index).meta["source_name"] == "g\ufffd.txt"
    assert distgrail.read_graph(graph).name == "g\ufffd.txt"
    assert main(["index", graph, "-o", index, "--quiet", "--backend", "cpu"]) == 0


# -- a split index's main file that HDF5 dies in --------------------------------------------------

def _flipped_main(tmp_path, at: int, bit: int) -> str:
    """The bundled graph's index split in 2, its main file with bit ``bit`` of the byte ``at``
    bytes into its global heap (the virtual datasets' mappings) flipped."""
    path = str(tmp_path / "s.h5")
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    write_split_index(path, idx.meta, idx.arrays, parts=2)
    data = bytearray(open(path, "rb").read())
    heap = data.find(b"GCOL")
    assert heap > 0 and data.find(b"GCOL", heap + 1) < 0  # (one heap: the mappings, no string attribute)
    data[heap + at] ^= 1 << bit
    open(path, "wb").write(data)
    return path


def _cli(*args, seconds=None):
    code = "import sys\nfrom distgrail.indexfile import probe\n"
    if seconds is not None:
        code += f"probe.PROBE_SECONDS = {seconds}\n"
    code += "from distgrail.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_a_main_file_whose_mappings_crash_hdf5_is_a_damaged_index(tmp_path):
    """The first mapping's entry count (heap header 16 bytes, object header 16, version 1: its
    top byte) made 2^59 larger: HDF5 2.0 read past its buffer opening the dataset (SIGSEGV, exit
    139 from info, query and convert); now exit 2 naming the file, nothing written."""
    path = _flipped_main(tmp_path, 40, 3)
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 1\n")
    for args in (["info", path], ["query", path, str(pairs), "-o", str(tmp_path / "a.txt")],
                 ["convert", path, "--layout", "single", "-o", str(tmp_path / "c.h5")]):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.returncode, r.stderr[-2000:])
        assert f"{path}: damaged index" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "a.txt") and not os.path.exists(tmp_path / "c.h5")


def test_a_main_file_whose_mappings_hang_hdf5_is_a_damaged_index(tmp_path):
    """The heap's collection size one bit larger: HDF5 2.0 loops for good opening the dataset; the
    probe gives up after its time (made short here) and says so."""
    path = _flipped_main(tmp_path, 9, 0)
    r = _cli("info", path, seconds=2)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{path}: damaged index: HDF5 did not finish in 2 s" in r.stderr


def test_the_probe_tells_a_crash_a_hang_and_a_refusal(tmp_path, monkeypatch):
    from distgrail.errors import IndexFormatError
    from distgrail.indexfile import probe

    idx = _small()
    split, single = str(tmp_path / "s.h5"), str(tmp_path / "one.h5")
    write_split_index(split, idx.meta, idx.arrays, parts=2)
    idx.save(single)
    real, seconds = probe._PROBE, probe.PROBE_SECONDS
    for body, why in (("import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)", "crashed (SIGSEGV)"),
                      ("import time\n    time.sleep(60)", "did not finish in 0.5 s")):
        monkeypatch.setattr(probe, "_PROBE", real.replace("    import h5py", "    " + body + "\n    import h5py"))
        monkeypatch.setattr(probe, "PROBE_SECONDS", 0.5)
        probe._probed.cache_clear()
        for read in (distgrail.open_index, index_parts):
            with pytest.raises(IndexFormatError) as e:
                read(split)
            assert f"s.h5: damaged index: HDF5 {why} opening" in str(e.value)
        assert distgrail.open_index(single).n == idx.n  # (one file: no probe)
    monkeypatch.setattr(probe, "_PROBE", real.replace("    import h5py", "    raise OSError('refused')\n    import h5py"))
    monkeypatch.setattr(probe, "PROBE_SECONDS", seconds)  # (0.5 s was the hang's: a busy machine's probe may take longer)
    probe._probed.cache_clear()
    assert probe.check_main_file(split) is None  # (an error HDF5 reports: the real open names it)
    # a forked child's death alone (a lock of another thread's, say) is not taken for damage
    monkeypatch.setattr(probe, "_PROBE", real)
    monkeypatch.setattr(probe, "_forked_probe", lambda p: "crashed (SIGSEGV)")
    probe._probed.cache_clear()
    assert distgrail.open_index(split).n == idx.n
    probe._probed.cache_clear()


@pytest.mark.parametrize("interpreter,says", [("/nonexistent/python", "could not start /nonexistent/python"),
                                              ("/bin/false", "/bin/false exited with status 1")])
def test_a_probe_that_cannot_run_fails_closed(tmp_path, monkeypatch, interpreter, says):
    """A fresh interpreter that cannot start (no process left, no memory) or exits otherwise let
    the main file through unchecked, and HDF5 then looped for ever on a damaged one (a fuzzing
    reviewer, session 41): the open is refused, saying the check could not run, and tried again
    the next time; the probe's own refusal (HDF5's error: exit 3) still lets the real open name it."""
    from distgrail.errors import IndexFormatError
    from distgrail.indexfile import probe

    idx = _small()
    split = str(tmp_path / "s.h5")
    write_split_index(split, idx.meta, idx.arrays, parts=2)
    monkeypatch.setattr(probe, "_may_fork", lambda: False)
    monkeypatch.setattr(sys, "executable", interpreter)
    probe._probed.cache_clear()
    with pytest.raises(IndexFormatError) as e:
        distgrail.open_index(split)
    assert "s.h5: the split index's main file could not be checked in another process" in str(e.value)
    assert says in str(e.value)
    monkeypatch.undo()
    monkeypatch.setattr(probe, "_may_fork", lambda: False)
    assert distgrail.open_index(split).n == idx.n  # (the failed check was not kept)
    monkeypatch.setattr(probe, "_PROBE", probe._PROBE.replace("    import h5py", "    raise OSError('no')\n    import h5py"))
    probe._probed.cache_clear()
    assert probe.check_main_file(split) is None
    for failure in ("MemoryError()", "ImportError('no h5py')"):  # (the probe did not run: not HDF5's refusal)
        monkeypatch.setattr(probe, "_PROBE", probe._PROBE.replace("raise OSError('no')", f"raise {failure}"))
        probe._probed.cache_clear()
        with pytest.raises(IndexFormatError, match="could not be checked in another process .*exited with status 1"):
            distgrail.open_index(split)
        monkeypatch.setattr(probe, "_PROBE", probe._PROBE.replace(f"raise {failure}", "raise OSError('no')"))
    probe._probed.cache_clear()


def test_convert_and_update_report_the_parts_written_not_asked(tmp_path):
    """``--parts`` above the rows is capped (no empty part file): ``convert`` and ``update`` say how
    many were written, in their JSON and their line."""
    import json
    import subprocess
    import sys

    import numpy as np

    import distgrail

    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 3\n3 4\n")
    idx = tmp_path / "i.h5"
    distgrail.build_index(str(g), dims=2, backend="cpu", output=str(idx))
    out = tmp_path / "s.h5"
    r = subprocess.run([sys.executable, "-m", "distgrail", "convert", str(idx), "--layout", "split", "--parts", "50",
                        "-o", str(out), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    written = json.loads(r.stdout)["parts"]
    assert 1 <= written < 50 and len(distgrail.indexfile.layout.index_parts(str(out))) == written
    add = tmp_path / "e.txt"
    add.write_text("4 0\n")
    new = tmp_path / "n.h5"
    r = subprocess.run([sys.executable, "-m", "distgrail", "update", str(idx), "--add", str(add), "-o", str(new),
                        "--layout", "split", "--parts", "50", "--backend", "cpu", "--json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)["parts"]
    assert 1 <= got < 50 and len(distgrail.indexfile.layout.index_parts(str(new))) == got
    ans, _ = distgrail.open_index(str(new)).query(np.array([4, 0]), np.array([0, 4]), backend="cpu")
    assert ans.tolist() == [True, True]


def test_the_probe_forks_only_alone_and_falls_back_to_a_fresh_interpreter(tmp_path, monkeypatch):
    """Beside another thread (which could hold a lock the fork's hooks take, or be inside HDF5: a
    deadlock found by review), with MPI or CuPy loaded, or when the fork fails (no memory for a
    copy of a large process), the probe runs in a fresh interpreter: the open goes on."""
    import threading

    from distgrail.indexfile import probe

    idx = _small()
    split = str(tmp_path / "s.h5")
    write_split_index(split, idx.meta, idx.arrays, parts=2)
    forked, spawned = [], []
    real_spawn = probe._spawned_probe
    monkeypatch.setattr(probe, "_forked_probe", lambda p: forked.append(p) or "")
    monkeypatch.setattr(probe, "_spawned_probe", lambda p: spawned.append(p) or real_spawn(p))
    for mod in ("mpi4py.MPI", "cupy"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    monkeypatch.setattr(threading, "active_count", lambda: 1)  # (the test run's own threads aside)
    assert probe._may_fork()
    monkeypatch.setattr(threading, "active_count", lambda: 2)  # another thread beside this one
    assert not probe._may_fork()
    probe._probed.cache_clear()
    assert distgrail.open_index(split).n == idx.n
    assert (forked, len(spawned)) == ([], 1)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    for mod in ("mpi4py.MPI", "cupy"):
        monkeypatch.setitem(sys.modules, mod, object())
        assert not probe._may_fork(), mod
        monkeypatch.delitem(sys.modules, mod)

    def no_fork(p):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(probe, "_forked_probe", no_fork)
    probe._probed.cache_clear()
    assert distgrail.open_index(split).n == idx.n and len(spawned) == 2
    probe._probed.cache_clear()


def test_a_provisional_file_installs_the_signal_handlers_until_it_is_settled():
    """A split write's marker is made before any temporary is opened: a SIGTERM then must find the
    handlers that remove it (review: an MPI split build killed there left the marker)."""
    import signal

    from distgrail.io import atomic

    before = signal.getsignal(signal.SIGTERM)
    assert before is not atomic._on_signal
    marker = "/nonexistent/.x.h5.t.pending-1"
    atomic.provisional(marker, True)
    try:
        assert signal.getsignal(signal.SIGTERM) is atomic._on_signal
        assert signal.getsignal(signal.SIGINT) is atomic._on_signal
    finally:
        atomic.provisional(marker, False)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_graph_files_name_of_bad_bytes_reads_under_partition_on(tmp_path):
    """``source_name`` bytes that are not UTF-8 (a flipped bit): the partitioned read names the
    graph with U+FFFD as one process does, not a UnicodeDecodeError (an internal error)."""
    from distgrail.io.binary import write_binary_graph
    from distgrail.io.read import read_graph
    from distgrail.mpi.partition_read import _h5_block

    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n2 0\n")
    path = str(tmp_path / "g.h5")
    write_binary_graph(read_graph(str(g)), path)
    with h5py.File(path, "r+") as f:
        bad = b"\xff" + bytes(f.attrs["source_name"])[1:]
        f.attrs.create("source_name", np.array(bad, dtype=f"S{len(bad)}"), dtype=h5py.string_dtype("utf-8", len(bad)))
    n, m, src, dst, name, *_ = _h5_block(path, 0, 1)
    assert (n, m) == (3, 3) and name.startswith("\ufffd") and name[1:] == bad[1:].decode()
