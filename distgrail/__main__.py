"""``python -m distgrail`` (and ``python -m mpi4py -m distgrail`` under MPI)."""

from .cli_entry import command_line
from .cli_exit import quick_exit

quick_exit(command_line())
