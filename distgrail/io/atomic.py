"""Files written under a temporary name beside the target and renamed when complete.

The temporary file is ``.NAME.tmp-PID`` in the target's directory. It is removed when the write
fails, when the process gets SIGTERM (Slurm's time limit) or SIGINT, and, should the process have
been killed outright (SIGKILL), by the next write of the same output: temporary files of that
output whose process no longer runs on this host are removed first. A write that fails (missing
or read-only directory, full disk, a directory in the way) raises :class:`OutputError` naming the
user's path, never the temporary name.

Replacing an existing output swaps the two names atomically (``renameat2`` with
``RENAME_EXCHANGE``: the output's name holds the old file or the new one, never neither), then the
old file, now under the temporary name, is removed: one of at least :data:`ASIDE_MIN_BYTES` is
renamed to ``.NAME.old-PID`` and removed by a detached ``rm`` after the command (on ext4 mounted
with ``discard``, freeing a large index takes seconds: docs/benchmarks.md). A plain ``rename``
over the existing output is avoided because ext4 (``auto_da_alloc``, its default) then starts
the write-back of the whole new file inside the rename, to allocate its delayed blocks (a time
that grows with the file: docs/benchmarks.md), whether or not the old file was set aside. Where
the exchange is not supported
(another file system, an old kernel or C library) the old output is hard-linked to
``.NAME.old-PID`` and the new one renamed over it, as before. An ``.old-PID`` file left by a
process that no longer runs is removed by the next write of the same output. An output that
replaces a split index's main file (a graph, answers or pairs written over it) removes that
index's part files once in place, as an index written there does, unless another index file
beside it still carries their build (:func:`_replaced_split`).

The SIGTERM / SIGINT handlers that remove the temporaries are this module's only while an output
is in flight (a temporary being written, a split index's part renamed into place before its main
file, a rename with signals held): once none is, the handlers from before are put back. Left
installed, they kept a process that then blocked inside a C call (an MPI rank in a collective
waiting for a rank that died) alive through SIGTERM, as Python runs a handler only between two
bytecodes of the main thread: ``srun`` and ``mpirun`` send SIGTERM, then SIGKILL only after their
grace time. Python sets handlers on the main thread only, so a write that ends on another thread
leaves them to the main thread's next step here (:func:`restore_handlers`).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import signal
import subprocess
import threading
import time

from .. import settings
from ..errors import DistGrailError, OutputError

__all__ = ["atomic_path", "output_error", "check_output", "same_file", "remove_stale", "remove_names",
           "install_handlers", "restore_handlers", "provisional"]

_LIVE: set = set()  # temporary paths being written by this process
#: files already renamed into place that are part of a write not yet finished (a split index's
#: parts before its main file is in place): removed with the temporaries on SIGTERM / SIGINT
_PROVISIONAL: set = set()
#: signals that arrived while an output was being put in place (replayed once it is): "depth" of
#: :func:`_signals_deferred` sections, "signals" caught meanwhile
_DEFERRED: dict = {"depth": 0, "signals": []}
_DEFERRED_LOCK = threading.Lock()  # (also: what is in flight against the handlers' restoring)
_PREVIOUS: dict = {}  # signal -> handler before ours
#: an existing output at least this large is set aside and removed in the background (see above)
ASIDE_MIN_BYTES = 64 << 20
#: a split write's marker (:func:`distgrail.indexfile.layout.pending_name`), provisional as its parts
_MARKER = re.compile(r"\.pending-\d+$")
#: a split index's part file name's tail (:func:`distgrail.indexfile.layout.part_name`)
_PART = re.compile(r"\.[0-9a-f]{8}\.part\d+$")
_REASONS = {errno.ENOENT: "its directory does not exist", errno.EISDIR: "it is a directory"}  # else strerror


def output_error(path, exc: BaseException, written=None) -> OutputError:
    """An :class:`OutputError` for ``path`` from an OSError (also h5py's, which hide the errno in
    the message and name the temporary file)."""
    code = getattr(exc, "errno", None)
    if code is None:
        m = re.search(r"errno = (\d+)", str(exc))
        code = int(m.group(1)) if m else None
    if code is None and "No space left" in str(exc):
        code = errno.ENOSPC
    if code is None and re.fullmatch(r"\d+ requested and \d+ written", str(exc)):  # NumPy's short write
        code = _short_write_cause(path, written)
    reason = _REASONS.get(code) or (os.strerror(code) if code else "write failed")
    return OutputError(f"{os.fspath(path)}: cannot write the output: {reason}")


def _h5_write_error(exc) -> bool:
    """True for h5py's RuntimeError of a failed write (closing a file whose write failed: 'Can't
    decrement id ref count (unable to extend file properly, errno = 27, ...)'): an OSError of the
    machine's, hidden in the text, that :func:`output_error` reads."""
    return isinstance(exc, RuntimeError) and re.search(r"errno = \d+", str(exc)) is not None


def _short_write_cause(path, written=None) -> int | None:
    """EFBIG when the file being written (``written``: the temporary) reached this process's
    file-size limit (``ulimit -f``), ENOSPC when the file system of ``path`` has no space left
    (NumPy's ``tofile`` reports a short write as 'N requested and M written', without the errno),
    else None."""
    import resource

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    try:
        if written is not None and limit != resource.RLIM_INFINITY and os.path.getsize(written) >= limit - (1 << 16):
            return errno.EFBIG
    except OSError:
        pass
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(os.fspath(path))))
    except OSError:
        return None
    return errno.ENOSPC if st.f_bavail * st.f_frsize < (1 << 20) else None


def check_output(path) -> None:
    """Raise :class:`OutputError` now if ``path`` cannot be written (before any work is done)."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise OutputError(f"{path}: cannot write the output: it is a directory")
    if not os.path.isdir(d):
        raise OutputError(f"{path}: cannot write the output: directory {d} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write the output: directory {d} is not writable")


def same_file(a, b) -> bool:
    """True when ``a`` and ``b`` name the same existing file (same path, or same inode)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(path) -> list:
    """Remove ``.NAME.tmp-PID`` and ``.NAME.old-PID`` files of ``path`` left by processes that no
    longer run; return them."""
    d, base = os.path.split(os.path.abspath(os.fspath(path)))
    pat = re.compile(r"\." + re.escape(base) + r"\.(?:tmp|old)-(\d+)$")
    try:
        names = os.listdir(d)
    except OSError:
        return []
    return remove_names(d, [n for n in names if (m := pat.match(n)) and int(m.group(1)) != os.getpid()
                            and not _alive(int(m.group(1)))])


def remove_names(directory, names) -> list:
    """Remove the files ``names`` (base names, in this order) from ``directory``; the names
    removed. Never an error: a file already gone, or that cannot be removed, is left out (the
    cleanups that call it run after the work they tidy up, which must not fail because of it)."""
    gone = []
    for n in names:
        try:
            os.remove(os.path.join(directory, n))
            gone.append(n)
        except OSError:
            pass
    return gone


def _cleanup():
    for tmp in list(_LIVE) + list(_PROVISIONAL):
        try:
            os.remove(tmp)
        except OSError:
            pass
        _LIVE.discard(tmp)
        _PROVISIONAL.discard(tmp)


def provisional(path, held: bool) -> None:
    """``held``: the file at ``path`` (renamed into place, or about to be) belongs to a write not yet
    finished (a signal removes it with the temporaries); False once that write is finished, or the
    file removed.
    The output that finishes it names it in ``atomic_path(..., settles=)``: it then stops being
    provisional in the same step as that output lands, no signal in between."""
    if held:  # (a signal before the first temporary is opened must find the handlers: a split
        install_handlers()  # write's marker is made before any part)
    (_PROVISIONAL.add if held else _PROVISIONAL.discard)(os.path.abspath(os.fspath(path)))
    if not held:
        restore_handlers()


class _signals_deferred:
    """SIGTERM / SIGINT held while an output is put in place (a signal's handler runs between two
    Python steps of the main thread: it would otherwise find the output renamed and the files it
    settles still provisional, and remove them); the first one caught is handled on leaving."""

    def __enter__(self):
        with _DEFERRED_LOCK:
            _DEFERRED["depth"] += 1

    def __exit__(self, *exc):
        with _DEFERRED_LOCK:
            _DEFERRED["depth"] -= 1
            sig = _DEFERRED["signals"][0] if not _DEFERRED["depth"] and _DEFERRED["signals"] else None
            if sig is not None:
                _DEFERRED["signals"].clear()
        if sig is not None:
            if threading.current_thread() is threading.main_thread():
                _on_signal(sig, None)
            else:  # (an output put in place on another thread) handlers run on the main thread only
                signal.pthread_kill(threading.main_thread().ident, sig)
        return False


def _on_signal(sig, frame):
    if _DEFERRED["depth"]:  # an output is being put in place (with the files it makes permanent)
        _DEFERRED["signals"].append(sig)
        return None
    live = tuple(_LIVE)  # one snapshot: another thread may be opening or closing an output meanwhile
    held = tuple(_PROVISIONAL)
    written = [_PART.sub("", os.path.join(os.path.dirname(t), os.path.basename(t)[1:].rsplit(".tmp-", 1)[0]))
               for t in live]  # (a split index's part being written: the index it is of)
    written = list(dict.fromkeys(written))
    written += sorted({p.rsplit(".", 2)[0] for p in held if not _MARKER.search(p)} - set(written))  # (a part:
    # <index>.<tag>.part<r>; a split write's marker, .<index>.<tag>.pending-PID, names no output)
    prev = _PREVIOUS.get(sig)
    if sig != signal.SIGINT and prev == signal.SIG_IGN:
        return None  # an ignored SIGTERM stays ignored: nothing removed, the write goes on
    _cleanup()
    if sig == signal.SIGINT and written and prev in (signal.default_int_handler, signal.SIG_IGN, signal.SIG_DFL):
        # the temporary file (or a part already in place) is gone: the write cannot finish (also when
        # SIGINT was ignored, as for a background job); the message names the output (distgrail.cli
        # prints it, exit status 2)
        raise KeyboardInterrupt(f"{', '.join(written)}: interrupted (SIGINT) while writing the output; "
                                "nothing was written")
    if callable(prev):
        out = prev(sig, frame)  # SIGINT: Python's handler raises KeyboardInterrupt
        if held or live:  # that handler let the process go on, but what was being written is gone
            raise OutputError(f"{', '.join(written)}: interrupted (signal {sig}) while writing the output; "
                              f"nothing was written")
        return out
    if prev == signal.SIG_IGN:  # an ignored SIGINT, nothing being written: still ignored
        return None
    signal.signal(sig, signal.SIG_DFL)  # die of the signal as if we had not caught it (exit 128 + sig)
    os.kill(os.getpid(), sig)
    return None


def install_handlers() -> None:
    """Clean up on SIGTERM / SIGINT from now on, until nothing is in flight (what
    :class:`atomic_path` does on entering it; a write opened on another thread needs them
    installed on the main thread first, and is then restored by the main thread's next look,
    :func:`restore_handlers`). Off the main thread it does nothing (signals reach the main thread
    only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        cur = signal.getsignal(sig)
        if cur is not _on_signal:
            _PREVIOUS[sig] = cur
            try:
                signal.signal(sig, _on_signal)
            except (ValueError, OSError):  # pragma: no cover - not the main interpreter
                pass


def restore_handlers() -> None:
    """Put back the SIGTERM / SIGINT handlers from before :func:`install_handlers` when no output
    is in flight (no temporary being written, no provisional file, no rename holding signals),
    so that a process blocked in a C call later dies of SIGTERM at once (module doc). Called
    where a write ends; off the main thread it does nothing (Python sets handlers there only).
    A handler that was not set from Python (``signal.getsignal`` gives None) cannot be put back:
    ours then stays."""
    if threading.current_thread() is not threading.main_thread():
        return
    with _DEFERRED_LOCK:  # (a write entered on another thread meanwhile keeps them)
        if _LIVE or _PROVISIONAL or _DEFERRED["depth"]:
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            prev = _PREVIOUS.get(sig)
            if prev is not None and signal.getsignal(sig) is _on_signal:
                try:
                    signal.signal(sig, prev)
                except (ValueError, OSError, TypeError):  # pragma: no cover - not the main interpreter
                    pass


def _set_aside(path) -> str | None:
    """Hard-link an existing regular output of at least :data:`ASIDE_MIN_BYTES` (one link) to
    ``.NAME.old-PID`` beside it; that path, or None when there is nothing to set aside or the
    link cannot be made (the rename then frees the old file itself)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size < ASIDE_MIN_BYTES:
        return None
    d, base = os.path.split(os.path.abspath(path))
    aside = os.path.join(d, f".{base}.old-{os.getpid()}")
    try:
        if os.path.lexists(aside):
            os.remove(aside)
        os.link(path, aside)
    except OSError:
        return None
    return aside


def _remove_later(aside) -> None:
    """Remove ``aside`` in a detached process (its blocks are freed after this command ends); in
    this process when none can be started."""
    try:
        rm = subprocess.Popen(["rm", "-f", "--", aside], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        threading.Thread(target=rm.wait, name="distgrail-rm", daemon=True).start()  # no zombie in a long run
    except OSError:
        try:
            os.remove(aside)
        except OSError:
            pass


#: renameat2's flag that swaps two existing names atomically; AT_FDCWD (paths relative to the cwd)
_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def _exchange(tmp, path) -> bool:
    """Swap the names ``tmp`` and ``path`` atomically when ``path`` is an existing regular file
    (the old output is then at ``tmp``); False (nothing changed) when it is not, or when this
    system cannot exchange names."""
    import stat

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, "renameat2", None)
    except OSError:
        return False
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) == 0


def _discard_old(old, path) -> None:
    """Remove the old output, exchanged to the temporary name ``old``: at least
    :data:`ASIDE_MIN_BYTES` renamed to ``.NAME.old-PID`` (onto no file: nothing is written back)
    and removed in the background, a smaller one at once."""
    try:
        if os.lstat(old).st_size >= ASIDE_MIN_BYTES:
            d, base = os.path.split(os.path.abspath(path))
            aside = os.path.join(d, f".{base}.old-{os.getpid()}")
            if os.path.lexists(aside):  # left by an earlier write of this process: its rm may still run
                os.remove(aside)
            os.rename(old, aside)
            _remove_later(aside)
        else:
            os.remove(old)
    except OSError:
        try:
            os.remove(old)
        except OSError:
            pass


def _replaced_split(path) -> tuple:
    """``(build id, [part files it maps])`` of the split index whose main file is at ``path``, about
    to be replaced by an output that is no index (a graph, answers, pairs), as
    :func:`distgrail.indexfile.layout.replaced_split` tells it; ``(None, [])`` when there is none,
    or when ``path`` is a link (the rename replaces the link: the index it points to stays whole).
    Its parts go once the output is in place, by the rule of an index written there
    (:func:`~distgrail.indexfile.layout.remove_parts`: not while another index file beside it
    carries that build, a copy or a hard link of the replaced main file)."""
    import stat

    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None, []
    except OSError:
        return None, []
    from ..indexfile.layout import replaced_split

    return replaced_split(path)


class atomic_path:
    """Context manager: yields a temporary path; renames it to ``path`` on success, removes it on
    error or on SIGTERM/SIGINT. OSErrors inside become :class:`OutputError` naming ``path``.
    ``landed``: called once the output is in place (signals still held); without it, an output that
    replaces a split index's main file removes that index's parts then, unless still in use
    (:func:`_replaced_split`)."""

    def __init__(self, path, size: int | None = None, settles=(), landed=None):
        self.path = os.fspath(path)
        # called once the output is in place, signals still held (what must follow it); None: the
        # parts of a split index this output replaces go then, unless still in use (:func:`_replaced_split`)
        self.landed = landed
        self.replaced: tuple = (None, [])
        self.size = size  # bytes about to be written, when known: checked against the free space
        # provisional files (:func:`provisional`) that this output, once in place, makes permanent (a
        # split write's marker, .<index>.<tag>.pending-PID: removed then)
        self.settles = [os.path.abspath(os.fspath(p)) for p in settles]
        d, base = os.path.split(os.path.abspath(self.path))
        self.tmp = os.path.join(d, f".{base}.tmp-{os.getpid()}")

    def __enter__(self):
        check_output(self.path)
        remove_stale(self.path)
        if self.size is not None:
            st = os.statvfs(os.path.dirname(self.tmp))
            free = st.f_bavail * st.f_frsize
            if self.size > free:  # HDF5 does not always survive a failed write: refuse before
                raise OutputError(f"{self.path}: cannot write the output: No space left on device "
                                  f"(needs about {self.size / 2**20:,.1f} MiB, {free / 2**20:,.1f} MiB free)")
        if self.landed is None:  # (an index's writer passes its own: it knows which build it writes)
            self.replaced = _replaced_split(self.path)
        with _DEFERRED_LOCK:  # in flight before the handlers go in (a restore on the main thread sees it)
            _LIVE.add(self.tmp)
        install_handlers()
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                if (pause := settings.get("DISTGRAIL_TEST_WRITE_PAUSE")) is not None:
                    time.sleep(pause)  # tests: a window to interrupt a write in (before the rename)
                with _signals_deferred():  # the rename and the files it settles: one step for a signal
                    return self._exit(exc_type, exc)
            return self._exit(exc_type, exc)
        finally:  # (after a held signal was handled: the handlers from before, if nothing else is in flight)
            restore_handlers()

    def _exit(self, exc_type, exc):
        mapped = None  # (made before the temporary goes: a short write's cause is read from the free space)
        if isinstance(exc, OSError) and not isinstance(exc, DistGrailError) or _h5_write_error(exc):
            mapped = output_error(self.path, exc, self.tmp)
        try:
            if exc_type is None:
                if _exchange(self.tmp, self.path):  # the new output is in place, the old one at self.tmp
                    _LIVE.discard(self.tmp)
                    self._settle()
                    _discard_old(self.tmp, self.path)
                    return False
                aside = _set_aside(self.path)
                try:
                    os.replace(self.tmp, self.path)
                except OSError as e:
                    if aside:
                        os.remove(aside)
                    raise output_error(self.path, e) from None
                self._settle()
                if aside:
                    _remove_later(aside)
                return False
            if os.path.exists(self.tmp):
                os.remove(self.tmp)
        finally:
            _LIVE.discard(self.tmp)
            if exc_type is None and os.path.exists(self.tmp):  # the rename failed
                os.remove(self.tmp)
        if mapped is not None:
            raise mapped from None
        return False

    def _settle(self) -> None:
        for p in self.settles:
            _PROVISIONAL.discard(p)
            if _MARKER.search(p):  # a split write's marker: it goes as its main file lands
                try:
                    os.remove(p)
                except OSError:
                    pass
        if self.landed is not None:
            self.landed()
        elif self.replaced[0]:
            from ..indexfile.layout import remove_parts

            remove_parts(self.path, *self.replaced)
