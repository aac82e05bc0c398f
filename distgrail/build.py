"""Building an index in one process: read → condense → phases 1–2 → phases 3–4 → assemble → write.

With an MPI communicator of several ranks, :func:`build_index` hands over to
:func:`distgrail.mpi.build.build_index_distributed`.
"""

from __future__ import annotations

from .gpu.backend import get_backend
from .index import Index, assemble
from .placement import condense_on, read_on
from .progress import Stages
from .stages.condense import dag_to_host
from .stages.labeling import build_forest, check_label_args, label_dimensions
from .stages.supports import DEFAULT_SUPPORTS, check_supports_arg, resolve_supports, start_supports

__all__ = ["build_index", "read_on", "condense_on"]


def build_index(graph, dims: int = 5, seed: int = 0, parent_rule: str = "max-level", backend="auto",
                fmt: str = "auto", num_vertices: int | None = None, output=None, comm=None,
                progress: bool = False, supports: int = DEFAULT_SUPPORTS) -> Index:
    """Build a GRAIL index of ``graph``.

    Parameters
    ----------
    graph : path or in-memory graph
        Anything :func:`distgrail.io.read.as_graph` accepts.
    dims : int
        Number of interval labels per vertex (d >= 1).
    seed : int
        Seed of the counter hash that orders siblings; same seed, same labels.
    parent_rule : {"max-level", "dfs"}
        Phase-1 parent rule (docs/design.md).
    backend : {"auto", "cpu", "gpu"}
    output : path, optional
        Write the index there (HDF5, atomically).
    comm : MPI communicator, optional
        Distribute phases 3–4 over its ranks (see :mod:`distgrail.mpi.build`).
    progress : bool
        Progress bar on stderr for runs longer than a second.
    supports : int or "auto"
        K support vertices whose reach masks (phase 5) decide reachable pairs without search
        (0 = plain GRAIL); ``"auto"`` (default): 64 on sparse graphs, more on dense ones
        (:func:`distgrail.stages.supports.auto_supports`: 10 x the mean degree, a power of two, at most 1024).

    Examples
    --------
    >>> import distgrail
    >>> idx = distgrail.build_index(distgrail.bundled_graph(), dims=2)
    >>> idx.C
    3617
    """
    check_label_args(dims, seed, parent_rule)
    check_supports_arg(supports)
    if comm is not None and comm.Get_size() > 1:
        from .mpi.build import build_index_distributed

        return build_index_distributed(graph, dims=dims, seed=seed, parent_rule=parent_rule, backend=backend,
                                       fmt=fmt, num_vertices=num_vertices, output=output, comm=comm,
                                       progress=progress, supports=supports)
    be = get_backend(backend)
    with Stages(progress, total=7) as st:
        g = st.run("read", read_on, be, graph, num_vertices, fmt)
        dag = st.run("condense", condense_on, be, g)
        K = resolve_supports(supports, dag)
        forest = st.run("phases 1-2", build_forest, dag, seed, parent_rule, be)
        timings = dict(forest.timings)
        # phase 5 needs the DAG only: on a GPU it runs on its own stream beside phases 3-4 (beside
        # phase 1 too, a fresh process's phase 1 waited for the whole sweep: 21-26 ms against 5-7)
        phase5 = st.run("phase 5 start", start_supports, dag, K, seed, be) if K else None
        post0, iv = st.run("phases 3-4", label_dimensions, dag, forest, range(dims), seed, be, timings)
        forest.release_device()  # the index keeps host copies; the forest's GPU memory goes back
        sup = st.run("phase 5", phase5.result) if K else None  # DAG still on the device until here
        dag = dag_to_host(dag, be)  # only what the index file stores comes back to the host
        idx = assemble(g, dag, forest, post0, iv, dims, seed, parent_rule, supports=sup)
        if output is not None:
            st.run("write", idx.save, output)
    idx.timings = {**st.timings, **timings}
    idx.meta["backend"] = be.name
    return idx
