"""The docs are true: every docstring example runs and prints what it claims, the README's
Python example and its shell example run as pasted (on the CPU), every ``distgrail COMMAND`` the
README names exists, and every docs/ file the code or the README cites is there."""

import doctest
import json
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


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_server_block_runs_as_pasted(tmp_path):
    """The server block, as pasted into bash (``distgrail`` on PATH, a free port for 7850): it makes
    its token file, starts the server in the background, asks it through ``query --server``, adds
    two edges through ``update --server``, asks ``curl`` (with the token: the server checks it on /health too), and stops it (status 0)."""
    pytest.importorskip("aiohttp", reason="distgrail serve needs the serve extra")
    import shutil
    import signal

    if not shutil.which("curl"):
        pytest.skip("the README's server block calls curl, which this machine lacks")
    block = _tested_block("server")
    assert "7850" in block and "--token-file tok" in block and "Authorization: Bearer" in block
    port = _free_port()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shim = bindir / "distgrail"  # what `pip install` puts on PATH, for this checkout
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m distgrail "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=str(bindir) + os.pathsep + os.environ["PATH"])
    env.pop("DISTGRAIL_TOKEN", None)
    p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block.replace("7850", str(port))], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=300)
    finally:  # the block's own session: its background server goes too, whatever happened
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert p.returncode == 0, (out, err, log)
    health = json.loads(out[out.index("{"):])  # the query's summary, then curl's /health
    assert health["index"].endswith("kegg.h5") and health["n"] == 3617 and health["batches"] >= 1, health
    assert health["updates"] == 1 and health["edges_inserted"] == 2, health  # update --server
    rows = (tmp_path / "answers.tsv").read_text().splitlines()
    assert rows[0] == "u\tv\treachable" and len(rows) == 100_001
    assert sum(r.endswith("\t1") for r in rows[1:]) == 20072
    assert "stopping (SIGTERM)" in log and "error" not in log.lower(), log


def _synopsis():
    """The fenced block of the README's "Command line" section."""
    section = _readme().split("## Command line", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_readme_synopsis_shows_every_command_form_and_format():
    from distgrail.cli import build_parser

    syn = _synopsis()
    commands = build_parser()._subparsers._group_actions[0].choices
    for name in commands:
        assert re.search(rf"^distgrail {name} ", syn, re.M), f"the synopsis lacks 'distgrail {name}'"
    assert re.search(r"^distgrail query --server URL PAIRS", syn, re.M) and "--pair U V" in syn
    fmt = next(a for a in commands["index"]._actions if "--format" in a.option_strings)
    shown = re.search(r"--format ([\w|]+)\]", syn).group(1).split("|")
    assert shown == list(fmt.choices), f"synopsis --format {shown}, index --format {list(fmt.choices)}"


def test_readme_index_table_lists_the_attributes_a_new_index_holds(tmp_path):
    import h5py

    import distgrail

    from distgrail.cli import main

    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", output=str(tmp_path / "k.h5"))
    with h5py.File(tmp_path / "k.h5") as f:
        attrs = set(f.attrs)
    assert main(["convert", str(tmp_path / "k.h5"), "--layout", "split", "--parts", "2", "-o", str(tmp_path / "s.h5"),
                 "--quiet"]) == 0
    with h5py.File(tmp_path / "s.h5") as f:  # (a split index's main file: the same and its layout's)
        split = set(f.attrs)
    assert attrs < split
    attrs |= split
    row = next(ln for ln in _readme().splitlines() if ln.startswith("| `/` attrs"))
    listed = {m.split("=")[0] for m in re.findall(r"`([a-z_0-9]+)(?:=[^`]*)?`", row)}
    older = set(re.findall(r"files of earlier releases: `([a-z_0-9]+)`", row))
    assert attrs <= listed, f"the README's index table lacks {sorted(attrs - listed)}"
    assert listed - older - {"blake3"} <= attrs, f"the table lists {sorted(listed - older - attrs)}, which new files lack"
