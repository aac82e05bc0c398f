"""launch/module_map.py (issue 41): the module map of this tree is read, has no import circle, and
every module stands in its layer table; a planted module and a planted upward import are seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "launch", "module_map.py")


def _map(*args):
    r = subprocess.run([sys.executable, SCRIPT, "--json", *args], check=False, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_map_of_this_tree():
    m = _map()
    assert m["modules"] > 50 and m["benchmark_modules"] > 0
    assert "distgrail.index" in m["imports"]["distgrail.build"]
    assert m["edges"] >= len(m["imports"]["distgrail.build"])
    assert m["circles"] == [], f"import circles: {m['circles']}"
    assert m["unplaced"] == [], f"modules not in launch/module_map.py LAYERS (add them): {m['unplaced']}"
    placed = sum(len(v["modules"]) for v in m["layers"].values())
    assert placed == m["modules"]


def test_a_planted_module_and_an_upward_import_are_seen(tmp_path):
    pkg = tmp_path / "distgrail"
    (pkg / "io").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "io" / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("")
    (pkg / "build.py").write_text("from .errors import x\n")
    (pkg / "io" / "graph.py").write_text("import os\n\n\ndef f():\n    from ..build import build_index\n")
    (pkg / "newthing.py").write_text("from . import errors\n")
    m = _map("--tree", str(tmp_path))
    assert m["modules"] == 6 and m["edges"] == 3
    assert m["unplaced"] == ["distgrail.newthing"]
    assert [(u["from"], u["to"], u["at"], u["lazy"]) for u in m["upward"]] == [
        ("distgrail.io.graph", "distgrail.build", os.path.join("distgrail", "io", "graph.py") + ":5", True)]
