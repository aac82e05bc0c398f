"""Review 41 of the command line (a README reader): ``generate`` refuses an option of another kind
instead of ignoring it, ``query --server`` refuses the local options it would ignore, and a
``query`` without its index or pairs says which to give."""

from __future__ import annotations

import pytest

from distgrail.cli import main


@pytest.mark.parametrize("kind,extra,flag", [
    ("paper", ["-n", "100", "--scale", "3"], "--scale"),
    ("paper", ["-n", "100", "--levels", "3"], "--levels"),
    ("scale-free", ["-n", "100", "-a", "0.5"], "-a"),
    ("layered", ["-n", "100", "--threads", "2"], "--threads"),
    ("rmat", ["--scale", "5", "-n", "3"], "-n"),
    ("rmat", ["--scale", "5", "--degree", "3"], "--degree"),
])
def test_generate_refuses_an_option_of_another_kind(tmp_path, capsys, kind, extra, flag):
    """``generate paper -n 100 --scale 3`` wrote a 100-vertex paper DAG with exit 0, the scale unread."""
    out = tmp_path / "g.txt"
    assert main(["generate", kind, *extra, "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"generate {kind}: {flag} is for generate" in err and not out.exists(), err


def test_generate_defaults_unchanged_and_options_of_the_kind_taken(tmp_path):
    """The defaults left out are the ones the help states: the same bytes as when given."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    assert main(["generate", "paper", "-n", "300", "-o", str(a), "--quiet"]) == 0
    assert main(["generate", "paper", "-n", "300", "--degree", "10", "-o", str(b), "--quiet"]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert main(["generate", "rmat", "--scale", "6", "-o", str(a), "--quiet"]) == 0
    assert main(["generate", "rmat", "--scale", "6", "--edge-factor", "16", "-a", "0.57", "-b", "0.19", "-c", "0.19",
                 "-o", str(b), "--quiet"]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert main(["generate", "layered", "-n", "300", "--levels", "7", "-o", str(a), "--quiet"]) == 0


@pytest.mark.parametrize("extra,named", [(["--backend", "cpu"], "--backend"), (["--partition", "on"], "--partition"),
                                          (["--share-gpus"], "--share-gpus")])
def test_query_server_refuses_the_local_options_it_would_ignore(tmp_path, capsys, extra, named):
    pairs = tmp_path / "p.txt"
    pairs.write_text("0 1\n")
    assert main(["query", "--server", "http://127.0.0.1:9", str(pairs), *extra, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{named} with --server" in err and "distgrail serve" in err, err


@pytest.mark.parametrize("argv,says", [
    (["query", "--server", "http://127.0.0.1:9", "--pair", "2", "3"], "--pair asks the index file"),
    (["query", "--server", "http://127.0.0.1:9"], "give the pairs file"),
    (["query", "--pair", "2", "3"], "give the index file"),
    (["query"], "give the index file"),
])
def test_query_without_its_index_or_pairs_says_which(capsys, argv, says):
    """``query --server URL --pair 2 3`` was argparse's 'the following arguments are required: index'."""
    assert main(argv) == 2
    assert says in capsys.readouterr().err
