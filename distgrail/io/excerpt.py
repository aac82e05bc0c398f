"""Short excerpts of file contents for error messages, and telling binary data from text."""

from __future__ import annotations

__all__ = ["shown", "looks_binary"]


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
