"""Command line questions without Python: ``distgrail query INDEX --pair U V`` (one question,
one line on stdout) and ``distgrail pairs INDEX -n N [--random|--reachable] [--seed S] -o P``
(seeded pairs in the format ``distgrail query`` reads); the help of the answer formats.

Kept apart from :mod:`distgrail.cli` for size; nothing here imports it (what the two share is in
:mod:`distgrail.cli_common`). Under MPI both run on rank 0 alone (``one_process``; see
:func:`distgrail.cli.main`).
"""

from __future__ import annotations

import json
import os
import sys
import time

from .cli_common import OneProcess, common_options

__all__ = ["add_query_args", "add_pairs_command", "with_pair", "answer_pair", "cmd_pairs", "prepare_beside",
           "mapped_ids_like", "INFO_QUIET_HELP"]

INFO_QUIET_HELP = ("print nothing: the exit status says whether the index opens and passes its checks (0), "
                   "or not (2, with the error)")
ANSWERS_HELP = ("answers, by extension: .txt or .answers one 0/1 per line (.txt.gz compressed); .npy (bool); "
                ".tsv/.csv (.gz ok) rows 'u v reachable' after that header line, the pair as the pairs file names "
                "it (node labels where the index has them) and 1 (reachable) or 0; .parquet (columns u, v, "
                "reachable: bool; needs pyarrow); any other extension is refused; '-' for stdout (default: not "
                "written, only the summary)")


def add_query_args(sp) -> None:
    """``query``'s ``--pair`` and ``-o``, then the common options (:func:`~distgrail.cli_common.common_options`)."""
    sp.add_argument("--pair", nargs=2, metavar=("U", "V"), action=OneProcess,
                    help="one question instead of a pairs file: prints 'U V reachable' or 'U V unreachable' "
                         "(node labels when the index has them)")
    sp.add_argument("-o", "--output", help=ANSWERS_HELP)
    sp.add_argument("--partition", choices=("auto", "on", "off"), default="auto",
                    help="under MPI: each rank holds only its block of the DAG's edges and undecided pairs are "
                         "searched across the ranks (auto: on a GPU, when one GPU cannot hold the index; one "
                         "process: off)")
    common_options(sp)


def with_pair(cmd_query):
    """``cmd_query`` that answers ``--pair`` itself."""

    def query(args):
        if args.pair is not None or args.pairs is None:
            return answer_pair(args)
        return cmd_query(args)

    query.__doc__ = cmd_query.__doc__
    return query


def _vertex(idx, what: str, tok: str):
    """The vertex ``--pair`` names by ``tok``: a string label as given, else an integer written
    as a pairs file writes one (ASCII digits, a leading minus sign; no ``+``, ``_`` or other
    digits, which ``int()`` takes: ``1_0`` would be 10); a negative id is then out of range, and
    one past int64 (None here, as :mod:`distgrail.io.pairs` reads it) is no vertex."""
    import re

    from .errors import QueryError

    kind = None if idx.node_labels is None else idx.node_labels.kind
    if kind == "str":
        return tok
    if not re.fullmatch(r"-?[0-9]+", tok):  # (ASCII digits only)
        raise QueryError(f"{what}: this index takes {'integer node labels' if kind else 'vertex ids'}, "
                         f"got {tok!r}")
    from .io.pairs import _int_label

    return _int_label(tok)  # (None past 19 digits, as a pairs file reads it: no vertex, said by _in_graph)


def _in_graph(idx, given, uv) -> None:
    """QueryError naming ``--pair U V`` as given when U or V is not a vertex of ``idx``."""
    import numpy as np

    from .errors import QueryError, id_range

    for x, tok in zip(uv, given):
        if x is None:  # (an integer past int64)
            x = tok
        if idx.node_labels is not None:
            if isinstance(x, str) and idx.node_labels.kind == "int" or \
                    not np.isin(np.asarray([x]), idx.node_labels.values).all():
                raise QueryError(f"--pair {given[0]} {given[1]}: node {x!r} is not in the graph")
        elif isinstance(x, str) or not 0 <= x < idx.n:
            raise QueryError(f"--pair {given[0]} {given[1]}: vertex id {id_range(idx.n, whose='the index')}, "
                             f"got {tok!r}")


def answer_pair(args) -> int:
    """``query INDEX --pair U V``: ``U V reachable`` or ``U V unreachable`` on stdout."""
    import distgrail
    from .errors import QueryError

    why = ("give a pairs file, or one question with --pair U V" if args.pair is None else
           f"give a pairs file ({args.pairs}) or --pair U V, not both" if args.pairs is not None else
           "--pair prints its answer on stdout; -o is for the answers of a pairs file" if args.output else None)
    if why:
        e = QueryError(why)
        e.arguments_only = True  # every rank of an MPI launch has it: printed by rank 0 alone (cli.main)
        raise e
    idx = distgrail.open_index(args.index)
    u, v = (_vertex(idx, w, tok) for w, tok in zip(("--pair U", "--pair V"), args.pair))
    _in_graph(idx, args.pair, (u, v))
    answers, _ = idx.query([u], [v], backend=args.backend)
    ok = bool(answers[0])
    if args.json:
        print(json.dumps({"u": u, "v": v, "reachable": ok}))
    else:
        print(f"{args.pair[0]} {args.pair[1]} {'reachable' if ok else 'unreachable'}")
    return 0


def cmd_pairs(args) -> int:
    """``pairs INDEX -n N [--random|--reachable] [--seed S] -o P``; ``-o -`` writes the pairs to
    stdout and the summary to stderr (as ``query -o -``)."""
    import distgrail
    from .io.samplepairs import check_pairs_output, check_seed, pair_tokens, sample_pairs, write_pairs

    out = args.output
    check_pairs_output(out)
    check_seed(args.seed)
    if out != "-":
        _not_the_index(out, args.index)
    from .progress import Steps

    # progress as index shows it (a line a step off a terminal, once the run passes a second)
    with Steps(not args.quiet, total=["open", "sample", "write"], desc="distgrail pairs") as steps:
        with steps.stage("open"):
            idx = distgrail.open_index(args.index)
        if out != "-":
            _not_the_index(out, args.index, parts=True)
        t = time.perf_counter()
        with steps.stage("sample"):
            s, d = sample_pairs(idx, args.n, args.kind, args.seed)
        with steps.stage("write"):
            write_pairs(*pair_tokens(idx, s, d), out)
    summary = {"output": out if out == "-" else os.path.abspath(out), "pairs": int(args.n), "kind": args.kind,
               "seed": args.seed, "seconds": round(time.perf_counter() - t, 6)}
    to = sys.stderr if out == "-" else sys.stdout
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True), file=to)
    elif not args.quiet:
        print(f"{'stdout' if out == '-' else out}: {args.n:,} {args.kind} pairs (seed {args.seed})", file=to)
    return 0


def _not_the_index(out, index, parts: bool = False) -> None:
    """Refuse an output that is the index (same path or inode), or with ``parts`` one of its part
    files (a split index's, beside it: overwritten, the index would be lost); check its directory."""
    from .errors import OutputError
    from .io.atomic import check_output, same_file

    if not parts:
        if os.path.abspath(out) == os.path.abspath(index) or same_file(out, index):
            raise OutputError(f"{out}: the output would overwrite the index {index}; choose another output path")
        check_output(out)
        return
    from .indexfile.layout import index_parts

    for p in index_parts(index):
        if os.path.abspath(out) == os.path.abspath(p) or same_file(out, p):
            raise OutputError(f"{out}: the output would overwrite the index {index} (its part file "
                              f"{os.path.basename(p)}); choose another output path")


def add_pairs_command(sub) -> None:
    sp = sub.add_parser("pairs", help="write seeded query pairs for an index")
    sp.add_argument("index", help="index file")
    sp.add_argument("-n", type=int, required=True, help="number of pairs")
    kind = sp.add_mutually_exclusive_group()
    kind.add_argument("--random", dest="kind", action="store_const", const="random",
                      help="u and v uniform over the vertices, independently (the default)")
    kind.add_argument("--reachable", dest="kind", action="store_const", const="reachable",
                      help="pairs known reachable, u != v: random sources (up to 1,024) among the vertices that "
                           "reach another, each with a random vertex its BFS over the index's DAG reaches (up "
                           "to 65,536 components)")
    sp.add_argument("--seed", type=int, default=0,
                    help="seed, 0..2^64-1 (default 0): same index and seed, same pairs")
    sp.add_argument("-o", "--output", required=True,
                    help="pairs file: .txt or .pairs 'u v' lines (node labels when the index has them; .txt.gz, "
                         ".pairs.gz compressed), .tsv or .csv 'u<tab>v' or 'u,v' lines (node labels with blanks; "
                         ".gz too), .npy (k, 2) ids, or '-' for stdout (the summary then on stderr); "
                         "any other extension is refused")
    common_options(sp, backend=False)
    sp.set_defaults(func=cmd_pairs, kind="random", one_process=True)


def query_under_mpi(args, comm, pairs):
    """``query`` under MPI: every rank opens the index (whole, or with ``--partition`` only its DAG
    rows: :mod:`distgrail.mpi.partition_query`), rank 0 reads the pairs and writes the answers;
    a (k, 2) ``.npy`` of ids is read by every rank, its own rows only (:func:`_own_rows`), and
    answers to a ``.npy`` or plain text file are then written by every rank, its own rows only
    (:mod:`distgrail.mpi.answerwrite`; the answers returned are None). Returns ``(answers, stats,
    pairs read)``: the answers and the pairs (a
    :class:`~distgrail.io.pairs.QueryPairs`) on rank 0, None on the others; the stats everywhere."""
    from .mpi.binding import bind_gpu
    from .mpi.partition_query import open_spread_index, spread_wanted

    dev = bind_gpu(comm, args.backend, share=args.share_gpus)
    rank0 = comm.Get_rank() == 0
    spread = spread_wanted(comm, args.partition, args.index, args.backend, dev)
    if spread:
        idx = open_spread_index(args.index, comm)
    else:
        from .mpi.opening import open_on_ranks

        idx = open_on_ranks(comm, args.index)  # (the values checked once, by rank 0)
    # on the CPU, the compiled path's first costs (numba, the packed records) beside rank 0's read
    prepared = None if spread else _cpu_prepare_beside(comm, idx, args.backend, pairs, args.output)
    try:
        return _query_under_mpi_prepared(args, comm, pairs, idx, spread, rank0, prepared)
    finally:  # (the prepare thread joined on every path, errors too: none left in numba at exit)
        if prepared is not None:
            prepared()


def _query_under_mpi_prepared(args, comm, pairs, idx, spread, rank0, prepared):
    """:func:`query_under_mpi` once the index is open and ``prepared`` (the wait of the CPU
    preparation, or None) started."""
    import numpy as np

    from .io.pairs import read_pairs_for
    from .io.writers import write_answers
    from .mpi.errors import run_shared

    rows = _own_rows(comm, args, idx, pairs, spread)
    if rows is not None:  # each rank reads and answers its own rows (and writes them, where it can)
        from .io.pairs import QueryPairs, mapped_as_rows, read_npy_rows
        from .mpi.query import query_rows_read_by_ranks

        from .mpi.answerwrite import rank_writable, write_by_ranks

        # a fixed-width answer file: each rank writes its own rows (no answer goes to rank 0)
        by_ranks = comm.bcast(rank_writable(args.output) if rank0 else None, root=0)
        deliver = (lambda ans, counts: write_by_ranks(comm, args.output, ans, counts)) if by_ranks else None
        spent = prepared() if prepared is not None else 0.0
        answers, stats = query_rows_read_by_ranks(idx, rows, lambda lo, hi: read_npy_rows(pairs, idx.n, lo, hi),
                                                  args.backend, comm, what=pairs, as_rows=mapped_as_rows(pairs),
                                                  deliver=deliver)
        if not by_ranks:
            run_shared(comm, f"writing the answers {args.output}", write_answers if args.output and rank0 else None,
                       answers, args.output)
        stats.partition = "whole, rows read by each rank"
        stats.prepare_seconds = max(stats.prepare_seconds, comm.allreduce(spent, op=_max()))
        none = np.zeros(0, np.int64)
        return answers, stats, QueryPairs(pairs, none, none) if rank0 else None
    q = run_shared(comm, f"reading the pairs {pairs}", read_pairs_for if rank0 else None, pairs, idx)
    spent = prepared() if prepared is not None else 0.0
    s, t = (q.sources, q.targets) if rank0 else (None, None)
    mapped = comm.bcast(rank0 and q.ids is not None, root=0)  # labels the read looked up: their ids go
    asked = q.ids if mapped and rank0 else (s, t)
    if spread:  # (answers on rank 0 only, which writes them: no broadcast to every rank)
        from .mpi.partition_query import query_spread

        answers, stats = query_spread(idx, *asked, args.backend, everywhere=False, ids=mapped)
    else:
        from .mpi.query import query_sharded

        answers, stats = query_sharded(idx, *asked, args.backend, comm, everywhere=False, ids=mapped)
    run_shared(comm, f"writing the answers {args.output}", write_answers if args.output and rank0 else None,
               answers, args.output, s, t)
    stats.partition = "spread" if spread else "whole"
    stats.prepare_seconds = max(stats.prepare_seconds, comm.allreduce(spent, op=_max()))
    return answers, stats, q


def _max():
    from mpi4py import MPI

    return MPI.MAX


def _cpu_prepare_beside(comm, idx, backend, pairs, output=None):
    """On a CPU backend, :func:`prepare_beside` for this rank's share of the batch (the pairs a
    ``.npy`` header says, else at least 16 bytes a pair of text, over the ranks), started now:
    each rank then pays numba's import and the packed records while rank 0 reads the pairs, not
    in its answer. ``output``: the answers file (a table of answers, or a (k, 3) ``.npy``, has rank
    0 read the pairs and send copies: no mapped ids to prepare for). Returns its wait (the seconds
    spent; 0 when it failed: the query makes them again and raises there), or None (a GPU, or a
    pairs file this rank does not see)."""
    from .gpu.backend import get_backend
    from .io.pairs import is_npy, npy_pairs_array, npy_rows
    from .io.writers import TABLE_ANSWERS

    try:
        if get_backend(backend).is_gpu or not os.path.isfile(pairs):
            return None
        share = (npy_rows(pairs) or os.path.getsize(pairs) // 16) // comm.Get_size()
        # (a mapped .npy's ids only where each rank reads its own rows: _own_rows' rule)
        own = (is_npy(pairs) and not (output and str(output).lower().endswith(TABLE_ANSWERS))
               and npy_pairs_array(pairs).shape[1] == 2)
    except Exception:  # noqa: BLE001 - an optimisation only: the query meets the error where it belongs
        return None
    wait = prepare_beside(idx, backend, cpu_pairs=share, cpu_ids=mapped_ids_like(pairs, idx) if own else None)
    return lambda: wait()[0]


def mapped_ids_like(pairs, idx):
    """The first two rows' sources of the ``.npy`` pairs file ``pairs`` as a mapped read gives
    them to the batch (read-only views of the file, int32 or int64: :func:`~distgrail.io.pairs.
    read_npy_rows`), for :func:`prepare_beside`'s ``cpu_ids``; None for any other file, an index
    of node labels, or a file that does not read (the query then says why)."""
    from .io.pairs import is_npy, npy_rows, read_npy_rows

    try:
        if idx.node_labels is not None or not is_npy(pairs) or npy_rows(pairs) < 2:
            return None
        return read_npy_rows(pairs, idx.n, 0, 2)[0]
    except Exception:  # noqa: BLE001 - an optimisation only
        return None


def _own_rows(comm, args, idx, pairs, spread):
    """Collective: the pair count when each rank can read its own rows of the pairs file (a (k, 2)
    ``.npy`` of vertex ids, an index without node labels held whole by every rank, answers written
    without the pairs), else None (rank 0 reads them all)."""
    from .io.writers import TABLE_ANSWERS
    from .io.pairs import is_npy, npy_pairs_array
    from .mpi.errors import run_shared

    ok = (not spread and idx.node_labels is None and is_npy(pairs)
          and not (args.output and str(args.output).lower().endswith(TABLE_ANSWERS)))
    if not comm.bcast(ok if comm.Get_rank() == 0 else None, root=0):
        return None
    shape = run_shared(comm, f"reading the pairs {pairs}", (lambda: npy_pairs_array(pairs).shape)
                       if comm.Get_rank() == 0 else None)
    shape = comm.bcast(shape, root=0)
    return int(shape[0]) if shape[1] == 2 else None  # (k, 3): rank 0 reads the expected answers too


def prepare_beside(idx, backend, pin_rows: bool | None = None, answers: int = 0, cpu_pairs: int = 0,
                   cpu_ids=None):
    """Start putting ``idx``'s query state on ``backend``'s device on a thread of its own; on a
    GPU, page-lock meanwhile, on a second thread, the staging of a large batch (``pin_rows`` not
    None: :func:`~distgrail.query.staging.pin_staging`, ``True`` for the rows of one (k, 2) array,
    ``False`` for two columns) and (``answers`` > 0) an array for that many answers
    (:func:`~distgrail.query.staging.pinned_answers`), then make the device scratch of a batch
    that large (:func:`~distgrail.query.answer.ready_scratch`). Returns a function that waits
    for all of it and gives the state's seconds (0 when it failed: the query then makes it again
    and raises the error where it belongs) and ``(answers, release)`` (None when none was made).
    On the CPU, for a batch of about ``cpu_pairs`` pairs, what its compiled path makes first
    (:func:`~distgrail.query.answer.prepare_cpu`: numba's import, the packed records, and the
    code for ids like ``cpu_ids``: :func:`mapped_ids_like`).
    The upload overlaps the read of the pairs (docs/benchmarks.md, session 23), the page-locking
    the upload (session 29)."""
    import threading

    from .gpu.backend import get_backend
    from .query.answer import prepare_cpu, ready_scratch
    from .query.staging import CHUNK_PAIRS, pin_staging, pinned_answers

    be = get_backend(backend)
    spent: list = []
    out: list = []

    def pin():
        try:
            with be.on_device():
                if pin_rows is not None:
                    pin_staging(rows=pin_rows, answer_slots=answers <= 0)
                if answers > 0:
                    out.append(pinned_answers(answers))
        except Exception:  # noqa: BLE001 - an optimisation only: the batch pins what it needs, and raises
            for _, release in out:  # (locked, then a failure on leaving the device: unlocked again)
                release()
            out.clear()

    def run():
        pins = None
        if be.is_gpu and (pin_rows is not None or answers > 0):
            pins = threading.Thread(target=pin, name="distgrail-pin", daemon=True)
            pins.start()
        try:
            with be.on_device():
                L, pool = idx._state(be, spent)
            if not be.is_gpu and cpu_pairs:  # numba's import and the packed records, beside the read
                t = time.perf_counter()
                prepare_cpu(L, cpu_pairs, ids=cpu_ids)
                spent.append(time.perf_counter() - t)
        except Exception:  # noqa: BLE001 - made again, and raised, by the query itself
            spent.clear()
            pool = None
        if answers > 0 and pool is not None:
            try:
                with be.on_device():
                    ready_scratch(pool, min(int(CHUNK_PAIRS), answers))
            except Exception:  # noqa: BLE001 - an optimisation only: the batch makes its scratch, and raises
                pass
        if pins is not None:
            pins.join()

    th = threading.Thread(target=run, name="distgrail-prepare", daemon=True)
    th.start()

    def wait():
        th.join()
        return sum(spent), (out[0] if out else None)

    return wait
