"""The command line end to end, and its failure behaviour (clear error, exit != 0, no partial file)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import distgrail
from distgrail.cli import main
from conftest import EXPECTED, graph_path, ROOT


def run(*args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "distgrail", *args], capture_output=True, text=True, env=env)


def test_index_query_info_on_bundled(tmp_path, capsys):
    out = tmp_path / "k.h5"
    assert main(["index", "bundled", "-o", str(out), "--dims", "3", "--quiet"]) == 0
    assert main(["query", str(out), "bundled", "-o", str(tmp_path / "a.txt"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reachable"] == distgrail.BUNDLED_REACHABLE
    assert sum(summary["steps"].values()) == summary["queries"] == 100000
    lines = (tmp_path / "a.txt").read_text().split()
    assert len(lines) == 100000 and lines.count("1") == distgrail.BUNDLED_REACHABLE
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["dims"] == 3 and info["n_vertices"] == 3617 and info["format_version"] == 2
    assert info["datasets"]["labels/intervals"][0] == [3, 3617, 2]


@pytest.mark.parametrize("name", ["nasa_dag_uniq", "ba10k2d"])
def test_cli_on_shared_graphs_gives_readme_counts(tmp_path, name, data_dir):
    idx = tmp_path / "i.h5"
    r = run("index", graph_path(name), "-o", str(idx), "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    r = run("query", str(idx), graph_path(name) + ".q100k.pairs.gz", "-o", str(tmp_path / "a.npy"), "--json",
            "--backend", "cpu")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["reachable"] == EXPECTED[name]
    assert int(np.load(tmp_path / "a.npy").sum()) == EXPECTED[name]


def test_bad_graph_clear_error_no_partial_file(tmp_path):
    bad = tmp_path / "bad.gra"
    bad.write_text("graph_for_greach\n3\n0: 1 #\n1: 9 #\n2: #\n")
    out = tmp_path / "out.h5"
    r = run("index", str(bad), "-o", str(out))
    assert r.returncode == 2
    assert f"{bad}:4: vertex id out of range 0..2, got '9'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".out.h5")]


def test_failure_while_writing_leaves_no_file(tmp_path, monkeypatch):
    import distgrail.indexfile.write as f

    def boom(*a, **k):
        raise RuntimeError("disk full")

    out = tmp_path / "x.h5"
    monkeypatch.setattr(f.np, "ascontiguousarray", boom)
    with pytest.raises(RuntimeError):
        distgrail.build_index(distgrail.bundled_graph(), dims=1, backend="cpu", output=out)
    assert os.listdir(tmp_path) == []


def test_query_errors(tmp_path):
    idx = tmp_path / "k.h5"
    assert run("index", "bundled", "-o", str(idx), "--dims", "1").returncode == 0
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 1\n5 99999\n")
    r = run("query", str(idx), str(pairs))
    assert r.returncode == 2 and f"{pairs}:2: vertex id out of range 0..3616, got '99999'" in r.stderr
    pairs.write_text("0 1\n5\n")
    r = run("query", str(idx), str(pairs))
    assert r.returncode == 2 and f"{pairs}:2: expected 'u v' (query pair), got '5'" in r.stderr
    r = run("query", str(pairs), str(pairs))
    assert r.returncode == 2 and "not an HDF5 file" in r.stderr


def test_bad_arguments(tmp_path):
    r = run("index", "bundled", "-o", str(tmp_path / "x.h5"), "--dims", "0")
    assert r.returncode == 2 and "dims must be an integer >= 1, got 0" in r.stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("kind", ["paper", "scale-free", "layered"])
@pytest.mark.parametrize("ext", ["gra", "txt", "h5"])
def test_generate_then_index(tmp_path, kind, ext):
    g = tmp_path / f"g.{ext}"
    assert main(["generate", kind, "-n", "500", "--degree", "3", "--seed", "4", "-o", str(g), "--quiet"]) == 0
    back = distgrail.read_graph(str(g))
    ref = distgrail.io.generate.generate(kind, 500, 3, seed=4)
    assert back.n == 500
    # .gra and .h5 store the CSR without duplicate edges; edge lists keep every line
    assert set(zip(back.src.tolist(), back.dst.tolist())) == set(zip(ref.src.tolist(), ref.dst.tolist()))
    idx = distgrail.build_index(str(g), dims=2, backend="cpu")
    assert idx.n == 500


def test_convert_roundtrip(tmp_path):
    h5 = tmp_path / "k.h5"
    assert main(["convert", "bundled", "-o", str(h5), "--quiet"]) == 0
    a = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    b = distgrail.build_index(str(h5), dims=2, backend="cpu")
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])
    assert a.meta["source_digest"] == b.meta["source_digest"] and a.meta["source_digest_algorithm"] == "blake3"


def _convert_cases(tmp_path):
    """Text graphs with cycles, self-loops, repeated edges, isolated vertices, one vertex, no edge."""
    from distgrail.io.generate import generate
    from distgrail.io.writers import write_graph

    rng = np.random.default_rng(3)
    src = rng.integers(0, 300, 2000)
    dst = rng.integers(0, 300, 2000)
    src[:5], dst[:5] = [7, 7, 9, 9, 9], [7, 7, 9, 9, 8]  # self-loops and repeats
    el = tmp_path / "cyc.txt"
    el.write_text("# cycles\n" + "".join(f"{a} {b}\n" for a, b in zip(src, dst)) + "\r\n")
    one = tmp_path / "one.gra"
    one.write_text("graph_for_greach\n1\n0: 0 #\n")
    empty = tmp_path / "empty.gra"
    empty.write_text("3\n0: #\n1: #\n2: #\n")
    mtx = tmp_path / "m.mtx"
    mtx.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n4 4 3\n2 1\n3 3\n4 1\n")
    paper = tmp_path / "p.gra"
    write_graph(generate("paper", 400, 4, seed=2), str(paper))
    return [str(p) for p in (el, one, empty, mtx, paper)]


def test_convert_cpu_output_unchanged(tmp_path):
    """The CPU path writes exactly what convert wrote before it learned the GPU (read_graph, condense,
    write_binary_graph), byte for byte; --no-condense stores no condensation."""
    from distgrail.io.binary import write_binary_graph
    from distgrail.stages.condense import condense

    for k, path in enumerate(_convert_cases(tmp_path)):
        want = tmp_path / f"want{k}.h5"
        g = distgrail.read_graph(path)
        write_binary_graph(g, str(want), dag=condense(g))
        got = tmp_path / f"got{k}.h5"
        assert main(["convert", path, "-o", str(got), "--backend", "cpu", "--quiet"]) == 0
        assert got.read_bytes() == want.read_bytes(), path
    flat = tmp_path / "flat.h5"
    assert main(["convert", path, "-o", str(flat), "--backend", "cpu", "--no-condense", "--json"]) == 0
    import h5py

    with h5py.File(flat) as f:
        assert "condensation" not in f and "blake3:" + f.attrs["source_digest"].decode() == distgrail.read_graph(path).digest


def test_convert_json_names_the_backend(tmp_path, capsys):
    out = tmp_path / "k.h5"
    assert main(["convert", "bundled", "-o", str(out), "--backend", "cpu", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == "cpu" and summary["parser"] == "cpu" and summary["n_components"] == 3617


def test_convert_bad_input_exit_2_no_output(tmp_path):
    bad = tmp_path / "bad.gra"
    bad.write_text("graph_for_greach\n2\n0: 1 #\n1: x #\n")
    out = tmp_path / "o.h5"
    r = run("convert", str(bad), "-o", str(out), "--backend", "cpu")
    assert r.returncode == 2 and "bad.gra:4" in r.stderr and "'x'" in r.stderr
    assert not out.exists() and os.listdir(tmp_path) == ["bad.gra"]


@pytest.mark.gpu
def test_convert_gpu_file_equals_cpu_file_byte_for_byte(tmp_path):
    """GPU parse + condense, CSR made on the device, arrays copied only to write: same file."""
    for k, path in enumerate(_convert_cases(tmp_path) + [graph_path("kegg_dag_uniq"), graph_path("ba10k2d")]):
        cpu, gpu = tmp_path / f"c{k}.h5", tmp_path / f"g{k}.h5"
        assert main(["convert", path, "-o", str(cpu), "--backend", "cpu", "--quiet"]) == 0
        assert main(["convert", path, "-o", str(gpu), "--backend", "gpu", "--quiet"]) == 0
        assert gpu.read_bytes() == cpu.read_bytes(), path
        assert main(["convert", path, "-o", str(gpu), "--backend", "gpu", "--quiet", "--no-condense"]) == 0
        assert main(["convert", path, "-o", str(cpu), "--backend", "cpu", "--quiet", "--no-condense"]) == 0
        assert gpu.read_bytes() == cpu.read_bytes(), path


@pytest.mark.gpu
def test_convert_gpu_parses_on_the_device(tmp_path, capsys):
    out = tmp_path / "k.h5"
    assert main(["convert", graph_path("kegg_dag_uniq"), "-o", str(out), "--backend", "gpu", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["backend"] == "gpu" and summary["parser"] == "gpu"


def test_index_json_reports_the_start_up(tmp_path, capsys):
    """index --json: the seconds from the process's start to the build's clock (interpreter,
    imports, set-up), rank 0's and the slowest rank's; with one process both the same."""
    assert main(["index", "bundled", "-o", str(tmp_path / "b.h5"), "--backend", "cpu", "--json", "--quiet"]) == 0
    summary = json.loads(capsys.readouterr().out)
    up = summary["startup_seconds"]
    assert set(up) == {"rank0", "slowest"} and 0 < up["rank0"] == up["slowest"] < 600, up
    from distgrail.cli_common import process_age

    age = process_age()
    assert age is not None and age >= up["rank0"], (age, up)  # (this process started before that build)


def test_query_puts_the_index_on_the_device_while_the_pairs_are_read(tmp_path, capsys):
    """``query``'s prepare runs on a thread beside the pairs' read: the state is built once
    (the query reuses it), its seconds are reported, and a failing prepare leaves the error to
    the query itself."""
    import json as _json

    import distgrail
    from distgrail.cli import _prepare_beside, main as cli_main

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    wait = _prepare_beside(idx, "cpu", answers=1000)
    spent, out = wait()
    assert spent > 0 and all(o.built for o in idx._query_state.values())
    assert out is None  # page-locked answers only on a GPU

    class Broken:
        def _state(self, be, spent):
            raise MemoryError("no room (planted)")

    assert _prepare_beside(Broken(), "cpu")() == (0, None)  # no exception here
    path = tmp_path / "k.h5"
    idx.save(str(path))
    assert cli_main(["query", str(path), "bundled", "--backend", "cpu", "--json"]) == 0
    got = _json.loads(capsys.readouterr().out)
    assert got["prepare_seconds"] > 0 and got["reachable"] == distgrail.BUNDLED_REACHABLE
    assert 0 <= got["prepare_wait_seconds"] < 60


@pytest.mark.parametrize("bad", [False, True])
def test_query_unlocks_the_answers_made_beside_even_when_the_read_fails(tmp_path, monkeypatch, capsys, bad):
    """``query`` of a large ``.npy``: the answer array the prepare made (page-locked on a GPU) is
    the one the answers go into, and its unlock is called once, after the answers are written or
    when the read refuses a bad id (exit 2), never left locked."""
    import numpy as np

    import distgrail
    import distgrail.cli as cli
    from distgrail.query import staging

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    idx.save(str(tmp_path / "k.h5"))
    pairs = np.random.default_rng(4).integers(0, idx.n, (3000, 2))
    if bad:
        pairs[1234, 1] = idx.n
    np.save(tmp_path / "p.npy", pairs)
    monkeypatch.setattr(staging, "DIRECT_PAIRS", 100)  # "large": more than 1,600 bytes of pairs
    made, released = [], []
    real = cli._prepare_beside

    def prepare(index, backend, rows, expect, cpu_pairs=0, cpu_ids=None):
        wait = real(index, backend, rows, 0)

        def waited():
            spent, _ = wait()
            made.append(np.zeros(expect, bool))
            return spent, (made[-1], lambda: released.append(True))
        return waited

    monkeypatch.setattr(cli, "_prepare_beside", prepare)
    rc = cli.main(["query", str(tmp_path / "k.h5"), str(tmp_path / "p.npy"), "-o", str(tmp_path / "a.npy"),
                   "--backend", "cpu", "--quiet"])
    assert released == [True] and len(made) == 1 and made[0].size == 3000
    if bad:
        assert rc == 2 and "1234" in capsys.readouterr().err and not (tmp_path / "a.npy").exists()
    else:
        want = idx.query(pairs[:, 0], pairs[:, 1], backend="cpu")[0]
        assert rc == 0 and np.array_equal(np.load(tmp_path / "a.npy"), want) and np.array_equal(made[0], want)


def test_the_ids_a_mapped_npy_gives_the_batch_are_prepared_for(tmp_path):
    """``mapped_ids_like``: a ``.npy`` of int32 or int64 ids gives its first rows' sources as the
    mapped read gives them to the batch (read-only, strided, the file's type: numba's code for
    those is not that of contiguous ids); a text file or a one-row file gives None."""
    import numpy as np

    import distgrail
    from distgrail.cli_pairs import mapped_ids_like

    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    for dt in (np.int32, np.int64):
        np.save(tmp_path / "p.npy", np.arange(10, dtype=dt).reshape(5, 2))
        ids = mapped_ids_like(str(tmp_path / "p.npy"), idx)
        assert ids.dtype == dt and not ids.flags.writeable and not ids.flags.c_contiguous and ids.tolist() == [0, 2]
    np.save(tmp_path / "one.npy", np.zeros((1, 2), np.int64))
    (tmp_path / "p.txt").write_text("0 1\n2 3\n")
    assert mapped_ids_like(str(tmp_path / "one.npy"), idx) is None and mapped_ids_like(str(tmp_path / "p.txt"), idx) is None
