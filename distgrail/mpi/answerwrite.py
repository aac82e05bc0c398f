"""A query's answers written by the ranks that answered them.

When each rank answered a contiguous block of rows (:func:`distgrail.mpi.query.query_rows_read_by_ranks`)
and the answer file has a fixed width per answer (``.npy`` of bools: one byte after the header;
plain text: ``0\\n`` or ``1\\n``, two bytes), no answer needs to reach rank 0: rank 0 makes the
file under its temporary name (:class:`~distgrail.io.atomic.atomic_path`) at its final size, each
rank writes its own rows at their offset (``os.pwrite`` from the host threads), and rank 0 renames
it once every rank is done. A failure on any rank removes the temporary, as a one-process write.

The ranks must see one file: where a rank does not find rank 0's temporary at its size (an
output in a directory not shared by every node), the answers go to rank 0 as before
(``Gatherv``) and rank 0 writes them all. The bytes are those of
:func:`distgrail.io.writers.write_answers`.
"""

from __future__ import annotations

import os

import numpy as np

from .collectives import gather_rows, offsets
from .errors import run_shared

__all__ = ["rank_writable", "write_by_ranks", "WRITE_PIECE_BYTES"]

#: the least bytes one host thread writes with one ``pwrite``
WRITE_PIECE_BYTES = 8 << 20


def rank_writable(path) -> bool:
    """Whether the answer file ``path`` has a fixed width per answer (``.npy``, or plain text not
    compressed), so that each rank can write its own rows: not ``-`` (stdout), not a table
    (``.tsv``/``.csv``/``.parquet``, which need the pairs) and not gzip."""
    from ..io.answers import compression_of
    from ..io.writers import TABLE_ANSWERS

    if not path or path == "-":
        return False
    low = os.fspath(path).lower()
    return low.endswith(".npy") or (not low.endswith(TABLE_ANSWERS) and compression_of(path) is None)


def _layout(path, k: int):
    """``(header bytes, bytes per answer)`` of the answer file ``path`` of ``k`` answers."""
    if os.fspath(path).lower().endswith(".npy"):
        import io

        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": np.dtype(bool).str, "fortran_order": False,
                                                    "shape": (int(k),)})
        return head.getvalue(), 1
    return b"", 2


def _encoded(answers, width: int) -> np.ndarray:
    a = np.asarray(answers, dtype=bool).view(np.uint8)
    if width == 1:
        return np.ascontiguousarray(a)
    out = np.empty(2 * a.size, dtype=np.uint8)  # (as write_answers' _zero_one_lines)
    out[0::2] = 48 + a
    out[1::2] = 10
    return out


def _pwrite_all(fd: int, data: np.ndarray, at: int) -> None:
    """``data`` (bytes) written at byte ``at`` of ``fd`` in pieces over the host threads."""
    import errno

    from ..arrays import _pieces, _run_pieces

    view = memoryview(np.ascontiguousarray(data).view(np.uint8))

    def put(a, b):
        while a < b:
            k = os.pwrite(fd, view[a:b], at + a)
            if k <= 0:
                raise OSError(errno.EIO, "write wrote nothing")
            a += k

    _run_pieces(put, _pieces(len(view), 1, WRITE_PIECE_BYTES))


def _write_rows(path, tmp: str, data: np.ndarray, at: int) -> None:
    """``data`` written at byte ``at`` of rank 0's temporary ``tmp``; a failure (a full disk) is
    the output error of the user's ``path``, as a one-process write's."""
    from ..io.atomic import output_error

    try:
        fd = os.open(tmp, os.O_WRONLY)
        try:
            _pwrite_all(fd, data, at)
        finally:
            os.close(fd)
    except OSError as e:
        raise output_error(path, e) from e


def write_by_ranks(comm, path, answers, counts) -> None:
    """Collective: the answers of ``k = sum(counts)`` pairs written to ``path``, rank ``r``'s
    ``answers`` being rows ``offsets(counts)[r] ..`` (module doc). Only ranks > 0 with rows to write
    check that they see rank 0's temporary; the file is complete and renamed when this returns."""
    from ..io.atomic import atomic_path

    me = comm.Get_rank()
    here = me == 0
    k = int(np.sum(counts))
    lo = int(offsets(counts)[me])
    head, width = _layout(path, k)
    size = len(head) + width * k
    ctx = [None]

    def create():
        from ..io.atomic import output_error

        c = atomic_path(path)
        tmp = c.__enter__()
        ctx[0] = c
        try:
            with open(tmp, "wb") as f:
                f.write(head)
                f.truncate(size)
        except OSError as e:  # (the output's error, as a one-process write's: exit status 2)
            raise output_error(path, e) from e
        return os.fspath(tmp)

    try:
        made = run_shared(comm, f"creating the answers {path}", create if here else None)
        tmp = comm.bcast(made, root=0)

        def sees() -> bool:  # (rank 0's temporary carries its pid: another node's directory lacks it)
            try:
                return os.stat(tmp).st_size == size
            except OSError:
                return False

        mine = len(answers) > 0
        shared = comm.allreduce(int(sees() or not mine), op=_min_op()) == 1
        if shared:
            run_shared(comm, f"writing answers {lo}..{lo + len(answers) - 1} to {path}",
                       _write_rows if mine else None, path, tmp, _encoded(answers, width), len(head) + width * lo)
        else:  # a directory this rank does not share: every answer through rank 0
            out = np.empty(k, dtype=bool) if here else None
            gather_rows(comm, np.ascontiguousarray(answers, dtype=bool), counts, out, 0)
            run_shared(comm, f"writing the answers {path}", _write_rows if here else None, path, tmp,
                       _encoded(out, width) if here else None, len(head))
        run_shared(comm, f"writing the answers {path}", (lambda: _close(ctx)) if here else None)
    except BaseException as e:
        if ctx[0] is not None:
            c, ctx[0] = ctx[0], None
            c.__exit__(type(e), e, e.__traceback__)
        raise


def _close(ctx) -> None:
    c, ctx[0] = ctx[0], None
    c.__exit__(None, None, None)


def _min_op():
    from mpi4py import MPI

    return MPI.MIN
