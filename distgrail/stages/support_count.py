"""How many support vertices phase 5 keeps: the ``--supports`` argument (an integer K >= 0 or
``auto``) and the automatic K from the condensed DAG's density (:mod:`distgrail.stages.supports`
re-exports these names)."""

from __future__ import annotations

import numpy as np

from ..errors import DistGrailError

__all__ = ["DEFAULT_SUPPORTS", "AUTO_SUPPORTS", "auto_supports", "resolve_supports", "supports_arg",
           "check_supports_arg"]

#: default K: ``"auto"`` = :func:`auto_supports` of the condensed DAG
DEFAULT_SUPPORTS = "auto"
#: bounds of the automatic K and its edges factor: K = the power of two at or above
#: ``factor * m / C`` (mean out-degree of the condensed DAG), clamped to ``[low, high]``: dense
#: DAGs get more supports (fewer searched pairs), sparse graphs (mean degree ~1-5) keep K = 64,
#: one mask word: their queries read the smallest records.
AUTO_SUPPORTS = {"low": 64, "high": 1024, "factor": 10}


def check_supports_arg(K):
    if K == "auto":
        return
    if isinstance(K, bool) or not isinstance(K, (int, np.integer)) or K < 0:
        raise DistGrailError(f"supports must be an integer >= 0 or 'auto', got {K!r}")


def supports_arg(text: str):
    """``--supports`` (command line, benchmarks): an integer K >= 0 or ``auto``."""
    import argparse

    if text != "auto" and not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 or 'auto', got {text!r}")
    return text if text == "auto" else int(text)


def auto_supports(C: int, m: int) -> int:
    """K for ``supports="auto"``: the power of two at or above 10 x the mean out-degree ``m / C``
    of the condensed DAG, within [64, 1024] (:data:`AUTO_SUPPORTS`); a pure function of (C, m),
    so every rank of a distributed build gets the same K."""
    a = AUTO_SUPPORTS
    want = a["factor"] * int(m) / max(int(C), 1)
    k = a["low"]
    while k < want and k < a["high"]:
        k *= 2
    return int(min(k, a["high"]))


def resolve_supports(K, dag) -> int:
    """K as an integer: ``"auto"`` becomes :func:`auto_supports` of ``dag`` (C components, m edges)."""
    check_supports_arg(K)
    if K != "auto":
        return int(K)
    C = int(dag.C) if hasattr(dag, "C") else int(dag.indptr.shape[0]) - 1
    m = int(dag.m) if hasattr(dag, "m") else int(dag.indices.shape[0])  # a spread DAG holds only its rows
    return auto_supports(C, m)
