"""Know the limit before starting: an index build's sizes checked against memory before any
parsing or allocation (``distgrail index`` calls :func:`preflight_index` first).

* ``dims`` must lie in 1..1024 (:func:`dims_problem`: a label holds ``2 dims`` integers
  per component, GRAIL's gains stop at a few dozen dimensions, and the GPU query records hold
  at most about 760);
* the labels the host keeps (``16 dims + K / 4`` bytes per component: int64 (lo, hi) per
  dimension and K-bit out and in masks) must fit the host's memory
  (:func:`distgrail.dtypes.physical_memory`);
* on a GPU build, the peak of :func:`distgrail.gpu.memory.gpu_bytes_needed` with the sizes
  estimated from the file (:func:`distgrail.io.chunks.estimate_edges`; the condensed DAG's
  edges counted as none, since condensation may remove them all) must fit the GPU's free
  memory; else the build is refused with need against have and the ways out, instead of
  switching to the CPU path. ``--backend cpu`` chosen explicitly skips the GPU check. One
  process hands the parsed edges to the condensation (``held_edges=False``: freed once their
  keys are made). The condensation checks its own sizes again once the edges are read
  (:func:`~distgrail.stages.condense.condense_bytes`).
"""

from __future__ import annotations

import os

from . import settings
from .errors import DistGrailError

__all__ = ["dims_problem", "host_label_bytes", "check_gpu_fit", "preflight_index"]


def dims_problem(dims, limit: int = 1024) -> str | None:
    """None when ``dims`` is a sane number of label dimensions (1..``limit``), else why not.

    >>> dims_problem(5) is None, dims_problem(100000000)
    (True, '--dims 100000000: at most 1024 label dimensions (GRAIL uses a few; each costs 16 bytes per component)')
    """
    top = int(limit)
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        return f"--dims must be an integer >= 1, got {dims!r}"
    if dims > top:
        return f"--dims {dims}: at most {top} label dimensions (GRAIL uses a few; each costs 16 bytes per component)"
    return None


def host_label_bytes(n: int, dims: int, K: int) -> int:
    """Bytes of the labels the host holds for ``n`` components: int64 (lo, hi) per dimension and
    the K-bit out and in masks."""
    return int(n) * (16 * int(dims) + 2 * (-(-int(K) // 64)) * 8)


def _min_supports(supports) -> int:
    return 64 if supports == "auto" else int(supports)


def build_supports(supports, n: int) -> int:
    """The K a build of ``n`` components uses for ``supports`` ("auto": 64): at most one support
    a component (the build's ``min(K, C)``, :func:`distgrail.stages.supports.choose_supports`)."""
    return min(_min_supports(supports), max(int(n), 1))


def check_gpu_fit(n: int, m: int, dims: int, K, have: int, what: str, m_dag: int | None = None,
                  resident: int = 0, held_edges: bool = True) -> None:
    """Raise :class:`~distgrail.gpu.memory.GpuMemoryError` when the GPU build of ``n`` vertices
    and ``m`` edges (``resident`` bytes of it already on the GPU, e.g. the parsed edges) does not
    fit in ``have`` more bytes (``held_edges``: as :func:`~distgrail.gpu.memory.gpu_bytes_needed`)."""
    from .gpu.memory import GpuMemoryError, gpu_bytes_needed, gpu_fit_problem

    need = gpu_bytes_needed(n, m, dims, _min_supports(K), m_dag=m_dag, held_edges=held_edges)
    why = gpu_fit_problem(need - resident, have, what)
    if why:
        raise GpuMemoryError(why)


def _gpu_likely(backend: str) -> bool:
    if backend == "cpu":
        return False
    if backend == "auto" and settings.get("DISTGRAIL_BACKEND") == "cpu":
        return False
    return os.path.exists("/dev/nvidiactl") or backend == "gpu"


def preflight_index(graph, fmt: str = "auto", num_vertices=None, dims: int = 5, supports="auto",
                    backend: str = "auto", gpu_have: int | None = None, host_have: int | None = None) -> dict:
    """Check an index build's sizes before it starts (module doc); raises a
    :class:`~distgrail.errors.DistGrailError` (exit status 2) when they cannot fit. ``gpu_have``
    / ``host_have``: the free GPU / host bytes to check against (default: what this machine
    has; tests pass small ones). Returns the estimates: ``{"n", "m", "gpu_need"}``."""
    from .dtypes import physical_memory, size_problem
    from .gpu.memory import gpu_bytes_needed

    why = dims_problem(dims)
    if why:
        raise DistGrailError(why)
    out = {"n": 0, "m": 0, "gpu_need": None}
    if not isinstance(graph, (str, os.PathLike)) or not os.path.isfile(graph):
        return out
    from .io.chunks import estimate_edges, plan_read

    plan = plan_read(graph, fmt, num_vertices)
    if plan.kind != "text":
        return out
    m, n = estimate_edges(plan)
    out.update(n=n, m=m)
    name = os.path.basename(os.fspath(graph))
    if size_problem(n, m):  # the reader says so with the file, line and value
        return out
    host = physical_memory() if host_have is None else int(host_have)
    K = build_supports(supports, n)  # (--supports 99999999999 on 6 vertices builds with K = 6)
    labels = host_label_bytes(n, dims, K)
    if labels > host:
        raise DistGrailError(f"{name}: the labels of {n:,} vertices with --dims {dims} need about "
                             f"{labels / 2**30:,.1f} GiB of host memory, this machine has {host / 2**30:,.1f} GiB; "
                             "use fewer --dims or --supports")
    if gpu_have is None and not _gpu_likely(backend):
        return out
    out["gpu_need"] = gpu_bytes_needed(n, m, dims, K, m_dag=0, held_edges=False)  # (one process: handed over)
    if gpu_have is None:
        try:
            from .gpu.backend import get_backend
            from .gpu.memory import available_gpu_bytes

            be = get_backend(backend)
            if not be.is_gpu:
                return out
            with be.on_device():
                gpu_have = available_gpu_bytes()[0]
        except (DistGrailError, ImportError):
            return out  # no usable GPU: the build says so (or runs on the CPU under auto)
    check_gpu_fit(n, m, dims, K, gpu_have,
                  f"indexing {name} on the GPU (about {m:,} edges and at least {n:,} vertices, --dims {dims})", m_dag=0,
                  held_edges=False)
    return out

