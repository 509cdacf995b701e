"""Numba CPU drivers of the ``errbound`` codec: groups of blocks in parallel, the per-block
code of ``errbound_block.py``.

:func:`encode` makes a whole stream (but its header) in one call: each
block's code byte, each group's byte size, and the groups' bytes, those of
each parallel iteration one after the other from where its values' raw
bytes would lie (no group is larger than its raw bytes); then the group
offsets (:func:`group_offsets`, a prefix sum over one uint16 per 256
values) and each iteration's run of groups moved to its offset
(:func:`compact`, a ``memmove`` each). :func:`decode` checks a stream's
code bytes and length (:func:`read_groups`) and decodes its groups in
parallel (:func:`unpack`). One call each, because a collective's pipeline
codes pieces of 32K values, where the Python steps around two or three
calls once took about a third of each call's time. :func:`codes` and
:func:`pack` are the same encode in two passes (code bytes and sizes, then
the groups at their offsets: the CUDA kernels' steps, and the tests' check
of :func:`encode`'s bytes); :func:`reconstruct` makes a decode's values
from the encoder's input and the code bytes (the owner of a stream in a
collective). The planes are made and read with the vector operations of
``errbound_vector.py``.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .errbound_block import BLOCK, GROUP, NONFINITE, SCRATCH, block_code, reconstruct_block
from .errbound_layout import BAD_CODE, PAST_BYTES, TOO_LONG
from .errbound_vector import (
    WORDS,
    code_group_vec32,
    move_bytes,
    pack_group_vec32,
    unpack_group_vec32,
)

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["codes", "compact", "decode", "encode", "group_offsets", "pack", "read_groups",
           "reconstruct", "unpack"]


#: groups per parallel iteration (each iteration's scratch row is reused for them)
_CHUNK = 16


@njit(inline="always")
def _scratch_rows(ngroups):
    """``(parallel iterations, their int64 scratch rows, their plane-word rows)`` of a pass
    over ``ngroups`` groups."""
    nchunks = (ngroups + _CHUNK - 1) // _CHUNK
    return (nchunks, np.empty((nchunks, SCRATCH), np.int64),
            np.empty((nchunks, WORDS), np.uint8))


@njit(parallel=True, cache=True, nogil=True)
def codes(x, inv_step, step, bound, single, out, sizes):
    """Each block's code byte into ``out``, each group's byte size into ``sizes`` (two
    little-endian bytes a group); returns the number of blocks holding NaN/Inf."""
    n = x.size
    nblocks = out.size
    ngroups = sizes.size // 2
    nchunks = (ngroups + _CHUNK - 1) // _CHUNK
    scratch = np.empty((nchunks, SCRATCH), np.int64)
    bad = 0
    for c in prange(nchunks):
        q = scratch[c]
        for g in range(c * _CHUNK, min(c * _CHUNK + _CHUNK, ngroups)):
            bits = 0
            for b in range(g * GROUP, min(g * GROUP + GROUP, nblocks)):
                start = b * BLOCK
                code, nbits = block_code(x, start, min(start + BLOCK, n), inv_step, step,
                                         bound, single, q)
                if code == NONFINITE:
                    bad += 1
                    code = 0
                    nbits = 0
                out[b] = np.uint8(code)
                bits += nbits
            nbytes = (bits + 7) // 8
            sizes[2 * g] = np.uint8(nbytes & 0xFF)
            sizes[2 * g + 1] = np.uint8(nbytes >> 8)
    return bad


@njit(parallel=True, cache=True, nogil=True)
def pack(x, xb, inv_step, code, offsets, out, itemsize):
    """Every group's payload at ``out[offsets[g]:]``."""
    ngroups = offsets.size - 1
    nchunks, scratch, planes = _scratch_rows(ngroups)
    for c in prange(nchunks):
        q = scratch[c]
        words = planes[c]
        for g in range(c * _CHUNK, min(c * _CHUNK + _CHUNK, ngroups)):
            pack_group_vec32(x, xb, g, inv_step, code, out, offsets[g], offsets[g + 1],
                             itemsize, q, words)


@njit(parallel=True, cache=True, nogil=True)
def encode(x, xb, inv_step, step, bound, single, itemsize, code, sizes, out, head):
    """The stream of ``x`` after its header at ``out[head:]`` in one pass: each block's code
    byte into ``code``, each group's byte size into ``sizes``, and each parallel
    iteration's groups one after the other from where its values' raw bytes would lie
    (``out[head + first value * itemsize:]``: no group is larger than its raw bytes, so no
    iteration reaches the next one's), then moved to their offsets (:func:`compact`).
    Returns ``(blocks holding NaN/Inf, the stream's bytes)``; ``out`` holds at least
    ``head + x.size * itemsize`` bytes."""
    n = x.size
    ngroups = sizes.size // 2
    nchunks, scratch, planes = _scratch_rows(ngroups)
    bad = 0
    for c in prange(nchunks):
        q = scratch[c]
        words = planes[c]
        first = c * _CHUNK
        last = min(first + _CHUNK, ngroups)
        p = np.int64(head) + np.int64(first * GROUP * BLOCK) * np.int64(itemsize)
        stop = np.int64(head) + np.int64(min(last * GROUP * BLOCK, n)) * np.int64(itemsize)
        for g in range(first, last):
            end, blocks = code_group_vec32(x, xb, g, inv_step, step, bound, single, code, out,
                                           p, stop, itemsize, q, words)
            nbytes = end - p
            sizes[2 * g] = np.uint8(nbytes & 0xFF)
            sizes[2 * g + 1] = np.uint8(nbytes >> 8)
            bad += blocks
            p = end
    if bad:
        return bad, np.int64(0)
    offsets = np.empty(ngroups + 1, np.int64)
    group_offsets(sizes, head, offsets)
    compact(out, offsets, itemsize)
    return bad, offsets[ngroups]


@njit(cache=True, nogil=True)
def group_offsets(sizes, head, offsets):
    """``offsets``: each group's offset in the stream (the first ``head``), the stream's
    length last, from the groups' byte sizes (two little-endian bytes each)."""
    at = np.int64(head)
    offsets[0] = at
    for g in range(sizes.size // 2):
        at += np.int64(sizes[2 * g]) | (np.int64(sizes[2 * g + 1]) << np.int64(8))
        offsets[g + 1] = at


@njit(cache=True, nogil=True)
def compact(out, offsets, itemsize):
    """Move the groups :func:`encode` wrote to their offsets: each parallel iteration's run
    of groups, in order (a run moves only towards the stream's start, onto bytes already
    moved or its own: a ``memmove``)."""
    ngroups = offsets.size - 1
    head = offsets[0]
    for first in range(_CHUNK, ngroups, _CHUNK):  # (the first run is in place)
        src = head + np.int64(first * GROUP * BLOCK) * np.int64(itemsize)
        dst = offsets[first]
        if src != dst:
            move_bytes(out, dst, src, offsets[min(first + _CHUNK, ngroups)] - dst)


@njit(parallel=True, cache=True, nogil=True)
def unpack(buf, code, offsets, step, inv_step, out, outb, itemsize):
    """Decode every group from ``buf[offsets[g]:offsets[g + 1]]`` into ``out``; returns the
    number of groups whose blocks run past their bytes."""
    ngroups = offsets.size - 1
    nchunks, scratch, planes = _scratch_rows(ngroups)
    bad = 0
    for c in prange(nchunks):
        q = scratch[c]
        words = planes[c]
        for g in range(c * _CHUNK, min(c * _CHUNK + _CHUNK, ngroups)):
            if not unpack_group_vec32(buf, offsets[g], offsets[g + 1], g, code, step, inv_step,
                                      out, outb, itemsize, q, words):
                bad += 1
    return bad


@njit(cache=True, nogil=True)
def read_groups(code, sizes, head, total, valid, offsets):
    """A stream's group offsets into ``offsets`` (:func:`group_offsets`), checked against
    its ``total`` bytes and ``valid`` (whether each byte value is a code byte an encoder
    writes): ``(0, 0)``, ``(BAD_CODE, the first code byte no encoder writes)`` or
    ``(TOO_LONG, the bytes its groups need)``."""
    for b in range(code.size):
        if not valid[code[b]]:
            return np.int64(BAD_CODE), np.int64(code[b])
    group_offsets(sizes, head, offsets)
    if offsets[offsets.size - 1] > total:
        return np.int64(TOO_LONG), offsets[offsets.size - 1]
    return np.int64(0), np.int64(0)


@njit(cache=True, nogil=True)
def decode(buf, code, sizes, head, valid, step, inv_step, out, outb, itemsize):
    """:func:`read_groups` and :func:`unpack` in one call: ``(0, 0)``, ``read_groups``'s
    complaint, or ``(PAST_BYTES, groups whose blocks run past their bytes)``."""
    offsets = np.empty(sizes.size // 2 + 1, np.int64)
    status, value = read_groups(code, sizes, head, buf.size, valid, offsets)
    if status:
        return status, value
    bad = unpack(buf, code, offsets, step, inv_step, out, outb, itemsize)
    return (np.int64(PAST_BYTES), np.int64(bad)) if bad else (np.int64(0), np.int64(0))


@njit(parallel=True, cache=True, nogil=True)
def reconstruct(x, code, inv_step, step, out):
    """``out``: the values :func:`unpack` decodes of the stream of ``x`` whose code bytes are
    ``code``, made from ``x`` (``out`` may be ``x`` itself)."""
    n = x.size
    nblocks = code.size
    nchunks = (nblocks + _CHUNK * GROUP - 1) // (_CHUNK * GROUP)
    for c in prange(nchunks):
        for b in range(c * _CHUNK * GROUP, min((c + 1) * _CHUNK * GROUP, nblocks)):
            start = b * BLOCK
            reconstruct_block(x, start, min(start + BLOCK, n), np.int64(code[b]), inv_step,
                              step, out)
