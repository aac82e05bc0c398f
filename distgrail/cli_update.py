"""``distgrail update INDEX --add EDGES [-o NEW]``: edges inserted into an index, exact, without
reading the original graph again (:mod:`distgrail.update`); without ``-o`` the index is updated
in place (written beside it, then renamed over it: a failure leaves it as it was). ``distgrail
update --server URL --add EDGES``: the edges sent to a running ``distgrail serve`` (``POST
/edges``), which serves the graph plus them from its next batch on (its file is left as it was).
The updated index keeps the layout of ``INDEX`` (a split index stays split, with as many parts; a
patched one stays patched) unless ``--layout``/``--parts`` say otherwise; ``--layout patch``
writes only the rows the update changed over ``INDEX`` (:mod:`distgrail.cli_update_patch`), the
fastest write of a large index (docs/benchmarks.md). Kept apart
from :mod:`distgrail.cli` for size; under MPI rank 0 alone works (``one_process``)."""

from __future__ import annotations

import json
import os
import sys
import time

from .cli_common import common_options

__all__ = ["add_update_command", "cmd_update", "update_through_server"]


def add_update_command(sub) -> None:
    from .gpu.backend import BACKENDS
    from .io.formats import FORMATS

    sp = sub.add_parser("update", help="insert edges into an index (exact; no rebuild from the graph)")
    sp.add_argument("index", nargs="?", help="the index file (.h5; none with --server)")
    sp.add_argument("--add", required=True, metavar="EDGES", action="append",
                    help="the new edges, a graph file in any format 'index' reads, vertex ids of the index; "
                         "repeated: every file's edges, in the order given")
    sp.add_argument("--remove", metavar="EDGES", default=None,
                    help="refused: deletions are not supported (rebuild with 'distgrail index')")
    sp.add_argument("-o", "--output", default=None,
                    help="the updated index to write (.h5; default: INDEX itself, replaced once the update is "
                         "written beside it)")
    sp.add_argument("--layout", choices=("keep", "single", "split", "patch"), default="keep",
                    help="the updated index's layout: keep (default: INDEX's, with as many parts; a patched index "
                         "stays patched), single (one file), split (a main file and --parts part files written side "
                         "by side, faster to write; see 'distgrail index --layout') or patch (only the rows the "
                         "update changed, over INDEX kept beside it as a hard link: the fastest; see README)")
    sp.add_argument("--parts", type=int, default=None, metavar="N",
                    help="--layout split: part files (default: INDEX's parts if it is split, else 4)")
    sp.add_argument("--format", choices=FORMATS, default="auto", help="format of the EDGES file (default auto)")
    sp.add_argument("--rebuild-above", type=int, default=None, metavar="EDGES",
                    help="with more new DAG edges than this, label the components again instead of sweeping "
                         "the labels (default: a fifth of the DAG's edges, at least 1,000,000)")
    sp.add_argument("--backend", choices=BACKENDS, default="auto",
                    help="where the reachability check and the labelling run (default auto)")
    sp.add_argument("--server", metavar="URL",
                    help="send the edges to a running 'distgrail serve' at URL instead of updating a file (POST "
                         "/edges; the server needs a token: DISTGRAIL_TOKEN or --token-file); it answers for the "
                         "graph plus the edges from its next batch on, its index file left as it was")
    sp.add_argument("--token-file", help="with --server: file whose first line is the server's bearer token")
    common_options(sp, backend=False)
    sp.set_defaults(func=cmd_update, one_process=True)


def cmd_update(args) -> int:
    import distgrail
    from .cli_common import outputs_ok
    from .errors import DistGrailError, OutputError
    from .indexfile.read import check_index_path
    from .indexfile.split import check_parts
    from .io.atomic import same_file
    from .update import UPDATES, insert_edges

    if args.remove is not None:
        raise DistGrailError(f"{args.remove}: deletions are not supported; rebuild the index from the graph "
                             "without those edges (distgrail index)")
    if args.server is not None:
        return update_through_server(args)
    if args.token_file is not None:
        raise DistGrailError("--token-file is for --server URL")
    if args.index is None:
        raise DistGrailError("give the index file: distgrail update INDEX --add EDGES (or --server URL --add EDGES)")
    check_index_path(args.index)  # (a FIFO never opened: h5py's open of it, below, would block for ever)
    in_place = args.in_place = args.output is None
    mode = None  # the index's stat, when it is updated in place
    if in_place:  # the index replaced atomically: its directory must take the file written beside it
        from .io.atomic import check_output

        for add in args.add:
            if os.path.exists(add) and same_file(add, args.index):
                raise DistGrailError(f"{add}: the edges file is the index itself")
        target = os.path.realpath(args.index)  # (a link's target is updated, not the link replaced)
        named = args.index if same_path(target, args.index) else f"{args.index} (a link to {target})"
        if os.path.isfile(target):
            if not os.access(target, os.W_OK):
                raise DistGrailError(f"{named}: the index is not writable, so it is not updated in place; "
                                     "write the update to another file with -o NEW.h5")
            mode = os.stat(target)
        try:
            check_output(target)
        except OutputError as e:  # (named as given: the user may not know where a link leads)
            raise OutputError(f"{named}: the index is not updated in place: {e}; write the update to another "
                              f"file with -o NEW.h5") from None
        args.output = args.index if same_path(target, args.index) else target  # (errors name the path as given)
    else:
        if os.path.exists(args.output) and same_file(args.output, args.index):
            raise DistGrailError(f"{args.output}: the output would overwrite the input {args.index}; to update the "
                                 "index in place, leave out -o")
        outputs_ok(args, args.index, *args.add)
    if args.rebuild_above is not None and args.rebuild_above < 0:
        raise DistGrailError(f"--rebuild-above must be 0 or more, got {args.rebuild_above}")
    if args.parts is not None:
        check_parts(args.parts)
    if args.parts is not None and args.layout in ("single", "patch"):
        raise DistGrailError(f"--parts is for --layout split (or keep, of a split index); --layout {args.layout} "
                             "writes one main file")
    t0 = time.perf_counter()
    for add in args.add:  # (the edges first: a typo costs no read of a large index)
        if not os.path.exists(add):
            raise DistGrailError(f"{add}: no such edges file")
    n = _vertex_count(args.index)
    idx = None
    if n is None:  # root attributes not an index's, or damaged: its read names the problem before the edges
        idx = distgrail.open_index(args.index)  # are read against a count it does not hold
        n = idx.n
    from .gpu.backend import get_backend, ready_beside

    be = get_backend(args.backend)
    early = ready_beside(be)  # (the CUDA context and the upload's buffers while the edges and the index are read)
    src, dst = _concatenated([_read_edges(add, args.format, n) for add in args.add])
    steps = {"read_edges": time.perf_counter() - t0}
    if idx is None:
        idx = distgrail.open_index(args.index, defer=_left_in_file(args, be))
    early.join()
    steps["open"] = time.perf_counter() - t0 - sum(steps.values())
    if idx.node_labels is not None:  # (named as the index file, not as insert_edges' argument)
        raise DistGrailError(f"{args.index}: this index was built from node labels; 'update' takes vertex ids only "
                             "(rebuild with distgrail index)")
    layout, parts = _layout_of(args, idx.meta)
    from .cli_update_patch import keep_mode, no_wider_than, reported

    if layout == "patch":  # (else the index to write whole after all, said why)
        from .cli_update_patch import update_patched

        got = update_patched(args, idx, src, dst, steps, t0, mode)
        if isinstance(got, int):
            return got
        idx, layout, parts = got, "single", 0
    written = [0]  # part files written (as many as asked, at most the rows of the largest dataset)

    def write(new, ready):
        # in place: the new files are created with no more permission for the group and others than
        # the index has (a private index is never readable by others meanwhile; the user's own bits
        # stay, the file must be written); its exact mode is set once they are in place
        try:  # (written while the swept arrays come down: each dataset once its values are there)
            with no_wider_than(mode):
                written[0] = new.save(args.output, layout=layout, parts=parts, ready=ready)
        except OutputError as e:  # in place through a link: the link named as given, and where it leads
            if not in_place or same_path(args.output, args.index):
                raise
            raise OutputError(f"{args.index} (a link to {args.output}): {e}") from None

    new, report = insert_edges(idx, src, dst, backend=args.backend, progress=not args.quiet,
                               rebuild_above=args.rebuild_above, consume=True, write=write)  # (idx spent)
    steps["update"] = time.perf_counter() - t0 - sum(steps.values()) - report.seconds["write"]
    steps["write"] = report.seconds["write"]  # (with the swept arrays' download beside it)
    if mode is not None:  # the files replaced keep the index's permissions (and, for root, its owner)
        from .indexfile.layout import index_parts

        keep_mode([args.output, *(index_parts(args.output) if layout == "split" else ())], mode)
    lay = f"split, {written[0]} parts" if layout == "split" else "one file"
    return reported(args, report, int(new.arrays[UPDATES].shape[0]), steps, t0, layout,
                    written[0] if layout == "split" else 0, lay)


def update_through_server(args) -> int:
    """``update --server URL --add EDGES``: the edges read here (checked against the server's
    vertex count: a bad id is named by file and line, and nothing is sent), inserted by the server
    in requests of at most its ``--max-pairs`` edges (each one update), the report printed
    (``--json``: the last request's report, its counts summed over the requests). A request that
    fails after others were taken is an error that says how many edges the server holds already."""
    from .errors import DistGrailError
    from .server.client import ServerError, connect
    from .server.command import read_token

    local = [flag for flag, given in (("-o", args.output is not None), ("--layout", args.layout != "keep"),
                                      ("--parts", args.parts is not None),
                                      ("--rebuild-above", args.rebuild_above is not None),
                                      ("--backend", args.backend not in (None, "auto"))) if given]
    if local:  # (the server updates its index in memory, on its own backend: these would be ignored)
        raise DistGrailError(f"{' and '.join(local)} with --server: the server updates the index it serves, in "
                             f"memory and on its own backend (its file is not written)")
    if args.index is not None:
        raise DistGrailError(f"{args.index}: with --server give no index file (the server has its own index)")
    for add in args.add:
        if not os.path.exists(add):
            raise DistGrailError(f"{add}: no such edges file")
    t0 = time.perf_counter()
    summed = ("given", "same_component", "already_reachable", "added")
    with connect(args.server, token=read_token(None, args.token_file, env=True)) as client:
        if client.label_kind is not None:
            raise DistGrailError(f"{args.server}: the served index has node labels, and an index of node labels "
                                 "takes no updates (rebuild it with 'distgrail index')")
        if client.info.get("token") is False:  # (its /health says: told before the edges are read)
            raise DistGrailError(f"{args.server}: this server takes no updates: it was started without a token "
                                 "(distgrail serve --token-file F)")
        src, dst = _concatenated([_read_edges(add, args.format, client.n) for add in args.add])
        step = max(1, int(client.info.get("max_pairs") or src.size or 1))
        report, totals, requests = {}, dict.fromkeys(summed, 0), 0
        for a in range(0, src.size, step):
            try:
                report = client.add_edges(src[a:a + step], dst[a:a + step])
            except DistGrailError as e:  # (ServerError, QueryError: named with what the server holds)
                if not requests:
                    raise
                raise ServerError(f"{e} (the server took the first {a:,} of the {src.size:,} edges, in {requests} "
                                  f"update(s), before this request failed; sending them all again is safe: an edge "
                                  f"it holds changes nothing)", status=getattr(e, "status", None)) from None
            requests += 1
            for k in summed:
                totals[k] += int(report.get(k, 0))
    report.update(totals, requests=requests, server=client.url, index=client.info.get("index"),
                  total_seconds=round(time.perf_counter() - t0, 6))
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    elif not args.quiet:
        print(f"server       {client.url} ({client.info.get('index')}): update {report.get('update')}, "
              f"{report.get('edges_inserted', 0):,} edge(s) inserted since it started\n"
              f"update       {totals['given']:,} edge(s) in {requests} request(s): {totals['same_component']:,} "
              f"inside one component, {totals['already_reachable']:,} already reachable, {totals['added']:,} "
              f"added to the DAG; {report.get('C', 0):,} components\n"
              f"total        {report['total_seconds'] * 1e3:.1f} ms (the server's last step "
              f"{report.get('wall_seconds', 0):.2f} s)", file=sys.stdout)
    return 0


def same_path(a, b) -> bool:
    """Whether the paths ``a`` and ``b`` are the same name (absolute, normalised; no link followed)."""
    return os.path.abspath(a) == os.path.abspath(b)


def _left_in_file(args, be) -> tuple:
    """The datasets of ``args.index`` to leave in the file when it is opened: a patch swept on a
    GPU (``--layout patch``, or ``keep`` of a patched index) reads them from there straight to
    the device (:mod:`distgrail.indexfile.read_device`; one read, no host copy; a patched
    index's rows put over its base's there); else none."""
    if args.layout not in ("patch", "keep") or not be.is_gpu:
        return ()
    from .indexfile.read_device import DEVICE_DATASETS, device_layout

    kind = device_layout(args.index)
    return DEVICE_DATASETS if kind == "patched" or kind == "single" and args.layout == "patch" else ()


def _vertex_count(index) -> int | None:
    """The index's vertex count from its root attributes alone (no dataset read), or None when
    they cannot be read, are not an index's or do not match their seal (a damaged count would
    blame the edges file: the index's own read then says why)."""
    try:
        import h5py

        from .indexfile.layout import FORMAT
        from .indexfile.read import _check_attributes

        with h5py.File(index, "r") as f:
            kind = f.attrs.get("format")
            if (kind.decode() if isinstance(kind, bytes) else kind) != FORMAT:
                return None
            _check_attributes(index, f.attrs)
            return int(f.attrs["n_vertices"])
    except Exception:  # noqa: BLE001 - not an index this can read: open_index names the problem
        return None


def _read_edges(path, fmt: str, n: int | None):
    """The edges to add, read from ``path``: an edge list or table of ids is read against the
    index's ``n`` vertices, so an id past them is refused naming the file, line and value (a
    ``.gra``, ``.mtx`` or ``.h5`` graph, read with its own vertex count, is then searched for it); edges
    by node name and ``.npy`` arrays are refused with what ``update`` takes instead."""
    from .errors import DistGrailError, GraphFormatError
    from .io.formats import Source
    from .io.pairs import is_npy
    from .io.read import read_graph
    from .io.regular import check_regular

    check_regular(path, "graphs", GraphFormatError)  # (before Source sniffs it: a FIFO's open blocks for ever)
    if is_npy(path):
        raise DistGrailError(f"{path}: a .npy array is not a graph file; 'update' reads the edges in any format "
                             "'index' reads (an edge list 'u v' per line, .gra, .mtx, Parquet/Arrow, a .h5 graph)")
    source = Source(path, fmt)
    try:
        spec = source.format
        names = fmt == "labelled" or (spec.dialect and source.dialect.labelled)
    except (GraphFormatError, OSError):  # read_graph says what is wrong with the file
        spec, names = None, fmt == "auto" and _undeclared_names(path)
    if names and isinstance(names, tuple):  # (a line of words or code: named as index names it)
        raise GraphFormatError(f"edges by node name, not integer ids: {names[1]}; 'update' takes the index's vertex ids",
                               path=path, line=names[0])
    if names:
        raise DistGrailError(f"{path}: edges by node name; 'update' takes the index's vertex ids")
    takes = n is not None and spec is not None and spec.num_vertices
    try:
        g = read_graph(path, fmt, num_vertices=n if takes else None, source=source)
    except GraphFormatError as e:  # a table of names, read against the index's count: told as names
        if takes and spec.storage == "table" and "--num-vertices" in str(e):  # (no --num-vertices given here)
            raise DistGrailError(f"{path}: edges by node name; 'update' takes the index's vertex ids") from None
        raise
    if g.meta.get("node_labels") is not None:
        raise DistGrailError(f"{path}: edges by node name; 'update' takes the index's vertex ids")
    kind = g.meta.get("format")
    if g.m == 0:  # (an edge list read against n would be n isolated vertices: nothing to add)
        raise GraphFormatError("no edges to add: " + ("empty edge list: no 'u v' line found" if takes
                                                      else f"the {kind} file holds no edges"), path=path)
    if n is not None and not takes:  # .gra, .mtx, .h5: read against their own vertex count
        _ids_in_range(path, kind, g, n, source)
    return g


def _ids_in_range(path, kind: str, g, n: int, source) -> None:
    """GraphFormatError naming the file, the line (or the .h5 dataset and row) and the id as
    written, for the first edge of ``g`` (read from ``path``, a ``kind`` file with a vertex count
    of its own) with an end past the index's ``n`` vertices; nothing when there is none."""
    import numpy as np

    from .errors import GraphFormatError, id_range

    bad = (g.src >= n) | (g.dst >= n)
    if not bad.any():
        return
    i = int(np.argmax(bad))
    s, t = int(g.src[i]), int(g.dst[i])
    if kind == "h5":  # (edge i is csr/indices[i], in row src[i])
        where = (f"csr/indptr row {s} (the edges of vertex {s}, from csr/indices[{i}])" if s >= n
                 else f"csr/indices[{i}] (an edge of vertex {s})")
        raise GraphFormatError(f"{where}: vertex id {id_range(n, whose='the index')}, got '{s if s >= n else t}' (the graph "
                               f"has {g.n:,} vertices, the index {n:,})", path=path)
    base = 1 if kind == "mtx" else 0
    found = _first_past(path, kind, n + base, source.codec)
    if found is not None:
        line, value = found
        raise GraphFormatError(f"vertex id {id_range(n, base, whose='the index')}, got {value!r}", path=path, line=line)
    raise GraphFormatError(f"vertex id {id_range(n, base, whose='the index')}, got '{(s if s >= n else t) + base}' "
                           f"(edge {i + 1})", path=path)


def _first_past(path, kind: str, limit: int, codec) -> tuple | None:
    """``(line, token)`` of the first vertex id in the ``kind`` ("gra" or "mtx") text file
    ``path`` that is ``limit`` or more, or None (an error path: the file read again, line by line)."""
    from .io.compressed import open_codec

    def past(tok):
        try:
            return int(tok) >= limit
        except ValueError:
            return False

    header = 0  # .mtx: the size line; .gra: the vertex count (after 'graph_for_greach')
    with (open_codec(path, codec) if codec else open(path, "rb")) as f:
        for no, raw in enumerate(f, 1):
            if kind == "mtx":
                body = raw.split(b"%", 1)[0].split()
                if not body:
                    continue
                if not header:
                    header = 1
                    continue
                ids = body[:2]
            else:
                line = raw.strip()
                if not line:
                    continue
                if not header:
                    header = 0 if line.startswith(b"graph_for_greach") else 1
                    continue
                left, colon, rest = line.partition(b":")
                if not colon:
                    continue
                succ = rest.split(b"#", 1)[0].split()
                ids = [left, *succ] if succ else []  # (a vertex without edges adds none)
            for tok in ids:
                if past(tok):
                    return no, tok.decode("ascii", "replace").strip()
    return None


def _concatenated(graphs) -> tuple:
    """``(src, dst)``: the edges of ``graphs`` (each file's, read and checked), in order."""
    if len(graphs) == 1:
        return graphs[0].src, graphs[0].dst
    import numpy as np

    dt = np.result_type(*(g.src.dtype for g in graphs))
    return (np.concatenate([g.src.astype(dt, copy=False) for g in graphs]),
            np.concatenate([g.dst.astype(dt, copy=False) for g in graphs]))


def _undeclared_names(path):
    """``(line, shown)`` of the first edge line of ``path`` when it is an edge list of node names
    without a header declaring them (``auto`` refuses it and says to pass ``--format labelled``,
    which ``update`` would refuse too: it is told as edges by node name instead), else None."""
    from .errors import GraphFormatError
    from .io.formats import Source

    try:
        d = Source(path, "labelled").dialect
    except (GraphFormatError, OSError):
        return None
    return (d.undeclared_line, d.undeclared_shown) if d.undeclared else None


#: part files of an update written split from a one-file index, unless --parts says
DEFAULT_PARTS = 4


def _layout_of(args, meta) -> tuple:
    """``(layout, parts)`` of the updated index: ``--layout`` (keep: the index's own, with as
    many parts) and ``--parts``."""
    split = meta.get("layout") == "split"
    layout = args.layout if args.layout != "keep" else ("split" if split else "patch" if "patched" in meta
                                                        else "single")
    if layout == "patch":
        return "patch", 0
    if layout == "single":
        if args.parts is not None:
            from .errors import DistGrailError

            raise DistGrailError(f"--parts {args.parts}: {args.index} is one file and --layout keep keeps it so; give "
                                 f"--layout split to write it in parts")
        return "single", 0
    return "split", int(args.parts if args.parts is not None else meta.get("parts", DEFAULT_PARTS) if split
                        else DEFAULT_PARTS)
