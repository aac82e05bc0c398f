"""GPU support: the backend seam, host↔device copies, kernel loading, memory checks and the
level-sweep scheduler. CuPy is imported only when a GPU is used."""
