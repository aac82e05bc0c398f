"""Input files must be regular files: a FIFO, a device or a socket is refused before it is opened.

distgrail memory-maps and re-reads its inputs (graphs, pairs, indexes), so a pipe could not be read
anyway; worse, opening a FIFO that has no writer blocks forever. :func:`check_regular` looks with
``os.stat`` (which never blocks on a FIFO) and raises the caller's error naming the file.
"""

from __future__ import annotations

import os
import stat

__all__ = ["check_regular", "special_kind"]

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path) -> str | None:
    """What ``path`` is when it exists and is not a regular file or a directory (``"a FIFO (named
    pipe)"``, ...); None for a regular file, a directory, or a path that cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None  # missing or unreadable: the caller's own checks say so
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def check_regular(path, what: str, error) -> None:
    """Raise ``error(message)`` when ``path`` is a FIFO, device or socket (``what``: e.g.
    "graphs"); the message names the file and says what it is."""
    kind = special_kind(path)
    if kind is not None:
        raise error(f"{os.fspath(path)}: is {kind}, not a regular file; distgrail reads {what} from regular "
                    "files only (save the data to a file first)")
