"""Warm CuPy's kernel cache once, at set-up, so that a machine's first real run does not compile.

distgrail's own kernels ship compiled (fatbins, :mod:`distgrail.gpu.kernels`), but CuPy
JIT-compiles its own kernels for the array operations the stages use (dtype casts, arithmetic and
comparisons, scans, searches, selections: docs/kernels.md) the first time each runs, and keeps
them in its cache (``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``). :func:`warm` runs the
pipeline once on small graphs that take the paths a real run takes (a text edge list parsed on
the GPU, a ``.h5`` graph, cycles, self-loops and duplicate edges, a DAG wide and deep enough for
the index's 32-bit and 16-bit stored types, support masks, queries, the index written and opened
again, edges inserted), so those kernels land in the cache. ``launch/setup.sh``
calls it (``python -m distgrail.gpu.warm``: exit 0 without a GPU, saying so; 1 if the warm-up
fails) when it installs the GPU extra; the Slurm templates keep the same cache across jobs. Paths only very large graphs take (scans in pieces past
2^31 items) and the partitioned build across ranks still compile on their first use.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

__all__ = ["warm", "cache_dir", "cache_files"]


def cache_dir() -> str:
    """CuPy's kernel cache folder: ``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cupy", "kernel_cache")


def cache_files(path: str | None = None) -> int:
    """Files in CuPy's kernel cache folder (0 when it does not exist)."""
    path = cache_dir() if path is None else path
    return sum(len(files) for _, _, files in os.walk(path)) if os.path.isdir(path) else 0


def _graph(n: int, seed: int):
    """Edges of a scale-free DAG plus back edges (cycles, one large SCC), self-loops and
    repeated edges, as ``(src, dst)`` int64 arrays."""
    from ..io.generate import generate

    dag = generate("scale-free", n, 6, seed=seed)
    rng = np.random.default_rng(seed)
    back = rng.integers(0, n, (n // 8, 2))
    loops = rng.integers(0, n, 16)
    src = np.concatenate([dag.src, back[:, 1], loops, dag.src[:64]]).astype(np.int64)
    dst = np.concatenate([dag.dst, back[:, 0], loops, dag.dst[:64]]).astype(np.int64)
    return src, dst


def warm(backend: str = "gpu", n: int = 20000, say=None, wide: int = 100000) -> dict:
    """Build and query small indexes on ``backend`` (module doc); returns what it did: seconds,
    CuPy's cache folder and the files it gained. ``say``: a function given a line per step.
    ``wide``: vertices of a layered DAG of more than 2^16 components and 2^8 levels, so the
    index's wider stored types (and CuPy's kernels for them) come too (0: none)."""
    import distgrail
    from ..io.binary import write_binary_graph
    from ..io.graph import EdgeGraph
    from ..io.writers import write_graph
    from ..update import insert_edges

    say = say or (lambda line: None)
    folder, before, t0 = cache_dir(), cache_files(), time.perf_counter()
    src, dst = _graph(n, 7)
    g = EdgeGraph(n=n, src=src, dst=dst, name="warm")
    rng = np.random.default_rng(3)
    sources, targets = rng.integers(0, 1 << 62, 100000), rng.integers(0, 1 << 62, 100000)
    with tempfile.TemporaryDirectory(prefix="distgrail-warm-") as d:
        text, h5, out = os.path.join(d, "g.txt"), os.path.join(d, "g.h5"), os.path.join(d, "i.h5")
        write_graph(g, text)
        write_binary_graph(g, h5)
        graphs = [("a text edge list", text), ("a .h5 graph", h5), ("the bundled graph", distgrail.bundled_graph())]
        if wide:
            from ..io.generate import generate

            graphs.append(("a layered DAG", generate("layered", wide, 3, seed=5, levels=300)))
        for what, graph in graphs:
            t1 = time.perf_counter()
            built = distgrail.build_index(graph, dims=5, backend=backend, output=out, supports=64)
            served = distgrail.open_index(out)
            served.query(sources % built.n, targets % built.n, backend=backend)
            ea, eb = rng.integers(0, built.n, 300), rng.integers(0, built.n, 300)
            # edges swept into an index with a query state (serve's updates), then into one without
            # (distgrail update's): the two ways the sweep's arrays reach the device
            insert_edges(served, ea, eb, backend=backend, rebuild_above=10 ** 9)
            insert_edges(distgrail.open_index(out), ea, eb, backend=backend, rebuild_above=10 ** 9, consume=True)
            say(f"{what}: built, written, opened, queried and updated in {time.perf_counter() - t1:.1f} s")
    return {"seconds": time.perf_counter() - t0, "cache_dir": folder, "cache_files_added": cache_files() - before}


def main() -> int:
    """``python -m distgrail.gpu.warm``: :func:`warm` on the GPU, or a line saying why not."""
    from .backend import gpu_available

    if not gpu_available():
        print(f"no usable CUDA GPU here: CuPy's kernel cache ({cache_dir()}) not warmed")
        return 0
    try:
        done = warm("gpu", say=lambda line: print(f"  {line}", flush=True))
    except Exception as e:  # (set-up goes on: the first run compiles what is missing)
        print(f"warming CuPy's kernel cache failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"CuPy's kernel cache {done['cache_dir']}: {done['cache_files_added']} kernels added "
          f"in {done['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
