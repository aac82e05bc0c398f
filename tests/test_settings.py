"""The ``DISTGRAIL_*`` environment variables have one registry, ``distgrail.settings`` (issue 41):
docs/settings.md's table is the registry's, every ``DISTGRAIL_*`` name the repository mentions is
declared there, nothing else in the package or the tests reads one from the environment, and
each parses as declared (default, valid values, a clear error for a malformed one)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from distgrail import settings
from distgrail.errors import BackendError, DistGrailError

DOC = os.path.join(ROOT, "docs", "settings.md")
BEGIN, END = "<!-- settings table: python -m distgrail.settings --markdown -->\n", "<!-- end of settings table -->"
SETTINGS_PKG = os.path.join(ROOT, "distgrail", "settings")


# -- (1) the table --------------------------------------------------------------------------------

def test_the_docs_table_is_the_registrys():
    text = open(DOC, encoding="utf-8").read()
    assert BEGIN in text and END in text, f"docs/settings.md lacks the markers {BEGIN.strip()} ... {END}"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert table == settings.markdown(), "docs/settings.md is stale: paste `python -m distgrail.settings --markdown`"
    assert all(f"`{name}`" in table for name in settings.SETTINGS)


def test_the_command_prints_the_table_and_the_values(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTGRAIL_")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")

    def run(*args, **extra):
        return subprocess.run([sys.executable, "-m", "distgrail.settings", *args], capture_output=True, text=True,
                              env=dict(env, **extra), cwd=tmp_path, timeout=120)

    r = run("--markdown")
    assert r.returncode == 0 and r.stdout == settings.markdown() and r.stderr == "", r.stderr
    r = run(DISTGRAIL_ROOT_SHARE="0.8", DISTGRAIL_TOKEN="s3cret")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "DISTGRAIL_ROOT_SHARE = 0.8 (set)" in r.stdout and "DISTGRAIL_SHM = True (default)" in r.stdout
    assert "s3cret" not in r.stdout and "DISTGRAIL_TOKEN = (hidden) (set)" in r.stdout
    r = run(DISTGRAIL_SHM="maybe")
    assert r.returncode == 2 and "DISTGRAIL_SHM must be 0, no, off or false (off)" in r.stdout and "'maybe'" in r.stdout
    assert run("--frobnicate").returncode == 2


# -- (2) every name declared, read only through the registry -------------------------------------

#: where ``DISTGRAIL_*`` names are looked for: the package, the scripts, the Slurm templates, the
#: tests, the docs, the README and CI
SCANNED = ("distgrail", "launch", "slurm", "tests", "docs", "README.md", ".ci")
#: names the scan may meet that are not settings (none: test-only ones are declared, For: tests)
NOT_SETTINGS: set = set()
NAME = re.compile(r"\bDISTGRAIL_[A-Z][A-Z0-9_]*")


def _text_files():
    """(path, text) of every text file under :data:`SCANNED` (big data files left out)."""
    for top in SCANNED:
        path = os.path.join(ROOT, top)
        walk = [(os.path.dirname(path), [], [top])] if os.path.isfile(path) else os.walk(path)
        for d, dirs, files in walk:
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                p = os.path.join(d, f)
                if os.path.getsize(p) > 2 << 20:  # graphs and pairs files of tests/data
                    continue
                try:
                    with open(p, encoding="utf-8") as fh:
                        yield p, fh.read()
                except UnicodeDecodeError:
                    continue


def _names(text: str) -> set:
    return {m.rstrip("_") for m in NAME.findall(text)}


def test_every_distgrail_name_is_declared():
    seen = {}
    for path, text in _text_files():
        for name in _names(text):
            seen.setdefault(name, set()).add(os.path.relpath(path, ROOT))
    assert {"DISTGRAIL_NCCL", "DISTGRAIL_SLURM_TEST", "DISTGRAIL_TOKEN"} <= set(seen), "the scan found too little"
    undeclared = {n: sorted(w)[:3] for n, w in seen.items() if n not in settings.SETTINGS and n not in NOT_SETTINGS}
    assert not undeclared, f"declare these in distgrail/settings (name, type, default, meaning): {undeclared}"
    # and every declaration is used: read in the package (or by a script), not only listed
    used = {n for n, w in seen.items() for p in w
            if (p.startswith(("distgrail", "launch")) and not p.startswith(os.path.join("distgrail", "settings")))}
    assert set(settings.SETTINGS) <= used, f"declared but read nowhere: {set(settings.SETTINGS) - used}"


def test_the_name_scan_sees_a_new_name():
    fake = "DISTGRAIL_" + "NO_SUCH_THING"
    assert _names(f"export {fake}=1; echo $DISTGRAIL_NCCL; DISTGRAIL_* and DISTGRAIL_ alone") == \
        {fake, "DISTGRAIL_NCCL"}


def _reads(tree) -> list:
    """``(line, name)`` of each ``DISTGRAIL_*`` name read from the environment: ``E.get(name)``,
    ``E[name]`` (not as a target), ``name in E`` with ``E`` the environment (``os.environ``,
    ``environ``) or an ``env`` mapping standing for it, and ``getenv(name)``; ``name`` a string or
    a module-level constant holding one. (``settings.get(name)`` is the way.)"""
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              for t in n.targets if isinstance(t, ast.Name)}

    def named(node):
        v = node.value if isinstance(node, ast.Constant) else consts.get(getattr(node, "id", None))
        return v if isinstance(v, str) and v.startswith("DISTGRAIL_") else None

    def environ(node):
        return re.search(r"(^|\.)(environ|env)$", ast.unparse(node)) is not None

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and named(node.args[0]):
            f = node.func
            if (isinstance(f, ast.Attribute) and ((f.attr == "get" and environ(f.value)) or f.attr == "getenv")) or \
                    (isinstance(f, ast.Name) and f.id == "getenv"):
                out.append((node.lineno, named(node.args[0])))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and named(node.slice) \
                and environ(node.value):
            out.append((node.lineno, named(node.slice)))
        elif isinstance(node, ast.Compare) and named(node.left) and any(
                isinstance(o, (ast.In, ast.NotIn)) and environ(c) for o, c in zip(node.ops, node.comparators)):
            out.append((node.lineno, named(node.left)))
    return out


def test_only_the_registry_reads_the_environment():
    found = {}
    for top in ("distgrail", "tests"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if d.startswith(SETTINGS_PKG):
                continue
            for f in files:
                if f.endswith(".py"):
                    p = os.path.join(d, f)
                    if r := _reads(ast.parse(open(p, encoding="utf-8").read(), p)):
                        found[os.path.relpath(p, ROOT)] = r
    assert not found, f"read these through distgrail.settings.get: {found}"


def test_the_read_scan_sees_planted_reads():
    planted = ast.parse(
        'import os\nTOKEN_ENV = "DISTGRAIL_TOKEN"\n'
        'a = os.environ.get("DISTGRAIL_NCCL", "1")\nb = os.environ["DISTGRAIL_SHM"]\nc = os.getenv(TOKEN_ENV)\n'
        'd = env.get("DISTGRAIL_GPU")\ne = "DISTGRAIL_DATA" in os.environ\n'
        'ok = settings.get("DISTGRAIL_NCCL"), settings.get(TOKEN_ENV)\nenv["DISTGRAIL_SHM"] = "0"\n'
        'env.pop("DISTGRAIL_TOKEN", None)\nmonkeypatch.setenv("DISTGRAIL_NCCL", "0")\n'
        'f = settings.SETTINGS["DISTGRAIL_NCCL"]\ng = "DISTGRAIL_NCCL = on" in out\n')
    assert sorted(_reads(planted)) == [(3, "DISTGRAIL_NCCL"), (4, "DISTGRAIL_SHM"), (5, "DISTGRAIL_TOKEN"),
                               (6, "DISTGRAIL_GPU"), (7, "DISTGRAIL_DATA")]


# -- (3) parsing ------------------------------------------------------------------------------------

def test_declarations_are_complete():
    for name, s in settings.SETTINGS.items():
        assert name == s.name and re.fullmatch(r"DISTGRAIL_[A-Z][A-Z0-9_]*", name)
        assert s.audience in (settings.USER, settings.TEST), name
        for text in (s.kind, s.allowed, s.meaning):
            assert text and "\n" not in text and "|" not in text, (name, text)
        assert s.shown or s.default is not None, f"{name}: say in `shown` what the default None means"
        assert issubclass(s.error, DistGrailError)


def test_defaults_when_not_set_or_empty(monkeypatch):
    for name, s in settings.SETTINGS.items():
        monkeypatch.delenv(name, raising=False)
        assert settings.get(name) == s.default, name
        assert settings.get(name, {}) == s.default, name
        if name != "DISTGRAIL_BACKEND":  # (empty is not a backend: an error, as before)
            assert settings.get(name, {name: ""}) == s.default, name


def test_defaults_agree_with_the_code():
    from distgrail.gpu.backend import BACKENDS
    from distgrail.io.chunks import READ_THREADS
    from distgrail.mpi.collectives import ROOT_SHARE
    from distgrail.mpi.partition_dag import DAG_MODES
    from distgrail.stages.partitioned_scc import DEFAULT_GATHER_EDGES

    assert settings.SETTINGS["DISTGRAIL_READ_THREADS"].default == READ_THREADS
    assert settings.SETTINGS["DISTGRAIL_ROOT_SHARE"].default == ROOT_SHARE
    assert settings.SETTINGS["DISTGRAIL_PARTITION_GATHER"].default == DEFAULT_GATHER_EDGES
    for name, values in (("DISTGRAIL_BACKEND", BACKENDS), ("DISTGRAIL_PARTITION_DAG", DAG_MODES)):
        assert [settings.parse(name, v) for v in values] == list(values)
        assert settings.SETTINGS[name].allowed == "one of " + ", ".join(values)


#: (name, text, value)
VALID = [
    ("DISTGRAIL_BACKEND", "cpu", "cpu"), ("DISTGRAIL_BACKEND", "gpu", "gpu"), ("DISTGRAIL_BACKEND", "auto", "auto"),
    ("DISTGRAIL_GPU", "3", (3,)), ("DISTGRAIL_GPU", " 2, 0 ", (2, 0)), ("DISTGRAIL_GPU", "1,,2", (1, 2)),
    ("DISTGRAIL_GPU", " ", None),
    ("DISTGRAIL_GPU_MEMORY_LIMIT", "20G", 20 << 30), ("DISTGRAIL_GPU_MEMORY_LIMIT", "1.5e9", 1_500_000_000),
    ("DISTGRAIL_GPU_MEMORY_LIMIT", " 512m ", 512 << 20), ("DISTGRAIL_GPU_MEMORY_LIMIT", "4096", 4096),
    ("DISTGRAIL_FATBINS", "0", False), ("DISTGRAIL_FATBINS", "1", True),
    ("DISTGRAIL_READ_THREADS", "3", 3), ("DISTGRAIL_READ_THREADS", " 16 ", 16), ("DISTGRAIL_READ_THREADS", "0", 1),
    ("DISTGRAIL_TOKEN", "abc", "abc"), ("DISTGRAIL_TOKEN", " t ", " t "),
    ("DISTGRAIL_NCCL", "0", False), ("DISTGRAIL_NCCL", "no", False), ("DISTGRAIL_NCCL", "OFF", False),
    ("DISTGRAIL_NCCL", " false ", False), ("DISTGRAIL_NCCL", "1", True), ("DISTGRAIL_NCCL", "Yes", True),
    ("DISTGRAIL_NCCL", "on", True), ("DISTGRAIL_NCCL", "true", True),
    ("DISTGRAIL_NCCL_EARLY", "wait", "wait"), ("DISTGRAIL_NCCL_EARLY", " WAIT ", "wait"),
    ("DISTGRAIL_NCCL_EARLY", "host", "host"),
    ("DISTGRAIL_ROOT_SHARE", " 0.6 ", 0.6), ("DISTGRAIL_ROOT_SHARE", "0", 0.0), ("DISTGRAIL_ROOT_SHARE", "3", 3.0),
    ("DISTGRAIL_SHM", "0", False), ("DISTGRAIL_SHM", "1", True), ("DISTGRAIL_FAST_EXIT", "off", False),
    ("DISTGRAIL_SHM_CLEANUP", "off", False), ("DISTGRAIL_SHM_CLEANUP", "on", True),
    ("DISTGRAIL_PARTITION_DAG", "Ranks", "ranks"), ("DISTGRAIL_PARTITION_DAG", "root", "root"),
    ("DISTGRAIL_MASK_SIDES", "Split", "split"), ("DISTGRAIL_MASK_SIDES", "whole", "whole"),
    ("DISTGRAIL_PARTITION_GATHER", "0", 0), ("DISTGRAIL_PARTITION_GATHER", "1000000000", 10**9),
    ("DISTGRAIL_PARTITION_GATHER", "4e6", 4_000_000),
    ("DISTGRAIL_PARTITION_ROUNDS", "0", 0), ("DISTGRAIL_PARTITION_ROUNDS", "64", 64),
    ("DISTGRAIL_PARTITION_NCCL", "off", False), ("DISTGRAIL_PARTITION_NCCL", "1", True),
    ("DISTGRAIL_MEMORY", "400e6", 400_000_000), ("DISTGRAIL_MEMORY", str(64 << 20), 64 << 20),
    ("DISTGRAIL_RANKS_PER_NODE", "2", 2), ("DISTGRAIL_RANKS_PER_NODE", " 1 ", 1),
    ("DISTGRAIL_TEST_WRITE_PAUSE", "60", 60.0), ("DISTGRAIL_TEST_WRITE_PAUSE", "0", 0.0),
    ("DISTGRAIL_DATA", "/data/grail", "/data/grail"),
    ("DISTGRAIL_SLURM_TEST", "0", False), ("DISTGRAIL_SLURM_TEST", "1", True), ("DISTGRAIL_SLURM_TEST", "no", False), ("DISTGRAIL_SLURM_TEST", "False", False),
]

#: (name, text): malformed, an error naming the variable, the text and what is allowed
MALFORMED = [
    ("DISTGRAIL_BACKEND", "fpga"), ("DISTGRAIL_BACKEND", "CPU"), ("DISTGRAIL_BACKEND", ""),
    ("DISTGRAIL_GPU", "x"), ("DISTGRAIL_GPU", "-1"), ("DISTGRAIL_GPU", "1,a"), ("DISTGRAIL_GPU", ","),
    ("DISTGRAIL_GPU_MEMORY_LIMIT", "lots"), ("DISTGRAIL_GPU_MEMORY_LIMIT", "-3G"), ("DISTGRAIL_GPU_MEMORY_LIMIT", "0"),
    ("DISTGRAIL_NCCL", "maybe"), ("DISTGRAIL_FATBINS", "2"),
    ("DISTGRAIL_ROOT_SHARE", "abc"), ("DISTGRAIL_ROOT_SHARE", "-1"), ("DISTGRAIL_ROOT_SHARE", "nan"),
    ("DISTGRAIL_ROOT_SHARE", "inf"), ("DISTGRAIL_ROOT_SHARE", "0.5x"),
    ("DISTGRAIL_SHM", "2"), ("DISTGRAIL_FAST_EXIT", "maybe"),
    ("DISTGRAIL_PARTITION_DAG", "everywhere"), ("DISTGRAIL_MASK_SIDES", "halves"),
    ("DISTGRAIL_PARTITION_GATHER", "many"), ("DISTGRAIL_PARTITION_GATHER", "-1"),
    ("DISTGRAIL_PARTITION_GATHER", "inf"), ("DISTGRAIL_PARTITION_GATHER", "nan"),
    ("DISTGRAIL_PARTITION_ROUNDS", "-1"), ("DISTGRAIL_PARTITION_ROUNDS", "4e6"),
    ("DISTGRAIL_PARTITION_NCCL", "enable"),
    ("DISTGRAIL_MEMORY", "lots"), ("DISTGRAIL_MEMORY", "0"), ("DISTGRAIL_MEMORY", "-1"), ("DISTGRAIL_MEMORY", "4G"),
    ("DISTGRAIL_RANKS_PER_NODE", "0"), ("DISTGRAIL_RANKS_PER_NODE", "two"), ("DISTGRAIL_RANKS_PER_NODE", "1.5"),
    ("DISTGRAIL_TEST_WRITE_PAUSE", "soon"), ("DISTGRAIL_TEST_WRITE_PAUSE", "-1"),
]

#: (name, text): malformed, but the setting falls back to its default on purpose (its ``lenient``)
LENIENT = [("DISTGRAIL_READ_THREADS", "four"), ("DISTGRAIL_READ_THREADS", "-2"), ("DISTGRAIL_READ_THREADS", "2.5"),
           ("DISTGRAIL_NCCL_EARLY", "soon"), ("DISTGRAIL_SHM_CLEANUP", "junk")]


@pytest.mark.parametrize("name, text, value", VALID, ids=[f"{n}={t!r}" for n, t, _ in VALID])
def test_valid_values(name, text, value, monkeypatch):
    assert settings.parse(name, text) == value
    monkeypatch.setenv(name, text)
    assert settings.get(name) == value  # read now, not at import
    got = settings.get(name, {name: text})
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("name, text", MALFORMED, ids=[f"{n}={t!r}" for n, t in MALFORMED])
def test_a_malformed_value_is_a_clear_error(name, text, monkeypatch):
    s = settings.SETTINGS[name]
    monkeypatch.setenv(name, text)
    with pytest.raises(s.error) as e:
        settings.get(name)
    assert str(e.value) == f"{name} must be {s.allowed}, got {text!r}"
    assert isinstance(e.value, DistGrailError)
    with pytest.raises(s.error):
        settings.get(name, {name: text})


@pytest.mark.parametrize("name, text", LENIENT, ids=[f"{n}={t!r}" for n, t in LENIENT])
def test_lenient_settings_fall_back_to_their_default(name, text):
    s = settings.SETTINGS[name]
    assert s.lenient and settings.get(name, {name: text}) == s.default


def test_every_setting_that_can_refuse_a_value_is_tested():
    lenient = {n for n, s in settings.SETTINGS.items() if s.lenient}
    assert {n for n, _ in LENIENT} == lenient
    takes_anything = {"DISTGRAIL_TOKEN", "DISTGRAIL_DATA", "DISTGRAIL_SLURM_TEST"}
    assert {n for n, _ in MALFORMED} == set(settings.SETTINGS) - lenient - takes_anything
    assert {n for n, _, _ in VALID} == set(settings.SETTINGS)


def test_errors_keep_their_kind_and_unknown_names_are_refused():
    assert settings.SETTINGS["DISTGRAIL_BACKEND"].error is BackendError  # (exit status 2, as every DistGrailError)
    assert settings.SETTINGS["DISTGRAIL_GPU"].error is BackendError
    fake = "DISTGRAIL_" + "NO_SUCH"
    with pytest.raises(DistGrailError, match=f"{fake} is not a distgrail setting"):
        settings.get(fake)


def test_the_readers_use_the_registry(monkeypatch):
    """A few readers end to end: the value set now is the value used, the error is the registry's."""
    from distgrail.dtypes import physical_memory
    from distgrail.gpu.backend import get_backend
    from distgrail.gpu.memory import gpu_memory_limit
    from distgrail.mpi.binding import choose_device
    from distgrail.mpi.nodeshare import shm_enabled
    from distgrail.mpi.transport import nccl_early, nccl_wanted

    monkeypatch.setenv("DISTGRAIL_MEMORY", "400e6")
    assert physical_memory() == 400_000_000
    monkeypatch.setenv("DISTGRAIL_MEMORY", "lots")
    with pytest.raises(DistGrailError, match="DISTGRAIL_MEMORY must be a number of bytes > 0"):
        physical_memory()
    monkeypatch.setenv("DISTGRAIL_BACKEND", "cpu")
    assert get_backend().name == "cpu"
    assert gpu_memory_limit("2G") == 2 << 30 and gpu_memory_limit("") is None
    monkeypatch.setenv("DISTGRAIL_GPU_MEMORY_LIMIT", "1M")
    assert gpu_memory_limit() == 1 << 20
    assert choose_device(1, 4, {"DISTGRAIL_GPU": "3,2"}) == 2 and choose_device(5, 4, {}) == 1
    with pytest.raises(BackendError, match="DISTGRAIL_GPU must be a device index"):
        choose_device(0, 4, {"DISTGRAIL_GPU": "first"})
    monkeypatch.setenv("DISTGRAIL_SHM", "off")
    monkeypatch.setenv("DISTGRAIL_NCCL", "no")
    monkeypatch.setenv("DISTGRAIL_NCCL_EARLY", "Wait")
    assert not shm_enabled() and not nccl_wanted() and nccl_early() == "wait"
    monkeypatch.setenv("DISTGRAIL_NCCL", "nope")
    with pytest.raises(DistGrailError, match="DISTGRAIL_NCCL must be"):
        nccl_wanted()


@pytest.mark.mpi(min_size=2)
def test_a_bad_switch_on_one_rank_ends_every_rank(monkeypatch):
    """DISTGRAIL_SHM and DISTGRAIL_NCCL are read by every rank before a collective: a malformed
    value on rank 1 alone is every rank's RankError, not rank 1's error while the others wait."""
    from mpi4py import MPI

    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.hostpath import shared_labels
    from distgrail.mpi.nodeshare import NodeGroups
    from distgrail.mpi.transport import transport_for

    comm = MPI.COMM_WORLD.Dup()
    try:
        for name, call, bad in (("DISTGRAIL_SHM", lambda: shared_labels(comm, (4, 2), "int64"), "2"),
                                ("DISTGRAIL_NCCL", lambda: transport_for(comm, get_backend("cpu")), "2"),
                                ("DISTGRAIL_RANKS_PER_NODE", lambda: NodeGroups(comm), "0")):  # (it hung)
            if comm.rank == 1:
                monkeypatch.setenv(name, bad)
            with pytest.raises(RankError, match=name):
                call()
            monkeypatch.delenv(name, raising=False)
            comm.Barrier()
    finally:
        comm.Free()
