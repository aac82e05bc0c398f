"""Exception hierarchy: every error distgrail raises on purpose is a DistGrailError."""

from __future__ import annotations

__all__ = [
    "DistGrailError",
    "GraphFormatError",
    "IndexFormatError",
    "BackendError",
    "QueryError",
    "OutputError",
]


class DistGrailError(Exception):
    """Base class of every error raised by distgrail on purpose."""


class GraphFormatError(DistGrailError, ValueError):
    """A graph file or in-memory graph is malformed.

    The message names the file, the 1-based line and the offending value:
    ``graph.gra:17: vertex id out of range 0..99, got '120'``.
    """

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        self.path = path
        self.line = line
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)


class IndexFormatError(DistGrailError, ValueError):
    """A file is not a distgrail index, has another schema version, or is damaged or incomplete
    (a checksum, shape, type or value range is wrong; the message names the dataset)."""


class BackendError(DistGrailError, RuntimeError):
    """The requested backend cannot run here (no GPU, no CuPy, out of memory)."""


class QueryError(DistGrailError, ValueError):
    """Bad query input: ids out of range, mismatched shapes, malformed pairs file."""


class OutputError(DistGrailError, OSError):
    """An output file cannot be written: missing or read-only directory, full disk, a directory
    in the way, or the output would overwrite an input. The message names the user's path."""
