"""Text parsing benchmark: the CPU reader next to the GPU reader on the same file, in one run.

    python -m distgrail.benchmarks.parse GRAPH [--format auto] [--num-vertices N] [--chunk-mb 32]
                                         [--repeat 3] [--device gpu|numpy] [--json]

The file is read once first so that every timing reads it from the page cache. Then, best of
``--repeat``: the digest of the file alone (BLAKE3 on every core, as the readers hash it),
the CPU reader (``read_graph``), the GPU reader (``read_graph_cuda``, hash included, device arrays
ready), and the GPU reader without the hash (the parse alone). The GPU's first call (kernel
compile, pinned buffers) is shown apart. MB/s are file bytes per second (1 MB = 10^6 bytes);
the edges of both readers are checked equal (n, src, dst, digest). ``--device numpy`` runs the
NumPy twin through the same pipeline instead (a CPU-machine check of the benchmark itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _timed(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _digest(path):
    """The file's digest alone (what the readers hash in the background)."""
    from distgrail.io.digest import FileDigest

    return FileDigest(path).result()


def main(argv=None) -> int:
    from distgrail.io.formats import GPU_FORMATS

    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.parse", description=__doc__.split("\n\n")[0])
    p.add_argument("graph")
    p.add_argument("--format", default="auto", choices=("auto",) + GPU_FORMATS)
    p.add_argument("--num-vertices", type=int, default=None)
    p.add_argument("--chunk-mb", type=float, default=None, help="GPU chunk size in MiB (default: the module's)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--device", default="gpu", choices=["gpu", "numpy"])
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)

    import numpy as np

    from distgrail.io.parse import CHUNK_BYTES, NumpyDevice, read_text_graph
    from distgrail.io.read import read_graph

    chunk = int(a.chunk_mb * (1 << 20)) if a.chunk_mb else CHUNK_BYTES
    size = os.path.getsize(a.graph)
    _digest(a.graph)  # into the page cache

    if a.device == "gpu":
        import cupy

        from distgrail.io.parse import CudaDevice

        def make_dev():
            return CudaDevice()

        def sync():
            cupy.cuda.Device().synchronize()

        def host(x):
            return cupy.asnumpy(x)
    else:
        def make_dev():
            return NumpyDevice()

        def sync():
            pass

        def host(x):
            return np.asarray(x)

    notes = []

    def gpu(sha=True):
        g = read_text_graph(a.graph, a.format, a.num_vertices, make_dev(), chunk_bytes=chunk, notify=notes.append,
                            digest=sha)
        sync()
        return g

    t_first, _ = _timed(gpu, 1)
    t_sha, digest = _timed(lambda: _digest(a.graph), a.repeat)
    t_cpu, gc = _timed(lambda: read_graph(a.graph, a.format, a.num_vertices), a.repeat)
    t_gpu, gg = _timed(gpu, a.repeat)
    t_parse, _ = _timed(lambda: gpu(False), a.repeat)
    if gg is None:
        print(f"the GPU reader did not take {a.graph}: {'; '.join(notes)}", file=sys.stderr)
        return 1
    equal = (gg.n == gc.n and gg.digest == gc.digest == digest and np.array_equal(host(gg.src), gc.src)
             and np.array_equal(host(gg.dst), gc.dst))
    mb = size / 1e6
    row = {"file": os.path.basename(a.graph), "bytes": size, "n": gc.n, "m": gc.m, "chunk_bytes": chunk,
           "device": a.device, "parser": gg.meta.get("parser"), "digest_s": t_sha, "cpu_s": t_cpu,
           "gpu_s": t_gpu, "gpu_parse_only_s": t_parse, "gpu_first_call_s": t_first,
           "digest_MBps": mb / t_sha, "cpu_MBps": mb / t_cpu, "gpu_MBps": mb / t_gpu,
           "gpu_parse_only_MBps": mb / t_parse, "ratio": t_cpu / t_gpu, "equal": bool(equal)}
    if a.json:
        print(json.dumps(row))
    else:
        print(f"{row['file']}: {size / 1e9:.3f} GB, n={gc.n:,}, m={gc.m:,}, chunk {chunk >> 20} MiB, "
              f"{a.device} parser={row['parser']}, best of {a.repeat}")
        print(f"  {'stage':<28}{'s':>9}{'MB/s':>10}")
        for label, t in (("digest alone (BLAKE3)", t_sha), ("CPU reader", t_cpu), ("GPU reader (with digest)", t_gpu),
                         ("GPU reader, no digest", t_parse), ("GPU first call", t_first)):
            print(f"  {label:<28}{t:>9.3f}{mb / t:>10.0f}")
        print(f"  GPU / CPU speed-up: {row['ratio']:.1f}x; edges equal: {equal}")
    return 0 if equal else 1


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "parse"))
