"""Fast text writers for graphs (.gra, edge lists) and answers, without a Python loop per line.

Integers are turned into digits with whole-array NumPy operations, block by block.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import DistGrailError
from .graph import edge_graph_csr
from .atomic import atomic_path

__all__ = ["format_ints", "write_graph", "write_csr", "write_answers", "TEXT_FORMATS", "OUTPUT_EXTENSIONS",
           "check_extension"]

TEXT_FORMATS = ("gra", "edgelist", "mtx")
#: numbers formatted per call (small enough to stay in cache)
BLOCK = 1 << 17


def _group_tables():
    """uint32 words holding 3 digits each, with \\0 in unused byte positions (deleted later).

    Index g: digits of g with leading zeros ('007'); index 1000 + g: without them ('\\0\\07'), used
    for the most significant group. ``lead0`` is the table of the lowest group, where 0 is '0'."""
    full = np.zeros(2000, dtype=np.uint32)
    for g in range(1000):
        full[g] = np.frombuffer(b"\0" + b"%03d" % g, dtype=np.uint32)[0]
        full[1000 + g] = np.frombuffer((b"%d" % g if g else b"").rjust(4, b"\0"), dtype=np.uint32)[0]
    lead0 = full.copy()
    lead0[1000] = np.frombuffer(b"\0\0\x000", dtype=np.uint32)[0]
    return full, lead0


_DIGITS, _DIGITS0 = _group_tables()


def format_ints(vals: np.ndarray, suffix: np.ndarray, table: list[bytes]) -> bytes:
    """Text of ``vals[i]`` followed by ``table[suffix[i]]`` for every i (vals >= 0).

    Each value becomes a row of 4-byte words: one word per 3 decimal digits (a table lookup) and
    one for its suffix (at most 4 bytes); unused bytes are \\0 and one ``bytes.translate`` drops
    them. Call it on blocks of about a million values: the work then stays in cache.
    """
    vals = np.asarray(vals)
    if vals.size == 0:
        return b""
    if any(len(t) > 4 or 0 in t for t in table):
        raise ValueError("suffixes must be at most 4 bytes and contain no NUL")
    vmax = int(vals.max())
    if int(vals.min()) < 0:
        raise ValueError("format_ints formats non-negative integers only")
    groups = max(1, (len(str(vmax)) + 2) // 3)
    words = np.empty((groups + 1, vals.size), dtype=np.uint32)
    v = vals.astype(np.uint32 if vmax < 2**32 else np.uint64)
    for j in range(groups):
        q = v // 1000
        g = (v - q * 1000).astype(np.intp)
        g[q == 0] += 1000
        words[groups - 1 - j] = (_DIGITS0 if j == 0 else _DIGITS)[g]
        v = q
    tab = np.array([np.frombuffer(t.ljust(4, b"\0"), dtype=np.uint32)[0] for t in table], dtype=np.uint32)
    words[groups] = tab[suffix]
    return words.T.tobytes().translate(None, b"\0")


def _gra_blocks(n, indptr, indices):
    """``.gra`` vertex lines ``i: s1 s2 ... #`` in pieces of about BLOCK numbers."""
    # suffix codes: 0 ": ", 1 ": #\n", 2 " ", 3 " #\n"
    table = [b": ", b": #\n", b" ", b" #\n"]
    row = 0
    while row < n:
        hi = int(np.searchsorted(indptr, indptr[row] + BLOCK - (BLOCK >> 4), side="right")) - 1
        hi = min(max(hi, row + 1), n)
        deg = np.diff(indptr[row : hi + 1])
        e0, e1 = int(indptr[row]), int(indptr[hi])
        k = hi - row
        count = k + (e1 - e0)
        vals = np.empty(count, dtype=np.int64)
        codes = np.full(count, 2, dtype=np.int8)
        pos_id = np.arange(k) + (indptr[row:hi] - e0)
        vals[pos_id] = np.arange(row, hi)
        codes[pos_id] = np.where(deg > 0, 0, 1)
        succ = np.ones(count, dtype=bool)
        succ[pos_id] = False
        vals[succ] = indices[e0:e1]
        codes[(pos_id + deg)[deg > 0]] = 3
        yield format_ints(vals, codes, table)
        row = hi


def write_csr(n: int, indptr: np.ndarray, indices: np.ndarray, path, fmt: str | None = None,
              name: str = "", digest: str = "", dag=None) -> None:
    """Write a CSR graph (successors sorted, distinct) as ``.gra``, an edge list, a Matrix Market
    file (``coordinate pattern general``, 1-based) or binary ``.h5`` (optionally with its
    condensation ``dag``); atomically."""
    path = os.fspath(path)
    fmt = fmt or _fmt_of(path)
    if fmt == "h5":
        from .binary import write_binary_csr

        return write_binary_csr(path, n, indptr, indices, name=name, digest=digest, dag=dag)
    if fmt not in TEXT_FORMATS:
        raise DistGrailError(f"output format must be gra, edgelist, mtx or h5, got {fmt!r}")
    m = int(indices.size)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        if fmt == "gra":
            f.write(f"graph_for_greach\n{n}\n".encode())
            for chunk in _gra_blocks(n, indptr, indices):
                f.write(chunk)
        else:
            f.write(_edge_header(fmt, n, m))
            one = 1 if fmt == "mtx" else 0
            half = BLOCK // 2
            codes = np.tile(np.array([0, 1], dtype=np.int8), half)
            row = 0
            for e0 in range(0, m, half):
                e1 = min(m, e0 + half)
                vals = np.empty(2 * (e1 - e0), dtype=np.int64)
                hi = int(np.searchsorted(indptr, e1, side="left"))
                src = np.repeat(np.arange(row, hi, dtype=np.int64), np.diff(np.clip(indptr[row : hi + 1], e0, e1)))
                row = max(hi - 1, 0)
                vals[0::2] = src
                vals[1::2] = indices[e0:e1]
                vals += one
                f.write(format_ints(vals, codes[: vals.size], [b" ", b"\n"]))


def _edge_header(fmt: str, n: int, m: int) -> bytes:
    if fmt == "mtx":
        return f"%%MatrixMarket matrix coordinate pattern general\n% distgrail graph\n{n} {n} {m}\n".encode()
    return f"# distgrail edge list: {n} vertices, {m} edges\n".encode()


def _fmt_of(path: str) -> str:
    low = path.lower()
    return ("gra" if low.endswith(".gra") else "h5" if low.endswith((".h5", ".hdf5")) else
            "mtx" if low.endswith(".mtx") else "edgelist")


def write_graph(graph, path, fmt: str | None = None, dag=None) -> None:
    """Write ``graph`` (an :class:`EdgeGraph` or a generated ``CSRGraph``) as ``.gra`` (GRAIL
    format with header), an edge list, Matrix Market (``.mtx``), or binary ``.h5``. Repeated edges are merged in ``.gra``
    and ``.h5``; an edge list from an EdgeGraph keeps every edge in input order. A graph with node
    labels is refused: these files hold vertex ids (:func:`~distgrail.io.binary.refuse_node_labels`)."""
    path = os.fspath(path)
    fmt = fmt or _fmt_of(path)
    if fmt not in TEXT_FORMATS + ("h5",):
        raise DistGrailError(f"output format must be gra, edgelist, mtx or h5, got {fmt!r}")
    from .binary import refuse_node_labels

    refuse_node_labels(graph, path, {"h5": "a .h5 graph file", "edgelist": "an edge list written here"}.get(
        fmt, f"a .{fmt} file written here"))
    if hasattr(graph, "indptr"):
        return write_csr(graph.n, graph.indptr, graph.indices, path, fmt, name=graph.name,
                         digest=getattr(graph, "digest", ""), dag=dag)
    if fmt in ("edgelist", "mtx"):  # keep the edges as they are (order, repeats)
        one = 1 if fmt == "mtx" else 0
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            f.write(_edge_header(fmt, graph.n, graph.m))
            half = BLOCK // 2
            codes = np.tile(np.array([0, 1], dtype=np.int8), half)
            for e0 in range(0, graph.m, half):
                e1 = min(graph.m, e0 + half)
                vals = np.empty(2 * (e1 - e0), dtype=np.int64)
                vals[0::2] = graph.src[e0:e1]
                vals[1::2] = graph.dst[e0:e1]
                vals += one
                f.write(format_ints(vals, codes[: vals.size], [b" ", b"\n"]))
        return None
    indptr, indices = edge_graph_csr(graph)
    return write_csr(graph.n, indptr, indices, path, fmt, name=graph.name, digest=graph.digest, dag=dag)


#: answer files with one ``u v reachable`` row per pair (the pairs as the user named them)
TABLE_ANSWERS = (".tsv", ".csv", ".tsv.gz", ".csv.gz", ".parquet")
#: answer files with one 0/1 per line (``.txt.gz``: gzip-compressed)
LINE_ANSWERS = (".txt", ".answers", ".txt.gz")
#: the names the command line writes, by what it writes (any other extension is refused)
OUTPUT_EXTENSIONS = {"answers": LINE_ANSWERS + (".npy",) + TABLE_ANSWERS, "index": (".h5", ".hdf5"),
                     "graph": (".h5", ".hdf5")}
_KNOWN = {"answers": ".txt or .answers (one 0/1 per line; .txt.gz compressed), .npy (bool), .tsv or .csv "
                     "(u v reachable rows; .gz ok), .parquet, or - for stdout",
          "index": ".h5 or .hdf5 (an index is an HDF5 file)",
          "graph": ".h5 or .hdf5 (the binary graph is an HDF5 file)"}


def check_extension(path, what: str) -> None:
    """Refuse an output named with an extension that ``what`` ("answers", "index", "graph") is
    never written as (DistGrailError, one line naming the known ones), rather than write, e.g.,
    0/1 lines into ``answers.xlsx`` or HDF5 into ``out.txt``. ``-`` is stdout (answers only)."""
    path = os.fspath(path)
    if what == "answers" and path == "-":
        return
    if path.lower().endswith(OUTPUT_EXTENSIONS[what]):
        return
    ext = os.path.splitext(os.path.basename(path))[1]
    found = f"unknown extension {ext!r}" if ext else "no extension"
    raise DistGrailError(f"{path}: {found} for the {what} file: name it {_KNOWN[what]}")


def write_answers(answers: np.ndarray, path, sources=None, targets=None) -> None:
    """Answers, written atomically, by the name's extension:

    * ``.tsv`` / ``.csv`` (``.gz`` too): a header ``u v reachable`` (tab or comma separated), then
      one row per pair: the two vertices as the pairs file named them (node labels where the
      index has them) and 1 (reachable) or 0;
    * ``.parquet``: columns ``u``, ``v`` (int64 or string) and ``reachable`` (bool), via pyarrow;
    * ``.npy``: a bool array;
    * anything else: one 0/1 per line (``.gz``, in any case: gzip-compressed,
      :func:`~distgrail.io.answers.compression_of`); ``-``: that text on stdout
      (the command line writes only the names :func:`check_extension` takes).

    The row formats need ``sources`` and ``targets`` (the pairs)."""
    path = os.fspath(path)
    low = path.lower()
    if low.endswith(TABLE_ANSWERS):
        if sources is None or targets is None:
            raise DistGrailError(f"{path}: a {low.rsplit('.', 1)[-1]} answer file needs the pairs")
        from .answers import write_answer_rows

        return write_answer_rows(np.asarray(answers, bool), np.asarray(sources), np.asarray(targets), path, format_ints)
    if path == "-":
        import sys

        sys.stdout.flush()
        sys.stdout.buffer.write(_zero_one_lines(answers))
        sys.stdout.buffer.flush()
        return
    from .answers import compression_of, gzip_writer

    with atomic_path(path) as tmp:
        if low.endswith(".npy"):  # (as check_extension: ANS.NPY is an .npy file too)
            with open(tmp, "wb") as f:
                np.save(f, np.asarray(answers, dtype=bool))
        elif compression_of(path) == "gz":  # (the readers' rule: .gz in any case)
            with open(tmp, "wb") as raw, gzip_writer(raw, path) as f:
                f.write(_zero_one_lines(answers))
        else:
            with open(tmp, "wb") as f:
                f.write(_zero_one_lines(answers))


def _zero_one_lines(answers) -> bytes:
    a = np.asarray(answers, dtype=np.uint8)
    out = np.empty(2 * a.size, dtype=np.uint8)
    out[0::2] = 48 + a
    out[1::2] = 10
    return out.tobytes()
