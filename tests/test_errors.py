"""Issue 12 items 2, 5, 6, 7, 9: every bad input or unwritable output exits 2 with a message
naming the user's path (never the hidden temporary name), no traceback, and leaves no output
or temporary file behind."""

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import distgrail
from conftest import ROOT

PAIRS = os.path.join(ROOT, "tests", "data", "kegg_dag_uniq.gra.q100k.pairs.gz")


def cli(*args, cwd, env=None, **kw):
    e = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, cwd=cwd,
                          env=e, **kw)


def refused(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and ".tmp-" not in r.stderr, r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)


def no_leftovers(d, expected):
    assert sorted(os.listdir(d)) == sorted(expected), os.listdir(d)


@pytest.fixture
def work(tmp_path):
    g = tmp_path / "g.gra"
    g.write_bytes(open(distgrail.bundled_graph(), "rb").read())
    assert cli("index", "g.gra", "-o", "i.h5", "--quiet", "--backend", "cpu", cwd=tmp_path).returncode == 0
    (tmp_path / "p.txt").write_text("0 1\n2 3\n")
    return tmp_path


# -- item 2: output = input ---------------------------------------------------------------------
def test_output_equal_to_input_refused(work):
    before = {f: (work / f).read_bytes() for f in ("g.gra", "i.h5", "p.txt")}
    os.link(work / "i.h5", work / "hard.h5")
    for args, out, inp in ((("index", "g.gra", "-o", "g.gra"), "g.gra", "g.gra"),
                           (("index", "g.gra", "-o", "./g.gra"), "./g.gra", "g.gra"),
                           (("query", "i.h5", "p.txt", "-o", "i.h5"), "i.h5", "i.h5"),
                           (("query", "i.h5", "p.txt", "-o", "p.txt"), "p.txt", "p.txt"),
                           (("query", "i.h5", "p.txt", "-o", "hard.h5"), "hard.h5", "i.h5"),  # same inode
                           (("convert", "g.gra", "-o", "g.gra"), "g.gra", "g.gra")):
        refused(cli(*args, "--backend", "cpu", cwd=work) if args[0] != "convert" else cli(*args, cwd=work),
                f"{out}: the output would overwrite the input {inp}")
    for f, b in before.items():
        assert (work / f).read_bytes() == b
    no_leftovers(work, ["g.gra", "i.h5", "hard.h5", "p.txt"])


# -- item 6: unwritable outputs -------------------------------------------------------------------
@pytest.mark.parametrize("cmd", ["index", "query", "generate", "convert"])
def test_output_into_missing_directory(work, cmd):
    args = {"index": ("index", "g.gra"), "query": ("query", "i.h5", "p.txt"),
            "generate": ("generate", "paper", "-n", "50"), "convert": ("convert", "g.gra")}[cmd]
    out = "missing/out.h5" if cmd != "query" else "missing/a.txt"
    refused(cli(*args, "-o", out, cwd=work),
            f"{out}: cannot write the output: directory {work / 'missing'} does not exist")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt"])


@pytest.mark.parametrize("cmd", ["index", "query", "generate", "convert"])
def test_output_into_read_only_directory(work, cmd, monkeypatch, capsys):
    from distgrail.cli import main
    from distgrail.io import atomic

    ro = work / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:  # root may write anyway: make os.access tell the truth for other users
        real = os.access
        monkeypatch.setattr(atomic.os, "access", lambda p, m: False if os.fspath(p) == str(ro) else real(p, m))
    args = {"index": ("index", str(work / "g.gra"), "--backend", "cpu"),
            "query": ("query", str(work / "i.h5"), str(work / "p.txt"), "--backend", "cpu"),
            "generate": ("generate", "paper", "-n", "50"), "convert": ("convert", str(work / "g.gra"))}[cmd]
    out = ro / ("out.txt" if cmd == "query" else "out.h5")  # (answers in an .h5: an unknown extension, issue 44)
    assert main([*args, "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{out}: cannot write the output: directory {ro} is not writable" in err
    assert os.listdir(ro) == []


@pytest.mark.parametrize("cmd", ["query", "generate"])
def test_write_failing_midway(work, cmd):
    """A text write that fails after it started (here: a file size limit; a full disk alike). HDF5
    outputs check the free space before writing (HDF5 may crash on a failed write):
    test_full_disk_message."""
    script = textwrap.dedent("""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from distgrail.cli import main
        sys.exit(main(sys.argv[1:]))
    """)
    args = {"index": ("index", "g.gra", "--backend", "cpu"), "query": ("query", "i.h5", PAIRS, "--backend", "cpu"),
            "generate": ("generate", "paper", "-n", "5000"), "convert": ("convert", "g.gra", "--format", "gra")}[cmd]
    out = {"query": "big.txt", "generate": "out.gra", "convert": "out.h5"}.get(cmd, "out.h5")
    r = subprocess.run([sys.executable, "-c", script, *args, "-o", out], capture_output=True, text=True, cwd=work,
                       env={**os.environ, "PYTHONPATH": ROOT})
    refused(r, f"{out}: cannot write the output: File too large")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt"])


def test_full_disk_message(tmp_path, monkeypatch, capsys):
    import errno
    from types import SimpleNamespace

    from distgrail.cli import main

    g = distgrail.bundled_graph()
    monkeypatch.setattr(os, "statvfs", lambda d: SimpleNamespace(f_bavail=10, f_frsize=4096))
    for args in (("index", g, "--backend", "cpu"), ("convert", g)):
        assert main([*args, "-o", str(tmp_path / "x.h5"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path / 'x.h5'}: cannot write the output: No space left on device (needs about" in err
        assert os.listdir(tmp_path) == []
    monkeypatch.undo()

    from distgrail.io import atomic

    with pytest.raises(distgrail.errors.OutputError, match=r"x.h5: cannot write the output: No space left"):
        with atomic.atomic_path(tmp_path / "x.h5") as tmp:
            open(tmp, "w").close()
            raise OSError(errno.ENOSPC, "No space left on device", tmp)
    err = atomic.output_error("x.h5", OSError("Unable to create file (unable to open file: name = '.x.h5.tmp-1', "
                                              "errno = 28, error message = 'No space left on device')"))
    assert str(err) == "x.h5: cannot write the output: No space left on device"
    assert os.listdir(tmp_path) == []


# -- item 6: bad inputs ------------------------------------------------------------------------------
def test_directory_as_graph_or_pairs(work):
    (work / "d").mkdir()
    refused(cli("index", "d", "-o", "x.h5", cwd=work), "d: is a directory, not a graph file")
    refused(cli("query", "i.h5", "d", "-o", "a.txt", cwd=work), "d: is a directory, not a pairs file")
    refused(cli("info", "d", cwd=work), "d: is a directory, not an index file")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt", "d"])


def test_truncated_gz_pairs(work):
    data = gzip.compress(b"0 1\n" * 5000)
    (work / "t.gz").write_bytes(data[: len(data) // 2])
    refused(cli("query", "i.h5", "t.gz", "-o", "a.txt", cwd=work), "t.gz: not a readable gzip file, truncated")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt", "t.gz"])


def test_binary_garbage_shows_a_short_escaped_excerpt(work):
    (work / "bin.gra").write_bytes(b"\x7fELF\x02\x01" + bytes(range(256)) * 3)
    (work / "bin.txt").write_bytes(bytes(range(200, 256)) * 20)
    for name in ("bin.gra", "bin.txt"):
        r = cli("index", name, "-o", "x.h5", cwd=work)
        refused(r, f"{name}: binary data, not a text graph file")
        assert len(r.stderr) < 400 and r.stderr.isascii() and "\\x" in r.stderr
    no_leftovers(work, ["g.gra", "i.h5", "p.txt", "bin.gra", "bin.txt"])


# -- item 5: sizes checked before allocating ---------------------------------------------------------
def test_huge_vertex_id_and_sizes_exit_2_fast(work):
    (work / "e.txt").write_text("0 1\n1 3000000000\n")
    env = {"DISTGRAIL_MEMORY": str(64 << 30)}
    t = time.perf_counter()
    refused(cli("index", "e.txt", "-o", "x.h5", cwd=work, env=env), "e.txt:2: vertex id too large",
            "got '3000000000'")
    assert time.perf_counter() - t < 10  # the interpreter starting included; the check itself is instant
    refused(cli("generate", "paper", "-n", "100000000000", "-o", "x.gra", cwd=work, env=env),
            "cannot generate -n 100000000000", "100,000,000,000 vertices")
    refused(cli("index", "g.gra", "-o", "x.h5", "--dims", "100000000000", "--backend", "cpu", cwd=work, env=env),
            "--dims 100000000000: at most 1024 label dimensions")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt", "e.txt"])


# -- item 9 -------------------------------------------------------------------------------------------
def test_small_promises(work):
    (work / "empty.txt").write_text("# nothing\n")
    refused(cli("index", "empty.txt", "-o", "x.h5", cwd=work), "empty.txt: empty edge list")
    refused(cli("generate", "paper", "-n", "10", "--seed", "-1", "-o", "s.gra", cwd=work),
            "seed must be an integer in 0..2^64-1, got -1")
    (work / "p3.txt").write_text("0 1\n0 1 2\n")
    refused(cli("query", "i.h5", "p3.txt", "-o", "a.txt", cwd=work), "p3.txt:2: expected two columns 'u v'")
    no_leftovers(work, ["g.gra", "i.h5", "p.txt", "empty.txt", "p3.txt"])


def test_generate_mtx_is_matrix_market(work):
    assert cli("generate", "paper", "-n", "200", "-o", "x.mtx", "--quiet", cwd=work).returncode == 0
    head = (work / "x.mtx").read_text().splitlines()
    assert head[0] == "%%MatrixMarket matrix coordinate pattern general"
    g = distgrail.read_graph(work / "x.mtx")
    from distgrail.io.generate import generate

    ref = generate("paper", 200, 10, 0)
    assert g.n == 200 and sorted(zip(g.src.tolist(), g.dst.tolist())) == sorted(zip(ref.src.tolist(),
                                                                                   ref.dst.tolist()))


def test_query_without_output_says_so_and_dash_is_stdout(work):
    r = cli("query", "i.h5", PAIRS, "--backend", "cpu", cwd=work)
    assert r.returncode == 0 and "answers      not written (give -o FILE, or -o - for stdout)" in r.stdout
    r = cli("query", "i.h5", PAIRS, "--backend", "cpu", "-o", "-", cwd=work)
    assert r.returncode == 0
    ans = np.array(r.stdout.split(), dtype=int)
    assert ans.size == 100_000 and int(ans.sum()) == distgrail.BUNDLED_REACHABLE
    assert "queries/s" in r.stderr


# -- item 7: leftovers ---------------------------------------------------------------------------------
SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from distgrail.io.atomic import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"x" * 100000)
        print(tmp, flush=True)
        time.sleep(60)
""")


@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)])
def test_signal_during_write_removes_the_temp_file(tmp_path, sig, rc):
    p = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(tmp_path / "out.h5")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    tmp = p.stdout.readline().strip()
    assert os.path.basename(tmp) == f".out.h5.tmp-{p.pid}" and os.path.exists(tmp)
    p.send_signal(sig)
    assert p.wait(timeout=30) == rc  # dies of the signal (128 + sig in a shell)
    assert os.listdir(tmp_path) == []


def test_stale_temp_files_of_dead_processes_are_removed(work):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = work / f".x.h5.tmp-{dead}"
    stale.write_bytes(b"half an index")
    alive = work / f".x.h5.tmp-{os.getpid()}"  # a live process's temp file is left alone
    alive.write_bytes(b"being written")
    other = work / f".y.h5.tmp-{dead}"  # another output's temp file is left alone
    other.write_bytes(b"other")
    assert cli("index", "g.gra", "-o", "x.h5", "--quiet", "--backend", "cpu", cwd=work).returncode == 0
    assert not stale.exists() and alive.exists() and other.exists()
    assert distgrail.open_index(work / "x.h5").n == 3617


def test_replaced_output_is_set_aside_and_removed_in_the_background(tmp_path, monkeypatch):
    """Replacing a large output: the rename only swaps names (the old file is hard-linked aside
    first), a detached rm removes the old link; the output holds the new bytes at once and no
    .old- link stays; an .old- link of a dead process is removed by the next write."""
    import time

    from distgrail.io import atomic

    monkeypatch.setattr(atomic, "ASIDE_MIN_BYTES", 10)
    monkeypatch.setattr(atomic, "_exchange", lambda tmp, path: False)  # the fallback (tests/test_indexwrite.py: the exchange)
    out = tmp_path / "x.h5"
    out.write_bytes(b"the old index, long enough")
    old_inode = os.stat(out).st_ino
    links = []
    real_link = os.link
    monkeypatch.setattr(os, "link", lambda a, b: (links.append((a, b)), real_link(a, b))[1])
    with atomic.atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"the new index")
    assert out.read_bytes() == b"the new index"
    assert links and links[0][1].endswith(f".x.h5.old-{os.getpid()}")  # it was set aside, not freed by the rename
    deadline = time.time() + 10
    while any(".old-" in n for n in os.listdir(tmp_path)) and time.time() < deadline:
        time.sleep(0.05)
    assert os.listdir(tmp_path) == ["x.h5"] and os.stat(out).st_ino != old_inode
    # a small output is replaced directly (nothing set aside)
    monkeypatch.setattr(atomic, "ASIDE_MIN_BYTES", 1 << 30)
    links.clear()
    with atomic.atomic_path(out) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"newer")
    assert not links and out.read_bytes() == b"newer"
    # an .old- link left by a process that no longer runs goes with the next write
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = tmp_path / f".x.h5.old-{dead}"
    stale.write_bytes(b"an old index whose rm never ran")
    assert atomic.remove_stale(out) == [stale.name] and not stale.exists()
