"""The insertion benchmark (distgrail/benchmarks/update.py) on the CPU: rows for every count,
0 wrong answers against the rebuilt index, the JSON kept, bad counts refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distgrail.benchmarks import update


@pytest.mark.parametrize("kind", ["random", "chain"])
def test_rows_and_no_wrong_answers(tmp_path, capsys, kind):
    out = tmp_path / "u.json"
    assert update.main(["--graph", "scale-free:400:2", "--adds", "5,300", "--kind", kind, "--pairs", "2000",
                        "--check", "2000", "--backend", "cpu", "--dims", "2", "--json", str(out)]) == 0
    rows = json.load(open(out))["rows"]
    assert [r["adds"] for r in rows] == [5, 300] and all(r["wrong"] == 0 and r["checked"] == 2000 for r in rows)
    assert all(r["C_after"] <= r["C_before"] == 400 and r["update_s"] > 0 < r["rebuild_s"] for r in rows)
    assert "rebuild s" in capsys.readouterr().out


def test_chain_edges_follow_one_order():
    s, t = update.new_edges(50, 10, "chain", np.random.default_rng(1))
    assert s.size == t.size == 10 and np.array_equal(s[1:], t[:-1]) and len(set(s.tolist())) == 10


@pytest.mark.parametrize("bad", [["--adds", "0"], ["--adds", "x"], ["--pairs", "0"]])
def test_bad_arguments(bad, capsys):
    with pytest.raises(SystemExit) as e:
        update.main(["--graph", "scale-free:50:2", *bad])
    assert e.value.code == 2
