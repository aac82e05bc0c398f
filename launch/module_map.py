"""The package's module map, and the walk of one ``distgrail index`` through it (issue 41).

    python launch/module_map.py [--tree DIR] [--json] [--walk]

Reads ``DIR/distgrail`` (default: the tree this script is in); standard library only; imports
nothing of the package (the walk runs it in a child process).

**The map** (read from the source, nothing run). Modules: every ``.py`` file under
``distgrail/`` (a package's ``__init__.py`` is the package), those under ``distgrail/benchmarks``
counted apart. Import edges: ``A -> B`` when module ``A`` imports package module ``B`` anywhere in
its body (imports inside functions count too); ``from X import Y`` counts ``X.Y`` when it is a
module, else ``X``; imports of the bare package ``distgrail`` are not counted: the same rule as
``_imports`` in tests/test_layout.py. Circles: groups of modules that import each other in a loop
(strongly connected components of two or more). Layers: the table ``LAYERS`` below, lowest
first; a row names modules relative to ``distgrail.`` and covers their submodules (``io`` is
``distgrail.io`` and ``distgrail.io.*``; the longest matching row wins, and ``*.__main__``, every
``python -m`` entry, wins over all); the root ``distgrail`` is the top layer. A module that no row
covers is listed as *not in the layer table* (the table must follow the package). An import
*up a layer* is an edge from a module to one of a higher layer; each is listed with the
importing file's line (the first such import) and whether it sits inside a function (lazy).

**The walk** (``--walk``): runs ``distgrail index bundled -o <tmp>/walk.h5 --backend cpu`` (one
process, no MPI launcher) in a child Python on DIR's package with ``sys.setprofile`` on the main
thread, from the call of the console entry (``[project.scripts] distgrail`` in DIR/pyproject.toml)
to the call that closes the index file (h5py ``File.close`` of the output or its temporary;
failing that, the entry's return).
Counted:

* *current module*: the package module of the innermost package frame on the call stack (a frame
  of NumPy, h5py, the standard library... belongs to the package frame that called into it);
* *stop*: a call of a package function whose module differs from the current module (the entry's
  own call is the first stop). A call is any Python frame entered: methods the interpreter calls
  (``__enter__``, ``__exit__``, ``__get__``...) and property reads count, and so does each
  resumption of a generator. Calls made while a module body runs (an import, lazy or not) are
  not counted, nor are other threads (the readers' and writers' pools);
* *modules visited*: the distinct modules of the stops; *returns*: stops into a module visited
  earlier in the walk (stops - modules visited); *re-entries*: stops into a module that still has
  a frame on the call stack (a callee calling back into one of its callers' modules).

There is no walk of ``--partition on``: it partitions only under MPI with two ranks or more (in
one process the walk is this one, stop for stop), and the walk stays out of MPI.

Same tree, same numbers (the child runs with PYTHONHASHSEED=0); the JSON carries the route.
docs/design.md, "Module map, before and after issue 41", keeps the figures.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

PKG = "distgrail"
#: (layer, name, modules relative to ``distgrail.``): a module may import its own layer and those
#: below; an import of a higher layer points up. The package root ``distgrail`` is the top layer.
LAYERS = [
    (0, "base: errors, numbers, settings, array helpers",
     ["errors", "constants", "dtypes", "settings", "arrays", "hashing", "satmath", "segments", "progress",
      "_version", "nodelabels", "bfs", "jit", "cores"]),
    (1, "devices and files", ["gpu", "io"]),
    (2, "algorithms: build stages, query steps", ["stages", "query"]),
    (3, "the index: file and handle", ["index", "indexfile"]),
    (4, "the build's configuration and one-process pipeline", ["config", "placement", "preflight"]),
    (5, "across MPI ranks", ["mpi"]),
    (6, "the public build, and edge insertions into a built index", ["build", "update", "update_rows"]),
    (7, "entry points: command line, server, benchmarks", ["cli", "cli_common", "cli_entry", "cli_exit", "cli_output", "cli_pairs",
                                                            "cli_parser", "cli_update", "cli_update_patch", "server", "benchmarks", "jit_warm",
                                                            "*.__main__"]),
]
TOP = max(row[0] for row in LAYERS)


def modules(tree: str) -> dict:
    """{dotted module name: file path} for every module of the package (benchmarks included)."""
    out = {}
    for d, dirs, files in os.walk(os.path.join(tree, PKG)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, tree)[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: str, known: set) -> dict:
    """{package module: (first line, lazy)} that ``name`` imports anywhere in its body; the
    targets tests/test_layout.py checks for circles."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found, todo = {}, [(tree, False)]
    while todo:  # every node, and whether it sits inside a function (a lazy import)
        node, lazy = todo.pop()
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        todo += [(child, inner) for child in ast.iter_child_nodes(node)]
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t != PKG:
                here = (node.lineno, lazy)
                found[t] = min(found.get(t, here), here)
    return found


def layer_of(name: str):
    """The layer of module ``name`` (the longest row that covers it), or None."""
    if name == PKG:
        return TOP
    rel, best = name[len(PKG) + 1:], (-1, None)
    for layer, _, rows in LAYERS:
        for r in rows:
            size = 1000 if r.startswith("*.") else len(r)  # "*.x": any module named x, before all else
            if (rel == r or rel.startswith(r + ".") or (r.startswith("*.") and (rel == r[2:] or rel.endswith(r[1:])))) \
                    and size > best[0]:
                best = (size, layer)
    return best[1]


def circles(graph: dict) -> list:
    """Strongly connected components of two or more modules (Tarjan), each sorted."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(u):
        index[u] = low[u] = len(index)
        stack.append(u)
        on.add(u)
        for v in sorted(graph.get(u, ())):
            if v not in index:
                visit(v)
                low[u] = min(low[u], low[v])
            elif v in on:
                low[u] = min(low[u], index[v])
        if low[u] == index[u]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == u:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for u in sorted(graph):
        if u not in index:
            visit(u)
    return sorted(out)


def _git(tree: str, *args) -> str:
    try:
        r = subprocess.run(["git", "-C", tree, *args], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def module_map(tree: str) -> dict:
    mods = modules(tree)
    if not mods:
        raise SystemExit(f"no package at {os.path.join(tree, PKG)}")
    known = set(mods)
    edges = {m: imports(m, p, known) for m, p in mods.items()}
    bench = {m for m in mods if m == f"{PKG}.benchmarks" or m.startswith(f"{PKG}.benchmarks.")}
    layers = {m: layer_of(m) for m in mods}
    up = []
    for a in sorted(edges):
        for b, (line, lazy) in sorted(edges[a].items()):
            if layers[a] is not None and layers[b] is not None and layers[b] > layers[a]:
                up.append({"from": a, "to": b, "from_layer": layers[a], "to_layer": layers[b],
                           "at": f"{os.path.relpath(mods[a], tree)}:{line}", "lazy": lazy})
    return {
        "tree": os.path.abspath(tree), "commit": _git(tree, "rev-parse", "--short", "HEAD"),
        "changed_files": len(_git(tree, "status", "--porcelain", "--", PKG).splitlines()),
        "modules": len(mods) - len(bench), "benchmark_modules": len(bench),
        "edges": sum(len(edges[m]) for m in mods if m not in bench),
        "benchmark_edges": sum(len(edges[m]) for m in bench),
        "imports": {m: sorted(edges[m]) for m in sorted(edges)},
        "circles": circles({m: set(e) for m, e in edges.items()}),
        "layers": {str(layer): {"name": name, "modules": sorted(m for m in mods if layers[m] == layer
                                                                and m not in bench)} for layer, name, _ in LAYERS},
        "unplaced": sorted(m for m in mods if layers[m] is None),
        "upward": up,
    }


# -- the walk ----------------------------------------------------------------------------------

def _entry(tree: str) -> str:
    """``module:function`` of the ``distgrail`` console script in DIR/pyproject.toml."""
    try:
        with open(os.path.join(tree, "pyproject.toml"), encoding="utf-8") as f:
            m = re.search(r'^\s*distgrail\s*=\s*"([\w.]+:\w+)"', f.read(), re.MULTILINE)
    except OSError:
        m = None
    return m.group(1) if m else f"{PKG}.cli:main"


def _child(tree: str, entry: str, argv: list, output: str, result: str) -> None:
    """In the child process: run the entry with the profile hook on and write what it saw."""
    import importlib

    sys.path.insert(0, tree)
    here = importlib.import_module(PKG).__file__
    if not os.path.abspath(here).startswith(os.path.abspath(tree) + os.sep):
        raise SystemExit(f"{PKG} imported from {here}, not from {tree}")
    modname, func = entry.split(":")
    fn = getattr(importlib.import_module(modname), func)
    close_names = {os.path.basename(output), f".{os.path.basename(output)}"}
    h5files = os.path.join("h5py", "_hl", "files.py")
    stack = []  # per live frame: (current package module, under a module body)
    stops, state = [], {"end": "the entry returned (no close of the index file seen)", "done": False}
    visited = set()

    def hook(frame, event, arg):
        if event == "return":
            if stack:
                stack.pop()
            return
        if event != "call":
            return
        code = frame.f_code
        cur, importing = stack[-1] if stack else ("(entry)", False)
        importing = importing or code.co_name == "<module>"
        name = frame.f_globals.get("__name__") or ""
        ours = name if name == PKG or name.startswith(PKG + ".") else None
        if ours and ours != cur and not importing and not state["done"]:
            live = {m for m, _ in stack}
            stops.append([cur, ours, code.co_name, ours in visited, ours in live])
            visited.add(ours)
        stack.append((ours or cur, importing))
        if (not state["done"] and code.co_name == "close" and code.co_filename.endswith(h5files)
                and any(os.path.basename(str(getattr(frame.f_locals.get("self"), "filename", ""))).startswith(n)
                        for n in close_names)):
            state["done"], state["end"] = True, "the close of the index file (h5py File.close)"

    sys.argv = [PKG] + argv
    status = None
    sys.setprofile(hook)
    try:
        status = fn()  # as the console script calls it: the arguments from sys.argv
    except SystemExit as e:
        status = e.code
    finally:
        sys.setprofile(None)
    with open(result, "w") as f:
        json.dump({"status": status, "stops": stops, "end": state["end"], "wrote": os.path.exists(output)}, f)


def walk(tree: str) -> dict:
    """Run the walk in a child process (see the module docstring) and count it."""
    with tempfile.TemporaryDirectory(prefix="module-map-") as tmp:
        output, result = os.path.join(tmp, "walk.h5"), os.path.join(tmp, "walk.json")
        argv = ["index", "bundled", "-o", output, "--backend", "cpu"]
        entry = _entry(tree)
        env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(
            [os.path.abspath(tree)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
                f"import module_map; module_map._child(*{[os.path.abspath(tree), entry, argv, output, result]!r})")
        r = subprocess.run([sys.executable, "-c", code], check=False, cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=600)
        seen = None
        if os.path.exists(result):
            with open(result) as f:
                seen = json.load(f)
        command = "distgrail " + " ".join(argv).replace(output, "<tmp>/walk.h5")
        if r.returncode or not seen or seen["status"] not in (0, None) or not seen["wrote"]:
            return {"command": command, "failed": True, "returncode": r.returncode,
                    "status": seen and seen["status"], "stderr_tail": (r.stderr or r.stdout)[-2000:]}
    stops = seen["stops"]
    route, hops = [], {}
    for caller, callee, _, _, _ in stops:
        if callee not in route:
            route.append(callee)
        hops[f"{caller} -> {callee}"] = hops.get(f"{caller} -> {callee}", 0) + 1
    return {"command": command, "entry": entry, "end": seen["end"], "stops": len(stops),
            "modules_visited": len(route), "returns": sum(1 for s in stops if s[3]),
            "re_entries": sum(1 for s in stops if s[4]), "distinct_hops": len(hops),
            "route": route, "hops": dict(sorted(hops.items(), key=lambda kv: (-kv[1], kv[0]))),
            "sequence": [f"{callee}:{fn}" for _, callee, fn, _, _ in stops]}


# -- report ------------------------------------------------------------------------------------

def _short(m: str) -> str:
    return m[len(PKG) + 1:] if m.startswith(PKG + ".") else m


def text(report: dict) -> str:
    out = [f"distgrail module map of {report['tree']}"
           + (f" at {report['commit']}" if report["commit"] else "")
           + (f" ({report['changed_files']} files of {PKG}/ changed since)" if report["changed_files"] else "")]
    out.append(f"  modules                  {report['modules']} (+ {report['benchmark_modules']} benchmarks)")
    out.append(f"  import edges             {report['edges']} (+ {report['benchmark_edges']} from benchmarks)")
    out.append(f"  import circles           {len(report['circles'])}")
    out += [f"    {' <-> '.join(_short(m) for m in c)}" for c in report["circles"]]
    out.append("  layers (modules, benchmarks apart):")
    out += [f"    {k}  {v['name']:<52} {len(v['modules'])}" for k, v in report["layers"].items()]
    out.append(f"  not in the layer table   {len(report['unplaced'])}" +
               (": " + ", ".join(_short(m) for m in report["unplaced"]) if report["unplaced"] else ""))
    out.append(f"  imports up a layer       {len(report['upward'])}")
    out += [f"    {_short(u['from'])} -> {_short(u['to'])}  ({u['from_layer']} -> {u['to_layer']})  "
            f"{u['at']}{' (lazy)' if u['lazy'] else ''}" for u in report["upward"]]
    w = report.get("walk")
    if not w:
        return "\n".join(out)
    out.append(f"walk: {w['command']}")
    if w.get("failed"):
        out.append(f"  FAILED (exit {w['returncode']}, status {w['status']}):")
        out += ["    " + ln for ln in w["stderr_tail"].strip().splitlines()[-12:]]
    else:
        out.append(f"  from {w['entry']} to {w['end']}")
        out.append(f"  stops                    {w['stops']}")
        out.append(f"  modules visited          {w['modules_visited']}")
        out.append(f"  returns                  {w['returns']} (stops into a module visited earlier)")
        out.append(f"  re-entries               {w['re_entries']} (stops into a module still on the call stack)")
        out.append(f"  distinct hops            {w['distinct_hops']} (caller module -> callee module)")
        out.append("  route (first visits): " + " > ".join(_short(m) for m in w["route"]))
        out.append("  busiest hops: " + ", ".join(f"{_short_hop(h)} x{n}" for h, n in list(w["hops"].items())[:8]))
    return "\n".join(out)


def _short_hop(h: str) -> str:
    return " -> ".join(_short(x) for x in h.split(" -> "))


def main(argv=None) -> int:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", default=here, help="the repository whose distgrail/ is mapped (default: this one)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--walk", action="store_true", help="also run and count the walk of `distgrail index`")
    args = p.parse_args(argv)
    report = module_map(args.tree)
    if args.walk:
        report["walk"] = walk(args.tree)
    print(json.dumps(report, indent=1) if args.json else text(report))
    return 1 if report.get("walk", {}).get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
