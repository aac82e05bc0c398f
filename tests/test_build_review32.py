"""Review 32 of the build: a CSV's source and target are its first two comma fields (``12 13,3`` is
no edge 12 -> 13), ``generate`` refuses non-finite degrees and caps them at n - 1, the memory
preflight uses the K the build uses, BuildConfig checks ``num_vertices``, and small ones."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from distgrail.cli import main
from distgrail.errors import GraphFormatError
from distgrail.io.parse import read_graph_numpy
from distgrail.io.read import read_graph


def _edges(g):
    return list(zip(np.asarray(g.src).tolist(), np.asarray(g.dst).tolist()))


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "distgrail", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


CSV_REFUSED = [
    ("blank.csv", b"0,1\n12 13,3\n", 2, "a blank inside a source or target field", "'12 13,3'"),
    ("tab.csv", b"0,1\n12\t13,3\n", 2, "a blank inside a source or target field", "'12\\t13,3'"),
    ("second.csv", b"0,1\n1,2 3\n", 2, "a blank inside a source or target field", "'1,2 3'"),
    ("nocomma.csv", b"0,1\n1 2\n", 2, "an edge line without a comma", "'1 2'"),
    ("header.csv", b"src,dst\n0,1\n1 2,3\n", 3, "a blank inside a source or target field", "'1 2,3'"),
    ("first.csv", b"12 13,3\n0,1\n", 1, "a blank inside a source or target field", "'12 13,3'"),
]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("name,data,line,what,got", CSV_REFUSED)
def test_a_csv_field_holding_two_ids_is_refused(tmp_path, name, data, line, what, got, gz):
    """Read as blanks, ``12 13,3`` was the edge 12 -> 13 (3 dropped, 13 invented) and ``1 2`` an
    edge in a CSV: the CPU reader and the GPU parser's twin (whole file, and a rank's range) refuse it."""
    import gzip

    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(GraphFormatError) as e:
        read_graph(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:{line}: {what}") and msg.endswith(got), msg
    with pytest.raises(GraphFormatError) as twin:
        read_graph_numpy(p, chunk_bytes=64)
    assert str(twin.value) == msg
    if not gz:
        from distgrail.io.chunks import plan_read
        from distgrail.io.parse import read_text_range
        from distgrail.io.parse_twin import NumpyDevice

        plan = plan_read(p)
        r = read_text_range(p, plan, plan.body, plan.size, NumpyDevice(), chunk_bytes=None)
        assert r.anomaly  # (the one-rank CPU reader then words it)
        out = tmp_path / "x.h5"
        run = _cli("index", p, "-o", out)
        assert run.returncode == 2 and f"{p.name}:{line}: {what}" in run.stderr and not out.exists(), run.stderr


@pytest.mark.parametrize("name,data,want", [
    ("spaced.csv", b"src,dst\n0, 1\n2 ,3\n 4 , 5 ,6 7\n", [(0, 1), (2, 3), (4, 5)]),
    ("comment.csv", b"0,1 # a b\n1,2,x y\n", [(0, 1), (1, 2)]),
    ("nx.txt", b"0 1 {'weight': 0.5, 'color': 'red'}\n1 2 {}\n", [(0, 1), (1, 2)]),
    ("hdr.csv", b"src,dst\n0 1\n1 2\n", [(0, 1), (1, 2)]),
])
def test_blanks_around_csv_fields_and_blank_separated_files_still_read(tmp_path, name, data, want):
    """Blanks around a field, in a later field or a comment; a first edge line whose ids are
    separated by blanks (NetworkX's dicts; a header's commas only): read as before."""
    p = tmp_path / name
    p.write_bytes(data)
    assert _edges(read_graph(p)) == want
    got = read_graph_numpy(p, chunk_bytes=64)
    assert _edges(got) == want and got.meta["parser"] == "numpy"


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
@pytest.mark.parametrize("degree", ["inf", "nan", "1e400"])
def test_generate_refuses_a_non_finite_degree(tmp_path, kind, degree):
    """``--degree inf`` crashed with OverflowError (exit 1): refused, exit 2, no file."""
    out = tmp_path / "g.txt"
    run = _cli("generate", kind, "-n", 10, "--degree", degree, "-o", out)
    assert run.returncode == 2 and "finite" in run.stderr and not out.exists(), run.stderr


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
def test_generate_caps_the_degree_at_n_minus_1(kind):
    """``scale-free -n 5 --degree 1e12`` was 'out of memory' and ``-n 1000 --degree 1e5`` took 22 s:
    each vertex has at most n - 1 targets, as paper's."""
    from distgrail.io.generate import generate_csr

    g = generate_csr(kind, 5, 1e12)
    assert int(np.asarray(g.indptr)[-1]) <= 5 * 4
    big = generate_csr(kind, 1000, 1e5)
    assert int(np.asarray(big.indptr)[-1]) <= 1000 * 999


def test_the_preflight_uses_the_supports_the_build_uses(tmp_path):
    """``index g1.txt --supports 99999999999`` on 6 vertices was refused ('labels ... need about
    139.7 GiB') while the same graph gzip'd built with K = 6: the build caps K at the components."""
    from distgrail.preflight import build_supports, preflight_index

    p = tmp_path / "g1.txt"
    p.write_bytes(b"0 1\n1 2\n2 3\n3 4\n4 5\n")
    assert build_supports(99999999999, 6) == 6 and build_supports("auto", 1000) == 64
    preflight_index(p, supports=99999999999, host_have=1 << 30)
    out = tmp_path / "g.h5"
    run = _cli("index", p, "--supports", 99999999999, "-o", out)
    assert run.returncode == 0 and out.exists(), run.stderr


@pytest.mark.parametrize("bad", [3.5, "7", True, -1])
def test_build_config_refuses_a_num_vertices_not_an_integer(bad):
    """``num_vertices=3.5`` was truncated to 3, ``'7'`` a TypeError traceback, ``True`` taken as 1."""
    from distgrail.config import BuildConfig
    from distgrail.errors import DistGrailError

    with pytest.raises(DistGrailError, match="num_vertices must be an integer"):
        BuildConfig(num_vertices=bad)
    assert BuildConfig(num_vertices=np.int64(7)).num_vertices == 7


@pytest.mark.parametrize("name", ["x.tsv", "x.csv", "X.TSV"])
def test_generate_refuses_a_tab_or_comma_separated_name(tmp_path, name):
    """``generate -o x.tsv`` wrote blank-separated lines under a tab-separated name: refused, no file."""
    out = tmp_path / name
    run = _cli("generate", "paper", "-n", 10, "-o", out)
    assert run.returncode == 2 and "blank between the ids" in run.stderr and not out.exists(), run.stderr


def test_generate_rmat_h5_too_large_names_the_scale(tmp_path):
    """``generate rmat --scale 32 -o r.h5`` said 'out of memory (... --dims is too large ...)'."""
    out = tmp_path / "r.h5"
    run = _cli("generate", "rmat", "--scale", 32, "-o", out)
    assert run.returncode == 2 and "--scale 32" in run.stderr and "dims" not in run.stderr, run.stderr
    assert not out.exists()


def test_labelled_does_not_claim_num_vertices(tmp_path):
    """docs/formats.md said ``labelled`` takes ``--num-vertices``; it is refused."""
    from distgrail.io.formats import REGISTRY

    assert not next(f for f in REGISTRY if f.name == "labelled").num_vertices
    p = tmp_path / "l.txt"
    p.write_bytes(b"a b\nb c\n")
    run = _cli("index", p, "--format", "labelled", "--num-vertices", 5, "-o", tmp_path / "l.h5")
    assert run.returncode == 2 and "--num-vertices" in run.stderr, run.stderr


@pytest.mark.parametrize("command", [["index", "{g}"], ["convert", "{g}"]])
def test_an_index_or_graph_to_stdout_is_refused(tmp_path, capsys, monkeypatch, command):
    """``index -o -`` wrote an HDF5 file literally named ``-`` (and its parts under MPI), exit 0:
    only query's answers and pairs go to stdout."""
    g = tmp_path / "g.txt"
    g.write_text("0 1\n1 2\n")
    monkeypatch.chdir(tmp_path)
    argv = [a.format(g=g) for a in command] + ["-o", "-", "--backend", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "-o -" in err and "not stdout" in err, err
    assert sorted(os.listdir(tmp_path)) == ["g.txt"]
