"""Errors shared by every rank: a failure on one rank becomes the same :class:`RankError` on all.

Every fallible step (choosing the backend, reading, condensing, labeling, allocating, writing,
answering) runs through :func:`run_shared`: its outcome is reduced over the ranks, and if any
rank failed, every rank raises :class:`RankError` naming the lowest failing rank and the original
message; when that rank's error was one of :mod:`distgrail.errors`' kinds (a malformed graph or
index, bad query pairs, a backend that cannot run, an unwritable output), the RankError is of
that kind too (:class:`GraphFormatRankError`, ...). Nothing is left half-written and no rank waits forever. An interrupt ends the job
(:func:`end_job`, from :func:`distgrail.cli.main`); other errors outside these steps (a bug)
should too: launch with ``python -m mpi4py -m distgrail ...``, which calls ``MPI_Abort`` on an
uncaught exception.
"""

from __future__ import annotations

from ..errors import BackendError, DistGrailError, GraphFormatError, IndexFormatError, OutputError, QueryError

__all__ = ["RankError", "QueryRankError", "GraphFormatRankError", "IndexFormatRankError", "BackendRankError",
           "OutputRankError", "share_outcome", "run_shared", "own_comm", "mpi", "end_job", "arguments_agreed",
           "refuse_arguments", "ARGUMENTS_WAIT", "ArgumentsRefused", "error_everywhere", "ERROR_WAIT"]


class RankError(DistGrailError):
    """An error raised on one rank of a distributed run and re-raised on every rank.

    Attributes
    ----------
    rank : int         the (lowest) rank that failed
    step : str         what that rank was doing
    failed_ranks : list of int   every rank that failed in that step
    original_type : str          class name of the original exception
    bug : bool                   the original was no error distgrail raises on purpose (nor
                                 MemoryError): the command line ends with status 1 and its traceback
    """

    def __init__(self, message, rank, step, failed_ranks, original_type, comm_rank, bug: bool = False):
        super().__init__(message)
        self.rank = rank
        self.step = step
        self.failed_ranks = failed_ranks
        self.original_type = original_type
        self.bug = bug
        #: the rank of the process that raised this copy (the CLI prints on rank 0 only)
        self.comm_rank = comm_rank


class QueryRankError(RankError, QueryError):
    """The :class:`RankError` of a step whose failing rank raised :class:`~distgrail.errors.QueryError`
    (bad pairs: ``Index.query(..., comm=comm)``): on every rank it is a QueryError too, so that
    ``except QueryError`` catches it as it does in one process, and a RankError, so that the
    command line and the server treat it as every rank's error."""


class GraphFormatRankError(RankError, GraphFormatError):
    """The :class:`RankError` of a failing rank's :class:`~distgrail.errors.GraphFormatError`
    (a malformed graph), as :class:`QueryRankError` is a QueryError."""


class IndexFormatRankError(RankError, IndexFormatError):
    """The :class:`RankError` of a failing rank's :class:`~distgrail.errors.IndexFormatError`."""


class BackendRankError(RankError, BackendError):
    """The :class:`RankError` of a failing rank's :class:`~distgrail.errors.BackendError`."""


class OutputRankError(RankError, OutputError):
    """The :class:`RankError` of a failing rank's :class:`~distgrail.errors.OutputError`."""


#: (the original's class, the RankError every rank raises for it), the first that the failing
#: rank's error is an instance of
_KINDS = ((QueryError, QueryRankError), (GraphFormatError, GraphFormatRankError),
          (IndexFormatError, IndexFormatRankError), (BackendError, BackendRankError), (OutputError, OutputRankError))



def mpi():
    from mpi4py import MPI

    return MPI


def own_comm(comm):
    """``(comm, owned)``: ``comm``, or a clone of COMM_WORLD (to be freed) when it is None."""
    if comm is not None:
        if not hasattr(comm, "Get_rank") or not hasattr(comm, "Bcast"):
            raise DistGrailError(f"comm must be an mpi4py communicator, got {comm!r}")
        return comm, False
    return mpi().COMM_WORLD.Clone(), True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, DistGrailError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def share_outcome(comm, step: str, error: BaseException | None) -> None:
    """Collective: raise :class:`RankError` on every rank if ``error`` is set on any rank.

    The lowest failing rank broadcasts its message and its own ``step`` (ranks may word the same
    step differently: "reading DAG rows 12..39", "answering queries 134..266"); the others learn
    which ranks failed.
    """
    size = comm.Get_size()
    me = comm.Get_rank()
    # 0: fine, 1: failed here, 2: a RankError (with its message); one that every rank raised
    # already, the same (shared by a step inside this one on this communicator) is raised again
    # as it is, not wrapped in a second "rank r, step:"
    shared = isinstance(error, RankError)
    state = comm.allgather((0 if error is None else 2 if shared else 1, str(error) if shared else None))
    if all(k == 2 for k, _ in state) and len({m for _, m in state}) == 1:
        raise error
    failed = [k != 0 for k, _ in state]
    if not any(failed):
        return
    ranks = [r for r in range(size) if failed[r]]
    root = ranks[0]
    bug = error is not None and not isinstance(error, (DistGrailError, MemoryError))
    kind = next((k for k, (base, _) in enumerate(_KINDS) if isinstance(error, base)), -1)
    info = comm.bcast((_describe(error), type(error).__name__, step, bug, kind) if me == root else None, root=root)
    msg, typ, step, bug, kind = info
    others = f" (and on rank{'s' if len(ranks) > 2 else ''} {', '.join(map(str, ranks[1:]))})" \
        if len(ranks) > 1 else ""
    cls = _KINDS[kind][1] if kind >= 0 else RankError  # (except GraphFormatError etc. catch it as in one process)
    err = cls(f"rank {root}{others}, {step}: {msg}", root, step, ranks, typ, me, bug)
    if me == root:
        raise err from error
    raise err from None


def run_shared(comm, step: str, fn=None, *args, **kwargs):
    """Collective: call ``fn(*args, **kwargs)`` (when ``fn`` is not None) and share any failure.

    Every rank must call this, including ranks with nothing to do (``fn=None``); it returns
    ``fn``'s result, or None. An exception on any rank becomes a :class:`RankError` on all (a
    :class:`QueryRankError` when the lowest failing rank's was a QueryError).
    """
    out, error = None, None
    if fn is not None:
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # shared below; BaseException (interrupts) ends the job instead
            error = e
    share_outcome(comm, step, error)
    return out


#: seconds a rank > 0 that was interrupted waits for rank 0's abort (hydra and srun send SIGINT to
#: every rank: the message is then printed once, by rank 0) before it ends the job itself
END_JOB_GRACE = 1.0


def end_job(comm, message: str | None, status: int) -> None:
    """End the whole job at once with ``status`` (``MPI_Abort``) after a failure that the other
    ranks cannot share (an interrupt: they may be waiting inside a collective, where Python runs
    no signal handler). ``message`` is printed first, by rank 0 at once; a rank > 0 prints its
    own (with ``rank r``) only when rank 0 has not ended the job within :data:`END_JOB_GRACE`.
    What this process was writing is already removed (:mod:`distgrail.io.atomic`). Does not return."""
    import os
    import sys
    import time

    me = comm.Get_rank()
    if me:
        try:
            time.sleep(END_JOB_GRACE)
        except BaseException:  # noqa: BLE001 - a second interrupt: end the job now
            pass
    if message:
        print(message if not me else message.replace("distgrail: ", f"distgrail: rank {me}, ", 1), file=sys.stderr)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - (stdout gone) the abort still happens
            pass
    comm.Abort(status)
    os._exit(status)  # pragma: no cover - Abort does not return


#: seconds a rank with an error of its own, outside a shared step, waits for every other rank to
#: have one too (:func:`error_everywhere`) before it ends the job
ERROR_WAIT = 10.0


def error_everywhere(comm, wait: float = ERROR_WAIT) -> bool:
    """Whether every rank of ``comm`` (the command line's error communicator, used for nothing else,
    so no other collective can meet this one) reached this call within ``wait`` seconds: an error
    every rank raised alike outside a shared step (a check each makes of the same arguments),
    which ends each cleanly. Else this rank's error is its own and the others may wait for it in a
    collective: the caller ends the job (:func:`end_job`). A non-blocking barrier, polled."""
    import time

    req = comm.Ibarrier()
    end = time.monotonic() + wait
    while not req.Test():
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


#: seconds a rank whose command line was refused waits for the others to say whether theirs
#: parsed (:func:`refuse_arguments`) before it ends alone with its own line
ARGUMENTS_WAIT = 60.0


def arguments_agreed(comm) -> None:
    """Collective, the first of every rank on ``comm`` (COMM_WORLD) whose command line parsed,
    beside :func:`refuse_arguments` on the ranks whose did not: every rank's refusal (None: none)
    gathered. When any rank's was refused, rank 0 prints the first refused rank's line (naming the
    rank) and every rank raises :class:`ArgumentsRefused` (status 2). Returns when every rank's
    command line parsed."""
    _ended_if_refused(comm, comm.allgather(None))


def refuse_arguments(message: str, printed: bool) -> None:
    """This rank's command line was refused (``message``, its ``distgrail: error: ...`` line;
    ``printed``: already on stderr) under a launcher of several ranks: MPI started, and every
    rank's outcome gathered with the others' first collective (:func:`arguments_agreed`). A
    command line every rank has alike is then said once (rank 0) and every rank ends with status
    2, no ``MPI_Abort``; a rank alone with its line (``mpiexec``'s ``:`` form) has it said by rank
    0 (``rank r``) and the job ends with status 2, where before the other ranks waited for it in
    MPI's set-up. If the others do not answer within :data:`ARGUMENTS_WAIT` seconds (they run
    without MPI), this process says its line itself and ends. Raises :class:`ArgumentsRefused`."""
    import os
    import sys
    import threading

    def alone():
        if not printed:
            print(message, file=sys.stderr, flush=True)
        os._exit(2)

    watchdog = threading.Timer(ARGUMENTS_WAIT, alone)
    watchdog.daemon = True
    watchdog.start()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    errors = comm.allgather((message, printed))
    watchdog.cancel()
    _ended_if_refused(comm, errors)


class ArgumentsRefused(SystemExit):
    """Status 2 on every rank: some rank's command line was refused, and said so once
    (:func:`refuse_arguments`). A SystemExit: the process ends there, MPI finalized at its exit."""


def _ended_if_refused(comm, errors) -> None:
    """Where any rank's command line was refused (``errors``: per rank None or ``(line, printed)``),
    rank 0 says the first refused one's line unless it printed it itself, and every rank raises
    :class:`ArgumentsRefused`."""
    import sys

    refused = [r for r, e in enumerate(errors) if e is not None]
    if not refused:
        return
    r = refused[0]
    line, printed = errors[r]
    if comm.Get_rank() == 0 and not (r == 0 and printed):
        print(line if r == 0 else line.replace("distgrail: ", f"distgrail: rank {r}, ", 1), file=sys.stderr, flush=True)
    raise ArgumentsRefused(2)
