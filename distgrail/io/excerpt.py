"""Short excerpts of file contents for error messages, and telling binary data from text (or
text that starts with a byte order mark)."""

from __future__ import annotations

__all__ = ["shown", "looks_binary", "bom_problem"]


def shown(raw, limit: int = 40) -> str:
    """A short, quoted, escaped excerpt of ``raw`` for error messages (binary bytes as \\xNN)."""
    raw = bytes(raw)
    head = raw[:limit]
    try:
        out = repr(head.decode("utf-8"))
    except UnicodeDecodeError:
        out = repr(head)[1:]
    return out + (f" ... ({len(raw):,} bytes)" if len(raw) > limit else "")


def looks_binary(head: bytes) -> bool:
    """True when the first bytes of a file are not text (a NUL byte, or not UTF-8)."""
    if b"\0" in head:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start < len(head) - 4  # a character cut at the end of the sample is fine
    return False


#: the UTF-8 byte order mark
BOM = b"\xef\xbb\xbf"


def bom_problem(head: bytes, what: str) -> str | None:
    """Why a text file (``what``: "an edge list", "a pairs file") starting with ``head`` is
    refused when it starts with a UTF-8 byte order mark (its first id, name or header would
    begin with U+FEFF), with its first line; None otherwise."""
    if not head.startswith(BOM):
        return None
    first = head.split(b"\n", 1)[0]
    return (f"the file starts with a UTF-8 byte order mark; save it without one ({what} is plain UTF-8 text), "
            f"got {shown(first)}")
