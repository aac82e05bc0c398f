#!/usr/bin/env python3
"""Build a matrix of indexes with one distgrail tree and print one digest line per index, so that
the matrix built by two trees (before and after a refactor) can be diffed:

    python launch/index_matrix.py --tree /tmp/before --out /tmp/m-before   # full matrix, CPU, 1-3 ranks
    python launch/index_matrix.py --tree . --out /tmp/m-now [--quick] [--ranks 1,2] [--backend gpu]
    python launch/index_matrix.py --compare /tmp/m-before/digests.tsv /tmp/m-now/digests.tsv

Each build is ``python -m distgrail index ...`` run from ``--out`` with ``PYTHONPATH=<tree>`` first (the caller's entries after it; an old
checkout without this script is measured alike), for R > 1 ranks under ``$MPIEXEC -n R $MPIRUN_ARGS
python -m mpi4py -m distgrail`` (MPIEXEC default: ``mpiexec`` beside the Python, else on PATH), in
the caller's environment less ``DISTGRAIL_*`` and launcher variables (``PMI_*``, ``HYDRA_*``,
``OMPI_*`` but the site's ``OMPI_MCA_*``, ``PMIX_*``, ``MPI_*``, ``SLURM_*``); a case sets the ``DISTGRAIL_*`` it needs.

**Cases** (``--list``; named like ``rmat/d3-kauto-s7-dfs/r2-part-root``). Graphs (``GRAPHS``): the
bundled one; files written here (pure Python, BLAKE2b: the same bytes anywhere) with cycles,
self-loops, duplicate edges, isolated vertices, one vertex (``.gra``), none, a deep chain, a dense
DAG, one giant SCC, string labels; the tree's ``distgrail generate``: R-MAT, ``paper`` (``.gra``),
``layered`` (``.mtx``) (``--graphs DIR`` copies all these from another run instead); the R-MAT
``convert``-ed to ``.h5``, indexed once. All 40 option sets (dims 1..5 x supports 0|auto x seed
0|7 x rule max-level|dfs) at one rank, round-robin over the graphs; per graph a max-level set at 1
and 2 ranks, ``--partition on`` at 2 ranks with ``DISTGRAIL_PARTITION_DAG=root`` and 3 with
``=ranks``, and with flag F also 3 ranks, 3 root, 2 ranks; D: a dfs set at 1, 2 ranks, 3 root;
C (cycles): ``DISTGRAIL_PARTITION_GATHER=0`` at 2 root, 3 ranks (the SCC search then runs across
the ranks, not on rank 0). ``--quick``: the graphs Q, their one-rank cases and the four above.

**Digest: SHA-256 of the file.** Two builds of a case give the same bytes (checked: bundled and
generated graphs, 1-3 ranks, partitioned or not, twice): no timestamp (``track_times=False``), no
timing, host or path is stored; the root attributes are the options, sizes, ``source_name`` (the
graph file's base name), ``source_digest`` (of its bytes), ``distgrail_version`` and the datasets'
checksums. So no attribute is excluded, and a new version string, graph file name or h5py/HDF5
changes every digest: compare trees run by one venv. The inputs are listed too (``input/NAME``:
the file's SHA-256; ``convert/rmat.h5``: the tree's converted graph).

**Output.** ``case<TAB>sha256`` lines on stdout and in ``OUT/digests.tsv`` (``FAILED(rc=N)``: a failed
build, its output in ``OUT/logs/``); indexes in ``OUT/indexes/``; ``#`` lines: the cross-rank check
(an option set of a graph: one digest at every rank count and partition mode) and the time. Exit 1
when a build or the check failed. ``--compare A.tsv B.tsv`` prints the cases whose digest differs
(or that one file lacks), with the first attribute or dataset that differs when the indexes are
still beside the ``.tsv`` files, and exits 1 if any differ.
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

OPTION_SETS = [(d, k, s, r) for d in range(1, 6) for k in ("0", "auto") for s in (0, 7) for r in ("max-level", "dfs")]  # one rank
#: (ranks, DISTGRAIL_PARTITION_DAG or None: no --partition, DISTGRAIL_PARTITION_GATHER=0)
SWEEP = [(1, None, False), (2, None, False), (3, None, False), (2, "root", False), (3, "root", False),
         (2, "ranks", False), (3, "ranks", False)]
SHORT = [(1, None, False), (2, None, False), (2, "root", False), (3, "ranks", False)]  # also --quick's
DFS_SWEEP = [(1, None, False), (2, None, False), (3, "root", False)]  # the dfs rule: never ranks
GATHER0 = [(2, "root", True), (3, "ranks", True)]


def _u(tag: str, i: int) -> float:
    """A uniform number in [0, 1) from BLAKE2b of (tag, i): the same on every Python."""
    return int.from_bytes(hashlib.blake2b(f"{tag}:{i}".encode(), digest_size=8).digest(), "little") / 2.0 ** 64


def cycles():  # 50 cycles of 1..8 vertices, edges between them, 5 of them merged by a back edge
    groups, edges, n = [], [], 0
    for k in range(50):
        size = 1 + k % 8
        groups.append(list(range(n, n + size)))
        edges += [(n + j, n + (j + 1) % size) for j in range(size)] if size > 1 else []
        n += size
    edges += [(groups[a][b % len(groups[a])], groups[b][a % len(groups[b])])
              for a in range(50) for b in range(a + 1, 50) if _u("cycles", 50 * a + b) < 0.08]
    return n, edges + [(groups[k][0], groups[k + 1][0]) for k in range(40, 44)] + [(groups[44][0], groups[40][0])]


def selfloops():  # a DAG, a loop on every third vertex, a 2-cycle with a loop, a vertex with a loop only
    edges = [(i, j) for i in range(399) for j in range(i + 1, min(i + 6, 399)) if _u("sl", 400 * i + j) < 0.3]
    return 400, edges + [(i, i) for i in range(0, 400, 3)] + [(10, 11), (11, 10), (399, 399)]


def duplicates():  # 900 random edges (cycles, a few loops), each 1-4 times, lines shuffled
    lines = [(int(_u("du", e) * 300), int(_u("dv", e) * 300)) for e in range(900) for _ in range(1 + e % 4)]
    return 300, [lines[i] for i in sorted(range(len(lines)), key=lambda i: _u("do", i))]


def isolated():  # edges among multiples of 3 below 600, ids as they are; the rest of 0..999 isolated
    pick = [(3 * int(_u("ia", e) * 200), 3 * int(_u("ib", e) * 200)) for e in range(300)]
    return 1000, sorted({(min(a, b), max(a, b)) for a, b in pick if a != b}), False


def chain():
    return 2500, [(i, i + 1) for i in range(2499)]


def dense_dag():  # i -> j for 60 % of the pairs i < j
    return 220, [(i, j) for i in range(220) for j in range(i + 1, 220) if _u("dd", 220 * i + j) < 0.6]


def giant_scc():  # a Hamiltonian cycle with chords both ways: one component
    edges = [(i, (i + 1) % 1500) for i in range(1500)] + [(i, (31 * i + 17) % 1500) for i in range(0, 1500, 3)]
    return 1500, edges + [(v, u) for u, v in edges[1500::4]]


def write_edges(path, n, edges, scramble=True):
    """``u v`` lines, ids permuted by i -> (7919 i + 13) mod n (id order is not topological order)."""
    perm = (lambda i: (7919 * i + 13) % n) if scramble and n % 7919 else (lambda i: i)
    with open(path, "w") as f:
        f.write(f"# {os.path.basename(path)}: {n} vertices, {len(edges)} edges\n")
        f.writelines(f"{perm(u)} {perm(v)}\n" for u, v in edges)


LABELLED = "".join(f"node{(37 * i) % 300} node{(37 * i + 101) % 300}\n" for i in range(300)) + "alice bob\nbob alice\ncarol carol\n"

#: name: (file, made of: its text | (n, edges) of a function | `distgrail generate` arguments |
#: ("convert", graph), extra `index` arguments, flags: F, D, C, Q of the module docstring)
GRAPHS = {
    "bundled": ("bundled", None, [], "FDQ"),
    "cycles": ("cycles.txt", cycles, [], "FDCQ"),
    "selfloops": ("selfloops.txt", selfloops, [], "C"),
    "duplicates": ("duplicates.txt", duplicates, [], "C"),
    "isolated": ("isolated.txt", isolated, ["--num-vertices", "1000"], ""),
    "one_vertex": ("one_vertex.gra", "graph_for_greach\n1\n0: #\n", [], "Q"),
    "empty": ("empty.txt", "# no edges (indexed with --num-vertices 0)\n", ["--num-vertices", "0"], "FQ"),
    "chain": ("chain.txt", chain, [], ""),
    "dense_dag": ("dense_dag.txt", dense_dag, [], "D"),
    "giant_scc": ("giant_scc.txt", giant_scc, [], "FCQ"),
    "labelled": ("labelled.txt", LABELLED, [], ""),
    "rmat": ("rmat.txt", ["rmat", "--scale", "11", "--edge-factor", "8", "--seed", "3"], [], "FDCQ"),
    "paper": ("paper.gra", ["paper", "-n", "3000", "--degree", "4", "--seed", "1"], [], ""),
    "layered": ("layered.mtx", ["layered", "-n", "2000", "--levels", "150", "--degree", "3", "--seed", "2"], [], ""),
    "rmat_h5": ("rmat.h5", ("convert", "rmat"), [], "Q"),
}


def make_cases(quick: bool) -> list:
    """[(name, graph, opts or None: the defaults, ranks, dag, gather0)], in build order; the quick
    cases are some of the full matrix's (same names: either compares with the other)."""
    cases = {}

    def add(graph, opts, ranks, dag=None, gather0=False, defaults=False, in_quick=True):
        tail = f"r{ranks}" + (f"-part-{dag}" if dag else "") + ("-gather0" if gather0 else "") + ("-defaults" if defaults else "")
        name = f"{graph}/d{opts[0]}-k{opts[1]}-s{opts[2]}-{opts[3]}/{tail}"
        if not quick or (in_quick and "Q" in GRAPHS[graph][3]):
            cases.setdefault(name, (name, graph, None if defaults else opts, ranks, dag, gather0))

    names = [g for g in GRAPHS if g != "rmat_h5"]
    for i, g in enumerate(names):
        flags = GRAPHS[g][3]
        base = (1 + i % 5, "auto" if i % 2 == 0 else "0", 7 if i % 3 == 1 else 0, "max-level")
        for ranks, dag, g0 in (SWEEP if "F" in flags else SHORT) + (GATHER0 if "C" in flags else []):
            add(g, base, ranks, dag, g0, in_quick=(ranks, dag, g0) in SHORT)
        if "D" in flags:
            dfs = (1 + (i + 2) % 5, "0" if base[1] == "auto" else "auto", 7 - base[2], "dfs")
            for ranks, dag, g0 in DFS_SWEEP:
                add(g, dfs, ranks, dag, g0, in_quick=ranks == 1)
    for j, opts in enumerate(OPTION_SETS):
        add(names[j % len(names)], opts, 1)
    add("bundled", (5, "auto", 0, "max-level"), 1, defaults=True)  # no option given: the defaults
    add("rmat_h5", (3, "auto", 0, "max-level"), 1)
    return list(cases.values())


def launcher(python, env):
    """(mpiexec, its extra arguments); Open MPI's as launch/mpirun.sh sets it (root, oversubscribed)."""
    mpiexec = os.environ.get("MPIEXEC") or os.path.join(os.path.dirname(python), "mpiexec")
    if not (os.path.isabs(mpiexec) and os.access(mpiexec, os.X_OK)):
        mpiexec = shutil.which(os.environ.get("MPIEXEC") or "mpiexec") or mpiexec
    extra = shlex.split(os.environ.get("MPIRUN_ARGS", ""))
    try:
        v = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        v = ""
    if re.search(r"open mpi|open-mpi|openrte", v, re.I):
        extra = ["--oversubscribe", "--bind-to", "none"] + extra
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return mpiexec, extra


def command(args, mpi, ranks, sub):
    launch = [mpi[0], "-n", str(ranks)] + mpi[1] if ranks > 1 else []
    return launch + [args.python] + (["-m", "mpi4py"] if ranks > 1 else []) + ["-m", "distgrail"] + sub


def run(args, cmd, env, log):
    """(exit status, seconds) of ``cmd`` run from ``--out`` (``python -m`` puts the working folder
    first on sys.path: a checkout there would shadow PYTHONPATH's tree); its output to ``log`` if it fails."""
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=args.out)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc, out = 124, f"{err}\ntimed out after {args.timeout} s"
    if rc:
        with open(log, "w") as f:
            f.write(shlex.join(cmd) + "\n" + out)
        tail = "\n    ".join(out.strip().splitlines()[-3:])
        print(f"index_matrix: failed (rc={rc}, {log}):\n    {tail}", file=sys.stderr)
    return rc, time.perf_counter() - t


def sha256(path):
    with open(path, "rb") as f:  # small files
        return hashlib.sha256(f.read()).hexdigest()


def make_graphs(args, mpi, env, needed, results) -> dict:
    """Write or generate the graphs ``needed``: {graph: path, or 'bundled'}; their digest lines to ``results``."""
    paths = {}
    for name in [g for g in GRAPHS if g in needed or (g == "rmat" and "rmat_h5" in needed)]:
        file, how, _, _ = GRAPHS[name]
        if how is None:
            paths[name] = file
            continue
        path = os.path.join(args.out, "graphs", file)
        label = f"{'convert' if isinstance(how, tuple) else 'input'}/{file}"
        if args.graphs and not isinstance(how, tuple):
            shutil.copyfile(os.path.join(args.graphs, file), path)
        elif isinstance(how, str):
            with open(path, "w") as f:
                f.write(how)
        elif callable(how):
            write_edges(path, *how())
        elif isinstance(how, tuple) and how[1] not in paths:
            results.append((label, "FAILED(no input)"))
            continue
        else:
            sub = (["convert", paths[how[1]], "-o", path, "--backend", args.backend, "--quiet"]
                   if isinstance(how, tuple) else ["generate"] + how + ["-o", path, "--quiet"])
            rc, _ = run(args, command(args, mpi, 1, sub), env, os.path.join(args.out, "logs", file + ".log"))
            if rc:
                results.append((label, f"FAILED(rc={rc})"))
                continue
        paths[name] = path
        results.append((label, sha256(path)))
    return paths


def build(args, mpi, env, paths, case):
    """(digest or FAILED(...), seconds) of one case."""
    name, graph, opts, ranks, dag, gather0 = case
    if graph not in paths:
        return "FAILED(no input)", 0.0
    flat = name.replace("/", "~")
    index, log = (os.path.join(args.out, sub, flat + ext) for sub, ext in (("indexes", ".h5"), ("logs", ".log")))
    for old in [index, index[:-3] + ".single.h5", *glob.glob(glob.escape(index) + ".*.part*")]:
        if os.path.exists(old):
            os.remove(old)
    sub = ["index", paths[graph], "-o", index, "--quiet", "--backend", args.backend] + GRAPHS[graph][2]
    if opts is not None:
        sub += ["--dims", str(opts[0]), "--supports", opts[1], "--seed", str(opts[2]), "--parent-rule", opts[3]]
    env = dict(env)
    if dag:
        sub += ["--partition", "on"]
        env["DISTGRAIL_PARTITION_DAG"] = dag
    if gather0:
        env["DISTGRAIL_PARTITION_GATHER"] = "0"
    if ranks > 1 and args.backend == "gpu":
        sub.append("--share-gpus")  # more ranks than GPUs allowed; the index is the same
    rc, took = run(args, command(args, mpi, ranks, sub), env, log)
    rc = rc or (0 if os.path.exists(index) else -1)  # exit status 0 but no index: -1
    if not rc and glob.glob(glob.escape(index) + ".*.part0"):  # a split index (several ranks): its content, merged
        merged = index[:-3] + ".single.h5"
        rc = run(args, command(args, mpi, 1, ["convert", index, "--layout", "single", "-o", merged, "--quiet"]),
                 env, log + ".convert")[0]
        index = merged
    return (f"FAILED(rc={rc})" if rc else sha256(index)), took


def cross_rank(results) -> tuple:
    """('#' lines, how many differ): each graph and option set built more than once, one digest?"""
    groups = {}
    for name, digest in results:
        if not name.startswith(("input/", "convert/")):
            graph, opts, tail = name.split("/")
            groups.setdefault(f"{graph}/{opts}", []).append((tail, digest))
    lines, bad = [], 0
    for group, members in ((g, m) for g, m in groups.items() if len(m) > 1):  # built at one rank only: no line
        ok = [(t, d) for t, d in members if not d.startswith("FAILED")]
        same = len({d for _, d in ok}) <= 1
        bad += not same
        tails = " ".join(t if same else f"{t}={d[:12]}" for t, d in ok)
        failed = f"\t({len(members) - len(ok)} failed)" if len(ok) < len(members) else ""
        lines.append(f"# ranks-check\t{group}\t{'same' if same else 'DIFFER'}\t{tails}{failed}")
    return lines, bad


def matrix(args) -> int:
    t0 = time.perf_counter()
    ranks = {int(r) for r in args.ranks.split(",")}
    cases = [c for c in make_cases(args.quick)
             if c[3] in ranks and (not args.only or any(fnmatch.fnmatchcase(c[0], p) for p in args.only))]
    if args.list or not cases:
        print("\n".join(c[0] for c in cases) or "index_matrix: no case selected")
        return 0 if cases else 2
    shutil.rmtree(os.path.join(args.out, "logs"), ignore_errors=True)  # no failure of an earlier run
    for sub in ("graphs", "indexes", "logs"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k.startswith(("OMPI_MCA_", "PRTE_MCA_"))  # site launcher settings
           or not k.startswith(("DISTGRAIL_", "PMI_", "HYDRA_", "OMPI_", "PMIX_", "MPI_", "SLURM_"))}
    extra = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]  # e.g. wheels' --target
    env.update(PYTHONPATH=os.pathsep.join([os.path.abspath(args.tree), *extra]),
               MPIEXEC_TIMEOUT=env.get("MPIEXEC_TIMEOUT", "900"))
    mpi = launcher(args.python, env)
    where = subprocess.run([args.python, "-c", "import distgrail; print(distgrail.__file__)"], env=env,
                           cwd=args.out, capture_output=True, text=True).stdout.strip()
    warn = "" if where.startswith(os.path.abspath(args.tree) + os.sep) else " (WARNING: not from --tree)"
    print(f"# distgrail from {where or '(import failed)'}{warn}; launcher {shlex.join([mpi[0]] + mpi[1])}", flush=True)
    results = []
    paths = make_graphs(args, mpi, env, {c[1] for c in cases}, results)
    print("".join(f"{n}\t{d}\n" for n, d in results), end="", flush=True)
    for i, case in enumerate(cases, 1):
        digest, took = build(args, mpi, env, paths, case)
        results.append((case[0], digest))
        print(f"{case[0]}\t{digest}", flush=True)
        print(f"[{i}/{len(cases)}] {case[0]}: {took:.1f} s", file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "digests.tsv"), "w") as f:
        f.writelines(f"{n}\t{d}\n" for n, d in results)
    lines, bad = cross_rank(results)
    failed = sum(d.startswith("FAILED") for _, d in results)
    print("\n".join(lines + [f"# {len(cases)} builds, {failed} failed, {bad} option sets differ across ranks; "
          f"{time.perf_counter() - t0:.1f} s; tree {os.path.abspath(args.tree)}, backend {args.backend}, "
          f"ranks {args.ranks}{', quick' if args.quick else ''}; {os.path.join(args.out, 'digests.tsv')}"]))
    return 1 if failed or bad else 0


def read_tsv(path) -> dict:
    with open(path) as f:
        return dict(line.rstrip("\n").split("\t")[:2] for line in f if line.strip() and not line.startswith("#"))


def explain(a, b) -> str:
    """The first attribute or dataset that differs between index files ``a`` and ``b``."""
    import h5py
    import numpy as np

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names = set()  # datasets first: the root seal and the checksums follow from their values
        for f in (fa, fb):
            f.visititems(lambda n, o: names.add(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(names):
            if n not in fa or n not in fb:
                return f"dataset /{n} only in the {'first' if n in fa else 'second'}"
            da, db = fa[n], fb[n]
            if da.dtype != db.dtype or da.shape != db.shape:
                return f"dataset /{n}: {da.dtype} {da.shape} against {db.dtype} {db.shape}"
            if not np.array_equal(da[()], db[()]):
                return f"dataset /{n}: values differ"
            if any(not np.array_equal(da.attrs.get(k), db.attrs.get(k)) for k in set(da.attrs) | set(db.attrs)):
                return f"dataset /{n}: its checksum attributes differ"
        for key in sorted(set(fa.attrs) | set(fb.attrs)):
            va, vb = fa.attrs.get(key), fb.attrs.get(key)
            if va is None or vb is None or not np.array_equal(np.asarray(va), np.asarray(vb)):
                return f"attribute {key}: {va!r} against {vb!r}"
    return "same attributes and datasets: the HDF5 layout differs"


def compare(a_path, b_path) -> int:
    a, b = read_tsv(a_path), read_tsv(b_path)
    names = list(a) + [n for n in b if n not in a]
    differ = [n for n in names if a.get(n) != b.get(n)]
    for n in differ:
        line = f"DIFFER\t{n}\t{a.get(n, '(missing)')}\t{b.get(n, '(missing)')}"
        files = [os.path.join(os.path.dirname(os.path.abspath(p)), "indexes", n.replace("/", "~") + ".h5")
                 for p in (a_path, b_path)]
        if all(os.path.exists(f) for f in files) and not n.startswith(("input/", "convert/")):
            try:
                line += f"\t{explain(*files)}"
            except Exception as e:  # noqa: BLE001 - a hint only
                line += f"\t(not explained: {e})"
        print(line)
    only = [sum(n not in x for n in names) for x in (b, a)]
    print(f"# {len(names)} cases, {len(differ)} differ ({only[0]} only in A, {only[1]} only in B; A {a_path}, B {b_path})")
    return 1 if differ else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", help="the distgrail checkout to build with (its root goes on PYTHONPATH)")
    p.add_argument("--out", help="folder for graphs/, indexes/, logs/ and digests.tsv")
    p.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--ranks", default="1,2,3", help="rank counts to build at (default 1,2,3)")
    p.add_argument("--quick", action="store_true", help="a subset of the matrix (about a minute on 2 cores)")
    p.add_argument("--only", action="append", metavar="GLOB", help="only the cases whose name matches (repeatable)")
    p.add_argument("--list", action="store_true", help="print the names of the cases selected, build nothing")
    p.add_argument("--graphs", metavar="DIR", help="copy the input graphs from DIR (another run's OUT/graphs)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs distgrail (default: this one)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per build (default 600)")
    p.add_argument("--compare", nargs=2, metavar=("A.tsv", "B.tsv"), help="print the cases whose digests differ")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.list and not (args.tree and args.out and os.path.isdir(os.path.join(args.tree, "distgrail"))):
        p.error("--tree (a checkout with distgrail/) and --out are needed, or --compare A.tsv B.tsv")
    if not re.fullmatch(r"[1-9][0-9]*(,[1-9][0-9]*)*", args.ranks):
        p.error("--ranks: rank counts such as 1,2 (the matrix has 1, 2 and 3)")
    args.out, args.graphs = (os.path.abspath(x) if x else None for x in (args.out, args.graphs))
    return matrix(args)


if __name__ == "__main__":
    sys.exit(main())
