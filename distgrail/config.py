"""The build's configuration, made and checked once: :class:`BuildConfig`.

The entry points (:func:`distgrail.build.build_index`, ``distgrail index``) make one value from
their arguments; the placements and stages read it, and nothing checks or stores the same
argument a second time. Frozen: a step cannot change what the next one was told.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
from dataclasses import dataclass

from .errors import BackendError, DistGrailError

__all__ = ["BuildConfig", "PARTITION_MODES", "FULL_INDEX_ON", "LAYOUTS"]

#: ``--partition``: auto (partition on a GPU when the graph does not fit one GPU but 1/N fits each
#: rank, or, with 2+ ranks, when it is a plain text file they parse in byte ranges), on, off
PARTITION_MODES = ("auto", "on", "off")
#: ``--layout``: the index in one file, or a main file and a part file per rank
#: (:mod:`distgrail.indexfile.split`), or auto: split when built by several ranks, else single
LAYOUTS = ("single", "split", "auto")
#: where the complete Index is assembled under MPI: on every rank (the API), or on rank 0 only (the CLI)
FULL_INDEX_ON = ("all", "root")


@dataclass(frozen=True)
class BuildConfig:
    """What a build is asked to do (the parameters of :func:`distgrail.build.build_index`).

    Checked when made: a bad value is a :class:`~distgrail.errors.DistGrailError` naming it.
    ``backend`` is a name (``auto``, ``cpu``, ``gpu``) or a
    :class:`~distgrail.gpu.backend.Backend`; the placement resolves it once. ``output`` is the
    index path (None: no file). Under MPI the fields in :meth:`agreed` must be equal on every rank.

    >>> BuildConfig(dims=2).dims, BuildConfig(dims=2).parent_rule
    (2, 'max-level')
    >>> BuildConfig(dims=0)
    Traceback (most recent call last):
    ...
    distgrail.errors.DistGrailError: dims must be an integer >= 1, got 0
    """

    dims: int = 5
    seed: int = 0
    parent_rule: str = "max-level"
    supports: object = "auto"
    partition: str = "auto"
    layout: str = "single"
    full_index_on: str = "all"
    root_share: float | None = None
    backend: object = "auto"
    fmt: str = "auto"
    num_vertices: int | None = None
    output: str | None = None
    progress: bool = False

    def __post_init__(self):
        from .gpu.backend import BACKENDS
        from .stages.labeling import check_label_args
        from .stages.support_count import check_supports_arg

        check_label_args(self.dims, self.seed, self.parent_rule)
        check_supports_arg(self.supports)
        _one_of("partition", self.partition, PARTITION_MODES)
        _one_of("full_index_on", self.full_index_on, FULL_INDEX_ON)
        _one_of("layout", self.layout, LAYOUTS)
        if not (self.backend in BACKENDS or hasattr(self.backend, "xp")):
            raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        nv = self.num_vertices  # (3.5 was truncated to 3, '7' a TypeError, True taken as 1)
        if nv is not None and (isinstance(nv, bool) or not isinstance(nv, (int, np.integer)) or nv < 0):
            raise DistGrailError(f"num_vertices must be an integer >= 0 or None, got {nv!r}")
        if self.output is not None and not isinstance(self.output, (str, os.PathLike)):
            raise DistGrailError(f"output must be a path or None, got {self.output!r}")
        # normal forms: plain ints (a NumPy integer pickles and compares as itself)
        object.__setattr__(self, "dims", int(self.dims))
        object.__setattr__(self, "seed", int(self.seed))
        if nv is not None:
            object.__setattr__(self, "num_vertices", int(nv))

    def agreed(self) -> tuple:
        """What every rank of a build across ranks must have equal (rank 0's ``output`` decides):
        a rank that differed would compute other labels, or skip a collective the others run."""
        return (self.dims, self.seed, self.parent_rule, str(getattr(self.backend, "name", self.backend)),
                self.full_index_on, str(self.supports), self.partition, self.layout)

    def replace(self, **changes) -> "BuildConfig":
        """A checked copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def fields(cls) -> tuple:
        return tuple(f.name for f in dataclasses.fields(cls))


def _one_of(name, value, allowed):
    if value not in allowed:
        raise DistGrailError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
