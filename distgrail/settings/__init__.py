"""Every ``DISTGRAIL_*`` environment variable in one registry: name, type, default, allowed
values, meaning, and whether it is for users or for tests and benchmarks only.

The package reads them through :func:`get` alone, at call time (tests change the environment
between calls; nothing is cached at import). A malformed value is an error that names the
variable, the value and what is allowed, unless the declaration says why it falls back to the
default instead (``lenient``). docs/settings.md's table is :func:`markdown` (``python -m
distgrail.settings --markdown``); ``python -m distgrail.settings`` prints the values in effect.

>>> get("DISTGRAIL_ROOT_SHARE", {}), get("DISTGRAIL_ROOT_SHARE", {"DISTGRAIL_ROOT_SHARE": " 0.8 "})
(1.0, 0.8)
>>> get("DISTGRAIL_NCCL", {"DISTGRAIL_NCCL": "Off"}), get("DISTGRAIL_GPU", {"DISTGRAIL_GPU": "2,0"})
(False, (2, 0))
>>> get("DISTGRAIL_PARTITION_DAG", {"DISTGRAIL_PARTITION_DAG": "everywhere"})
Traceback (most recent call last):
distgrail.errors.DistGrailError: DISTGRAIL_PARTITION_DAG must be one of auto, root, ranks, got 'everywhere'
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Mapping

from ..errors import BackendError, DistGrailError

__all__ = ["Setting", "SETTINGS", "get", "parse", "markdown", "USER", "TEST"]

USER, TEST = "user", "tests"
_OFF, _ON = ("0", "no", "off", "false"), ("1", "yes", "on", "true")


@dataclass(frozen=True)
class Setting:
    """One environment variable. ``parse(raw)`` turns its text into the value (None: not set,
    the default) and raises ValueError when the text is malformed; ``allowed`` says in words what
    it takes (the table's column, and the error's "must be ..."); ``shown``: the default as the
    table writes it; ``lenient``: why a malformed value means the default instead of an error."""

    name: str
    kind: str
    default: object
    allowed: str
    meaning: str
    parse: Callable[[str], object]
    audience: str = USER
    shown: str = ""
    lenient: str = ""
    error: type = DistGrailError
    secret: bool = False

    def value(self, raw: str | None):
        """The value of text ``raw`` (None: the variable is not set)."""
        if raw is None:
            return self.default
        try:
            got = self.parse(raw)
        except (ValueError, OverflowError):
            if self.lenient:
                return self.default
            raise self.error(f"{self.name} must be {self.allowed}, got {raw!r}") from None
        return self.default if got is None else got


def _switch(raw: str):
    v = raw.strip().lower()
    if v in _OFF:
        return False
    if v in _ON or not v:
        return True
    raise ValueError(raw)


def _choice(*values: str, fold: bool = True):
    """One of ``values``; with ``fold``, spaces and case do not matter and blank means the default."""
    def parse(raw: str):
        v = raw.strip().lower() if fold else raw
        if fold and not v:
            return None
        if v not in values:
            raise ValueError(raw)
        return v
    return parse


def _bytes(raw: str, units: bool = True):
    v = raw.strip()
    if not v:
        return None
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(v[-1].upper(), 1) if units else 1
    got = int(float(v[:-1] if mult > 1 else v) * mult)
    if got <= 0:
        raise ValueError(raw)
    return got


def _number(raw: str):
    """A finite number >= 0; blank: the default."""
    v = raw.strip()
    if not v:
        return None
    x = float(v)
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(raw)
    return x


def _count(low: int, integral: bool = True):
    """A whole number >= ``low`` (``integral=False``: any number, e.g. ``4e6``, cut to a whole one)."""
    def parse(raw: str):
        v = raw.strip()
        if not v:
            return None
        n = int(v) if integral else int(float(v))
        if n < low:
            raise ValueError(raw)
        return n
    return parse


def _threads(raw: str):
    v = raw.strip()
    if not v:
        return None
    if not v.isdigit():
        raise ValueError(raw)
    return max(1, int(v))


def _devices(raw: str):
    ids = tuple(int(x) for x in (x.strip() for x in raw.split(",")) if x)
    if not raw.strip():
        return None
    if not ids or min(ids) < 0:
        raise ValueError(raw)
    return ids


def _text(raw: str):
    return raw or None


_SWITCH = "0, no, off or false (off); 1, yes, on, true or empty (on)"

#: the registry: one declaration per variable, in the order of docs/settings.md's table
SETTINGS: dict = {s.name: s for s in (
    Setting("DISTGRAIL_BACKEND", "choice", "auto", "one of auto, cpu, gpu",
            "what backend `auto` (the default of `--backend` and `backend=`) is: `auto` takes the GPU when CuPy "
            "finds one",
            _choice("auto", "cpu", "gpu", fold=False), error=BackendError),
    Setting("DISTGRAIL_GPU", "device list", None, "a device index or a comma list of them",
            "each MPI rank's GPU: one index, or a list indexed by node-local rank",
            _devices, shown="local rank mod visible GPUs", error=BackendError),
    Setting("DISTGRAIL_GPU_MEMORY_LIMIT", "bytes", None, "a number of bytes (20e9: 20,000,000,000) or of K, M, G, T binary units (20G: 20 GiB)",
            "bytes each process may use on its GPU (free-memory checks and CuPy's pool), so ranks can share one",
            _bytes, shown="no cap"),
    Setting("DISTGRAIL_FATBINS", "switch", True, _SWITCH,
            "GPU kernels load from the fatbins shipped with distgrail where they fit; off: NVRTC compiles every "
            "one (timings, a suspected fatbin)", _switch),
    Setting("DISTGRAIL_READ_THREADS", "integer", 8, "a whole number (0 and 1: one thread)",
            "threads that read each chunk of a plain-text graph", _threads,
            lenient="anything else reads with the default, as before (tests/test_inputs.py)"),
    Setting("DISTGRAIL_TOKEN", "text", None, "any text (`distgrail query --server` wants printable ASCII)",
            "the bearer token a client sends when `--token-file` / `token=` give none (not read by `serve`)",
            _text, shown="none", secret=True),
    Setting("DISTGRAIL_NCCL", "switch", True, _SWITCH,
            "NCCL between the GPUs of MPI ranks; off: transfers go through host memory (the MPI path)", _switch),
    Setting("DISTGRAIL_NCCL_EARLY", "choice", "host", "host or wait",
            "`wait`: the first transfer waits for the background NCCL set-up; `host`: earlier transfers of at "
            "most 256 MiB go through host memory, larger ones wait (rank 0's value decides)", _choice("host", "wait"),
            lenient="anything but wait means host, as before: rank 0 reads it inside a broadcast, where an "
                    "error would leave the other ranks waiting"),
    Setting("DISTGRAIL_ROOT_SHARE", "number", 1.0,
            "a number >= 0 (rank 0's share of the dimensions against an even split, e.g. 0.8)",
            "rank 0's share of the label dimensions in an MPI build (rank 0's value decides)", _number),
    Setting("DISTGRAIL_MASK_SIDES", "choice", "auto", "one of auto, split, whole",
            "how an MPI build shares phase 5 when it has at least twice as many ranks as mask words: `split` sweeps "
            "a word's out and in sides on two ranks, `whole` both on one; `auto`: split on GPUs, whole on the "
            "CPU (rank 0's value decides)", _choice("auto", "split", "whole")),
    Setting("DISTGRAIL_SHM", "switch", True, _SWITCH,
            "labels gathered, and query batches of rank 0's pairs (65,536 or more) shared, through node-shared memory (/dev/shm) under MPI; off: by `Gatherv` (and `Scatterv`)", _switch),
    Setting("DISTGRAIL_FAST_EXIT", "switch", True, _SWITCH,
            "a command line run ends, once its output is written and flushed, with `MPI_Finalize` (under "
            "MPI) and `os._exit`: no interpreter or CUDA teardown; off: Python's own exit", _switch),
    Setting("DISTGRAIL_SHM_CLEANUP", "switch", True, _SWITCH,
            "node-local rank 0 removes stale MPICH shared-memory segments of killed ranks at job start",
            _switch, lenient="anything else means on, as before: the clean-up never fails a job"),
    Setting("DISTGRAIL_PARTITION_DAG", "choice", "auto", "one of auto, root, ranks",
            "where a partitioned build keeps the condensed DAG: `auto` spreads it when it would not fit rank "
            "0's GPU, `root` gathers it, `ranks` spreads it (max-level rule); rank 0's value decides",
            _choice("auto", "root", "ranks")),
    Setting("DISTGRAIL_PARTITION_GATHER", "integer", 4 << 20, "a number of edges >= 0 (e.g. 4e6)",
            "alive edges up to which the partitioned SCC search finishes on rank 0 (rank 0's value decides)",
            _count(0, integral=False), shown="4194304 (4 Mi)"),
    Setting("DISTGRAIL_PARTITION_ROUNDS", "integer", 64, "a whole number >= 0",
            "exchanges the partitioned SCC sweeps may spend, where `--partition auto` partitions a graph rank "
            "0's GPU holds (for speed), before the alive edges go to rank 0 (rank 0's value decides)",
            _count(0)),
    Setting("DISTGRAIL_PARTITION_NCCL", "switch", True, _SWITCH,
            "NCCL for the partitioned build's exchanges (with a GPU per rank); off: through the host "
            "(rank 0's value decides)", _switch),
    Setting("DISTGRAIL_MEMORY", "bytes", None, "a number of bytes > 0 (e.g. 400e6)",
            "host memory taken as this machine's in the size checks", lambda raw: _bytes(raw, units=False),
            audience=TEST, shown="this machine's"),
    Setting("DISTGRAIL_RANKS_PER_NODE", "integer", None, "a whole number >= 1",
            "MPI ranks of a node split into groups of this many, each taken as a node of its own",
            _count(1), audience=TEST, shown="the node's ranks"),
    Setting("DISTGRAIL_TEST_WRITE_PAUSE", "seconds", None, "a number of seconds >= 0",
            "an output file waits this long before it is moved into place (a window to interrupt it)",
            _number, audience=TEST, shown="no pause"),
    Setting("DISTGRAIL_DATA", "path", None, "a folder",
            "the GRAIL benchmark graphs and their query pairs for the tests and benchmarks", _text,
            audience=TEST, shown="tests/data"),
    Setting("DISTGRAIL_SLURM_TEST", "switch", True, "0, no, off or false (off); anything else (on)",
            "launch/test.sh (.ci/run) ends with the slurm/ templates under a real Slurm (as root where Slurm is "
            "missing, installed with apt-get first); off skips it",
            lambda raw: raw.strip().lower() not in ("0", "no", "off", "false"), audience=TEST),
)}


def _setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise DistGrailError(f"{name} is not a distgrail setting (distgrail/settings declares them)") from None


def get(name: str, env: Mapping[str, str] | None = None):
    """The value of setting ``name`` from the process environment (or the mapping ``env``) now:
    its default when not set; a :class:`~distgrail.errors.DistGrailError` (or the declared
    subclass) naming it when its value is malformed."""
    s = _setting(name)
    return s.value((os.environ if env is None else env).get(name))


def parse(name: str, raw: str):
    """The value text ``raw`` gives setting ``name`` (as :func:`get` does with it set to ``raw``)."""
    return _setting(name).value(raw)


def _shown(s: Setting) -> str:
    if s.shown:
        return s.shown
    return ("on" if s.default else "off") if isinstance(s.default, bool) else str(s.default)


def markdown() -> str:
    """docs/settings.md's table: one row per setting, in the registry's order."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| Variable | Type | Default | Values | For | Meaning |", "|---|---|---|---|---|---|"]
    for s in SETTINGS.values():
        allowed = s.allowed + ("; anything else: the default" if s.lenient else "")
        rows.append("| " + " | ".join(cell(c) for c in (f"`{s.name}`", s.kind, _shown(s), allowed, s.audience,
                                                         s.meaning)) + " |")
    return "\n".join(rows) + "\n"
