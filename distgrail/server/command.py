"""The command line of the server: ``distgrail serve INDEX`` and ``distgrail query --server URL PAIRS``.

Kept apart from :mod:`distgrail.cli` for size; nothing here imports it (the helpers both use are in
:mod:`distgrail.cli_common`). ``serve`` under an MPI launcher with several ranks serves from every
rank, each on its own GPU (bound by node-local rank, as ``query``), rank 0 listening and sharding
the batches of ``--shard-min-pairs`` pairs or more over the ranks, or with ``--front ranks``
every rank listening on the port and answering its own clients
(:func:`distgrail.server.run.serve_ranks`).
``query --server`` runs on rank 0 alone, like ``query --pair``.
"""

from __future__ import annotations

import json
import os
import sys

from .. import settings
from ..cli_common import OneProcess, comm_of, common_options, outputs_ok, resolve_bundled
from ..errors import DistGrailError, QueryError

__all__ = ["add_serve_command", "add_server_args", "with_server", "cmd_serve", "query_through_server", "read_token"]


def read_token(token: str | None, token_file: str | None, env: bool = False) -> str | None:
    """The bearer token from ``--token``, ``--token-file`` (its first line) or, with ``env``, the
    DISTGRAIL_TOKEN variable; None when there is none. An empty token, or one not printable
    ASCII (RFC 6750's tokens are), is an error."""
    from .client import TOKEN_ENV

    if token is not None and token_file is not None:
        raise DistGrailError("give --token or --token-file, not both")
    where = token_file or "--token"
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise DistGrailError(f"{token_file}: cannot read the token file ({e})") from None
        if not token:
            raise DistGrailError(f"{token_file}: the token file is empty")
    elif token is not None and not token.strip():
        raise DistGrailError("--token is empty")
    elif token is None and env:
        token, where = settings.get(TOKEN_ENV), TOKEN_ENV
    token = token.strip() if token else None
    if token is not None and not (token.isascii() and token.isprintable()):  # the server answers such a one 401
        raise DistGrailError(f"{where}: the bearer token must be printable ASCII (it travels in an HTTP header)")
    return token


# -- distgrail serve -------------------------------------------------------------------------
def add_serve_command(sub) -> None:
    """The ``serve`` subcommand."""
    from .run import (DEFAULT_BODY_TIMEOUT, DEFAULT_CLIENT_CONNECTIONS, DEFAULT_MAX_PAIRS, DEFAULT_PORT, DEFAULT_TIMEOUT,
                      FRONTS)

    sp = sub.add_parser("serve", help="answer queries over HTTP from an index opened once (distgrail.connect, "
                                      "query --server)")
    sp.add_argument("index", help="index file")
    sp.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    sp.add_argument("--port", type=int, default=DEFAULT_PORT,
                    help=f"TCP port (default {DEFAULT_PORT}; 0: a free one, printed on the ready line)")
    tok = sp.add_mutually_exclusive_group()
    tok.add_argument("--token", help="bearer token clients must send (visible in ps: prefer --token-file)")
    tok.add_argument("--token-file", help="file whose first line is the bearer token clients must send")
    sp.add_argument("--max-pairs", type=int, default=DEFAULT_MAX_PAIRS,
                    help=f"pairs a request may hold (default {DEFAULT_MAX_PAIRS:,}; more: 413)")
    sp.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                    help=f"seconds a request may take (default {DEFAULT_TIMEOUT:g}; more: 504)")
    sp.add_argument("--workers", type=int, default=None,
                    help="batches answered at once (default: the CPU's cores; 2 on a GPU); 16 requests per "
                         "worker may be in flight, counted once their body is in (more: 503)")
    sp.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT,
                    help=f"seconds a request's body may take to arrive, plus one for each MiB that has arrived "
                         f"(default {DEFAULT_BODY_TIMEOUT:g}; slower: 408 and the connection closed)")
    sp.add_argument("--max-client-connections", type=int, default=DEFAULT_CLIENT_CONNECTIONS,
                    help=f"connections one client address may hold open, idle kept-alive ones included "
                         f"(default {DEFAULT_CLIENT_CONNECTIONS}; more: 429; distgrail.connect keeps one per thread)")
    sp.add_argument("--shard-min-pairs", type=int, default=None,
                    help="under mpirun/srun with --front root (implied under auto): batches of at least this many "
                         "pairs are sharded over every rank, smaller ones answered by rank 0 alone (default 65,536)")
    sp.add_argument("--front", choices=FRONTS, default="auto",
                    help="under mpirun/srun: 'ranks': every rank listens on the same port (SO_REUSEPORT: the kernel "
                         "spreads the connections over the ranks of a node) and answers its own clients' batches "
                         "alone; 'root': rank 0 listens and shards batches of --shard-min-pairs or more over every "
                         "rank; 'auto' (default): ranks when every rank is on one node and --shard-min-pairs is not "
                         "given, else root; one process ignores it")
    common_options(sp)
    sp.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    from .run import serve

    comm = comm_of(args)
    if comm is not None:
        from ..mpi.errors import run_shared
        from .run import serve_ranks

        token = run_shared(comm, "reading the token", read_token, args.token, args.token_file)
        return serve_ranks(comm, args.index, host=args.host, port=args.port, backend=args.backend,
                           share_gpus=args.share_gpus, token=token, max_pairs=args.max_pairs, timeout=args.timeout,
                           workers=args.workers, shard_min_pairs=args.shard_min_pairs, quiet=args.quiet,
                           as_json=args.json, body_timeout=args.body_timeout,
                           max_client_connections=args.max_client_connections, front=args.front)
    if args.shard_min_pairs is not None:
        raise DistGrailError("--shard-min-pairs is for a server under mpirun/srun (several ranks)")
    token = read_token(args.token, args.token_file)
    return serve(args.index, host=args.host, port=args.port, backend=args.backend, token=token,
                 max_pairs=args.max_pairs, timeout=args.timeout, workers=args.workers, quiet=args.quiet,
                 as_json=args.json, body_timeout=args.body_timeout, max_client_connections=args.max_client_connections)


# -- distgrail query --server URL PAIRS ------------------------------------------------------
def add_server_args(sp) -> None:
    """``query``'s ``--server URL`` and ``--token-file F``."""
    sp.add_argument("--server", metavar="URL", action=OneProcess,
                    help="ask a running 'distgrail serve' at URL instead of opening an index: "
                         "distgrail query --server URL PAIRS (token: DISTGRAIL_TOKEN or --token-file)")
    sp.add_argument("--token-file", help="with --server: file whose first line is the server's bearer token")


def with_server(cmd_query):
    """``cmd_query`` that sends the pairs to ``--server`` when given."""

    def query(args):
        if getattr(args, "server", None) is None:
            if getattr(args, "token_file", None) is not None:
                raise QueryError("--token-file is for --server URL")
            if args.index is None:  # (optional for argparse: with --server the one positional is the pairs)
                raise QueryError("give the index file: distgrail query INDEX PAIRS, or INDEX --pair U V "
                                 "(or --server URL PAIRS)")
            return cmd_query(args)
        if args.pair is not None:
            raise QueryError("--pair asks the index file; with --server give a pairs file: "
                             "distgrail query --server URL PAIRS")
        if args.index is None:
            raise QueryError("give the pairs file: distgrail query --server URL PAIRS")
        local = [flag for flag, given in (("--backend", getattr(args, "backend", "auto") not in (None, "auto")),
                                          ("--partition", getattr(args, "partition", "auto") not in (None, "auto")),
                                          ("--share-gpus", getattr(args, "share_gpus", False))) if given]
        if local:  # (the server's own options chose its device and ranks: these would be ignored)
            raise QueryError(f"{' and '.join(local)} with --server: the server answers on its own backend and "
                             f"ranks (set them on 'distgrail serve')")
        if args.pairs is not None:  # argparse gave the one positional to INDEX
            raise QueryError(f"with --server give only the pairs file (the server has its index), got "
                             f"{args.index} {args.pairs}")
        return query_through_server(args, args.index)

    query.__doc__ = cmd_query.__doc__
    return query


def _at_line(e, q):
    """The server's ``sources[k]: ...`` refusal as the pairs file's ``file:line`` error (exit 2;
    ``file[k, column]`` for a .npy); any other refusal as it is."""
    import re

    from ..errors import GraphFormatError

    m = re.match(r"(sources|targets)\[(\d+)\]: (.*)", str(e), re.S)
    if m is None or int(m.group(2)) >= q.sources.size:
        return e
    k = int(m.group(2))
    if q.lines is None:  # a .npy: its row and column, as a local query names them
        from ..io.pairs import is_npy

        if not is_npy(q.path):
            return e
        return GraphFormatError(m.group(3), path=f"{q.path}[{k}, {int(m.group(1) == 'targets')}]")
    return GraphFormatError(m.group(3), path=q.path, line=int(q.lines[k]))


def query_through_server(args, pairs: str) -> int:
    """``query --server URL PAIRS [-o A]``: the pairs read here, answered by the server, the answers
    written here, the summary as ``distgrail query`` prints it (plus the server's address)."""
    from ..cli_output import check_expected
    from ..io.pairs import read_query_pairs
    from ..io.writers import write_answers
    from .client import connect

    pairs = resolve_bundled(pairs, "pairs")
    out = args.output
    outputs_ok(args, pairs)  # (args.command is "query": an answers file's extension is checked too)
    client = connect(args.server, token=read_token(None, args.token_file, env=True))
    with client:
        kind = client.label_kind  # ids checked here against the server's n (file:line); labels by the server
        q = read_query_pairs(pairs, kind, n=client.n if kind is None else None)
        try:
            answers, stats = client.query(q.sources, q.targets)
        except QueryError as e:  # a label the server's graph lacks: named with its file and line, as here
            raise _at_line(e, q) from None
    if out:
        write_answers(answers, out, q.sources, q.targets)
    summary = stats.as_dict()
    summary.update(index=client.info.get("index"), server=client.url, pairs=os.path.abspath(pairs),
                   answers=None if out is None else ("-" if out == "-" else os.path.abspath(out)))
    human, status = check_expected(q, answers, summary, stats.summary())
    human += f"\nserver       {client.url} ({client.info.get('index')})"
    if out is None:
        human += "\nanswers      not written (give -o FILE, or -o - for stdout)"
    text = json.dumps(summary, indent=2, sort_keys=True) if args.json else human
    if out == "-":  # stdout holds the answers: the summary goes to stderr
        if not args.quiet:
            print(text, file=sys.stderr)
    elif args.json or not args.quiet:
        print(text)
    return status
