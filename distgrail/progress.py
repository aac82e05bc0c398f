"""Named steps of a pipeline: timing and progress on stderr.

tqdm draws the bar (it handles terminals, pipes and ``delay`` so that runs under a second
print nothing); this module only names the steps and records how long each took::

    with Steps(progress, total=7) as steps:
        with steps.stage("condense"):
            dag = place.condense(graph)
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["Steps"]


class Steps:
    """Time named stages, in order; show a bar when ``enabled`` and slow.

    ``silent``: stage names that are not timed (a placement's moves that do nothing in one
    process, e.g. ``bcast_dag``), so that :attr:`timings` lists only work that was done.
    """

    def __init__(self, enabled: bool, total: int, desc: str = "distgrail", silent=()):
        self.enabled = enabled
        self.total = total
        self.desc = desc
        self.silent = frozenset(silent)
        self.timings: dict = {}
        self._bar = None

    def __enter__(self):
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=self.desc, file=sys.stderr, delay=1.0, leave=False,
                             bar_format="{desc}: {n_fmt}/{total_fmt} {postfix} [{elapsed}]")
        return self

    @contextlib.contextmanager
    def stage(self, name: str):
        """Time the ``with`` block as stage ``name`` (added up when a name repeats)."""
        if name in self.silent:
            yield
            return
        if self._bar is not None:
            self._bar.set_postfix_str(name, refresh=False)
        t = time.perf_counter()
        yield
        self.add(name, time.perf_counter() - t)
        if self._bar is not None:
            self._bar.update(1)

    def add(self, name: str, seconds: float) -> None:
        """Record ``seconds`` for ``name`` (steps measured elsewhere, e.g. on another thread)."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
        return False
