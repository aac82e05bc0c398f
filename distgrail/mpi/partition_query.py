"""Queries on an index whose DAG no rank holds whole: ``distgrail query --partition on`` (issue 24).

:func:`open_spread_index` (collective) reads the index on every rank without ``/dag/indices``
(it stays in the file), cuts the DAG rows into blocks balanced by edges
(:func:`~distgrail.query.partitioned_search.row_bounds`) for the ranks present, whatever number
built the index, and reads only this rank's block, its CRC-32 blocks checked. The labels
(O(n + C (d + W))) are on every rank. :meth:`SpreadIndex.query` (collective) cuts root's pairs
into one contiguous shard per rank, answers them with the prefilter and the distributed frontier
search of :mod:`distgrail.query.partitioned_search` (exchanges over host MPI:
:class:`~distgrail.mpi.exchange.MpiExchange`, device arrays staged through the host), and gives
every rank the answers in input order, the same as a one-process query.

Bytes per rank: ``comp`` (n, stored type), the O(C) labels and masks (as stored), ``indptr``
(C + 1, int64) and its block's edges (about m / N, stored type), on the backend's device.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import DistGrailError, GraphFormatError, IndexFormatError, id_range
from ..gpu.backend import get_backend
from ..index import Index, field_labels
from ..indexfile import EDGE_CHECK_MAX, check_index_path, read_index_file
from ..nodelabels import NodeLabels
from ..query.partitioned_search import RowBlock, answer_spread, expand_limit, row_bounds
from ..query.stats import Once, QueryStats
from ..stages.partitioned_scc import Counted
from .binding import ensure_bound
from .errors import run_shared, share_outcome
from .exchange import MpiExchange
from .query import answer_in_shards, same_index_everywhere


def _rows(bounds, rank: int) -> str:
    """The DAG rows ``rank`` holds, as progress and errors name them ("no DAG rows" for a rank
    past the components, where ``a..a-1`` would be printed)."""
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    return f"DAG rows {lo}..{hi - 1}" if hi > lo else "no DAG rows"


__all__ = ["SpreadIndex", "open_spread_index", "query_spread", "spread_wanted", "state_bytes", "wants_spread_query"]


def _rows_of(path, arrays, bounds, rank):
    """``(indptr, indices)`` of rows ``bounds[rank] .. bounds[rank+1]-1`` (local offsets from 0),
    the edges read from the file and checked: ids in 0..C-1, and (up to ``EDGE_CHECK_MAX`` edges)
    each going down the levels, as the whole-file read checks them."""
    ip = arrays["dag/indptr"].astype(np.int64, copy=False)
    r0, r1 = int(bounds[rank]), int(bounds[rank + 1])
    e0, e1 = int(ip[r0]), int(ip[r1])
    ix = arrays["dag/indices"]
    rows = ix[e0:e1] if isinstance(ix, np.ndarray) else ix.read(e0, e1)
    C = int(ip.size - 1)
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) > C - 1):
        k = int(np.flatnonzero((rows < 0) | (rows > C - 1))[0])
        raise IndexFormatError(f"{path}: damaged index: dataset /dag/indices holds {int(rows[k])} at flat position "
                               f"{e0 + k}, {id_range(C, lead='outside', whose='the DAG')}")
    local = ip[r0:r1 + 1] - e0
    if 0 < rows.size <= EDGE_CHECK_MAX:
        level = arrays["dag/level"]
        src = np.repeat(np.arange(r0, r1, dtype=np.int64), np.diff(local))
        if (level[src] >= level[rows]).any():
            raise IndexFormatError(f"{path}: damaged index: dataset /dag/indices holds an edge that does not go down "
                                   f"the levels")
    return local, rows


class SpreadIndex(Index):
    """An :class:`~distgrail.index.Index` opened by every rank of ``comm`` with only its block of
    DAG rows (:func:`open_spread_index`); :meth:`query` is collective over ``comm``."""

    def __init__(self, meta, arrays, node_labels, comm, bounds, indptr, indices):
        super().__init__(meta, arrays, node_labels)
        self.comm, self.bounds = comm, bounds
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._rows = (indptr, indices)
        self._spread: dict = {}

    def __repr__(self):
        return super().__repr__()[:-1] + f", {_rows(self.bounds, self.rank)} on rank {self.rank} of {self.size}>"

    def _make_labels(self, be):
        raise DistGrailError("a spread index (open_spread_index) answers collectively: call its query() on every rank")

    def spread_state(self, be, spent: list | None = None):
        """(Labels without the CSR, RowBlock) on ``be``'s device, made once per device (the maker
        appends its seconds to ``spent``)."""
        key = (be.name, be.device)
        once = self._spread.setdefault(key, Once())

        def make():
            t = time.perf_counter()
            with be.on_device():
                L = field_labels(self.arrays, self.C, self.dims, self.supports, put=be.asarray, csr=False)
                state = L, RowBlock(be.xp, self._rows[0], self._rows[1], self.bounds, self.rank)
            if spent is not None:
                spent.append(time.perf_counter() - t)
            return state

        return once.get(make)

    def query(self, sources, targets, backend="auto", comm=None, search=None):
        """Collective over the index's communicator: root's pairs answered (:func:`query_spread`);
        ``search`` options do not apply (the search is the forward one, spread over the ranks)."""
        if comm is not None and comm is not self.comm:
            raise DistGrailError("a spread index answers on the communicator it was opened with")
        return query_spread(self, sources, targets, backend)


def open_spread_index(path, comm) -> SpreadIndex:
    """Collective: the index at ``path`` on every rank of ``comm`` with this rank's DAG rows only
    (module doc). Every rank reads ``path`` (a shared file system, or the same file on every node);
    a damaged file or block is the same :class:`~distgrail.mpi.errors.RankError` on every rank."""
    t = time.perf_counter()
    me, size = comm.Get_rank(), comm.Get_size()

    def read():
        meta, arrays = read_index_file(path, defer=("dag/indices",))
        try:
            labels = NodeLabels.from_arrays(arrays, os.fspath(path))
        except GraphFormatError as e:  # named as a damaged index, as open_index names it
            raise IndexFormatError(f"{os.fspath(path)}: damaged index: /vertex/label: {e}") from None
        return meta, arrays, labels

    meta, arrays, labels = run_shared(comm, f"opening the index {os.fspath(path)}", read)
    bounds = row_bounds(arrays["dag/indptr"], size)
    indptr, indices = run_shared(comm, f"reading {_rows(bounds, me)} of {os.fspath(path)}",
                                 _rows_of, os.fspath(path), arrays, bounds, me)
    idx = SpreadIndex(meta, arrays, labels, comm, bounds, indptr, indices)
    run_shared(comm, "comparing the index of every rank", same_index_everywhere, comm, idx)
    idx.timings = {"open": time.perf_counter() - t}
    idx.meta["path"] = os.fspath(path)
    return idx


def state_bytes(parts) -> int:
    """Bytes of the arrays held as attributes of ``parts`` (labels, row blocks)."""
    return sum(int(getattr(a, "nbytes", 0)) for o in parts for a in vars(o).values())


def query_spread(index: SpreadIndex, sources, targets, backend="auto", root: int = 0, everywhere: bool = True,
                 ids: bool = False):
    """Collective: root's pairs answered on the spread index (other ranks may pass None).
    Returns ``(answers, stats)`` on every rank (``everywhere=False``: answers on root only), as
    :func:`~distgrail.mpi.query.query_sharded`
    (``stats.mpi_seconds``: ``prepare``, ``scatter``, ``answer``, ``gather``; ``stats.ranks``: the ranks);
    ``stats.spread``: one dict per rank, its ``dag edges held``, ``query state bytes`` (labels and
    rows on its device) and what its exchanges carried (``sweeps``: allreduce calls, one per
    search round and chunk; ``allreduce bytes``, ``gathered bytes``, ``exchanged bytes``: sent to
    the other ranks by alltoall and allgather). ``ids``: the pairs are vertex ids where the index
    maps node labels (a pairs reader looked them up once)."""
    comm = index.comm
    dev = ensure_bound(comm, backend)
    be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
    held = {}

    def prepare(spent):  # (after root's pairs are checked: a bad batch uploads nothing)
        held["state"] = state = index.spread_state(be, spent)
        held["expand"] = None  # the CPU: EXPAND_EDGES
        if be.is_gpu:  # a round's children in slices that fit this device's free memory
            from ..gpu.memory import available_gpu_bytes
            from .binding import ranks_on_this_gpu

            with be.on_device():  # (ranks sharing the GPU: this rank's share of it)
                held["expand"] = expand_limit(available_gpu_bytes(share=ranks_on_this_gpu())[0], index.dims)
        held["mine"] = {"rank": comm.Get_rank(), "dag edges held": int(state[1].indices.size),
                        "query state bytes": state_bytes(state)}

    def answer(s, t, what):
        stats = QueryStats(backend=be.name)
        ex = Counted(MpiExchange(comm, be.xp))
        state = held["state"]
        with be.on_device():
            ans, error = answer_spread(be.xp, ex, state[0], state[1], s, t, stats, expand=held["expand"])
        held["mine"].update(ex.stats())
        share_outcome(comm, what + " (spread search)", error)
        return ans, stats

    answers, stats = answer_in_shards(comm, index, be, sources, targets, answer, root, prepare=prepare,
                                      everywhere=everywhere, ids=ids)
    stats.spread = comm.allgather(held["mine"])
    return answers, stats


def spread_wanted(comm, mode: str, index_path, backend, dev) -> bool:
    """Collective: rank 0's :func:`wants_spread_query` on every rank."""
    be = run_shared(comm, "selecting the backend", get_backend, backend, dev)
    here = comm.Get_rank() == 0
    return comm.bcast(run_shared(comm, "choosing whether to spread the DAG", wants_spread_query if here else None,
                                 mode, index_path, be, comm.Get_size()), root=0)


def _sizes(path: str):
    """``(n, C, m, d, K)`` from the index file's attributes, the file checked first as opening an
    index checks it (no such file, a directory, a FIFO: never opened), and anything HDF5 cannot
    read named as not a distgrail index."""
    import h5py

    check_index_path(path)
    try:
        with h5py.File(path, "r") as f:
            a = f.attrs
            return (int(a["n_vertices"]), int(a["n_components"]), int(a["n_dag_edges"]), int(a["dims"]),
                    int(a.get("supports", 0)))
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise IndexFormatError(f"{path}: not a distgrail index (HDF5: {e})") from None


def wants_spread_query(mode: str, index_path, be, size: int) -> bool:
    """Rank 0's choice for ``query --partition mode``: ``on``/``off`` as said; ``auto`` spreads
    the DAG when there are several ranks, the backend is a GPU, and one device cannot hold the
    index's query state (``comp``, ``indptr``, ``indices``, packed records and 1 GiB of scratch)."""
    if mode in ("on", "off"):
        return mode == "on"
    if size < 2 or not be.is_gpu:
        return False
    from ..gpu.memory import available_gpu_bytes
    from .binding import ranks_on_this_gpu

    n, C, m, d, K = _sizes(os.fspath(index_path))
    need = 4 * n + 8 * C + 4 * m + 4 * C * (4 + 4 * ((K + 63) // 64) + 2 * d) + (1 << 30)
    with be.on_device():  # (every rank loads it: ranks sharing the GPU each have their share)
        return need > available_gpu_bytes(share=ranks_on_this_gpu())[0]
