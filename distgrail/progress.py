"""Named steps of a pipeline: timing and progress on stderr.

On a terminal tqdm draws the bar (``distgrail: 3/8, condense [00:04]``; ``delay`` so that runs under a
second print nothing). Anywhere else (a log file, a pipe) every step gets one line once it ends,
``distgrail: step 3/8 condense: 4.1 s``, none skipped; the lines of a run under a second are never
written. This module only names the steps and records how long each took::

    with Steps(progress, total=7) as steps:
        with steps.stage("condense"):
            dag = place.condense(graph)
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["Share", "Steps"]


class Steps:
    """Time named stages, in order; show a bar when ``enabled`` and slow.

    ``silent``: stage names that are not timed (a placement's moves that do nothing in one
    process, e.g. ``bcast_dag``), so that :attr:`timings` lists only work that was done. ``total``
    counts every step the run may take, the silent ones included (they are taken off), or is the
    list of those steps' names; :meth:`skip` takes off steps found not to run after all.
    """

    #: seconds before anything is shown (a quick run prints nothing)
    DELAY = 1.0

    def __init__(self, enabled: bool, total, desc: str = "distgrail", silent=()):
        self.enabled = enabled
        self.desc = desc
        self.silent = frozenset(silent)
        names = None if isinstance(total, int) else list(total)
        self._names = None if names is None else [n for n in names if n not in self.silent]
        self.total = len(self._names) if names is not None else total - len(self.silent)
        self.timings: dict = {}
        self._bar = None
        self._lines = None  # not a terminal: the step lines (held back until DELAY has passed)
        self._done = 0
        self._start = time.perf_counter()

    def __enter__(self):
        self._start = time.perf_counter()
        if self.enabled and _is_terminal(sys.stderr):
            from tqdm import tqdm

            # miniters=1, mininterval=0: every step redraws (tqdm's dynamic miniters skipped some)
            self._bar = tqdm(total=self.total, desc=self.desc, file=sys.stderr, delay=self.DELAY, leave=False,
                             miniters=1, mininterval=0, bar_format="{desc}: {n_fmt}/{total_fmt}{postfix} [{elapsed}]")
        elif self.enabled:
            self._lines = []
        return self

    def skip(self, *names) -> None:
        """Steps of ``names`` that will not run after all (e.g. phase 5 with K = 0): off the total."""
        gone = [n for n in names if n not in self.silent and (self._names is None or n in self._names)]
        if self._names is not None:
            self._names = [n for n in self._names if n not in gone]
        self.total -= len(gone)
        if self._bar is not None:
            self._bar.total = self.total

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
        took = time.perf_counter() - t
        self.add(name, took)
        self._done += 1
        if self._bar is not None:
            self._bar.update(1)
        elif self._lines is not None:
            self._line(f"{self.desc}: step {self._done}/{max(self.total, self._done)} {name}: {took:.1f} s")

    def _line(self, text: str) -> None:
        self._lines.append(text)
        if time.perf_counter() - self._start >= self.DELAY:
            sys.stderr.write("".join(f"{x}\n" for x in self._lines))
            sys.stderr.flush()
            self._lines.clear()

    def add(self, name: str, seconds: float) -> None:
        """Record ``seconds`` for ``name`` (steps measured elsewhere, e.g. on another thread)."""
        self.timings[name] = self.timings.get(name, 0.0) + seconds

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
        return False


class Share:
    """Progress through one long step counted in units (edges written, ...), shown as
    :class:`Steps` shows steps: on a terminal a tqdm bar, elsewhere a line when a tenth of the
    total is passed (``distgrail: generate: 30% (644,245,094 of 2,147,483,648 edges), <seconds so far>``),
    at most one a :attr:`Steps.DELAY`; nothing for a run under it::

        with Share(progress, p.m, "generate", unit="edges") as share:
            for chunk in chunks:
                ...
                share.update(len(chunk))
    """

    def __init__(self, enabled: bool, total: int, desc: str, unit: str = "edges"):
        self.enabled, self.total, self.desc, self.unit = enabled, int(total), desc, unit
        self.done = 0
        self._bar = None
        self._tenth = 0  # the last tenth a line was written for
        self._start = self._last = time.perf_counter()

    def __enter__(self):
        self._start = self._last = time.perf_counter()
        if self.enabled and _is_terminal(sys.stderr):
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=f"distgrail: {self.desc}", file=sys.stderr, delay=Steps.DELAY,
                             leave=False, unit=f" {self.unit}", unit_scale=True, mininterval=0.5)
        return self

    def update(self, k: int) -> None:
        """``k`` more units done."""
        self.done += int(k)
        if self._bar is not None:
            self._bar.update(int(k))
        elif self.enabled and self.total > 0:
            tenth = min(10, self.done * 10 // self.total)
            now = time.perf_counter()
            took = now - self._start
            if tenth > self._tenth and now - self._last >= Steps.DELAY:
                self._tenth, self._last = tenth, now
                sys.stderr.write(f"distgrail: {self.desc}: {tenth * 10}% ({self.done:,} of {self.total:,} "
                                 f"{self.unit}), {took:.1f} s\n")
                sys.stderr.flush()

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
        return False


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
