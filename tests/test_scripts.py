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

from conftest import ROOT, index_bytes

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
    assert re.search(r"^srun .*\n.*--gpus-per-task=\$SLURM_GPUS_PER_TASK", text, re.M)  # the job's GPUs per task
    assert "--kill-on-bad-exit" in text
    assert f'"$PY" -m mpi4py -m distgrail {command}' in text and "PY=$VENV/bin/python" in text
    assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in text
    # CuPy's kernel cache outlives the job (issue 44): the user's, else CuPy's own default in the
    # home directory, the one launch/setup.sh warms (distgrail.gpu.warm.cache_dir)
    assert "export CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-${HOME:-/tmp}/.cupy/kernel_cache}" in text
    assert not re.search(r"CUPY_CACHE_DIR=.*TMPDIR", text)


def _fake_srun(tmp_path):
    """`srun OPTIONS... CMD...` -> `mpiexec -n $SLURM_NTASKS_PER_NODE CMD...` (single node)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    srun = bindir / "srun"
    srun.write_text('#!/bin/bash\necho "srun $* SRUN_CPUS_PER_TASK=${SRUN_CPUS_PER_TASK:-unset}" >>"$TMPDIR/srun.log"\n'
                    'echo "${CUPY_CACHE_DIR:-unset}" >>"$TMPDIR/cupy-cache.log"\n'
                    'while [[ "$1" == -* ]]; do shift; done\n'
                    f'exec "{MPIEXEC}" -n "$SLURM_NTASKS_PER_NODE" "$@"\n')
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    return str(bindir)


@needs_mpiexec
def test_sbatch_templates_run_with_a_stand_in_srun(tmp_path):
    import distgrail

    bindir = _fake_srun(tmp_path)
    env = _env(PATH=bindir + os.pathsep + os.environ["PATH"], SLURM_JOB_ID="4242", SLURM_NNODES="1",
               SLURM_NTASKS_PER_NODE="2", SLURM_CPUS_PER_TASK="3", TMPDIR=str(tmp_path), HOME=str(tmp_path / "home"),
               VENV=os.path.dirname(os.path.dirname(sys.executable)),
               GRAPH="bundled", INDEX=str(tmp_path / "kegg.h5"), DIMS="3", BACKEND="cpu",
               PAIRS="bundled", ANSWERS=str(tmp_path / "answers.txt"))
    env.pop("CUPY_CACHE_DIR", None)  # the templates' default
    r = subprocess.run(["bash", os.path.join(ROOT, "slurm", "index.sbatch")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rank(s)" in r.stdout and "n_components" in r.stdout
    ref = distgrail.build_index(distgrail.bundled_graph(), dims=3, backend="cpu")
    ref.save(tmp_path / "ref.h5")
    assert (tmp_path / "ref.h5").read_bytes() == index_bytes(tmp_path / "kegg.h5")  # (split by 2 ranks: merged)
    r = subprocess.run(["bash", os.path.join(ROOT, "slurm", "query.sbatch")], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "answers.txt").read_text().split().count("1") == distgrail.BUNDLED_REACHABLE
    assert "2 ranks" in r.stdout
    log = (tmp_path / "srun.log").read_text().splitlines()
    assert len(log) == 2 and all(x.startswith("srun --mpi=pmi2 ") and x.endswith("SRUN_CPUS_PER_TASK=3")
                                 for x in log), log  # PyPI's MPICH in VENV: pmi2
    cache = (tmp_path / "cupy-cache.log").read_text().split()
    assert cache == [str(tmp_path / "home" / ".cupy" / "kernel_cache")] * 2, cache  # not the job's $TMPDIR


@pytest.mark.parametrize("name", ["index.sbatch", "query.sbatch"])
def test_sbatch_template_without_its_venv_fails_loudly(tmp_path, name):
    bindir = _fake_srun(tmp_path)
    env = _env(PATH=bindir + os.pathsep + os.environ["PATH"], SLURM_JOB_ID="1", SLURM_NNODES="1",
               SLURM_NTASKS_PER_NODE="2", TMPDIR=str(tmp_path), VENV=str(tmp_path / "no-venv"))
    r = subprocess.run(["bash", os.path.join(ROOT, "slurm", name)], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    assert f"distgrail: error: no Python environment at VENV={tmp_path / 'no-venv'}" in r.stderr
    assert not (tmp_path / "srun.log").exists()  # nothing was started with another python


SMI_13 = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0 |"
SMI_12 = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"


@pytest.mark.parametrize("smi, env, want", [
    (SMI_13, {}, "extras=test,mpi,gpu-cuda13 mpi=pypi"),
    (SMI_12, {}, "extras=test,mpi,gpu-cuda12 mpi=pypi"),
    (None, {}, "extras=test,mpi mpi=pypi"),
    (None, {"MPI": "site"}, "extras=test mpi=site"),
    (SMI_13, {"GPU": "cuda12"}, "extras=test,mpi,gpu-cuda12 mpi=pypi"),
])
def test_setup_picks_cupy_by_the_driver_and_mpich_only_without_site_mpi(tmp_path, smi, env, want):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if smi is not None:
        fake = bindir / "nvidia-smi"
        fake.write_text("#!/bin/bash\necho '" + smi + "'\n")
        fake.chmod(0o755)
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "setup.sh")], capture_output=True, text=True,
                       env=_env(PATH=f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin", SETUP_DRY_RUN="1", **env),
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want


def test_pyproject_extras_and_numpy():
    import tomllib

    meta = tomllib.loads(open(os.path.join(ROOT, "pyproject.toml")).read())
    deps = meta["project"]["dependencies"]
    extras = meta["project"]["optional-dependencies"]
    assert "numpy>=2" in deps
    assert extras["gpu-cuda12"] == ["cupy-cuda12x>=13"] and extras["gpu-cuda13"][0].startswith("cupy-cuda13x")
    assert extras["gpu"] in (["distgrail[gpu-cuda12]"], ["distgrail[gpu-cuda13]"])
    assert extras["mpi"] == ["mpich>=4"] and not any("mpich" in d for d in deps)
    assert meta["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"] == {"kernels": "distgrail/_kernels"}


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


@pytest.mark.parametrize("user,env,bound", [("", {}, False), ("--bind-to core", {}, True),
                                            ("-x A --map-by ppr:1:socket", {}, True), ("--bind-to=core", {}, True),
                                            ("-bind-to socket", {}, True), ("--cpus-per-proc 4", {}, True),
                                            ("", {"OMPI_MCA_hwloc_base_binding_policy": "core"}, True)])
def test_mpirun_wrapper_leaves_open_mpi_ranks_unbound_unless_told(tmp_path, user, env, bound):
    """Open MPI binds 2 ranks to one core each by default: the wrapper passes --bind-to none,
    unless MPIRUN_ARGS binds or maps the ranks itself (then only the user's option is there)."""
    fake = tmp_path / "mpirun"
    fake.write_text('#!/usr/bin/env bash\nif [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.6"; exit 0; fi\n'
                    'echo "ARGS: $*"\n')
    fake.chmod(0o755)
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh"), "-n", "2", "info", "x.h5"],
                       env=_env(PATH=os.environ["PATH"], PYTHON=sys.executable, MPIEXEC=str(fake), MPIRUN_ARGS=user,
                                **env),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = r.stdout.split("ARGS: ", 1)[1].split()
    ours = "--bind-to" in args and args[args.index("--bind-to") + 1] == "none"
    assert ours is not bound
    assert (" ".join(args).count("bind-to") + " ".join(args).count("map-by") + " ".join(args).count("cpus-per")
            == (0 if env else 1))  # never two bindings: the user's, or ours
    assert args[:2] == ["-n", "2"] and args[-4:] == ["-m", "distgrail", "info", "x.h5"]


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


def test_quickstart_ends_by_saying_how_to_put_distgrail_on_path(tmp_path):
    """After the quickstart, `distgrail` is in .venv/bin, not on PATH: its last lines say to
    `source .venv/bin/activate` (issue 44, item 2). Run on a copy of the script beside a stand-in
    set-up (no pip) and this checkout's .venv."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    if not os.access(os.path.join(venv, "bin", "distgrail"), os.X_OK):
        pytest.skip(f"no {venv}/bin/distgrail (distgrail not installed in this environment)")
    launch = tmp_path / "launch"
    launch.mkdir()
    (launch / "quickstart.sh").write_text(open(os.path.join(ROOT, "launch", "quickstart.sh")).read())
    (launch / "setup.sh").write_text("#!/usr/bin/env bash\nexit 0\n")  # the environment exists already
    os.symlink(venv, tmp_path / ".venv")
    env = _env(OUT_DIR=str(tmp_path / "out"))
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(["bash", str(launch / "quickstart.sh")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-2:]
    assert "quickstart: OK: 20072 of 100,000 pairs reachable" in r.stdout
    assert "not on PATH" in last[0] and last[1].strip() == f"source {tmp_path}/.venv/bin/activate", last
    # and what it says works: after that line, `distgrail` is a command
    r = subprocess.run(["bash", "-c", f"{last[1].strip()} && distgrail --version"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("distgrail "), r.stdout + r.stderr


@pytest.mark.parametrize("env, want", [({}, "extras=test mpi=site"), ({"MPI": "pypi"}, "extras=test,mpi mpi=pypi")])
def test_setup_keeps_a_site_mpi_chosen_before(tmp_path, env, want):
    """A .venv set up with MPI=site stays so when the set-up runs again without MPI (the
    quickstart and launch/test.sh run it): it was switched back to PyPI's MPICH."""
    (tmp_path / "launch").mkdir()
    script = tmp_path / "launch" / "setup.sh"
    script.write_text(open(os.path.join(ROOT, "launch", "setup.sh")).read())
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / ".distgrail-installed").write_text("extras=test mpi=site\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    r = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60,
                       env=_env(PATH=f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin", SETUP_DRY_RUN="1", **env))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == want


@pytest.mark.parametrize("count", ["abc", "0", "-1", None])
def test_mpirun_wrapper_refuses_a_bad_rank_count(count):
    args = ["-n"] + ([count] if count is not None else [])
    r = subprocess.run(["bash", os.path.join(ROOT, "launch", "mpirun.sh"), *args, "info", "x.h5"],
                       env=_env(PATH=os.environ["PATH"], PYTHON=sys.executable), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "-n needs a positive number" in r.stderr, r.stderr
