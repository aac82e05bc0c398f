"""Command line: ``distgrail index | query | pairs | serve | info | generate | convert``.

Run it under MPI with ``mpirun -n N python -m mpi4py -m distgrail ...`` (see ``launch/``): an
uncaught error on any rank then aborts the whole job instead of leaving the others hanging;
errors that every rank shares end every rank with exit status 2, printed once, without an abort.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import time

from ._version import __version__
from .cli_common import (comm_of, common_options, input_digest, outputs_ok, outputs_ok_everywhere, process_age,
                         resolve_bundled)
from .cli_exit import quick_exit  # noqa: F401 - the end of python -m distgrail (tests import it here)
from .cli_pairs import mapped_ids_like, prepare_beside as _prepare_beside  # (tests replace the second here)
from .errors import DistGrailError

__all__ = ["main"]


def _not_rank0(args) -> bool:
    """True on ranks > 0 under MPI: the one-process commands (info, generate, convert) run on rank 0."""
    comm = comm_of(args)
    return comm is not None and comm.Get_rank() != 0


def _end_mpi_cleanly(comm) -> None:
    """After an error that every rank has (a :class:`RankError`): end MPI here, so that
    ``python -m mpi4py`` does not turn the exit status 2 into ``MPI_Abort`` (MPICH then
    leaves a segment in /dev/shm). Unexpected errors still reach mpi4py and abort the job."""
    from mpi4py import MPI

    sys.stdout.flush()
    sys.stderr.flush()
    comm.Barrier()  # rank 0 has printed the message
    comm.Free()
    if not MPI.Is_finalized():
        MPI.Finalize()


def _status_everywhere(args, status) -> int:
    """Under MPI, a command every rank ran to its end: every rank returns the highest status any
    had (3: answers differ from the expected ones, on rank 0; 141: its stdout gone), and a non-zero
    one ends MPI here first (else ``python -m mpi4py`` turns it into ``MPI_Abort``, and MPICH
    leaves a segment in /dev/shm)."""
    comm = getattr(args, "mpi_comm", None)
    status = int(status or 0)
    if comm is None:
        return status
    from mpi4py import MPI

    status = comm.allreduce(status, op=MPI.MAX)
    if status:
        _end_mpi_cleanly(comm)
    return status


def _rank(comm) -> int:
    return comm.Get_rank() if comm is not None else 0


def _say(args, comm, text):
    if not args.quiet and _rank(comm) == 0:
        print(text, file=sys.stderr, flush=True)


def _emit(args, comm, summary: dict, human: str):
    if _rank(comm) != 0:
        return
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    elif not args.quiet:
        print(human)


def _preflight(args, comm, graph) -> None:
    """``distgrail index``'s preflight (:func:`~distgrail.preflight.preflight_index` of its
    arguments). Under MPI (``comm``) every rank checks the dims and the host memory alike, the
    outcome shared (one message); the GPU check needs one process (the ranks' GPUs are bound later)."""
    from .preflight import preflight_index

    if comm is None:
        preflight_index(graph, args.format, args.num_vertices, args.dims, args.supports, args.backend)
        return
    from .mpi.errors import run_shared

    run_shared(comm, "checking the arguments", preflight_index, graph, args.format, args.num_vertices, args.dims,
               args.supports, "cpu")


def cmd_index(args):
    import distgrail

    from .gpu.memory import PoolPeak
    comm = comm_of(args)
    path = resolve_bundled(args.graph, "graph", comm)
    outputs_ok_everywhere(args, comm, path)
    # the file's hash starts here, beside the slow start-up (the preflight imports CuPy); the reader
    # takes it over (digest=), else the block's end cancels it
    with input_digest(args, comm, path) as digest:
        _preflight(args, comm, path)  # before any parsing
        if comm is not None:
            from .mpi.binding import bind_gpu

            bind_gpu(comm, args.backend, share=args.share_gpus)
        t, age = time.perf_counter(), process_age()
        # under MPI the full Index on rank 0 only: the other ranks label and are done
        with PoolPeak(args.json and args.backend != "cpu") as peak:
            idx = distgrail.build_index(path, dims=args.dims, seed=args.seed, parent_rule=args.parent_rule,
                                        backend=args.backend, fmt=args.format, num_vertices=args.num_vertices,
                                        output=args.output, comm=comm, supports=args.supports,
                                        progress=not args.quiet and _rank(comm) == 0, full_index_on="root",
                                        partition=args.partition, layout=args.layout, digest=digest)
    total = time.perf_counter() - t
    ages = comm.gather(age, root=0) if comm is not None else [age]  # (every rank is here: the build ended)
    if idx is None:  # ranks > 0 under MPI
        return 0
    known = [a for a in ages if a is not None]
    m = idx.meta
    summary = {"index": os.path.abspath(args.output), "n_vertices": m["n_vertices"],
               "n_components": m["n_components"], "n_dag_edges": m["n_dag_edges"], "n_levels": m["n_levels"],
               "dims": m["dims"], "seed": m["seed"], "parent_rule": m["parent_rule"], "backend": m.get("backend"),
               "phases_backend": m.get("phases_backend", m.get("backend")),  # (a deep DAG's, on the host)
               "index_write": getattr(idx, "index_write", None),
               "ranks": comm.Get_size() if comm is not None else 1,
               "seconds": {k: round(v, 6) for k, v in idx.timings.items()}, "total_seconds": round(total, 6),
               "gpu_pool_peak_bytes": peak.report(),
               # process start to the build's clock: rank 0's and the slowest rank's (None: no /proc)
               "startup_seconds": {"rank0": None if ages[0] is None else round(ages[0], 3),
                                   "slowest": round(max(known), 3) if known else None}}
    lines = [f"index        {args.output}",
             f"graph        {m['source_name']}: {m['n_vertices']:,} vertices, {m['n_components']:,} components, "
             f"{m['n_dag_edges']:,} DAG edges, {m['n_levels']:,} levels",
             f"labels       d={m['dims']}, seed={m['seed']}, parent rule {m['parent_rule']}, "
             f"backend {summary['backend']}"
             f"{'' if summary['phases_backend'] == summary['backend'] else ' (phases 1-5 on the host: a deep DAG)'}, "
             f"{summary['ranks']} rank(s)"]
    lines += [f"  {k:<22}{v * 1e3:10.1f} ms" for k, v in idx.timings.items()]
    lines.append(f"total        {total * 1e3:.1f} ms")
    _emit(args, comm, summary, "\n".join(lines))
    return 0


def cmd_query(args):
    import distgrail
    from .gpu.backend import get_backend
    from .cli_output import check_expected
    from .io.pairs import read_pairs_for
    from .io.writers import write_answers

    comm = comm_of(args)
    pairs = resolve_bundled(args.pairs, "pairs", comm)
    outputs_ok_everywhere(args, comm, args.index, pairs)
    if comm is not None:  # every rank opens the index; rank 0 reads the pairs and writes the answers
        from .cli_pairs import query_under_mpi

        answers, stats, q = query_under_mpi(args, comm, pairs)
    else:
        idx = distgrail.open_index(args.index)
        from .io.pairs import mapped_as_rows, npy_rows
        from .query.staging import DIRECT_PAIRS

        big = os.path.isfile(pairs) and os.path.getsize(pairs) > 16 * DIRECT_PAIRS  # (at least 16 bytes a pair)
        # the index to the device, and a large batch's staging page-locked for the layout the read
        # gives, while the pairs are read
        # (an index of node labels maps the pairs to ids: new columns, not the file's rows)
        rows = idx.node_labels is None and mapped_as_rows(pairs)
        # a large .npy of ids: its answers come down into a page-locked array made beside the read
        expect = npy_rows(pairs) if big and idx.node_labels is None else 0
        # (the pairs a CPU batch will hold: a .npy's header says; else at least 16 bytes a pair of text)
        cpu_pairs = npy_rows(pairs) or (os.path.getsize(pairs) // 16 if os.path.isfile(pairs) else 0)
        prepared = _prepare_beside(idx, args.backend, rows if big else None, expect, cpu_pairs,
                                   mapped_ids_like(pairs, idx) if cpu_pairs else None)
        locked = None
        try:
            try:
                q = read_pairs_for(pairs, idx, mapped=True)  # a .npy's columns go up from the mapped file
            finally:
                t_wait = time.perf_counter()
                spent, locked = prepared()
                waited = time.perf_counter() - t_wait
            out = locked[0] if locked is not None else None
            if idx.node_labels is None:
                # the read checked every id against the index (a bad one named by file and line): the
                # batch goes to the answer without check_pairs' second pass over its ids
                answers, stats = idx._query_local(q.sources, q.targets, get_backend(args.backend),
                                                  out=out if out is not None and out.size == q.sources.size else None)
            elif q.ids is not None:  # labels the read mapped to ids already (and checked)
                answers, stats = idx._query_local(*q.ids, get_backend(args.backend))
            else:  # labels: the index maps them to ids
                answers, stats = idx.query(q.sources, q.targets, backend=args.backend)
            stats.prepare_seconds = stats.prepare_seconds or spent
            if args.output:
                write_answers(answers, args.output, q.sources, q.targets)
        finally:  # (also when the read or the batch failed) the answers' pages unlocked; the array
            if locked is not None:  # itself stays for the checks below
                locked[1]()
    summary = stats.as_dict()
    if comm is None:  # how long the answer waited for the device after the pairs were read
        summary["prepare_wait_seconds"] = round(waited, 6)
    if getattr(stats, "mpi_seconds", None):
        summary["mpi_seconds"], summary["partition"] = stats.mpi_seconds, stats.partition
        if getattr(stats, "spread", None):  # per rank: DAG edges held, state bytes, what it exchanged
            summary["spread_ranks"] = stats.spread
    summary["index"] = os.path.abspath(args.index)
    summary["pairs"] = os.path.abspath(pairs)
    human, status = check_expected(q, answers, summary, stats.summary(), _rank(comm) == 0)
    if comm is not None:
        status = comm.bcast(status, root=0)  # every rank ends with rank 0's status
    if args.output == "-":
        summary["answers"] = "-"
        if _rank(comm) == 0 and not args.quiet:  # stdout holds the answers: the summary goes to stderr
            print(json.dumps(summary, indent=2, sort_keys=True) if args.json else human, file=sys.stderr)
        return status
    if args.output:
        summary["answers"] = os.path.abspath(args.output)
    else:
        summary["answers"] = None
        human += "\nanswers      not written (give -o FILE, or -o - for stdout)"
    _emit(args, comm, summary, human)
    return status


def cmd_generate(args):
    from .io.generate import generate_command, generate_options, output_format

    if not _not_rank0(args):
        generate_options(args)  # (an option for another kind is refused, not ignored)
        output_format(args.output, args.format)  # a name that picks no format is refused first
        outputs_ok(args)
        _emit(args, None, *generate_command(args))
    return 0


def cmd_convert(args):
    """Read, condense and write a binary graph file; on the GPU when there is one (the arrays stay
    on the device until written), else on the CPU: the same file, byte for byte."""
    import h5py

    from .stages.phases import condense_on, notice as _notice, read_on
    from .gpu.backend import get_backend
    from .io.binary import write_binary_graph

    if _not_rank0(args):
        return 0
    path = resolve_bundled(args.graph, "graph")
    index = args.layout is not None or (os.path.isfile(path) and _is_index(path))  # (a FIFO: read once, as a graph)
    outputs_ok(args, path, kind="index" if index else "graph")  # (an index is written as an index file)
    if args.parts is not None and args.layout == "single":
        raise DistGrailError(f"--parts {args.parts} with --layout single: one index file has no part files "
                             f"(--parts is for --layout split)")
    if index:
        return _convert_index(args, path)
    if args.parts is not None:
        raise DistGrailError(f"--parts {args.parts}: {path} is converted to one graph file (--parts is for an index "
                             f"converted with --layout split)")
    from .progress import Steps

    be = get_backend(args.backend)
    t = time.perf_counter()
    # progress as index shows it (a line a step off a terminal, once the run passes a second)
    with Steps(not args.quiet, total=["read", "condense", "write"]) as steps:
        if args.no_condense:
            steps.skip("condense")
        with steps.stage("read"):
            g = read_on(be, path, args.num_vertices, args.format)
        tr = time.perf_counter() - t
        dag = None
        if not args.no_condense:
            with steps.stage("condense"):
                dag = condense_on(be, g, keep_edges=True)  # (the edges are written below)
                _sync(be)
        tc = time.perf_counter() - t - tr
        with steps.stage("write"):
            write_binary_graph(g, args.output, dag=dag, notify=_notice)  # (over a split index: its parts go)
        tw = time.perf_counter() - t - tr - tc
    with h5py.File(args.output, "r") as f:  # the edges the file holds: repeated ones merged
        m = int(f.attrs["m"])
    summary = {"output": os.path.abspath(args.output), "n": g.n, "m": m, "edges_read": int(g.m),
               "read_seconds": round(tr, 6), "condense_seconds": round(tc, 6), "write_seconds": round(tw, 6),
               "n_components": None if dag is None else dag.C, "backend": be.name,
               "parser": g.meta.get("parser", "cpu")}
    cond = "not stored" if dag is None else f"{dag.C:,} components, condense {tc:.2f} s"
    read = f" ({g.m:,} read, repeats merged)" if g.m != m else ""
    _emit(args, None, summary, f"{args.output}: {g.n:,} vertices, {m:,} edges{read}, condensation {cond} "
                               f"(read {tr:.2f} s, write {tw:.2f} s, {be.name})")
    return 0


def _is_index(path, strict: bool = False) -> bool:
    """Whether ``path`` is a distgrail index file (its root attribute ``format``). ``strict``
    (``--layout`` given: an index is meant): no file an index could be in (missing, a directory, a
    FIFO) is an IndexFormatError saying which, as ``info`` says it, and an HDF5 file that HDF5
    cannot open (truncated) a damaged index; otherwise each of these is no index (the graph reader
    then says what it is)."""
    import h5py

    from .errors import IndexFormatError
    from .indexfile import FORMAT
    from .indexfile.read import check_index_path

    if strict:
        check_index_path(path)
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89HDF\r\n\x1a\n":
                return False
    except OSError as e:
        if strict:
            raise IndexFormatError(f"{path}: the index file cannot be read ({e.strerror})") from None
        return False
    try:
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("format")
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        if strict:
            raise IndexFormatError(f"{path}: damaged index: HDF5 cannot open the file ({e})") from None
        return False
    return (fmt.decode(errors="replace") if isinstance(fmt, bytes) else fmt) == FORMAT


def _convert_index(args, path):
    """``convert INDEX --layout single|split [--parts N] -o OUT``: the index read and checked,
    written in the other layout (the same arrays and checksums)."""
    import distgrail
    from .indexfile.split import check_parts, write_split_index

    if not _is_index(path, strict=args.layout is not None):
        raise DistGrailError(f"{path}: --layout converts index files, and this is not a distgrail index (a graph is "
                             f"converted without --layout)")
    graph_only = [o for o, given in (("--format", args.format != "auto"),
                                     ("--num-vertices", args.num_vertices is not None),
                                     ("--no-condense", args.no_condense), ("--backend", args.backend != "auto")) if given]
    if graph_only:  # (refused, not ignored: an index is read and written as it is)
        one = len(graph_only) == 1
        named = graph_only[0] if one else f"{', '.join(graph_only[:-1])} and {graph_only[-1]}"
        raise DistGrailError(f"{path}: an index file: {named} {'is' if one else 'are'} for a graph converted to a "
                             f"binary graph file, not an index converted to another layout (convert INDEX takes "
                             f"--layout, --parts and -o); leave {'it' if one else 'them'} out")
    if args.layout is None:
        raise DistGrailError(f"{path}: an index file: give --layout single (one file) or --layout split")
    parts = check_parts(args.parts if args.parts is not None else DEFAULT_PARTS)
    t = time.perf_counter()
    idx = distgrail.open_index(path)
    tr = time.perf_counter() - t
    if args.layout == "single":
        idx.save(args.output)
    else:
        parts = write_split_index(args.output, idx.meta, idx.arrays, parts=parts)  # (at most the rows)
    tw = time.perf_counter() - t - tr
    summary = {"output": os.path.abspath(args.output), "layout": args.layout, "read_seconds": round(tr, 6),
               "write_seconds": round(tw, 6), "parts": parts if args.layout == "split" else 0}
    asked = args.parts if args.parts is not None else DEFAULT_PARTS
    lay = (f"split layout, {parts} part file{'s' if parts != 1 else ''}" + (
        f" (not the {asked} {'asked' if args.parts is not None else 'by default'}: each part holds at least one row of the largest dataset, which has {parts} "
        f"row{'s' if parts != 1 else ''})"
        if parts < asked else "")) if args.layout == "split" else "single layout"
    _emit(args, None, summary, f"{args.output}: the index {path} in the {lay} (read {tr:.2f} s, write {tw:.2f} s)")
    return 0


#: part files of ``convert INDEX --layout split`` unless ``--parts`` says
DEFAULT_PARTS = 2


def _sync(be):
    if be.is_gpu:
        be.xp.cuda.Device(be.device).synchronize()


def build_parser() -> argparse.ArgumentParser:
    from .gpu.backend import BACKENDS
    from .config import LAYOUTS
    from .stages.forest import PARENT_RULES
    from .stages.supports import supports_arg
    from .io.generate import KINDS
    from .io.formats import FORMATS, OUTPUT_FORMATS
    from .cli_pairs import INFO_QUIET_HELP, add_pairs_command, add_query_args, with_pair
    from .server.command import add_serve_command, add_server_args, with_server
    from .cli_update import add_update_command
    from .cli_parser import ContractParser
    from .cli_output import cmd_info

    p = ContractParser(prog="distgrail", description="GRAIL reachability index on GPUs across MPI ranks.")
    p.add_argument("--version", action="version", version=f"distgrail {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    sp = sub.add_parser("index", help="build an index from a graph file")
    sp.add_argument("graph", help="graph file (.gra, edge list, .mtx, .h5, .parquet, .arrow), or 'bundled'")
    sp.add_argument("-o", "--output", required=True, help="index file to write (HDF5)")
    sp.add_argument("--dims", type=int, default=5, help="label dimensions d (default 5)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the sibling-order hash (default 0)")
    sp.add_argument("--parent-rule", choices=PARENT_RULES, default="max-level", help="phase-1 parent rule (default max-level; dfs: "
                    "the paper's rule by path counts)")
    sp.add_argument("--supports", type=supports_arg, default="auto",
                    help="support vertices K whose reach masks prove pairs without search (default auto: 10 x the "
                         "condensed DAG's mean out-degree, rounded up to a power of two in 64..1024; 0 = plain GRAIL)")
    sp.add_argument("--format", choices=FORMATS, default="auto", help="graph file format (default auto)")
    sp.add_argument("--num-vertices", type=int, default=None, help="edge lists and edge tables: number of vertices")
    sp.add_argument("--partition", choices=("auto", "on", "off"), default="auto", help="under MPI: edges split over "
                    "the ranks, none holds all (auto, on GPUs: when one GPU cannot hold the graph, or it is plain text the "
                    "ranks parse in byte ranges; one process: off)")
    sp.add_argument("--layout", choices=LAYOUTS, default="auto", help="single: one index file; split: a main file "
                    "and a part file per rank (INDEX.<build>.partR, beside it) that each rank writes in parallel, opened as one "
                    "index ('distgrail convert INDEX --layout single' merges them); auto (default): split when several "
                    "MPI ranks build, else single")
    common_options(sp)
    sp.set_defaults(func=cmd_index)

    sp = sub.add_parser("query", help="answer query pairs with an index")
    sp.add_argument("index", nargs="?", help="index file (none with --server: its one positional is the pairs file)")
    sp.add_argument("pairs", nargs="?", help="pairs file: 'u v' per line (.gz ok), split at tabs in a .tsv and at "
                    "commas in a .csv (node labels with blanks), or .npy (k, 2); or 'bundled'; a "
                    "third column 0/1 ('u v answer', .npy (k, 3)) is the expected answer: the pairs whose answer "
                    "differs are counted and the first listed, and the exit status is 3 when any differ (so does an "
                    "answers file of -o .tsv/.csv: its header 'u v reachable' skipped)")
    add_query_args(sp)  # --pair U V, -o (answers by extension), the common options
    add_server_args(sp)  # --server URL: a running `distgrail serve` answers (distgrail/server/)
    sp.set_defaults(func=with_server(with_pair(cmd_query)))
    add_pairs_command(sub)
    add_serve_command(sub)
    add_update_command(sub)

    sp = sub.add_parser("info", help="describe an index file")
    sp.add_argument("index", help="index file")
    common_options(sp, backend=False, quiet=INFO_QUIET_HELP)
    sp.set_defaults(func=cmd_info, one_process=True)

    sp = sub.add_parser("generate", help="write a generated test graph")
    sp.add_argument("kind", choices=KINDS + ("rmat",))
    sp.add_argument("-n", type=int, default=None, help="vertices (paper, scale-free, layered)")
    sp.add_argument("--degree", type=float, default=None, help="paper: vertex i draws 0..round(2D) successors uniformly (halves to even), an average of round(2D)/2: D when 2D is whole; scale-free, layered: round(D) edges drawn a vertex, at least 1 (default 10)")
    sp.add_argument("--levels", type=int, default=None, help="layered: number of levels (default n/10)")
    sp.add_argument("--seed", type=int, default=0, help="generator seed (default 0): same seed, same graph")
    sp.add_argument("--scale", type=int, default=None, help="rmat: 2^SCALE vertices")
    sp.add_argument("--edge-factor", type=int, default=None, help="rmat: EDGE_FACTOR * 2^SCALE edges (default 16)")
    for q, v, where in (("a", .57, "top-left"), ("b", .19, "top-right"), ("c", .19, "bottom-left")):
        sp.add_argument(f"-{q}", type=float, default=None, help=f"rmat: {where} quadrant probability (default {v})"
                        + ("; bottom-right: d = 1 - a - b - c" if q == "c" else ""))
    sp.add_argument("--threads", type=int, default=None, help="rmat: threads (default all cores; same graph)")
    sp.add_argument("-o", "--output", required=True,
                    help=".gra, .mtx (Matrix Market), .h5/.hdf5, or an edge list of blank-separated ids (.txt, .el, "
                         ".edges, .edgelist; .tsv and .csv are refused); rmat: an edge list or .h5 only")
    sp.add_argument("--format", choices=OUTPUT_FORMATS, default="auto", help="output format (default auto: by the extension)")
    common_options(sp, backend=False)
    sp.set_defaults(func=cmd_generate)

    sp = sub.add_parser("convert", help="convert a graph to the binary .h5 graph file (CSR + condensation), or an "
                        "index to another layout")
    sp.add_argument("graph", help="graph file (.gra, edge list, .mtx, .h5, .parquet, .arrow), or 'bundled'; or an "
                    "index file (with --layout)")
    sp.add_argument("-o", "--output", required=True, help="binary graph file to write (.h5), or the index")
    sp.add_argument("--layout", choices=("single", "split"), default=None, help="an index file: write it as one file (single: "
                    "merges a split index's parts) or split into --parts part files")
    sp.add_argument("--parts", type=int, default=None, help="--layout split: part files (default 2; refused with "
                    "--layout single)")
    sp.add_argument("--format", choices=FORMATS, default="auto", help="input graph format (default auto; refused "
                    "with an index, as every option below but --quiet and --json)")
    sp.add_argument("--num-vertices", type=int, default=None, help="edge lists and edge tables: number of vertices")
    sp.add_argument("--no-condense", action="store_true",
                    help="store the CSR only; 'distgrail index' then condenses on every run")
    sp.add_argument("--backend", choices=BACKENDS, default="auto",
                    help="auto: parse and condense on the GPU when CuPy sees one, else the CPU (same file)")
    common_options(sp, backend=False)
    sp.set_defaults(func=cmd_convert)
    return p


def main(argv=None) -> int:
    """Run one command. Under MPI, an error shared by every rank (bad input, unwritable output)
    is printed once (rank 0), MPI is finalized and every rank returns 2."""
    args = build_parser().parse_args(argv)
    try:
        if (args.func in (cmd_generate, cmd_convert) or getattr(args, "one_process", 0)) and comm_of(args) is not None:
            from .mpi.errors import run_shared  # one-process commands: rank 0 works, all share the outcome

            return run_shared(args.mpi_comm, f"running {args.command}",
                              args.func if args.mpi_comm.Get_rank() == 0 else None, args) or 0
        try:
            status = args.func(args)
            sys.stdout.flush()  # a reader of stdout gone (| head) shows here, not as a traceback at exit
        except BrokenPipeError:
            from .cli_output import stdout_gone, stdout_is_gone

            if not stdout_is_gone():
                raise
            status = stdout_gone()
        return _status_everywhere(args, status)
    except DistGrailError as e:
        comm = getattr(args, "mpi_comm", None)
        shared = comm is not None and getattr(e, "comm_rank", None) is not None
        bug = shared and getattr(e, "bug", False)  # (no error of the input's or the machine's: status 1)
        if bug and e.__cause__ is not None:  # the failing rank's traceback, as one process shows it
            traceback.print_exception(e.__cause__, file=sys.stderr)
        if not shared and comm is None and getattr(e, "arguments_only", False):
            from .cli_parser import launcher_rank
            from .mpi.launcher import rank_size

            if rank_size()[1] > 1 and not getattr(args, "no_mpi", False):  # (every rank's outcome gathered)
                from .mpi.errors import refuse_arguments

                refuse_arguments(f"distgrail: error: {e}", printed=False)
            if launcher_rank() != 0:  # (before MPI: every rank has it; rank 0 prints it)
                return 2
        alone = getattr(args, "mpi_error_comm", None)
        if not shared and comm is not None and alone is not None and not getattr(e, "arguments_only", False):
            from .mpi.errors import end_job, error_everywhere

            if not error_everywhere(alone):  # this rank's own: the others may wait for it in a collective
                end_job(comm, f"distgrail: error: {e}", 2)
        if not shared or comm.Get_rank() == 0:  # an error shared by all ranks is printed once
            print(f"distgrail: {'internal error' if bug else 'error'}: {e}", file=sys.stderr, flush=True)
        if shared:
            _end_mpi_cleanly(comm)
        return 1 if bug else 2
    except MemoryError as e:
        gpu = type(e).__module__.startswith("cupy")  # (CuPy's OutOfMemoryError says how much it asked for)
        text = (f"distgrail: error: out of {'GPU ' if gpu else ''}memory{f' ({e})' if gpu and str(e) else ''} "
                "(the graph or --dims is too large for this machine)")
        _end_every_rank(args, text, 2)
        print(text, file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt as e:  # with a message: a write was interrupted (distgrail.io.atomic), exit 2
        text = f"distgrail: error: {e}" if e.args else "distgrail: interrupted"
        status = 2 if e.args else 130
        _end_every_rank(args, text, status)
        print(text, file=sys.stderr)
        return status
    except Exception as e:  # a bug on this rank: one process shows its traceback and exits 1
        comm = getattr(args, "mpi_comm", None)
        if comm is None or comm.Get_size() < 2:
            raise
        traceback.print_exc()
        _end_every_rank(args, f"distgrail: internal error: {type(e).__name__}: {e} (traceback above)", 1)


def _end_every_rank(args, text: str, status: int) -> None:
    """Under MPI with several ranks, a failure of this rank's own (out of memory, an interrupt, a
    bug) ends the whole job with ``text`` and ``status`` (:func:`~distgrail.mpi.errors.end_job`,
    which does not return): the other ranks may be waiting for this one in a collective, where
    they would hang. One process: nothing (the caller prints and returns)."""
    comm = getattr(args, "mpi_comm", None)
    if comm is not None and comm.Get_size() > 1:
        from .mpi.errors import end_job

        end_job(comm, text, status)

if __name__ == "__main__":  # pragma: no cover
    quick_exit(main())
