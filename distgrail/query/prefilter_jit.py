"""The CPU backend's prefilter compiled with numba: the component lookup and steps 1–5 of
:mod:`distgrail.query.prefilter` fused into one compiled loop over each block of pairs.

Same codes, same answers as :func:`distgrail.query.prefilter.prefilter` (its NumPy twin) for
every pair, in the same order of steps: same component, level filter, support positive, support
negative, interval filter, DT-subtree cut; code 0 leaves a pair to the search. A pair reads its
two component ids, one level (components are numbered by level, so the level filter
compares ids: ``level_ptr`` of :func:`distgrail.query.bidir_jit._layout`) and, when still
undecided, two packed records (DT ranks, intervals and masks in one 64-byte line at d = 5,
K = 64), where the NumPy twin makes a gather and a temporary array per column and step: on the
CPU the prefilter is most of a batch of random pairs, and those reads are most of the prefilter.

Threads as in :mod:`distgrail.query.bidir_jit` (:func:`~distgrail.query.bidir_jit.run_blocks`):
plain Python threads running the compiled loop (it releases the GIL) on blocks of
:data:`BLOCK_PAIRS` pairs from a shared counter, as many as
:func:`~distgrail.query.bidir_jit.search_threads` says.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from ..jit import njit

from .bidir_jit import _layout, run_blocks, search_threads
from .stats import INTERVAL, LEVEL, SAME, STEPS, SUPPORT_NEG, SUPPORT_POS, TREE, UNDECIDED, Labels

__all__ = ["compiled_prefilter", "compiled_prefilter_left", "BLOCK_PAIRS"]

#: pairs a thread takes from the shared counter at a time
BLOCK_PAIRS = 1 << 16
#: the records' pass asks for the rows of the pair this many places ahead (16 to 32 do alike)
PREFETCH_AHEAD = 16


@intrinsic
def prefetch(typingctx, rows, i):
    """``prefetch(rows, i)``: asks the CPU to fetch the cache line of row ``i`` of the C-ordered
    array ``rows`` (element ``i`` of a 1-D one): LLVM's ``llvm.prefetch``, a read kept in every
    cache level; returns nothing, never faults. A loop over pairs that each read two random rows
    and then branch on their values loses the reads in flight behind each mispredicted branch;
    asked for a few pairs ahead, the reads overlap again. (Defined here, beside its only caller:
    numba's cache of ``_block`` is stamped by this file, so a change here compiles it again.)"""
    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        stride = builder.extract_value(array.strides, 0)
        row = args[1]
        if row.type.width < stride.type.width:  # (an unsigned id widened as unsigned: uint16 40000 stays 40000)
            row = (builder.sext if sig.args[1].signed else builder.zext)(row, stride.type)
        byte = ir.IntType(8).as_pointer()
        addr = builder.gep(builder.bitcast(array.data, byte), [builder.mul(row, stride)])
        # the intrinsic's name carries its pointer type: "ptr" (LLVM's opaque pointers) or i8*
        name = "llvm.prefetch.p0" if str(addr.type) == "ptr" else "llvm.prefetch.p0i8"
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [addr.type, i32, i32, i32]),
                                            name)
        builder.call(fn, [addr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(rows, i), codegen


@njit(nogil=True)
def _block(q0, q1, sources, targets, comp, level, level_ptr, rec, words, d, W, ans, code, cu, cv, todo, counts,
           full_code, full_cu, full_cv, left, left_cu, left_cv):
    # three passes over the block: the component ids, then same component and level filter
    # without a branch, then the records of the pairs left. A branch the data decides, taken
    # one pair in two, would throw away the reads in flight behind it; without it, the reads of
    # many pairs overlap (docs/benchmarks.md, session 42). cu, cv and todo are the thread's
    # scratch of one block (reused block after block: they stay in cache); the pairs the block
    # leaves to the search go to left, left_cu, left_cv from q0 on, their count returned. The
    # codes are written (to code, the thread's scratch, then full_code with cu and cv) only where
    # full_* are given (size 0: not); counts (size 0: not wanted) gets each code's pairs added,
    # counted in the passes as they decide (a count indexed by each pair's code is a chain of
    # stores and loads of the same few counters). The block's views, indexed from 0 by
    # range(size): numba knows those indexes are not negative and reads without its
    # negative-index wrap, a select per access that halves the first pass's speed
    size = q1 - q0
    full = full_code.size != 0
    ans = ans[q0:q1]
    code = code[:size]
    cu = cu[:size]
    cv = cv[:size]
    sources = sources[q0:q1]
    targets = targets[q0:q1]
    for q in range(size):
        cu[q] = comp[sources[q]]
        cv[q] = comp[targets[q]]
    n = 0
    nsame = 0
    for q in range(size):
        a = cu[q]
        b = cv[q]
        same = a == b
        # level(a) >= level(b), as the ids allow (components are numbered by level): a > b, or
        # a at or past the first component of b's level
        low = (a > b) | (a >= level_ptr[level[b]])
        ans[q] = same
        todo[n] = q
        n += (not same) & (not low)
        nsame += same
    if full:
        for q in range(size):
            a = cu[q]
            b = cv[q]
            code[q] = SAME if a == b else (LEVEL if (a > b) | (a >= level_ptr[level[b]]) else UNDECIDED)
    B = 2 + 2 * d
    M = B // 2  # the masks as 64-bit words of the row (words: rec's uint64 view): out at M + w, in at M + W + w
    # the records' pass: two random 64-byte rows a pair, then branches on their values. A
    # mispredicted branch discards the row reads in flight behind it; the rows of the pair
    # PREFETCH_AHEAD places ahead are asked for first, so the reads overlap again
    for i in range(min(PREFETCH_AHEAD, n)):
        prefetch(rec, cu[todo[i]])
        prefetch(rec, cv[todo[i]])
    nleft = 0
    npos = 0
    nneg = 0
    nint = 0
    ntree = 0
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            p = todo[i + PREFETCH_AHEAD]
            prefetch(rec, cu[p])
            prefetch(rec, cv[p])
        q = todo[i]
        a = cu[q]  # (rec[a, w], not a row view: its strides cost per read)
        b = cv[q]
        pos = np.uint64(0)
        neg = np.uint64(0)
        for w in range(M, M + W):
            oa, ia, ob, ib = words[a, w], words[a, w + W], words[b, w], words[b, w + W]
            pos |= oa & ib
            neg |= (ia & ~ib) | (ob & ~oa)
        if pos:
            npos += 1
            ans[q] = True
            if full:
                code[q] = SUPPORT_POS
            continue
        if neg:
            nneg += 1
            if full:
                code[q] = SUPPORT_NEG
            continue
        inside = True
        for k in range(2, B, 2):  # L_b inside L_a in every dimension
            if rec[a, k] > rec[b, k] or rec[b, k + 1] > rec[a, k + 1]:
                inside = False
                break
        if not inside:
            nint += 1
            if full:
                code[q] = INTERVAL
        elif rec[a, 0] <= rec[b, 1] and rec[b, 1] <= rec[a, 1]:  # b's rank in a's DT subtree (dimension 0)
            ntree += 1
            ans[q] = True
            if full:
                code[q] = TREE
        else:  # left to the search (todo[nleft] <= todo[i]: written behind the reads)
            todo[nleft] = q
            nleft += 1
    if counts.size:
        counts[SAME] += nsame
        counts[LEVEL] += size - nsame - n
        counts[SUPPORT_POS] += npos
        counts[SUPPORT_NEG] += nneg
        counts[INTERVAL] += nint
        counts[TREE] += ntree
        counts[UNDECIDED] += nleft
    if full:
        full_code[q0:q1] = code
        full_cu[q0:q1] = cu
        full_cv[q0:q1] = cv
    for i in range(nleft):
        q = todo[i]
        left[q0 + i] = q0 + q
        left_cu[q0 + i] = cu[q]
        left_cv[q0 + i] = cv[q]
    return nleft


def _run(L: Labels, sources, targets, threads, counts, full: bool):
    """The blocks of :func:`compiled_prefilter` and :func:`compiled_prefilter_left`: ``(answer,
    (code, cu, cv) of every pair or None, (pairs, cu, cv) left to the search)``. Fresh memory is
    what a batch of random pairs pays most for after its reads (its pages are faulted in on first
    write): each thread's code, cu and cv are one block's scratch, and the arrays of the pairs left
    are written only as far as the search needs them (``np.empty``: pages never written cost
    nothing)."""
    if counts is not None and (counts.ndim != 1 or counts.size < len(STEPS) + 1 or counts.dtype != np.int64):
        raise ValueError(f"counts must be int64 of {len(STEPS) + 1} entries (one a code), got {counts.dtype} {counts.shape}")
    k = int(sources.size)
    comp = np.asarray(L.comp)
    ans = np.zeros(k, dtype=np.bool_)
    whole = ((np.zeros(k, dtype=np.int8), np.empty(k, dtype=comp.dtype), np.empty(k, dtype=comp.dtype)) if full
             else (np.zeros(0, dtype=np.int8), np.empty(0, dtype=comp.dtype), np.empty(0, dtype=comp.dtype)))
    left = (np.empty(k, dtype=np.int64), np.empty(k, dtype=comp.dtype), np.empty(k, dtype=comp.dtype))
    if k == 0:
        return ans, whole if full else None, left
    # (strided ids, the columns of a mapped (k, 2) file, are read where they are: no copy)
    rec, level_ptr = _layout(L)
    words = rec.view(np.uint64)  # (rows of R uint32, R a multiple of 16: whole 64-bit words, the masks' among them)
    level = np.asarray(L.level)
    block = BLOCK_PAIRS
    nblk = -(-k // block)
    per_block = np.zeros((nblk, 0 if counts is None else counts.size), dtype=np.int64)
    nleft = np.zeros(nblk, dtype=np.int64)

    def body(b, scratch):  # the thread's code, cu, cv and todo of one block
        q0 = b * block
        nleft[b] = _block(q0, min(k, q0 + block), sources, targets, comp, level, level_ptr, rec, words, L.d, L.W, ans,
                          *scratch, per_block[b], *whole, *left)

    run_blocks(nblk, threads or search_threads(), body,
               scratch=lambda: (np.empty(block, dtype=np.int8), np.empty(block, dtype=comp.dtype),
                                np.empty(block, dtype=comp.dtype), np.empty(block, dtype=np.int32)))
    if counts is not None:
        counts += per_block.sum(axis=0)
    off = 0  # each block's pairs left sit at its start: moved down in place, in block order (off <= q0)
    for b in range(nblk):
        m, q0 = int(nleft[b]), b * block
        if m and off != q0:
            for x in left:
                x[off:off + m] = x[q0:q0 + m]
        off += m
    left = tuple(x[:off] for x in left)
    return ans, whole if full else None, left


def compiled_prefilter(L: Labels, sources: np.ndarray, targets: np.ndarray, threads: int | None = None,
                       counts: np.ndarray | None = None):
    """``(answer, code, cu, cv)`` for vertex-id pairs (checked ids, int32 or int64): the same
    answers and codes as ``prefilter(L, L.comp[sources], L.comp[targets])``, and those component
    ids (the search's input for the pairs left undecided). ``counts`` (int64, one entry per code):
    the pairs of each code are added into it, ``np.bincount(code)``'s numbers."""
    ans, (code, cu, cv), _ = _run(L, sources, targets, threads, counts, True)
    return ans, code, cu, cv


def compiled_prefilter_left(L: Labels, sources: np.ndarray, targets: np.ndarray, threads: int | None = None,
                            counts: np.ndarray | None = None):
    """``(answer, left, cu, cv)``: :func:`compiled_prefilter`'s answers, and only what the search
    needs of the rest: ``left``, the pairs it leaves undecided (code 0, in increasing order), and
    their component ids. What a query batch takes (:func:`distgrail.query.answer.answer_batch_numpy`):
    it writes no code or component id for the pairs the prefilter decides."""
    ans, _, (left, cu, cv) = _run(L, sources, targets, threads, counts, False)
    return ans, left, cu, cv
