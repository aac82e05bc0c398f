"""A patched index's base file: its name, how a main file names it, the seal of the patch, and
the removal of base links no index uses any more (the layout: :mod:`~distgrail.indexfile.patch`).

A patched index is its main file and a hard link to the un-patched index it patches (its *base*),
``<index>.<tag>.base`` beside it (:func:`base_name`; the tag is the first 8 hex digits of the
patch's random id, :data:`PATCH_BUILD`), as a split index is its main file and its parts. The
main file names the link in its root attribute :data:`PATCH_BASE` (a base name only: the link
lies in the main file's directory, links followed). A link goes, like a replaced split index's
parts, once no index file in its directory names it (:func:`remove_bases`, run after every index
written there: :func:`~distgrail.indexfile.write.remove_orphans`), unless a live process is
writing a patched index of that tag (its marker, :func:`~distgrail.indexfile.layout.pending_name`).
"""

from __future__ import annotations

import os
import re

import numpy as np

from ..errors import DistGrailError, IndexFormatError
from ..io.atomic import remove_names
from .layout import FORMAT, attr_carried, datasets_seal, root_attrs

__all__ = ["PATCH_PREFIX", "PATCH_BASE", "PATCH_BUILD", "PATCH_BASE_SEAL", "PATCH_BASE_ATTRS", "PATCH_SEAL",
           "PatchNotPossible", "base_name", "base_path", "patch_base", "patch_seal", "remove_bases"]

#: every root attribute of a patched main file that the index's own seals leave out starts so
#: (:func:`~distgrail.indexfile.layout.attributes_seal` skips them; :data:`PATCH_SEAL` covers them)
PATCH_PREFIX = "patch_"
#: root attribute: the base link's file name, beside the main file
PATCH_BASE = "patch_base"
#: root attribute: the patch's random id (hex); the base link's tag is its first 8 digits
PATCH_BUILD = "patch_build"
#: root attributes: the base's two seals (``crc32_of_datasets``, ``blake3_of_attributes``) when
#: the patch was written: a base replaced since (another index under the link's name) differs
PATCH_BASE_SEAL = "patch_base_seal"
PATCH_BASE_ATTRS = "patch_base_attributes"
#: root attribute: BLAKE3 over the patch attributes, the main file's own datasets and the patch
#: groups' attributes (:func:`patch_seal`)
PATCH_SEAL = "patch_seal"
#: the main file's group of patches, one subgroup per patched dataset
PATCH_GROUP = "patch"


class PatchNotPossible(DistGrailError):
    """A patched index cannot be written here (the base cannot be hard-linked beside the output:
    another file system, no permission; the base is split, patched, of an earlier release, or of
    other counts): write the index whole instead."""


def base_name(path, build: str) -> str:
    """The path of the base link of the patched index at ``path`` written by patch ``build``:
    ``<path>.<first 8 hex digits of build>.base`` (:func:`~distgrail.indexfile.layout.part_name`'s
    convention)."""
    return f"{os.fspath(path)}.{build[:8]}.base"


def base_path(path, name: str) -> str:
    """Where the base ``name`` (the main file's :data:`PATCH_BASE`) of the index at ``path`` lies:
    beside the main file, links followed (as a split index's parts)."""
    return os.path.join(os.path.dirname(os.path.realpath(os.fspath(path))), name)


def _text(v):
    return v.decode(errors="replace") if isinstance(v, bytes) else (None if v is None else str(v))


def patch_base(path) -> str | None:
    """The path of the un-patched base file that the patched index at ``path`` reads; None when
    ``path`` is no patched index (an index written whole, a split one, no index). A file HDF5
    cannot read is an IndexFormatError naming it."""
    try:
        got = root_attrs(os.fspath(path), "format", PATCH_BASE)
    except OSError as e:
        raise IndexFormatError(f"{os.fspath(path)}: the index file cannot be read ({e})") from None
    if got is None or got[0] != FORMAT or not got[1]:
        return None
    return base_path(path, got[1])


def patch_seal(attrs: dict, entries: dict, groups: dict) -> str:
    """``"blake3:<hex>"`` over the patch's root attributes ``attrs`` (``{name: value}``, the
    :data:`PATCH_PREFIX` ones but :data:`PATCH_SEAL`), the main file's own datasets ``entries``
    (:func:`~distgrail.indexfile.layout.entry`'s, as the datasets' seal takes them) and every patch
    group's attributes ``groups`` (``{dataset: {attribute: value}}``): the root attribute
    :data:`PATCH_SEAL`, so that a patch dataset or group removed, added or replaced is seen."""
    import blake3

    h = blake3.blake3()
    for k in sorted(attrs):
        if k != PATCH_SEAL:
            h.update(f"{k}\0{_text(attrs[k])}\n".encode())
    h.update(datasets_seal(entries).encode() + b"\n")
    for name in sorted(groups):
        for k in sorted(groups[name]):
            a = np.asarray(groups[name][k])
            shown = a.tolist() if a.dtype.kind in "iu" else _text(groups[name][k])
            h.update(f"{name}\0{k}\0{a.dtype.str if a.dtype.kind in 'iu' else 'str'}\0{shown}\n".encode())
    return "blake3:" + h.hexdigest()


def _links(path, names) -> dict:
    """``{name: tag}`` of the files among ``names`` named as base links of the index at ``path``."""
    base = os.path.basename(os.path.abspath(os.fspath(path)))
    pat = re.compile(re.escape(base) + r"\.([0-9a-f]{8})\.base$")
    return {n: m.group(1) for n in names if (m := pat.match(n))}


def remove_bases(path, live=()) -> list:
    """Remove the base links of patched indexes at ``path`` (:func:`base_name`'s names beside it)
    that no index file in the directory names any more, but those of tags ``live`` (a patched
    write in flight: its link is made before its main file lands); none when a file there cannot
    be read. The names removed; never an error."""
    d = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        names = os.listdir(d)
    except OSError:
        return []
    links = {n: t for n, t in _links(path, names).items() if t not in set(live)}
    if not links:
        return []
    # (the base names the index files there name: base links themselves and temporaries name none)
    named = attr_carried(d, names, PATCH_BASE, set(_links(path, names)).__contains__)
    if named is None:
        return []
    return remove_names(d, sorted(set(links) - named))
