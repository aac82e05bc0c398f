"""Query pairs made from an index (``distgrail pairs``), written in the pairs format that
``distgrail query`` reads; and the text of one-off answers (``distgrail query --pair``).

* ``random``: ``u`` and ``v`` uniform over the vertices, independently (most such pairs are
  unreachable on large sparse graphs).
* ``reachable``: pairs known reachable (``u != v``). Up to :data:`MAX_SOURCES` source vertices
  are drawn at random among those that reach another vertex: the vertices of a component that
  holds more than one vertex or has a successor in the index's condensation DAG, found in one
  pass over the components, so that a graph where few vertices reach anything (a few hubs) is
  not searched vertex by vertex. Each drawn source's reach is found by a BFS over the DAG (one
  per distinct component), stopped once :data:`MAX_REACH` components are reached; each pair is
  a random drawn source and a random vertex of the components its BFS reached (its own
  component included, without the source itself). Not uniform over all reachable pairs; exact
  and the same for the same index and seed.

Pairs are written as text ``u v`` lines (``.txt`` or ``.pairs``; ``.gz`` compressed, ``-``
stdout), with the graph's node labels when the index has them, or as a ``.npy`` (k, 2) array of
ids or integer labels: int32 when every value fits (what a GPU query stages with a plain copy,
not a cast: half the bytes to read), else int64. Only what :mod:`distgrail.io.pairs` reads back
is written: other names, and labels it would split or cut (blanks, ``#``/``%``), are refused.
"""

from __future__ import annotations

import os
import re

import numpy as np

from ..arrays import sorted_distinct
from ..errors import DistGrailError, QueryError
from .atomic import atomic_path

__all__ = ["sample_pairs", "write_pairs", "MAX_SOURCES", "MAX_REACH", "pair_tokens", "check_seed",
           "check_pairs_output", "PAIRS_OUTPUTS"]

#: distinct sources of the reachable pairs
MAX_SOURCES = 1024
#: components a source's BFS visits at most
MAX_REACH = 1 << 16
#: bytes per pair that making and writing the pairs hold at least (the ids, the draws, the
#: written copy); node labels add two labels' bytes
BYTES_PER_PAIR = {"random": 32, "reachable": 56}
#: pairs of text written per block (the text of one block is held at a time)
TEXT_BLOCK = 1 << 20
#: the pairs file names written, as :mod:`distgrail.io.pairs` tells them (``.npy``: by that lower-case
#: ending; ``.gz`` in any case)
PAIRS_OUTPUTS = (".txt or .pairs ('u v' lines; .txt.gz or .pairs.gz compressed), .tsv or .csv ('u<tab>v' "
                 "or 'u,v' lines: node labels may hold blanks; .gz too), .npy (a (k, 2) integer array), or - for stdout")
#: what the pairs reader takes as a blank, a comment or a line end inside a label (it splits lines
#: there, cuts the line at ``#``/``%``, and refuses the rest, as ``str.isspace`` and NUL), or
#: what UTF-8 cannot encode
_NOT_IN_LABEL = re.compile(r"[\s\x00#%\ud800-\udfff]")
#: the same for ``.tsv`` pairs lines (blanks inside a label read back; no double quote) and
#: ``.csv`` ones (no comma either)
_NOT_IN_TSV_LABEL = re.compile(r'[^\S ]|[\x00#%"\ud800-\udfff]')
_NOT_IN_CSV_LABEL = re.compile(r'[^\S ]|[\x00#%,"\ud800-\udfff]')


def check_seed(seed) -> None:
    """The seed's range, as ``index`` and ``generate`` check theirs (an integer in 0..2^64-1):
    NumPy would refuse a negative one with a traceback and take any larger one."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise DistGrailError(f"seed must be an integer in 0..2^64-1, got {seed!r}")


def check_count(idx, count, kind: str) -> None:
    """``count`` pairs must fit this machine's memory (:data:`BYTES_PER_PAIR`; the physical memory,
    or ``DISTGRAIL_MEMORY``): refused up front, naming ``-n``, rather than ending in a MemoryError
    half way."""
    from ..dtypes import physical_memory

    labels = idx.node_labels
    per = BYTES_PER_PAIR[kind] + (0 if labels is None else 2 * labels.values.dtype.itemsize)
    have = physical_memory()
    if count * per > have:
        raise QueryError(f"-n {count:,}: {count:,} {kind} pairs need at least {count * per / 2**30:,.1f} GiB of "
                         f"memory to make and write, this machine has {have / 2**30:,.1f} GiB: at most "
                         f"{have // per:,} pairs in one file (more: several files, each with its own --seed)")


def check_pairs_output(path) -> None:
    """Refuse a pairs file name that :mod:`distgrail.io.pairs` would not read back as written
    (DistGrailError naming the names it takes): it reads ``.npy`` (:func:`~distgrail.io.pairs.is_npy`)
    and ``.gz`` (:func:`~distgrail.io.answers.compression_of`, the writer's rule) by their endings in
    any case, and any other name as text, so ``p.parquet``, ``p.bz2`` or ``p.h5`` would hold text
    under a name that says otherwise."""
    from .answers import uncompressed_name
    from .pairs import is_npy

    path = os.fspath(path)
    if path == "-" or is_npy(path):
        return
    if uncompressed_name(path).lower().endswith((".txt", ".pairs", ".tsv", ".csv")):
        return
    ext = os.path.splitext(os.path.basename(path))[1]
    found = f"unknown extension {ext!r}" if ext else "no extension"
    raise DistGrailError(f"{path}: {found} for the pairs file: name it {PAIRS_OUTPUTS}")


def _members(component: np.ndarray, C: int):
    order = np.argsort(component, kind="stable")
    start = np.zeros(C + 1, np.int64)
    np.cumsum(np.bincount(component, minlength=C), out=start[1:])
    return order, start


def _bfs(indptr, indices, c: int, limit: int, seen=None) -> np.ndarray:
    """Components reached from component ``c`` (itself first), at most ``limit``, level by level.
    ``seen``: a False array of the components, shared by the calls (marked and cleared again
    here), so that each BFS costs what it reaches, not a fresh array of every component."""
    seen = np.zeros(indptr.size - 1, bool) if seen is None else seen
    seen[c] = True
    out, frontier, total = [np.array([c])], np.array([c]), 1
    while frontier.size and total < limit:
        lo, hi = indptr[frontier], indptr[frontier + 1]
        nxt = indices[_ranges(lo, hi)]
        nxt = sorted_distinct(np, nxt[~seen[nxt]])[: limit - total]
        seen[nxt] = True
        out.append(nxt)
        total += nxt.size
        frontier = nxt
    got = np.concatenate(out).astype(np.int64)
    seen[got] = False
    return got


def _ranges(lo, hi):
    size = hi - lo
    keep = size > 0
    lo, size = lo[keep], size[keep]
    if not size.size:
        return np.zeros(0, np.int64)
    step = np.ones(int(size.sum()), np.int64)
    head = np.concatenate(([0], np.cumsum(size)[:-1]))
    step[0] = lo[0]
    step[head[1:]] = lo[1:] - (lo[:-1] + size[:-1] - 1)
    return np.cumsum(step)


def _vertex_at(order, start, r, cum, j):
    """The vertex at position ``j`` of the members of components ``r`` (in that order)."""
    c = np.searchsorted(cum, j, side="right")
    before = np.where(c > 0, cum[np.maximum(c - 1, 0)], 0)
    return order[start[r[c]] + j - before].astype(np.int64)


def sample_pairs(idx, count: int, kind: str = "random", seed: int = 0):
    """``count`` pairs (u, v) of vertex ids of the index ``idx`` (see the module doc); ``seed`` an
    integer in 0..2^64-1, as ``index``'s. Refused up front: a count this machine cannot hold
    (:func:`check_count`); for ``reachable``, a graph where no vertex reaches another."""
    if kind not in BYTES_PER_PAIR:
        raise QueryError(f"pair kind must be 'random' or 'reachable', got {kind!r}")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise QueryError(f"the number of pairs must be an integer >= 0, got {count!r}")
    check_seed(seed)
    count = int(count)
    check_count(idx, count, kind)
    n = int(idx.n)
    rng = np.random.default_rng(seed)
    if n == 0:
        raise QueryError("the index has no vertex: no pairs to make")
    if kind == "random":
        uv = rng.integers(0, n, (count, 2), dtype=np.int64)
        return uv[:, 0], uv[:, 1]
    comp = np.asarray(idx.arrays["vertex/component"], np.int64)
    indptr = np.asarray(idx.arrays["dag/indptr"], np.int64)
    indices = np.asarray(idx.arrays["dag/indices"], np.int64)
    order, start = _members(comp, indptr.size - 1)
    size = np.diff(start)
    # a vertex reaches another one iff its component has another vertex or a DAG successor
    sources = np.flatnonzero(((size > 1) | (np.diff(indptr) > 0))[comp])
    if count and not sources.size:
        raise QueryError("the graph has no edge between distinct vertices: no reachable pair u -> v, u != v")
    if not count:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sources = sources[rng.choice(sources.size, min(MAX_SOURCES, sources.size), replace=False)]
    seen = np.zeros(indptr.size - 1, bool)
    by_comp: dict = {}  # component -> its BFS's reach (sources of one component share it)
    reach = []
    for c in comp[sources].tolist():
        if c not in by_comp:
            by_comp[c] = _bfs(indptr, indices, c, MAX_REACH, seen)
        reach.append(by_comp[c])
    pick = rng.integers(0, sources.size, count)
    x = rng.random(count)
    s = sources[pick]
    t = np.empty(count, np.int64)
    by = np.argsort(pick, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(pick, minlength=sources.size))))
    for i in np.flatnonzero(np.diff(bounds)).tolist():  # the pairs of source i, at once
        at = by[bounds[i]:bounds[i + 1]]
        r = reach[i]
        cum = np.cumsum(size[r])
        total = int(cum[-1])  # vertices of the reached components, the source included
        j = (x[at] * (total - 1)).astype(np.int64)  # one of total - 1 positions ...
        v = _vertex_at(order, start, r, cum, j)
        v[v == sources[i]] = _vertex_at(order, start, r, cum, np.array([total - 1]))[0]  # ... not u
        t[at] = v
    return s, t


def pair_tokens(idx, s: np.ndarray, t: np.ndarray):
    """The pairs as the user names the vertices: node labels when the index has them, else ids."""
    labels = idx.node_labels
    if labels is None:
        return s, t
    return labels.values[s], labels.values[t]


def write_pairs(u, v, path) -> None:
    """Pairs ``u v`` per line (ids or labels; ``.gz``: gzip; ``-``: stdout) or ``.npy`` (k, 2),
    int32 when every value fits, else int64; atomically. Only what ``distgrail query`` reads back:
    other names are refused (:func:`check_pairs_output`), and so are labels it would not read as
    written (:func:`_check_labels`), before anything is written."""
    path = os.fspath(path)
    check_pairs_output(path)
    u, v = np.asarray(u), np.asarray(v)
    if u.shape != v.shape or u.ndim != 1:
        raise DistGrailError(f"{path}: sources and targets must be two 1-D arrays of one length, got {u.shape} "
                             f"and {v.shape}")
    if path.lower().endswith(".npy"):
        if u.dtype.kind not in "iu":
            raise DistGrailError(f"{path}: a .npy pairs file holds integers; this index has string node labels "
                                 "(write a text file instead)")
        narrow = u.size == 0 or (min(int(u.min()), int(v.min())) >= 0
                                 and max(int(u.max()), int(v.max())) <= np.iinfo(np.int32).max)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, np.stack([u, v], axis=1).astype(np.int32 if narrow else np.int64))
        return
    from .pairs import separator_of

    sep = separator_of(path).decode()
    if u.dtype.kind not in "iu":
        _check_labels(path, u, v, sep)
    from .answers import write_text_chunks

    write_text_chunks(path, _text_blocks(u, v, sep))


def _text_blocks(u, v, sep: str = " "):
    """The ``u v`` lines (``sep`` between), :data:`TEXT_BLOCK` pairs at a time (the text of one
    block held at once)."""
    ids = u.dtype.kind in "iu" and (u.size == 0 or min(int(u.min()), int(v.min())) >= 0)
    if ids:
        from .writers import format_ints

        codes = np.tile(np.array([0, 1], np.int8), min(u.size, TEXT_BLOCK))
    for lo in range(0, u.size, TEXT_BLOCK):
        a, b = u[lo:lo + TEXT_BLOCK], v[lo:lo + TEXT_BLOCK]
        if ids:
            vals = np.empty(2 * a.size, np.int64)
            vals[0::2], vals[1::2] = a, b
            yield format_ints(vals, codes[:vals.size], [sep.encode(), b"\n"])
        else:
            yield "".join(f"{x}{sep}{y}\n" for x, y in zip(a.tolist(), b.tolist())).encode("utf-8")


def _check_labels(path, u, v, sep: str = " ") -> None:
    """Refuse a node label that the pairs reader (:mod:`distgrail.io.pairs`) would not read back
    as itself from lines split at ``sep`` (:func:`~distgrail.io.pairs.separator_of`): the file's first one
    starting with U+FEFF (a byte order mark: the reader refuses the file), with a blank, a line end or
    another space character (``u v`` lines: it splits or refuses the line there; ``.tsv`` and
    ``.csv`` lines take blanks inside a label, not around it, and no other space character), a
    double quote in either, a comma in a ``.csv``, a ``#`` or ``%`` (it cuts the line there: a comment),
    a NUL, none at all, or one that UTF-8 cannot encode. No escape exists in these formats: such a
    label is asked about with :meth:`distgrail.Index.query` in Python instead."""
    labels = np.concatenate([u.ravel(), v.ravel()])
    if not labels.size:
        return
    if labels.dtype.kind == "O":
        labels = np.array([str(x) for x in labels.tolist()])
    first = str(labels[0])  # (the file's first bytes)
    bad = _NOT_IN_LABEL if sep == " " else _NOT_IN_CSV_LABEL if sep == "," else _NOT_IN_TSV_LABEL
    for x in sorted_distinct(np, labels).tolist():
        x = str(x)
        if x and not bad.search(x) and (sep == " " or x == x.strip(" ")) and not (x == first and x[:1] == "\ufeff"):
            continue
        what = ("is empty" if not x else "starts or ends with a blank" if sep != " " and x != x.strip(" ")
                else "starts with U+FEFF: first in the file, it would read as a byte order mark (the reader "
                     "refuses the file)" if x == first and x[:1] == "\ufeff"
                else "holds a comma or a double quote" if sep == "," and re.search('[,"]', x)
                else "holds a double quote" if sep == "\t" and '"' in x
                else "holds a blank or another space character" if sep == " " and re.search(r"\s", x)
                else "holds a tab, a line end or another space character" if re.search(r"\s", x)
                else "holds '#' or '%' (a comment mark)" if re.search("[#%]", x)
                else "holds a NUL" if "\x00" in x else "is not valid Unicode text")
        hint = " (a .tsv or .csv pairs file takes labels with blanks)" if sep == " " and " " in x.strip(" ") else ""
        raise DistGrailError(f"{path}: node label {x!r} {what}: the pairs file's lines would not read it back{hint}; "
                             "ask about it with "
                             "Index.query in Python instead")
