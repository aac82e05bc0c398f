"""``python -m distgrail.benchmarks.checksums`` on a small size: the host's block CRC-32s timed
and counted; without a GPU (CI) its row alone, said so (both rows on a GPU: tests/test_checksums.py)."""

import json

import pytest

from distgrail.benchmarks import checksums


def test_the_host_row_is_timed_and_the_gpu_row_says_when_there_is_none(capsys, monkeypatch):
    import distgrail.gpu.backend as backend

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    assert checksums.main(["--mib", "9", "--repeat", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["mib"] == 9 and row["block"] == 4 << 20 and row["blocks"] == 3 and row["host_seconds"] > 0
    assert row["gpu_seconds"] is None and row["host_over_gpu"] is None
    assert checksums.main(["--mib", "1", "--repeat", "1"]) == 0
    assert "no usable GPU: not run" in capsys.readouterr().out
    for bad in (["--mib", "0"], ["--repeat", "0"]):
        with pytest.raises(SystemExit) as e:
            checksums.main(bad)
        assert e.value.code == 2
