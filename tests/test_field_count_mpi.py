"""Edge lists read by ranks, each parsing its part of the file: the counts a whole-file read
checks hold over all ranks.

- The edge count distgrail's writer states on the first line (``# distgrail edge list: N
  vertices, M edges``): a file cut short (or with a line added) read under ``mpiexec ...
  --partition on`` was indexed with the edges left, exit 0, the count never compared
  (:func:`distgrail.mpi.partition_read.read_parts`; the GPU backend's rank-parallel parse,
  :func:`distgrail.mpi.parse.read_graph_ranks`, neither). Now every rank ends with the one-rank
  reader's line-1 error, and the command line exits 2.
- The field count of lines of integers (docs/inputs.md, rule 6) as ranks hold it: a rank's range
  takes the file's first edge line's count, or none when that line has a field no integer
  (NetworkX's ``{}``, a float weight), so the files a whole-file read takes are taken in parts too
  and an adjacency list is refused with the one-rank message.

The collective tests run under ``mpiexec -n 2`` and ``-n 3`` (``--only-mpi``); the command-line test
starts its own ``mpiexec`` job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from distgrail.errors import GraphFormatError
from distgrail.gpu.backend import get_backend
from distgrail.io.read import read_graph

CPU = get_backend("cpu")


@pytest.fixture
def shared_dir():
    """A directory every rank sees (made by rank 0, removed once every rank is done)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    d = comm.bcast(tempfile.mkdtemp(prefix="distgrail-mpi-fields-") if comm.rank == 0 else None, root=0)
    yield d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _written(comm, d):
    """(whole, cut, added): a generated edge list as distgrail writes it (its first line states
    n and m), the same without its last line, and with one more edge line."""
    names = [os.path.join(d, x) for x in ("whole.txt", "cut.txt", "added.txt")]
    if comm.rank == 0:
        from distgrail.io.generate import generate
        from distgrail.io.writers import write_graph

        write_graph(generate("scale-free", 600, 5, seed=3), names[0])
        with open(names[0], "rb") as f:
            data = f.read()
        with open(names[1], "wb") as f:
            f.write(data[:data.rstrip(b"\n").rfind(b"\n") + 1])
        with open(names[2], "wb") as f:
            f.write(data + b"0 1\n")
    comm.Barrier()
    return names


def _one_rank_error(comm, path) -> str:
    want = None
    if comm.rank == 0:
        with pytest.raises(GraphFormatError) as e:
            read_graph(path)
        want = str(e.value)
    return comm.bcast(want, root=0)


@pytest.mark.mpi(min_size=2)
def test_partitioned_read_holds_the_stated_edge_count(comm, shared_dir):
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.partition_read import read_parts

    whole, cut, added = _written(comm, shared_dir)
    g = read_parts(comm, CPU, whole, None, "auto")
    stated = int(open(whole, "rb").readline().split()[-2])
    assert g.meta["m_total"] == stated and sum(comm.allgather(int(g.meta["edges_read"]))) == stated
    assert comm.allgather(int(g.src.shape[0]))[1] > 0  # (rank 1 read a part of it)
    for path, kind in ((cut, "truncated file? "), (added, "")):
        want = _one_rank_error(comm, path)
        assert want == (f"{path}:1: {kind}its first line, written by distgrail, says {stated:,} edges but the file "
                        f"holds {stated - 1 if kind else stated + 1:,} (if you edited the file, correct or remove "
                        f"that line)")
        with pytest.raises(RankError) as e:
            read_parts(comm, CPU, path, None, "auto")
        assert str(e.value).endswith(want), (str(e.value), want)


@pytest.mark.mpi(min_size=2)
def test_rank_parallel_parse_holds_the_stated_edge_count(comm, shared_dir):
    """The GPU backend's rank-parallel parse (here its NumPy twin, on the CPU backend) gathers the
    edges on rank 0: the count is compared there, and every rank ends with the error."""
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.parse import read_graph_ranks

    whole, cut, added = _written(comm, shared_dir)
    g = read_graph_ranks(comm, whole, "auto", None, CPU)
    if comm.rank == 0:
        want = read_graph(whole)
        assert g.meta["parser"] == "numpy" and np.array_equal(g.src, want.src) and np.array_equal(g.dst, want.dst)
    for path in (cut, added):
        want = _one_rank_error(comm, path)
        with pytest.raises(RankError) as e:
            read_graph_ranks(comm, path, "auto", None, CPU)
        assert str(e.value).endswith(want) and ":1: " in want, (str(e.value), want)


def _mixed_columns():
    """(name, bytes, refused): files whose lines have other field counts, the lines of another
    count placed late (in the last rank's range)."""
    ints = [b"%d %d %d" % (i, i + 1, i % 7) for i in range(400)]
    floats = [b"%d %d 0.5" % (i, i + 1) for i in range(400)]
    nx = [b"%d %d {}" % (i, i + 1) if i % 3 else b"%d %d {'weight': 1.0}" % (i, i + 1) for i in range(400)]
    gephi = [b"%d,%d,Directed,%d,%s,1.0" % (i, i + 1, i, b"#python" if i % 5 == 0 else b"foo") for i in range(400)]
    trailing = [b"%d,%d" % (i, i + 1) if i % 2 else b"%d,%d," % (i, i + 1) for i in range(400)]

    def late(lines, k, line):
        out = list(lines)
        out[k] = line
        return b"\n".join(out) + b"\n"

    return [
        ("nx.txt", b"\n".join(nx) + b"\n", False),
        ("floats.txt", late(floats, 390, b"390 391 1 2 3"), False),
        ("ints_dict.txt", late(ints, 390, b"390 391 {'w': 1}"), False),
        ("gephi.csv", b"Source,Target,Type,Id,Label,Weight\n" + b"\n".join(gephi) + b"\n", False),
        ("trailing.csv", b"\n".join(trailing) + b"\n", False),
        ("konect.txt", b"\n".join(ints) + b"\n", False),
        ("adjacency.txt", late(ints, 390, b"390 391 2 3"), True),
        ("optional.txt", late(ints, 390, b"390 391"), True),
        ("optional.csv", late([x.replace(b" ", b",") for x in ints], 390, b"390,391"), True),
    ]


@pytest.mark.mpi(min_size=2)
def test_ranks_read_files_of_mixed_columns_as_one_read(comm, shared_dir):
    """Each file read in parts (partitioned, and gathered on rank 0) gives the whole-file read's
    edges, or its error on every rank."""
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.parse import read_graph_ranks
    from distgrail.mpi.partition_read import read_parts

    items = _mixed_columns()
    if comm.rank == 0:
        for name, data, _ in items:
            with open(os.path.join(shared_dir, name), "wb") as f:
                f.write(data)
    comm.Barrier()
    for name, _, refused in items:
        path = os.path.join(shared_dir, name)
        if refused:
            want = _one_rank_error(comm, path)
            assert "integer fields, as on the first edge line (line 1)" in want, want
            for read in (lambda: read_parts(comm, CPU, path, None, "auto"),
                         lambda: read_graph_ranks(comm, path, "auto", None, CPU)):
                with pytest.raises(RankError) as e:
                    read()
                assert str(e.value).endswith(want), (name, str(e.value), want)
            continue
        want = read_graph(path) if comm.rank == 0 else None
        g = read_graph_ranks(comm, path, "auto", None, CPU)
        part = read_parts(comm, CPU, path, None, "auto")
        src = comm.gather(np.asarray(part.src), root=0)
        dst = comm.gather(np.asarray(part.dst), root=0)
        if comm.rank == 0:
            assert g.meta["parser"] == "numpy", name  # (parsed in ranges, not handed to the CPU reader)
            assert np.array_equal(g.src, want.src) and np.array_equal(g.dst, want.dst), name
            assert np.array_equal(np.concatenate(src), want.src) and np.array_equal(np.concatenate(dst), want.dst)
            assert part.meta["parser"] == "numpy" and part.n == want.n, name


MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")
@pytest.mark.parametrize("n", [2, 3])
def test_the_command_line_refuses_a_file_cut_short_under_partition(tmp_path, n):
    """``mpiexec -n N distgrail index cut.txt --partition on`` (the review's case): exit 2, one
    error line naming line 1, no index; the whole file builds."""
    from distgrail.io.generate import generate
    from distgrail.io.writers import write_graph

    whole, cut = tmp_path / "gen.txt", tmp_path / "cut.txt"
    write_graph(generate("scale-free", 2000, 10, seed=0), str(whole))
    data = whole.read_bytes()
    cut.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1])
    stated = int(data.split(b"\n", 1)[0].split()[-2])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env.update(MPIEXEC_TIMEOUT="200", PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def index(path, out):
        return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "distgrail", "index", str(path), "-o",
                               str(out), "--backend", "cpu", "--partition", "on", "--quiet"], env=env,
                              capture_output=True, text=True, timeout=300)

    r = index(cut, tmp_path / "m.h5")
    want = (f"{cut}:1: truncated file? its first line, written by distgrail, says {stated:,} edges but the file "
            f"holds {stated - 1:,}")
    assert r.returncode == 2 and r.stderr.count("distgrail: error:") == 1 and want in r.stderr, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr and not (tmp_path / "m.h5").exists()
    r = index(whole, tmp_path / "ok.h5")
    assert r.returncode == 0 and (tmp_path / "ok.h5").exists(), r.stderr


@pytest.mark.mpi(min_size=2)
def test_partitioned_read_of_an_h5_graph_refuses_num_vertices(comm, shared_dir):
    """``--partition on`` read an ``.h5`` graph by blocks and dropped ``--num-vertices`` (400 on a
    300-vertex graph: exit 0, n = 300), which one process refuses; now rank 0's read refuses it."""
    from distgrail.io.binary import write_binary_graph
    from distgrail.io.generate import generate
    from distgrail.mpi.errors import RankError
    from distgrail.mpi.partition_read import read_parts

    path = os.path.join(shared_dir, "p.h5")
    if comm.rank == 0:
        write_binary_graph(generate("paper", 300, 4.0, seed=1), path)
    comm.Barrier()
    read_parts(comm, CPU, path, None, "auto")  # (without it, read by blocks)
    with pytest.raises(RankError, match="--num-vertices applies to edge lists only"):
        read_parts(comm, CPU, path, 400, "auto")
