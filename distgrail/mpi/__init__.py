"""MPI: error sharing, chunked collectives, GPU binding, node-shared memory, the distributed build
and sharded queries. Nothing here imports ``mpi4py`` at import time."""
