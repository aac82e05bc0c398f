"""The package's layout keeps its promises (issue 11): no import circles, no oversized module,
and every pipeline stage found under one name: NumPy twin and CUDA launcher side by side in
``distgrail/stages/<stage>.py`` (or ``distgrail/query/<step>.py``), kernel in ``kernels/<stage>.cu``."""

from __future__ import annotations

import ast
import os

import pytest

from conftest import ROOT

PKG = os.path.join(ROOT, "distgrail")
MAX_LINES = 400


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
    """Package modules that ``name`` imports anywhere in its body (lazy imports count too)."""
    tree = ast.parse(open(path).read(), path)
    pkg = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
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
            if t and t != name and t != "distgrail":
                found.add(t)
    return found


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


def test_no_module_over_the_size_limit():
    big = {os.path.relpath(p, ROOT): n for p in _modules().values()
           if (n := sum(1 for _ in open(p))) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


#: pipeline stage -> (module, NumPy twin, CUDA launcher, kernel source)
STAGES = [
    ("condense", "stages/condense.py", "condense_numpy", "condense_cuda", "condense.cu"),
    ("phase 1", "stages/forest.py", "parents_max_level", "parents_max_level_cuda", "forest.cu"),
    ("phase 2", "stages/subtree.py", "subtree_sizes_numpy", "subtree_sizes_cuda", "subtree.cu"),
    ("phase 3", "stages/ranks.py", "post_order_ranks_numpy", "post_order_ranks_cuda", "ranks.cu"),
    ("phase 4", "stages/intervals.py", "descendant_intervals_numpy", "descendant_intervals_cuda", "intervals.cu"),
    ("phase 5", "stages/supports.py", "support_masks_numpy", "support_masks_cuda", "supports.cu"),
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
