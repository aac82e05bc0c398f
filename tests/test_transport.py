"""The transport between ranks (distgrail.mpi.transport): fakes and the tests that need no MPI.

``fake_nccl(world)`` is a stand-in for ``cupy.cuda.nccl`` whose ``NcclCommunicator`` moves bytes
through an MPI communicator on host buffers (the pointers it gets are NumPy arrays' addresses):
grouped ``send``/``recv`` are posted at ``groupEnd`` as ``Isend``/``Irecv`` and waited for
together, as NCCL runs a group. With it, the NCCL transport's own code (headers, chunking,
grouped gathers, the root's own block) runs on CI; ``fake_cupy`` is a NumPy-backed CuPy so that
a backend claims to be a GPU one. tests/test_transport_mpi.py runs them under mpiexec.
"""

from __future__ import annotations

import ctypes
import os
import sys
import types

import numpy as np
import pytest

from distgrail.gpu.backend import Backend
from distgrail.mpi import transport


def _bytes_at(ptr: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * count).from_address(ptr))


def fake_nccl(world=None, available=True, fail_init=False, fail_uid=False):
    """A fake ``cupy.cuda.nccl`` over the MPI communicator ``world`` (see the module doc).
    ``mod.log`` records every call: ("init", size, uid, rank), ("bcast", count, root),
    ("send"/"recv", count, peer), ("group",), ("destroy",), ("abort",); ``mod.init_threads``
    the name of the thread each communicator was set up on. ``fail_init``: True, or a function
    of the rank saying where ``NcclCommunicator`` raises. Like NCCL's, the group state is per
    thread, and every communicator's bytes travel apart from any other's (point-to-point
    messages tagged by its unique id), so communicators may be set up and warmed up on threads
    at the same time (this needs an MPI with ``MPI_THREAD_MULTIPLE``, as PyPI's MPICH gives)."""
    import threading

    mod = types.ModuleType("cupy.cuda.nccl")
    mod.available = available
    mod.NCCL_UINT8 = 1
    mod.log = []
    mod.init_threads = []
    group = threading.local()  # .depth, .pending: NCCL's group calls are per thread

    def state():
        if not hasattr(group, "depth"):
            group.depth, group.pending = 0, []
        return group

    def get_unique_id():
        if fail_uid:
            raise RuntimeError("no unique id (injected)")
        return tuple(int(b) - 128 for b in os.urandom(128))

    def run(ops):
        """Post ``ops`` and wait for them; like ncclCommAbort, aborting a communicator (from
        another thread) ends a wait that would never end (a peer whose set-up failed)."""
        import time

        from mpi4py import MPI

        reqs = [c.wire.Isend([_bytes_at(p, n), MPI.BYTE], dest=peer, tag=c.tag) if kind == "send"
                else c.wire.Irecv([_bytes_at(p, n), MPI.BYTE], source=peer, tag=c.tag) for kind, c, p, n, peer in ops]
        while not MPI.Request.Testall(reqs):
            if not all(c.alive for _, c, *_ in ops):
                for r in reqs:
                    r.Cancel()
                MPI.Request.Waitall(reqs)
                raise RuntimeError("NCCL communicator aborted (fake)")
            time.sleep(0.0005)

    def groupStart():
        state().depth += 1

    def groupEnd():
        st = state()
        st.depth -= 1
        if st.depth == 0:
            mod.log.append(("group",))
            ops = list(st.pending)
            st.pending.clear()
            run(ops)

    class NcclCommunicator:
        def __init__(self, ndev, uid, rank):
            assert isinstance(uid, tuple) and len(uid) == 128
            if callable(fail_init) and fail_init(rank) or fail_init is True:
                raise RuntimeError(f"ncclCommInitRank failed on rank {rank} (injected)")
            self.ndev, self.uid, self.rank, self.wire = ndev, uid, rank, world
            # this communicator's messages, apart from others' (on the wire's whole tag range)
            span = 10000
            if world is not None:
                from mpi4py import MPI

                span = (int(world.Get_attr(MPI.TAG_UB)) - 100) // 2
            self.tag = 100 + 2 * (hash(uid) % span)
            self.alive = True
            mod.log.append(("init", ndev, uid, rank))
            mod.init_threads.append(threading.current_thread().name)

        def bcast(self, ptr, count, datatype, root, stream):
            assert self.alive and datatype == mod.NCCL_UINT8 and count > 0
            mod.log.append(("bcast", count, root))
            peers = [r for r in range(self.ndev) if r != root] if self.rank == root else [root]
            run([("send" if self.rank == root else "recv", self, ptr, count, r) for r in peers])

        def _p2p(self, kind, ptr, count, datatype, peer):
            assert self.alive and datatype == mod.NCCL_UINT8 and count > 0 and peer != self.rank
            mod.log.append((kind, count, peer))
            st = state()
            st.pending.append((kind, self, ptr, count, peer))
            if st.depth == 0:  # outside a group: one operation at a time
                groupStart()
                groupEnd()

        def send(self, ptr, count, datatype, peer, stream):
            self._p2p("send", ptr, count, datatype, peer)

        def recv(self, ptr, count, datatype, peer, stream):
            self._p2p("recv", ptr, count, datatype, peer)

        def destroy(self):
            self.alive = False
            mod.log.append(("destroy",))

        def abort(self):
            self.alive = False
            mod.log.append(("abort",))

    mod.get_unique_id = get_unique_id
    mod.groupStart, mod.groupEnd = groupStart, groupEnd
    mod.NcclCommunicator = NcclCommunicator
    return mod


class _FakeCupy(types.ModuleType):
    """NumPy under CuPy's name: every attribute not defined here is NumPy's."""

    def __getattr__(self, name):
        return getattr(np, name)


def fake_cupy(nccl=None):
    """A NumPy-backed ``cupy`` with ``cuda.Device`` (a context), ``cuda.Stream``,
    ``cuda.get_current_stream`` and ``cuda.nccl``; ``mod.synced`` counts stream synchronisations."""
    mod = _FakeCupy("cupy")
    mod.synced = 0

    class Device:
        def __init__(self, i=0):
            self.id = i

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def use(self):
            pass

    class Stream:
        ptr = 0

        def __init__(self, non_blocking=False):
            self.non_blocking = non_blocking

        def synchronize(self):
            mod.synced += 1

    mod.cuda = types.ModuleType("cupy.cuda")
    mod.cuda.Device = Device
    mod.cuda.get_current_stream = Stream
    mod.cuda.Stream = Stream
    mod.cuda.is_available = lambda: True
    if nccl is not None:
        mod.cuda.nccl = nccl
    mod.asnumpy = np.asarray
    return mod


def install(monkeypatch, cupy_mod, nccl=None):
    """Put a fake CuPy (and its ``cupy.cuda.nccl``, or None: it does not import) in sys.modules."""
    monkeypatch.setitem(sys.modules, "cupy", cupy_mod)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy_mod.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)


def fake_gpu_backend(cupy_mod):
    return Backend("gpu", cupy_mod, device=0)


# -- without MPI --------------------------------------------------------------------------------

def test_nccl_wanted_follows_the_environment(monkeypatch):
    monkeypatch.delenv("DISTGRAIL_NCCL", raising=False)
    assert transport.nccl_wanted()
    for off in ("0", "no", "OFF", " false "):
        monkeypatch.setenv("DISTGRAIL_NCCL", off)
        assert not transport.nccl_wanted()
    monkeypatch.setenv("DISTGRAIL_NCCL", "1")
    assert transport.nccl_wanted()


def test_nccl_module_needs_an_importable_and_available_nccl(monkeypatch):
    cp = fake_cupy()
    install(monkeypatch, cp, None)
    with pytest.raises(ImportError):
        transport._nccl_module()
    install(monkeypatch, cp, fake_nccl(available=False))
    with pytest.raises(transport.DistGrailError, match="not available"):
        transport._nccl_module()
    good = fake_nccl()
    install(monkeypatch, cp, good)
    assert transport._nccl_module() is good


def test_pointers_of_numpy_and_device_arrays():
    a = np.arange(10, dtype=np.int64)
    assert transport._ptr(a) == a.ctypes.data
    assert transport._ptr(a[3:]) == a.ctypes.data + 24
    dev = types.SimpleNamespace(data=types.SimpleNamespace(ptr=4096))  # what a CuPy array shows
    assert transport._ptr(dev) == 4096


def test_rows_must_share_trailing_shape_and_dtype():
    counts, rest, dt = transport._check_rows([((3, 2), "<u4"), ((0, 2), "<u4"), ((5, 2), "<u4")])
    assert counts.tolist() == [3, 0, 5] and rest == (2,) and dt == "<u4"
    with pytest.raises(transport.DistGrailError, match="rank 1: <u8 \\(4, 2\\)"):
        transport._check_rows([((3, 2), "<u4"), ((4, 2), "<u8")])
    with pytest.raises(transport.DistGrailError, match="trailing shape"):
        transport._check_rows([((3, 2), "<u4"), ((3, 3), "<u4")])
    with pytest.raises(transport.DistGrailError):
        transport._check_rows([((), "<u4"), ((), "<u4")])


def test_one_rank_never_sets_up_nccl(monkeypatch):
    """A communicator of one rank has nothing to move: the host path, no NCCL communicator."""
    from mpi4py import MPI

    nccl = fake_nccl(MPI.COMM_SELF)
    cp = fake_cupy(nccl)
    install(monkeypatch, cp, nccl)
    tp = transport.transport_for(MPI.COMM_SELF, fake_gpu_backend(cp))
    assert tp.name == "mpi" and not [e for e in nccl.log if e[0] == "init"]


def test_the_early_host_limit_is_the_one_the_settings_name():
    """DISTGRAIL_NCCL_EARLY's description (docs/settings.md is made from it) states the limit."""
    from distgrail import settings

    text = " ".join(str(x) for x in vars(settings.SETTINGS["DISTGRAIL_NCCL_EARLY"]).values())
    assert transport.EARLY_HOST_BYTES == 256 << 20 and "256 MiB" in text, text
