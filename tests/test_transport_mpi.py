"""The transport between ranks under MPI (launch/test.sh runs these with mpiexec -n 2 and -n 3).

On CI the NCCL transport runs on a fake NCCL over MPI (tests/test_transport.py): the choice
of transport, its set-up and fallback, bcast/gatherv against the host path, and whole builds
through the NCCL code path compared byte for byte with the one-process index. The tests marked
``gpu`` run the real NCCL on the GPU machine (2 ranks, one GPU each).
"""

from __future__ import annotations

import numpy as np
import pytest

import distgrail
from distgrail.gpu.backend import get_backend
from distgrail.mpi import placement as distributed
from distgrail.mpi import transport
from distgrail.mpi.errors import RankError
from distgrail.errors import DistGrailError
from test_distributed_mpi import cyclic_graph, everywhere, same_index, stored_graph
from test_transport import fake_cupy, fake_gpu_backend, fake_nccl, install

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]

CPU = get_backend("cpu")


def inits(nccl):
    return [e for e in nccl.log if e[0] == "init"]


# -- which transport ----------------------------------------------------------------------------

def test_nccl_is_chosen_when_every_rank_has_it(comm, wire, monkeypatch):
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    tp = transport.transport_for(comm, fake_gpu_backend(cp))
    tp.ready()  # the background set-up is joined at the first collective, or here
    got = inits(nccl)
    everywhere(comm, tp.name == "nccl" and len(got) == 1, f"{tp.name}, inits {got}")
    everywhere(comm, nccl.init_threads == ["distgrail-nccl-init"], nccl.init_threads)
    size, uid, rank = got[0][1:]
    uids = comm.allgather(uid)
    everywhere(comm, size == comm.Get_size() and rank == comm.Get_rank() and all(u == uids[0] for u in uids),
               f"NcclCommunicator({size}, uid, {rank}); uids shared: {all(u == uids[0] for u in uids)}")
    # the warm-up ran one broadcast and one grouped gather
    everywhere(comm, ("group",) in nccl.log and any(e[0] == "bcast" for e in nccl.log), nccl.log)


@pytest.mark.parametrize("case", ["cpu-backend", "env-off", "not-importable", "not-available-on-last-rank",
                                  "unique-id-fails"])
def test_the_host_path_otherwise(comm, wire, monkeypatch, capsys, case):
    """Each reason for no NCCL, on one rank or all, found before ncclCommInitRank: every rank
    takes the MPI transport, nobody hangs, and rank 0 says why in one line where NCCL was
    expected but failed. (A failing ncclCommInitRank, which runs in the background, is every
    rank's error: tests/test_transport_setup_mpi.py.)"""
    last = comm.Get_rank() == comm.Get_size() - 1
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    kw = {"not-available-on-last-rank": {"available": not last},
          "unique-id-fails": {"fail_uid": True}}.get(case, {})
    nccl = fake_nccl(wire, **kw)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, None if case == "not-importable" else nccl)
    if case == "env-off":
        monkeypatch.setenv("DISTGRAIL_NCCL", "0")
    be = CPU if case == "cpu-backend" else fake_gpu_backend(cp)
    tp = transport.transport_for(comm, be)
    err = capsys.readouterr().err
    everywhere(comm, tp.name == "mpi" and isinstance(tp, transport.MpiTransport), tp.name)
    quiet = case in ("cpu-backend", "env-off")
    if comm.Get_rank() == 0:
        lines = [ln for ln in err.splitlines() if "NCCL" in ln]
        ok = lines == [] if quiet else len(lines) == 1 and lines[0].startswith("distgrail: notice: ")
    else:
        ok = "NCCL" not in err
    everywhere(comm, ok, err)
    if case in ("cpu-backend", "env-off", "not-importable", "not-available-on-last-rank"):
        everywhere(comm, not inits(nccl), f"NCCL was set up: {nccl.log}")


def test_the_nccl_transport_is_kept_with_its_communicator(wire, monkeypatch):
    """Built once per MPI communicator (a second build on it reuses it, also while it is still
    being set up in the background), destroyed on every rank when that communicator is freed."""
    from mpi4py import MPI

    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    be = fake_gpu_backend(cp)
    c = MPI.COMM_WORLD.Dup()
    a = transport.transport_for(c, be)
    b = transport.transport_for(c, be)
    other = MPI.COMM_WORLD.Dup()
    o = transport.transport_for(other, be)
    a.ready()
    o.ready()
    everywhere(wire, a is b and a.name == "nccl" and o is not a and len(inits(nccl)) == 2, nccl.log)
    c.Free()
    everywhere(wire, nccl.log.count(("destroy",)) == 1 and a.nc is None and o.nc is not None, nccl.log)
    other.Free()
    everywhere(wire, nccl.log.count(("destroy",)) == 2, nccl.log)


# -- bcast and gatherv, NCCL (fake) against the host path ---------------------------------------

def transports(comm, wire, which):
    if which == "mpi":
        return transport.MpiTransport(comm, CPU), None
    nccl = fake_nccl(wire)
    tp, why = transport.nccl_transport(comm, CPU, nccl)
    assert tp is not None, why
    return tp, nccl


ARRAYS = [np.arange(1000, dtype=np.uint8), np.arange(24, dtype=np.int32).reshape(6, 4),
          np.arange(60, dtype=np.uint64).reshape(5, 3, 4) * (2**40 + 3), np.linspace(0, 1, 17),
          np.zeros(0, np.int64), np.zeros((0, 5), np.uint16)]


@pytest.mark.parametrize("which", ["nccl", "mpi"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_bcast_from_any_root(comm, wire, monkeypatch, which, chunk):
    if chunk:
        monkeypatch.setattr(transport, "CHUNK_BYTES", chunk)
    tp, nccl = transports(comm, wire, which)
    me = comm.Get_rank()
    for root in (0, comm.Get_size() - 1):
        for a in ARRAYS:
            got = tp.bcast(a.copy() if me == root else None, root)
            everywhere(comm, got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes(),
                       f"root {root}: {a.dtype}{a.shape} -> {got.dtype}{got.shape}")
    if nccl is not None and chunk:  # every NCCL call moved at most CHUNK_BYTES
        sizes = [e[1] for e in nccl.log if e[0] == "bcast"]
        everywhere(comm, sizes and max(sizes) <= chunk, sizes)


@pytest.mark.parametrize("which", ["nccl", "mpi"])
@pytest.mark.parametrize("chunk", [None, 5])
def test_gatherv_of_uneven_blocks(comm, wire, monkeypatch, which, chunk):
    """Ranks send 0 or more rows (some none at all); root gets them in rank order."""
    if chunk:
        monkeypatch.setattr(transport, "CHUNK_BYTES", chunk)
    tp, nccl = transports(comm, wire, which)
    me, size = comm.Get_rank(), comm.Get_size()
    rows = [(r * 5 + 2) % 4 for r in range(size)]  # 2, 3, 0 for three ranks
    for root in (0, size - 1):
        for dt, trail in ((np.uint32, (2,)), (np.uint64, (3, 2)), (np.int8, ())):
            want = [(np.arange(rows[r] * int(np.prod(trail)), dtype=np.int64) * 7 + 1000 * r).astype(dt)
                    .reshape((rows[r],) + trail) for r in range(size)]
            got = tp.gatherv(want[me], root)
            if me == root:
                full = np.concatenate(want)
                ok = got.dtype == full.dtype and got.shape == full.shape and got.tobytes() == full.tobytes()
                detail = f"{got.dtype}{got.shape} vs {full.dtype}{full.shape}"
            else:
                ok, detail = got is None, repr(got)
            everywhere(comm, ok, f"root {root}: {detail}")
    if nccl is not None:
        sizes = [e[1] for e in nccl.log if e[0] in ("send", "recv")]
        everywhere(comm, not chunk or max(sizes, default=0) <= chunk, sizes)


@pytest.mark.parametrize("which", ["nccl", "mpi"])
def test_gatherv_of_mismatched_blocks_fails_every_rank(comm, wire, which):
    tp, _ = transports(comm, wire, which)
    block = np.zeros((2, 3 if comm.Get_rank() == 0 else 4), np.int32)
    with pytest.raises(DistGrailError, match="same trailing shape and dtype"):
        tp.gatherv(block)
    got = tp.gatherv(np.full((1, 2), comm.Get_rank(), np.int32))  # and the transport still works
    everywhere(comm, comm.Get_rank() != 0 or got.ravel().tolist() == [r for r in range(comm.Get_size()) for _ in (0, 1)],
               repr(got))


@pytest.mark.parametrize("which", ["nccl", "mpi"])
def test_a_rank_that_cannot_allocate_fails_every_rank(comm, wire, monkeypatch, which):
    tp, _ = transports(comm, wire, which)
    bad = comm.Get_size() - 1
    if comm.Get_rank() == bad:
        def receive_buffer(shape, dtype):
            raise MemoryError("Unable to allocate (injected)")

        monkeypatch.setattr(transport, "receive_buffer", receive_buffer)
        from distgrail.mpi import collectives
        monkeypatch.setattr(collectives, "receive_buffer", receive_buffer)
    with pytest.raises(RankError, match=f"rank {bad}.*MemoryError: Unable to allocate"):
        tp.bcast(np.arange(10) if comm.Get_rank() == 0 else None)


# -- whole builds through the NCCL code path ----------------------------------------------------

def nccl_build(monkeypatch, wire, early="wait", **fake):
    """Make build_index_distributed take the NCCL transport (fake; ``fake``: its options), set up
    in the background as transport_for does, although the backend is the CPU. ``early``:
    DISTGRAIL_NCCL_EARLY (default ``wait``: every transfer goes by NCCL)."""
    monkeypatch.setenv("DISTGRAIL_NCCL_EARLY", early)
    nccl = fake_nccl(wire, **fake)

    def transport_for(comm, be):
        tp, why = transport.nccl_transport(comm, be, nccl, background=True)
        assert tp is not None, why
        return tp

    monkeypatch.setattr(distributed, "transport_for", transport_for)

    def no_host_labels(*a, **k):
        raise AssertionError("the host label path ran on the NCCL path")

    monkeypatch.setattr(distributed, "labels_by_host", no_host_labels)
    return nccl


GRAPHS = {"kegg": distgrail.bundled_graph, "cyclic": cyclic_graph}


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("dims, supports", [(1, 0), (2, 64), (5, 200)])
@pytest.mark.parametrize("full_index_on", ["all", "root"])
def test_a_build_through_nccl_is_byte_identical_to_one_process(comm, wire, tmp_path, monkeypatch, graph, dims,
                                                               supports, full_index_on):
    nccl = nccl_build(monkeypatch, wire)
    g = GRAPHS[graph]()
    ref = distgrail.build_index(g, dims=dims, seed=11, backend="cpu", supports=supports)
    out = tmp_path / "dist.h5"
    idx = distgrail.build_index(g, dims=dims, seed=11, backend="cpu", output=out, comm=comm,
                                              full_index_on=full_index_on, supports=supports)
    me = comm.Get_rank()
    if full_index_on == "all" or me == 0:
        everywhere(comm, not same_index(ref, idx) and idx.meta["transport"] == "nccl",
                   same_index(ref, idx) or idx.meta.get("transport"))
    else:
        everywhere(comm, idx is None, repr(idx))
    if me == 0:
        ref.save(tmp_path / "ref.h5")
        everywhere(comm, (tmp_path / "ref.h5").read_bytes() == out.read_bytes(), "file bytes differ")
    else:
        everywhere(comm, not out.exists(), "a rank other than 0 wrote the index")
    # the DAG and the forest went by NCCL broadcasts, labels (and masks) by grouped gathers
    kinds = {e[0] for e in nccl.log}
    everywhere(comm, {"bcast", "group"} <= kinds, sorted(kinds))
    everywhere(comm, nccl.init_threads == ["distgrail-nccl-init"], nccl.init_threads)  # off the main thread


def test_chunked_nccl_transfers_in_a_build(comm, wire, monkeypatch):
    monkeypatch.setattr(transport, "CHUNK_BYTES", 999)
    nccl = nccl_build(monkeypatch, wire)
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=4, seed=2, backend="cpu", supports=100)
    idx = distgrail.build_index(g, dims=4, seed=2, backend="cpu", comm=comm, supports=100)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    sizes = [e[1] for e in nccl.log if e[0] in ("bcast", "send", "recv")]
    everywhere(comm, max(sizes) <= 999 and sizes.count(999) > 0, sizes)


@pytest.mark.parametrize("readable", ["every-rank", "rank-0-only"])
def test_stored_condensation_with_nccl(comm, wire, tmp_path, monkeypatch, readable):
    """A .h5 graph with its condensation: every rank reads it (no DAG broadcast), or where some
    rank cannot, rank 0's DAG goes by NCCL."""
    path = stored_graph(comm, tmp_path, monkeypatch, readable)
    nccl = nccl_build(monkeypatch, wire)
    ref = distgrail.build_index(path, dims=3, seed=2, backend="cpu")
    mark = len(nccl.log)
    idx = distgrail.build_index(path, dims=3, seed=2, backend="cpu", comm=comm)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    from distgrail.stages.condense import condense

    dag = condense(cyclic_graph())  # the graph stored_graph wrote
    csr = {dag.indptr.nbytes, dag.indices.nbytes}
    sent = {e[1] for e in nccl.log[mark:] if e[0] == "bcast"}
    want = csr <= sent if readable == "rank-0-only" else not (csr & sent)
    everywhere(comm, want, f"broadcast sizes {sorted(sent)}, CSR {sorted(csr)}")


def test_timings_of_the_nccl_path_per_rank(comm, wire, monkeypatch):
    nccl_build(monkeypatch, wire)
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", comm=comm)
    t = idx.timings
    want = {"transport_setup", "read", "condense", "bcast_dag", "phases 1-2", "bcast_forest", "phases 3-4",
            "gather_labels", "bcast_labels", "labels_to_host", "phase 5", "bcast_index", "dag_to_host",
            "nccl_init", "nccl_warmup", "nccl_wait"}
    want |= {f"rank{r} {k}" for r in range(1, comm.Get_size())
             for k in ("bcast_dag", "phases 3-4", "gather_labels", "nccl_init", "nccl_warmup", "nccl_wait")}
    everywhere(comm, not want - set(t) and all(isinstance(v, float) and v >= 0 for v in t.values()),
               f"missing {sorted(want - set(t))}")
    everywhere(comm, "rank0 read" not in t and "alloc_labels" not in t, sorted(t))


def test_a_rank_failing_on_the_nccl_path_fails_every_rank(comm, wire, monkeypatch):
    import distgrail.stages.labeling as labeling

    nccl_build(monkeypatch, wire)
    bad = comm.Get_size() - 1
    if comm.Get_rank() == bad:
        def broken(*a, **k):
            raise RuntimeError("phase 3 broke (injected)")

        monkeypatch.setattr(labeling, "post_order_ranks", broken)
    with pytest.raises(RankError, match=f"rank {bad}, labeling dimension.*phase 3 broke"):
        distgrail.build_index(cyclic_graph(), dims=comm.Get_size(), backend="cpu", comm=comm)


# -- the real NCCL (GPU machine, one GPU per rank) ----------------------------------------------

@pytest.fixture
def gpu_be(comm):
    from distgrail.mpi.binding import bind_gpu

    return get_backend("gpu", bind_gpu(comm, "gpu"))


@pytest.mark.gpu
def test_real_nccl_moves_what_the_host_path_moves(comm, gpu_be):
    import cupy

    tp = transport.transport_for(comm, gpu_be)
    host = transport.MpiTransport(comm, gpu_be)
    everywhere(comm, tp.name == "nccl", tp.name)
    me, size = comm.Get_rank(), comm.Get_size()
    for a in ARRAYS + [np.arange(3 << 20, dtype=np.int64)]:
        with cupy.cuda.Device(gpu_be.device):
            d = cupy.asarray(a)
        x, y = tp.bcast(d if me == 0 else None), host.bcast(d if me == 0 else None)
        everywhere(comm, isinstance(x, cupy.ndarray) and x.get().tobytes() == y.get().tobytes() == a.tobytes(),
                   f"{a.dtype}{a.shape}")
    rows = [(r * 5 + 2) % 4 for r in range(size)]
    with cupy.cuda.Device(gpu_be.device):
        block = cupy.arange(rows[me] * 6, dtype=cupy.uint32).reshape(rows[me], 3, 2) + 100 * me
    x, y = tp.gatherv(block), host.gatherv(block)
    everywhere(comm, me != 0 or x.get().tobytes() == y.get().tobytes(), "gathers differ")


@pytest.mark.gpu
@pytest.mark.parametrize("full_index_on", ["all", "root"])
def test_real_nccl_build_is_byte_identical(comm, gpu_be, tmp_path, full_index_on):
    g = cyclic_graph(3000, 12000)
    ref = distgrail.build_index(g, dims=5, seed=3, backend="cpu", supports=100)
    idx = distgrail.build_index(g, dims=5, seed=3, backend=gpu_be, comm=comm, supports=100,
                                              full_index_on=full_index_on, output=tmp_path / "x.h5")
    if idx is not None:
        everywhere(comm, not same_index(ref, idx) and idx.meta["transport"] == "nccl",
                   same_index(ref, idx) or idx.meta["transport"])
    else:
        everywhere(comm, comm.Get_rank() != 0, "rank 0 got no index")


# -- the hook for rank-parallel parsing (distgrail.mpi.parse, written elsewhere) ----------------

def test_text_files_on_a_gpu_backend_are_parsed_by_every_rank(comm, wire, monkeypatch, tmp_path):
    """A text path, a GPU backend and several ranks: every rank calls read_graph_ranks (with the
    path, format, vertex count, backend and transport of rank 0); rank 0 gets the graph."""
    import sys
    import types

    calls = []

    def read_graph_ranks(c, path, fmt="auto", num_vertices=None, be=None, transport=None):
        calls.append((path, fmt, num_vertices, be.name, transport.name))
        return distgrail.as_graph(path) if c.Get_rank() == 0 else None

    monkeypatch.setitem(sys.modules, "distgrail.mpi.parse", types.SimpleNamespace(read_graph_ranks=read_graph_ranks))
    path = comm.bcast(str(tmp_path / "g.gra"))
    if comm.Get_rank() == 0:
        from distgrail.io.writers import write_graph

        write_graph(cyclic_graph(), path)
    comm.Barrier()
    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    be = fake_gpu_backend(cp)
    tp = transport.MpiTransport(comm, be)
    me = comm.Get_rank()
    g = reader(comm, be, tp, num_vertices=300, fmt="gra").read(path if me == 0 else None)
    everywhere(comm, calls == [(path, "gra", 300, "gpu", "mpi")] and (g is not None) == (me == 0), f"{calls}, {g!r}")


def reader(comm, be, tp, **config):
    """The placement across ranks on ``comm`` with transport ``tp``, for its read step alone."""
    from distgrail.config import BuildConfig

    place = distributed.AcrossRanks(comm, False, be, BuildConfig(**config), False, np.ones(comm.Get_size(), np.int64))
    place.tp = tp
    return place


def test_without_the_parse_module_rank_0_reads_alone(comm, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distgrail.mpi.parse", None)  # import fails
    read = []
    from distgrail.stages import phases

    monkeypatch.setattr(phases, "read_on", lambda be, graph, nv, fmt, digest=None: read.append(graph) or "graph")
    be = fake_gpu_backend(fake_cupy())
    me = comm.Get_rank()
    g = reader(comm, be, transport.MpiTransport(comm, be), fmt="gra").read("x.gra" if me == 0 else None)
    everywhere(comm, read == (["x.gra"] if me == 0 else []) and g == ("graph" if me == 0 else None), f"{read} {g}")


def test_which_inputs_count_as_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("0 1\n")
    (tmp_path / "b.bin").write_bytes(b"\x89HDF\r\n")
    assert distributed._text_file(str(tmp_path / "a.txt"), "auto")
    assert distributed._text_file(str(tmp_path / "x.gra"), "auto")  # by name: no need to open it
    assert distributed._text_file(str(tmp_path / "a.txt"), "edgelist")
    assert not distributed._text_file(str(tmp_path / "a.txt"), "h5")
    assert not distributed._text_file(str(tmp_path / "g.h5"), "auto")
    assert not distributed._text_file(str(tmp_path / "b.bin"), "auto")  # HDF5 signature
    assert not distributed._text_file(str(tmp_path / "missing.txt"), "auto")  # rank 0 reads and says why


def test_ranks_sharing_a_gpu_take_the_host_path(comm, wire, monkeypatch, capsys):
    """NCCL refuses two ranks on one GPU (--share-gpus): every rank takes the MPI transport
    before any NCCL set-up, and rank 0 says why in one notice."""
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    nccl = fake_nccl(wire)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    shared = comm.Get_rank() in (0, comm.Get_size() - 1)  # the first and the last rank share one GPU
    monkeypatch.setattr(transport, "_device_identity",
                        lambda be: ("node", "0000:01:00.0" if shared else f"0000:0{comm.Get_rank() + 2}:00.0"))
    tp = transport.transport_for(comm, fake_gpu_backend(cp))
    err = capsys.readouterr().err
    everywhere(comm, tp.name == "mpi" and not inits(nccl), f"{tp.name}, {nccl.log}")
    ok = ("share GPU 0000:01:00.0" in err and "distgrail: notice:" in err) if comm.Get_rank() == 0 else "NCCL" not in err
    everywhere(comm, ok, err)
