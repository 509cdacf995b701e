"""CUDA kernels of the ``errbound`` codec: a warp codes a group, one kernel each way.

The stream is the CPU codec's byte for byte (``errbound_cpu.py``,
``docs/format.md``, section errbound): header (the step), one code byte a
block, one uint16 size a group, then each group's payload. A group is 8
blocks of 32 values, so a warp codes a group with lane ``i`` on value ``i``
of each block, through the warp primitives of ``warp.py``:

* :func:`encode` quantizes and checks a block's values lane by lane
  (``errbound_block.quantize_checked_value``, the CPU's per-value code),
  prices its codings from warp maxima of the zigzag codes of its values and
  of its residuals (the residuals' history: the group's quantized values,
  kept in shared memory) and a ballot of its non-zeros, and picks the code
  as the CPU does (``choose_code``). The group's size is then known: its
  offset is the sum of the sizes of the groups before it, found on the
  device by a decoupled look-back (each warp publishes its size, then its
  inclusive prefix, and sums its predecessors' published values; warps
  take their group by ticket, in the order they start, so a warp waits only
  on warps that run). Then it writes the payload: a bit plane is one ballot,
  a mask block's codes are gathered to the first lanes through shared
  memory, a raw block's bytes are copied by the warp, every write a run of
  consecutive bytes. The last group writes the stream's length into
  ``work``, which the codec reads (its one synchronization).
* :func:`decode` reads the group's sizes to find its offset by the same
  look-back, checks its code bytes and that its blocks stay in its bytes,
  stages each block's payload in shared memory, and rebuilds the values: a
  lane assembles its code from the planes, residuals become values by warp
  prefix sums (order ``k``: ``k`` sums, each from the history's
  differences), a mask block's codes go back to their lanes by the mask's
  ranks. What the CPU decoder refuses (a bad step, a code byte no encoder
  writes, groups needing more bytes than the stream holds, blocks running
  past their group's bytes) it reports in ``work`` for the codec to raise
  the CPU's error.
* :func:`reconstruct`: one thread per value, the values :func:`decode`
  makes of a stream, made from the encoder's input and the code bytes.

Thread blocks are one warp (a look-back waits on other warps, which the
simulator, running a block's warps as one barrier group, could not let
run). ``work`` is int64, zeroed before a launch (:func:`zero`): see
:data:`WORK_HEAD` for its layout.
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from . import warp
from .errbound_block import (
    BLOCK,
    GROUP,
    RAW,
    _delta_order,
    _dequantized,
    _nearest,
    _quantized,
    _unzigzag,
    _zz,
    choose_code,
    is_mask,
    mask_nbytes,
    needs_higher_orders,
    plane_width,
    popcount32,
    quantize_checked_value,
)
from .errbound_layout import DELTA3, HEADER_NBYTES, WIDEST
from .intbits import imax, imin, is_single

__all__ = ["BAD_STEP", "FLAG", "LENGTH", "PAST", "STEP_BITS", "WORK_HEAD", "decode", "encode",
           "launch_shape", "reconstruct", "work_size", "zero"]

#: ``work[0]``: the next group ticket; ``[1]``: the stream's length (encode) or the bytes
#: its groups need (decode); ``[2]``: a NaN or Inf was found (encode), a code byte no
#: encoder writes (decode); ``[3]``: groups whose blocks run past their bytes (decode);
#: ``[4]``: 1 where the header's step is negative or not finite, ``[5]``: its bits
#: (decode); then each group's size plus one, then each group's inclusive prefix plus one
#: (0: not yet published)
WORK_HEAD = 6
TICKET, LENGTH, FLAG, PAST, BAD_STEP, STEP_BITS = 0, 1, 2, 3, 4, 5
_VALUES = BLOCK * GROUP
_SCRATCH_SHAPE = warp.SCRATCH_SHAPE
#: a group's payload, at most: 8 raw blocks of float64
_MAX_GROUP_BYTES = GROUP * BLOCK * 8


def work_size(ngroups: int) -> int:
    """Length of a launch's ``work`` array."""
    return WORK_HEAD + 2 * ngroups


def launch_shape(ngroups: int) -> tuple[int, int]:
    """(blocks, threads): a warp per group."""
    return max(1, ngroups), warp.WARP


@cuda.jit
def zero(work):
    """``work[:] = 0``."""
    i = cuda.grid(1)
    if i < work.size:
        work[i] = 0


@cuda.jit(device=True)
def _start(values, work, scratch):
    """The layout of the stream of ``values`` (their count, whether float32, bytes of one,
    blocks, groups, bytes before the first group's payload) and this warp's group: tickets
    in the order warps start."""
    n = values.size
    single = is_single(values)
    nblocks = (n + BLOCK - 1) // BLOCK
    ngroups = (nblocks + GROUP - 1) // GROUP
    t = np.int64(0)
    if warp.lane_id() == 0:
        t = cuda.atomic.add(work, TICKET, 1)
    return (n, single, 4 if single else 8, nblocks, ngroups,
            HEADER_NBYTES + nblocks + 2 * ngroups, warp.shfl(t, 0, scratch))


@cuda.jit(device=True)
def _offset(work, g, ngroups, size, scratch):
    """The bytes of the groups before group ``g`` (``size``: its own), by decoupled
    look-back; every lane gets it."""
    before = np.int64(0)
    if warp.lane_id() == 0:
        if g == 0:
            cuda.atomic.add(work, WORK_HEAD + ngroups, size + 1)
        else:
            cuda.atomic.add(work, WORK_HEAD + g, size + 1)
            j = g - 1
            while j >= 0:
                inclusive = cuda.atomic.add(work, WORK_HEAD + ngroups + j, 0)
                if inclusive != 0:
                    before += inclusive - 1
                    break
                aggregate = cuda.atomic.add(work, WORK_HEAD + j, 0)
                if aggregate != 0:
                    before += aggregate - 1
                    j -= 1
            cuda.atomic.add(work, WORK_HEAD + ngroups + g, before + size + 1)
    return warp.shfl(before, 0, scratch)


@cuda.jit(device=True)
def _history(q, at, k):
    """The group's quantized value ``k`` places before its value ``at`` (0 before its
    start)."""
    return q[at - k] if at >= k else np.int64(0)


@cuda.jit(device=True)
def _residual(q, at, order):
    """Value ``at``'s residual of ``order`` (0: the value itself) from the group's values."""
    v = q[at]
    if order == 1:
        return v - _history(q, at, 1)
    if order == 2:
        return v - 2 * _history(q, at, 1) + _history(q, at, 2)
    if order == 3:
        return v - 3 * _history(q, at, 1) + 3 * _history(q, at, 2) - _history(q, at, 3)
    return v


@cuda.jit(device=True)
def _widest(z, scratch):
    return warp.max_over(z, 32, scratch)


@cuda.jit(device=True)
def _put_planes(codes, w, words, scratch):
    """The ``w`` plane words of this lane's code (bit ``w - 1 - j`` in plane ``j``) into
    ``words[0:w]``."""
    for j in range(w):
        word = warp.ballot(((codes >> np.int64(w - 1 - j)) & np.int64(1)) != 0, scratch)
        if warp.lane_id() == 0:
            words[j] = word
    warp.sync()


@cuda.jit
def encode(x, xb, inv_step, step, bound, out, work):
    """``x`` (its bytes ``xb``) -> the codec's stream in ``out``; see the module's doc."""
    scratch = cuda.shared.array(_SCRATCH_SHAPE, np.int64)[0]
    q = cuda.shared.array(_VALUES, np.int64)  # the group's quantized values
    words = cuda.shared.array(BLOCK, np.uint32)  # a block's plane words
    codes = cuda.shared.array(GROUP, np.int64)  # the group's code bytes
    gather = cuda.shared.array(BLOCK, np.int64)  # a mask block's codes
    stage = cuda.shared.array(_MAX_GROUP_BYTES, np.uint8)  # the group's payload
    lane = warp.lane_id()
    n, single, itemsize, nblocks, ngroups, head, g = _start(x, work, scratch)
    if g >= ngroups:
        return
    if g == 0 and lane < HEADER_NBYTES:
        out[lane] = np.uint8((np.float64(step).view(np.uint64) >> np.uint64(8 * lane)) & 0xFF)
    first = g * GROUP
    last = imin(first + GROUP, nblocks)
    # the codes and the group's size
    size = np.int64(0)
    for b in range(last - first):
        start = (first + b) * BLOCK
        count = imin(BLOCK, n - start)
        at = b * BLOCK + lane
        qi = np.int64(0)
        fails = False
        if lane < count:
            qi, fails = quantize_checked_value(np.float64(x[start + lane]), inv_step, step, bound,
                                               single)
        q[at] = qi
        warp.sync()
        raw_bits = count * 8 * itemsize
        code = np.int64(0)
        bits = np.int64(0)
        if warp.ballot(fails, scratch) != 0:
            v = np.float64(x[start + lane]) if lane < count else 0.0
            if warp.ballot(v - v != 0.0, scratch) != 0:  # NaN or Inf: the buffer is refused
                if lane == 0:
                    cuda.atomic.max(work, FLAG, 1)
            else:
                code = np.int64(RAW)
                bits = raw_bits
        else:
            live = lane < count
            z = _zz(qi) if live else np.int64(0)
            widest = _widest(z, scratch)
            nonzero = popcount32(np.uint64(warp.ballot(z != 0, scratch)))
            widest1 = _widest(_zz(_residual(q, at, 1)) if live else np.int64(0), scratch)
            widest2 = np.int64(0)
            widest3 = np.int64(0)
            if needs_higher_orders(widest, widest1):
                widest2 = _widest(_zz(_residual(q, at, 2)) if live else np.int64(0), scratch)
                widest3 = _widest(_zz(_residual(q, at, 3)) if live else np.int64(0), scratch)
            code, bits = choose_code(count, raw_bits, widest, nonzero, widest1, widest2, widest3)
        if lane == 0:
            codes[b] = code
        size += bits >> 3
    warp.sync()
    if lane < last - first:
        out[HEADER_NBYTES + first + lane] = np.uint8(codes[lane])
    if lane < 2:
        out[HEADER_NBYTES + nblocks + 2 * g + lane] = np.uint8((size >> (8 * lane)) & 0xFF)
    base = head + _offset(work, g, ngroups, size, scratch)
    if g == ngroups - 1 and lane == 0:
        work[LENGTH] = base + size
    # the payload, staged in shared memory, then written as one run
    p = 0
    for b in range(last - first):
        start = (first + b) * BLOCK
        count = imin(BLOCK, n - start)
        at = b * BLOCK + lane
        live = lane < count
        code = codes[b]
        if code == RAW:
            for k in range(lane, count * itemsize, 32):
                stage[p + k] = xb[start * itemsize + k]
            p += count * itemsize
        elif code != 0 and is_mask(code):
            w = plane_width(code)
            z = _zz(q[at]) if live else np.int64(0)
            mask = warp.ballot(z != 0, scratch)
            nonzero = popcount32(np.uint64(mask))
            rank = popcount32(np.uint64(mask) & ((np.uint64(1) << np.uint64(lane)) - np.uint64(1)))
            if z != 0:
                gather[rank] = z - 1  # the non-zeros' codes, to the first lanes
            warp.sync()
            _put_planes(gather[lane] if lane < nonzero else np.int64(0), w, words, scratch)
            nbytes = mask_nbytes(nonzero, w)
            for k in range(lane, 4 + nbytes, 32):
                if k < 4:
                    stage[p + k] = np.uint8((mask >> np.uint32(8 * k)) & np.uint32(0xFF))
                else:
                    byte = np.int64(0)
                    for t in range(8):
                        bit = 8 * (k - 4) + t
                        if bit < w * nonzero:
                            j = bit // nonzero
                            byte |= np.int64((words[j] >> np.uint32(bit - j * nonzero)) & 1) << t
                    stage[p + k] = np.uint8(byte)
            p += 4 + nbytes
            warp.sync()
        elif code != 0:
            w = plane_width(code)
            z = _zz(_residual(q, at, _delta_order(code))) if live else np.int64(0)
            _put_planes(z, w, words, scratch)
            for k in range(lane, 4 * w, 32):
                stage[p + k] = np.uint8((words[k >> 2] >> np.uint32(8 * (k & 3))) & np.uint32(0xFF))
            p += 4 * w
            warp.sync()
    warp.sync()
    if size > 0:
        for k in range(_sector_first(base), size, 32):
            k = imax(k, 0)  # (the lanes before the first sector write its first byte again)
            out[base + k] = stage[k]


@cuda.jit(device=True)
def _sector_first(at):
    """This lane's first byte of a run at offset ``at`` of an array, copied by the warp in
    steps of 32 bytes aligned on the array's 32-byte sectors (an allocation starts on one),
    each step touching one sector: ``k`` from ``lane - at % 32`` by 32, where the lanes
    before the run's first byte take that byte (a run's first step writes it, or reads
    it, more than once: the same value) so that every lane takes every step."""
    return warp.lane_id() - (at & 31)


@cuda.jit(device=True)
def _plane_code(staged, p, w, lane):
    """This lane's code from ``w`` plane words staged as bytes at ``staged[p:]`` (the most
    significant first)."""
    z = np.uint64(0)
    byte = p + (lane >> 3)
    bit = np.uint8(lane & 7)
    for j in range(w):
        z = (z << np.uint64(1)) | np.uint64((staged[byte + 4 * j] >> bit) & np.uint8(1))
    return z


@cuda.jit(device=True)
def _undo(r, h1, h2, h3, order, scratch):
    """The values whose residuals of ``order`` are ``r`` (lane ``i``: value ``i``), given the
    three values before the block (``h1`` the last): one warp prefix sum per order."""
    if order == 0:
        return r
    if order == 3:
        r = (h1 - 2 * h2 + h3) + warp.scan_add(r, scratch)  # second differences
    if order >= 2:
        r = (h1 - h2) + warp.scan_add(r, scratch)  # first differences
    return h1 + warp.scan_add(r, scratch)


@cuda.jit(device=True)
def _header_step(buf):
    """(the step in a stream's header, its bits)."""
    bits = np.uint64(0)
    for t in range(HEADER_NBYTES):
        bits |= np.uint64(buf[t]) << np.uint64(8 * t)
    return bits.view(np.float64), bits


@cuda.jit(device=True)
def _inverse(step):
    """``1 / step``, 0 for a step of 0 (as the codec computes it on the host)."""
    return 1.0 / float(step) if step > 0.0 else 0.0


@cuda.jit
def decode(buf, out, outb, work):
    """The codec's stream ``buf`` -> ``out`` (its bytes ``outb``); see the module's doc."""
    scratch = cuda.shared.array(_SCRATCH_SHAPE, np.int64)[0]
    staged = cuda.shared.array(_MAX_GROUP_BYTES, np.uint8)  # the group's payload
    gather = cuda.shared.array(BLOCK, np.int64)  # a mask block's codes
    lane = warp.lane_id()
    n, single, itemsize, nblocks, ngroups, head, g = _start(out, work, scratch)
    if g >= ngroups:
        return
    step, bits = _header_step(buf)
    if not (step >= 0.0 and step - step == 0.0):  # negative, NaN or Inf: refused
        if g == 0 and lane == 0:
            work[BAD_STEP] = 1
            work[STEP_BITS] = np.int64(bits)
        return
    inv_step = _inverse(step)
    first = g * GROUP
    last = imin(first + GROUP, nblocks)
    at = HEADER_NBYTES + nblocks + 2 * g
    size = np.int64(buf[at]) | (np.int64(buf[at + 1]) << 8)
    code = np.int64(buf[HEADER_NBYTES + first + lane]) if lane < last - first else np.int64(0)
    bad_code = warp.ballot(code > DELTA3 + WIDEST and code != RAW, scratch) != 0
    if bad_code and lane == 0:
        cuda.atomic.max(work, FLAG, 1)
    base = head + _offset(work, g, ngroups, size, scratch)
    if g == ngroups - 1 and lane == 0:
        work[LENGTH] = base + size
    if bad_code or base + size > buf.size:  # refused by the codec: nothing to read here
        return
    # the group's payload in shared memory (its blocks never need more than a group of raw
    # float64 values: a larger size leaves bytes unread)
    if size > 0:
        for k in range(_sector_first(base), imin(size, _MAX_GROUP_BYTES), 32):
            k = imax(k, 0)  # (the lanes before the first sector read its first byte again)
            staged[k] = buf[base + k]
    warp.sync()
    p = 0  # the next block's payload, from the group's first byte
    stop = size
    h1 = np.int64(0)  # the last three values before a block, in its group
    h2 = np.int64(0)
    h3 = np.int64(0)
    past = False
    for b in range(last - first):
        start = (first + b) * BLOCK
        count = imin(BLOCK, n - start)
        live = lane < count
        code = np.int64(buf[HEADER_NBYTES + first + b])
        v = np.int64(0)
        if code == RAW:
            nbytes = count * itemsize
            if p + nbytes > stop:
                past = True
                break
            for k in range(lane, nbytes, 32):
                outb[start * itemsize + k] = staged[p + k]
            if live:
                bits = np.uint64(0)
                for t in range(itemsize):
                    bits |= np.uint64(staged[p + lane * itemsize + t]) << np.uint64(8 * t)
                value = np.float64(np.uint32(bits).view(np.float32)) if single else \
                    bits.view(np.float64)
                v = _quantized(value, inv_step)
            p += nbytes
        elif code != 0 and is_mask(code):
            w = plane_width(code)
            if p + 4 > stop:
                past = True
                break
            mask = (np.uint64(staged[p]) | (np.uint64(staged[p + 1]) << np.uint64(8))
                    | (np.uint64(staged[p + 2]) << np.uint64(16))
                    | (np.uint64(staged[p + 3]) << np.uint64(24)))
            nonzero = popcount32(mask)
            nbytes = mask_nbytes(nonzero, w)
            if (mask >> np.uint64(count)) != np.uint64(0) or p + 4 + nbytes > stop:
                past = True
                break
            c = np.int64(0)
            if lane < nonzero:
                for j in range(w):
                    bit = 8 * (p + 4) + j * nonzero + lane
                    c = (c << 1) | np.int64((staged[bit >> 3] >> np.uint8(bit & 7)) & np.uint8(1))
            gather[lane] = c
            warp.sync()
            if live and (mask >> np.uint64(lane)) & np.uint64(1):
                rank = popcount32(mask & ((np.uint64(1) << np.uint64(lane)) - np.uint64(1)))
                v = _unzigzag(np.uint64(gather[rank] + 1))
            p += 4 + nbytes
        elif code != 0:
            w = plane_width(code)
            if p + 4 * w > stop:
                past = True
                break
            v = _undo(_unzigzag(_plane_code(staged, p, w, lane)), h1, h2, h3,
                      _delta_order(code), scratch)
            p += 4 * w
        if live and code != RAW:
            out[start + lane] = _dequantized(v, step)
        # the next block's history: this block's last three values (a full block's)
        h3 = warp.shfl(v, 29, scratch)
        h2 = warp.shfl(v, 30, scratch)
        h1 = warp.shfl(v, 31, scratch)
        warp.sync()  # (gather is read before the next mask block writes it)
    if past and lane == 0:
        cuda.atomic.add(work, PAST, 1)


@cuda.jit
def reconstruct(x, buf, out):
    """Value ``i`` of ``out``: what :func:`decode` makes of value ``i`` of ``x`` from ``buf``,
    the stream of ``x`` (its step and the code byte of block ``i // 32``; ``out`` may be
    ``x``: a thread reads its value before it writes it)."""
    i = cuda.grid(1)
    if i < x.size:
        step, _ = _header_step(buf)
        inv_step = _inverse(step)
        code = np.int64(buf[HEADER_NBYTES + i // BLOCK])
        if code == RAW:
            out[i] = x[i]
        elif code == 0:
            out[i] = 0.0
        else:
            out[i] = _dequantized(_nearest(np.float64(x[i]), inv_step), step)
