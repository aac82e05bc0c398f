"""GPU binding: one GPU per rank, by node-local rank (``SLURM_LOCALID`` under ``srun``).

``CUDA_VISIBLE_DEVICES`` limits the choice; ``DISTGRAIL_GPU`` (an index, or a comma list indexed
by local rank) overrides it. Two ranks of a node on one physical GPU is an error unless shared.
"""

from __future__ import annotations

import os
import socket

from .. import settings
from ..errors import BackendError
from ..gpu.backend import BACKENDS, gpu_available
from .errors import mpi, own_comm, run_shared

__all__ = ["bind_gpu", "choose_device", "ensure_bound", "ranks_on_this_gpu"]

#: the device this process was bound to by :func:`bind_gpu` (None: not bound)
_BOUND: int | None = None
#: the node-local ranks :func:`bind_gpu` found on this rank's physical GPU (1: its own)
_SHARING = 1


def ranks_on_this_gpu() -> int:
    """How many ranks of this node :func:`bind_gpu` bound to this rank's GPU (``--share-gpus``),
    1 when it has its own or was not bound here. A rank's fit checks count that share of the
    GPU's free memory: each rank sees all of it free while the others' allocations are to come,
    and one CuPy pool cannot take back the blocks another process caches."""
    return _SHARING


def choose_device(local_rank: int, n_visible: int, env=None) -> int:
    """The device (index among the visible ones) for a node-local rank.

    ``DISTGRAIL_GPU`` wins; otherwise ``local_rank % n_visible``.

    >>> choose_device(3, 2, {}), choose_device(1, 4, {"DISTGRAIL_GPU": "2,0"})
    (1, 0)
    """
    if n_visible < 1:
        raise BackendError("no CUDA device is visible to this rank (check CUDA_VISIBLE_DEVICES)")
    ids = settings.get("DISTGRAIL_GPU", env)  # one index, or a list indexed by node-local rank
    if ids is not None:
        dev = ids[local_rank % len(ids)]
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
    comm, owned = own_comm(comm)
    try:
        name = getattr(backend, "name", backend)
        if name == "auto":
            name = settings.get("DISTGRAIL_BACKEND")
        # every rank must agree whether to bind; "auto" binds where any rank sees a GPU
        want = name != "cpu" and (name == "gpu" or gpu_available())
        want = comm.allreduce(bool(want), op=mpi().LOR)
        if not want:
            return None
        MPI = mpi()
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
            global _BOUND, _SHARING
            _BOUND, _SHARING = dev, max(1, buses.count(bus))
            return dev
        finally:
            local.Free()
    finally:
        if owned:
            comm.Free()


def ensure_bound(comm, backend="auto"):
    """Collective: the device of each rank, binding one by node-local rank (:func:`bind_gpu`)
    unless every rank is bound already (e.g. by the CLI, with its ``--share-gpus``).

    Returns None on the CPU. A :class:`~distgrail.gpu.backend.Backend` object is the caller's
    own choice of device: it is kept (its ``device``), and nothing is bound.
    """
    own = hasattr(backend, "xp")
    if comm.allreduce(own or _BOUND is not None, op=mpi().LAND):  # every rank takes the same way
        return getattr(backend, "device", None) if own else _BOUND
    return bind_gpu(comm, backend)
