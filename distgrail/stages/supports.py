"""Phase 5: support vertices and their reach masks (the supportive vertices of O'Reach).

K components are chosen deterministically (:func:`choose_supports`); support j is bit j % 64 of
word j // 64. Every component c gets two K-bit masks, each W = ceil(K / 64) uint64 words:

* ``out[c]``: the supports c reaches (c itself included when it is one);
* ``in[c]``:  the supports that reach c (c itself included when it is one).

``out`` is one bottom-up level sweep (OR over the children), ``in`` one top-down sweep (OR over
the parents). Components are numbered by level and every edge goes to a higher level, so one pass
per level is exact. On the GPU both sweeps run fused in one persistent launch
(:mod:`distgrail.stages.support_schedule`; the host plans O(levels) descriptors and the GPU
expands them into units): ``out`` pulls over the forward CSR and ``in`` pushes along it with
``atomicOr`` (pulls over the reverse CSR on request). In a build, phase 5 runs on a stream of its
own beside phases 3–4 (:func:`start_supports`). The choice of the supports is O(C) and runs where
the CSR is.

Blocks: :func:`support_masks` computes the words of supports ``lo .. hi-1`` only (``lo % 64 ==
0``), so ranks split K like the dimensions; the blocks side by side in support order
(``np.concatenate(..., axis=1)``) are byte-identical to one call with ``block=(0, K)``.
``sides``: ``("out",)`` or ``("in",)`` sweeps one side only (the other comes back with no word,
``(C, 0)``), so two ranks can share one word's sweep (:mod:`distgrail.mpi.phase5`).
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..dtypes import smallest_int
# threads per block, the sweep's counters and push bits: the values kernels/supports.cu is compiled with
from ..constants import CHOOSE_THREADS, CTR_ERR, CTR_WORDS, DONE_STRIDE, PUSH_IN, PUSH_OUT, SKIP_IN, SKIP_OUT, SWEEP_THREADS
from ..errors import BackendError, DistGrailError
from ..gpu.memory import check_ids, launcher, oom_guard
from ..gpu.sweep import U64_MAX, cupy, kernel, sm_count
from ..hashing import hash3, hash_base
from .support_count import (AUTO_SUPPORTS, DEFAULT_SUPPORTS, auto_supports, check_supports_arg,  # noqa: F401
                            resolve_supports, supports_arg)
from .support_schedule import FIELDS, plan_reads, schedule_descriptors
from ..jit import restarts
from .deep import compiled_sweeps, n_levels

__all__ = ["DEFAULT_SUPPORTS", "AUTO_SUPPORTS", "auto_supports", "resolve_supports", "supports_arg", "STREAM_SUPPORT", "choose_supports", "choose_supports_numpy", "choose_supports_cuda",
           "pick_per_slice", "support_masks", "build_supports", "words", "support_masks_numpy", "support_masks_cuda",
           "sweep_masks_cuda",
           "support_masks_cpu", "SCHEDULES", "PendingMasks", "start_supports", "SIDES", "check_sides"]

#: hash stream of the support tie break (dimensions use 0.., phase 1 uses 0xFFFFFFFF)
STREAM_SUPPORT = 0xFFFFFFFE
#: most lanes per row of a one-side unit (512 threads: at least 512 / this rows per unit); fewer
#: lanes per row make fewer, larger units, so that every unit of the next step is taken and
#: prefetched while a step runs
SWEEP_MAX_GROUP = 16
#: the share of the SMs the sweep holds when it runs beside phases 3-4 (:func:`start_supports`)
BESIDE_SHARE = 0.5
#: how the GPU sweep's units are launched: one persistent launch with tickets, or one per step
SCHEDULES = ("tickets", "levels")


def words(K: int) -> int:
    """64-bit words per mask of K supports."""
    return (int(K) + 63) // 64


def choose_supports(dag, K: int, seed: int = 0) -> np.ndarray:
    """The K support components of ``dag``, in level order, as int32/int64 host ids.

    Rule ("stratified degree product"): the components, numbered by level, are cut into K
    slices of equal size ``[j C / K, (j+1) C / K)``; support j is the component of slice j with
    the largest (in-degree + 1) * (out-degree + 1) in the condensed DAG, ties by the counter hash
    of (seed, :data:`STREAM_SUPPORT`, id), then by the smaller id. K is capped at C.

    O(C): per-slice maxima (NumPy ``reduceat``), or on the GPU when the DAG's CSR is there
    (``dg_support_choose``, one block per slice, on the device that holds the CSR; only the K
    ids come back). The slices keep the supports apart: the plain largest degree product puts
    every support among the last, highest in-degree components of a dense random DAG.
    """
    K = resolve_supports(K, dag)
    C = int(dag.C) if hasattr(dag, "C") else int(dag.indptr.shape[0]) - 1
    K = min(int(K), C)
    dt = smallest_int(max(C, 1))
    if K == 0:
        return np.zeros(0, dtype=dt)
    if isinstance(dag.indptr, np.ndarray):
        return choose_supports_numpy(dag, K, seed).astype(dt)
    return choose_supports_cuda(dag, K, seed).astype(dt)


def _host_indeg(dag, C):
    rev_ptr = getattr(dag, "rindptr", None)
    if isinstance(rev_ptr, np.ndarray) and rev_ptr.shape[0] == C + 1:
        return np.diff(rev_ptr)
    return np.bincount(np.asarray(dag.indices), minlength=C)


def pick_per_slice(score, tie, K):
    """Index of the best element of each of the K equal slices of ``score`` (uint64): largest
    score, then smallest ``tie`` (uint64), then smallest index. O(C), no sort."""
    C = score.shape[0]
    b = (np.arange(K + 1, dtype=np.int64) * C) // K  # K <= C: every slice is non-empty
    st, n = b[:-1], np.diff(b)
    cand = score == np.repeat(np.maximum.reduceat(score, st), n)
    t = np.where(cand, tie, U64_MAX)
    cand &= tie == np.repeat(np.minimum.reduceat(t, st), n)
    return np.minimum.reduceat(np.where(cand, np.arange(C, dtype=np.int64), C), st)


def choose_supports_numpy(dag, K: int, seed: int = 0) -> np.ndarray:
    """NumPy twin of :func:`choose_supports` (K in 1..C): int64 ids."""
    C = int(dag.C)
    outdeg = np.diff(np.asarray(dag.indptr)).astype(np.uint64)
    indeg = _host_indeg(dag, C).astype(np.uint64)
    score = (indeg + np.uint64(1)) * (outdeg + np.uint64(1))  # < 2^64: degrees < 2^32 each
    tie = hash3(seed, STREAM_SUPPORT, np.arange(C, dtype=np.uint64))
    return pick_per_slice(score, tie, K)


def choose_supports_cuda(dag, K: int, seed: int = 0) -> np.ndarray:
    """GPU twin of :func:`choose_supports_numpy` for a DAG whose CSR is on a device: runs on that
    device, whichever is current."""
    with dag.indptr.device:
        return _choose_supports_cuda(dag, K, seed)


@oom_guard
def _choose_supports_cuda(dag, K, seed):
    cp = cupy()
    ip = dag.indptr if dag.indptr.dtype == cp.int64 else dag.indptr.astype(cp.int64)
    C = int(ip.shape[0]) - 1
    rev = _device_reverse(dag, cp)
    indeg = cp.diff(rev[0]).astype(cp.int64) if rev is not None else cp.bincount(dag.indices, minlength=C).astype(cp.int64)
    ids = cp.empty(K, dtype=cp.int32)
    kernel("supports", "dg_support_choose")((K,), (CHOOSE_THREADS,),
                                            (ip, indeg, np.int64(C), np.int32(K), np.uint64(hash_base(seed, STREAM_SUPPORT)), ids))
    return ids.get().astype(np.int64)


def _device_reverse(dag, cp):
    """The reverse CSR (rindptr, rindices) when it is already on the device, else None (no upload:
    a :class:`~distgrail.stages.labeling.DeviceDAG` counts when it or its DAG holds it there)."""
    for obj in (dag, getattr(dag, "__dict__", {}).get("_dag")):
        d = getattr(obj, "__dict__", {})
        for a, b in (("rindptr", "rindices"), ("_rindptr", "_rindices")):
            if isinstance(d.get(a), cp.ndarray) and isinstance(d.get(b), cp.ndarray):
                return d[a], d[b]
    return None


def _check_block(ids, block):
    K = int(np.shape(ids)[0])
    lo, hi = (0, K) if block is None else (int(block[0]), int(block[1]))
    if not (0 <= lo <= hi <= K) or lo % 64:
        raise DistGrailError(f"support block must satisfy 0 <= lo <= hi <= K={K} and lo % 64 == 0, got {(lo, hi)}")
    return lo, hi


def _reverse_csr(dag):
    rip = getattr(dag, "rindptr", None)
    if rip is not None and getattr(dag, "rindices", None) is not None:
        return rip, dag.rindices
    import scipy.sparse as sp  # ranks without the reverse CSR (mpi.build.ROOT_ONLY_DAG)

    C = int(dag.C)
    a = sp.csr_matrix((np.ones(dag.indices.size, dtype=np.bool_), dag.indices, dag.indptr), shape=(C, C))
    t = a.T.tocsr()
    t.sort_indices()
    return t.indptr.astype(np.int64), t.indices


def _seed(mask, ids):
    j = np.arange(ids.size)
    mask[ids.astype(np.int64), j >> 6] |= np.left_shift(np.uint64(1), (j & 63).astype(np.uint64))


def _or_rows(mask, ptr, ind, rows0, rows1):
    """mask[r] |= OR of mask[ind[ptr[r]:ptr[r+1]]] for rows rows0..rows1-1."""
    e0, e1 = int(ptr[rows0]), int(ptr[rows1])
    if e0 == e1:
        return
    deg = np.diff(ptr[rows0:rows1 + 1])
    nz = np.flatnonzero(deg)
    starts = (ptr[rows0:rows1] - e0)[nz]
    rows = rows0 + nz
    mask[rows] |= np.bitwise_or.reduceat(mask[ind[e0:e1]], starts, axis=0)


#: both sides of the masks, the default of every sweep
SIDES = ("out", "in")


def check_sides(sides) -> tuple:
    """``sides`` as a tuple: ``("out", "in")``, ``("out",)`` or ``("in",)``."""
    t = tuple(sides)
    if t not in (SIDES, ("out",), ("in",)):
        raise DistGrailError(f"support mask sides must be ('out', 'in'), ('out',) or ('in',), got {sides!r}")
    return t


def _seeded(dag, ids, block, sides=SIDES):
    """(out, in) for supports ``ids[lo:hi]`` before the sweeps: zeros but each support's own bit
    (a side not in ``sides``: (C, 0)), and whether there is anything to sweep."""
    lo, hi = _check_block(ids, block)
    sides = check_sides(sides)
    C = int(dag.C)
    Wb = words(hi - lo)
    out, inn = (np.zeros((C, Wb if side in sides else 0), dtype=np.uint64) for side in SIDES)
    if Wb == 0 or C == 0:
        return out, inn, False
    sel = np.asarray(ids)[lo:hi]
    for side, mask in zip(SIDES, (out, inn)):
        if side in sides:
            _seed(mask, sel)
    return out, inn, True


def support_masks_numpy(dag, ids, block=None, sides=SIDES):
    """NumPy twin: (out, in), each (C, W_block) uint64, for supports ``ids[lo:hi]`` (a side not
    in ``sides``: (C, 0))."""
    out, inn, work = _seeded(dag, ids, block, sides)
    if not work:
        return out, inn
    lp = np.asarray(dag.level_ptr).tolist()
    nl = len(lp) - 1
    ip, ix = np.asarray(dag.indptr), np.asarray(dag.indices)
    for lev in range(nl - 2, -1, -1) if out.shape[1] else ():  # children are deeper: bottom-up
        _or_rows(out, ip, ix, lp[lev], lp[lev + 1])
    if inn.shape[1]:
        rip, rix = _reverse_csr(dag)
        for lev in range(1, nl):  # parents are shallower: top-down
            _or_rows(inn, rip, rix, lp[lev], lp[lev + 1])
    return out, inn


@restarts
def support_masks_cpu(dag, ids, block=None, sides=SIDES):
    """The CPU backend's phase 5: the twin, or on a deep DAG (:mod:`distgrail.stages.deep`) each
    side in one compiled pass (``out`` deepest component first, ``in`` in id order), with the same
    masks (a pass that fails to compile: the twin, :func:`~distgrail.jit.restarts`)."""
    jit = compiled_sweeps(n_levels(dag.level_ptr))
    if jit is None:
        return support_masks_numpy(dag, ids, block, sides)
    out, inn, work = _seeded(dag, ids, block, sides)
    if not work:
        return out, inn
    lp = np.asarray(dag.level_ptr)
    if out.shape[1]:
        jit.or_children_bottom_up(out, np.asarray(dag.indptr), np.asarray(dag.indices), int(lp[-2]))
    if inn.shape[1]:
        rip, rix = _reverse_csr(dag)
        jit.or_parents_top_down(inn, np.asarray(rip), np.asarray(rix), int(lp[1]))
    return out, inn


def support_masks(be, dag, ids, block=None, sides=SIDES):
    """Phase 5 on backend ``be`` for supports ``ids[lo:hi]`` (``block=(lo, hi)``, default all),
    the sides named in ``sides`` (default both; a side left out comes back (C, 0)).

    ``dag``: the host :class:`~distgrail.stages.condense.DAG` (its CSR is uploaded on a GPU), or
    on a GPU any object with device ``indptr``/``indices`` and a host ``level_ptr`` (e.g. the
    labeling's ``DeviceDAG``). Returns (out, in) on ``be``'s device, (C, ceil((hi-lo)/64)) uint64.
    """
    return be.pick(support_masks_cpu, support_masks_cuda)(dag, ids, block, sides=sides)


def build_supports(dag, K: int, seed: int, be):
    """Phase 5 of a one-process build on backend ``be``: (ids, out, in) host arrays for
    :func:`distgrail.index.assemble`."""
    return start_supports(dag, K, seed, be).result()


class _Started:
    """Phase 5 of a one-process build under way: :meth:`result` gives (ids, out, in) on the host
    (into ``landing``'s two arrays where given: :meth:`~distgrail.gpu.backend.Backend.land`)."""

    def __init__(self, be, ids, masks, landing=(None, None)):
        self.be, self.ids, self.masks, self.landing = be, ids, masks, landing

    def settle(self):
        """On a failure elsewhere: wait for the sweep (:meth:`PendingMasks.settle`)."""
        m, self.masks = self.masks, None
        if isinstance(m, PendingMasks):
            m.settle()

    def result(self):
        be = self.be
        with be.on_device():
            m = self.masks
            out, inn = m.result() if isinstance(m, PendingMasks) else m  # the sweep's stream is done
            return self.ids, be.land(out, self.landing[0]), be.land(inn, self.landing[1])


def start_supports(dag, K: int, seed: int, be, landing=(None, None)):
    """Start phase 5 of a one-process build; ``.result()`` returns (ids, out, in) host arrays.

    Phase 5 needs the condensed DAG only, so on a GPU it runs beside other work (the build starts
    it after phases 1–2, beside phases 3–4: in a fresh process phase 1's first launches waited for
    the whole sweep): the choice and the fused mask sweep go on a non-blocking stream of their own
    (short host waits for the support ids and the level edge ranges), and nothing waits for the
    sweep until ``result()``. The DAG's device arrays must stay until then. On the CPU the masks
    are computed here."""
    with be.on_device():  # a device DAG lives on be.device, whichever device is current
        if not be.is_gpu:
            ids = choose_supports(dag, K, seed)
            return _Started(be, ids, support_masks(be, dag, ids))
        stream = be.xp.cuda.Stream(non_blocking=True)
        with stream:
            ids = choose_supports(dag, K, seed)
            pending = support_masks_cuda(be, dag, ids, wait=False, share=BESIDE_SHARE)
        pending.stream = stream
        return _Started(be, ids, pending, landing)


# -- CUDA launcher ------------------------------------------------------------------------

def _done(out, inn, wait, run):
    return (out, inn) if wait else PendingMasks(out, inn, run=run)


def _on_device(cp, a, dtype=None):
    a = a if isinstance(a, cp.ndarray) else cp.asarray(np.asarray(a))
    return a if dtype is None or a.dtype == dtype else a.astype(dtype)


class PendingMasks:
    """A mask sweep launched without waiting (``support_masks_cuda(..., wait=False)``):
    :meth:`result` waits for ``stream`` (the one it was launched on; None: the current one), checks
    the sweep's error flag and returns (out, in).

    ``run``: what the sweep did on the host, for tests and benchmarks: ``launches`` (kernel
    launches), ``syncs`` (host waits, the error flag's included once :meth:`result` has read it),
    ``units``, ``steps``, ``schedule``, ``pull`` (``in`` pulled over the reverse CSR),
    ``push_out`` (``out`` pushed along it) and, with tickets, ``blocks``."""

    def __init__(self, out, inn, ctr=None, stream=None, run=None):
        self.out, self.inn, self.ctr, self.stream = out, inn, ctr, stream
        self.run = {} if run is None else run

    def settle(self) -> None:
        """On a failure elsewhere: wait for the sweep (it reads device arrays the failure frees)."""
        if self.stream is not None:
            try:
                self.stream.synchronize()
            except Exception:  # noqa: BLE001 - the failure being raised is the one to report
                pass

    def result(self):
        if self.stream is not None:
            self.stream.synchronize()  # (also when no counter was made: the seed kernels ran on it)
        if self.ctr is not None:
            with self.stream if self.stream is not None else contextlib.nullcontext():
                flag = int(self.ctr[CTR_ERR:CTR_ERR + 1].get()[0])
            self.ctr = None
            self.run["syncs"] = self.run.get("syncs", 0) + 1
            if flag:
                raise BackendError("phase 5: a unit of the support sweep waited over ~2^35 GPU clocks for earlier "
                                   "levels (a huge level, or a scheduling fault); use --backend cpu")
        return self.out, self.inn


@launcher
def support_masks_cuda(be, dag, ids, block=None, mode="push", schedule="tickets", wait=True, out_mode="pull",
                       share: float = 1.0, sides=SIDES):
    """GPU twin of :func:`support_masks_numpy` on ``be.device``: (out, in) CuPy arrays, or with
    ``wait=False`` a :class:`PendingMasks` whose ``result()`` gives them (the sweep's error flag
    is read there: the host does not wait for the sweep here) and whose ``run`` says what the
    sweep did on the host.

    ``mode``: how ``in`` is swept: "pull" over the reverse CSR (uploaded if it is only on the
    host), "push" along the forward CSR, "auto": pull when the reverse CSR is already on the device
    (a DAG condensed on the GPU), else push (no upload). ``out_mode``: how ``out`` is swept:
    "pull" over the forward CSR, "push" along the reverse CSR (uploaded if it is only on the host),
    "auto": push when the reverse CSR is on the device, else pull. The defaults: in pushed, out
    pulled.
    ``share``: the fraction of the SMs the persistent sweep holds (one block of 512 threads per
    SM fills its registers; less leaves SMs to phases 1-4 running beside it). ``schedule``: :data:`SCHEDULES`.
    ``sides``: a side left out is not swept (its levels' edge ranges planned as empty, its hub
    rows dropped, its bit ``SKIP_*`` set for the runs and the seed) and comes back (C, 0).
    Host work: one sync for the level sizes and the hub rows (``plan_reads``), one for the error
    flag, the schedule's descriptors (O(levels + hub rows)); seed, ``dg_support_hubs`` once per
    CSR the sides read (1 or 2), expand, then one sweep ("tickets") or one per step ("levels"),
    counted in :attr:`PendingMasks.run`.
    """
    return sweep_masks_cuda(dag, ids, block, mode, schedule, wait, out_mode, share, sides)


def sweep_masks_cuda(dag, ids, block=None, mode="push", schedule="tickets", wait=True, out_mode="pull",
                     share: float = 1.0, sides=SIDES, start=None):
    """:func:`support_masks_cuda` on the current device; ``start``: ``(out, in)``, (C, W_block)
    uint64 arrays on it to sweep from instead of zeros (a side not in ``sides``: None), swept in
    place: a spread DAG's rank sweeps its own rows from the values the other ranks' rows reached
    (:func:`~distgrail.stages.partitioned_dag.spread_masks`). The supports' own bits are set in
    them either way."""
    cp = cupy()
    if mode not in ("auto", "pull", "push") or out_mode not in ("auto", "pull", "push") or schedule not in SCHEDULES:
        raise DistGrailError(f"support_masks_cuda: bad mode {mode!r}, out_mode {out_mode!r} or schedule {schedule!r}")
    lo, hi = _check_block(ids, block)
    sides = check_sides(sides)
    C = int(dag.C) if hasattr(dag, "C") else int(dag.indptr.shape[0]) - 1
    Wb = words(hi - lo)
    out, inn = (start[k] if start is not None and side in sides else
                cp.zeros((C, Wb if side in sides else 0), dtype=cp.uint64) for k, side in enumerate(SIDES))
    if any(a.shape != (C, Wb if side in sides else 0) or a.dtype != cp.uint64 or not a.flags.c_contiguous
           for a, side in zip((out, inn), SIDES)):
        raise DistGrailError(f"support masks: start arrays must be C-contiguous uint64, ({C}, {Wb})")
    skip = (0 if "out" in sides else SKIP_OUT) | (0 if "in" in sides else SKIP_IN)
    out_k, in_k = (out if out.shape[1] else inn), (inn if inn.shape[1] else out)  # what the kernels get
    run = dict(launches=0, syncs=0, units=0, steps=0, schedule=schedule, pull=False, push_out=False)
    if Wb == 0 or C == 0:
        return _done(out, inn, wait, run)
    ip, ix = _on_device(cp, dag.indptr, cp.int64), _on_device(cp, dag.indices)
    check_ids(ix, "the CSR")
    wants_rev = (mode == "pull" and "in" in sides) or (out_mode == "push" and "out" in sides)
    rev = _device_reverse(dag, cp) if wants_rev or "auto" in (mode, out_mode) else None
    if rev is None and wants_rev and isinstance(getattr(dag, "rindptr", None), np.ndarray):
        rev = dag.rindptr, dag.rindices
    if rev is not None:
        rev = _on_device(cp, rev[0], cp.int64), _on_device(cp, rev[1])
        check_ids(rev[1], "the reverse CSR")
    push = rev is None or mode == "push" or "in" not in sides  # (a side not swept reads the forward CSR:
    push_out = rev is not None and out_mode != "pull" and "out" in sides  # one CSR, one hub launch)
    in_ptr, in_idx = (ip, ix) if push else rev  # the CSR the in side reads
    out_ptr, out_idx = rev if push_out else (ip, ix)  # the CSR the out side reads
    i32 = np.int32
    sel = _on_device(cp, ids[lo:hi] if isinstance(ids, cp.ndarray) else np.asarray(ids)[lo:hi], cp.int32)
    nb = hi - lo
    kernel("supports", "dg_support_seed")((-(-nb // 256),), (256,), (sel, i32(nb), out_k, in_k, i32(Wb), i32(skip)))
    lp = np.asarray(dag.level_ptr, dtype=np.int64)
    L = lp.size - 1
    run.update(launches=1, steps=max(L - 1, 0))
    if L <= 1:
        return _done(out, inn, wait, run)
    run.update(pull=not push, push_out=push_out)
    lp_dev = cp.asarray(lp)
    ends, hubs, nh = plan_reads(cp, kernel, lp_dev, (out_ptr, out_idx), (in_ptr, in_idx), C, 8 * sm_count())  # sync 1
    for k, bit in enumerate((SKIP_OUT, SKIP_IN)):
        if skip & bit:  # a side not swept: no edge in any level, no hub row
            ends[k] = ends[k][0]
            hubs[k] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    desc = schedule_descriptors(lp, ends[0], ends[1], push, threads=SWEEP_THREADS, max_group=SWEEP_MAX_GROUP,
                                push_out=push_out, out_hubs=hubs[0], in_hubs=hubs[-1])  # O(levels + hubs) on the host
    n = desc[:, 9]
    U = int(n.sum())
    run.update(syncs=1, units=U, launches=1 + nh)
    if U == 0:
        return _done(out, inn, wait, run)
    dstart = np.cumsum(n) - n
    sd = cp.empty((U, len(FIELDS)), dtype=cp.int32)
    kernel("supports", "dg_support_expand")((max(1, min(-(-U // 256), 8 * sm_count())),), (256,),
                                            (cp.asarray(desc), cp.asarray(dstart), i32(desc.shape[0]), np.int64(U), sd))
    ctr = cp.zeros(CTR_WORDS, dtype=cp.uint64)
    first_desc = np.flatnonzero(np.r_[True, np.diff(desc[:, 8]) != 0])
    g_start = dstart[first_desc]  # first unit and unit count of each group (step)
    g_count = np.diff(np.r_[g_start, U])
    done = cp.zeros(g_start.size * DONE_STRIDE, dtype=cp.uint32)
    gcount = cp.asarray(g_count.astype(np.int32))
    sweep = kernel("supports", "dg_support_sweep")
    flags = (PUSH_IN if push else 0) | (PUSH_OUT if push_out else 0) | skip
    tail = (ctr, done, gcount, lp_dev, i32(L), i32(0 if push else 1), i32(flags), i32(Wb), out_ptr, out_idx, out_k,
            in_ptr, in_idx, in_k)
    if schedule == "tickets":
        blocks = max(1, min(U, int(round(share * sm_count()))))
        run["blocks"] = blocks
        sweep((blocks,), (SWEEP_THREADS,), (sd, np.int64(U), np.int64(0), i32(1), *tail))
        nl = 1
    else:
        for u0, cnt in zip(g_start.tolist(), g_count.tolist()):  # the units of one step (or run) per launch
            sweep((cnt,), (SWEEP_THREADS,), (sd, np.int64(U), np.int64(u0), i32(0), *tail))
        nl = g_start.size
    run.update(launches=2 + nh + nl)
    pending = PendingMasks(out, inn, ctr if schedule == "tickets" else None, run=run)
    return pending.result() if wait else pending  # sync 2: the error flag
