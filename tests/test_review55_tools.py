"""Review 55 of what a cluster user touches beside the main commands: the benchmark modules run as
``python -m distgrail.benchmarks.<name>`` (a bad argument or a missing file is one line and exit
status 2, not a traceback; their usage lines; their temp files) and the launch/ and slurm/ scripts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, graph_path


def _bench(name, *args, cwd=None, env=None, timeout=120):
    e = dict(os.environ, DISTGRAIL_BACKEND="cpu")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", f"distgrail.benchmarks.{name}", *map(str, args)], cwd=cwd or ROOT,
                          env=e, capture_output=True, text=True, timeout=timeout)


def _clear_error(r, name, text):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert f"python -m distgrail.benchmarks.{name}: error: " in r.stderr and text in r.stderr, r.stderr


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
    _clear_error(r, name, text)
