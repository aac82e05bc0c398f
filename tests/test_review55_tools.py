"""Review 55 of what a cluster user touches beside the main commands: the benchmark modules run as
``python -m distgrail.benchmarks.<name>`` (a bad argument or a missing file is one line and exit
status 2, not a traceback; their usage lines; their temp files) and the launch/ and slurm/ scripts."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT


def _bench(name, *args, cwd=None, env=None, timeout=120):
    e = dict(os.environ, DISTGRAIL_BACKEND="cpu")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", f"distgrail.benchmarks.{name}", *map(str, args)], cwd=cwd or ROOT,
                          env=e, capture_output=True, text=True, timeout=timeout)


def _clear_error(r, prog, text):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert f"{prog}: error: " in r.stderr and text in r.stderr, r.stderr


@pytest.fixture(scope="module")
def kegg_index(tmp_path_factory):
    import distgrail

    path = tmp_path_factory.mktemp("idx") / "kegg.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu").save(path)
    return str(path)


@pytest.mark.parametrize("name, args, text", [
    ("write", ["--index", "{missing}.h5"], "no such index file"),
    ("write", ["--mb", "1", "--dir", "{missing}/folder"], "No such file or directory"),
    ("query_floor", ["{missing}.h5", "--backend", "cpu"], "no such index file"),
    ("cpu_prefilter", ["{missing}.h5"], "no such index file"),
    ("serve", ["{missing}.h5", "--backend", "cpu"], "no such index file"),
    ("parse", ["{missing}.gra"], "No such file or directory"),
    ("exact", ["{missing}.gra", "{missing}.h5", "--backend", "cpu"], "no such index file"),
    ("update", ["--graph", "{missing}.gra", "--backend", "cpu"], "no such file"),
    ("scaling", ["{missing}.gra", "--backend", "cpu", "--output", "{missing}.h5", "--json", "{missing}.json"],
     "no such file"),
])
def test_a_benchmark_given_a_missing_file_says_so_in_one_line_with_status_2(tmp_path, name, args, text):
    """Was: a traceback ending in IndexFormatError / GraphFormatError / FileNotFoundError, exit 1."""
    missing = str(tmp_path / "no-such")
    r = _bench(name, *[a.format(missing=missing) for a in args], cwd=tmp_path)
    _clear_error(r, f"python -m distgrail.benchmarks.{name}", text)


@pytest.mark.parametrize("name, args, text", [
    ("cpu", ["--repeat", "0"], "--repeat must be 1 or more, got 0"),  # was: TypeError (best() returned None)
    ("cpu", ["--sample", "0"], "--sample must be 1 or more, got 0"),  # was: ZeroDivisionError
    ("cpu", ["--data", "{tmp}"], "no GRAIL benchmark graph"),  # was: the graphs silently left out, status 0
    ("io", ["--repeat", "0"], "--repeat must be 1 or more, got 0"),  # was: ValueError in min() after generating
    ("io", ["--sizes", "dag01,dag02"], "'dag02' is none of dag01, dag11, kinds"),  # was: KeyError
    ("serve", ["{index}", "--backend", "cpu", "--repeat", "0"], "--repeat must be 1 or more"),  # was: TypeError
    ("serve", ["{index}", "--backend", "cpu", "--sizes", "1,x"], "--sizes: whole numbers"),  # was: ValueError
    ("serve", ["{index}", "--backend", "cpu", "--clients", "0"], "--clients must be 1 or more"),
    ("spread_query", ["{index}", "--backend", "cpu", "--repeat", "0"], "--repeat and --pairs must be 1 or more"),
])
def test_a_benchmark_refuses_a_count_it_cannot_use_before_running(tmp_path, kegg_index, name, args, text):
    r = _bench(name, *[a.format(tmp=tmp_path, index=kegg_index) for a in args], cwd=tmp_path, timeout=60)
    _clear_error(r, "", text)


def test_spread_query_exits_1_when_a_way_fails(kegg_index, monkeypatch, capsys):
    """Was: '  whole  failed: ...' printed and exit status 0, the answers never compared."""
    import distgrail
    from distgrail.benchmarks import spread_query

    def broken(*a, **k):
        raise RuntimeError("no whole index here")

    monkeypatch.setattr(distgrail, "open_index", broken)
    assert spread_query.main([kegg_index, "--backend", "cpu", "--pairs", "1000", "--repeat", "1"]) == 1
    assert "whole   failed: RuntimeError: no whole index here" in capsys.readouterr().out


def _has_gpu():
    from distgrail.gpu.backend import gpu_available

    return gpu_available()


@pytest.mark.parametrize("name, text", [("labeling", "benchmarks.labeling: needs a usable CUDA GPU"),
                                        ("queries", "benchmarks.queries: needs a usable CUDA GPU (--cpu:")])
def test_a_gpu_benchmark_without_a_gpu_says_so_and_leaves_no_temp_folder(tmp_path, name, text):
    """Was: a ModuleNotFoundError ('cupy') traceback; queries also left its fresh CuPy kernel cache
    (distgrail-cupy-cache-*, every kernel it compiled on a GPU) in the temp folder, run after run."""
    if _has_gpu():
        pytest.skip("a GPU is here: the benchmark would run")
    r = _bench(name, cwd=tmp_path, env={"TMPDIR": str(tmp_path)}, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert text in r.stderr, r.stderr
    assert not list(tmp_path.glob("distgrail-cupy-cache-*"))


BENCHMARKS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "distgrail", "benchmarks", "*.py"))
                    if not p.endswith(("__init__.py", "phase5.py")))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmarks_usage_names_the_command_and_its_docstring_every_option(name):
    """Was: 'usage: cpu.py ...' (a file a user cannot run; 10 modules), and options the docstring
    never named (cpu --dims/--paper-*, labeling --no-cpu/--rule while it named a --no-cpu-deep
    that does not exist, queries --dims/--no-generated, serve --seed/--no-cli/--share-gpus, scaling
    --backend, build_scaling's launcher options)."""
    import importlib

    r = _bench(name, "--help", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m distgrail.benchmarks.{name} "), r.stdout[:80]
    options = set(re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", r.stdout)) - {"--help"}
    doc = importlib.import_module(f"distgrail.benchmarks.{name}").__doc__
    named = set(re.findall(r"--[a-z][a-z0-9-]*", doc))
    assert not options - named, f"options the docstring does not name: {sorted(options - named)}"


def test_labeling_docstring_describes_phase5_as_it_runs():
    from distgrail.benchmarks import labeling, phase5

    assert "--no-cpu-deep" not in labeling.__doc__
    assert [v[:2] for v in phase5.VARIANTS] == [("fused", "push"), ("levels", "push"), ("pull", "pull")]
    assert "K = 0 / 64 / 256 / 1024" in labeling.__doc__ and "fused\none-launch schedule with ``in`` pushed" in \
        labeling.__doc__ and "``in`` pulled)" in labeling.__doc__


def test_phase5_run_as_a_command_points_at_labeling():
    """Was: python -m distgrail.benchmarks.phase5 (any arguments, --help too) printed nothing, status 0."""
    r = _bench("phase5", "--help", timeout=60)
    assert r.returncode == 2 and "distgrail.benchmarks.labeling --phase5" in r.stderr, (r.returncode, r.stderr)


def test_build_scaling_refuses_a_missing_graph_before_launching_ranks(tmp_path, monkeypatch):
    """Was: the ranks launched, and the run was reported failed (exit 1) after an index command
    per rank count had started on a path that does not exist."""
    from distgrail.benchmarks import build_scaling

    launched = []
    monkeypatch.setattr(build_scaling, "graph_rows", lambda *a: launched.append(a) or [])
    with pytest.raises(SystemExit) as e:
        build_scaling.main([str(tmp_path / "nosuch.gra"), "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and not launched


def test_scaling_takes_bundled_as_every_command_does(monkeypatch):
    """Was: 'bundled' refused as no such file, though every distgrail command reads it as the
    bundled example graph."""
    import distgrail
    from distgrail.benchmarks import scaling
    from distgrail.cli_common import resolve_bundled

    assert resolve_bundled("bundled", "graph") == distgrail.bundled_graph()
    seen = []

    class Stop(Exception):
        pass

    class Warm:
        timings: dict = {}

    def build_index(graph, **k):  # (the first build is the warm-up's, on the bundled graph)
        seen.append(graph)
        if len(seen) > 1:
            raise Stop
        return Warm()

    monkeypatch.setattr(distgrail, "build_index", build_index)
    monkeypatch.setattr(distgrail, "get_backend", lambda name: None)
    with pytest.raises(Stop):
        scaling.main(["bundled", "--output", "x.h5", "--json", "x.json", "--backend", "cpu"])
    assert seen == [distgrail.bundled_graph()] * 2


def test_scaling_script_takes_python_and_mpiexec_from_the_environment(tmp_path):
    """launch/scaling.sh used the project's .venv Python and mpiexec even when PYTHON and MPIEXEC
    were set (launch/mpirun.sh takes them first): a user could not point it at a site MPI."""
    import subprocess

    log = tmp_path / "calls.txt"
    stub = tmp_path / "mpiexec"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexit 3\n')
    stub.chmod(0o755)
    env = {**os.environ, "MPIEXEC": str(stub), "PYTHON": "/opt/site/bin/python3", "CLI": "0"}
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "scaling.sh"), "g.txt", "2", "10", "1",
                        str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "--version" and "-n 1 /opt/site/bin/python3 -m mpi4py -m distgrail.benchmarks.scaling g.txt" \
        in calls[1], calls
