"""The examples in the docstrings run and print what they claim; the README's commands exist."""

import doctest
import importlib
import os

import pytest

from conftest import ROOT

MODULES = ["distgrail", "distgrail.hashing", "distgrail.io.read", "distgrail.io.graph", "distgrail.stages.condense",
           "distgrail.index", "distgrail.build", "distgrail.gpu.backend", "distgrail.io.generate", "distgrail.query.stats",
           "distgrail.mpi.collectives", "distgrail.mpi.binding"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0


def test_readme_mentions_real_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    for script in ("launch/quickstart.sh", "launch/test.sh"):
        assert script in text and os.path.exists(os.path.join(ROOT, script))
    from distgrail.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices
    for cmd in sub:
        assert f"distgrail {cmd}" in text, cmd
