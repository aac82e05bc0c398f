"""A GPU query batch between host and device: pairs up, answers down, beside the kernels.

:func:`stream_chunks` cuts a batch into chunks of :data:`CHUNK_PAIRS` pairs and overlaps three
kinds of work on three streams of one device:

* ``up`` (the scratch's upload stream): the chunk's ids into one of two device buffer sets;
* the caller's stream: the prefilter and search kernels of the chunk before it
  (:meth:`QueryScratch.queue_steps <distgrail.query.answer.QueryScratch.queue_steps>`);
* ``down`` (the scratch's download stream): the answers of the chunk before that, into one of two
  pinned answer slots, then copied out by the host threads; or, when the caller's answer array is
  page-locked itself (:func:`pinned_answers`), straight into it.

Events order them: a buffer set is refilled once the kernels that read it are done, an answer
buffer rewritten once its download is done. The host meanwhile stages the next chunk.

Pairs in pageable (or strided) memory go up through a :class:`Stager`'s small ring of pinned
slots, which the host threads fill from any strides (the two columns of one mapped (k, 2) file as
its rows, split on the GPU). The staging's copy narrows the ids to int32 (the GPU path needs
fewer than 2^31 vertices, and the ids were checked against the index first: ``Index.check_pairs``),
so the slots, the bus and the device read half the bytes of int64 ids. Contiguous page-locked
pairs of one type are uploaded as they are, and the kernels read that type.
"""

from __future__ import annotations

import threading

import numpy as np

from ..arrays import copy_many_parallel, copy_parallel, interleaved_rows, populate, prefault_beside

__all__ = ["CHUNK_PAIRS", "DIRECT_PAIRS", "STAGE_PAIRS", "STAGE_SLOTS", "STAGE_COPY_BYTES", "DRAIN_COPY_BYTES",
           "STAGED_IDS", "stream_chunks", "pinned_answers", "copy_up", "copy_down", "pin_staging", "pin_staging_quietly", "pin_staging_beside", "Stager"]

#: pairs per GPU chunk (device, per buffer set: ids 16 B, answers 1 B; two sets; the work lists
#: 32 B: 66 B a pair of a chunk per scratch; fewer, larger chunks leave the host fewer waits)
CHUNK_PAIRS = 1 << 24
#: batches of at most this many pairs are copied from their own (pageable) memory; larger ones
#: are staged in pinned slots by the host threads (:func:`stream_chunks`)
DIRECT_PAIRS = 1 << 20
#: pairs per pinned staging slot of a larger batch (int32 ids: 64 MiB a slot), and the slots in
#: the ring (:class:`Stager`); larger slots are fewer rounds of the host threads per batch
STAGE_PAIRS = 1 << 23
STAGE_SLOTS = 2
#: the least bytes one host thread copies into a staging slot
STAGE_COPY_BYTES = 4 << 20
#: the least bytes one host thread copies out of an answer slot (a chunk's answers land in
#: fresh pages of the caller's array: the page faults are shared among the host threads too)
DRAIN_COPY_BYTES = 1 << 20
#: the type staged ids take on their way up (the staging copy narrows them)
STAGED_IDS = np.int32


def copy_up(dev, host, stream):
    """Asynchronous copy host → device (kind 1) in ``stream`` (truly asynchronous from pinned memory)."""
    from cupy.cuda import runtime

    runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, 1, stream.ptr)


def copy_down(host, dev, stream):
    """Copy device → host (kind 2) in ``stream``; asynchronous only into pinned memory."""
    from cupy.cuda import runtime

    runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes, 2, stream.ptr)


def _page_locked(a: np.ndarray) -> bool:
    """Whether ``a``'s memory is page-locked host memory CUDA knows (``cupyx.empty_pinned``, a
    registered range): a copy from it needs no staging."""
    from cupy.cuda import runtime

    try:
        return int(runtime.pointerGetAttributes(a.ctypes.data).type) == getattr(runtime, "memoryTypeHost", 1)
    except Exception:  # pageable memory that the runtime does not know: an error on some versions
        return False


def _event(stream):
    """An event recorded now in ``stream`` (no timing, polled or waited on by the host)."""
    import cupy as cp

    ev = cp.cuda.Event(block=False, disable_timing=True)
    ev.record(stream)
    return ev


def _split_columns(ds, dt, rows, stream):
    """The two columns of the device ``rows`` into ``ds`` and ``dt``, queued in ``stream``."""
    with stream:
        ds[...] = rows[:, 0]
        dt[...] = rows[:, 1]


def pin_staging(rows: bool = True, answer_slots: bool = True) -> None:
    """Page-lock now the pinned slots a large batch streams through (:class:`Stager`'s ring, for
    ``rows`` of one (k, 2) array or for two columns, and, with ``answer_slots``, the two answer
    slots: not needed when the answers come down into a page-locked array, :func:`pinned_answers`)
    and give them back to CuPy's pinned pool, where :func:`stream_chunks` then finds them: called
    on a thread beside the read of the pairs, the page-locking of a process's first batch is
    hidden behind the read. Runs on the current device; needs CuPy."""
    import cupyx

    size, slots = max(1, int(STAGE_PAIRS)), max(2, int(STAGE_SLOTS))
    held = ([cupyx.empty_pinned((size, 2), STAGED_IDS) for _ in range(slots)] if rows
            else [cupyx.empty_pinned(size, STAGED_IDS) for _ in range(2 * slots)])
    if answer_slots:
        held += [cupyx.empty_pinned(int(CHUNK_PAIRS), np.uint8) for _ in range(2)]
    del held  # (back to the pool)


def pinned_answers(n: int):
    """``(answers, release)``: a host bool array for the ``n`` answers of one batch, its pages
    mapped over the host threads and then page-locked (``cudaHostRegister``), and the function
    that unlocks them (raising nothing), to be called once the answers are used and before the
    array goes (freed while locked, its pages could come back as another array that still looks
    page-locked to :func:`stream_chunks`). A batch answered into it
    (``answer_batch_cuda(out=...)``) has its answers copied down into it directly, with no pinned
    answer slots and no host copy out of them. Mapping and locking take about a third of the time
    of a fresh pinned allocation (``cupyx.empty_pinned``; docs/benchmarks.md, session 29). Runs on
    the current device; needs CuPy; raises when the pages cannot be locked."""
    import cupy

    from ..gpu.dma import lock_pages

    out = np.empty(max(0, int(n)), np.bool_)
    if out.size == 0:
        return out, (lambda: None)
    populate(out)
    unlock = lock_pages(cupy, out)

    def release():
        try:
            unlock()
        except Exception:  # noqa: BLE001 - (a device in a failed state) not to hide the error that led here
            pass

    return out, release


def pin_staging_quietly(be, rows: bool, answers: int = 0):
    """:func:`pin_staging` on ``be``'s device (a GPU; nothing on a CPU), ahead of a batch, and with
    ``answers`` > 0 a page-locked array for that many answers (:func:`pinned_answers`; the answer
    slots are then not pinned). Returns ``(answers array, release)`` or None. A failure is left to
    the batch, which pins again and raises it where it belongs."""
    if be.name != "gpu":
        return None
    locked = None
    try:
        with be.on_device():
            pin_staging(rows=rows, answer_slots=answers <= 0)
            if answers > 0:
                locked = pinned_answers(answers)
    except Exception:  # noqa: BLE001 - the batch pins again and raises it
        if locked is not None:
            locked[1]()
        return None
    return locked


def pin_staging_beside(be, rows: bool, answers: int = 0):
    """:func:`pin_staging_quietly` on a thread of its own (beside a read); the wait for it, which
    returns what that returned."""
    got = []
    th = threading.Thread(target=lambda: got.append(pin_staging_quietly(be, rows, answers)), name="distgrail-pin",
                          daemon=True)
    th.start()

    def wait():
        th.join()
        return got[0] if got else None

    return wait


def _direct(sources, targets) -> bool:
    """Whether the pairs go up as they are: contiguous page-locked arrays of one id type."""
    return (sources.dtype == targets.dtype and sources.dtype in (np.dtype(np.int32), np.dtype(np.int64))
            and all(a.flags.c_contiguous and _page_locked(a) for a in (sources, targets)))


def stream_chunks(scratch, sources, targets, out, chunk, stream, budget) -> int:
    """Answer the host pairs ``sources``/``targets`` into ``out`` chunk by chunk (module doc):
    chunk i + 1 is staged and uploaded while the kernels answer chunk i and the answers of chunk
    i - 1 come down. ``scratch``: a :class:`~distgrail.query.answer.QueryScratch`; ``stream``: the
    kernels' stream. Every stream is synchronised before this returns or raises (no copy still
    runs from or into a pinned slot given back). Returns the number of queries handed to the
    grid-wide search."""
    import cupyx

    nq = int(sources.size)
    sets = scratch.buffers(chunk)
    up, down = scratch.side_streams()
    direct = _direct(sources, targets)
    ids = sources.dtype if direct else np.dtype(STAGED_IDS)
    stager = None if direct else Stager(sources, targets, chunk, up)
    straight = _page_locked(out)  # the answers come down into the caller's array itself
    answer_slots = None if straight else [cupyx.empty_pinned(max(chunk, int(CHUNK_PAIRS)), np.uint8) for _ in range(2)]
    computed = [None, None]  # per buffer set: its kernels are done (the set may be refilled)
    pending = [None, None]  # per answer slot: (event of its download, a, b)

    def span(i):
        a = i * chunk
        return a, min(nq, a + chunk)

    def views(i):
        a, b = span(i)
        ds, dt, answers = sets[i & 1]
        return ds.view(ids)[:b - a], dt.view(ids)[:b - a], answers[:b - a]

    def upload(i):
        a, b = span(i)
        ds, dt, _ = views(i)
        if computed[i & 1] is not None:
            up.wait_event(computed[i & 1])
        if direct:
            copy_up(ds, sources[a:b], up)
            copy_up(dt, targets[a:b], up)
        else:
            stager.upload(a, b, ds, dt)
        return _event(up)

    def drain(k):
        ev, a, b = pending[k]
        if not straight:  # (straight: the kernels that reuse the buffer wait for the download's event)
            ev.synchronize()
            copy_parallel(out[a:b], answer_slots[k][:b - a].view(bool), DRAIN_COPY_BYTES)
        pending[k] = None

    chunks = -(-nq // chunk)
    handed = 0
    faulted = (lambda: None) if straight else prefault_beside(out)  # answers land in mapped pages
    try:
        # the side streams start after what the caller queued before: memory this batch took from
        # CuPy's pool (its stream-ordered reuse) and page-locked pairs that work still fills
        up.wait_event(_event(stream))
        ready = upload(0)
        for i in range(chunks):
            a, b = span(i)
            k = i & 1
            ds, dt, answers = views(i)
            stream.wait_event(ready)
            if pending[k] is not None:  # this set's answer buffer is being copied down
                stream.wait_event(pending[k][0])
            scratch.queue_steps(ds, dt, answers, b - a, stream, budget)
            if i + 1 < chunks:  # the next chunk staged and queued up while the kernels run
                ready = upload(i + 1)
            handed += scratch.finish_steps(answers, stream, budget)
            computed[k] = _event(stream)
            if pending[k] is not None:  # the answers of chunk i - 2 leave this slot first
                drain(k)
            down.wait_event(computed[k])
            copy_down(out[a:b].view(np.uint8) if straight else answer_slots[k][:b - a], answers, down)
            pending[k] = (_event(down), a, b)
        for k in (0, 1):
            if pending[k] is not None:
                drain(k)
    finally:
        failed = None
        for s in (up, stream, down):  # each one, even after a failure of another
            try:
                s.synchronize()
            except BaseException as e:  # noqa: BLE001 - raised once all are synchronised
                failed = failed or e
        faulted()
        if failed is not None:
            raise failed
    return handed


class Stager:
    """Host pairs on their way to the GPU through a ring of :data:`STAGE_SLOTS` small pinned
    slots of :data:`STAGE_PAIRS` pairs: the host threads fill one slot (in pieces of
    :data:`STAGE_COPY_BYTES`, from any strides, narrowing the ids to :data:`STAGED_IDS`) while the
    copy engine uploads another; the two columns of one (k, 2) array go up as its rows, one
    contiguous copy, and are split on the GPU. Small slots because page-locking host memory is the
    dearest part of a one-off batch: the ring's size does not grow with the chunk. A piece never
    spans two chunks (chunks start at multiples of ``chunk``); pieces are staged and uploaded in
    order. ``pinned``, ``h2d``, ``event``, ``device`` and ``split`` are CuPy's unless given (a
    test's host stand-ins)."""

    def __init__(self, sources, targets, chunk: int, stream, pinned=None, h2d=None, event=None, device=None,
                 split=None):
        if pinned is None:
            import cupy as cp
            import cupyx

            pinned, device = cupyx.empty_pinned, cp.empty
        self.h2d, self.event, self.split = h2d or copy_up, event or _event, split or _split_columns
        self.s, self.t, self.nq, self.chunk, self.stream = sources, targets, int(sources.size), int(chunk), stream
        # slots of one size whatever the batch (CuPy's pinned pool reuses a block of the same
        # size: a server's batches of many sizes page-lock no new ones); pieces of at most half
        # a chunk, so that a batch of one chunk still overlaps its copies with its uploads
        size = max(1, int(STAGE_PAIRS))
        self.piece = max(1, min(size, -(-self.chunk // 2)))
        self.rows = interleaved_rows(sources, targets)  # the columns of one (k, 2) array: copied up as rows
        if self.rows is not None:
            self.slots = [(pinned((size, 2), STAGED_IDS), None) for _ in range(max(2, int(STAGE_SLOTS)))]
            self.device_rows = device((self.piece, 2), STAGED_IDS)  # split into the two columns on the GPU
        else:
            self.slots = [(pinned(size, STAGED_IDS), pinned(size, STAGED_IDS)) for _ in range(max(2, int(STAGE_SLOTS)))]
        self.uploaded = [None] * len(self.slots)  # event after a slot's last upload: then it may be refilled
        self.staged = []  # (slot, lo, hi) filled and not yet uploaded, in order
        self.next = 0  # the first pair not yet staged
        self.slot = 0  # the slot the next piece goes into

    def _stage(self, wait: bool) -> bool:
        """Fill the next slot with the next piece; False when all is staged, or when the slot's
        upload is still running and ``wait`` is false."""
        j, ev = self.slot, self.uploaded[self.slot]
        if self.next >= self.nq or (ev is not None and not wait and not ev.done):
            return False
        if ev is not None:
            ev.synchronize()
        lo = self.next
        hi = min(self.nq, lo + self.piece, (lo // self.chunk + 1) * self.chunk)
        if self.rows is not None:  # one contiguous copy of the rows
            copy_parallel(self.slots[j][0][:hi - lo].reshape(-1), self.rows[lo:hi].reshape(-1), STAGE_COPY_BYTES)
        else:
            copy_many_parallel([(self.slots[j][0][:hi - lo], self.s[lo:hi]),
                                (self.slots[j][1][:hi - lo], self.t[lo:hi])], STAGE_COPY_BYTES)
        self.staged.append((j, lo, hi))
        self.next, self.slot = hi, (j + 1) % len(self.slots)
        return True

    def ahead(self) -> None:
        """Stage what fits in the slots already free, without waiting."""
        while len(self.staged) < len(self.slots) and self._stage(wait=False):
            pass

    def upload(self, a: int, b: int, ds, dt) -> None:
        """Pairs ``a..b-1`` (one chunk) into the device buffers ``ds``/``dt``, piece by piece,
        the next piece staged while this one is copied up."""
        done = a
        while done < b:
            if not self.staged:
                self._stage(wait=True)
            j, lo, hi = self.staged.pop(0)
            if lo != done or hi > b:  # pragma: no cover - pieces follow the chunks by construction
                raise AssertionError(f"Stager: piece {lo}..{hi} does not continue chunk {a}..{b} at {done}")
            if self.rows is not None:
                rows = self.device_rows[:hi - lo]
                self.h2d(rows, self.slots[j][0][:hi - lo], self.stream)
                self.uploaded[j] = self.event(self.stream)
                self.split(ds[lo - a:hi - a], dt[lo - a:hi - a], rows, self.stream)
            else:
                self.h2d(ds[lo - a:hi - a], self.slots[j][0][:hi - lo], self.stream)
                self.h2d(dt[lo - a:hi - a], self.slots[j][1][:hi - lo], self.stream)
                self.uploaded[j] = self.event(self.stream)
            done = hi
            if done < b and len(self.staged) < len(self.slots) - 1:
                self._stage(wait=True)  # the next piece on the host while this one goes up
        self.ahead()  # what fits of the next chunk, while the kernels answer this one
