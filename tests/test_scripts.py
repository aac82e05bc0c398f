"""The shell scripts in launch/ and the sbatch templates in slurm/: syntax, parameters, and a
dry run of each template with a stand-in `srun` that starts the ranks with PyPI's mpiexec."""

from __future__ import annotations

import glob
import os
import re
import stat
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "launch", "*.sh")) + glob.glob(os.path.join(ROOT, "slurm", "*.sbatch")))
MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpiexec = pytest.mark.skipif(not os.access(MPIEXEC, os.X_OK), reason=f"no {MPIEXEC} (PyPI mpich)")


def _env(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "HYDRA_", "MPI_", "SLURM_"))}
    env.update(MPIEXEC_TIMEOUT="60", DISTGRAIL_BACKEND="cpu", **kw)
    return env


def test_there_are_scripts_and_templates():
    names = {os.path.relpath(p, ROOT) for p in SCRIPTS}
    assert {"launch/mpirun.sh", "launch/test.sh", "launch/setup.sh", "slurm/index.sbatch",
            "slurm/query.sbatch"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: os.path.relpath(p, ROOT))
def test_bash_syntax(path):
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name, params, command", [
    ("index.sbatch", ["GRAPH", "INDEX", "DIMS", "SEED", "PARENT_RULE", "BACKEND", "VENV"], "index"),
    ("query.sbatch", ["INDEX", "PAIRS", "ANSWERS", "BACKEND", "VENV"], "query"),
])
def test_sbatch_template_parameters(name, params, command):
    text = open(os.path.join(ROOT, "slurm", name)).read()
    assert text.startswith("#!/bin/bash\n")
    head = text[:text.index("set -euo pipefail")]  # parameters come first, before any work
    for p in params:
        assert re.search(rf"^{p}=\$\{{{p}:-[^}}]+\}}", head, re.M), f"{name}: parameter {p}=${{{p}:-default}}"
    for directive in ("--ntasks-per-node=", "--gpus-per-task=1", "--time=", "--job-name="):
        assert re.search(rf"^#SBATCH {directive}", text, re.M), f"{name}: #SBATCH {directive}"
    assert re.search(r"^srun .*--gpus-per-task=1", text, re.M)
    assert "--kill-on-bad-exit" in text
    assert f"python -m mpi4py -m distgrail {command}" in text
    assert re.search(r"CUPY_CACHE_DIR=.*TMPDIR:-/tmp/\$SLURM_JOB_ID", text)


def _fake_srun(tmp_path):
    """`srun OPTIONS... CMD...` -> `mpiexec -n $SLURM_NTASKS_PER_NODE CMD...` (single node)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    srun = bindir / "srun"
    srun.write_text('#!/bin/bash\nwhile [[ "$1" == -* ]]; do shift; done\n'
                    f'exec "{MPIEXEC}" -n "$SLURM_NTASKS_PER_NODE" "$@"\n')
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    return str(bindir)


@needs_mpiexec
def test_sbatch_templates_run_with_a_stand_in_srun(tmp_path):
    import distgrail

    bindir = _fake_srun(tmp_path)
    env = _env(PATH=bindir + os.pathsep + os.environ["PATH"], SLURM_JOB_ID="4242", SLURM_NNODES="1",
               SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="1", TMPDIR=str(tmp_path),
               VENV=os.path.dirname(os.path.dirname(sys.executable)),
               GRAPH="bundled", INDEX=str(tmp_path / "kegg.h5"), DIMS="3", BACKEND="cpu",
               PAIRS="bundled", ANSWERS=str(tmp_path / "answers.txt"))
    r = subprocess.run(["bash", os.path.join(ROOT, "slurm", "index.sbatch")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rank(s)" in r.stdout and "n_components" in r.stdout
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    ref.save(tmp_path / "ref.h5")
    assert (tmp_path / "ref.h5").read_bytes() == (tmp_path / "kegg.h5").read_bytes()
    r = subprocess.run(["bash", os.path.join(ROOT, "slurm", "query.sbatch")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "answers.txt").read_text().split().count("1") == distgrail.BUNDLED_REACHABLE
    assert "2 ranks" in r.stdout


@needs_mpiexec
def test_mpirun_wrapper_runs_a_command_on_the_given_ranks(tmp_path):
    out = tmp_path / "kegg.h5"
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh"), "-n", "2", "index", "bundled",
                        "-o", str(out), "--dims", "2", "--backend", "cpu", "--json"],
                       env=_env(PATH=os.environ["PATH"], PYTHON=sys.executable, MPIEXEC=MPIEXEC),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert '"ranks": 2' in r.stdout and out.exists()
    assert "-m mpi4py -m distgrail index" in r.stderr  # the command line it ran


def test_mpirun_wrapper_without_gpus_or_ranks_says_what_to_do(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()  # a PATH without nvidia-smi
    env = _env(PATH=f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    env.pop("NP", None)
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh"), "info", "x.h5"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "pass -n RANKS" in r.stderr
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "usage:" in r.stderr


def test_readme_mpi_section_names_existing_scripts():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("## Running under MPI"):]
    section = section[:section.index("\n## ", 5)]
    for path in ("launch/mpirun.sh", "slurm/index.sbatch", "slurm/query.sbatch"):
        assert path in section and os.path.exists(os.path.join(ROOT, path)), path
    assert "python -m mpi4py -m distgrail" in section and "--share-gpus" in section
