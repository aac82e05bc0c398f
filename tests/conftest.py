"""Shared fixtures, the ``gpu`` skip, and MPI-aware reporting.

Under ``mpiexec -n N python -m pytest --only-mpi``: every rank gets its own ``--basetemp``,
and a failure on any rank makes every rank's pytest exit non-zero (the failure count is summed
over ranks). launch/test.sh sends the reports of ranks > 0 to ``$TMPDIR/pytest-rank<N>.log``;
that redirect is made before pytest starts, because pytest's fd capture restores the original
stdout whenever it suspends, undoing any ``dup2`` made from a conftest. The per-rank basetemp
folders (``distgrail-pytest-PID-rN`` in the temp dir) are removed when the session ends.

Without the pytest-mpi plugin (e.g. a GPU machine set up without the ``test`` extra), tests
marked ``mpi`` are skipped with the reason instead of running on one rank.

Test files are named concept first, variant last (tests/test_naming.py checks it): a file is
``test_<concept>_mpi.py`` when at least half of its test functions carry the ``mpi`` marker (run under
``mpiexec`` with pytest-mpi), else ``test_<concept>_gpu.py`` when at least half carry the ``gpu``
marker, else ``test_<concept>.py``; tests are selected by marker (``-m gpu``, ``--only-mpi``), not by name.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import pytest

from distgrail import settings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the 11 GRAIL benchmark graphs and their query pairs ship with the tests (tests/data/README.md);
#: DISTGRAIL_DATA points elsewhere (e.g. a copy with more graphs)
DATA_DIR = settings.get("DISTGRAIL_DATA") or os.path.join(ROOT, "tests", "data")

#: reachable pairs among each graph's 100,000 pairs (tests/data/README.md)
EXPECTED = {
    "agrocyc_dag_uniq": 99, "amaze_dag_uniq": 17136, "anthra_dag_uniq": 102, "ecoo_dag_uniq": 94,
    "human_dag_uniq": 23, "kegg_dag_uniq": 20072, "mtbrv_dag_uniq": 178, "nasa_dag_uniq": 498,
    "vchocyc_dag_uniq": 154, "xmark_dag_uniq": 1452, "ba10k2d": 354,
}


from distgrail.mpi.launcher import rank_size, under_launcher  # noqa: E402 - the one launcher list

MPI_RANK, MPI_SIZE = rank_size()
UNDER_MPI = under_launcher()  # several ranks (or an unknown number): per-rank basetemp, failures summed


#: the per-rank basetemp this process made (removed at the end of the session)
_OWN_BASETEMP = []


def basetemp_name(pid: int, rank: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"distgrail-pytest-{pid}-r{rank}")


def pytest_configure(config):
    import signal

    # a test run started in the background by a non-interactive shell (`bash .ci/run &`) inherits
    # SIGINT ignored, and so would every Python the tests start: Python then installs no
    # KeyboardInterrupt handler, and the tests of the build's signal handling (SIGINT's clean-up,
    # handlers restored) fail; the run takes Python's own handler back, so its children get the default
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if UNDER_MPI:
        if not config.option.basetemp:
            config.option.basetemp = basetemp_name(os.getpid(), MPI_RANK)
            _OWN_BASETEMP.append(config.option.basetemp)


def pytest_unconfigure(config):
    for path in _OWN_BASETEMP:
        shutil.rmtree(path, ignore_errors=True)
    _OWN_BASETEMP.clear()


def pytest_sessionfinish(session, exitstatus):
    if UNDER_MPI:
        try:
            from mpi4py import MPI
        except ImportError:  # pragma: no cover
            return
        failed = MPI.COMM_WORLD.allreduce(int(session.testsfailed), op=MPI.SUM)
        if failed and session.exitstatus == 0:
            session.exitstatus = 1
        if MPI_RANK == 0 and failed and not session.testsfailed:
            print(f"\n{failed} test(s) failed on other ranks (launch/test.sh logs them to "
                  f"{tempfile.gettempdir()}/pytest-rank*.log)")


def pytest_collection_modifyitems(config, items):
    from distgrail.gpu.backend import gpu_available

    if not config.pluginmanager.hasplugin("pytest_mpi"):
        no_mpi = pytest.mark.skip(reason="needs the pytest-mpi plugin (pip install 'distgrail[test]') and "
                                         "mpiexec -n N python -m pytest --only-mpi")
        for item in items:
            if "mpi" in item.keywords:
                item.add_marker(no_mpi)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a usable CUDA GPU (cupy.cuda.is_available() is False here); "
                                   "run on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def graph_path(name: str) -> str:
    return os.path.join(DATA_DIR, f"{name}.gra")


@pytest.fixture(scope="session")
def data_dir():
    missing = [n for n in EXPECTED if not os.path.isfile(graph_path(n))
               or not os.path.isfile(graph_path(n) + ".q100k.pairs.gz")]
    if missing:
        pytest.skip(f"benchmark graphs {', '.join(sorted(missing))} not found in {DATA_DIR} "
                    "(tests/data ships them; DISTGRAIL_DATA points elsewhere)")
    return DATA_DIR


def load_pairs(name: str):
    from distgrail.io.pairs import read_pairs

    return read_pairs(os.path.join(DATA_DIR, f"{name}.gra.q100k.pairs.gz"))


def index_bytes(path) -> bytes:
    """The bytes of the one-file index holding the index at ``path``: the file itself, or a split
    index (part files beside it) merged as ``distgrail convert --layout single`` merges it."""
    import tempfile

    import distgrail

    path = os.fspath(path)
    from distgrail.indexfile.layout import index_parts

    if not index_parts(path):
        with open(path, "rb") as f:
            return f.read()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "merged.h5")
        distgrail.open_index(path).save(out)
        with open(out, "rb") as f:
            return f.read()


def closure(n, src, dst):
    """All-pairs reachability (n x n bool) by BFS from every vertex: the ground truth."""
    from distgrail.bfs import reachable_set
    import scipy.sparse as sp

    a = sp.csr_matrix((np.ones(len(src), dtype=np.bool_), (src, dst)), shape=(n, n))
    return np.array([reachable_set(a.indptr, a.indices, s) for s in range(n)]).reshape(n, n)


@pytest.fixture
def comm():
    """MPI tests: a private duplicate of COMM_WORLD, freed afterwards."""
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    release_comm(c)


@pytest.fixture
def wire():
    """The MPI communicator the fake NCCL moves its bytes over (its own, like NCCL's sockets)."""
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    release_comm(c)


def release_comm(c, rounds: int = 5):
    """Collective: receive and drop every message still unmatched on ``c``, then free it.

    MPICH gives a freed communicator's context id to the next ``Dup``, and a message nobody
    received (the fake NCCL's warm-up send to a rank whose set-up failed: a send cannot be
    cancelled once delivered) stays queued under that id: a later test's receive of the same
    source and tag took it in place of its own and read 4 stray bytes as the start of the DAG
    (tests/test_transport_setup_mpi.py failed once in a few hundred runs at -n 3)."""
    import time

    from mpi4py import MPI

    c.Barrier()  # every rank's sends on c were posted (and, eager, delivered) before this
    st = MPI.Status()
    for _ in range(rounds):  # a few looks: a message may still be on its way into the queue
        while c.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st):
            c.Recv(bytearray(st.Get_count(MPI.BYTE)), source=st.Get_source(), tag=st.Get_tag())
        time.sleep(0.001)
    c.Barrier()
    c.Free()


@pytest.fixture
def small_crc_blocks(monkeypatch):
    """Every dataset of 1 KiB or more read in CRC blocks of 1,000 bytes (the last one short), so
    that test-sized files take the block readers' path; the count of blocks read returned."""
    import distgrail.indexfile.layout as layout

    monkeypatch.setattr(layout, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(layout, "CRC_BLOCK", 1000)
    count = [0]
    real = layout.read_block

    def counted(fd, view, offset):
        count[0] += 1
        return real(fd, view, offset)

    monkeypatch.setattr(layout, "read_block", counted)
    return count
