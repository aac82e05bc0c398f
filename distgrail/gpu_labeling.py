"""GPU implementations of the labeling phases 1–4 (CuPy + kernels/labeling.cu).

Each function here is the CUDA counterpart of a ``*_numpy`` twin in the stage modules and
must return bit-identical numbers.
"""

from __future__ import annotations

from .errors import BackendError


def _todo(name):
    def f(*args, **kwargs):
        raise BackendError(f"the GPU backend does not implement {name} yet; use --backend cpu")

    f.__name__ = name
    return f


parents_max_level_cuda = _todo("parents_max_level_cuda")
parents_dfs_cuda = _todo("parents_dfs_cuda")
subtree_sizes_cuda = _todo("subtree_sizes_cuda")
post_order_ranks_cuda = _todo("post_order_ranks_cuda")
descendant_intervals_cuda = _todo("descendant_intervals_cuda")
