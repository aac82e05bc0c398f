"""Review 55 of ``distgrail generate`` (distgrail/io/generate.py, rmat.py, writers.py, the command
line): the defects found, each pinned."""

from __future__ import annotations

import numpy as np
import pytest

from distgrail.io import rmat


class _Refused(Exception):
    pass


def test_h5_sort_starts_no_more_threads_than_its_keys_fill(monkeypatch):
    """``generate rmat --scale 12 --threads 100000 -o r.h5``: the bucket sort cut its 65,536 keys
    into 65,536 slices, each with a row of 4,096 bucket counts and places (gigabytes, where
    --threads 2 takes megabytes), and started that many threads. Slices now hold at least a few
    keys a bucket; the CSR is the same for any thread count."""
    sizes = []
    real = rmat.ThreadPoolExecutor

    def pool(workers, **kw):
        sizes.append(workers)
        if workers > 64:
            raise _Refused(f"{workers} threads for {m} keys")
        return real(workers, **kw)

    monkeypatch.setattr(rmat, "ThreadPoolExecutor", pool)
    rng = np.random.default_rng(1)
    n, m = 1 << 12, 1 << 16
    keys = (rng.integers(0, n, m).astype(np.uint64) << np.uint64(32)) | rng.integers(0, n, m).astype(np.uint64)
    want = rmat.csr_of_keys(n, keys.copy(), 2, jit=False)
    got = rmat.csr_of_keys(n, keys.copy(), 100_000)
    assert sizes and max(sizes) <= 64
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # slices still split a graph worth it (the threads the user gave, up to the bound)
    sizes.clear()
    rmat.csr_of_keys(n, keys.copy(), 3)
    assert sizes == [3]


@pytest.mark.parametrize("degree,mean", [(3.0, 3.0), (2.3, 2.5), (0.4, 0.5), (1.25, 1.0)])
def test_paper_degree_is_the_average_the_help_states(degree, mean):
    """``generate paper --degree 2.3``: the help said 'average out-degree', the graph had 2.5 (and
    --degree 0.4 gave 0.5, 1.25 gave 1.0): vertex i draws 0..round(2D). The help and README now say
    so; the graph is unchanged."""
    from distgrail.cli import build_parser
    from distgrail.io.generate import generate_csr

    sub = next(a for a in build_parser()._actions if getattr(a, "choices", None) and "generate" in a.choices)
    help_text = next(a.help for a in sub.choices["generate"]._actions if "--degree" in a.option_strings)
    assert "round(2D)/2" in help_text and "average out-degree;" not in help_text
    g = generate_csr("paper", 100_000, degree, seed=4)
    assert abs(g.m / g.n - mean) < 0.03



def test_generate_c_help_reads_as_a_sentence():
    """``generate --help``'s -c read 'rmat: bottom-left; d = 1 - a - b - c quadrant probability'."""
    from distgrail.cli import build_parser

    sub = next(a for a in build_parser()._actions if getattr(a, "choices", None) and "generate" in a.choices)
    helps = {a.option_strings[0]: a.help for a in sub.choices["generate"]._actions if a.option_strings}
    assert helps["-c"].startswith("rmat: bottom-left quadrant probability (default 0.19)"), helps["-c"]
    assert "d = 1 - a - b - c" in helps["-c"]


@pytest.mark.parametrize("seed", ["-1", str(1 << 64)])
def test_rmat_seed_refused_in_the_words_of_every_command(tmp_path, capsys, seed):
    """README: 'seed must be an integer in 0..2^64-1, got -1' (index, generate and pairs alike);
    ``generate rmat`` said '... in 0..18446744073709551615'."""
    from distgrail.cli import main

    out = tmp_path / "r.txt"
    assert main(["generate", "rmat", "--scale", "4", "--seed", seed, "-o", str(out), "--quiet"]) == 2
    assert f"seed must be an integer in 0..2^64-1, got {seed}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("degree", ["1e20", "1e308"])
def test_paper_degree_far_above_n_is_the_complete_dag(tmp_path, degree):
    """``generate paper -n 100 --degree 1e20``: OverflowError traceback, exit 1 (2 × 1e20 + 1 passed
    a uint64), where --degree 200 gave the complete DAG; it now gives that DAG too."""
    from distgrail.cli import main
    from distgrail.io.read import read_graph

    out = tmp_path / "g.txt"
    assert main(["generate", "paper", "-n", "100", "--degree", degree, "-o", str(out), "--quiet"]) == 0
    g = read_graph(str(out))
    assert g.m == 100 * 99 // 2 and bool((np.asarray(g.dst) > np.asarray(g.src)).all())
