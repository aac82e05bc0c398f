"""The docs are true: every docstring example runs and prints what it claims, the README's
Python example and its shell example run as pasted (on the CPU), every ``distgrail COMMAND`` the
README names exists, and every docs/ file the code or the README cites is there."""

import doctest
import glob
import importlib
import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def _modules_with_examples():
    out = []
    pkg = os.path.join(ROOT, "distgrail")
    for path in sorted(glob.glob(os.path.join(pkg, "**", "*.py"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            if ">>> " not in f.read():
                continue
        rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        out.append(rel[:-len(".__init__")] if rel.endswith(".__init__") else rel)
    return out


MODULES = _modules_with_examples()


def test_examples_are_found():
    # the discovery itself must see the modules known to carry examples
    assert {"distgrail", "distgrail.hashing", "distgrail.index", "distgrail.constants",
            "distgrail.gpu.kernels"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 0, f"{name} holds '>>> ' but doctest ran none of it"
    assert res.failed == 0


def _readme():
    with open(README, encoding="utf-8") as f:
        return f.read()


def _tested_block(kind):
    """The fenced block that follows ``<!-- tested: KIND -->`` in the README."""
    m = re.search(rf"<!-- tested: {kind} -->\s*```\w*\n(.*?)```", _readme(), re.S)
    assert m, f"README has no block marked '<!-- tested: {kind} -->'"
    return m.group(1)


def _run(argv, cwd, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)


def test_readme_python_example_runs_as_pasted(tmp_path):
    code = _tested_block("python")
    (tmp_path / "example.py").write_text(code)
    r = _run([sys.executable, "example.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    # every print(...) line carries its output as the comment after it
    want = [line.split("#", 1)[1].strip() for line in code.splitlines() if line.startswith("print(")]
    assert len(want) >= 4 and all(want)
    assert r.stdout.splitlines() == want
    assert (tmp_path / "kegg.h5").is_file()


def test_readme_shell_example_runs(tmp_path):
    lines = [ln for ln in _tested_block("shell").splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(lines) >= 5
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "distgrail", line
        r = _run([sys.executable, "-m", "distgrail", *argv[1:]], tmp_path)
        assert r.returncode == 0, f"{line}: {r.stderr}"
    # what the README says the block leaves behind
    answers = (tmp_path / "answers.txt").read_text().split()
    assert len(answers) == 100_000 and answers.count("1") == 20072
    import h5py

    with h5py.File(tmp_path / "small.h5") as a, h5py.File(tmp_path / "small2.h5") as b:
        assert np.array_equal(a["labels/intervals"][...], b["labels/intervals"][...])


def _command_mentions(text):
    """``distgrail WORD`` where a command line starts: a line of a fenced block, or an inline code span."""
    blocks = re.findall(r"```.*?```", text, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    lines = [ln for b in blocks for ln in b.splitlines()] + spans
    words = set()
    for line in lines:
        m = re.match(r"\s*(?:\S*/)?distgrail ([\w-]+)", line)
        if m:
            words.add(m.group(1))
    return words


def test_readme_names_only_real_commands():
    text = _readme()
    for script in ("launch/quickstart.sh", "launch/test.sh"):
        assert script in text and os.path.exists(os.path.join(ROOT, script))
    from distgrail.cli import build_parser

    sub = set(build_parser()._subparsers._group_actions[0].choices)
    mentioned = _command_mentions(text)
    assert sub <= mentioned, f"README never shows {sorted(sub - mentioned)}"
    unknown = mentioned - sub - {"--version", "--help", "COMMAND"}
    assert not unknown, f"README names commands distgrail does not have: {sorted(unknown)}"


def test_command_mentions_are_seen():
    # the check above must catch a command that does not exist
    assert _command_mentions("run `distgrail frobnicate x` then\n```bash\ndistgrail index g\n```") == \
        {"frobnicate", "index"}


def _cited_docs():
    """``docs/NAME.md`` cited anywhere in the code, the scripts and the README, and the README's links."""
    cites = {}
    paths = [README] + glob.glob(os.path.join(ROOT, "distgrail", "**", "*.py"), recursive=True) + \
        glob.glob(os.path.join(ROOT, "kernels", "*")) + glob.glob(os.path.join(ROOT, "launch", "*")) + \
        glob.glob(os.path.join(ROOT, "docs", "*.md"))
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name in re.findall(r"\bdocs/([\w.-]+\.md)", text):
            cites.setdefault(name, set()).add(os.path.relpath(path, ROOT))
        assert "DESIGN.md" not in text or path.endswith("design.md"), f"{path} cites DESIGN.md (now docs/design.md)"
    return cites


def test_cited_docs_exist():
    cites = _cited_docs()
    assert {"design.md", "benchmarks.md"} <= set(cites)
    for name, where in cites.items():
        assert os.path.isfile(os.path.join(ROOT, "docs", name)), f"docs/{name} cited by {sorted(where)} is missing"
    for link in re.findall(r"\]\(((?!https?:)[^)#]+)\)", _readme()):
        assert os.path.exists(os.path.join(ROOT, link)), f"README links to {link}, which is missing"


def test_readme_is_a_guide_not_a_log():
    text = _readme()
    assert len(text.splitlines()) < 500
    assert "benchmarks.md" in text
    for section in ("## Two commands", "## Command line", "## Python API", "## Input and output formats",
                    "## Errors and exit codes", "## Index file", "## Running under MPI", "## Running under Slurm",
                    "## Performance"):
        assert section in text, section
