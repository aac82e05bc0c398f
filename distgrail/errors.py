"""Exception hierarchy: every error distgrail raises on purpose is a DistGrailError."""

from __future__ import annotations

__all__ = [
    "DistGrailError",
    "GraphFormatError",
    "IndexFormatError",
    "BackendError",
    "QueryError",
    "OutputError",
    "id_range",
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


def id_range(n: int, base: int = 0, *, lead: str = "out of range", whose: str | None = "the graph") -> str:
    """``lead`` and the vertex ids of ``n`` vertices, as error messages name them: ``"out of
    range 0..99"`` (``base``: the first id, 1 for Matrix Market's). Where there is none, which
    ``0..-1`` would put as a range, the phrase says so: ``"out of range: the graph has no
    vertices"`` (``whose``: what has none, e.g. "the index"; None where a reader does not know
    whose count ``n`` is: "there are no vertices"). ``lead=""``: the range alone, ``"0..99"``,
    or ``"the graph has no vertices"``.

    >>> f"vertex id {id_range(100)}, got '120'"
    "vertex id out of range 0..99, got '120'"
    >>> f"vertex id {id_range(0)}, got '3'"
    "vertex id out of range: the graph has no vertices, got '3'"
    >>> id_range(5, 1, lead=""), id_range(0, 1, lead="", whose="the index")
    ('1..5', 'the index has no vertices')
    """
    if n > 0:
        return f"{lead} {base}..{base + n - 1}" if lead else f"{base}..{base + n - 1}"
    none = "there are no vertices" if whose is None else f"{whose} has no vertices"
    return f"{lead}: {none}" if lead else none
