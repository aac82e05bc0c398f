"""``distgrail update INDEX --add EDGES --layout patch``: the update written as a patch, only the
rows it changed, over the index it read (:mod:`distgrail.indexfile.patch`; the rows from
:func:`distgrail.update_rows.insert_rows`). A patched index updated again stays patched over the
same base, its patch the rows of every update since. Where no patch can be written (a split index,
an update that labels the components again, a base that cannot be linked beside the output) the
index is written whole instead and the command says why. Kept apart from :mod:`distgrail.cli_update`
for size, with what both write paths share (the new files' permissions, the summary printed)."""

from __future__ import annotations

import json
import os
import sys
import time

__all__ = ["update_patched", "no_wider_than", "keep_mode", "reported"]


def update_patched(args, idx, src, dst, steps: dict, t0: float, mode):
    """Exit status 0 once ``idx`` (the index ``args.index``, opened) plus the edges ``src ->
    dst`` is written at ``args.output`` as a patch and reported; or the index to write whole
    instead (``args.index`` opened again once the update ran: the CPU sweep changes the arrays it reads), the reason
    told on stderr. ``steps``: seconds by step so far (``update`` and ``write`` added); ``mode``:
    the index's stat for an update in place (the new main file no more readable than it), else None."""
    import distgrail

    import numpy as np

    from .indexfile import PatchNotPossible, patch_base, write_patched_index
    from .indexfile.patch_read import dataset_crcs, patch_rows
    from .update import UPDATES
    from .update_rows import insert_rows

    if idx.meta.get("layout") == "split":
        return _whole(args, idx, f"{args.index} is split into parts, and a patch is written over a one-file index")
    linked = patch_base(args.index)
    base = linked or args.index
    t = time.perf_counter()
    got = insert_rows(idx, src, dst, backend=args.backend, rebuild_above=args.rebuild_above,
                      previous=patch_rows(args.index) if linked else None)
    if got is None:
        why = "the update labels the components again (more new DAG edges than --rebuild-above) or a level passes " \
              "its stored type"
        return _whole(args, distgrail.open_index(args.index), why)  # (read again: the CPU sweep changed its arrays)
    up, report = got
    steps["update"] = time.perf_counter() - t
    t = time.perf_counter()
    marks = []  # (the write's own steps: its rows' checksums, the DAG's rows, the main file)

    def progress(text):
        marks.append((text, time.perf_counter()))
        if not args.quiet:
            print(f"distgrail update: writing the patch: {text}", file=sys.stderr)

    prior = None
    if up.intact and not all(name in up.crcs for name, (r, _) in up.rows.items() if r.size):  # the rows' values before the update are in
        crcs = dataset_crcs(args.index)  # memory: the blocks' checksums from the changes (none made on the GPU)
        prior = {name: (idx.arrays[name], *crcs[name]) for name in up.rows  # (not one left in the file:
                 if name in crcs and isinstance(idx.arrays[name], np.ndarray)}  # read_device)
    try:
        with no_wider_than(mode):
            write_patched_index(args.output, base, up.meta, up.rows, dag=up.dag, whole=up.whole, progress=progress,
                                prior=prior, crcs=up.crcs)
    except PatchNotPossible as e:
        return _whole(args, distgrail.open_index(args.index), str(e))
    end = time.perf_counter()
    steps["write"] = end - t
    for (text, at), nxt in zip(marks, [m[1] for m in marks[1:]] + [end]):
        steps[f"write {text}"] = nxt - at
    if mode is not None:
        keep_mode([args.output], mode)
    rows = max((int(r.size) for r, _ in up.rows.values()), default=0)
    return reported(args, report, int(up.whole[UPDATES].shape[0]), steps, t0, "patch", 0,
                    f"patched over {os.path.basename(patch_base(args.output))}, {rows:,} rows of {idx.C:,} at most "
                    f"per dataset")


def _whole(args, idx, why: str):
    """``idx``, to be written whole, ``why`` told on stderr (unless ``--quiet``)."""
    if not args.quiet:
        print(f"distgrail update: {why}: the index is written whole (one file)", file=sys.stderr)
    return idx


def no_wider_than(mode):
    """A context in which new files get no more permission for the group and others than the
    index of stat ``mode`` has (an update in place: a private index is never readable by others
    meanwhile; the user's own bits stay, the file must be written); nothing when ``mode`` is None."""
    import contextlib

    @contextlib.contextmanager
    def masked():
        mask = os.umask(0)
        os.umask(mask | (0o077 & ~mode.st_mode))
        try:
            yield
        finally:
            os.umask(mask)

    return contextlib.nullcontext() if mode is None else masked()


def keep_mode(paths, mode) -> None:
    """The files ``paths`` that replaced an index given its permissions (and, for root, its owner)."""
    for p in paths:
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            os.chown(p, mode.st_uid, mode.st_gid)
        os.chmod(p, mode.st_mode & 0o7777)


def reported(args, report, recorded: int, steps: dict, t0: float, layout: str, parts: int, lay: str) -> int:
    """The update's summary printed (``--json``: as JSON; nothing with ``--quiet``; ``args.in_place``:
    the index was updated in place); exit status 0."""
    in_place = args.in_place
    total = time.perf_counter() - t0
    summary = {"index": os.path.abspath(args.output), "base": os.path.abspath(args.index),
               "edges_recorded": recorded, **report.as_dict(), "total_seconds": round(total, 6),
               "layout": layout, "parts": parts, "step_seconds": {k: round(v, 6) for k, v in steps.items()}}
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    elif not args.quiet:
        where = "updated in place" if in_place else f"from {args.index}"
        print(f"index        {args.index if in_place else args.output} ({where}; {lay})\n"
              f"update       {report.summary()}\n"
              f"recorded     {recorded:,} inserted edge(s) since the build\n"
              f"total        {total * 1e3:.1f} ms ({', '.join(f'{k} {v:.2f} s' for k, v in steps.items())})",
              file=sys.stdout)
    return 0
