"""The SIGTERM / SIGINT handlers an output's write installs (:mod:`distgrail.io.atomic`: a signal
during the write removes its temporary files) are the process's own again once nothing is being
written. Left installed, a process that later blocks inside a C call (an MPI rank in a collective
waiting for another rank) outlives SIGTERM: a Python handler runs only between two bytecodes of
the main thread, so ``srun``/``mpirun``'s SIGTERM did nothing until their SIGKILL.

The C-level wait here is a self-deadlocked pthread mutex (``pthread_mutex_lock`` never returns
EINTR): it stands for the MPI call. Every test that changes this process's handlers puts them back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import distgrail
from distgrail.io import atomic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: after the write: the handlers must be the ones before it, then a wait no Python handler ends
BLOCK = textwrap.dedent("""
    import ctypes, signal
    print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # PTHREAD_MUTEX_INITIALIZER is all zeros (glibc)
    libc.pthread_mutex_lock(mutex)
    print("blocked", flush=True)
    libc.pthread_mutex_lock(mutex)  # a default mutex locked twice: waits forever, in C
""")

WRITES = {
    "build with output (the early write)": "distgrail.build_index(g, dims=2, backend='cpu', output=out)",
    "Index.save": "distgrail.build_index(g, dims=2, backend='cpu').save(out)",
    "split layout": ("from distgrail.indexfile.split import write_split_index\n"
                     "i = distgrail.build_index(g, dims=2, backend='cpu')\n"
                     "write_split_index(out, i.meta, i.arrays, parts=3)"),
    "graph file": "from distgrail.io.writers import write_graph\nwrite_graph(distgrail.read_graph(g), "
                  "out.replace('.h5', '.gra'))",
}


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_process_blocked_in_c_after_a_write_dies_of_sigterm(tmp_path, write):
    out = str(tmp_path / "idx.h5")
    script = (f"import distgrail, signal\ng = distgrail.bundled_graph()\nout = {out!r}\n"
              f"{WRITES[write]}\n{BLOCK}")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    try:
        restored = p.stdout.readline().split()
        if p.stdout.readline().strip() != "blocked":
            p.wait(timeout=60)
            pytest.fail(f"the script did not reach its wait: {p.stderr.read()}")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=20)  # the handler left installed: alive until killed below
    except subprocess.TimeoutExpired:
        rc = "still running after SIGTERM"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert restored == ["True", "True"] and rc == -signal.SIGTERM, (restored, rc)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


@pytest.fixture
def own_handlers():
    """This process's handlers, put back after the test whatever it did."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield before
    for s, h in before.items():
        signal.signal(s, h)


def _ours() -> bool:
    return signal.getsignal(signal.SIGTERM) is atomic._on_signal and signal.getsignal(signal.SIGINT) is atomic._on_signal


def test_nested_writes_keep_the_handlers_until_the_outer_one_ends(tmp_path, own_handlers):
    def mine(sig, frame):  # a program's own handler: the one put back
        pass

    signal.signal(signal.SIGTERM, mine)
    with atomic.atomic_path(tmp_path / "a") as a:
        open(a, "w").write("a")
        with atomic.atomic_path(tmp_path / "b") as b:
            open(b, "w").write("b")
            assert _ours()
        assert _ours()  # the outer write still runs
    assert signal.getsignal(signal.SIGTERM) is mine
    assert signal.getsignal(signal.SIGINT) is own_handlers[signal.SIGINT]
    with pytest.raises(ValueError):  # a failed write puts them back too
        with atomic.atomic_path(tmp_path / "c"):
            raise ValueError("x")
    assert signal.getsignal(signal.SIGTERM) is mine and sorted(os.listdir(tmp_path)) == ["a", "b"]


def test_a_write_on_another_thread_overlapping_one_on_the_main_thread(tmp_path, own_handlers):
    inside, leave = threading.Event(), threading.Event()

    def work():
        with atomic.atomic_path(tmp_path / "t") as t:
            open(t, "w").write("t")
            inside.set()
            leave.wait(30)

    with atomic.atomic_path(tmp_path / "m") as m:
        open(m, "w").write("m")
        th = threading.Thread(target=work)
        th.start()
        assert inside.wait(30)
    assert _ours()  # the thread's write is still going: its temporary must go with a signal
    leave.set()
    th.join()
    # its end, off the main thread, cannot touch the handlers (Python sets them on the main
    # thread only): the next look from the main thread restores them
    atomic.restore_handlers()
    assert signal.getsignal(signal.SIGTERM) is own_handlers[signal.SIGTERM]
    assert sorted(os.listdir(tmp_path)) == ["m", "t"]


def test_the_handlers_stay_while_a_part_is_provisional(tmp_path, own_handlers):
    """A split index's part, renamed into place before its main file: a signal must still remove
    it, so the handlers stay until the main file has landed (or the part is let go)."""
    part = tmp_path / "idx.h5.0123abcd.part0"
    atomic.provisional(part, True)
    with atomic.atomic_path(part) as t:
        open(t, "w").write("p")
    assert _ours()
    with atomic.atomic_path(tmp_path / "idx.h5", settles=[part]) as t:
        open(t, "w").write("main")
    assert signal.getsignal(signal.SIGTERM) is own_handlers[signal.SIGTERM]
    atomic.install_handlers()
    atomic.provisional(part, True)
    atomic.provisional(part, False)  # dropped (its index failed): nothing in flight any more
    assert signal.getsignal(signal.SIGTERM) is own_handlers[signal.SIGTERM]


def test_a_split_index_across_its_parts_and_main_file(tmp_path, own_handlers):
    from distgrail.indexfile.split import write_split_index

    i = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    seen = []
    real = atomic.atomic_path.__exit__

    def exit_(self, *exc):  # the handlers after each file of the index is renamed into place
        out = real(self, *exc)
        seen.append((os.path.basename(self.path).split(".")[-1], _ours()))
        return out

    atomic.atomic_path.__exit__ = exit_
    try:
        write_split_index(tmp_path / "s.h5", i.meta, i.arrays, parts=2)
    finally:
        atomic.atomic_path.__exit__ = real
    assert seen == [("part0", True), ("part1", True), ("h5", False)]
    assert signal.getsignal(signal.SIGTERM) is own_handlers[signal.SIGTERM]


def test_failed_build_puts_handlers_back(tmp_path, monkeypatch):
    """A build whose early index file was started (the forest shared) but did not open, and that
    then fails, leaves no handler of ours installed (``EarlyWrite.abort``; before, only the file's
    own abort put them back)."""
    import signal

    import distgrail
    from distgrail import build
    from distgrail.io import atomic
    from distgrail.stages import phases

    before = signal.getsignal(signal.SIGTERM)

    def broken(*a, **k):
        raise RuntimeError("planted failure in phases 3-4")

    def not_opened(self, side):  # the early file did not open (its thread failed): abort has no file
        self.why = "planted: not opened"
        self._opened_event.set()

    monkeypatch.setattr(phases, "labels", broken)
    monkeypatch.setattr(build.EarlyWrite, "_open", not_opened)
    import numpy as np

    rng = np.random.default_rng(1)
    with pytest.raises(RuntimeError, match="planted"):
        distgrail.build_index((rng.integers(0, 50, 200), rng.integers(0, 50, 200)), dims=2, backend="cpu",
                              output=str(tmp_path / "x.h5"))
    assert signal.getsignal(signal.SIGTERM) is not atomic._on_signal
    assert signal.getsignal(signal.SIGTERM) is before
    assert not list(tmp_path.iterdir())
