"""The partitioned build (``index --partition on``): :class:`Partitioned`, a placement whose
ranks never hold all edges.

Read: each rank keeps the edges it read (:func:`distgrail.mpi.partition_read.read_parts`: its
byte range of a text file, its CSR rows of a ``.h5`` file, or its block scattered by rank 0 for
other inputs). Condense: SCCs by trimming and colouring sweeps over the partitioned edges and
replicated O(n) vertex state, each sweep exchanging its frontier, the last few edges gathered to rank 0
(:mod:`distgrail.stages.partitioned_scc`). Then rank 0 chooses where the condensed DAG goes
(:func:`~distgrail.mpi.partition_dag.spread_choice`, ``DISTGRAIL_PARTITION_DAG``):

- **root**: its edges (distinct, compact ids) are gathered to rank 0, which condenses that small
  graph with the one-process code; from there on the build is
  :class:`~distgrail.mpi.placement.AcrossRanks`'s (the DAG shared from rank 0, dimensions split).
  Web-like graphs condense to a small fraction of their edges (docs/benchmarks.md).
- **ranks** (auto: when the condensed DAG would not fit rank 0's GPU): the DAG stays spread, each
  rank its block of rows, and phases 1, 4 and 5 run as level sweeps over the blocks
  (:mod:`distgrail.mpi.partition_dag`, :mod:`distgrail.stages.partitioned_dag`).

Either way the DAG, and the index file, are byte for byte those of a one-process build. A rank
whose part does not fit its GPU within its cap is refused (exit 2, need against have) before the
step starts.

Each rank's report goes to ``index.meta["partition"]`` (a list, one dict per rank): ``edges
read`` (the most edges it held while reading: all of them on rank 0 when rank 0 read and
scattered), ``edges held`` (after the read), ``dag`` (root or ranks), with a spread DAG ``dag
edges held`` and ``dag rows`` (its block), ``exchanges`` (every call), ``sweeps`` (allreduce rounds), ``allreduce bytes``,
``gathered bytes`` (its blocks sent to rank 0, and the broadcasts received), ``exchanged bytes``
(sent to the other ranks by allgather and alltoall), ``exchange`` (``nccl``: GPU to GPU,
:class:`~distgrail.mpi.exchange.NcclExchange`, when the ranks' transport is NCCL and
``DISTGRAIL_PARTITION_NCCL`` is not 0; else ``mpi``, through host memory), and on a GPU ``gpu
pool peak used`` / ``gpu pool peak held`` (CuPy's pool from the read to the end of the build:
bytes in live arrays, and taken from the device with the pool's cached blocks;
:class:`~distgrail.gpu.memory.PoolPeak`).

``--partition auto`` (:func:`wants_partition`), on a GPU backend: on when the whole graph does
not fit one GPU by :func:`~distgrail.gpu.memory.gpu_bytes_needed` and 1/N of its edges plus the
O(n) terms fit each rank; also on, for speed, with two ranks or more on GPUs of their own (the
exchanges by NCCL) when the graph fits rank 0's GPU and is a plain text file the ranks parse in
byte ranges: each rank then keeps what it parsed (no gather of every edge to rank 0) and the SCC
sweeps run on every GPU, with at most ``DISTGRAIL_PARTITION_ROUNDS`` exchanges before the alive
edges go to rank 0, so a deep graph costs that many sweeps, not one per level (figures:
docs/benchmarks.md). That branch is taken only where rank 0 could finish with every edge
(:func:`root_finish_bytes`, at most :data:`SPEED_EDGES`) and each rank's share fits the least free
GPU of the ranks. Else the build is AcrossRanks' own (every method below hands over).
``DISTGRAIL_PARTITION_GATHER``: alive edges up to which the SCC search finishes on rank 0
(default :data:`~distgrail.stages.partitioned_scc.DEFAULT_GATHER_EDGES`).
"""

from __future__ import annotations

import os
import time

import numpy as np

from .. import settings
from ..arrays import to_host as _host
from ..config import PARTITION_MODES
from ..errors import DistGrailError
from ..placement import light_graph
from ..stages.phases import condense_on
from .errors import mpi, run_shared
from .exchange import MpiExchange, exchange_for, partition_nccl_wanted
from .partition_dag import SpreadSteps, check_rank_fits, check_spread_fits, dag_mode, spread_choice
from .placement import AcrossRanks

__all__ = ["Partitioned", "MpiExchange", "wants_partition", "PARTITION_MODES", "sweep_bytes"]


def sweep_bytes(n: int, m_local: int) -> int:
    """Device bytes of the sweeps on one rank beyond its edges: the working copy of its alive
    edges (ids as int32: 8 per edge), their masks, and the selections' index arrays (CuPy's
    boolean indexing scans the mask): 25 bytes per edge, and about ten int32 arrays of n (ids,
    rep, colour and its next copy, the presence bytes, the minimum members). CuPy's pool peak
    agrees with this count (docs/benchmarks.md); the 10 bytes per edge counted before let a rank
    under a cap run out of memory in the sweeps instead of being refused. The peel before them
    (:func:`~distgrail.stages.partitioned_scc.peeled_keys`) holds less: 8 bytes an edge (its rows'
    heads and the expand buffer) and about 46 a vertex (row pointers, in-degrees and their sum,
    levels, frontiers, a wide level's counts and their sum), within this count wherever a rank
    holds more than one edge for every three vertices."""
    return 25 * int(m_local) + 40 * int(n) + (64 << 20)


def _gather_edges() -> int:
    """``DISTGRAIL_PARTITION_GATHER`` (default :data:`~distgrail.stages.partitioned_scc.DEFAULT_GATHER_EDGES`)."""
    return settings.get("DISTGRAIL_PARTITION_GATHER")


#: the most edges ``--partition auto`` partitions for speed: the rounds' fallback sends up to every
#: edge to rank 0, whose condensed keys are then sorted in one piece (CuPy sorts index with 32 bits)
SPEED_EDGES = 2**31


def root_finish_bytes(n: int, m: int, ranks: int) -> int:
    """Rank 0's GPU bytes when the rounds run out with every edge alive: its own share (the read's
    8 bytes per edge and the sweeps' :func:`sweep_bytes`) plus all ``m`` edges gathered (8 bytes),
    moved to local ids (8) and put in a CSR by the one-process SCC steps (keys and the sort's
    second buffer: 32)."""
    m0 = -(-int(m) // int(ranks))
    return (576 << 20) + 8 * m0 + sweep_bytes(n, m0) + 48 * int(m)


def _split_text(graph, fmt, num_vertices) -> bool:
    """True when the ranks would parse ``graph`` in byte ranges (a plain text file; a stream or a
    file of node names is read by rank 0 alone: :func:`distgrail.mpi.partition_read.read_parts`)."""
    from .parse import _plan

    from ..errors import DistGrailError

    try:
        return _plan(graph, fmt, num_vertices, 2)[1] is not None
    except (OSError, DistGrailError):  # (a file rank 0 cannot plan: its read reports it)
        return False


def wants_partition(mode, be, graph, fmt, num_vertices, dims, supports, ranks, own_gpus=False, low=None):
    """Rank 0's choice for ``--partition mode`` (see the module doc): ``(on, rounds)``, rounds
    the exchanges the SCC sweeps may spend before the rest goes to rank 0 (None: no limit; set
    only where auto partitions a graph rank 0's GPU holds). A GPU backend is needed for auto to
    say yes. ``own_gpus``: every rank has a GPU of its own and the exchanges go by NCCL (else
    the sweeps would share a GPU or cross the host, and the speed branch is not taken); ``low``:
    the least free GPU bytes of any rank (None: rank 0's)."""
    if mode == "on":
        return True, None
    if mode == "off" or not be.is_gpu or not isinstance(graph, (str, os.PathLike)):
        return False, None
    from ..gpu.memory import available_gpu_bytes, gpu_bytes_needed
    from ..preflight import _min_supports, preflight_index

    est = preflight_index(graph, fmt, num_vertices, dims, supports, "cpu")
    n, m = int(est["n"]), int(est["m"])
    from .binding import ranks_on_this_gpu

    with be.on_device():  # (ranks sharing the GPU: this rank's share; rank 0 alone holds a whole graph)
        have = available_gpu_bytes(share=ranks_on_this_gpu())[0]
    K = _min_supports(supports)
    whole = gpu_bytes_needed(n, m, dims, K, m_dag=0)
    part = (576 << 20) + 8 * (-(-m // ranks)) + sweep_bytes(n, -(-m // ranks))
    if whole > have:
        return part <= have, None
    low = have if low is None else min(int(low), have)
    if ranks > 1 and own_gpus and m <= SPEED_EDGES and part <= low and root_finish_bytes(n, m, ranks) <= have \
            and _split_text(graph, fmt, num_vertices):
        return True, settings.get("DISTGRAIL_PARTITION_ROUNDS")
    return False, None


def _free_bytes(be) -> int:
    """This rank's free GPU bytes: its share where ranks share the GPU (:func:`~distgrail.mpi.binding.ranks_on_this_gpu`)."""
    from ..gpu.memory import available_gpu_bytes
    from .binding import ranks_on_this_gpu

    with be.on_device():
        return int(available_gpu_bytes(share=ranks_on_this_gpu())[0])


def _host_free_bytes() -> int | None:
    """The host memory free now (``SC_AVPHYS_PAGES``), or None where the system does not say."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _root_can_finish(be, n: int, m: int, ranks: int, m_here: int) -> bool:
    """Rank 0, after the read: whether it could take every one of the ``m`` edges should the
    rounds run out (exact sizes; the choice was made on the preflight's estimates). On the CPU
    (asked only by the sweeps' narrow rule) against the host's free memory."""
    if m > SPEED_EDGES:
        return False
    need = root_finish_bytes(n, m, ranks) - 8 * int(m_here)  # (its share is held already)
    if not be.is_gpu:
        free = _host_free_bytes()
        return free is None or need <= free
    return need <= _free_bytes(be)


class Partitioned(SpreadSteps, AcrossRanks):
    """AcrossRanks with the read and condense steps partitioned (module doc)."""

    @classmethod
    def open(cls, comm, config):
        place = super().open(comm, config)
        place.active, place.rounds = False, None
        place.report = {}
        try:
            place.gather_edges, place.dag_mode, place.nccl_ok = place.comm.bcast(run_shared(
                place.comm, "reading DISTGRAIL_PARTITION_GATHER, DISTGRAIL_PARTITION_DAG and DISTGRAIL_PARTITION_NCCL",
                (lambda: (_gather_edges(), dag_mode(), partition_nccl_wanted())) if place.here else None), root=0)
        except BaseException:
            place.__exit__(None, None, None)
            raise
        return place

    def read(self, graph, digest=None):
        from .partition_read import read_parts

        comm, c = self.comm, self.config
        fmt, num_vertices = c.fmt, c.num_vertices
        low = None
        if c.partition == "auto" and self.be.is_gpu and comm.Get_size() > 1:
            low = comm.allreduce(run_shared(comm, "reading the free GPU memory", _free_bytes, self.be),
                                 op=mpi().MIN)
        own = bool(self.nccl and self.nccl_ok)  # (the same on every rank)
        on = run_shared(comm, "choosing whether to partition", wants_partition if self.here else None, c.partition,
                        self.be, graph, fmt, num_vertices, c.dims, c.supports, comm.Get_size(), own, low)
        on, self.rounds = comm.bcast(on, root=0)
        self.active = bool(on)
        if not self.active:
            return super().read(graph, digest)
        if self.be.is_gpu:
            from ..gpu.memory import PoolPeak

            self.peak = PoolPeak().__enter__()
        t0 = time.perf_counter()
        g = read_parts(comm, self.be, graph, num_vertices, fmt)
        self._timed("partition read", t0)
        self.report.update({"edges read": int(g.meta.get("edges_read", g.m)), "edges held": int(g.m)})
        return g

    def _timed(self, step, t0):
        """This rank's own step (rank 0's among the build's timings, the others' as ``rank<r> <step>``)."""
        self.own_timings[step] = time.perf_counter() - t0
        if self.here:
            self.stage_timings[step] = self.own_timings[step]

    def _stored(self, g):
        """Collective: rank 0's graph file holds a condensation it may use (tied to its CSR: read
        now, on rank 0, and kept in ``g.meta``). One that is not (a file of an earlier release,
        without its CRC attributes) is dropped and every rank condenses its own edges: rank 0
        holds only its block of them, so condensing there alone would index that block."""
        def usable():
            stored = g.meta.get("condensation")
            dag = stored() if callable(stored) else stored
            if dag is None or dag.n != g.n:
                g.meta.pop("condensation", None)
                return False
            g.meta["condensation"] = dag
            return True

        ok = run_shared(self.comm, "reading the stored condensation", usable if self.here else None)
        return bool(self.comm.bcast(ok if self.here else None, root=0))

    def condense(self, entry, g):
        if not self.active:
            return super().condense(entry, g)
        comm, be, here = self.comm, self.be, self.here
        if self._stored(g):  # a .h5 file's stored condensation: rank 0 takes it, as one process does
            return run_shared(comm, "taking the stored condensation", entry if here else None, self.run, g)
        from ..stages.partitioned_scc import Counted, gather_condensed, partitioned_keys, peeled_keys

        xp = be.xp
        n = int(g.n)
        if be.is_gpu:
            run_shared(comm, "checking the GPU memory of the sweeps", check_rank_fits, be, sweep_bytes(n, g.m),
                       f"the partitioned condensation's sweeps ({n:,} vertices, {g.m:,} edges on this rank)")
        if self.rounds is not None:  # (chosen on estimates: rank 0 must hold every edge should the rounds run out)
            total = int(comm.allreduce(int(g.m)))
            fits = run_shared(comm, "checking rank 0 can finish the capped sweeps",
                              _root_can_finish if here else None, be, n, total, comm.Get_size(), int(g.m))
            if not comm.bcast(fits, root=0):
                self.rounds = None  # no cap: the sweeps go on until gather_edges, as for a graph no GPU holds
        inner = exchange_for(comm, xp, self.tp, self.nccl_ok)
        ex = Counted(inner)
        self.report["exchange"] = inner.name
        peel = self.rounds is None and self._may_spread(n, int(comm.allreduce(int(g.m))))
        narrow = self._narrow(n) if self.rounds is None else None
        t0 = time.perf_counter()
        levels = None
        with be.on_device():
            if peel:  # a DAG that may stay spread: peeled from its sources first (its levels, if acyclic)
                compact, C, keys, levels = peeled_keys(xp, g.src, g.dst, n, ex, self.gather_edges, narrow)
            else:
                compact, C, keys = partitioned_keys(xp, g.src, g.dst, n, ex, self.gather_edges, self.rounds, narrow)
            m_up = int(comm.allreduce(int(keys.shape[0])))  # the condensed edges, duplicates across ranks counted
        g.src = g.dst = None  # this rank's edges are not needed any more
        self._timed("partition sweeps", t0)
        spread = run_shared(comm, "choosing where the condensed DAG goes", spread_choice if here else None,
                            self.dag_mode, be, C, m_up, self.config.dims, self.config.supports,
                            self.config.parent_rule)
        self.spread = bool(comm.bcast(spread, root=0))
        if self.spread:
            check_spread_fits(comm, be, n, C, int(keys.shape[0]), self.config.dims, self.config.supports, m_up)
            box = [keys]
            del keys  # spread_dag takes them out of the box: their memory goes back when read
            dag = self.spread_dag(g, compact, C, box, ex, levels)
        else:
            with be.on_device():
                cu, cv = gather_condensed(xp, ex, C, keys)
            del keys
            dag = run_shared(comm, "condensing the condensed graph", self._root_condense if here else None, g,
                             compact, C, cu, cv)
        self.report.update(ex.stats())
        return dag

    def _narrow(self, n: int):
        """The SCC sweeps' ``narrow`` rule (:func:`~distgrail.stages.partitioned_scc.partitioned_reps`):
        collective, whether rank 0 could take ``left`` alive edges (:func:`_root_can_finish`),
        asked where the sweeps crawl (a long chain or cycle: an exchange per link). Asked mid-sweeps:
        rank 0's own share is held already and out of its free memory, so none of it comes off the
        need (``m_here`` 0: before, its 8 bytes an edge did, and a large share made any gather fit)."""
        comm, here = self.comm, self.here

        def narrow(left: int) -> bool:
            fits = run_shared(comm, "checking rank 0 can finish the sweeps", _root_can_finish if here else None,
                              self.be, n, int(left), comm.Get_size(), 0)
            return bool(comm.bcast(fits, root=0))

        return narrow

    def _may_spread(self, n: int, m: int) -> bool:
        """Collective (rank 0 decides): the condensed DAG may stay spread, judged on the whole
        graph's ``n`` and ``m`` (the DAG has at most as many; :func:`spread_choice`)."""
        def judge():
            try:
                return spread_choice(self.dag_mode, self.be, n, m, self.config.dims, self.config.supports,
                                     self.config.parent_rule)
            except DistGrailError:
                return False  # (the choice after the condensation says why)

        return bool(self.comm.bcast(run_shared(self.comm, "judging where the condensed DAG may go",
                                               judge if self.here else None), root=0))

    def _root_condense(self, g, compact, C, cu, cv):
        """Rank 0: the condensed graph (singleton SCCs) condensed by the one-process code, then
        every vertex's component (:func:`~distgrail.stages.partitioned_scc.expand_dag`)."""
        from ..io.graph import EdgeGraph
        from ..stages.partitioned_scc import expand_dag

        be = self.be
        if be.is_gpu:
            from ..preflight import check_gpu_fit
            from ..gpu.memory import available_gpu_bytes

            with be.on_device():
                have = available_gpu_bytes()[0]
            check_gpu_fit(C, int(cu.shape[0]), self.config.dims, self.config.supports, have,
                          f"the condensed DAG of {g.name} ({C:,} components, {int(cu.shape[0]):,} edges) on rank 0")
        dag = condense_on(be, EdgeGraph(n=C, src=cu, dst=cv, name=g.name))
        comp_on_host = isinstance(dag.comp, np.ndarray)
        with be.on_device():
            dag = expand_dag(dag, _host(compact) if comp_on_host else be.asarray(compact), g.n)
        return dag

    def without_edges(self, g):
        if not self.active:
            return super().without_edges(g)
        return light_graph(g) if self.here else None

    def _stop_peak(self):
        peak, self.peak = getattr(self, "peak", None), None
        if peak is not None:
            peak.__exit__(None, None, None)
            self.report.update({"gpu pool peak used": peak.used, "gpu pool peak held": peak.held})

    def __exit__(self, *exc):
        self._stop_peak()  # (the allocator restored also when the build fails)
        return super().__exit__(*exc)

    def finish(self, idx, steps):
        self._stop_peak()
        if self.active:
            self.report["dag"] = "ranks" if self.spread else "root"
            if self.spread:
                self.report.update(self.ex.stats())  # the spread phases' exchanges too
        idx = super().finish(idx, steps)
        reports = self.comm.gather(self.report if self.active else None, root=self.root)
        if self.everywhere:
            reports = self.comm.bcast(reports, root=self.root)
        if idx is not None and self.active:
            idx.meta["partition"] = reports
        return idx

