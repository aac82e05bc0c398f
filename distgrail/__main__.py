"""``python -m distgrail`` (and ``python -m mpi4py -m distgrail`` under MPI)."""

import sys

from .cli import main

sys.exit(main())
