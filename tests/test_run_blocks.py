"""The CPU search's block runner (:func:`distgrail.query.bidir_jit.run_blocks`): the caller and
kept helper threads take every block exactly once, concurrent callers share the helpers without
waiting on each other's blocks, an error reaches the caller, and a forked child runs its own."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import numpy as np
import pytest

from distgrail.query import bidir_jit
from distgrail.query.bidir_jit import run_blocks


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
@pytest.mark.parametrize("nblk", [0, 1, 5, 257])
def test_every_block_runs_once_with_its_threads_scratch(threads, nblk):
    hits = np.zeros(max(nblk, 1), dtype=np.int64)
    owners = {}

    def body(b, s):
        hits[b] += 1
        owners.setdefault(id(s), set()).add(threading.get_ident())

    run_blocks(nblk, threads, body, scratch=lambda: object())
    assert (hits[:nblk] == 1).all() and hits[nblk:].sum() == 0
    assert all(len(t) == 1 for t in owners.values())  # a scratch is one thread's
    assert len(owners) <= max(1, min(threads, nblk))


def test_concurrent_callers_share_the_helpers():
    out = {}

    def caller(k):
        hits = np.zeros(300, dtype=np.int64)

        def body(b, s):
            hits[b] += 1

        for _ in range(20):
            run_blocks(300, 4, body)
        out[k] = hits

    ts = [threading.Thread(target=caller, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts)
    assert sorted(out) == list(range(6)) and all((h == 20).all() for h in out.values())
    before = bidir_jit._HELPERS.count
    run_blocks(300, 4, lambda b, s: None)
    assert bidir_jit._HELPERS.count == before  # kept, not started again


def test_an_error_in_a_block_reaches_the_caller():
    def body(b, s):
        if b == 7:
            raise ValueError("block 7")

    with pytest.raises(ValueError, match="block 7"):
        run_blocks(40, 3, body)
    run_blocks(40, 3, lambda b, s: None)  # the helpers still serve


def _in_child(q):
    hits = np.zeros(64, dtype=np.int64)

    def body(b, s):
        hits[b] += 1

    run_blocks(64, 3, body)
    q.put(int(hits.sum()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_runs_blocks_with_threads_of_its_own():
    run_blocks(8, 3, lambda b, s: None)  # the parent's helpers exist
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_in_child, args=(q,))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and q.get(timeout=5) == 64


def test_an_error_stops_every_thread_after_its_current_block():
    ran = []

    def body(b, s):
        ran.append(b)
        if b == 2:
            raise KeyboardInterrupt  # (Ctrl-C in the caller: the batch does not run on)
        time.sleep(0.005)

    with pytest.raises(KeyboardInterrupt):
        run_blocks(400, 2, body)
    assert len(ran) < 20, len(ran)


def test_a_closed_call_left_in_the_queue_holds_nothing_of_it():
    import gc
    import weakref

    release = threading.Event()
    busy = threading.Thread(target=run_blocks, args=(64, 64, lambda b, s: release.wait(10)))
    busy.start()  # every helper is held by this call's blocks
    time.sleep(0.2)

    class Body:
        def __call__(self, b, s):
            pass

    body = Body()
    gone = weakref.ref(body)
    run_blocks(4, 2, body)  # its helper task waits in the queue behind the busy call's
    del body
    gc.collect()
    try:
        assert gone() is None  # (its arrays would be freed too)
    finally:
        release.set()
        busy.join(30)
    assert not busy.is_alive()
