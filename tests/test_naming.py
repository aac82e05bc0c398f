"""One naming scheme for the test files (issue 41): the concept first, the variant as a suffix.

The rule, read from each file with ``ast`` (tests/conftest.py states it in one sentence): a test
file is ``test_<concept>_mpi.py`` when at least half of its test functions carry the ``mpi`` marker
(they run under ``mpiexec -n N python -m pytest --only-mpi``), else ``test_<concept>_gpu.py`` when
at least half carry the ``gpu`` marker, else ``test_<concept>.py``; the marker counts whether it
comes from a decorator, the module's ``pytestmark`` or a ``Test*`` class. So a CPU file may hold a
few GPU or MPI tests (test_partition.py), serial tests that start a whole ``mpiexec`` job
themselves have no marker and a plain name (test_launch.py), and no file starts with its variant
(``test_gpu_*``, ``test_mpi_*``). Tests are selected by marker (``-m gpu``, ``--only-mpi``), never by
file name; the name is for the reader.
"""

from __future__ import annotations

import ast
import os

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("gpu", "mpi")


def _is_mark(node, name):
    """``pytest.mark.NAME`` or ``pytest.mark.NAME(...)`` (also ``mark.NAME`` after ``from pytest import mark``)."""
    if isinstance(node, ast.Call):
        node = node.func
    return (isinstance(node, ast.Attribute) and node.attr == name
            and (isinstance(node.value, ast.Attribute) and node.value.attr == "mark"
                 or isinstance(node.value, ast.Name) and node.value.id == "mark"))


def _has_mark(node, name):
    """A mark expression (one mark, or a list/tuple of them as ``pytestmark`` takes) holds NAME."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_has_mark(e, name) for e in node.elts)
    return _is_mark(node, name)


def _pytestmark(body, name):
    """A ``pytestmark = ...`` among these statements holds the mark NAME."""
    for st in body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
        if (any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and st.value is not None
                and _has_mark(st.value, name)):
            return True
    return False


def _tests(body, gpu, mpi):
    """(test name, has the gpu marker, has the mpi marker) for every test function, also in ``Test*`` classes."""
    for st in body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and st.name.startswith("test"):
            yield (st.name, gpu or any(_is_mark(d, "gpu") for d in st.decorator_list),
                   mpi or any(_is_mark(d, "mpi") for d in st.decorator_list))
        elif isinstance(st, ast.ClassDef) and st.name.startswith("Test"):
            yield from _tests(st.body, *(inherited or any(_is_mark(d, m) for d in st.decorator_list)
                                          or _pytestmark(st.body, m)
                                          for inherited, m in ((gpu, "gpu"), (mpi, "mpi"))))


def variant(source):
    """What a test file holds: "mpi" or "gpu" (at least half of its tests carry that marker; mpi first) or ""."""
    tree = ast.parse(source)
    tests = list(_tests(tree.body, _pytestmark(tree.body, "gpu"), _pytestmark(tree.body, "mpi")))
    for i, v in ((2, "mpi"), (1, "gpu")):
        if tests and 2 * sum(t[i] for t in tests) >= len(tests):
            return v
    return ""


def problems(name, source):
    """Why the file NAME with this SOURCE breaks the scheme (empty when it follows it)."""
    stem = name[:-len(".py")]
    held = variant(source)
    named = next((v for v in VARIANTS if stem.endswith("_" + v)), "")
    out = []
    for v in VARIANTS:
        if stem.startswith(f"test_{v}_"):
            out.append(f"{name}: the variant goes last: test_<concept>_{v}.py, not test_{v}_<concept>.py")
    if held != named:
        want = f"{stem[:-len(named) - 1] if named else stem}{'_' + held if held else ''}.py"
        holds = {"mpi": "has mostly mpi-marked tests", "gpu": "has mostly gpu-marked tests",
                 "": "has mostly tests without the gpu or mpi marker"}[held]
        out.append(f"{name} {holds}: name it like {want}")
    return out


def _test_files():
    return sorted(f for f in os.listdir(TESTS) if f.startswith("test_") and f.endswith(".py"))


def test_every_test_file_follows_the_scheme():
    bad = []
    for f in _test_files():
        with open(os.path.join(TESTS, f), encoding="utf-8") as fh:
            bad += problems(f, fh.read())
    assert not bad, "\n".join(bad)


#: the names before issue 41 and the names they have now: the checker must refuse every old one
RENAMED = {
    "test_gpu_backend.py": "test_backend_gpu.py",
    "test_gpu_condense.py": "test_condense_gpu.py",
    "test_gpu_labeling.py": "test_labeling_gpu.py",
    "test_gpu_memory_peak.py": "test_memory_peak_gpu.py",  # one GPU test of two: at least half
    "test_gpu_parse.py": "test_parse_gpu.py",
    "test_gpu_query.py": "test_query_gpu.py",
    "test_gpu_supports.py": "test_supports_gpu.py",
    "test_mpi_basic.py": "test_basic_mpi.py",
    "test_mpi_dims_split.py": "test_dims_split.py",  # 2 MPI tests of 6
    "test_mpi_distributed.py": "test_distributed_mpi.py",
    "test_mpi_launch.py": "test_launch.py",  # serial tests that start mpiexec jobs: no mpi marker
    "test_mpi_parse.py": "test_parse_mpi.py",  # 3 MPI tests of 5
    "test_mpi_shm_cleanup.py": "test_shm_cleanup.py",  # serial tests, no mpi marker
    "test_partition_nccl.py": "test_partition_nccl_mpi.py",  # 3 MPI tests of 5
}


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_the_old_names_are_refused(old):
    new = RENAMED[old]
    with open(os.path.join(TESTS, new), encoding="utf-8") as fh:
        source = fh.read()
    assert problems(old, source), f"{old} (the content of {new}) should break the scheme"
    assert not problems(new, source)


GPU_ALL = "import pytest\npytestmark = pytest.mark.gpu\ndef test_a(): pass\n"
GPU_EACH = "import pytest\n@pytest.mark.gpu\ndef test_a(): pass\n@pytest.mark.gpu\ndef test_b(): pass\n"
GPU_HALF = "import pytest\ndef test_a(): pass\n@pytest.mark.gpu\ndef test_b(): pass\n"
GPU_FEW = "import pytest\ndef test_a(): pass\ndef test_b(): pass\n@pytest.mark.gpu\ndef test_c(): pass\n"
GPU_CLASS = "import pytest\n@pytest.mark.gpu\nclass TestX:\n    def test_a(self): pass\n"
MPI_HALF = "import pytest\ndef test_a(): pass\n@pytest.mark.mpi(min_size=2)\ndef test_b(): pass\n"
MPI_FEW = "import pytest\ndef test_a(): pass\ndef test_b(): pass\n@pytest.mark.mpi(min_size=2)\ndef test_c(): pass\n"
MPI_LIST = "import pytest\npytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(9)]\ndef test_a(): pass\n"
MPI_AND_GPU = "import pytest\npytestmark = pytest.mark.mpi\n@pytest.mark.gpu\ndef test_a(): pass\n"
CPU = "def test_a(): pass\n"


@pytest.mark.parametrize("name, source, ok", [
    ("test_x_gpu.py", GPU_ALL, True), ("test_x_gpu.py", GPU_EACH, True), ("test_x_gpu.py", GPU_CLASS, True),
    ("test_x_gpu.py", GPU_HALF, True), ("test_x.py", GPU_FEW, True),
    ("test_x.py", GPU_ALL, False), ("test_x.py", GPU_EACH, False), ("test_gpu_x.py", GPU_ALL, False),
    ("test_x.py", GPU_HALF, False), ("test_x_gpu.py", GPU_FEW, False),
    ("test_x_mpi.py", MPI_HALF, True), ("test_x_mpi.py", MPI_LIST, True), ("test_x.py", MPI_FEW, True),
    ("test_x.py", MPI_HALF, False), ("test_x_mpi.py", MPI_FEW, False), ("test_mpi_x.py", MPI_LIST, False),
    ("test_x_gpu.py", MPI_LIST, False), ("test_x_mpi.py", MPI_AND_GPU, True), ("test_x_gpu.py", MPI_AND_GPU, False),
    ("test_x.py", CPU, True), ("test_x_mpi.py", CPU, False), ("test_x_gpu.py", CPU, False),
    ("test_mpi_x.py", CPU, False), ("test_gpu_x.py", CPU, False),
])
def test_the_rule(name, source, ok):
    assert (not problems(name, source)) is ok, problems(name, source)
