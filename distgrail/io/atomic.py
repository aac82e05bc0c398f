"""Files written under a temporary name beside the target and renamed when complete."""

from __future__ import annotations

import os

__all__ = ["atomic_path"]


class atomic_path:
    """Context manager: yields a temporary path; renames it to ``path`` on success, removes it on error."""

    def __init__(self, path):
        self.path = os.fspath(path)
        d, base = os.path.split(os.path.abspath(self.path))
        self.tmp = os.path.join(d, f".{base}.tmp-{os.getpid()}")

    def __enter__(self):
        return self.tmp

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            os.replace(self.tmp, self.path)
        elif os.path.exists(self.tmp):
            os.remove(self.tmp)
        return False
