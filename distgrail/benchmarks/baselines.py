"""distgrail against the indexes a user could pick instead, same graph and same pairs, one run.

    python -m distgrail.benchmarks.baselines GRAPH ... --oreach BIN --grail BIN
        [--pairs 100000] [--seed 0] [--dims 5] [--backend auto|cpu|gpu] [--repeat 3] [--builds 2]
        [--cpu-search compiled]
        [--grail-max-row 500000] [--timeout SECONDS] [--check-pairs 500] [--workdir DIR] [--json OUT]

``GRAPH`` is a graph file (any format ``distgrail index`` reads; the GRAIL repository's
``Downloads/`` holds real ones, e.g. the citation graph ``citeseer.scc.gra.gz``), ``paper:N,DEG``
(the paper's random DAG, generated here) or ``data`` (the 11 GRAIL benchmark graphs of
``tests/data``). The baselines are the authors' own C++ programs, built by
``launch/build_baselines.sh`` from their sources (not shipped here): O'Reach (Hanauer, Schulz,
Trummer, SEA 2021; its pruned bidirectional BFS as the fallback, so every query is answered) and the
original GRAIL (Yildirim, Chaoji, Zaki, VLDB 2010; ``-dim D``, level filter, positive cut,
reverse-pair traversals: its README's best). Either may be left out. GRAIL's ``.gra`` reader copies
the rest of a line for every number it takes from it, so a vertex of a million successors takes it
many minutes: it is left out (and the table says so) on a DAG with a vertex of more than
``--grail-max-row`` successors (R-MAT 22's condensation has one of 386,327; R-MAT 24's, about four
times as many). PReaCH is not here: no repository of its authors' code was found. Plain BFS is the
exactness check and the last contender (below).

Both baselines index a DAG, so each graph is condensed here first (SciPy's strong components,
independent of distgrail's) and they are handed the condensation and the pairs mapped onto it: its
cost is not theirs. distgrail builds its index from the graph itself in this process
(``build_index``, its condensation included), the best of ``--builds`` builds (the first of a kind
of graph compiles kernels on a fresh machine); its queries go through ``Index.query`` from host
arrays to host answers, the best of ``--repeat`` calls after one unmeasured call. On the CPU backend
they run compiled (``--cpu-search compiled``, numba), as they do in any process after its first 4 M
pairs (``auto`` starts with the NumPy prefilter, which loads nothing). The baselines' times are
their own clocks around the same two steps (O'Reach: ``init`` and its queries; GRAIL: labelling and
its queries), excluding their file reads, one run each (GRAIL's topological levels, which its level
filter reads, are computed outside its clock). The table prints each side's build and query
milliseconds and the ratios baseline / distgrail: above 1, distgrail is faster.

Answers are checked three ways: GRAIL's query file carries distgrail's answers as its truth
column, so its "Success Rate" is every pair of ours against GRAIL's own search (must be all);
O'Reach answers, after the timed file, the pairs distgrail answers reachable and then the others
(all reachable, then none: every pair checked); a BFS (SciPy's) over the condensation answers the
first ``--check-pairs`` pairs, and its time, scaled to every pair (``~``), is plain BFS's column
(SciPy's ``breadth_first_order`` from each source over the condensation, to its end). Exit status 1 on any disagreement, 2 on an error (a graph that
cannot be read, a baseline that fails). A baseline is left out, and the table says why, where it
cannot run: O'Reach on a condensation without edges (it crashes), GRAIL past ``--grail-max-row``,
either past ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

import distgrail
from distgrail.benchmarks import default_data_dir
from distgrail.bfs import reachable_set
from distgrail.errors import DistGrailError
from distgrail.io.generate import generate
from distgrail.query.stats import SEARCH_METHODS, SearchOptions

#: text after a number in the files written here, by suffix id
SUFFIXES = (b" ", b"\n", b": ", b"#\n")
SPACE, NEWLINE, COLON, HASH = range(len(SUFFIXES))


def decimal_text(values, suffix) -> bytes:
    """Each of ``values`` (non-negative integers; -1 writes no digits) in decimal, followed by
    :data:`SUFFIXES`\\ ``[suffix]``: the text of a file of millions of numbers built by NumPy in a
    few passes (one per digit) instead of one Python string per number."""
    v = np.asarray(values, dtype=np.int64)
    suffix = np.broadcast_to(np.asarray(suffix, dtype=np.int64), v.shape)
    digits = np.where(v < 0, 0, 1).astype(np.int64)
    big = v.copy()
    while True:
        big //= 10
        more = big > 0
        if not more.any():
            break
        digits += more
    tail = np.array([len(s) for s in SUFFIXES], dtype=np.int64)[suffix]
    ends = np.cumsum(digits + tail)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    starts = ends - digits - tail
    rest = np.where(v < 0, 0, v)
    for k in range(int(digits.max()) if len(v) else 0):  # the k-th digit from the right
        has = digits > k
        out[(starts + digits - 1 - k)[has]] = ord("0") + (rest[has] // 10 ** k) % 10
    for i, s in enumerate(SUFFIXES):
        at = np.flatnonzero(suffix == i)
        for j, byte in enumerate(s):
            out[starts[at] + digits[at] + j] = byte
    return out.tobytes()


def _rows(indptr, indices, head: bool):
    """Tokens of one adjacency line per vertex: ``(values, suffixes)``. With ``head`` (GRAIL's
    ``.gra``), ``i: j k #``; else (METIS), ``j+1 k+1`` or an empty line."""
    n = len(indptr) - 1
    deg = np.diff(indptr).astype(np.int64)
    per = deg + (2 if head else np.where(deg == 0, 1, 0))  # tokens per line
    first = np.concatenate(([0], np.cumsum(per)[:-1])).astype(np.int64)
    total = int(per.sum())
    values = np.full(total, -1, dtype=np.int64)
    suffix = np.full(total, SPACE, dtype=np.int64)
    row_of_edge = np.repeat(np.arange(n, dtype=np.int64), deg)
    pos = first[row_of_edge] + (np.arange(len(indices), dtype=np.int64) - np.asarray(indptr[:-1], np.int64)[row_of_edge])
    if head:
        values[first] = np.arange(n)
        suffix[first] = COLON
        values[pos + 1] = indices
        suffix[first + per - 1] = HASH  # the closing "#", no digits
    else:
        values[pos] = np.asarray(indices, np.int64) + 1
        suffix[first + per - 1] = NEWLINE  # the last target's, or the empty line's
    return values, suffix


def gra_text(indptr, indices) -> bytes:
    """The DAG as GRAIL's ``.gra`` file (``graph_for_greach``, the vertex count, ``i: j k #``)."""
    return b"graph_for_greach\n%d\n" % (len(indptr) - 1) + decimal_text(*_rows(indptr, indices, True))


def metis_text(indptr, indices) -> bytes:
    """The DAG as O'Reach reads it (METIS: ``n m``, then one line of 1-based targets per vertex)."""
    return b"%d %d\n" % (len(indptr) - 1, len(indices)) + decimal_text(*_rows(indptr, indices, False))


def pairs_text(s, t, third, final_newline: bool = True) -> bytes:
    """Lines ``s t x`` (both programs' query files; the third column is GRAIL's truth)."""
    k = len(s)
    values = np.empty(3 * k, dtype=np.int64)
    values[0::3], values[1::3], values[2::3] = s, t, third
    suffix = np.tile(np.array([SPACE, SPACE, NEWLINE]), k)
    text = decimal_text(values, suffix)
    return text if final_newline or not text else text[:-1]


def condensation(g):
    """``(comp, indptr, indices)``: SciPy's strong components of ``g`` and the DAG between them
    (no self-loops, no repeats), built apart from distgrail's own condensation."""
    a = sp.csr_matrix((np.ones(g.m, dtype=np.int8), (g.src, g.dst)), shape=(g.n, g.n))
    c, comp = connected_components(a, directed=True, connection="strong")
    cs, cd = comp[g.src], comp[g.dst]
    keep = cs != cd
    dag = sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int8), (cs[keep], cd[keep])), shape=(c, c))
    dag.sum_duplicates()
    dag.sort_indices()
    return comp, dag.indptr, dag.indices


def _number(pattern, text, what):
    m = re.search(pattern, text)
    if m is None:
        raise RuntimeError(f"{what}: no line matching {pattern!r} in its output:\n{text[-2000:]}")
    return float(m.group(1))


class LeftOut(Exception):
    """A baseline that cannot answer this graph (the table says why)."""


def _run(binary, argv, workdir, timeout, what):
    """The program's output; a failure is a RuntimeError naming how it ended."""
    try:
        r = subprocess.run([binary, *argv], capture_output=True, text=True, errors="replace", cwd=workdir,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LeftOut(f"{what} timed out after {timeout:g} s") from None
    out = r.stdout + r.stderr
    if r.returncode != 0:
        how = f"was killed by {signal.Signals(-r.returncode).name}" if r.returncode < 0 else f"exited {r.returncode}"
        raise RuntimeError(f"{what} ({binary}) {how}:\n{out[-2000:]}")
    return out


def run_oreach(binary, indptr, indices, s, t, workdir, seed=0, truth=None, timeout=None) -> dict:
    """O'Reach with its pruned bidirectional BFS fallback on the DAG and pairs: its own clocks.
    With ``truth``, it then answers the pairs ``truth`` says reachable and the others, one file
    each after the same ``init``: ``yes`` and ``no``, its reachable count in each."""
    if len(indices) == 0:
        raise LeftOut("O'Reach left out: the condensation has no edges (O'Reach crashes on such a graph)")
    graph = os.path.join(workdir, "dag.metis")
    with open(graph, "wb") as f:
        f.write(metis_text(indptr, indices))
    files = [("all", np.ones(len(s), bool))]
    if truth is not None:
        files += [(name, pick) for name, pick in (("yes", truth), ("no", ~truth)) if pick.any()]
    argv = [graph, "--pbibfs", f"--seed={seed}"]
    for name, pick in files:
        path = os.path.join(workdir, f"{name}.query.txt")
        with open(path, "wb") as f:
            f.write(pairs_text(s[pick], t[pick], np.zeros(int(pick.sum()), np.int64)))
        argv.append(f"--queries={path}")
    out = _run(binary, argv, workdir, timeout, "O'Reach")
    counts = [int(c) for c in re.findall(r"number of successful queries: (\d+)", out)]
    if len(counts) != len(files):
        raise RuntimeError(f"O'Reach: {len(counts)} query summaries for {len(files)} files in its output:\n{out[-2000:]}")
    got = {"build_ms": _number(r"init took ([\d.e+-]+) ms", out, "O'Reach"),
           "query_ms": _number(r"total for queries \(\S+\): ([\d.e+-]+)", out, "O'Reach") / 1000.0,
           "reachable": counts[0]}
    for (name, pick), c in zip(files[1:], counts[1:]):
        got[name] = {"pairs": int(pick.sum()), "reachable": c}
    return got


def run_grail(binary, indptr, indices, s, t, truth, workdir, dims=5, timeout=None) -> dict:
    """The original GRAIL (``-dim`` traversals, level filter, positive cut, reverse-pair
    traversals) on the DAG and pairs, with ``truth`` as its query file's third column."""
    graph, queries = os.path.join(workdir, "dag.gra"), os.path.join(workdir, "pairs.test")
    with open(graph, "wb") as f:
        f.write(gra_text(indptr, indices))
    with open(queries, "wb") as f:  # (its reader repeats the last line after a final newline)
        f.write(pairs_text(s, t, truth.astype(np.int64), final_newline=False))
    out = _run(binary, [graph, "-test", queries, "-dim", str(dims), "-lf", "-pp", "-ltype", "1", "-skip"], workdir,
               timeout, "GRAIL")
    m = re.search(r"Success Rate (\d+)/(\d+)", out)
    if m is None:
        raise RuntimeError(f"GRAIL: no success rate in its output:\n{out[-2000:]}")
    return {"build_ms": _number(r"#construction time:([\d.e+-]+)", out, "GRAIL"),
            "query_ms": _number(r"#total query running time:([\d.e+-]+)", out, "GRAIL"),
            "agree": int(m.group(1)), "pairs": int(m.group(2))}


def run_ours(g, s, t, dims, backend, repeat, builds=2, cpu_search="compiled") -> dict:
    """distgrail's build from the graph, the best of ``builds``, and the best of ``repeat``
    queries after a warm one (``cpu_search``: the CPU backend's, :class:`SearchOptions`)."""
    search = SearchOptions(cpu_search=cpu_search)
    build = float("inf")
    for _ in range(max(1, builds)):
        t0 = time.perf_counter()
        idx = distgrail.build_index(g, dims=dims, backend=backend)
        build = min(build, time.perf_counter() - t0)
    answers, _ = idx.query(s, t, backend=backend, search=search)
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        again, _ = idx.query(s, t, backend=backend, search=search)
        best = min(best, time.perf_counter() - t0)
        if not np.array_equal(again, answers):
            raise RuntimeError("distgrail answered the same pairs differently on a second call")
    return {"build_ms": build * 1e3, "query_ms": best * 1e3, "answers": np.asarray(answers, dtype=bool),
            "components": int(idx.C)}


def graphs_of(spec: str):
    """``[(name, EdgeGraph or path)]`` of one GRAPH argument."""
    if spec == "data":
        return [(os.path.basename(p)[:-4], p) for p in sorted(glob.glob(os.path.join(default_data_dir(), "*.gra")))]
    m = re.fullmatch(r"paper:(\d+),(\d+(?:\.\d+)?)", spec)
    if m:
        return [(f"paper {int(m.group(1)):,} x {m.group(2)}", ("paper", int(m.group(1)), float(m.group(2))))]
    if spec.startswith("paper:"):
        raise SystemExit(f"{spec}: write paper:N,DEG (e.g. paper:1000000,10)")
    return [(os.path.basename(spec), spec)]


def _load(source, seed):
    if isinstance(source, tuple):
        return generate(source[0], source[1], source[2], seed)
    return distgrail.read_graph(source)


class _Steps:
    """Wall seconds of each step of one graph (``row["wall_s"]``), each also a progress line on
    stderr: a baseline's file writes and reads are outside its own clocks and can dominate."""

    def __init__(self, name):
        self.name, self.seconds, self.t0 = name, {}, time.perf_counter()

    def done(self, step):
        now = time.perf_counter()
        self.seconds[step] = round(now - self.t0, 3)
        self.t0 = now
        print(f"{self.name}: {step} {self.seconds[step]:.1f} s", file=sys.stderr, flush=True)


def compare(name, g, args, workdir, steps=None) -> dict:
    """One graph: every side on the same pairs; the row of the table with its checks."""
    steps = steps or _Steps(name)
    rng = np.random.default_rng(args.seed)
    s = rng.integers(0, g.n, args.pairs, dtype=np.int64)
    t = rng.integers(0, g.n, args.pairs, dtype=np.int64)
    ours = run_ours(g, s, t, args.dims, args.backend, args.repeat, args.builds, args.cpu_search)
    a = ours.pop("answers")
    steps.done("distgrail")
    row = {"graph": name, "n": g.n, "m": g.m, "pairs": args.pairs, "reachable": int(a.sum()), "ours": ours}
    comp, indptr, indices = condensation(g)
    row["dag"] = {"n": len(indptr) - 1, "m": len(indices)}
    cs, ct = comp[s], comp[t]
    steps.done("condensation")
    problems, left_out = [], []
    if args.oreach:
        try:
            o = run_oreach(args.oreach, indptr, indices, cs, ct, workdir, args.seed, a, args.timeout)
        except LeftOut as e:
            left_out.append(str(e))
        else:
            row["oreach"] = o
            if o["reachable"] != row["reachable"]:
                problems.append(f"O'Reach answered {o['reachable']:,} pairs reachable, distgrail {row['reachable']:,}")
            for name_, want in (("yes", "all"), ("no", "none")):
                part = o.get(name_)
                if part and part["reachable"] != (part["pairs"] if want == "all" else 0):
                    problems.append(f"O'Reach answered {part['reachable']:,} of the {part['pairs']:,} pairs distgrail "
                                    f"answers {'reachable' if want == 'all' else 'unreachable'} reachable")
        steps.done("O'Reach (its files written and read)")
    widest = int(np.diff(indptr).max()) if len(indices) else 0
    if args.grail and widest > args.grail_max_row:
        left_out.append(f"GRAIL left out: a DAG vertex has {widest:,} successors, and GRAIL's reader takes time "
                        f"quadratic in a line's length (raise --grail-max-row to wait for it)")
    elif args.grail:
        try:
            gr = run_grail(args.grail, indptr, indices, cs, ct, a, workdir, args.dims, args.timeout)
        except LeftOut as e:
            left_out.append(str(e))
        else:
            row["grail"] = gr
            if gr["agree"] != args.pairs or gr["pairs"] != args.pairs:
                problems.append(f"GRAIL agreed with {gr['agree']:,} of {gr['pairs']:,} answers "
                                f"(of {args.pairs:,} pairs)")
        steps.done("GRAIL (its files written and read)")
    for note in left_out:
        print(f"{name}: {note}", file=sys.stderr, flush=True)
    row["left_out"] = left_out
    k = min(args.check_pairs, args.pairs)
    if k:
        t0 = time.perf_counter()
        want = np.array([reachable_set(indptr, indices, int(u))[int(v)] for u, v in zip(cs[:k], ct[:k])])
        # plain BFS as a contender: SciPy's, one per pair over the condensation, scaled to every pair
        row["bfs_ms_scaled"] = (time.perf_counter() - t0) * 1e3 * args.pairs / k
        wrong = int((want != a[:k]).sum())
        row["bfs_checked"], row["bfs_wrong"] = k, wrong
        if wrong:
            problems.append(f"{wrong} of the first {k:,} answers differ from a BFS")
        steps.done(f"BFS check of {k:,} pairs")
    row["problems"] = problems
    row["wall_s"] = steps.seconds
    return row


def _ratio(base, ours):
    return f"{base / ours:.1f}x" if ours > 0 else "-"


def print_row(row, out=None):
    o, gr = row.get("oreach"), row.get("grail")
    ours = row["ours"]
    cells = [row["graph"], f"{row['n']:,}", f"{row['m']:,}", f"{row['dag']['m']:,}",
             f"{ours['build_ms']:.1f}", f"{o['build_ms']:.1f}" if o else "-", f"{gr['build_ms']:.1f}" if gr else "-",
             f"{ours['query_ms']:.2f}", f"{o['query_ms']:.2f}" if o else "-", f"{gr['query_ms']:.2f}" if gr else "-",
             _ratio(o["query_ms"], ours["query_ms"]) if o else "-", _ratio(gr["query_ms"], ours["query_ms"]) if gr else "-",
             f"~{row['bfs_ms_scaled']:,.0f} ({_ratio(row['bfs_ms_scaled'], ours['query_ms'])})"
             if "bfs_ms_scaled" in row else "-",
             f"{row['reachable']:,}", "; ".join(row["problems"]) or "ok"]
    if row.get("left_out"):
        cells[-1] += f" ({'; '.join(row['left_out'])})"
    print("| " + " | ".join(cells) + " |", file=out or sys.stdout, flush=True)


HEADER = ("| graph | n | m | DAG m | build ms: ours | O'Reach | GRAIL | query ms: ours | O'Reach | GRAIL "
          "| O'Reach/ours | GRAIL/ours | BFS ms ~ (/ours) | reachable | checks |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.baselines",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("graphs", nargs="+", help="graph files, paper:N,DEG, or data (the GRAIL benchmark graphs)")
    ap.add_argument("--oreach", help="O'Reach's reachability program (launch/build_baselines.sh)")
    ap.add_argument("--grail", help="the original GRAIL program (launch/build_baselines.sh)")
    ap.add_argument("--pairs", type=int, default=100_000, help="uniformly random pairs per graph")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dims", type=int, default=5, help="label dimensions, distgrail's and GRAIL's")
    ap.add_argument("--backend", default="auto", choices=("auto", "cpu", "gpu"))
    ap.add_argument("--repeat", type=int, default=3, help="distgrail's timed query calls (the best counts)")
    ap.add_argument("--cpu-search", choices=SEARCH_METHODS, default="compiled",
                    help="the CPU backend's search and prefilter (default compiled: a process's steady state)")
    ap.add_argument("--builds", type=int, default=2, help="distgrail's timed builds of each graph (the best counts)")
    ap.add_argument("--grail-max-row", type=int, default=500_000,
                    help="leave GRAIL out on a DAG with a vertex of more successors (its reader is quadratic in a line)")
    ap.add_argument("--check-pairs", type=int, default=500, help="pairs also answered by a BFS over the condensation")
    ap.add_argument("--workdir", help="where the baselines' input files go (default: a temporary directory)")
    ap.add_argument("--json", help="write every row as JSON here")
    ap.add_argument("--timeout", type=float, help="seconds a baseline may run on one graph (then left out)")
    args = ap.parse_args(argv)
    for tool in ("oreach", "grail"):
        path = getattr(args, tool)
        if path is not None:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                ap.error(f"--{tool} {path}: not an executable file (build it with launch/build_baselines.sh)")
            setattr(args, tool, os.path.abspath(path))  # (they run in the work folder)
    for flag, least in (("pairs", 1), ("repeat", 1), ("builds", 1), ("check_pairs", 0), ("grail_max_row", 0)):
        if getattr(args, flag) < least:
            ap.error(f"--{flag.replace('_', '-')} must be {least} or more, got {getattr(args, flag)}")
    if args.timeout is not None and not args.timeout > 0:
        ap.error(f"--timeout must be more than 0 seconds, got {args.timeout}")
    if args.workdir is not None and not os.path.isdir(args.workdir):
        ap.error(f"--workdir {args.workdir}: no such folder")
    sources = [item for spec in args.graphs for item in graphs_of(spec)]
    for name, source in sources:
        if isinstance(source, str) and not os.path.isfile(source):
            ap.error(f"{source}: no such graph file")
    # a SIGTERM (a job's time limit, timeout(1)) ends the run through Python's exit, so the
    # baselines' files (hundreds of MB) go with their temporary folder
    before = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return _run_all(args, sources)
    finally:
        signal.signal(signal.SIGTERM, before)


def _run_all(args, sources) -> int:
    warm = generate("paper", 2000, 5, 1)  # kernels compiled, the compiled search loaded: not timed
    run_ours(warm, np.arange(100), np.arange(100)[::-1].copy(), args.dims, args.backend, 1, 1, args.cpu_search)
    print(f"distgrail {distgrail.__version__}, backend {args.backend}, d = {args.dims}, {args.pairs:,} random pairs "
          f"per graph (seed {args.seed}); ms = milliseconds of each side's own clock; x = baseline / distgrail")
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|")
    rows = []
    try:
        with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
            for name, source in sources:
                steps = _Steps(name)
                g = _load(source, args.seed)
                steps.done("read" if isinstance(source, str) else "generated")
                if g.n == 0:
                    print(f"{name}: no vertices, no pairs to ask: left out", file=sys.stderr, flush=True)
                    continue
                row = compare(name, g, args, workdir, steps)
                print_row(row)
                rows.append(row)
                if args.json:  # after every graph: a later failure keeps the rows before it
                    with open(args.json, "w") as f:
                        json.dump(rows, f, indent=1)
    except (DistGrailError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [r for r in rows if r["problems"]]
    for r in bad:
        print(f"{r['graph']}: {'; '.join(r['problems'])}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "baselines"))
