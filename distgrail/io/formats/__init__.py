"""The input formats, declared once each: name, file name endings, how the first bytes tell it,
the host reader, the GPU parse code, whether ranks may split it. The command line's ``--format``
choices, the GPU format codes (:data:`FMT_CODES`), the host-only formats, what ``auto`` looks for
(:func:`detect`) and the table in docs/formats.md come from :data:`REGISTRY`
(``python -m distgrail.io.formats --markdown`` prints that file; tests/test_formats.py checks it,
and each list, against the registry). The numbers of the GPU codes are written in
:mod:`distgrail.constants`, which hands them to the kernels as macros.

:class:`Source` is one file as the readers see it before parsing (format, codec, first bytes,
edge-list dialect), each looked at once and shared: :func:`~distgrail.io.chunks.plan_read` hands
its source to :func:`~distgrail.io.read.read_graph` when the CPU reader must read the file.

>>> GPU_FORMATS, FMT_CODES["csv"]
(('gra', 'edgelist', 'mtx'), 3)
>>> detect("g.txt", b"", lambda: b"%%MatrixMarket matrix coordinate pattern general")
'mtx'
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property

from ... import constants
from ...errors import GraphFormatError
from ..compressed import CODECS, codec_of, peek
from ..dialect import SNIFF_BYTES, SNIFF_MAX, Dialect, sniff, undecided
from ..excerpt import bom_problem, looks_binary

__all__ = ["Format", "Sniff", "Source", "REGISTRY", "BY_NAME", "AUTO", "FALLBACK", "FORMATS", "GPU_FORMATS",
           "HOST_FORMATS", "OUTPUT_FORMATS", "FMT_CODES", "COMPRESSED_SUFFIXES", "HEAD_BYTES", "detect", "host_only",
           "raw_head", "markdown"]

#: ``--format auto``: the format is told by the file (:func:`detect`)
AUTO = "auto"
#: what ``auto`` reads a file as when no rule below claims it
FALLBACK = "edgelist"
#: file name endings of compressed text, dropped before the name is looked at (the codec itself is
#: told by the first bytes: :func:`~distgrail.io.compressed.codec_of`)
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".bz2", ".zst", ".zstd")
#: bytes of a file (of its text, when compressed) that :func:`detect` and the binary check look at
HEAD_BYTES = 4096


@dataclass(frozen=True)
class Sniff:
    """How ``auto`` tells a format from a file's first bytes: they (``line``: the first line,
    blanks stripped) start with ``prefix`` (``nocase``: in any case). ``stored``: the bytes as
    stored, of an uncompressed file only, looked at before the other formats' file names; else the
    first bytes of the text (decompressed), looked at after every file name."""

    prefix: bytes
    line: bool = False
    nocase: bool = False
    stored: bool = False

    def matches(self, head: bytes) -> bool:
        if self.line:
            head = head.split(b"\n", 1)[0].strip()
        if self.nocase:
            return head.lower().startswith(self.prefix.lower())
        return head.startswith(self.prefix)

    def shown(self) -> str:
        what = "first line starts" if self.line else "starts"
        return f"{what} `{repr(self.prefix)[2:-1]}`" + (" (any case)" if self.nocase else "")


@dataclass(frozen=True)
class Format:
    """One input format. ``storage``: "text" (lines; may be compressed, decompressed as read),
    "table" (a columnar edge table, pyarrow) or "binary" (distgrail's own graph file)."""

    name: str
    description: str
    reader: str  # the host reader: distgrail.io.<module>.<function>
    storage: str = "text"
    extensions: tuple = ()  # file name endings that pick it (after a compression suffix is dropped)
    sniff: Sniff | None = None
    gpu_code: int | None = None  # format code of kernels/parse.cu (None: read on the host only)
    comma_code: int | None = None  # the kernels' code when commas separate the fields (CSV)
    gpu_stream: bool = False  # compressed files too: decompressed on the host while the kernels parse
    split: bool = False  # rank-parallel parsing may split its body into byte ranges at line starts
    num_vertices: bool = False  # --num-vertices applies (ids below it; isolated vertices at the end)
    dialect: bool = False  # an edge list: separator, header and node names are sniffed from its start
    written: bool = False  # distgrail writes it too (generate, write_graph)


REGISTRY = (
    Format("gra", "GRAIL adjacency lists: `graph_for_greach` (optional), the vertex count, then "
           "`i: succ ... #` per vertex", "distgrail.io.gra.read_gra", extensions=(".gra",),
           sniff=Sniff(b"graph_for_greach", line=True), gpu_code=constants.FMT_GRA, split=True, written=True),
    Format("edgelist", "`u v` per line (SNAP style; space, tab or comma separated; a header line; node names "
           "after a header such as `source target` make a labelled graph); any file no other rule claims", "distgrail.io.edgelist.read_edgelist",
           gpu_code=constants.FMT_EDGELIST, comma_code=constants.FMT_CSV, gpu_stream=True, split=True,
           num_vertices=True, dialect=True, written=True),
    Format("mtx", "Matrix Market coordinate file (1-based; `symmetric`, `skew-symmetric`, `hermitian` entries "
           "mirrored; every entry line exactly the fields its header's field says: `pattern` `row col`, "
           "`integer`, `real`, `double` `row col value`, `complex` `row col real imag`; the values integers in an "
           "`integer` file, else decimal numbers (`1.5e-3`, `2D+1`) or `inf`, `infinity`, `nan`: checked, not kept; "
           "docs/inputs.md)",
           "distgrail.io.edgelist.read_mtx", extensions=(".mtx",),
           sniff=Sniff(b"%%MatrixMarket", line=True, nocase=True), gpu_code=constants.FMT_MTX, split=True,
           written=True),
    Format("h5", "distgrail's binary graph file (CSR, and the condensation unless `--no-condense`), written by "
           "`distgrail convert`; never compressed", "distgrail.io.binary.read_binary_graph", storage="binary",
           extensions=(".h5", ".hdf5"), sniff=Sniff(b"\x89HDF"), written=True),
    Format("labelled", "an edge list read as node names, header or not, lines of any length of two fields or more "
           "(`auto` reads names only after a header such as `source target`)", "distgrail.io.dialect.read_labelled",
           dialect=True),  # (--num-vertices is refused: names are numbered by first appearance)
    Format("parquet", "Parquet edge table (the `parquet` extra: pyarrow)", "distgrail.io.tables.read_table_graph",
           storage="table", extensions=(".parquet", ".pq"), sniff=Sniff(b"PAR1", stored=True), num_vertices=True),
    Format("arrow", "Arrow IPC / Feather v2 edge table (the `parquet` extra: pyarrow)",
           "distgrail.io.tables.read_table_graph", storage="table", extensions=(".arrow", ".feather", ".ipc"),
           sniff=Sniff(b"ARROW1", stored=True), num_vertices=True),
)
BY_NAME = {f.name: f for f in REGISTRY}
#: the ``--format`` choices of ``index`` and ``convert`` (and :func:`~distgrail.io.read.read_graph`'s)
FORMATS = (AUTO,) + tuple(BY_NAME)
#: the ``--format`` choices of ``generate``
OUTPUT_FORMATS = (AUTO,) + tuple(f.name for f in REGISTRY if f.written)
#: formats the GPU text parser reads, and those read by the host readers only
GPU_FORMATS = tuple(f.name for f in REGISTRY if f.gpu_code is not None)
HOST_FORMATS = tuple(f.name for f in REGISTRY if f.gpu_code is None)
#: format codes of kernels/parse.cu ("csv": an edge list whose fields commas separate)
FMT_CODES = {**{f.name: f.gpu_code for f in REGISTRY if f.gpu_code is not None},
             **{"csv": f.comma_code for f in REGISTRY if f.comma_code is not None}}


def detect(name: str, stored: bytes, text) -> str:
    """The format ``auto`` reads a file as: ``name`` its path in lower case (a compression suffix
    dropped), ``stored`` its first bytes as stored (b"" for compressed data), ``text()`` the first
    bytes of its text (decompressed; called only when the name did not decide). In this order: the
    name of a format told by its stored bytes, those bytes, any other format's name, the text's
    first bytes; else :data:`FALLBACK`."""
    early = [f for f in REGISTRY if f.sniff is not None and f.sniff.stored]
    for f in early:
        if name.endswith(f.extensions):
            return f.name
    for f in early:
        if f.sniff.matches(stored):
            return f.name
    for f in REGISTRY:
        if name.endswith(f.extensions):
            return f.name
    head = text()
    for f in REGISTRY:
        if f.sniff is not None and not f.sniff.stored and f.sniff.matches(head):
            return f.name
    return FALLBACK


def host_only(fmt: str, codec: str | None, dialect) -> str:
    """Why the GPU parser does not take a file of format ``fmt`` ("" when it does): a format
    without a GPU code (node names, edge tables), compressed text of a format the kernels do not
    take compressed (``.gra``, Matrix Market: decompressed and parsed on the host; compressed edge
    lists, SNAP's form, are decompressed on the host while the kernels parse), node names that
    ``dialect`` found in an edge list."""
    spec = BY_NAME[fmt]
    if spec.gpu_code is None:
        return f"{fmt} input is read on the host"
    if codec and not spec.gpu_stream:
        return f"{CODECS[codec][1]}-compressed {fmt} text is decompressed and parsed on the host"
    if dialect is not None and dialect.labelled:
        return "node names are read on the host"
    return ""


def raw_head(path: str, count: int = HEAD_BYTES) -> bytes:
    """The first ``count`` bytes of the file as stored."""
    with open(path, "rb") as f:
        return f.read(count)


class Source:
    """A graph file as the readers see it before parsing: its path, its format (``auto``
    resolved by :func:`detect`), its compression codec, the first bytes of its text and, for an
    edge list, its dialect. Nothing is read when it is made; each value is found when first asked
    for and kept (a failure is raised there, OSError or GraphFormatError for compressed data that
    does not inflate, and not kept). Sent to another process it is its path and format only."""

    def __init__(self, path, fmt: str = AUTO):
        self.path = os.fspath(path)
        self.asked = fmt
        self._heads: dict = {}  # bytes asked for -> the text's first bytes

    @cached_property
    def stored(self) -> bytes:
        """The first :data:`HEAD_BYTES` bytes of the file as stored."""
        return raw_head(self.path)

    @cached_property
    def codec(self) -> str | None:
        """"gz", "bz2", "zst", or None for a plain file. A file of no bytes named as compressed
        (``x.txt.gz``) is refused: no codec's data is empty, so it is a cut copy, not an empty graph."""
        codec = codec_of(self.stored)
        if codec is None and not self.stored and self.path.lower().endswith(COMPRESSED_SUFFIXES):
            raise GraphFormatError("an empty file named as compressed data: no gzip, bzip2 or Zstandard stream "
                                   "is empty, so it is truncated or damaged (0 bytes)", path=self.path)
        return codec

    @cached_property
    def fmt(self) -> str:
        if self.asked != AUTO:
            return self.asked
        name = self.path.lower()
        if self.codec is not None:
            name = next((name[:-len(s)] for s in COMPRESSED_SUFFIXES if name.endswith(s)), name)
        return detect(name, b"" if self.codec else self.stored, self.head)

    @property
    def format(self) -> Format:
        return BY_NAME[self.fmt]

    def head(self, count: int = HEAD_BYTES) -> bytes:
        """The first ``count`` bytes of the text (decompressed; fewer at its end)."""
        if self.codec is None and count <= HEAD_BYTES:
            return self.stored[:count]
        got = next((b for asked, b in self._heads.items() if asked >= count), None)
        if got is None:
            got = peek(self.path, self.codec, count) if self.codec else raw_head(self.path, count)
            self._heads[count] = got
        return got[:count]

    @cached_property
    def dialect(self) -> Dialect:
        """:func:`~distgrail.io.dialect.sniff` of the first :data:`~distgrail.io.dialect.SNIFF_BYTES`
        of the text, or more while its first two edge lines are not in them (up to ``SNIFF_MAX``).
        Refused here: a header naming the columns otherwise than read (``Dialect.misnamed``), and node
        names that no header declares unless ``--format labelled`` (``Dialect.undeclared``)."""
        size = SNIFF_BYTES
        head = self.head(size)
        while undecided(head, len(head) < size) and size < SNIFF_MAX:  # (64 KiB of comments, then a header)
            size *= 8
            head = self.head(size)
        bom = bom_problem(head, "an edge list")  # (it would begin the first id or name: '\ufeff0' is no id)
        if bom:
            raise GraphFormatError(bom, path=self.path, line=1)
        d = sniff(head, complete=len(head) < size)
        if d.misnamed:  # (every reader of the file takes its dialect from here)
            raise GraphFormatError(f"{d.misnamed}, got {d.header!r}", path=self.path, line=d.header_line)
        banner = re.search(rb"(?im)^[ \t]*%%matrixmarket", head)
        if banner:  # (a Matrix Market file the name and first line did not tell: its 1-based entries
            # and size line would be read as edges)
            raise GraphFormatError("a Matrix Market banner after the first line: a Matrix Market file starts with it "
                                   "(remove what is before it), an edge list holds none",
                                   path=self.path, line=head.count(b"\n", 0, banner.start()) + 1)
        if d.undeclared and self.fmt != "labelled" and not looks_binary(head[:HEAD_BYTES]):
            # (names without a header saying so: read only when asked; binary data: the reader says so)
            raise GraphFormatError(d.undeclared, path=self.path, line=d.undeclared_line)
        return d

    def __getstate__(self):  # (to another MPI rank: the path and format, not the bytes read here)
        keep = {k: v for k, v in self.__dict__.items() if k in ("path", "asked", "fmt", "codec")}
        return {**keep, "_heads": {}}


def _cell(f: Format, what: str) -> str:
    if what == "extensions":
        return ", ".join(f"`{e}`" for e in f.extensions) or "—"
    if what == "content":
        if f.name == FALLBACK:
            return "anything else"
        return f.sniff.shown() if f.sniff else "— (by name)" if f.extensions else f"— (only `--format {f.name}`)"
    if what == "reader":
        return f"`{f.reader.removeprefix('distgrail.')}`"
    if what == "gpu":
        if f.gpu_code is None:
            return "— (host)"
        csv = f", CSV {f.comma_code}" if f.comma_code is not None else ""
        return f"{f.gpu_code}{csv}" + (", compressed too" if f.gpu_stream else "")
    return "yes" if getattr(f, what) else "—"


#: the columns of docs/formats.md's table: (heading, what :func:`_cell` shows)
COLUMNS = (("`--format`", None), ("extensions", "extensions"), ("content (`auto`)", "content"),
           ("host reader", "reader"), ("GPU code", "gpu"), ("ranks split it", "split"),
           ("`--num-vertices`", "num_vertices"), ("written", "written"), ("what", None))


def markdown() -> str:
    """docs/formats.md: the registry's table, and the order ``auto`` looks in."""
    rows = ["| " + " | ".join(h for h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for f in REGISTRY:
        cells = [f"`{f.name}`"] + [_cell(f, w) for _, w in COLUMNS[1:-1]] + [f.description]
        rows.append("| " + " | ".join(cells) + " |")
    early = [f for f in REGISTRY if f.sniff is not None and f.sniff.stored]
    late = [f for f in REGISTRY if f.sniff is not None and not f.sniff.stored]
    ends = ", ".join(f"`{e}`" for f in early for e in f.extensions)
    names = ", ".join(f"`{e}`" for f in REGISTRY if f not in early for e in f.extensions)
    return "\n".join([
        "# Input formats",
        "",
        "<!-- generated by `python -m distgrail.io.formats --markdown` from distgrail/io/formats/__init__.py; "
        "tests/test_formats.py checks that it matches -->",
        "",
        "`--format` takes `auto` (the default) or one of these. The GPU code is the format's number in "
        "`kernels/parse.cu` (from `distgrail/constants.py`); a format without one is read by its host reader. "
        "Text formats may be compressed (`.gz`, `.bz2`, `.zst`, told by their first bytes; "
        f"the name is looked at without {', '.join(f'`{s}`' for s in COMPRESSED_SUFFIXES)}). \"ranks split it\": "
        "under MPI each rank parses a byte range of an uncompressed file.",
        "",
        *rows,
        "",
        "`auto` decides by the first of:",
        "",
        f"1. the name of a format told by its stored bytes ({ends});",
        f"2. the stored bytes of an uncompressed file ({'; '.join(f'{f.name}: {f.sniff.shown()}' for f in early)});",
        f"3. the name ({names});",
        "4. the first bytes of the text, decompressed "
        f"({'; '.join(f'{f.name}: {f.sniff.shown()}' for f in late)});",
        f"5. else `{FALLBACK}`.",
        "",
    ])


def main(argv=None) -> int:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--markdown"]:
        print("usage: python -m distgrail.io.formats --markdown", file=sys.stderr)
        return 2
    sys.stdout.write(markdown())
    return 0
