"""``python -m distgrail`` (and ``python -m mpi4py -m distgrail`` under MPI)."""

from .cli import main, quick_exit

quick_exit(main())
