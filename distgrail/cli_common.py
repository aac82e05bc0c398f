"""What the command line's modules share: the MPI communicator of a run, the bundled example's
paths, the output checks, the options every command has, and the graph file's digest started
where ``distgrail index`` opens it.

A module below :mod:`distgrail.cli`: :mod:`distgrail.cli`, :mod:`distgrail.cli_pairs`,
:mod:`distgrail.server.command` and :func:`distgrail.io.generate.generate_command` import these
directly (nothing here imports them), so no helper has to be handed down as an argument.
"""

from __future__ import annotations

import argparse
import contextlib
import os

from .errors import DistGrailError

__all__ = ["comm_of", "resolve_bundled", "outputs_ok", "outputs_ok_everywhere", "common_options", "OneProcess",
           "input_digest"]


def comm_of(args):
    """COMM_WORLD (a clone, made once per run) when an MPI launcher started several ranks, else None."""
    if getattr(args, "no_mpi", False):
        return None
    if "mpi_comm" in vars(args):
        return args.mpi_comm
    from .mpi.launcher import detect, under_launcher

    comm = None
    if under_launcher():
        from .mpi.shmclean import at_job_start

        at_job_start()  # MPICH segments killed jobs left in /dev/shm: removed before MPI makes its own
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_size() > 1:  # (the first collective: a rank whose command line was refused joins it)
            from .mpi.errors import arguments_agreed

            arguments_agreed(MPI.COMM_WORLD)
        comm = MPI.COMM_WORLD.Clone() if MPI.COMM_WORLD.Get_size() > 1 else None
        if comm is not None:  # (for mpi.errors.error_everywhere alone: no other collective can meet it)
            args.mpi_error_comm = MPI.COMM_WORLD.Clone()
        launch = detect()
        if comm is None and launch.size:  # e.g. srun --mpi=none: N worlds of one rank, each would work alone
            args.mpi_comm = MPI.COMM_WORLD.Clone()
            err = DistGrailError(
                f"{launch.name} started {launch.size} tasks, but MPI sees a world of 1 rank: the launcher and "
                "the MPI library do not talk (with PyPI's MPICH use srun --mpi=pmi2; with a site MPI, the "
                "--mpi= plugin it was built for, often pmix)")
            err.comm_rank = 0  # every task is alone in its world: end each cleanly
            raise err
    args.mpi_comm = comm
    return comm


def resolve_bundled(value: str, kind: str, comm=None) -> str:
    """The path of the bundled example's graph or pairs (``kind``) for ``bundled``, else ``value``;
    an error when a file named ``bundled`` is in the working directory too (which of the two the
    user meant is theirs to say, not a guess). Under MPI (``comm``) rank 0's directory decides and
    its outcome is every rank's (one message, exit 2 on all, whatever the other ranks' directories
    hold)."""
    if value != "bundled":
        return value
    import distgrail

    from .errors import DistGrailError

    path = distgrail.bundled_graph() if kind == "graph" else distgrail.bundled_pairs()

    def check():
        if os.path.lexists(value):
            raise DistGrailError(f"'bundled' names the bundled {kind} and also {os.path.abspath(value)} in this "
                                 f"directory: give ./bundled for that file, or {path} for the bundled {kind}")

    if comm is None:
        check()
    else:
        from .mpi.errors import run_shared

        run_shared(comm, "checking the arguments", check if comm.Get_rank() == 0 else None)
    return path


def outputs_ok(args, *inputs, kind: str | None = None):
    """Refuse an output that is one of the inputs (same path or same inode); check its directory.
    ``kind``: what the output is ("graph", "index"), where the command does not say it alone
    (``convert`` writes either, as its input is)."""
    from .errors import OutputError
    from .io.atomic import check_output, same_file

    out = args.output
    if out == "-" and args.command not in ("query", "pairs"):  # (their "-" is stdout)
        raise OutputError(f"-o -: {args.command} writes a file (an HDF5 file or a graph file), not stdout; "
                          f"give an output path")
    if out is None or out == "-":
        return
    for i in inputs:
        if i is not None and (os.path.abspath(out) == os.path.abspath(i) or same_file(out, i)):
            raise OutputError(f"{out}: the output would overwrite the input {i}; choose another output path")
    if args.command in ("query", "index", "convert", "update"):  # (generate checks its own: the name picks the format)
        from .io.writers import check_extension

        check_extension(out, kind or {"query": "answers", "index": "index", "convert": "graph",
                                      "update": "index"}[args.command])
    check_output(out)


def outputs_ok_everywhere(args, comm, *inputs):
    """:func:`outputs_ok` on rank 0, its outcome shared by every rank (one message, exit 2 on all)."""
    if comm is None:
        return outputs_ok(args, *inputs)
    from .mpi.errors import run_shared

    run_shared(comm, "checking the output path", outputs_ok if comm.Get_rank() == 0 else None, args, *inputs)


def common_options(sp, backend: bool = True, quiet: str = "no progress or summary on the terminal") -> None:
    """``--quiet`` and ``--json``; with ``backend`` also ``--backend``, ``--share-gpus`` and ``--no-mpi``."""
    sp.add_argument("--quiet", action="store_true", help=quiet)
    sp.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    if backend:
        from .gpu.backend import BACKENDS

        sp.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="auto: GPU when CuPy sees one, else CPU (default auto)")
        sp.add_argument("--share-gpus", action="store_true",
                        help="under MPI, let several ranks share a GPU when ranks outnumber GPUs")
        sp.add_argument("--no-mpi", action="store_true", help="ignore an MPI launcher; run one process")


class OneProcess(argparse.Action):
    """Stores the value and marks the run as one rank's work (see :func:`distgrail.cli.main`).
    Given twice, the option is refused (exit 2): ``--pair 0 4 --pair 4 0`` answered only the last
    pair, with exit 0."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            def shown(v):
                return " ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)

            parser.error(f"{option_string} given twice ({shown(getattr(namespace, self.dest))} and {shown(values)}): "
                         f"it takes one"
                         + (" question; for several, give a pairs file" if self.dest == "pair" else " value"))
        setattr(namespace, self.dest, values)
        namespace.one_process = True


def input_digest(args, comm, path):
    """``distgrail index``'s handle on the digest of its graph file: a running
    :class:`~distgrail.io.digest.FileDigest` started here, where the input is opened, so that the
    hash overlaps the slow start-up (CuPy's import), handed to the reader as ``digest=`` and used
    as the ``with`` block's value: the block cancels it unless a reader took it over and no error
    ended the block. Started for one process (under MPI the root's reader starts its own, paused
    until the ranks have parsed) whose backend is not ``cpu`` (the GPU reader, and the CPU reader
    behind ``auto``, take it; ``--backend cpu`` hashes as the CPU reader always did) and a text
    file; else the block's value is None and each reader starts its own."""
    if comm is None and args.backend != "cpu":
        from .io.read import start_digest

        d = start_digest(path, args.format)
        if d is not None:
            return d
    return contextlib.nullcontext()


def process_age() -> float | None:
    """Seconds since this process started (Linux: ``/proc/self/stat``'s start time against the
    boot clock, to the kernel's clock tick), None where that cannot be read. ``index --json``
    reports it at the build's start: the interpreter, the imports, MPI's and the GPU's set-up."""
    import time

    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None

