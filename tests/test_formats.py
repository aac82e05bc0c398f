"""The input-format registry (distgrail/io/formats) is the one list: docs/formats.md's table, the
command line's ``--format`` choices, the GPU format codes and the extension table of ``auto`` come
from it; every format has the reader it names; a file is looked at once between the GPU path's plan
and the CPU reader."""

from __future__ import annotations

import gzip
import importlib
import os
import pickle

import pytest

from conftest import ROOT
from distgrail import constants
from distgrail.io import chunks, formats, read
from distgrail.io.formats import REGISTRY

SAMPLES = {
    "gra": b"graph_for_greach\n3\n0: 1 #\n1: 2 #\n2: #\n",
    "edgelist": b"0 1\n1 2\n",
    "mtx": b"%%MatrixMarket matrix coordinate pattern general\n3 3 2\n1 2\n2 3\n",
    "labelled": b"a b\nb c\n",
}


def _sample(tmp_path, name: str) -> str:
    """A small valid file of format ``name``, named by the format's first extension (if any)."""
    ext = (formats.BY_NAME[name].extensions or (".txt",))[0]
    path = tmp_path / f"g-{name}{ext}"
    if name in SAMPLES:
        path.write_bytes(SAMPLES[name])
    elif name == "h5":
        from distgrail.io.writers import write_graph

        write_graph(read.read_graph(_sample(tmp_path, "gra")), path)
    else:
        pa = pytest.importorskip("pyarrow")
        table = pa.table({"src": [0, 1], "dst": [1, 2]})
        if name == "parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, path)
        else:
            import pyarrow.ipc as ipc

            with ipc.new_file(str(path), table.schema) as w:
                w.write_table(table)
    return str(path)


def test_docs_table_is_the_registrys():
    with open(os.path.join(ROOT, "docs", "formats.md"), encoding="utf-8") as f:
        doc = f.read()
    assert doc == formats.markdown(), "stale: python -m distgrail.io.formats --markdown > docs/formats.md"
    for f in REGISTRY:
        assert f"| `{f.name}` |" in doc


def test_format_choices_are_the_registrys():
    from distgrail.cli import build_parser
    from distgrail.io.generate import EXTENSIONS

    sub = build_parser()._subparsers._group_actions[0].choices
    choices = {c: sub[c]._option_string_actions["--format"].choices for c in ("index", "convert", "generate")}
    names = tuple(f.name for f in REGISTRY)
    assert choices["index"] == choices["convert"] == ("auto",) + names == read.FORMATS
    written = tuple(f.name for f in REGISTRY if f.written)
    assert choices["generate"] == ("auto",) + written and set(EXTENSIONS) == set(written)


def test_gpu_codes_are_the_constants_the_kernels_get():
    parse = constants.macro_values("parse")
    assert chunks.FMT_CODES is formats.FMT_CODES
    assert formats.FMT_CODES == {k: getattr(constants, f"FMT_{k.upper()}") for k in formats.FMT_CODES}
    assert formats.FMT_CODES == {k: parse[f"FMT_{k.upper()}"][0] for k in formats.FMT_CODES}
    assert sorted(formats.FMT_CODES.values()) == sorted({v for k, (v, _) in parse.items() if k.startswith("FMT_")})
    assert set(formats.GPU_FORMATS) | {"csv"} == set(formats.FMT_CODES)
    assert set(formats.HOST_FORMATS) == {f.name for f in REGISTRY} - set(formats.GPU_FORMATS)
    for f in REGISTRY:  # ranks split what one GPU parse reads: the same parser over byte ranges
        assert not f.split or f.gpu_code is not None, f.name
        assert not f.gpu_stream or f.storage == "text", f.name


EXTENSIONS = [(f.name, e) for f in REGISTRY for e in f.extensions]


@pytest.mark.parametrize("fmt, ext", EXTENSIONS, ids=[e for _, e in EXTENSIONS])
def test_every_extension_is_detected_as_its_format(tmp_path, fmt, ext):
    plain = tmp_path / f"g{ext}"
    plain.write_bytes(b"0 1\n1 2\n")  # the name decides, whatever the content
    assert read.detect_format(str(plain)) == fmt
    upper = tmp_path / f"G{ext.upper()}"
    upper.write_bytes(b"0 1\n")
    assert read.detect_format(str(upper)) == fmt
    for suffix in formats.COMPRESSED_SUFFIXES[:2]:  # the name without its compression suffix
        packed = tmp_path / f"g{ext}{suffix}"
        packed.write_bytes(gzip.compress(b"0 1\n"))
        assert read.detect_format(str(packed)) == fmt


SNIFFED = [f for f in REGISTRY if f.sniff is not None]


@pytest.mark.parametrize("spec", SNIFFED, ids=[f.name for f in SNIFFED])
def test_every_sniff_rule_is_detected(tmp_path, spec):
    body = spec.sniff.prefix + b" rest\n0 1\n"
    plain = tmp_path / "g.bin"
    plain.write_bytes(body)
    assert read.detect_format(str(plain)) == spec.name
    packed = tmp_path / "g.bin.gz"
    packed.write_bytes(gzip.compress(body))
    # stored-byte rules look at an uncompressed file only; text rules at the decompressed text
    assert read.detect_format(str(packed)) == (formats.FALLBACK if spec.sniff.stored else spec.name)


def test_detection_order(tmp_path):
    def detect(name, data):
        p = tmp_path / name
        p.write_bytes(data)
        return read.detect_format(str(p))

    assert detect("x.bin", b"0 1\n") == formats.FALLBACK == "edgelist"
    assert detect("x.gra", b"PAR1....") == "parquet"  # stored bytes before other names
    assert detect("x.arrow", b"PAR1....") == "arrow"  # a table's name before stored bytes
    assert detect("x.mtx", b"graph_for_greach\n1\n0: #\n") == "mtx"  # a name before the text
    assert detect("x.txt", b"  graph_for_greach\n1\n0: #\n") == "gra"
    assert detect("x.txt", b"%%matrixmarket matrix coordinate pattern general\n1 1 0\n") == "mtx"
    assert detect("x.txt", b"\n%%MatrixMarket\n") == "edgelist"  # the first line only


class _Called(Exception):
    pass


@pytest.mark.parametrize("spec", REGISTRY, ids=[f.name for f in REGISTRY])
def test_every_format_is_read_by_its_reader(tmp_path, monkeypatch, spec):
    path = _sample(tmp_path, spec.name)
    module, _, name = spec.reader.rpartition(".")
    mod = importlib.import_module(module)
    assert callable(getattr(mod, name)), spec.reader

    def called(*a, **k):
        raise _Called(spec.reader)

    monkeypatch.setattr(mod, name, called)
    if hasattr(read, name):  # (imported by name into the reading module)
        monkeypatch.setattr(read, name, called)
    with pytest.raises(_Called):
        read.read_graph(path, spec.name)
    monkeypatch.undo()
    g = read.read_graph(path, spec.name)  # and the real reader reads it
    assert g.n == 3 and g.m == 2 and g.meta.get("format", spec.name) == spec.name


@pytest.mark.parametrize("spec", REGISTRY, ids=[f.name for f in REGISTRY])
def test_the_gpu_plan_follows_the_registry(tmp_path, spec):
    plan = chunks.plan_read(_sample(tmp_path, spec.name), "auto" if spec.name != "labelled" else "labelled")
    assert plan.fmt == spec.name and plan.source is not None and plan.source.fmt == spec.name
    if spec.storage == "binary":
        assert plan.kind == "h5"
    elif spec.gpu_code is None:
        assert (plan.kind, plan.reason) == ("cpu", f"{spec.name} input is read on the host")
    else:
        assert plan.kind == "text" and plan.code == spec.gpu_code


def test_comma_separated_edge_lists_get_the_csv_code(tmp_path):
    p = tmp_path / "g.csv"
    p.write_bytes(b"src,dst\n0,1\n1,2\n")
    plan = chunks.plan_read(str(p))
    assert plan.kind == "text" and plan.comma and plan.code == formats.FMT_CODES["csv"] == constants.FMT_CSV


@pytest.mark.parametrize("compress", [False, True])
def test_a_file_is_looked_at_once_from_plan_to_cpu_reader(tmp_path, monkeypatch, compress):
    data = b"source target\nalice bob\nbob carol\n"
    p = tmp_path / ("g.txt.gz" if compress else "g.txt")
    p.write_bytes(gzip.compress(data) if compress else data)
    plan = chunks.plan_read(str(p))
    assert (plan.kind, plan.reason, plan.fmt) == ("cpu", "node names are read on the host", "edgelist")
    looks = []
    for name in ("raw_head", "peek", "sniff", "codec_of"):
        real = getattr(formats, name)
        monkeypatch.setattr(formats, name, lambda *a, _r=real, _n=name, **k: looks.append(_n) or _r(*a, **k))
    g = read.read_graph(str(p), source=plan.source)
    assert looks == [] and g.n == 3 and list(g.meta["node_labels"].values) == ["alice", "bob", "carol"]
    again = read.read_graph(str(p))  # without the plan's source the file is looked at again (the check sees it)
    assert looks and again.n == g.n


def test_a_source_travels_as_its_path_and_format(tmp_path):
    p = tmp_path / "g.txt"
    p.write_bytes(b"0 1\n")
    s = formats.Source(str(p))
    assert s.fmt == "edgelist" and s.dialect.body == 0 and s.head() == b"0 1\n"
    t = pickle.loads(pickle.dumps(s))
    assert (t.path, t.asked, t.fmt, t.codec) == (s.path, "auto", "edgelist", None)
    assert "stored" not in vars(t) and "dialect" not in vars(t) and t.head() == b"0 1\n"
