"""Docstrings and comments say what and why, not what a run measured (issue 41).

Every module of ``distgrail/`` but ``distgrail/benchmarks/`` (whose job is to print figures) is
read: its docstrings with ``ast`` (module, class and function docstrings and any bare string
statement, as used for attribute docs) and its comments with ``tokenize`` (consecutive comment
lines read as one passage, so a phrase broken over two lines is still seen). A passage that holds
measurement history (a timed figure, a rate, a measured size, a speed ratio, a GPU model, a named
benchmark graph, "measured", "took 3 s", "was 5, now 2", "1.2 -> 0.4", a commit hash) fails; the
figures belong in docs/benchmarks.md, the code keeps one line of why with a pointer there.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize

import pytest

from conftest import ROOT

PKG = os.path.join(ROOT, "distgrail")

# A number not glued to a word, a dot or a dash before it ("CRC-32s", "v2.0" are not figures), or
# a range of two ("2.8-5.4 s", "3.1–5.4 s").
_NUM = r"(?<![\w.\-/])\d+(?:[.,]\d+)?(?:\s?[-–]\s?\d+(?:[.,]\d+)?)?"

#: (name, pattern): each one a sign of a measured run rather than of what the code does.
PATTERNS = [
    # a time or a rate: "0.65 s", "24 ms", "130 ns", "8 min", "5.2 GB/s", "3 M q/s"
    ("time or rate", re.compile(
        _NUM + r"\s?(?:s|ms|µs|us|ns|min(?!\()|seconds|GB/s|GiB/s|MB/s|MiB/s|TB/s|M q/s|G pairs/s)\b")),
    # a size with a fraction is a reading, not a constant ("7.6 GB"; "4 MiB blocks" stays)
    ("measured size", re.compile(r"(?<![\w.\-/])\d+\.\d+\s?(?:KB|KiB|MB|MiB|GB|GiB|TB|TiB)\b(?!/)")),
    ("speed ratio", re.compile(_NUM + r"\s?[x×] (?:faster|slower)\b")),
    ("GPU model", re.compile(r"\b(?:H100|H200|A100|B200|V100)\b")),
    ("benchmark graph", re.compile(r"\bR-MAT (?:scale )?\d+|\bdag11\b|\bpaper DAG\b", re.I)),
    ("measured", re.compile(r"\bmeasured\b", re.I)),
    ("took", re.compile(r"\btook ~?\d", re.I)),
    ("was ... now", re.compile(r"\bwas ~?\d.*?\bnow\b", re.I)),
    ("before -> after", re.compile(_NUM + r"\s?\w{0,4}\s?(?:→|->)\s?~?\d")),
    # a commit: 7-40 hex digits with at least one letter and one digit (not a word like "defaced")
    ("commit hash", re.compile(r"(?<![\w])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w])")),
]

#: (module, phrase): the phrase is blanked before the patterns run. Keep it small, a reason each.
ALLOWED = {
    # the form of the progress line the module prints, not a run's figure
    ("distgrail/progress.py", "step 3/8 condense: 4.1 s"): "an example of the printed line",
    # what Steps.add does: record a step the caller timed
    ("distgrail/progress.py", "steps measured elsewhere"): "describes the API, no figure",
    # the default is declared a guess, which is the point of the comment
    ("distgrail/server/app.py", "not measured yet"): "says there is no figure",
    # which GPUs run which compiled architecture: a support list, not a run
    ("distgrail/gpu/kernels/fatbins.py", "(A100;"): "names the parts sm_80 code serves",
    ("distgrail/gpu/kernels/fatbins.py", "Hopper (H100, H200), Blackwell (B200"):
        "names the parts sm_90 and sm_100 code serve",
    # the policy the constant sets: a client at this rate or above is never cut
    ("distgrail/server/limits.py", "1 MiB/s"): "the rate the limit defines",
    # TCP's delayed ACK, the reason for TCP_NODELAY: a protocol constant, not our run
    ("distgrail/server/client.py", "~40 ms a request"): "the delayed-ACK wait that TCP_NODELAY avoids",
}



def _modules():
    out = []
    for d, dirs, files in os.walk(PKG):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        if os.path.relpath(d, PKG).split(os.sep)[0] == "benchmarks":
            continue
        out += [os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/") for f in sorted(files)
                if f.endswith(".py")]
    return sorted(out)


def _passages(src):
    """``[(first line, [(line, text), ...])]``: each docstring and each block of comment lines."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            first = node.lineno  # the string's own lines (a docstring's line numbers in the file)
            lines = node.value.value.splitlines() or [""]
            out.append((first, [(first + i, t) for i, t in enumerate(lines)]))
    block, last = [], None
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        text = re.sub(r"^#:?", "", tok.string)
        if block and line != last + 1:
            out.append((block[0][0], block))
            block = []
        block.append((line, text))
        last = line
    if block:
        out.append((block[0][0], block))
    return sorted(out)


def _joined(lines):
    """A passage's text, its lines stripped and joined by spaces, and ``[(offset, line)]``."""
    text, starts = "", []
    for line, part in lines:
        starts.append((len(text), line))
        text += part.strip() + " "
    return text, starts


def _hits(module, src):
    """``[(first line of the passage, [(line, pattern name, matched text), ...])]``."""
    allowed = [p for (m, p) in ALLOWED if m == module]
    found = []
    for first, lines in _passages(src):
        text, starts = _joined(lines)
        for phrase in allowed:
            text = text.replace(phrase, " " * len(phrase))
        hits = []
        for name, pat in PATTERNS:
            for m in pat.finditer(text):
                line = max(ln for off, ln in starts if off <= m.start())
                hits.append((line, name, m.group(0)))
        if hits:
            found.append((first, sorted(hits)))
    return found


@functools.lru_cache(maxsize=None)
def _scan():
    out = {}
    for module in _modules():
        with open(os.path.join(ROOT, module), encoding="utf-8") as f:
            hits = _hits(module, f.read())
        if hits:
            out[module] = hits
    return out


def _report(found, modules):
    return "\n".join(f"  {m}:{line}: {name}: {text!r}" for m in sorted(modules)
                     for _, hits in found[m] for line, name, text in hits)


def test_no_measurement_history_in_docstrings_or_comments():
    found = _scan()
    assert not found, ("measurement history in docstrings/comments (move it to docs/benchmarks.md, "
                       "keep one line of why):\n" + _report(found, set(found)))


def test_every_allowed_phrase_is_still_there():
    # an entry whose phrase left its module's docstrings and comments must leave the list too
    for (module, phrase), reason in ALLOWED.items():
        assert reason
        with open(os.path.join(ROOT, module), encoding="utf-8") as f:
            texts = [_joined(lines)[0] for _, lines in _passages(f.read())]
        assert any(phrase in t for t in texts), f"{module}: allowed phrase {phrase!r} is gone"


@pytest.mark.parametrize("text, name", [
    ("copy of 1.7 GB took 0.65 s on one H200", "time or rate"),
    ("4 M ids: 2.8-5.4 s against", "time or rate"),
    ("took 3.1–5.4 s of a build", "time or rate"),
    ("0.64 GB/s of text against zlib's", "time or rate"),
    ("a sweep of 24 ms", "time or rate"),
    ("7.6 GB written", "measured size"),
    ("about 10x faster", "speed ratio"),
    ("30-60x slower", "speed ratio"),
    ("R-MAT\nscale 27 condenses", "benchmark graph"),
    ("on dag11 pairs", "benchmark graph"),
    ("Measured on the 2-core machine", "measured"),
    ("the write took 3 of them", "took"),
    ("the write was 5, now 2", "was ... now"),
    ("write 1.0 → 0.47", "before -> after"),
    ("since 7cc0047 it reads", "commit hash"),
])
def test_the_patterns_see_history(text, name):
    src = '"""' + text + '"""\n'
    hits = [n for _, hs in _hits("x.py", src) for _, n, _ in hs]
    assert name in hits, hits


@pytest.mark.parametrize("text", [
    "timeout in s", "rows of 4096 entries", "blocks of 4 MiB", "a CRC-32s list", "int32 pairs: 8 min(dims, 8)",
    "2 GiB of scratch", "text is usually 3-5x its gzip size", "maxdeg = 2 × average degree",
    "0x9E3779B97F4A7C15", "the defaced record", "at most 8 bytes",
])
def test_the_patterns_leave_what_the_code_is(text):
    assert _hits("x.py", '"""' + text + '"""\n# ' + text + "\n") == []
