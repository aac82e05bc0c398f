"""The CPU backend's prefilter compiled with numba: the component lookup and steps 1–5 of
:mod:`distgrail.query.prefilter` fused into one compiled loop over each block of pairs.

Same codes, same answers as :func:`distgrail.query.prefilter.prefilter` (its NumPy twin) for
every pair, in the same order of steps: same component, level filter, support positive, support
negative, interval filter, DT-subtree cut; code 0 leaves a pair to the search. A pair reads its
two component ids, the first component of the target's level (where the components are numbered
by level, as every build numbers them, the level filter compares ids: ``level_ptr`` of
:func:`distgrail.query.bidir_jit._layout`; where not, ``level_ptr`` None, a second specialisation
of the loop reads both components' levels, numba pruning the branches on ``level_ptr is None`` at
compile time) and, when still undecided, two packed records (DT ranks, intervals and masks in
one 64-byte line at d = 5, K = 64), where the NumPy twin makes a gather and a temporary array
per column and step: on the CPU the prefilter is most of a batch of random pairs, and those reads
are most of the prefilter. Where a record's tests fit its first 16 uint32 (d <= 5 with K <= 64, d <= 7 without
masks: :func:`vector_lanes`) they are made on two vector loads without a branch
(:func:`row_flags`); on a small graph, whose arrays sit in a core's cache, the mispredicted
branches of the tests made one by one were most of the records' pass (docs/benchmarks.md,
session 48).

The ids' range is checked by the first pass as it reads them (a bad id refused with
:meth:`~distgrail.index.Index.check_pairs`' own QueryError before any answer), so a one-process
CPU query (:meth:`~distgrail.index.Index.query`) reads its batch of good ids once.

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

from ..errors import QueryError, id_range
from ..jit import njit

from .bidir_jit import _layout, run_blocks, search_threads
from .idcheck import refuse_out_of_range
from .stats import INTERVAL, LEVEL, SAME, STEPS, SUPPORT_NEG, SUPPORT_POS, TREE, UNDECIDED, Labels, read_only

__all__ = ["compiled_prefilter", "compiled_prefilter_left", "BLOCK_PAIRS"]

#: pairs a thread takes from the shared counter at a time (below 2^21: the records' pass tallies in 21 bits)
BLOCK_PAIRS = 1 << 16
#: component arrays (``comp`` and the first component of each one's level) of at most this many
#: bytes in all are read in one pass with the level filter (in a core's cache: a pass saved);
#: larger ones (a random read each, from memory) in a pass of their own, whose reads all
#: overlap (docs/benchmarks.md, session 48)
NEAR_BYTES = 1 << 19
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


#: the flags of :func:`row_flags`: support positive, support negative, outside an interval, DT subtree
F_POS, F_NEG, F_OUTSIDE, F_TREE = 1, 2, 4, 8
#: each flag set's code: the first step in order that decides it (none: left to the search)
_CODE = np.array([UNDECIDED if f == 0 else SUPPORT_POS if f & F_POS else SUPPORT_NEG if f & F_NEG else
                  INTERVAL if f & F_OUTSIDE else TREE for f in range(16)], dtype=np.int8)
#: each flag set's count, added to one int64 (support positive, negative and interval: 21 bits
#: each, BLOCK_PAIRS < 2^21; the DT-subtree cut's count is what the others leave)
_COUNT = np.array([1 if c == SUPPORT_POS else 1 << 21 if c == SUPPORT_NEG else 1 << 42 if c == INTERVAL else 0
                   for c in _CODE], dtype=np.int64)


@intrinsic
def row_flags(typingctx, rows, a, b, lanes):
    """``row_flags(rows, a, b, lanes)``: every test of the pair (a, b) on the first 16 uint32 of
    rows ``a`` and ``b`` of the C-ordered (C, R >= 16) uint32 records
    (:func:`~distgrail.query.bidir_jit._layout`: start0, post0, lo_k and hi_k per dimension, then
    the out- and in-mask of W <= 1 64-bit words), as flags: :data:`F_POS` where a's out-mask meets
    b's in-mask, :data:`F_NEG` where a's in-mask has a bit b's lacks or b's out-mask one a's
    lacks, :data:`F_OUTSIDE` where b's interval is not inside a's in some dimension,
    :data:`F_TREE` where b's post rank lies in a's DT subtree (dimension 0). ``lanes``: a bit per
    lane, the intervals' (lo at even lanes, hi at odd) in bits 0-15, the out-mask's two lanes in
    16-31 (none without masks; the in-mask's are the two after). Two 64-byte vector loads and a
    few vector compares (LLVM vector IR: one AVX-512 instruction each, several on older CPUs)
    where the scalar tests make 2 d + 5 compares and a branch each: a branch the data decides
    mispredicts, on a small graph's random pairs, about as often as it is taken the rarer way."""
    if not (isinstance(rows, types.Array) and rows.ndim == 2 and rows.dtype == types.uint32 and rows.layout == "C"):
        return None

    def codegen(context, builder, sig, args):
        array = context.make_array(sig.args[0])(context, builder, args[0])
        stride = builder.extract_value(array.strides, 0)
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vec = ir.VectorType(i32, 16)

        def row(x, t):
            if x.type.width < stride.type.width:
                x = (builder.sext if t.signed else builder.zext)(x, stride.type)
            addr = builder.gep(builder.bitcast(array.data, ir.IntType(8).as_pointer()), [builder.mul(x, stride)])
            return builder.load(builder.bitcast(addr, vec.as_pointer()), align=4)

        def bits(v):  # a lane compare as 16 bits of an i32
            return builder.zext(builder.bitcast(v, ir.IntType(16)), i32)

        def flag(mask, value):  # value where any lane of mask is set
            hit = builder.icmp_unsigned("!=", mask, ir.Constant(i32, 0))
            return builder.select(hit, ir.Constant(i64, value), ir.Constant(i64, 0))

        ra, rb = row(args[1], sig.args[1]), row(args[2], sig.args[2])
        lanes = builder.trunc(args[3], i32) if args[3].type.width > 32 else builder.zext(args[3], i32)
        ivl = builder.and_(lanes, ir.Constant(i32, 0xFFFF))
        out_lanes = builder.lshr(lanes, ir.Constant(i32, 16))
        in_lanes = builder.shl(out_lanes, ir.Constant(i32, 2))
        zero = ir.Constant(vec, [0] * 16)
        # x: lo lanes (even) of a, hi lanes (odd) of b; y the other way: inside where x <= y
        x = builder.shuffle_vector(ra, rb, ir.Constant(vec, [i if i % 2 == 0 else 16 + i for i in range(16)]))
        y = builder.shuffle_vector(ra, rb, ir.Constant(vec, [16 + i if i % 2 == 0 else i for i in range(16)]))
        outside = builder.and_(bits(builder.icmp_unsigned(">", x, y)), ivl)
        # b's in-mask moved down onto a's out-mask lanes (two lanes: one 64-bit word)
        b_in = builder.shuffle_vector(rb, zero, ir.Constant(vec, [i + 2 if i + 2 < 16 else 16 for i in range(16)]))
        pos = builder.and_(bits(builder.icmp_unsigned("!=", builder.and_(ra, b_in), zero)), out_lanes)
        a_not_b = bits(builder.icmp_unsigned("!=", builder.and_(ra, builder.not_(rb)), zero))
        b_not_a = bits(builder.icmp_unsigned("!=", builder.and_(rb, builder.not_(ra)), zero))
        neg = builder.or_(builder.and_(a_not_b, in_lanes), builder.and_(b_not_a, out_lanes))
        start_a, post_a = (builder.extract_element(ra, ir.Constant(i32, j)) for j in (0, 1))
        post_b = builder.extract_element(rb, ir.Constant(i32, 1))
        tree = builder.and_(builder.icmp_unsigned("<=", start_a, post_b), builder.icmp_unsigned("<=", post_b, post_a))
        flags = builder.or_(builder.or_(flag(pos, F_POS), flag(neg, F_NEG)),
                            builder.or_(flag(outside, F_OUTSIDE),
                                        builder.select(tree, ir.Constant(i64, F_TREE), ir.Constant(i64, 0))))
        return flags
    return types.int64(rows, a, b, lanes), codegen


@njit(nogil=True)
def _block(q0, q1, sources, targets, comp, first, level, level_ptr, rec, words, d, W, lanes, ans, todo, tu, tv,
           counts, full_code, full_cu, full_cv, left, left_cu, left_cv, last):
    # two steps over the block: the component ids, same component and level filter without a
    # branch, then the records of the pairs left. A branch the data decides, taken one pair in
    # two, would throw away the reads in flight behind it; without it, the reads of many pairs
    # overlap (docs/benchmarks.md, session 42). The first step appends every pair's index and
    # component ids to todo, tu, tv and moves the end past it only where the level filter leaves
    # it undecided, so the records' pass reads its pairs' ids in order (not through the pair's
    # index: a chain of two loads). first, the first component of each component's level (size
    # 0: not given), makes it one pass: a < first[b] is "a's level is below b's" (the pairs the
    # filter leaves), one read more per pair (level_ptr None, components not numbered by level:
    # first is the levels, and the filter reads both: first[a] < first[b]); where the component
    # arrays are far (not given),
    # the ids are read in a pass of their own into tu, tv, the filter (level_ptr[level[b]]: one
    # byte a component) writes each pair's verdict at its own place in todo, and a third pass
    # appends the pairs left over them: a store whose place waits on a read that misses the
    # cache holds up the reads behind it, and these passes' places wait on none (or on todo,
    # read in order). todo, tu, tv are the thread's scratch of one block (reused block after block: they stay in cache); the pairs
    # the block leaves to the search go to left, left_cu, left_cv from q0 on, their count
    # returned. lanes: vector_lanes(d, W), -1 for the tests one by one. The codes, and every
    # pair's ids, are written to full_* only where those are given (size 0: not); counts (size 0:
    # not wanted) gets each code's pairs added, counted in the passes as they decide (a count
    # indexed by each pair's code is a chain of stores and loads of the same few counters). The
    # block's views, indexed from 0 by range(size), and the ids read as unsigned: numba reads
    # without its negative-index wrap, a select per access that halves the first pass's speed.
    # Each id is checked against last = n - 1 before it is read (as unsigned, a negative id is
    # huge): near, in the first pass, a branch never taken for good ids (a few instructions
    # beside the pass's reads); far, the block's largest id first, in a pass of its own (a
    # vector maximum; the first pass then reads the ids from a nearer cache). A bad id: -1,
    # nothing read with it (the caller names it, :func:`~distgrail.query.idcheck.refuse_out_of_range`)
    size = q1 - q0
    full = full_code.size != 0
    ans = ans[q0:q1]
    sources = sources[q0:q1]
    targets = targets[q0:q1]
    code = full_code[q0:q1]
    n = 0
    nsame = 0
    if first.size:  # (near: the component ids and the level filter in one pass)
        for q in range(size):
            u = np.uint64(sources[q])  # (as unsigned: read without the negative-index wrap)
            v = np.uint64(targets[q])
            if max(u, v) > last:
                return -1
            a = comp[u]
            b = comp[v]
            same = a == b
            ans[q] = same
            todo[n] = q
            tu[n] = a
            tv[n] = b
            if level_ptr is not None:
                n += a < first[b]
            else:  # (first: the levels)
                n += first[a] < first[b]
            nsame += same
    else:  # (far: the component ids first, their reads all independent)
        tu = tu[:size]
        tv = tv[:size]
        top = np.uint64(0)
        for q in range(size):
            top = max(top, max(np.uint64(sources[q]), np.uint64(targets[q])))
        if top > last:
            return -1
        for q in range(size):
            tu[q] = comp[np.uint64(sources[q])]
            tv[q] = comp[np.uint64(targets[q])]
        for q in range(size):
            a = tu[q]
            b = tv[q]
            same = a == b
            ans[q] = same
            if level_ptr is not None:
                todo[q] = a < level_ptr[level[b]]
            else:
                todo[q] = level[a] < level[b]
            nsame += same
        for q in range(size):
            f = todo[q]
            todo[n] = q  # (n <= q: over ids already read)
            tu[n] = tu[q]
            tv[n] = tv[q]
            n += f
    if full:
        fu = full_cu[q0:q1]
        fv = full_cv[q0:q1]
        for q in range(size):
            a = comp[np.uint64(sources[q])]
            b = comp[np.uint64(targets[q])]
            fu[q] = a
            fv[q] = b
            if level_ptr is not None:
                code[q] = SAME if a == b else (LEVEL if a >= level_ptr[level[b]] else UNDECIDED)
            else:
                code[q] = SAME if a == b else (LEVEL if level[a] >= level[b] else UNDECIDED)
    B = 2 + 2 * d
    M = B // 2  # the masks as 64-bit words of the row (words: rec's uint64 view): out at M + w, in at M + W + w
    # the records' pass: two random 64-byte rows a pair, then their tests. The rows of the pair
    # PREFETCH_AHEAD places ahead are asked for first, so the reads overlap (the tests one by
    # one: a mispredicted branch discards the row reads in flight behind it)
    for i in range(min(PREFETCH_AHEAD, n)):
        prefetch(rec, tu[i])
        prefetch(rec, tv[i])
    nleft = 0
    npos = 0
    nneg = 0
    nint = 0
    ntree = 0
    vector = lanes >= 0
    if vector:  # every test within the first 16 lanes: made without a branch (row_flags)
        tally = 0
        for i in range(n):
            if i + PREFETCH_AHEAD < n:
                prefetch(rec, tu[i + PREFETCH_AHEAD])
                prefetch(rec, tv[i + PREFETCH_AHEAD])
            q = todo[i]
            a = tu[i]
            b = tv[i]
            f = row_flags(rec, a, b, lanes)
            ans[q] = ((f & F_POS) != 0) | (f == F_TREE)
            tally += _COUNT[f]
            if full:
                code[q] = _CODE[f]
            todo[nleft] = q  # (left to the search; nleft <= i: written behind the reads)
            tu[nleft] = a
            tv[nleft] = b
            nleft += f == 0
        npos = tally & 0x1FFFFF
        nneg = (tally >> 21) & 0x1FFFFF
        nint = tally >> 42
        ntree = n - npos - nneg - nint - nleft
    for i in range(0 if vector else n):  # the tests one by one, a branch each (longer rows)
        if i + PREFETCH_AHEAD < n:
            prefetch(rec, tu[i + PREFETCH_AHEAD])
            prefetch(rec, tv[i + PREFETCH_AHEAD])
        q = todo[i]
        a = tu[i]  # (rec[a, w], not a row view: its strides cost per read)
        b = tv[i]
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
        else:  # left to the search (nleft <= i: written behind the reads)
            todo[nleft] = q
            tu[nleft] = a
            tv[nleft] = b
            nleft += 1
    if counts.size:
        counts[SAME] += nsame
        counts[LEVEL] += size - nsame - n
        counts[SUPPORT_POS] += npos
        counts[SUPPORT_NEG] += nneg
        counts[INTERVAL] += nint
        counts[TREE] += ntree
        counts[UNDECIDED] += nleft
    for i in range(nleft):
        left[q0 + i] = q0 + todo[i]
        left_cu[q0 + i] = tu[i]
        left_cv[q0 + i] = tv[i]
    return nleft


def vector_lanes(d: int, W: int) -> int:
    """:func:`row_flags`' ``lanes`` for records of ``d`` dimensions and ``W`` mask words, or -1
    where its tests do not fit the first 16 lanes of a row (the records' pass then makes them
    one by one): the intervals' lanes 2 .. 2 + 2 d, and the out-mask's 2 W lanes after them.

    >>> hex(vector_lanes(5, 1)), hex(vector_lanes(7, 0)), vector_lanes(6, 1), vector_lanes(3, 2)
    ('0x30000ffc', '0xfffc', -1, -1)
    """
    B = 2 + 2 * d
    if B + 4 * W > 16 or W > 1:
        return -1
    return (((1 << B) - 1) & ~3) | (((1 << 2 * W) - 1) << (16 + B))


def _first_of_level(L: Labels):
    """``first[c]``: the first component of component ``c``'s level (``level_ptr[level[c]]``, in
    ``comp``'s type), built once per ``L``. Components numbered by level, ``a < first[b]`` holds
    exactly when ``a``'s level is below ``b``'s: the pairs the level filter leaves (same
    component and ``a > b`` among those it decides, as ``first[b] <= b``), one read of the
    target's component where ``level_ptr[level[b]]`` made a chain of two. Components not
    numbered by level (``level_ptr`` None): the levels themselves (``first[a] < first[b]``)."""
    def build():
        _, level_ptr = _layout(L)
        if level_ptr is None:
            return np.asarray(L.level)
        comp_type = np.asarray(L.comp).dtype
        return read_only(level_ptr[np.asarray(L.level)].astype(comp_type))
    return L.first.get(build)


def _run(L: Labels, sources, targets, threads, counts, full: bool):
    """The blocks of :func:`compiled_prefilter` and :func:`compiled_prefilter_left`: ``(answer,
    (code, cu, cv) of every pair or None, (pairs, cu, cv) left to the search)``. Fresh memory is
    what a batch of random pairs pays most for after its reads (its pages are faulted in on first
    write): each thread's pair indexes and component ids are one block's scratch, and the arrays
    of the pairs left are written only as far as the search needs them (``np.empty``: pages never
    written cost nothing). The component arrays are near where ``comp`` and ``first`` (at most
    ``comp``'s size) take at most :data:`NEAR_BYTES`; ``first`` is made for those only."""
    if counts is not None and (counts.ndim != 1 or counts.size < len(STEPS) + 1 or counts.dtype != np.int64):
        raise ValueError(f"counts must be int64 of {len(STEPS) + 1} entries (one a code), got {counts.dtype} {counts.shape}")
    block = BLOCK_PAIRS
    if not 0 < block < 1 << 21:  # (the records' pass tallies three counts in 21 bits each: _COUNT)
        raise ValueError(f"BLOCK_PAIRS must be in 1 .. 2^21 - 1 (the records' pass counts in 21 bits), got {block}")
    k = int(sources.size)
    comp = np.asarray(L.comp)
    ans = np.zeros(k, dtype=np.bool_)
    whole = ((np.zeros(k, dtype=np.int8), np.empty(k, dtype=comp.dtype), np.empty(k, dtype=comp.dtype)) if full
             else (np.zeros(0, dtype=np.int8), np.empty(0, dtype=comp.dtype), np.empty(0, dtype=comp.dtype)))
    left = (np.empty(k, dtype=np.int64), np.empty(k, dtype=comp.dtype), np.empty(k, dtype=comp.dtype))
    if k == 0:
        return ans, whole if full else None, left
    if comp.size == 0:  # (every id is out of range)
        refuse_out_of_range(sources, targets, 0)
    # (strided ids, the columns of a mapped (k, 2) file, are read where they are: no copy)
    rec, level_ptr = _layout(L)
    near = 2 * comp.nbytes <= NEAR_BYTES  # (C <= n: first, C ids, is at most comp's size)
    first = _first_of_level(L) if near else np.zeros(0, dtype=comp.dtype)
    level = np.asarray(L.level)
    lanes = vector_lanes(L.d, L.W)
    words = rec.view(np.uint64)  # (rows of R uint32, R a multiple of 16: whole 64-bit words, the masks' among them)
    nblk = -(-k // block)
    per_block = np.zeros((nblk, 0 if counts is None else counts.size), dtype=np.int64)
    nleft = np.zeros(nblk, dtype=np.int64)
    last = np.uint64(comp.size - 1)

    def body(b, scratch):
        q0 = b * block
        nleft[b] = _block(q0, min(k, q0 + block), sources, targets, comp, first, level, level_ptr, rec, words, L.d,
                          L.W, lanes, ans, *scratch, per_block[b], *whole, *left, last)

    run_blocks(nblk, threads or search_threads(), body,  # (the thread's todo, tu and tv of one block)
               scratch=lambda: (np.empty(block, dtype=np.uint32), np.empty(block, dtype=comp.dtype),
                                np.empty(block, dtype=comp.dtype)))
    if int(nleft.min()) < 0:  # (a block met an id out of range: the rule names the first)
        refuse_out_of_range(sources, targets, int(comp.size))
        raise QueryError(f"vertex ids {id_range(int(comp.size), whose='the index')}")
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
    """``(answer, code, cu, cv)`` for vertex-id pairs (int32 or int64 ids; one outside ``0 ..
    n-1`` is refused, before any answer, with :meth:`~distgrail.index.Index.check_pairs`' QueryError
    naming the first: :func:`~distgrail.query.idcheck.refuse_out_of_range`): the same
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
