"""``python -m distgrail.gpu.kernels --check``: compile every kernels/*.cu with nvcc."""

import sys

from . import main

sys.exit(main())
