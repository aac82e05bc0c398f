"""``python -m distgrail.io.formats --markdown``: print docs/formats.md (the registry's table).
(A package with a ``__main__`` module, so that ``-m`` runs it without runpy's warning about a
module the package import already loaded.)"""

import sys

from . import main

sys.exit(main())
