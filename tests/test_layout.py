"""The package's layout keeps its promises (issue 11): no import circles, modules by concept
within the size rule (issue 41, below), and every pipeline stage found under one name: NumPy twin and CUDA launcher side by side in
``distgrail/stages/<stage>.py`` (or ``distgrail/query/<step>.py``), kernel in ``kernels/<stage>.cu``."""

from __future__ import annotations

import ast
import os

import pytest

from conftest import ROOT

PKG = os.path.join(ROOT, "distgrail")
#: the size rule (issue 41): a module holds one concept, whole. Up to SOFT_LINES lines nothing is
#: asked; above, only the modules named in LARGE, each with why its concept does not split, and
#: none above HARD_LINES. LARGE is exact: a listed module back under SOFT_LINES fails too, so the
#: table cannot go stale. (A hard cap of 400 lines had cut concepts in pieces to fit.)
SOFT_LINES = 600
HARD_LINES = 900
#: module (dotted name) -> why it is one concept above SOFT_LINES
LARGE: dict = {}


def _modules():
    """{dotted module name: file path} for every module of the package (benchmarks included)."""
    out = {}
    for d, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def _imports(name: str, path: str, known: set) -> set:
    """Package modules that ``name`` imports anywhere in its body (lazy imports count too): the
    rule of launch/module_map.py, which prints the map."""
    return set(_module_map().imports(name, path, known))


def _module_map():
    import importlib.util

    spec = importlib.util.spec_from_file_location("module_map", os.path.join(ROOT, "launch", "module_map.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _graph():
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def _cycle(graph):
    """One import circle as a list of modules, or None."""
    state = {}
    stack = []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state:
                c = visit(v)
                if c:
                    return c
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state:
            c = visit(u)
            if c:
                return c
    return None


def test_cycle_finder_finds_a_planted_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(g) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circles():
    graph = _graph()
    assert "distgrail.stages.labeling" in graph and graph["distgrail.build"], "the import walk found nothing"
    c = _cycle(graph)
    assert c is None, "import circle: " + " -> ".join(c)


def _size_problems(lines: dict, large: dict) -> list:
    """What breaks the size rule, given ``{module: lines}`` and the ``LARGE`` table."""
    bad = [f"{m}: {n} lines, over the ceiling of {HARD_LINES}" for m, n in sorted(lines.items()) if n > HARD_LINES]
    bad += [f"{m}: {n} lines, over {SOFT_LINES} and not in LARGE (split it by concept, or say in LARGE why "
            f"it is one)" for m, n in sorted(lines.items()) if SOFT_LINES < n <= HARD_LINES and m not in large]
    bad += [f"{m}: in LARGE but {lines[m]} lines, under {SOFT_LINES}: take it out of LARGE" for m in sorted(large)
            if m in lines and lines[m] <= SOFT_LINES]
    bad += [f"{m}: in LARGE but no such module" for m in sorted(large) if m not in lines]
    return bad


def test_no_module_over_the_size_limit():
    """Modules by concept (issue 41): up to SOFT_LINES lines free; above, only the modules in
    LARGE, each with its reason, and none above HARD_LINES; a module in LARGE that is no longer
    above SOFT_LINES (or no longer exists) fails, so the table stays exact."""
    lines = {m: sum(1 for _ in open(p)) for m, p in _modules().items()}
    assert len(lines) > 50 and "distgrail.build" in lines, "the walk found no modules"
    bad = _size_problems(lines, LARGE)
    assert not bad, "the size rule:\n" + "\n".join(bad)


def test_the_size_rule_sees_planted_modules():
    lines = {"a": SOFT_LINES, "b": SOFT_LINES + 1, "c": HARD_LINES + 1, "d": 10, "e": HARD_LINES}
    assert _size_problems(lines, {"c": "x", "d": "y", "e": "z", "gone": "w"}) == [
        f"c: {HARD_LINES + 1} lines, over the ceiling of {HARD_LINES}",
        f"b: {SOFT_LINES + 1} lines, over {SOFT_LINES} and not in LARGE (split it by concept, or say in LARGE why "
        f"it is one)",
        f"d: in LARGE but 10 lines, under {SOFT_LINES}: take it out of LARGE",
        "gone: in LARGE but no such module"]
    assert _size_problems({"a": SOFT_LINES, "e": HARD_LINES}, {"e": "one concept"}) == []


#: pipeline stage -> (module, NumPy twin, CUDA launcher, kernel source)
STAGES = [
    ("condense", "stages/condense.py", "condense_numpy", "condense_cuda", "condense.cu"),
    ("phase 1", "stages/forest.py", "parents_max_level", "parents_max_level_cuda", "forest.cu"),
    ("phase 2", "stages/subtree.py", "subtree_sizes_numpy", "subtree_sizes_cuda", "subtree.cu"),
    ("phase 3", "stages/ranks.py", "post_order_ranks_numpy", "post_order_ranks_cuda", "ranks.cu"),
    ("phase 4", "stages/intervals.py", "descendant_intervals_numpy", "descendant_intervals_cuda", "intervals.cu"),
    ("phase 5", "stages/supports.py", "support_masks_numpy", "support_masks_cuda", "supports.cu"),
    ("block checksums", "stages/checksums.py", "block_raws_numpy", "block_crcs_cuda", "checksums.cu"),
]


@pytest.mark.parametrize("stage, module, twin, launcher, kernel", STAGES, ids=[s[0] for s in STAGES])
def test_each_stage_has_its_twin_launcher_and_kernel_under_one_name(stage, module, twin, launcher, kernel):
    path = os.path.join(PKG, module)
    names = {n.name for n in ast.parse(open(path).read()).body if isinstance(n, ast.FunctionDef)}
    assert twin in names and launcher in names, f"{module} lacks {twin} or {launcher}: {sorted(names)}"
    src = os.path.join(ROOT, "kernels", kernel)
    assert os.path.exists(src), f"{stage}: no kernels/{kernel}"
    stem = os.path.splitext(kernel)[0]
    body = open(path).read()
    launcher_src = body + (open(os.path.join(PKG, "stages", "scc.py")).read() if stage == "condense" else "")
    assert f'kernel("{stem}"' in launcher_src, f"{module} does not launch kernels from kernels/{kernel}"


# -- the backend seam and shared state (issue 27) ----------------------------------------------

#: modules that may call get_backend: the public API (build_index's placements, Index's queries,
#: their MPI forms), the command line and its preflight, the benchmarks (entry points); nothing below them
GET_BACKEND_CALLERS = {"distgrail.gpu.backend", "distgrail.placement", "distgrail.mpi.placement",
                       "distgrail.index", "distgrail.mpi.query", "distgrail.cli", "distgrail.preflight",
                       "distgrail.server.run", "distgrail.update",  # (update: insert_edges, public)
                       "distgrail.update_rows",  # (insert_rows, public: the rows a patched update writes)
                       "distgrail.cli_pairs",  # (the command line's query: its prepare beside the read)
                       "distgrail.cli_update"}  # (the command line's update: the GPU made ready beside the read)
#: module-level mutable containers and `global` rebinding that are allowed, and why: caches keyed
#: by what they cache, process-wide facts set once; no switch that changes what a call computes
MODULE_STATE = {
    ("distgrail.cli_parser", "_LAST_ERROR"): "the last command-line error's line, for command_line()'s end of an "
                                             "MPI job whose rank could not parse its arguments",
    ("distgrail.gpu.backend", "_CACHE"): "the Backend of each (name, device): immutable values",
    ("distgrail.gpu.kernels", "_CACHE"): "compiled modules by (device, source): compile once per process",
    ("distgrail.gpu.kernels", "compile_times"): "seconds each module took to compile (the cache's record)",
    ("distgrail.gpu.sweep", "_SM_COUNT"): "each device's SM count",
    ("distgrail.jit", "_FAILED"): "compiled CPU modules that failed to load: warned once, the NumPy code after",
    ("distgrail.io.chunks", "_POOL"): "the threads that read a chunk of a plain file in pieces, made once",
    ("distgrail.arrays", "_pool"): "the host threads of large copies and maxima, made once (anew in a forked child)",
    ("distgrail.arrays", "_pool_lock"): "the lock making that pool once (anew in a forked child)",
    ("distgrail.io.atomic", "_PREVIOUS"): "the signal handlers installed before ours",
    ("distgrail.io.atomic", "_LIVE"): "temporary files being written, removed if a signal ends the process",
    ("distgrail.io.atomic", "_PROVISIONAL"): "a split index's parts renamed into place before its main file, removed if a signal ends the process",
    ("distgrail.io.atomic", "_DEFERRED"): "signals held while an output and the files it settles are put in place",
    ("distgrail.indexfile.read_split", "_LIMIT"): "the soft limit of open files as reads of many parts raised it, restored by the last",
    ("distgrail.mpi.transport", "_KEYVAL"): "the MPI attribute key of the NCCL communicator cache",
    ("distgrail.mpi.binding", "_BOUND"): "the GPU this process was bound to (once per rank)",
    ("distgrail.mpi.binding", "_SHARING"): "how many ranks of the node share that GPU (set with _BOUND)",
    ("distgrail.query.answer", "_NUMPY_PAIRS"): "pairs the NumPy prefilter took before the compiled one was loaded",
}


def _device_uses(tree):
    """``<...>.Device(...).use()`` calls: making a device the process's (thread's) current one."""
    return [n for n in _calls(tree, "use") if isinstance(n.func.value, ast.Call)
            and "Device" in ast.unparse(n.func.value.func)]


def _calls(tree, attr):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and ((isinstance(n.func, ast.Attribute) and n.func.attr == attr)
                 or (isinstance(n.func, ast.Name) and n.func.id == attr))]


MUTATORS = {"update", "clear", "pop", "popitem", "setdefault", "append", "extend", "insert", "remove", "add",
            "discard"}


def _module_state(name, tree):
    """(module, name) of every module-level container that the module changes after import
    (item assignment, ``del``, a mutating method), and of every ``global`` rebinding. Tables that
    are only read are constants, not state."""
    containers = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) and node.value is not None else []
        value = getattr(node, "value", None)
        if isinstance(value, (ast.Dict, ast.List, ast.Set)) or (
                isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id in ("dict", "list", "set", "defaultdict", "OrderedDict")):
            containers |= {t.id for t in targets if isinstance(t, ast.Name) and t.id != "__all__"}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found |= {(name, g) for g in node.names}
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for t in getattr(node, "targets", None) or [node.target]:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in containers:
                    found.add((name, t.value.id))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
              and isinstance(node.func.value, ast.Name) and node.func.value.id in containers):
            found.add((name, node.func.value.id))
    return found


def _probes(tree):
    """Module-level statements that read the environment or probe installed packages: a value
    that steers behaviour must be passed, not read once at import."""
    bad = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        src = ast.unparse(node)
        if any(p in src for p in ("os.environ", "getenv", "find_spec", "import_module")):
            bad.append(src.splitlines()[0])
    return bad


def test_get_backend_only_at_the_public_api():
    callers = {m for m, p in _modules().items() if not m.startswith("distgrail.benchmarks")
               and _calls(ast.parse(open(p).read()), "get_backend")}
    assert "distgrail.index" in callers, "the walk found no caller at all"
    assert callers <= GET_BACKEND_CALLERS, f"get_backend called below the public API: {callers - GET_BACKEND_CALLERS}"


def test_no_global_device_use():
    """The backend carries its device; only an MPI rank's binding sets the process's device (and
    ``gpu.dma.device_for_good`` the current device of a thread of distgrail's own:
    ``Backend.side_stream``'s, a Stager's, ``ready_beside``'s; leaving a ``Device`` context there
    would make device 0 current, a context on another rank's GPU)."""
    users = {m for m, p in _modules().items() if _device_uses(ast.parse(open(p).read()))}
    assert "distgrail.mpi.binding" in users
    assert users <= {"distgrail.mpi.binding", "distgrail.gpu.dma"}, f".use() of a device outside the rank binding: {users}"
    dma = ast.parse(open(_modules()["distgrail.gpu.dma"]).read())
    assert [f.name for f in ast.walk(dma) if isinstance(f, ast.FunctionDef) and _device_uses(f)] == ["device_for_good"]


def test_no_module_level_mutable_switches():
    state, probes = set(), {}
    for m, p in _modules().items():
        tree = ast.parse(open(p).read())
        state |= _module_state(m, tree)
        if (b := _probes(tree)) and not m.startswith("distgrail.benchmarks"):
            probes[m] = b
    assert ("distgrail.gpu.kernels", "_CACHE") in state, "the walk found no module state at all"
    gone = {(m, n) for m, p in _modules().items() for n in ("CPU_SEARCH", "SEARCH_BUDGET", "last_run")
            if any(isinstance(x, (ast.Assign, ast.AnnAssign)) and n in ast.unparse(x).split("=")[0]
                   for x in ast.parse(open(p).read()).body)}
    assert not gone, f"module-level switches that must be passed as options instead: {gone}"
    assert state <= set(MODULE_STATE), f"module-level mutable state not in MODULE_STATE: {state - set(MODULE_STATE)}"
    assert not probes, f"module-level environment or package probes (pass the value instead): {probes}"


def test_the_state_checks_see_planted_switches():
    planted = ast.parse("import os\nlast_run: dict = {}\nTABLE = {1: 2}\nMODE = os.environ.get('X')\n"
                        "def f():\n    global MODE\n    MODE = 1\n    last_run.update(a=1)\n    return TABLE[1]\n")
    assert _module_state("m", planted) == {("m", "last_run"), ("m", "MODE")}
    assert _probes(planted) == ["MODE = os.environ.get('X')"]
    assert len(_device_uses(ast.parse("cupy.cuda.Device(1).use()\nmatplotlib.use('Agg')"))) == 1


def _missing_names(name: str, path: str, mods: dict) -> list:
    """``from <package module> import X`` anywhere in the module (lazy imports too) where X is
    neither a top-level name the module defines or imports nor a submodule: an import that fails
    only when its branch runs."""
    tree = ast.parse(open(path).read(), path)
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("distgrail")):
            continue
        base = pkg
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        mod = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
        if mod not in mods:
            bad.append(f"{name}:{node.lineno}: no module {mod}")
            continue
        defined = _top_names(mods[mod])
        bad += [f"{name}:{node.lineno}: {mod} has no {a.name}" for a in node.names
                if a.name != "*" and a.name not in defined and f"{mod}.{a.name}" not in mods]
    return bad


def _top_names(path: str) -> set:
    """Names bound at the top level of a module (defs, classes, assignments, imports, and inside
    top-level if/try blocks)."""
    out = set()
    body = list(ast.parse(open(path).read(), path).body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try)):
            body += node.body + node.orelse + getattr(node, "finalbody", [])
            body += [s for h in getattr(node, "handlers", []) for s in h.body]
    return out


def test_every_package_import_names_something_that_exists():
    """Lazy imports inside functions are not run by importing the module: a renamed function left
    ``server/run.py`` importing ``_same_index_everywhere`` (gone), which broke the MPI server."""
    mods = _modules()
    bad = [b for m, p in mods.items() for b in _missing_names(m, p, mods)]
    assert not bad, "\n".join(bad)


def test_the_import_check_sees_a_missing_name(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from .errors import NoSuchError, BackendError\n    from .nowhere import x\n")
    mods = {"distgrail.m": str(p), "distgrail.errors": os.path.join(PKG, "errors.py")}
    assert _missing_names("distgrail.m", str(p), mods) == [
        "distgrail.m:2: distgrail.errors has no NoSuchError", "distgrail.m:3: no module distgrail.nowhere"]


#: modules whose plain ``unique(a)`` calls are fine: csr_keys (a handful of bucket bounds)
PLAIN_UNIQUE_OK = {"distgrail.stages.csr_keys"}


def _plain_unique_calls(name: str, path: str) -> list:
    """``np.unique(a)`` / ``xp.unique(a)`` calls without ``return_*`` keywords (NumPy 2.3+ hashes
    those: 30-60x slower than the sort of ``distgrail.arrays.unique`` on integer ids)."""
    out = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "unique"
                and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy", "xp")
                and not any((k.arg or "").startswith("return_") for k in node.keywords)):
            out.append((name, node.lineno))
    return out


def test_integer_ids_are_made_unique_by_sorting(tmp_path):
    found = [c for m, p in _modules().items() if m not in PLAIN_UNIQUE_OK for c in _plain_unique_calls(m, p)]
    assert not found, f"use distgrail.arrays.unique: {found}"
    planted = tmp_path / "m.py"
    planted.write_text("a = np.unique(b)\nc, n = np.unique(b, return_counts=True)\nd = xp.unique(e)\n")
    assert _plain_unique_calls("m", str(planted)) == [("m", 1), ("m", 3)]  # the check sees them
    assert _plain_unique_calls("m", __file__) == []  # (this file's own mentions are strings)
