"""Edge lists with columns after the two ids, read on the CPU: the fast path next to the general
path on the same files, in one run.

    python -m distgrail.benchmarks.columns [--edges 5000000] [--repeat 3] [--dir /tmp] [--json] [--mtx]

Four files of the same random edges (ids below m / 5): two columns, three integer columns
(``u v 7``), three with a decimal weight (``u v 0.123``) and five mixed (``u v 0.5 1700000000
word``). Each is read by ``read_graph`` (best of ``--repeat``, the file in the page cache), once as
the reader runs (lines of more than two columns on the fast path, ``_pairs_chunk_fast(extra=True)``)
and once with that path turned off for them (the general path's ``Chunk.keep_columns``, as the
reader ran before); the edges of both are checked equal to the two-column file's. ``--mtx``: a
fifth file, the same edges as a Matrix Market ``real`` file (``u+1 v+1 0.123``, SuiteSparse's
common case), read on the fast path (its lines of the header's three fields, its values checked
by the general path's automaton) and on the general path (``Fields``, every chunk, as before).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np

from .parse import _timed as _best  # (best of repeat, and the last result)


def _files(folder: str, m: int, mtx: bool = False) -> dict:
    rng = np.random.default_rng(7)
    u, v = rng.integers(0, max(m // 5, 1), (2, m)).tolist()
    w = rng.integers(0, 1000, m).tolist()
    shapes = {"2 columns": lambda a, b, c: f"{a} {b}\n", "3 integer columns": lambda a, b, c: f"{a} {b} {c}\n",
              "3 columns, decimal weight": lambda a, b, c: f"{a} {b} 0.{c:03d}\n",
              "5 mixed columns": lambda a, b, c: f"{a} {b} 0.5 {1700000000 + c} w{c}\n"}
    out = {}
    for i, (name, line) in enumerate(shapes.items()):
        path = os.path.join(folder, f"columns{i}.txt")
        with open(path, "w") as f:
            f.write("".join(line(a, b, c) for a, b, c in zip(u, v, w)))
        out[name] = path
    if mtx:
        path = os.path.join(folder, "columns.mtx")
        rows = max(m // 5, 1)
        with open(path, "w") as f:
            f.write(f"%%MatrixMarket matrix coordinate real general\n% benchmarks.columns\n{rows} {rows} {m}\n")
            f.write("".join(f"{a + 1} {b + 1} 0.{c:03d}\n" for a, b, c in zip(u, v, w)))
        out["Matrix Market real"] = path
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.columns", description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=5_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", default=None, help="folder for the files (default: a temporary one, removed)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--mtx", action="store_true", help="also a Matrix Market 'real' file of the same edges")
    args = p.parse_args(argv)
    for flag in ("edges", "repeat"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be 1 or more, got {getattr(args, flag)}")
    import distgrail.io.edgelist as edgelist
    from distgrail import read_graph

    fast = edgelist._pairs_chunk_fast

    def general(data, comments, base, n, cap, note=None, compiled=False, extra=False, fields=None):
        """The reader as it was: lines of more than two columns and Matrix Market values (a
        header's field count other than 2) straight to the general path, with no fast attempt."""
        if fields is not None and fields.count != 2:
            return None
        return fast(data, comments, base, n, cap, note, compiled, False, fields)

    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        files = _files(folder, args.edges, args.mtx)
        ref = read_graph(files["2 columns"])
        for name, path in files.items():
            read_graph(path)  # (into the page cache; numba's loops loaded)
            t_fast, g = _best(lambda: read_graph(path), args.repeat)
            edgelist._pairs_chunk_fast = general
            try:
                t_gen, h = _best(lambda: read_graph(path), args.repeat)
            finally:
                edgelist._pairs_chunk_fast = fast
            for x in (g, h):
                if not (np.array_equal(x.src, ref.src) and np.array_equal(x.dst, ref.dst)):
                    raise RuntimeError(f"{name}: the edges read differ from the two-column file's")
            rows.append({"file": name, "bytes": os.path.getsize(path), "fast_seconds": round(t_fast, 4),
                         "general_seconds": round(t_gen, 4), "general_over_fast": round(t_gen / t_fast, 2)})
    if args.json:
        print(json.dumps({"edges": args.edges, "rows": rows}, indent=2))
        return 0
    print(f"{args.edges:,} edges, best of {args.repeat}, CPU reader (read_graph)")
    print(f"{'file':<28}{'MB':>8}{'fast path':>12}{'general':>12}{'general / fast':>16}")
    for r in rows:
        print(f"{r['file']:<28}{r['bytes'] / 1e6:>8.1f}{r['fast_seconds']:>11.2f}s{r['general_seconds']:>11.2f}s"
              f"{r['general_over_fast']:>15.2f}x")
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "columns"))
