"""Stage timing and progress on stderr.

tqdm draws the bar (it handles terminals, pipes and ``delay`` so that runs under a second
print nothing); this module only names the stages and records how long each took.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Stages"]


class Stages:
    """Run named stages in order, timing each; show a bar when ``enabled`` and slow."""

    def __init__(self, enabled: bool, total: int, desc: str = "distgrail"):
        self.enabled = enabled
        self.total = total
        self.desc = desc
        self.timings: dict = {}
        self._bar = None

    def __enter__(self):
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, file=sys.stderr, delay=1.0, leave=False,
                             bar_format="{desc}: {n_fmt}/{total_fmt} {postfix} [{elapsed}]")
        return self

    def run(self, name, fn, *args, **kwargs):
        if self._bar is not None:
            self._bar.set_postfix_str(name, refresh=False)
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t
        if self._bar is not None:
            self._bar.update(1)
        return out

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
        return False
