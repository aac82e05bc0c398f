"""``distgrail convert`` on a GPU backend writes the graph's own CSR after condensing it, so the
parsed edges must stay the graph's: the condensation gets its own copies (no hand-over, no read
again). CPU test: a stub GPU backend, the GPU reader and condensation emulated on the host."""

import json

import numpy as np

from distgrail.cli import main
from distgrail.io import binary
from distgrail.io.graph import EdgeGraph, edge_graph_csr
from distgrail.io.read import as_graph
from distgrail.stages import phases
from distgrail.stages.condense import condense
from test_condense import GRAPHS
from test_handed_edges import _Dev, _StubGpu


class _Gpu(_StubGpu):
    device = None
    xp = None


def test_convert_on_a_gpu_keeps_the_edges_it_writes(tmp_path, monkeypatch, capsys):
    import distgrail.gpu.backend as backend
    import distgrail.io.parse as parse

    g0 = GRAPHS["many-small-sccs"]
    path = tmp_path / "g.txt"
    path.write_text("".join(f"{u} {v}\n" for u, v in zip(g0.src.tolist(), g0.dst.tolist())))
    want = tmp_path / "cpu.h5"
    assert main(["convert", str(path), "-o", str(want), "--backend", "cpu", "--quiet"]) == 0

    def read_on_gpu(p, fmt, num_vertices, be, notify=None, **kw):  # as the GPU reader leaves the graph: device edges
        g = as_graph(p, num_vertices, fmt, **kw)
        g.src, g.dst = _Dev(g.src), _Dev(g.dst)
        g.meta["parser"] = "gpu"
        return g

    taken = []

    def condense_on_gpu(held, n, be, **kw):  # as condense_cuda_of: the list emptied, each array let go of
        src, dst = (a.a for a in held)
        taken.append(len(held))
        held.clear()
        return condense(EdgeGraph(n=n, src=src, dst=dst))

    def device_csr(graph, notify):  # write_binary_graph's CSR of device edges, made on the host
        return edge_graph_csr(EdgeGraph(graph.n, graph.src.a, graph.dst.a, graph.name))

    monkeypatch.setattr(backend, "get_backend", lambda name: _Gpu())
    monkeypatch.setattr(parse, "read_graph_cuda", read_on_gpu)
    monkeypatch.setattr(phases, "condense_cuda_of", condense_on_gpu)
    monkeypatch.setattr(binary, "_device_csr", device_csr)
    monkeypatch.setattr("distgrail.cli._sync", lambda be: None)
    got = tmp_path / "gpu.h5"
    capsys.readouterr()
    assert main(["convert", str(path), "-o", str(got), "--backend", "gpu", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert taken == [2] and summary["edges_read"] == g0.m and summary["parser"] == "gpu"
    assert got.read_bytes() == want.read_bytes()
