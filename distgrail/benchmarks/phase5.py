"""Phase 5 beside phases 1–4 on the GPU: ``python -m distgrail.benchmarks.labeling --phase5``.

For every graph (default set ``paper``; ``--names`` filters): the DAG is condensed on the GPU
(``distgrail.stages.phases.condense_on``, so the reverse CSR is on the device as in ``distgrail index``),
phases 1–4 (d = 5) are timed, then for K = 0 / 64 / 256 / 1024 phase 5: the support choice
(``choose``) and the masks with their copy to the host under three variants: ``fused``
(one persistent launch, ``in`` pushed along the forward CSR: what the build runs), ``levels``
(one launch per step) and ``pull`` (``in`` pulled over the reverse CSR). Medians of
``--repeat`` runs after a warm-up; ratio = (choose + fused) / phases 1–4.
Masks are compared with the NumPy twin for graphs of at most 30 M edges.

``sweep``: the fused sweep alone (no copy to the host). ``p1-5``: what the build runs, phase 5
started on its own stream after phases 1–2 and waited for after phases 3–4 (masks on the host);
``added`` = p1-5 / phases 1–4 - 1, the build time the masks add (target: <= 0.20 at K = 64).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

VARIANTS = (("fused", "push", "tickets"), ("levels", "push", "levels"), ("pull", "pull", "tickets"))


def _median(fn, repeat, sync):
    ts = []
    for _ in range(repeat + 1):  # the first run warms up
        t = time.perf_counter()
        out = fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts[1:]), out


def run_phase5(args, graphs, label):
    import cupy

    from distgrail.stages.phases import condense_on
    from distgrail.gpu.backend import get_backend
    from distgrail.stages import supports as sup

    be = get_backend("gpu")
    sets = set(args.sets.split(",")) if args.sets != "real,paper,shapes,big" else {"paper"}
    only = [s for s in args.names.split(",") if s]
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"phase 5 beside phases 1-4 (d = 5); GPU {props['name'].decode()}; median of {args.repeat} after a warm-up")
    hdr = (f"{'graph':<18}{'C':>9}{'m':>11}{'levels':>7}{'K':>5}{'p1-4 ms':>9}{'choose':>8}"
           + "".join(f"{v[0] + ' ms':>11}" for v in VARIANTS) + f"{'p5/p1-4':>9}{'launch':>7}{'units':>8}"
           + f"{'sweep':>8}{'p1-5 ms':>9}{'added':>7}")
    print(hdr, flush=True)
    for name, make in graphs(sets, args.data):
        if only and not any(s in name for s in only):
            continue
        _one(name, condense_on(be, make()), args, be, sup, label)
        be.xp.get_default_memory_pool().free_all_blocks()
    return 0


def _one(name, dag, args, be, sup, label):
    from distgrail.stages.labeling import build_forest, label_dimensions

    C, m, L = dag.C, int(dag.indices.shape[0]), dag.n_levels
    t14, _ = _median(lambda: label(dag, 5, be), args.repeat, be.synchronize)
    for K in (0, 64, 256, 1024):
        if K == 0:
            print(f"{name:<18}{C:>9}{m:>11}{L:>7}{K:>5}{t14 * 1e3:>9.1f}{'-':>8}" + f"{'-':>11}" * 3
                  + f"{0.0:>9.3f}", flush=True)
            continue
        tc, ids = _median(lambda: sup.choose_supports(dag, K, 0), args.repeat, be.synchronize)
        cells, runs = [], {}
        for vname, mode, schedule in VARIANTS:
            record = {}

            def masks():
                pending = sup.support_masks_cuda(be, dag, ids, mode=mode, schedule=schedule, wait=False)
                o, i = pending.result()
                record.update(pending.run)
                return be.to_host(o), be.to_host(i)
            tm, res = _median(masks, args.repeat, be.synchronize)
            runs[vname] = (res, record)
            cells.append(tm)
        ok = ""
        if m <= 30_000_000:
            from distgrail.stages.condense import dag_to_host

            want = sup.support_masks_numpy(dag_to_host(dag, be), ids)
            same = all(np.array_equal(r[0][k], want[k]) for r in runs.values() for k in (0, 1))
            ok = "  masks = NumPy twin" if same else "  MISMATCH against the NumPy twin"
        ts, _ = _median(lambda: sup.support_masks_cuda(be, dag, ids), args.repeat, be.synchronize)

        def both():  # as build.py: phases 1-2, then phase 5 on its own stream beside phases 3-4
            forest = build_forest(dag, 0, "max-level", be)
            started = sup.start_supports(dag, K, 0, be)
            label_dimensions(dag, forest, range(5), 0, be, {})
            return started.result()
        tb, res = _median(both, args.repeat, be.synchronize)
        if not all(np.array_equal(res[k + 1], runs["fused"][0][k]) for k in (0, 1)):
            ok += "  OVERLAPPED MASKS DIFFER"
        fused = runs["fused"][1]
        print(f"{name:<18}{C:>9}{m:>11}{L:>7}{K:>5}{t14 * 1e3:>9.1f}{tc * 1e3:>8.2f}"
              + "".join(f"{c * 1e3:>11.2f}" for c in cells)
              + f"{(tc + cells[0]) / t14:>9.3f}{fused['launches']:>7}{fused['units']:>8}"
              + f"{ts * 1e3:>8.2f}{tb * 1e3:>9.1f}{tb / t14 - 1:>7.3f}" + ok, flush=True)


if __name__ == "__main__":
    import sys

    print("python -m distgrail.benchmarks.phase5: error: not a command of its own; run python -m "
          "distgrail.benchmarks.labeling --phase5 [--sets paper] [--names 1.5M] [--repeat 5]", file=sys.stderr)
    raise SystemExit(2)
