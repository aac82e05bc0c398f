"""A binary graph file's CSR is checked against the CRC-32 written with it (a review's finding,
session 33): a flipped bit in ``csr/indices`` of a file without a stored condensation changed an
edge, and the index of that other graph claimed the source's name and digest, exit 0. Now every
read of the CSR (one process, and each rank's block with ``--partition on``) refuses it, naming
the file; a file of an earlier release (no ``csr_crc32``) still reads."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from distgrail.cli import main
from distgrail.errors import GraphFormatError
from distgrail.io.binary import read_binary_graph, write_binary_graph
from distgrail.io.read import read_graph
from distgrail.stages.condense import condense as condense_graph


def _graph_file(d, condense=False):
    txt = os.path.join(d, "g.txt")
    rng = np.random.default_rng(4)
    s, t = rng.integers(0, 300, 2000), rng.integers(0, 300, 2000)
    with open(txt, "w") as f:
        f.write("".join(f"{a} {b}\n" for a, b in zip(s, t)))
    out = os.path.join(d, "g.h5")
    g = read_graph(txt)  # (the API, not main(): under mpiexec the command line is every rank's)
    write_binary_graph(g, out, dag=condense_graph(g) if condense else None)
    return out


def _flip(path, dataset="csr/indices", at=100):
    with h5py.File(path, "r") as f:
        off = f[dataset].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(off + at)
        b = f.read(1)
        f.seek(off + at)
        f.write(bytes([b[0] ^ 1]))


@pytest.mark.parametrize("condense", [False, True])
def test_a_flipped_bit_in_the_csr_is_refused(tmp_path, condense, capsys):
    g = _graph_file(str(tmp_path), condense)
    with h5py.File(g, "r") as f:
        assert "csr_crc32" in f.attrs
    read_binary_graph(g)  # intact: reads
    _flip(g)
    with pytest.raises(GraphFormatError, match="csr_crc32"):
        read_binary_graph(g)
    out = str(tmp_path / "i.h5")
    assert main(["index", g, "-o", out, "--backend", "cpu", "--quiet"]) == 2
    assert "csr/indptr and csr/indices changed" in capsys.readouterr().err
    assert not os.path.exists(out)


def test_a_file_of_an_earlier_release_without_the_crc_still_reads(tmp_path):
    g = _graph_file(str(tmp_path))
    with h5py.File(g, "r+") as f:
        del f.attrs["csr_crc32"]
    assert read_binary_graph(g).m > 0
    assert main(["index", g, "-o", str(tmp_path / "i.h5"), "--backend", "cpu", "--quiet"]) == 0


@pytest.mark.mpi(min_size=2)
def test_each_ranks_block_joins_the_check(tmp_path):
    """``--partition on``: each rank reads its rows; rank 0 joins their CRC-32s in rank order."""
    from mpi4py import MPI

    import distgrail

    comm = MPI.COMM_WORLD
    d = comm.bcast(str(tmp_path) if comm.rank == 0 else None, root=0)
    g = _graph_file(d) if comm.rank == 0 else None
    g = comm.bcast(g, root=0)
    distgrail.build_index(g, dims=2, comm=comm, partition="on", backend="cpu")  # intact: builds
    comm.Barrier()
    if comm.rank == 0:
        _flip(g, at=4 * 1900)  # in the last rank's block
    comm.Barrier()
    with pytest.raises(distgrail.DistGrailError, match="csr/indptr and csr/indices changed"):
        distgrail.build_index(g, dims=2, comm=comm, partition="on", backend="cpu")


def test_a_truncated_graph_file_or_index_is_called_damaged(tmp_path, capsys):
    """An HDF5 file cut short is a damaged graph file or index, not "not an HDF5 file"."""
    g = _graph_file(str(tmp_path))
    idx = str(tmp_path / "i.h5")
    assert main(["index", g, "-o", idx, "--backend", "cpu", "--quiet"]) == 0
    for path, what in ((g, "damaged graph file"), (idx, "damaged index")):
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        capsys.readouterr()
        cmd = ["index", path, "-o", str(tmp_path / "x.h5")] if path == g else ["info", path]
        assert main([*cmd, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert what in err and "not an HDF5 file" not in err, err


def test_an_attribute_hdf5_cannot_read_is_a_damaged_graph_file(tmp_path, monkeypatch):
    """A damaged variable-length attribute makes h5py raise OSError ("Can't synchronously read
    data"): the read says the file is damaged (exit 2), no traceback."""
    import h5py._hl.attrs as attrs

    g = _graph_file(str(tmp_path))
    real = attrs.AttributeManager.__getitem__

    def broken(self, name):
        if name == "source_name":
            raise OSError("Can't synchronously read data (ran off end of input buffer while decoding)")
        return real(self, name)

    monkeypatch.setattr(attrs.AttributeManager, "__getitem__", broken)
    with pytest.raises(GraphFormatError, match="damaged graph file: HDF5 cannot read it"):
        read_binary_graph(g)
    assert main(["index", g, "-o", str(tmp_path / "x.h5"), "--backend", "cpu", "--quiet"]) == 2
