"""Fast text writers for graphs (.gra, edge lists) and answers, without a Python loop per line.

Integers are turned into digits with whole-array NumPy operations, block by block.
"""

from __future__ import annotations

import os

import numpy as np

from .graph import EdgeGraph
from .indexfile import atomic_path

__all__ = ["format_ints", "write_graph", "write_answers", "TEXT_FORMATS"]

TEXT_FORMATS = ("gra", "edgelist")
BLOCK = 1 << 22


def format_ints(vals: np.ndarray, suffix: np.ndarray, table: list[bytes]) -> bytes:
    """Text of ``vals[i]`` followed by ``table[suffix[i]]`` for every i (vals >= 0)."""
    vals = np.asarray(vals, dtype=np.int64)
    if vals.size == 0:
        return b""
    nd = np.ones(vals.size, dtype=np.int64)
    p = 10
    vmax = int(vals.max())
    while p <= vmax:
        nd += vals >= p
        p *= 10
    lens = np.array([len(t) for t in table], dtype=np.int64)
    tot = nd + lens[suffix]
    ends = np.cumsum(tot)
    starts = ends - tot
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    rest = vals.copy()
    for j in range(int(nd.max())):
        live = nd > j
        out[(starts + nd - 1 - j)[live]] = 48 + (rest[live] % 10)
        rest //= 10
    for c, text in enumerate(table):
        sel = suffix == c
        if not sel.any():
            continue
        base = (starts + nd)[sel]
        for q, ch in enumerate(text):
            out[base + q] = ch
    return out.tobytes()


def _gra_blocks(n, indptr, indices):
    # per vertex: "i: " then successors; suffix codes: 0 ": ", 1 ": #\n", 2 " ", 3 " #\n"
    table = [b": ", b": #\n", b" ", b" #\n"]
    row = 0
    while row < n:
        # rows whose edges fit one block (at least one row)
        hi = int(np.searchsorted(indptr, indptr[row] + BLOCK, side="right")) - 1
        hi = min(max(hi, row + 1), n)
        deg = np.diff(indptr[row : hi + 1])
        e0, e1 = int(indptr[row]), int(indptr[hi])
        k = hi - row
        count = k + (e1 - e0)
        vals = np.empty(count, dtype=np.int64)
        codes = np.full(count, 2, dtype=np.int64)
        pos_id = np.arange(k) + np.concatenate(([0], np.cumsum(deg)[:-1]))
        vals[pos_id] = np.arange(row, hi)
        codes[pos_id] = np.where(deg > 0, 0, 1)
        succ = np.ones(count, dtype=bool)
        succ[pos_id] = False
        vals[succ] = indices[e0:e1]
        last = (pos_id + deg)[deg > 0]
        codes[last] = 3
        yield format_ints(vals, codes, table)
        row = hi


def write_graph(graph: EdgeGraph, path, fmt: str | None = None) -> None:
    """Write ``graph`` as ``.gra`` (GRAIL format with header), an edge list, or binary ``.h5``."""
    path = os.fspath(path)
    if fmt is None:
        low = path.lower()
        fmt = "gra" if low.endswith(".gra") else "h5" if low.endswith((".h5", ".hdf5")) else "edgelist"
    if fmt == "h5":
        from .binary import write_binary_graph

        return write_binary_graph(graph, path)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        if fmt == "gra":
            import scipy.sparse as sp

            a = sp.csr_matrix((np.ones(graph.m, dtype=np.bool_), (graph.src, graph.dst)), shape=(graph.n, graph.n))
            a.sort_indices()
            f.write(f"graph_for_greach\n{graph.n}\n".encode())
            for chunk in _gra_blocks(graph.n, a.indptr.astype(np.int64), a.indices):
                f.write(chunk)
        elif fmt == "edgelist":
            f.write(f"# distgrail edge list: {graph.n} vertices, {graph.m} edges\n".encode())
            for e0 in range(0, graph.m, BLOCK):
                e1 = min(graph.m, e0 + BLOCK)
                vals = np.empty(2 * (e1 - e0), dtype=np.int64)
                vals[0::2] = graph.src[e0:e1]
                vals[1::2] = graph.dst[e0:e1]
                codes = np.tile(np.array([0, 1]), e1 - e0)
                f.write(format_ints(vals, codes, [b" ", b"\n"]))
        else:
            from .errors import DistGrailError

            raise DistGrailError(f"output format must be gra, edgelist or h5, got {fmt!r}")


def write_answers(answers: np.ndarray, path) -> None:
    """Answers as ``.npy`` (bool) or text, one 0/1 per line; written atomically."""
    path = os.fspath(path)
    with atomic_path(path) as tmp:
        if path.endswith(".npy"):
            with open(tmp, "wb") as f:
                np.save(f, np.asarray(answers, dtype=bool))
        else:
            a = np.asarray(answers, dtype=np.uint8)
            out = np.empty(2 * a.size, dtype=np.uint8)
            out[0::2] = 48 + a
            out[1::2] = 10
            with open(tmp, "wb") as f:
                f.write(out.tobytes())
