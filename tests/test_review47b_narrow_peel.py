"""Review of the narrow-trim hand-over (:meth:`distgrail.stages.scc.CudaSteps.sweep` and
``_hand_over``) on the CPU: the peel's loop runs with a NumPy stand-in of its one-block kernel,
which peels as the CUDA one does (a frontier a round, at most ``cap`` rounds a launch). The
hand-over judges the width of the rounds since the last check; the vertices decided before the
peel began (the sources and isolated vertices, its first frontier) must not count, and the first
check, after ``narrow_rounds`` rounds, must still be able to hand a deep, narrow peel over, as
the commit said ("a chain alone hands over at the same round as before"): a chain deeper than
``narrow_rounds`` but shallower than twice it was never handed over."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from distgrail.stages import scc
from distgrail.stages.scc import CudaSteps, NarrowPeel


class _Dev(np.ndarray):
    """A host array with CuPy's ``set``/``get``."""

    def set(self, a):
        self[...] = a

    def get(self):
        return np.array(self)


def _dev(f):
    return lambda *a, **k: f(*a, **k).view(_Dev)


_XP = SimpleNamespace(**{k: getattr(np, k) for k in ("int32", "int64", "uint64", "count_nonzero", "flatnonzero",
                                                     "asarray")},
                      zeros=_dev(np.zeros), empty=_dev(np.empty), full=_dev(np.full))


def _small(grid, block, args):
    """The one-block peel (mode PEEL): up to ``cap`` rounds (0: no cap) of the frontier in fa/fb."""
    mode, ptr, idx, rep, cnt, _color, _mark, level, has_level, _bit, fa, fb, state, _limit = args
    assert int(mode) == scc.PEEL
    nf, rnd, work, cur, cap = (int(x) for x in state.get())
    done = 0
    while nf and (cap == 0 or done < cap):
        fin, fout = (fb, fa) if cur else (fa, fb)
        nxt = []
        for v in fin[:nf]:
            for w in idx[ptr[v]:ptr[v + 1]]:
                cnt[w] -= 1
                if cnt[w] == 0 and rep[w] < 0:
                    rep[w] = w
                    if has_level:
                        level[w] = rnd + 1
                    nxt.append(w)
        nf = len(nxt)
        fout[:nf] = nxt
        work = int(sum(ptr[w + 1] - ptr[w] for w in nxt))
        rnd, cur, done = rnd + 1, cur ^ 1, done + 1
    state.set(np.array([nf, rnd, work, cur, done], dtype=np.int64))


def _steps(narrow_rounds):
    s = CudaSteps.__new__(CudaSteps)
    s.xp, s.limit, s.narrow_rounds, s.whole = _XP, 2**31 - 1, narrow_rounds, None
    s._k = lambda name: _small if name == "dg_cond_sweep_small" else None
    return s


def _peel_chain(s, k, isolated=0):
    """The trim of a chain of ``k`` vertices (plus ``isolated`` vertices of no edge); rounds."""
    n = k + isolated
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:k] = np.arange(1, k)
    ptr[k:] = k - 1
    idx = np.arange(1, k, dtype=np.int32)
    rep = np.full(n, -1, np.int32).view(_Dev)
    cnt = np.bincount(idx, minlength=n).astype(np.int32)
    return s.peel(ptr, idx, rep, cnt, np.full(n, -1, np.int32))


@pytest.fixture(autouse=True)
def _compiled(monkeypatch):
    from distgrail.stages import deep

    monkeypatch.setattr(deep, "host_sweeps_compiled", lambda: True)


def test_the_stand_in_peels_a_chain_a_vertex_a_round():
    assert _peel_chain(_steps(None), 300) == 300  # (the last round finds no successor)


@pytest.mark.parametrize("k", [150, 250])
def test_a_chain_past_the_first_check_is_handed_over_there(k):
    """narrow_rounds = 100: a chain of ``k`` vertices (2k - 1 vertices plus edges, less than ten
    times 100 rounds) is narrow and costs more than the host's condensation at the first check,
    and is handed over there (the first check only recorded: 150 never, 250 at 200 rounds)."""
    with pytest.raises(NarrowPeel, match="after 100 rounds of trimming on the GPU, the last 100 decided 100 "):
        _peel_chain(_steps(100), k)


def test_isolated_vertices_still_do_not_make_a_chain_look_wide():
    """The commit's case: vertices decided before the peel's first round (its first frontier)
    are not the peel's width: 5,000 isolated vertices (wide at the first check, counted from the
    start), then a vertex a round; at 800 rounds the trim costs more than the host's 6,999."""
    with pytest.raises(NarrowPeel, match="after 800 rounds"):
        _peel_chain(_steps(100), 1000, isolated=5000)
