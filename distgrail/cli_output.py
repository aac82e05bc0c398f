"""What the command line prints: ``distgrail info``'s table, the comparison of ``query``'s answers
with the expected answers of a pairs file ``u v answer``, and the quiet end of a run whose reader
of stdout went away (``distgrail info X.h5 | head``).

Kept apart from :mod:`distgrail.cli` for size; nothing here imports it.
"""

from __future__ import annotations

import json
import os
import signal
import sys

__all__ = ["cmd_info", "info_lines", "check_expected", "stdout_is_gone", "stdout_gone", "SIGPIPE_STATUS",
           "DIFFER_STATUS"]

#: the exit status when stdout's reader is gone: 128 + SIGPIPE, what the shell reports for a
#: program that SIGPIPE ended (``yes | head``)
SIGPIPE_STATUS = 128 + int(getattr(signal, "SIGPIPE", 13))

#: ``query``'s exit status when some answers differ from the pairs file's expected answers (0: none
#: differ; 2 stays an error, 1 a bug)
DIFFER_STATUS = 3
#: differing pairs listed in the summary
SHOWN = 5


def check_expected(q, answers, summary: dict, human: str, here: bool = True) -> tuple:
    """Compare ``answers`` with the expected answers of the pairs read (``q``, a
    :class:`~distgrail.io.pairs.QueryPairs`; None on ranks > 0); returns ``(human, status)``: the
    summary for humans with the comparison added, and :data:`DIFFER_STATUS` when some differ (else
    0). ``summary`` gains ``expected``: pairs compared, how many differ and the first few (where,
    u, v, answer, expected). When some differ, one line on stderr says so (``here``: rank 0)."""
    if q is None or q.expected is None:
        return human, 0
    import numpy as np

    got = np.asarray(answers, dtype=bool)
    differ = np.flatnonzero(got != q.expected)
    first = [{"where": q.where(k), "u": q.sources[k].item(), "v": q.targets[k].item(),
              "answer": bool(got[k]), "expected": bool(q.expected[k])} for k in differ[:SHOWN].tolist()]
    summary["expected"] = {"pairs": int(q.expected.size), "differ": int(differ.size), "first": first}
    said = lambda ok: "reachable" if ok else "unreachable"  # noqa: E731
    human += (f"\nexpected     {q.expected.size:,} pairs carry an expected answer (third column): "
              f"{differ.size:,} differ" + (f" (exit status {DIFFER_STATUS})" if differ.size else ""))
    human += "".join(f"\n  {d['where']}: {d['u']} {d['v']} {said(d['answer'])}, the file says "
                     f"{int(d['expected'])}" for d in first)
    if differ.size and here:
        print(f"distgrail: {differ.size:,} of {q.expected.size:,} answers differ from the expected answers in "
              f"{q.path} (first: {first[0]['where']})", file=sys.stderr, flush=True)
    return human, DIFFER_STATUS if differ.size else 0


def cmd_info(args) -> int:
    """``info INDEX [--json|--quiet]`` (one process: rank 0 under MPI, see :func:`distgrail.cli.main`)."""
    import distgrail

    idx = distgrail.open_index(args.index)
    info = dict(idx.meta)
    info["datasets"] = {k: [list(v.shape), str(v.dtype)] for k, v in sorted(idx.arrays.items())}
    info["size_bytes"] = os.path.getsize(args.index)
    from .update import update_summary

    if (ups := update_summary(idx.arrays)) is not None:  # edges inserted since the build
        info["updates"] = ups
    if info.get("layout") == "split":  # the part files it maps (named after the name it was written
        from .indexfile.layout import index_parts  # under, if renamed since): their names, the bytes of all

        parts = index_parts(args.index)
        info["part_files"] = [os.path.basename(p) for p in parts]
        info["size_bytes"] += sum(os.path.getsize(p) for p in parts)
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True, default=str))
    elif not args.quiet:  # --quiet: nothing; the exit status says whether the index opened
        print("\n".join(info_lines(info)))
    return 0


def info_lines(info: dict) -> list:
    """``key  value`` lines, the key column as wide as the longest key plus two spaces, then one
    line per dataset (``/path  shape  dtype``), its columns as wide as their longest entry."""
    keys = [k for k in info if k != "datasets"]
    width = max((len(str(k)) for k in keys), default=0) + 2
    lines = [f"{k:<{width}}{_shown(info[k])}" for k in keys]
    sets = info.get("datasets", {})
    if sets:
        kw = max(len(k) for k in sets) + 3
        sw = max(len(str(tuple(shape))) for shape, _ in sets.values()) + 2
        lines += [f"  /{k:<{kw - 1}}{str(tuple(shape)):<{sw}}{dt}" for k, (shape, dt) in sets.items()]
    return lines


def _shown(value, nested: bool = False) -> str:
    """A value of ``info`` as text: a mapping as ``key value`` pairs separated by commas (one
    inside another in parentheses), anything else as ``str`` gives it."""
    if isinstance(value, dict):
        text = ", ".join(f"{k} {_shown(v, True)}" for k, v in value.items())
        return f"({text})" if nested else text
    return str(value)


def stdout_is_gone() -> bool:
    """True when stdout cannot be written any more: its flush fails, or (a pipe without reader)
    ``poll`` reports an error on it. A BrokenPipeError from anything else (a socket) is not this."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        return True
    try:
        import select

        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def stdout_gone() -> int:
    """The reader of stdout went away (``| head``): no traceback, the rest of the output dropped
    (stdout pointed at /dev/null, so that the flush at exit does not fail again); exit status
    :data:`SIGPIPE_STATUS` (141), as the shell reports for a tool SIGPIPE ended."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # (no file descriptor behind sys.stdout: nothing is flushed at exit)
        pass
    return SIGPIPE_STATUS
