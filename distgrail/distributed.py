"""MPI distribution: GPU binding, the index built across ranks, query batches sharded over ranks.

Nothing here runs at import time; ``mpi4py.MPI`` is imported by the functions that need it.

Building (:func:`build_index_distributed`)
    Rank 0 reads the graph and condenses it; the DAG is broadcast without its reverse CSR
    (:data:`ROOT_ONLY_DAG`: only phase 1 reads it, and phase 1 runs on rank 0; on the other
    ranks those fields are None). Rank 0 computes phases 1–2
    (the spanning forest and its subtree sizes) once and broadcasts them. The d dimensions are
    split into contiguous blocks, one per rank (rank r gets ``d // P`` dimensions, one more if
    ``r < d % P``; ranks beyond d get none and wait). Phases 3–4 run on every rank for its
    block, which it writes straight into its node's shared label array
    (:mod:`distgrail.nodeshare`); node leaders exchange the blocks of other nodes. Without
    shared memory (``DISTGRAIL_SHM=0``, or /dev/shm too small) the blocks are gathered to rank
    0 and broadcast back instead. Rank 0 writes the one HDF5 index (atomically), and **every
    rank returns the same, complete Index**.
    Dimension i depends only on (seed, i), so the index is byte-identical to a one-process build.

Querying (:func:`query_sharded`)
    Rank 0 holds the pairs (other ranks may pass ``None``). The batch is cut into contiguous
    shards in input order (Scatterv), each rank answers its shard locally, and the answers are
    gathered in input order (Gatherv) and broadcast: **every rank returns the same answers and
    the same merged** :class:`~distgrail.query.QueryStats` (counts summed over ranks, ``ranks``
    = communicator size, ``seconds`` = wall time of the whole sharded call on the slowest rank).

Failures
    Every fallible step (choosing the backend, reading, condensing, labeling, allocating,
    writing, answering) runs through :func:`run_shared`: its outcome is reduced over the ranks,
    and if any rank failed, every rank raises :class:`RankError` naming the lowest failing rank
    and the original message. Nothing is left half-written and no rank waits forever. Errors
    outside these steps (a bug, an interrupt) should end the job: launch with
    ``python -m mpi4py -m distgrail ...``, which calls ``MPI_Abort`` on an uncaught exception.

Big arrays travel as raw bytes through buffer-based collectives (``Bcast``, ``Scatterv``,
``Gatherv``), in rounds of at most :data:`CHUNK_BYTES` so that no count passes MPI's 32-bit
limit. Only small headers (shapes, dtypes, names, statistics) are pickled.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import fields
from types import SimpleNamespace

import numpy as np

from .backend import BACKENDS, get_backend, gpu_available
from .condense import DAG, condense
from .errors import BackendError, DistGrailError
from .graph import as_graph
from .indexfile import smallest_uint
from .labeling import Forest, build_forest, check_label_args, label_dimensions, prefetch_csr
from .nodeshare import NodeGroups, room_for, shm_enabled
from .progress import Stages

__all__ = ["RankError", "bind_gpu", "build_index_distributed", "query_sharded", "run_shared",
           "split_counts", "CHUNK_BYTES"]

#: most bytes one collective call moves (below 2^31 so every MPI count and displacement fits)
CHUNK_BYTES = 1 << 30


class RankError(DistGrailError):
    """An error raised on one rank of a distributed run and re-raised on every rank.

    Attributes
    ----------
    rank : int         the (lowest) rank that failed
    step : str         what that rank was doing
    failed_ranks : list of int   every rank that failed in that step
    original_type : str          class name of the original exception
    """

    def __init__(self, message, rank, step, failed_ranks, original_type, comm_rank):
        super().__init__(message)
        self.rank = rank
        self.step = step
        self.failed_ranks = failed_ranks
        self.original_type = original_type
        #: the rank of the process that raised this copy (the CLI prints on rank 0 only)
        self.comm_rank = comm_rank


# -- communicators and error sharing -----------------------------------------------------------

def _mpi():
    from mpi4py import MPI

    return MPI


def _own_comm(comm):
    """``(comm, owned)``: ``comm``, or a clone of COMM_WORLD (to be freed) when it is None."""
    if comm is not None:
        if not hasattr(comm, "Get_rank") or not hasattr(comm, "Bcast"):
            raise DistGrailError(f"comm must be an mpi4py communicator, got {comm!r}")
        return comm, False
    return _mpi().COMM_WORLD.Clone(), True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, DistGrailError):
        return str(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def share_outcome(comm, step: str, error: BaseException | None) -> None:
    """Collective: raise :class:`RankError` on every rank if ``error`` is set on any rank.

    The lowest failing rank broadcasts its message; the others learn which ranks failed.
    """
    size = comm.Get_size()
    me = comm.Get_rank()
    failed = comm.allgather(error is not None)
    if not any(failed):
        return
    ranks = [r for r in range(size) if failed[r]]
    root = ranks[0]
    info = comm.bcast((_describe(error), type(error).__name__) if me == root else None, root=root)
    msg, typ = info
    others = f" (and on rank{'s' if len(ranks) > 2 else ''} {', '.join(map(str, ranks[1:]))})" \
        if len(ranks) > 1 else ""
    err = RankError(f"rank {root}{others}, {step}: {msg}", root, step, ranks, typ, me)
    if me == root:
        raise err from error
    raise err from None


def run_shared(comm, step: str, fn=None, *args, **kwargs):
    """Collective: call ``fn(*args, **kwargs)`` (when ``fn`` is not None) and share any failure.

    Every rank must call this, including ranks with nothing to do (``fn=None``); it returns
    ``fn``'s result, or None. An exception on any rank becomes a :class:`RankError` on all.
    """
    out, error = None, None
    if fn is not None:
        try:
            out = fn(*args, **kwargs)
        except Exception as e:  # shared below; BaseException (interrupts) ends the job instead
            error = e
    share_outcome(comm, step, error)
    return out


def split_counts(total: int, parts: int) -> np.ndarray:
    """Contiguous split of ``total`` items over ``parts`` ranks; earlier ranks get the extra ones.

    >>> split_counts(5, 3).tolist(), split_counts(2, 4).tolist()
    ([2, 2, 1], [1, 1, 0, 0])
    """
    base, extra = divmod(int(total), int(parts))
    return np.array([base + (r < extra) for r in range(parts)], dtype=np.int64)


def _offsets(counts) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


# -- buffer-based transfers (chunked) ----------------------------------------------------------

def _bytes(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.uint8)


def bcast_array(comm, a, root: int = 0) -> np.ndarray:
    """Collective: ``a`` from ``root`` on every rank (header pickled, data by ``Bcast``)."""
    MPI = _mpi()
    me = comm.Get_rank()
    if me == root:
        a = np.ascontiguousarray(a)
        head = (a.shape, a.dtype.str)
    else:
        head = None
    shape, dt = comm.bcast(head, root=root)
    got = run_shared(comm, f"allocating {np.dtype(dt).name} {tuple(shape)} to receive a broadcast",
                     (lambda: np.empty(shape, dtype=np.dtype(dt))) if me != root else None)
    if me != root:
        a = got
    b = _bytes(a)
    for lo in range(0, b.size, CHUNK_BYTES):
        comm.Bcast([b[lo:lo + CHUNK_BYTES], MPI.BYTE], root=root)
    return a


def gather_rows(comm, block: np.ndarray, counts, out=None, root: int = 0):
    """Collective: concatenate every rank's ``block`` along axis 0, in rank order, into ``out`` on root.

    ``counts[r]`` is rank r's number of rows, known on every rank; ``out`` (root only) must be a
    C-contiguous array of ``sum(counts)`` rows of the blocks' row shape and dtype.
    """
    MPI = _mpi()
    me, size = comm.Get_rank(), comm.Get_size()
    block = np.ascontiguousarray(block)
    row = block.dtype.itemsize * int(np.prod(block.shape[1:], dtype=np.int64))
    nbytes = np.asarray(counts, dtype=np.int64) * row
    off = _offsets(nbytes)
    mine = _bytes(block)
    dest = _bytes(out) if me == root else None
    if off[-1] <= CHUNK_BYTES:  # the usual case: one call, straight into the result
        recv = [dest, nbytes.tolist(), off[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Gatherv([mine, MPI.BYTE], recv, root=root)
        return out
    piece = max(1, CHUNK_BYTES // size)
    for lo in range(0, int(nbytes.max()), piece):
        c = np.clip(nbytes - lo, 0, piece)
        d = _offsets(c)
        tmp = np.empty(int(d[-1]), np.uint8) if me == root else None
        recv = [tmp, c.tolist(), d[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Gatherv([mine[lo:lo + int(c[me])], MPI.BYTE], recv, root=root)
        if me == root:
            for r in range(size):
                dest[off[r] + lo:off[r] + lo + c[r]] = tmp[d[r]:d[r + 1]]
    return out


def scatter_rows(comm, a, counts, row_shape, dtype, root: int = 0) -> np.ndarray:
    """Collective: rank r receives rows ``offsets[r]:offsets[r+1]`` of root's array ``a``."""
    MPI = _mpi()
    me, size = comm.Get_rank(), comm.Get_size()
    dtype = np.dtype(dtype)
    row = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
    nbytes = np.asarray(counts, dtype=np.int64) * row
    off = _offsets(nbytes)
    block = run_shared(comm, "allocating a shard", np.empty, (int(counts[me]),) + tuple(row_shape), dtype)
    mine = _bytes(block)
    src = _bytes(np.ascontiguousarray(a, dtype=dtype)) if me == root else None
    if off[-1] <= CHUNK_BYTES:
        send = [src, nbytes.tolist(), off[:-1].tolist(), MPI.BYTE] if me == root else None
        comm.Scatterv(send, [mine, MPI.BYTE], root=root)
        return block
    piece = max(1, CHUNK_BYTES // size)
    for lo in range(0, int(nbytes.max()), piece):
        c = np.clip(nbytes - lo, 0, piece)
        d = _offsets(c)
        send = None
        if me == root:
            tmp = np.empty(int(d[-1]), np.uint8)
            for r in range(size):
                tmp[d[r]:d[r + 1]] = src[off[r] + lo:off[r] + lo + c[r]]
            send = [tmp, c.tolist(), d[:-1].tolist(), MPI.BYTE]
        comm.Scatterv(send, [mine[lo:lo + int(c[me])], MPI.BYTE], root=root)
    return block


# -- GPU binding -------------------------------------------------------------------------------

def _env_device(value: str, local_rank: int) -> int:
    """``DISTGRAIL_GPU``: one device index, or a comma list indexed by node-local rank."""
    items = [x.strip() for x in value.split(",") if x.strip()]
    try:
        ids = [int(x) for x in items]
    except ValueError:
        ids = []
    if not ids or min(ids) < 0:
        raise BackendError(f"DISTGRAIL_GPU must be a device index or a comma list of them, got {value!r}")
    return ids[local_rank % len(ids)]


def choose_device(local_rank: int, n_visible: int, env=None) -> int:
    """The device (index among the visible ones) for a node-local rank.

    ``DISTGRAIL_GPU`` wins; otherwise ``local_rank % n_visible``.

    >>> choose_device(3, 2, {}), choose_device(1, 4, {"DISTGRAIL_GPU": "2,0"})
    (1, 0)
    """
    env = os.environ if env is None else env
    if n_visible < 1:
        raise BackendError("no CUDA device is visible to this rank (check CUDA_VISIBLE_DEVICES)")
    if env.get("DISTGRAIL_GPU", "").strip():
        dev = _env_device(env["DISTGRAIL_GPU"], local_rank)
        if dev >= n_visible:
            raise BackendError(f"DISTGRAIL_GPU selects device {dev}, but only {n_visible} visible "
                               f"(0..{n_visible - 1})")
        return dev
    return local_rank % n_visible


def _local_rank(comm, local) -> int:
    """Node-local rank: SLURM_LOCALID when it numbers the ranks of this node uniquely (srun),
    else the rank in the shared-memory communicator (mpirun, or mpirun inside an allocation)."""
    sl = os.environ.get("SLURM_LOCALID", "")
    sl = int(sl) if sl.isdigit() else -1
    ids = local.allgather(sl)
    if min(ids) >= 0 and len(set(ids)) == len(ids):
        return sl
    return local.Get_rank()


def _gpu_count_and_ids():
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    return n, cupy


def _bus_id(cupy, dev: int) -> str:
    """The PCI bus id of visible device ``dev``: which physical GPU it is, whatever the numbering."""
    for get in (lambda: cupy.cuda.runtime.deviceGetPCIBusId(dev), lambda: cupy.cuda.Device(dev).pci_bus_id):
        try:
            return str(get())
        except Exception:  # noqa: S112 - try the next way
            continue
    return f"{os.environ.get('CUDA_VISIBLE_DEVICES', '')}:{dev}"  # pragma: no cover


def bind_gpu(comm=None, backend="auto", share: bool = False):
    """Collective: give each rank its own GPU; returns the device index (None when on the CPU).

    The node-local rank comes from ``comm.Split_type(COMM_TYPE_SHARED)`` (or ``SLURM_LOCALID``
    under ``srun``) and picks device ``local_rank % visible devices``; CUDA_VISIBLE_DEVICES
    limits what is visible, and ``DISTGRAIL_GPU`` (an index, or a comma list indexed by local
    rank) overrides the choice. With ``backend="cpu"``, or ``"auto"`` without a usable GPU, it
    does nothing (and imports no CuPy). If two ranks of a node end up on the same physical
    GPU, every rank raises :class:`RankError` unless ``share`` is true.
    """
    if backend not in BACKENDS and not hasattr(backend, "name"):
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    comm, owned = _own_comm(comm)
    try:
        name = getattr(backend, "name", backend)
        if name == "auto":
            name = os.environ.get("DISTGRAIL_BACKEND", "auto")
        # every rank must agree whether to bind; "auto" binds where any rank sees a GPU
        want = name != "cpu" and (name == "gpu" or gpu_available())
        want = comm.allreduce(bool(want), op=_mpi().LOR)
        if not want:
            return None
        MPI = _mpi()
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
        try:
            lr = _local_rank(comm, local)

            def pick():
                if not gpu_available():
                    raise BackendError("backend 'gpu' needs CuPy and a usable CUDA device; none on "
                                       f"{socket.gethostname()}")
                n, cupy = _gpu_count_and_ids()
                dev = choose_device(lr, n)
                cupy.cuda.Device(dev).use()
                return dev, _bus_id(cupy, dev), n

            got = run_shared(comm, "binding a GPU", pick)
            dev, bus, n = got
            buses = local.allgather(bus)
            clash = sorted({r for r, b in enumerate(buses) if buses.count(b) > 1})

            def check():
                if clash and not share:
                    raise BackendError(
                        f"{len(buses)} ranks on node {socket.gethostname()} but they see only "
                        f"{len(set(buses))} distinct GPU(s) (node-local ranks {clash} share one); start one "
                        "rank per GPU (launch/mpirun.sh does), or pass --share-gpus (share=True)")

            run_shared(comm, "binding a GPU", check)
            return dev
        finally:
            local.Free()
    finally:
        if owned:
            comm.Free()


# -- building ----------------------------------------------------------------------------------

def bcast_dataclass(comm, obj, cls, root: int = 0, skip=()):
    """Collective: a dataclass instance from ``root`` on every rank. Its NumPy-array fields go by
    :func:`bcast_array`; the other fields (ints, dicts, strings) are pickled. Fields named in
    ``skip`` are not sent: they are None on the other ranks."""
    me = comm.Get_rank()
    if me == root:
        names = [f.name for f in fields(cls) if f.name not in skip]
        arrays = [k for k in names if isinstance(getattr(obj, k), np.ndarray)]
        head = (arrays, {k: getattr(obj, k) for k in names if k not in arrays})
    else:
        head = None
    arrays, rest = comm.bcast(head, root=root)
    got = {k: bcast_array(comm, getattr(obj, k) if me == root else None, root) for k in arrays}
    return obj if me == root else cls(**got, **rest, **{k: None for k in skip})


#: DAG arrays only the root reads (phase 1 runs there): the reverse CSR, half the DAG's bytes
ROOT_ONLY_DAG = ("rindptr", "rindices")


def _bcast_dag(comm, dag, g, root=0):
    name, sha = comm.bcast((g.name, g.sha256) if comm.Get_rank() == root else None, root=root)
    dag = bcast_dataclass(comm, dag, DAG, root, skip=ROOT_ONLY_DAG)
    return dag, (g if comm.Get_rank() == root else SimpleNamespace(name=name, sha256=sha))


def _check_output(output):
    if output is None:
        return
    if not isinstance(output, (str, os.PathLike)):
        raise DistGrailError(f"output must be a path or None, got {output!r}")
    d = os.path.dirname(os.path.abspath(os.fspath(output)))
    if not os.path.isdir(d):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise DistGrailError(f"{os.fspath(output)}: cannot write the index: directory {d} is not writable")


def build_index_distributed(graph, dims: int = 5, seed: int = 0, parent_rule: str = "max-level", backend="auto",
                            fmt: str = "auto", num_vertices=None, output=None, comm=None, progress: bool = False):
    """Collective: build the index with phases 3–4 split over ``comm``'s ranks (see the module doc).

    ``graph``, ``fmt``, ``num_vertices`` and ``output`` are used on rank 0 only (other ranks may
    pass None); ``dims``, ``seed``, ``parent_rule`` and ``backend`` must be the same on every
    rank. Every rank returns the same complete :class:`~distgrail.index.Index`; rank 0 writes
    ``output``. ``comm=None`` uses a clone of COMM_WORLD.

    ``index.timings`` holds, besides the stages of a one-process build, ``bcast_dag``,
    ``bcast_forest``, ``alloc_labels`` (grouping ranks by node, allocating the node-shared label
    array), ``gather_labels`` (node barrier and the exchange between nodes, or the ``Gatherv``
    to rank 0) and ``bcast_labels`` (every rank's own copy of the labels); ``phases 3-4``,
    ``phase34_setup``, ``phase3_ranks``, ``phase4_intervals`` and ``phase34_to_host`` are those
    of the slowest rank, ``phases 3-4 rank0`` is rank 0's, and ``phases 3-4 own slowest`` /
    ``fastest`` are the most and least time a rank spent on its own phases 3–4 work (without
    waiting for the others).
    """
    from .index import assemble

    check_label_args(dims, seed, parent_rule)  # identical on every rank, before any collective
    if not (backend in BACKENDS or hasattr(backend, "xp")):
        raise BackendError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    comm, owned = _own_comm(comm)
    try:
        me, size = comm.Get_rank(), comm.Get_size()
        root = 0
        mine = (int(dims), int(seed), str(parent_rule), str(getattr(backend, "name", backend)))
        allargs = comm.allgather(mine)
        if any(a != allargs[0] for a in allargs):
            bad = next(r for r, a in enumerate(allargs) if a != allargs[0])
            raise DistGrailError("dims, seed, parent_rule and backend must be the same on every rank; rank 0 has "
                                 f"{allargs[0]}, rank {bad} has {allargs[bad]}")
        here = me == root
        name = os.fspath(graph) if isinstance(graph, (str, os.PathLike)) else type(graph).__name__
        be = run_shared(comm, "selecting the backend", get_backend, backend)
        run_shared(comm, "checking the output path", _check_output if here else None, output)
        timings = {}
        with Stages(progress and here, total=9) as st:
            g = st.run("read", run_shared, comm, f"reading the graph {name}",
                       as_graph if here else None, graph, num_vertices, fmt)
            dag = st.run("condense", run_shared, comm, "condensing cycles", condense if here else None, g)
            dag, g = st.run("bcast_dag", _bcast_dag, comm, dag, g, root)
            forest = st.run("phases 1-2", run_shared, comm, "computing phases 1-2 (forest, subtree sizes)",
                            build_forest if here else prefetch_csr, dag, seed, parent_rule, be)
            forest = st.run("bcast_forest", bcast_dataclass, comm, forest, Forest, root)
            timings.update(forest.timings)

            counts = split_counts(dims, size)
            lo, hi = int(_offsets(counts)[me]), int(_offsets(counts)[me + 1])
            what = (f"labeling dimensions {lo}..{hi - 1}" if hi - lo > 1 else f"labeling dimension {lo}"
                    if hi > lo else "labeling (no dimension on this rank)")
            local_t = {}
            ut = np.dtype(smallest_uint(max(dag.C - 1, 0)))  # the labels' dtype, the same on every rank
            shape = (dims, dag.C, 2)
            nodes, buf = st.run("alloc_labels", _shared_labels, comm, shape, ut)
            try:
                post0, iv = st.run("phases 3-4", run_shared, comm, what, label_dimensions, dag, forest,
                                  range(lo, hi), seed, be, local_t, None if buf is None else buf[lo:hi])
                local_t["phases 3-4"] = st.timings["phases 3-4"]
                keys = ("phases 3-4", "phase34_setup", "phase3_ranks", "phase4_intervals", "phase34_to_host")
                slow = np.array([local_t.get(k, 0.0) for k in keys])
                comm.Allreduce(_mpi().IN_PLACE, slow, op=_mpi().MAX)
                timings.update(dict(zip(keys, slow.tolist())))
                timings["phases 3-4 rank0"] = local_t["phases 3-4"]
                own = sum(local_t.get(k, 0.0) for k in keys[1:])  # this rank's work, without waiting
                every = comm.allgather(own)
                timings["phases 3-4 own slowest"], timings["phases 3-4 own fastest"] = max(every), min(every)
                if buf is not None:  # every rank wrote its block into its node's shared array
                    st.run("gather_labels", nodes.allgather_rows, buf, counts, CHUNK_BYTES)
                    labels = st.run("bcast_labels", run_shared, comm, "copying the labels", np.array, buf)
                else:
                    iv = np.ascontiguousarray(iv).reshape(hi - lo, dag.C, 2)
                    out = st.run("gather_labels", _gather_labels, comm, iv, counts, dag.C, ut.str, root)
                    labels = st.run("bcast_labels", bcast_array, comm, out, root)
            finally:
                if nodes is not None:
                    nodes.free()
            # rank 0 always owns dimension 0: its post-order rank is the reference
            post0 = bcast_array(comm, post0 if here else None, root)
            # the last collective before the write: every rank has all it needs and is fine
            idx = run_shared(comm, "assembling the index", assemble, g, dag, forest, post0, labels, dims, seed,
                             parent_rule)
            if output is not None:
                st.run("write", run_shared, comm, f"writing the index {os.fspath(output)}",
                       idx.save if here else None, output)
        idx.timings = comm.bcast({**st.timings, **timings} if here else None, root=root)
        idx.meta["backend"] = be.name
        return idx
    finally:
        if owned:
            comm.Free()


def _shared_labels(comm, shape, dtype):
    """Collective: ``(nodes, array)``, the label array shared by the ranks of each node, or
    ``(None, None)`` when shared memory is turned off or /dev/shm lacks room on some rank."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    ok = comm.allreduce(bool(shm_enabled() and room_for(nbytes)), op=_mpi().LAND)
    if not ok:
        return None, None
    nodes = run_shared(comm, "grouping the ranks by node", NodeGroups, comm)
    try:
        return nodes, run_shared(comm, f"allocating {nbytes / 2**20:.0f} MiB of node-shared labels",
                                 nodes.array, shape, dtype)
    except BaseException:
        nodes.free()
        raise


def _gather_labels(comm, iv, counts, C, dt, root):
    here = comm.Get_rank() == root
    out = run_shared(comm, "allocating the gathered labels",
                     (lambda: np.empty((int(np.sum(counts)), C, 2), dtype=np.dtype(dt))) if here else None)
    return gather_rows(comm, iv, counts, out, root)


# -- queries -----------------------------------------------------------------------------------

def _same_index_everywhere(comm, index):
    """Collective: every rank must hold the same index (e.g. each opened its own copy of the file)."""
    m = index.meta
    mine = tuple(m.get(k) for k in ("source_sha256", "n_vertices", "n_components", "n_dag_edges", "dims", "seed",
                                    "parent_rule"))
    every = comm.allgather(mine)
    bad = [r for r, x in enumerate(every) if x != every[0]]
    if bad:
        raise DistGrailError(f"every rank must query the same index, but ranks {bad} hold another one than rank 0 "
                             f"(source sha256, n, C, m, dims, seed, parent rule: rank 0 {every[0]}, "
                             f"rank {bad[0]} {every[bad[0]]})")


def query_sharded(index, sources, targets, backend="auto", comm=None, root: int = 0):
    """Collective: answer root's pairs with the batch cut into contiguous shards, one per rank.

    ``sources``/``targets`` are read on ``root`` only (other ranks may pass None). Returns
    ``(answers, stats)`` on every rank: answers in input order, identical to a one-process
    run; stats summed over ranks (``search_rounds`` is the most any rank needed, ``seconds``
    the wall time of the whole call on the slowest rank). ``stats.mpi_seconds`` holds
    ``scatter``, ``answer`` (slowest rank) and ``gather`` times.
    """
    from .query import QueryStats

    comm, owned = _own_comm(comm)
    try:
        me, size = comm.Get_rank(), comm.Get_size()
        here = me == root
        _same_index_everywhere(comm, index)
        be = run_shared(comm, "selecting the backend", get_backend, backend)
        pairs = run_shared(comm, "checking the query pairs", index._check_pairs if here else None, sources, targets)
        t0 = time.perf_counter()
        k = comm.bcast(int(pairs[0].size) if here else None, root=root)
        counts = split_counts(k, size)
        s, t = pairs if here else (None, None)
        s = scatter_rows(comm, s, counts, (), np.int64, root)
        t = scatter_rows(comm, t, counts, (), np.int64, root)
        t1 = time.perf_counter()
        lo, hi = int(_offsets(counts)[me]), int(_offsets(counts)[me + 1])
        what = f"answering queries {lo}..{hi - 1}" if hi > lo else "answering queries (none on this rank)"
        ans, stats = run_shared(comm, what, index._query_local, s, t, be)
        t2 = time.perf_counter()
        out = run_shared(comm, "allocating the answers", (lambda: np.empty(k, dtype=bool)) if here else None)
        gather_rows(comm, np.ascontiguousarray(ans, dtype=bool), counts, out, root)
        answers = bcast_array(comm, out, root)
        t3 = time.perf_counter()
        every = comm.allgather((stats, t3 - t0, t1 - t0, t2 - t1, t3 - t2))
        merged = QueryStats(backend=be.name, ranks=size)
        for st, *_ in every:
            merged = merged.merge(st)
        merged.backend, merged.ranks = be.name, size
        merged.seconds = max(e[1] for e in every)
        merged.mpi_seconds = {"scatter": max(e[2] for e in every), "answer": max(e[3] for e in every),
                              "gather": max(e[4] for e in every)}
        return answers, merged
    finally:
        if owned:
            comm.Free()
