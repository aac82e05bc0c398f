"""``python -m distgrail.settings``: each ``DISTGRAIL_*`` setting's value in effect (exit status 2
when one is malformed); ``--markdown``: docs/settings.md's table."""

from __future__ import annotations

import os
import sys

from ..errors import DistGrailError
from . import SETTINGS, markdown


def main(argv=None) -> int:
    """``--markdown``: print the table; else each setting's value in effect (exit 2 when one is malformed)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if argv:
        print("usage: python -m distgrail.settings [--markdown]", file=sys.stderr)
        return 2
    bad = 0
    for name, s in SETTINGS.items():
        raw = os.environ.get(name)
        try:
            v = s.value(raw)
        except DistGrailError as e:
            print(f"{name}: error: {e}")
            bad += 1
            continue
        where = "default" if raw is None else "set"
        shown = "(hidden)" if s.secret and raw is not None else repr(v)
        print(f"{name} = {shown} ({where})")
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
