"""The HDF5 index file (schema version 2; version 1 is still read), readable with plain h5py:
its layout (:mod:`~distgrail.indexfile.layout`), writing (:mod:`~distgrail.indexfile.write`) and
reading with every check (:mod:`~distgrail.indexfile.read`).

Layout::

    /                attrs: format="distgrail-index", format_version, distgrail_version, seed,
                     dims, parent_rule, source_name, source_digest, source_digest_algorithm
                     ("blake3"; indexes of earlier releases: source_sha256 instead, read as
                     algorithm "sha256"), n_vertices, n_components, n_dag_edges, n_levels;
                     optional supports (K, 0 or absent: none), components_by_level (1 or
                     absent: dag/level non-decreasing, as a build writes it; 0: not, the ids an
                     update kept, with dead rows no vertex maps to)
    /vertex/component     (n,)        component of each input vertex
    /dag/indptr           (C+1,)      CSR of the condensed DAG, components sorted by level
                                      (unless components_by_level = 0)
    /dag/indices          (m,)
    /dag/level            (C,)        longest-path level
    /forest/parent        (C,)        DT parent, -1 for roots (phase 1)
    /forest/subtree_size  (C,)        DT subtree sizes (phase 2)
    /labels/dt_post0      (C,)        DT post-order rank of dimension 0 (phase 3)
    /labels/intervals     (dims, C, 2)  [min, max] rank over DAG descendants (phase 4)
    optional, v2:
    /vertex/label         (n,) int64  the user's integer node labels (vertex id i has label[i])
    /vertex/label_utf8, /vertex/label_offsets   (bytes,) uint8 and (n+1,) int64: string node
                          labels, label i = utf8[offsets[i]:offsets[i+1]]
    /supports/ids         (K,)        support components; /supports/out, /supports/in (C, W)
                          uint64 reach bit masks, W = ceil(K/64)

Version 2 (this version) differs from 1 by its sibling order (labels differ, answers do not), by
checksums on every non-empty dataset and by the optional datasets above. Integer arrays use the
smallest type that holds their values. Checksums: datasets are stored contiguous (no filter: plain
h5py reads them, at random too) with the CRC-32 of every ``CRC_BLOCK`` bytes of their raw
little-endian contents in the dataset attribute ``crc32`` (uint32 array; ``crc32_block`` = the
block size), computed by a thread pool while the datasets are written and checked the same way
when read; large datasets are cast, written and checksummed in parallel blocks
(:mod:`~distgrail.indexfile.write`) and read likewise (:mod:`~distgrail.indexfile.read`). Files of
earlier distgrail releases keep HDF5's fletcher32 filter on chunks of at most 256 KiB instead;
they are read and checked as before (HDF5 verifies each chunk). A non-empty dataset with neither
is damaged, whatever ``format_version`` says; the one exception is a file as the first releases
wrote it (version 1: no checksum on any dataset, ``source_sha256``, the eight core datasets only),
read with its values checked but without checksums.

The root attribute ``crc32_of_datasets`` (since this release) seals the set: ``"blake3:<hex>"``
over every dataset's name, type, shape, ``crc32_block`` and ``crc32`` list, sorted by name
(:func:`datasets_seal`), so a dataset whose checksum attributes were deleted, or a dataset
removed, added or replaced, is seen. A file that carries it must match it; files written before
it carry none and get the per-dataset checks above only. ``blake3_of_attributes`` (written last)
seals every other root attribute but ``crc32_of_datasets`` the same way (:func:`attributes_seal`): the input's name and
digest, the seed, the parent rule and the counts, which no dataset checksum covers.

The file is written (:func:`write_index_file`, :class:`EarlyIndexFile`) to a temporary name
beside the target and renamed when complete, so a failed run leaves nothing.
:func:`read_index_file` checks the checksums, shapes, dtypes and value ranges: a damaged or
incomplete index raises :class:`IndexFormatError` naming the dataset, it never gives answers. Any
error of HDF5 while the file is opened or read (a damaged header, attribute or object message) is
such an error too, naming the attribute or dataset being read; a FIFO or device is refused before
it is opened. A split index's main file that HDF5 would crash or loop in is opened first in another
process (:mod:`~distgrail.indexfile.probe`): a damaged index too, naming the file.

A *patched* index (:mod:`~distgrail.indexfile.patch`) is a main file holding only the rows an
update changed, over a hard link to the index it patches beside it; every reader applies the
patches on open and sees the index a whole write holds.
"""

from __future__ import annotations

from .layout import (ATTRS, ATTRS_SEAL, CHUNK_BYTES, CRC_BLOCK, FORMAT, FORMAT_VERSION, LIBVER, READ_VERSIONS, SEAL,
                     attributes_seal, block_crcs, block_size, crc_pool, datasets_seal, entry)
from .read import EDGE_CHECK_MAX, Deferred, check_index, check_index_path, read_index_file
from .patch import PatchNotPossible, patch_base, write_patched_index
from .write import PENDING_DIGEST, EarlyIndexFile, StreamedArray, write_index_file

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CHUNK_BYTES", "CRC_BLOCK", "LIBVER", "ATTRS", "SEAL", "ATTRS_SEAL",
           "read_index_file", "write_index_file", "EarlyIndexFile", "PENDING_DIGEST", "StreamedArray", "Deferred",
           "check_index", "check_index_path", "EDGE_CHECK_MAX", "block_crcs", "block_size", "datasets_seal", "entry",
           "crc_pool", "attributes_seal", "write_patched_index", "patch_base", "PatchNotPossible"]
