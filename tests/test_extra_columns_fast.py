"""Edge lists with columns after the two ids (weights, times, words: ``0 1 0.5``) are read by the
fast path (``_pairs_chunk_fast(extra=True)``), not the general one's ``keep_columns``: the same
edges, and for a bad file the same error, as the general path gives. Random files of 2-5
columns of every kind, with comments, blank lines, tabs, CRLF, and planted faults, are read
both ways and compared."""

from __future__ import annotations

import numpy as np
import pytest

import distgrail.io.edgelist as edgelist
from distgrail import read_graph
from distgrail.errors import GraphFormatError
from distgrail.io import text as textmod

WORDS = ["0.5", "1e-3", "-2", "+7", "abc", "x1", "3", "17", "NaN", "2024-01-01", "é", "{'w':1}", "0", "42"]


def _read(path, general: bool, monkeypatch, **kw):
    fast = edgelist._pairs_chunk_fast
    with monkeypatch.context() as m:
        if general:
            m.setattr(edgelist, "_pairs_chunk_fast",
                      lambda *a, **k: fast(*a[:7], False) if len(a) > 7 else fast(*a, **{**k, "extra": False}))
        try:
            g = read_graph(str(path), **kw)
            return "ok", g.n, g.src.tolist(), g.dst.tolist()
        except GraphFormatError as e:
            return "error", str(e)


def _file(rng, lines: int, fault: bool) -> str:
    cols = int(rng.integers(2, 6))
    kinds = [rng.choice(WORDS) if rng.random() < 0.5 else None for _ in range(cols - 2)]
    sep = "\t" if rng.random() < 0.3 else " "
    end = "\r\n" if rng.random() < 0.1 else "\n"
    out = []
    for i in range(lines):
        if rng.random() < 0.05:
            out.append("# a comment" if rng.random() < 0.5 else "")
            continue
        f = [str(rng.integers(0, 50)), str(rng.integers(0, 50))]
        f += [k if k is not None else str(rng.integers(0, 9)) for k in kinds]
        line = sep.join(f)
        if rng.random() < 0.05:
            line += " # note"
        out.append(line)
    if fault:
        i = int(rng.integers(0, len(out)))
        out[i] = rng.choice(["1 x 3", "1.5 2 3", "-1 2 3", "7", "1 2 3 4 5 6 7", "1 2#c 3", "1\t\t2\t3",
                             "99999999999999999999 1 2", "1 2 3%c", "0x1 2 3", "1 x", "é 2", "+1 2"])
    return end.join(out) + end


@pytest.mark.parametrize("seed", range(60))
def test_the_fast_path_reads_what_the_general_one_reads(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    p = tmp_path / "g.txt"
    p.write_text(_file(rng, int(rng.integers(1, 60)), fault=seed % 3 == 0), encoding="utf-8", newline="")
    assert _read(p, False, monkeypatch) == _read(p, True, monkeypatch)


def test_many_chunks_and_a_later_chunk_of_another_width(tmp_path, monkeypatch):
    monkeypatch.setattr(textmod, "CHUNK_BYTES", 1 << 10)
    rng = np.random.default_rng(5)
    body = "".join(f"{a} {b} 0.{c}\n" for a, b, c in rng.integers(0, 1000, (3000, 3)).tolist())
    p = tmp_path / "w.txt"
    p.write_text(body)
    got = _read(p, False, monkeypatch)
    assert got == _read(p, True, monkeypatch) and got[0] == "ok" and len(got[2]) == 3000
    q = tmp_path / "v.txt"  # (integer lines of 3 columns, then of 4: an adjacency list's rows)
    q.write_text("".join(f"{a} {b} {c}\n" for a, b, c in rng.integers(0, 1000, (2000, 3)).tolist()) + "1 2 3 4\n" * 500)
    bad = _read(q, False, monkeypatch)
    assert bad == _read(q, True, monkeypatch) and bad[0] == "error" and "v.txt:2001:" in bad[1], bad


def test_weighted_edges_are_read_on_the_fast_path(tmp_path, monkeypatch):
    calls = []
    fast = edgelist._pairs_chunk_fast

    def spy(*a, **k):
        got = fast(*a, **k)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(edgelist, "_pairs_chunk_fast", spy)
    p = tmp_path / "w.txt"
    p.write_text("0 1 0.5\n1 2 1e-3\n2 0 7 # c\n")
    g = read_graph(str(p))
    assert g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 0] and calls == [True]


@pytest.mark.parametrize("seed", range(60, 75))
def test_the_compiled_numbers_read_what_the_general_path_reads(tmp_path, monkeypatch, seed):
    """Past COMPILED_NUMBERS_BYTES the ids are read at their starts by numba (no blanking)."""
    monkeypatch.setattr(textmod, "COMPILED_NUMBERS_BYTES", 0)
    rng = np.random.default_rng(seed)
    p = tmp_path / "g.txt"
    p.write_text(_file(rng, int(rng.integers(1, 60)), fault=seed % 3 == 0), encoding="utf-8", newline="")
    assert _read(p, False, monkeypatch) == _read(p, True, monkeypatch)


def test_the_fuzzed_files_hold_both_outcomes(tmp_path, monkeypatch):
    got = set()
    for seed in range(60):
        rng = np.random.default_rng(seed)
        p = tmp_path / f"g{seed}.txt"
        p.write_text(_file(rng, int(rng.integers(1, 60)), fault=seed % 3 == 0), encoding="utf-8", newline="")
        got.add(_read(p, False, monkeypatch)[0])
    assert got == {"ok", "error"}


@pytest.mark.parametrize("body, line, token", [("0 1\nx 2\n", 2, "'x'"), ("0 1\n1 é\n", 2, "é"),
                                                ("0 1 5\n1 2.5 3\n", 2, "2.5"), ("word 1\n", 1, "word")])
def test_a_word_among_the_ids_is_refused_by_the_general_path(tmp_path, monkeypatch, body, line, token):
    p = tmp_path / "w.txt"
    p.write_text(body, encoding="utf-8")
    got = _read(p, False, monkeypatch)
    assert got == _read(p, True, monkeypatch) and got[0] == "error", got
    assert f"w.txt:{line}:" in got[1] and token in got[1], got


@pytest.mark.parametrize("body", ["0 1 5\n2 3 6\n4 5 a\n6 7 b\n", "0 1 x\n2 3 y\n", "0 1 0.5\n2 3 0.25\n4 5 7\n"])
def test_a_compile_failure_of_the_compiled_numbers_reads_what_the_general_path_reads(tmp_path, monkeypatch, body):
    """A large file's chunks keep their later columns for the compiled pass to skip; where it
    fails to compile (:func:`distgrail.jit.restarts`: the NumPy code, the same numbers),
    ``fromstring`` read them too: a ValueError traceback, or on a NumPy that reads up to the first
    word, ids shifted by the numbers before it (``0 1 5 2 3 6 4 5`` as 4 edges)."""
    pytest.importorskip("numba")
    from numba.core.errors import TypingError

    import distgrail.jit as jit
    from distgrail.io import fields_jit

    monkeypatch.setattr(textmod, "COMPILED_NUMBERS_BYTES", 0)
    p = tmp_path / "w.txt"
    p.write_text(body)
    monkeypatch.setattr(jit, "_FAILED", {})
    general = _read(p, True, monkeypatch)
    assert general[0] == "ok", general

    def broken(*a, **k):
        raise TypingError("a numba that cannot compile the loop")

    monkeypatch.setattr(fields_jit, "numbers_at", broken)
    with pytest.warns(RuntimeWarning, match="failed to compile"):
        got = _read(p, False, monkeypatch)
    assert got == general
