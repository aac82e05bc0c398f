"""Review 55: README.md read by a newcomer, every command run as written; each test here failed
before the fix it names (README, --help or behaviour)."""

import os
import re

import pytest

from conftest import ROOT

README = os.path.join(ROOT, "README.md")


def _readme() -> str:
    with open(README, encoding="utf-8") as f:
        return f.read()


def _index_table_rows() -> list:
    text = _readme()
    start = text.index("## Index file (HDF5")
    rows, seen = [], False
    for ln in text[start:].splitlines():
        if ln.startswith("| `/"):
            rows.append(ln)
            seen = True
        elif seen and not ln.startswith("|"):
            break
    return rows


def test_readme_index_table_says_which_datasets_a_plain_grail_index_lacks(tmp_path):
    # `index --supports 0` (plain GRAIL) writes no /supports/ datasets, while the README's table
    # listed /supports/ids (K,) and the masks (C, W) unconditionally: h5py's f['supports/ids']
    # on such an index is a KeyError the table did not foretell
    import h5py

    import distgrail

    for k, name in ((0, "k0.h5"), ("auto", "k.h5")):
        distgrail.build_index(distgrail.bundled_graph(), dims=2, supports=k, backend="cpu",
                              output=str(tmp_path / name))

    def datasets(path):
        out = set()
        with h5py.File(path) as f:
            f.visititems(lambda n, o: out.add("/" + n) if isinstance(o, h5py.Dataset) else None)
        return out

    plain, default = datasets(tmp_path / "k0.h5"), datasets(tmp_path / "k.h5")
    rows = _index_table_rows()
    listed = {p for row in rows for p in re.findall(r"`(/[a-z_0-9/]+)`", row.split("|")[1])}
    assert default <= listed, f"the README's index table lacks {sorted(default - listed)}"
    for name in sorted(default - plain):
        group = name.rsplit("/", 1)[0] + "/"
        said = [row for row in rows if "K = 0" in row and (f"`{name}`" in row or f"`{group}`" in row)]
        assert said, f"an index built with --supports 0 has no {name}; the README's table does not say so"
