"""Compile the CPU backend's numba loops once, at set-up, so that a machine's first large CPU run
does not compile them.

The CPU backend compiles its loops (:mod:`distgrail.jit`) the first time each runs and keeps them
in numba's cache (``NUMBA_CACHE_DIR`` when set, else the package's ``__pycache__``, else numba's
user cache).
The loops for large inputs (strong components, the sibling order of phase 3, a large text's
numbers) run only past size thresholds, so a first run on a large graph paid their compile inside
its build. :func:`warm` runs the pipeline once on small inputs with those thresholds at 0: a text
edge list, a CSV and a tab-separated one read, a graph with cycles condensed and labelled, a chain deeper than
:data:`~distgrail.stages.deep.DEEP_LEVELS` (the deep sweeps), queries on each (the compiled
prefilter and search, also as they run where the components are not numbered by level), and
edges inserted into the dense DAG (the update's renumbering).
``launch/setup.sh`` calls it (``python -m distgrail.jit_warm``) once per install.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time

import numpy as np

__all__ = ["warm", "thresholds_at_zero"]


@contextlib.contextmanager
def thresholds_at_zero():
    """The size thresholds of the compiled CPU loops at 0 inside the block, as they were after it."""
    from .io import guards, text
    from .stages import condense, insertion, ranks

    names = ((condense, "COMPILED_SCC_EDGES"), (ranks, "COMPILED_RANKS_COMPONENTS"), (text, "COMPILED_NUMBERS_BYTES"),
             (guards, "JIT_MIN_BYTES"), (insertion, "COMPILED_GATHER_COMPONENTS"))
    old = [getattr(mod, name) for mod, name in names]
    try:
        for mod, name in names:
            setattr(mod, name, 0)
        yield
    finally:
        for (mod, name), value in zip(names, old):
            setattr(mod, name, value)


def warm(say=None) -> dict:
    """Read, build and query small graphs on the CPU with every compiled loop (module doc);
    returns the seconds taken. ``say``: a function given a line per step."""
    import distgrail
    from .io.generate import generate
    from .io.graph import EdgeGraph
    from .io.read import read_graph
    from .io.writers import write_graph
    from .index import field_labels
    from .query.answer import answer_batch_numpy
    from .query.stats import SearchOptions
    from .update import insert_edges
    from .stages.deep import DEEP_LEVELS

    say = say or (lambda line: None)
    t0 = time.perf_counter()
    rng = np.random.default_rng(5)
    n = 3000
    # a chain plus random edges: cycles; int32 ids, as the readers give for graphs below 2^31 vertices
    src = np.concatenate((np.arange(n - 1), rng.integers(0, n, 2 * n))).astype(np.int32)
    dst = np.concatenate((np.arange(1, n), rng.integers(0, n, 2 * n))).astype(np.int32)
    deep = DEEP_LEVELS + 100
    graphs = [("a graph with cycles", EdgeGraph(n=n, src=src, dst=dst, name="warm")),
              ("a deep chain", EdgeGraph(n=deep, src=np.arange(deep - 1, dtype=np.int32),
                                             dst=np.arange(1, deep, dtype=np.int32), name="chain")),
              ("a dense DAG (searched pairs)", generate("paper", 2000, 8, seed=3))]
    with thresholds_at_zero(), tempfile.TemporaryDirectory(prefix="distgrail-jit-warm-") as d:
        path, csv, tsv = os.path.join(d, "g.txt"), os.path.join(d, "g.csv"), os.path.join(d, "g.tsv")
        write_graph(graphs[0][1], path)
        with open(csv, "w") as f:
            f.write("src,dst\n" + "".join(f"{u},{v}\n" for u, v in zip(src.tolist(), dst.tolist())))
        with open(tsv, "w") as f:  # (a blank then a tab: the tab scan's candidates)
            f.write("".join(f"{u} \t{v}\n" for u, v in zip(src.tolist(), dst.tolist())))
        graphs += [("a text edge list", path), ("a CSV edge list", csv), ("a tab-separated edge list", tsv)]
        for what, graph in graphs:
            t1 = time.perf_counter()
            g = read_graph(graph) if isinstance(graph, str) else graph
            index = distgrail.build_index(g, dims=5, backend="cpu", supports=64)
            s, t = rng.integers(0, g.n, 20000), rng.integers(0, g.n, 20000)
            compiled = SearchOptions(cpu_search="compiled", compiled_min_pairs=1)
            saved = os.path.join(d, "index.h5")  # (and opened from its file: the types a file stores)
            index.save(saved)
            for queried in (index, distgrail.open_index(saved)):
                queried.query(s, t, backend="cpu", search=compiled)
                for dt in (np.int32, np.int64):  # as `query` passes a mapped .npy's ids: read-only strided columns
                    rows = np.stack((s, t), axis=1).astype(dt)
                    rows.flags.writeable = False
                    answer_batch_numpy(queried.labels("cpu"), rows[:, 0], rows[:, 1], search=compiled)
            # the loops' second specialisation, for components not numbered by level (an index an
            # update kept the ids of): the file's types, its levels reversed (only compiled: the
            # answers of these labels mean nothing)
            a = dict(queried.arrays)
            a["dag/level"] = np.ascontiguousarray(a["dag/level"][::-1])
            answer_batch_numpy(field_labels(a, queried.C, queried.dims, queried.supports), s, t, search=compiled)
            say(f"{what}: read, built and queried in {time.perf_counter() - t1:.1f} s")
            if what.startswith("a dense DAG"):  # and updated: new edges close cycles (the renumbering's loop;
                t1 = time.perf_counter()  # the graph with cycles is one component, where every edge changes nothing)
                _, report = insert_edges(index, rng.integers(0, g.n, 200), rng.integers(0, g.n, 200), backend="cpu")
                say(f"{what}: 200 edges inserted in {time.perf_counter() - t1:.1f} s ({report.method})")
                t1 = time.perf_counter()  # the change-only update's walks and its patch's checksums
                _warm_rows(index, rng)
                say(f"{what}: 200 edges inserted as changed rows, their checksums in {time.perf_counter() - t1:.1f} s")
    return {"seconds": time.perf_counter() - t0}


def _warm_rows(index, rng) -> None:
    """``update --layout patch``'s compiled loops on the CPU: the walks of
    :func:`~distgrail.update_rows.insert_rows` and the block CRC-32s from changed bytes."""
    from .index import Index
    from .indexfile.patch import _crcs_from_changes
    from .update_rows import insert_rows

    own = Index(index.meta, {k: np.array(v) for k, v in index.arrays.items()})
    insert_rows(own, rng.integers(0, index.n, 200), rng.integers(0, index.n, 200), sweep="walks", rebuild_above=10 ** 9)
    a = np.arange(64, dtype=np.int32).reshape(1, 32, 2)
    with patch_constant("ROW_BYTES", 0):  # (its cost rule would leave so few rows to the blocks' read)
        _crcs_from_changes(a, np.array([3], np.int64), a[:, 3:4] + 1, (a, 64, np.zeros(4, np.uint32)), 64, 4, 1, 32, 8)


@contextlib.contextmanager
def patch_constant(name: str, value):
    """:mod:`distgrail.indexfile.patch`'s constant ``name`` set to ``value`` inside the block."""
    from .indexfile import patch

    old = getattr(patch, name)
    setattr(patch, name, value)
    try:
        yield
    finally:
        setattr(patch, name, old)


def main() -> int:
    """``python -m distgrail.jit_warm``: :func:`warm`, or a line saying why it could not."""
    try:
        done = warm(say=lambda line: print(f"  {line}", flush=True))
    except Exception as e:  # (set-up goes on: the first large run compiles what is missing)
        print(f"compiling the CPU backend's loops failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"the CPU backend's compiled loops are in numba's cache ({done['seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
