"""A patched index read (the layout: :mod:`~distgrail.indexfile.patch`): the main file's patch
attributes and groups taken while it is open (:func:`patch_of`), then :meth:`Patch.apply` reads
the base beside it (every check of an index read, against the base's own checksums), puts the
main file's whole datasets in place of the base's, scatters the patched rows into the base's
arrays and rebuilds the DAG's CSR around the rows written again. The result's seals are the ones
a whole write of the same arrays carries, so the reader's usual checks follow unchanged
(``check_index`` on the result, ``crc32_of_datasets`` against the result's datasets). Any problem
(the base missing, moved, replaced, itself patched; a patch that does not fit the base) is an
:class:`~distgrail.errors.IndexFormatError` naming the file.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import IndexFormatError
from .bases import (PATCH_BASE, PATCH_BASE_ATTRS, PATCH_BASE_SEAL, PATCH_BUILD, PATCH_GROUP, PATCH_PREFIX, PATCH_SEAL,
                    base_path, patch_seal)
from .layout import ATTRS_SEAL, FORMAT, SEAL, entry, root_attrs

__all__ = ["Patch", "patch_of", "patch_rows", "dataset_crcs", "AXIS1", "replace_rows", "csr_rows_replaced", "csr_rows_checked",
           "group_entry", "PatchedRows", "PatchedCSR"]

#: datasets whose rows run along axis 1 (``(dims, C, 2)``); every other one's along axis 0
AXIS1 = ("labels/intervals",)
#: a patch group's kinds: ``rows`` (``rows``, ``values``), ``csr`` (``rows``, ``offsets``,
#: ``values``: DAG rows written again) and ``derived`` (no datasets: ``dag/indptr`` of the CSR)
KINDS = ("rows", "csr", "derived")


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)


def group_entry(attrs) -> tuple:
    """The result dataset's part of the datasets' seal from its patch group's attributes:
    ``(dtype, shape, crc32_block, crc32)`` as :func:`~distgrail.indexfile.layout.entry` gives a
    whole dataset's."""
    crc = attrs.get("crc32")
    return (str(_text(attrs["dtype"])), tuple(int(x) for x in np.asarray(attrs["shape"]).reshape(-1)),
            attrs.get("crc32_block") if crc is not None else None, crc)


def patch_of(f, path):
    """The :class:`Patch` of the open main file ``f`` (None: not a patched index)."""
    attrs = f.attrs
    if PATCH_BASE not in attrs:
        return None
    try:
        mine = {k: _text(attrs[k]) for k in attrs if str(k).startswith(PATCH_PREFIX)}
        groups = {}
        g = f.get(PATCH_GROUP)
        if g is not None:
            g.visititems(lambda name, obj: groups.__setitem__(name, dict(obj.attrs)) if "kind" in obj.attrs else None)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as e:
        raise IndexFormatError(f"{path}: damaged index: its patch cannot be read (HDF5: {e})") from None
    for k in (PATCH_BASE, PATCH_BUILD, PATCH_BASE_SEAL, PATCH_BASE_ATTRS, PATCH_SEAL):
        if not isinstance(mine.get(k), str) or not mine[k]:
            raise IndexFormatError(f"{path}: damaged index: patched, but its attribute {k!r} is missing or not text")
    return Patch(os.fspath(path), mine, groups)


class Patch:
    """A patched main file's patch: its attributes ``attrs`` and ``groups`` (``{dataset:
    {attribute: value}}``), read while the file was open."""

    def __init__(self, path, attrs: dict, groups: dict):
        self.path, self.attrs, self.groups = path, attrs, groups
        self.base = base_path(path, attrs[PATCH_BASE])
        self.keep_rows, self.edges = False, None  # (apply's)

    def _bad(self, what):
        raise IndexFormatError(f"{self.path}: damaged index: {what}")

    def check_base(self) -> dict:
        """The base's dataset entries (its part of the result's seal), once the base is there, an
        un-patched index, and the one the patch was written over (its two seals)."""
        import h5py

        shown = os.path.basename(self.base)
        if not os.path.isfile(self.base):
            raise IndexFormatError(
                f"{self.path}: the base file {shown} of this patched index is missing (looked in "
                f"{os.path.dirname(self.base)}): a patched index is its main file and its base file (a hard link to "
                f"the index it patches), kept in one directory: restore {shown} there, or write the index again")
        try:
            got = root_attrs(self.base, "format", PATCH_BASE, SEAL, ATTRS_SEAL)
        except OSError as e:
            raise IndexFormatError(f"{self.path}: the base file {shown} cannot be read ({e})") from None
        if got is None or got[0] != FORMAT:
            raise IndexFormatError(f"{self.path}: the base file {shown} of this patched index is not a distgrail index")
        if got[1]:
            raise IndexFormatError(f"{self.path}: the base file {shown} is itself a patched index: a patch is read over "
                                   f"an index written whole")
        if (got[2], got[3]) != (self.attrs[PATCH_BASE_SEAL], self.attrs[PATCH_BASE_ATTRS]):
            raise IndexFormatError(f"{self.path}: the base file {shown} is not the index this patch was written over "
                                   f"(its seals differ: replaced since?): write the index again")
        entries = {}
        try:
            with h5py.File(self.base, "r") as f:
                f.visititems(lambda n, o: entries.__setitem__(n, entry(o)[0]) if isinstance(o, h5py.Dataset) else None)
        except (OSError, ValueError, KeyError, RuntimeError, TypeError) as e:
            raise IndexFormatError(f"{self.path}: the base file {shown} cannot be read (HDF5: {e})") from None
        return entries

    def apply(self, meta: dict, arrays: dict, seal, stats: dict, read, defer=(), keep_rows: bool = False):
        """``(meta, arrays, seal, stats)`` of the patched index from the main file's (``arrays``
        holds its datasets, checked against its checksums; ``seal``: ``(stored crc32_of_datasets,
        the main file's entries)``): the patch's seal checked, the base read with ``read``
        (:func:`~distgrail.indexfile.read.read_index_file`, its values left to the check of the
        result), the patches applied; ``seal`` becomes the result's entries. ``keep_rows``: the
        patched datasets among ``defer`` are left in the base too, each a :class:`PatchedRows`
        (the DAG's CSR: :class:`PatchedCSR`) carrying its rows, checked to fit, for a reader
        that applies them where it puts the base's bytes
        (:func:`~distgrail.indexfile.read_device.upload_datasets`)."""
        stored, mine = seal
        if self.attrs[PATCH_SEAL] != patch_seal(self.attrs, mine, self.groups):
            self._bad(f"its patch differs from the one it was written with (root attribute {PATCH_SEAL!r}): a patch "
                      f"dataset or its attributes were removed, added or replaced")
        entries = self.check_base()
        patched = set() if keep_rows else {n for n in self.groups}
        self.keep_rows, self.edges = keep_rows, meta.get("n_dag_edges")
        got = []
        _, base = read(self.base, defer=tuple(d for d in defer if d not in patched and d not in arrays),
                               values=False, seal_out=got)
        if got[0] != self.attrs[PATCH_BASE_SEAL]:
            raise IndexFormatError(f"{self.path}: the base file {os.path.basename(self.base)} is not the index this "
                                   f"patch was written over (its seal differs): write the index again")
        out = dict(base)
        own = {n: a for n, a in arrays.items() if not n.startswith(PATCH_GROUP + "/")}
        out.update(own)
        entries.update({n: e for n, e in mine.items() if n in own})
        rows = {}
        for name, g in sorted(self.groups.items()):
            kind = _text(g.get("kind"))
            if kind not in KINDS or name in own:
                self._bad(f"patch group /{PATCH_GROUP}/{name} is of kind {kind!r} or doubles a whole dataset")
            entries[name] = group_entry(g)
            if kind == "rows":
                rows[name] = self._rows(name, out, arrays)
        if "dag/indices" in self.groups:
            rows["dag"] = self._dag(out, arrays)
        for name in entries:
            if name not in out:
                self._bad(f"dataset /{name} is sealed but neither in the base nor in the patch")
        meta = dict(meta)
        meta["patched"] = {"base": os.path.basename(self.base), "rows": rows,
                           "whole": sorted(own)}
        stats = {n: s for n, s in (stats or {}).items() if n in own}
        return meta, out, (stored, entries), stats

    def _rows(self, name, out, arrays) -> int:
        """Scatter ``/patch/<name>``'s rows into ``out[name]``; the rows patched."""
        r, v = arrays.get(f"{PATCH_GROUP}/{name}/rows"), arrays.get(f"{PATCH_GROUP}/{name}/values")
        a = out.get(name)
        kept = self.keep_rows and hasattr(a, "spans")  # (a Deferred of the base)
        if r is None or v is None or a is None or not (isinstance(a, np.ndarray) or kept):
            self._bad(f"patch /{PATCH_GROUP}/{name} lacks its rows or values, or its dataset is not in the base")
        try:
            if kept:
                out[name] = PatchedRows(name, a, *rows_fitting(a.shape, a.dtype, name, r, v))
            else:
                replace_rows(a, name, r, v)
        except ValueError as e:
            self._bad(f"patch /{PATCH_GROUP}/{name}: {e}")
        return int(r.size)

    def _dag(self, out, arrays) -> int:
        """The DAG's CSR with ``/patch/dag/indices``' rows written again; the rows."""
        g = f"{PATCH_GROUP}/dag/indices"
        r, off, v = (arrays.get(f"{g}/{k}") for k in ("rows", "offsets", "values"))
        ip, ix = out.get("dag/indptr"), out.get("dag/indices")
        kept = self.keep_rows and (hasattr(ip, "spans") or hasattr(ix, "spans")) and \
            all(isinstance(x, np.ndarray) or hasattr(x, "spans") for x in (ip, ix))  # (either left in the base)
        if r is None or off is None or v is None or not (isinstance(ix, np.ndarray) and isinstance(ip, np.ndarray)
                                                         or kept) or "dag/indptr" not in self.groups:
            self._bad(f"patch /{g} lacks its rows, offsets or values, or /{PATCH_GROUP}/dag/indptr")
        try:
            if kept:  # (the result's edge count as its attributes say: the CSR made later is checked against it)
                rows = csr_rows_fitting(ip.size - 1, r, off, v)
                out["dag/indptr"] = PatchedCSR(ip, ix, *rows, part="dag/indptr", edges=self.edges)
                out["dag/indices"] = PatchedCSR(ip, ix, *rows, part="dag/indices", edges=self.edges)
            else:
                out["dag/indptr"], out["dag/indices"] = csr_rows_replaced(ip, ix, r, off, v)
        except ValueError as e:
            self._bad(f"patch /{g}: {e}")
        return int(r.size)


def dataset_crcs(path) -> dict:
    """``{dataset: (crc32_block, crc32)}`` of the one-file or patched index at ``path`` as read
    (a patched one's: its base's, then the main file's whole datasets' and its patch groups'): the
    block CRC-32s of the arrays a reader gets; datasets without checksums left out."""
    import h5py

    def crcs(f):
        out = {}

        def take(name, obj):
            if isinstance(obj, h5py.Dataset) and not name.startswith(PATCH_GROUP + "/"):
                e = entry(obj)[0]
                if e[3] is not None:
                    out[name] = (e[2], np.asarray(e[3]))

        f.visititems(take)
        return out

    try:
        with h5py.File(path, "r") as f:
            mine, patch = crcs(f), patch_of(f, path)
        if patch is None:
            return mine
        with h5py.File(patch.base, "r") as f:
            out = crcs(f)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as e:
        raise IndexFormatError(f"{path}: damaged index: its checksums cannot be read (HDF5: {e})") from None
    out.update(mine)
    for name, g in patch.groups.items():
        e = group_entry(g)
        if e[3] is not None:
            out[name] = (e[2], np.asarray(e[3]))
    return out


def patch_rows(path) -> dict:
    """The rows the patched index at ``path`` holds, relative to its base: ``{dataset: sorted int64
    rows}`` (``"dag"``: the DAG rows written again); empty for an index written whole. What an
    update patching it again over the same base writes at least (its own rows joined to them)."""
    import h5py

    out = {}
    try:
        with h5py.File(path, "r") as f:
            g = f.get(PATCH_GROUP)
            if g is None:
                return out

            def take(name, obj):
                if isinstance(obj, h5py.Group) and "kind" in obj.attrs and "rows" in obj:
                    out["dag" if name == "dag/indices" else name] = np.asarray(obj["rows"], dtype=np.int64)

            g.visititems(take)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError) as e:
        raise IndexFormatError(f"{path}: damaged index: its patch cannot be read (HDF5: {e})") from None
    return out


def _check_rows(rows, count: int) -> np.ndarray:
    r = np.asarray(rows)
    if r.ndim != 1 or r.dtype.kind not in "iu":
        raise ValueError(f"rows must be a 1-D integer array, got {r.dtype} {r.shape}")
    r = r.astype(np.int64, copy=False)
    if r.size and (int(r[0]) < 0 or int(r[-1]) >= count or (r[1:] <= r[:-1]).any()):
        raise ValueError(f"rows must be sorted, distinct and in 0..{count - 1}")
    return r


class PatchedRows:
    """A patched dataset left in the base (``Patch.apply(keep_rows=True)``): ``base``, a
    :class:`~distgrail.indexfile.read.Deferred` of the base's bytes, and the patch's ``rows``
    (sorted int64, along axis 1 for :data:`AXIS1`) and ``values`` (host arrays, checked to fit:
    :func:`rows_fitting`) to put over them; the result's ``shape`` and ``dtype``."""

    def __init__(self, name: str, base, rows, values):
        self.name, self.base, self.rows, self.values = name, base, rows, values
        self.shape, self.dtype, self.size = base.shape, base.dtype, base.size


class PatchedCSR:
    """The DAG's CSR of a patched index left in the base (``Patch.apply(keep_rows=True)``):
    ``ip``, ``ix`` the base's offsets and indices (each a :class:`~distgrail.indexfile.read.Deferred`
    or, small, read),
    the rows written again (``rows``, ``offsets``, ``values``: :func:`csr_rows_fitting`); ``part``
    the dataset this stands for (``dag/indptr`` or ``dag/indices``), of the result's ``shape``
    (the indices': ``edges``, the count the index's attributes give, which the CSR made from
    them is checked against)."""

    def __init__(self, ip, ix, rows, offsets, values, part: str, edges=None):
        self.ip, self.ix, self.rows, self.offsets, self.values, self.part = ip, ix, rows, offsets, values, part
        if part == "dag/indptr":
            self.shape, self.dtype = ip.shape, ip.dtype
        else:
            ok = isinstance(edges, (int, np.integer)) and not isinstance(edges, (bool, np.bool_)) and edges >= 0
            self.shape, self.dtype = ((int(edges),) if ok else ix.shape), ix.dtype
        self.size = int(np.prod(self.shape))


#: rows per piece of :func:`csr_rows_replaced` and :func:`replace_rows` run on a host thread
#: (fewer: one piece)
CSR_PIECE_ROWS = 1 << 20


def replace_rows(a: np.ndarray, name: str, rows, values) -> None:
    """``a[rows] = values`` in place along the rows axis of dataset ``name`` (axis 1 for
    :data:`AXIS1`, else 0); ValueError when they do not fit (rows unsorted or out of range, values
    of another shape or type)."""
    ax = 1 if name in AXIS1 else 0
    r, v = rows_fitting(a.shape, a.dtype, name, rows, values)
    from ..arrays import HOST_THREADS, _run_pieces

    def piece(lo, hi):  # (a scatter of its own rows on each host thread: numpy lets go of the GIL)
        if ax:
            a[:, r[lo:hi]] = v[:, lo:hi]
        else:
            a[r[lo:hi]] = v[lo:hi]

    T = int(max(1, min(HOST_THREADS, r.size // CSR_PIECE_ROWS)))
    _run_pieces(piece, [(p * r.size // T, (p + 1) * r.size // T) for p in range(T)])


def rows_fitting(shape, dtype, name: str, rows, values) -> tuple:
    """``(rows as int64, values)`` of a patch of dataset ``name`` (``shape``, ``dtype``) along its
    rows axis (axis 1 for :data:`AXIS1`, else 0); ValueError when they do not fit (rows unsorted
    or out of range, values of another shape or type)."""
    ax = 1 if name in AXIS1 else 0
    shape = tuple(int(x) for x in shape)
    r = _check_rows(rows, shape[ax] if len(shape) > ax else 0)
    v = np.asarray(values)
    want = shape[:ax] + (r.size,) + shape[ax + 1:]
    if v.shape != want or v.dtype != np.dtype(dtype):
        raise ValueError(f"values of {v.dtype} {v.shape}, expected {np.dtype(dtype)} {want}")
    return r, v


def csr_rows_checked(ip, rows, offsets, values) -> tuple:
    """``(rows, offsets, values)`` of DAG rows written again over the CSR of offsets ``ip``, rows
    and offsets as int64: ValueError unless the rows are sorted, distinct and in range and the
    offsets ``len(rows) + 1`` non-decreasing values from 0 to ``len(values)``."""
    return csr_rows_fitting(np.asarray(ip).size - 1, rows, offsets, values)


def csr_rows_fitting(count: int, rows, offsets, values) -> tuple:
    """:func:`csr_rows_checked` over a CSR of ``count`` rows."""
    r = _check_rows(rows, int(count))
    off = np.asarray(offsets).astype(np.int64, copy=False)
    v = np.asarray(values)
    if off.shape != (r.size + 1,) or (r.size and (int(off[0]) != 0 or (off[1:] < off[:-1]).any())) \
            or int(off[-1] if off.size else 0) != v.size:
        raise ValueError(f"offsets must be {r.size + 1} non-decreasing values from 0 to {v.size}")
    return r, off, v


def csr_rows_replaced(ip, ix, rows, offsets, values) -> tuple:
    """``(indptr, indices)``: the CSR ``(ip, ix)`` with rows ``rows`` (sorted, distinct) replaced by
    ``values[offsets[i]:offsets[i+1]]`` (``offsets``: ``len(rows) + 1`` of them, from 0), every
    other row kept; vectorised, in pieces of :data:`CSR_PIECE_ROWS` rows over the host threads
    (each piece's offsets from the sizes of the pieces before it: one pass over the entries).
    ValueError when they do not fit."""
    from ..arrays import HOST_THREADS, _run_pieces

    ip = np.asarray(ip)
    C = ip.size - 1
    r, off, v = csr_rows_checked(ip, rows, offsets, values)
    v = v.astype(ix.dtype, copy=False)
    T = int(max(1, min(4 * HOST_THREADS, C // CSR_PIECE_ROWS)))
    bounds = np.linspace(0, C, T + 1).astype(np.int64)
    at = np.searchsorted(r, bounds)  # the replaced rows of piece p: r[at[p]:at[p + 1]]
    grown = np.diff(off) - (ip[r + 1].astype(np.int64) - ip[r].astype(np.int64))
    grew = np.zeros(r.size + 1, np.int64)
    np.cumsum(grown, out=grew[1:])
    per = ip[bounds[1:]].astype(np.int64) - ip[bounds[:-1]].astype(np.int64) + grew[at[1:]] - grew[at[:-1]]
    starts = np.zeros(T + 1, np.int64)
    np.cumsum(per, out=starts[1:])
    nip = np.empty(C + 1, np.int64)
    nip[0] = 0
    nix = np.empty(int(starts[-1]), dtype=ix.dtype)

    def piece(p):
        c0, c1, i0, i1 = int(bounds[p]), int(bounds[p + 1]), int(at[p]), int(at[p + 1])
        e0, e1 = int(ip[c0]), int(ip[c1])
        lip = np.empty(c1 - c0 + 1, np.int64)  # this piece's new offsets (rows c0..c1)
        lip[0] = starts[p]
        cnt = np.diff(ip[c0:c1 + 1]).astype(np.int64)
        rr = r[i0:i1] - c0
        cnt[rr] = np.diff(off[i0:i1 + 1])
        np.cumsum(cnt, out=lip[1:])
        lip[1:] += starts[p]
        nip[c0 + 1:c1 + 1] = lip[1:]
        out = nix[starts[p]:starts[p + 1]]
        if i1 == i0:
            out[...] = ix[e0:e1]
            return
        keep = np.ones(e1 - e0, bool)
        keep[_positions(ip, r[i0:i1]) - e0] = False
        new = np.zeros(out.size, bool)
        new[_positions(lip, rr) - starts[p]] = True
        out[~new] = ix[e0:e1][keep]
        out[new] = v[off[i0]:off[i1]]

    _run_pieces(piece, [(p,) for p in range(T)])
    return nip, nix


def _positions(ip, rows) -> np.ndarray:
    """The entry positions of CSR rows ``rows`` (offsets ``ip``), row by row."""
    lo, hi = ip[rows].astype(np.int64), ip[rows + 1].astype(np.int64)
    k = hi - lo
    if not int(k.sum()):
        return np.zeros(0, np.int64)
    start = np.repeat(lo - np.concatenate([[0], np.cumsum(k)[:-1]]), k)
    return start + np.arange(int(k.sum()), dtype=np.int64)
