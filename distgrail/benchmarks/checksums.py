"""Block CRC-32s of a dataset's bytes: the GPU stage next to the host's, in one run.

    python -m distgrail.benchmarks.checksums [--mib 4096] [--repeat 3] [--json]

Random bytes, ``--mib`` MiB, cut into the index file's blocks (``layout.block_size``). The host's
``layout.block_crcs`` runs ISA-L's CRC-32 over the host threads, what every index write and read
does. On a GPU, ``stages.checksums.block_crcs_cuda`` runs over the same bytes already on the
device (the upload is not timed: an update checksums the arrays it swept there). Each is timed
best of ``--repeat``, the GPU's first call (its module loaded) apart. The two sides' CRC-32s are
checked equal, and the ratio host / GPU printed. Without a GPU the host's row is printed alone.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from .parse import _timed as _best  # (best of repeat, and the last result)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m distgrail.benchmarks.checksums", description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=4096, help="MiB of random bytes (default 4096)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    for flag in ("mib", "repeat"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be 1 or more, got {getattr(args, flag)}")
    from distgrail.gpu.backend import get_backend, gpu_available
    from distgrail.indexfile.layout import block_crcs, block_size, crc_pool

    data = np.random.default_rng(7).integers(0, 2**31, (args.mib << 20) // 4, dtype=np.int32)
    block = block_size(data.nbytes)
    with crc_pool() as pool:
        host_s, host = _best(lambda: [f.result() for f in block_crcs(data, block, pool)], args.repeat)
    row = {"mib": args.mib, "block": block, "blocks": len(host), "host_seconds": round(host_s, 4),
           "gpu_first_seconds": None, "gpu_seconds": None, "host_over_gpu": None}
    if gpu_available():
        from distgrail.stages.checksums import block_crcs_cuda

        be = get_backend("gpu")
        with be.on_device():
            dev = be.asarray(data)
            be.synchronize()

            def on_gpu():
                out = block_crcs_cuda(be, dev, block)
                be.synchronize()
                return out

            first, _ = _best(on_gpu, 1)
            gpu_s, got = _best(on_gpu, args.repeat)
        if [int(x) for x in got] != host:
            raise RuntimeError("the GPU's block CRC-32s differ from the host's")
        row.update(gpu_first_seconds=round(first, 5), gpu_seconds=round(gpu_s, 5),
                   host_over_gpu=round(host_s / gpu_s, 1))
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    print(f"{args.mib:,} MiB in {row['blocks']:,} blocks of {block:,} bytes, best of {args.repeat}")
    print(f"host (ISA-L, threads)    {host_s * 1e3:10.1f} ms  {args.mib / 1024 / host_s:8.1f} GiB/s")
    if row["gpu_seconds"] is None:
        print("GPU                      no usable GPU: not run")
        return 0
    print(f"GPU (dg_crc_chunks)      {gpu_s * 1e3:10.1f} ms  {args.mib / 1024 / gpu_s:8.1f} GiB/s  "
          f"(first call {first * 1e3:.1f} ms)")
    print(f"host / GPU               {row['host_over_gpu']:10.1f}x")
    return 0


if __name__ == "__main__":
    from distgrail.benchmarks import run_main

    raise SystemExit(run_main(main, "checksums"))
