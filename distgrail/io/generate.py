"""Test-graph generators, vectorised, reproducible from the seed, at 10^8 edges.

``paper``        the home-made random DAGs of Quer & Calabrese (Table 2): vertex i draws k uniformly
                 from 0..maxdeg (maxdeg = round(2 × average degree), so the average is maxdeg / 2)
                 and picks k distinct successors uniformly among the vertices j > i.
``scale-free``   a copy-model DAG: each new vertex points to earlier vertices, half uniformly, half
                 by copying the target of an earlier edge (preferential attachment); heavy-tailed
                 in-degrees.
``layered``      a deep DAG of ``levels`` layers; every vertex has an edge into the next layer
                 (so the DAG has exactly ``levels`` levels) and more edges 1..4 layers down.

Every random number is the counter-based hash of :mod:`distgrail.hashing` applied to (seed, a
stream per purpose, the vertex or edge slot), so a graph depends on its seed only: not on the
block size the rows are generated in, nor on the machine. Rows are generated in blocks of about
``EDGES_PER_BLOCK`` edges straight into CSR form (successors sorted, no duplicates), which the
writers turn into ``.gra``, edge lists or the binary ``.h5`` file without another sort.
"""

from __future__ import annotations

import os

import math

import numpy as np

from ..dtypes import size_problem
from ..errors import DistGrailError
from .graph import EdgeGraph, id_dtype
from ..hashing import hash3

__all__ = ["KINDS", "CSRGraph", "output_format", "generate_command", "generate", "generate_csr", "paper_dag", "scale_free_dag", "layered_dag"]

KINDS = ("paper", "scale-free", "layered")
#: edges generated per block (bounds the temporaries; does not change the graph)
EDGES_PER_BLOCK = 1 << 22

# hash streams, one per purpose
_S_DEG, _S_SUCC, _S_DENSE, _S_COPY, _S_REF, _S_UNI, _S_JUMP, _S_TGT = (0x6E00 + i for i in range(8))
_MAX_ATTEMPTS = 1 << 16


class CSRGraph:
    """A generated graph in CSR form: successors of row r are ``indices[indptr[r]:indptr[r+1]]``,
    sorted and distinct. ``to_edge_graph()`` gives the :class:`EdgeGraph` the rest of distgrail uses."""

    def __init__(self, n: int, indptr: np.ndarray, indices: np.ndarray, name: str):
        self.n, self.indptr, self.indices, self.name = int(n), indptr, indices, name

    @property
    def m(self) -> int:
        return int(self.indices.size)

    def to_edge_graph(self) -> EdgeGraph:
        dt = id_dtype(self.n)
        src = np.repeat(np.arange(self.n, dtype=dt), np.diff(self.indptr))
        return EdgeGraph(n=self.n, src=src, dst=self.indices.astype(dt, copy=False), name=self.name)


def _uniform(seed, stream, keys):
    """Uniform floats in [0, 1) from the hash of ``keys``."""
    return (hash3(seed, stream, keys) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _below(seed, stream, keys, bound):
    """Uniform integers in 0..bound-1 (bound an array or scalar >= 1)."""
    return np.minimum((_uniform(seed, stream, keys) * bound).astype(np.int64), np.asarray(bound) - 1)


def _slots(counts):
    """For rows with ``counts`` entries: the row (0-based, local) and the slot of every entry."""
    row = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    start = np.cumsum(counts) - counts
    return row, np.arange(row.size, dtype=np.int64) - start[row]


def _row_sort_unique(row, vals, nrows, bits):
    """Sort entries by (row, value) and drop repeats; return (key-sorted rows' values, counts)."""
    key = np.sort((row << bits) | vals)
    if key.size:
        keep = np.empty(key.size, dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
    counts = np.bincount(key >> bits, minlength=nrows)
    return key & ((1 << bits) - 1), counts


def _paper_block(n, maxdeg, seed, r0, r1, bits):
    rows = np.arange(r0, r1, dtype=np.int64)
    avail = n - 1 - rows
    k = np.minimum(hash3(seed, _S_DEG, rows) % np.uint64(maxdeg + 1), avail.astype(np.uint64)).astype(np.int64)
    dense = 2 * k > avail  # only the last ~2*maxdeg rows: exact pick by hash order
    kk = np.where(dense, 0, k)
    # sparse rows: draw k values, drop repeats, draw the missing ones again, and so on: the set
    # is the first k distinct values of an i.i.d. uniform sequence, i.e. a uniform k-subset
    row, slot = _slots(kk)
    grow = row + r0
    vals = grow + 1 + _below(seed, _S_SUCC, grow * (maxdeg + 1) + slot, avail[row])
    out, have = _row_sort_unique(row, vals, rows.size, bits)
    fin_row = np.repeat(np.arange(rows.size, dtype=np.int64), have)
    ok = have == kk
    if ok.all() and not dense.any():
        return out, have
    good = ok[fin_row]
    parts = [(fin_row[good], out[good])]
    sub = np.flatnonzero(~ok)  # local rows still short of successors
    sub_have = have[sub]
    cur_row = np.repeat(np.arange(sub.size, dtype=np.int64), sub_have)
    cur = out[~good]
    attempt = 1
    while sub.size:
        if attempt > _MAX_ATTEMPTS:  # pragma: no cover - probability ~0
            raise DistGrailError("paper generator: could not draw distinct successors")
        r_new, s_new = _slots(kk[sub] - sub_have)
        g_new = sub[r_new] + r0
        v_new = g_new + 1 + _below(seed, _S_SUCC + (attempt << 8), g_new * (maxdeg + 1) + s_new, avail[sub[r_new]])
        cur, sub_have = _row_sort_unique(np.concatenate((cur_row, r_new)), np.concatenate((cur, v_new)),
                                         sub.size, bits)
        cur_row = np.repeat(np.arange(sub.size, dtype=np.int64), sub_have)
        done = sub_have == kk[sub]
        fin = done[cur_row]
        parts.append((sub[cur_row[fin]], cur[fin]))
        remap = np.cumsum(~done) - 1
        cur, cur_row = cur[~fin], remap[cur_row[~fin]]
        sub, sub_have = sub[~done], sub_have[~done]
        attempt += 1
    for r in np.flatnonzero(dense).tolist():
        g = r0 + r
        cand = np.arange(g + 1, n, dtype=np.int64)
        pick = np.argsort(hash3(seed, _S_DENSE, g * np.int64(n) + cand), kind="stable")[: k[r]]
        parts.append((np.full(int(k[r]), r, dtype=np.int64), cand[pick]))
    # every part holds whole rows, sorted: a stable sort merges the runs in about linear time
    key = np.sort(np.concatenate([(p[0] << bits) | p[1] for p in parts]), kind="stable")
    return key & ((1 << bits) - 1), np.bincount(key >> bits, minlength=rows.size)


def _rows_per_block(n, avg, block_edges):
    return max(1, int(block_edges // max(avg, 1.0)))


def _assemble(n, blocks, name):
    counts, parts = [], []
    for vals, cnt in blocks:
        counts.append(cnt)
        parts.append(vals.astype(id_dtype(n)))
    indptr = np.zeros(n + 1, dtype=np.int64)
    if counts:
        np.cumsum(np.concatenate(counts), out=indptr[1:])
    indices = np.concatenate(parts) if parts else np.zeros(0, id_dtype(n))
    return CSRGraph(n, indptr, indices, name)


def _bits(n):
    return max(1, int(n).bit_length())


def paper_csr(n: int, avg_degree: float, seed: int = 0, block_edges: int | None = None) -> CSRGraph:
    # (a degree past 2^61 is taken as 2^61: 2 * 1e20 + 1 passed a uint64 (a traceback); every vertex
    # then takes all the later ones, as it almost surely did with any degree far above n)
    maxdeg = int(round(2 * min(float(avg_degree), 2.0**61)))
    rpb = _rows_per_block(n, avg_degree, block_edges or EDGES_PER_BLOCK)
    bits = _bits(n)
    blocks = (_paper_block(n, maxdeg, seed, r0, min(n, r0 + rpb), bits) for r0 in range(0, n, rpb))
    return _assemble(n, blocks, f"paper-n{n}-d{avg_degree:g}-s{seed}")


def scale_free_csr(n: int, avg_degree: float, seed: int = 0, block_edges: int | None = None) -> CSRGraph:
    """Copy model: vertex v >= 1 has k = round(avg_degree) out-edges to earlier vertices; each is,
    with probability 1/2, the target of a uniformly chosen edge of an earlier vertex (copying),
    else a uniform earlier vertex. Repeated targets of a vertex are merged."""
    k = max(1, int(round(min(float(avg_degree), max(n - 1, 1)))))  # (at most n - 1 distinct targets, as paper's)
    rpb = _rows_per_block(n, k, block_edges or EDGES_PER_BLOCK)
    bits = _bits(n)
    m = (n - 1) * k if n > 1 else 0
    raw = np.empty(m, dtype=id_dtype(n))  # targets in edge order, before merging repeats

    def block(r0, r1):
        v0, v1 = max(r0, 1), max(r1, 1)
        e0, e1 = (v0 - 1) * k, (v1 - 1) * k
        e = np.arange(e0, e1, dtype=np.int64)
        src = 1 + e // k
        first = (src - 1) * k
        copy = (_uniform(seed, _S_COPY, e) < 0.5) & (first > 0)
        ref = _below(seed, _S_REF, e, np.maximum(first, 1))
        val = np.where(copy, -1, _below(seed, _S_UNI, e, src))
        early = copy & (ref < e0)
        val[early] = raw[ref[early]]
        pend = np.flatnonzero(val < 0)
        ptr = ref - e0  # local index of the copied edge (pending ones only)
        while pend.size:  # copies of copies inside the block: pointer jumping
            t = ptr[pend]
            got = val[t] >= 0
            val[pend[got]] = val[t[got]]
            ptr[pend[~got]] = ptr[t[~got]]
            pend = pend[~got]
        raw[e0:e1] = val
        return _row_sort_unique(src - r0, val, r1 - r0, bits)

    blocks = (block(r0, min(n, r0 + rpb)) for r0 in range(0, n, rpb))
    return _assemble(n, blocks, f"scalefree-n{n}-d{avg_degree:g}-s{seed}")


def layered_csr(n: int, avg_degree: float, levels: int, seed: int = 0, block_edges: int | None = None) -> CSRGraph:
    if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or levels < 1 or levels > n:
        raise DistGrailError(f"levels must be an integer in 1..n={n}, got {levels!r}")
    levels = int(levels)
    extra = max(0, int(round(min(float(avg_degree), max(n - 1, 1)))) - 1)  # (at most n - 1 targets, as paper's)
    per = extra + 1
    first = -(-np.arange(levels + 1, dtype=np.int64) * n // levels)  # first vertex of each layer
    width = np.diff(first)
    rpb = _rows_per_block(n, per, block_edges or EDGES_PER_BLOCK)
    bits = _bits(n)

    def block(r0, r1):
        rows = np.arange(r0, r1, dtype=np.int64)
        layer = rows * levels // n
        cnt = np.where(layer < levels - 1, per, 0)
        row, slot = _slots(cnt)
        g = rows[row]
        lay = layer[row]
        key = g * per + slot
        span = np.minimum(4, levels - 1 - lay)
        jump = np.where(slot == 0, 1, 1 + _below(seed, _S_JUMP, key, np.maximum(span, 1)))
        tl = lay + jump
        dst = first[tl] + _below(seed, _S_TGT, key, width[tl])
        return _row_sort_unique(row, dst, rows.size, bits)

    blocks = (block(r0, min(n, r0 + rpb)) for r0 in range(0, n, rpb))
    return _assemble(n, blocks, f"layered-n{n}-d{avg_degree:g}-L{levels}-s{seed}")


def _check(n, avg_degree):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise DistGrailError(f"n must be an integer >= 1, got {n!r}")
    if not avg_degree >= 0 or not math.isfinite(avg_degree):
        raise DistGrailError(f"average degree must be a finite number >= 0, got {avg_degree!r}")
    m = int(min(float(avg_degree), float(n)) * n)
    if size_problem(int(n), m):
        raise DistGrailError(f"cannot generate -n {n} --degree {avg_degree:g}: {size_problem(int(n), m)}")


def generate_csr(kind: str, n: int, avg_degree: float, seed: int = 0, levels: int | None = None,
                 block_edges: int | None = None) -> CSRGraph:
    """Generate a graph of one of :data:`KINDS` in CSR form (see :class:`CSRGraph`).

    ``block_edges`` only bounds memory: the graph is the same for any value.
    """
    _check(n, avg_degree)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise DistGrailError(f"seed must be an integer in 0..2^64-1, got {seed!r}")
    n = int(n)
    if block_edges is not None and (isinstance(block_edges, bool) or int(block_edges) < 1):
        raise DistGrailError(f"block_edges must be >= 1, got {block_edges!r}")
    if kind == "paper":
        return paper_csr(n, avg_degree, seed, block_edges)
    if kind == "scale-free":
        return scale_free_csr(n, avg_degree, seed, block_edges)
    if kind == "layered":
        return layered_csr(n, avg_degree, levels if levels is not None else max(1, n // 10), seed, block_edges)
    raise DistGrailError(f"graph kind must be one of {', '.join(KINDS)}, got {kind!r}")


def paper_dag(n: int, avg_degree: float, seed: int = 0) -> EdgeGraph:
    """The paper's random DAG with ``n`` vertices and average out-degree ``avg_degree``."""
    return generate("paper", n, avg_degree, seed)


def scale_free_dag(n: int, avg_degree: float, seed: int = 0) -> EdgeGraph:
    """Copy-model scale-free DAG: edges point from newer to older vertices."""
    return generate("scale-free", n, avg_degree, seed)


def layered_dag(n: int, avg_degree: float, levels: int, seed: int = 0) -> EdgeGraph:
    """Deep layered DAG with exactly ``levels`` levels (``n >= levels``)."""
    return generate("layered", n, avg_degree, seed, levels)


def generate(kind: str, n: int, avg_degree: float, seed: int = 0, levels: int | None = None) -> EdgeGraph:
    """Generate a graph of one of :data:`KINDS` (edges sorted by source, then target; no repeats)."""
    return generate_csr(kind, n, avg_degree, seed, levels).to_edge_graph()


#: file name endings of each output format (``--format auto``)
EXTENSIONS = {"gra": (".gra",), "mtx": (".mtx",), "h5": (".h5", ".hdf5"),
              "edgelist": (".txt", ".el", ".edges", ".edgelist")}
#: endings that name a separator the edge list writer does not write (it puts a blank between ids)
SEPARATED = (".tsv", ".csv")


def output_format(path, fmt: str = "auto") -> str:
    """The format to write ``path`` in: ``fmt``, or with ``"auto"`` the one its extension names;
    an extension that names none is refused (DistGrailError), rather than written as an edge list.
    A ``fmt`` the extension contradicts (``-o g.h5 --format edgelist``: text under a name every
    reader takes for HDF5) is refused too; a name whose extension names no format takes any."""
    low = str(path).lower()
    if fmt != "auto":
        if fmt not in EXTENSIONS:
            raise DistGrailError(f"output format must be one of {', '.join(EXTENSIONS)}, got {fmt!r}")
        named = next((name for name, ends in EXTENSIONS.items() if low.endswith(ends)), fmt)
        if named != fmt:
            ext = next(e for e in EXTENSIONS[named] if low.endswith(e))
            raise DistGrailError(f"{path}: the name says {named} ({ext}), --format says {fmt}: readers go by the name, "
                                 f"so name the file {', '.join(EXTENSIONS[fmt])} (or leave out --format)")
        return fmt
    if low.endswith(SEPARATED):  # ('-o x.tsv' wrote blank-separated lines under a tab-separated name)
        raise DistGrailError(f"{path}: edge lists are written with a blank between the ids, not tabs or commas: "
                             f"name the file {', '.join(EXTENSIONS['edgelist'])} (or give --format edgelist)")
    for name, ends in EXTENSIONS.items():
        if low.endswith(ends):
            return name
    ext = os.path.splitext(os.path.basename(str(path)))[1]
    known = ", ".join(e for ends in EXTENSIONS.values() for e in ends)
    what = f"unknown extension {ext!r}" if ext else "no extension"
    raise DistGrailError(f"{path}: {what}: name the file {known}, or give --format "
                         f"({', '.join(EXTENSIONS)})")


#: ``generate``'s options by the kinds they shape (``(attribute, flag, kinds, default)``): one given
#: for another kind is refused, not ignored
GENERATE_OPTIONS = (("n", "-n", KINDS, None), ("degree", "--degree", KINDS, 10.0),
                    ("levels", "--levels", ("layered",), None), ("scale", "--scale", ("rmat",), None),
                    ("edge_factor", "--edge-factor", ("rmat",), 16), ("a", "-a", ("rmat",), .57),
                    ("b", "-b", ("rmat",), .19), ("c", "-c", ("rmat",), .19), ("threads", "--threads", ("rmat",), None))


def generate_options(args) -> None:
    """Refuse an option ``args`` gives that does not shape ``args.kind``'s graph (ignored, it
    would let the user think it did), then set the defaults of those left out
    (:data:`GENERATE_OPTIONS`)."""
    for attr, flag, kinds, default in GENERATE_OPTIONS:
        if getattr(args, attr, None) is None:
            setattr(args, attr, default)
        elif args.kind not in kinds:
            raise DistGrailError(f"generate {args.kind}: {flag} is for generate {', '.join(kinds)}, "
                                 f"not {args.kind}")


def generate_command(args):
    """``distgrail generate KIND``: generate, write in the output's format; returns (JSON summary,
    the line for humans). The command line has checked the options (:func:`generate_options`) and
    the output path (:func:`distgrail.cli_common.outputs_ok`, after :func:`output_format`)."""
    import time

    from .writers import write_graph

    fmt = output_format(args.output, args.format)
    if args.kind == "rmat":
        from .rmat import run_generate

        return run_generate(args, fmt)
    if args.n is None:
        raise DistGrailError(f"generate {args.kind}: give the number of vertices, -n N")
    from ..progress import Steps

    t = time.perf_counter()
    # progress as index shows it (a line a step off a terminal, once the run passes a second)
    with Steps(not args.quiet, total=["generate", "write"]) as steps:
        with steps.stage("generate"):
            g = generate_csr(args.kind, args.n, args.degree, seed=args.seed, levels=args.levels)
        tg = time.perf_counter() - t
        with steps.stage("write"):
            write_graph(g, args.output, fmt)
        tw = time.perf_counter() - t - tg
    summary = {"output": os.path.abspath(args.output), "kind": args.kind, "n": g.n, "m": g.m,
               "seed": args.seed, "generate_seconds": round(tg, 6), "write_seconds": round(tw, 6)}
    return summary, (f"{args.output}: {args.kind}, {g.n:,} vertices, {g.m:,} edges "
                     f"(generate {tg:.2f} s, write {tw:.2f} s)")
