"""Numba CPU drivers of the ``errbound`` codec: groups of blocks in parallel, the per-block
code of ``errbound_block.py``.

Encoding takes two passes: :func:`codes` finds each block's code byte and
writes each group's byte size into the stream, the caller turns the sizes
into group offsets (a prefix sum over one uint16 per 256 values), and
:func:`pack` writes every group at its offset, its planes with the vector
operations of ``errbound_vector.py``. :func:`unpack` decodes groups in
parallel from those offsets (vector planes too); :func:`reconstruct` makes the same values
from the encoder's input and the code bytes (the owner of a stream in a
collective).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..threads import start_numba_workers
from .errbound_block import BLOCK, GROUP, NONFINITE, SCRATCH, block_code, reconstruct_block
from .errbound_vector import WORDS, pack_group_vec32, unpack_group_vec32

start_numba_workers()  # before any kernel here runs: idle OpenMP workers sleep

__all__ = ["codes", "pack", "reconstruct", "unpack"]


#: groups per parallel iteration (each iteration's scratch row is reused for them)
_CHUNK = 16


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
    nchunks = (ngroups + _CHUNK - 1) // _CHUNK
    scratch = np.empty((nchunks, SCRATCH), np.int64)
    planes = np.empty((nchunks, WORDS), np.uint8)
    for c in prange(nchunks):
        q = scratch[c]
        words = planes[c]
        for g in range(c * _CHUNK, min(c * _CHUNK + _CHUNK, ngroups)):
            pack_group_vec32(x, xb, g, inv_step, code, out, offsets[g], offsets[g + 1],
                             itemsize, q, words)


@njit(parallel=True, cache=True, nogil=True)
def unpack(buf, code, offsets, step, inv_step, out, outb, itemsize):
    """Decode every group from ``buf[offsets[g]:offsets[g + 1]]`` into ``out``; returns the
    number of groups whose blocks run past their bytes."""
    ngroups = offsets.size - 1
    nchunks = (ngroups + _CHUNK - 1) // _CHUNK
    scratch = np.empty((nchunks, SCRATCH), np.int64)
    planes = np.empty((nchunks, WORDS), np.uint8)
    bad = 0
    for c in prange(nchunks):
        q = scratch[c]
        words = planes[c]
        for g in range(c * _CHUNK, min(c * _CHUNK + _CHUNK, ngroups)):
            if not unpack_group_vec32(buf, offsets[g], offsets[g + 1], g, code, step, inv_step,
                                      out, outb, itemsize, q, words):
                bad += 1
    return bad


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
