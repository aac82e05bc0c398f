"""Matrix Market entries with values (``row col value``, ``row col re im``: SuiteSparse's
``integer``, ``real``, ``double`` and ``complex`` files) are read by the fast path
(``_pairs_chunk_fast`` with the header's :class:`~distgrail.io.edgelist.Fields`: every line of
its count, every value token passed by the general path's automaton), not the general one that
checked every chunk before: the same edges, and for a bad file the same error (type, file, line,
message), as the general path gives. Random files of every field and symmetry, with comments,
blank lines, tabs, CRLF and planted faults (field counts, values, ids, counts, bytes), small and
in many chunks, with and without the compiled numbers, are read both ways and compared."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import distgrail.io.edgelist as edgelist
from distgrail import read_graph
from distgrail.io import compressed, text as textmod

FIELDS = {"pattern": 2, "integer": 3, "real": 3, "double": 3, "complex": 4}
SYMMETRIES = ["general", "symmetric", "skew-symmetric", "hermitian"]
INTEGERS = ["1", "-2", "+3", "0", "-0", "007", "42", "123456789012345678901234567890"]
NUMBERS = INTEGERS + ["1.5", "1e-3", ".5", "5.", "-.25", "+0.125", "1E+10", "2.5d-3", "1.5D3", "nan", "NaN", "inf",
                      "-Infinity", "+infinity", "INF", "1" * 30 + "." + "2" * 30 + "e-" + "3" * 12]
#: values some field refuses (the automaton says which): words, broken numbers, other bytes
ODD = ["1.5", "1e", "1e+", ".", "+", "-", "e5", ".e5", "1.2.3", "--1", "0x1", "infinit", "nan(1)", "1,5", "abc", "é",
       "1_0", "{}", "1j", "5.", "inf", "1.5e3x", "٣", "+-1", "'1'", "1\x0b2"]
#: lines in place of an entry line (``{v}`` a value of the field, ``{n}`` the rows)
FAULTS = ["{n1} 1{v}", "0 1{v}", "1 x{v}", "1.0 2{v}", "-1 2{v}", "99999999999999999999 1{v}", "1{v}", "1 2 3 4 5 6",
          "1 2", "1", "1 2 3", "1 2#c{v}", "1 2%c{v}", "1 2{v} \x00", "1 2{v}\r 1", "\x0c1 2{v}", "1 2{v} \x7f",
          "1\t\t2{v}", "% 1 2 3 4", "  ", "1 2{v} % é", "1 2{v}%%", "01 02{v}", "+1 2{v}", "1 é{v}"]


def _read(path, general: bool, monkeypatch):
    """``("ok", n, src, dst)`` or ``("error", type, message, line)``; ``general``: every chunk
    read by the general path (the fast path turned off)."""
    with monkeypatch.context() as m:
        if general:
            m.setattr(edgelist, "_pairs_chunk_fast", lambda *a, **k: None)
        try:
            g = read_graph(str(path))
            return "ok", g.n, g.src.tolist(), g.dst.tolist()
        except Exception as e:  # noqa: BLE001 - any error: both paths must raise the same
            return "error", type(e).__name__, str(e), getattr(e, "line", None)


def _value(rng, field: str, fault: bool = False) -> str:
    """The value fields of an entry line of ``field`` (with their leading blank), or ''."""
    count = FIELDS[field] - 2
    pool = INTEGERS if field == "integer" else NUMBERS
    out = []
    for _ in range(count):
        odd = fault and rng.random() < 0.5
        out.append(str(rng.choice(ODD if odd else pool)))
    return "".join(" " + v for v in out)


def _file(rng, lines: int, fault: bool, field: str | None = None) -> bytes:
    field = field or str(rng.choice(list(FIELDS)))
    symmetry = str(rng.choice(SYMMETRIES))
    n = int(rng.integers(1, 60))
    sep = str(rng.choice([" ", " ", " ", "\t", "  ", " \t"]))
    end = "\r\n" if rng.random() < 0.15 else "\n"
    out, entries = [], 0
    for _ in range(lines):
        r = rng.random()
        if r < 0.03:
            out.append("% a comment" if rng.random() < 0.5 else "")
            continue
        u, v = (int(x) for x in rng.integers(1, n + 1, 2))
        line = f"{u}{sep}{v}" + _value(rng, field).replace(" ", sep)
        r = rng.random()
        if r < 0.05:
            line += " % note"
        elif r < 0.08:
            line += "%glued"
        elif r < 0.1:
            line += "  "
        out.append(line)
        entries += 1
    faults = int(rng.integers(1, 3)) if fault else 0
    for _ in range(faults):
        if rng.random() < 0.4:  # (a value that the field may refuse)
            u, v = (int(x) for x in rng.integers(1, n + 1, 2))
            bad = f"{u} {v}" + _value(rng, field, fault=True)
        else:
            bad = str(rng.choice(FAULTS)).format(n1=n + 1, v=_value(rng, field))
        out.insert(int(rng.integers(0, len(out) + 1)), bad)
    if fault and rng.random() < 0.2:
        entries += int(rng.choice([-1, 1]))
    head = f"%%MatrixMarket matrix coordinate {field} {symmetry}{end}% made by a test{end}{n} {n} {entries}{end}"
    tail = end if rng.random() < 0.9 else ""
    return (head + end.join(out) + tail).encode()


def _agree(tmp_path, monkeypatch, data: bytes, name: str = "g.mtx", gz: bool = False):
    p = tmp_path / (name + (".gz" if gz else ""))
    p.write_bytes(gzip.compress(data) if gz else data)
    got = _read(p, False, monkeypatch)
    assert got == _read(p, True, monkeypatch), data[:400]
    return got


@pytest.mark.parametrize("seed", range(120))
def test_small_files_read_as_the_general_path_reads(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    _agree(tmp_path, monkeypatch, _file(rng, int(rng.integers(1, 40)), fault=seed % 3 == 0), gz=seed % 10 == 9)


@pytest.mark.parametrize("seed", range(120, 150))
def test_files_of_many_chunks_read_as_the_general_path_reads(tmp_path, monkeypatch, seed):
    """Chunks of 512 bytes: a fault in a later chunk is named with its line, as by the general path."""
    monkeypatch.setattr(textmod, "CHUNK_BYTES", 512)
    monkeypatch.setattr(compressed, "CHUNK_BYTES", 512)
    rng = np.random.default_rng(seed)
    _agree(tmp_path, monkeypatch, _file(rng, int(rng.integers(200, 1500)), fault=seed % 2 == 0), gz=seed % 5 == 4)


@pytest.mark.parametrize("seed", range(150, 180))
def test_the_compiled_numbers_read_as_the_general_path_reads(tmp_path, monkeypatch, seed):
    """Past COMPILED_NUMBERS_BYTES (here 0) the ids are read at their starts by numba, the value
    columns left in place, and the chunks are read ahead on threads."""
    monkeypatch.setattr(textmod, "COMPILED_NUMBERS_BYTES", 0)
    monkeypatch.setattr(textmod, "CHUNK_BYTES", 1 << 10 if seed % 2 else 1 << 20)
    rng = np.random.default_rng(seed)
    _agree(tmp_path, monkeypatch, _file(rng, int(rng.integers(1, 800)), fault=seed % 3 == 0))


def _general_calls(monkeypatch) -> list:
    calls: list = []
    general = edgelist._pairs_chunk_general

    def spy(*a, **k):
        calls.append(a[1])
        return general(*a, **k)

    monkeypatch.setattr(edgelist, "_pairs_chunk_general", spy)
    return calls


def test_the_fuzzed_files_hold_both_outcomes_and_reach_the_fast_path(tmp_path, monkeypatch):
    """The fuzz above is no test of one outcome: its files are read and refused, and the good
    ones of every field with values are read by the fast path alone."""
    outcomes, fast = set(), set()
    for seed in range(120):
        rng = np.random.default_rng(seed)
        data = _file(rng, int(rng.integers(1, 40)), fault=seed % 3 == 0)
        p = tmp_path / f"g{seed}.mtx"
        p.write_bytes(data)
        with monkeypatch.context() as m:
            calls = _general_calls(m)
            got = _read(p, False, m)
        outcomes.add(got[0])
        if got[0] == "ok" and not calls:
            fast.add(data.split(b"\n", 1)[0].split()[3].decode())
    assert outcomes == {"ok", "error"}
    assert fast == set(FIELDS), fast


@pytest.mark.parametrize("field", ["integer", "real", "double", "complex"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_large_well_formed_file_takes_the_fast_path(tmp_path, monkeypatch, field, compiled):
    """Every chunk of a good file of values is read without the general path (chunks of 32 KiB),
    the edges those it reads."""
    monkeypatch.setattr(textmod, "CHUNK_BYTES", 32 << 10)
    if compiled:
        monkeypatch.setattr(textmod, "COMPILED_NUMBERS_BYTES", 0)
    rng = np.random.default_rng(3)
    m, n = 40000, 5000
    u, v = rng.integers(1, n + 1, (2, m))
    w = rng.random(m)
    value = {"integer": lambda i: f" {i % 201 - 100}", "real": lambda i: f" {w[i]:.17g}",
             "double": lambda i: f" {w[i]:.6e}", "complex": lambda i: f" {w[i]:.6f} -{w[i]:.3E}"}[field]
    body = "".join(f"{a} {b}{value(i)}\n" for i, (a, b) in enumerate(zip(u.tolist(), v.tolist())))
    p = tmp_path / "big.mtx"
    p.write_text(f"%%MatrixMarket matrix coordinate {field} general\n% SuiteSparse-like\n{n} {n} {m}\n" + body)
    assert p.stat().st_size > 8 * (32 << 10)
    calls = _general_calls(monkeypatch)
    got = _read(p, False, monkeypatch)
    assert calls == [] and got[0] == "ok" and got[1] == n
    assert got[2] == (u - 1).tolist() and got[3] == (v - 1).tolist()
    assert got == _read(p, True, monkeypatch)
    assert len(calls) > 8  # (the general path's read, every chunk)


@pytest.mark.parametrize("field, bad, message", [
    ("integer", "1 2 1.5", "Matrix Market 'integer' entry value is not an integer: '1.5'"),
    ("real", "1 2 1e", "Matrix Market 'real' entry value is not a number: '1e'"),
    ("complex", "1 2 0.5 x", "Matrix Market 'complex' entry value is not a number: 'x'"),
    ("real", "1 2", "Matrix Market 'real' entries are 'row col value', got 2 fields: '1 2'"),
    ("double", "1 2 3 4", "Matrix Market 'double' entries are 'row col value', got 4 fields: '1 2 3 4'"),
    ("real", "1 9999 0.5", "vertex id out of range 1..3000, got '9999'"),
    ("integer", "0 1 7", "vertex id out of range 1..3000, got '0'"),
    ("real", "1 x 0.5", "vertex id must be a non-negative integer, got 'x'")])
def test_a_bad_line_in_a_later_chunk_is_named_as_before(tmp_path, monkeypatch, field, bad, message):
    """A good file's chunks go fast until the chunk holding the bad line, which the general path
    reads and refuses, naming its line."""
    monkeypatch.setattr(textmod, "CHUNK_BYTES", 1 << 10)
    extra = {"integer": " {i}", "real": " {i}.5e-3", "double": " -.{i}", "complex": " {i} 1.5"}[field]
    lines = [f"{i % 3000 + 1} {i * 7 % 3000 + 1}" + extra.format(i=i) for i in range(3000)]
    lines[2500] = bad
    data = (f"%%MatrixMarket matrix coordinate {field} symmetric\n3000 3000 3000\n" + "\n".join(lines) + "\n").encode()
    got = _agree(tmp_path, monkeypatch, data)
    assert got[0] == "error" and got[2] == f"{tmp_path / 'g.mtx'}:2503: {message}", got


def test_crlf_reads_and_a_stray_cr_is_refused_as_before(tmp_path, monkeypatch):
    head = "%%MatrixMarket matrix coordinate real general\r\n2 2 2\r\n"
    ok = _agree(tmp_path, monkeypatch, (head + "1 2 1.5\r\n2 1 -inf\r\n").encode())
    assert ok == ("ok", 2, [0, 1], [1, 0])
    bad = _agree(tmp_path, monkeypatch, (head + "1 2 1.5\r 7\r\n2 1 -inf\r\n").encode())
    assert bad[0] == "error" and ":3:" in bad[2], bad


def test_lines_of_the_headers_count_whose_values_went_unchecked_go_to_the_general_path(tmp_path, monkeypatch):
    """Chunks the fast path read without the header's Fields (their values never checked, as for
    an edge list's weights) are read again by the general path, which refuses the bad value."""
    fast = edgelist._pairs_chunk_fast
    monkeypatch.setattr(edgelist, "_pairs_chunk_fast", lambda *a: fast(*a[:8]))
    p = tmp_path / "w.mtx"
    p.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 0.5\n2 3 abc\n3 1 1\n")
    got = _read(p, False, monkeypatch)
    assert got[0] == "error" and got[2] == f"{p}:4: Matrix Market 'real' entry value is not a number: 'abc'", got
