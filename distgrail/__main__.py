"""``python -m distgrail`` (and ``python -m mpi4py -m distgrail`` under MPI)."""

from .cli import quick_exit
from .cli_entry import command_line

quick_exit(command_line())
