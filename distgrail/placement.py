"""Where the first two stages run: reading (:func:`read_on`) and condensing (:func:`condense_on`)
on the GPU when the backend is a GPU backend, else on the CPU. Shared by the one-process build
(:mod:`distgrail.build`) and rank 0 of the MPI build (:mod:`distgrail.mpi.build`).
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .errors import BackendError
from .gpu.memory import GpuMemoryError
from .io.read import as_graph
from .stages.condense import condense, condense_cuda

__all__ = ["read_on", "condense_on"]


def _notice(text: str) -> None:
    print(f"distgrail: notice: {text}", file=sys.stderr, flush=True)


def read_on(be, graph, num_vertices=None, fmt="auto"):
    """Read stage: a text graph file is parsed on the GPU (:func:`distgrail.io.parse.read_graph_cuda`)
    when ``be`` is a GPU backend; anything else, or a file the GPU parser hands back (too big for
    the GPU, 64-bit ids), is read by the CPU readers."""
    if be.is_gpu and isinstance(graph, (str, os.PathLike)):
        from .io.parse import read_graph_cuda

        g = read_graph_cuda(graph, fmt, num_vertices, be, notify=_notice)
        if g is not None:
            return g
    return as_graph(graph, num_vertices, fmt)


def condense_on(be, g):
    """Condense stage: on the GPU (the DAG stays there, ``level_ptr`` on the host for the sweeps)
    when ``be`` is a GPU backend, else the CPU path; a graph whose vertex ids need 64 bits goes to
    the CPU path with a one-line notice why, one too big for the GPU's memory is refused
    (:class:`~distgrail.gpu.memory.GpuMemoryError`: ``--backend cpu`` is the user's choice)."""
    if be.is_gpu:
        try:
            with be.xp.cuda.Device(be.device):
                src, dst = be.asarray(g.src, np.int32), be.asarray(g.dst, np.int32)
                dag = condense_cuda(src, dst, g.n, be)
            dag.level_ptr = be.to_host(dag.level_ptr) if not isinstance(dag.level_ptr, np.ndarray) else dag.level_ptr
            return dag
        except GpuMemoryError:
            raise  # too big for this GPU: refused with need vs have and the ways out, no silent switch
        except BackendError as e:
            _notice(f"condensing on the CPU: {e}")
    if not isinstance(g.src, np.ndarray):  # edges parsed on the GPU, condensed on the CPU
        g.src, g.dst = be.to_host(g.src), be.to_host(g.dst)
    return condense(g)
