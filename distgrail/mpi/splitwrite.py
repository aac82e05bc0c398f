"""The split layout written across ranks: every rank writes the rows it holds into its own part
file, rank 0 the main file (:mod:`distgrail.indexfile.split` has the layout).

What each rank holds: rank 0 the datasets it assembled whole (the vertex map, the levels, the
post-order ranks; the masks when they meet there); every rank an even block of rows of the DAG's
edges and row pointers and of the forest (:meth:`AcrossRanks.dag_to_host`, ``assemble``), and its
own block of label dimensions (:attr:`AcrossRanks.own_labels`), which then never
goes to rank 0 when only rank 0 assembles the index; on a spread DAG every rank its own DAG rows
(``held_rows``). Rank 0 tells every rank the whole shape and stored type of each dataset in parts;
each rank writes its part (its blocks in parallel, the CRC-32 of every piece taken as they leave),
the pieces go to rank 0, and only when every rank has written its part are the parts renamed into
place and the main file written. A failure on any rank removes every part: nothing is left.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..indexfile.split import Rows
from .errors import run_shared

__all__ = ["write_split"]


def _shapes(idx) -> dict:
    """``{name: (shape, stored type)}`` of the datasets the index keeps in parts (rank 0)."""
    from ..indexfile.layout import stored_types
    from ..indexfile.split import SPLIT

    types = stored_types(idx.meta)
    return {k: (tuple(int(x) for x in np.shape(a)), np.dtype(types.get(k, a.dtype)).str)
            for k, a in idx.arrays.items() if k in SPLIT and int(np.prod(np.shape(a), dtype=np.int64))}


def _held(place, idx, shapes) -> dict:
    """``{name: (first row, rows)}`` this rank writes into its part."""
    held = {}
    if place.here:
        held = {k: (0, a) for k, a in idx.arrays.items() if k in shapes and isinstance(a, np.ndarray)}
    own = getattr(place, "own_labels", None)
    if own is not None and "labels/intervals" in shapes:
        held["labels/intervals"] = own
    held.update(getattr(place, "held_rows", None) or {})
    return {k: v for k, v in held.items() if k in shapes and len(v[1])}


def write_split(place, idx) -> None:
    """Collective over ``place.comm``: the index in the split layout at rank 0's output."""
    from ..indexfile.split import new_build_id, pending

    comm, here = place.comm, place.here
    t = time.perf_counter()
    marker = [None]  # rank 0: the write's marker, from before any part is in place until the main file is

    def lay_out():
        out, build = os.fspath(place.config.output), new_build_id()
        marker[0] = pending(out, build).__enter__()
        return out, build, _shapes(idx)

    try:
        head = run_shared(comm, "laying out the index's parts", lay_out if here else None)
        output, build, shapes = comm.bcast(head, root=0)
        _write(place, idx, comm, here, output, build, shapes, t, [marker[0].marker] if marker[0] else [])
    finally:
        if marker[0] is not None:
            marker[0].__exit__(None, None, None)


def _write(place, idx, comm, here, output, build, shapes, t, marker) -> None:
    from ..indexfile.layout import part_name, split_build
    from ..indexfile.split import PartFile, split_attrs, virtual_specs
    from ..indexfile.write import write_index_file
    from ..io.atomic import provisional

    R, me = comm.Get_size(), comm.Get_rank()
    held = _held(place, idx, shapes)
    part = [None]
    held_parts = []  # rank 0: every rank's part, provisional here until the main file lands

    def write_part():
        if not held:
            return {}
        nbytes = sum(int(np.size(a)) * np.dtype(shapes[k][1]).itemsize for k, (_, a) in held.items())
        part[0] = pf = PartFile(output, me, R, build, nbytes, hold=False)  # (rank 0 holds every part)
        for k, (lo, a) in held.items():
            pf.put(k, shapes[k][0], shapes[k][1], lo, a)
        return pf.pieces()

    def close():
        if part[0] is not None:
            part[0].close(True)

    try:
        got = run_shared(comm, f"writing part {me} of the index {output}", write_part)
        got = comm.gather(got, root=0)
        # every part provisional in rank 0's process from before the renames until the main file
        # lands (a signal there removes them; a rank's own registry could not know when rank 0's
        # rename happened)
        if here:
            held_parts.extend(part_name(output, r, build) for r, h in enumerate(got) if h)
            for p in held_parts:
                provisional(p, True)
        run_shared(comm, "putting the index's parts in place", close)

        def main():
            _visible(output, build, got)
            virtual = virtual_specs(output, {k: (s, np.dtype(d)) for k, (s, d) in shapes.items()}, got, build)
            rest = {k: (np.zeros(a.shape, a.dtype) if isinstance(a, Rows) else a)  # (Rows of no row: empty)
                    for k, a in idx.arrays.items() if k not in shapes}
            write_index_file(output, idx.meta, rest, virtual, split_attrs(build, R), settles=held_parts + marker)

        run_shared(comm, f"writing the index {output}", main if here else None)
    except BaseException:
        if split_build(output) != build:  # (the main file in place keeps its parts)
            if part[0] is not None:
                part[0].remove()
            for p in held_parts:
                provisional(p, False)
        raise
    place.own_timings["write_part"] = time.perf_counter() - t


def _visible(output, build, got) -> None:
    """Rank 0 sees every part the ranks wrote (a directory every rank shares), else the error."""
    import h5py

    from ..errors import OutputError
    from ..indexfile.layout import BUILD_ATTR, part_name

    for r, held in enumerate(got):
        p = part_name(output, r, build)
        ok = not held
        if held and os.path.isfile(p):
            try:
                with h5py.File(p, "r") as f:
                    bid = f.attrs.get(BUILD_ATTR)
                ok = (bid.decode() if isinstance(bid, bytes) else bid) == build
            except OSError:
                ok = False
        if not ok:
            raise OutputError(f"{output}: rank {r} wrote its part {os.path.basename(p)}, but rank 0 does not see it "
                              f"beside the index: under MPI the output must be in a directory every rank shares "
                              f"(the same path on every node), or use --layout single")
