"""Index write benchmark: HDF5's single-threaded write against the parallel block writer.

    python -m distgrail.benchmarks.write [--mb 1500 | --index FILE.h5] [--dir DIR] [--repeat 3]

Writes the same arrays with ``write_index_file`` twice per round: "hdf5" (every dataset through
``h5py.create_dataset(data=...)`` after a whole-array cast, as before issue 23: the parallel
path switched off) and "blocks" (datasets of at least ``PARALLEL_MIN_BYTES`` cast, written and
checksummed in parallel blocks, :mod:`distgrail.indexfile.write`); prints seconds and GB/s of each
side by side, with the page-cache floors of the machine (the same number of bytes from memory
to new files: one ``write`` by one thread; blocks of 4 MiB by as many threads as the writer's pool
into one file and, split evenly, into 8 files: what one inode and several inodes take) and checks
that both files are byte-identical. The floors say how far a faster writer could go: when 8 files
take the bytes no faster than one, the page cache itself (allocating and copying pages), not the
file, bounds every layout.
Then rewrites an existing output both ways ``distgrail.io.atomic`` can replace it: names
exchanged (``renameat2``) and, as before, a rename over the old file (hard-linked aside first),
which ext4 makes write back the whole new file.

The arrays: ``--mb`` synthesizes an index of about that many MB shaped like an R-MAT one (as
many components as vertices, 8 DAG edges per component, 2 dimensions) with the array types
the builder hands to the writer (int32 components and edges, int64 parents, subtree sizes and
ranks); ``--index`` reads an existing index and gives its arrays those types again, so the
writer casts what it casts after a build. Files go to ``--dir`` (default: the system's temp
dir) and are deleted afterwards; each write starts after ``sync`` and a second's pause so the
previous one's write-back does not run inside it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

#: the types the builder's arrays have when they reach the writer (CPU and GPU builds)
BUILD_TYPES = {"vertex/component": np.int32, "dag/indptr": np.int64, "dag/indices": np.int32,
               "dag/level": np.int32, "forest/parent": np.int64, "forest/subtree_size": np.int64,
               "labels/dt_post0": np.int64}


def synthetic(mb: float, seed: int = 1):
    """(meta, arrays) of an index of about ``mb`` MB as the writer stores it: C components,
    8 C DAG edges, 2 dimensions (76 stored bytes per component)."""
    C = max(int(mb * 1e6 / 76), 1000)
    m = 8 * C
    rng = np.random.default_rng(seed)
    levels = 1000
    meta = {"seed": 0, "dims": 2, "parent_rule": "max-level", "source_name": "synthetic", "source_digest": "",
            "source_digest_algorithm": "", "n_vertices": C, "n_components": C, "n_dag_edges": m,
            "n_levels": levels, "distgrail_version": "bench"}
    indptr = np.arange(0, m + 1, 8, dtype=np.int64)
    arrays = {
        "vertex/component": rng.permutation(C).astype(np.int32),
        "dag/indptr": indptr,
        "dag/indices": rng.integers(0, C, m, dtype=np.int32),
        "dag/level": rng.integers(0, levels, C, dtype=np.int32),
        "forest/parent": rng.integers(-1, C, C, dtype=np.int64),
        "forest/subtree_size": rng.integers(1, C, C, dtype=np.int64),
        "labels/dt_post0": rng.permutation(C).astype(np.int64),
        "labels/intervals": rng.integers(0, C, (2, C, 2), dtype=np.uint32),
    }
    return meta, arrays


def from_index(path):
    """(meta, arrays) of an existing index, its arrays in the builder's types again."""
    from distgrail.indexfile import read_index_file

    meta, arrays = read_index_file(path)
    return meta, {k: (v.astype(BUILD_TYPES[k]) if k in BUILD_TYPES else v) for k, v in arrays.items()}


def _sync():
    if hasattr(os, "sync"):
        os.sync()


def _timed_write(path, meta, arrays, in_blocks: bool, exchange: bool = True) -> float:
    from distgrail.indexfile import layout, write_index_file
    from distgrail.io import atomic

    saved = layout.PARALLEL_MIN_BYTES, atomic._exchange
    layout.PARALLEL_MIN_BYTES = saved[0] if in_blocks else 1 << 62
    if not exchange:
        atomic._exchange = lambda tmp, target: False
    try:
        _sync()
        time.sleep(1)  # ext4 with discard: the blocks of a file just removed are discarded after the sync
        t = time.perf_counter()
        write_index_file(path, meta, arrays)
        return time.perf_counter() - t
    finally:
        layout.PARALLEL_MIN_BYTES, atomic._exchange = saved


def floor_write(path, nbytes: int) -> float:
    """Seconds of one thread writing ``nbytes`` from memory to a new file (the page cache)."""
    buf = np.ones(nbytes, dtype=np.uint8)
    _sync()
    t = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        mv = memoryview(buf)
        while mv:
            mv = mv[f.write(mv):]
    s = time.perf_counter() - t
    os.remove(path)
    return s


def floor_threads(d, nbytes: int, files: int, threads: int, block: int = 4 << 20) -> float:
    """Seconds of ``threads`` threads writing ``nbytes`` from memory into ``files`` new files in
    ``d`` (even shares, blocks of ``block`` bytes by ``os.pwrite``), each file allocated first
    (``posix_fallocate``, as the index writer does)."""
    from concurrent.futures import ThreadPoolExecutor

    buf = memoryview(np.ones(nbytes, dtype=np.uint8))
    share = -(-nbytes // files)
    paths = [os.path.join(d, f"floor{i}.bin") for i in range(files)]
    fds = [os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644) for p in paths]
    try:
        for i, fd in enumerate(fds):
            size = min(share, nbytes - i * share)
            if size > 0 and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)

        def put(at):
            i, off = divmod(at, share)
            end = min(at + block, (i + 1) * share, nbytes)
            view = buf[at:end]
            while view:
                view = view[os.pwrite(fds[i], view, off):]
                off = end - len(view) - i * share

        starts = [a for i in range(files) for a in range(i * share, min((i + 1) * share, nbytes), block)]
        _sync()
        t = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, starts))
        return time.perf_counter() - t
    finally:
        for fd in fds:
            os.close(fd)
        for p in paths:
            os.remove(p)


def _same_bytes(a, b, chunk=64 << 20) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True


def run(meta, arrays, d, repeat: int) -> dict:
    times = {"hdf5": [], "blocks": []}
    for r in range(repeat):
        for name, blocks in (("hdf5", False), ("blocks", True)):
            path = os.path.join(d, f"{name}.h5")
            times[name].append(_timed_write(path, meta, arrays, blocks))
            if r < repeat - 1:
                os.remove(path)
    old, new = os.path.join(d, "hdf5.h5"), os.path.join(d, "blocks.h5")
    size = os.path.getsize(new)
    out = {"bytes": size, "identical": _same_bytes(old, new), "times": times,
           "floor_s": min(floor_write(os.path.join(d, "floor.bin"), size) for r in range(repeat))}
    from distgrail import cores

    out["threads"] = threads = max(1, min(16, cores.usable()))  # (as many as the writer's pool, crc_pool)
    out["floor_files_s"] = {k: min(floor_threads(d, size, k, threads) for r in range(repeat)) for k in (1, 8)}
    os.remove(old)
    # rewriting an existing output (the new writer both times): names exchanged, or renamed over
    out["rewrite_exchange_s"] = min(_timed_write(new, meta, arrays, True) for _ in range(repeat))
    out["rewrite_rename_over_s"] = min(_timed_write(new, meta, arrays, True, exchange=False)
                                       for _ in range(repeat))
    return out


def report(r: dict) -> str:
    gb = r["bytes"] / 1e9
    rows = [f"index file: {gb:.3f} GB, files byte-identical: {'yes' if r['identical'] else 'NO'}",
            f"{'writer':<28}{'best s':>9}{'median s':>10}{'GB/s':>8}"]
    for name, label in (("hdf5", "hdf5 (before)"), ("blocks", "parallel blocks")):
        t = sorted(r["times"][name])
        rows.append(f"{label:<28}{t[0]:>9.3f}{t[len(t) // 2]:>10.3f}{gb / t[0]:>8.2f}")
    rows.append(f"{'page-cache floor (1 write)':<28}{r['floor_s']:>9.3f}{'':>10}{gb / r['floor_s']:>8.2f}")
    for k, s in r["floor_files_s"].items():
        label = f"floor, {r['threads']} threads, {k} file{'s' if k > 1 else ''}"
        rows.append(f"{label:<28}{s:>9.3f}{'':>10}{gb / s:>8.2f}")
    best = min(r["times"]["hdf5"]) / min(r["times"]["blocks"])
    rows.append(f"blocks vs hdf5: {best:.2f}x faster; blocks / floor: {min(r['times']['blocks']) / r['floor_s']:.2f}")
    rows.append(f"rewrite over an existing output: exchange {r['rewrite_exchange_s']:.3f} s, "
                f"rename over the old file {r['rewrite_rename_over_s']:.3f} s")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.write", description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--mb", type=float, default=1500, help="synthesize an index of about this many MB")
    src.add_argument("--index", help="write the arrays of this existing index instead")
    ap.add_argument("--dir", default=None, help="where the files go (default: the temp dir)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    meta, arrays = from_index(a.index) if a.index else synthetic(a.mb)
    d = tempfile.mkdtemp(prefix="distgrail-write-", dir=a.dir)
    try:
        print(f"cpus {os.cpu_count()}, dir {d}", flush=True)
        print(report(run(meta, arrays, d, max(1, a.repeat))), flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "write"))
