"""A pairs file of node labels read without a Python loop per line, when it is clean
(:func:`clean_label_pairs`); :func:`distgrail.io.pairs._label_pairs` reads every other file with its
loop, which says what is wrong and where. The loop checks the labels' characters one by one
(its cost and this one's: docs/benchmarks.md, session 37).

Clean means the loop would take every line as it stands: the text is UTF-8; no space character but
a blank, a tab, a line end (a ``\\r`` only before one); no NUL or separator control; no ``#``/``%``
but at the start of a comment line; every pair line of the same field count, 2 or 3, split at the
file's separator (:func:`distgrail.io.pairs.separator_of`): at runs of blanks and tabs, or at each
tab (no tab run), or at each comma (no tab in the file); no empty field and no double quote when
split at tabs or commas; a third field 0 or 1; integer labels ``-?[0-9]+`` within 64 bits. The
tokens then come from ``str.split`` on the whole text and the checks from byte masks over it, so
that for a clean file the labels, the expected answers and the lines are the loop's (a test holds
the two to each other on generated files)."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["clean_label_pairs"]

#: what a clean file holds nowhere: a space character other than a blank, tab or line end, a NUL or
#: a separator control (the loop refuses them in a label), a comment mark (checked apart)
_UNCLEAN = re.compile(r"[^\S \t\n]|[\x00\x1c-\x1f]")
#: an integer label as the loop takes it (``int()`` also takes ``+1``, ``1_0`` and other digits)
_INT = re.compile(r"-?[0-9]+")


def clean_label_pairs(data: bytes, sep: bytes, kind: str):
    """``(sources, targets, expected or None, lines)`` of a clean pairs file of node labels
    (module doc): lists of str (``kind`` "str") or int64 arrays ("int"), the expected answers
    as a bool array, the 1-based line of each pair; None when the file is not clean (the loop
    reads it, and refuses it or takes it as it says)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\r" in text:
        if "\r" in text.replace("\r\n", "\n"):
            return None
        text = text.replace("\r\n", "\n")
    a = np.frombuffer(text.encode("utf-8") if len(text) != len(data) else data, np.uint8)  # (CRLF: LF)
    if not a.size or ((a < 32) & (a != 9) & (a != 10)).any():
        return None
    if (a >= 128).any() and _UNCLEAN.search(text):  # (other space characters are not ASCII)
        return None
    count = np.int32 if a.size < 2**31 - 1 else np.int64
    nl = a == 10
    line = np.cumsum(nl, dtype=count) - nl
    blank = (a == 32) | (a == 9)
    if ((a == 35) | (a == 37)).any():  # comments: whole lines only, then blanked
        solid = ~blank & ~nl
        first = np.full(int(line[-1]) + 1, a.size, np.int64)
        at = np.flatnonzero(solid)
        np.minimum.at(first, line[at], at)
        marks = np.flatnonzero((a == 35) | (a == 37))
        if (first[line[marks]] != marks).any():  # a mark after a line's first byte: the loop's
            return None
        comment = np.flatnonzero(np.isin(a[np.minimum(first, a.size - 1)], (35, 37)) & (first < a.size))
        a = a.copy()
        a[np.isin(line, comment) & ~nl] = 32
        text = a.tobytes().decode("utf-8")
        blank = (a == 32) | (a == 9)
    if sep == b" ":
        tokens = ~blank & ~nl
        starts = tokens & ~np.concatenate(([False], tokens[:-1]))
        per_line = np.bincount(line[starts], minlength=int(line[-1]) + 1)
        flat = text.split()
    else:
        s = sep[0]
        if (a == 34).any() or (s == 44 and (a == 9).any()) or a[-1] == s:  # a quote; a tab in a CSV; an
            return None  # empty last field (the file's last byte a separator): the loop's
        cut = nl | (a == s)
        solid = ~cut & (a != 32)
        has_line = np.bincount(line[solid], minlength=int(line[-1]) + 1) > 0
        seg = np.cumsum(cut, dtype=count) - cut
        seg_solid = np.bincount(seg[solid], minlength=int(seg[-1]) + 1)
        seg_line = line[np.concatenate(([0], np.flatnonzero(cut) + 1))[:seg_solid.size].clip(max=a.size - 1)]
        if (has_line[seg_line] & (seg_solid == 0)).any():  # an empty field (a tab run: the loop's)
            return None
        per_line = np.where(has_line, np.bincount(line[a == s], minlength=has_line.size) + 1, 0)
        d = sep.decode()
        if has_line.all():  # (no blank or comment line: one split)
            fields = text[:-1].replace("\n", d).split(d) if a[-1] == 10 else text.replace("\n", d).split(d)
        else:
            fields = [f for ln in text.split("\n") if ln.strip(" ") for f in ln.split(d)]
        sp = a == 32
        around = sp & (np.concatenate(([True], cut[:-1])) | np.concatenate((cut[1:], [True])))  # a blank by a cut
        flat = [f.strip(" ") for f in fields] if around.any() else fields
    counts = per_line[per_line > 0]
    if not counts.size or counts[0] not in (2, 3) or (counts != counts[0]).any() or len(flat) != counts.sum():
        return None
    width = int(counts[0])
    us, vs = flat[0::width], flat[1::width]
    expected = None
    if width == 3:
        answers = flat[2::3]
        if not set(answers) <= {"0", "1"}:
            return None
        expected = np.array(answers) == "1"
    lines = np.flatnonzero(per_line > 0).astype(np.int64) + 1
    if kind == "int":
        try:
            if not all(map(_INT.fullmatch, us)) or not all(map(_INT.fullmatch, vs)):
                return None
            return np.array(us, np.int64), np.array(vs, np.int64), expected, lines
        except (OverflowError, ValueError):  # (past 64 bits, or past int()'s digits: the loop's)
            return None
    return us, vs, expected, lines

