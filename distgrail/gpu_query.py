"""GPU query answering: prefilters and guided multi-query search (CuPy + kernels/query.cu).

``answer_batch_cuda`` is the CUDA counterpart of :func:`distgrail.query.answer_batch_numpy`.
"""

from __future__ import annotations

from .errors import BackendError


def answer_batch_cuda(L, sources, targets, stats=None):
    raise BackendError("the GPU backend does not answer queries yet; use --backend cpu")
