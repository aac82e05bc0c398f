"""The user's node labels ↔ distgrail's vertex ids 0..n-1.

Graphs given with their own node labels (a networkx graph, a dict of successor lists, an edge
array of strings) are numbered 0..n-1 internally. Integer labels that are exactly 0..n-1 keep
their ids and need no map; any other labels (integers or strings, not mixed) are stored in the
index (``/vertex/label`` int64, or ``/vertex/label_utf8`` + ``/vertex/label_offsets``), and
:meth:`distgrail.Index.query` / ``reachable`` / ``distgrail query`` then take labels, not ids.
"""

from __future__ import annotations

import numpy as np

from .errors import GraphFormatError, QueryError, id_range

__all__ = ["NodeLabels", "labelled_graph", "as_column", "check_label_kind", "object_ids"]


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def as_column(values) -> np.ndarray:
    """A batch's ``sources`` or ``targets`` as an array, as ``np.asarray`` makes it, but for a list
    or tuple whose items NumPy would turn into another kind: a bool among integers (NumPy makes
    ``[0, True]`` the ids 0 and 1) or a number or None among strings (``[1, "a"]`` the labels
    ``"1"`` and ``"a"``). That one is kept as a 1-D object array of the items as given, which the
    checks after refuse, naming the first item of the wrong type, where NumPy's conversion
    answered for another vertex."""
    a = np.asarray(values)
    if isinstance(values, (list, tuple)) and a.ndim == 1 and a.dtype.kind in "iuU":
        kinds = set(map(type, values))  # (one pass in C: the items' few types, not a test of each item)
        if a.dtype.kind == "U":
            odd = any(not issubclass(k, str) for k in kinds)
        else:  # (a float or a string makes no int array: a bool is what NumPy makes an int)
            odd = any(issubclass(k, (bool, np.bool_)) for k in kinds)
        if odd:
            a = np.empty(len(values), dtype=object)
            a[:] = list(values)
    return a


def _first_not(v: np.ndarray, ok) -> int | None:
    """The flat position of the first item of the object array ``v`` that fails ``ok``, or None."""
    return next((k for k, x in enumerate(v.flat) if not ok(x)), None)


def check_label_kind(v: np.ndarray, kind: str, what: str) -> None:
    """The QueryError of a batch's column ``v`` (``sources`` or ``targets``) whose values are not
    node labels of ``kind`` (``"int"``: integers, an object array of Python ints too; ``"str"``:
    strings), naming the first item of another type in an object array; nothing when they are."""
    if v.size == 0:
        return
    want, ok = ("integer", _is_int) if kind == "int" else ("string", lambda x: isinstance(x, str))
    if v.dtype.kind == "O":
        i = _first_not(v, ok)
        if i is not None:
            raise QueryError(f"{what}[{i}]: this index takes the graph's {want} node labels, got "
                             f"{type(v.flat[i]).__name__} {v.flat[i]!r}")
    elif v.dtype.kind not in ("iu" if kind == "int" else "U"):
        raise QueryError(f"{what}: this index takes the graph's {want} node labels, got {v.dtype} "
                         f"values such as {v.flat[0]!r}")


def object_ids(v: np.ndarray, n: int, what: str) -> np.ndarray:
    """An object array of vertex ids (Python ints, as a list holding one past 64 bits gives it) as
    int64, once every item is an integer (not a bool) in ``0 .. n-1``: else the QueryError
    :meth:`distgrail.Index.query` gives for a bad id, naming the first bad item as given (where
    the object dtype itself was all that the error said)."""
    i = _first_not(v, _is_int)
    if i is not None:
        x = v.flat[i]
        raise QueryError(f"{what}[{i}]: vertex ids must be integers, got {type(x).__name__} {x!r}")
    i = _first_not(v, lambda x: 0 <= x < n)
    if i is not None:
        raise QueryError(f"{what}[{i}] {id_range(n, whose='the index')}, got {int(v.flat[i])!r}")
    return v.astype(np.int64)


class NodeLabels:
    """Labels of vertex ids 0..n-1: ``values[i]`` is the label of vertex i (int64 or str array)."""

    def __init__(self, values: np.ndarray):
        self.values = values
        self.kind = "str" if values.dtype.kind == "U" else "int"
        self._order = np.argsort(values, kind="stable")
        self._sorted = values[self._order]
        if values.size > 1 and (self._sorted[1:] == self._sorted[:-1]).any():
            k = int(np.flatnonzero(self._sorted[1:] == self._sorted[:-1])[0])
            raise GraphFormatError(f"node label {self._sorted[k].item()!r} appears twice")

    def __len__(self):
        return int(self.values.size)

    @classmethod
    def of(cls, labels) -> "NodeLabels | None":
        """Labels from a sequence (all integers or all strings); None when they are 0..n-1 in order."""
        labels = list(labels)
        if all(_is_int(x) for x in labels):
            try:
                vals = np.array(labels, dtype=np.int64)
            except OverflowError:
                raise GraphFormatError("integer node labels must fit in 64 bits") from None
            if np.array_equal(np.sort(vals), np.arange(vals.size)):
                return None  # 0..n-1 in any order: the labels are the ids
            return cls(vals)
        if all(isinstance(x, str) for x in labels):
            return cls(np.array(labels, dtype=str) if labels else np.zeros(0, dtype="<U1"))
        bad = [x for x in labels if not (_is_int(x) or isinstance(x, str))]
        kinds = f"got {type(bad[0]).__name__} {bad[0]!r}" if bad else "integers and strings mixed"
        raise GraphFormatError(f"node labels must be all integers or all strings ({kinds})")

    # -- in the index file ----------------------------------------------------------------
    def arrays(self) -> dict:
        """The index datasets of the labels, made once (the same arrays on every call: an index
        file written while the build runs puts them early, and the assembled index holds them)."""
        made = self.__dict__.get("_arrays")
        if made is not None:
            return dict(made)
        if self.kind == "int":
            made = {"vertex/label": self.values.astype(np.int64)}
        else:
            enc = [s.encode("utf-8") for s in self.values.tolist()]
            off = np.zeros(len(enc) + 1, dtype=np.int64)
            np.cumsum([len(b) for b in enc], out=off[1:])
            made = {"vertex/label_utf8": np.frombuffer(b"".join(enc), dtype=np.uint8), "vertex/label_offsets": off}
        self.__dict__["_arrays"] = made
        return dict(made)

    @classmethod
    def from_arrays(cls, arrays: dict, path: str = "") -> "NodeLabels | None":
        if "vertex/label" in arrays:
            return cls(arrays["vertex/label"].astype(np.int64))
        if "vertex/label_utf8" in arrays:
            blob = arrays["vertex/label_utf8"].tobytes()
            off = arrays["vertex/label_offsets"].tolist()
            try:
                vals = [blob[a:b].decode("utf-8") for a, b in zip(off[:-1], off[1:])]
            except UnicodeDecodeError as e:
                from .errors import IndexFormatError

                raise IndexFormatError(f"{path}: damaged index: dataset /vertex/label_utf8 is not UTF-8 ({e})") \
                    from None
            return cls(np.array(vals, dtype=str) if vals else np.zeros(0, dtype="<U1"))
        return None

    # -- queries ----------------------------------------------------------------------------
    def contains(self, values: np.ndarray) -> np.ndarray:
        """Whether each of ``values`` (of the labels' kind: int64 or str) is a label: a binary search
        in the sorted labels (``np.isin`` sorts the values too)."""
        return self.lookup(values)[1]

    def lookup(self, values: np.ndarray):
        """``(ids, found)`` of ``values`` (of the labels' kind: int64 or str), one binary search in
        the sorted labels: each value's vertex id (int64; meaningless where not found) and whether
        it is a label. A pairs reader checks and maps its labels in one pass with it."""
        v = np.asarray(values)
        if not self._sorted.size or not v.size:
            return np.zeros(v.shape, dtype=np.int64), np.zeros(v.shape, dtype=bool)
        pos = np.minimum(np.searchsorted(self._sorted, v), self._sorted.size - 1)
        return self._order[pos].astype(np.int64), self._sorted[pos] == v

    def to_ids(self, values, what: str) -> np.ndarray:
        """Vertex ids of the labels ``values`` (1-D); QueryError naming the first unknown label."""
        v = np.asarray(values)
        if v.size == 0:
            return np.zeros(v.shape, dtype=np.int64)
        check_label_kind(v, self.kind, what)
        if self.kind == "int":
            if v.dtype.kind == "O":  # Python ints, some past 64 bits?
                i = _first_not(v, lambda x: -2**63 <= x < 2**63)
                if i is not None:
                    raise QueryError(f"{what}[{i}]: node {int(v.flat[i])!r} is not in the graph")
                v = v.astype(np.int64)
            past = v > np.iinfo(np.int64).max if v.dtype == np.uint64 else None  # (no label: they would wrap)
            v = v.astype(np.int64)
        else:
            past = None
            if v.dtype.kind == "O":
                v = v.astype(str)
        pos = np.minimum(np.searchsorted(self._sorted, v), max(self._sorted.size - 1, 0))
        found = self._sorted.size > 0 and self._sorted[pos] == v
        found = np.broadcast_to(found, v.shape)
        if past is not None and past.any():
            found = found & ~past
        if not found.all():
            i = int(np.flatnonzero(~found)[0])
            shown = np.asarray(values).flat[i].item() if past is not None else v.flat[i].item()
            raise QueryError(f"{what}[{i}]: node {shown!r} is not in the graph")
        return self._order[pos].astype(np.int64)


def labelled_graph(nodes, edges, name: str):
    """(n, src, dst, NodeLabels or None) of a graph given by its node labels and label edges."""
    labels = NodeLabels.of(nodes)
    n = len(nodes)
    if labels is None:  # integer labels 0..n-1 keep their ids
        e = np.array(list(edges), dtype=np.int64).reshape(-1, 2)
        return n, e[:, 0], e[:, 1], None
    pos = {x: i for i, x in enumerate(nodes)}
    try:
        e = np.array([(pos[a], pos[b]) for a, b in edges], dtype=np.int64).reshape(-1, 2)
    except KeyError as k:
        raise GraphFormatError(f"edge endpoint {k.args[0]!r} is not a node of the graph", path=name) from None
    return n, e[:, 0], e[:, 1], labels
