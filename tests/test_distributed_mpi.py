"""Distributed build and queries under MPI (run by launch/test.sh with mpiexec -n 2 and -n 3).

Every rank builds the one-process reference itself (comm=None) and compares it with the
distributed result. Checks are reduced over ranks before asserting (``everywhere``) so that
all ranks leave a test together and never meet in mismatched collectives.
"""

from __future__ import annotations

import os
import sys
import time
import types

import numpy as np
import pytest

import distgrail
import distgrail.io.pairs
from distgrail.mpi import binding, collectives, hostpath
from distgrail.mpi import placement as distributed
from distgrail.mpi.errors import RankError
from distgrail.errors import DistGrailError
from distgrail.gpu.backend import get_backend

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def everywhere(comm, ok, detail=""):
    """Assert on every rank that ``ok`` holds on every rank; name the ranks where it does not."""
    got = comm.allgather((bool(ok), str(detail)))
    bad = [(r, d) for r, (o, d) in enumerate(got) if not o]
    assert not bad, "failed on " + "; ".join(f"rank {r}: {d}" for r, d in bad)


def cyclic_graph(n=300, m=900, seed=3):
    """A random digraph with cycles, self-loops, duplicate edges and isolated vertices."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n - 20, m)
    dst = rng.integers(0, n - 20, m)
    src = np.concatenate((src, [5, 5, 7]))
    dst = np.concatenate((dst, [5, 9, 9]))
    return distgrail.as_graph((src, dst), num_vertices=n)


GRAPHS = {"kegg": distgrail.bundled_graph, "cyclic": cyclic_graph}


def same_index(a, b):
    """'' when two indexes are equal array by array (dtype, shape, bytes) and in meta, else why not."""
    if sorted(a.arrays) != sorted(b.arrays):
        return f"datasets {sorted(a.arrays)} != {sorted(b.arrays)}"
    for k in a.arrays:
        x, y = np.asarray(a.arrays[k]), np.asarray(b.arrays[k])
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            return f"{k}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
    keys = (set(a.meta) | set(b.meta)) - {"transport", "backend", "dims_split"}  # how it was built: not in the file
    diff = [k for k in keys if a.meta.get(k) != b.meta.get(k)]
    return f"meta differs in {diff}" if diff else ""


@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("dims", [1, 2, 4, 5])
def test_index_is_byte_identical_to_one_process(comm, tmp_path, graph, dims):
    g = GRAPHS[graph]()
    ref = distgrail.build_index(g, dims=dims, seed=11, backend="cpu")
    out = tmp_path / "dist.h5"
    idx = distgrail.build_index(g, dims=dims, seed=11, backend="cpu", output=out, comm=comm)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    if comm.Get_rank() == 0:
        ref.save(tmp_path / "ref.h5")
        same_file = (tmp_path / "ref.h5").read_bytes() == out.read_bytes()
        detail = "file bytes differ"
    else:  # only rank 0 writes
        same_file, detail = not out.exists(), "a rank other than 0 wrote the index"
    everywhere(comm, same_file, detail)
    everywhere(comm, sorted(os.listdir(tmp_path)) == (["dist.h5", "ref.h5"] if comm.Get_rank() == 0 else []),
               os.listdir(tmp_path))


def test_other_ranks_may_pass_no_graph(comm, tmp_path):
    g = distgrail.bundled_graph() if comm.Get_rank() == 0 else None
    idx = distgrail.build_index(g, dims=3, backend="cpu", comm=comm)
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))


def test_timings_are_those_of_the_slowest_rank(comm, monkeypatch):
    """The last rank's phase 3 takes 0.4 s longer: every rank reports that rank's phase 3 and
    phases 3-4 as the slowest, and the fastest rank's own work stays below it."""
    import distgrail.stages.labeling as labeling

    slow = comm.Get_size() - 1
    if comm.Get_rank() == slow:
        real = labeling.post_order_ranks

        def late(*a, **k):
            time.sleep(0.4)
            return real(*a, **k)

        monkeypatch.setattr(labeling, "post_order_ranks", late)
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu", comm=comm)
    t = idx.timings
    want = {"read", "condense", "bcast_dag", "phases 1-2", "bcast_forest", "phases 3-4", "gather_labels",
            "bcast_labels", "bcast_index", "phase3_ranks", "phase4_intervals"}
    everywhere(comm, not want - set(t), f"missing timings {want - set(t)}")
    ok = (t["phases 3-4"] >= 0.4 and t["phase3_ranks"] >= 0.4 and t["phases 3-4 own slowest"] >= 0.4
          and t["phases 3-4 own fastest"] < 0.4)
    everywhere(comm, ok, {k: v for k, v in t.items() if k.startswith("phases 3-4")})


def test_labeling_ranks_receive_only_what_phases_3_4_read(comm):
    """Only indptr, indices and level_ptr of the DAG go to the other ranks."""
    from distgrail.stages.condense import condense

    here = comm.Get_rank() == 0
    g = cyclic_graph()
    dag = condense(g) if here else None
    from distgrail.gpu.backend import get_backend
    from distgrail.mpi.transport import MpiTransport

    from distgrail.config import BuildConfig

    place = distributed.AcrossRanks(comm, False, get_backend("cpu"), BuildConfig(dims=comm.Get_size()), False,
                                    np.ones(comm.Get_size(), np.int64))
    place.tp = MpiTransport(comm, place.be)
    got, _ = place.share_dag(dag, g if here else None)
    complete = place.complete
    ref = condense(g)
    sent = [k for k in ("n", "indptr", "indices", "level_ptr") if not np.array_equal(getattr(got, k), getattr(ref, k))]
    everywhere(comm, not sent, f"fields differ after the broadcast: {sent}")
    kept = [k for k in ("comp", "level", "rindptr", "rindices") if (getattr(got, k) is None) == here]
    everywhere(comm, not kept and complete == here, f"rank {comm.Get_rank()}: wrong fields {kept}, {complete}")


def spy_bcast(monkeypatch):
    """Count the array bytes each rank receives by broadcast (every buffer-based broadcast)."""
    got = []
    for mod in (collectives, distributed, hostpath):
        real = mod.bcast_array

        def spy(c, a, root=0, real=real):
            out = real(c, a, root)
            if c.Get_rank() != root:
                got.append(out.nbytes)
            return out

        monkeypatch.setattr(mod, "bcast_array", spy)
    return got


@pytest.mark.parametrize("layout", [{"DISTGRAIL_SHM": "0"}, {"DISTGRAIL_RANKS_PER_NODE": "1"}, {}],
                         ids=["gatherv", "one-rank-nodes", "node-shared"])
def test_full_index_on_root_sends_the_other_ranks_only_what_they_label_with(comm, tmp_path, monkeypatch, layout):
    from distgrail.stages.condense import condense
    from distgrail.stages.labeling import build_forest

    for k, v in layout.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(hostpath, "CHUNK_BYTES", 4096)
    got = spy_bcast(monkeypatch)
    g = cyclic_graph()
    out = tmp_path / "root.h5"
    # supports=0: the bytes counted are those of the labeling (phase 5 sends its ids on top)
    idx = distgrail.build_index(g, dims=5, seed=4, backend="cpu", output=out, comm=comm, full_index_on="root",
                                supports=0)
    ref = distgrail.build_index(g, dims=5, seed=4, backend="cpu", supports=0)
    dag = condense(g)
    forest = build_forest(dag, 4, "max-level", get_backend("cpu"))
    need = sum(a.nbytes for a in (dag.indptr, dag.indices, dag.level_ptr, forest.parent, forest.size))
    if comm.Get_rank() == 0:
        ref.save(tmp_path / "ref.h5")
        ok, detail = not same_index(ref, idx) and out.read_bytes() == (tmp_path / "ref.h5").read_bytes(), \
            same_index(ref, idx) or "file bytes differ"
    else:
        ok, detail = idx is None and sum(got) == need, f"{idx!r}, received {sum(got)} bytes, need {need}"
    everywhere(comm, ok, detail)


def test_output_on_rank_0_only_does_not_hang(comm, tmp_path):
    """build_index(g, comm=comm, output=path if rank == 0 else None): the documented API."""
    me = comm.Get_rank()
    out = tmp_path / "x.h5"
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", comm=comm,
                                output=out if me == 0 else None)
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu")
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    if me == 0:
        ref.save(tmp_path / "ref.h5")
    everywhere(comm, out.exists() == (me == 0) and (me != 0 or out.read_bytes() == (tmp_path / "ref.h5").read_bytes()),
               os.listdir(tmp_path))
    # the other way round: rank 0 passes None, so nothing is written, and nobody waits
    other = tmp_path / "y.h5"
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", comm=comm,
                          output=None if me == 0 else other)
    everywhere(comm, not other.exists(), "a rank other than 0 wrote the index")


def stored_graph(comm, tmp_path, monkeypatch, readable):
    """Collective: the path of a .h5 graph with its stored condensation (a cyclic graph); with
    ``readable="rank-0-only"`` the last rank cannot read it (injected)."""
    from distgrail.io.binary import write_binary_graph
    from distgrail.stages.condense import condense

    g = cyclic_graph()
    path = comm.bcast(str(tmp_path / "g.h5"))
    if comm.Get_rank() == 0:
        write_binary_graph(g, path, dag=condense(g))
    comm.Barrier()
    if readable == "rank-0-only" and comm.Get_rank() == comm.Get_size() - 1:
        def unreadable(p):
            raise OSError(f"{p}: not on this node (injected)")

        monkeypatch.setattr(distributed, "read_condensation", unreadable)
    return path


@pytest.mark.parametrize("readable", ["every-rank", "rank-0-only"])
def test_stored_condensation_is_read_by_every_rank(comm, tmp_path, monkeypatch, readable):
    """A .h5 graph with its condensation: the other ranks read the DAG from the file (no DAG
    bytes broadcast); if some rank cannot read it, it is broadcast as usual."""
    path = stored_graph(comm, tmp_path, monkeypatch, readable)
    monkeypatch.setenv("DISTGRAIL_SHM", "0")  # the labels come by broadcast too: count them
    got = spy_bcast(monkeypatch)
    idx = distgrail.build_index(path, dims=3, seed=2, backend="cpu", comm=comm, supports=0)  # labeling bytes only
    ref = distgrail.build_index(path, dims=3, seed=2, backend="cpu", supports=0)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    from distgrail.stages.condense import condense

    dag = condense(cyclic_graph())  # the graph stored_graph wrote
    # received: the forest (and post0, labels) always; the DAG's CSR only when some rank could not read it
    csr = dag.indptr.nbytes + dag.indices.nbytes
    labels = idx.arrays["labels/intervals"].nbytes + idx.arrays["labels/dt_post0"].nbytes
    forest = idx.arrays["forest/parent"].nbytes + idx.arrays["forest/subtree_size"].nbytes
    bcast_dag = comm.allreduce(sum(got) - labels - forest if comm.Get_rank() else 0, op=MPI_MAX())
    want = 0 if readable == "every-rank" else csr + dag.level_ptr.nbytes + dag.comp.nbytes + dag.level.nbytes
    everywhere(comm, bcast_dag == want, f"DAG bytes broadcast {bcast_dag}, expected {want}")


def MPI_MAX():
    from mpi4py import MPI

    return MPI.MAX


@pytest.mark.parametrize("layout", [{"DISTGRAIL_SHM": "0"}, {"DISTGRAIL_RANKS_PER_NODE": "1"},
                                    {"DISTGRAIL_RANKS_PER_NODE": "2"}, {}],
                         ids=["gatherv", "one-rank-nodes", "two-rank-nodes", "node-shared"])
def test_every_label_path_gives_the_same_index(comm, monkeypatch, layout):
    """Labels through the node-shared array (one node, or ranks split into pretend nodes whose
    leaders exchange blocks) or through Gatherv + Bcast: the same index on every rank."""
    for k, v in layout.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(hostpath, "CHUNK_BYTES", 4096)  # the exchange between nodes in rounds
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=7, seed=5, backend="cpu")
    idx = distgrail.build_index(g, dims=7, seed=5, backend="cpu", comm=comm)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    # the labels are each rank's own array, not a view of the freed shared window
    lab = idx.arrays["labels/intervals"]
    everywhere(comm, lab.flags.owndata, f"labels are a view of {type(lab.base).__name__}")


def test_node_groups_allgather_uneven_blocks(comm, monkeypatch):
    from distgrail.mpi.nodeshare import NodeGroups

    monkeypatch.setenv("DISTGRAIL_RANKS_PER_NODE", "1")
    size, me = comm.Get_size(), comm.Get_rank()
    counts = np.array([(r * 7) % 4 for r in range(size)])  # some ranks write no rows
    off = np.concatenate(([0], np.cumsum(counts)))
    want = np.arange(int(off[-1]) * 3, dtype=np.int32).reshape(-1, 3)
    with NodeGroups(comm) as nodes:
        a = nodes.array(want.shape, np.int32)
        a[off[me]:off[me + 1]] = want[off[me]:off[me + 1]]
        nodes.allgather_rows(a, counts, chunk_bytes=8)
        ok = np.array_equal(a, want)
        everywhere(comm, ok, f"rank {me} holds {a.tolist()}")
        everywhere(comm, nodes.leaders is not None and nodes.leaders.Get_size() == size,
                   "every rank should lead its own pretend node")


def test_shared_memory_needs_room():
    from distgrail.mpi.nodeshare import room_for

    assert not room_for(1 << 60)
    assert room_for(1 << 60, "/nonexistent/shm")  # no tmpfs there: the MPI library decides
    assert room_for(1)


def test_chunked_transfers_give_the_same_index_and_answers(comm, monkeypatch):
    """Arrays above CHUNK_BYTES go in several rounds; force that with a tiny chunk."""
    monkeypatch.setattr(collectives, "CHUNK_BYTES", 1000)
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=3, seed=2, backend="cpu")
    idx = distgrail.build_index(g, dims=3, seed=2, backend="cpu", comm=comm)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    rng = np.random.default_rng(0)
    s, t = rng.integers(0, g.n, 3001), rng.integers(0, g.n, 3001)
    want, _ = ref.query(s, t, backend="cpu")
    got, _ = idx.query(s, t, backend="cpu", comm=comm)
    everywhere(comm, np.array_equal(want, got), "answers differ")


# -- queries ----------------------------------------------------------------------------------

@pytest.fixture
def kegg_index():
    return distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=1, backend="cpu")


@pytest.mark.parametrize("k", [0, 1, "size-1", "size+1", 997, 20000])
def test_sharded_answers_in_input_order(comm, kegg_index, k):
    size = comm.Get_size()
    k = {"size-1": size - 1, "size+1": size + 1}.get(k, k)
    rng = np.random.default_rng(k)
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    pick = rng.permutation(s.size)[:k]  # shuffled pairs
    s, t = s[pick], t[pick]
    want, ref = kegg_index.query(s, t, backend="cpu")
    mine = (s, t) if comm.Get_rank() == 0 else (None, None)
    got, stats = kegg_index.query(*mine, backend="cpu", comm=comm)
    everywhere(comm, got.dtype == bool and np.array_equal(want, got), f"answers differ for k={k}")
    ok = (stats.queries == k and stats.reachable == ref.reachable == int(want.sum()) and stats.steps == ref.steps
          and stats.ranks == size and stats.backend == "cpu" and stats.seconds > 0)
    everywhere(comm, ok, f"stats {stats} vs one-process {ref}")
    everywhere(comm, set(stats.mpi_seconds) == {"prepare", "scatter", "answer", "gather"}, stats.mpi_seconds)


@pytest.mark.parametrize("way", ["node-shared", "messages", "nodes of one rank"])
@pytest.mark.parametrize("on_every_rank", [True, False])
def test_sharded_batch_through_shared_memory_or_messages(comm, kegg_index, monkeypatch, way, on_every_rank):
    """Every rank on one node: the batch and its answers go through node-shared memory (from
    SHARED_MIN_PAIRS pairs on); with DISTGRAIL_SHM=0, or ranks on several (pretended) nodes, by
    Scatterv/Gatherv. Each way gives one process's answers and stats, on root only or everywhere."""
    import distgrail.mpi.query as mq

    used, real = [], mq._answer_shared
    monkeypatch.setattr(mq, "_answer_shared", lambda *a, **k: used.append(1) or real(*a, **k))
    monkeypatch.setattr(mq, "SHARED_MIN_PAIRS", 1)
    if way == "messages":
        monkeypatch.setenv("DISTGRAIL_SHM", "0")
    elif way == "nodes of one rank":
        monkeypatch.setenv("DISTGRAIL_RANKS_PER_NODE", "1")
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    s, t = s[:3001], t[:3001]
    want, ref = kegg_index.query(s, t, backend="cpu")
    mine = (s, t) if comm.Get_rank() == 0 else (None, None)
    got, stats = mq.query_sharded(kegg_index, *mine, backend="cpu", comm=comm, everywhere=on_every_rank)
    ok = np.array_equal(got, want) if on_every_rank or comm.Get_rank() == 0 else got is None
    everywhere(comm, ok and stats.steps == ref.steps and stats.queries == 3001, f"{way}: {stats}")
    everywhere(comm, bool(used) == (way == "node-shared"), f"{way}: node-shared path taken {bool(used)}")


def test_answers_on_root_only_when_asked(comm, kegg_index):
    """everywhere=False (the command line, which writes the answers on rank 0): root's answers
    are the one-process ones, the other ranks get None, and the stats are everywhere alike."""
    from distgrail.mpi.query import query_sharded

    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    want, ref = kegg_index.query(s, t, backend="cpu")
    mine = (s, t) if comm.Get_rank() == 0 else (None, None)
    got, stats = query_sharded(kegg_index, *mine, backend="cpu", comm=comm, everywhere=False)
    ok = np.array_equal(got, want) if comm.Get_rank() == 0 else got is None
    everywhere(comm, ok and stats.reachable == ref.reachable and stats.queries == s.size, f"{got} {stats}")


def test_the_index_upload_is_timed_apart(comm):
    """The first sharded batch on a fresh index puts each rank's query state on its device before
    the clock (``prepare_seconds``, ``mpi_seconds["prepare"]``), the second finds it there (0)."""
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=2, seed=3, backend="cpu")
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    mine = (s, t) if comm.Get_rank() == 0 else (None, None)
    _, first = idx.query(*mine, backend="cpu", comm=comm)
    _, again = idx.query(*mine, backend="cpu", comm=comm)
    ok = (first.prepare_seconds > 0 and first.mpi_seconds["prepare"] == first.prepare_seconds
          and again.prepare_seconds == 0 == again.mpi_seconds["prepare"] and again.seconds > 0)
    everywhere(comm, ok, f"{first.prepare_seconds} {first.mpi_seconds} / {again.prepare_seconds} {again.mpi_seconds}")


def test_all_pairs_of_the_bundled_batch(comm, kegg_index):
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    got, stats = kegg_index.query(s, t, backend="cpu", comm=comm)  # every rank may pass the pairs too
    everywhere(comm, int(got.sum()) == distgrail.BUNDLED_REACHABLE == stats.reachable, stats)


def test_stats_are_summed_over_ranks(comm, kegg_index):
    """The per-step counts of the merged stats are the sums of the shards' own counts."""
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    s, t = s[:5000], t[:5000]
    counts = collectives.split_counts(s.size, comm.Get_size())
    off = np.concatenate(([0], np.cumsum(counts)))
    total = {}
    for r in range(comm.Get_size()):
        _, st = kegg_index.query(s[off[r]:off[r + 1]], t[off[r]:off[r + 1]], backend="cpu")
        for key, v in st.steps.items():
            total[key] = total.get(key, 0) + v
    _, merged = kegg_index.query(s, t, backend="cpu", comm=comm)
    everywhere(comm, merged.steps == total and sum(total.values()) == 5000, (merged.steps, total))


# -- failures ---------------------------------------------------------------------------------

def expect_rank_error(comm, fn, *needles):
    """Run ``fn`` on every rank; every rank must raise RankError containing every needle."""
    try:
        fn()
        outcome = "no error"
    except RankError as e:
        outcome = "" if all(n in str(e) for n in needles) else f"message {str(e)!r} lacks {needles}"
    except Exception as e:  # noqa: BLE001 - reported below
        outcome = f"{type(e).__name__}: {e}"
    everywhere(comm, not outcome, outcome)


def test_one_rank_failing_while_labeling_fails_every_rank(comm, tmp_path, monkeypatch):
    bad = comm.Get_size() - 1
    if comm.Get_rank() == bad:
        def boom(*a, **k):
            raise RuntimeError("injected labeling failure")

        from distgrail.stages import phases

        monkeypatch.setattr(phases, "label_dimensions", boom)  # the labels entry's whole-DAG labeling
    out = tmp_path / "idx.h5"
    expect_rank_error(comm, lambda: distgrail.build_index(distgrail.bundled_graph(), dims=4, backend="cpu",
                                                          output=out, comm=comm),
                      f"rank {bad}", "labeling dimension", "RuntimeError: injected labeling failure")
    everywhere(comm, os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}")


def test_unreadable_graph_on_rank_0_fails_every_rank_with_file_and_line(comm, tmp_path):
    bad = tmp_path / "bad.gra"
    bad.write_text("graph_for_greach\n3\n0: 1 #\n1: 7 #\n2: #\n")
    out = tmp_path / "idx.h5"
    expect_rank_error(comm, lambda: distgrail.build_index(str(bad), dims=2, backend="cpu", output=out, comm=comm),
                      "rank 0", "reading the graph", f"{comm.bcast(str(bad))}:4:", "'7'")
    everywhere(comm, not out.exists(), "index file written")
    missing = tmp_path / "missing.gra"
    expect_rank_error(comm, lambda: distgrail.build_index(str(missing), dims=2, backend="cpu", comm=comm),
                      "rank 0", comm.bcast(str(missing)))


@pytest.mark.parametrize("nccl", [False, True])
def test_rank_0_writes_the_index_while_the_build_runs(comm, wire, tmp_path, monkeypatch, nccl):
    """Across ranks rank 0's index file is laid out once the labels are gathered and is the one in
    place: byte for byte the one-process index, written after the build by nobody."""
    import distgrail.index as index_mod
    from distgrail.indexfile import layout
    from test_transport_mpi import nccl_build

    if nccl:
        nccl_build(monkeypatch, wire)
    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10)  # the pool writes the blocks
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=2, backend="cpu", supports=130)
    monkeypatch.setattr(index_mod, "write_index_file", lambda *a: pytest.fail("written after the build"))
    out = comm.bcast(str(tmp_path / "idx.h5"))
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=2, backend="cpu", supports=130,
                                output=out, comm=comm, full_index_on="root")
    if comm.Get_rank() == 0:
        monkeypatch.undo()
        ref.save(tmp_path / "ref.h5")
        why = (idx.index_write != "early" and idx.index_write) or (
            (tmp_path / "ref.h5").read_bytes() != open(out, "rb").read() and "file bytes differ")
    else:
        why = idx is not None and "an index on rank > 0"
    everywhere(comm, not why, why)


def test_an_early_file_failing_on_rank_0_hangs_no_rank(comm, tmp_path, monkeypatch):
    """Rank 0's early file fails to open alone (no collective there): it is dropped, and the write
    after the build reports the output error on every rank."""
    from distgrail.errors import OutputError
    from distgrail.io import atomic

    def full(self):
        raise OutputError(f"{self.path}: cannot write the output: No space left on device")

    monkeypatch.setattr(atomic.atomic_path, "__enter__", full)
    out = comm.bcast(str(tmp_path / "idx.h5"))
    expect_rank_error(comm, lambda: distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu",
                                                          output=out, comm=comm),
                      "rank 0", "writing the index", "No space left on device")
    everywhere(comm, os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}")


@pytest.mark.parametrize("early", [True, False])
def test_failed_write_leaves_no_file(comm, tmp_path, monkeypatch, early):
    """A full disk while rank 0 writes: the file written while the build ran (its block writes
    fail), or the one written after it (early=False: no file opened early)."""
    import distgrail.build as build_mod
    import distgrail.index as index_mod
    import distgrail.indexfile.write as ixwrite
    from distgrail.io.atomic import atomic_path

    def half_write(path, meta, arrays):
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"partial")
            raise OSError(28, "No space left on device")

    def full_disk(*a):
        raise OSError(28, "No space left on device")

    if early:
        from distgrail.indexfile import layout

        monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1 << 10)  # the bundled graph's datasets by blocks
        monkeypatch.setattr(ixwrite, "_write_block", full_disk)
        monkeypatch.setattr(index_mod, "write_index_file", lambda *a: pytest.fail("written after the build"))
    else:
        monkeypatch.setattr(build_mod.EarlyWrite, "_lay_out", lambda self, *a: None)
        monkeypatch.setattr(index_mod, "write_index_file", half_write)
    out = tmp_path / "idx.h5"
    expect_rank_error(comm, lambda: distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu",
                                                          output=out, comm=comm),
                      "rank 0", "writing the index", "No space left on device")
    everywhere(comm, os.listdir(tmp_path) == [], f"left behind: {os.listdir(tmp_path)}")


def test_missing_output_directory_is_reported_before_any_work(comm, tmp_path, monkeypatch):
    calls = []
    from distgrail.stages import phases

    monkeypatch.setattr(phases, "read_on", lambda *a: calls.append(a))
    out = tmp_path / "nowhere" / "idx.h5"
    expect_rank_error(comm, lambda: distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu",
                                                          output=out, comm=comm),
                      "rank 0", "does not exist")
    everywhere(comm, not calls, "the graph was read although the output cannot be written")


@pytest.mark.parametrize("field, mine, theirs", [("dims", 3, 4), ("supports", 4, 0), ("partition", "off", "on")])
def test_arguments_differing_between_ranks_are_an_error(comm, field, mine, theirs):
    """Not a hang: a rank with other supports would skip phase 5's collectives, one with another
    partition mode would run another placement."""
    value = mine if comm.Get_rank() == 0 else theirs
    with pytest.raises(DistGrailError, match="same on every rank") as e:
        distgrail.build_index(distgrail.bundled_graph(), backend="cpu", comm=comm, **{field: value})
    # (judged by rank 0 and shared, as one rank's error: the CLI prints it once, rank 0's)
    assert str(e.value).startswith("rank 0, comparing the build options") and getattr(e.value, "comm_rank", None) is not None


def test_invalid_arguments_raise_on_every_rank_without_communication(comm):
    with pytest.raises(DistGrailError, match="dims must be"):
        distgrail.build_index(distgrail.bundled_graph(), dims=0, backend="cpu", comm=comm)
    with pytest.raises(DistGrailError, match="backend must be"):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="tpu", comm=comm)
    comm.Barrier()  # still in step
    n = comm.Get_size()
    others = f" (and on rank{'s' if n > 2 else ''} {', '.join(map(str, range(1, n)))})"
    expect_rank_error(comm, lambda: distgrail.build_index(None, dims=0, backend="cpu", comm=comm),
                      f"rank 0{others}, checking the arguments: dims must be an integer >= 1, got 0")
    expect_rank_error(comm, lambda: distgrail.build_index(None, dims=2, backend="cpu", comm=comm,
                                                                        full_index_on="leaders"),
                      "full_index_on must be one of all, root, got 'leaders'")


def test_bad_query_pairs_on_rank_0_fail_every_rank(comm, kegg_index):
    s = np.array([1, 2, kegg_index.n + 5])
    t = np.array([0, 0, 0])
    mine = (s, t) if comm.Get_rank() == 0 else (None, None)
    expect_rank_error(comm, lambda: kegg_index.query(*mine, backend="cpu", comm=comm),
                      "rank 0", "checking the query pairs", f"got {kegg_index.n + 5}")


def test_a_rank_failing_while_answering_fails_every_rank(comm, kegg_index, monkeypatch):
    bad = comm.Get_size() - 1
    if comm.Get_rank() == bad:
        def boom(*a, **kw):
            raise MemoryError("out of device memory (injected)")

        monkeypatch.setattr(kegg_index, "_query_local", boom)
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    expect_rank_error(comm, lambda: kegg_index.query(s[:100], t[:100], backend="cpu", comm=comm),
                      f"rank {bad}", "answering queries", "MemoryError: out of device memory (injected)")
    monkeypatch.undo()  # the communicator is still in step and usable afterwards
    got, _ = kegg_index.query(s[:100], t[:100], backend="cpu", comm=comm)
    want, _ = kegg_index.query(s[:100], t[:100], backend="cpu")
    everywhere(comm, np.array_equal(got, want), "answers differ after a failed batch")


def test_several_failing_ranks_are_all_named(comm):
    def fail():
        raise ValueError(f"bad thing on rank {comm.Get_rank()}")

    expect_rank_error(comm, lambda: distributed.run_shared(comm, "doing a thing", fail),
                      "rank 0 (and on rank", "doing a thing", "ValueError: bad thing on rank 0")


# -- GPU binding (a fake CuPy: the logic, not the device) ---------------------------------------

def fake_cupy(n_devices, bus=lambda i: f"0000:{i:02x}:00.0"):
    used = []

    class Device:
        def __init__(self, i=0):
            self.id = i
            self.pci_bus_id = bus(i)

        def use(self):
            used.append(self.id)

    cuda = types.SimpleNamespace(is_available=lambda: n_devices > 0, Device=Device,
                                 runtime=types.SimpleNamespace(getDeviceCount=lambda: n_devices,
                                                               deviceGetPCIBusId=bus))
    mod = types.ModuleType("cupy")
    mod.cuda = cuda
    mod.used = used
    return mod


def test_bind_gpu_on_the_cpu_does_nothing_and_imports_no_cupy(comm):
    before = "cupy" in sys.modules
    dev = binding.bind_gpu(comm, "cpu")
    everywhere(comm, dev is None and ("cupy" in sys.modules) == before, f"device {dev}")


def test_bind_gpu_gives_each_local_rank_its_own_device(comm, monkeypatch):
    cp = fake_cupy(8)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    monkeypatch.delenv("DISTGRAIL_GPU", raising=False)
    dev = binding.bind_gpu(comm, "gpu")
    everywhere(comm, dev == comm.Get_rank() and cp.used == [dev], f"device {dev}, used {cp.used}")


def test_bind_gpu_follows_slurm_localid_and_the_override(comm, monkeypatch):
    cp = fake_cupy(8)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    size, me = comm.Get_size(), comm.Get_rank()
    monkeypatch.setenv("SLURM_LOCALID", str(size - 1 - me))
    dev = binding.bind_gpu(comm, "auto")
    everywhere(comm, dev == size - 1 - me, f"device {dev}")
    monkeypatch.setenv("SLURM_LOCALID", "0")  # inherited by every rank (mpirun inside sbatch): ignored
    dev = binding.bind_gpu(comm, "gpu")
    everywhere(comm, dev == me, f"device {dev}")
    monkeypatch.setenv("DISTGRAIL_GPU", "7,5,3")
    dev = binding.bind_gpu(comm, "gpu")
    everywhere(comm, dev == [7, 5, 3][me % 3], f"device {dev}")


def test_too_few_gpus_is_an_error_unless_shared(comm, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(1))
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    monkeypatch.delenv("DISTGRAIL_GPU", raising=False)
    for name in ("_BOUND", "_SHARING"):  # (restored after: later tests of this process are not bound to the fake)
        monkeypatch.setattr(binding, name, getattr(binding, name))
    expect_rank_error(comm, lambda: binding.bind_gpu(comm, "gpu"), "distinct GPU", "--share-gpus")
    dev = binding.bind_gpu(comm, "gpu", share=True)
    everywhere(comm, dev == 0, f"device {dev}")
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    everywhere(comm, binding.ranks_on_this_gpu() == local.Get_size(), f"sharing {binding.ranks_on_this_gpu()}")
    local.Free()


def test_one_gpu_per_rank_through_cuda_visible_devices_is_fine(comm, monkeypatch):
    """srun --gpus-per-task=1: every rank sees one device 0, but a different physical GPU."""
    me = comm.Get_rank()
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(1, bus=lambda i: f"0000:{me:02x}:00.0"))
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    monkeypatch.delenv("DISTGRAIL_GPU", raising=False)
    dev = binding.bind_gpu(comm, "gpu")
    everywhere(comm, dev == 0, f"device {dev}")


def test_gpu_backend_without_a_gpu_fails_every_rank(comm, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(1 if comm.Get_rank() == 0 else 0))
    bad = "rank 1"
    expect_rank_error(comm, lambda: binding.bind_gpu(comm, "gpu"), bad, "binding a GPU", "CUDA device")


def test_ranks_holding_different_indexes_is_an_error(comm, kegg_index):
    other = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=2, backend="cpu")
    mine = kegg_index if comm.Get_rank() == 0 else other
    with pytest.raises(DistGrailError, match="same index"):
        mine.query(np.array([1]), np.array([2]), backend="cpu", comm=comm)


def test_out_of_memory_while_receiving_a_broadcast_fails_every_rank(comm, monkeypatch):
    bad = comm.Get_size() - 1
    seen = []
    if comm.Get_rank() == bad:
        real = collectives.receive_buffer

        def receive_buffer(shape, dtype):
            if np.prod(shape) > 1000:
                seen.append((np.dtype(dtype).name, tuple(shape)))
                raise MemoryError("Unable to allocate (injected)")
            return real(shape, dtype)

        monkeypatch.setattr(collectives, "receive_buffer", receive_buffer)
    try:
        distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="cpu", comm=comm)
        msg = "no error"
    except RankError as e:
        msg = str(e)
    dt, shape = comm.bcast(seen[0] if seen else None, root=bad)
    want = f"rank {bad}, allocating {dt} {shape} to receive a broadcast: MemoryError: Unable to allocate (injected)"
    everywhere(comm, msg == want, f"{msg!r} != {want!r}")


# -- GPU binding through the API (a fake CuPy; the labeling itself runs on the CPU) --------------

def test_api_build_and_query_bind_each_rank_to_its_own_gpu(comm, monkeypatch, kegg_index):
    """build_index(comm=..., backend="gpu") binds by node-local rank (not every rank on GPU 0),
    once: a second call, or a binding made before (the CLI's, with --share-gpus), is kept."""
    cp = fake_cupy(8)
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    monkeypatch.delenv("DISTGRAIL_GPU", raising=False)
    monkeypatch.setattr(binding, "_BOUND", None)
    asked = []

    def get_backend(name="auto", device=None):  # record the device, label on the CPU
        asked.append((name, device))
        return distgrail.get_backend("cpu")

    import distgrail.mpi.query as mq
    monkeypatch.setattr(distributed, "get_backend", get_backend)
    monkeypatch.setattr(mq, "get_backend", get_backend)
    idx = distgrail.build_index(distgrail.bundled_graph(), dims=3, seed=1, backend="gpu", comm=comm)
    me = comm.Get_rank()
    everywhere(comm, asked == [("gpu", me)] and cp.used == [me], f"asked {asked}, used {cp.used}")
    s, t = distgrail.io.pairs.read_pairs(distgrail.bundled_pairs())
    idx.query(s[:100], t[:100], backend="gpu", comm=comm)
    everywhere(comm, asked[-1] == ("gpu", me) and cp.used == [me], f"asked {asked}, used {cp.used}")
    everywhere(comm, not same_index(kegg_index, idx), same_index(kegg_index, idx))
    # bound before by the caller (all ranks on device 0, shared): kept, no "distinct GPU" error
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(1))
    monkeypatch.setattr(binding, "_BOUND", None)
    binding.bind_gpu(comm, "gpu", share=True)
    distgrail.build_index(distgrail.bundled_graph(), dims=2, backend="gpu", comm=comm)
    everywhere(comm, asked[-1] == ("gpu", 0), f"asked {asked}")


@pytest.mark.parametrize("K", [1, 64, 200])
def test_support_masks_split_over_ranks_give_the_one_process_index(comm, K):
    """Phase 5's mask words are split over the ranks (K = 200: 4 words, so 2-3 ranks each sweep
    some); the gathered masks and the answers equal a one-process build."""
    g = cyclic_graph()
    ref = distgrail.build_index(g, dims=2, seed=3, backend="cpu", supports=K)
    idx = distgrail.build_index(g, dims=2, seed=3, backend="cpu", comm=comm, supports=K)
    everywhere(comm, not same_index(ref, idx), same_index(ref, idx))
    everywhere(comm, idx.meta["supports"] == min(K, idx.C) and idx.arrays["supports/out"].shape[1] == -(-min(K, idx.C) // 64),
               f"supports {idx.meta['supports']}, masks {idx.arrays['supports/out'].shape}")


def test_node_labels_reach_every_rank(comm):
    """A graph with its own labels built with comm: every rank's Index takes the labels."""
    idx = distgrail.build_index({"a": ["b"], "b": ["c"], "d": []}, dims=2, backend="cpu", comm=comm)
    got = (bool(idx.reachable("a", "c")), bool(idx.reachable("c", "a")), bool(idx.reachable("d", "a")))
    everywhere(comm, got == (True, False, False), f"rank {comm.Get_rank()} answers {got}")
