"""The partitioned build's steps after the condensation when the condensed DAG stays spread over
the ranks (:mod:`distgrail.stages.partitioned_dag`): :class:`SpreadSteps`, mixed into
:class:`~distgrail.mpi.partition.Partitioned` before :class:`~distgrail.mpi.placement.AcrossRanks`.

Where the condensed DAG goes is rank 0's choice (:func:`spread_choice`, ``DISTGRAIL_PARTITION_DAG``):
``root`` gathers its edges to rank 0, which runs the one-process condensation and AcrossRanks'
steps (the DAG shared, dimensions split); ``ranks`` keeps them spread: every rank holds its block
of rows, and phases 1, 4 and 5 are level sweeps over the blocks (phases 2–3 on every rank's copy
of the forest); ``auto`` (default) spreads when the condensed DAG would not fit rank 0's GPU.
The dfs parent rule walks the whole DAG on one rank: it always takes ``root``.

Spread, every rank holds the O(C) arrays (levels, forest, post-order ranks, intervals, masks) on
its device. When rank 0 alone assembles the index and writes it as one file, the rows stream from
the ranks into the file (:mod:`distgrail.mpi.rowstream`: no rank, no host holds them all); split
(:mod:`distgrail.mpi.splitwrite`), every rank writes its own rows and an even block of the
forest, the label dimensions and the masks' rows into its part; with
``full_index_on="all"``, or no output, they are gathered as host arrays where the index is
assembled. The index is byte-identical to a one-process build.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np

from .. import settings
from ..errors import DistGrailError
from ..stages.condense import DAG
from ..stages.phases import StageRun
from .collectives import bcast_array
from .errors import run_shared

__all__ = ["SpreadSteps", "spread_choice", "DAG_MODES", "dag_mode", "check_rank_fits", "check_spread_fits"]

DAG_MODES = ("auto", "root", "ranks")


def dag_mode() -> str:
    """``DISTGRAIL_PARTITION_DAG`` (read when a build starts; rank 0's value decides)."""
    return settings.get("DISTGRAIL_PARTITION_DAG")  # one of DAG_MODES


def spread_choice(mode, be, C, m_up, dims, supports, parent_rule) -> bool:
    """Rank 0: True when the condensed DAG (``C`` components, at most ``m_up`` edges: the ranks'
    condensed edges before duplicates across ranks are dropped) stays spread. Gathering it to rank
    0's GPU when it does not fit there is refused (need against have) before any edge moves: the
    gather and the condensation on rank 0 are not where a failure could be shared."""
    if parent_rule != "max-level" and mode == "ranks":
        raise DistGrailError("DISTGRAIL_PARTITION_DAG=ranks needs the max-level parent rule: the dfs rule walks "
                             "the whole DAG on one rank")
    if mode == "ranks":
        return True
    if not be.is_gpu:
        return False
    from ..gpu.memory import GpuMemoryError, available_gpu_bytes, gpu_bytes_needed, gpu_fit_problem
    from ..preflight import _min_supports

    with be.on_device():
        have = available_gpu_bytes()[0]
    need = gpu_bytes_needed(C, m_up, dims, _min_supports(supports))
    why = gpu_fit_problem(need, have, f"the condensed DAG ({C:,} components, up to {m_up:,} edges) on rank 0",
                          "rank 0's GPU", "DISTGRAIL_PARTITION_DAG=ranks (or auto, with the max-level parent rule) "
                          "keeps it spread over the ranks")
    if why is None:
        return False
    if mode == "auto" and parent_rule == "max-level":
        return True
    raise GpuMemoryError(why)


class SpreadSteps:
    """The steps from ``share_dag`` to ``dag_to_host`` for a spread DAG (:attr:`spread`); each
    hands over to the next class's step otherwise."""

    spread = False

    def spread_dag(self, g, compact, C, box, ex, levels=None):
        """Collective: the :class:`~distgrail.stages.partitioned_dag.PartDAG` (levels, numbering,
        rows routed to their owners; ``levels``: the components' levels, when the condensation's
        peel found them)."""
        from ..stages.partitioned_dag import spread_dag

        self.ex = ex
        self.run = StageRun(self.be, self.config, ex)  # the entries on a spread DAG exchange through it
        t0 = time.perf_counter()
        with self.be.on_device():
            pd = spread_dag(self.be.xp, ex, int(g.n), compact, C, box, levels)
        self._timed("spread dag", t0)
        self.report.update({"dag edges held": int(pd.indices.shape[0]), "dag rows": [pd.r0, pd.r1]})
        return pd

    def share_dag(self, dag, g):
        if not self.spread:
            return super().share_dag(dag, g)
        head = (g.name, getattr(g, "meta", {}).get("node_labels")) if self.here else None
        name, labels = self.comm.bcast(head, root=self.root)
        if not self.here:
            g = SimpleNamespace(name=name, digest=None, meta={} if labels is None else {"node_labels": labels})
        return dag, g

    def once(self, what, entry, dag, *args):
        """Spread: ``entry`` on every rank, collective over them (its data is every rank's)."""
        if not self.spread:
            return super().once(what, entry, dag, *args)
        return run_shared(self.comm, what, entry, self.run, dag, *args)

    def share_forest(self, forest):
        if not self.spread:
            return super().share_forest(forest)
        self.stage_timings.update(forest.timings)
        return forest  # every rank made the same one

    def share_arrays(self, arrays):
        if not self.spread:
            return super().share_arrays(arrays)
        keep = self.everywhere or self.here
        return run_shared(self.comm, "copying the stage's arrays to the host",
                          lambda: {k: _land(self.be, a) for k, a in arrays.items()} if keep else {})

    def start_masks(self, entry, dag, K):
        """Spread: phase 5 runs, collective, when its result is asked for; its masks to the host
        where the index is assembled, or, split and assembled on rank 0 only, each rank's block of
        their rows to its own host (:meth:`_rows_shared`)."""
        if not self.spread:
            return super().start_masks(entry, dag, K)
        later = entry(self.run, dag, K)
        if self._edges_split():  # every rank writes its share of the masks' rows
            return _Hosted(later, self._rows_shared, self.be)
        keep = self.everywhere or self.here
        return _Hosted(later, keep, self.be)

    def split_dims(self, entry, dag, forest):
        """Spread: every rank labels every dimension (phase 4 sweeps the ranks' rows together);
        the labels to the host where the index is assembled, or, split and assembled on rank 0
        only, each rank's block of dimensions to its own host (:meth:`_dims_shared`)."""
        if not self.spread:
            return super().split_dims(entry, dag, forest)
        t = self.own_timings
        with self.steps.stage("phases 3-4"):
            with self.be.on_device():
                post0, iv = entry(self.run, dag, forest, range(self.config.dims), t)
        self.stage_timings.update({k: t[k] for k in ("phase3_ranks", "phase4_intervals")})
        if self._edges_split():
            return self._dims_shared(iv), post0
        return (_land(self.be, iv) if self.everywhere or self.here else None), post0

    def _dims_shared(self, iv):
        """Collective. The split layout with the index assembled on rank 0 only: every rank holds
        every dimension's intervals (``iv``, dims × C × 2, on its device); it lands an even block
        of dimensions, which it writes into its part (``own_labels``), so that rank 0 no longer
        lands and writes them all; rank 0's labels are a Rows of its block."""
        from ..indexfile.split import Rows, split_rows

        lo, hi = split_rows(int(iv.shape[0]), self.comm.Get_size())[self.me:self.me + 2]

        def land():
            with self.be.on_device():
                return np.ascontiguousarray(_land(self.be, iv[lo:hi]))

        block = run_shared(self.comm, "copying this rank's labels to the host", land)
        self.own_labels = (lo, block)
        return Rows(tuple(int(x) for x in iv.shape), block.dtype, lo, block) if self.here else None

    def _rows_shared(self, arrays):
        """Collective. The split layout with the index assembled on rank 0 only: ``arrays``
        ({dataset: device array}, every rank holding all its rows) cut into even blocks of rows,
        each rank's block landed on its host and written into its part (``held_rows``); rank 0
        gets Rows of its block standing for each, the other ranks None."""
        from ..indexfile.split import Rows, split_rows

        def land():
            got = {}
            with self.be.on_device():
                for name, a in arrays.items():
                    lo, hi = split_rows(int(a.shape[0]), self.comm.Get_size())[self.me:self.me + 2]
                    got[name] = (lo, np.ascontiguousarray(_land(self.be, a[lo:hi])))
            return got

        held = run_shared(self.comm, "copying this rank's share of the masks to the host", land)
        self.held_rows.update(held)
        if not self.here:
            return None
        return {name: Rows(tuple(int(x) for x in arrays[name].shape), rows.dtype, lo, rows)
                for name, (lo, rows) in held.items()}

    def write(self, idx, early=None):
        rows, self.rows = getattr(self, "rows", None), None
        if rows is None:
            return super().write(idx, early)
        output = self.config.output
        from .rowstream import serve_rows

        fn, args = (_write_streamed, (idx, output)) if self.here else (serve_rows, (self.comm, self.be, rows))
        run_shared(self.comm, f"writing the index {os.fspath(output) if self.here else ''}", fn, *args)

    def for_queries(self, post0, dag):
        if not self.spread:
            return super().for_queries(post0, dag)
        return post0, dag  # every rank holds post0, comp and level already

    def land_dag(self, dag):
        if not self.spread:
            return super().land_dag(dag)
        self.landing = {}  # (the spread DAG comes to rank 0 by rows, in dag_to_host)

    def dag_to_host(self, dag):
        """Spread: where the index is assembled, ``indptr`` (from every rank's row degrees) and
        ``indices``: when rank 0 writes a file and only rank 0 assembles, a stream of the ranks'
        rows read while the file is written (:mod:`distgrail.mpi.rowstream`); else the rows
        gathered as host arrays."""
        if not self.spread:
            return super().dag_to_host(dag)
        from ..stages.partitioned_dag import gather_csr, gather_degrees

        with self.be.on_device():
            if self.split:  # every rank writes its own rows (splitwrite)
                from ..indexfile.split import Rows
                from ..stages.partitioned_dag import id_type

                indptr = gather_degrees(self.be.xp, self.ex, dag)
                own = _land(self.be, dag.indices).astype(id_type(np, dag.C), copy=False)
                first = self.comm.exscan(int(own.size))  # (None on rank 0)
                self.held_rows["dag/indices"] = (int(first or 0), own)
                m = self.comm.allreduce(int(own.size))
                indices = Rows((m,), own.dtype, 0, own) if self.here else None
                if self.everywhere:  # every rank needs the whole DAG anyway
                    indptr, indices = gather_csr(self.be.xp, self.ex, dag)
            elif self.writes and not self.everywhere:
                from .rowstream import rows_stream

                indptr = gather_degrees(self.be.xp, self.ex, dag)
                self.rows = dag.indices  # on this rank's device until the write
                indices = rows_stream(self.comm, self.be, dag.indices, np.diff(indptr[dag.bounds])) if self.here \
                    else None
            else:
                indptr, indices = gather_csr(self.be.xp, self.ex, dag)
            comp, level = _land(self.be, dag.comp), _land(self.be, dag.level)
        if self.everywhere:
            indptr = bcast_array(self.comm, indptr, self.root)
            indices = bcast_array(self.comm, indices, self.root)
        if not (self.everywhere or self.here):
            return None
        return DAG(n=dag.n, comp=comp, indptr=indptr, indices=indices, rindptr=None, rindices=None,
                   level=level.astype(np.int32, copy=False), level_ptr=dag.level_ptr)


class _Hosted:
    """A spread phase 5: its collective run when ``result()`` is asked for, the masks then to the
    host (``keep`` true: where the index is assembled; None elsewhere), by DMA into locked pages
    as one process copies them (:func:`_land`); or, ``keep`` a function (the split layout), each
    rank's share of their rows (:meth:`SpreadSteps._rows_shared`)."""

    def __init__(self, later, keep, be):
        self.later, self.keep, self.be = later, keep, be

    def result(self):
        ids, out, inn = self.later.result()
        if callable(self.keep):
            got = self.keep({"supports/out": out, "supports/in": inn})
            return None if got is None else (ids, got["supports/out"], got["supports/in"])
        return (ids, _land(self.be, out), _land(self.be, inn)) if self.keep else None

    def settle(self):
        """Nothing runs before ``result()``."""


def _land(be, a) -> np.ndarray:
    """``a`` on the host: a device array by the backend (large ones by DMA into locked pages, as
    one process copies them: :meth:`~distgrail.gpu.backend.Backend.to_host`), a host array as it is."""
    return a if isinstance(a, np.ndarray) else be.to_host(a)


def _write_streamed(idx, output):
    """Rank 0: the index written with its DAG rows streamed from the ranks (every rank released
    whatever happens), then those rows mapped from the file for the index returned."""
    from .rowstream import rows_on_file

    try:
        idx.save(output)
    finally:
        idx.arrays["dag/indices"].close(True)  # (a no-op once the write has closed it)
    idx.arrays["dag/indices"] = rows_on_file(output)


def check_spread_fits(comm, be, n, C, m_local, dims, supports, m_up):
    """Collective: every rank's spread phases fit its GPU (refused with need vs have otherwise)."""
    if not be.is_gpu:
        return
    from ..stages.partitioned_dag import spread_bytes
    from ..stages.support_count import auto_supports

    K = auto_supports(C, m_up) if supports == "auto" else int(supports)
    run_shared(comm, "checking the GPU memory of the spread DAG", check_rank_fits, be,
               spread_bytes(n, C, m_local, dims, (K + 63) // 64),
               f"the spread condensed DAG ({C:,} components; {m_local:,} of its edges on this rank)")


def check_rank_fits(be, nbytes, what):
    """This rank's GPU has ``nbytes`` for ``what``, else the refusal (need against have, and the
    ways out of a partitioned build). Ranks sharing one GPU each count their share of its free
    memory (:func:`~distgrail.mpi.binding.ranks_on_this_gpu`): each checks while the others'
    allocations are still to come, so all of it free would let them run out together later."""
    from ..gpu.memory import WAYS_OUT_PARTITIONED, available_gpu_bytes, gpu_fit_problem, GpuMemoryError
    from .binding import ranks_on_this_gpu

    k = ranks_on_this_gpu()
    with be.on_device():
        have = available_gpu_bytes(share=k)[0]  # (the share of the device's free memory; the cap is one rank's)
    where, ways = "this rank's GPU", WAYS_OUT_PARTITIONED
    if k > 1:
        where = f"this rank's share of a GPU {k} ranks share"
        ways = ("ranks sharing a GPU split its memory, so more of them do not help: use more GPUs (a rank each), GPUs "
                "with more memory, fewer --dims / --supports, or --backend cpu (host memory, slower)")
    why = gpu_fit_problem(nbytes, have, what, where, ways)
    if why:
        raise GpuMemoryError(why)
