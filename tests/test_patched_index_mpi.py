"""A patched index (distgrail/indexfile/patch.py) opened on every MPI rank
(``mpi.opening.open_on_ranks``, what MPI ``query`` and ``serve`` do): each rank reads the base and
applies the patch, and holds the arrays and seal of the whole-written index."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail


@pytest.mark.mpi(min_size=2)
def test_every_rank_opens_a_patched_index(tmp_path_factory):
    from mpi4py import MPI

    from distgrail.indexfile import patch_base, write_index_file, write_patched_index
    from distgrail.mpi.opening import open_on_ranks
    from distgrail.update import insert_edges
    from test_patched_index import _graph, diff

    comm = MPI.COMM_WORLD
    paths = None
    if comm.Get_rank() == 0:
        d = tmp_path_factory.mktemp("patched_mpi")
        g = _graph()
        idx = distgrail.build_index((g.src, g.dst), num_vertices=g.n, backend="cpu", dims=2, supports="auto")
        base, p, w = str(d / "base.h5"), str(d / "p.h5"), str(d / "whole.h5")
        idx.save(base)
        b = distgrail.open_index(base)
        rng = np.random.default_rng(2)
        new, _ = insert_edges(b, rng.integers(0, g.n, 10), rng.integers(0, g.n, 10), backend="cpu", keep_ids=True)
        write_patched_index(p, base, new.meta, **diff(b.arrays, new.arrays))
        write_index_file(w, new.meta, new.arrays)
        assert patch_base(p) is not None
        paths = (p, w)
    p, w = comm.bcast(paths, root=0)
    got = open_on_ranks(comm, p)
    want = distgrail.open_index(w)
    assert got.seal == want.seal and comm.allgather(got.seal) == [want.seal] * comm.Get_size()
    for k in want.arrays:
        assert np.array_equal(np.asarray(got.arrays[k]), np.asarray(want.arrays[k])), k
    s, t = np.arange(200) % got.n, (np.arange(200) * 7) % got.n
    assert np.array_equal(got.query(s, t, backend="cpu")[0], want.query(s, t, backend="cpu")[0])
