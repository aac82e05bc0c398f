"""Answer files people can read and join: ``u v reachable`` rows as TSV/CSV (``.gz`` too) or
Parquet (see :func:`distgrail.io.writers.write_answers`), and reading them back."""

from __future__ import annotations

import os

import numpy as np

from ..errors import DistGrailError, GraphFormatError, OutputError
from .atomic import atomic_path

__all__ = ["write_answer_rows", "read_answer_rows", "COLUMNS", "COMPRESSED", "compression_of", "uncompressed_name",
           "is_csv"]

#: header / column names
COLUMNS = ("u", "v", "reachable")
#: the compressed endings of answer and pairs files (in any case: ``.GZ``, ``.Gz``) and their codec
COMPRESSED = {".gz": "gz"}


def compression_of(path) -> str | None:
    """The codec an answers or pairs file named ``path`` is written and read back in, by its
    ending in any case (:data:`COMPRESSED`: ``"gz"`` for ``a.txt.gz``, ``A.TXT.GZ``, ``a.txt.Gz``);
    None: plain text. The one rule of the writers (:func:`write_text_chunks`,
    :func:`distgrail.io.writers.write_answers`) and the readers (:func:`read_answer_rows`,
    :func:`distgrail.io.pairs.read_query_pairs`)."""
    low = os.fspath(path).lower()
    return next((codec for end, codec in COMPRESSED.items() if low.endswith(end)), None)


def uncompressed_name(path) -> str:
    """``path`` without its compressed ending (:func:`compression_of`; ``A.TXT.GZ`` -> ``A.TXT``)."""
    path = os.fspath(path)
    low = path.lower()
    end = next((e for e in COMPRESSED if low.endswith(e)), "")
    return path[:len(path) - len(end)]


def _text_rows(answers, u, v, sep: bytes, format_ints) -> bytes:
    if u.dtype.kind in "iu" and (u.size == 0 or min(int(u.min()), int(v.min())) >= 0):
        vals = np.empty(3 * u.size, np.int64)
        vals[0::3], vals[1::3], vals[2::3] = u, v, answers
        codes = np.tile(np.array([0, 0, 1], np.int8), u.size)
        return format_ints(vals, codes, [sep, b"\n"])
    a = np.where(answers, "1", "0").tolist()
    s = sep.decode()
    us, vs = ([_csv_field(str(x)) for x in c.tolist()] if s == "," else c.tolist() for c in (u, v))
    return "".join(f"{x}{s}{y}{s}{z}\n" for x, y, z in zip(us, vs, a)).encode("utf-8")


def _csv_field(text: str) -> str:
    """A CSV field as RFC 4180 writes it: quoted (its quotes doubled) when it holds a comma, a
    quote or a line break; what Python's :mod:`csv` reader (and :func:`read_answer_rows`) reads back."""
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _check_tsv_labels(path, u, v) -> None:
    """A TSV row is split at tabs and lines at line breaks, unquoted: a label holding either
    could not be read back as one, so it is refused (a .csv quotes it; Parquet holds any)."""
    for col in (u, v):
        if col.dtype.kind in "iu" or col.size == 0:
            continue
        for x in col.tolist():
            x = str(x)
            if any(c in x for c in "\t\n\r"):
                raise OutputError(f"{path}: node label {x!r} holds a tab or a line break, which a .tsv row "
                                  f"cannot hold: write the answers as .csv (quoted) or .parquet")


def is_csv(path) -> bool:
    """Whether a table of answers named ``path`` is comma separated: by its own extension, in any
    case, after its compressed ending (``a.csv``, ``A.CSV.GZ``; not ``my.csv.dir/a.tsv``); else
    tab separated."""
    return uncompressed_name(os.path.basename(os.fspath(path))).lower().endswith(".csv")


def write_answer_rows(answers: np.ndarray, u: np.ndarray, v: np.ndarray, path: str, format_ints) -> None:
    """Rows ``u v reachable`` (see :func:`distgrail.io.writers.write_answers`, which passes its
    ``format_ints``)."""
    if not (answers.shape == u.shape == v.shape):
        raise DistGrailError(f"{path}: {answers.size} answers for {u.size} pairs")
    low = path.lower()
    if low.endswith(".parquet"):
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise DistGrailError(f"{path}: writing Parquet answers needs pyarrow: "
                                 "pip install 'distgrail[parquet]'") from None
        table = pa.table({"u": u.astype(str) if u.dtype.kind == "U" else u.astype(np.int64),
                          "v": v.astype(str) if v.dtype.kind == "U" else v.astype(np.int64),
                          "reachable": answers})
        with atomic_path(path) as tmp:
            pq.write_table(table, tmp)
        return
    sep = b"," if is_csv(path) else b"\t"
    if sep == b"\t":
        _check_tsv_labels(path, u, v)
    body = sep.join(c.encode() for c in COLUMNS) + b"\n" + _text_rows(answers, u, v, sep, format_ints)
    write_text_body(path, body)


def write_text_body(path, body: bytes) -> None:
    """``body`` written atomically to ``path``, gzip-compressed when it ends in ``.gz`` (any case:
    :func:`compression_of`)."""
    write_text_chunks(path, (body,))


def write_text_chunks(path, chunks) -> None:
    """The bytes of ``chunks`` (an iterable, made as it is written) written atomically to ``path``,
    gzip-compressed when it ends in ``.gz``, in any case (:func:`compression_of`, :func:`gzip_writer`);
    ``-``: to stdout."""
    path = os.fspath(path)
    if path == "-":
        import sys

        sys.stdout.flush()
        for c in chunks:
            sys.stdout.buffer.write(c)
        sys.stdout.buffer.flush()
        return
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        if compression_of(path) == "gz":
            with gzip_writer(raw, path) as f:
                for c in chunks:
                    f.write(c)
        else:
            for c in chunks:
                raw.write(c)


def gzip_writer(fileobj, path):
    """A gzip stream into ``fileobj`` (the temporary file of ``path``) whose header names the
    output, ``path``'s base name without ``.gz`` (what ``gunzip -N`` restores), never the
    temporary file, and holds no time stamp (0: the same data, the same bytes)."""
    import gzip

    name = uncompressed_name(os.path.basename(os.fspath(path)))
    return gzip.GzipFile(filename=name, mode="wb", fileobj=fileobj, compresslevel=6, mtime=0)


def read_answer_rows(path):
    """(u, v, reachable) of an answer file written by :func:`write_answer_rows` (u, v as strings
    from text files); gzip-compressed by the name, as written (:func:`compression_of`)."""
    path = os.fspath(path)
    if path.lower().endswith(".parquet"):
        import pyarrow.parquet as pq

        t = pq.read_table(path)
        return t.column("u").to_numpy(), t.column("v").to_numpy(), t.column("reachable").to_numpy()
    import csv
    import gzip

    comma = is_csv(path)
    with (gzip.open if compression_of(path) == "gz" else open)(path, "rt", encoding="utf-8", newline="") as f:
        # CSV: RFC 4180 quoting, as written; TSV: split at tabs, no quoting (its labels hold no tab)
        reader = csv.reader(f, delimiter=",") if comma else csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        sep = "," if comma else "\t"
        rows, starts = [], []  # (the line each row starts on: a quoted CSV field may hold line breaks)
        try:
            ended = 0  # the last line of the row before
            for row in reader:
                starts.append(ended + 1)
                rows.append(row)
                ended = reader.line_num
        except csv.Error as e:
            raise GraphFormatError(f"not a readable answers table ({e})", path=path, line=reader.line_num) from None
    if not rows or rows[0] != list(COLUMNS):
        raise GraphFormatError(f"expected the header {sep.join(COLUMNS)!r}", path=path, line=1)
    cells = rows[1:]
    bad = next((k for k, c in enumerate(cells) if len(c) != 3 or c[2] not in ("0", "1")), None)
    if bad is not None:
        raise GraphFormatError(f"expected a row 'u{sep}v{sep}reachable' (reachable 0 or 1), got "
                               f"{sep.join(cells[bad])!r}", path=path, line=starts[bad + 1])
    return (np.array([c[0] for c in cells]), np.array([c[1] for c in cells]),
            np.array([c[2] == "1" for c in cells], bool))
