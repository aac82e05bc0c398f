"""The index in memory: :class:`Index` (queries, saving), :func:`assemble` from the stages' outputs,
and :func:`open_index` for a file written by ``distgrail index``."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from ._version import __version__
from .arrays import max_parallel
from .dtypes import smallest_uint
from .errors import DistGrailError, GraphFormatError, IndexFormatError, QueryError
from .gpu.backend import get_backend
from .indexfile import check_index, read_index_file, write_index_file
from .io.digest import split_digest
from .nodelabels import NodeLabels, as_column, object_ids
from .query.answer import ScratchPool, answer_batch_cuda, answer_batch_numpy, records_on_device
from .query.idcheck import checked_ids, range_left_to_prefilter
from .query.stats import Labels, Once, QueryStats, SearchOptions

__all__ = ["Index", "assemble", "open_index"]


class Index:
    """A GRAIL reachability index in memory.

    Build one with :func:`build_index` or read one with :func:`open_index`.

    Examples
    --------
    >>> import numpy as np, distgrail
    >>> idx = distgrail.build_index((np.array([0, 1, 3]), np.array([1, 2, 1])), dims=2)
    >>> idx.reachable(0, 2), idx.reachable(2, 0)
    (True, False)
    >>> idx.reachable([0, 3, 2], [2, 2, 3]).tolist()
    [True, True, False]
    """

    def __init__(self, meta: dict, arrays: dict, node_labels=None):
        self.meta = dict(meta)
        self._pending = None  # the host arrays' downloads still landing (:attr:`arrays`), or None
        self._arrays = arrays
        self.timings: dict = {}
        # (backend name, device) -> Once of (Labels, GPU ScratchPool or None): built once per
        # device under the Once's lock; _lock guards the dict itself
        self._lock = threading.Lock()
        self._query_state: dict = {}
        #: the graph's own node labels (:class:`~distgrail.nodelabels.NodeLabels`), or None when
        #: queries take vertex ids 0..n-1; see :func:`distgrail.io.read.as_graph`
        self.node_labels = node_labels if node_labels is not None else NodeLabels.from_arrays(arrays)
        #: the checksum seal of the file it was opened from (:func:`open_index`), else None
        self.seal = None
        #: an update that kept the component ids (``insert_edges(keep_ids=True)``): the rows that
        #: differ from the index it updated, {dataset name: sorted int64 rows}; else None
        self.changed = None

    # -- properties ---------------------------------------------------------------------
    @property
    def arrays(self) -> dict:
        """The index's datasets by name (host arrays). An index a served update made
        (:func:`distgrail.update.insert_edges` on an index with a GPU query state) is served from
        its query state, packed on the device, while its host arrays still come down on a thread:
        reading them waits until every one has landed; where that download failed, the arrays that
        had not landed are copied again by the read (and its error raised if that fails too: the
        next read tries again, the device arrays kept until then)."""
        pending = self._pending
        if pending is not None:
            pending.finish()  # (a failed download: what had not landed is copied again, on every read)
            self._pending = None
        return self._arrays

    @arrays.setter
    def arrays(self, value: dict) -> None:
        self._arrays = value

    def dataset(self, name: str):
        """Dataset ``name``'s host array, or None: waits for that one alone where the host
        arrays are still landing (:attr:`arrays`)."""
        pending = self._pending
        if pending is not None:
            try:
                pending.wait(name)  # (at once for a dataset not among those coming down)
            except Exception:  # noqa: BLE001 - the download failed: the whole read copies again (or says why)
                return self.arrays.get(name)
        return self._arrays.get(name)

    @property
    def n(self) -> int:
        return int(self.meta["n_vertices"])

    @property
    def C(self) -> int:
        return int(self.meta["n_components"])

    @property
    def dims(self) -> int:
        return int(self.meta["dims"])

    @property
    def intervals(self) -> np.ndarray:
        """Labels, shape (dims, C, 2): [min, max] rank over the DAG descendants."""
        return self.arrays["labels/intervals"]

    def __repr__(self):
        m = self.meta
        return (f"<distgrail.Index {m['source_name']!r}: {m['n_vertices']:,} vertices, "
                f"{m['n_components']:,} components, {m['n_dag_edges']:,} DAG edges, d={m['dims']}>")

    def check_values(self) -> None:
        """The value checks :func:`open_index` makes (``values=True``): IndexFormatError naming
        the dataset unless every value is one a built index can hold. ValueError for an index
        opened with datasets left in its file (``open_index(defer=...)``: their reader,
        :func:`~distgrail.indexfile.read_device.upload_datasets`, makes these checks), but for the
        DAG's indices, whose reader checks the rows it reads."""
        from .indexfile.patch_read import PatchedCSR, PatchedRows
        from .indexfile.read import Deferred

        left = sorted(n for n, a in self.arrays.items() if isinstance(a, (PatchedRows, PatchedCSR))
                      or isinstance(a, Deferred) and n != "dag/indices")
        if left:
            raise ValueError(f"check_values: /{left[0]} was left in the index file (open_index(defer=...)): its "
                             "values are checked where it is read (indexfile.read_device.upload_datasets)")
        check_index(self.meta.get("path", "the index"), self.meta, self.arrays)

    # -- persistence --------------------------------------------------------------------
    def save(self, path, layout: str = "single", parts: int = 2, ready=None) -> int:
        """Write the index to ``path`` (HDF5, atomically): one file (``layout="single"``), or a
        main file and ``parts`` part files written side by side (``"split"``,
        :mod:`distgrail.indexfile.split`; the same arrays and checksums; no more parts than the
        largest dataset has rows). ``ready(name)``: returns once dataset ``name``'s values are in
        its array (arrays still landing from a device, as ``insert_edges(write=...)`` gives them),
        called before they are first read. Returns the part files written (0: one file)."""
        if layout == "split":
            from .indexfile.split import write_split_index

            return int(write_split_index(path, self.meta, self.arrays, parts=int(parts), ready=ready))
        if layout == "single":
            write_index_file(path, self.meta, self.arrays, **({"ready": ready} if ready is not None else {}))
            return 0
        raise ValueError(f"layout must be 'single' or 'split', got {layout!r}")

    # -- queries ------------------------------------------------------------------------
    @property
    def supports(self) -> int:
        """K, the number of support components (0: an index without masks, plain GRAIL)."""
        if self._pending is not None:  # (host arrays still landing: the count the update kept)
            return int(self.meta.get("supports", 0))
        ids = self.arrays.get("supports/ids")
        return 0 if ids is None or "supports/out" not in self.arrays else int(ids.shape[0])

    def labels(self, backend="auto") -> Labels:
        """The arrays queries need, one compact read-only copy on ``backend``'s device (made once
        per device, safe to ask for from several threads at once).

        CPU: the stored arrays in their small types (``start0``, the interval halves and the
        masks transposed to one column per word are derived; see :class:`Labels`). GPU: packed int32 records (header, support masks,
        intervals), ``comp`` int32, ``indptr`` int64, ``indices`` int32, and nothing else.
        """
        return self._state(get_backend(backend))[0]

    def _state(self, be, spent: list | None = None):
        """(Labels, ScratchPool or None) of backend ``be``, made by the first caller (which appends
        the seconds it took to ``spent``)."""
        key = (be.name, be.device)
        with self._lock:
            once = self._query_state.get(key)
            if once is None:
                once = self._query_state[key] = Once()

        def make():
            t = time.perf_counter()
            state = self._make_state(be)
            if spent is not None:
                spent.append(time.perf_counter() - t)
            return state

        return once.get(make)

    def _make_state(self, be):
        L = self._make_labels(be)
        if not be.is_gpu:
            return L, None
        be.synchronize()  # the uploads are done before other threads' streams read them
        return L, ScratchPool(be, L)

    def _adopt_state(self, be, arrays) -> None:
        """This index's query state on GPU backend ``be`` made from ``arrays``, its datasets by
        name already on that device (an update's swept arrays, :func:`distgrail.update.insert_edges`):
        packed there, not uploaded again from the host copies."""
        L = self._make_labels(be, arrays)
        be.synchronize()
        once = Once()
        once.get(lambda: (L, ScratchPool(be, L)))
        with self._lock:
            self._query_state[(be.name, be.device)] = once

    def _make_labels(self, be, arrays=None) -> Labels:
        a = self.arrays if arrays is None else arrays
        part = [k for k, v in a.items() if type(v).__name__ == "Rows"]
        if part:  # (distgrail.indexfile.split.Rows: a split build's rank holds some rows only)
            raise DistGrailError(f"this Index holds some rows of /{part[0]} only (its other rows are in other ranks' "
                                 f"parts of the split index file): open_index(path) reads the whole index to query")
        C, d = self.C, self.dims
        iv = a["labels/intervals"]
        post0 = a["labels/dt_post0"]
        K = self.supports
        out = a["supports/out"] if K else np.zeros((C, 0), np.uint64)
        inn = a["supports/in"] if K else np.zeros((C, 0), np.uint64)
        W = int(out.shape[1])
        if be.is_gpu:  # uploaded as stored (through a Stager's threads), widened and packed on the device
            from .gpu.dma import Stager

            ix = a["dag/indices"]
            with Stager(be.xp, be.device) as stager:
                rec = records_on_device(be, a["dag/level"], post0, a["forest/subtree_size"], iv, out, inn,
                                        upload=stager.upload)
                csr = stager.upload([a["vertex/component"], a["dag/indptr"], ix if ix.size else np.zeros(1, np.int32)])
            with be.on_device():
                comp, indptr, indices = (x if x.dtype == t else x.astype(t) for x, t in
                                         zip(csr, (np.int32, np.int64, np.int32)))
            return Labels(comp=comp, indptr=indptr, indices=indices, C=C, d=d, W=W, rec=rec)
        return field_labels(a, C, d, K)

    def check_pairs(self, sources, targets, narrow: bool = False, ids: bool = False):
        """``(sources, targets)`` as int64 vertex ids, checked: node labels mapped to ids (an
        unknown one is a QueryError naming it), equal 1-D shapes, integer ids in 0..n-1 (a
        QueryError naming the first bad one). What :meth:`query` does first; the server and the
        sharded query call it before any work or collective, so a bad batch is refused early.
        ``narrow``: native int32 ids stay int32 (:meth:`query` in one process: the GPU staging
        sends int32 ids up anyway, narrowing int64 ones in its copy; a server's clients send
        int32 ids when the index has fewer than 2^31 vertices, half the bytes). ``ids``: the pairs
        are vertex ids even where the index maps node labels (a pairs reader looked them up:
        :attr:`~distgrail.io.pairs.QueryPairs.ids`).

        >>> import distgrail
        >>> idx = distgrail.build_index({"a": ["b"]})
        >>> idx.check_pairs(["a"], ["b"])
        (array([0]), array([1]))
        """
        return checked_ids(*self._shaped_pairs(sources, targets, ids), self.n, narrow)

    def _shaped_pairs(self, sources, targets, ids: bool = False):
        """``(sources, targets)`` as 1-D arrays of equal shapes, node labels mapped to ids (unless
        ``ids``): :meth:`check_pairs` before its rule on the ids' types and range
        (:func:`~distgrail.query.idcheck.checked_ids`)."""
        s = as_column(sources)  # (a list's bool among ints, or number among strings: kept as given, refused)
        t = as_column(targets)
        if self.node_labels is not None and not ids and s.ndim == 1 and s.shape == t.shape:
            s, t = self.node_labels.to_ids(s, "sources"), self.node_labels.to_ids(t, "targets")
        if s.shape != t.shape or s.ndim != 1:
            raise QueryError(f"sources and targets must be 1-D of equal length, got shapes {s.shape} and {t.shape}")
        if s.dtype.kind == "O" or t.dtype.kind == "O":  # Python ints (one past 64 bits?): named as given
            s, t = (object_ids(a, self.n, w) if a.dtype.kind == "O" else a for a, w in ((s, "sources"), (t, "targets")))
        return s, t

    def query(self, sources, targets, backend="auto", comm=None, search: SearchOptions | None = None):
        """Answer a batch of pairs. Returns ``(answers, QueryStats)``, answers in input order.

        ``sources`` and ``targets`` are vertex ids, or the graph's node labels when it was built
        from a graph with its own labels (:attr:`node_labels`); an unknown label is a QueryError.
        ``search``: how the last step searches (:class:`~distgrail.query.stats.SearchOptions`;
        every choice gives the same answers). Several threads may query one index at once.

        With ``comm`` (an MPI communicator of several ranks) this is collective: the pairs are
        read on rank 0 (other ranks may pass None), the batch is sharded across ranks, and every
        rank returns the answers and the merged stats (:func:`distgrail.mpi.query.query_sharded`).
        """
        if search is not None and not isinstance(search, SearchOptions):
            raise QueryError(f"search must be a SearchOptions, got {type(search).__name__}")
        if comm is not None and comm.Get_size() > 1:
            from .mpi.query import query_sharded

            return query_sharded(self, sources, targets, backend, comm, search=search)
        s, t = self._shaped_pairs(sources, targets)
        # native int64 or int32 ids: on the CPU their range is checked by the prefilter's first
        # pass, which reads every id anyway (a bad one refused there, with check_pairs' error,
        # before any answer), for a GPU by _query_local before any work; other types here
        later = range_left_to_prefilter(s, t)
        if not later:
            s, t = checked_ids(s, t, self.n, narrow=True)
        try:
            be = get_backend(backend)
        except Exception:
            if later:  # (a bad id is the error a bad batch gives, whatever the backend)
                checked_ids(s, t, self.n, narrow=True)
            raise
        return self._query_local(s, t, be, search, checked=not later)

    def _query_local(self, s, t, be, search: SearchOptions | None = None, out=None, checked: bool = True):
        """The answers of checked ids on ``be`` (this process's own); ``out``: a page-locked host
        array the GPU path answers into (:func:`~distgrail.query.staging.pinned_answers`).
        ``checked=False``: native int64 or int32 ids of unchecked range, which the CPU path checks
        as it reads them (:func:`~distgrail.query.answer.answer_batch_numpy`) and a GPU's here,
        before any work."""
        if not checked and be.is_gpu:
            s, t = checked_ids(s, t, self.n, narrow=True)
            checked = True
        stats = QueryStats(backend=be.name)
        spent = []
        L, pool = self._state(be, spent)
        stats.prepare_seconds = sum(spent)  # (0: made by an earlier call)
        if checked:
            ans = be.pick(answer_batch_numpy, answer_batch_cuda)(L, s, t, stats, search=search, pool=pool, out=out)
        else:
            ans = answer_batch_numpy(L, s, t, stats, search=search, out=out, checked=False)
        return np.asarray(ans, dtype=bool), stats

    def reachable(self, u, v, backend="auto", search: SearchOptions | None = None):
        """Does ``u`` reach ``v``? Scalars give a bool, arrays a bool array.

        Examples
        --------
        >>> import numpy as np, distgrail
        >>> idx = distgrail.build_index((np.array([0]), np.array([1])), dims=1)
        >>> idx.reachable(0, 1), idx.reachable(1, 0)
        (True, False)
        """
        if np.ndim(u) == 0 and np.ndim(v) == 0:
            ans, _ = self.query(np.array([u]), np.array([v]), backend=backend, search=search)
            return bool(ans[0])
        ans, _ = self.query(*(x if np.ndim(x) else np.array([x]) for x in (u, v)), backend=backend, search=search)
        return ans


def field_labels(a: dict, C: int, d: int, K: int, put=None, csr: bool = True) -> Labels:
    """The CPU :class:`Labels` (one array per field, in the stored small types) of the index arrays
    ``a``; ``put`` (e.g. a backend's ``asarray``) moves each field to a device (the spread search's
    labels on a GPU); ``csr=False`` leaves the DAG out (it is spread over ranks)."""
    put = put or (lambda x: x)
    iv, post0 = a["labels/intervals"], a["labels/dt_post0"]
    out = a["supports/out"] if K else np.zeros((C, 0), np.uint64)
    inn = a["supports/in"] if K else np.zeros((C, 0), np.uint64)
    start0 = (post0.astype(np.int64) - a["forest/subtree_size"].astype(np.int64) + 1).astype(post0.dtype)
    return Labels(comp=put(_unsigned_view(a["vertex/component"])), indptr=a["dag/indptr"].astype(np.int64, copy=False) if csr else None,
                  indices=a["dag/indices"] if csr else None, C=C, d=d, W=int(out.shape[1]), level=put(_narrow_levels(a["dag/level"])),
                  lo=put(np.ascontiguousarray(iv[:, :, 0])), hi=put(np.ascontiguousarray(iv[:, :, 1])),
                  start0=put(start0), post0=put(post0), out=put(np.ascontiguousarray(out.T)),
                  inn=put(np.ascontiguousarray(inn.T)))


def _unsigned_view(comp: np.ndarray) -> np.ndarray:
    """Component ids (never negative) as the unsigned type of their width (an index read from
    its file holds them unsigned already, in the smallest type): an index just built holds int32
    ids, which the compiled prefilter would index with numba's negative-index wrap on every read."""
    return comp.view(f"u{comp.itemsize}") if comp.dtype.kind == "i" else comp


def _narrow_levels(level: np.ndarray) -> np.ndarray:
    """``level`` in the smallest unsigned type that holds it, as the index file stores it: an index
    just built holds int32 levels, four times the bytes the prefilter reads at random for each
    pair (one level per pair, from an array of one entry per component)."""
    if level.size == 0 or level.dtype.itemsize == 1:
        return level
    want = np.dtype(smallest_uint(int(max_parallel(level))))
    return level.astype(want) if want.itemsize < level.dtype.itemsize else level


def index_meta(graph, dag, dims, seed, parent_rule, digest) -> dict:
    """An index's root attributes but ``supports``; ``digest``: ``(algorithm, hex)``."""
    return {
        "seed": int(seed),
        "dims": int(dims),
        "parent_rule": parent_rule,
        "source_name": graph.name,
        "source_digest": digest[1],
        "source_digest_algorithm": digest[0],
        "n_vertices": int(dag.n),
        "n_components": int(dag.C),
        "n_dag_edges": int(dag.m),
        "n_levels": int(dag.n_levels),
        "distgrail_version": __version__,
    }


def assemble(graph, dag, forest, post0, intervals, dims, seed, parent_rule, supports=None, extra=None) -> Index:
    """Put the outputs of all stages into an :class:`Index`.

    ``supports``: phase 5's ``(ids, out, in)`` (:func:`distgrail.stages.supports.build_supports`),
    or None for an index without support masks (meta ``supports`` = 0). ``extra``: the extra
    stages' datasets (:data:`distgrail.stages.phases.EXTRA_STAGES`), host arrays by name.
    """
    meta = index_meta(graph, dag, dims, seed, parent_rule, split_digest(graph.digest))  # the hash joined here
    arrays = {
        "vertex/component": dag.comp,
        "dag/indptr": dag.indptr,
        "dag/indices": dag.indices,
        "dag/level": dag.level,
        "forest/parent": forest.parent,
        "forest/subtree_size": forest.size,
        "labels/dt_post0": post0,
        "labels/intervals": intervals,
    }
    meta["supports"] = 0
    if supports is not None:
        ids, out, inn = supports
        K = int(np.shape(ids)[0])
        meta["supports"] = K
        if K:
            from .dtypes import smallest_int

            W = (K + 63) // 64
            held = type(out).__name__ == "Rows"  # a split build's rank 0: the rows another rank writes
            for what, m in (("out", out), ("in", inn)):
                if np.shape(m) != (int(dag.C), W) or (m.dtype if hasattr(m, "dtype") else np.asarray(m).dtype) != np.uint64:
                    raise DistGrailError(f"supports: {what} masks must be uint64 of shape {(int(dag.C), W)}, "
                                     f"got {np.asarray(m).dtype} {np.shape(m)}")
            arrays["supports/ids"] = np.asarray(ids).astype(smallest_int(max(int(dag.C), 1)), copy=False)
            arrays["supports/out"] = out if held else np.ascontiguousarray(out)
            arrays["supports/in"] = inn if held else np.ascontiguousarray(inn)
    arrays.update(extra or {})
    labels = getattr(graph, "meta", {}).get("node_labels")
    if labels is not None:
        arrays.update(labels.arrays())
    return Index(meta, arrays, labels)


def open_index(path, values: bool = True, defer=()) -> Index:
    """Read an index written by :func:`build_index` or ``distgrail index``.

    ``values=False`` skips the value checks (checksums, shapes and types are still checked):
    for a process whose bytes another has checked (:func:`distgrail.mpi.opening.open_on_ranks`);
    :meth:`Index.check_values` makes them later. The file's checksum seal is ``index.seal``.
    ``defer``: datasets left in the file (each a :class:`~distgrail.indexfile.read.Deferred`:
    shape, type and stored checksums; of a patched index, left in its base with the patch's rows
    attached), the value checks left to their reader
    (:func:`distgrail.indexfile.read_device.upload_datasets`, which makes them all): what an
    update that sweeps on a GPU opens (:class:`distgrail.update._Device`).

    Raises
    ------
    IndexFormatError
        The file is missing, not HDF5, not a distgrail index, of another schema version, or
        damaged or incomplete (checksum, shape, type or value range; the message names the dataset).
    """
    t = time.perf_counter()
    seal: list = []
    meta, arrays = read_index_file(path, defer=tuple(defer), values=values and not defer, seal_out=seal,
                                   keep_rows=bool(defer))
    try:
        labels = NodeLabels.from_arrays(arrays, os.fspath(path))
    except GraphFormatError as e:
        raise IndexFormatError(f"{os.fspath(path)}: damaged index: /vertex/label: {e}") from None
    idx = Index(meta, arrays, labels)
    idx.timings = {"open": time.perf_counter() - t}
    idx.meta["path"] = os.fspath(path)
    idx.seal = seal[0]
    return idx
