"""Building an index: the one pipeline, in one process or across MPI ranks.

read → condense → share the DAG → phases 1–2 (forest, subtree sizes) → share the forest →
phase 5 started → phases 3–4 (each rank its block of dimensions) → gather the labels → phase 5
→ what queries need → assemble → write. Across ranks phase 5 starts before phases 1–2: the mask
words go to the last ranks, which would otherwise wait for rank 0's forest.

:func:`walk` alternates *stages* and *moves*: each stage is one entry of
:mod:`distgrail.stages.phases` (it computes, on a whole DAG or on one spread over the ranks), and
a *placement* (:class:`distgrail.placement.Placement`) runs it where its data is and moves what
it made: :class:`~distgrail.placement.OneProcess` (one process, one device: the moves are
nothing), :class:`~distgrail.mpi.placement.AcrossRanks` (the DAG and forest shared from rank 0,
the d dimensions and the support mask words split over the ranks, blocks gathered to rank 0
through NCCL or host memory) or :class:`~distgrail.mpi.partition.Partitioned` (the edges read
and condensed in parts; the condensed DAG gathered to rank 0 or kept spread). What to build is
one :class:`~distgrail.config.BuildConfig`, made and checked once. See docs/design.md.
"""

from __future__ import annotations

from .config import BuildConfig
from .index import Index
from .placement import OneProcess, Placement
from .progress import Steps
from .stages import phases
from .stages.support_count import resolve_supports

__all__ = ["build_index", "walk", "steps", "EarlyWrite", "BuildConfig"]


def build_index(graph, config: BuildConfig | None = None, *, comm=None, digest=None, **options) -> Index | None:
    """Build a GRAIL index of ``graph``.

    Parameters
    ----------
    graph : path or in-memory graph
        Anything :func:`distgrail.io.read.as_graph` accepts (under MPI: used on rank 0).
    config : BuildConfig, optional
        What to build; or give its fields as keyword ``options`` (they replace the config's):
    dims : int
        Number of interval labels per vertex (d >= 1).
    seed : int
        Seed of the counter hash that orders siblings; same seed, same labels.
    parent_rule : {"max-level", "dfs"}
        Phase-1 parent rule (docs/design.md).
    backend : {"auto", "cpu", "gpu"} or a :class:`~distgrail.gpu.backend.Backend`
        Resolved once, by the placement; every step receives the chosen backend.
    fmt, num_vertices
        The input's format (``auto``: detected) and vertex count (None: from the edges).
    output : path, optional
        Write the index there (HDF5, atomically; under MPI rank 0's ``output`` decides).
    progress : bool
        Progress bar on stderr for runs longer than a second (rank 0 only).
    supports : int or "auto"
        K support vertices whose reach masks (phase 5) decide reachable pairs without search
        (0 = plain GRAIL); ``"auto"`` (default): 64 on sparse graphs, more on dense ones
        (:func:`distgrail.stages.support_count.auto_supports`).
    full_index_on : {"all", "root"}
        Under MPI: every rank returns the same complete Index (``"all"``, the API's default), or
        rank 0 only and the other ranks None (``"root"``, what the CLI uses).
    root_share : float, optional
        Under MPI: rank 0's share of the dimensions against an even split
        (:func:`distgrail.mpi.collectives.dims_split`; None: ``DISTGRAIL_ROOT_SHARE`` or the default).
    partition : {"auto", "on", "off"}
        Under MPI with several ranks: ``"on"`` partitions the edges over the ranks
        (:class:`distgrail.mpi.partition.Partitioned`: no rank holds all of them; same index),
        ``"off"`` reads and condenses on rank 0, ``"auto"`` partitions on a GPU backend when the
        graph does not fit one GPU but 1/N of it fits each, or when it is a plain text file the
        ranks parse in byte ranges (faster; :func:`distgrail.mpi.partition.wants_partition`). One
        process: the same as ``"off"``.
    layout : {"single", "split", "auto"}
        The index file: one file (default), or a main file and a part file per rank that each rank
        writes itself, tied by HDF5 virtual datasets (:mod:`distgrail.indexfile.split`; same
        content, opened the same way); ``"auto"`` (the CLI's default): split when several ranks
        build, else single. Under MPI with ``full_index_on="root"`` and ``"split"`` the
        labels never go to rank 0: its returned Index holds its own block only (open the file to
        query it).
    comm : MPI communicator, optional
        With several ranks the build is collective (:class:`distgrail.mpi.placement.AcrossRanks`):
        the config's :meth:`~distgrail.config.BuildConfig.agreed` fields must be equal on every rank.
    digest : optional
        The input file's digest handle, started where the input was opened (``distgrail index``
        starts it before the slow imports); None: the reader makes its own.

    ``index.timings`` holds seconds per step: ``read``, ``condense``, ``phases 1-2``, ``phases
    3-4``, ``phase 5``, ``write_open`` (the file laid out while the build runs:
    :class:`EarlyWrite`; ``index.index_write`` says whether it was the one kept), ``write`` and
    the sub-steps each placement reports (under MPI also
    ``transport_setup``, ``bcast_dag``, ``bcast_forest``, ``gather_labels``, ``bcast_index``,
    ``dag_to_host`` and every other rank's own steps as ``rank<r> <step>``).

    Examples
    --------
    >>> import distgrail
    >>> idx = distgrail.build_index(distgrail.bundled_graph(), dims=2)
    >>> idx.C
    3617
    """
    if config is not None and not isinstance(config, BuildConfig):
        raise TypeError(f"build_index(graph, config=None, **options): config must be a BuildConfig, got "
                        f"{config!r} (give the options by name, e.g. dims=3)")
    unknown = sorted(set(options) - set(BuildConfig.fields()))
    if unknown:
        raise TypeError(f"build_index() got unexpected keyword arguments: {', '.join(unknown)}")
    ranks = comm is not None and comm.Get_size() > 1
    if ranks:  # a bad argument on some rank only is every rank's error, not a hang
        from .mpi.errors import run_shared

        config = run_shared(comm, "checking the arguments", _config, config, options)
    else:
        config = _config(config, options)
    if config.layout == "auto":  # split when several ranks write (docs/benchmarks.md), else one file
        config = config.replace(layout="split" if ranks else "single")
    if ranks and config.partition != "off":
        from .mpi.partition import Partitioned as placement
    elif ranks:
        from .mpi.placement import AcrossRanks as placement
    else:
        placement = None
    place = placement.open(comm, config) if placement is not None else OneProcess.open(config)
    with place:
        return walk(place, graph, digest)


def _config(config, options) -> BuildConfig:
    """The build's configuration: ``config`` with ``options`` replacing its fields, checked."""
    if config is None:
        return BuildConfig(**options)
    return config.replace(**options) if options else config


#: the build's steps, in order (progress counts those that run: not a placement's idle moves);
#: the extra stages' steps go after ``bcast_forest`` (:func:`steps`)
STEPS = ("transport_setup", "read", "condense", "bcast_dag", "phase 5 start", "phases 1-2", "bcast_forest",
         "phases 3-4", "phase 5", "bcast_index", "dag_to_host", "write")


def steps() -> tuple:
    """:data:`STEPS` with the extra stages (:data:`~distgrail.stages.phases.EXTRA_STAGES`) in place."""
    at = STEPS.index("bcast_forest") + 1
    return (*STEPS[:at], *(f"stage {s.name}" for s in phases.EXTRA_STAGES), *STEPS[at:])


def walk(place: Placement, graph, digest=None):
    """The pipeline on the placement ``place`` (opened by :func:`build_index`): stages
    (:mod:`distgrail.stages.phases`) and the moves between them, in order."""
    cfg = place.config
    with Steps(cfg.progress and place.here, total=steps(), silent=place.idle_steps) as st:
        place.steps = st
        with st.stage("transport_setup"):
            place.connect()
        with st.stage("read"):
            g = place.read(graph, digest)
        with st.stage("condense"):
            dag = place.condense(phases.condense, g)
        g = place.without_edges(g)  # the edges are not needed any more (on a GPU: memory back)
        with st.stage("bcast_dag"):
            dag, g = place.share_dag(dag, g)
        place.land_dag(dag)  # host pages for what the index keeps of the DAG, touched meanwhile
        K = resolve_supports(cfg.supports, dag)  # from the shared DAG's C and m: the same on every rank
        st.skip(*(() if K else ("phase 5 start", "phase 5")), *(() if place.writes else ("write",)))
        early = EarlyWrite(place, cfg.output, st.timings, (g, dag, cfg, K))
        try:
            forest, labels, post0, sup, extra = _phases(place, st, dag, K, early)
            early.put_masks(sup)
            with st.stage("bcast_index"):
                post0, dag = place.for_queries(post0, dag)
            with st.stage("dag_to_host"):
                dag = early.dag if early.dag is not None else place.dag_to_host(dag)  # what the file stores
            place.join_digest(g)  # the background hash of the input file is joined only now
            idx = place.assemble(g, dag, forest, post0, labels, sup, extra)
            if place.writes:
                with st.stage("write"):
                    place.write(idx, early)
        except BaseException:
            early.abort(quiet=True)  # (the error being raised is the one to report)
            raise
    if idx is not None:  # (None on the ranks that do not assemble the index)
        idx.index_write = early.outcome
    return place.finish(idx, st)


class EarlyWrite:
    """The index file written while the build runs (:class:`~distgrail.indexfile.EarlyIndexFile`)
    where this process writes it and holds the whole DAG. It opens once the forest is shared (phase
    5 started, its sweep runs meanwhile), in a thread of its own while phases 3–4 go on: the file
    laid out, the DAG brought to the host (on a stream of its own, into the pages touched since the
    condensation) and queued with the forest. (Opened on the build's own thread, the DAG's copies
    and the wait for those pages held up phases 3–4, and across ranks every rank at the labeling's
    gather: docs/benchmarks.md.) Every other call waits for that thread first. The labels
    go once gathered, before the wait for phase 5, the masks after it; the placement's ``write``
    calls :meth:`finish` with the assembled index. Anything unexpected (an error opening or filling
    it, a shape, another array in the index) drops the file, and the index is written after the
    build as without it (an output error then reaches every rank as before). ``outcome``
    (``Index.index_write``, not in the file): ``"early"``, ``"after the build"`` or ``"after the
    build (<why>)"``. Timing ``write_open`` (on that thread, beside the build's steps)."""

    def __init__(self, place, output, timings, layout):
        self.place, self.output, self.timings, self.layout = place, output, timings, layout
        self.file, self._dag, self.why, self.forest, self._opening = None, None, "", None, None
        self._opened_event = None  # set by the open's thread when it ends, whatever happened
        self.on = bool(place.here and place.writes and output is not None and not phases.spread(layout[1])
                       and layout[2].layout == "single")  # the split layout: every rank writes its part

    @property
    def outcome(self) -> str:
        if not self.place.writes:
            return "no file"
        return "early" if self.on and not self.why and self.dag is not None else (
            f"after the build ({self.why})" if self.why else "after the build")

    @property
    def dag(self):
        """The DAG's host arrays the file holds (None where it did not open)."""
        self._opened()
        return self._dag

    def forest_done(self, forest) -> None:
        self.forest = forest
        if not self.on or self._opening is not None:
            return
        import threading

        from .io.atomic import install_handlers

        install_handlers()  # (signals reach the main thread only: a SIGINT now drops the file, exit 2)
        side = self.place.be.side_stream()  # after everything queued so far: the DAG is final
        self._opened_event = threading.Event()
        self._opening = threading.Thread(target=self._open, args=(side,), name="distgrail-early-write",
                                         daemon=True)
        try:
            self._opening.start()
        except RuntimeError as e:  # (no thread to be had: the index is written after the build)
            self._opening = None
            self._drop(f"RuntimeError: {e}")

    def _opened(self, through_interrupts: bool = False):
        """Wait for the thread opening the file to end. An interrupt while waiting is raised
        (the thread still runs: the abort that follows waits for it), or with
        ``through_interrupts`` kept waiting through and returned. (An Event, not ``join``: on
        Python 3.9-3.12 an interrupted ``join`` can mark the thread ended while it runs.)"""
        interrupted = None
        while self._opening is not None:
            try:
                while not self._opened_event.wait(1.0) and self._opening.is_alive():
                    pass  # (a thread that ended without setting it is not waited for forever)
            except KeyboardInterrupt as e:
                if not through_interrupts:
                    raise
                interrupted = e
                continue
            self._opening.join()
            self._opening = None
        return interrupted

    def labels_done(self, labels, post0) -> None:
        self.put("labels/dt_post0", post0)
        self.put("labels/intervals", labels)

    def put_masks(self, sup) -> None:
        if sup is not None and int(sup[0].shape[0]):
            for name, a in zip(("supports/ids", "supports/out", "supports/in"), sup):
                self.put(name, a)

    def _open(self, side) -> None:
        import time

        t = time.perf_counter()
        try:
            with side:
                self._lay_out(*self.layout)
        except Exception as e:  # noqa: BLE001 - here alone: the write after the build reports it on every rank
            self._drop(f"{type(e).__name__}: {e}")
        finally:
            self.timings["write_open"] = time.perf_counter() - t
            self._opened_event.set()

    def _lay_out(self, g, dag, cfg, K) -> None:
        from .index import index_meta
        from .indexfile import PENDING_DIGEST, EarlyIndexFile
        from .io.digest import split_digest
        from .stages.supports import words

        d = _digest_now(g)
        digest = split_digest(d) if d is None or isinstance(d, str) else (getattr(d, "algorithm", ""), PENDING_DIGEST)
        C, k = int(dag.C), min(int(K), int(dag.C))
        meta = {**index_meta(g, dag, cfg.dims, cfg.seed, cfg.parent_rule, digest), "supports": k}
        shapes = {"vertex/component": (int(dag.n),), "dag/indptr": (C + 1,), "dag/indices": (int(dag.m),),
                  "dag/level": (C,), "forest/parent": (C,), "forest/subtree_size": (C,), "labels/dt_post0": (C,),
                  "labels/intervals": (cfg.dims, C, 2)}
        extra = phases.extra_datasets(C)
        shapes.update({name: s for name, (_, s) in extra.items()})
        if k:
            shapes.update({"supports/ids": (k,), "supports/out": (C, words(k)), "supports/in": (C, words(k))})
        named = getattr(g, "meta", {}).get("node_labels")
        named = named.arrays() if named is not None else {}
        self.file = EarlyIndexFile(self.output, meta, {**shapes, **{n: a.shape for n, a in named.items()}},
                                   {name: dt for name, (dt, _) in extra.items()})
        self._dag = h = self.place.dag_to_host(dag)
        f = self.forest
        for name, a in (("vertex/component", h.comp), ("dag/indptr", h.indptr), ("dag/indices", h.indices),
                        ("dag/level", h.level), ("forest/parent", f.parent), ("forest/subtree_size", f.size),
                        *named.items()):
            self._put(name, a)

    def put(self, name, a) -> None:
        self._opened()
        self._put(name, a)

    def _put(self, name, a) -> None:
        if self.file is None:
            return
        try:
            self.file.put(name, a)
        except Exception as e:  # noqa: BLE001 - not the index laid out, or a failing file: written after the build
            self._drop(f"{type(e).__name__}: {e}")

    def _drop(self, why) -> None:
        self.why = why
        self._abort(quiet=True)

    def finish(self, idx) -> bool:
        """Whether the file for ``idx`` is in place (False: the caller writes it)."""
        self._opened()
        if self.file is None:
            return False
        f, self.file = self.file, None
        self.why = f.finish(idx.meta, idx.arrays)
        return not self.why

    def abort(self, quiet: bool = False) -> None:
        """Drop the file; ``quiet``: an error while dropping it is not raised (one being raised, or
        the write after the build, is the one to report). Waits for the open's thread even
        through interrupts (the file must not close under it); one that came is raised after."""
        interrupted = self._opened(through_interrupts=True)
        self._abort(quiet)
        if interrupted is not None:
            raise interrupted

    def _abort(self, quiet: bool) -> None:
        from .io.atomic import restore_handlers

        f, self.file = self.file, None
        try:
            if f is not None:
                try:
                    f.abort()
                except Exception:  # noqa: BLE001
                    if not quiet:
                        raise
        finally:
            restore_handlers()  # (forest_done installed them, before the file opened, if it did)


def _digest_now(g):
    """The input's digest as it stands: a string, or the background hash still running (not
    waited for: ``EdgeGraph.digest`` would join it, which the build does only at its end)."""
    if isinstance(getattr(type(g), "digest", None), property):
        return g.__dict__.get("_digest", "")
    return getattr(g, "digest", "")


def _phases(place, st, dag, K, early=None):
    """Phases 1–5 and the extra stages on ``place``: ``(forest, labels, post0, supports, extra)``;
    ``early`` (an :class:`EarlyWrite`) hears of the forest once it is shared (and phase 5 started),
    of the extra stages' arrays and of the labels before the wait for phase 5. A phase 5 started is
    waited for when a later step fails (its sweep reads the DAG's device arrays, which the failure
    frees)."""
    masks = phases.Done(None)  # K = 0: plain GRAIL, no phase 5
    try:
        if K and place.masks_before_forest:  # ranks: the last ones' words beside rank 0's phases 1-2
            with st.stage("phase 5 start"):
                masks = place.start_masks(phases.masks, dag, K)
        with st.stage("phases 1-2"):
            forest = place.once("computing phases 1-2 (forest, subtree sizes)", phases.forest, dag)
        with st.stage("bcast_forest"):
            forest = place.share_forest(forest)
        if K and not place.masks_before_forest:
            with st.stage("phase 5 start"):  # on a GPU: on a stream of its own beside phases 3-4
                masks = place.start_masks(phases.masks, dag, K)
        if early is not None:  # (after phase 5 started: its sweep runs meanwhile)
            early.forest_done(forest)
        extra = {}
        for stage in phases.EXTRA_STAGES:
            with st.stage(f"stage {stage.name}"):
                extra.update(place.share_arrays(place.once(f"running the stage {stage.name}", _extra(stage), dag,
                                                           forest)))
        # times "phases 3-4" and the gather itself; the early file opens meanwhile on its own thread
        labels, post0 = place.split_dims(phases.labels, dag, forest)
        if early is not None:  # (after phases 3-4: a put waits for the open's thread)
            early.labels_done(labels, post0)
            for name, a in extra.items():
                early.put(name, a)
        place.release_forest(forest)
        sup = None
        if K:
            with st.stage("phase 5"):
                place.before_masks_wait(dag)  # (the split layout: the DAG to the host while the sweep runs)
                sup = masks.result()
    except BaseException:
        masks.settle()  # every started phase 5 can be settled (waited for, on a failure)
        raise
    return forest, labels, post0, sup, extra


def _extra(stage):
    """The entry of an extra stage, its result checked against its datasets."""
    def entry(run, dag, forest):
        if phases.spread(dag) and not stage.spread:
            from .errors import DistGrailError

            raise DistGrailError(f"the stage {stage.name} does not run on a DAG spread over the ranks "
                                 "(DISTGRAIL_PARTITION_DAG=root gathers it to rank 0)")
        return phases.check_extra(stage, stage.run(run, dag, forest), int(dag.C))

    return entry
